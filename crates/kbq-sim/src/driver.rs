//! The driver: builds the world and the processes, then moves virtual time one step at a time
//! (tokio's paused clock on a current-thread runtime), each step running the fault schedule,
//! the group, and each running process's consumer thread and coordinator in a seeded order;
//! after the faults, the world must settle and pass the final checks.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::{DefaultHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use super::group::Group;
use super::process::Process;
use super::route::{self, SimRoute};
use super::world::{DEAD, Fate, RUNNING, Shared, World, lock};
use super::{Mode, PARTITIONS, Params, REPLICAS, RETENTION, Report, STEP};
use kafka_bigquery_sink::ops::metrics::Metrics;
use kbq_core::protocol::MissingCheckpointPolicy;
use kbq_emulator::store::{Store, StoreConfig};

pub(super) struct Sim {
    pub(super) world: Shared,
    pub(super) group: Group,
    pub(super) procs: Vec<Option<Process>>,
    pub(super) restart_at: [Option<Instant>; REPLICAS],
    /// Metrics of every process that ever ran (the rewinds they counted).
    pub(super) all_metrics: Vec<Arc<Metrics>>,
    pub(super) route: SimRoute,
    pub(super) mode: Mode,
    pub(super) processes: usize,
    pub(super) missing_checkpoint: MissingCheckpointPolicy,
    /// `recovery.on_out_of_range: earliest` with Kafka's retention on ([`Params::retention`]).
    pub(super) retention: bool,
    /// [`Params::max_uncommitted_bytes`].
    pub(super) max_uncommitted_bytes: Option<u64>,
}

impl Sim {
    pub(super) fn new(params: &Params) -> Sim {
        let seed = params.seed;
        let store = Store::new(StoreConfig::default());
        let route = route::build(&store, params.mode, seed);
        let now = Instant::now();
        let world = World {
            rng: StdRng::seed_from_u64(seed),
            faults: true,
            started: now,
            trace_hash: DefaultHasher::new(),
            trace_tail: VecDeque::new(),
            print_trace: std::env::var_os("KBQ_SIM_TRACE").is_some(),
            violation: None,
            stats: BTreeMap::new(),
            store,
            names: BTreeMap::new(),
            streams: BTreeMap::new(),
            committed_rows: BTreeMap::new(),
            injected_loss: BTreeSet::new(),
            logs: vec![Vec::new(); PARTITIONS],
            log_start: vec![0; PARTITIONS],
            read_without_offset: vec![0; PARTITIONS],
            retention: params.retention.then_some(RETENTION),
            committed: vec![None; PARTITIONS],
            dead_letters: BTreeMap::new(),
            fields: route.fields,
            appended: BTreeMap::new(),
            ledgers: BTreeMap::new(),
            running: vec![0; REPLICAS],
            mode: params.mode,
            source: BTreeSet::new(),
        };
        kafka_bigquery_sink::backoff::SEEDED_JITTER
            .with(|j| *j.borrow_mut() = Some(StdRng::seed_from_u64(seed ^ 0x5eed)));
        let mut sim = Sim {
            world: Arc::new(Mutex::new(world)),
            group: Group {
                generation: 0,
                members: BTreeSet::new(),
                next_member: 0,
                owner: [None; PARTITIONS],
                last_heartbeat: BTreeMap::new(),
                pending: None,
            },
            procs: (0..REPLICAS).map(|_| None).collect(),
            restart_at: [None; REPLICAS],
            all_metrics: Vec::new(),
            route,
            mode: params.mode,
            processes: 0,
            missing_checkpoint: params.missing_checkpoint,
            retention: params.retention,
            max_uncommitted_bytes: params.max_uncommitted_bytes,
        };
        for r in 0..REPLICAS {
            sim.start(r);
        }
        sim
    }

    pub(super) fn w(&self) -> std::sync::MutexGuard<'_, World> {
        lock(&self.world)
    }

    pub(super) fn trace(&self, line: String) {
        self.w().trace(line);
    }

    pub(super) async fn step(&mut self) {
        tokio::time::sleep(STEP).await;
        self.faults_step();
        self.produce();
        self.retain();
        self.group_step();
        let mut order: Vec<usize> = (0..REPLICAS).collect();
        {
            let mut w = self.w();
            if w.rng.random_bool(0.5) {
                order.reverse();
            }
        }
        for r in order {
            let running = self.procs[r]
                .as_ref()
                .is_some_and(|p| p.gate.get() == RUNNING);
            if running {
                self.consumer_step(r);
                self.coordinator_step(r);
            }
        }
    }
}

