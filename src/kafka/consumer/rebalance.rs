//! The rebalance bridge: librdkafka's callbacks, the assignment read at assign time, and the
//! handoff on revoke, served inside the callback (the commit lock, see the module above).

use std::collections::BTreeSet;
use std::sync::{Mutex, mpsc as std_mpsc};
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::kafka::committed::{self, CommittedReads, Watermarks, tpl_of};
use kbq_core::protocol::{Assignment, PartitionOrigin, TopicPartition};

use super::commands::{ConsumerCommand, ConsumerEvent, ConsumerSettings};
use super::{Shared, partitions_of};
use crate::kafka::reconnect::BrokerWatch;

pub(super) struct SinkContext {
    /// Only the consumer thread touches this (in the poll loop or inside a callback it runs);
    /// the mutex is for the `Sync` bound of the context.
    pub(super) shared: Mutex<Shared>,
    pub(super) settings: ConsumerSettings,
    /// Whether the client still has a broker up (see `reconnect`).
    pub(super) brokers: BrokerWatch,
}

impl ClientContext for SinkContext {
    /// Group membership, and whether a broker is up. (The lag gauges come from the
    /// [`WatermarkReader`].)
    fn stats(&self, statistics: rdkafka::Statistics) {
        self.brokers.observe(&statistics, Instant::now());
        let Some(metrics) = &self.settings.metrics else {
            return;
        };
        let joined = statistics.cgrp.as_ref().is_some_and(|g| {
            g.state == "up" && (g.join_state == "steady" || g.assignment_size > 0)
        });
        metrics.group_joined.set(i64::from(joined));
    }
}

impl ConsumerContext for SinkContext {
    /// librdkafka's rebalance, done here rather than by the default handler for one reason: new
    /// partitions are assigned at an explicit position (the committed offset, else the log
    /// start), so that librdkafka never applies `auto.offset.reset` (forced to `error`) and the
    /// partition stays seekable while recovery decides where it really starts.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: rdkafka::types::RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        use rdkafka::consumer::RebalanceProtocol;
        use rdkafka::types::RDKafkaRespErr;
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let (excluded, partitions) = self.split_excluded(partitions_of(tpl));
                let committed = committed::read_committed_each(
                    consumer,
                    &partitions,
                    self.settings.request_timeout,
                    &self.settings.faults,
                );
                for tp in &partitions {
                    // Where librdkafka may fetch from until recovery seeks; an unknown offset
                    // is read again later, and the partition stays paused meanwhile.
                    let start = match committed.get(tp) {
                        Some(Ok(Some(c))) => Offset::Offset(c.offset.0),
                        _ => Offset::Beginning,
                    };
                    if let Some(mut elem) = tpl.find_partition(&tp.topic, tp.partition)
                        && let Err(e) = elem.set_offset(start)
                    {
                        tracing::error!(partition = %tp, error = %e, "cannot set the assigned position");
                    }
                }
                let result = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = result {
                    tracing::error!(error = %e, "assign failed");
                } else if let Some(metrics) = &self.settings.metrics {
                    // The group gave this member its assignment (maybe none): a member from now
                    // on, not from the next statistics report (every `statistics.interval.ms`).
                    metrics.group_joined.set(1);
                }
                if !excluded.is_empty() {
                    // Assigned by the group (the broker matches a pattern itself under
                    // KIP-848), so librdkafka holds them; paused, they are never fetched, and
                    // without an outlet a prefetched record is dropped.
                    for tp in &excluded {
                        tracing::warn!(partition = %tp, "excluded topic assigned: its partition stays paused and is never consumed");
                    }
                    if let Err(e) = consumer.pause(&tpl_of(&excluded)) {
                        tracing::error!(error = %e, "cannot pause the partitions of an excluded topic");
                    }
                }
                if partitions.is_empty() {
                    return;
                }
                let Some(mut shared) = self.live_shared() else {
                    return;
                };
                shared.assigned(consumer, &self.settings, partitions, committed);
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                // The protocol never had the excluded ones: nothing to hand off.
                let (_, partitions) = self.split_excluded(partitions_of(tpl));
                if !partitions.is_empty() {
                    let lost = consumer.assignment_lost();
                    if let Some(mut shared) = self.live_shared() {
                        shared.handoff(consumer, &self.settings, partitions, lost);
                    }
                }
                let result = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = result {
                    tracing::error!(error = %e, "unassign failed");
                }
            }
            other => {
                tracing::error!(error = ?other, "rebalance error");
                // librdkafka requires an unassign on a rebalance error.
                let _ = consumer.unassign();
            }
        }
    }
}

impl SinkContext {
    /// The consumer's state, or `None` once the consumer thread panicked holding it (the
    /// lock is poisoned). The thread is then closing the consumer on its way out and the
    /// coordinator was told it failed: a callback then makes no handoff and no commit. The
    /// state may be half-changed, and nothing it would commit is needed: the next owner
    /// resumes from the last checkpoint, the exactly-once path.
    fn live_shared(&self) -> Option<std::sync::MutexGuard<'_, Shared>> {
        match self.shared.lock() {
            Ok(shared) => Some(shared),
            Err(_) => {
                tracing::error!("the consumer thread failed: rebalance callback makes no handoff");
                None
            }
        }
    }

    /// Splits `partitions` into those of excluded topics and the others. Under a pattern
    /// subscription the internal topics (`__*`) are excluded too: with KIP-848 the broker
    /// matches the pattern, and `topic.blacklist` does not reach its assignment.
    pub(super) fn split_excluded(
        &self,
        partitions: Vec<TopicPartition>,
    ) -> (Vec<TopicPartition>, Vec<TopicPartition>) {
        let pattern = self.settings.topics.iter().any(|t| t.starts_with('^'));
        partitions.into_iter().partition(|tp| {
            self.settings.excluded_topics.contains(&tp.topic)
                || (pattern && crate::config::is_internal_topic(&tp.topic))
        })
    }
}

