//! The machine's actions, executed: commands to the consumer thread, writers started and
//! stopped, I/O started whose answers come back through the inbox. An action whose result is a
//! follow-up event appends that event to the inbox; none is fed back to the machine from here.

use std::time::Duration;

use tokio::time::Instant;

use crate::kafka::consumer::ConsumerCommand;
use crate::ops::metrics::{RecoveryOutcome, TableLabel};
use kbq_core::offsets::{Incarnation, NextOffset, RowOffset, StreamId};
use kbq_core::protocol::{Action, Event, FailReason, FlushPurpose, TopicPartition};

use super::io::{spawn_flush, spawn_label, spawn_partition_writer, spawn_resolve};
use super::{Coordinator, Input};

impl Coordinator {
    pub(super) fn execute(&mut self, action: Action) {
        match action {
            Action::FlushRows {
                tp,
                stream,
                through,
                purpose,
                attempt,
            } => self.flush(tp, stream, through, purpose, attempt),
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
            Action::FinalizeStream { tp, stream } => self.finalize(tp, stream),
            Action::StopWriter { tp } => self.stop_writer(tp),
            Action::Pause { tp } => {
                self.consumer.send(ConsumerCommand::Pause { tp });
            }
            Action::Resume { tp } => {
                self.consumer.send(ConsumerCommand::Resume { tp });
            }
            Action::Release { tp } => self.release(tp),
            Action::FailPartition { tp, reason } => self.fail_partition(tp, reason),
            Action::LabelTable { table, attempt } => {
                let router = &self.settings.router;
                spawn_label(&mut self.io, router, &self.rest, table, attempt);
            }
            Action::Count(outcome) => self.count(outcome),
            Action::ShutdownComplete => {
                tracing::info!("final checkpoint done: leaving the group");
                self.consumer.send(ConsumerCommand::Shutdown);
            }
        }
    }

    fn flush(
        &mut self,
        tp: TopicPartition,
        stream: StreamId,
        through: RowOffset,
        purpose: FlushPurpose,
        mut attempt: u32,
    ) {
        if purpose == FlushPurpose::Cycle {
            self.cycle_worked = true;
            if let Some(sent) = self.shutdown_flushes.as_mut() {
                let n = sent.entry(tp.clone()).or_insert(0);
                attempt = attempt.max(*n);
                *n += 1;
            }
        }
        let route = self.route(&tp);
        let shared = &self.writer_shared;
        spawn_flush(
            &mut self.io,
            shared,
            &route,
            tp,
            stream,
            through,
            purpose,
            attempt,
        );
    }

    fn start_writer(&mut self, tp: TopicPartition, incarnation: Incarnation, from: NextOffset) {
        if let Some(mut old) = self.writers.remove(&tp) {
            old.stop(Duration::ZERO);
        }
        self.draining.remove(&tp);
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

    /// FinalizeWriteStream in a task, answered as [`Event::FinalizeResult`].
    fn finalize(&mut self, tp: TopicPartition, stream: StreamId) {
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

    /// Drains the writer; whatever ends it answers with [`Event::WriterStopped`]. Without a
    /// writer (recovering, failed) nothing is in flight: the answer is queued at once.
    fn stop_writer(&mut self, tp: TopicPartition) {
        self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
        match self.writers.get_mut(&tp) {
            Some(writer) => {
                writer.stop(self.settings.writer_drain);
                self.draining.insert(tp);
            }
            None => self
                .inbox
                .push_back(Input::Machine(Event::WriterStopped { tp })),
        }
    }

    fn release(&mut self, tp: TopicPartition) {
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

    fn fail_partition(&mut self, tp: TopicPartition, reason: FailReason) {
        tracing::error!(partition = %tp, reason = %reason, "partition failed closed");
        if let Some(mut writer) = self.writers.remove(&tp) {
            writer.stop(Duration::ZERO);
        }
        if self.draining.remove(&tp) {
            // A writer asked to drain is gone: its acknowledged prefix is final.
            let stopped = Event::WriterStopped { tp: tp.clone() };
            self.inbox.push_back(Input::Machine(stopped));
        }
        self.consumer.send(ConsumerCommand::Stop { tp: tp.clone() });
        self.metrics.recovery_action(RecoveryOutcome::Failed);
        self.mark_failed(tp, reason.to_string());
    }
}
