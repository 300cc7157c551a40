//! Recovery when a partition is assigned: the start position, the re-flush of the checkpoint read
//! from Kafka, lost streams, missing checkpoints and out-of-range positions.

use super::*;

impl CheckpointProtocol {
    // ---------------------------------------------------------------------------------------
    // Recovery on assignment (docs/architecture.md#recovery).

    /// A partition assigned, with what Kafka says about it: the start position when there is no
    /// checkpoint, else the checkpoint read and checked, then whatever it leaves in doubt.
    pub(super) fn on_assigned(
        &mut self,
        tp: TopicPartition,
        table: RoutedTable,
        a: Assignment,
        read_at: MarkerRequests,
        out: &mut Vec<Action>,
    ) {
        if self.shutting_down {
            return;
        }
        if table.marked {
            self.marked.insert(table.table);
        }
        let known = self.take_known(&tp, out);
        self.first_positions.remove(&tp);
        let state = PartitionState {
            phase: Phase::Failed,
            committed: None,
            visible: NextOffset(0),
            progress: Acknowledged::incarnation_start(Incarnation(0), NextOffset(0)),
            committed_bytes: 0,
            pending: None,
            flush_in_flight: false,
            superseded: Vec::new(),
            own_commit_landed: false,
            in_doubt: None,
            commit_failures: 0,
            paused: false,
            low: a.low,
            lost_ranges: Vec::new(),
            table: table.table,
        };
        let Some(read) = &a.committed else {
            return self.start_without_checkpoint(tp, state, &a, read_at, out);
        };
        if read.offset > a.high {
            // Kafka lost records we committed past (truncation, unclean election): no right answer.
            let reason = FailReason::AboveHighWatermark {
                committed: read.offset,
                high: a.high,
            };
            return self.fail(tp, state, reason, out);
        }
        match Self::read_checkpoint(state.table, read) {
            Err(reason) => self.fail(tp, state, reason, out),
            Ok(Committed::Position(case)) => {
                out.push(Action::Count(Outcome::Started {
                    tp: tp.clone(),
                    case,
                    at: read.offset,
                }));
                self.start_incarnation(tp, state, read.offset, out)
            }
            Ok(Committed::Checkpoint(checkpoint)) => {
                self.recover_checkpoint(tp, state, checkpoint, known, out)
            }
        }
    }

    /// What this process still knows of `tp`: a partition we still hold (a zombie whose
    /// ownership the group confirmed, or a failed one being retried) keeps what it knows, and
    /// its writer is stopped; one we released may have been remembered.
    fn take_known(&mut self, tp: &TopicPartition, out: &mut Vec<Action>) -> Option<Remembered> {
        match self.partitions.remove(tp) {
            Some(p) => {
                if matches!(p.phase, Phase::Running | Phase::Draining { .. }) {
                    out.push(Action::StopWriter { tp: tp.clone() });
                }
                p.committed.map(|committed| Remembered {
                    committed,
                    visible: p.visible,
                })
            }
            None => self.remembered.remove(tp),
        }
    }

    /// No committed offset. On a first start nothing of ours is visible (nothing is flushed
    /// before it is committed); if the group committed before (the marker on the partition's
    /// table when the offset was read), Kafka expired its offsets and the policy decides,
    /// counted. Never a silent reset. A marker that landed after the read (a sibling's first
    /// start asked for it while this partition's route was resolved) says nothing of it.
    fn start_without_checkpoint(
        &mut self,
        tp: TopicPartition,
        mut state: PartitionState,
        a: &Assignment,
        read_at: MarkerRequests,
        out: &mut Vec<Action>,
    ) {
        let (case, from) = match a.origin {
            PartitionOrigin::AddedAtRuntime => (
                StartCase::NewPartition,
                Some(Self::position(self.config.new_partition, a)),
            ),
            PartitionOrigin::Existing if !self.marked.marked_at(&state.table, read_at) => (
                StartCase::FirstStart,
                Some(Self::position(self.config.initial_position, a)),
            ),
            PartitionOrigin::Existing => {
                let from = match self.config.on_missing_checkpoint {
                    MissingCheckpointPolicy::Fail => None,
                    MissingCheckpointPolicy::Earliest => Some(a.low),
                    MissingCheckpointPolicy::Latest => Some(a.high),
                    MissingCheckpointPolicy::Resolve => {
                        out.push(Action::ResolveVisible {
                            tp: tp.clone(),
                            attempt: 0,
                        });
                        state.phase = Phase::Resolving {
                            attempt: 0,
                            why: Resolving::MissingCheckpoint,
                        };
                        self.partitions.insert(tp, state);
                        return;
                    }
                };
                (StartCase::MissingCheckpoint, from)
            }
        };
        let Some(from) = from else {
            return self.fail(tp, state, FailReason::CheckpointMissing, out);
        };
        out.push(Action::Count(Outcome::Started {
            tp: tp.clone(),
            case,
            at: from,
        }));
        self.start_incarnation(tp.clone(), state, from, out);
        self.first_position(&tp, out);
    }

