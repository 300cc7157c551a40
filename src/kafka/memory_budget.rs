//! `writer.memory_limit`: one byte budget for every record the process has read from Kafka and
//! BigQuery has not acknowledged yet — in a consumer stash, a writer channel, an open batch, a
//! request in flight — together with the encoded row built from it and the gRPC layer's copy of
//! that row.
//!
//! Accounting is by ownership: every [`Record`](super::consumer::Record) carries a [`Charge`]
//! that is taken when the consumer thread reads it (its bytes plus an estimate of its row and of
//! the gRPC copy of the request that carries the row, which the writer replaces with the row's
//! size) and given back when the record is dropped,
//! wherever that happens (acknowledged, dead-lettered, a stash cleared by a seek, a writer that
//! stopped). No path can forget to release, so the budget cannot leak into a stall.
//!
//! The consumer thread enforces it in two ways:
//!
//! * **The gate.** While the process holds the whole limit, the thread does not take messages
//!   from librdkafka (it keeps serving commands, and polls at least every
//!   [`MAX_GATE`](super::consumer::MAX_GATE) so rebalances are served too). librdkafka's own
//!   queue then fills and its fetcher stops by itself; nothing fetched is thrown away. The gate
//!   opens as acknowledgements release bytes (an eighth of the limit, so that it does not open
//!   for every single acknowledgement), and writers send their open batches at once while it is
//!   closed. A record is never refused for its size: whatever
//!   is polled while the gate is open passes, so a record larger than what is left still goes
//!   through (the limit is exceeded by at most that record).
//! * **The share cap.** One partition may hold at most half as much again as its even share of
//!   the limit, and at least a quarter of it (three quarters with two partitions, half with
//!   three, 3/8 with four, a quarter from six on; no cap alone): above that it is paused until
//!   it is back under half its cap. So partitions whose writers wait (schema registry outage,
//!   quota backoff) cannot take the whole budget: it takes two stuck partitions of three, three
//!   of four, four from five partitions on (one of two never), each at its cap, to close the
//!   gate on the others, and even then only until one of them moves. Above the even share, so
//!   that in steady flow the gate closes first and no partition is paused (see `cap`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

use prometheus_client::metrics::gauge::Gauge;

/// The smallest request [`MemoryBudget::request_cap`] asks for (`writer.max_request_bytes`'s
/// lower bound).
pub const MIN_REQUEST_BYTES: usize = 64 << 10;

/// The process-wide budget. The gauge is the counter itself (`kbq_memory_budget_used_bytes`), so
/// the metric costs nothing extra.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: i64,
    used: Gauge,
    /// The gate is closed; written by the consumer thread only, read by the writers.
    gated: AtomicBool,
    /// Partitions being written now (set by the consumer thread).
    partitions: AtomicUsize,
}

