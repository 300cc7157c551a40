//! The dead-letter producer (docs/architecture.md, invariant 6). A bad record goes to the
//! dead-letter topic with its original key, value and headers plus headers saying why and where it
//! came from; the writer counts it as handled only after the broker acknowledged it, so a
//! checkpoint never covers a record that is neither in BigQuery nor in the dead-letter topic. The
//! topic itself is at-least-once (a crash or rewind can repeat a record): the source headers let
//! consumers dedupe.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};

use super::consumer::Record;
use super::reconnect::{BrokerFinder, BrokerWatch, WatchedContext, with_statistics};
pub use kbq_core::bad_record::BadRecord;

/// Header names written on every dead-lettered record.
pub mod headers {
    pub const REASON: &str = "kbq.error.reason";
    pub const CLASS: &str = "kbq.error.class";
    pub const SOURCE_TOPIC: &str = "kbq.source.topic";
    pub const SOURCE_PARTITION: &str = "kbq.source.partition";
    pub const SOURCE_OFFSET: &str = "kbq.source.offset";
    pub const SOURCE_TIMESTAMP: &str = "kbq.source.timestamp";
}

#[derive(Clone)]
pub struct DeadLetterProducer {
    producer: Producer,
    topic: String,
}

#[derive(Clone)]
enum Producer {
    /// A librdkafka producer, and how long a send waits for the broker's acknowledgement (the
    /// pipeline passes `defaults::DEAD_LETTER_SEND_TIMEOUT`).
    Kafka {
        producer: FutureProducer<WatchedContext>,
        timeout: Duration,
        /// Hands the bootstrap servers to the producer again when it lost every broker (see
        /// `kafka::reconnect`); shared by the clones, its thread ends with the last one.
        _finder: Arc<BrokerFinder>,
    },
    /// The deterministic simulation's dead-letter topic (see `docs/simulation.md`).
    Custom(Arc<dyn DeadLetterSink>),
}

/// A boxed future of the dead-letter seam.
pub type SinkFuture<'a> = Pin<Box<dyn Future<Output = Result<(), KafkaError>> + Send + 'a>>;

/// Where dead letters go instead of a Kafka producer: the seam the simulation answers.
pub trait DeadLetterSink: Send + Sync {
    /// Produces one dead letter for `record` of `source_topic`/`source_partition`; `Ok` once
    /// it is durable.
    fn send<'a>(
        &'a self,
        source_topic: &'a str,
        source_partition: i32,
        record: &'a Record,
        bad: &'a BadRecord,
    ) -> SinkFuture<'a>;
}

impl DeadLetterProducer {
    /// `properties`: librdkafka producer settings (bootstrap, security); acks and idempotence
    /// are forced so an acknowledged record is durable and not duplicated by producer retries.
    pub fn new(
        properties: &BTreeMap<String, String>,
        topic: &str,
        timeout: Duration,
    ) -> Result<Self, KafkaError> {
        let mut config = ClientConfig::new();
        for (k, v) in properties {
            config.set(k, v);
        }
        config.set("acks", "all");
        config.set("enable.idempotence", "true");
        config.set("message.timeout.ms", timeout.as_millis().to_string());
        // A producer that lost every broker would time out every dead letter, and a bad record
        // would then fail its partition: its statistics feed a broker watch (`kafka::reconnect`).
        with_statistics(&mut config);
        let brokers = Arc::new(BrokerWatch::new("dead-letter producer", &config));
        let context = WatchedContext {
            brokers: brokers.clone(),
        };
        let producer: FutureProducer<WatchedContext> = config.create_with_context(context)?;
        let held = producer.clone();
        let finder =
            BrokerFinder::spawn("kafka-dead-letter-brokers", brokers, move |watch, now| {
                watch.find_brokers_again(held.client(), now);
            })
            .map_err(|e| KafkaError::ClientCreation(format!("broker finder thread: {e}")))?;
        Ok(DeadLetterProducer {
            producer: Producer::Kafka {
                producer,
                timeout,
                _finder: Arc::new(finder),
            },
            topic: topic.to_string(),
        })
    }

    /// A producer whose every send goes to `sink`.
    pub fn with_sink(sink: Arc<dyn DeadLetterSink>, topic: &str) -> Self {
        DeadLetterProducer {
            producer: Producer::Custom(sink),
            topic: topic.to_string(),
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Produces the record and waits for the broker's acknowledgement.
    pub async fn send(
        &self,
        source_topic: &str,
        source_partition: i32,
        record: &Record,
        bad: &BadRecord,
    ) -> Result<(), KafkaError> {
        let (producer, timeout) = match &self.producer {
            Producer::Kafka {
                producer, timeout, ..
            } => (producer, *timeout),
            Producer::Custom(sink) => {
                return sink.send(source_topic, source_partition, record, bad).await;
            }
        };
        let partition = source_partition.to_string();
        let offset = record.offset.0.to_string();
        let timestamp = record.timestamp_ms.map(|t| t.to_string());
        let mut hdrs = OwnedHeaders::new_with_capacity(record.headers.len() + 6);
        for (k, v) in &record.headers {
            hdrs = hdrs.insert(Header {
                key: k,
                value: Some(v.as_ref()),
            });
        }
        hdrs = hdrs
            .insert(Header {
                key: headers::REASON,
                value: Some(bad.reason.as_bytes()),
            })
            .insert(Header {
                key: headers::CLASS,
                value: Some(bad.class.as_bytes()),
            })
            .insert(Header {
                key: headers::SOURCE_TOPIC,
                value: Some(source_topic.as_bytes()),
            })
            .insert(Header {
                key: headers::SOURCE_PARTITION,
                value: Some(partition.as_bytes()),
            })
            .insert(Header {
                key: headers::SOURCE_OFFSET,
                value: Some(offset.as_bytes()),
            });
        if let Some(ts) = &timestamp {
            hdrs = hdrs.insert(Header {
                key: headers::SOURCE_TIMESTAMP,
                value: Some(ts.as_bytes()),
            });
        }
        let mut out: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.topic).headers(hdrs);
        if let Some(key) = record.key() {
            out = out.key(key);
        }
        if let Some(value) = record.value() {
            out = out.payload(value);
        }
        if let Some(ts) = record.timestamp_ms {
            out = out.timestamp(ts);
        }
        producer
            .send(out, timeout)
            .await
            .map(|_| ())
            .map_err(|(e, _)| e)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn defaults_interval() -> Duration {
        crate::config::defaults::KAFKA_STATISTICS_INTERVAL
    }

    #[test]
    fn the_dead_letter_producers_statistics_reach_its_broker_watch() {
        // Nothing listens on loopback port 1: no broker is ever up. The statistics are not
        // asked for: the producer has them anyway, at the default 5 s.
        let properties =
            BTreeMap::from([("bootstrap.servers".to_string(), "127.0.0.1:1".to_string())]);
        let dead_letters =
            DeadLetterProducer::new(&properties, "dead", Duration::from_secs(1)).unwrap();
        let Producer::Kafka {
            _finder: finder, ..
        } = &dead_letters.producer
        else {
            panic!("a librdkafka producer");
        };
        let deadline = Instant::now() + defaults_interval() * 3;
        while !finder.watch().brokerless() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            finder.watch().brokerless(),
            "the statistics said no broker is up"
        );
    }
}
