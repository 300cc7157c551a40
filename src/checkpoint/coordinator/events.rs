//! The inputs of the outside world translated into the machine's events: the consumer thread's
//! events and the writers' events. What only the shell knows (routes being resolved, reads to
//! ask again, failed writers, stall bookkeeping) is handled here.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::KAFKA_READ_RETRY;
use crate::kafka::consumer::{ConsumerCommand, ConsumerEvent};
use crate::ops::metrics::KindLabel;
use crate::tables::Route;
use crate::writer::partition_writer::WriterEvent;

use super::io::send_later;
use super::{Coordinator, Exit};
use kbq_core::protocol::{Assignment, Event, MarkerRequests, TopicPartition};

impl Coordinator {
    /// One event of the consumer thread; `Break` once the thread ended.
    pub(super) fn consumer_event(&mut self, event: ConsumerEvent) -> std::ops::ControlFlow<()> {
        match event {
            ConsumerEvent::Closed => return std::ops::ControlFlow::Break(()),
            ConsumerEvent::Fatal(reason) => {
                tracing::error!(reason = %reason, "kafka consumer failed");
                self.exit = Some(Exit::ConsumerFailed(reason));
                self.consumer.send(ConsumerCommand::Shutdown);
            }
            ConsumerEvent::Assigned(partitions) => {
                self.count_rebalance("assign");
                // Every offset of the batch was read before now: a marker the machine asks for
                // from now on (a sibling's first start) landed after those reads.
                let read_at = self.machine.marker_requests();
                for (tp, result) in partitions {
                    self.metrics.partitions_assigned.inc();
                    self.assignment_read(tp, result, read_at);
                }
            }
            ConsumerEvent::AssignmentRead { tp, result } => {
                if self.unknown.remove(&tp) {
                    let read_at = self.machine.marker_requests();
                    self.assignment_read(tp, result, read_at);
                }
            }
            ConsumerEvent::SeekFailed { tp, reason } => {
                self.writer_failed(tp, format!("seek failed: {reason}"));
            }
            ConsumerEvent::OffsetOutOfRange { tp, position, low } => {
                // The machine applies its policy to the incarnation running.
                match self.writers.get(&tp).map(|w| w.incarnation) {
                    Some(incarnation) => self.feed(Event::OffsetOutOfRange {
                        tp,
                        incarnation,
                        position,
                        low,
                    }),
                    None => {
                        tracing::warn!(partition = %tp, position = position.0, low = low.0, "offset out of range for a partition without a writer")
                    }
                }
            }
            ConsumerEvent::Loads(loads) => {
                for load in loads {
                    self.stalls.loaded(load);
                }
            }
            ConsumerEvent::RevokeBegan { partitions, lost } => self.revoked(partitions, lost),
            ConsumerEvent::HandoffDeadline(partitions) => {
                for tp in partitions {
                    self.feed(Event::HandoffDeadline { tp });
                }
            }
            ConsumerEvent::CommitDone { commit, outcome } => {
                self.feed(Event::CommitResult { commit, outcome });
            }
            ConsumerEvent::Reread { tp, assignment } => {
                self.feed(Event::CheckpointReread { tp, assignment });
            }
            ConsumerEvent::RereadFailed { tp, reason } => {
                tracing::warn!(partition = %tp, reason = %reason, "cannot read the committed offset, retrying");
                let again = ConsumerCommand::ReadCommitted { tp };
                send_later(&self.consumer, KAFKA_READ_RETRY, again);
            }
            ConsumerEvent::OwnershipConfirmed { tp, assignment } => {
                self.ownership_confirmed(tp, assignment)
            }
            ConsumerEvent::OwnershipUnknown { tp, reason } => {
                tracing::warn!(partition = %tp, reason = %reason, "cannot confirm ownership of a zombie partition, retrying");
                self.confirm_ownership_later(tp, KAFKA_READ_RETRY);
            }
        }
        std::ops::ControlFlow::Continue(())
    }

    fn count_rebalance(&self, kind: &'static str) {
        self.metrics
            .rebalances
            .get_or_create(&KindLabel { kind })
            .inc();
    }

    fn assignment_read(
        &mut self,
        tp: TopicPartition,
        result: Result<Assignment, String>,
        read_at: MarkerRequests,
    ) {
        match result {
            Ok(assignment) => self.assigned(tp, assignment, read_at),
            Err(reason) => self.assignment_unknown(tp, reason),
        }
    }

    /// The revoke callback runs: each partition's handoff begins.
    fn revoked(&mut self, partitions: Vec<TopicPartition>, lost: bool) {
        self.count_rebalance(if lost { "lost" } else { "revoke" });
        for tp in partitions {
            tracing::info!(partition = %tp, lost, "partition revoked: handing off");
            self.resolving.forget(&tp);
            self.unknown.remove(&tp);
            self.feed(Event::RevokeBegan { tp, lost });
        }
        // Every commit sent from now on was built knowing of the revoke.
        self.consumer.send(ConsumerCommand::RevokeSeen);
    }

