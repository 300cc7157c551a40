//! The cycle: acknowledged rows, the commit, the table marker, the flush and the finalize of
//! superseded streams.

use super::*;

impl CheckpointProtocol {
    // ---------------------------------------------------------------------------------------
    // Writer progress and the bounded tail.

    pub(super) fn on_ack(&mut self, tp: TopicPartition, ack: Acknowledged, out: &mut Vec<Action>) {
        let cap = self.config.max_uncommitted_bytes;
        let Some(state) = self.partitions.get_mut(&tp) else {
            return;
        };
        let accepting = matches!(state.phase, Phase::Running | Phase::Draining { .. });
        // An ack of an earlier incarnation describes a stream nobody will flush any more.
        if !accepting
            || ack.incarnation() != state.progress.incarnation()
            || ack.next() < state.progress.next()
            || ack.rows() < state.progress.rows()
        {
            return;
        }
        state.progress = ack;
        state.pass_lost_ranges();
        if !state.paused && state.progress.bytes().saturating_sub(state.committed_bytes) >= cap {
            state.paused = true;
            out.push(Action::Pause { tp: tp.clone() });
            out.push(Action::Count(Outcome::Paused { tp }));
        }
    }

    // ---------------------------------------------------------------------------------------
    // The cycle (docs/architecture.md#the-cycle, steps 1–4).

    pub(super) fn start_cycle(&mut self, out: &mut Vec<Action>) {
        if self.cycle.is_some() {
            return;
        }
        if self.shutting_down {
            if self
                .partitions
                .values()
                .any(|p| matches!(p.phase, Phase::Draining { handoff: false }))
            {
                return;
            }
            if self.shutdown_rested() {
                return self.finish_shutdown(out);
            }
        }
        // Step 1, barrier: each writer's acknowledged prefix is its answer. The writer reports
        // acks as they come, so the coordinator never waits for a slow writer: a writer with
        // nothing new keeps its previous checkpoint.
        let mut cycle = Cycle::default();
        let mut candidates = Vec::new();
        for (tp, p) in &self.partitions {
            if !matches!(p.phase, Phase::Running | Phase::Stopped) {
                continue;
            }
            let c = Committable::seal(&p.progress, p.visible);
            // Idle means "no change to the checkpoint", not "offset unchanged": after a rewind
            // K comes back to its old value on another stream, and a flush that succeeded
            // changes f, which the next commit must carry.
            if p.committed.as_ref() == Some(c.checkpoint()) {
                continue;
            }
            candidates.push(((tp.clone(), c), p.table));
        }
        // The table must say "this group may have committed here" before any commit can land:
        // a commit whose answer is lost, followed by crashes and expired offsets, would
        // otherwise pass for a first start and lose or repeat its rows. A partition of an
        // unmarked table commits in the first cycle after the marker landed.
        cycle.entries = self
            .marked
            .admit(candidates, out)
            .ready
            .into_iter()
            .collect();
        for tp in cycle.entries.keys() {
            self.first_positions.remove(tp);
        }
        if cycle.entries.is_empty() {
            self.cycle = Some(cycle);
            return self.flush_phase(out);
        }
        // Step 2, prepare: one commit of offsets + metadata, handed to librdkafka under the lock
        // the revoke callback takes. Nothing is flushed before its result.
        self.next_commit += 1;
        let commit = CommitId(self.next_commit);
        let entries = cycle
            .entries
            .iter()
            .map(|(tp, c)| self.entry(tp, c))
            .collect();
        cycle.commit = Some(commit);
        cycle.worked = true;
        self.cycle = Some(cycle);
        out.push(Action::CommitOffsets { commit, entries });
    }

    /// `tp` started without a committed offset (a first start, a partition added at runtime, a
    /// missing checkpoint): until a commit of its position lands, a successor finds no offset
    /// under a marked table and reads a missing checkpoint, which `lost_offsets: fail` stops
    /// for good (docs/operations.md, "Missing checkpoints", case 3). So its table's marker is
    /// asked for now, and its position goes with a cycle that starts as soon as none is in
    /// flight and the marker is there (`commit_first_positions`), not an interval later.
    pub(super) fn first_position(&mut self, tp: &TopicPartition, out: &mut Vec<Action>) {
        if self.recovery_only {
            return;
        }
        let Some(table) = self
            .partitions
            .get(tp)
            .filter(|p| p.phase == Phase::Running)
            .map(|p| p.table)
        else {
            return;
        };
        self.first_positions.insert(tp.clone());
        self.mark(table, out);
    }

