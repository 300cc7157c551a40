//! The checkpoint coordinator: the async shell around the pure [`CheckpointProtocol`]. It feeds
//! the protocol every event (consumer, writers, I/O results, timers, signals) one at a time and
//! executes the actions it returns: Kafka commits go to the consumer thread (which makes them
//! under its commit lock), FlushRows/FinalizeWriteStream and the `resolve` query run as tasks
//! whose results come back as events, writers are started and stopped here.
//!
//! Nothing here decides anything about exactly-once: the protocol does; this file only moves
//! bytes and measures.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::bigquery::error::ErrorClass;
use crate::bigquery::rest_client::{FilterValue, RestClient, TableReference};
use crate::bigquery::write_client::WriteClient;
use crate::kafka::consumer::{ConsumerCommand, ConsumerEvent, ConsumerHandle};
use crate::ops::http::Health;
use crate::ops::metrics::{KindLabel, Metrics, OutcomeLabel, TableLabel, TopicLabel};
use crate::tables::{Route, Router};
use crate::writer::partition_writer::{self, WriterEvent, WriterHandle, WriterShared};

use super::denied::DeniedFlushes;
use super::machine::Machine;
use super::metadata::TableFingerprint;
use super::offsets::{Incarnation, KafkaOffset, NextOffset, RowOffset, StreamId};
use super::protocol::{
    Action, Assignment, CommitError, Event, FailReason, FlushOutcome, FlushPurpose, Outcome,
    TopicPartition,
};
use super::stall::{StallChange, StallWatch};

/// Where the `resolve` recovery finds a partition's rows: the metadata columns.
#[derive(Debug, Clone)]
pub struct ResolveColumns {
    pub topic: Option<String>,
    pub partition: String,
    pub offset: String,
}

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
    /// The cycle in flight was abandoned (counted already).
    cycle_abandoned: bool,
    /// The cycle in flight committed offsets or flushed rows (else it was empty).
    cycle_worked: bool,
    /// Routes being resolved for assigned partitions of topics seen for the first time.
    routing: Routing,
    /// Owned partitions whose committed offset or watermarks could not be read yet.
    unknown: HashSet<TopicPartition>,
    stalls: StallWatch,
    denied: DeniedFlushes,
    /// Cycle flushes sent per partition since shutdown began: the final cycles run back to back,
    /// so a flush that keeps failing transiently is retried with the recovery backoff by this
    /// count instead of in a tight loop until the deadline (issue 11 #15).
    shutdown_flushes: Option<HashMap<TopicPartition, u32>>,
}

/// Assigned partitions whose topic's route (and table) is being resolved: the protocol hears of
/// them only once it is, so their recovery reads the right table.
pub(crate) struct Routing {
    tasks: JoinSet<(TopicPartition, u64, Result<Arc<Route>, String>)>,
    /// The assignment waiting per partition, under a generation: a resolution that finishes
    /// after the partition was revoked (or assigned again) is dropped.
    waiting: HashMap<TopicPartition, (u64, Assignment)>,
    next: u64,
}

impl Routing {
    pub(crate) fn new() -> Self {
        Routing {
            tasks: JoinSet::new(),
            waiting: HashMap::new(),
            next: 0,
        }
    }

    /// Resolves `tp`'s route in the background.
    pub(crate) fn start(&mut self, router: &Arc<Router>, tp: TopicPartition, a: Assignment) {
        self.next += 1;
        let generation = self.next;
        self.waiting.insert(tp.clone(), (generation, a));
        let router = router.clone();
        self.tasks.spawn(async move {
            let route = router
                .resolve(&tp.topic)
                .await
                .map_err(|e| format!("{e:#}"));
            (tp, generation, route)
        });
    }

    /// The partition is no longer ours: its resolution is dropped when it ends.
    pub(crate) fn forget(&mut self, tp: &TopicPartition) {
        self.waiting.remove(tp);
    }

    /// The next finished resolution of a partition still waiting for it.
    pub(crate) async fn next(
        &mut self,
    ) -> Option<(TopicPartition, Assignment, Result<Arc<Route>, String>)> {
        loop {
            let Ok((tp, generation, route)) = self.tasks.join_next().await? else {
                continue;
            };
            if self.waiting.get(&tp).is_some_and(|(g, _)| *g == generation) {
                let (_, a) = self.waiting.remove(&tp).expect("checked");
                return Some((tp, a, route));
            }
        }
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.tasks.is_empty()
    }
}

