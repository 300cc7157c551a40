//! The daemon end to end: the real binary (`run -c`) against a real Kafka broker and the
//! emulator. Each test checks the table afterwards through the Kafka metadata columns: every
//! (partition, offset) of a good record exactly once, nothing else.

#[path = "support/emulator.rs"]
mod emulator_support;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use apache_avro::Schema;
use apache_avro::types::Value;
use kafka_bigquery_sink::emulator::server::Emulator;
use kafka_bigquery_sink::emulator::store::TableRef;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use support::kafka::{
    KafkaBroker, consumer_config, create_topic_blocking, produce_to_partition, producer,
    unique_name,
};

const SCHEMA: &str = r#"{
  "type": "record", "name": "Order", "namespace": "test",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "created", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "note", "type": ["null", "string"], "default": null}
  ]
}"#;

#[allow(deprecated)] // the GenericDatumWriter replacement needs more ceremony for a test helper
fn encode(schema: &Schema, id: i64) -> Vec<u8> {
    let value = Value::Record(vec![
        ("id".into(), Value::Long(id)),
        (
            "customer".into(),
            Value::String(format!("customer-{}", id % 97)),
        ),
        (
            "amount".into(),
            Value::Decimal(apache_avro::Decimal::from(
                (id * 7 % 100_000).to_be_bytes().to_vec(),
            )),
        ),
        (
            "created".into(),
            Value::TimestampMicros(1_700_000_000_000_000 + id),
        ),
        (
            "note".into(),
            if id % 3 == 0 {
                Value::Union(1, Box::new(Value::String("n".into())))
            } else {
                Value::Union(0, Box::new(Value::Null))
            },
        ),
    ]);
    apache_avro::to_avro_datum(schema, value).expect("encode avro")
}

/// A record's key and value.
type KeyValue = (Vec<u8>, Vec<u8>);

struct Fixture {
    emulator: Emulator,
    bootstrap: &'static str,
    topic: String,
    dlq: String,
    table: String,
    dir: tempfile::TempDir,
    schema: Schema,
}

