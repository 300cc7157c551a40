//! The at-least-once ledger of one process (`delivery: at_least_once`; docs/architecture.md,
//! "At-least-once mode"), as a pure state machine in the style of the exactly-once
//! [`CheckpointProtocol`]: the same [`Event`]s in, the same [`Action`]s out, so that one coordinator
//! shell drives either machine.
//!
//! Writers append to the table's `_default` stream without offsets; rows are visible when
//! BigQuery acknowledges them. The ledger commits each partition's acknowledged prefix (every
//! record below it is appended and acknowledged, or dead-lettered and acknowledged): every
//! `StartCycle`, once on a revoke (after the writer drained) and once on shutdown. A crash
//! re-delivers what was acknowledged after the last commit that landed, plus what was in flight:
//! duplicates, never a loss (docs/operations.md, "At-least-once mode").
//!
//! Recovery is the exactly-once protocol's, unchanged: a checkpoint left behind by a switch of
//! modes has rows `[f, K)` that only a re-flush of `(s, r)` makes visible. So each assigned
//! partition gets its own [`CheckpointProtocol`] for the recovery alone (start-position policies,
//! re-flush, lost-stream policy) and starts appending where that protocol starts its incarnation;
//! the protocol is dropped then. The stream of a superseded exactly-once checkpoint is finalized
//! once an at-least-once commit replaced that checkpoint.
//!
//! As in exactly-once mode, no commit of a table is made before the table carries the group's
//! marker: expired offsets can then never pass for a first start (docs/architecture.md,
//! invariant 7). One marker write per table serves every partition of it.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use crate::metadata::{CommitMetadata, TableFingerprint};
use crate::model::{
    Assignment, CommitEntry, CommitError, CommitId, CommitOutcome, RoutedTable, TopicPartition,
};
use crate::offsets::{Incarnation, NextOffset, StreamId};
use crate::protocol::{
    Action, CheckpointProtocol, Event, FailReason, FirstPositions, MarkerRequests, Markers,
    MissingCheckpointPolicy, OutOfRangePolicy, Outcome, ProtocolConfig,
};

/// Where a partition is.
#[derive(Debug)]
enum Phase {
    /// The exactly-once recovery runs; nothing is appended yet. `read` is what Kafka held when
    /// it was last read: the checkpoint the partition starts from.
    Recovering {
        protocol: Box<CheckpointProtocol>,
        read: Assignment,
    },
    Running,
    /// The writer drains for a revoke (`handoff`) or for shutdown.
    Draining {
        handoff: bool,
    },
    /// The handoff commit is in flight; the partition is released when it is answered.
    HandingOff,
    /// Stopped for shutdown: its prefix goes into the final commit.
    Stopped,
    /// Recovery failed closed: nothing appended, nothing committed until it is released.
    FailedClosed,
}

#[derive(Debug)]
struct Partition {
    phase: Phase,
    table: TableFingerprint,
    incarnation: Incarnation,
    /// Every record below this is acknowledged (or counted lost: `lost_ranges`).
    acked: NextOffset,
    /// Ranges `[from, to)` of this incarnation that retention deleted and the ledger counted
    /// lost, in order, that `acked` has not passed yet: once it reaches `from` (the consumer's
    /// fetch position when the range was reported, so nothing delivered is in flight any more)
    /// it moves to `to`, and the commit passes the gap even when no record follows it.
    lost_ranges: Vec<(NextOffset, NextOffset)>,
    /// What Kafka holds for the partition as far as this process knows.
    committed: Option<NextOffset>,
    /// The committed offset carries the at-least-once metadata: a partition that started from
    /// an exactly-once checkpoint commits once even without new records, so that the checkpoint
    /// (and its stream) is no longer referenced.
    ours: bool,
    /// The stream of the exactly-once checkpoint this partition started from.
    superseded: Option<StreamId>,
}

