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
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};

use super::consumer::Record;
use super::reconnect::{BrokerFinder, BrokerWatch, WatchedContext, with_statistics};
use kbq_core::bad_record::BadRecord;

/// Header names written on every dead-lettered record.
pub mod headers {
    pub const REASON: &str = "kbq.error.reason";
    pub const CLASS: &str = "kbq.error.class";
    pub const SOURCE_TOPIC: &str = "kbq.source.topic";
    pub const SOURCE_PARTITION: &str = "kbq.source.partition";
    pub const SOURCE_OFFSET: &str = "kbq.source.offset";
    pub const SOURCE_TIMESTAMP: &str = "kbq.source.timestamp";
    /// On a dead letter cut to fit the producer's `message.max.bytes`: what was cut, and why.
    pub const TRUNCATED: &str = "kbq.truncated";
    /// On a cut dead letter: the record's value and key sizes before the cut, in bytes.
    pub const ORIGINAL_VALUE_SIZE: &str = "kbq.original.value.size";
    pub const ORIGINAL_KEY_SIZE: &str = "kbq.original.key.size";
}

#[derive(Clone)]
pub struct DeadLetterProducer {
    producer: Producer,
    topic: String,
    /// The producer's `message.max.bytes`: a dead letter larger is cut to fit.
    max_message_bytes: usize,
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
        Self::sized(properties, topic, timeout, None)
    }

    /// As [`Self::new`], no larger than `topic_limit` (the topic's own `max.message.bytes`,
    /// see [`topic_max_message_bytes`]) when it is known.
    pub fn sized(
        properties: &BTreeMap<String, String>,
        topic: &str,
        timeout: Duration,
        topic_limit: Option<usize>,
    ) -> Result<Self, KafkaError> {
        let mut config = ClientConfig::new();
        for (k, v) in properties {
            config.set(k, v);
        }
        // Sized from the config: the operator's `message.max.bytes`, else the default (which a
        // broker's default topic limit admits), lowered to the topic's own limit. `validate`
        // checks a configured value is a number librdkafka takes; librdkafka takes no less
        // than 1000.
        let configured = (properties.get("message.max.bytes"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(crate::config::defaults::DEAD_LETTER_MAX_MESSAGE_BYTES);
        let max_message_bytes = topic_limit.map_or(configured, |t| configured.min(t).max(1000));
        config.set("message.max.bytes", max_message_bytes.to_string());
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
        let producer: FutureProducer<WatchedContext> = config
            .create_with_context(context)
            .map_err(crate::kafka::redact::redacted)?;
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
            max_message_bytes,
        })
    }

    /// A producer whose every send goes to `sink`.
    pub fn with_sink(sink: Arc<dyn DeadLetterSink>, topic: &str) -> Self {
        DeadLetterProducer {
            producer: Producer::Custom(sink),
            topic: topic.to_string(),
            max_message_bytes: crate::config::defaults::DEAD_LETTER_MAX_MESSAGE_BYTES,
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Produces the record and waits for the broker's acknowledgement. A dead letter larger
    /// than the producer's `message.max.bytes` is sent cut to fit ([`Shape`]); one the broker
    /// still refuses as too large (the topic's `max.message.bytes` is lower) is sent again as
    /// its headers alone. An error [`is_permanent`] says no retry of this dead letter can cure.
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
        let source = Source {
            topic: source_topic,
            partition: source_partition,
            record,
            bad,
        };
        let shape = Shape::fit(record, &source.headers(), self.max_message_bytes);
        match self.produce(producer, timeout, &source, &shape).await {
            Err(e) if is_too_large(&e) && !shape.is_bare() => {
                tracing::warn!(topic = %self.topic, partition = source_partition, offset = record.offset.0, error = %e, "dead letter refused as too large: sending its headers alone");
                let bare = Shape::bare(record, self.max_message_bytes);
                self.produce(producer, timeout, &source, &bare).await
            }
            other => other,
        }
    }

    async fn produce(
        &self,
        producer: &FutureProducer<WatchedContext>,
        timeout: Duration,
        source: &Source<'_>,
        shape: &Shape,
    ) -> Result<(), KafkaError> {
        let record = source.record;
        let mut hdrs = OwnedHeaders::new_with_capacity(record.headers.len() + 10);
        if shape.original_headers {
            for h in &record.headers {
                super::headers::add(&mut hdrs, &h.key, h.value.as_deref());
            }
        }
        for (key, value) in source.headers() {
            super::headers::add(&mut hdrs, key.as_bytes(), Some(value.as_bytes()));
        }
        for (key, value) in shape.truncation_headers() {
            super::headers::add(&mut hdrs, key.as_bytes(), Some(value.as_bytes()));
        }
        let mut out: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.topic).headers(hdrs);
        if let Some(key) = record.key() {
            out = out.key(&key[..shape.key_len]);
        }
        if let Some(value) = record.value() {
            out = out.payload(&value[..shape.value_len]);
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

/// The `max.message.bytes` of `topic` as the broker applies it, read once at start with the
/// producer's connection settings; `None` when it cannot be read (no DescribeConfigs
/// permission, a topic not created yet, a broker away): the producer then keeps its own size,
/// and a dead letter the topic refuses as too large goes as its headers alone.
pub async fn topic_max_message_bytes(
    properties: &BTreeMap<String, String>,
    topic: &str,
    timeout: Duration,
) -> Option<usize> {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    let mut config = ClientConfig::new();
    for (k, v) in properties {
        config.set(k, v);
    }
    let read = async {
        let admin: AdminClient<DefaultClientContext> =
            config.create().map_err(|e| e.to_string())?;
        let options = AdminOptions::new().request_timeout(Some(timeout));
        let answer = admin
            .describe_configs([&ResourceSpecifier::Topic(topic)], &options)
            .await
            .map_err(|e| e.to_string())?;
        let resource = (answer.into_iter().next())
            .ok_or("no answer")?
            .map_err(|code| code.to_string())?;
        let value = (resource
            .get("max.message.bytes")
            .and_then(|e| e.value.clone()))
        .ok_or("no max.message.bytes in the answer")?;
        value.trim().parse::<usize>().map_err(|e| e.to_string())
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(limit)) => {
            tracing::info!(
                topic,
                max_message_bytes = limit,
                "dead-letter topic size read"
            );
            Some(limit)
        }
        Ok(Err(reason)) => {
            tracing::warn!(topic, reason = %reason, "cannot read the dead-letter topic's max.message.bytes: dead letters are sized by the producer's message.max.bytes alone");
            None
        }
        Err(_) => {
            tracing::warn!(
                topic,
                "reading the dead-letter topic's max.message.bytes timed out: dead letters are sized by the producer's message.max.bytes alone"
            );
            None
        }
    }
}

/// Where a dead letter came from and why, as the headers every dead letter carries.
struct Source<'a> {
    topic: &'a str,
    partition: i32,
    record: &'a Record,
    bad: &'a BadRecord,
}

