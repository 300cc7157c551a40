//! The exactly-once checkpoint protocol of one process, as a pure state machine: [`Event`]s in,
//! [`Action`]s out. No I/O, no clock, no async: the coordinator shell executes the actions
//! (Kafka commits, FlushRows, FinalizeWriteStream, seeks, writer control) and feeds their results
//! back as events, serialised under the commit lock that the revoke callback also takes.
//!
//! The exactly-once argument, in the order the steps happen:
//!
//! * A row becomes visible only through FlushRows, and this machine only asks for a FlushRows of
//!   `(s, r)` after a Kafka commit whose metadata names `(s, r)` succeeded for that partition
//!   (invariant 1), or during recovery for the checkpoint just read from Kafka (it was committed).
//! * Every committed checkpoint with `f < K` is flushed eventually: it stays *pending* and is
//!   retried in every cycle until it succeeds, even when the partition has no new rows; a crash
//!   leaves it in Kafka, where the next owner re-flushes it before appending (invariant 2).
//! * A stream is finalized only once the latest commit no longer needs it: either the commit
//!   references another stream and that stream's flush succeeded, or it says `f == K`
//!   (invariant 3, the seed bug made impossible). "The latest commit" is one of this process
//!   that landed: a checkpoint merely read from Kafka may be a live owner's that a fenced
//!   process must not touch.
//! * No commit of a table is made, and no row of it made visible, before the table carries the
//!   group's marker: a cycle commits a partition only once its table's marker landed, and a
//!   recovery re-flush waits for it too (the checkpoint may come from a replica that died
//!   before its marker landed). Expired offsets can then never pass for a first start, which
//!   would deliver visible rows again or skip committed ones (invariant 7).
//! * After a revocation began, the only thing this machine emits for the partition is one handoff
//!   commit; every later result for it is dropped (invariant 4).
//! * Each incarnation appends to a fresh stream that only it knows, and a STREAM_FINALIZED on it
//!   means a newer owner superseded it: the machine stops the writer and emits nothing more for the
//!   partition until the group confirms what this process owns (invariant 5).
//! * No start position is silent: every case is a named [`StartCase`] with a policy and a counted
//!   [`Outcome`] (invariant 7).

mod cycle;
mod first_positions;
mod handoff;
mod marker;
mod recovery;
#[cfg(test)]
mod tests;
mod types;

pub(crate) use first_positions::FirstPositions;
pub use marker::MarkerRequests;
pub(crate) use marker::Markers;
pub use types::*;
// The shared vocabulary, re-exported because events and actions carry it.
pub use crate::model::{
    Assignment, CommitEntry, CommitError, CommitId, CommitOutcome, CommittedRead, PartitionOrigin,
    RoutedTable, TopicPartition,
};

use crate::metadata::{CommitMetadata, TableFingerprint};
use crate::offsets::{
    Acknowledged, Checkpoint, Committable, Incarnation, KafkaOffset, NextOffset, RowOffset,
    StreamId,
};
use std::collections::{BTreeMap, BTreeSet};

/// Why a partition asks the table where its visible rows end.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Resolving {
    /// The stream holding rows `[f, below)` of a committed checkpoint is gone.
    LostStream { stream: StreamId, below: NextOffset },
    /// No committed offset although the partition's table is marked.
    MissingCheckpoint,
}

/// A committed checkpoint whose FlushRows has not succeeded yet.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PendingFlush {
    stream: StreamId,
    through: RowOffset,
    covers: NextOffset,
    not_found: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// The checkpoint read at assignment needs a re-flush, and its table's marker has not
    /// landed yet: the re-flush waits for it.
    Marking {
        checkpoint: Checkpoint,
    },
    /// Re-flushing the checkpoint read at assignment.
    Flushing {
        checkpoint: Checkpoint,
        attempt: u32,
        not_found: u32,
    },
    /// The checkpoint's stream is gone: re-reading the committed offset to confirm the
    /// checkpoint is still the latest before treating the stream as lost.
    Confirming {
        checkpoint: Checkpoint,
        stream: StreamId,
    },
    /// Asking the table where the partition's visible rows end (the `resolve` policies).
    Resolving {
        attempt: u32,
        why: Resolving,
    },
    Running,
    /// Superseded by another incarnation: silent until the group says what we own.
    Zombie,
    /// Writer stopping for a handoff (`handoff`) or for shutdown.
    Draining {
        handoff: bool,
    },
    /// Shutdown: writer stopped, the final cycles run.
    Stopped,
    HandoffCommitting {
        commit: CommitId,
    },
    Failed,
}

