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

use super::metadata::{CommitMetadata, MetadataError, MetadataVersion, TableFingerprint};
use super::offsets::{
    Acknowledged, Checkpoint, Committable, Incarnation, KafkaOffset, NextOffset, RowOffset,
    StreamId,
};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;

/// A Kafka topic partition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// `recovery.lost_stream`: what to do when the stream of a checkpoint with `f < K` is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostStreamPolicy {
    /// Ask the table for the highest visible offset of the partition and continue after it: exact.
    Resolve,
    /// Seek to `f` and re-deliver `[f, K)`: at-least-once for that window, counted.
    Rewind,
    /// Stop the partition.
    Fail,
}

/// `recovery.resolve_fallback`: what `resolve` does when its query keeps failing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolveFallback {
    /// Stop the partition (exactness kept, availability lost).
    Fail,
    /// Re-deliver the window, as `rewind` does: at-least-once for it, counted.
    Rewind,
}

/// `recovery.on_anomaly`: what to do when a re-flush says the cursor is already past `r`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnomalyPolicy {
    Fail,
    Continue,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartFrom {
    Earliest,
    Latest,
}

/// What to do when a group that has committed before finds no committed offset for a partition
/// (Kafka expired the group's offsets, or the partition never committed while its table was
/// already marked: a new topic routed to a marked table, or a sibling partition that committed
/// first; docs/operations.md, "Missing checkpoints").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissingCheckpointPolicy {
    Fail,
    Earliest,
    Latest,
    /// Ask the table for the partition's highest visible offset and continue after it (from the
    /// log start when it has none): exact whatever the cause, as for a lost stream.
    Resolve,
}

/// Why a partition asks the table where its visible rows end.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Resolving {
    /// The stream holding rows `[f, below)` of a committed checkpoint is gone.
    LostStream { stream: StreamId, below: NextOffset },
    /// No committed offset although the partition's table is marked.
    MissingCheckpoint,
}

/// What to do when the start position is below the log start (retention deleted records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutOfRangePolicy {
    Fail,
    /// Continue at the log start; the deleted range is counted as lost.
    Earliest,
}

#[derive(Clone, Debug)]
pub struct ProtocolConfig {
    pub write_version: MetadataVersion,
    pub lost_stream: LostStreamPolicy,
    pub on_anomaly: AnomalyPolicy,
    /// First start of the group (no committed offset, no marker on the table).
    pub initial_position: StartFrom,
    pub on_missing_checkpoint: MissingCheckpointPolicy,
    /// A partition added to the topic at runtime.
    pub new_partition: StartFrom,
    pub on_out_of_range: OutOfRangePolicy,
    /// A partition whose commit fails this many cycles in a row is isolated.
    pub isolate_after_commit_failures: u32,
    /// NOT_FOUND can be transient (reference §3.1): retry this often before calling a stream gone.
    pub not_found_retries: u32,
    /// Failed `resolve` queries (with the shell's backoff) before `resolve_fallback` applies.
    pub resolve_attempts: u32,
    pub resolve_fallback: ResolveFallback,
    /// Appended-but-uncommitted bytes per partition before it is paused.
    pub max_uncommitted_bytes: u64,
}

impl ProtocolConfig {
    /// The production defaults of DESIGN §2.
    pub fn new() -> Self {
        ProtocolConfig {
            write_version: MetadataVersion::CURRENT,
            lost_stream: LostStreamPolicy::Rewind,
            on_anomaly: AnomalyPolicy::Fail,
            initial_position: StartFrom::Earliest,
            on_missing_checkpoint: MissingCheckpointPolicy::Fail,
            new_partition: StartFrom::Earliest,
            on_out_of_range: OutOfRangePolicy::Fail,
            isolate_after_commit_failures: 5,
            not_found_retries: 3,
            resolve_attempts: 10,
            resolve_fallback: ResolveFallback::Fail,
            max_uncommitted_bytes: 256 << 20,
        }
    }
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// The table a partition's topic is routed to, as the shell found it when it resolved the route
/// (before the partition's recovery starts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutedTable {
    /// The fingerprint its checkpoints carry: a checkpoint of another table is refused.
    pub table: TableFingerprint,
    /// The table carries this group's marker: the group has committed checkpoints for it before.
    pub marked: bool,
}

/// A committed offset as read from Kafka (OffsetFetch), metadata as raw bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedRead {
    pub offset: NextOffset,
    pub metadata: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionOrigin {
    /// The partition existed when the subscription was made.
    Existing,
    /// The partition appeared in topic metadata while the group was running.
    AddedAtRuntime,
}

/// What the shell reads before handing a partition to the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// `None`: Kafka has no committed offset for this partition in the group.
    pub committed: Option<CommittedRead>,
    /// Log start and high watermark at assignment time.
    pub low: NextOffset,
    pub high: NextOffset,
    pub origin: PartitionOrigin,
}

/// Result of one FlushRows, classified by the BigQuery client (DESIGN §2 recovery table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlushOutcome {
    Flushed,
    /// The cursor is already past the requested offset.
    AlreadyExists,
    /// INVALID_ARGUMENT "Stream has been finalized…".
    StreamFinalized,
    NotFound,
    /// UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, RESOURCE_EXHAUSTED, or no response.
    Transient(String),
    /// PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION: an IAM change or a credential
    /// being rotated passes, so it is retried as a transient error (review #14); the shell keeps
    /// readiness false meanwhile.
    Denied(String),
    /// OUT_OF_RANGE, other INVALID_ARGUMENT: never rewind.
    Fatal(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The call failed and the committed offsets could not be read back: nothing is known of
    /// what landed, and the cycle is abandoned.
    Rejected(String),
    /// Per partition, after reading the committed offsets back when the call reported an error:
    /// a partition whose durable offset and metadata are what was sent landed, whatever the call
    /// said.
    PerPartition(Vec<(TopicPartition, Result<(), CommitError>)>),
}