impl Source<'_> {
    fn headers(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (headers::REASON, self.bad.reason.clone()),
            (headers::CLASS, self.bad.class.to_string()),
            (headers::SOURCE_TOPIC, self.topic.to_string()),
            (headers::SOURCE_PARTITION, self.partition.to_string()),
            (headers::SOURCE_OFFSET, self.record.offset.0.to_string()),
        ];
        if let Some(ts) = self.record.timestamp_ms {
            out.push((headers::SOURCE_TIMESTAMP, ts.to_string()));
        }
        out
    }
}

/// Bytes a record costs on the wire besides its key, value and header bytes, as counted
/// against `message.max.bytes`: the record batch's header (61 bytes), the record's own
/// varints, and each header's. Counted generously: a dead letter cut a little short is fine,
/// one refused is not.
const RECORD_FRAMING: usize = 512;
const HEADER_FRAMING: usize = 10;

/// How much of a record a dead letter carries: all of it, or, when that is larger than the
/// producer may send, its value (then its key, then its own headers) cut so it fits, with
/// headers saying what was cut. The reason and the source coordinates are always kept.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    key_len: usize,
    value_len: usize,
    original_headers: bool,
    /// The sizes of what was cut, when something was.
    cut: Option<Cut>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Cut {
    limit: usize,
    key_len: usize,
    value_len: usize,
    headers_dropped: usize,
}

/// The headers a cut dead letter carries in addition (their values are short decimal numbers
/// and a sentence, counted by [`TRUNCATION_HEADERS_BOUND`]).
const TRUNCATION_HEADERS_BOUND: usize = 512;

