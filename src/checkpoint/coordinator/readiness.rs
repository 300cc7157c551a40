//! Readiness: one rule for both delivery modes (docs/architecture.md, "Readiness"); only the
//! checkpoint-age bound is the mode's, as data (`Machine::readiness_bound`).

use tokio::time::Instant;

use crate::checkpoint::stall::StallChange;
use kbq_core::model::TopicPartition;

use super::Coordinator;

impl Coordinator {
    /// Ready: a member of the group, no partition failed closed, stalled or waiting out a
    /// denied call, every marker written, and — when partitions are assigned — a checkpoint
    /// cycle succeeded within the mode's bound. A joined replica without partitions is ready
    /// (it is idle, not broken).
    pub(super) fn update_readiness(&mut self) {
        self.watch_stalls();
        match self.not_ready_because() {
            Some(reason) => self.health.set_not_ready(reason),
            None => self.health.set_ready(),
        }
    }

    /// Logs the partitions that stalled or move again, and counts the stalled ones.
    fn watch_stalls(&mut self) {
        for change in self.stalls.check(Instant::now().into_std()) {
            match change {
                StallChange::Stalled {
                    tp,
                    acked,
                    high,
                    for_secs,
                } => {
                    tracing::warn!(partition = %tp, acknowledged = acked.map(|a| a.0), high = high.0, stalled_for_s = for_secs, reason = "acknowledged position not advancing while records wait", "partition stalled");
                }
                StallChange::Moving { tp } => {
                    tracing::info!(partition = %tp, "stalled partition moves again");
                }
            }
        }
        let stalled = self.stalled().count();
        self.metrics.partitions_stalled.set(stalled as i64);
    }

    /// Stalled partitions that did not fail closed (those count as failed).
    fn stalled(&self) -> impl Iterator<Item = &TopicPartition> {
        self.stalls
            .stalled()
            .filter(|tp| !self.failed.contains_key(*tp))
    }

    /// The first rule that says "not ready", in the order of docs/architecture.md.
    fn not_ready_because(&self) -> Option<String> {
        if let Some((tp, reason)) = self.failed.iter().next() {
            return Some(format!("partition {tp} failed: {reason}"));
        }
        if let Some(tp) = self.stalled().next() {
            return Some(format!(
                "partition {tp} stalled: no acknowledged progress for {}s while records wait",
                self.settings.stall_after.as_secs()
            ));
        }
        if let Some(table) = self.unlabelled.iter().next() {
            return Some(format!(
                "cannot write the group marker on table {}",
                self.table_name(*table)
            ));
        }
        if self.metrics.group_joined.get() == 0 {
            return Some("not a member of the consumer group yet".into());
        }
        let retrying = self.metrics.partitions_retrying.get();
        if retrying > 0 {
            return Some(format!(
                "{retrying} partitions wait out a permission, credential or precondition error"
            ));
        }
        let bound = self
            .machine
            .readiness_bound()
            .of(self.settings.checkpoint_interval);
        match self.metrics.checkpoint_age_seconds() {
            Some(age)
                if age > bound.as_secs_f64() && self.metrics.partitions_assigned.get() > 0 =>
            {
                Some(format!(
                    "no successful checkpoint for {age:.0}s (bound {}s)",
                    bound.as_secs()
                ))
            }
            _ => None,
        }
    }
}
