//! The deterministic simulation of the daemon's shells (docs/simulation.md), a test-only crate:
//! the real coordinator (its run loop's handlers and the protocol inside it), the real partition
//! writers and their append sessions, the real write, REST and dead-letter clients above their
//! transport seams, against a simulated Kafka (partitions, a consumer group with generations,
//! cooperative revokes, losses, committed offsets + metadata read back after a failed commit)
//! and a simulated BigQuery (the emulator's own store and AppendRows handler), in one thread
//! with virtual time and one seeded random schedule of faults at every I/O boundary.
//!
//! It reaches the daemon through the seams the daemon opens only with its `testing` feature
//! (the run loop delivered one input at a time, a consumer handle without a thread, a route
//! installed without resolving it, the retry jitter drawn from the seed), so the daemon's own
//! build and unit tests carry none of it. `cargo test -p kbq-sim` runs the fixed seeds;
//! `scripts/simulate.sh` runs fresh ones.
//!
//! One job per file:
//! * [`world`]: the shared state, the trace and each process's gate;
//! * [`bigquery`], [`rest`], [`dead_letter`]: the simulated services behind the seams;
//! * [`group`]: the broker's side of the consumer group; [`consumer`]: each process's consumer
//!   thread, played;
//! * [`process`]: a sink process built as the daemon builds it, and one turn of its run loop;
//! * [`faults`]: the fault schedule; [`checks`]: the invariants; [`driver`]: the steps;
//! * [`inbox`]: the coordinator's inbox on its own (follow-ups after their cause, in order);
//! * [`tests`]: the fixed seeds of the test command, the regression seeds, the replay check and
//!   the long run behind `scripts/simulate.sh`.

use std::collections::BTreeMap;
use std::time::Duration;

use kbq_core::protocol::MissingCheckpointPolicy;

mod bigquery;
mod checks;
mod consumer;
mod dead_letter;
mod driver;
mod faults;
mod group;
#[cfg(test)]
mod inbox;
mod process;
mod rest;
mod route;
#[cfg(test)]
mod tests;
mod world;

pub use driver::run;

const TOPIC: &str = "events";
const TABLE: &str = "projects/p/datasets/d/tables/events";
const PARTITIONS: usize = 2;
const REPLICAS: usize = 2;
/// One step of the driver: every task runs until it waits, then virtual time moves this much.
const STEP: Duration = Duration::from_millis(10);
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);
const HANDOFF_DEADLINE: Duration = Duration::from_secs(8);
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// Longer than this and a payload breaks the table's `maxLength`: a row error at BigQuery.
const MAX_PAYLOAD: usize = 8;
/// Virtual time with faults per seed, unless asked otherwise.
const FAULTY: Duration = Duration::from_secs(120);
/// With [`Params::retention`]: Kafka deletes a record this long after it was produced
/// (`retention.ms`), whether the sink has read it or not.
const RETENTION: Duration = Duration::from_secs(4);

const AVRO: &str = r#"{"type":"record","name":"E","fields":[
  {"name":"id","type":"long"},{"name":"part","type":"long"},{"name":"payload","type":"string"}]}"#;

/// CDC mode: the Debezium envelope of a row keyed by `k` (the table's primary key). `id` and
/// `part` are the record's own offset and partition (a `d` event's `before` carries them too),
/// so that every row BigQuery holds names the record that wrote it.
const CDC_AVRO: &str = r#"{"type":"record","name":"Envelope","namespace":"sim.events","fields":[
  {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
    {"name":"k","type":"long"},{"name":"id","type":"long"},{"name":"part","type":"long"},
    {"name":"payload","type":"string"}]}],"default":null},
  {"name":"after","type":["null","Value"],"default":null},
  {"name":"op","type":"string"}]}"#;
/// CDC mode: keys per partition (a key stays in its partition: `k % PARTITIONS`).
const KEYS_PER_PARTITION: i64 = 12;

/// The route a seed runs, as a process's config would say it (docs/simulation.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `delivery: exactly_once` (the default): BUFFERED streams, the checkpoint protocol.
    ExactlyOnce,
    /// `delivery: at_least_once`, an append-only route: the `_default` stream, the ledger.
    AtLeastOnce,
    /// `delivery: at_least_once` with `cdc:` (Debezium envelope, primary key `k`): the ledger,
    /// the change extraction, BigQuery applying upserts and deletes. `deletes` is
    /// `mode: upsert_delete` (else `upsert`: deletes and tombstones are ignored).
    Cdc { deletes: bool },
}

impl Mode {
    pub fn at_least_once(self) -> bool {
        self != Mode::ExactlyOnce
    }
}

/// What one seed does.
#[derive(Clone, Debug)]
pub struct Params {
    pub seed: u64,
    /// Virtual time with faults on; then the world settles without faults.
    pub faulty: Duration,
    /// `recovery.lost_offsets` of every process: `resolve`, the exact one. With the default
    /// `fail`, a partition whose owner died before its first commit landed while a sibling's
    /// commit marked the table stops for good, as docs/operations.md ("Missing checkpoints")
    /// says it does.
    pub missing_checkpoint: MissingCheckpointPolicy,
    pub mode: Mode,
    /// Kafka's retention overtakes the sink: records are deleted [`RETENTION`] after they were
    /// produced, and the processes run `recovery.on_out_of_range: earliest`, so a reader whose
    /// fetch position falls below the log start is told (`OffsetOutOfRange`), counts the range
    /// lost and must be moved to the log start (docs/simulation.md, "Retention"). Exactly once
    /// and at least once only. Off, a seed draws and traces exactly what it did before.
    pub retention: bool,
    /// `writer.max_uncommitted_bytes` of every process (exactly once): the protocol pauses a
    /// partition whose acknowledged but uncommitted bytes reach it, and a landed commit resumes
    /// it. `None` keeps the default (256 MiB), which no seed reaches, and a seed draws and traces
    /// exactly what it did before.
    pub max_uncommitted_bytes: Option<u64>,
}

impl Params {
    pub fn seed(seed: u64) -> Params {
        Params {
            seed,
            faulty: FAULTY,
            missing_checkpoint: MissingCheckpointPolicy::Resolve,
            mode: Mode::ExactlyOnce,
            retention: false,
            max_uncommitted_bytes: None,
        }
    }

    pub fn with_mode(seed: u64, mode: Mode) -> Params {
        Params {
            mode,
            ..Params::seed(seed)
        }
    }
}

/// The result of one seed.
#[derive(Debug)]
pub struct Report {
    pub trace_hash: u64,
    pub simulated: Duration,
    pub violation: Option<String>,
    pub stats: BTreeMap<&'static str, u64>,
}