    /// What the committed metadata of a partition of `table` says, or why the partition fails.
    fn read_checkpoint(
        table: TableFingerprint,
        read: &CommittedRead,
    ) -> Result<Committed, FailReason> {
        let metadata = match CommitMetadata::parse(&read.metadata) {
            Ok(m) => m,
            // Never read an unknown checkpoint as "none": that would abandon its unflushed tail.
            Err(e) => return Err(FailReason::Metadata(e)),
        };
        match &metadata {
            CommitMetadata::Empty => Ok(Committed::Position(StartCase::OperatorReset)),
            // The checkpoint must belong to the table the partition is routed to now: a route
            // changed to another table (or a reused group id) would flush rows of one table's
            // stream while appending to another's.
            CommitMetadata::AtLeastOnce { table: found }
            | CommitMetadata::ExactlyOnce { table: found, .. }
                if *found != table =>
            {
                Err(FailReason::ForeignTable { found: *found })
            }
            CommitMetadata::AtLeastOnce { .. } => Ok(Committed::Position(StartCase::AtLeastOnce)),
            CommitMetadata::ExactlyOnce { .. } => Ok(Committed::Checkpoint(
                metadata
                    .checkpoint(read.offset)
                    .expect("exactly-once metadata describes a checkpoint"),
            )),
        }
    }

    /// Recovery from an exactly-once checkpoint: re-flush what it committed but may not have
    /// made visible (after the table's marker, if it lacks one), else start at `K`.
    fn recover_checkpoint(
        &mut self,
        tp: TopicPartition,
        mut state: PartitionState,
        checkpoint: Checkpoint,
        known: Option<Remembered>,
        out: &mut Vec<Action>,
    ) {
        state.committed = Some(checkpoint.clone());
        state.visible = checkpoint.visible_through;
        // The same process getting the partition back keeps a flush it saw succeed, but only if
        // nobody committed in between: the durable checkpoint must be exactly the one it knew.
        if let Some(known) = known.filter(|k| k.committed == checkpoint) {
            state.visible = state.visible.max(known.visible);
        }
        if let Some(s) = &checkpoint.stream {
            // This incarnation never appends to the old stream; it is finalized once a commit of
            // ours stops referencing it (or says f == K).
            state.superseded.push(s.clone());
        }
        let table = state.table;
        match (&checkpoint.stream, checkpoint.flush_to) {
            (Some(_), Some(_))
                if state.visible < checkpoint.next && !self.marked.contains(&table) =>
            {
                // The re-flush makes rows visible: the table must say first that this group
                // committed to it, or expired offsets would later pass for a first start and
                // deliver these rows again (the previous owner may have died before its marker
                // landed).
                state.phase = Phase::Marking { checkpoint };
                self.partitions.insert(tp, state);
                self.mark(table, out);
            }
            (Some(stream), Some(through)) if state.visible < checkpoint.next => {
                // Something is in doubt: make the committed rows visible before appending
                // anything, so that invariant 2 holds across the crash of the previous owner.
                out.push(Action::FlushRows {
                    tp: tp.clone(),
                    stream: stream.clone(),
                    through,
                    purpose: FlushPurpose::Recovery,
                    attempt: 0,
                });
                state.phase = Phase::Flushing {
                    checkpoint,
                    attempt: 0,
                    not_found: 0,
                };
                self.partitions.insert(tp, state);
            }
            _ => {
                // f == K: nothing in doubt, whatever happened to the stream.
                out.push(Action::Count(Outcome::Started {
                    tp: tp.clone(),
                    case: StartCase::Checkpoint,
                    at: checkpoint.next,
                }));
                self.start_incarnation(tp, state, checkpoint.next, out);
            }
        }
    }

