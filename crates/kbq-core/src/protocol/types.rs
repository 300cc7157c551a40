//! The protocol's policies and configuration, and its language: the events it is fed, the
//! actions it emits, the outcomes it counts and the reasons it fails a partition for.

use super::MarkerRequests;
use crate::metadata::{MetadataError, MetadataVersion, TableFingerprint};
use crate::model::{
    Assignment, CommitEntry, CommitError, CommitId, CommitOutcome, RoutedTable, TopicPartition,
};
use crate::offsets::{Acknowledged, Incarnation, KafkaOffset, NextOffset, RowOffset, StreamId};
use serde::Deserialize;

/// `recovery.lost_stream`: what to do when the stream of a checkpoint with `f < K` is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LostStreamPolicy {
    /// Ask the table for the highest visible offset of the partition and continue after it: exact.
    Resolve,
    /// Seek to `f` and re-deliver `[f, K)`: at-least-once for that window, counted.
    Rewind,
    /// Stop the partition.
    Fail,
}

/// `recovery.resolve_fallback`: what `resolve` does when its query keeps failing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResolveFallback {
    /// Stop the partition (exactness kept, availability lost).
    Fail,
    /// Re-deliver the window, as `rewind` does: at-least-once for it, counted.
    Rewind,
}

/// `recovery.on_anomaly`: what to do when a re-flush says the cursor is already past `r`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyPolicy {
    Fail,
    Continue,
}

/// `recovery.start_from` and `recovery.new_partitions`: where a partition without a checkpoint
/// starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartFrom {
    Earliest,
    Latest,
}

/// `recovery.lost_offsets`: what to do when a group that has committed before finds no committed
/// offset for a partition (Kafka expired the group's offsets, or the partition never committed
/// while its table was already marked: a new topic routed to a marked table, or a sibling
/// partition that committed first; docs/operations.md, "Missing checkpoints").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissingCheckpointPolicy {
    Fail,
    Earliest,
    Latest,
    /// Ask the table for the partition's highest visible offset and continue after it (from the
    /// log start when it has none): exact whatever the cause, as for a lost stream.
    Resolve,
}

/// `recovery.on_out_of_range`: what to do when the start position is below the log start
/// (retention deleted records).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutOfRangePolicy {
    Fail,
    /// Continue at the log start; the deleted range is reported as lost (`Outcome::RecordsLost`).
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
    /// NOT_FOUND can be transient (docs/architecture.md#bigquery-facts): retry this often before
    /// calling a stream gone.
    pub not_found_retries: u32,
    /// Failed `resolve` queries (with the shell's backoff) before `resolve_fallback` applies.
    pub resolve_attempts: u32,
    pub resolve_fallback: ResolveFallback,
    /// Appended-but-uncommitted bytes per partition before it is paused.
    pub max_uncommitted_bytes: u64,
}

impl ProtocolConfig {
    /// The protocol's own defaults (the daemon's come from its config: docs/guarantee.md, "Recovery
    /// policies").
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

/// Result of one FlushRows, classified by the BigQuery client (docs/architecture.md#the-re-flush).
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
    /// being rotated passes, so it is retried as a transient error; the shell keeps
    /// readiness false meanwhile (docs/architecture.md#failure-policies).
    Denied(String),
    /// OUT_OF_RANGE, other INVALID_ARGUMENT: never rewind.
    Fatal(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `tp` is assigned and its topic's route resolved: its checkpoints belong to `table`.
    Assigned {
        tp: TopicPartition,
        table: RoutedTable,
        assignment: Assignment,
        /// The machine's [`MarkerRequests`] when the shell received the committed offset (it
        /// was read before): a marker asked for from then on tells nothing of that read.
        /// [`MarkerRequests::ALL`] when unknown.
        read_at: MarkerRequests,
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

impl FlushPurpose {
    /// The event that answers an [`Action::FlushRows`] made for this purpose: the one mapping of a
    /// FlushRows answer to the protocol, for the shell and the model test alike.
    pub fn answer(
        self,
        tp: TopicPartition,
        stream: StreamId,
        through: RowOffset,
        outcome: FlushOutcome,
    ) -> Event {
        match self {
            FlushPurpose::Recovery => Event::RecoveryFlushResult {
                tp,
                stream,
                through,
                outcome,
            },
            FlushPurpose::Cycle => Event::FlushResult {
                tp,
                stream,
                through,
                outcome,
            },
        }
    }
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