/// Why a commit did not land for a partition, classified by the shell from Kafka's error code
/// (`kafka::commit_error`): only an error of the partition itself may isolate it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// Refused for this partition, and it will be again whatever the others do
    /// (OFFSET_METADATA_TOO_LARGE, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION):
    /// counts towards `isolate_after_commit_failures`.
    #[error("{0}")]
    Partition(String),
    /// The request failed as a whole (coordinator loading or moving, not enough replicas, a
    /// generation or member error, a timeout, a revoke): it says nothing about the partition, so
    /// the cycle is abandoned uncounted.
    #[error("{0}")]
    Request(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CommitId(pub u64);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `tp` is assigned and its topic's route resolved: its checkpoints belong to `table`.
    Assigned {
        tp: TopicPartition,
        table: RoutedTable,
        assignment: Assignment,
    },
    /// The answer to a recovery [`Action::FlushRows`]. It names what was flushed: an answer to
    /// the re-flush of an earlier assignment must not pass for the current one.
    RecoveryFlushResult {
        tp: TopicPartition,
        stream: StreamId,
        through: RowOffset,
        outcome: FlushOutcome,
    },
    /// Answer to [`Action::ReadCommitted`]: the committed offset and watermarks read again.
    CheckpointReread {
        tp: TopicPartition,
        assignment: Assignment,
    },
    /// Answer to [`Action::ResolveVisible`]: the highest visible Kafka offset of the partition.
    ResolveResult {
        tp: TopicPartition,
        outcome: Result<Option<KafkaOffset>, String>,
    },
    RowsAcknowledged {
        tp: TopicPartition,
        ack: Acknowledged,
    },
    /// The checkpoint timer fired.
    StartCycle,
    CommitResult {
        commit: CommitId,
        outcome: CommitOutcome,
    },
    FlushResult {
        tp: TopicPartition,
        stream: StreamId,
        through: RowOffset,
        outcome: FlushOutcome,
    },
    FinalizeResult {
        tp: TopicPartition,
        stream: StreamId,
        outcome: Result<(), String>,
    },
    /// Answer to [`Action::LabelTable`]: whether the group's marker is on the table now.
    LabelResult {
        table: TableFingerprint,
        outcome: Result<(), String>,
    },
    /// The consumer's fetch position `position` of incarnation `incarnation` is below the log
    /// start `low` (`auto.offset.reset=error` reported it): retention deleted records we had not
    /// handled yet, for example the target of a rewind.
    OffsetOutOfRange {
        tp: TopicPartition,
        incarnation: Incarnation,
        position: NextOffset,
        low: NextOffset,
    },
    /// NOT_FOUND on the writer's own stream (after the writer's retries): the stream expired.
    StreamLost {
        tp: TopicPartition,
        stream: StreamId,
    },
    /// STREAM_FINALIZED on the writer's own stream: another incarnation superseded this one.
    ZombieDetected {
        tp: TopicPartition,
        stream: StreamId,
    },
    /// The revoke callback runs (under the commit lock). `lost`: the assignment was lost (session
    /// timeout, fenced), so no commit of ours can be trusted to land.
    RevokeBegan {
        tp: TopicPartition,
        lost: bool,
    },
    /// The writer answered [`Action::StopWriter`]: its in-flight appends are acknowledged or
    /// abandoned, and its last [`Event::RowsAcknowledged`] was delivered.
    WriterStopped {
        tp: TopicPartition,
    },
    /// The handoff deadline passed: every remaining step for the partition is cancelled.
    HandoffDeadline {
        tp: TopicPartition,
    },
    /// SIGTERM.
    Shutdown,
    ShutdownDeadline,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushPurpose {
    /// Re-flush of the checkpoint read at assignment, before anything is appended.
    Recovery,
    /// Step 3 of a cycle (or the retry of a pending flush).
    Cycle,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitEntry {
    pub tp: TopicPartition,
    pub offset: NextOffset,
    pub metadata: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    FlushRows {
        tp: TopicPartition,
        stream: StreamId,
        through: RowOffset,
        purpose: FlushPurpose,
        /// Retries so far; the shell backs off by it.
        attempt: u32,
    },
    /// Read the committed offset + metadata and the watermarks of `tp` again (OffsetFetch; a
    /// STALE_MEMBER_EPOCH or timeout is retried by the shell, never read as "no offset").
    ReadCommitted {
        tp: TopicPartition,
    },
    /// Query the table for the highest visible offset of `tp` (the `resolve` policy).
    ResolveVisible {
        tp: TopicPartition,
        attempt: u32,
    },
    /// Seek to `from`, discard anything queued or in flight for `tp`, and let the writer open a
    /// new stream lazily, at its first row; resume the partition.
    StartIncarnation {
        tp: TopicPartition,
        incarnation: Incarnation,
        from: NextOffset,
    },
    /// Move the consumer of incarnation `incarnation` to `to`; its stream and rows stay.
    Seek {
        tp: TopicPartition,
        incarnation: Incarnation,
        to: NextOffset,
    },
    /// One Kafka commit (offset + metadata per partition), handed to librdkafka under the lock.
    CommitOffsets {
        commit: CommitId,
        entries: Vec<CommitEntry>,
    },
    FinalizeStream {
        tp: TopicPartition,
        stream: StreamId,
    },
    /// Stop appending and drain in-flight appends (bounded); answer with
    /// [`Event::WriterStopped`].
    StopWriter {
        tp: TopicPartition,
    },
    Pause {
        tp: TopicPartition,
    },
    Resume {
        tp: TopicPartition,
    },
    /// The protocol is done with `tp`: the revoke callback may return.
    Release {
        tp: TopicPartition,
    },
    FailPartition {
        tp: TopicPartition,
        reason: FailReason,
    },
    /// Write the group's marker on `table`, so that a later start without committed offsets is
    /// recognised as expired offsets, not a first start; answer with [`Event::LabelResult`].
    /// Emitted before the first commit of one of its partitions, or before a recovery
    /// re-flushes one of its checkpoints, and again after every failure until it lands: no
    /// commit of the table is made and no row of it made visible before.
    LabelTable {
        table: TableFingerprint,
        /// Failures so far; the shell backs off by it.
        attempt: u32,
    },
    Count(Outcome),
    ShutdownComplete,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartCase {
    /// A checkpoint of ours.
    Checkpoint,
    /// No committed offset and no marker on the table.
    FirstStart,
    /// No committed offset although the group has committed before.
    MissingCheckpoint,
    NewPartition,
    /// Committed offset with empty metadata (operator reset).
    OperatorReset,
    /// Written by at-least-once mode.
    AtLeastOnce,
}

/// Counted outcomes: each becomes a metric and a log line in the shell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Started {
        tp: TopicPartition,
        case: StartCase,
        at: NextOffset,
    },
    RecoveryFlushed {
        tp: TopicPartition,
    },
    RecoveryRetried {
        tp: TopicPartition,
        attempt: u32,
    },
    /// The flush cursor was past `r`: rows after it are visible and will be written again.
    Anomaly {
        tp: TopicPartition,
        stream: StreamId,
    },
    /// At-least-once window `[from, to)` re-delivered after `stream` was lost.
    Rewound {
        tp: TopicPartition,
        stream: StreamId,
        from: NextOffset,
        to: NextOffset,
    },
    Resolved {
        tp: TopicPartition,
        at: NextOffset,
    },
    /// The `resolve` query failed (`attempts` in a row).
    ResolveFailed {
        tp: TopicPartition,
        attempts: u32,
        error: String,
    },
    /// A re-read found a newer checkpoint than the one being recovered: recovery restarts.
    CheckpointMoved {
        tp: TopicPartition,
    },
    /// Records `[from, to)` were deleted by retention before they were made visible.
    RecordsLost {
        tp: TopicPartition,
        from: NextOffset,
        to: NextOffset,
    },
    /// A commit did not land for `tp`; only a [`CommitError::Partition`] counts towards
    /// isolation.
    CommitFailed {
        tp: TopicPartition,
        error: CommitError,
    },
    CycleAbandoned,
    FlushRetried {
        tp: TopicPartition,
    },
    Visible {
        tp: TopicPartition,
        through: NextOffset,
    },
    Finalized {
        tp: TopicPartition,
        stream: StreamId,
    },
    ZombieStopped {
        tp: TopicPartition,
    },
    StreamRestarted {
        tp: TopicPartition,
    },
    Paused {
        tp: TopicPartition,
    },
    HandedOff {
        tp: TopicPartition,
        committed: bool,
    },
    HandoffAbandoned {
        tp: TopicPartition,
    },
    ShutdownIncomplete {
        partitions: usize,
    },
    /// The group's marker could not be written on `table` (`attempts` failures in a row): its
    /// rows stay invisible until it lands, and it is written again.
    LabelFailed {
        table: TableFingerprint,
        attempts: u32,
        error: String,
    },
    /// The group's marker landed on `table` (after [`Outcome::LabelFailed`] or not).
    Labelled {
        table: TableFingerprint,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FailReason {
    #[error("unreadable checkpoint: {0}")]
    Metadata(MetadataError),
    #[error("checkpoint belongs to another table: found {found}")]
    ForeignTable { found: TableFingerprint },
    #[error("no committed offset although the group has committed before")]
    CheckpointMissing,
    #[error("committed offset {committed} is above the high watermark {high}")]
    AboveHighWatermark {
        committed: NextOffset,
        high: NextOffset,
    },
    #[error("start offset {from} is below the log start {low}")]
    OutOfRange { from: NextOffset, low: NextOffset },
    #[error("re-flush found the cursor past the checkpoint of stream {stream}")]
    Anomaly { stream: StreamId },
    #[error("stream {stream} of an unflushed checkpoint is gone")]
    LostStream { stream: StreamId },
    #[error("flush failed: {0}")]
    FlushFatal(String),
    #[error("commit failed {failures} cycles in a row")]
    Isolated { failures: u32 },
    #[error("the resolve query failed {attempts} times: {error}")]
    ResolveFailed { attempts: u32, error: String },
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
    commit_failures: u32,
    paused: bool,
    low: NextOffset,
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
    /// Tables known to carry this group's marker (read at assignment, or written by us).
    marked: HashSet<TableFingerprint>,
    /// Tables whose marker is being written: how many attempts failed so far.
    labelling: BTreeMap<TableFingerprint, u32>,
    partitions: BTreeMap<TopicPartition, PartitionState>,
    remembered: BTreeMap<TopicPartition, Remembered>,
    cycle: Option<Cycle>,
    next_commit: u64,
    next_incarnation: u64,
    shutting_down: bool,
    done: bool,
}

impl CheckpointProtocol {
    pub fn new(config: ProtocolConfig) -> Self {
        CheckpointProtocol {
            config,
            marked: HashSet::new(),
            labelling: BTreeMap::new(),
            partitions: BTreeMap::new(),
            remembered: BTreeMap::new(),
            cycle: None,
            next_commit: 0,
            next_incarnation: 0,
            shutting_down: false,
            done: false,
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
        match event {
            Event::Assigned {
                tp,
                table,
                assignment,
            } => self.on_assigned(tp, table, assignment, &mut out),
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
        out
    }

    // ---------------------------------------------------------------------------------------
    // Recovery on assignment (DESIGN §2 "Recovery when a partition is assigned").

    fn on_assigned(
        &mut self,
        tp: TopicPartition,
        table: RoutedTable,
        a: Assignment,
        out: &mut Vec<Action>,
    ) {
        if self.shutting_down {
            return;
        }
        if table.marked {
            self.marked.insert(table.table);
        }
        // A partition we still hold (a zombie whose ownership the group confirmed, or a failed
        // one being retried) keeps what it knows; one we released may have been remembered.
        let known = match self.partitions.remove(&tp) {
            Some(p) => {
                if matches!(p.phase, Phase::Running | Phase::Draining { .. }) {
                    out.push(Action::StopWriter { tp: tp.clone() });
                }
                p.committed.map(|committed| Remembered {
                    committed,
                    visible: p.visible,
                })
            }
            None => self.remembered.remove(&tp),
        };
        let mut state = PartitionState {
            phase: Phase::Failed,
            committed: None,
            visible: NextOffset(0),
            progress: Acknowledged::incarnation_start(Incarnation(0), NextOffset(0)),
            committed_bytes: 0,
            pending: None,
            flush_in_flight: false,
            superseded: Vec::new(),
            own_commit_landed: false,
            commit_failures: 0,
            paused: false,
            low: a.low,
            table: table.table,
        };

        let Some(read) = a.committed else {
            // No committed offset. On a first start nothing of ours is visible (nothing is
            // flushed before it is committed); if the group committed before (the marker on the
            // partition's table), Kafka expired its offsets and the policy decides, counted.
            // Never a silent reset.
            let (case, from) = match a.origin {
                PartitionOrigin::AddedAtRuntime => (
                    StartCase::NewPartition,
                    Some(Self::position(self.config.new_partition, &a)),
                ),
                PartitionOrigin::Existing if !self.marked.contains(&table.table) => (
                    StartCase::FirstStart,
                    Some(Self::position(self.config.initial_position, &a)),
                ),
                PartitionOrigin::Existing => {
                    let from = match self.config.on_missing_checkpoint {
                        MissingCheckpointPolicy::Fail => None,
                        MissingCheckpointPolicy::Earliest => Some(a.low),
                        MissingCheckpointPolicy::Latest => Some(a.high),
                        MissingCheckpointPolicy::Resolve => {
                            out.push(Action::ResolveVisible {
                                tp: tp.clone(),
                                attempt: 0,
                            });
                            state.phase = Phase::Resolving {
                                attempt: 0,
                                why: Resolving::MissingCheckpoint,
                            };
                            self.partitions.insert(tp, state);
                            return;
                        }
                    };
                    (StartCase::MissingCheckpoint, from)
                }
            };
            let Some(from) = from else {
                return self.fail(tp, state, FailReason::CheckpointMissing, out);
            };
            out.push(Action::Count(Outcome::Started {
                tp: tp.clone(),
                case,
                at: from,
            }));
            return self.start_incarnation(tp, state, from, out);
        };

        if read.offset > a.high {
            // Kafka lost records we committed past (truncation, unclean election): no right answer.
            let reason = FailReason::AboveHighWatermark {
                committed: read.offset,
                high: a.high,
            };
            return self.fail(tp, state, reason, out);
        }

        let metadata = match CommitMetadata::parse(&read.metadata) {
            Ok(m) => m,
            // Never read an unknown checkpoint as "none": that would abandon its unflushed tail.
            Err(e) => return self.fail(tp, state, FailReason::Metadata(e), out),
        };
        let checkpoint = match &metadata {
            CommitMetadata::Empty => {
                out.push(Action::Count(Outcome::Started {
                    tp: tp.clone(),
                    case: StartCase::OperatorReset,
                    at: read.offset,
                }));
                return self.start_incarnation(tp, state, read.offset, out);
            }
            // The checkpoint must belong to the table the partition is routed to now: a route
            // changed to another table (or a reused group id) would flush rows of one table's
            // stream while appending to another's.
            CommitMetadata::AtLeastOnce { table: found }
            | CommitMetadata::ExactlyOnce { table: found, .. }
                if *found != table.table =>
            {
                let reason = FailReason::ForeignTable { found: *found };
                return self.fail(tp, state, reason, out);
            }
            CommitMetadata::AtLeastOnce { .. } => {
                out.push(Action::Count(Outcome::Started {
                    tp: tp.clone(),
                    case: StartCase::AtLeastOnce,
                    at: read.offset,
                }));
                return self.start_incarnation(tp, state, read.offset, out);
            }
            CommitMetadata::ExactlyOnce { .. } => metadata
                .checkpoint(read.offset)
                .expect("exactly-once metadata describes a checkpoint"),
        };

        state.committed = Some(checkpoint.clone());
        state.visible = checkpoint.visible_through;
        // The same process getting the partition back keeps a flush it saw succeed, but only if
        // nobody committed in between: the durable checkpoint must be exactly the one it knew.
        if let Some(known) = known.filter(|k| k.committed == checkpoint) {
            state.visible = state.visible.max(known.visible);
        }
        if let Some(s) = &checkpoint.stream {
            // This incarnation never appends to the old stream; it is finalized once a commit of
            // ours stops referencing it (or says f == K).
            state.superseded.push(s.clone());
        }

        match (&checkpoint.stream, checkpoint.flush_to) {
            (Some(_), Some(_))
                if state.visible < checkpoint.next && !self.marked.contains(&table.table) =>
            {
                // The re-flush makes rows visible: the table must say first that this group
                // committed to it, or expired offsets would later pass for a first start and
                // deliver these rows again (the previous owner may have died before its marker
                // landed).
                state.phase = Phase::Marking { checkpoint };
                self.partitions.insert(tp, state);
                self.mark(table.table, out);
            }
            (Some(stream), Some(through)) if state.visible < checkpoint.next => {
                // Something is in doubt: make the committed rows visible before appending
                // anything, so that invariant 2 holds across the crash of the previous owner.
                out.push(Action::FlushRows {
                    tp: tp.clone(),
                    stream: stream.clone(),
                    through,
                    purpose: FlushPurpose::Recovery,
                    attempt: 0,
                });
                state.phase = Phase::Flushing {
                    checkpoint,
                    attempt: 0,
                    not_found: 0,
                };
                self.partitions.insert(tp, state);
            }
            _ => {
                // f == K: nothing in doubt, whatever happened to the stream.
                out.push(Action::Count(Outcome::Started {
                    tp: tp.clone(),
                    case: StartCase::Checkpoint,
                    at: checkpoint.next,
                }));
                self.start_incarnation(tp, state, checkpoint.next, out);
            }
        }
    }

    fn position(from: StartFrom, a: &Assignment) -> NextOffset {
        match from {
            StartFrom::Earliest => a.low,
            StartFrom::Latest => a.high,
        }
    }

    fn on_recovery_flush(
        &mut self,
        tp: TopicPartition,
        flushed: StreamId,
        flushed_through: RowOffset,
        outcome: FlushOutcome,
        out: &mut Vec<Action>,
    ) {
        let Some(mut state) = self.partitions.remove(&tp) else {
            return;
        };
        let Phase::Flushing {
            checkpoint,
            attempt,
            not_found,
        } = state.phase.clone()
        else {
            self.partitions.insert(tp, state);
            return;
        };
        let stream = checkpoint.stream.clone().expect("a re-flush has a stream");
        if stream != flushed || checkpoint.flush_to != Some(flushed_through) {
            self.partitions.insert(tp, state);
            return;
        }
        let retry = |state: &mut PartitionState, not_found: u32, out: &mut Vec<Action>| {
            out.push(Action::Count(Outcome::RecoveryRetried {
                tp: tp.clone(),
                attempt: attempt + 1,
            }));
            out.push(Action::FlushRows {
                tp: tp.clone(),
                stream: stream.clone(),
                through: checkpoint.flush_to.expect("a re-flush has a flush offset"),
                purpose: FlushPurpose::Recovery,
                attempt: attempt + 1,
            });
            state.phase = Phase::Flushing {
                checkpoint: checkpoint.clone(),
                attempt: attempt + 1,
                not_found,
            };
        };
        match outcome {
            FlushOutcome::Flushed => {
                // Every record below K is visible now.
                out.push(Action::Count(Outcome::RecoveryFlushed { tp: tp.clone() }));
                state.visible = checkpoint.next;
                self.start_incarnation(tp, state, checkpoint.next, out);
            }
            FlushOutcome::AlreadyExists => {
                // The cursor is past r: a newer checkpoint on this stream was committed, flushed
                // and then lost. Rows after r are visible and will be written again from K.
                out.push(Action::Count(Outcome::Anomaly {
                    tp: tp.clone(),
                    stream: stream.clone(),
                }));
                match self.config.on_anomaly {
                    AnomalyPolicy::Fail => {
                        self.fail(tp, state, FailReason::Anomaly { stream }, out)
                    }
                    AnomalyPolicy::Continue => {
                        state.visible = checkpoint.next;
                        self.start_incarnation(tp, state, checkpoint.next, out);
                    }
                }
            }
            FlushOutcome::NotFound if not_found < self.config.not_found_retries => {
                retry(&mut state, not_found + 1, out);
                self.partitions.insert(tp, state);
            }
            FlushOutcome::NotFound | FlushOutcome::StreamFinalized => {
                // The stream is gone. Before deciding anything that costs exactness, make sure
                // the checkpoint we read is still the latest: a newer owner finalizes the stream
                // of the checkpoint it superseded, so a stale read (this process is a zombie
                // that has not noticed yet) looks exactly like a lost stream.
                out.push(Action::ReadCommitted { tp: tp.clone() });
                state.phase = Phase::Confirming { checkpoint, stream };
                self.partitions.insert(tp, state);
            }
            FlushOutcome::Transient(_) | FlushOutcome::Denied(_) => {
                retry(&mut state, not_found, out);
                self.partitions.insert(tp, state);
            }
            FlushOutcome::Fatal(e) => self.fail(tp, state, FailReason::FlushFatal(e), out),
        }
    }

    fn on_reread(&mut self, tp: TopicPartition, a: Assignment, out: &mut Vec<Action>) {
        let Some(mut state) = self.partitions.remove(&tp) else {
            return;
        };
        let Phase::Confirming { checkpoint, stream } = state.phase.clone() else {
            self.partitions.insert(tp, state);
            return;
        };
        let unchanged = a.committed.as_ref().is_some_and(|read| {
            read.offset == checkpoint.next
                && CommitMetadata::parse(&read.metadata)
                    .ok()
                    .and_then(|m| m.checkpoint(read.offset))
                    .as_ref()
                    == Some(&checkpoint)
        });
        if unchanged {
            state.low = a.low;
            self.lost_stream(tp, state, stream, checkpoint.next, out);
        } else {
            // Someone committed since our read: recover from what is there now. If we no longer
            // own the partition, the group tells us; nothing here writes to the table.
            out.push(Action::Count(Outcome::CheckpointMoved { tp: tp.clone() }));
            // The route did not change meanwhile: the partition keeps its table.
            let table = RoutedTable {
                table: state.table,
                marked: self.marked.contains(&state.table),
            };
            self.partitions.insert(tp.clone(), state);
            self.on_assigned(tp, table, a, out);
        }
    }

    /// The stream holding rows `[f, below)` of a committed checkpoint is gone.
    fn lost_stream(
        &mut self,
        tp: TopicPartition,
        mut state: PartitionState,
        stream: StreamId,
        below: NextOffset,
        out: &mut Vec<Action>,
    ) {
        state.superseded.retain(|s| *s != stream);
        match self.config.lost_stream {
            LostStreamPolicy::Fail => self.fail(tp, state, FailReason::LostStream { stream }, out),
            LostStreamPolicy::Rewind => {
                // At-least-once for [f, K): those rows may have been flushed without us learning
                // it (the durable f lags the real cursor by one flush). Counted.
                out.push(Action::Count(Outcome::Rewound {
                    tp: tp.clone(),
                    stream: stream.clone(),
                    from: state.visible,
                    to: below,
                }));
                let from = state.visible;
                self.start_incarnation(tp, state, from, out);
            }
            LostStreamPolicy::Resolve => {
                // Exact: rows of a partition become visible as a prefix, so the highest visible
                // offset tells where re-delivery must start.
                out.push(Action::ResolveVisible {
                    tp: tp.clone(),
                    attempt: 0,
                });
                state.phase = Phase::Resolving {
                    attempt: 0,
                    why: Resolving::LostStream { stream, below },
                };
                self.partitions.insert(tp, state);
            }
        }
    }

    fn on_resolved(
        &mut self,
        tp: TopicPartition,
        outcome: Result<Option<KafkaOffset>, String>,
        out: &mut Vec<Action>,
    ) {
        let Some(mut state) = self.partitions.remove(&tp) else {
            return;
        };
        let Phase::Resolving { attempt, why } = state.phase.clone() else {
            self.partitions.insert(tp, state);
            return;
        };
        match outcome {
            Ok(highest) => {
                let from = match (&why, highest) {
                    (Resolving::LostStream { .. }, h) => state
                        .visible
                        .max(h.map(NextOffset::after).unwrap_or_default()),
                    (Resolving::MissingCheckpoint, Some(h)) => NextOffset::after(h),
                    // No row of the partition is visible: everything Kafka still has is to be
                    // written, as on a first start (a new topic of a marked table).
                    (Resolving::MissingCheckpoint, None) => state.low,
                };
                if why == Resolving::MissingCheckpoint {
                    out.push(Action::Count(Outcome::Started {
                        tp: tp.clone(),
                        case: StartCase::MissingCheckpoint,
                        at: from,
                    }));
                }
                out.push(Action::Count(Outcome::Resolved {
                    tp: tp.clone(),
                    at: from,
                }));
                state.visible = from;
                self.start_incarnation(tp, state, from, out);
            }
            Err(error) => {
                // Counted and logged every time; bounded, because a query that cannot succeed
                // (a table that requires a partition filter, a job that never completes) would
                // otherwise hold the partition in recovery forever with readiness green.
                let attempts = attempt + 1;
                out.push(Action::Count(Outcome::ResolveFailed {
                    tp: tp.clone(),
                    attempts,
                    error: error.clone(),
                }));
                if attempts < self.config.resolve_attempts {
                    out.push(Action::ResolveVisible {
                        tp: tp.clone(),
                        attempt: attempts,
                    });
                    state.phase = Phase::Resolving {
                        attempt: attempts,
                        why,
                    };
                    self.partitions.insert(tp, state);
                    return;
                }
                match (self.config.resolve_fallback, why) {
                    // Without a checkpoint there is no `f` to rewind to: only failing is safe.
                    (ResolveFallback::Fail, _) | (_, Resolving::MissingCheckpoint) => {
                        let reason = FailReason::ResolveFailed { attempts, error };
                        self.fail(tp, state, reason, out);
                    }
                    (ResolveFallback::Rewind, Resolving::LostStream { stream, below }) => {
                        out.push(Action::Count(Outcome::Rewound {
                            tp: tp.clone(),
                            stream,
                            from: state.visible,
                            to: below,
                        }));
                        let from = state.visible;
                        self.start_incarnation(tp, state, from, out);
                    }
                }
            }
        }
    }

    /// A new incarnation appends records from `from` to a stream of its own. Everything below
    /// `from` is visible (or counted lost), so `f := from`.
    fn start_incarnation(
        &mut self,
        tp: TopicPartition,
        mut state: PartitionState,
        mut from: NextOffset,
        out: &mut Vec<Action>,
    ) {
        if from < state.low {
            // Retention deleted records we never made visible: never a silent reset.
            match self.config.on_out_of_range {
                OutOfRangePolicy::Fail => {
                    let reason = FailReason::OutOfRange {
                        from,
                        low: state.low,
                    };
                    return self.fail(tp, state, reason, out);
                }
                OutOfRangePolicy::Earliest => {
                    out.push(Action::Count(Outcome::RecordsLost {
                        tp: tp.clone(),
                        from,
                        to: state.low,
                    }));
                    from = state.low;
                }
            }
        }
        self.next_incarnation += 1;
        let incarnation = Incarnation(self.next_incarnation);
        // Below `from` everything is visible, counted lost, or skipped by a named start policy;
        // a rewind starts at f itself.
        state.visible = from;
        state.progress = Acknowledged::incarnation_start(incarnation, from);
        state.committed_bytes = 0;
        state.pending = None;
        state.flush_in_flight = false;
        state.commit_failures = 0;
        state.paused = false;
        state.phase = Phase::Running;
        out.push(Action::StartIncarnation {
            tp: tp.clone(),
            incarnation,
            from,
        });
        self.partitions.insert(tp, state);
    }

    fn on_out_of_range(
        &mut self,
        tp: TopicPartition,
        incarnation: Incarnation,
        position: NextOffset,
        low: NextOffset,
        out: &mut Vec<Action>,
    ) {
        let Some(mut state) = self.partitions.remove(&tp) else {
            return;
        };
        let current = state.phase == Phase::Running
            && state.progress.incarnation() == incarnation
            && position < low;
        if !current {
            self.partitions.insert(tp, state);
            return;
        }
        state.low = state.low.max(low);
        match self.config.on_out_of_range {
            OutOfRangePolicy::Fail => {
                out.push(Action::StopWriter { tp: tp.clone() });
                self.fail(
                    tp,
                    state,
                    FailReason::OutOfRange {
                        from: position,
                        low,
                    },
                    out,
                );
            }
            OutOfRangePolicy::Earliest => {
                // The records in [position, low) are gone from Kafka and were never appended by
                // this incarnation: counted, never silent. The stream and its rows stay; the next
                // commit's K jumps over the gap, and f's meaning ("visible below it") extends to
                // "visible or counted lost".
                out.push(Action::Count(Outcome::RecordsLost {
                    tp: tp.clone(),
                    from: position,
                    to: low,
                }));
                out.push(Action::Seek {
                    tp: tp.clone(),
                    incarnation,
                    to: low,
                });
                self.partitions.insert(tp, state);
            }
        }
    }

    fn fail(
        &mut self,
        tp: TopicPartition,
        mut state: PartitionState,
        reason: FailReason,
        out: &mut Vec<Action>,
    ) {
        state.phase = Phase::Failed;
        // An isolated partition stops committing, but its last commit landed: that checkpoint's
        // flush keeps being retried, or its rows would wait for the next owner (invariant 2).
        if !matches!(reason, FailReason::Isolated { .. }) {
            state.pending = None;
        }
        out.push(Action::FailPartition {
            tp: tp.clone(),
            reason,
        });
        self.partitions.insert(tp, state);
    }

    // ---------------------------------------------------------------------------------------
    // Writer progress and the bounded tail.

    fn on_ack(&mut self, tp: TopicPartition, ack: Acknowledged, out: &mut Vec<Action>) {
        let cap = self.config.max_uncommitted_bytes;
        let Some(state) = self.partitions.get_mut(&tp) else {
            return;
        };
        let accepting = matches!(state.phase, Phase::Running | Phase::Draining { .. });
        // An ack of an earlier incarnation describes a stream nobody will flush any more.
        if !accepting
            || ack.incarnation() != state.progress.incarnation()
            || ack.next() < state.progress.next()
            || ack.rows() < state.progress.rows()
        {
            return;
        }
        state.progress = ack;
        if !state.paused && state.progress.bytes().saturating_sub(state.committed_bytes) >= cap {
            state.paused = true;
            out.push(Action::Pause { tp: tp.clone() });
            out.push(Action::Count(Outcome::Paused { tp }));
        }
    }

    // ---------------------------------------------------------------------------------------
    // The cycle (DESIGN §2 steps 1–4).

    fn start_cycle(&mut self, out: &mut Vec<Action>) {
        if self.cycle.is_some() {
            return;
        }
        if self.shutting_down {
            if self
                .partitions
                .values()
                .any(|p| matches!(p.phase, Phase::Draining { handoff: false }))
            {
                return;
            }
            if self.shutdown_rested() {
                return self.finish_shutdown(out);
            }
        }
        // Step 1, barrier: each writer's acknowledged prefix is its answer. The writer reports
        // acks as they come, so the coordinator never waits for a slow writer: a writer with
        // nothing new keeps its previous checkpoint.
        let mut cycle = Cycle::default();
        let mut unmarked = BTreeSet::new();
        for (tp, p) in &self.partitions {
            if !matches!(p.phase, Phase::Running | Phase::Stopped) {
                continue;
            }
            let c = Committable::seal(&p.progress, p.visible);
            // Idle means "no change to the checkpoint", not "offset unchanged": after a rewind
            // K comes back to its old value on another stream, and a flush that succeeded
            // changes f, which the next commit must carry.
            if p.committed.as_ref() == Some(c.checkpoint()) {
                continue;
            }
            if self.marked.contains(&p.table) {
                cycle.entries.insert(tp.clone(), c);
            } else {
                // The table must say "this group may have committed here" before any commit
                // can land: a commit whose answer is lost, followed by crashes and expired
                // offsets, would otherwise pass for a first start and lose or repeat its rows.
                // The partition commits once the marker landed.
                unmarked.insert(p.table);
            }
        }
        for table in unmarked {
            self.mark(table, out);
        }
        if cycle.entries.is_empty() {
            self.cycle = Some(cycle);
            return self.flush_phase(out);
        }
        // Step 2, prepare: one commit of offsets + metadata, handed to librdkafka under the lock
        // the revoke callback takes. Nothing is flushed before its result.
        self.next_commit += 1;
        let commit = CommitId(self.next_commit);
        let entries = cycle
            .entries
            .iter()
            .map(|(tp, c)| self.entry(tp, c))
            .collect();
        cycle.commit = Some(commit);
        cycle.worked = true;
        self.cycle = Some(cycle);
        out.push(Action::CommitOffsets { commit, entries });
    }

    fn entry(&self, tp: &TopicPartition, c: &Committable) -> CommitEntry {
        let table = self.partitions[tp].table;
        let metadata = CommitMetadata::for_checkpoint(table, c.checkpoint());
        CommitEntry {
            tp: tp.clone(),
            offset: c.checkpoint().next,
            metadata: metadata.encode(self.config.write_version),
        }
    }

    /// Writes the group's marker on `table` unless it is there or being written.
    fn mark(&mut self, table: TableFingerprint, out: &mut Vec<Action>) {
        if self.marked.contains(&table) || self.labelling.contains_key(&table) {
            return;
        }
        self.labelling.insert(table, 0);
        out.push(Action::LabelTable { table, attempt: 0 });
    }

    fn on_label_result(
        &mut self,
        table: TableFingerprint,
        outcome: Result<(), String>,
        out: &mut Vec<Action>,
    ) {
        let Some(failures) = self.labelling.remove(&table) else {
            return;
        };
        if let Err(error) = outcome {
            // Retried until it lands (with the shell's backoff): meanwhile nothing of the
            // table becomes visible, which readiness and the count make visible instead.
            let attempts = failures + 1;
            self.labelling.insert(table, attempts);
            out.push(Action::Count(Outcome::LabelFailed {
                table,
                attempts,
                error,
            }));
            out.push(Action::LabelTable {
                table,
                attempt: attempts,
            });
            return;
        }
        self.marked.insert(table);
        out.push(Action::Count(Outcome::Labelled { table }));
        // The re-flushes that waited for the marker.
        let waiting: Vec<_> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.table == table && matches!(p.phase, Phase::Marking { .. }))
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in waiting {
            let p = self.partitions.get_mut(&tp).expect("listed");
            let Phase::Marking { checkpoint } = p.phase.clone() else {
                unreachable!("listed as marking");
            };
            out.push(Action::FlushRows {
                tp: tp.clone(),
                stream: checkpoint.stream.clone().expect("a re-flush has a stream"),
                through: checkpoint.flush_to.expect("a re-flush has a flush offset"),
                purpose: FlushPurpose::Recovery,
                attempt: 0,
            });
            p.phase = Phase::Flushing {
                checkpoint,
                attempt: 0,
                not_found: 0,
            };
        }
        // The commits that waited go with the next cycle; during shutdown the final cycles
        // run back to back, so the next one starts now.
        if self.shutting_down && self.cycle.is_none() {
            self.start_cycle(out);
        }
    }

    fn on_commit_result(
        &mut self,
        commit: CommitId,
        outcome: CommitOutcome,
        out: &mut Vec<Action>,
    ) {
        if let Some((tp, _)) = self
            .partitions
            .iter()
            .find(|(_, p)| p.phase == Phase::HandoffCommitting { commit })
        {
            // The handoff commit: whatever its result, the next owner re-flushes and finalizes.
            let tp = tp.clone();
            let committed = matches!(&outcome, CommitOutcome::PerPartition(r)
                if r.iter().any(|(t, res)| *t == tp && res.is_ok()));
            out.push(Action::Count(Outcome::HandedOff {
                tp: tp.clone(),
                committed,
            }));
            return self.release(tp, out);
        }
        let Some(cycle) = self.cycle.as_mut().filter(|c| c.commit == Some(commit)) else {
            return;
        };
        cycle.commit = None;
        let entries = std::mem::take(&mut cycle.entries);
        let results = match outcome {
            CommitOutcome::Rejected(_) => {
                // A whole-request error: we do not know what landed, and the group may be moving
                // partitions away. No flush, no finalize in this cycle; the next cycle commits
                // again (a commit that landed anyway names only our own streams). It says
                // nothing about any one partition, so it does not count towards isolation.
                out.push(Action::Count(Outcome::CycleAbandoned));
                self.cycle = None;
                return self.after_cycle(false, out);
            }
            CommitOutcome::PerPartition(results) => results,
        };
        let mut failed = false;
        let mut abandoned = false;
        for (tp, c) in entries {
            let result = results.iter().find(|(t, _)| *t == tp).map_or_else(
                || Err(CommitError::Request("no answer".into())),
                |(_, r)| r.clone(),
            );
            let ok = result.is_ok();
            let Some(p) = self.partitions.get_mut(&tp) else {
                // Revoked meanwhile: the commit was handed over before the revoke and completed
                // before it (librdkafka holds the rejoin for it); nothing follows it.
                continue;
            };
            if !matches!(p.phase, Phase::Running | Phase::Stopped) {
                if ok {
                    p.committed = Some(c.checkpoint().clone());
                }
                continue;
            }
            if let Err(error) = result {
                failed = true;
                // A whole-request error (the group coordinator moving, __consumer_offsets short
                // of replicas) says nothing about this partition: isolating on it would stop
                // every partition for good after a broker hiccup. The read-back told us what
                // landed; the rest is committed again next cycle.
                if matches!(error, CommitError::Partition(_)) {
                    p.commit_failures += 1;
                } else {
                    abandoned = true;
                }
                out.push(Action::Count(Outcome::CommitFailed {
                    tp: tp.clone(),
                    error,
                }));
                continue;
            }
            p.commit_failures = 0;
            p.own_commit_landed = true;
            let old = p.committed.replace(c.checkpoint().clone());
            if let Some(old_stream) = old.and_then(|o| o.stream)
                && c.checkpoint().stream.as_ref() != Some(&old_stream)
                && !p.superseded.contains(&old_stream)
            {
                p.superseded.push(old_stream);
            }
            if c.incarnation() != p.progress.incarnation() {
                // Built from an incarnation that was restarted since (its stream was lost): the
                // commit landed, but its stream will never be flushed by us.
                continue;
            }
            p.committed_bytes = c.bytes();
            if p.paused
                && p.progress.bytes().saturating_sub(p.committed_bytes)
                    < self.config.max_uncommitted_bytes
            {
                p.paused = false;
                out.push(Action::Resume { tp: tp.clone() });
            }
            let cp = c.checkpoint();
            // The newest committed checkpoint replaces an older pending flush: on the same
            // stream its r covers the older one, and a new stream only ever starts above f.
            p.pending = match (&cp.stream, cp.flush_to) {
                (Some(stream), Some(through)) if cp.needs_flush() => Some(PendingFlush {
                    stream: stream.clone(),
                    through,
                    covers: cp.next,
                    not_found: 0,
                }),
                _ => None,
            };
        }
        let tps: Vec<_> = self.partitions.keys().cloned().collect();
        for tp in tps {
            self.finalize_superseded(&tp, out);
        }
        if let Some(cycle) = self.cycle.as_mut() {
            cycle.failed |= failed;
        }
        if abandoned {
            out.push(Action::Count(Outcome::CycleAbandoned));
        }
        self.isolate_failing(out);
        self.flush_phase(out);
    }

    /// A partition whose commit keeps failing (metadata too large, topic ACL, deleted topic) is
    /// stopped so that it cannot stall the others (F8).
    fn isolate_failing(&mut self, out: &mut Vec<Action>) {
        let limit = self.config.isolate_after_commit_failures;
        let failing: Vec<_> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.phase == Phase::Running && p.commit_failures >= limit)
            .map(|(tp, p)| (tp.clone(), p.commit_failures))
            .collect();
        for (tp, failures) in failing {
            let state = self.partitions.remove(&tp).expect("listed above");
            out.push(Action::StopWriter { tp: tp.clone() });
            if let Some(cycle) = self.cycle.as_mut() {
                cycle.flushing.remove(&tp);
            }
            self.fail(tp, state, FailReason::Isolated { failures }, out);
        }
    }

    /// Step 3: FlushRows for every committed-but-not-visible checkpoint, the ones this cycle
    /// committed and the pending ones of earlier cycles alike (also for idle partitions).
    fn flush_phase(&mut self, out: &mut Vec<Action>) {
        let Some(cycle) = self.cycle.as_mut() else {
            return;
        };
        for (tp, p) in self.partitions.iter_mut() {
            // Failed with a pending flush: isolated after its last commit landed.
            if !matches!(p.phase, Phase::Running | Phase::Stopped | Phase::Failed)
                || p.flush_in_flight
            {
                continue;
            }
            if let Some(pending) = &p.pending {
                p.flush_in_flight = true;
                cycle.worked = true;
                cycle.flushing.insert(tp.clone());
                out.push(Action::FlushRows {
                    tp: tp.clone(),
                    stream: pending.stream.clone(),
                    through: pending.through,
                    purpose: FlushPurpose::Cycle,
                    attempt: pending.not_found,
                });
            }
        }
        self.finish_cycle_if_done(out);
    }

    fn on_flush_result(
        &mut self,
        tp: TopicPartition,
        stream: StreamId,
        through: RowOffset,
        outcome: FlushOutcome,
        out: &mut Vec<Action>,
    ) {
        let not_found_retries = self.config.not_found_retries;
        let on_anomaly = self.config.on_anomaly;
        let mut lost = None;
        let mut zombie = false;
        let mut fail = None;
        if let Some(p) = self.partitions.get_mut(&tp) {
            let matches = p
                .pending
                .as_ref()
                .is_some_and(|f| f.stream == stream && f.through == through);
            if matches && let Some(cycle) = self.cycle.as_mut() {
                cycle.flushing.remove(&tp);
            }
            if matches && matches!(p.phase, Phase::Running | Phase::Stopped | Phase::Failed) {
                p.flush_in_flight = false;
                let pending = p.pending.clone().expect("matched above");
                let isolated = p.phase == Phase::Failed;
                match outcome {
                    FlushOutcome::Flushed => {
                        // Step 3 done: f := K. The next commit carries it, so an idle partition
                        // gets one more commit and rests at f == K.
                        p.visible = p.visible.max(pending.covers);
                        p.pending = None;
                        out.push(Action::Count(Outcome::Visible {
                            tp: tp.clone(),
                            through: p.visible,
                        }));
                    }
                    FlushOutcome::AlreadyExists => {
                        // Our own committed checkpoint is always the newest on its stream, so a
                        // cursor past it means someone else flushed our stream.
                        out.push(Action::Count(Outcome::Anomaly {
                            tp: tp.clone(),
                            stream: stream.clone(),
                        }));
                        match on_anomaly {
                            AnomalyPolicy::Fail => {
                                fail = Some(FailReason::Anomaly {
                                    stream: stream.clone(),
                                })
                            }
                            AnomalyPolicy::Continue => {
                                p.visible = p.visible.max(pending.covers);
                                p.pending = None;
                            }
                        }
                    }
                    // An isolated partition changes nothing but its pending flush: what else
                    // happened to the stream is for the next owner's recovery.
                    FlushOutcome::StreamFinalized | FlushOutcome::NotFound if isolated => {
                        p.pending = None;
                    }
                    FlushOutcome::StreamFinalized => zombie = true,
                    FlushOutcome::NotFound if pending.not_found >= not_found_retries => {
                        lost = Some(pending.stream.clone())
                    }
                    FlushOutcome::NotFound => {
                        p.pending.as_mut().expect("matched").not_found += 1;
                        out.push(Action::Count(Outcome::FlushRetried { tp: tp.clone() }));
                    }
                    FlushOutcome::Transient(_) | FlushOutcome::Denied(_) => {
                        // Stays pending: retried next cycle, whether or not new rows arrive.
                        out.push(Action::Count(Outcome::FlushRetried { tp: tp.clone() }));
                    }
                    FlushOutcome::Fatal(e) => fail = Some(FailReason::FlushFatal(e)),
                }
            } else if matches {
                p.flush_in_flight = false;
            }
        }
        if zombie {
            self.become_zombie(tp.clone(), out);
        } else if let Some(stream) = lost {
            self.on_stream_lost(tp.clone(), stream, out);
        } else if let Some(reason) = fail {
            out.push(Action::StopWriter { tp: tp.clone() });
            let state = self.partitions.remove(&tp).expect("present above");
            self.fail(tp.clone(), state, reason, out);
        } else {
            // Step 4, supersede-then-finalize.
            self.finalize_superseded(&tp, out);
        }
        self.finish_cycle_if_done(out);
    }

    /// Finalizes the streams of earlier incarnations once nothing durable needs them: the latest
    /// commit references another stream whose flush succeeded, or it says f == K (invariant 3).
    /// The latest commit must be one of ours that landed: a fenced process whose commits are
    /// refused believes the live owner's checkpoint, and would finalize the stream the owner
    /// is appending to.
    fn finalize_superseded(&mut self, tp: &TopicPartition, out: &mut Vec<Action>) {
        let Some(p) = self.partitions.get_mut(tp) else {
            return;
        };
        if !matches!(p.phase, Phase::Running | Phase::Stopped)
            || p.pending.is_some()
            || !p.own_commit_landed
        {
            return;
        }
        let Some(latest) = &p.committed else {
            return;
        };
        let current = p.progress.stream().cloned();
        let mut keep = Vec::new();
        for s in std::mem::take(&mut p.superseded) {
            let needed = latest.stream.as_ref() == Some(&s) && latest.needs_flush();
            if needed || current.as_ref() == Some(&s) {
                keep.push(s);
                continue;
            }
            out.push(Action::FinalizeStream {
                tp: tp.clone(),
                stream: s.clone(),
            });
            out.push(Action::Count(Outcome::Finalized {
                tp: tp.clone(),
                stream: s,
            }));
        }
        p.superseded = keep;
    }

    fn finish_cycle_if_done(&mut self, out: &mut Vec<Action>) {
        let done = self
            .cycle
            .as_ref()
            .is_some_and(|c| c.commit.is_none() && c.flushing.is_empty());
        if done {
            let cycle = self.cycle.take().expect("checked");
            self.after_cycle(cycle.worked && !cycle.failed, out);
        }
    }

    fn after_cycle(&mut self, clean: bool, out: &mut Vec<Action>) {
        if !self.shutting_down {
            return;
        }
        if self.shutdown_rested() {
            self.finish_shutdown(out);
        } else if clean {
            // The final cycles run back to back: commit, flush, commit again with f == K.
            self.start_cycle(out);
        }
    }

    // ---------------------------------------------------------------------------------------
    // A stream lost under a running writer, and zombies.

    fn on_stream_lost(&mut self, tp: TopicPartition, stream: StreamId, out: &mut Vec<Action>) {
        let Some(mut state) = self.partitions.remove(&tp) else {
            return;
        };
        // An incarnation that has no acknowledged row yet knows no stream: a stream lost under
        // it is its own first one (the shell reports only the current incarnation's writer).
        // Restarting it costs nothing, it starts again where it started.
        let ours = state.progress.stream() == Some(&stream)
            || state.progress.stream().is_none()
            || state.pending.as_ref().is_some_and(|f| f.stream == stream);
        if state.phase != Phase::Running || !ours {
            self.partitions.insert(tp, state);
            return;
        }
        out.push(Action::Count(Outcome::StreamRestarted { tp: tp.clone() }));
        if let Some(cycle) = self.cycle.as_mut() {
            cycle.flushing.remove(&tp);
        }
        state.pending = None;
        state.flush_in_flight = false;
        // Records below f are visible. If the committed checkpoint names this stream with rows
        // in doubt, the writer's word "lost" is not final: a stream whose offsets merely
        // disagree with ours (an offset conflict, review #9) is alive, and flushing the
        // committed (s, r) makes [f, K) visible exactly. So the partition recovers from its
        // checkpoint as a new owner would: re-flush, then start at K; only a re-flush that finds
        // the stream gone (and a re-read that confirms the checkpoint) reaches the lost-stream
        // policy. Without doubt, the restart keeps f as this process knows it (it may be ahead
        // of the committed f), which avoids re-delivering a window we saw flushed.
        let doubt = state
            .committed
            .clone()
            .filter(|c| c.stream.as_ref() == Some(&stream) && c.needs_flush())
            .filter(|c| state.visible < c.next);
        match doubt {
            Some(checkpoint) => {
                let through = checkpoint.flush_to.expect("a checkpoint in doubt has r");
                out.push(Action::FlushRows {
                    tp: tp.clone(),
                    stream,
                    through,
                    purpose: FlushPurpose::Recovery,
                    attempt: 0,
                });
                state.phase = Phase::Flushing {
                    checkpoint,
                    attempt: 0,
                    not_found: 0,
                };
                self.partitions.insert(tp, state);
            }
            None => {
                let from = state.visible;
                self.start_incarnation(tp, state, from, out);
            }
        }
        self.finish_cycle_if_done(out);
    }

    fn become_zombie(&mut self, tp: TopicPartition, out: &mut Vec<Action>) {
        let Some(p) = self.partitions.get_mut(&tp) else {
            return;
        };
        if !matches!(p.phase, Phase::Running | Phase::Stopped) {
            return;
        }
        // Another incarnation finalized our stream, so it owns the partition now (or an
        // operator did it). Creating a stream or committing would fight the owner: stop and
        // wait for the group to say what we own.
        p.phase = Phase::Zombie;
        p.pending = None;
        p.flush_in_flight = false;
        out.push(Action::StopWriter { tp: tp.clone() });
        out.push(Action::Count(Outcome::ZombieStopped { tp: tp.clone() }));
        if let Some(cycle) = self.cycle.as_mut() {
            cycle.flushing.remove(&tp);
        }
    }

    // ---------------------------------------------------------------------------------------
    // Handoff on revoke or loss, and shutdown.

    fn on_revoke(&mut self, tp: TopicPartition, lost: bool, out: &mut Vec<Action>) {
        let Some(p) = self.partitions.get_mut(&tp) else {
            out.push(Action::Release { tp });
            return;
        };
        if let Some(cycle) = self.cycle.as_mut() {
            // A flush already sent may still finish (idempotent, and justified by a successful
            // commit); nothing new is sent, and the cycle does not wait for it.
            cycle.flushing.remove(&tp);
        }
        p.pending = None;
        let writing = matches!(
            p.phase,
            Phase::Running | Phase::Draining { .. } | Phase::Stopped
        );
        if lost {
            // Our commit may be refused, or worse accepted on an empty group after the group
            // moved on: make none. The next owner recovers from the last commit that landed.
            if writing {
                out.push(Action::StopWriter { tp: tp.clone() });
            }
            self.release(tp, out);
        } else if p.phase == Phase::Running || p.phase == (Phase::Draining { handoff: false }) {
            p.phase = Phase::Draining { handoff: true };
            out.push(Action::StopWriter { tp });
        } else if p.phase == Phase::Stopped {
            p.phase = Phase::Draining { handoff: true };
            self.on_writer_stopped(tp, out);
        } else {
            self.release(tp, out);
        }
        self.finish_cycle_if_done(out);
    }

    fn on_writer_stopped(&mut self, tp: TopicPartition, out: &mut Vec<Action>) {
        let Some(p) = self.partitions.get_mut(&tp) else {
            return;
        };
        match p.phase {
            Phase::Draining { handoff: true } => {
                // The handoff: one commit of what is acknowledged, under the commit lock, and
                // nothing after it. No flush and no finalize: the next owner re-flushes, and
                // finalizes our stream after its own first commit.
                let c = Committable::seal(&p.progress, p.visible);
                // Without the table's marker no commit is made (see `start_cycle`); nothing of
                // ours was committed for it, so nothing is visible, and the next owner starts
                // where this incarnation did.
                if p.committed.as_ref() == Some(c.checkpoint()) || !self.marked.contains(&p.table) {
                    out.push(Action::Count(Outcome::HandedOff {
                        tp: tp.clone(),
                        committed: false,
                    }));
                    return self.release(tp, out);
                }
                self.next_commit += 1;
                let commit = CommitId(self.next_commit);
                p.phase = Phase::HandoffCommitting { commit };
                let entry = self.entry(&tp, &c);
                out.push(Action::CommitOffsets {
                    commit,
                    entries: vec![entry],
                });
            }
            Phase::Draining { handoff: false } => {
                p.phase = Phase::Stopped;
                let draining = self
                    .partitions
                    .values()
                    .any(|p| matches!(p.phase, Phase::Draining { handoff: false }));
                if !draining {
                    self.start_cycle(out);
                }
            }
            _ => {}
        }
    }

    fn release(&mut self, tp: TopicPartition, out: &mut Vec<Action>) {
        if let Some(p) = self.partitions.remove(&tp)
            && let Some(committed) = p.committed
        {
            self.remembered.insert(
                tp.clone(),
                Remembered {
                    committed,
                    visible: p.visible,
                },
            );
        }
        if let Some(cycle) = self.cycle.as_mut() {
            cycle.flushing.remove(&tp);
        }
        out.push(Action::Release { tp });
    }

    fn on_shutdown(&mut self, out: &mut Vec<Action>) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        let tps: Vec<_> = self.partitions.keys().cloned().collect();
        for tp in tps {
            let p = self.partitions.get_mut(&tp).expect("listed");
            if p.phase == Phase::Running {
                p.phase = Phase::Draining { handoff: false };
                out.push(Action::StopWriter { tp });
            } else if !matches!(
                p.phase,
                Phase::Draining { .. } | Phase::HandoffCommitting { .. }
            ) {
                // Recovering, zombie or failed: the durable checkpoint stands for the next owner.
                self.release(tp, out);
            }
        }
        if self.partitions.is_empty() {
            self.finish_shutdown(out);
        } else if !self
            .partitions
            .values()
            .any(|p| matches!(p.phase, Phase::Draining { .. }))
        {
            self.start_cycle(out);
        }
    }

    /// Every stopped partition's latest commit is its final state with f == K.
    fn shutdown_rested(&self) -> bool {
        self.partitions.values().all(|p| match p.phase {
            Phase::Stopped => {
                let c = Committable::seal(&p.progress, p.visible);
                p.committed.as_ref() == Some(c.checkpoint()) && !c.checkpoint().needs_flush()
            }
            Phase::Failed => true,
            _ => false,
        })
    }

    fn finish_shutdown(&mut self, out: &mut Vec<Action>) {
        let rested = self.shutdown_rested();
        let tps: Vec<_> = self.partitions.keys().cloned().collect();
        for tp in tps {
            let p = self.partitions.get_mut(&tp).expect("listed");
            if rested && p.phase == Phase::Stopped {
                // The latest commit says f == K, so no checkpoint needs any of these streams
                // (invariant 3); finalizing spares the next owner a recovery.
                let mut streams = if p.own_commit_landed {
                    std::mem::take(&mut p.superseded)
                } else {
                    Vec::new()
                };
                streams.extend(p.progress.stream().cloned());
                for stream in streams {
                    out.push(Action::FinalizeStream {
                        tp: tp.clone(),
                        stream: stream.clone(),
                    });
                    out.push(Action::Count(Outcome::Finalized {
                        tp: tp.clone(),
                        stream,
                    }));
                }
            }
            self.release(tp, out);
        }
        self.cycle = None;
        self.done = true;
        out.push(Action::ShutdownComplete);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::offsets::RowCount;

    fn table() -> TableFingerprint {
        TableFingerprint(0x1234)
    }

    fn tp0() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    fn sid(s: &str) -> StreamId {
        StreamId::new(s).unwrap()
    }

    fn protocol() -> CheckpointProtocol {
        CheckpointProtocol::new(ProtocolConfig::new())
    }

    fn metadata(stream: Option<&str>, r: Option<i64>, f: i64) -> Vec<u8> {
        CommitMetadata::ExactlyOnce {
            table: table(),
            stream: stream.map(sid),
            flush_to: r.map(RowOffset),
            visible_through: NextOffset(f),
        }
        .encode(MetadataVersion::CURRENT)
        .into_bytes()
    }

    /// `tp0`'s table, carrying this group's marker.
    fn routed() -> RoutedTable {
        RoutedTable {
            table: table(),
            marked: true,
        }
    }

    fn assigned(committed: Option<(i64, Vec<u8>)>, low: i64, high: i64) -> Event {
        Event::Assigned {
            tp: tp0(),
            table: routed(),
            assignment: Assignment {
                committed: committed.map(|(k, m)| CommittedRead {
                    offset: NextOffset(k),
                    metadata: m,
                }),
                low: NextOffset(low),
                high: NextOffset(high),
                origin: PartitionOrigin::Existing,
            },
        }
    }

    fn started_at(actions: &[Action]) -> Option<(Incarnation, i64)> {
        actions.iter().find_map(|a| match a {
            Action::StartIncarnation {
                incarnation, from, ..
            } => Some((*incarnation, from.0)),
            _ => None,
        })
    }

    fn failed(actions: &[Action]) -> Option<&FailReason> {
        actions.iter().find_map(|a| match a {
            Action::FailPartition { reason, .. } => Some(reason),
            _ => None,
        })
    }

    fn commit(actions: &[Action]) -> Option<(CommitId, Vec<CommitEntry>)> {
        actions.iter().find_map(|a| match a {
            Action::CommitOffsets { commit, entries } => Some((*commit, entries.clone())),
            _ => None,
        })
    }

    fn flushes(actions: &[Action]) -> Vec<(StreamId, RowOffset)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::FlushRows {
                    stream, through, ..
                } => Some((stream.clone(), *through)),
                _ => None,
            })
            .collect()
    }

    fn finalized(actions: &[Action]) -> Vec<StreamId> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::FinalizeStream { stream, .. } => Some(stream.clone()),
                _ => None,
            })
            .collect()
    }

    fn ok(commit: CommitId) -> Event {
        Event::CommitResult {
            commit,
            outcome: CommitOutcome::PerPartition(vec![(tp0(), Ok(()))]),
        }
    }

    fn ack(inc: Incarnation, stream: &str, rows: i64, next: i64) -> Event {
        Event::RowsAcknowledged {
            tp: tp0(),
            ack: Acknowledged::from_append_response(
                inc,
                sid(stream),
                RowCount(rows),
                NextOffset(next),
                rows as u64 * 10,
            ),
        }
    }

    fn flush_result(stream: &str, through: i64, outcome: FlushOutcome) -> Event {
        Event::FlushResult {
            tp: tp0(),
            stream: sid(stream),
            through: RowOffset(through),
            outcome,
        }
    }

    fn recovery_result(stream: &str, through: i64, outcome: FlushOutcome) -> Event {
        Event::RecoveryFlushResult {
            tp: tp0(),
            stream: sid(stream),
            through: RowOffset(through),
            outcome,
        }
    }

    /// A running partition at offset 10 with nothing in doubt; returns its incarnation.
    fn running(p: &mut CheckpointProtocol) -> Incarnation {
        let a = p.handle(assigned(Some((10, metadata(None, None, 10))), 0, 100));
        started_at(&a).unwrap().0
    }

    /// Appends rows 0..n (records 10..10+n) and commits them; returns the flush request.
    fn committed(p: &mut CheckpointProtocol, inc: Incarnation, n: i64) -> Vec<Action> {
        p.handle(ack(inc, "s1", n, 10 + n));
        let (id, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
        assert_eq!(entries[0].offset, NextOffset(10 + n));
        p.handle(ok(id))
    }

    #[test]
    fn a_first_start_uses_the_initial_position_and_a_lost_checkpoint_fails_closed() {
        let mut first = CheckpointProtocol::new(ProtocolConfig::new());
        let Event::Assigned { tp, assignment, .. } = assigned(None, 5, 50) else {
            unreachable!()
        };
        let unmarked = RoutedTable {
            table: table(),
            marked: false,
        };
        let a = first.handle(Event::Assigned {
            tp,
            table: unmarked,
            assignment,
        });
        assert_eq!(started_at(&a).unwrap().1, 5);
        assert!(a.contains(&Action::Count(Outcome::Started {
            tp: tp0(),
            case: StartCase::FirstStart,
            at: NextOffset(5)
        })));

        // The table says this group committed before: its offsets expired.
        let a = protocol().handle(assigned(None, 5, 50));
        assert_eq!(failed(&a), Some(&FailReason::CheckpointMissing));
        assert!(started_at(&a).is_none());
    }

    #[test]
    fn a_partition_added_at_runtime_starts_at_the_earliest_offset() {
        let a = protocol().handle(Event::Assigned {
            tp: tp0(),
            table: routed(),
            assignment: Assignment {
                committed: None,
                low: NextOffset(0),
                high: NextOffset(7),
                origin: PartitionOrigin::AddedAtRuntime,
            },
        });
        assert_eq!(started_at(&a).unwrap().1, 0);
    }

    #[test]
    fn unreadable_or_foreign_checkpoints_fail_closed() {
        let raw = b"kbq;v=9;f=1".to_vec();
        let a = protocol().handle(assigned(Some((10, raw)), 0, 20));
        assert!(
            matches!(failed(&a), Some(FailReason::Metadata(MetadataError::UnknownVersion { raw, .. })) if raw == "kbq;v=9;f=1")
        );
        let other = CommitMetadata::AtLeastOnce {
            table: TableFingerprint(7),
        }
        .encode(MetadataVersion::CURRENT)
        .into_bytes();
        let a = protocol().handle(assigned(Some((10, other)), 0, 20));
        assert!(matches!(failed(&a), Some(FailReason::ForeignTable { .. })));
        let a = protocol().handle(assigned(Some((30, metadata(None, None, 30))), 0, 20));
        assert!(matches!(
            failed(&a),
            Some(FailReason::AboveHighWatermark { .. })
        ));
    }

    #[test]
    fn an_operator_reset_starts_at_the_reset_offset() {
        let a = protocol().handle(assigned(Some((12, Vec::new())), 0, 20));
        assert_eq!(started_at(&a).unwrap().1, 12);
        assert!(a.iter().any(|x| matches!(
            x,
            Action::Count(Outcome::Started {
                case: StartCase::OperatorReset,
                ..
            })
        )));
    }

    #[test]
    fn a_checkpoint_below_the_log_start_is_never_reset_silently() {
        let a = protocol().handle(assigned(Some((3, metadata(None, None, 3))), 8, 20));
        assert_eq!(
            failed(&a),
            Some(&FailReason::OutOfRange {
                from: NextOffset(3),
                low: NextOffset(8)
            })
        );
        let mut config = ProtocolConfig::new();
        config.on_out_of_range = OutOfRangePolicy::Earliest;
        let a = CheckpointProtocol::new(config).handle(assigned(
            Some((3, metadata(None, None, 3))),
            8,
            20,
        ));
        assert_eq!(started_at(&a).unwrap().1, 8);
        assert!(a.contains(&Action::Count(Outcome::RecordsLost {
            tp: tp0(),
            from: NextOffset(3),
            to: NextOffset(8)
        })));
    }

    #[test]
    fn recovery_re_flushes_before_anything_is_appended() {
        let mut p = protocol();
        let a = p.handle(assigned(
            Some((20, metadata(Some("old"), Some(9), 10))),
            0,
            30,
        ));
        assert_eq!(flushes(&a), vec![(sid("old"), RowOffset(9))]);
        assert!(started_at(&a).is_none(), "no writer before the re-flush");
        // A transient error retries with backoff, never rewinds.
        let a = p.handle(recovery_result(
            "old",
            9,
            FlushOutcome::Transient("unavailable".into()),
        ));
        assert!(
            a.iter()
                .any(|x| matches!(x, Action::FlushRows { attempt: 1, .. }))
        );
        let a = p.handle(recovery_result("old", 9, FlushOutcome::Flushed));
        assert_eq!(started_at(&a).unwrap().1, 20);
        // The old stream is finalized only after a commit that no longer needs it.
        assert!(finalized(&a).is_empty());
        let (id, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
        assert_eq!(entries[0].offset, NextOffset(20));
        assert_eq!(
            CommitMetadata::parse(entries[0].metadata.as_bytes()).unwrap(),
            CommitMetadata::parse(&metadata(None, None, 20)).unwrap(),
            "an idle recovered partition rests at f == K"
        );
        assert_eq!(finalized(&p.handle(ok(id))), vec![sid("old")]);
    }

    #[test]
    fn a_checkpoint_at_rest_needs_no_flush_even_if_its_stream_is_gone() {
        let a = protocol().handle(assigned(
            Some((20, metadata(Some("old"), Some(9), 20))),
            0,
            30,
        ));
        assert!(flushes(&a).is_empty());
        assert_eq!(started_at(&a).unwrap().1, 20);
    }

    #[test]
    fn already_exists_on_re_flush_is_an_anomaly() {
        let mut p = protocol();
        p.handle(assigned(
            Some((20, metadata(Some("old"), Some(9), 10))),
            0,
            30,
        ));
        let a = p.handle(recovery_result("old", 9, FlushOutcome::AlreadyExists));
        assert!(matches!(failed(&a), Some(FailReason::Anomaly { .. })));
        let mut config = ProtocolConfig::new();
        config.on_anomaly = AnomalyPolicy::Continue;
        let mut p = CheckpointProtocol::new(config);
        p.handle(assigned(
            Some((20, metadata(Some("old"), Some(9), 10))),
            0,
            30,
        ));
        let a = p.handle(recovery_result("old", 9, FlushOutcome::AlreadyExists));
        assert_eq!(started_at(&a).unwrap().1, 20);
        assert!(
            a.iter()
                .any(|x| matches!(x, Action::Count(Outcome::Anomaly { .. })))
        );
    }

    fn unchanged_reread() -> Event {
        let Event::Assigned { tp, assignment, .. } =
            assigned(Some((20, metadata(Some("old"), Some(9), 10))), 0, 30)
        else {
            unreachable!()
        };
        Event::CheckpointReread { tp, assignment }
    }

    #[test]
    fn a_stream_finalized_by_a_newer_owner_is_not_a_lost_stream() {
        // A zombie recovering a checkpoint that the new owner has superseded meanwhile: the
        // re-read shows the newer checkpoint, so there is nothing to rewind.
        let mut p = protocol();
        p.handle(assigned(
            Some((20, metadata(Some("old"), Some(9), 10))),
            0,
            30,
        ));
        p.handle(recovery_result("old", 9, FlushOutcome::StreamFinalized));
        let Event::Assigned { tp, assignment, .. } =
            assigned(Some((24, metadata(None, None, 24))), 0, 30)
        else {
            unreachable!()
        };
        let a = p.handle(Event::CheckpointReread { tp, assignment });
        assert_eq!(started_at(&a).unwrap().1, 24);
        assert!(
            !a.iter()
                .any(|x| matches!(x, Action::Count(Outcome::Rewound { .. })))
        );
        assert!(a.contains(&Action::Count(Outcome::CheckpointMoved { tp: tp0() })));
    }

    #[test]
    fn a_lost_stream_follows_the_policy_and_other_errors_never_rewind() {
        // rewind (default): NOT_FOUND is retried first, then [f, K) is re-delivered, counted.
        let mut p = protocol();
        p.handle(assigned(
            Some((20, metadata(Some("old"), Some(9), 10))),
            0,
            30,
        ));
        for _ in 0..3 {
            let a = p.handle(recovery_result("old", 9, FlushOutcome::NotFound));
            assert!(!flushes(&a).is_empty(), "not found can be transient");
        }
        let a = p.handle(recovery_result("old", 9, FlushOutcome::NotFound));
        assert_eq!(a, vec![Action::ReadCommitted { tp: tp0() }]);
        let a = p.handle(unchanged_reread());
        assert_eq!(started_at(&a).unwrap().1, 10);
        assert!(a.contains(&Action::Count(Outcome::Rewound {
            tp: tp0(),
            stream: sid("old"),
            from: NextOffset(10),
            to: NextOffset(20)
        })));

        // resolve: continue after the highest visible offset.
        let mut config = ProtocolConfig::new();
        config.lost_stream = LostStreamPolicy::Resolve;
        let mut p = CheckpointProtocol::new(config.clone());
        p.handle(assigned(
            Some((20, metadata(Some("old"), Some(9), 10))),
            0,
            30,
        ));
        p.handle(recovery_result("old", 9, FlushOutcome::StreamFinalized));
        let a = p.handle(unchanged_reread());
        assert!(a.iter().any(|x| matches!(x, Action::ResolveVisible { .. })));
        let a = p.handle(Event::ResolveResult {
            tp: tp0(),
            outcome: Ok(Some(KafkaOffset(14))),
        });
        assert_eq!(started_at(&a).unwrap().1, 15);

        // fail
        config.lost_stream = LostStreamPolicy::Fail;
        let mut p = CheckpointProtocol::new(config);
        p.handle(assigned(
            Some((20, metadata(Some("old"), Some(9), 10))),
            0,
            30,
        ));
        p.handle(recovery_result("old", 9, FlushOutcome::StreamFinalized));
        let a = p.handle(unchanged_reread());
        assert!(matches!(failed(&a), Some(FailReason::LostStream { .. })));

        // credentials or corrupt metadata: fail closed, never rewind.
        let mut p = protocol();
        p.handle(assigned(
            Some((20, metadata(Some("old"), Some(9), 10))),
            0,
            30,
        ));
        let a = p.handle(recovery_result(
            "old",
            9,
            FlushOutcome::Fatal("permission denied".into()),
        ));
        assert!(matches!(failed(&a), Some(FailReason::FlushFatal(_))));
        assert!(started_at(&a).is_none());
    }

    /// `lost_offsets: resolve` (review #11): a partition without a committed offset in a marked
    /// table continues after its highest visible row, or at the log start when none is visible
    /// (a new topic routed to the table), and fails when the query keeps failing, even with
    /// `resolve_fallback: rewind` (there is no `f` to rewind to).
    #[test]
    fn a_missing_checkpoint_resolves_where_the_table_says() {
        let mut config = ProtocolConfig::new();
        config.on_missing_checkpoint = MissingCheckpointPolicy::Resolve;
        config.resolve_attempts = 2;
        config.resolve_fallback = ResolveFallback::Rewind;
        let resolved = |outcome: Result<Option<KafkaOffset>, String>| Event::ResolveResult {
            tp: tp0(),
            outcome,
        };

        // Rows up to offset 14 are visible: continue at 15, counted as a missing checkpoint.
        let mut p = CheckpointProtocol::new(config.clone());
        let a = p.handle(assigned(None, 5, 30));
        assert!(a.iter().any(|x| matches!(x, Action::ResolveVisible { .. })));
        assert!(started_at(&a).is_none(), "nothing starts before the answer");
        let a = p.handle(resolved(Ok(Some(KafkaOffset(14)))));
        assert_eq!(started_at(&a).unwrap().1, 15);
        assert!(a.iter().any(|x| matches!(
            x,
            Action::Count(Outcome::Started {
                case: StartCase::MissingCheckpoint,
                at: NextOffset(15),
                ..
            })
        )));

        // Nothing visible: everything Kafka still has, from the log start.
        let mut p = CheckpointProtocol::new(config.clone());
        p.handle(assigned(None, 5, 30));
        let a = p.handle(resolved(Ok(None)));
        assert_eq!(started_at(&a).unwrap().1, 5);

        // Visible rows end below the log start: records were lost, out_of_range decides.
        let mut p = CheckpointProtocol::new(config.clone());
        p.handle(assigned(None, 5, 30));
        let a = p.handle(resolved(Ok(Some(KafkaOffset(2)))));
        assert!(matches!(failed(&a), Some(FailReason::OutOfRange { .. })));

        // The query keeps failing: fail, never a guess.
        let mut p = CheckpointProtocol::new(config);
        p.handle(assigned(None, 5, 30));
        let a = p.handle(resolved(Err("query failed".into())));
        assert!(
            a.iter()
                .any(|x| matches!(x, Action::ResolveVisible { attempt: 1, .. }))
        );
        let a = p.handle(resolved(Err("query failed".into())));
        assert!(matches!(failed(&a), Some(FailReason::ResolveFailed { .. })));
        assert!(started_at(&a).is_none());
    }

    #[test]
    fn nothing_is_flushed_before_its_commit_succeeds() {
        let mut p = protocol();
        let inc = running(&mut p);
        p.handle(ack(inc, "s1", 3, 13));
        let a = p.handle(Event::StartCycle);
        assert!(flushes(&a).is_empty());
        let (id, _) = commit(&a).unwrap();
        // A whole-request error abandons the cycle: no flush, no finalize.
        let a = p.handle(Event::CommitResult {
            commit: id,
            outcome: CommitOutcome::Rejected("rebalance in progress".into()),
        });
        assert!(flushes(&a).is_empty() && finalized(&a).is_empty());
        let (id, _) = commit(&p.handle(Event::StartCycle)).unwrap();
        assert_eq!(flushes(&p.handle(ok(id))), vec![(sid("s1"), RowOffset(2))]);
    }

    #[test]
    fn a_failed_flush_is_retried_every_cycle_and_an_idle_partition_rests_at_f_equals_k() {
        let mut p = protocol();
        let inc = running(&mut p);
        let a = committed(&mut p, inc, 3);
        assert_eq!(flushes(&a), vec![(sid("s1"), RowOffset(2))]);
        p.handle(flush_result(
            "s1",
            2,
            FlushOutcome::Transient("deadline".into()),
        ));
        // No new rows: the next cycle commits nothing and retries the flush.
        let a = p.handle(Event::StartCycle);
        assert!(commit(&a).is_none());
        assert_eq!(flushes(&a), vec![(sid("s1"), RowOffset(2))]);
        p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
        // One more commit carries f == K; then the partition rests.
        let (id, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
        assert!(entries[0].metadata.ends_with(";f=13"));
        assert!(flushes(&p.handle(ok(id))).is_empty());
        assert_eq!(p.handle(Event::StartCycle), vec![]);
    }

    #[test]
    fn a_partition_whose_commit_keeps_failing_is_isolated() {
        let mut p = protocol();
        let inc = running(&mut p);
        p.handle(ack(inc, "s1", 3, 13));
        for n in 1..=5 {
            let (id, _) = commit(&p.handle(Event::StartCycle)).unwrap();
            let a = p.handle(Event::CommitResult {
                commit: id,
                outcome: CommitOutcome::PerPartition(vec![(
                    tp0(),
                    Err(CommitError::Partition("too large".into())),
                )]),
            });
            assert!(flushes(&a).is_empty());
            if n == 5 {
                assert_eq!(failed(&a), Some(&FailReason::Isolated { failures: 5 }));
                assert!(a.contains(&Action::StopWriter { tp: tp0() }));
            } else {
                assert!(failed(&a).is_none());
            }
        }
    }

    /// A cycle answered per partition with `error`.
    fn refused(commit: CommitId, error: CommitError) -> Event {
        Event::CommitResult {
            commit,
            outcome: CommitOutcome::PerPartition(vec![(tp0(), Err(error))]),
        }
    }

    #[test]
    fn whole_request_commit_errors_are_not_counted_and_the_pending_flush_is_retried() {
        let mut p = protocol();
        let inc = running(&mut p);
        let a = committed(&mut p, inc, 3);
        assert_eq!(flushes(&a), vec![(sid("s1"), RowOffset(2))]);
        p.handle(flush_result("s1", 2, FlushOutcome::Transient("x".into())));
        p.handle(ack(inc, "s1", 5, 15));
        // __consumer_offsets short of replicas for longer than five cycles.
        for _ in 0..8 {
            let a = p.handle(Event::StartCycle);
            let (id, _) = commit(&a).unwrap();
            let a = p.handle(refused(
                id,
                CommitError::Request("NOT_ENOUGH_REPLICAS".into()),
            ));
            assert!(failed(&a).is_none(), "a request error never isolates");
            assert!(a.contains(&Action::Count(Outcome::CycleAbandoned)));
            assert_eq!(
                flushes(&a),
                vec![(sid("s1"), RowOffset(2))],
                "the landed checkpoint's flush is still retried"
            );
            p.handle(flush_result("s1", 2, FlushOutcome::Transient("x".into())));
        }
        assert!(p.is_running(&tp0()));
    }

    #[test]
    fn an_isolated_partition_keeps_retrying_the_flush_of_its_last_landed_commit() {
        let mut p = protocol();
        let inc = running(&mut p);
        committed(&mut p, inc, 3);
        p.handle(flush_result("s1", 2, FlushOutcome::Transient("x".into())));
        p.handle(ack(inc, "s1", 5, 15));
        let mut last = Vec::new();
        for _ in 0..5 {
            let (id, _) = commit(&p.handle(Event::StartCycle)).unwrap();
            last = p.handle(refused(id, CommitError::Partition("too large".into())));
            p.handle(flush_result("s1", 2, FlushOutcome::Transient("x".into())));
        }
        assert_eq!(failed(&last), Some(&FailReason::Isolated { failures: 5 }));
        assert_eq!(flushes(&last), vec![(sid("s1"), RowOffset(2))]);
        // The partition commits nothing any more, but the checkpoint that landed is made
        // visible: every cycle retries its flush.
        let a = p.handle(Event::StartCycle);
        assert!(commit(&a).is_none());
        assert_eq!(flushes(&a), vec![(sid("s1"), RowOffset(2))]);
        let a = p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
        assert!(a.contains(&Action::Count(Outcome::Visible {
            tp: tp0(),
            through: NextOffset(13)
        })));
        assert!(flushes(&p.handle(Event::StartCycle)).is_empty());
    }

    #[test]
    fn a_fenced_member_does_not_finalize_the_stream_of_a_checkpoint_it_only_read() {
        let mut a = protocol();
        // A reads B's resting checkpoint, which names B's current stream "sB".
        a.handle(assigned(
            Some((20, metadata(Some("sB"), Some(9), 20))),
            0,
            30,
        ));
        let (id, _) = commit(&a.handle(Event::StartCycle)).unwrap();
        let out = a.handle(refused(
            id,
            CommitError::Request("UNKNOWN_MEMBER_ID".into()),
        ));
        assert!(
            finalized(&out).is_empty(),
            "nothing is finalized before a commit of ours lands"
        );
        // Once a commit of ours lands, B's stream is no longer referenced: finalized.
        let (id, _) = commit(&a.handle(Event::StartCycle)).unwrap();
        assert_eq!(finalized(&a.handle(ok(id))), vec![sid("sB")]);
    }

    fn unmarked_assignment(committed: Option<(i64, Vec<u8>)>) -> Event {
        let Event::Assigned { tp, assignment, .. } = assigned(committed, 0, 30) else {
            unreachable!()
        };
        Event::Assigned {
            tp,
            table: RoutedTable {
                table: table(),
                marked: false,
            },
            assignment,
        }
    }

    fn labelled(outcome: Result<(), String>) -> Event {
        Event::LabelResult {
            table: table(),
            outcome,
        }
    }

    #[test]
    fn a_recovery_re_flush_waits_until_the_table_carries_the_marker() {
        let mut p = protocol();
        let a = p.handle(unmarked_assignment(Some((
            20,
            metadata(Some("old"), Some(9), 10),
        ))));
        assert!(flushes(&a).is_empty(), "no row visible before the marker");
        assert!(a.contains(&Action::LabelTable {
            table: table(),
            attempt: 0
        }));
        // The label write fails: counted, retried with backoff, still nothing flushed.
        let a = p.handle(labelled(Err("403 tables.update".into())));
        assert!(flushes(&a).is_empty());
        assert!(a.contains(&Action::LabelTable {
            table: table(),
            attempt: 1
        }));
        assert!(
            a.iter()
                .any(|x| matches!(x, Action::Count(Outcome::LabelFailed { attempts: 1, .. })))
        );
        let a = p.handle(labelled(Ok(())));
        assert_eq!(flushes(&a), vec![(sid("old"), RowOffset(9))]);
        assert!(a.contains(&Action::Count(Outcome::Labelled { table: table() })));
        let a = p.handle(recovery_result("old", 9, FlushOutcome::Flushed));
        assert_eq!(started_at(&a).map(|s| s.1), Some(20));
    }

    #[test]
    fn the_first_commit_of_a_table_waits_until_the_table_carries_the_marker() {
        let mut p = protocol();
        let a = p.handle(unmarked_assignment(None));
        let inc = started_at(&a).unwrap().0;
        p.handle(ack(inc, "s1", 3, 3));
        let a = p.handle(Event::StartCycle);
        assert!(commit(&a).is_none(), "no commit before the marker");
        assert_eq!(
            a.iter()
                .filter(|x| matches!(x, Action::LabelTable { .. }))
                .collect::<Vec<_>>(),
            vec![&Action::LabelTable {
                table: table(),
                attempt: 0
            }]
        );
        // While it is being written, cycles neither commit nor write it again.
        let a = p.handle(Event::StartCycle);
        assert!(commit(&a).is_none());
        assert!(!a.iter().any(|x| matches!(x, Action::LabelTable { .. })));
        // It landed: the waiting partition commits with the next cycle, then flushes.
        assert!(commit(&p.handle(labelled(Ok(())))).is_none());
        let (id, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
        assert_eq!(entries[0].offset, NextOffset(3));
        assert_eq!(flushes(&p.handle(ok(id))), vec![(sid("s1"), RowOffset(2))]);
        // Marked once: later commits write no marker.
        p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
        let a = p.handle(Event::StartCycle);
        assert!(commit(&a).is_some());
        assert!(!a.iter().any(|x| matches!(x, Action::LabelTable { .. })));
    }

    #[test]
    fn a_handoff_without_the_marker_commits_nothing() {
        let mut p = protocol();
        let a = p.handle(unmarked_assignment(None));
        let inc = started_at(&a).unwrap().0;
        p.handle(ack(inc, "s1", 3, 3));
        p.handle(Event::RevokeBegan {
            tp: tp0(),
            lost: false,
        });
        let a = p.handle(Event::WriterStopped { tp: tp0() });
        assert!(commit(&a).is_none());
        assert!(a.contains(&Action::Release { tp: tp0() }));
    }

    #[test]
    fn a_zombie_before_the_first_acknowledgement_stops_and_asks_the_group() {
        let mut p = protocol();
        running(&mut p);
        let a = p.handle(Event::ZombieDetected {
            tp: tp0(),
            stream: sid("s1"),
        });
        assert!(a.contains(&Action::StopWriter { tp: tp0() }));
        assert!(a.contains(&Action::Count(Outcome::ZombieStopped { tp: tp0() })));
        assert!(p.is_zombie(&tp0()));
    }

    #[test]
    fn the_handoff_commits_once_and_then_nothing() {
        let mut p = protocol();
        let inc = running(&mut p);
        committed(&mut p, inc, 3);
        p.handle(ack(inc, "s1", 5, 15));
        let a = p.handle(Event::RevokeBegan {
            tp: tp0(),
            lost: false,
        });
        assert_eq!(a, vec![Action::StopWriter { tp: tp0() }]);
        // Acks of the drained appends still count.
        p.handle(ack(inc, "s1", 6, 16));
        let a = p.handle(Event::WriterStopped { tp: tp0() });
        let (id, entries) = commit(&a).unwrap();
        assert_eq!(entries[0].offset, NextOffset(16));
        assert!(entries[0].metadata.contains(";s=s1;") && entries[0].metadata.contains(";r=5;"));
        let a = p.handle(ok(id));
        assert!(a.contains(&Action::Release { tp: tp0() }));
        assert!(flushes(&a).is_empty() && finalized(&a).is_empty());
        // The flush of the earlier cycle answers late: nothing follows from it.
        let a = p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
        assert!(flushes(&a).is_empty() && finalized(&a).is_empty() && commit(&a).is_none());
        assert_eq!(p.handle(Event::StartCycle), vec![]);
    }

    #[test]
    fn a_lost_assignment_commits_nothing() {
        let mut p = protocol();
        let inc = running(&mut p);
        p.handle(ack(inc, "s1", 3, 13));
        let a = p.handle(Event::RevokeBegan {
            tp: tp0(),
            lost: true,
        });
        assert!(commit(&a).is_none());
        assert!(a.contains(&Action::Release { tp: tp0() }));
    }

    #[test]
    fn a_zombie_stops_and_creates_nothing() {
        let mut p = protocol();
        let inc = running(&mut p);
        committed(&mut p, inc, 3);
        let a = p.handle(Event::ZombieDetected {
            tp: tp0(),
            stream: sid("s1"),
        });
        assert!(a.contains(&Action::StopWriter { tp: tp0() }));
        assert!(started_at(&a).is_none());
        p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
        assert_eq!(p.handle(Event::StartCycle), vec![]);
    }

    #[test]
    fn the_uncommitted_tail_is_bounded() {
        let mut config = ProtocolConfig::new();
        config.max_uncommitted_bytes = 50;
        let mut p = CheckpointProtocol::new(config);
        let inc = running(&mut p);
        assert!(p.handle(ack(inc, "s1", 4, 14)).is_empty());
        assert!(
            p.handle(ack(inc, "s1", 5, 15))
                .contains(&Action::Pause { tp: tp0() })
        );
        let (id, _) = commit(&p.handle(Event::StartCycle)).unwrap();
        assert!(p.handle(ok(id)).contains(&Action::Resume { tp: tp0() }));
    }

    #[test]
    fn a_lost_stream_restarts_the_incarnation_keeping_the_known_f() {
        let mut p = protocol();
        let inc = running(&mut p);
        committed(&mut p, inc, 3);
        p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
        p.handle(ack(inc, "s1", 5, 15));
        // The committed f is still 10, but this process saw the flush through 13 succeed.
        let a = p.handle(Event::StreamLost {
            tp: tp0(),
            stream: sid("s1"),
        });
        let (inc2, from) = started_at(&a).unwrap();
        assert_eq!(from, 13);
        assert_ne!(inc2, inc);
        assert!(
            !a.iter()
                .any(|x| matches!(x, Action::Count(Outcome::Rewound { .. })))
        );
        // A late ack of the old incarnation is not progress of the new one.
        p.handle(ack(inc, "s1", 6, 16));
        let (_, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
        assert_eq!(entries[0].offset, NextOffset(13));
    }

    /// Review #9: a writer that gives its stream up on an offset conflict reports it lost, but
    /// the stream is alive. The committed rows in doubt are re-flushed and the partition goes on
    /// at K, exactly; only a re-flush that finds the stream gone, confirmed by a re-read, reaches
    /// the lost-stream policy (a rewind, counted).
    #[test]
    fn a_stream_given_up_with_rows_in_doubt_is_re_flushed_before_anything_is_rewound() {
        let mut p = protocol();
        let inc = running(&mut p);
        committed(&mut p, inc, 3);
        // The cycle's flush of (s1, 2) has not come back when the writer gives up on s1.
        let a = p.handle(Event::StreamLost {
            tp: tp0(),
            stream: sid("s1"),
        });
        assert!(
            started_at(&a).is_none(),
            "nothing restarts before the re-flush"
        );
        assert!(a.iter().any(|x| matches!(
            x,
            Action::FlushRows {
                purpose: FlushPurpose::Recovery,
                through: RowOffset(2),
                ..
            }
        )));
        let a = p.handle(recovery_result("s1", 2, FlushOutcome::Flushed));
        let (inc2, from) = started_at(&a).expect("restarted");
        assert_ne!(inc2, inc);
        assert_eq!(from, 13, "the committed K: [10, 13) is visible now");
        assert!(
            !a.iter()
                .any(|x| matches!(x, Action::Count(Outcome::Rewound { .. })))
        );

        // Gone for real: the re-flush finds it finalized, the re-read confirms the checkpoint,
        // and the policy (rewind by default) re-delivers from f, counted.
        let mut p = protocol();
        let inc = running(&mut p);
        committed(&mut p, inc, 3);
        p.handle(Event::StreamLost {
            tp: tp0(),
            stream: sid("s1"),
        });
        let a = p.handle(recovery_result("s1", 2, FlushOutcome::StreamFinalized));
        assert!(a.contains(&Action::ReadCommitted { tp: tp0() }));
        let a = p.handle(Event::CheckpointReread {
            tp: tp0(),
            assignment: Assignment {
                committed: Some(CommittedRead {
                    offset: NextOffset(13),
                    metadata: metadata(Some("s1"), Some(2), 10),
                }),
                low: NextOffset(0),
                high: NextOffset(100),
                origin: PartitionOrigin::Existing,
            },
        });
        assert_eq!(started_at(&a).expect("rewound").1, 10);
        assert!(
            a.iter()
                .any(|x| matches!(x, Action::Count(Outcome::Rewound { .. })))
        );
    }

    #[test]
    fn a_stream_lost_before_its_first_acknowledged_row_restarts_where_the_incarnation_began() {
        let mut p = protocol();
        let inc = running(&mut p);
        // The writer's first append on its new stream failed for good (e.g. ALREADY_EXISTS on a
        // request sent once): no row of it was ever acknowledged.
        let a = p.handle(Event::StreamLost {
            tp: tp0(),
            stream: sid("s1"),
        });
        let (inc2, from) = started_at(&a).expect("a new incarnation, not a stall");
        assert_ne!(inc2, inc);
        assert_eq!(from, 10);
        assert!(
            !a.iter()
                .any(|x| matches!(x, Action::Count(Outcome::Rewound { .. })))
        );
        p.handle(ack(inc2, "s2", 2, 12));
        let (_, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
        assert_eq!(entries[0].offset, NextOffset(12));
    }

    #[test]
    fn sigterm_runs_the_final_cycle_and_finalizes() {
        let mut p = protocol();
        let inc = running(&mut p);
        p.handle(ack(inc, "s1", 3, 13));
        let a = p.handle(Event::Shutdown);
        assert_eq!(a, vec![Action::StopWriter { tp: tp0() }]);
        let (id, _) = commit(&p.handle(Event::WriterStopped { tp: tp0() })).unwrap();
        let a = p.handle(ok(id));
        assert_eq!(flushes(&a), vec![(sid("s1"), RowOffset(2))]);
        let (id, entries) =
            commit(&p.handle(flush_result("s1", 2, FlushOutcome::Flushed))).unwrap();
        assert!(entries[0].metadata.ends_with(";f=13"));
        let a = p.handle(ok(id));
        assert_eq!(finalized(&a), vec![sid("s1")]);
        assert_eq!(a.last(), Some(&Action::ShutdownComplete));
    }

    #[test]
    fn each_partition_checkpoints_against_the_table_of_its_route() {
        // Two topics routed to two tables: each commit carries its own table's fingerprint, a
        // checkpoint of table A found for a partition now routed to table B is foreign, and a
        // partition commits once its own table is marked.
        let (a_table, b_table) = (TableFingerprint(0xa), TableFingerprint(0xb));
        let (a_tp, b_tp) = (TopicPartition::new("a", 0), TopicPartition::new("b", 0));
        let mut p = CheckpointProtocol::new(ProtocolConfig::new());
        let start = |p: &mut CheckpointProtocol, tp: &TopicPartition, table| {
            let a = p.handle(Event::Assigned {
                tp: tp.clone(),
                table: RoutedTable {
                    table,
                    marked: false,
                },
                assignment: Assignment {
                    committed: None,
                    low: NextOffset(0),
                    high: NextOffset(5),
                    origin: PartitionOrigin::Existing,
                },
            });
            started_at(&a).expect("a first start").0
        };
        let inc_a = start(&mut p, &a_tp, a_table);
        start(&mut p, &b_tp, b_table);
        p.handle(Event::RowsAcknowledged {
            tp: a_tp.clone(),
            ack: Acknowledged::from_append_response(
                inc_a,
                sid("sa"),
                RowCount(2),
                NextOffset(2),
                20,
            ),
        });
        // Neither table is marked: the cycle writes both markers and commits nothing.
        let a = p.handle(Event::StartCycle);
        assert!(commit(&a).is_none());
        let labelled: Vec<_> = a
            .iter()
            .filter_map(|x| match x {
                Action::LabelTable { table, .. } => Some(*table),
                _ => None,
            })
            .collect();
        assert_eq!(labelled, vec![a_table, b_table]);
        // Table A is marked first: only its partition commits.
        let landed = |table| Event::LabelResult {
            table,
            outcome: Ok(()),
        };
        p.handle(landed(a_table));
        let (id, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
        assert_eq!(
            entries.iter().map(|e| &e.tp).collect::<Vec<_>>(),
            vec![&a_tp]
        );
        p.handle(landed(b_table));
        p.handle(Event::CommitResult {
            commit: id,
            outcome: CommitOutcome::PerPartition(vec![(a_tp.clone(), Ok(()))]),
        });
        p.handle(Event::FlushResult {
            tp: a_tp.clone(),
            stream: sid("sa"),
            through: RowOffset(1),
            outcome: FlushOutcome::Flushed,
        });
        let (_, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
        assert_eq!(entries.len(), 2);
        for e in &entries {
            let expected = if e.tp == a_tp { a_table } else { b_table };
            let parsed = CommitMetadata::parse(e.metadata.as_bytes()).unwrap();
            assert!(
                matches!(parsed, CommitMetadata::ExactlyOnce { table, .. } if table == expected),
                "{}: {}",
                e.tp,
                e.metadata
            );
        }

        // The same checkpoint of table A read for a partition routed to table B.
        let found = CommitMetadata::ExactlyOnce {
            table: a_table,
            stream: Some(sid("sa")),
            flush_to: Some(RowOffset(1)),
            visible_through: NextOffset(0),
        }
        .encode(MetadataVersion::CURRENT)
        .into_bytes();
        let a = CheckpointProtocol::new(ProtocolConfig::new()).handle(Event::Assigned {
            tp: a_tp,
            table: RoutedTable {
                table: b_table,
                marked: true,
            },
            assignment: Assignment {
                committed: Some(CommittedRead {
                    offset: NextOffset(2),
                    metadata: found,
                }),
                low: NextOffset(0),
                high: NextOffset(5),
                origin: PartitionOrigin::Existing,
            },
        });
        assert_eq!(
            failed(&a),
            Some(&FailReason::ForeignTable { found: a_table })
        );
        assert!(flushes(&a).is_empty());
    }
}