    /// Starts a cycle when a partition waits for the commit of its first position, its table
    /// carries the marker and no cycle is in flight. It is an ordinary cycle: one commit at a
    /// time, so a first position can never land after a later commit of the same partition and
    /// move its offset back, and everything else the cycle does (flushes after their commit,
    /// finalizes after a flush) keeps its order. A first position leaves the set when a cycle
    /// sends it, whatever the commit's answer: a failed one is committed again by the regular
    /// cycles, so a commit that keeps failing costs no loop of cycles.
    pub(super) fn commit_first_positions(&mut self, out: &mut Vec<Action>) {
        if self.shutting_down || self.cycle.is_some() {
            return;
        }
        let partitions = &self.partitions;
        let waiting = |tp: &TopicPartition| {
            partitions
                .get(tp)
                .filter(|p| {
                    p.phase == Phase::Running
                        && p.committed.as_ref()
                            != Some(Committable::seal(&p.progress, p.visible).checkpoint())
                })
                .map(|p| p.table)
        };
        if self.first_positions.due(&self.marked, waiting) {
            self.start_cycle(out);
        }
    }

    pub(super) fn entry(&self, tp: &TopicPartition, c: &Committable) -> CommitEntry {
        let table = self.partitions[tp].table;
        let metadata = CommitMetadata::for_checkpoint(table, c.checkpoint());
        CommitEntry {
            tp: tp.clone(),
            offset: c.checkpoint().next,
            metadata: metadata.encode(self.config.write_version),
        }
    }

    /// Writes the group's marker on `table` unless it is there or being written.
    pub(super) fn mark(&mut self, table: TableFingerprint, out: &mut Vec<Action>) {
        self.marked.request(table, out);
    }

