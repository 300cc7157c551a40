//! The consumer thread's interface: the commands the coordinator sends it, the events it reports,
//! and the handle that owns the thread.

use std::collections::BTreeMap;
use std::sync::{Arc, mpsc as std_mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::kafka::committed::ConsumerFaults;
use crate::kafka::memory_budget::MemoryBudget;
use crate::ops::metrics::Metrics;
use kbq_core::offsets::NextOffset;
use kbq_core::protocol::{Assignment, CommitEntry, CommitId, CommitOutcome, TopicPartition};

use super::record::Record;

/// What the consumer thread tells the coordinator.
#[derive(Debug)]
pub enum ConsumerEvent {
    /// New partitions, paused, with what Kafka holds for them. Nothing flows for a partition
    /// until the coordinator answers with [`ConsumerCommand::Start`]. `Err`: the committed
    /// offset or the watermarks could not be read (a coordinator loading, a leader away): the
    /// partition is owned but unknown; ask again with [`ConsumerCommand::ReadAssignment`].
    Assigned(Vec<(TopicPartition, Result<Assignment, String>)>),
    /// Answer to [`ConsumerCommand::ReadAssignment`] for a partition still owned.
    AssignmentRead {
        tp: TopicPartition,
        result: Result<Assignment, String>,
    },
    /// A revoke (or loss) began; the callback now serves commands until every partition is
    /// released or `deadline` passes. Answer first with [`ConsumerCommand::RevokeSeen`].
    RevokeBegan {
        partitions: Vec<TopicPartition>,
        lost: bool,
    },
    /// The handoff deadline passed inside the callback: these partitions were not released.
    HandoffDeadline(Vec<TopicPartition>),
    CommitDone {
        commit: CommitId,
        outcome: CommitOutcome,
    },
    /// Answer to [`ConsumerCommand::ReadCommitted`].
    Reread {
        tp: TopicPartition,
        assignment: Assignment,
    },
    /// [`ConsumerCommand::ReadCommitted`] failed (timeout, stale member epoch): ask again later.
    RereadFailed { tp: TopicPartition, reason: String },
    /// Answer to [`ConsumerCommand::ConfirmOwnership`]: `tp` is still in this member's
    /// assignment, which is not lost; what Kafka holds for it now.
    OwnershipConfirmed {
        tp: TopicPartition,
        assignment: Assignment,
    },
    /// Answer to [`ConsumerCommand::ConfirmOwnership`]: the question could not be answered now
    /// (the committed offset could not be read); ask again later.
    OwnershipUnknown { tp: TopicPartition, reason: String },
    /// The seek of a [`ConsumerCommand::Start`] or [`ConsumerCommand::Seek`] could not be made
    /// after its retries: nothing of `tp` is dispatched, and the partition stays paused.
    SeekFailed { tp: TopicPartition, reason: String },
    /// librdkafka stopped fetching a started partition because its position `position` is
    /// below the log start `low` (`auto.offset.reset=error`): retention deleted records that
    /// were not handled yet.
    OffsetOutOfRange {
        tp: TopicPartition,
        position: NextOffset,
        low: NextOffset,
    },
    /// Where each owned partition stands, read every statistics interval: what readiness
    /// needs to see a partition that does not move while records wait.
    Loads(Vec<PartitionLoad>),
    /// The consumer hit an error it cannot continue after (e.g. authentication).
    Fatal(String),
    /// The thread ended (after [`ConsumerCommand::Shutdown`]).
    Closed,
}

/// What the coordinator asks the consumer thread to do.
#[derive(Debug)]
pub enum ConsumerCommand {
    /// Seek `tp` to `from`, send its records to `sink`, resume it.
    Start {
        tp: TopicPartition,
        from: NextOffset,
        sink: mpsc::Sender<Record>,
    },
    /// Move `tp`'s fetch position to `to` (same writer; stashed records are dropped).
    Seek {
        tp: TopicPartition,
        to: NextOffset,
    },
    /// Stop dispatching records of `tp` (its writer is stopping) and pause it.
    Stop {
        tp: TopicPartition,
    },
    Pause {
        tp: TopicPartition,
    },
    Resume {
        tp: TopicPartition,
    },
    /// The coordinator fed the revoke to the protocol: commits from now on were built after it.
    RevokeSeen,
    Commit {
        commit: CommitId,
        entries: Vec<CommitEntry>,
    },
    /// Read the committed offset, metadata and watermarks of `tp` again.
    ReadCommitted {
        tp: TopicPartition,
    },
    /// Read what [`ConsumerEvent::Assigned`] could not, for a partition still owned; answered
    /// with [`ConsumerEvent::AssignmentRead`].
    ReadAssignment {
        tp: TopicPartition,
    },
    /// A zombie's question to the group: is `tp` still ours? Answered with
    /// [`ConsumerEvent::OwnershipConfirmed`] when it is; when it is not, the revoke or loss
    /// that follows (or came) answers it.
    ConfirmOwnership {
        tp: TopicPartition,
    },
    /// The protocol is done with a revoked partition.
    Release {
        tp: TopicPartition,
    },
    /// Leave the group and end the thread.
    Shutdown,
}

/// One partition's high watermark and how far the consumer thread got towards it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionLoad {
    pub tp: TopicPartition,
    /// The high watermark (the last stable offset under `read_committed`).
    pub high: NextOffset,
    /// The consumer's position: past every record polled and every transaction marker
    /// librdkafka skipped (`None`: not known since the last seek).
    pub fetched: Option<NextOffset>,
    /// After the last record handed to (or stashed for) the partition's writer.
    pub dispatched: Option<NextOffset>,
}