impl Shared {
    pub(super) fn assigned(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        partitions: Vec<TopicPartition>,
        committed: CommittedReads,
    ) {
        // Nothing may flow before recovery decided where the partition starts.
        let tpl = tpl_of(&partitions);
        if let Err(e) = consumer.pause(&tpl) {
            tracing::error!(error = %e, "cannot pause newly assigned partitions");
        }
        self.flow.assigned_paused(&partitions);
        self.owned.extend(partitions.iter().cloned());
        let watermarks = committed::watermarks(
            consumer,
            &partitions,
            settings.request_timeout,
            &settings.faults,
        );
        let out = partitions
            .into_iter()
            .map(|tp| {
                let result = self.assignment_of(&tp, &committed, &watermarks);
                (tp, result)
            })
            .collect();
        let _ = self.events.send(ConsumerEvent::Assigned(out));
    }

    /// What Kafka holds for `tp` now: its committed offset and its watermarks, or why they could
    /// not be read (never a default: "no offset" or `(0, 0)` would be a wrong recovery).
    pub(super) fn read_assignment(
        &self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        tp: &TopicPartition,
    ) -> Result<Assignment, String> {
        let one = std::slice::from_ref(tp);
        let committed = committed::read_committed_each(
            consumer,
            one,
            settings.request_timeout,
            &settings.faults,
        );
        let watermarks =
            committed::watermarks(consumer, one, settings.request_timeout, &settings.faults);
        self.assignment_of(tp, &committed, &watermarks)
    }

    pub(super) fn assignment_of(
        &self,
        tp: &TopicPartition,
        committed: &CommittedReads,
        watermarks: &Watermarks,
    ) -> Result<Assignment, String> {
        let committed = committed
            .get(tp)
            .cloned()
            .unwrap_or_else(|| Err("no committed offset in the answer".into()))
            .map_err(|e| format!("cannot read the committed offset: {e}"))?;
        let (low, high) = watermarks
            .get(tp)
            .cloned()
            .unwrap_or_else(|| Err("no watermarks in the answer".into()))
            .map_err(|e| format!("cannot read the watermarks: {e}"))?;
        if let Some(c) = &committed {
            self.lag.set(tp, c.offset);
        }
        let origin = match self.initial_partitions.get(&tp.topic) {
            Some(&n) if tp.partition >= n => PartitionOrigin::AddedAtRuntime,
            _ => PartitionOrigin::Existing,
        };
        Ok(Assignment {
            committed,
            low,
            high,
            origin,
        })
    }

    /// Inside the revoke callback: serve commands until every revoked partition is released.
    pub(super) fn handoff(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        partitions: Vec<TopicPartition>,
        lost: bool,
    ) {
        for tp in &partitions {
            // The writer gets its stop from the coordinator; from here on nothing more is
            // dispatched.
            self.flow.revoke(tp);
            self.seeking.remove(tp);
            self.positions.remove(tp);
            self.lag.remove(tp, settings.metrics.as_deref());
        }
        if self.shutdown {
            // Leaving after the coordinator's final checkpoint: it already released everything
            // and will not answer.
            for tp in &partitions {
                self.owned.remove(tp);
            }
            return;
        }
        let mut waiting: BTreeSet<TopicPartition> = partitions.iter().cloned().collect();
        let revoking = waiting.clone();
        let _ = self
            .events
            .send(ConsumerEvent::RevokeBegan { partitions, lost });
        let deadline = Instant::now() + settings.handoff_deadline;
        let mut seen = false;
        while !waiting.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    partitions = waiting.len(),
                    "handoff deadline passed inside the revoke callback"
                );
                let _ = self.events.send(ConsumerEvent::HandoffDeadline(
                    waiting.into_iter().collect(),
                ));
                break;
            }
            let command = match self.commands.recv_timeout(left) {
                Ok(c) => c,
                Err(std_mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std_mpsc::RecvTimeoutError::Disconnected) => break,
            };
            match command {
                ConsumerCommand::RevokeSeen => seen = true,
                ConsumerCommand::Release { tp } => {
                    waiting.remove(&tp);
                }
                ConsumerCommand::Commit { commit, entries } if !seen => {
                    // Built before the coordinator knew of the revoke: it must not commit the
                    // revoked partitions (invariant 4).
                    let outcome = self.commit_only(consumer, settings, commit, entries, |tp| {
                        revoking
                            .contains(tp)
                            .then_some("partition revoked before the commit was made")
                    });
                    let _ = self
                        .events
                        .send(ConsumerEvent::CommitDone { commit, outcome });
                }
                other => self.execute(consumer, settings, other),
            }
        }
        for tp in &revoking {
            self.flow.released(tp);
            // From here on a commit for it is refused: the next owner's commits are the only
            // ones that may land.
            self.owned.remove(tp);
        }
    }
}
