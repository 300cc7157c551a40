//! Backpressure: dispatching records to their writers' outlets, pausing a partition whose writer
//! is full or whose share of the memory budget is used up, and the stashes of records polled
//! meanwhile. A type of its own, given librdkafka only as [`Fetch`], so that every pause and
//! resume decision is unit-tested without a broker (the tests at the end of this file).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use bytes::BytesMut;
use rdkafka::consumer::{BaseConsumer, Consumer};
use tokio::sync::mpsc;

use crate::kafka::committed::tpl_of;
use crate::kafka::memory_budget::{MemoryBudget, PartitionBudget};
use kbq_core::model::TopicPartition;
use kbq_core::offsets::NextOffset;

use super::rebalance::SinkContext;
use super::record::Record;

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

/// Where librdkafka's fetching of a partition is switched: the consumer itself in the daemon, a
/// recorder in the unit tests.
pub(super) trait Fetch {
    fn pause(&self, tp: &TopicPartition);
    fn resume(&self, tp: &TopicPartition);
}

impl Fetch for BaseConsumer<SinkContext> {
    fn pause(&self, tp: &TopicPartition) {
        if let Err(e) = Consumer::pause(self, &tpl_of(std::slice::from_ref(tp))) {
            tracing::warn!(partition = %tp, error = %e, "pause failed");
        }
    }

    fn resume(&self, tp: &TopicPartition) {
        if let Err(e) = Consumer::resume(self, &tpl_of(std::slice::from_ref(tp))) {
            tracing::warn!(partition = %tp, error = %e, "resume failed");
        }
    }
}

/// The started partitions' outlets and what holds each of them back. A partition is fetched
/// only when nothing does: it has an outlet, no stash, no pause ordered by the coordinator, and
/// it is under its share cap of the memory budget.
#[derive(Default)]
pub(super) struct Backpressure {
    outlets: HashMap<TopicPartition, Outlet, BuildHasherDefault<PartitionHasher>>,
    /// Records polled while their writer's channel was full, in offset order: librdkafka resumes
    /// a paused partition from the application's position, so dropping them would lose them.
    stashes: HashMap<TopicPartition, VecDeque<Record>>,
    /// Partitions paused in librdkafka now, for whatever reason.
    paused: BTreeSet<TopicPartition>,
    /// Paused by the coordinator (`Pause`, e.g. the uncommitted-bytes cap) until it resumes them.
    ordered_paused: BTreeSet<TopicPartition>,
    /// Paused because they hold their share cap of the memory budget.
    capped: BTreeSet<TopicPartition>,
}

impl Backpressure {
    pub(super) fn outlet(&self, tp: &TopicPartition) -> Option<&Outlet> {
        self.outlets.get(tp)
    }

    /// The partitions with an outlet (started and not stopped).
    pub(super) fn started(&self) -> impl Iterator<Item = &TopicPartition> {
        self.outlets.keys()
    }

    pub(super) fn partitions(&self) -> usize {
        self.outlets.len()
    }

    /// Newly assigned partitions, which the assign callback paused in librdkafka as one list.
    pub(super) fn assigned_paused(&mut self, partitions: &[TopicPartition]) {
        self.paused.extend(partitions.iter().cloned());
    }

    /// A `Start`: whatever `tp` had before is dropped; it stays paused until [`Self::open`].
    pub(super) fn start(&mut self, tp: &TopicPartition) {
        self.outlets.remove(tp);
        self.stashes.remove(tp);
        self.ordered_paused.remove(tp);
        self.capped.remove(tp);
    }

    /// A `Seek`: the stash (records after the old position) is dropped and the coordinator's
    /// pause lifted; the outlet is handed back to be opened again after the seek.
    pub(super) fn seek(&mut self, tp: &TopicPartition) -> Option<Outlet> {
        self.stashes.remove(tp);
        self.ordered_paused.remove(tp);
        self.outlets.remove(tp)
    }

    /// `tp` is sought to its position: it gets `outlet` (if any) and resumes unless held back.
    pub(super) fn open(&mut self, fetch: &impl Fetch, tp: &TopicPartition, outlet: Option<Outlet>) {
        if let Some(outlet) = outlet {
            self.outlets.insert(tp.clone(), outlet);
        }
        self.settle(fetch, tp);
    }