/// How the coordinator ended.
#[derive(Debug)]
pub enum Exit {
    /// SIGTERM handled: final checkpoint made, group left.
    Shutdown,
    /// The consumer failed for good.
    ConsumerFailed(String),
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
        let settings_stall_after = settings.stall_after;
        let denied = DeniedFlushes::new(metrics.partitions_retrying.clone());
        Coordinator {
            machine,
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
            routing: Routing::new(),
            unknown: HashSet::new(),
            stalls: StallWatch::new(settings_stall_after),
            denied,
            shutdown_flushes: None,
        }
    }

    /// Runs until shutdown completes. `shutdown` is cancelled on SIGTERM/SIGINT.
    pub async fn run(mut self, shutdown: CancellationToken) -> Exit {
        let mut ticker = tokio::time::interval(self.settings.checkpoint_interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticker.tick().await;
        let mut shutdown_deadline: Option<Instant> = None;
        let mut exit = None;
        self.update_readiness();
        loop {
            self.health.beat();
            tokio::select! {
                _ = shutdown.cancelled(), if shutdown_deadline.is_none() => {
                    shutdown_deadline = Some(self.shutdown_requested());
                }
                _ = sleep_until(shutdown_deadline) => {
                    shutdown_deadline = Some(self.shutdown_deadline_passed());
                }
                _ = ticker.tick() => self.tick(),
                Some(event) = self.consumer_events.recv() => {
                    if self.consumer_event(event, &mut exit).is_break() {
                        break;
                    }
                }
                Some(event) = self.writer_rx.recv() => self.on_writer(event),
                Some((tp, assignment, route)) = self.routing.next(), if !self.routing.is_idle() => {
                    self.routed(tp, assignment, route);
                }
                Some(done) = self.io.join_next(), if !self.io.is_empty() => {
                    if let Ok(event) = done {
                        self.feed(event);
                    }
                }
            }
            self.after_event();
        }
        for (_, mut writer) in self.writers.drain() {
            writer.stop(Duration::ZERO);
        }
        let consumer = self.consumer;
        let _ = tokio::task::spawn_blocking(move || consumer.join()).await;
        exit.unwrap_or(Exit::Shutdown)
    }

    /// SIGTERM: the final checkpoint starts; returns when its deadline passes.
    fn shutdown_requested(&mut self) -> Instant {
        tracing::info!("shutdown requested: final checkpoint");
        self.shutdown_flushes = Some(HashMap::new());
        self.feed(Event::Shutdown);
        Instant::now() + self.settings.shutdown_deadline
    }

    /// The final checkpoint's deadline passed; returns when to say so again.
    fn shutdown_deadline_passed(&mut self) -> Instant {
        tracing::warn!("shutdown deadline passed");
        self.feed(Event::ShutdownDeadline);
        Instant::now() + Duration::from_secs(3600)
    }

    /// The checkpoint ticker: readiness, and a cycle unless one is in flight.
    fn tick(&mut self) {
        self.update_readiness();
        if !self.machine.cycle_in_flight() {
            self.cycle_started = Some(Instant::now());
            self.feed(Event::StartCycle);
        }
    }

    /// One event of the consumer thread; `Break` once the thread ended.
    fn consumer_event(
        &mut self,
        event: ConsumerEvent,
        exit: &mut Option<Exit>,
    ) -> std::ops::ControlFlow<()> {
        match event {
            ConsumerEvent::Closed => return std::ops::ControlFlow::Break(()),
            ConsumerEvent::Fatal(reason) => {
                tracing::error!(reason = %reason, "kafka consumer failed");
                *exit = Some(Exit::ConsumerFailed(reason));
                self.consumer.send(ConsumerCommand::Shutdown);
            }
            other => self.on_consumer(other),
        }
        std::ops::ControlFlow::Continue(())
    }

    /// After each event of the run loop: a cycle that ended is measured and counted.
    fn after_event(&mut self) {
        if self.cycle_started.is_none() || self.machine.cycle_in_flight() {
            return;
        }
        let started = self.cycle_started.take().expect("checked");
        let duration = started.elapsed();
        self.metrics
            .checkpoint_duration
            .observe(duration.as_secs_f64());
        let worked = std::mem::take(&mut self.cycle_worked);
        let outcome = if std::mem::take(&mut self.cycle_abandoned) {
            "abandoned"
        } else {
            // Nothing to commit or flush: every checkpoint is current, which is a
            // success for the age gauge and readiness.
            self.metrics.checkpoint_succeeded();
            let outcome = if worked { "committed" } else { "empty" };
            self.metrics
                .checkpoints
                .get_or_create(&OutcomeLabel { outcome })
                .inc();
            outcome
        };
        tracing::debug!(
            outcome,
            duration_ms = duration.as_millis() as u64,
            partitions = self.writers.len(),
            "checkpoint cycle"
        );
    }

    fn feed(&mut self, event: Event) {
        self.denied.observe(&event);
        let actions = self.machine.handle(event);
        for action in actions {
            self.execute(action);
        }
    }

    fn on_consumer(&mut self, event: ConsumerEvent) {
        match event {
            ConsumerEvent::Assigned(partitions) => {
                let m = self.metrics.clone();
                m.rebalances
                    .get_or_create(&KindLabel { kind: "assign" })
                    .inc();
                for (tp, result) in partitions {
                    m.partitions_assigned.inc();
                    match result {
                        Ok(assignment) => self.assigned(tp, assignment),
                        Err(reason) => self.assignment_unknown(tp, reason),
                    }
                }
            }
            ConsumerEvent::AssignmentRead { tp, result } => {
                if self.unknown.remove(&tp) {
                    match result {
                        Ok(assignment) => self.assigned(tp, assignment),
                        Err(reason) => self.assignment_unknown(tp, reason),
                    }
                }
            }
            ConsumerEvent::SeekFailed { tp, reason } => {
                if let Some(mut writer) = self.writers.remove(&tp) {
                    writer.stop(Duration::ZERO);
                }
                self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
                self.mark_failed(tp, format!("seek failed: {reason}"));
            }
            ConsumerEvent::OffsetOutOfRange { tp, position, low } => {
                // The protocol applies `recovery.on_out_of_range` to the incarnation running.
                match self.writers.get(&tp).map(|w| w.incarnation) {
                    Some(incarnation) => self.feed(Event::OffsetOutOfRange {
                        tp,
                        incarnation,
                        position,
                        low,
                    }),
                    None => {
                        tracing::warn!(partition = %tp, position = position.0, low = low.0, "offset out of range for a partition without a writer")
                    }
                }
            }
            ConsumerEvent::Loads(loads) => {
                for load in loads {
                    self.stalls.loaded(load);
                }
            }
            ConsumerEvent::RevokeBegan { partitions, lost } => {
                let kind = if lost { "lost" } else { "revoke" };
                self.metrics
                    .rebalances
                    .get_or_create(&KindLabel { kind })
                    .inc();
                for tp in partitions {
                    tracing::info!(partition = %tp, lost, "partition revoked: handing off");
                    self.routing.forget(&tp);
                    self.unknown.remove(&tp);
                    self.feed(Event::RevokeBegan { tp, lost });
                }
                // Every commit sent from now on was built knowing of the revoke.
                self.consumer.send(ConsumerCommand::RevokeSeen);
            }
            ConsumerEvent::HandoffDeadline(partitions) => {
                for tp in partitions {
                    self.feed(Event::HandoffDeadline { tp });
                }
            }
            ConsumerEvent::CommitDone { commit, outcome } => {
                self.feed(Event::CommitResult { commit, outcome });
            }
            ConsumerEvent::Reread { tp, assignment } => {
                self.feed(Event::CheckpointReread { tp, assignment });
            }
            ConsumerEvent::RereadFailed { tp, reason } => {
                // Never read as "no offset": ask again after a pause.
                tracing::warn!(partition = %tp, reason = %reason, "cannot read the committed offset, retrying");
                let commands = self.consumer.sender();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let _ = commands.send(ConsumerCommand::ReadCommitted { tp });
                });
            }
            ConsumerEvent::OwnershipConfirmed { tp, assignment } => {
                if self.machine.is_zombie(&tp)
                    && let Some(route) = self.settings.router.cached(&tp.topic)
                {
                    // Nobody else took the partition: whoever finalized our stream was not its
                    // next owner (an operator, a tool). Recover it like a new assignment, from
                    // the checkpoint in Kafka and what this process knows.
                    tracing::warn!(partition = %tp, "zombie partition still assigned to this member: recovering it");
                    self.feed(Event::Assigned {
                        tp,
                        table: route.routed_table(),
                        assignment,
                    });
                }
            }
            ConsumerEvent::OwnershipUnknown { tp, reason } => {
                tracing::warn!(partition = %tp, reason = %reason, "cannot confirm ownership of a zombie partition, retrying");
                self.confirm_ownership_later(tp, Duration::from_secs(1));
            }
            ConsumerEvent::Fatal(_) | ConsumerEvent::Closed => {}
        }
    }

    /// An assigned partition whose committed offset and watermarks are known: its recovery
    /// starts once its topic is routed.
    fn assigned(&mut self, tp: TopicPartition, assignment: Assignment) {
        tracing::info!(partition = %tp, committed = ?assignment.committed.as_ref().map(|c| c.offset.0), low = assignment.low.0, high = assignment.high.0, "partition assigned");
        let base = assignment
            .committed
            .as_ref()
            .map_or(assignment.low, |c| c.offset);
        self.stalls
            .assigned(tp.clone(), base, Instant::now().into_std());
        match self.settings.router.cached(&tp.topic) {
            Some(route) => self.feed(Event::Assigned {
                tp,
                table: route.routed_table(),
                assignment,
            }),
            // A topic seen for the first time (a pattern subscription): its table is read or
            // created before its recovery starts.
            None => self.routing.start(&self.settings.router, tp, assignment),
        }
    }

    /// An owned partition whose committed offset or watermarks could not be read (a group
    /// coordinator loading, a leader away): never read as "no offset", never the end of the
    /// process; asked again after a pause.
    fn assignment_unknown(&mut self, tp: TopicPartition, reason: String) {
        tracing::warn!(partition = %tp, reason = %reason, "cannot read the assigned partition's committed offset or watermarks, retrying");
        self.unknown.insert(tp.clone());
        let commands = self.consumer.sender();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = commands.send(ConsumerCommand::ReadAssignment { tp });
        });
    }

    /// A route resolved for an assigned partition: its recovery starts; or the table cannot be
    /// read or created: the partition fails closed (nothing consumed, readiness false).
    fn routed(
        &mut self,
        tp: TopicPartition,
        assignment: Assignment,
        route: Result<Arc<Route>, String>,
    ) {
        match route {
            Ok(route) => self.feed(Event::Assigned {
                tp,
                table: route.routed_table(),
                assignment,
            }),
            Err(reason) => {
                tracing::error!(partition = %tp, reason = %reason, "cannot route the partition's topic: partition stopped");
                self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
                self.mark_failed(tp, format!("no route: {reason}"));
            }
        }
    }

    /// The route of a partition the protocol holds (resolved before it was assigned).
    fn route(&self, tp: &TopicPartition) -> Arc<Route> {
        self.settings
            .router
            .cached(&tp.topic)
            .expect("a partition reaches the protocol only after its route is resolved")
    }

    fn on_writer(&mut self, event: WriterEvent) {
        match event {
            WriterEvent::Acknowledged { tp, ack } => {
                self.stalls
                    .acknowledged(&tp, ack.next(), Instant::now().into_std());
                self.feed(Event::RowsAcknowledged { tp, ack })
            }
            WriterEvent::StreamLost {
                tp,
                incarnation,
                stream,
            } => {
                if self.is_current(&tp, incarnation) {
                    tracing::warn!(partition = %tp, stream = %stream, "write stream lost: new incarnation");
                    self.writers.remove(&tp);
                    self.feed(Event::StreamLost { tp, stream });
                }
            }
            WriterEvent::Zombie {
                tp,
                incarnation,
                stream,
            } => {
                if self.is_current(&tp, incarnation) {
                    tracing::error!(partition = %tp, stream = %stream, "own stream finalized by another owner: this writer is a zombie");
                    self.writers.remove(&tp);
                    // The protocol's ZombieStopped count asks the group who owns it.
                    self.feed(Event::ZombieDetected { tp, stream });
                }
            }
            WriterEvent::Stopped { tp, incarnation } => {
                if self.is_current(&tp, incarnation) {
                    self.writers.remove(&tp);
                    self.draining.remove(&tp);
                    self.feed(Event::WriterStopped { tp });
                }
            }
            WriterEvent::Failed {
                tp,
                incarnation,
                reason,
            } => {
                if self.is_current(&tp, incarnation) {
                    // The partition stops where its acknowledged prefix ends; that prefix keeps
                    // being checkpointed. Readiness turns false so an operator looks.
                    tracing::error!(partition = %tp, reason = %reason, "writer failed: partition stopped");
                    self.writers.remove(&tp);
                    self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
                    self.mark_failed(tp.clone(), reason);
                    // A writer that ends on an error while draining sends no `Stopped`: its
                    // acknowledged prefix is final all the same.
                    if self.draining.remove(&tp) {
                        self.feed(Event::WriterStopped { tp });
                    }
                }
            }
        }
    }

    fn confirm_ownership_later(&self, tp: TopicPartition, after: Duration) {
        let commands = self.consumer.sender();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = commands.send(ConsumerCommand::ConfirmOwnership { tp });
        });
    }

    fn is_current(&self, tp: &TopicPartition, incarnation: super::offsets::Incarnation) -> bool {
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

    /// Ready: a member of the group, no partition failed closed, and — when partitions are
    /// assigned — a checkpoint cycle succeeded within the bound. A joined replica without
    /// partitions is ready (it is idle, not broken).
    fn update_readiness(&mut self) {
        for change in self.stalls.check(Instant::now().into_std()) {
            match change {
                StallChange::Stalled {
                    tp,
                    acked,
                    high,
                    for_secs,
                } => {
                    tracing::warn!(partition = %tp, acknowledged = acked.map(|a| a.0), high = high.0, stalled_for_s = for_secs, reason = "acknowledged position not advancing while records wait", "partition stalled");
                }
                StallChange::Moving { tp } => {
                    tracing::info!(partition = %tp, "stalled partition moves again");
                }
            }
        }
        let stalled: Vec<&TopicPartition> = self
            .stalls
            .stalled()
            .filter(|tp| !self.failed.contains_key(*tp))
            .collect();
        self.metrics.partitions_stalled.set(stalled.len() as i64);
        if let Some((tp, reason)) = self.failed.iter().next() {
            self.health
                .set_not_ready(format!("partition {tp} failed: {reason}"));
            return;
        }
        if let Some(tp) = stalled.first() {
            self.health.set_not_ready(format!(
                "partition {tp} stalled: no acknowledged progress for {}s while records wait",
                self.settings.stall_after.as_secs()
            ));
            return;
        }
        if let Some(table) = self.unlabelled.iter().next() {
            self.health.set_not_ready(format!(
                "cannot write the group marker on table {}",
                self.table_name(*table)
            ));
            return;
        }
        if self.metrics.group_joined.get() == 0 {
            self.health
                .set_not_ready("not a member of the consumer group yet");
            return;
        }
        let retrying = self.metrics.partitions_retrying.get();
        if retrying > 0 {
            self.health.set_not_ready(format!(
                "{retrying} partitions wait out a permission, credential or precondition error"
            ));
            return;
        }
        let bound = self
            .machine
            .readiness_bound()
            .of(self.settings.checkpoint_interval);
        match self.metrics.checkpoint_age_seconds() {
            Some(age)
                if age > bound.as_secs_f64() && self.metrics.partitions_assigned.get() > 0 =>
            {
                self.health.set_not_ready(format!(
                    "no successful checkpoint for {age:.0}s (bound {}s)",
                    bound.as_secs()
                ));
            }
            _ => self.health.set_ready(),
        }
    }

    fn execute(&mut self, action: Action) {
        match action {
            Action::FlushRows {
                tp,
                stream,
                through,
                purpose,
                attempt,
            } => {
                let mut attempt = attempt;
                if purpose == FlushPurpose::Cycle {
                    self.cycle_worked = true;
                    if let Some(sent) = self.shutdown_flushes.as_mut() {
                        let n = sent.entry(tp.clone()).or_insert(0);
                        attempt = attempt.max(*n);
                        *n += 1;
                    }
                }
                let route = self.route(&tp);
                spawn_flush(
                    &mut self.io,
                    &self.writer_shared,
                    &route,
                    tp,
                    stream,
                    through,
                    purpose,
                    attempt,
                );
            }
            Action::ReadCommitted { tp } => {
                self.consumer.send(ConsumerCommand::ReadCommitted { tp });
            }
            Action::ResolveVisible { tp, attempt } => {
                let route = self.route(&tp);
                spawn_resolve(&mut self.io, &self.rest, &route, tp, attempt);
            }
            Action::StartIncarnation {
                tp,
                incarnation,
                from,
            } => {
                if let Some(mut old) = self.writers.remove(&tp) {
                    old.stop(Duration::ZERO);
                }
                let handle = spawn_partition_writer(
                    &self.writer_shared,
                    &self.route(&tp),
                    &tp,
                    incarnation,
                    from,
                    &self.settings,
                    &self.writer_tx,
                    &self.consumer,
                );
                tracing::info!(partition = %tp, incarnation = incarnation.0, from = from.0, "writer started");
                self.stalls.started(&tp, from, Instant::now().into_std());
                self.writers.insert(tp.clone(), handle);
                self.visible.entry(tp).or_insert(from);
            }
            Action::Seek {
                tp,
                incarnation,
                to,
            } => {
                if self.is_current(&tp, incarnation) {
                    self.consumer.send(ConsumerCommand::Seek { tp, to });
                }
            }
            Action::CommitOffsets { commit, entries } => {
                self.cycle_worked = true;
                self.consumer
                    .send(ConsumerCommand::Commit { commit, entries });
            }
            Action::FinalizeStream { tp, stream } => {
                let route = self.route(&tp);
                let client = self.client.clone();
                let name = route.stream_name(&stream);
                let metrics = self.metrics.clone();
                let label = TableLabel {
                    table: route.label().to_string(),
                };
                self.io.spawn(async move {
                    let outcome = match client.finalize_write_stream(&name).await {
                        Ok(_) => {
                            metrics.streams_finalized.get_or_create(&label).inc();
                            Ok(())
                        }
                        Err(e) => {
                            metrics.bigquery_error("FinalizeWriteStream", &e);
                            Err(e.to_string())
                        }
                    };
                    Event::FinalizeResult {
                        tp,
                        stream,
                        outcome,
                    }
                });
            }
            Action::StopWriter { tp } => {
                self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
                match self.writers.get_mut(&tp) {
                    Some(writer) => {
                        writer.stop(self.settings.writer_drain);
                        self.draining.insert(tp);
                    }
                    // No writer (recovering, failed): nothing is in flight.
                    None => self.feed(Event::WriterStopped { tp }),
                }
            }
            Action::Pause { tp } => {
                self.consumer.send(ConsumerCommand::Pause { tp });
            }
            Action::Resume { tp } => {
                self.consumer.send(ConsumerCommand::Resume { tp });
            }
            Action::Release { tp } => {
                if let Some(mut writer) = self.writers.remove(&tp) {
                    writer.stop(Duration::ZERO);
                }
                self.draining.remove(&tp);
                self.metrics.partitions_assigned.dec();
                if self.failed.remove(&tp).is_some() {
                    self.metrics.partitions_failed.dec();
                }
                self.visible.remove(&tp);
                self.stalls.forget(&tp);
                self.denied.forget(&tp);
                self.consumer.send(ConsumerCommand::Release { tp });
            }
            Action::FailPartition { tp, reason } => {
                self.fail_partition(tp, reason);
            }
            Action::LabelTable { table, attempt } => {
                spawn_label(
                    &mut self.io,
                    &self.settings.router,
                    &self.rest,
                    table,
                    attempt,
                );
            }
            Action::Count(outcome) => self.count(outcome),
            Action::ShutdownComplete => {
                tracing::info!("final checkpoint done: leaving the group");
                self.consumer.send(ConsumerCommand::Shutdown);
            }
        }
    }

    fn fail_partition(&mut self, tp: TopicPartition, reason: FailReason) {
        tracing::error!(partition = %tp, reason = %reason, "partition failed closed");
        if let Some(mut writer) = self.writers.remove(&tp) {
            writer.stop(Duration::ZERO);
        }
        self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
        self.metrics
            .recovery_actions
            .get_or_create(&OutcomeLabel { outcome: "failed" })
            .inc();
        self.mark_failed(tp, reason.to_string());
    }

    fn count(&mut self, outcome: Outcome) {
        let m = self.metrics.clone();
        let outcome = match count_recovery(&m, outcome) {
            Some(other) => other,
            None => return,
        };
        match outcome {
            Outcome::RecordsLost { tp, from, to } => {
                tracing::error!(partition = %tp, from = from.0, to = to.0, "records deleted by retention before they were visible");
            }
            Outcome::CommitFailed { tp, error } => {
                let class = match error {
                    CommitError::Partition(_) => "partition",
                    CommitError::Request(_) => "request",
                };
                tracing::warn!(partition = %tp, class, error = %error, "kafka commit failed for partition");
            }
            Outcome::CycleAbandoned => {
                self.cycle_abandoned = true;
                m.checkpoints
                    .get_or_create(&OutcomeLabel {
                        outcome: "abandoned",
                    })
                    .inc();
                tracing::warn!("checkpoint cycle abandoned");
            }
            Outcome::FlushRetried { tp } => {
                tracing::warn!(partition = %tp, "flush pending, retried next cycle");
            }
            Outcome::Visible { tp, through } => {
                let before = self.visible.insert(tp.clone(), through).unwrap_or(through);
                // Records, not rows: dead-lettered records are included (close enough for a
                // throughput metric; the exact row count is in rows_appended).
                m.rows_flushed
                    .get_or_create(&TableLabel {
                        table: self.route(&tp).label().to_string(),
                    })
                    .inc_by(before.distance_to(through));
                tracing::debug!(partition = %tp, through = through.0, "visible");
            }
            Outcome::Finalized { tp, stream } => {
                tracing::debug!(partition = %tp, stream = %stream, "superseded stream finalized");
            }
            Outcome::ZombieStopped { tp } => {
                tracing::error!(partition = %tp, "zombie writer stopped");
                // Without a rebalance nobody would ever tell the zombie what it owns: ask, on
                // every path into the zombie phase (an append or the cycle's FlushRows meeting
                // the finalized stream; issue 11).
                if self.machine.is_zombie(&tp) {
                    self.confirm_ownership_later(tp, self.settings.zombie_confirm_after);
                }
            }
            Outcome::StreamRestarted { tp } => {
                tracing::warn!(partition = %tp, "stream restarted in process");
            }
            Outcome::Paused { tp } => {
                tracing::info!(partition = %tp, "paused: uncommitted tail at its cap");
            }
            Outcome::HandedOff { tp, committed } => {
                tracing::info!(partition = %tp, committed, "partition handed off");
            }
            Outcome::HandoffAbandoned { tp } => {
                tracing::warn!(partition = %tp, "handoff abandoned at its deadline");
            }
            Outcome::LabelFailed {
                table,
                attempts,
                error,
            } => {
                if self.unlabelled.insert(table) {
                    m.table_markers_failing.inc();
                }
                self.update_readiness();
                tracing::error!(table = %self.table_name(table), attempts, error = %error, "cannot write the group marker on the table: its rows stay invisible until it lands, retrying");
            }
            Outcome::Labelled { table } => {
                if self.unlabelled.remove(&table) {
                    m.table_markers_failing.dec();
                    self.update_readiness();
                    tracing::info!(table = %self.table_name(table), "group marker written on the table");
                }
            }
            Outcome::ShutdownIncomplete { partitions } => {
                tracing::warn!(
                    partitions,
                    "shutdown deadline passed before every partition was checkpointed"
                );
            }
            #[allow(unreachable_patterns)]
            other => tracing::debug!(outcome = ?other, "protocol outcome"),
        }
    }
}

