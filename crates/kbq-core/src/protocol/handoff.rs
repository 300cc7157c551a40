//! A stream lost under a running writer, zombies, the handoff on revoke or loss, and shutdown.

use super::*;

impl CheckpointProtocol {
    // ---------------------------------------------------------------------------------------
    // A stream lost under a running writer, and zombies.

    pub(super) fn on_stream_lost(
        &mut self,
        tp: TopicPartition,
        stream: StreamId,
        out: &mut Vec<Action>,
    ) {
        let Some(mut state) = self.partitions.remove(&tp) else {
            return;
        };
        // An incarnation that has no acknowledged row yet knows no stream: a stream lost under
        // it is its own first one (the shell reports only the current incarnation's writer).
        // Restarting it costs nothing, it starts again where it started.
        let ours = state.progress.stream() == Some(&stream)
            || state.progress.stream().is_none()
            || state.pending.as_ref().is_some_and(|f| f.stream == stream);
        if state.phase != Phase::Running || !ours {
            self.partitions.insert(tp, state);
            return;
        }
        out.push(Action::Count(Outcome::StreamRestarted { tp: tp.clone() }));
        if let Some(cycle) = self.cycle.as_mut() {
            cycle.flushing.remove(&tp);
        }
        state.pending = None;
        state.flush_in_flight = false;
        // Records below f are visible. If the committed checkpoint names this stream with rows
        // in doubt, the writer's word "lost" is not final: a stream whose offsets merely
        // disagree with ours (an offset conflict after a lost answer) is alive, and flushing the
        // committed (s, r) makes [f, K) visible exactly. So the partition recovers from its
        // checkpoint as a new owner would: re-flush, then start at K; only a re-flush that finds
        // the stream gone (and a re-read that confirms the checkpoint) reaches the lost-stream
        // policy. Without doubt, the restart keeps f as this process knows it (it may be ahead
        // of the committed f), which avoids re-delivering a window we saw flushed.
        let doubt = state
            .committed
            .clone()
            .filter(|c| c.stream.as_ref() == Some(&stream) && c.needs_flush())
            .filter(|c| state.visible < c.next);
        match doubt {
            Some(checkpoint) => {
                let through = checkpoint.flush_to.expect("a checkpoint in doubt has r");
                out.push(Action::FlushRows {
                    tp: tp.clone(),
                    stream,
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
            None => {
                let from = state.visible;
                self.start_incarnation(tp, state, from, out);
            }
        }
        self.finish_cycle_if_done(out);
    }

    pub(super) fn become_zombie(&mut self, tp: TopicPartition, out: &mut Vec<Action>) {
        let Some(p) = self.partitions.get_mut(&tp) else {
            return;
        };
        if !matches!(p.phase, Phase::Running | Phase::Stopped) {
            return;
        }
        // Another incarnation finalized our stream, so it owns the partition now (or an
        // operator did it). Creating a stream or committing would fight the owner: stop and
        // wait for the group to say what we own.
        p.phase = Phase::Zombie;
        p.pending = None;
        p.flush_in_flight = false;
        out.push(Action::StopWriter { tp: tp.clone() });
        out.push(Action::Count(Outcome::ZombieStopped { tp: tp.clone() }));
        if let Some(cycle) = self.cycle.as_mut() {
            cycle.flushing.remove(&tp);
        }
    }

    // ---------------------------------------------------------------------------------------
    // Handoff on revoke or loss, and shutdown.

    pub(super) fn on_revoke(&mut self, tp: TopicPartition, lost: bool, out: &mut Vec<Action>) {
        let Some(p) = self.partitions.get_mut(&tp) else {
            out.push(Action::Release { tp });
            return;
        };
        if let Some(cycle) = self.cycle.as_mut() {
            // A flush already sent may still finish (idempotent, and justified by a successful
            // commit); nothing new is sent, and the cycle does not wait for it.
            cycle.flushing.remove(&tp);
        }
        p.pending = None;
        let writing = matches!(
            p.phase,
            Phase::Running | Phase::Draining { .. } | Phase::Stopped
        );
        if lost {
            // Our commit may be refused, or worse accepted on an empty group after the group
            // moved on: make none. The next owner recovers from the last commit that landed.
            if writing {
                out.push(Action::StopWriter { tp: tp.clone() });
            }
            self.release(tp, out);
        } else if p.phase == Phase::Running || p.phase == (Phase::Draining { handoff: false }) {
            p.phase = Phase::Draining { handoff: true };
            out.push(Action::StopWriter { tp });
        } else if p.phase == Phase::Stopped {
            p.phase = Phase::Draining { handoff: true };
            self.on_writer_stopped(tp, out);
        } else {
            self.release(tp, out);
        }
        self.finish_cycle_if_done(out);
    }

    pub(super) fn on_writer_stopped(&mut self, tp: TopicPartition, out: &mut Vec<Action>) {
        let Some(p) = self.partitions.get_mut(&tp) else {
            return;
        };
        match p.phase {
            Phase::Draining { handoff: true } => {
                // The handoff: one commit of what is acknowledged, under the commit lock, and
                // nothing after it. No flush and no finalize: the next owner re-flushes, and
                // finalizes our stream after its own first commit.
                let c = Committable::seal(&p.progress, p.visible);
                // Without the table's marker no commit is made (see `start_cycle`); nothing of
                // ours was committed for it, so nothing is visible, and the next owner starts
                // where this incarnation did.
                if p.committed.as_ref() == Some(c.checkpoint()) || !self.marked.contains(&p.table) {
                    out.push(Action::Count(Outcome::HandedOff {
                        tp: tp.clone(),
                        committed: false,
                    }));
                    return self.release(tp, out);
                }
                self.next_commit += 1;
                let commit = CommitId(self.next_commit);
                p.phase = Phase::HandoffCommitting { commit };
                let entry = self.entry(&tp, &c);
                out.push(Action::CommitOffsets {
                    commit,
                    entries: vec![entry],
                });
            }
            Phase::Draining { handoff: false } => {
                p.phase = Phase::Stopped;
                let draining = self
                    .partitions
                    .values()
                    .any(|p| matches!(p.phase, Phase::Draining { handoff: false }));
                if !draining {
                    self.start_cycle(out);
                }
            }
            _ => {}
        }
    }

    pub(super) fn release(&mut self, tp: TopicPartition, out: &mut Vec<Action>) {
        if let Some(p) = self.partitions.remove(&tp)
            && let Some(committed) = p.committed
        {
            self.remembered.insert(
                tp.clone(),
                Remembered {
                    committed,
                    visible: p.visible,
                },
            );
        }
        if let Some(cycle) = self.cycle.as_mut() {
            cycle.flushing.remove(&tp);
        }
        out.push(Action::Release { tp });
    }

    pub(super) fn on_shutdown(&mut self, out: &mut Vec<Action>) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        let tps: Vec<_> = self.partitions.keys().cloned().collect();
        for tp in tps {
            let p = self.partitions.get_mut(&tp).expect("listed");
            if p.phase == Phase::Running {
                p.phase = Phase::Draining { handoff: false };
                out.push(Action::StopWriter { tp });
            } else if !matches!(
                p.phase,
                Phase::Draining { .. } | Phase::HandoffCommitting { .. }
            ) {
                // Recovering, zombie or failed: the durable checkpoint stands for the next owner.
                self.release(tp, out);
            }
        }
        if self.partitions.is_empty() {
            self.finish_shutdown(out);
        } else if !self
            .partitions
            .values()
            .any(|p| matches!(p.phase, Phase::Draining { .. }))
        {
            self.start_cycle(out);
        }
    }

    /// Every stopped partition's latest commit is its final state with f == K.
    pub(super) fn shutdown_rested(&self) -> bool {
        self.partitions.values().all(|p| match p.phase {
            Phase::Stopped => {
                let c = Committable::seal(&p.progress, p.visible);
                p.committed.as_ref() == Some(c.checkpoint()) && !c.checkpoint().needs_flush()
            }
            Phase::Failed => true,
            _ => false,
        })
    }

    pub(super) fn finish_shutdown(&mut self, out: &mut Vec<Action>) {
        let rested = self.shutdown_rested();
        let tps: Vec<_> = self.partitions.keys().cloned().collect();
        for tp in tps {
            let p = self.partitions.get_mut(&tp).expect("listed");
            if rested && p.phase == Phase::Stopped {
                // The latest commit says f == K, so no checkpoint needs any of these streams
                // (invariant 3); finalizing spares the next owner a recovery.
                let mut streams = if p.own_commit_landed {
                    std::mem::take(&mut p.superseded)
                } else {
                    Vec::new()
                };
                streams.extend(p.progress.stream().cloned());
                for stream in streams {
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
            self.release(tp, out);
        }
        self.cycle = None;
        self.done = true;
        out.push(Action::ShutdownComplete);
    }
}