impl Partition {
    /// Moves `acked` over the counted-lost ranges it has reached, in order.
    fn pass_lost_ranges(&mut self) {
        let acked = &mut self.acked;
        self.lost_ranges.retain(|&(from, to)| {
            if *acked < from {
                return true;
            }
            *acked = (*acked).max(to);
            false
        });
    }

    fn needs_commit(&self) -> bool {
        !self.ours || self.committed != Some(self.acked)
    }

    fn appending(&self) -> bool {
        matches!(
            self.phase,
            Phase::Running | Phase::Draining { .. } | Phase::HandingOff | Phase::Stopped
        )
    }
}

/// What a commit in flight is for.
#[derive(Debug)]
enum Purpose {
    Cycle,
    Handoff(TopicPartition),
    Final,
}

/// The at-least-once bookkeeping of one process.
#[derive(Debug)]
pub struct AtLeastOnceLedger {
    /// The recovery's policies, and the metadata version commits are written in.
    config: ProtocolConfig,
    partitions: BTreeMap<TopicPartition, Partition>,
    /// The group's marker on each table: known, or being written.
    marked: Markers,
    commits: BTreeMap<CommitId, (Purpose, Vec<CommitEntry>)>,
    next_commit: u64,
    /// One counter for every incarnation this process starts: an answer of a writer from an
    /// earlier assignment never passes for the current one.
    next_incarnation: u64,
    cycle: Option<CommitId>,
    /// Partitions that started without a committed offset and whose first commit was not sent
    /// yet: a cycle starts for them at once (`commit_first_positions`).
    first_positions: FirstPositions,
    shutting_down: bool,
    final_sent: bool,
    done: bool,
}

impl AtLeastOnceLedger {
    pub fn new(mut config: ProtocolConfig) -> Self {
        // `lost_offsets: resolve` continues after the highest offset the table shows for the
        // partition. That is exact when the visible rows are a prefix of the partition (a
        // flushed exactly-once stream), but `_default` appends are independent: a request
        // refused (row errors, quota) or unanswered leaves a hole below a later request's rows,
        // and a process that dies before its first commit of the partition leaves that hole to
        // a successor which, resolving, would skip it for good (the simulation's seed 7000265,
        // docs/simulation.md). What at least once can do exactly is start at the log start.
        if config.on_missing_checkpoint == MissingCheckpointPolicy::Resolve {
            config.on_missing_checkpoint = MissingCheckpointPolicy::Earliest;
        }
        AtLeastOnceLedger {
            config,
            partitions: BTreeMap::new(),
            marked: Markers::default(),
            commits: BTreeMap::new(),
            next_commit: 0,
            next_incarnation: 0,
            cycle: None,
            first_positions: FirstPositions::default(),
            shutting_down: false,
            final_sent: false,
            done: false,
        }
    }

    /// How many table markers this ledger asked for so far (see [`Event::Assigned`]).
    pub fn marker_requests(&self) -> MarkerRequests {
        self.marked.requests()
    }

    /// A cycle's commit is in flight.
    pub fn cycle_in_flight(&self) -> bool {
        self.cycle.is_some()
    }