#[derive(Clone, Debug)]
struct PartitionState {
    phase: Phase,
    /// What this process believes the latest durable checkpoint is. It can only lag the truth by
    /// commits of our own whose response was lost, which name our own streams.
    committed: Option<Checkpoint>,
    /// `f` as this process knows it: every record below it is visible (or counted lost). It can be
    /// ahead of the committed `f`: a flush we saw succeed.
    visible: NextOffset,
    progress: Acknowledged,
    committed_bytes: u64,
    pending: Option<PendingFlush>,
    flush_in_flight: bool,
    /// Streams of earlier incarnations, finalized once the latest commit no longer needs them.
    superseded: Vec<StreamId>,
    /// A commit of this process for the partition landed since it was assigned (or recovered
    /// again). Only then is the durable checkpoint one we know: a checkpoint merely read may be
    /// the live owner's, whose stream a fenced process must never finalize.
    own_commit_landed: bool,
    /// The checkpoint of a commit of ours whose answer was lost (a whole-request error): it may
    /// have landed, and been flushed by whoever recovered from it. Cleared when a later commit
    /// of ours lands.
    in_doubt: Option<Checkpoint>,
    commit_failures: u32,
    paused: bool,
    low: NextOffset,
    /// Ranges `[from, to)` of this incarnation that retention deleted and the protocol counted
    /// lost (`recovery.on_out_of_range: earliest`), in order, that the acknowledged prefix has
    /// not passed yet. `from` is where the consumer's fetch position was: the records below it
    /// were delivered to the writer and may still be in flight. Once the prefix reaches `from`
    /// it moves to `to`, so `K` passes the gap even when no record follows it (an idle
    /// partition whose tail expired would otherwise keep its committed offset below the log
    /// start for good).
    lost_ranges: Vec<(NextOffset, NextOffset)>,
    /// The table the partition's topic is routed to: its checkpoints carry this fingerprint.
    table: TableFingerprint,
}

/// What a process remembers of a partition it released, to keep a flush it saw succeed if the
/// partition comes back and nobody committed in between.
#[derive(Clone, Debug)]
struct Remembered {
    committed: Checkpoint,
    visible: NextOffset,
}

#[derive(Debug, Default)]
struct Cycle {
    commit: Option<CommitId>,
    entries: BTreeMap<TopicPartition, Committable>,
    flushing: BTreeSet<TopicPartition>,
    failed: bool,
    /// Sent a commit or a flush: only such a cycle may start the next one at once (shutdown).
    worked: bool,
}

/// The checkpoint protocol of one process.
#[derive(Debug)]
pub struct CheckpointProtocol {
    config: ProtocolConfig,
    /// The group's marker on each table: known, or being written.
    marked: Markers,
    partitions: BTreeMap<TopicPartition, PartitionState>,
    remembered: BTreeMap<TopicPartition, Remembered>,
    cycle: Option<Cycle>,
    /// Partitions that started without a committed offset and whose first commit was not sent
    /// yet: a cycle starts for them at once, not an interval later (`commit_first_positions`).
    first_positions: FirstPositions,
    /// Runs the recovery only (the at-least-once ledger's use): the caller makes every commit.
    recovery_only: bool,
    next_commit: u64,
    next_incarnation: u64,
    shutting_down: bool,
    done: bool,
}

impl CheckpointProtocol {
    pub fn new(config: ProtocolConfig) -> Self {
        CheckpointProtocol {
            config,
            marked: Markers::default(),
            partitions: BTreeMap::new(),
            remembered: BTreeMap::new(),
            cycle: None,
            first_positions: FirstPositions::default(),
            recovery_only: false,
            next_commit: 0,
            next_incarnation: 0,
            shutting_down: false,
            done: false,
        }
    }

    /// A protocol that recovers partitions and makes no commit of its own: the at-least-once
    /// ledger starts appending where it starts an incarnation, and commits itself.
    pub fn for_recovery(config: ProtocolConfig) -> Self {
        CheckpointProtocol {
            recovery_only: true,
            ..CheckpointProtocol::new(config)
        }
    }