    /// A `Stop`: nothing more of `tp` is dispatched, and it is paused.
    pub(super) fn stop(&mut self, fetch: &impl Fetch, tp: &TopicPartition) {
        self.outlets.remove(tp);
        self.stashes.remove(tp);
        self.capped.remove(tp);
        self.pause(fetch, tp);
    }

    /// A revoke: the writer gets its stop from the coordinator; from here on nothing more of
    /// `tp` is dispatched.
    pub(super) fn revoke(&mut self, tp: &TopicPartition) {
        self.outlets.remove(tp);
        self.stashes.remove(tp);
        self.ordered_paused.remove(tp);
        self.capped.remove(tp);
    }

    /// The revoke callback returned: librdkafka no longer holds `tp`.
    pub(super) fn released(&mut self, tp: &TopicPartition) {
        self.paused.remove(tp);
    }

    /// The coordinator's `Pause`.
    pub(super) fn order_pause(&mut self, fetch: &impl Fetch, tp: &TopicPartition) {
        self.ordered_paused.insert(tp.clone());
        self.pause(fetch, tp);
    }

    /// The coordinator's `Resume`: resumes `tp` unless something else holds it back.
    pub(super) fn order_resume(&mut self, fetch: &impl Fetch, tp: &TopicPartition) {
        self.ordered_paused.remove(tp);
        self.settle(fetch, tp);
    }

    pub(super) fn pause(&mut self, fetch: &impl Fetch, tp: &TopicPartition) {
        if self.paused.insert(tp.clone()) {
            fetch.pause(tp);
        }
    }

    /// Resumes `tp` when nothing holds it back: it has an outlet, no stash, is not paused by
    /// the coordinator and is under its share of the memory budget.
    fn settle(&mut self, fetch: &impl Fetch, tp: &TopicPartition) {
        let run = self.outlets.contains_key(tp)
            && self.stashes.get(tp).is_none_or(VecDeque::is_empty)
            && !self.ordered_paused.contains(tp)
            && !self.capped.contains(tp);
        if run && self.paused.remove(tp) {
            fetch.resume(tp);
        }
    }

