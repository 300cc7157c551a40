//! The simulation's shared world: the seeded generator, the trace, what Kafka and BigQuery
//! hold, and each process's gate (running, frozen, dead). The driver and the simulated
//! services inside the writers' tasks all touch it, one at a time (one thread).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::{DefaultHasher, Hash};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use tokio::time::Instant;

use super::{MAX_PAYLOAD, Mode, STEP};
use kbq_core::metadata::CommitMetadata;
use kbq_emulator::store::Store;

pub(super) struct World {
    pub(super) rng: StdRng,
    pub(super) faults: bool,
    pub(super) started: Instant,
    pub(super) trace_hash: DefaultHasher,
    pub(super) trace_tail: VecDeque<String>,
    /// `KBQ_SIM_TRACE=1`: every trace line goes to stderr as it happens.
    pub(super) print_trace: bool,
    pub(super) violation: Option<String>,
    pub(super) stats: BTreeMap<&'static str, u64>,
    // BigQuery
    pub(super) store: Arc<Store>,
    /// The sink sees `…/streams/sN` (numbered in creation order, so a seed replays), the store
    /// its own random ids.
    pub(super) names: BTreeMap<String, String>,
    pub(super) streams: BTreeMap<String, SimStream>,
    /// Highest row of each stream a landed commit names (invariant 1).
    pub(super) committed_rows: BTreeMap<String, i64>,
    /// Streams a fault removed (expiry): a rewind is excused only for them.
    pub(super) injected_loss: BTreeSet<String>,
    /// At least once: how many rows of each record (partition, offset) were appended to the
    /// `_default` stream (visible at once).
    pub(super) appended: BTreeMap<(usize, i64), u32>,
    /// At least once, per process (by its number, `#n` in the trace): what its consumer
    /// delivered to its writers and what their appends were told, to judge every repeated append
    /// (docs/simulation.md). Per process, not per replica: an append a dead process sent can be
    /// applied after its replica restarted, and is judged by what that process was given.
    pub(super) ledgers: BTreeMap<usize, BTreeMap<(usize, i64), Delivered>>,
    /// The number of the process each replica runs now.
    pub(super) running: Vec<usize>,
    pub(super) mode: Mode,
    // Kafka
    pub(super) logs: Vec<Vec<Produced>>,
    /// Each partition's log start: records below it were deleted by retention (0 without
    /// [`crate::Params::retention`]).
    pub(super) log_start: Vec<i64>,
    /// Per partition, the highest log start that a read of its committed offset returned while
    /// it had none. A partition starting without a committed offset (a first start, a missing
    /// checkpoint) starts at the log start or after its visible rows, and does not count what
    /// retention deleted below that log start: the sink cannot tell whether the group ever read
    /// it (docs/operations.md, "Missing checkpoints"). The final checks excuse such records.
    pub(super) read_without_offset: Vec<i64>,
    /// `retention.ms`, when the seed runs Kafka's retention.
    pub(super) retention: Option<Duration>,
    /// CDC mode: the keys the source table holds (what the produced changes describe).
    pub(super) source: BTreeSet<i64>,
    pub(super) committed: Vec<Option<(i64, String)>>,
    /// Dead letters: (partition, offset) -> reasons.
    pub(super) dead_letters: BTreeMap<(usize, i64), Vec<String>>,
    /// Proto field numbers of the `id` and `part` columns in the rows the plan encodes.
    pub(super) fields: (u64, u64),
}

/// A produced record.
#[derive(Clone, Debug)]
pub(super) struct Produced {
    /// The row's payload; `None`: a tombstone.
    pub(super) payload: Option<String>,
    /// CDC mode: the key and the Debezium operation (`c`, `r`, `u`, `d`; `t` and `x` are not row
    /// changes).
    pub(super) change: Option<(i64, char)>,
    /// When it was produced (virtual time since the start): retention deletes by it.
    pub(super) at: Duration,
}

/// What the sink must do with a produced record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fate {
    /// A row in the table (in CDC mode an UPSERT, or a DELETE of `upsert_delete`).
    Row,
    /// CDC `upsert`: a delete or tombstone, counted and skipped.
    Ignored,
    /// A bad record: dead-lettered with its reason, never a row.
    Bad,
}