impl Fixture {
    async fn new(partitions: i32) -> Fixture {
        let emulator = emulator_support::start().await;
        let bootstrap = KafkaBroker::shared();
        let topic = unique_name("orders");
        let dlq = format!("{topic}-dlq");
        create_topic_blocking(bootstrap, &topic, partitions);
        create_topic_blocking(bootstrap, &dlq, 1);
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("order.avsc"), SCHEMA).expect("write avsc");
        Fixture {
            emulator,
            bootstrap,
            table: topic.replace('-', "_"),
            topic,
            dlq,
            dir,
            schema: Schema::parse_str(SCHEMA).expect("schema"),
        }
    }

    fn config(&self, group: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{group}.yaml"));
        let text = format!(
            r#"
kafka:
  bootstrap_servers: "{bootstrap}"
  group_id: "{group}"
  topics: ["{topic}"]
  properties:
    session.timeout.ms: "6000"
    heartbeat.interval.ms: "500"
avro:
  schema_file: "{avsc}"
bigquery:
  project: p
  dataset: d
  table: "{table}"
  endpoint: "http://{emulator}"
  credentials: none
  create_table: {{}}
  metadata_columns:
    topic: kafka_topic
    partition: kafka_partition
    offset: kafka_offset
dead_letter:
  topic: "{dlq}"
checkpoint:
  interval: 200ms
metrics:
  listen: "127.0.0.1:0"
shutdown_deadline: 20s
"#,
            bootstrap = self.bootstrap,
            topic = self.topic,
            avsc = self.dir.path().join("order.avsc").display(),
            table = self.table,
            emulator = self.emulator.addr,
            dlq = self.dlq,
        );
        std::fs::write(&path, text).expect("write config");
        path
    }

    /// Produces records with ids `ids` round-robin over the partitions; returns how many per
    /// partition.
    fn produce(&self, ids: std::ops::Range<i64>, partitions: i32) {
        let p = producer(self.bootstrap);
        let mut per: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
        for id in ids {
            per.entry((id % partitions as i64) as i32)
                .or_default()
                .push((id.to_string().into_bytes(), encode(&self.schema, id)));
        }
        for (partition, records) in per {
            let refs: Vec<(&[u8], &[u8])> = records
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            produce_to_partition(&p, &self.topic, partition, &refs);
        }
    }

    fn produce_raw(&self, partition: i32, payloads: &[&[u8]]) {
        let p = producer(self.bootstrap);
        let refs: Vec<(&[u8], &[u8])> = payloads.iter().map(|v| (b"bad".as_slice(), *v)).collect();
        produce_to_partition(&p, &self.topic, partition, &refs);
    }

    fn table_ref(&self) -> TableRef {
        TableRef::parse(&format!("projects/p/datasets/d/tables/{}", self.table)).expect("table ref")
    }

    /// Every visible (partition, offset), with how often it appears.
    fn visible(&self) -> BTreeMap<(i64, i64), usize> {
        let mut out = BTreeMap::new();
        let Some(table) = self.emulator.store.get_table(&self.table_ref()) else {
            return out;
        };
        let names: Vec<String> = table.schema.fields.iter().map(|f| f.name.clone()).collect();
        let at = |name: &str| {
            names
                .iter()
                .position(|n| n == name)
                .expect("metadata column")
        };
        let (pi, oi) = (at("kafka_partition"), at("kafka_offset"));
        let page = self
            .emulator
            .store
            .read_visible_rows(&self.table_ref(), 0, usize::MAX)
            .expect("rows");
        for row in page.rows {
            let r = row.codec.render(&row.data, &table.schema);
            let num = |i: usize| {
                r["f"][i]["v"]
                    .as_str()
                    .expect("value")
                    .parse::<i64>()
                    .expect("int")
            };
            *out.entry((num(pi), num(oi))).or_insert(0) += 1;
        }
        out
    }

    fn wait_visible(&self, at_least: usize, timeout: Duration) -> BTreeMap<(i64, i64), usize> {
        let started = Instant::now();
        loop {
            let v = self.visible();
            if v.values().sum::<usize>() >= at_least || started.elapsed() > timeout {
                return v;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn dead_letters(&self, expect: usize) -> Vec<(i64, String)> {
        let consumer: BaseConsumer = consumer_config(self.bootstrap, &unique_name("dlq-reader"))
            .set("auto.offset.reset", "earliest")
            .create()
            .expect("consumer");
        consumer.subscribe(&[&self.dlq]).expect("subscribe");
        let mut out = Vec::new();
        let started = Instant::now();
        while out.len() < expect && started.elapsed() < Duration::from_secs(30) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
                let headers = m.headers().expect("dead letters carry headers");
                let get = |name: &str| {
                    headers
                        .iter()
                        .find(|h| h.key == name)
                        .and_then(|h| h.value)
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                        .unwrap_or_default()
                };
                out.push((
                    get("kbq.source.offset").parse().unwrap_or(-1),
                    get("kbq.error.reason"),
                ));
            }
        }
        out
    }
}

struct Daemon {
    child: Child,
}