/// Spawns the write of the group's marker on the table with this fingerprint after the
/// attempt's backoff, answered as [`Event::LabelResult`] (shared by both delivery modes).
pub(crate) fn spawn_label(
    io: &mut JoinSet<Event>,
    router: &Router,
    rest: &RestClient,
    table: TableFingerprint,
    attempt: u32,
) {
    let route = router.by_fingerprint(table);
    let rest = rest.clone();
    let key = router.group_label().to_string();
    io.spawn(async move {
        backoff(attempt).await;
        let outcome = match route {
            Some(route) => rest
                .set_table_label(&route.table, &key, "committed")
                .await
                .map_err(|e| format!("{e:#}")),
            None => Err(format!("no route has the table fingerprint {table}")),
        };
        Event::LabelResult { table, outcome }
    });
}

/// Spawns the FlushRows of an [`Action::FlushRows`] on `route`'s stream after the attempt's
/// backoff, answered as the event of its purpose. Shared by both delivery modes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn_flush(
    io: &mut JoinSet<Event>,
    shared: &WriterShared,
    route: &Route,
    tp: TopicPartition,
    stream: StreamId,
    through: RowOffset,
    purpose: FlushPurpose,
    attempt: u32,
) {
    let client = shared.client.clone();
    let metrics = shared.metrics.clone();
    let name = route.stream_name(&stream);
    let label = TableLabel {
        table: route.label().to_string(),
    };
    io.spawn(async move {
        backoff(attempt).await;
        let outcome = flush(&client, &name, through, &metrics, &label).await;
        match purpose {
            FlushPurpose::Recovery => Event::RecoveryFlushResult {
                tp,
                stream,
                through,
                outcome,
            },
            FlushPurpose::Cycle => Event::FlushResult {
                tp,
                stream,
                through,
                outcome,
            },
        }
    });
}