/// Settings of the consumer thread.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// librdkafka properties, the sink's forced ones already applied.
    pub properties: BTreeMap<String, String>,
    pub topics: Vec<String>,
    /// Topics never consumed, even when assigned: the dead-letter topic, which a pattern
    /// subscription may match (`Config::excluded_topics`).
    pub excluded_topics: Vec<String>,
    /// Longest time one revoke callback may take (counts against `max.poll.interval.ms`).
    pub handoff_deadline: Duration,
    /// Timeout of the blocking Kafka calls (commit, committed offsets, watermarks).
    pub request_timeout: Duration,
    /// Records kept per paused partition before the thread stops taking more of it.
    pub max_stash_records: usize,
    /// Where librdkafka's statistics go: consumer lag per partition and group membership.
    pub metrics: Option<Arc<Metrics>>,
    /// `writer.memory_limit`; `None` leaves the records uncharged (tests, tools).
    pub memory: Option<Arc<MemoryBudget>>,
    /// Whether records carry their headers (a headers column, dead-lettering). librdkafka
    /// parses a message's headers on every request, allocating even when there are none, so
    /// a sink that never uses them does not ask.
    pub read_headers: bool,
    /// Faults injected by tests (none in production).
    pub faults: Arc<ConsumerFaults>,
}

/// The handle the coordinator holds.
pub struct ConsumerHandle {
    pub(super) commands: std_mpsc::Sender<ConsumerCommand>,
    pub(super) thread: Option<JoinHandle<()>>,
}

impl ConsumerHandle {
    pub fn send(&self, command: ConsumerCommand) -> bool {
        self.commands.send(command).is_ok()
    }

    /// A sender for commands issued later (e.g. a retry after a backoff).
    pub fn sender(&self) -> std_mpsc::Sender<ConsumerCommand> {
        self.commands.clone()
    }

    /// A handle whose commands go to `commands` and that has no thread (the deterministic
    /// simulation, `crates/kbq-sim`, plays the consumer thread's part).
    #[cfg(feature = "testing")]
    pub fn detached(commands: std_mpsc::Sender<ConsumerCommand>) -> ConsumerHandle {
        ConsumerHandle {
            commands,
            thread: None,
        }
    }

    /// Waits for the thread to end (after `Shutdown`), on a blocking-friendly thread.
    pub fn join(mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