    /// Partitions currently held (any phase), for readiness and tests.
    pub fn partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.partitions.keys()
    }

    /// Whether `tp` is appending under this process.
    pub fn is_running(&self, tp: &TopicPartition) -> bool {
        self.partitions
            .get(tp)
            .is_some_and(|p| p.phase == Phase::Running)
    }

    /// How many table markers this machine asked for so far (see [`Event::Assigned`]).
    pub fn marker_requests(&self) -> MarkerRequests {
        self.marked.requests()
    }

    /// Whether `tp` stopped as a zombie and waits for the group to confirm what we own.
    pub fn is_zombie(&self, tp: &TopicPartition) -> bool {
        self.partitions
            .get(tp)
            .is_some_and(|p| p.phase == Phase::Zombie)
    }

    pub fn cycle_in_flight(&self) -> bool {
        self.cycle.is_some()
    }

    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        // A first position is never committed from a handoff's steps: a revoke callback reports
        // its partitions one event each (and their writers stop in between), so a cycle started
        // there could carry a partition the group is taking away whose revoke is not reported
        // yet (invariant 4; the consumer drops such entries before the coordinator's
        // `RevokeSeen`, but the protocol does not rely on it). The next other event starts it.
        let revoking = matches!(
            event,
            Event::RevokeBegan { .. } | Event::WriterStopped { .. } | Event::HandoffDeadline { .. }
        );
        match event {
            Event::Assigned {
                tp,
                table,
                assignment,
                read_at,
            } => self.on_assigned(tp, table, assignment, read_at, &mut out),
            Event::RecoveryFlushResult {
                tp,
                stream,
                through,
                outcome,
            } => self.on_recovery_flush(tp, stream, through, outcome, &mut out),
            Event::CheckpointReread { tp, assignment } => self.on_reread(tp, assignment, &mut out),
            Event::ResolveResult { tp, outcome } => self.on_resolved(tp, outcome, &mut out),
            Event::RowsAcknowledged { tp, ack } => self.on_ack(tp, ack, &mut out),
            Event::StartCycle => self.start_cycle(&mut out),
            Event::CommitResult { commit, outcome } => {
                self.on_commit_result(commit, outcome, &mut out)
            }
            Event::FlushResult {
                tp,
                stream,
                through,
                outcome,
            } => self.on_flush_result(tp, stream, through, outcome, &mut out),
            Event::FinalizeResult { .. } => {}
            Event::LabelResult { table, outcome } => self.on_label_result(table, outcome, &mut out),
            Event::OffsetOutOfRange {
                tp,
                incarnation,
                position,
                low,
            } => self.on_out_of_range(tp, incarnation, position, low, &mut out),
            Event::StreamLost { tp, stream } => self.on_stream_lost(tp, stream, &mut out),
            Event::ZombieDetected { tp, stream } => {
                // Before its first acknowledgement an incarnation knows no stream: a finalized
                // stream under it is its own first one (the shell reports only the current
                // writer), as in `on_stream_lost`. Ignoring it would leave the partition
                // running without a writer.
                let current = self.partitions.get(&tp).is_some_and(|p| {
                    p.progress.stream() == Some(&stream) || p.progress.stream().is_none()
                });
                if current {
                    self.become_zombie(tp, &mut out);
                }
            }
            Event::RevokeBegan { tp, lost } => self.on_revoke(tp, lost, &mut out),
            Event::WriterStopped { tp } => self.on_writer_stopped(tp, &mut out),
            Event::HandoffDeadline { tp } => {
                if self.partitions.contains_key(&tp) {
                    out.push(Action::Count(Outcome::HandoffAbandoned { tp: tp.clone() }));
                    self.release(tp, &mut out);
                }
            }
            Event::Shutdown => self.on_shutdown(&mut out),
            Event::ShutdownDeadline => {
                if self.shutting_down {
                    out.push(Action::Count(Outcome::ShutdownIncomplete {
                        partitions: self.partitions.len(),
                    }));
                    self.finish_shutdown(&mut out);
                }
            }
        }
        if self.shutting_down && !self.done && self.partitions.is_empty() {
            // Everything was revoked or lost during the shutdown: nothing is left to commit.
            self.finish_shutdown(&mut out);
        }
        if !revoking {
            self.commit_first_positions(&mut out);
        }
        out
    }
}
