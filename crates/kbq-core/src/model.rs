//! The vocabulary every part of the sink shares about Kafka: partitions, committed offsets as
//! read, assignments and commits. The protocol, the consumer and the coordinator all speak it;
//! none of them owns it.

use crate::metadata::TableFingerprint;
use crate::offsets::NextOffset;
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
pub struct CommitEntry {
    pub tp: TopicPartition,
    pub offset: NextOffset,
    pub metadata: String,
}
