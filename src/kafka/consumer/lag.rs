//! The lag: what the consumer thread knows of each owned partition, and the thread that reads the
//! high watermarks for `kbq_consumer_lag_records`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use tokio::sync::mpsc;

use crate::kafka::committed;
use crate::kafka::reconnect::{BrokerWatch, WatchedContext};
use crate::ops::metrics::{Metrics, PartitionLabels};
use kbq_core::model::TopicPartition;
use kbq_core::offsets::NextOffset;

use super::commands::{ConsumerEvent, ConsumerSettings, PartitionLoad};

/// Per owned partition, what the consumer thread knows for the [`WatermarkReader`].
#[derive(Default)]
pub(super) struct LagBook {
    /// Shared by the consumer thread and the watermark reader. Each holder makes one map
    /// operation on plain numbers, which a panic cannot leave half done: a poisoned lock is
    /// taken as is, so one thread's panic does not take the other thread down too.
    pub(super) book: Mutex<HashMap<TopicPartition, Standing>>,
}

#[derive(Clone, Copy, Default)]
pub(super) struct Standing {
    /// The offset the lag counts from: the committed offset (read at assignment, written by
    /// our commits), else where the partition started.
    pub(super) base: Option<NextOffset>,
    pub(super) fetched: Option<NextOffset>,
    pub(super) dispatched: Option<NextOffset>,
}

impl LagBook {
    pub(super) fn with(&self, tp: &TopicPartition, f: impl FnOnce(&mut Standing)) {
        f(self
            .book
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(tp.clone())
            .or_default());
    }

    pub(super) fn set(&self, tp: &TopicPartition, offset: NextOffset) {
        self.with(tp, |s| s.base = Some(offset));
    }

    pub(super) fn set_if_absent(&self, tp: &TopicPartition, offset: NextOffset) {
        self.with(tp, |s| {
            s.base.get_or_insert(offset);
        });
    }

    /// Forgets `tp` and its gauge, under the lock the reader sets gauges with: a revoked
    /// partition keeps no series.
    pub(super) fn remove(&self, tp: &TopicPartition, metrics: Option<&Metrics>) {
        let mut book = self
            .book
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        book.remove(tp);
        if let Some(metrics) = metrics {
            metrics.consumer_lag.remove(&lag_labels(tp));
        }
    }
}

/// A thread that reads the high watermark of every owned partition every statistics interval,
/// with a client of its own: librdkafka's statistics carry the high watermark of the last fetch
/// only, so a paused or stopped partition (a stuck writer) showed the lag it had when it stopped,
/// however many records arrived after. Blocking reads here never hold the consumer thread.
pub(super) struct WatermarkReader {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) thread: JoinHandle<()>,
}

impl WatermarkReader {
    pub(super) fn spawn(
        settings: &ConsumerSettings,
        every: Duration,
        lag: Arc<LagBook>,
        metrics: Arc<Metrics>,
        events: mpsc::UnboundedSender<ConsumerEvent>,
    ) -> Result<WatermarkReader, KafkaError> {
        let mut config = ClientConfig::new();
        for (k, v) in &settings.properties {
            // It never joins the group; a static member id must stay the group member's.
            if k != "group.instance.id" {
                config.set(k, v);
            }
        }
        // Its statistics only feed its broker watch: it can lose every broker as the group
        // consumer can (see `kafka::reconnect`).
        config.set("statistics.interval.ms", every.as_millis().to_string());
        let brokers = Arc::new(BrokerWatch::new("watermarks", &config));
        let context = WatchedContext {
            brokers: brokers.clone(),
        };
        let client: BaseConsumer<WatchedContext> = config
            .create_with_context(context)
            .map_err(crate::kafka::redact::redacted)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let timeout = settings.request_timeout;
        let thread = std::thread::Builder::new()
            .name("kafka-watermarks".into())
            .spawn(move || {
                let mut next = Instant::now() + every;
                while !stopped.load(Ordering::SeqCst) {
                    // Serves the statistics (the client never subscribes: no message comes),
                    // then, on this thread that may call into librdkafka, the broker watch.
                    let _ = client.poll(Duration::from_millis(50));
                    brokers.find_brokers_again(client.client(), Instant::now());
                    if Instant::now() < next {
                        continue;
                    }
                    next = Instant::now() + every;
                    let partitions: Vec<TopicPartition> = lag
                        .book
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .keys()
                        .cloned()
                        .collect();
                    if partitions.is_empty() {
                        continue;
                    }
                    let highs = committed::high_watermarks(&client, &partitions, timeout);
                    let mut loads = Vec::with_capacity(highs.len());
                    {
                        let book = lag
                            .book
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        for (tp, high) in highs {
                            let (Ok(high), Some(standing)) = (high, book.get(&tp)) else {
                                continue;
                            };
                            if let Some(base) = standing.base {
                                metrics
                                    .consumer_lag
                                    .get_or_create(&lag_labels(&tp))
                                    .set(i64::try_from(base.distance_to(high)).unwrap_or(i64::MAX));
                            }
                            loads.push(PartitionLoad {
                                tp,
                                high,
                                fetched: standing.fetched,
                                dispatched: standing.dispatched,
                            });
                        }
                    }
                    if events.send(ConsumerEvent::Loads(loads)).is_err() {
                        break;
                    }
                }
            })
            .expect("spawning the watermark thread");
        Ok(WatermarkReader { stop, thread })
    }

    /// Asks the thread to end; it is not waited for: a read in flight may take up to the
    /// request timeout, and nothing depends on its end.
    pub(super) fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        drop(self.thread);
    }
}

pub(super) fn lag_labels(tp: &TopicPartition) -> PartitionLabels {
    PartitionLabels {
        topic: tp.topic.clone(),
        partition: tp.partition,
    }
}