impl Shape {
    fn fit(record: &Record, ours: &[(&'static str, String)], limit: usize) -> Shape {
        let key = record.key().map_or(0, <[u8]>::len);
        let value = record.value().map_or(0, <[u8]>::len);
        let originals: usize = (record.headers.iter())
            .map(|h| h.key.len() + h.value.as_ref().map_or(0, |v| v.len()) + HEADER_FRAMING)
            .sum();
        let ours: usize = (ours.iter())
            .map(|(k, v)| k.len() + v.len() + HEADER_FRAMING)
            .sum();
        let fixed = RECORD_FRAMING + ours;
        if fixed + originals + key + value <= limit {
            return Shape {
                key_len: key,
                value_len: value,
                original_headers: true,
                cut: None,
            };
        }
        let room = limit.saturating_sub(fixed + TRUNCATION_HEADERS_BOUND);
        // The value first: the key and the producer's headers are what a reader of the
        // dead-letter topic finds the record by.
        let (key_len, value_len, original_headers) = if originals + key <= room {
            (key, room - originals - key, true)
        } else {
            let key_len = key.min(room);
            (key_len, value.min(room - key_len), false)
        };
        Shape {
            key_len,
            value_len: value_len.min(value),
            original_headers,
            cut: Some(Cut {
                limit,
                key_len: key,
                value_len: value,
                headers_dropped: if original_headers {
                    0
                } else {
                    record.headers.len()
                },
            }),
        }
    }

    /// The record's headers and nothing of its key, value or own headers.
    fn bare(record: &Record, limit: usize) -> Shape {
        Shape {
            key_len: 0,
            value_len: 0,
            original_headers: false,
            cut: Some(Cut {
                limit,
                key_len: record.key().map_or(0, <[u8]>::len),
                value_len: record.value().map_or(0, <[u8]>::len),
                headers_dropped: record.headers.len(),
            }),
        }
    }

    fn is_bare(&self) -> bool {
        self.key_len == 0 && self.value_len == 0 && !self.original_headers
    }

    fn truncation_headers(&self) -> Vec<(&'static str, String)> {
        let Some(cut) = &self.cut else {
            return Vec::new();
        };
        vec![
            (
                headers::TRUNCATED,
                format!(
                    "dead letter over the producer's message.max.bytes of {}: value cut to {} bytes, key to {}, {} record headers dropped",
                    cut.limit, self.value_len, self.key_len, cut.headers_dropped
                ),
            ),
            (headers::ORIGINAL_VALUE_SIZE, cut.value_len.to_string()),
            (headers::ORIGINAL_KEY_SIZE, cut.key_len.to_string()),
        ]
    }
}

/// A refusal because the dead letter is too large (locally, against `message.max.bytes`, or by
/// the broker, against the topic's `max.message.bytes`).
pub fn is_too_large(error: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode::*;
    matches!(
        error.rdkafka_error_code(),
        Some(MessageSizeTooLarge | MessageBatchTooLarge | InvalidMessageSize)
    )
}

/// Whether no retry of the same dead letter can succeed: the broker (or librdkafka) refused
/// the record itself, not the moment. A produce that times out, a broker that is away, an
/// authorization an operator can fix are retried; these are not.
pub fn is_permanent(error: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode::*;
    is_too_large(error)
        || matches!(
            error.rdkafka_error_code(),
            Some(InvalidRecord | InvalidMessage | BadMessage | UnsupportedForMessageFormat)
        )
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn defaults_interval() -> Duration {
        crate::config::defaults::KAFKA_STATISTICS_INTERVAL
    }

    fn record(key: usize, value: usize, headers: usize) -> Record {
        let headers = (0..headers)
            .map(|i| super::super::headers::Header {
                key: bytes::Bytes::from(format!("h{i}")),
                value: Some(bytes::Bytes::from(vec![b'v'; 100])),
            })
            .collect();
        Record::new(
            kbq_core::offsets::KafkaOffset(7),
            Some(1),
            Some(&vec![b'k'; key]),
            Some(&vec![b'x'; value]),
            headers,
            &mut bytes::BytesMut::new(),
        )
    }

    fn ours() -> Vec<(&'static str, String)> {
        vec![(headers::REASON, "why".into())]
    }

    #[test]
    fn a_dead_letter_that_fits_goes_whole() {
        let shape = Shape::fit(&record(10, 1_000, 3), &ours(), 100_000);
        assert_eq!((shape.key_len, shape.value_len), (10, 1_000));
        assert!(shape.original_headers && shape.cut.is_none());
        assert!(shape.truncation_headers().is_empty());
    }

    #[test]
    fn a_dead_letter_too_large_has_its_value_cut_to_fit_and_says_so() {
        let limit = 100_000;
        let r = record(10, 15_000_000, 3);
        let shape = Shape::fit(&r, &ours(), limit);
        assert_eq!(shape.key_len, 10);
        assert!(shape.original_headers);
        assert!(shape.value_len > limit / 2 && shape.value_len < limit);
        let headers = shape.truncation_headers();
        let original = headers
            .iter()
            .find(|(k, _)| *k == headers::ORIGINAL_VALUE_SIZE);
        assert_eq!(original.map(|(_, v)| v.as_str()), Some("15000000"));
        let size = shape.key_len
            + shape.value_len
            + RECORD_FRAMING
            + 3 * (2 + 100 + HEADER_FRAMING)
            + (headers.iter().chain(ours().iter()))
                .map(|(k, v)| k.len() + v.len() + HEADER_FRAMING)
                .sum::<usize>();
        assert!(size <= limit, "{size} over {limit}");
    }

    #[test]
    fn a_key_too_large_drops_the_records_headers_and_is_cut_too() {
        let shape = Shape::fit(&record(200_000, 10, 3), &ours(), 100_000);
        assert!(!shape.original_headers);
        assert!(shape.key_len < 100_000 && shape.key_len > 0);
        assert_eq!(shape.value_len, 0);
        assert_eq!(shape.cut.as_ref().map(|c| c.headers_dropped), Some(3));
    }

    #[test]
    fn size_refusals_and_bad_records_are_permanent_an_outage_is_not() {
        use rdkafka::types::RDKafkaErrorCode::*;
        for code in [MessageSizeTooLarge, MessageBatchTooLarge, InvalidRecord] {
            assert!(
                is_permanent(&KafkaError::MessageProduction(code)),
                "{code:?}"
            );
        }
        for code in [
            MessageTimedOut,
            BrokerNotAvailable,
            TopicAuthorizationFailed,
        ] {
            assert!(
                !is_permanent(&KafkaError::MessageProduction(code)),
                "{code:?}"
            );
        }
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