/// Runs one seed: faults for `params.faulty`, then everything heals and must settle.
pub fn run(params: &Params) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    let report = runtime.block_on(async {
        let mut sim = Sim::new(params);
        let started = Instant::now();
        sim.run_faulty(started, params.faulty).await;
        let mut violation = sim.w().violation.clone();
        if violation.is_none() {
            sim.heal();
            violation = sim.settle_and_check().await;
        }
        let simulated = Instant::now() - started;
        sim.kill_all();
        sim.report(params.seed, violation, simulated)
    });
    runtime.shutdown_background();
    report
}

impl Sim {
    /// Steps with faults on until `faulty` has passed since `started`, or an invariant broke.
    async fn run_faulty(&mut self, started: Instant, faulty: Duration) {
        while Instant::now() - started < faulty {
            self.step().await;
            if self.w().violation.is_some() {
                break;
            }
        }
    }

    /// Faults off: frozen processes resume and dead ones restart now.
    fn heal(&mut self) {
        {
            let mut w = self.w();
            w.faults = false;
            w.trace("== faults off".into());
        }
        for r in 0..REPLICAS {
            if let Some(proc) = self.procs[r].as_mut()
                && proc.frozen_until.is_some()
            {
                proc.frozen_until = Some(Instant::now());
            }
            if self.procs[r].is_none() {
                self.restart_at[r] = Some(Instant::now());
            }
        }
    }

    /// Steps until every partition rests (for 300 cycles in a row) or 300 s pass, then runs the
    /// mode's final checks; the first violation, if any.
    async fn settle_and_check(&mut self) -> Option<String> {
        let settle_from = Instant::now();
        let mut rested_for = 0;
        while Instant::now() - settle_from < Duration::from_secs(300) {
            self.step().await;
            if self.w().violation.is_some() {
                break;
            }
            // Rested for a few cycles in a row: nothing is in flight any more.
            rested_for = if self.rested() { rested_for + 1 } else { 0 };
            if rested_for > 300 {
                break;
            }
        }
        let mut violation = self.w().violation.clone();
        if violation.is_none() && rested_for == 0 {
            let w = self.w();
            violation = Some(format!(
                "stuck: partitions do not rest within 300 s of the faults ending: committed {:?}, log ends {:?}",
                w.committed,
                w.logs.iter().map(Vec::len).collect::<Vec<_>>()
            ));
        }
        if violation.is_none() {
            violation = match self.mode {
                Mode::ExactlyOnce => self.check_exactly_once(),
                Mode::AtLeastOnce => self.check_at_least_once(),
                Mode::Cdc { .. } => self.check_at_least_once().or_else(|| self.check_cdc()),
            };
        }
        violation
    }

    /// The end of the run: every process stops for good.
    fn kill_all(&mut self) {
        for r in 0..REPLICAS {
            if let Some(proc) = self.procs[r].as_mut() {
                proc.gate.set(DEAD);
                if let Some(mut c) = proc.coordinator.take() {
                    c.kill();
                }
            }
        }
    }

    /// The run's report: its trace hash and statistics; on a violation, the last steps printed.
    fn report(&self, seed: u64, violation: Option<String>, simulated: Duration) -> Report {
        let mut w = self.w();
        if let Some(v) = &violation {
            w.trace(format!("FAILED {v}"));
        }
        let records: u64 = w.logs.iter().map(|l| l.len() as u64).sum();
        w.stats.insert("records", records);
        if let Mode::Cdc { .. } = self.mode {
            let mode = self.mode;
            let deletes = (w.logs.iter().flatten())
                .filter(|r| matches!(r.change, Some((_, 'd'))) && r.fate(mode) == Fate::Row)
                .count();
            w.stats.insert("deletes", deletes as u64);
            let keys = super::rest::table_rows(&w).len();
            w.stats.insert("keys", keys as u64);
        }
        w.stats.insert("processes", self.processes as u64);
        let (streams, dead) = (w.streams.len() as u64, w.dead_letters.len() as u64);
        w.stats.insert("streams", streams);
        w.stats.insert("dead_letters", dead);
        if violation.is_some() {
            eprintln!(
                "--- simulation seed {seed} failed; last steps:\n{}",
                w.trace_tail.iter().cloned().collect::<Vec<_>>().join("\n")
            );
        }
        Report {
            trace_hash: w.trace_hash.finish(),
            simulated,
            violation,
            stats: w.stats.clone(),
        }
    }
}
