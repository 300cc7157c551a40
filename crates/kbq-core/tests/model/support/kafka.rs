//! The model tests' Kafka (`model.rs`): per partition a log with a start that
//! retention moves and an end that producers move, a committed offset with its metadata; a
//! consumer group of members, a generation and an owner per partition. As the real group
//! coordinator, a commit is checked against the member's generation only, never against which
//! partitions the member owns (docs/architecture.md#invariants, 4); a commit can fail for one
//! partition and land for the others. How the group moves partitions is each model's own: the
//! revoke callback serves a different machine in each.

// Each model test uses its own part of this file.
#![allow(dead_code)]

use super::model::PARTITIONS;
use kbq_core::metadata::CommitMetadata;
use kbq_core::offsets::NextOffset;
use kbq_core::protocol::{Assignment, CommittedRead, PartitionOrigin};
use std::collections::BTreeSet;

#[derive(Debug, Default)]
pub struct Kafka {
    /// Per partition: the first offset retention kept, and the end of the log.
    pub low: [i64; PARTITIONS],
    pub high: [i64; PARTITIONS],
    /// Per partition: the committed offset and its metadata.
    pub committed: [Option<(i64, String)>; PARTITIONS],
    pub generation: u64,
    pub members: BTreeSet<usize>,
    pub owner: [Option<usize>; PARTITIONS],
    /// Armed per-partition commit failures (OFFSET_METADATA_TOO_LARGE, ACL): how many commits
    /// of the partition fail next.
    pub fail_next_commits: [u32; PARTITIONS],
}

impl Kafka {
    /// Every partition's log holds `initial` records, nothing is committed, no one is a member.
    pub fn new(initial: i64) -> Self {
        Kafka {
            high: [initial; PARTITIONS],
            ..Kafka::default()
        }
    }

    pub fn committed_read(&self, p: usize) -> Option<CommittedRead> {
        self.committed[p].as_ref().map(|(k, m)| CommittedRead {
            offset: NextOffset(*k),
            metadata: m.clone().into_bytes(),
        })
    }

    /// The committed offset of `p` and its metadata, parsed.
    pub fn durable(&self, p: usize) -> Option<(i64, CommitMetadata)> {
        self.committed[p].as_ref().map(|(k, m)| {
            (
                *k,
                CommitMetadata::parse(m.as_bytes()).expect("the model only stores valid metadata"),
            )
        })
    }

    /// What the consumer reads when it is assigned `p`.
    pub fn assignment(&self, p: usize) -> Assignment {
        Assignment {
            committed: self.committed_read(p),
            low: NextOffset(self.low[p]),
            high: NextOffset(self.high[p]),
            origin: PartitionOrigin::Existing,
        }
    }

    /// Whether the next commit of `p` fails (an armed failure fires once).
    pub fn commit_fails(&mut self, p: usize) -> bool {
        let armed = self.fail_next_commits[p] > 0;
        if armed {
            self.fail_next_commits[p] -= 1;
        }
        armed
    }

    /// The group stayed empty past `offsets.retention.minutes`: Kafka drops every committed
    /// offset and its metadata. Which partitions had one.
    pub fn expire_offsets(&mut self) -> [bool; PARTITIONS] {
        let mut had = [false; PARTITIONS];
        if self.members.is_empty() {
            for p in 0..PARTITIONS {
                had[p] = self.committed[p].take().is_some();
            }
        }
        had
    }
}