impl Produced {
    pub(super) fn fate(&self, mode: Mode) -> Fate {
        let deletes = matches!(mode, Mode::Cdc { deletes: true });
        let too_long = |p: &String| p.len() > MAX_PAYLOAD;
        match (self.change, &self.payload) {
            (None, Some(p)) if !too_long(p) => Fate::Row,
            (None, _) => Fate::Bad,
            // A tombstone: a delete by the Kafka key, which a raw-Avro route cannot read (the
            // key schema is the registry's).
            (Some(_), None) if deletes => Fate::Bad,
            (Some(_), None) => Fate::Ignored,
            (Some((_, 'c' | 'r' | 'u')), Some(p)) if too_long(p) => Fate::Bad,
            (Some((_, 'c' | 'r' | 'u')), Some(_)) => Fate::Row,
            (Some((_, 'd')), Some(_)) if deletes => Fate::Row,
            (Some((_, 'd')), Some(_)) => Fate::Ignored,
            (Some(_), Some(_)) => Fate::Bad,
        }
    }
}

/// At least once: one record as one replica's writers saw it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Delivered {
    /// Deliveries to a writer not yet used by an append.
    pub(super) unused: u32,
    /// Appends of it that were applied and whose answer has not reached an append session:
    /// each may be sent again once (a resend after a broken call or a timeout; also by the
    /// session of an earlier incarnation in the same process, a lost partition's).
    pub(super) unanswered: u32,
}

pub(super) struct SimStream {
    pub(super) partition: Option<usize>,
    /// The Kafka offset of each appended row, in stream order.
    pub(super) rows: Vec<i64>,
    pub(super) finalized_by_sink: bool,
}

pub(super) type Shared = Arc<Mutex<World>>;

impl World {
    pub(super) fn now(&self) -> Duration {
        Instant::now() - self.started
    }

    pub(super) fn trace(&mut self, line: String) {
        let mut line = format!("{:>9.3} {line}", self.now().as_secs_f64());
        // The store names its streams at random: the trace says the sink's names, so that a
        // seed's trace (and its hash) is the same every run.
        if line.contains("/streams/") {
            for (sim, store) in &self.names {
                line = line.replace(store.as_str(), sim);
            }
        }
        line.hash(&mut self.trace_hash);
        if self.print_trace {
            eprintln!("{line}");
        }
        if self.trace_tail.len() == 400 {
            self.trace_tail.pop_front();
        }
        self.trace_tail.push_back(line);
    }

    pub(super) fn violate(&mut self, why: String) {
        self.trace(format!("VIOLATION {why}"));
        if self.violation.is_none() {
            self.violation = Some(why);
        }
    }

    pub(super) fn count(&mut self, what: &'static str) {
        *self.stats.entry(what).or_default() += 1;
    }

    /// A fault with probability `p` per chance, only while faults are on.
    pub(super) fn chance(&mut self, p: f64) -> bool {
        self.faults && self.rng.random_bool(p)
    }

    pub(super) fn durable(&self, p: usize) -> Option<(i64, CommitMetadata)> {
        let (k, m) = self.committed[p].as_ref()?;
        Some((*k, CommitMetadata::parse(m.as_bytes()).ok()?))
    }

    pub(super) fn store_name(&self, sim: &str) -> String {
        self.names
            .get(sim)
            .cloned()
            .unwrap_or_else(|| sim.to_string())
    }
}

pub(super) fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, World> {
    shared.lock().expect("world")
}

/// A process's life: running, frozen (SIGSTOP), dead. Every I/O of the process passes its gate.

#[derive(Debug)]
pub(super) struct Gate(pub(super) AtomicU8);

pub(super) const RUNNING: u8 = 0;
pub(super) const FROZEN: u8 = 1;
pub(super) const DEAD: u8 = 2;

impl Gate {
    pub(super) async fn pass(&self) {
        loop {
            match self.0.load(Ordering::SeqCst) {
                RUNNING => return,
                FROZEN => tokio::time::sleep(STEP).await,
                _ => std::future::pending::<()>().await,
            }
        }
    }

    pub(super) fn set(&self, state: u8) {
        self.0.store(state, Ordering::SeqCst);
    }

    pub(super) fn get(&self) -> u8 {
        self.0.load(Ordering::SeqCst)
    }
}

/// `Shared` with a Debug the transport trait wants.
#[derive(Clone)]
pub(super) struct SharedDebug(pub(super) Shared);

impl std::fmt::Debug for SharedDebug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("world")
    }
}