/// Spawns the query of an [`Action::ResolveVisible`] against `route`'s table after the
/// attempt's backoff. Shared by both delivery modes.
pub(crate) fn spawn_resolve(
    io: &mut JoinSet<Event>,
    rest: &RestClient,
    route: &Route,
    tp: TopicPartition,
    attempt: u32,
) {
    let rest = rest.clone();
    let table = route.table.clone();
    let columns = route.resolve.clone();
    io.spawn(async move {
        backoff(attempt).await;
        let outcome = resolve_visible(&rest, &table, columns.as_ref(), &tp).await;
        Event::ResolveResult { tp, outcome }
    });
}

/// Spawns the writer of `tp`'s incarnation and hands the consumer its channel, from `from`.
/// Shared by both delivery modes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn_partition_writer(
    shared: &Arc<WriterShared>,
    route: &Route,
    tp: &TopicPartition,
    incarnation: Incarnation,
    from: NextOffset,
    settings: &CoordinatorSettings,
    events: &mpsc::UnboundedSender<WriterEvent>,
    consumer: &ConsumerHandle,
) -> WriterHandle {
    let (tx, rx) = mpsc::channel(settings.writer_channel);
    let handle = partition_writer::spawn(
        shared.clone(),
        route.writer.clone(),
        tp.clone(),
        incarnation,
        from,
        rx,
        events.clone(),
    );
    consumer.send(ConsumerCommand::Start {
        tp: tp.clone(),
        from,
        sink: tx,
    });
    handle
}