    pub(super) fn position(from: StartFrom, a: &Assignment) -> NextOffset {
        match from {
            StartFrom::Earliest => a.low,
            StartFrom::Latest => a.high,
        }
    }

    pub(super) fn on_recovery_flush(
        &mut self,
        tp: TopicPartition,
        flushed: StreamId,
        flushed_through: RowOffset,
        outcome: FlushOutcome,
        out: &mut Vec<Action>,
    ) {
        let Some(mut state) = self.partitions.remove(&tp) else {
            return;
        };
        let Phase::Flushing {
            checkpoint,
            attempt,
            not_found,
        } = state.phase.clone()
        else {
            self.partitions.insert(tp, state);
            return;
        };
        let stream = checkpoint.stream.clone().expect("a re-flush has a stream");
        if stream != flushed || checkpoint.flush_to != Some(flushed_through) {
            self.partitions.insert(tp, state);
            return;
        }
        let retry = |state: &mut PartitionState, not_found: u32, out: &mut Vec<Action>| {
            out.push(Action::Count(Outcome::RecoveryRetried {
                tp: tp.clone(),
                attempt: attempt + 1,
            }));
            out.push(Action::FlushRows {
                tp: tp.clone(),
                stream: stream.clone(),
                through: checkpoint.flush_to.expect("a re-flush has a flush offset"),
                purpose: FlushPurpose::Recovery,
                attempt: attempt + 1,
            });
            state.phase = Phase::Flushing {
                checkpoint: checkpoint.clone(),
                attempt: attempt + 1,
                not_found,
            };
        };
        match outcome {
            FlushOutcome::Flushed => {
                // Every record below K is visible now.
                out.push(Action::Count(Outcome::RecoveryFlushed { tp: tp.clone() }));
                state.visible = checkpoint.next;
                self.start_incarnation(tp, state, checkpoint.next, out);
            }
            FlushOutcome::AlreadyExists => {
                // The cursor is past r: a newer checkpoint on this stream was committed, flushed
                // and then lost. Rows after r are visible and will be written again from K.
                out.push(Action::Count(Outcome::Anomaly {
                    tp: tp.clone(),
                    stream: stream.clone(),
                }));
                match self.config.on_anomaly {
                    AnomalyPolicy::Fail => {
                        self.fail(tp, state, FailReason::Anomaly { stream }, out)
                    }
                    AnomalyPolicy::Continue => {
                        state.visible = checkpoint.next;
                        self.start_incarnation(tp, state, checkpoint.next, out);
                    }
                }
            }
            FlushOutcome::NotFound if not_found < self.config.not_found_retries => {
                retry(&mut state, not_found + 1, out);
                self.partitions.insert(tp, state);
            }
            FlushOutcome::NotFound | FlushOutcome::StreamFinalized => {
                // The stream is gone. Before deciding anything that costs exactness, make sure
                // the checkpoint we read is still the latest: a newer owner finalizes the stream
                // of the checkpoint it superseded, so a stale read (this process is a zombie
                // that has not noticed yet) looks exactly like a lost stream.
                out.push(Action::ReadCommitted { tp: tp.clone() });
                state.phase = Phase::Confirming { checkpoint, stream };
                self.partitions.insert(tp, state);
            }
            FlushOutcome::Transient(_) | FlushOutcome::Denied(_) => {
                retry(&mut state, not_found, out);
                self.partitions.insert(tp, state);
            }
            FlushOutcome::Fatal(e) => self.fail(tp, state, FailReason::FlushFatal(e), out),
        }
    }

    pub(super) fn on_reread(&mut self, tp: TopicPartition, a: Assignment, out: &mut Vec<Action>) {
        let Some(mut state) = self.partitions.remove(&tp) else {
            return;
        };
        let Phase::Confirming { checkpoint, stream } = state.phase.clone() else {
            self.partitions.insert(tp, state);
            return;
        };
        let unchanged = a.committed.as_ref().is_some_and(|read| {
            read.offset == checkpoint.next
                && CommitMetadata::parse(&read.metadata)
                    .ok()
                    .and_then(|m| m.checkpoint(read.offset))
                    .as_ref()
                    == Some(&checkpoint)
        });
        if unchanged {
            state.low = a.low;
            self.lost_stream(tp, state, stream, checkpoint.next, out);
        } else {
            // Someone committed since our read: recover from what is there now. If we no longer
            // own the partition, the group tells us; nothing here writes to the table.
            out.push(Action::Count(Outcome::CheckpointMoved { tp: tp.clone() }));
            // The route did not change meanwhile: the partition keeps its table.
            let table = RoutedTable {
                table: state.table,
                marked: self.marked.contains(&state.table),
            };
            self.partitions.insert(tp.clone(), state);
            self.on_assigned(tp, table, a, MarkerRequests::ALL, out);
        }
    }