impl MemoryBudget {
    pub fn new(limit: u64, used: Gauge) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit: i64::try_from(limit).unwrap_or(i64::MAX).max(1),
            used,
            gated: AtomicBool::new(false),
            partitions: AtomicUsize::new(1),
        })
    }

    pub fn limit(&self) -> u64 {
        self.limit as u64
    }

    /// Bytes held now, all partitions.
    pub fn used(&self) -> u64 {
        self.used.get().max(0) as u64
    }

    /// A new partition's account.
    pub fn partition(self: &Arc<Self>) -> Arc<PartitionBudget> {
        Arc::new(PartitionBudget {
            budget: self.clone(),
            used: AtomicI64::new(0),
        })
    }

    /// Updates and returns the gate: it closes when the limit is used up and opens again when
    /// an eighth of it is free, so the consumer does not take one message per acknowledgement.
    /// Called by the consumer thread only.
    pub fn update_gate(&self) -> bool {
        let used = self.used.get();
        let gated = if self.gated.load(Ordering::Relaxed) {
            used >= self.limit - self.limit / 8
        } else {
            used >= self.limit
        };
        self.gated.store(gated, Ordering::Relaxed);
        gated
    }

    /// Whether the consumer takes no messages now: a writer then sends what it holds at once,
    /// since no more records come until something is acknowledged.
    pub fn is_gated(&self) -> bool {
        self.gated.load(Ordering::Relaxed)
    }

    /// Tells the writers how many partitions share the budget.
    pub fn set_partitions(&self, partitions: usize) {
        self.partitions.store(partitions.max(1), Ordering::Relaxed);
    }

    /// Largest request a writer should build: a quarter of its even share of the limit (at
    /// least [`MIN_REQUEST_BYTES`]). The gRPC layer keeps an encode buffer per stream of up to
    /// twice the largest request it carried, outside the budget; this keeps those buffers at
    /// about half the limit in all, whatever the partition count.
    ///
    /// Smaller still when that leaves room: at most 1/256 of the limit, but not under a
    /// sixteenth of the share (a quarter of it over a stream's default four requests in
    /// flight, so few partitions still fill their windows). The server must receive a whole
    /// request before it can answer, and the streams of a connection share its flow-control
    /// window, so many small requests in flight pipeline far better than a few large ones:
    /// with 16 partitions 256 KiB requests drained twice as fast as 1 MiB ones (BENCHMARKS.md).
    pub fn request_cap(&self) -> usize {
        let limit = self.limit as usize;
        let share = limit / self.partitions.load(Ordering::Relaxed).max(1);
        (share / 4)
            .min((limit / 256).max(share / 16))
            .max(MIN_REQUEST_BYTES)
    }

    /// Whether `partition` holds its whole cap while `partitions` partitions are written.
    pub fn over_cap(&self, partition: &PartitionBudget, partitions: usize) -> bool {
        partition.used.load(Ordering::Relaxed) >= self.cap(partitions)
    }

    /// Whether a capped partition is back under half its cap.
    pub fn back_under_cap(&self, partition: &PartitionBudget, partitions: usize) -> bool {
        partition.used.load(Ordering::Relaxed) < self.cap(partitions) / 2
    }

    /// Half as much again as an even share, at least a quarter of the limit; no cap alone. So
    /// partitions moving at an even pace meet the gate, which stops intake without pausing
    /// anything, before any of them meets its cap: librdkafka serves a pause and a resume on
    /// its main thread and wakes a broker thread whose partitions were all paused only at that
    /// thread's next one-second tick, so pausing every partition at once cost 0.8–0.9 s of
    /// fetching per cycle (4 partitions drained at 25 MB/s, BENCHMARKS.md).
    fn cap(&self, partitions: usize) -> i64 {
        match partitions {
            0 | 1 => i64::MAX,
            n => (self.limit * 3 / (2 * n as i64)).max(self.limit / 4),
        }
    }
}

/// One partition's account inside the budget.
#[derive(Debug)]
pub struct PartitionBudget {
    budget: Arc<MemoryBudget>,
    used: AtomicI64,
}

impl PartitionBudget {
    /// Takes `bytes` for one record.
    pub fn charge(self: &Arc<Self>, bytes: usize) -> Charge {
        let mut charge = Charge {
            account: Some(self.clone()),
            bytes: 0,
        };
        charge.grow(bytes);
        charge
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed).max(0) as u64
    }

    /// The process-wide budget this account is part of.
    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    /// Whether no record will come for this partition until acknowledgements free some of the
    /// budget: the process's gate is closed, or this partition holds its share cap (the
    /// consumer pauses it there).
    pub fn starved(&self) -> bool {
        let budget = &self.budget;
        budget.is_gated() || budget.over_cap(self, budget.partitions.load(Ordering::Relaxed))
    }
}

/// Bytes one record holds in the budget; given back on drop.
#[derive(Debug, Default)]
pub struct Charge {
    account: Option<Arc<PartitionBudget>>,
    bytes: i64,
}

impl Charge {
    /// Charges `bytes` more.
    pub fn grow(&mut self, bytes: usize) {
        self.adjust(bytes as i64);
    }

