//! The coordinator: the one async shell of both delivery modes around a pure [`Machine`] (the
//! exactly-once protocol or the at-least-once ledger; docs/architecture.md). Every input —
//! consumer events, writer events, finished I/O, the checkpoint tick, shutdown and its deadline —
//! is appended to one FIFO inbox and handled strictly in order; an action whose result is a
//! follow-up event appends that event to the inbox, so no event is ever handled inside another
//! (the model tests queue events the same way). Kafka commits go to the consumer thread (which
//! makes them under its commit lock), FlushRows/FinalizeWriteStream, marker writes and the
//! `resolve` query run as tasks whose results come back as inputs, writers are started and
//! stopped here.
//!
//! Nothing here decides anything about delivery: the machine does; this module only moves bytes
//! and measures. Its rooms: the inputs translated into the machine's events (`events`), the
//! actions executed (`actions`), the I/O tasks (`io`), the one metrics path (`outcomes`), the one
//! readiness rule (`readiness`), routes being resolved (`resolving`), and the simulation's stepping
//! API (`stepping`, tests only).

mod actions;
mod events;
mod io;
pub(crate) use io::flush_outcome;
mod outcomes;
mod readiness;
mod resolving;
#[cfg(feature = "testing")]
mod stepping;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::bigquery::rest_client::RestClient;
use crate::bigquery::write_client::WriteClient;
use crate::kafka::consumer::{ConsumerCommand, ConsumerEvent, ConsumerHandle};
use crate::ops::http::Health;
use crate::ops::metrics::Metrics;
use crate::tables::{Route, Router};
use crate::writer::partition_writer::{WriterEvent, WriterHandle, WriterShared};

use super::denied::DeniedFlushes;
use super::machine::Machine;
use super::stall::StallWatch;
use crate::deadline::sleep_until;
use kbq_core::metadata::TableFingerprint;
use kbq_core::offsets::{Incarnation, NextOffset};
use kbq_core::protocol::{Assignment, Event, MarkerRequests, TopicPartition};
use resolving::Resolving;

#[derive(Clone)]
pub struct CoordinatorSettings {
    /// The table of each topic (and the group's marker label).
    pub router: Arc<Router>,
    pub checkpoint_interval: Duration,
    /// Budget of a writer's drain on revoke/shutdown.
    pub writer_drain: Duration,
    pub shutdown_deadline: Duration,
    /// Record channel depth per writer.
    pub writer_channel: usize,
    /// How long a zombie partition waits before asking the consumer whether the group still
    /// gives it to this member (a session timeout: a member fenced by the group learns it by
    /// then).
    pub zombie_confirm_after: Duration,
    /// `checkpoint.partition_stall_timeout`: a partition whose acknowledged position has not
    /// moved for this long while records wait for it turns readiness false.
    pub stall_after: Duration,
}

pub struct Coordinator {
    machine: Machine,
    /// Every input, handled strictly in order; follow-up events of actions are appended here.
    inbox: VecDeque<Input>,
    /// How the run ends, once the consumer thread failed for good.
    exit: Option<Exit>,
    settings: CoordinatorSettings,
    consumer: ConsumerHandle,
    consumer_events: mpsc::UnboundedReceiver<ConsumerEvent>,
    writer_shared: Arc<WriterShared>,
    writers: HashMap<TopicPartition, WriterHandle>,
    /// Writers asked to drain: whatever ends them answers the machine's `StopWriter`.
    draining: HashSet<TopicPartition>,
    writer_tx: mpsc::UnboundedSender<WriterEvent>,
    writer_rx: mpsc::UnboundedReceiver<WriterEvent>,
    io: JoinSet<Event>,
    client: WriteClient,
    rest: RestClient,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    failed: HashMap<TopicPartition, String>,
    /// Tables whose group marker failed to be written and has not landed since.
    unlabelled: HashSet<TableFingerprint>,
    /// Start of the cycle in flight, for its duration.
    cycle_started: Option<Instant>,
    /// Last visible offset per partition, to count rows made visible.
    visible: HashMap<TopicPartition, NextOffset>,
    /// The cycle in flight was abandoned.
    cycle_abandoned: bool,
    /// The cycle in flight committed offsets or flushed rows (else it was empty).
    cycle_worked: bool,
    /// Routes being resolved for assigned partitions of topics seen for the first time.
    resolving: Resolving,
    /// Owned partitions whose committed offset or watermarks could not be read yet.
    unknown: HashSet<TopicPartition>,
    stalls: StallWatch,
    denied: DeniedFlushes,
    /// Cycle flushes sent per partition since shutdown began: the final cycles run back to back,
    /// so a flush that keeps failing transiently is retried with the recovery backoff by this
    /// count instead of in a tight loop that would spend the shutdown deadline on one partition.
    shutdown_flushes: Option<HashMap<TopicPartition, u32>>,
}