    /// Hands a newly polled message of `tp` to its writer, made into a record by `copy` (which
    /// gets the outlet's chunk and account), or to its stash when the writer is full or earlier
    /// records wait there, pausing the partition; pauses a partition that holds its share cap
    /// of `memory`. A partition without an outlet (recovering or stopping) is paused and will be
    /// sought to its start offset, so the message is dropped uncopied.
    pub(super) fn dispatch(
        &mut self,
        fetch: &impl Fetch,
        memory: Option<&MemoryBudget>,
        max_stash_records: usize,
        tp: &TopicPartition,
        copy: impl FnOnce(&mut Outlet) -> Record,
    ) {
        let partitions = self.outlets.len();
        let Some(outlet) = self.outlets.get_mut(tp) else {
            return;
        };
        let record = copy(outlet);
        outlet.next = NextOffset::after(record.offset);
        let capped = match (memory, &outlet.account) {
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
                        self.pause(fetch, tp);
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
        let full = stash.len() >= max_stash_records.max(1);
        if capped {
            self.capped.insert(tp.clone());
        }
        if full || capped || !self.paused.contains(tp) {
            self.pause(fetch, tp);
        }
    }

    /// Resumes the partitions paused for their share cap that are back under half of it.
    pub(super) fn uncap(&mut self, fetch: &impl Fetch, memory: Option<&MemoryBudget>) {
        let Some(budget) = memory else {
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
            self.settle(fetch, &tp);
        }
    }

    /// Moves stashed records into writers with room; resumes partitions whose stash emptied.
    pub(super) fn drain_stashes(&mut self, fetch: &impl Fetch) {
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
            self.settle(fetch, &tp);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use prometheus_client::metrics::gauge::Gauge;

    use super::*;
    use kbq_core::offsets::KafkaOffset;

    /// Records what librdkafka would be told.
    #[derive(Default)]
    struct Recorder(RefCell<Vec<String>>);

    impl Fetch for Recorder {
        fn pause(&self, tp: &TopicPartition) {
            self.0.borrow_mut().push(format!("pause {}", tp.partition));
        }
        fn resume(&self, tp: &TopicPartition) {
            self.0.borrow_mut().push(format!("resume {}", tp.partition));
        }
    }

    impl Recorder {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut self.0.borrow_mut())
        }
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    fn outlet(
        capacity: usize,
        account: Option<Arc<PartitionBudget>>,
    ) -> (Outlet, mpsc::Receiver<Record>) {
        let (sink, rx) = mpsc::channel(capacity);
        let outlet = Outlet {
            sink,
            arena: BytesMut::new(),
            account,
            next: NextOffset::default(),
        };
        (outlet, rx)
    }

    /// A record at `offset`, charged `charge` bytes to the outlet's account.
    fn record(offset: i64, charge: usize) -> impl FnOnce(&mut Outlet) -> Record {
        move |outlet: &mut Outlet| {
            let mut r = Record::new(
                KafkaOffset(offset),
                None,
                None,
                Some(b"v"),
                Vec::new(),
                &mut outlet.arena,
            );
            if let Some(account) = &outlet.account {
                r.charge = account.charge(charge);
            }
            r
        }
    }

    /// A started partition, as `seek_and_open` leaves it: paused during the seek, then opened.
    fn started(flow: &mut Backpressure, fetch: &Recorder, p: i32, outlet: Outlet) {
        flow.pause(fetch, &tp(p));
        flow.open(fetch, &tp(p), Some(outlet));
    }

    fn offsets(rx: &mut mpsc::Receiver<Record>) -> Vec<i64> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|r| r.offset.0)
            .collect()
    }

    #[test]
    fn a_full_writer_stashes_in_order_and_pauses_until_its_stash_is_handed_over() {
        let (fetch, mut flow) = (Recorder::default(), Backpressure::default());
        let (o, mut rx) = outlet(1, None);
        started(&mut flow, &fetch, 0, o);
        assert_eq!(fetch.take(), ["pause 0", "resume 0"]);

        flow.dispatch(&fetch, None, 100, &tp(0), record(0, 0));
        flow.dispatch(&fetch, None, 100, &tp(0), record(1, 0));
        assert_eq!(fetch.take(), ["pause 0"], "the writer is full: paused");
        assert_eq!(offsets(&mut rx), [0]);
        // The channel has room now, but record 1 waits in the stash: 2 goes behind it.
        flow.dispatch(&fetch, None, 100, &tp(0), record(2, 0));
        assert_eq!(fetch.take(), Vec::<String>::new(), "paused once, not again");
        flow.drain_stashes(&fetch);
        assert_eq!(
            fetch.take(),
            Vec::<String>::new(),
            "record 2 is still stashed"
        );
        assert_eq!(offsets(&mut rx), [1]);
        flow.drain_stashes(&fetch);
        assert_eq!(
            fetch.take(),
            ["resume 0"],
            "the stash is empty: fetching again"
        );
        assert_eq!(offsets(&mut rx), [2]);
        assert_eq!(flow.outlet(&tp(0)).map(|o| o.next), Some(NextOffset(3)));
    }

    #[test]
    fn a_partition_paused_by_the_coordinator_stays_paused_when_its_stash_empties() {
        let (fetch, mut flow) = (Recorder::default(), Backpressure::default());
        let (o, mut rx) = outlet(1, None);
        started(&mut flow, &fetch, 0, o);
        flow.dispatch(&fetch, None, 100, &tp(0), record(0, 0));
        flow.dispatch(&fetch, None, 100, &tp(0), record(1, 0));
        flow.order_pause(&fetch, &tp(0));
        fetch.take();
        assert_eq!(offsets(&mut rx), [0]);
        flow.drain_stashes(&fetch);
        assert_eq!(offsets(&mut rx), [1]);
        assert_eq!(
            fetch.take(),
            Vec::<String>::new(),
            "held by the coordinator"
        );
        flow.order_resume(&fetch, &tp(0));
        assert_eq!(fetch.take(), ["resume 0"]);
    }

    #[test]
    fn a_coordinators_resume_does_not_release_a_partition_that_still_has_a_stash() {
        let (fetch, mut flow) = (Recorder::default(), Backpressure::default());
        let (o, mut rx) = outlet(1, None);
        started(&mut flow, &fetch, 0, o);
        flow.order_pause(&fetch, &tp(0));
        flow.dispatch(&fetch, None, 100, &tp(0), record(0, 0));
        flow.dispatch(&fetch, None, 100, &tp(0), record(1, 0));
        fetch.take();
        flow.order_resume(&fetch, &tp(0));
        assert_eq!(
            fetch.take(),
            Vec::<String>::new(),
            "record 1 is still stashed"
        );
        assert_eq!(offsets(&mut rx), [0]);
        flow.drain_stashes(&fetch);
        assert_eq!(fetch.take(), ["resume 0"]);
    }

    #[test]
    fn a_partition_over_its_share_cap_is_paused_until_back_under_half_of_it() {
        let (fetch, mut flow) = (Recorder::default(), Backpressure::default());
        // Two partitions of a 1,000-byte budget: each may hold 750 bytes.
        let budget = MemoryBudget::new(1000, Gauge::default());
        let (a, mut rx_a) = outlet(8, Some(budget.partition()));
        let (b, _rx_b) = outlet(8, Some(budget.partition()));
        started(&mut flow, &fetch, 0, a);
        started(&mut flow, &fetch, 1, b);
        fetch.take();

        flow.dispatch(&fetch, Some(&budget), 100, &tp(0), record(0, 500));
        assert_eq!(
            fetch.take(),
            Vec::<String>::new(),
            "500 of 750: under the cap"
        );
        flow.dispatch(&fetch, Some(&budget), 100, &tp(0), record(1, 300));
        assert_eq!(fetch.take(), ["pause 0"], "800 of 750: capped");
        let mut held = std::iter::from_fn(|| rx_a.try_recv().ok()).collect::<Vec<_>>();
        flow.uncap(&fetch, Some(&budget));
        assert_eq!(fetch.take(), Vec::<String>::new(), "still 800 held");
        held.pop(); // record 1 acknowledged: 500 left, not under half the cap (375)
        flow.uncap(&fetch, Some(&budget));
        assert_eq!(fetch.take(), Vec::<String>::new());
        held.clear();
        flow.uncap(&fetch, Some(&budget));
        assert_eq!(fetch.take(), ["resume 0"], "0 held: under half the cap");
    }

    #[test]
    fn a_full_stash_or_a_missing_outlet_never_takes_more_of_a_partition() {
        let (fetch, mut flow) = (Recorder::default(), Backpressure::default());
        // No outlet (recovering or stopped): the message is dropped uncopied.
        flow.dispatch(&fetch, None, 2, &tp(0), |_| {
            panic!("copied without an outlet")
        });
        let (o, _rx) = outlet(1, None);
        started(&mut flow, &fetch, 0, o);
        for offset in 0..3 {
            flow.dispatch(&fetch, None, 2, &tp(0), record(offset, 0));
        }
        assert_eq!(fetch.take(), ["pause 0", "resume 0", "pause 0"]);
        flow.stop(&fetch, &tp(0));
        assert_eq!(flow.started().count(), 0);
        flow.dispatch(&fetch, None, 2, &tp(0), |_| panic!("copied after a stop"));
    }

    #[test]
    fn a_seek_drops_the_stash_and_reopens_with_the_same_outlet() {
        let (fetch, mut flow) = (Recorder::default(), Backpressure::default());
        let (o, mut rx) = outlet(1, None);
        started(&mut flow, &fetch, 0, o);
        flow.dispatch(&fetch, None, 100, &tp(0), record(0, 0));
        flow.dispatch(&fetch, None, 100, &tp(0), record(1, 0));
        flow.order_pause(&fetch, &tp(0));
        let outlet = flow.seek(&tp(0));
        assert!(outlet.is_some());
        assert_eq!(offsets(&mut rx), [0]);
        fetch.take();
        flow.open(&fetch, &tp(0), outlet);
        assert_eq!(
            fetch.take(),
            ["resume 0"],
            "no stash, no coordinator's pause"
        );
        flow.drain_stashes(&fetch);
        assert_eq!(
            offsets(&mut rx),
            Vec::<i64>::new(),
            "the stashed record 1 was dropped"
        );
    }

    #[test]
    fn a_closed_writer_loses_its_outlet() {
        let (fetch, mut flow) = (Recorder::default(), Backpressure::default());
        let (o, rx) = outlet(1, None);
        started(&mut flow, &fetch, 0, o);
        drop(rx);
        flow.dispatch(&fetch, None, 100, &tp(0), record(0, 0));
        assert!(flow.outlet(&tp(0)).is_none());
    }
}
