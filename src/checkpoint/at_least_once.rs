//! At-least-once mode (`delivery: at_least_once`; docs/architecture.md): writers append to the
//! table's `_default` stream without offsets, and the Kafka offset of a partition is committed once
//! every record below it is acknowledged by BigQuery (appended, or dead-lettered and acknowledged).
//! A crash re-delivers what was appended after the last commit: duplicates, never a loss.
//!
//! Recovery is the exactly-once protocol's, unchanged (docs/architecture.md#at-least-once-mode): an
//! exactly-once checkpoint left behind by a switch of modes has rows `[f, K)` that only a re-flush
//! of `(s, r)` makes visible, and starting at `K` without it would lose them. So each assigned
//! partition gets its own [`CheckpointProtocol`] for the recovery alone — start-position policies,
//! re-flush and its outcomes, lost-stream policy — and is handed to an at-least-once writer at the
//! position where the protocol starts its incarnation. The protocol instance is dropped then.
//!
//! Commits carry the `m=alo` metadata, so a later switch back to exactly-once starts at the
//! committed offset with nothing to re-flush. The stream of a superseded exactly-once checkpoint
//! is finalized only after an at-least-once commit replaced that checkpoint.

use std::collections::{HashMap, HashSet};
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
use crate::ops::metrics::{KindLabel, Metrics, OutcomeLabel, TableLabel};
use crate::tables::Route;
use crate::writer::partition_writer::{WriterEvent, WriterHandle, WriterShared};

use super::coordinator::{
    CoordinatorSettings, Exit, Routing, sleep_until, spawn_flush, spawn_label,
    spawn_partition_writer, spawn_resolve,
};
use super::denied::DeniedFlushes;
use super::metadata::{CommitMetadata, TableFingerprint};
use super::offsets::{Incarnation, NextOffset, StreamId};
use super::protocol::{
    Action, Assignment, CheckpointProtocol, CommitEntry, CommitError, CommitId, CommitOutcome,
    Event, FlushPurpose, Outcome, ProtocolConfig, TopicPartition,
};

/// Where a partition is in at-least-once mode.
enum Partition {
    /// The exactly-once recovery runs; nothing is appended yet. `read` is what Kafka held when
    /// it was last read (the checkpoint the partition starts from).
    Recovering {
        protocol: Box<CheckpointProtocol>,
        read: Assignment,
    },
    Running(Progress),
    /// The writer drains for a revoke or for shutdown. `commit`: commit once it stopped (a
    /// revoke that is not a loss); a lost assignment commits nothing.
    Draining {
        progress: Progress,
        commit: bool,
    },
    /// The handoff commit is in flight; released when it is answered.
    HandingOff(Progress),
    /// Stopped for shutdown: its final offset goes into the last commit.
    Stopped(Progress),
    /// The writer failed; its acknowledged prefix is still committed.
    Failed(Progress),
    /// Recovery failed closed (unreadable checkpoint, lost stream under `fail`, …): nothing was
    /// appended, nothing is committed, readiness stays false until the partition is released.
    FailedClosed(String),
}

struct Progress {
    writer: Option<WriterHandle>,
    incarnation: Incarnation,
    /// Every record below this is acknowledged.
    acked: NextOffset,
    /// What Kafka holds for the partition as far as we know, and whether it is our marker.
    committed: Option<NextOffset>,
    marked: bool,
    /// The stream of the exactly-once checkpoint this partition started from.
    superseded: Option<StreamId>,
}

impl Progress {
    /// A partition that started from an exactly-once checkpoint commits once even without new
    /// records, so that the checkpoint (and its stream) is no longer referenced.
    fn needs_commit(&self) -> bool {
        !self.marked || self.committed != Some(self.acked)
    }
}

/// What a commit in flight was for.
enum CommitPurpose {
    Cycle,
    Handoff(TopicPartition),
    Final,
}

