//! A process of the sink, built as the daemon builds it (the real coordinator, writers, append
//! sessions and clients, over the simulated services); its start, SIGKILL, exit, and one turn
//! of its coordinator's run loop.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::bigquery::SimWrite;
use super::consumer::Consumer;
use super::dead_letter::SimDlq;
use super::driver::Sim;
use super::rest::SimRest;
use super::world::{DEAD, Gate, RUNNING, SharedDebug, lock};
use super::{CHECKPOINT_INTERVAL, HANDOFF_DEADLINE, SESSION_TIMEOUT, TABLE, TOPIC};
use kafka_bigquery_sink::bigquery::rest_client::{RestClient, TableReference};
use kafka_bigquery_sink::bigquery::write_client::WriteClient;
use kafka_bigquery_sink::checkpoint::coordinator::{Coordinator, CoordinatorSettings, Exit, Input};
use kafka_bigquery_sink::checkpoint::machine::Machine;
use kafka_bigquery_sink::kafka::consumer::ConsumerHandle;
use kafka_bigquery_sink::kafka::dead_letter::DeadLetterProducer;
use kafka_bigquery_sink::ops::http::Health;
use kafka_bigquery_sink::ops::metrics::Metrics;
use kafka_bigquery_sink::tables::{ResolveColumns, Route, Router};
use kafka_bigquery_sink::writer::append_session::SessionLimits;
use kafka_bigquery_sink::writer::change_source::ChangeSource;
use kafka_bigquery_sink::writer::partition_writer::{WriterSettings, WriterShared};
use kafka_bigquery_sink::writer::plan_source::WriterRoute;
use kafka_bigquery_sink::writer::stream_quota::StreamCreationLimiter;
use kbq_core::bad_record::BadRecordPolicy;
use kbq_core::ledger::AtLeastOnceLedger;
use kbq_core::metadata::TableFingerprint;
use kbq_core::protocol::{CheckpointProtocol, OutOfRangePolicy, ProtocolConfig};
use kbq_emulator::store::TableRef;

pub(super) struct Process {
    pub(super) gate: Arc<Gate>,
    pub(super) coordinator: Option<Coordinator>,
    pub(super) consumer: Consumer,
    pub(super) next_tick: Instant,
    pub(super) shutdown_at: Option<Instant>,
    /// Frozen until then.
    pub(super) frozen_until: Option<Instant>,
    /// What each source (consumer, writers, I/O) has ready and not yet delivered: the seeded
    /// schedule picks the order in which these arrive at the coordinator's inbox.
    pub(super) arrivals: [VecDeque<Input>; 3],
}

/// The coordinator's settings in the simulation: the daemon's shape with the simulation's
/// intervals.
fn coordinator_settings(router: Arc<Router>) -> CoordinatorSettings {
    CoordinatorSettings {
        router,
        checkpoint_interval: CHECKPOINT_INTERVAL,
        writer_drain: HANDOFF_DEADLINE / 2,
        shutdown_deadline: Duration::from_secs(10),
        writer_channel: 64,
        zombie_confirm_after: SESSION_TIMEOUT,
        stall_after: Duration::from_secs(60),
    }
}

impl Sim {
    pub(super) fn start(&mut self, r: usize) {
        self.processes += 1;
        // A new process: nothing delivered to its writers yet.
        let number = self.processes;
        let mut w = self.w();
        w.running[r] = number;
        w.ledgers.insert(number, BTreeMap::new());
        drop(w);
        let gate = Arc::new(Gate(AtomicU8::new(RUNNING)));
        let metrics = Arc::new(Metrics::new());
        self.all_metrics.push(metrics.clone());
        let client = WriteClient::with_transport(Arc::new(SimWrite {
            world: SharedDebug(self.world.clone()),
            gate: gate.clone(),
            process: r,
            number: self.processes,
        }));
        let writer_shared = self.writer_shared(client.clone(), &gate, &metrics);
        let rest = RestClient::with_transport(Arc::new(SimRest {
            world: SharedDebug(self.world.clone()),
            gate: gate.clone(),
            process: r,
        }));
        let router = Arc::new(Router::new(
            self.route.config.clone(),
            rest.clone(),
            client,
            metrics.clone(),
            "kbq-sim".into(),
        ));
        router.insert_resolved(TOPIC, self.resolved_route(&router));
        let (command_tx, command_rx) = std_mpsc::channel();
        let (event_tx, event_rx) = mpsc::unbounded_channel();
        let coordinator = Coordinator::new(
            self.machine(),
            coordinator_settings(router),
            ConsumerHandle::detached(command_tx),
            event_rx,
            writer_shared,
            rest,
            metrics.clone(),
            Arc::new(Health::new(Duration::from_secs(3600))),
        );
        let member = self.join();
        self.procs[r] = Some(Process {
            gate,
            coordinator: Some(coordinator),
            consumer: Consumer::new(member, command_rx, event_tx),
            next_tick: Instant::now() + CHECKPOINT_INTERVAL,
            shutdown_at: None,
            frozen_until: None,
            arrivals: Default::default(),
        });
        self.trace(format!(
            "process r{r} starts (#{}) as member m{member}",
            self.processes
        ));
        self.rebalance();
    }