/// How the coordinator ended.
#[derive(Debug)]
pub enum Exit {
    /// SIGTERM handled: final checkpoint made, group left.
    Shutdown,
    /// The consumer failed for good.
    ConsumerFailed(String),
}

/// One input of the inbox.
pub enum Input {
    Consumer(ConsumerEvent),
    Writer(WriterEvent),
    /// Finished I/O, or the follow-up event of an action: for the machine as it is.
    Machine(Event),
    /// A topic's route resolved (or not) for an assigned partition.
    RouteResolved {
        tp: TopicPartition,
        assignment: Assignment,
        /// The machine's marker requests when the assignment was received.
        read_at: MarkerRequests,
        route: Result<Arc<Route>, String>,
    },
    /// The checkpoint ticker.
    Tick,
    /// SIGTERM or SIGINT.
    Shutdown,
    /// The shutdown deadline passed.
    ShutdownDeadline,
}

impl Coordinator {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        machine: Machine,
        settings: CoordinatorSettings,
        consumer: ConsumerHandle,
        consumer_events: mpsc::UnboundedReceiver<ConsumerEvent>,
        writer_shared: Arc<WriterShared>,
        rest: RestClient,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Self {
        let (writer_tx, writer_rx) = mpsc::unbounded_channel();
        let client = writer_shared.client.clone();
        let stalls = StallWatch::new(settings.stall_after);
        let denied = DeniedFlushes::new(metrics.partitions_retrying.clone());
        Coordinator {
            machine,
            inbox: VecDeque::new(),
            exit: None,
            settings,
            consumer,
            consumer_events,
            writer_shared,
            writers: HashMap::new(),
            draining: HashSet::new(),
            writer_tx,
            writer_rx,
            io: JoinSet::new(),
            client,
            rest,
            metrics,
            health,
            failed: HashMap::new(),
            unlabelled: HashSet::new(),
            cycle_started: None,
            visible: HashMap::new(),
            cycle_abandoned: false,
            cycle_worked: false,
            resolving: Resolving::new(),
            unknown: HashSet::new(),
            stalls,
            denied,
            shutdown_flushes: None,
        }
    }