    pub(super) fn on_label_result(
        &mut self,
        table: TableFingerprint,
        outcome: Result<(), String>,
        out: &mut Vec<Action>,
    ) {
        if !self.marked.on_result(table, outcome, out) {
            return;
        }
        // The re-flushes that waited for the marker.
        let waiting: Vec<_> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.table == table && matches!(p.phase, Phase::Marking { .. }))
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in waiting {
            let p = self.partitions.get_mut(&tp).expect("listed");
            let Phase::Marking { checkpoint } = p.phase.clone() else {
                unreachable!("listed as marking");
            };
            out.push(Action::FlushRows {
                tp: tp.clone(),
                stream: checkpoint.stream.clone().expect("a re-flush has a stream"),
                through: checkpoint.flush_to.expect("a re-flush has a flush offset"),
                purpose: FlushPurpose::Recovery,
                attempt: 0,
            });
            p.phase = Phase::Flushing {
                checkpoint,
                attempt: 0,
                not_found: 0,
            };
        }
        // The commits that waited go with the next cycle; during shutdown the final cycles
        // run back to back, so the next one starts now.
        if self.shutting_down && self.cycle.is_none() {
            self.start_cycle(out);
        }
    }

    pub(super) fn on_commit_result(
        &mut self,
        commit: CommitId,
        outcome: CommitOutcome,
        out: &mut Vec<Action>,
    ) {
        if let Some(tp) = self.handoff_committing(commit) {
            return self.on_handoff_commit(tp, &outcome, out);
        }
        let Some(cycle) = self.cycle.as_mut().filter(|c| c.commit == Some(commit)) else {
            return;
        };
        cycle.commit = None;
        let entries = std::mem::take(&mut cycle.entries);
        let results = match outcome {
            CommitOutcome::Rejected(_) => {
                // A whole-request error: we do not know what landed, and the group may be moving
                // partitions away. No flush, no finalize in this cycle; the next cycle commits
                // again (a commit that landed anyway names only our own streams). It says
                // nothing about any one partition, so it does not count towards isolation.
                for (tp, c) in entries {
                    if let Some(p) = self.partitions.get_mut(&tp) {
                        p.in_doubt = Some(c.checkpoint().clone());
                    }
                }
                out.push(Action::Count(Outcome::CycleAbandoned));
                self.cycle = None;
                return self.after_cycle(false, out);
            }
            CommitOutcome::PerPartition(results) => results,
        };
        let mut failed = false;
        let mut abandoned = false;
        for (tp, c) in entries {
            let result = results.iter().find(|(t, _)| *t == tp).map_or_else(
                || Err(CommitError::Request("no answer".into())),
                |(_, r)| r.clone(),
            );
            if let EntryCommit::Failed { request } = self.on_entry_commit(tp, c, result, out) {
                failed = true;
                abandoned |= request;
            }
        }
        let tps: Vec<_> = self.partitions.keys().cloned().collect();
        for tp in tps {
            self.finalize_superseded(&tp, out);
        }
        if let Some(cycle) = self.cycle.as_mut() {
            cycle.failed |= failed;
        }
        if abandoned {
            out.push(Action::Count(Outcome::CycleAbandoned));
        }
        self.isolate_failing(out);
        self.flush_phase(out);
    }

    /// The partition whose handoff commit `commit` is, if it is one.
    fn handoff_committing(&self, commit: CommitId) -> Option<TopicPartition> {
        self.partitions
            .iter()
            .find(|(_, p)| p.phase == Phase::HandoffCommitting { commit })
            .map(|(tp, _)| tp.clone())
    }

    /// The handoff commit: whatever its result, the next owner re-flushes and finalizes.
    fn on_handoff_commit(
        &mut self,
        tp: TopicPartition,
        outcome: &CommitOutcome,
        out: &mut Vec<Action>,
    ) {
        let committed = matches!(outcome, CommitOutcome::PerPartition(r)
            if r.iter().any(|(t, res)| *t == tp && res.is_ok()));
        out.push(Action::Count(Outcome::HandedOff {
            tp: tp.clone(),
            committed,
        }));
        self.release(tp, out)
    }

    /// One partition's result in a cycle's commit.
    fn on_entry_commit(
        &mut self,
        tp: TopicPartition,
        c: Committable,
        result: Result<(), CommitError>,
        out: &mut Vec<Action>,
    ) -> EntryCommit {
        let cap = self.config.max_uncommitted_bytes;
        let Some(p) = self.partitions.get_mut(&tp) else {
            // Revoked meanwhile: the commit was handed over before the revoke and completed
            // before it (librdkafka holds the rejoin for it); nothing follows it.
            return EntryCommit::Settled;
        };
        if !matches!(p.phase, Phase::Running | Phase::Stopped) {
            if result.is_ok() {
                p.committed = Some(c.checkpoint().clone());
            }
            return EntryCommit::Settled;
        }
        let Err(error) = result else {
            p.on_own_commit_landed(&tp, &c, cap, out);
            return EntryCommit::Settled;
        };
        // A whole-request error (the group coordinator moving, __consumer_offsets short of
        // replicas) says nothing about this partition: isolating on it would stop every
        // partition for good after a broker hiccup. The read-back told us what landed; the rest
        // is committed again next cycle.
        let request = !matches!(error, CommitError::Partition(_));
        if !request {
            p.commit_failures += 1;
        }
        out.push(Action::Count(Outcome::CommitFailed { tp, error }));
        EntryCommit::Failed { request }
    }

    /// A partition whose commit keeps failing (metadata too large, topic ACL, deleted topic) is
    /// stopped so that it cannot stall the others (docs/architecture.md#the-cycle, step 2).
    pub(super) fn isolate_failing(&mut self, out: &mut Vec<Action>) {
        let limit = self.config.isolate_after_commit_failures;
        let failing: Vec<_> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.phase == Phase::Running && p.commit_failures >= limit)
            .map(|(tp, p)| (tp.clone(), p.commit_failures))
            .collect();
        for (tp, failures) in failing {
            let state = self.partitions.remove(&tp).expect("listed above");
            out.push(Action::StopWriter { tp: tp.clone() });
            if let Some(cycle) = self.cycle.as_mut() {
                cycle.flushing.remove(&tp);
            }
            self.fail(tp, state, FailReason::Isolated { failures }, out);
        }
    }

    /// Step 3: FlushRows for every committed-but-not-visible checkpoint, the ones this cycle
    /// committed and the pending ones of earlier cycles alike (also for idle partitions).
    pub(super) fn flush_phase(&mut self, out: &mut Vec<Action>) {
        let Some(cycle) = self.cycle.as_mut() else {
            return;
        };
        for (tp, p) in self.partitions.iter_mut() {
            // Failed with a pending flush: isolated after its last commit landed.
            if !matches!(p.phase, Phase::Running | Phase::Stopped | Phase::Failed)
                || p.flush_in_flight
            {
                continue;
            }
            if let Some(pending) = &p.pending {
                p.flush_in_flight = true;
                cycle.worked = true;
                cycle.flushing.insert(tp.clone());
                out.push(Action::FlushRows {
                    tp: tp.clone(),
                    stream: pending.stream.clone(),
                    through: pending.through,
                    purpose: FlushPurpose::Cycle,
                    attempt: pending.not_found,
                });
            }
        }
        self.finish_cycle_if_done(out);
    }

    pub(super) fn on_flush_result(
        &mut self,
        tp: TopicPartition,
        stream: StreamId,
        through: RowOffset,
        outcome: FlushOutcome,
        out: &mut Vec<Action>,
    ) {
        let not_found_retries = self.config.not_found_retries;
        let on_anomaly = self.config.on_anomaly;
        let mut lost = None;
        let mut zombie = false;
        let mut fail = None;
        if let Some(p) = self.partitions.get_mut(&tp) {
            let matches = p
                .pending
                .as_ref()
                .is_some_and(|f| f.stream == stream && f.through == through);
            if matches && let Some(cycle) = self.cycle.as_mut() {
                cycle.flushing.remove(&tp);
            }
            if matches && matches!(p.phase, Phase::Running | Phase::Stopped | Phase::Failed) {
                p.flush_in_flight = false;
                let pending = p.pending.clone().expect("matched above");
                let isolated = p.phase == Phase::Failed;
                match outcome {
                    FlushOutcome::Flushed => {
                        // Step 3 done: f := K. The next commit carries it, so an idle partition
                        // gets one more commit and rests at f == K.
                        p.visible = p.visible.max(pending.covers);
                        p.pending = None;
                        out.push(Action::Count(Outcome::Visible {
                            tp: tp.clone(),
                            through: p.visible,
                        }));
                    }
                    FlushOutcome::AlreadyExists
                        if p.in_doubt.as_ref().is_some_and(|c| {
                            c.stream.as_ref() == Some(&stream)
                                && c.flush_to.is_some_and(|r| r > through)
                        }) =>
                    {
                        // A later checkpoint of ours on this stream was committed with its
                        // answer lost: it may have landed and been re-flushed by whoever
                        // recovered from it (the next owner, while we are fenced and do not
                        // know yet). The rows through `through` are visible all the same; that
                        // cursor is no sign of someone flushing a stream nobody committed.
                        p.visible = p.visible.max(pending.covers);
                        p.pending = None;
                    }
                    FlushOutcome::AlreadyExists => {
                        // Our own committed checkpoint is always the newest on its stream (but
                        // for one whose answer was lost, above), so a cursor past it means
                        // someone else flushed our stream.
                        out.push(Action::Count(Outcome::Anomaly {
                            tp: tp.clone(),
                            stream: stream.clone(),
                        }));
                        match on_anomaly {
                            AnomalyPolicy::Fail => {
                                fail = Some(FailReason::Anomaly {
                                    stream: stream.clone(),
                                })
                            }
                            AnomalyPolicy::Continue => {
                                p.visible = p.visible.max(pending.covers);
                                p.pending = None;
                            }
                        }
                    }
                    // An isolated partition changes nothing but its pending flush: what else
                    // happened to the stream is for the next owner's recovery.
                    FlushOutcome::StreamFinalized | FlushOutcome::NotFound if isolated => {
                        p.pending = None;
                    }
                    FlushOutcome::StreamFinalized => zombie = true,
                    FlushOutcome::NotFound if pending.not_found >= not_found_retries => {
                        lost = Some(pending.stream.clone())
                    }
                    FlushOutcome::NotFound => {
                        p.pending.as_mut().expect("matched").not_found += 1;
                        out.push(Action::Count(Outcome::FlushRetried { tp: tp.clone() }));
                    }
                    FlushOutcome::Transient(_) | FlushOutcome::Denied(_) => {
                        // Stays pending: retried next cycle, whether or not new rows arrive.
                        out.push(Action::Count(Outcome::FlushRetried { tp: tp.clone() }));
                    }
                    FlushOutcome::Fatal(e) => fail = Some(FailReason::FlushFatal(e)),
                }
            } else if matches {
                p.flush_in_flight = false;
            }
        }
        if zombie {
            self.become_zombie(tp.clone(), out);
        } else if let Some(stream) = lost {
            self.on_stream_lost(tp.clone(), stream, out);
        } else if let Some(reason) = fail {
            out.push(Action::StopWriter { tp: tp.clone() });
            let state = self.partitions.remove(&tp).expect("present above");
            self.fail(tp.clone(), state, reason, out);
        } else {
            // Step 4, supersede-then-finalize.
            self.finalize_superseded(&tp, out);
        }
        self.finish_cycle_if_done(out);
    }

    /// Finalizes the streams of earlier incarnations once nothing durable needs them: the latest
    /// commit references another stream whose flush succeeded, or it says f == K (invariant 3).
    /// The latest commit must be one of ours that landed: a fenced process whose commits are
    /// refused believes the live owner's checkpoint, and would finalize the stream the owner
    /// is appending to.
    pub(super) fn finalize_superseded(&mut self, tp: &TopicPartition, out: &mut Vec<Action>) {
        let Some(p) = self.partitions.get_mut(tp) else {
            return;
        };
        if !matches!(p.phase, Phase::Running | Phase::Stopped)
            || p.pending.is_some()
            || !p.own_commit_landed
        {
            return;
        }
        let Some(latest) = &p.committed else {
            return;
        };
        let current = p.progress.stream().cloned();
        let mut keep = Vec::new();
        for s in std::mem::take(&mut p.superseded) {
            let needed = latest.stream.as_ref() == Some(&s) && latest.needs_flush();
            if needed || current.as_ref() == Some(&s) {
                keep.push(s);
                continue;
            }
            out.push(Action::FinalizeStream {
                tp: tp.clone(),
                stream: s.clone(),
            });
            out.push(Action::Count(Outcome::Finalized {
                tp: tp.clone(),
                stream: s,
            }));
        }
        p.superseded = keep;
    }

    pub(super) fn finish_cycle_if_done(&mut self, out: &mut Vec<Action>) {
        let done = self
            .cycle
            .as_ref()
            .is_some_and(|c| c.commit.is_none() && c.flushing.is_empty());
        if done {
            let cycle = self.cycle.take().expect("checked");
            self.after_cycle(cycle.worked && !cycle.failed, out);
        }
    }

    pub(super) fn after_cycle(&mut self, clean: bool, out: &mut Vec<Action>) {
        if !self.shutting_down {
            return;
        }
        if self.shutdown_rested() {
            self.finish_shutdown(out);
        } else if clean {
            // The final cycles run back to back: commit, flush, commit again with f == K.
            self.start_cycle(out);
        }
    }
}