/// One FlushRows, timed and counted, classified as the protocol needs it
/// (docs/architecture.md#the-re-flush). Shared by both delivery modes.
pub(crate) async fn flush(
    client: &WriteClient,
    stream: &str,
    through: RowOffset,
    metrics: &Metrics,
    label: &TableLabel,
) -> FlushOutcome {
    let started = Instant::now();
    let result = client.flush_rows(stream, through.0).await;
    metrics
        .flush_latency
        .get_or_create(label)
        .observe(started.elapsed().as_secs_f64());
    match result {
        Ok(_) => FlushOutcome::Flushed,
        Err(e) => {
            metrics.bigquery_error("FlushRows", &e);
            match e.class() {
                ErrorClass::AlreadyExists => FlushOutcome::AlreadyExists,
                ErrorClass::StreamFinalized => FlushOutcome::StreamFinalized,
                ErrorClass::NotFound => FlushOutcome::NotFound,
                ErrorClass::Transient | ErrorClass::Throttled => {
                    FlushOutcome::Transient(e.to_string())
                }
                // An IAM change or a credential being rotated passes: the flush stays pending
                // and is retried (every cycle, or with the recovery backoff), never a permanent
                // stop of the partition (issue 11 #14); readiness is false meanwhile
                // (`DeniedFlushes`; docs/architecture.md#failure-policies).
                ErrorClass::Denied => {
                    tracing::error!(stream = %stream, error = %e, "flush denied, retrying");
                    FlushOutcome::Denied(e.to_string())
                }
                _ => FlushOutcome::Fatal(e.to_string()),
            }
        }
    }
}