    /// Runs until shutdown completes. `shutdown` is cancelled on SIGTERM/SIGINT. The `select!`
    /// only waits for the next input; every input goes through the inbox.
    pub async fn run(mut self, shutdown: CancellationToken) -> Exit {
        let mut ticker = tokio::time::interval(self.settings.checkpoint_interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticker.tick().await;
        let mut deadline: Option<Instant> = None;
        self.update_readiness();
        loop {
            self.health.beat();
            let input = tokio::select! {
                _ = shutdown.cancelled(), if deadline.is_none() => {
                    deadline = Some(Instant::now() + self.settings.shutdown_deadline);
                    Input::Shutdown
                }
                _ = sleep_until(deadline) => {
                    deadline = Some(Instant::now() + SAY_AGAIN);
                    Input::ShutdownDeadline
                }
                _ = ticker.tick() => Input::Tick,
                event = self.consumer_events.recv() => match event {
                    Some(event) => Input::Consumer(event),
                    // The thread ended without closing (it died outside its own catch): the
                    // consumer failed, and the process must end rather than hold partitions.
                    None => {
                        self.exit.get_or_insert_with(|| {
                            Exit::ConsumerFailed("the consumer thread ended without closing".into())
                        });
                        Input::Consumer(crate::kafka::consumer::ConsumerEvent::Closed)
                    }
                },
                Some(event) = self.writer_rx.recv() => Input::Writer(event),
                Some((tp, assignment, read_at, route)) = self.resolving.next(), if !self.resolving.is_idle() => {
                    Input::RouteResolved { tp, assignment, read_at, route }
                }
                Some(done) = self.io.join_next(), if !self.io.is_empty() => match done {
                    Ok(event) => Input::Machine(event),
                    Err(_) => continue,
                },
            };
            if self.deliver(input).is_break() {
                break;
            }
        }
        for (_, mut writer) in self.writers.drain() {
            writer.stop(Duration::ZERO);
        }
        let consumer = self.consumer;
        let _ = tokio::task::spawn_blocking(move || consumer.join()).await;
        self.exit.unwrap_or(Exit::Shutdown)
    }

    /// Appends `input` to the inbox and handles the inbox in order until it is empty; `Break`
    /// once the consumer thread ended.
    pub(crate) fn deliver(&mut self, input: Input) -> std::ops::ControlFlow<()> {
        self.inbox.push_back(input);
        while let Some(input) = self.inbox.pop_front() {
            let flow = self.handle(input);
            self.after_event();
            if flow.is_break() {
                self.inbox.clear();
                return flow;
            }
        }
        std::ops::ControlFlow::Continue(())
    }

    fn handle(&mut self, input: Input) -> std::ops::ControlFlow<()> {
        match input {
            Input::Consumer(event) => return self.consumer_event(event),
            Input::Writer(event) => self.on_writer(event),
            Input::Machine(event) => self.feed(event),
            Input::RouteResolved {
                tp,
                assignment,
                read_at,
                route,
            } => self.route_resolved(tp, assignment, read_at, route),
            Input::Tick => self.tick(),
            Input::Shutdown => {
                tracing::info!("shutdown requested: final checkpoint");
                self.shutdown_flushes = Some(HashMap::new());
                self.feed(Event::Shutdown);
            }
            Input::ShutdownDeadline => {
                tracing::warn!("shutdown deadline passed");
                self.feed(Event::ShutdownDeadline);
            }
        }
        std::ops::ControlFlow::Continue(())
    }

    /// The checkpoint ticker: readiness, and a cycle unless one is in flight.
    fn tick(&mut self) {
        self.update_readiness();
        if !self.machine.cycle_in_flight() {
            self.cycle_started = Some(Instant::now());
            self.feed(Event::StartCycle);
        }
    }

    /// One event for the machine; its actions are executed in order.
    fn feed(&mut self, event: Event) {
        self.denied.observe(&event);
        let actions = self.machine.handle(event);
        // A cycle the machine started by itself (a first position to commit, a marker that
        // landed) is measured like one of the ticker's.
        if self.cycle_started.is_none() && self.machine.cycle_in_flight() {
            self.cycle_started = Some(Instant::now());
        }
        for action in actions {
            self.execute(action);
        }
    }

    /// The route of a partition the machine holds (resolved before it was assigned).
    fn route(&self, tp: &TopicPartition) -> Arc<Route> {
        self.settings
            .router
            .cached(&tp.topic)
            .expect("a partition reaches the machine only after its route is resolved")
    }

    fn is_current(&self, tp: &TopicPartition, incarnation: Incarnation) -> bool {
        self.writers
            .get(tp)
            .is_some_and(|w| w.incarnation == incarnation)
    }

    /// The table of a fingerprint, for logs.
    fn table_name(&self, table: TableFingerprint) -> String {
        self.settings
            .router
            .by_fingerprint(table)
            .map_or_else(|| table.to_string(), |r| r.table.resource_name())
    }

    fn mark_failed(&mut self, tp: TopicPartition, reason: String) {
        if self.failed.insert(tp, reason).is_none() {
            self.metrics.partitions_failed.inc();
        }
        self.update_readiness();
    }

    /// The partition's writer is gone for good (it failed, or its seek did): the partition
    /// stops where its acknowledged prefix ends, which keeps being checkpointed, and readiness
    /// turns false so an operator looks. A writer asked to drain sends no `Stopped` then: its
    /// prefix is final all the same, which the machine hears through the inbox.
    fn writer_failed(&mut self, tp: TopicPartition, reason: String) {
        if let Some(mut writer) = self.writers.remove(&tp) {
            writer.stop(Duration::ZERO);
        }
        self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
        if self.draining.remove(&tp) {
            let stopped = Event::WriterStopped { tp: tp.clone() };
            self.inbox.push_back(Input::Machine(stopped));
        }
        self.mark_failed(tp, reason);
    }
}

/// After the shutdown deadline passed, how long until it is said again.
const SAY_AGAIN: Duration = Duration::from_secs(3600);
