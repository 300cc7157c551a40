//! Seeks: to the position recovery decided, retried, confirmed, and failed closed.

use std::time::Instant;

use rdkafka::Offset;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::kafka::committed;
use kbq_core::model::TopicPartition;
use kbq_core::offsets::NextOffset;

use super::backpressure::Outlet;
use super::commands::{ConsumerEvent, ConsumerSettings};
use super::rebalance::SinkContext;
use super::{PendingSeek, SEEK_ATTEMPTS, Shared};

impl Shared {
    /// Seeks `tp` to `to` (attempt `attempt`) with the partition paused; once the seek is made
    /// and confirmed, the partition gets `outlet` and resumes. A failed seek is retried after a
    /// backoff, then fails the partition closed: resuming at librdkafka's old position would
    /// skip the records in between, and the next commit would jump over them.
    pub(super) fn seek_and_open(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        tp: TopicPartition,
        to: NextOffset,
        attempt: u32,
        outlet: Option<Outlet>,
    ) {
        self.flow.pause(consumer, &tp);
        match committed::seek(
            consumer,
            &tp,
            to,
            settings.request_timeout,
            &settings.faults,
        ) {
            Ok(()) => {
                self.positions.insert(tp.clone(), to);
                // The lag of a partition without a committed offset counts from its start.
                self.lag.set_if_absent(&tp, to);
                self.lag.with(&tp, |s| s.dispatched = None);
                self.flow.open(consumer, &tp, outlet);
            }
            Err(reason) if attempt + 1 < SEEK_ATTEMPTS => {
                let attempt = attempt + 1;
                let wait = crate::backoff::delay(attempt);
                tracing::warn!(partition = %tp, to = to.0, attempt, reason = %reason, retry_in_ms = wait.as_millis() as u64, "seek failed, retrying");
                self.seeking.insert(
                    tp,
                    PendingSeek {
                        to,
                        attempt,
                        due: Instant::now() + wait,
                        outlet,
                    },
                );
            }
            Err(reason) => {
                tracing::error!(partition = %tp, to = to.0, attempts = SEEK_ATTEMPTS, reason = %reason, "seek failed for good: partition stopped");
                let _ = self.events.send(ConsumerEvent::SeekFailed { tp, reason });
            }
        }
    }

    /// Retries the seeks that are due.
    pub(super) fn retry_seeks(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
    ) {
        if self.seeking.is_empty() {
            return;
        }
        let now = Instant::now();
        let due: Vec<TopicPartition> = (self.seeking.iter())
            .filter(|(_, p)| p.due <= now)
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in due {
            let p = self.seeking.remove(&tp).expect("listed");
            self.seek_and_open(consumer, settings, tp, p.to, p.attempt, p.outlet);
        }
    }

    /// librdkafka reported that a partition's fetch position is out of range, without saying
    /// which partition (rust-rdkafka drops it): every started partition whose position is below
    /// its log start is reported. Until the protocol answers (fail closed, or seek to the log
    /// start) librdkafka fetches nothing for it.
    pub(super) fn out_of_range(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
    ) {
        let started: Vec<TopicPartition> = self.flow.started().cloned().collect();
        if started.is_empty() {
            return;
        }
        let now = consumer.position().ok();
        let lows = committed::watermarks(
            consumer,
            &started,
            settings.request_timeout,
            &settings.faults,
        );
        let mut found = false;
        for tp in started {
            let at = now
                .as_ref()
                .and_then(|list| list.find_partition(&tp.topic, tp.partition))
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(NextOffset(o)),
                    _ => None,
                })
                .or_else(|| self.positions.get(&tp).copied());
            let (Some(position), Some(Ok((low, _)))) = (at, lows.get(&tp)) else {
                continue;
            };
            if position < *low {
                found = true;
                tracing::error!(partition = %tp, position = position.0, low = low.0, "fetch position below the log start: records were deleted before they were written");
                let _ = self.events.send(ConsumerEvent::OffsetOutOfRange {
                    tp,
                    position,
                    low: *low,
                });
            }
        }
        if !found {
            tracing::warn!(
                "kafka reported an offset out of range, but no started partition is below its log start"
            );
        }
    }
}