/// The `resolve` policy's question to the table: the highest visible Kafka offset of `tp`,
/// through the metadata columns.
pub(crate) async fn resolve_visible(
    rest: &RestClient,
    table: &TableReference,
    columns: Option<&ResolveColumns>,
    tp: &TopicPartition,
) -> Result<Option<KafkaOffset>, String> {
    let Some(c) = columns else {
        return Err("the resolve policy needs the partition and offset metadata columns".into());
    };
    let mut filters = vec![(c.partition.as_str(), FilterValue::Int(tp.partition as i64))];
    if let Some(topic) = &c.topic {
        filters.push((topic.as_str(), FilterValue::Str(&tp.topic)));
    }
    rest.query_max_int(table, &c.offset, &filters)
        .await
        .map(|max| max.map(KafkaOffset))
        .map_err(|e| e.to_string())
}

/// Counts and logs what recovery did for a partition (shared by both delivery modes); hands
/// every other outcome back.
pub(crate) fn count_recovery(m: &Metrics, outcome: Outcome) -> Option<Outcome> {
    let recovery = |outcome: &'static str| {
        m.recovery_actions
            .get_or_create(&OutcomeLabel { outcome })
            .inc()
    };
    match outcome {
        Outcome::Started { tp, case, at } => {
            tracing::info!(partition = %tp, case = ?case, at = at.0, "partition starts");
        }
        Outcome::RecoveryFlushed { tp } => {
            recovery("reflushed");
            tracing::info!(partition = %tp, "recovery: committed checkpoint flushed");
        }
        Outcome::RecoveryRetried { tp, attempt } => {
            tracing::warn!(partition = %tp, attempt, "recovery flush failed transiently, retrying");
        }
        Outcome::Anomaly { tp, stream } => {
            recovery("anomaly");
            tracing::error!(partition = %tp, stream = %stream, "recovery: flush cursor past the checkpoint; rows after it may be written twice");
        }
        Outcome::Rewound { tp, from, to, .. } => {
            recovery("rewound");
            m.rewound_records
                .get_or_create(&TopicLabel {
                    topic: tp.topic.clone(),
                })
                .inc_by(from.distance_to(to));
            tracing::warn!(partition = %tp, from = from.0, to = to.0, "recovery: stream lost, rewinding (at-least-once for this window)");
        }
        Outcome::Resolved { tp, at } => {
            recovery("resolved");
            tracing::warn!(partition = %tp, at = at.0, "recovery: stream lost, resolved from the table");
        }
        Outcome::ResolveFailed {
            tp,
            attempts,
            error,
        } => {
            recovery("resolve_failed");
            tracing::warn!(partition = %tp, attempts, error = %error, "recovery: the resolve query failed");
        }
        other => return Some(other),
    }
    None
}

