//! The one metrics path of the coordinator: the machine's counted outcomes and the end of each
//! checkpoint cycle become metrics and log lines here, labelled by the typed outcomes of
//! `crate::ops::metrics` (docs/metrics.md), the same in both delivery modes.

use crate::ops::metrics::{CheckpointOutcome, Metrics, RecoveryOutcome, TableLabel, TopicLabel};
use kbq_core::protocol::{CommitError, Outcome};

use super::Coordinator;

impl Coordinator {
    /// After each input: a cycle that ended is measured and counted, once.
    pub(super) fn after_event(&mut self) {
        if self.cycle_started.is_none() || self.machine.cycle_in_flight() {
            return;
        }
        let started = self.cycle_started.take().expect("checked");
        let duration = started.elapsed();
        let worked = std::mem::take(&mut self.cycle_worked);
        let outcome = if std::mem::take(&mut self.cycle_abandoned) {
            CheckpointOutcome::Abandoned
        } else if worked {
            CheckpointOutcome::Committed
        } else {
            // Nothing to commit or flush: every checkpoint is current, which is a success for
            // the age gauge and readiness.
            CheckpointOutcome::Empty
        };
        self.metrics.checkpoint_cycle(outcome, duration);
        tracing::debug!(
            outcome = outcome.label(),
            duration_ms = duration.as_millis() as u64,
            partitions = self.writers.len(),
            "checkpoint cycle"
        );
    }

    /// Counts and logs what the machine reports.
    pub(super) fn count(&mut self, outcome: Outcome) {
        let Some(outcome) = count_recovery(&self.metrics, outcome) else {
            return;
        };
        let m = self.metrics.clone();
        match outcome {
            Outcome::CycleAbandoned => {
                // Counted once, when the cycle ends (`after_event`).
                self.cycle_abandoned = true;
                tracing::warn!("checkpoint cycle abandoned");
            }
            Outcome::Visible { tp, through } => {
                let before = self.visible.insert(tp.clone(), through).unwrap_or(through);
                // Records, not rows: dead-lettered records are included (close enough for a
                // throughput metric; the exact row count is in rows_appended).
                m.rows_flushed
                    .get_or_create(&TableLabel {
                        table: self.route(&tp).label().to_string(),
                    })
                    .inc_by(before.distance_to(through));
                tracing::debug!(partition = %tp, through = through.0, "visible");
            }
            Outcome::ZombieStopped { tp } => {
                tracing::error!(partition = %tp, "zombie writer stopped");
                // Without a rebalance nobody would ever tell the zombie what it owns: ask, on
                // every path into the zombie phase (an append or the cycle's FlushRows meeting
                // the finalized stream).
                if self.machine.is_zombie(&tp) {
                    self.confirm_ownership_later(tp, self.settings.zombie_confirm_after);
                }
            }
            Outcome::LabelFailed {
                table,
                attempts,
                error,
            } => {
                if self.unlabelled.insert(table) {
                    m.table_markers_failing.inc();
                }
                self.update_readiness();
                tracing::error!(table = %self.table_name(table), attempts, error = %error, "cannot write the group marker on the table: its rows stay invisible until it lands, retrying");
            }
            Outcome::Labelled { table } => {
                if self.unlabelled.remove(&table) {
                    m.table_markers_failing.dec();
                    self.update_readiness();
                    tracing::info!(table = %self.table_name(table), "group marker written on the table");
                }
            }
            other => log_outcome(other),
        }
    }
}

/// The outcomes that are only logged.
fn log_outcome(outcome: Outcome) {
    match outcome {
        Outcome::CommitFailed { tp, error } => {
            let class = match error {
                CommitError::Partition(_) => "partition",
                CommitError::Request(_) => "request",
            };
            tracing::warn!(partition = %tp, class, error = %error, "kafka commit failed for partition");
        }
        Outcome::FlushRetried { tp } => {
            tracing::warn!(partition = %tp, "flush pending, retried next cycle");
        }
        Outcome::Finalized { tp, stream } => {
            tracing::debug!(partition = %tp, stream = %stream, "superseded stream finalized");
        }
        Outcome::StreamRestarted { tp } => {
            tracing::warn!(partition = %tp, "stream restarted in process");
        }
        Outcome::Paused { tp } => {
            tracing::info!(partition = %tp, "paused: uncommitted tail at its cap");
        }
        Outcome::HandedOff { tp, committed } => {
            tracing::info!(partition = %tp, committed, "partition handed off");
        }
        Outcome::HandoffAbandoned { tp } => {
            tracing::warn!(partition = %tp, "handoff abandoned at its deadline");
        }
        Outcome::ShutdownIncomplete { partitions } => {
            tracing::warn!(
                partitions,
                "shutdown deadline passed before every partition was checkpointed"
            );
        }
        other => tracing::debug!(outcome = ?other, "machine outcome"),
    }
}
/// Counts and logs what recovery did for a partition; hands every other outcome back.
fn count_recovery(m: &Metrics, outcome: Outcome) -> Option<Outcome> {
    let recovery = |outcome| m.recovery_action(outcome);
    match outcome {
        Outcome::Started { tp, case, at } => {
            tracing::info!(partition = %tp, case = ?case, at = at.0, "partition starts");
        }
        Outcome::RecoveryFlushed { tp } => {
            recovery(RecoveryOutcome::Reflushed);
            tracing::info!(partition = %tp, "recovery: committed checkpoint flushed");
        }
        Outcome::RecoveryRetried { tp, attempt } => {
            tracing::warn!(partition = %tp, attempt, "recovery flush failed transiently, retrying");
        }
        Outcome::Anomaly { tp, stream } => {
            recovery(RecoveryOutcome::Anomaly);
            tracing::error!(partition = %tp, stream = %stream, "recovery: flush cursor past the checkpoint; rows after it may be written twice");
        }
        Outcome::RecordsLost { tp, from, to } => {
            m.lost_records
                .get_or_create(&TopicLabel {
                    topic: tp.topic.clone(),
                })
                .inc_by(from.distance_to(to));
            tracing::error!(partition = %tp, from = from.0, to = to.0, "records deleted by retention before they were visible");
        }
        Outcome::Rewound { tp, from, to, .. } => {
            recovery(RecoveryOutcome::Rewound);
            m.rewound_records
                .get_or_create(&TopicLabel {
                    topic: tp.topic.clone(),
                })
                .inc_by(from.distance_to(to));
            tracing::warn!(partition = %tp, from = from.0, to = to.0, "recovery: stream lost, rewinding (at-least-once for this window)");
        }
        Outcome::Resolved { tp, at } => {
            recovery(RecoveryOutcome::Resolved);
            tracing::warn!(partition = %tp, at = at.0, "recovery: stream lost, resolved from the table");
        }
        Outcome::ResolveFailed {
            tp,
            attempts,
            error,
        } => {
            recovery(RecoveryOutcome::ResolveFailed);
            tracing::warn!(partition = %tp, attempts, error = %error, "recovery: the resolve query failed");
        }
        other => return Some(other),
    }
    None
}