impl Daemon {
    fn start(config: &Path) -> Daemon {
        let child = Command::new(env!("CARGO_BIN_EXE_kafka-bigquery-sink"))
            .args(["run", "-c"])
            .arg(config)
            .env("RUST_LOG", "info,rdkafka=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the daemon");
        Daemon { child }
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait: the daemon must leave cleanly within its shutdown deadline.
    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id() as i32;
        // SAFETY: signals the child we spawned, by its pid.
        unsafe {
            libc_kill(pid, 15);
        }
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            if started.elapsed() > Duration::from_secs(40) {
                let _ = self.child.kill();
                panic!("daemon did not stop within 40 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

fn assert_exactly_once(visible: &BTreeMap<(i64, i64), usize>, expected: &BTreeSet<(i64, i64)>) {
    let dupes: Vec<_> = visible.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(dupes.is_empty(), "duplicates: {dupes:?}");
    let seen: BTreeSet<(i64, i64)> = visible.keys().copied().collect();
    let missing: Vec<_> = expected.difference(&seen).take(5).collect();
    let extra: Vec<_> = seen.difference(expected).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, unexpected {extra:?} ({} visible, {} expected)",
        seen.len(),
        expected.len()
    );
}

/// The (partition, offset) pairs the producer wrote for ids `0..n` round-robin over `p`.
fn expected_positions(n: i64, partitions: i32) -> BTreeSet<(i64, i64)> {
    let mut per = vec![0i64; partitions as usize];
    let mut out = BTreeSet::new();
    for id in 0..n {
        let p = (id % partitions as i64) as usize;
        out.insert((p as i64, per[p]));
        per[p] += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_lands_exactly_once_across_sigkill_restarts_and_a_graceful_stop() {
    let f = Fixture::new(3).await;
    let config = f.config(&unique_name("sink"));
    // Each phase kills the daemon while it is still working through the backlog: the threshold
    // is below what was produced, and the next phase needs progress past the previous one.
    let mut produced = 0i64;
    let mut crashes = 0;
    let mut seen = 0usize;
    for batch in [60_000i64, 30_000, 30_000] {
        f.produce(produced..produced + batch, 3);
        produced += batch;
        let daemon = Daemon::start(&config);
        // Kill at the first checkpoint that shows progress of this incarnation.
        let kill_at = seen + 1;
        let v = f.wait_visible(kill_at, Duration::from_secs(120));
        let visible = v.values().sum::<usize>();
        assert!(
            visible >= kill_at,
            "progress before the crash: {visible} < {kill_at}"
        );
        if visible < produced as usize {
            crashes += 1;
        }
        daemon.kill();
        seen = f.visible().values().sum();
    }
    eprintln!("{crashes} of 3 crashes hit the daemon mid-backlog");
    f.produce(produced..produced + 5_000, 3);
    produced += 5_000;
    let daemon = Daemon::start(&config);
    let v = f.wait_visible(produced as usize, Duration::from_secs(120));
    assert_exactly_once(&v, &expected_positions(produced, 3));
    let status = daemon.terminate();
    assert!(status.success(), "clean exit after SIGTERM: {status:?}");
    // Nothing more appears after the stop (no duplicate from a final cycle).
    assert_exactly_once(&f.visible(), &expected_positions(produced, 3));
    assert!(
        crashes >= 1,
        "no crash happened while the daemon was working; the test proved nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_records_go_to_the_dead_letter_topic_and_the_partition_keeps_going() {
    let f = Fixture::new(1).await;
    let config = f.config(&unique_name("sink"));
    f.produce(0..100, 1); // offsets 0..100
    let truncated = &encode(&f.schema, 7)[..3];
    f.produce_raw(0, &[truncated, b"", &[0x02, 0x04]]); // offsets 100..103
    f.produce(100..200, 1); // offsets 103..203
    let daemon = Daemon::start(&config);
    let v = f.wait_visible(200, Duration::from_secs(60));
    let mut expected: BTreeSet<(i64, i64)> = (0..100).map(|o| (0, o)).collect();
    expected.extend((103..203).map(|o| (0, o)));
    assert_exactly_once(&v, &expected);
    let dlq = f.dead_letters(3);
    let offsets: BTreeSet<i64> = dlq.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, BTreeSet::from([100, 101, 102]), "{dlq:?}");
    assert!(
        dlq.iter().all(|(_, reason)| !reason.is_empty()),
        "every dead letter says why: {dlq:?}"
    );
    assert!(daemon.terminate().success());
}

#[test]
fn validate_accepts_the_test_config_shape() {
    // The configs above go through `validate` inside `run`; this keeps a syntax slip in the
    // template from surfacing only as a daemon that never starts.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let f = rt.block_on(Fixture::new(1));
    let config = f.config("validate-only");
    let out = Command::new(env!("CARGO_BIN_EXE_kafka-bigquery-sink"))
        .args(["validate", "-c"])
        .arg(&config)
        .output()
        .expect("run validate");
    let _ = std::io::stderr().write_all(&out.stderr);
    assert!(out.status.success(), "validate failed");
}