    /// Partitions currently held (any phase).
    pub fn partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.partitions.keys()
    }

    /// Whether `tp` appends under this process.
    pub fn is_running(&self, tp: &TopicPartition) -> bool {
        self.partitions
            .get(tp)
            .is_some_and(|p| matches!(p.phase, Phase::Running))
    }

    /// The acknowledged prefix of `tp`, once it appends.
    pub fn acknowledged(&self, tp: &TopicPartition) -> Option<NextOffset> {
        self.partitions
            .get(tp)
            .filter(|p| p.appending())
            .map(|p| p.acked)
    }

    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        // Never a first-position cycle from a handoff's steps, as in the exactly-once protocol
        // (invariant 4).
        let revoking = matches!(
            event,
            Event::RevokeBegan { .. } | Event::WriterStopped { .. } | Event::HandoffDeadline { .. }
        );
        match event {
            Event::Assigned {
                tp,
                table,
                assignment,
                read_at,
            } => self.on_assigned(tp, table, assignment, read_at, &mut out),
            Event::RecoveryFlushResult { ref tp, .. }
            | Event::CheckpointReread { ref tp, .. }
            | Event::ResolveResult { ref tp, .. } => {
                let tp = tp.clone();
                self.feed_recovery(&tp, event, &mut out);
            }
            Event::RowsAcknowledged { tp, ack } => {
                if let Some(p) = self.partitions.get_mut(&tp)
                    && matches!(p.phase, Phase::Running | Phase::Draining { .. })
                    && p.incarnation == ack.incarnation()
                {
                    p.acked = p.acked.max(ack.next());
                    p.pass_lost_ranges();
                }
            }
            Event::StartCycle => self.start_cycle(&mut out),
            Event::CommitResult { commit, outcome } => self.on_commit(commit, outcome, &mut out),
            Event::LabelResult { table, outcome } => self.on_label(table, outcome, &mut out),
            Event::OffsetOutOfRange {
                tp,
                incarnation,
                position,
                low,
            } => {
                if !self.is_current(&tp, incarnation) {
                    return out;
                }
                match self.config.on_out_of_range {
                    // Retention deleted records not appended yet: the partition stops where its
                    // acknowledged prefix ends, which is still committed.
                    OutOfRangePolicy::Fail => {
                        let reason = FailReason::OutOfRange {
                            from: position,
                            low,
                        };
                        out.push(Action::FailPartition { tp, reason });
                    }
                    // As in exactly-once mode: `[position, low)` is gone from Kafka and was
                    // never appended, so it is counted as lost and the consumer continues at
                    // the log start; the acknowledged prefix passes the gap once every record
                    // delivered before it is acknowledged, at once when none is in flight.
                    OutOfRangePolicy::Earliest => {
                        out.push(Action::Count(Outcome::RecordsLost {
                            tp: tp.clone(),
                            from: position,
                            to: low,
                        }));
                        out.push(Action::Seek {
                            tp: tp.clone(),
                            incarnation,
                            to: low,
                        });
                        if let Some(p) = self.partitions.get_mut(&tp) {
                            p.lost_ranges.push((position, low));
                            p.pass_lost_ranges();
                        }
                    }
                }
            }
            Event::StreamLost { tp, .. } | Event::ZombieDetected { tp, .. } => {
                self.on_stream_lost(tp, &mut out)
            }
            Event::RevokeBegan { tp, lost } => self.on_revoke(tp, lost, &mut out),
            Event::WriterStopped { tp } => self.on_writer_stopped(tp, &mut out),
            Event::HandoffDeadline { tp } => {
                if self.partitions.contains_key(&tp) {
                    out.push(Action::Count(Outcome::HandoffAbandoned { tp: tp.clone() }));
                    self.release(tp, &mut out);
                    self.maybe_final_commit(&mut out);
                }
            }
            Event::Shutdown => self.on_shutdown(&mut out),
            Event::ShutdownDeadline => {
                if self.shutting_down {
                    out.push(Action::Count(Outcome::ShutdownIncomplete {
                        partitions: self.partitions.len(),
                    }));
                    self.finish(&mut out);
                }
            }
            // Cycles never flush on `_default`; a superseded stream's finalize is best effort.
            Event::FlushResult { .. } | Event::FinalizeResult { .. } => {}
        }
        if !revoking {
            self.commit_first_positions(&mut out);
        }
        out
    }

    fn is_current(&self, tp: &TopicPartition, incarnation: Incarnation) -> bool {
        self.partitions
            .get(tp)
            .is_some_and(|p| matches!(p.phase, Phase::Running) && p.incarnation == incarnation)
    }

    // ---------------------------------------------------------------------------------------
    // Recovery: the exactly-once protocol's, one instance per recovering partition.

    fn on_assigned(
        &mut self,
        tp: TopicPartition,
        table: RoutedTable,
        assignment: Assignment,
        read_at: MarkerRequests,
        out: &mut Vec<Action>,
    ) {
        if self.shutting_down {
            return;
        }
        if table.marked {
            self.marked.insert(table.table);
        }
        // The recovery tells a first start from a missing checkpoint by the marker: it must
        // know one this process wrote since the route was read, as the exactly-once protocol
        // does, or a partition without an offset under a table this group marked (a sibling
        // that died before its first commit) would pass for a first start (invariant 7). What
        // counts is the marker when the offset was read: one this process asked for later
        // landed after the read. A committed offset says the marker was there before it.
        let read = match assignment.committed {
            None => read_at,
            Some(_) => MarkerRequests::ALL,
        };
        let table = RoutedTable {
            marked: self.marked.marked_at(&table.table, read),
            ..table
        };
        self.first_positions.remove(&tp);
        let mut protocol = Box::new(CheckpointProtocol::for_recovery(self.config.clone()));
        let actions = protocol.handle(Event::Assigned {
            tp: tp.clone(),
            table,
            assignment: assignment.clone(),
            read_at: MarkerRequests::ALL,
        });
        let partition = Partition {
            phase: Phase::Recovering {
                protocol,
                read: assignment,
            },
            table: table.table,
            incarnation: Incarnation(0),
            acked: NextOffset(0),
            lost_ranges: Vec::new(),
            committed: None,
            ours: false,
            superseded: None,
        };
        self.partitions.insert(tp.clone(), partition);
        self.recovery_actions(&tp, actions, out);
    }

    /// Feeds a recovery answer to `tp`'s protocol, if the partition still recovers.
    fn feed_recovery(&mut self, tp: &TopicPartition, event: Event, out: &mut Vec<Action>) {
        let Some(Partition {
            phase: Phase::Recovering { protocol, read },
            ..
        }) = self.partitions.get_mut(tp)
        else {
            return;
        };
        if let Event::CheckpointReread { assignment, .. } = &event {
            *read = assignment.clone();
        }
        let actions = protocol.handle(event);
        self.recovery_actions(tp, actions, out);
    }

    /// Passes on what a recovery asks for, except what the ledger does itself: the marker (one
    /// write per table) and the start of the incarnation (the partition starts appending).
    fn recovery_actions(
        &mut self,
        tp: &TopicPartition,
        actions: Vec<Action>,
        out: &mut Vec<Action>,
    ) {
        for action in actions {
            match action {
                Action::LabelTable { table, .. } => {
                    let marked = self.marked.request(table, out);
                    if marked {
                        let landed = Event::LabelResult {
                            table,
                            outcome: Ok(()),
                        };
                        self.feed_recovery(tp, landed, out);
                    }
                }
                Action::StartIncarnation { from, .. } => self.start(tp, from, out),
                Action::FailPartition { tp, reason } => {
                    if let Some(p) = self.partitions.get_mut(&tp) {
                        p.phase = Phase::FailedClosed;
                    }
                    out.push(Action::FailPartition { tp, reason });
                }
                action @ (Action::FlushRows { .. }
                | Action::ReadCommitted { .. }
                | Action::ResolveVisible { .. }
                | Action::Count(_)) => out.push(action),
                // Nothing else can come out of a recovery before its incarnation starts.
                _ => {}
            }
        }
    }

    /// Recovery is done: the partition appends to `_default` from `from`.
    fn start(&mut self, tp: &TopicPartition, from: NextOffset, out: &mut Vec<Action>) {
        self.next_incarnation += 1;
        let incarnation = Incarnation(self.next_incarnation);
        let Some(p) = self.partitions.get_mut(tp) else {
            return;
        };
        let Phase::Recovering { read, .. } = &p.phase else {
            return;
        };
        let committed = read.committed.as_ref();
        let metadata = committed.and_then(|r| CommitMetadata::parse(&r.metadata).ok());
        p.superseded = match &metadata {
            Some(CommitMetadata::ExactlyOnce {
                stream: Some(s), ..
            }) => Some(s.clone()),
            _ => None,
        };
        p.committed = committed.map(|r| r.offset);
        p.ours = matches!(metadata, Some(CommitMetadata::AtLeastOnce { .. }));
        p.acked = from;
        p.lost_ranges.clear();
        p.incarnation = incarnation;
        p.phase = Phase::Running;
        let first = p.committed.is_none();
        let table = p.table;
        out.push(Action::StartIncarnation {
            tp: tp.clone(),
            incarnation,
            from,
        });
        if first {
            // No committed offset: until one lands, a successor reads a missing checkpoint
            // under a marked table (docs/operations.md, "Missing checkpoints", case 3). The
            // marker is asked for now and the position committed by the next cycle to start,
            // at once (`commit_first_positions`).
            self.first_positions.insert(tp.clone());
            self.marked.request(table, out);
        }
    }

    /// `_default` lives as long as the table: NOT_FOUND means the table was recreated (and a
    /// finalized `_default` cannot be). The writer restarts from the acknowledged prefix; the
    /// rest is re-delivered. A writer that ends so while draining has stopped.
    fn on_stream_lost(&mut self, tp: TopicPartition, out: &mut Vec<Action>) {
        let Some(p) = self.partitions.get_mut(&tp) else {
            return;
        };
        match p.phase {
            Phase::Running => {
                self.next_incarnation += 1;
                p.incarnation = Incarnation(self.next_incarnation);
                // The new incarnation re-reads from `acked`; a gap above it is met (and
                // counted) again.
                p.lost_ranges.clear();
                out.push(Action::Count(Outcome::StreamRestarted { tp: tp.clone() }));
                out.push(Action::StartIncarnation {
                    incarnation: p.incarnation,
                    from: p.acked,
                    tp,
                });
            }
            Phase::Draining { .. } => self.on_writer_stopped(tp, out),
            _ => {}
        }
    }

    // ---------------------------------------------------------------------------------------
    // The group's marker.

    fn on_label(
        &mut self,
        table: TableFingerprint,
        outcome: Result<(), String>,
        out: &mut Vec<Action>,
    ) {
        if !self.marked.on_result(table, outcome, out) {
            return;
        }
        let waiting: Vec<TopicPartition> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.table == table && matches!(p.phase, Phase::Recovering { .. }))
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in waiting {
            let landed = Event::LabelResult {
                table,
                outcome: Ok(()),
            };
            self.feed_recovery(&tp, landed, out);
        }
        // The commits the marker held back go now, not a whole interval later: until they land,
        // a crash leaves a marked table without offsets, which the next start reads as a
        // missing checkpoint (docs/operations.md).
        self.start_cycle(out);
        self.maybe_final_commit(out);
    }

    // ---------------------------------------------------------------------------------------
    // Commits.

    fn entry(&self, tp: &TopicPartition, p: &Partition) -> CommitEntry {
        CommitEntry {
            tp: tp.clone(),
            offset: p.acked,
            metadata: CommitMetadata::AtLeastOnce { table: p.table }
                .encode(self.config.write_version),
        }
    }

    /// The commit entries of the partitions in a phase `phase` picks whose committed offset lags
    /// their acknowledged prefix, each with its table (commits wait for its marker).
    fn lagging(&self, phase: fn(&Phase) -> bool) -> Vec<(CommitEntry, TableFingerprint)> {
        self.partitions
            .iter()
            .filter(|(_, p)| phase(&p.phase) && p.needs_commit())
            .map(|(tp, p)| (self.entry(tp, p), p.table))
            .collect()
    }

    /// Commits the acknowledged prefix of every partition whose committed offset lags it, once
    /// its table carries the marker.
    fn start_cycle(&mut self, out: &mut Vec<Action>) {
        if self.cycle.is_some() || self.shutting_down {
            return;
        }
        let candidates = self.lagging(|phase| matches!(phase, Phase::Running));
        let entries = self.marked.admit(candidates, out).ready;
        for e in &entries {
            self.first_positions.remove(&e.tp);
        }
        if !entries.is_empty() {
            let commit = self.send_commit(Purpose::Cycle, entries, out);
            self.cycle = Some(commit);
        }
    }

    /// Starts a cycle when a partition waits for the commit of its first position, its table
    /// carries the marker and no cycle is in flight: an ordinary cycle, one commit at a time,
    /// so a first position never lands after a later commit of its partition. A position
    /// leaves the set when a cycle sends it, whatever the answer (the regular cycles commit it
    /// again), so a commit that keeps failing costs no loop of cycles.
    fn commit_first_positions(&mut self, out: &mut Vec<Action>) {
        if self.shutting_down || self.cycle.is_some() {
            return;
        }
        let partitions = &self.partitions;
        let waiting = |tp: &TopicPartition| {
            partitions
                .get(tp)
                .filter(|p| matches!(p.phase, Phase::Running) && p.needs_commit())
                .map(|p| p.table)
        };
        if self.first_positions.due(&self.marked, waiting) {
            self.start_cycle(out);
        }
    }

    fn send_commit(
        &mut self,
        purpose: Purpose,
        entries: Vec<CommitEntry>,
        out: &mut Vec<Action>,
    ) -> CommitId {
        self.next_commit += 1;
        let commit = CommitId(self.next_commit);
        self.commits.insert(commit, (purpose, entries.clone()));
        out.push(Action::CommitOffsets { commit, entries });
        commit
    }

    fn on_commit(&mut self, commit: CommitId, outcome: CommitOutcome, out: &mut Vec<Action>) {
        let Some((purpose, entries)) = self.commits.remove(&commit) else {
            return;
        };
        let results: BTreeMap<TopicPartition, Result<(), CommitError>> = match outcome {
            CommitOutcome::PerPartition(r) => r.into_iter().collect(),
            CommitOutcome::Rejected(reason) => entries
                .iter()
                .map(|e| (e.tp.clone(), Err(CommitError::Request(reason.clone()))))
                .collect(),
        };
        let mut landed = 0;
        for entry in &entries {
            match results.get(&entry.tp) {
                Some(Ok(())) => {
                    landed += 1;
                    self.committed(&entry.tp, entry.offset, out);
                }
                Some(Err(error)) => out.push(Action::Count(Outcome::CommitFailed {
                    tp: entry.tp.clone(),
                    error: error.clone(),
                })),
                None => {}
            }
        }
        match purpose {
            Purpose::Cycle => {
                self.cycle = None;
                if landed == 0 {
                    out.push(Action::Count(Outcome::CycleAbandoned));
                }
            }
            Purpose::Handoff(tp) => {
                out.push(Action::Count(Outcome::HandedOff {
                    tp: tp.clone(),
                    committed: landed > 0,
                }));
                self.release(tp, out);
                self.maybe_final_commit(out);
            }
            Purpose::Final => self.finish(out),
        }
    }

    /// `tp`'s offset `offset` with the at-least-once metadata is durable.
    fn committed(&mut self, tp: &TopicPartition, offset: NextOffset, out: &mut Vec<Action>) {
        let Some(p) = self.partitions.get_mut(tp).filter(|p| p.appending()) else {
            return;
        };
        p.committed = Some(offset);
        p.ours = true;
        // Nothing durable references the exactly-once stream any more: its rows are visible
        // (the recovery re-flushed them) or counted as rewound.
        if let Some(stream) = p.superseded.take() {
            out.push(Action::FinalizeStream {
                tp: tp.clone(),
                stream: stream.clone(),
            });
            out.push(Action::Count(Outcome::Finalized {
                tp: tp.clone(),
                stream,
            }));
        }
    }

    // ---------------------------------------------------------------------------------------
    // Revoke, handoff, shutdown.

    fn on_revoke(&mut self, tp: TopicPartition, lost: bool, out: &mut Vec<Action>) {
        let Some(p) = self.partitions.get_mut(&tp) else {
            out.push(Action::Release { tp });
            return;
        };
        let writing = matches!(p.phase, Phase::Running | Phase::Draining { .. });
        if lost {
            // Another member may own the partition already: commit nothing.
            if writing {
                out.push(Action::StopWriter { tp: tp.clone() });
            }
            return self.release(tp, out);
        }
        match p.phase {
            Phase::Running | Phase::Draining { handoff: false } => {
                p.phase = Phase::Draining { handoff: true };
                out.push(Action::StopWriter { tp });
            }
            Phase::Draining { handoff: true } | Phase::HandingOff => {}
            Phase::Stopped => {
                p.phase = Phase::Draining { handoff: true };
                self.on_writer_stopped(tp, out);
            }
            Phase::Recovering { .. } | Phase::FailedClosed => self.release(tp, out),
        }
    }

    /// The writer drained (or ended): its acknowledged prefix is final.
    fn on_writer_stopped(&mut self, tp: TopicPartition, out: &mut Vec<Action>) {
        let Some(p) = self.partitions.get_mut(&tp) else {
            return;
        };
        match p.phase {
            Phase::Draining { handoff: true } => {
                // The single handoff commit, released when answered. Without the table's
                // marker no commit is made: the next owner starts from the last one.
                if !p.needs_commit() || !self.marked.contains(&p.table) {
                    out.push(Action::Count(Outcome::HandedOff {
                        tp: tp.clone(),
                        committed: false,
                    }));
                    self.release(tp, out);
                    return self.maybe_final_commit(out);
                }
                p.phase = Phase::HandingOff;
                let entry = self.entry(&tp, &self.partitions[&tp]);
                self.send_commit(Purpose::Handoff(tp), vec![entry], out);
            }
            Phase::Draining { handoff: false } => {
                p.phase = Phase::Stopped;
                self.maybe_final_commit(out);
            }
            _ => {}
        }
    }

    fn release(&mut self, tp: TopicPartition, out: &mut Vec<Action>) {
        self.partitions.remove(&tp);
        out.push(Action::Release { tp });
    }

    fn on_shutdown(&mut self, out: &mut Vec<Action>) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        let tps: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        for tp in tps {
            let p = self.partitions.get_mut(&tp).expect("listed");
            match p.phase {
                Phase::Running => {
                    p.phase = Phase::Draining { handoff: false };
                    out.push(Action::StopWriter { tp });
                }
                // A recovery not finished appended nothing: it stops where it is.
                Phase::Recovering { .. } => {
                    p.phase = Phase::FailedClosed;
                    out.push(Action::StopWriter { tp });
                }
                _ => {}
            }
        }
        self.maybe_final_commit(out);
    }

    /// Once every writer stopped: one commit of every partition's final prefix, then leave.
    fn maybe_final_commit(&mut self, out: &mut Vec<Action>) {
        if !self.shutting_down || self.final_sent {
            return;
        }
        let waiting = self.partitions.values().any(|p| {
            matches!(
                p.phase,
                Phase::Running | Phase::Draining { .. } | Phase::HandingOff
            )
        });
        if waiting {
            return;
        }
        // A stopped partition whose table does not carry the marker yet (a SIGTERM before the
        // first cycle asked for it, or while it is being written) waits for it: a clean stop
        // must leave the acknowledged prefix committed, and the shutdown deadline bounds the wait.
        let candidates = self.lagging(|phase| matches!(phase, Phase::Stopped));
        let admitted = self.marked.admit(candidates, out);
        if !admitted.all {
            return;
        }
        self.final_sent = true;
        let entries = admitted.ready;
        if entries.is_empty() {
            self.finish(out);
        } else {
            self.send_commit(Purpose::Final, entries, out);
        }
    }

    fn finish(&mut self, out: &mut Vec<Action>) {
        let tps: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        for tp in tps {
            self.release(tp, out);
        }
        self.done = true;
        out.push(Action::ShutdownComplete);
    }
}
