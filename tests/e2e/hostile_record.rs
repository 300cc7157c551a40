//! Records an attacker (or a broken producer) can send, end to end through the real binary, a
//! real broker and the emulator: each either becomes a row or a dead letter with its reason,
//! and the good records around it on every partition are written exactly once.
//!
//! * A header key that is not UTF-8 (`\xff\xfe`, which a plain produce request can carry).
//! * A record whose row is over `writer.max_request_bytes`: a 15 MB value, and a value just under
//!   the limit whose row and request grow past it; the emulator refuses requests over BigQuery's
//!   10 MB, as the service does. Their dead letters are larger than the dead-letter producer
//!   may send, so they go cut to fit, saying so.
//! * A dead-letter topic smaller than the producer: its dead letters are cut to the topic's own
//!   `max.message.bytes`, read at start; one the topic refuses anyway (it shrank since) goes as
//!   its headers alone, never retried without end.

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kafka_bigquery_sink::kafka::headers::{self, Header};
use kbq_emulator::server::EmulatorConfig;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{FutureProducer, FutureRecord};
use support::kafka::{consumer_config, producer_config, set_topic_config, unique_name};
use support::sink::{Daemon, Fixture, SinkOptions, Tweaks, encode};

/// The header key no UTF-8 decoder accepts.
const NOT_UTF8: &[u8] = b"\xff\xfe";

/// Produces one record to `partition` of `topic` with `value` and a header whose key is
/// [`NOT_UTF8`]; its offset.
fn produce_with_byte_key(bootstrap: &str, topic: &str, partition: i32, value: &[u8]) -> i64 {
    let producer: FutureProducer = producer_config(bootstrap)
        .set("message.max.bytes", "20000000")
        .create()
        .expect("producer");
    let mut hdrs = OwnedHeaders::new();
    headers::add(&mut hdrs, NOT_UTF8, Some(b"binary"));
    headers::add(&mut hdrs, b"trace", Some(b"abc"));
    let record = FutureRecord::to(topic)
        .partition(partition)
        .key(b"odd".as_slice())
        .payload(value)
        .headers(hdrs);
    let (_, offset) = futures::executor::block_on(producer.send(record, Duration::from_secs(60)))
        .map(|d| (d.partition, d.offset))
        .expect("produce the record with a byte key");
    offset
}

/// Produces `value` to `partition` of `topic` (any size the topic admits); its offset.
fn produce_large(bootstrap: &str, topic: &str, partition: i32, value: &[u8]) -> i64 {
    let producer: FutureProducer = producer_config(bootstrap)
        .set("message.max.bytes", "20000000")
        .create()
        .expect("producer");
    let record = FutureRecord::to(topic)
        .partition(partition)
        .key(b"large".as_slice())
        .payload(value);
    futures::executor::block_on(producer.send(record, Duration::from_secs(60)))
        .map(|d| d.offset)
        .expect("produce a large record")
}

/// The Avro body of a good record whose `customer` is `len` bytes long.
#[allow(deprecated)] // as `support::sink::encode`
fn with_customer(schema: &apache_avro::Schema, len: usize) -> Vec<u8> {
    use apache_avro::types::Value;
    let value = Value::Record(vec![
        ("id".into(), Value::Long(20_000)),
        ("customer".into(), Value::String("x".repeat(len))),
        (
            "amount".into(),
            Value::Decimal(apache_avro::Decimal::from(vec![1u8])),
        ),
        ("created".into(), Value::TimestampMicros(0)),
        ("note".into(), Value::Union(0, Box::new(Value::Null))),
    ]);
    apache_avro::to_avro_datum(schema, value).expect("encode avro")
}

/// One dead letter as read back: its headers (as bytes), key and value.
struct DeadLetter {
    headers: Vec<Header>,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl DeadLetter {
    fn header(&self, name: &str) -> Option<String> {
        (self.headers.iter())
            .find(|h| h.key == name.as_bytes())
            .and_then(|h| h.value.as_ref())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    fn source(&self) -> (i64, i64) {
        let number = |name| self.header(name).and_then(|v| v.parse().ok()).unwrap_or(-1);
        (number("kbq.source.partition"), number("kbq.source.offset"))
    }
}

/// The first `expect` dead letters of `f`'s dead-letter topic (waits up to a minute).
fn read_dead_letters(f: &Fixture, expect: usize) -> Vec<DeadLetter> {
    let consumer: BaseConsumer = consumer_config(&f.bootstrap, &unique_name("dlq-raw"))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[&f.dlq]).expect("subscribe");
    let mut out = Vec::new();
    let started = Instant::now();
    while out.len() < expect && started.elapsed() < Duration::from_secs(60) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            out.push(DeadLetter {
                headers: headers::read(&m),
                key: m.key().unwrap_or_default().to_vec(),
                value: m.payload().unwrap_or_default().to_vec(),
            });
        }
    }
    out
}