    /// Charges `delta` more, or gives `-delta` back (never below zero): the encoded row replaces
    /// the estimate the record was charged with when it was read.
    pub fn adjust(&mut self, delta: i64) {
        let Some(account) = &self.account else {
            return;
        };
        let delta = delta.max(-self.bytes);
        if delta == 0 {
            return;
        }
        self.bytes += delta;
        account.used.fetch_add(delta, Ordering::Relaxed);
        account.budget.used.inc_by(delta);
    }

    pub fn bytes(&self) -> u64 {
        self.bytes as u64
    }

    /// The partition account charged, if any.
    pub fn account(&self) -> Option<&Arc<PartitionBudget>> {
        self.account.as_ref()
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(account) = &self.account
            && self.bytes != 0
        {
            account.used.fetch_sub(self.bytes, Ordering::Relaxed);
            account.budget.used.dec_by(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_records_give_their_bytes_back() {
        let budget = MemoryBudget::new(1000, Gauge::default());
        let p = budget.partition();
        let mut a = p.charge(100);
        a.grow(50);
        let mut b = p.charge(30);
        assert_eq!((budget.used(), p.used()), (180, 180));
        b.adjust(-10);
        assert_eq!((budget.used(), b.bytes()), (170, 20));
        b.adjust(20);
        b.adjust(-10);
        drop(a);
        assert_eq!((budget.used(), p.used()), (30, 30));
        drop(b);
        assert_eq!((budget.used(), p.used()), (0, 0));
    }

    #[test]
    fn the_gate_closes_at_the_limit_and_a_large_record_still_passes() {
        let budget = MemoryBudget::new(1000, Gauge::default());
        let p = budget.partition();
        let small = p.charge(900);
        assert!(!budget.update_gate());
        // Whatever was polled while the gate was open is kept, however large.
        let large = p.charge(5000);
        assert!(budget.update_gate() && budget.is_gated());
        drop(large);
        assert!(budget.update_gate(), "opens only when an eighth is free");
        drop(small);
        assert!(!budget.update_gate() && !budget.is_gated());
    }

    #[test]
    fn one_partition_holds_at_most_a_quarter_of_the_limit_among_many() {
        let budget = MemoryBudget::new(1000, Gauge::default());
        let p = budget.partition();
        let a = p.charge(249);
        assert!(!budget.over_cap(&p, 8));
        assert!(!budget.over_cap(&p, 1), "alone it may hold all of it");
        let big = p.charge(500);
        assert!(!budget.over_cap(&p, 2), "with two, three quarters");
        assert!(budget.over_cap(&p, 4), "with four, 3/8");
        assert!(!budget.over_cap(&p, 1) && !budget.back_under_cap(&p, 4));
        drop(big);
        let b = p.charge(1);
        assert!(budget.over_cap(&p, 8));
        assert!(
            !budget.back_under_cap(&p, 8),
            "resumes only under half its cap"
        );
        drop(a);
        assert!(budget.back_under_cap(&p, 8));
        drop(b);
    }

    #[test]
    fn requests_shrink_as_partitions_share_the_budget() {
        let budget = MemoryBudget::new(64 << 20, Gauge::default());
        assert_eq!(budget.request_cap(), 4 << 20, "a sixteenth of one share");
        budget.set_partitions(4);
        assert_eq!(budget.request_cap(), 1 << 20);
        budget.set_partitions(16);
        assert_eq!(budget.request_cap(), 256 << 10);
        budget.set_partitions(32);
        assert_eq!(budget.request_cap(), 256 << 10, "1/256 of the limit");
        budget.set_partitions(64);
        assert_eq!(budget.request_cap(), 256 << 10);
        budget.set_partitions(256);
        assert_eq!(budget.request_cap(), 64 << 10, "a quarter of the share");
        budget.set_partitions(10_000);
        assert_eq!(budget.request_cap(), MIN_REQUEST_BYTES);
    }

    #[test]
    fn a_default_charge_holds_nothing() {
        let mut c = Charge::default();
        c.grow(10);
        assert_eq!(c.bytes(), 0);
    }
}