    /// The stream holding rows `[f, below)` of a committed checkpoint is gone.
    pub(super) fn lost_stream(
        &mut self,
        tp: TopicPartition,
        mut state: PartitionState,
        stream: StreamId,
        below: NextOffset,
        out: &mut Vec<Action>,
    ) {
        state.superseded.retain(|s| *s != stream);
        match self.config.lost_stream {
            LostStreamPolicy::Fail => self.fail(tp, state, FailReason::LostStream { stream }, out),
            LostStreamPolicy::Rewind => {
                // At-least-once for [f, K): those rows may have been flushed without us learning
                // it (the durable f lags the real cursor by one flush). Counted.
                out.push(Action::Count(Outcome::Rewound {
                    tp: tp.clone(),
                    stream: stream.clone(),
                    from: state.visible,
                    to: below,
                }));
                let from = state.visible;
                self.start_incarnation(tp, state, from, out);
            }
            LostStreamPolicy::Resolve => {
                // Exact: rows of a partition become visible as a prefix, so the highest visible
                // offset tells where re-delivery must start.
                out.push(Action::ResolveVisible {
                    tp: tp.clone(),
                    attempt: 0,
                });
                state.phase = Phase::Resolving {
                    attempt: 0,
                    why: Resolving::LostStream { stream, below },
                };
                self.partitions.insert(tp, state);
            }
        }
    }

    pub(super) fn on_resolved(
        &mut self,
        tp: TopicPartition,
        outcome: Result<Option<KafkaOffset>, String>,
        out: &mut Vec<Action>,
    ) {
        let Some(mut state) = self.partitions.remove(&tp) else {
            return;
        };
        let Phase::Resolving { attempt, why } = state.phase.clone() else {
            self.partitions.insert(tp, state);
            return;
        };
        match outcome {
            Ok(highest) => {
                let from = match (&why, highest) {
                    (Resolving::LostStream { .. }, h) => state
                        .visible
                        .max(h.map(NextOffset::after).unwrap_or_default()),
                    (Resolving::MissingCheckpoint, Some(h)) => NextOffset::after(h),
                    // No row of the partition is visible: everything Kafka still has is to be
                    // written, as on a first start (a new topic of a marked table).
                    (Resolving::MissingCheckpoint, None) => state.low,
                };
                if why == Resolving::MissingCheckpoint {
                    out.push(Action::Count(Outcome::Started {
                        tp: tp.clone(),
                        case: StartCase::MissingCheckpoint,
                        at: from,
                    }));
                }
                out.push(Action::Count(Outcome::Resolved {
                    tp: tp.clone(),
                    at: from,
                }));
                state.visible = from;
                let first = why == Resolving::MissingCheckpoint;
                self.start_incarnation(tp.clone(), state, from, out);
                if first {
                    self.first_position(&tp, out);
                }
            }
            Err(error) => {
                // Counted and logged every time; bounded, because a query that cannot succeed
                // (a table that requires a partition filter, a job that never completes) would
                // otherwise hold the partition in recovery forever with readiness green.
                let attempts = attempt + 1;
                out.push(Action::Count(Outcome::ResolveFailed {
                    tp: tp.clone(),
                    attempts,
                    error: error.clone(),
                }));
                if attempts < self.config.resolve_attempts {
                    out.push(Action::ResolveVisible {
                        tp: tp.clone(),
                        attempt: attempts,
                    });
                    state.phase = Phase::Resolving {
                        attempt: attempts,
                        why,
                    };
                    self.partitions.insert(tp, state);
                    return;
                }
                match (self.config.resolve_fallback, why) {
                    // Without a checkpoint there is no `f` to rewind to: only failing is safe.
                    (ResolveFallback::Fail, _) | (_, Resolving::MissingCheckpoint) => {
                        let reason = FailReason::ResolveFailed { attempts, error };
                        self.fail(tp, state, reason, out);
                    }
                    (ResolveFallback::Rewind, Resolving::LostStream { stream, below }) => {
                        out.push(Action::Count(Outcome::Rewound {
                            tp: tp.clone(),
                            stream,
                            from: state.visible,
                            to: below,
                        }));
                        let from = state.visible;
                        self.start_incarnation(tp, state, from, out);
                    }
                }
            }
        }
    }