    /// What the process's writers share: the write client, the dead-letter topic, and writer
    /// settings whose batch size and linger the seed draws.
    fn writer_shared(
        &mut self,
        client: WriteClient,
        gate: &Arc<Gate>,
        metrics: &Arc<Metrics>,
    ) -> Arc<WriterShared> {
        let (max_rows, linger) = {
            let mut w = self.w();
            (
                w.rng.random_range(2..8usize),
                Duration::from_millis(w.rng.random_range(5..200)),
            )
        };
        Arc::new(WriterShared {
            client,
            dead_letter: Some(DeadLetterProducer::with_sink(
                Arc::new(SimDlq {
                    world: self.world.clone(),
                    gate: gate.clone(),
                }),
                "events-dlq",
            )),
            metrics: metrics.clone(),
            stream_creation: Arc::new(StreamCreationLimiter::new(50, 50.0)),
            settings: WriterSettings {
                max_request_bytes: 1 << 20,
                max_rows_per_request: max_rows,
                linger,
                session: SessionLimits {
                    max_inflight_requests: 3,
                    max_inflight_bytes: 1 << 20,
                    response_timeout: Duration::from_secs(5),
                    reconnect_backoff_min: Duration::from_millis(100),
                    reconnect_backoff_max: Duration::from_secs(2),
                    max_reconnect_attempts: 5,
                },
                on_bad_record: BadRecordPolicy::DeadLetter,
                lookup_backoff: Duration::from_secs(1),
                default_stream: self.mode.at_least_once(),
            },
        })
    }

    /// The topic's route as resolution would find it: the table, whether the group's marker
    /// is on it already, the seed's plans.
    fn resolved_route(&self, router: &Router) -> Arc<Route> {
        // What the route's resolution reads: whether the group's marker is on the table.
        let marked = {
            let table = TableRef::parse(TABLE).expect("table");
            let w = self.w();
            let table = w.store.get_table(&table).expect("table");
            table.labels.contains_key(router.group_label())
        };
        Arc::new(Route {
            index: None,
            table: TableReference::new("p", "d", "events"),
            fingerprint: TableFingerprint::of_table_path(TABLE),
            marked,
            writer: Arc::new(WriterRoute {
                table: TABLE.into(),
                table_label: "events".into(),
                plans: self.route.plans.clone(),
                cdc: self.route.cdc.clone().map(|p| p as Arc<dyn ChangeSource>),
                filter: kbq_transcode::transforms::Filter::default(),
                keys: None,
            }),
            // The `resolve` query's columns: the record's offset and partition.
            resolve: Some(ResolveColumns {
                topic: None,
                partition: "part".into(),
                offset: "id".into(),
            }),
        })
    }

    /// The machine the mode runs, as the daemon chooses it by `delivery` (pipeline.rs).
    fn machine(&self) -> Machine {
        let mut config = ProtocolConfig::new();
        config.on_missing_checkpoint = self.missing_checkpoint;
        if self.retention {
            config.on_out_of_range = OutOfRangePolicy::Earliest;
        }
        if let Some(cap) = self.max_uncommitted_bytes {
            config.max_uncommitted_bytes = cap;
        }
        if self.mode.at_least_once() {
            Machine::AtLeastOnce(AtLeastOnceLedger::new(config))
        } else {
            Machine::ExactlyOnce(CheckpointProtocol::new(config))
        }
    }

    /// SIGKILL: nothing of the process runs again; the group notices at the session timeout.
    pub(super) fn crash(&mut self, r: usize) {
        let Some(mut proc) = self.procs[r].take() else {
            return;
        };
        proc.gate.set(DEAD);
        if let Some(mut c) = proc.coordinator.take() {
            c.kill();
        }
        self.trace(format!("process r{r} crashes"));
        let delay = Duration::from_millis(self.w().rng.random_range(100..15_000));
        self.restart_at[r] = Some(Instant::now() + delay);
    }

    /// The process ended by itself (a clean shutdown, or a fatal consumer error).
    pub(super) fn exited(&mut self, r: usize, why: &str) {
        self.trace(format!("process r{r} exits: {why}"));
        if let Some(mut proc) = self.procs[r].take() {
            proc.gate.set(DEAD);
            if let Some(mut c) = proc.coordinator.take() {
                c.kill();
            }
            let member = proc.consumer.member;
            if self.group.members.remove(&member) {
                self.expel_partitions(member);
            }
        }
        let delay = Duration::from_millis(self.w().rng.random_range(100..5_000));
        self.restart_at[r] = Some(Instant::now() + delay);
    }

    /// One turn of process `r`'s coordinator: its `run` loop's arms, the choice among the
    /// ready sources (consumer, writers, finished I/O) made by the seeded generator.
    pub(super) fn coordinator_step(&mut self, r: usize) {
        let now = Instant::now();
        let mut exit = None;
        let mut ended = false;
        {
            let world = self.world.clone();
            let Some(proc) = self.procs[r].as_mut() else {
                return;
            };
            let Some(c) = proc.coordinator.as_mut() else {
                return;
            };
            if now >= proc.next_tick {
                proc.next_tick += CHECKPOINT_INTERVAL;
                c.step_tick();
            }
            if proc.shutdown_at.is_some_and(|d| now >= d) {
                proc.shutdown_at = Some(c.step_shutdown_deadline());
            }
            for _ in 0..10_000 {
                c.take_ready(&mut proc.arrivals);
                let ready: Vec<usize> = (0..3).filter(|&i| !proc.arrivals[i].is_empty()).collect();
                if ready.is_empty() {
                    break;
                }
                let pick = ready[lock(&world).rng.random_range(0..ready.len())];
                let event = proc.arrivals[pick].pop_front().expect("ready");
                if c.step(event, &mut exit).is_break() {
                    ended = true;
                    break;
                }
            }
        }
        if let Some(Exit::ConsumerFailed(reason)) = &exit {
            self.trace(format!("r{r} consumer fatal: {reason}"));
        }
        if ended {
            self.exited(r, "left the group");
        }
    }
}