/// Retries back off by their attempt number: 0, 0.2 s, 0.4 s, … up to 30 s.
pub(crate) async fn backoff(attempt: u32) {
    if attempt > 0 {
        tokio::time::sleep(crate::backoff::delay(attempt)).await;
    }
}

pub(crate) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// One event of the run loop's sources, taken without waiting.
#[cfg(test)]
pub(crate) enum Ready {
    Consumer(ConsumerEvent),
    Writer(WriterEvent),
    Io(Event),
}

/// The run loop, played a step at a time by the deterministic simulation (docs/simulation.md):
/// the same handlers `run`'s `select!` calls, the choice among ready sources left to the
/// simulation's seeded schedule.
#[cfg(test)]
impl Coordinator {
    /// Moves every event that is ready into its source's queue: consumer, writer, I/O.
    pub(crate) fn take_ready(&mut self, queues: &mut [std::collections::VecDeque<Ready>; 3]) {
        // Routes are resolved up front in the simulation: nothing waits in `routing`.
        debug_assert!(self.routing.is_idle());
        while let Ok(e) = self.consumer_events.try_recv() {
            queues[0].push_back(Ready::Consumer(e));
        }
        while let Ok(e) = self.writer_rx.try_recv() {
            queues[1].push_back(Ready::Writer(e));
        }
        while let Some(done) = self.io.try_join_next() {
            if let Ok(e) = done {
                queues[2].push_back(Ready::Io(e));
            }
        }
    }