/// What one partition's commit result means for the cycle.
enum EntryCommit {
    /// Landed, or nothing follows from it (revoked meanwhile, no longer running).
    Settled,
    /// Did not land: an error of the partition itself (counts towards isolation), or of the
    /// whole request (`request`: counted as an abandoned cycle, never towards isolation).
    Failed { request: bool },
}

impl PartitionState {
    /// Moves the acknowledged prefix over the counted-lost ranges it has reached, in order
    /// (`lost_ranges`); a range it has passed by an acknowledgement after the gap is dropped.
    pub(super) fn pass_lost_ranges(&mut self) {
        let progress = &mut self.progress;
        self.lost_ranges.retain(|&(from, to)| {
            if progress.next() < from {
                return true;
            }
            *progress = progress.over_lost_range(from, to);
            false
        });
    }

    /// A commit of this process landed for a running (or stopped) partition: the checkpoint is
    /// durable, the superseded stream is queued for finalize, the bounded tail may reopen and
    /// the checkpoint's flush is pending.
    fn on_own_commit_landed(
        &mut self,
        tp: &TopicPartition,
        c: &Committable,
        max_uncommitted_bytes: u64,
        out: &mut Vec<Action>,
    ) {
        self.commit_failures = 0;
        self.own_commit_landed = true;
        self.in_doubt = None;
        let old = self.committed.replace(c.checkpoint().clone());
        if let Some(old_stream) = old.and_then(|o| o.stream)
            && c.checkpoint().stream.as_ref() != Some(&old_stream)
            && !self.superseded.contains(&old_stream)
        {
            self.superseded.push(old_stream);
        }
        if c.incarnation() != self.progress.incarnation() {
            // Built from an incarnation that was restarted since (its stream was lost): the
            // commit landed, but its stream will never be flushed by us.
            return;
        }
        self.committed_bytes = c.bytes();
        if self.paused
            && self.progress.bytes().saturating_sub(self.committed_bytes) < max_uncommitted_bytes
        {
            self.paused = false;
            out.push(Action::Resume { tp: tp.clone() });
        }
        let cp = c.checkpoint();
        // The newest committed checkpoint replaces an older pending flush: on the same
        // stream its r covers the older one, and a new stream only ever starts above f.
        self.pending = match (&cp.stream, cp.flush_to) {
            (Some(stream), Some(through)) if cp.needs_flush() => Some(PendingFlush {
                stream: stream.clone(),
                through,
                covers: cp.next,
                not_found: 0,
            }),
            _ => None,
        };
    }
}