/// Good records on both partitions around a record with a non-UTF-8 header key on each.
/// Returns the offsets of those two records, by partition.
fn produce_around_byte_keys(f: &Fixture) -> [i64; 2] {
    f.produce(100);
    let odd = [0, 1].map(|p| {
        produce_with_byte_key(
            &f.bootstrap,
            &f.topic,
            p,
            &encode(&f.schema, 10_000 + p as i64),
        )
    });
    f.produce(100);
    odd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_key_that_is_not_utf8_is_carried_as_bytes_and_every_partition_keeps_going() {
    // Dead-lettering is on (the default), so the consumer reads every header; the table has no
    // headers column, so the record with the odd key is a good record like the others.
    let f = Fixture::new(2).await;
    let config = f.config(&unique_name("bytekey"));
    let odd = produce_around_byte_keys(&f);
    f.source.expect([(0, odd[0]), (1, odd[1])]);
    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(90));
    assert_eq!(f.expected().len(), 202);
    assert_eq!(daemon.http_get("/healthz").0, 200);
    assert!(daemon.errors().is_empty(), "{:?}", daemon.errors());
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_key_that_is_not_utf8_cannot_fill_a_string_column_and_is_dead_lettered_whole() {
    // The headers column's key is a STRING: the record is refused with its reason, and its
    // dead letter carries the key's bytes as the producer sent them.
    let f = Fixture::new(2).await;
    let tweaks = Tweaks {
        metadata_headers: Some("kafka_headers"),
        ..Tweaks::default()
    };
    let config = f.config_with(&unique_name("bytekey-column"), &tweaks);
    let odd = produce_around_byte_keys(&f);
    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(90));
    let dead = read_dead_letters(&f, 2);
    let sources: BTreeSet<(i64, i64)> = dead.iter().map(DeadLetter::source).collect();
    assert_eq!(sources, BTreeSet::from([(0, odd[0]), (1, odd[1])]));
    for d in &dead {
        assert_eq!(d.header("kbq.error.class").as_deref(), Some("out_of_range"));
        let reason = d.header("kbq.error.reason").unwrap_or_default();
        assert!(reason.contains("header key"), "{reason}");
        let forwarded = d.headers.iter().find(|h| h.key == NOT_UTF8);
        assert_eq!(
            forwarded.and_then(|h| h.value.as_deref()),
            Some(b"binary".as_slice()),
            "the record's own headers are forwarded as bytes"
        );
        assert_eq!(d.key, b"odd");
        assert!(d.header("kbq.truncated").is_none());
    }
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_over_the_request_limit_is_dead_lettered_cut_to_fit_and_the_partition_goes_on() {
    let mut emulator = EmulatorConfig::local();
    // BigQuery's AppendRows limit.
    emulator.write.max_request_bytes = 10_000_000;
    let f = Fixture::with(SinkOptions {
        emulator,
        ..SinkOptions::partitions(2)
    })
    .await;
    set_topic_config(&f.bootstrap, &f.topic, "max.message.bytes", "20000000");
    let tweaks = Tweaks {
        writer: vec![
            "  max_request_bytes: 10000000".into(),
            "  memory_limit: 256MiB".into(),
        ],
        ..Tweaks::default()
    };
    let config = f.config_with(&unique_name("toolarge"), &tweaks);
    f.produce(100);
    let body = |customer_len: usize| with_customer(&f.schema, customer_len);
    // A 15 MB value, and one whose Kafka record is under the limit while its row, with the
    // metadata columns and the request's own fields, is over it.
    let huge = body(15_000_000);
    let near = body(9_999_960);
    assert!(near.len() < 10_000_000);
    let huge_at = produce_large(&f.bootstrap, &f.topic, 0, &huge);
    let near_at = produce_large(&f.bootstrap, &f.topic, 1, &near);
    f.produce(100);

    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));
    let dead = read_dead_letters(&f, 2);
    let sources: BTreeSet<(i64, i64)> = dead.iter().map(DeadLetter::source).collect();
    assert_eq!(sources, BTreeSet::from([(0, huge_at), (1, near_at)]));
    for d in &dead {
        assert_eq!(
            d.header("kbq.error.class").as_deref(),
            Some("row_too_large")
        );
        let reason = d.header("kbq.error.reason").unwrap_or_default();
        assert!(reason.contains("writer.max_request_bytes"), "{reason}");
        // Larger than the producer's default 1,000,000 bytes: cut, saying how large it was.
        let original: usize = (d.header("kbq.original.value.size"))
            .and_then(|v| v.parse().ok())
            .expect("the original size");
        let expected = if d.source().0 == 0 {
            huge.len()
        } else {
            near.len()
        };
        assert_eq!(original, expected);
        assert!(d.header("kbq.truncated").is_some());
        assert!(
            d.value.len() < 1_000_000 && !d.value.is_empty(),
            "{}",
            d.value.len()
        );
        assert_eq!(d.key, b"large");
    }
    assert_eq!(
        daemon.metric_with("kbq_dead_letter_records_total", &["row_too_large"]),
        2.0
    );
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_fit_the_topics_own_size_and_one_it_still_refuses_goes_as_its_headers_alone() {
    // The dead-letter topic admits 100,000 bytes, below the producer's default 1,000,000: the
    // daemon reads the topic's size at start and cuts a dead letter to fit it.
    let f = Fixture::new(1).await;
    set_topic_config(&f.bootstrap, &f.dlq, "max.message.bytes", "100000");
    let config = f.config(&unique_name("smalldlq"));
    f.produce(50);
    // Not Avro: every byte continues a varint that never ends.
    let first = produce_large(&f.bootstrap, &f.topic, 0, &vec![0xff; 500_000]);
    f.produce(50);
    let mut daemon = Daemon::start(&config);
    let dead = read_dead_letters(&f, 1);
    assert_eq!(dead.len(), 1);
    let d = &dead[0];
    assert_eq!(d.source(), (0, first));
    assert_eq!(
        d.header("kbq.error.class").as_deref(),
        Some("malformed_avro")
    );
    assert_eq!(
        d.header("kbq.original.value.size").as_deref(),
        Some("500000")
    );
    assert!(
        d.value.len() > 50_000 && d.value.len() < 100_000,
        "cut to the topic's size: {}",
        d.value.len()
    );
    // The topic shrinks under the running daemon: the next dead letter, cut to the size read at
    // start, is refused as too large and goes as its headers alone instead of being retried
    // without end.
    set_topic_config(&f.bootstrap, &f.dlq, "max.message.bytes", "20000");
    let second = produce_large(&f.bootstrap, &f.topic, 0, &vec![0xff; 500_000]);
    f.produce(50);
    f.wait_exactly_once(Duration::from_secs(90));
    let dead = read_dead_letters(&f, 2);
    assert_eq!(dead.len(), 2);
    let d = &dead[1];
    assert_eq!(d.source(), (0, second));
    assert_eq!(
        d.header("kbq.original.value.size").as_deref(),
        Some("500000")
    );
    assert!(d.value.is_empty() && d.key.is_empty());
    assert!(!daemon.logged("sending its headers alone").is_empty());
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_that_names_internal_topics_never_consumes_them() {
    // The pattern matches `__consumer_offsets` (and every `__*` topic) besides the fixture's
    // topic: the internal topics are never assigned, so none of their records (the group
    // commits of every client of the broker, the sink's own among them) is read or
    // dead-lettered.
    let f = Fixture::new(1).await;
    let tweaks = Tweaks {
        topic_pattern: Some(format!("^(__.*|{})$", f.topic.replace('.', "\\."))),
        ..Tweaks::default()
    };
    let config = f.config_with(&unique_name("internal"), &tweaks);
    f.produce(100);
    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(90));
    // A few checkpoint cycles more: their commits land in `__consumer_offsets`.
    std::thread::sleep(Duration::from_secs(3));
    let internal: Vec<_> = (daemon.logged("partition assigned").into_iter())
        .filter(|l| l["partition"].as_str().is_some_and(|p| p.starts_with("__")))
        .collect();
    assert!(internal.is_empty(), "{internal:?}");
    assert_eq!(f.dead_letter_count(), 0);
    assert!(daemon.terminate().success());
}