    /// Handles one event as `run` does; `Break` once the consumer thread ended.
    pub(crate) fn handle_ready(
        &mut self,
        ready: Ready,
        exit: &mut Option<Exit>,
    ) -> std::ops::ControlFlow<()> {
        let flow = match ready {
            Ready::Consumer(e) => self.consumer_event(e, exit),
            Ready::Writer(e) => {
                self.on_writer(e);
                std::ops::ControlFlow::Continue(())
            }
            Ready::Io(e) => {
                self.feed(e);
                std::ops::ControlFlow::Continue(())
            }
        };
        self.after_event();
        flow
    }

    /// The ticker's arm of `run`.
    pub(crate) fn step_tick(&mut self) {
        self.tick();
        self.after_event();
    }

    /// The shutdown arm of `run`; returns the deadline.
    pub(crate) fn step_shutdown(&mut self) -> Instant {
        let deadline = self.shutdown_requested();
        self.after_event();
        deadline
    }

    /// The shutdown deadline's arm of `run`; returns when it fires again.
    pub(crate) fn step_shutdown_deadline(&mut self) -> Instant {
        let again = self.shutdown_deadline_passed();
        self.after_event();
        again
    }

    /// A SIGKILL: every writer task stops where it waits, nothing more runs.
    pub(crate) fn kill(&mut self) {
        for w in self.writers.values() {
            w.task.abort();
        }
    }
}