    /// A new incarnation appends records from `from` to a stream of its own. Everything below
    /// `from` is visible (or counted lost), so `f := from`.
    pub(super) fn start_incarnation(
        &mut self,
        tp: TopicPartition,
        mut state: PartitionState,
        mut from: NextOffset,
        out: &mut Vec<Action>,
    ) {
        if from < state.low {
            // Retention deleted records we never made visible: never a silent reset.
            match self.config.on_out_of_range {
                OutOfRangePolicy::Fail => {
                    let reason = FailReason::OutOfRange {
                        from,
                        low: state.low,
                    };
                    return self.fail(tp, state, reason, out);
                }
                OutOfRangePolicy::Earliest => {
                    out.push(Action::Count(Outcome::RecordsLost {
                        tp: tp.clone(),
                        from,
                        to: state.low,
                    }));
                    from = state.low;
                }
            }
        }
        self.next_incarnation += 1;
        let incarnation = Incarnation(self.next_incarnation);
        // Below `from` everything is visible, counted lost, or skipped by a named start policy;
        // a rewind starts at f itself.
        state.visible = from;
        state.progress = Acknowledged::incarnation_start(incarnation, from);
        state.committed_bytes = 0;
        state.pending = None;
        state.flush_in_flight = false;
        state.commit_failures = 0;
        state.paused = false;
        state.lost_ranges.clear();
        state.phase = Phase::Running;
        out.push(Action::StartIncarnation {
            tp: tp.clone(),
            incarnation,
            from,
        });
        self.partitions.insert(tp, state);
    }

    pub(super) fn on_out_of_range(
        &mut self,
        tp: TopicPartition,
        incarnation: Incarnation,
        position: NextOffset,
        low: NextOffset,
        out: &mut Vec<Action>,
    ) {
        let Some(mut state) = self.partitions.remove(&tp) else {
            return;
        };
        let current = state.phase == Phase::Running
            && state.progress.incarnation() == incarnation
            && position < low;
        if !current {
            self.partitions.insert(tp, state);
            return;
        }
        state.low = state.low.max(low);
        match self.config.on_out_of_range {
            OutOfRangePolicy::Fail => {
                out.push(Action::StopWriter { tp: tp.clone() });
                self.fail(
                    tp,
                    state,
                    FailReason::OutOfRange {
                        from: position,
                        low,
                    },
                    out,
                );
            }
            OutOfRangePolicy::Earliest => {
                // The records in [position, low) are gone from Kafka and were never appended by
                // this incarnation: counted, never silent. The stream and its rows stay; f's
                // meaning ("visible below it") extends to "visible or counted lost". K jumps
                // over the gap once every record delivered before it is acknowledged: with the
                // first acknowledgement after it, or at once when nothing is in flight and no
                // record follows (docs/operations.md, "Records deleted before they were
                // written"). Never earlier: a commit past a record still in flight would lose
                // it if the append then failed.
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
                state.lost_ranges.push((position, low));
                state.pass_lost_ranges();
                self.partitions.insert(tp, state);
            }
        }
    }

    pub(super) fn fail(
        &mut self,
        tp: TopicPartition,
        mut state: PartitionState,
        reason: FailReason,
        out: &mut Vec<Action>,
    ) {
        state.phase = Phase::Failed;
        // An isolated partition stops committing, but its last commit landed: that checkpoint's
        // flush keeps being retried, or its rows would wait for the next owner (invariant 2).
        if !matches!(reason, FailReason::Isolated { .. }) {
            state.pending = None;
        }
        out.push(Action::FailPartition {
            tp: tp.clone(),
            reason,
        });
        self.partitions.insert(tp, state);
    }
}

/// What a committed offset's metadata says for recovery.
enum Committed {
    /// No exactly-once checkpoint (an operator's reset, an at-least-once commit of this group):
    /// the partition starts at the committed offset, counted as this case.
    Position(StartCase),
    /// An exactly-once checkpoint: what it committed may need a re-flush.
    Checkpoint(Checkpoint),
}