    fn ownership_confirmed(&mut self, tp: TopicPartition, assignment: Assignment) {
        if self.machine.is_zombie(&tp)
            && let Some(route) = self.settings.router.cached(&tp.topic)
        {
            // Nobody else took the partition: whoever finalized our stream was not its next
            // owner (an operator, a tool). Recover it like a new assignment, from the
            // checkpoint in Kafka and what this process knows.
            tracing::warn!(partition = %tp, "zombie partition still assigned to this member: recovering it");
            self.feed(Event::Assigned {
                tp,
                table: route.routed_table(),
                assignment,
                read_at: self.machine.marker_requests(),
            });
        }
    }

    /// An assigned partition whose committed offset and watermarks are known: its recovery
    /// starts once its topic is routed. `read_at`: the machine's marker requests when the
    /// offset was received (it was read before).
    fn assigned(&mut self, tp: TopicPartition, assignment: Assignment, read_at: MarkerRequests) {
        tracing::info!(partition = %tp, committed = ?assignment.committed.as_ref().map(|c| c.offset.0), low = assignment.low.0, high = assignment.high.0, "partition assigned");
        let base = assignment
            .committed
            .as_ref()
            .map_or(assignment.low, |c| c.offset);
        self.stalls
            .assigned(tp.clone(), base, Instant::now().into_std());
        match self.settings.router.cached(&tp.topic) {
            Some(route) => self.feed(Event::Assigned {
                tp,
                table: route.routed_table(),
                assignment,
                read_at,
            }),
            // A topic seen for the first time (a pattern subscription): its table is read or
            // created before its recovery starts.
            None => {
                let router = &self.settings.router;
                self.resolving.start(router, tp, assignment, read_at)
            }
        }
    }

    /// An owned partition whose committed offset or watermarks could not be read (a group
    /// coordinator loading, a leader away): never read as "no offset", never the end of the
    /// process; asked again after a pause.
    fn assignment_unknown(&mut self, tp: TopicPartition, reason: String) {
        tracing::warn!(partition = %tp, reason = %reason, "cannot read the assigned partition's committed offset or watermarks, retrying");
        self.unknown.insert(tp.clone());
        send_later(
            &self.consumer,
            KAFKA_READ_RETRY,
            ConsumerCommand::ReadAssignment { tp },
        );
    }

    /// A route resolved for an assigned partition: its recovery starts; or the table cannot be
    /// read or created: the partition fails closed (nothing consumed, readiness false).
    pub(super) fn route_resolved(
        &mut self,
        tp: TopicPartition,
        assignment: Assignment,
        read_at: MarkerRequests,
        route: Result<Arc<Route>, String>,
    ) {
        match route {
            Ok(route) => self.feed(Event::Assigned {
                tp,
                table: route.routed_table(),
                assignment,
                read_at,
            }),
            Err(reason) => {
                tracing::error!(partition = %tp, reason = %reason, "cannot route the partition's topic: partition stopped");
                self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
                self.mark_failed(tp, format!("no route: {reason}"));
            }
        }
    }

    /// One event of a writer; only the current incarnation's count.
    pub(super) fn on_writer(&mut self, event: WriterEvent) {
        match event {
            WriterEvent::Acknowledged { tp, ack } => {
                self.stalls
                    .acknowledged(&tp, ack.next(), Instant::now().into_std());
                self.feed(Event::RowsAcknowledged { tp, ack })
            }
            WriterEvent::StreamLost {
                tp,
                incarnation,
                stream,
            } => {
                if self.is_current(&tp, incarnation) {
                    tracing::warn!(partition = %tp, stream = %stream, "write stream lost: new incarnation");
                    self.writers.remove(&tp);
                    self.feed(Event::StreamLost { tp, stream });
                }
            }
            WriterEvent::Zombie {
                tp,
                incarnation,
                stream,
            } => {
                if self.is_current(&tp, incarnation) {
                    tracing::error!(partition = %tp, stream = %stream, "own stream finalized by another owner: this writer is a zombie");
                    self.writers.remove(&tp);
                    // The protocol's ZombieStopped count asks the group who owns it.
                    self.feed(Event::ZombieDetected { tp, stream });
                }
            }
            WriterEvent::Stopped { tp, incarnation } => {
                if self.is_current(&tp, incarnation) {
                    self.writers.remove(&tp);
                    self.draining.remove(&tp);
                    self.feed(Event::WriterStopped { tp });
                }
            }
            WriterEvent::Failed {
                tp,
                incarnation,
                reason,
            } => {
                if self.is_current(&tp, incarnation) {
                    tracing::error!(partition = %tp, reason = %reason, "writer failed: partition stopped");
                    self.writer_failed(tp, reason);
                }
            }
        }
    }

    pub(super) fn confirm_ownership_later(&self, tp: TopicPartition, after: Duration) {
        send_later(
            &self.consumer,
            after,
            ConsumerCommand::ConfirmOwnership { tp },
        );
    }
}