pub struct AtLeastOnceCoordinator {
    recovery: ProtocolConfig,
    settings: CoordinatorSettings,
    consumer: ConsumerHandle,
    consumer_events: mpsc::UnboundedReceiver<ConsumerEvent>,
    writer_shared: Arc<WriterShared>,
    writer_tx: mpsc::UnboundedSender<WriterEvent>,
    writer_rx: mpsc::UnboundedReceiver<WriterEvent>,
    partitions: HashMap<TopicPartition, Partition>,
    /// Recovery I/O (re-flush, resolve query); answers go back to the partition's protocol.
    io: JoinSet<Event>,
    client: WriteClient,
    rest: RestClient,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    commits: HashMap<CommitId, (CommitPurpose, Vec<CommitEntry>)>,
    next_commit: u64,
    cycle_in_flight: bool,
    shutting_down: bool,
    /// The final commit (or, with nothing to commit, the leave) was sent.
    final_sent: bool,
    /// Tables whose group marker this process wrote (or found written).
    labelled: HashSet<TableFingerprint>,
    /// Tables whose marker is being written: failures so far.
    labelling: HashMap<TableFingerprint, u32>,
    /// Routes being resolved for partitions of topics seen for the first time.
    routing: Routing,
    /// Owned partitions whose committed offset or watermarks could not be read yet.
    unknown: HashSet<TopicPartition>,
    /// Recovering partitions whose re-flush BigQuery keeps denying.
    denied: DeniedFlushes,
}

