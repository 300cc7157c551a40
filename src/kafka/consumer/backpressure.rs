//! Backpressure: dispatching records to their writers' outlets, pausing a partition whose writer is full or
//! whose share of the memory budget is used up, and the stashes of records polled meanwhile.

use std::collections::VecDeque;
use std::hash::Hasher;
use std::sync::Arc;

use bytes::BytesMut;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::BorrowedMessage;
use tokio::sync::mpsc;

use crate::checkpoint::offsets::NextOffset;
use crate::checkpoint::protocol::TopicPartition;
use crate::kafka::committed::tpl_of;
use crate::kafka::memory_budget::PartitionBudget;

use super::Shared;
use super::commands::ConsumerSettings;
use super::rebalance::SinkContext;
use super::record::{Record, record_of};

/// A multiply-rotate hash for the table of outlets (keyed by partition), looked up once per
/// message: SipHash's resistance to chosen keys buys nothing for this member's own assignment,
/// and its cost showed in the consumer thread's profile.
#[derive(Default)]
pub(super) struct PartitionHasher(u64);

impl PartitionHasher {
    #[inline]
    pub(super) fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for PartitionHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let mut tail = [0u8; 8];
        let rest = chunks.remainder();
        tail[..rest.len()].copy_from_slice(rest);
        self.add(u64::from_le_bytes(tail) ^ ((rest.len() as u64) << 59));
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_i32(&mut self, i: i32) {
        self.add(i as u32 as u64);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // The table indexes by the low bits, which the multiply mixes least: fold the high
        // bits into them.
        self.0 ^ (self.0 >> 32)
    }
}

/// Where a started partition's records go: its writer's channel, the chunk they are copied
/// into, their memory account. (Not a config route: that is a topic's table, `tables::Route`.)
pub(super) struct Outlet {
    pub(super) sink: mpsc::Sender<Record>,
    /// The tail of the chunk this partition's next records are copied into.
    pub(super) arena: BytesMut,
    /// Its account in the memory budget (a new one per `Start`).
    pub(super) account: Option<Arc<PartitionBudget>>,
    /// After the last record dispatched (0: none yet).
    pub(super) next: NextOffset,
}

impl Shared {
    pub(super) fn pause(&mut self, consumer: &BaseConsumer<SinkContext>, tp: &TopicPartition) {
        if self.paused.insert(tp.clone())
            && let Err(e) = consumer.pause(&tpl_of(std::slice::from_ref(tp)))
        {
            tracing::warn!(partition = %tp, error = %e, "pause failed");
        }
    }

    /// Resumes `tp` when nothing holds it back: it has an outlet, no stash, is not paused by
    /// the coordinator and is under its share of the memory budget.
    pub(super) fn settle(&mut self, consumer: &BaseConsumer<SinkContext>, tp: &TopicPartition) {
        let run = self.outlets.contains_key(tp)
            && self.stashes.get(tp).is_none_or(VecDeque::is_empty)
            && !self.ordered_paused.contains(tp)
            && !self.capped.contains(tp);
        if run {
            self.resume(consumer, tp);
        }
    }

    pub(super) fn resume(&mut self, consumer: &BaseConsumer<SinkContext>, tp: &TopicPartition) {
        if self.paused.remove(tp)
            && let Err(e) = consumer.resume(&tpl_of(std::slice::from_ref(tp)))
        {
            tracing::warn!(partition = %tp, error = %e, "resume failed");
        }
    }

    /// Hands a newly polled message to its writer (or its stash when the writer is full, pausing
    /// the partition); pauses a partition that holds its share cap of the memory budget.
    pub(super) fn dispatch(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        tp: &TopicPartition,
        message: &BorrowedMessage<'_>,
    ) {
        let partitions = self.outlets.len();
        let Some(outlet) = self.outlets.get_mut(tp) else {
            // Not started (recovering) or stopping: the partition is paused and will be sought
            // to its start offset, so a prefetched record can be dropped.
            return;
        };
        let record = record_of(
            message,
            outlet.account.as_ref(),
            settings.read_headers,
            &mut outlet.arena,
        );
        outlet.next = NextOffset::after(record.offset);
        let capped = match (&settings.memory, &outlet.account) {
            (Some(budget), Some(account)) => budget.over_cap(account, partitions),
            _ => false,
        };
        // Most of the time no partition has a stash: skip the lookup then.
        let stashed = if self.stashes.is_empty() {
            None
        } else {
            self.stashes.get_mut(tp)
        };
        let stash = match stashed {
            Some(stash) if !stash.is_empty() => {
                stash.push_back(record);
                stash
            }
            _ => match outlet.sink.try_send(record) {
                Ok(()) => {
                    if capped {
                        self.capped.insert(tp.clone());
                        self.pause(consumer, tp);
                    }
                    return;
                }
                Err(mpsc::error::TrySendError::Full(record)) => {
                    let stash = self.stashes.entry(tp.clone()).or_default();
                    stash.push_back(record);
                    stash
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.outlets.remove(tp);
                    return;
                }
            },
        };
        let full = stash.len() >= settings.max_stash_records.max(1);
        if capped {
            self.capped.insert(tp.clone());
        }
        if full || capped || !self.paused.contains(tp) {
            self.pause(consumer, tp);
        }
    }

    /// Resumes the partitions paused for their share cap that are back under half of it.
    pub(super) fn uncap(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
    ) {
        let Some(budget) = &settings.memory else {
            return;
        };
        if self.capped.is_empty() {
            return;
        }
        let partitions = self.outlets.len();
        let ready: Vec<TopicPartition> = self
            .capped
            .iter()
            .filter(|tp| {
                self.outlets
                    .get(*tp)
                    .and_then(|r| r.account.as_ref())
                    .is_none_or(|a| budget.back_under_cap(a, partitions))
            })
            .cloned()
            .collect();
        for tp in ready {
            self.capped.remove(&tp);
            self.settle(consumer, &tp);
        }
    }

    /// Moves stashed records into writers with room; resumes partitions whose stash emptied.
    pub(super) fn drain_stashes(&mut self, consumer: &BaseConsumer<SinkContext>) {
        let mut emptied = Vec::new();
        for (tp, stash) in self.stashes.iter_mut() {
            let Some(Outlet { sink, .. }) = self.outlets.get(tp) else {
                continue;
            };
            while let Some(record) = stash.pop_front() {
                match sink.try_send(record) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(record)) => {
                        stash.push_front(record);
                        break;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        stash.clear();
                        break;
                    }
                }
            }
            if stash.is_empty() {
                emptied.push(tp.clone());
            }
        }
        for tp in emptied {
            self.stashes.remove(&tp);
            self.settle(consumer, &tp);
        }
    }
}