impl AtLeastOnceCoordinator {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        recovery: ProtocolConfig,
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
        AtLeastOnceCoordinator {
            recovery,
            labelled: HashSet::new(),
            labelling: HashMap::new(),
            denied: DeniedFlushes::new(metrics.partitions_retrying.clone()),
            routing: Routing::new(),
            unknown: HashSet::new(),
            settings,
            consumer,
            consumer_events,
            writer_shared,
            writer_tx,
            writer_rx,
            partitions: HashMap::new(),
            io: JoinSet::new(),
            client,
            rest,
            metrics,
            health,
            commits: HashMap::new(),
            next_commit: 0,
            cycle_in_flight: false,
            shutting_down: false,
            final_sent: false,
        }
    }

    /// Runs until shutdown completes. `shutdown` is cancelled on SIGTERM/SIGINT.
    pub async fn run(mut self, shutdown: CancellationToken) -> Exit {
        let mut ticker = tokio::time::interval(self.settings.checkpoint_interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticker.tick().await;
        let mut deadline: Option<Instant> = None;
        let mut exit = None;
        self.health.set_ready();
        loop {
            self.health.beat();
            tokio::select! {
                _ = shutdown.cancelled(), if deadline.is_none() => {
                    tracing::info!("shutdown requested: final commit");
                    deadline = Some(Instant::now() + self.settings.shutdown_deadline);
                    self.begin_shutdown();
                }
                _ = sleep_until(deadline) => {
                    tracing::warn!("shutdown deadline passed before the final commit");
                    deadline = Some(Instant::now() + Duration::from_secs(3600));
                    self.consumer.send(ConsumerCommand::Shutdown);
                }
                _ = ticker.tick() => {
                    self.update_readiness();
                    if !self.shutting_down && !self.cycle_in_flight {
                        self.commit_cycle();
                    }
                }
                Some(event) = self.consumer_events.recv() => match event {
                    ConsumerEvent::Closed => break,
                    ConsumerEvent::Fatal(reason) => {
                        tracing::error!(reason = %reason, "kafka consumer failed");
                        exit = Some(Exit::ConsumerFailed(reason));
                        self.consumer.send(ConsumerCommand::Shutdown);
                    }
                    other => self.on_consumer(other),
                },
                Some(event) = self.writer_rx.recv() => self.on_writer(event),
                Some((tp, assignment, route)) = self.routing.next(), if !self.routing.is_idle() => {
                    self.routed(tp, assignment, route);
                }
                Some(done) = self.io.join_next(), if !self.io.is_empty() => {
                    match done {
                        Ok(Event::LabelResult { table, outcome }) => self.on_label(table, outcome),
                        Ok(event) => self.feed_recovery(event),
                        Err(_) => {}
                    }
                }
            }
        }
        for (_, partition) in self.partitions.drain() {
            if let Some(mut writer) = progress_of(partition).and_then(|p| p.writer) {
                writer.stop(Duration::ZERO);
            }
        }
        let consumer = self.consumer;
        let _ = tokio::task::spawn_blocking(move || consumer.join()).await;
        exit.unwrap_or(Exit::Shutdown)
    }

    fn on_consumer(&mut self, event: ConsumerEvent) {
        match event {
            ConsumerEvent::Assigned(partitions) => {
                self.metrics
                    .rebalances
                    .get_or_create(&KindLabel { kind: "assign" })
                    .inc();
                for (tp, result) in partitions {
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
                self.fail_running(&tp, format!("seek failed: {reason}"));
            }
            ConsumerEvent::OffsetOutOfRange { tp, position, low } => {
                self.fail_running(
                    &tp,
                    format!("position {position} is below the log start {low}"),
                );
            }
            ConsumerEvent::Loads(_) => {}
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
                    self.revoke(tp, lost);
                }
                // The consumer drops revoked partitions from commits sent before this.
                self.consumer.send(ConsumerCommand::RevokeSeen);
            }
            ConsumerEvent::HandoffDeadline(partitions) => {
                for tp in partitions {
                    tracing::warn!(partition = %tp, "handoff abandoned at its deadline");
                    self.forget(&tp);
                }
                if self.shutting_down {
                    self.maybe_final_commit();
                }
            }
            ConsumerEvent::CommitDone { commit, outcome } => self.on_commit(commit, outcome),
            ConsumerEvent::Reread { tp, assignment } => {
                self.feed_recovery(Event::CheckpointReread { tp, assignment });
            }
            ConsumerEvent::RereadFailed { tp, reason } => {
                tracing::warn!(partition = %tp, reason = %reason, "cannot read the committed offset, retrying");
                let commands = self.consumer.sender();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let _ = commands.send(ConsumerCommand::ReadCommitted { tp });
                });
            }
            // Only the exactly-once coordinator asks who owns a partition (a zombie's question);
            // the `_default` stream has no zombies.
            ConsumerEvent::OwnershipConfirmed { .. } | ConsumerEvent::OwnershipUnknown { .. } => {}
            ConsumerEvent::Fatal(_) | ConsumerEvent::Closed => {}
        }
    }

    /// An owned partition whose committed offset or watermarks could not be read: never read
    /// as "no offset"; asked again after a pause.
    fn assignment_unknown(&mut self, tp: TopicPartition, reason: String) {
        tracing::warn!(partition = %tp, reason = %reason, "cannot read the assigned partition's committed offset or watermarks, retrying");
        self.unknown.insert(tp.clone());
        let commands = self.consumer.sender();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = commands.send(ConsumerCommand::ReadAssignment { tp });
        });
    }

    fn assigned(&mut self, tp: TopicPartition, assignment: Assignment) {
        if self.shutting_down {
            return;
        }
        self.forget(&tp);
        tracing::info!(partition = %tp, committed = ?assignment.committed.as_ref().map(|c| c.offset.0), low = assignment.low.0, high = assignment.high.0, "partition assigned");
        match self.settings.router.cached(&tp.topic) {
            Some(route) => self.recover(tp, &route, assignment),
            // A topic seen for the first time: its table is read or created first.
            None => self.routing.start(&self.settings.router, tp, assignment),
        }
    }

    /// A route resolved for an assigned partition: its recovery starts; or its table cannot be
    /// read or created: it fails closed.
    fn routed(
        &mut self,
        tp: TopicPartition,
        assignment: Assignment,
        route: Result<Arc<Route>, String>,
    ) {
        if self.shutting_down {
            return;
        }
        match route {
            Ok(route) => self.recover(tp, &route, assignment),
            Err(reason) => {
                tracing::error!(partition = %tp, reason = %reason, "cannot route the partition's topic: partition stopped");
                self.metrics.partitions_assigned.inc();
                self.metrics.partitions_failed.inc();
                self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
                self.health
                    .set_not_ready(format!("partition {tp} failed: no route: {reason}"));
                self.partitions
                    .insert(tp, Partition::FailedClosed(format!("no route: {reason}")));
            }
        }
    }

    /// The exactly-once recovery of `tp` against its route's table.
    fn recover(&mut self, tp: TopicPartition, route: &Route, assignment: Assignment) {
        self.metrics.partitions_assigned.inc();
        let mut protocol = Box::new(CheckpointProtocol::new(self.recovery.clone()));
        let actions = protocol.handle(Event::Assigned {
            tp: tp.clone(),
            table: route.routed_table(),
            assignment: assignment.clone(),
        });
        self.partitions.insert(
            tp,
            Partition::Recovering {
                protocol,
                read: assignment,
            },
        );
        self.recovery_actions(actions);
    }

    /// Feeds a recovery answer to the protocol of its partition, if it is still recovering.
    fn feed_recovery(&mut self, event: Event) {
        self.denied.observe(&event);
        let tp = match &event {
            Event::RecoveryFlushResult { tp, .. }
            | Event::CheckpointReread { tp, .. }
            | Event::ResolveResult { tp, .. } => tp.clone(),
            _ => return,
        };
        self.feed_partition(&tp, event);
    }

    /// Feeds `event` to the recovery protocol of `tp`, if it is still recovering.
    fn feed_partition(&mut self, tp: &TopicPartition, event: Event) {
        let Some(Partition::Recovering { protocol, read }) = self.partitions.get_mut(tp) else {
            return;
        };
        if let Event::CheckpointReread { assignment, .. } = &event {
            *read = assignment.clone();
        }
        let actions = protocol.handle(event);
        self.recovery_actions(actions);
    }

    /// Executes what a partition's recovery protocol asks for.
    fn recovery_actions(&mut self, actions: Vec<Action>) {
        let mut landed = Vec::new();
        for action in actions {
            match action {
                // A re-flush waits for the table's marker (the protocol's rule); one write per
                // table serves every partition recovering on it.
                Action::LabelTable { table, .. } => {
                    if self.label(table) {
                        landed.push(table);
                    }
                }
                Action::FlushRows {
                    tp,
                    stream,
                    through,
                    purpose: FlushPurpose::Recovery,
                    attempt,
                } => {
                    let route = self.route(&tp);
                    spawn_flush(
                        &mut self.io,
                        &self.writer_shared,
                        &route,
                        tp,
                        stream,
                        through,
                        FlushPurpose::Recovery,
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
                } => self.start_writer(tp, incarnation, from),
                Action::FailPartition { tp, reason } => {
                    tracing::error!(partition = %tp, reason = %reason, "partition failed closed");
                    self.metrics
                        .recovery_actions
                        .get_or_create(&OutcomeLabel { outcome: "failed" })
                        .inc();
                    self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
                    self.metrics.partitions_failed.inc();
                    self.health
                        .set_not_ready(format!("partition {tp} failed: {reason}"));
                    // Nothing was appended: there is nothing of ours to commit either.
                    self.partitions
                        .insert(tp, Partition::FailedClosed(reason.to_string()));
                }
                Action::Count(outcome) => self.count(outcome),
                other => {
                    tracing::debug!(action = ?other, "recovery action unused in at-least-once mode");
                }
            }
        }
        for table in landed {
            self.marker_landed(table);
        }
    }

    /// Writes the group's marker on `table` unless it is there or being written; true if it
    /// is there already.
    fn label(&mut self, table: TableFingerprint) -> bool {
        if self.labelled.contains(&table) {
            return true;
        }
        if let std::collections::hash_map::Entry::Vacant(writing) = self.labelling.entry(table) {
            writing.insert(0);
            spawn_label(&mut self.io, &self.settings.router, &self.rest, table, 0);
        }
        false
    }

    /// The answer to a marker write: retried with backoff until it lands, visibly.
    fn on_label(&mut self, table: TableFingerprint, outcome: Result<(), String>) {
        let Some(failures) = self.labelling.remove(&table) else {
            return;
        };
        match outcome {
            Ok(()) => {
                if failures > 0 {
                    self.metrics.table_markers_failing.dec();
                    tracing::info!(table = %table, "group marker written on the table");
                }
                self.marker_landed(table);
                // The commits the marker held back go now, not a whole interval later: until
                // they land, a crash leaves a marked table without offsets, which the next
                // start reads as a missing checkpoint (docs/operations.md).
                if !self.shutting_down && !self.cycle_in_flight {
                    self.commit_cycle();
                }
            }
            Err(error) => {
                if failures == 0 {
                    self.metrics.table_markers_failing.inc();
                }
                let attempts = failures + 1;
                tracing::error!(table = %table, attempts, error = %error, "cannot write the group marker on the table, retrying");
                self.labelling.insert(table, attempts);
                spawn_label(
                    &mut self.io,
                    &self.settings.router,
                    &self.rest,
                    table,
                    attempts,
                );
                self.update_readiness();
            }
        }
    }

    /// `table` carries the marker: the recoveries waiting for it go on.
    fn marker_landed(&mut self, table: TableFingerprint) {
        self.labelled.insert(table);
        let waiting: Vec<TopicPartition> = self
            .partitions
            .iter()
            .filter(|(_, p)| matches!(p, Partition::Recovering { .. }))
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in waiting {
            let landed = Event::LabelResult {
                table,
                outcome: Ok(()),
            };
            self.feed_partition(&tp, landed);
        }
    }

    /// Recovery is done: the partition appends to `_default` from `from`.
    fn start_writer(&mut self, tp: TopicPartition, incarnation: Incarnation, from: NextOffset) {
        if !matches!(self.partitions.get(&tp), Some(Partition::Recovering { .. })) {
            return;
        }
        let Some(Partition::Recovering { read, .. }) = self.partitions.remove(&tp) else {
            return;
        };
        self.denied.forget(&tp);
        let committed = read.committed.as_ref();
        let metadata = committed.and_then(|r| CommitMetadata::parse(&r.metadata).ok());
        let superseded = match &metadata {
            Some(CommitMetadata::ExactlyOnce {
                stream: Some(s), ..
            }) => Some(s.clone()),
            _ => None,
        };
        let progress = Progress {
            writer: Some(self.spawn_writer(&tp, incarnation, from)),
            incarnation,
            acked: from,
            committed: committed.map(|r| r.offset),
            marked: matches!(metadata, Some(CommitMetadata::AtLeastOnce { .. })),
            superseded,
        };
        tracing::info!(partition = %tp, from = from.0, "at-least-once writer started");
        self.partitions.insert(tp, Partition::Running(progress));
    }

    fn spawn_writer(
        &self,
        tp: &TopicPartition,
        incarnation: Incarnation,
        from: NextOffset,
    ) -> WriterHandle {
        spawn_partition_writer(
            &self.writer_shared,
            &self.route(tp),
            tp,
            incarnation,
            from,
            &self.settings,
            &self.writer_tx,
            &self.consumer,
        )
    }

    fn on_writer(&mut self, event: WriterEvent) {
        match event {
            WriterEvent::Acknowledged { tp, ack } => {
                if let Some(p) = self.current(&tp, ack.incarnation()) {
                    p.acked = p.acked.max(ack.next());
                }
            }
            WriterEvent::StreamLost {
                tp, incarnation, ..
            }
            | WriterEvent::Zombie {
                tp, incarnation, ..
            }
            | WriterEvent::Failed {
                tp, incarnation, ..
            } if matches!(self.partitions.get(&tp), Some(Partition::Draining { .. })) => {
                // A writer that ends on an error while draining sends no `Stopped`: its
                // acknowledged prefix is final all the same.
                self.writer_stopped(tp, incarnation);
            }
            WriterEvent::StreamLost {
                tp, incarnation, ..
            }
            | WriterEvent::Zombie {
                tp, incarnation, ..
            } => {
                // `_default` lives as long as the table: a NOT_FOUND means the table was
                // recreated. Restart from the acknowledged prefix (the rest is re-delivered).
                let restart = match self.partitions.get_mut(&tp) {
                    Some(Partition::Running(p)) if p.incarnation == incarnation => {
                        p.incarnation = Incarnation(p.incarnation.0 + 1);
                        Some((p.incarnation, p.acked))
                    }
                    _ => None,
                };
                if let Some((next, from)) = restart {
                    tracing::warn!(partition = %tp, from = from.0, "default stream lost under the writer: restarting it");
                    let writer = self.spawn_writer(&tp, next, from);
                    if let Some(Partition::Running(p)) = self.partitions.get_mut(&tp) {
                        p.writer = Some(writer);
                    }
                }
            }
            WriterEvent::Stopped { tp, incarnation } => self.writer_stopped(tp, incarnation),
            WriterEvent::Failed {
                tp,
                incarnation,
                reason,
            } => {
                let current = matches!(
                    self.partitions.get(&tp),
                    Some(Partition::Running(p)) if p.incarnation == incarnation
                );
                if !current {
                    return;
                }
                tracing::error!(partition = %tp, reason = %reason, "writer failed: partition stopped");
                self.fail_running(&tp, reason);
            }
        }
    }

    /// Stops a running partition where its acknowledged prefix ends (still committed) and
    /// turns readiness false.
    fn fail_running(&mut self, tp: &TopicPartition, reason: String) {
        let Some(Partition::Running(mut p)) = self.partitions.remove(tp) else {
            return;
        };
        tracing::error!(partition = %tp, reason = %reason, "partition failed closed");
        self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
        if let Some(mut writer) = p.writer.take() {
            writer.stop(Duration::ZERO);
        }
        self.partitions.insert(tp.clone(), Partition::Failed(p));
        self.metrics.partitions_failed.inc();
        self.health
            .set_not_ready(format!("partition {tp} failed: {reason}"));
    }

    /// The progress of `tp` if `incarnation` is its writer's.
    fn current(&mut self, tp: &TopicPartition, incarnation: Incarnation) -> Option<&mut Progress> {
        match self.partitions.get_mut(tp)? {
            Partition::Running(p) | Partition::Draining { progress: p, .. }
                if p.incarnation == incarnation =>
            {
                Some(p)
            }
            _ => None,
        }
    }

    fn writer_stopped(&mut self, tp: TopicPartition, incarnation: Incarnation) {
        if !matches!(self.partitions.get(&tp), Some(Partition::Draining { .. })) {
            return;
        }
        let Some(Partition::Draining {
            mut progress,
            commit,
        }) = self.partitions.remove(&tp)
        else {
            return;
        };
        if progress.incarnation != incarnation {
            self.partitions
                .insert(tp, Partition::Draining { progress, commit });
            return;
        }
        progress.writer = None;
        if !commit {
            // A lost assignment: another member may own the partition already.
            self.release(tp);
        } else if self.shutting_down {
            self.partitions.insert(tp, Partition::Stopped(progress));
        } else {
            self.hand_off(tp, progress);
        }
        if self.shutting_down {
            self.maybe_final_commit();
        }
    }

    /// The single handoff commit of a revoked partition; it is released when it is answered.
    fn hand_off(&mut self, tp: TopicPartition, progress: Progress) {
        if !progress.needs_commit() {
            return self.release(tp);
        }
        let entry = self.entry(&tp, &progress);
        self.partitions
            .insert(tp.clone(), Partition::HandingOff(progress));
        self.send_commit(CommitPurpose::Handoff(tp), vec![entry]);
    }

    fn revoke(&mut self, tp: TopicPartition, lost: bool) {
        match self.partitions.remove(&tp) {
            Some(Partition::Running(mut progress)) => {
                self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
                match progress.writer.as_mut() {
                    Some(writer) => {
                        writer.stop(self.settings.writer_drain);
                        let commit = !lost;
                        self.partitions
                            .insert(tp, Partition::Draining { progress, commit });
                    }
                    None if lost => self.release(tp),
                    None => self.hand_off(tp, progress),
                }
            }
            Some(Partition::Failed(progress)) if !lost => self.hand_off(tp, progress),
            Some(Partition::Draining { progress, commit }) => {
                let commit = commit && !lost;
                self.partitions
                    .insert(tp, Partition::Draining { progress, commit });
            }
            Some(other @ Partition::HandingOff(_)) => {
                self.partitions.insert(tp, other);
            }
            Some(other) => {
                self.partitions.insert(tp.clone(), other);
                self.release(tp);
            }
            None => {
                self.consumer.send(ConsumerCommand::Release { tp });
            }
        }
    }

    fn release(&mut self, tp: TopicPartition) {
        self.forget(&tp);
        self.consumer.send(ConsumerCommand::Release { tp });
    }

    /// Drops everything known of `tp`, stopping its writer without a drain.
    fn forget(&mut self, tp: &TopicPartition) {
        self.denied.forget(tp);
        if let Some(partition) = self.partitions.remove(tp) {
            if matches!(partition, Partition::Failed(_) | Partition::FailedClosed(_)) {
                self.metrics.partitions_failed.dec();
            }
            self.metrics.partitions_assigned.dec();
            if let Some(mut writer) = progress_of(partition).and_then(|p| p.writer) {
                writer.stop(Duration::ZERO);
            }
        }
    }

    fn entry(&self, tp: &TopicPartition, progress: &Progress) -> CommitEntry {
        CommitEntry {
            tp: tp.clone(),
            offset: progress.acked,
            metadata: CommitMetadata::AtLeastOnce {
                table: self.route(tp).fingerprint,
            }
            .encode(self.recovery.write_version),
        }
    }

    /// Commits the acknowledged prefix of every partition whose committed offset lags it.
    fn commit_cycle(&mut self) {
        let mut unmarked = HashSet::new();
        let entries: Vec<CommitEntry> = self
            .partitions
            .iter()
            .filter_map(|(tp, partition)| match partition {
                Partition::Running(p) | Partition::Failed(p) if p.needs_commit() => {
                    // As in exactly-once mode, the table carries the group's marker before a
                    // commit can land: else expired offsets pass for a first start.
                    let route = self.route(tp);
                    if route.marked || self.labelled.contains(&route.fingerprint) {
                        Some(self.entry(tp, p))
                    } else {
                        unmarked.insert(route.fingerprint);
                        None
                    }
                }
                _ => None,
            })
            .collect();
        let waiting = !unmarked.is_empty();
        for table in unmarked {
            self.label(table);
        }
        if entries.is_empty() {
            if !waiting {
                // Nothing new: the committed offsets are as fresh as the data.
                self.metrics.checkpoint_succeeded();
            }
            return;
        }
        self.cycle_in_flight = true;
        self.send_commit(CommitPurpose::Cycle, entries);
    }

    fn send_commit(&mut self, purpose: CommitPurpose, entries: Vec<CommitEntry>) {
        let commit = CommitId(self.next_commit);
        self.next_commit += 1;
        self.commits.insert(commit, (purpose, entries.clone()));
        self.consumer
            .send(ConsumerCommand::Commit { commit, entries });
    }

    fn on_commit(&mut self, commit: CommitId, outcome: CommitOutcome) {
        let Some((purpose, entries)) = self.commits.remove(&commit) else {
            return;
        };
        let results: HashMap<TopicPartition, Result<(), CommitError>> = match outcome {
            CommitOutcome::PerPartition(r) => r.into_iter().collect(),
            CommitOutcome::Rejected(reason) => entries
                .iter()
                .map(|e| (e.tp.clone(), Err(CommitError::Request(reason.clone()))))
                .collect(),
        };
        let mut any = false;
        for entry in &entries {
            match results.get(&entry.tp) {
                Some(Ok(())) => {
                    any = true;
                    self.committed(&entry.tp, entry.offset);
                    // The group has committed for this table: mark it (once per table).
                    let route = self.route(&entry.tp);
                    if route.marked {
                        self.labelled.insert(route.fingerprint);
                    } else {
                        self.label(route.fingerprint);
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(partition = %entry.tp, offset = entry.offset.0, error = %e, "kafka commit failed for partition");
                }
                None => {}
            }
        }
        if any {
            self.metrics.checkpoint_succeeded();
            self.metrics
                .checkpoints
                .get_or_create(&OutcomeLabel {
                    outcome: "committed",
                })
                .inc();
        }
        match purpose {
            CommitPurpose::Cycle => self.cycle_in_flight = false,
            CommitPurpose::Handoff(tp) => {
                tracing::info!(partition = %tp, "partition handed off");
                self.release(tp);
                if self.shutting_down {
                    self.maybe_final_commit();
                }
            }
            CommitPurpose::Final => {
                tracing::info!("final commit done: leaving the group");
                self.consumer.send(ConsumerCommand::Shutdown);
            }
        }
    }

    /// `tp`'s offset `offset` with the at-least-once marker is durable.
    fn committed(&mut self, tp: &TopicPartition, offset: NextOffset) {
        let progress = match self.partitions.get_mut(tp) {
            Some(
                Partition::Running(p)
                | Partition::Failed(p)
                | Partition::Stopped(p)
                | Partition::HandingOff(p)
                | Partition::Draining { progress: p, .. },
            ) => p,
            _ => return,
        };
        progress.committed = Some(offset);
        progress.marked = true;
        // Nothing durable references the exactly-once stream any more: its rows are visible (the
        // recovery re-flushed them) or counted as rewound.
        if let Some(stream) = progress.superseded.take() {
            let route = self.route(tp);
            let client = self.client.clone();
            let name = route.stream_name(&stream);
            let metrics = self.metrics.clone();
            let label = TableLabel {
                table: route.label().to_string(),
            };
            let tp = tp.clone();
            tokio::spawn(async move {
                match client.finalize_write_stream(&name).await {
                    Ok(_) => {
                        metrics.streams_finalized.get_or_create(&label).inc();
                        tracing::info!(partition = %tp, stream = %stream, "exactly-once stream finalized after the switch");
                    }
                    Err(e) => {
                        metrics.bigquery_error("FinalizeWriteStream", &e);
                        tracing::debug!(partition = %tp, stream = %stream, error = %e, "finalize of the superseded stream failed (best effort)");
                    }
                }
            });
        }
    }

    fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        let tps: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        for tp in tps {
            match self.partitions.remove(&tp) {
                Some(Partition::Running(mut progress)) => {
                    self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
                    if let Some(writer) = progress.writer.as_mut() {
                        writer.stop(self.settings.writer_drain);
                        self.partitions.insert(
                            tp,
                            Partition::Draining {
                                progress,
                                commit: true,
                            },
                        );
                    } else {
                        self.partitions.insert(tp, Partition::Stopped(progress));
                    }
                }
                Some(Partition::Failed(progress)) => {
                    self.partitions.insert(tp, Partition::Stopped(progress));
                }
                Some(Partition::Recovering { .. }) => {
                    self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
                }
                Some(other) => {
                    self.partitions.insert(tp, other);
                }
                None => {}
            }
        }
        self.maybe_final_commit();
    }

    /// Once every writer stopped: one commit of every partition's final prefix, then leave.
    fn maybe_final_commit(&mut self) {
        let waiting = self
            .partitions
            .values()
            .any(|p| matches!(p, Partition::Draining { .. } | Partition::HandingOff(_)));
        if waiting || self.final_sent {
            return;
        }
        self.final_sent = true;
        let entries: Vec<CommitEntry> = self
            .partitions
            .iter()
            .filter_map(|(tp, partition)| match partition {
                Partition::Stopped(p) if p.needs_commit() => Some(self.entry(tp, p)),
                _ => None,
            })
            .collect();
        if entries.is_empty() {
            tracing::info!("nothing left to commit: leaving the group");
            self.consumer.send(ConsumerCommand::Shutdown);
        } else {
            self.send_commit(CommitPurpose::Final, entries);
        }
    }

    fn update_readiness(&self) {
        let failed = self.partitions.iter().find_map(|(tp, p)| match p {
            Partition::Failed(_) => Some(format!("partition {tp} failed")),
            Partition::FailedClosed(reason) => Some(format!("partition {tp} failed: {reason}")),
            _ => None,
        });
        if let Some(reason) = failed {
            self.health.set_not_ready(reason);
            return;
        }
        let retrying = self.metrics.partitions_retrying.get();
        if retrying > 0 {
            self.health.set_not_ready(format!(
                "{retrying} partitions wait out a permission, credential or precondition error"
            ));
            return;
        }
        if let Some(table) = self
            .labelling
            .iter()
            .find_map(|(table, failures)| (*failures > 0).then_some(table))
        {
            self.health
                .set_not_ready(format!("cannot write the group marker on table {table}"));
            return;
        }
        match self.metrics.checkpoint_age_seconds() {
            Some(age) if age > (self.settings.checkpoint_interval * 6).as_secs_f64() => {
                self.health
                    .set_not_ready(format!("no offset committed for {age:.0}s"));
            }
            _ => self.health.set_ready(),
        }
    }

    /// The route of a partition this coordinator holds (resolved before its recovery).
    fn route(&self, tp: &TopicPartition) -> Arc<Route> {
        self.settings
            .router
            .cached(&tp.topic)
            .expect("a partition is recovered only after its route is resolved")
    }

    fn count(&self, outcome: Outcome) {
        if let Some(other) = super::coordinator::count_recovery(&self.metrics, outcome) {
            tracing::debug!(outcome = ?other, "recovery outcome");
        }
    }
}

fn progress_of(partition: Partition) -> Option<Progress> {
    match partition {
        Partition::Recovering { .. } | Partition::FailedClosed(_) => None,
        Partition::Running(p)
        | Partition::Draining { progress: p, .. }
        | Partition::HandingOff(p)
        | Partition::Stopped(p)
        | Partition::Failed(p) => Some(p),
    }
}
