//! The operations contract of `docs/metrics.md`, checked against the real daemon (the binary,
//! a real Kafka broker, the emulator, an in-test Schema Registry): every metric of the spec is
//! exported with its type and labels and sane values, the probes answer as documented, the JSON
//! logs have the Cloud Logging shape with one line per checkpoint cycle and per recovery action,
//! and no secret of the configuration reaches `/metrics` or a log line. The tests that the
//! delivery mode can change run in both modes: one coordinator shell serves both, with one
//! readiness rule and one metrics path (docs/architecture.md, "Readiness").

use crate::support;
use crate::support::exposition;
use support::daemon as daemon_support;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use apache_avro::Schema;
use apache_avro::types::Value;
use daemon_support::{Daemon, free_port, http_get, wait_for};
use exposition::{Sample, assert_matches_spec, parse, samples_of, scrape, scrape_until, sum};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};
use kbq_transcode::frame_confluent;
use support::kafka::{produce_to_partition, producer, unique_name};
use support::registry::Registry;
use support::sink::{Fixture as SinkFixture, Tweaks};

const SCHEMA: &str = r#"{"type":"record","name":"Event","namespace":"test","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"}]}"#;
const REGISTRY_USER: &str = "kbq-reader";
const REGISTRY_PASSWORD: &str = "registry-pw-7f3a9c1e5b";
const SASL_PASSWORD: &str = "sasl-pw-2d8e4b6a0c";
const PARTITIONS: i32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    ExactlyOnce,
    AtLeastOnce,
}

impl Delivery {
    fn yaml(self) -> &'static str {
        match self {
            Delivery::ExactlyOnce => "exactly_once",
            Delivery::AtLeastOnce => "at_least_once",
        }
    }
}

/// The shared daemon fixture (`tests/support/sink.rs`: topic, dead-letter topic, emulator,
/// config) with this file's table, event schema, registry with credentials and delivery mode.
struct Fixture {
    sink: SinkFixture,
    schema: Schema,
    registry: SocketAddr,
    _registry: std::sync::Arc<Registry>,
    delivery: Delivery,
}

impl std::ops::Deref for Fixture {
    type Target = SinkFixture;

    fn deref(&self) -> &SinkFixture {
        &self.sink
    }
}

impl Fixture {
    async fn new(partitions: i32) -> Fixture {
        Fixture::with_delivery(partitions, Delivery::ExactlyOnce).await
    }

    async fn with_delivery(partitions: i32, delivery: Delivery) -> Fixture {
        let sink = SinkFixture::new(partitions).await;
        // Registry input does not create the table: it exists beforehand, with the event's
        // columns and the fixture's metadata columns.
        sink.create_table_with_metadata(vec![
            TableFieldSchema::new("id", FieldType::Int64, Mode::Required),
            TableFieldSchema::new("name", FieldType::String, Mode::Required),
        ]);
        use base64::Engine;
        let basic = base64::engine::general_purpose::STANDARD
            .encode(format!("{REGISTRY_USER}:{REGISTRY_PASSWORD}"));
        let (registry, reg) = Registry::serve(
            HashMap::from([(1, SCHEMA.to_string())]),
            Some(format!("Basic {basic}")),
        )
        .await;
        Fixture {
            sink,
            schema: Schema::parse_str(SCHEMA).expect("schema"),
            registry,
            _registry: reg,
            delivery,
        }
    }

    /// A config with secrets in it (the registry password and a SASL password, which librdkafka
    /// ignores on a plaintext connection) and JSON logs; `name` tells apart the configs of one
    /// group.
    fn config(&self, name: &'static str, group: &str, metrics: u16) -> PathBuf {
        self.sink.config_with(
            group,
            &Tweaks {
                registry_url: Some(format!("http://{}", self.registry)),
                registry_credentials: Some((REGISTRY_USER, REGISTRY_PASSWORD)),
                kafka_properties: vec![
                    r#"    statistics.interval.ms: "1000""#.to_string(),
                    r#"    sasl.username: "svc-sink""#.to_string(),
                    format!(r#"    sasl.password: "{SASL_PASSWORD}""#),
                ],
                checkpoint_interval: "300ms",
                metrics_port: metrics,
                delivery: Some(self.delivery.yaml()),
                name: Some(name),
                ..Tweaks::default()
            },
        )
    }

    /// Produces the events `ids` round-robin over `partitions` partitions, Confluent-framed
    /// with schema id 1.
    #[allow(deprecated)]
    fn produce_events(&self, ids: std::ops::Range<i64>, partitions: i32) {
        let p = producer(&self.bootstrap);
        let mut per: BTreeMap<i32, Vec<Vec<u8>>> = BTreeMap::new();
        for id in ids {
            let value = Value::Record(vec![
                ("id".into(), Value::Long(id)),
                ("name".into(), Value::String(format!("event-{id}"))),
            ]);
            let avro = apache_avro::to_avro_datum(&self.schema, value).expect("avro");
            per.entry((id % partitions as i64) as i32)
                .or_default()
                .push(frame_confluent(1, &avro));
        }
        for (partition, values) in per {
            let refs: Vec<(&[u8], &[u8])> = values
                .iter()
                .map(|v| (b"k".as_slice(), v.as_slice()))
                .collect();
            produce_to_partition(&p, &self.topic, partition, &refs);
        }
    }

    /// Whether the group's committed offset of every partition is its high watermark.
    fn fully_committed(&self, group: &str) -> bool {
        use rdkafka::TopicPartitionList;
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let consumer: BaseConsumer = support::kafka::consumer_config(&self.bootstrap, group)
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition(&self.topic, p);
        }
        let Ok(committed) = consumer.committed_offsets(tpl, Duration::from_secs(10)) else {
            return false;
        };
        committed.elements().iter().all(|e| {
            let high = consumer
                .fetch_watermarks(&self.topic, e.partition(), Duration::from_secs(10))
                .map(|(_, h)| h)
                .unwrap_or(-1);
            e.offset() == rdkafka::Offset::Offset(high)
        })
    }

    async fn install_faults(&self, rules: serde_json::Value) {
        let response = reqwest::Client::new()
            .post(format!("http://{}/emulator/v1/faults", self.emulator.addr))
            .json(&rules)
            .send()
            .await
            .expect("install faults");
        assert!(
            response.status().is_success(),
            "{:?}",
            response.text().await
        );
    }
}

/// Every line is one JSON object with the Cloud Logging fields.
fn json_log_lines(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).expect("daemon log");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert!(
                ["DEBUG", "INFO", "WARNING", "ERROR"]
                    .contains(&v["severity"].as_str().unwrap_or_default()),
                "severity: {l}"
            );
            assert!(v["message"].is_string(), "message: {l}");
            let ts = v["timestamp"].as_str().unwrap_or_default();
            assert!(ts.len() == 27 && ts.ends_with('Z'), "timestamp: {l}");
            assert!(v["target"].is_string(), "target: {l}");
            v
        })
        .collect()
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn assert_no_secrets(what: &str, text: &str) {
    for secret in [REGISTRY_PASSWORD, SASL_PASSWORD] {
        assert!(!text.contains(secret), "a secret appears in {what}");
    }
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD
        .encode(format!("{REGISTRY_USER}:{REGISTRY_PASSWORD}"));
    assert!(
        !text.contains(&basic),
        "the registry credentials appear in {what}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_exports_every_metric_of_the_spec_with_sane_values_and_no_secrets() {
    every_metric_of_the_spec(Delivery::ExactlyOnce).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_exports_every_metric_of_the_spec_with_sane_values_and_no_secrets() {
    every_metric_of_the_spec(Delivery::AtLeastOnce).await;
}

const RUST_LOG: &str = "info,kafka_bigquery_sink=debug,rdkafka=warn";

/// Every metric of the spec with sane values after a run with recovered errors and bad
/// records; in exactly-once mode then a crash between a commit and its flush, recovered by the
/// restarted daemon's re-flush; the logs of both runs.
async fn every_metric_of_the_spec(delivery: Delivery) {
    let f = Fixture::with_delivery(PARTITIONS, delivery).await;
    let group = unique_name("metrics");
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = f.config("first", &group, port);
    let log1 = f.dir.path().join("first.log");
    let log2 = f.dir.path().join("second.log");

    // Errors the daemon recovers from, so the error counter has samples: one failed flush
    // (exactly once) and one append answered with an in-stream error.
    f.install_faults(serde_json::json!([
        {"rpc": "FlushRows", "action": {"fail": {"code": "UNAVAILABLE"}}, "nth": 2, "times": 1},
        {"rpc": "AppendRows", "action": {"fail": {"code": "UNAVAILABLE", "in_stream": true}}, "nth": 2, "times": 1}
    ]))
    .await;
    f.produce_events(0..3_000, PARTITIONS);
    f.source.produce_raw(
        0,
        &[b"\x05not confluent".to_vec(), vec![0, 0, 0, 0, 99, 2, 4]],
    );

    let daemon = Daemon::start_logging_to(&config, RUST_LOG, &log1);
    let healthz = wait_for(Duration::from_secs(60), || async {
        http_get(addr, "/healthz").await.filter(|(s, _)| *s == 200)
    })
    .await;
    assert!(healthz.is_some(), "/healthz answers 200");
    let ready = wait_for(Duration::from_secs(90), || async {
        http_get(addr, "/readyz").await.filter(|(s, _)| *s == 200)
    })
    .await;
    let last = http_get(addr, "/readyz").await;
    assert_eq!(
        ready.map(|r| r.1).as_deref(),
        Some("ready\n"),
        "last answer {last:?}; log:\n{}",
        tail(&log1)
    );

    // Everything consumed and checkpointed: the lag of each partition drops to 0.
    let eo = delivery == Delivery::ExactlyOnce;
    let (text, settled) = scrape_until(addr, Duration::from_secs(120), |s| {
        let lags = samples_of(s, "kbq_consumer_lag_records");
        lags.len() == PARTITIONS as usize
            && lags.iter().all(|l| l.value == 0.0)
            && (!eo || sum(s, "kbq_rows_flushed_total", &[]) >= 3_002.0)
            && sum(s, "kbq_checkpoints_total", &[("outcome", "empty")]) >= 1.0
    })
    .await;
    assert!(
        settled,
        "lag 0 on every partition, all rows flushed, an empty cycle since:\n{text}"
    );
    assert_eq!(f.visible_count(), 3_000);
    // Both modes count the injected AppendRows error (at least once, the FlushRows fault never
    // fires: the `_default` stream is not flushed), so the errors family is present in both.
    assert_matches_spec(&text, &[]);
    let (_, s) = parse(&text);
    assert_first_run(&f, &s, &text);
    let daemon = if eo {
        crash_between_commit_and_flush(&f, &group, addr, daemon, &s, &config, &log2).await
    } else {
        daemon
    };
    let (text, _) = scrape_until(addr, Duration::from_secs(1), |_| true).await;
    assert_no_secrets("/metrics", &text);
    let mut daemon = daemon;
    assert!(daemon.terminate().success());
    assert_logs(&f, &log1, &log2);
}

/// The first run's values: what both delivery modes count alike, then each mode's own.
fn assert_first_run(f: &Fixture, s: &[Sample], text: &str) {
    let topic = f.topic.as_str();
    let table = f.table.as_str();
    assert_eq!(
        sum(s, "kbq_records_consumed_total", &[("topic", topic)]),
        3_002.0
    );
    assert!(sum(s, "kbq_bytes_consumed_total", &[("topic", topic)]) > 3_002.0 * 5.0);
    assert!(sum(s, "kbq_rows_appended_total", &[("table", table)]) >= 3_000.0);
    assert!(sum(s, "kbq_append_latency_seconds_count", &[("table", table)]) >= 3.0);
    // One metrics path: the cycle is measured and counted in both modes.
    assert!(sum(s, "kbq_checkpoint_duration_seconds_count", &[]) >= 1.0);
    assert!(sum(s, "kbq_checkpoints_total", &[("outcome", "committed")]) >= 1.0);
    let age = sum(s, "kbq_checkpoint_last_success_age_seconds", &[]);
    assert!(age < 30.0, "last successful checkpoint {age}s ago");
    assert!(sum(s, "kbq_inflight_requests", &[]) <= 8.0 * PARTITIONS as f64);
    let errors = |rpc| {
        sum(
            s,
            "kbq_bigquery_errors_total",
            &[("rpc", rpc), ("code", "UNAVAILABLE")],
        )
    };
    // Error classes without a storage code exist from the start at 0, so that the first error
    // is an increase (deploy/prometheus/alerts.yaml).
    let denied: Vec<&Sample> = samples_of(s, "kbq_bigquery_errors_total")
        .into_iter()
        .filter(|x| x.labels["code"] == "PERMISSION_DENIED" && x.labels["storage_code"] == "none")
        .collect();
    assert_eq!(
        denied.len(),
        5,
        "one PERMISSION_DENIED series per rpc:\n{text}"
    );
    assert!(denied.iter().all(|x| x.value == 0.0), "{text}");
    // The writer counts the error of the append it rides out in both modes: the `_default`
    // stream's session is observed like a BUFFERED stream's.
    assert!(errors("AppendRows") >= 1.0, "{text}");
    for reason in ["bad_magic", "unknown_schema"] {
        assert_eq!(
            sum(s, "kbq_dead_letter_records_total", &[("reason", reason)]),
            1.0
        );
    }
    assert!(sum(s, "kbq_rebalances_total", &[("kind", "assign")]) >= 1.0);
    // Partitions meeting a new id together may each fetch it (the registry client shares the
    // request); every later record is a cache hit.
    let registry = |result| {
        sum(
            s,
            "kbq_schema_registry_requests_total",
            &[("result", result)],
        )
    };
    assert!(registry("fetched") >= 1.0);
    assert!(registry("not_found") >= 1.0);
    assert!(registry("hit") >= 2_000.0);
    assert_eq!(sum(s, "kbq_partitions_assigned", &[]), PARTITIONS as f64);
    assert_eq!(sum(s, "kbq_partitions_failed", &[]), 0.0);
    assert_eq!(sum(s, "kbq_partitions_stalled", &[]), 0.0);
    assert_eq!(sum(s, "kbq_consumer_group_joined", &[]), 1.0);
    match f.delivery {
        Delivery::ExactlyOnce => {
            assert_eq!(
                sum(s, "kbq_rows_appended_total", &[("table", table)]),
                3_000.0
            );
            assert!(sum(s, "kbq_flush_latency_seconds_count", &[("table", table)]) >= 3.0);
            assert_eq!(sum(s, "kbq_open_streams", &[]), PARTITIONS as f64);
            assert_eq!(
                sum(s, "kbq_streams_created_total", &[("table", table)]),
                PARTITIONS as f64
            );
            assert!(errors("FlushRows") >= 1.0, "{text}");
        }
        // The `_default` stream: nothing is created, flushed or finalized.
        Delivery::AtLeastOnce => {
            assert_eq!(sum(s, "kbq_rows_flushed_total", &[]), 0.0);
            assert_eq!(sum(s, "kbq_streams_created_total", &[]), 0.0);
            assert_eq!(sum(s, "kbq_streams_finalized_total", &[]), 0.0);
        }
    }
    assert_no_secrets("/metrics", text);
}

/// Exactly once: a crash between a commit and its flush. FlushRows is held back while new
/// records are appended and committed (lag 0 means the offsets are committed), then the daemon
/// is killed; the restarted daemon's recovery re-flushes each partition's committed checkpoint.
/// Returns the restarted daemon.
async fn crash_between_commit_and_flush(
    f: &Fixture,
    group: &str,
    addr: SocketAddr,
    mut daemon: Daemon,
    s: &[Sample],
    config: &Path,
    log2: &Path,
) -> Daemon {
    f.install_faults(serde_json::json!([
        {"rpc": "FlushRows", "action": {"delay": {"ms": 120000}}}
    ]))
    .await;
    let flushed_before = sum(s, "kbq_rows_flushed_total", &[]);
    f.produce_events(3_000..3_300, PARTITIONS);
    // Read from Kafka, not from the lag gauge: the gauge's high watermark comes from statistics
    // and may lag behind the produce by a statistics interval.
    let committed = wait_for(Duration::from_secs(120), || async {
        f.fully_committed(group).then_some(())
    })
    .await;
    assert!(committed.is_some(), "the new records committed");
    let (_, s) = parse(&scrape(addr).await);
    assert_eq!(
        sum(&s, "kbq_rows_flushed_total", &[]),
        flushed_before,
        "flush held back"
    );
    daemon.kill();
    let cleared = reqwest::Client::new()
        .delete(format!("http://{}/emulator/v1/faults", f.emulator.addr))
        .send()
        .await
        .expect("clear faults");
    assert!(cleared.status().is_success());
    let daemon = Daemon::start_logging_to(config, RUST_LOG, log2);
    let (text, recovered) = scrape_until(addr, Duration::from_secs(120), |s| {
        sum(s, "kbq_recovery_actions_total", &[("outcome", "reflushed")]) >= PARTITIONS as f64
            && samples_of(s, "kbq_consumer_lag_records").len() == PARTITIONS as usize
    })
    .await;
    assert!(recovered, "recovery counted after the restart:\n{text}");
    assert_matches_spec(&text, &[]);
    f.produce_events(3_300..3_400, PARTITIONS);
    let visible = wait_for(Duration::from_secs(90), || async {
        (f.visible_count() == 3_400).then_some(())
    })
    .await;
    assert!(visible.is_some(), "{} rows visible", f.visible_count());
    let (status, _) = http_get(addr, "/readyz").await.expect("readyz");
    assert_eq!(status, 200);
    let (text, finalized) = scrape_until(addr, Duration::from_secs(60), |s| {
        sum(s, "kbq_streams_finalized_total", &[]) >= 1.0
    })
    .await;
    assert!(finalized, "superseded streams finalized:\n{text}");
    daemon
}

/// Logs: Cloud Logging JSON, one line per checkpoint cycle at debug; in exactly-once mode one
/// per recovery action of the restarted daemon.
fn assert_logs(f: &Fixture, log1: &Path, log2: &Path) {
    let first = json_log_lines(log1);
    let cycles: Vec<&serde_json::Value> = first
        .iter()
        .filter(|l| l["message"] == "checkpoint cycle")
        .collect();
    assert!(cycles.len() >= 3, "checkpoint cycles logged");
    assert!(cycles.iter().all(|l| l["severity"] == "DEBUG"
        && ["committed", "empty", "abandoned"].contains(&l["outcome"].as_str().unwrap_or_default())
        && l["duration_ms"].is_u64()));
    assert_no_secrets("first log", &std::fs::read_to_string(log1).expect("log"));
    if f.delivery == Delivery::AtLeastOnce {
        return;
    }
    let second = json_log_lines(log2);
    let recoveries: Vec<&serde_json::Value> = second
        .iter()
        .filter(|l| l["message"] == "recovery: committed checkpoint flushed")
        .collect();
    assert_eq!(
        recoveries.len(),
        PARTITIONS as usize,
        "one line per recovery action"
    );
    assert!(recoveries.iter().all(|l| {
        l["severity"] == "INFO"
            && l["partition"]
                .as_str()
                .is_some_and(|p| p.starts_with(f.topic.as_str()))
    }));
    assert_no_secrets("second log", &std::fs::read_to_string(log2).expect("log"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_for_the_group_and_a_replica_without_partitions_is_ready() {
    readiness_waits_for_the_group(Delivery::ExactlyOnce).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_readiness_waits_for_the_group_and_a_replica_without_partitions_is_ready() {
    readiness_waits_for_the_group(Delivery::AtLeastOnce).await;
}

/// The one readiness rule: not ready before the group is joined; ready when joined, with or
/// without partitions.
async fn readiness_waits_for_the_group(delivery: Delivery) {
    let f = Fixture::with_delivery(1, delivery).await;
    let log = f.dir.path().join("probes.log");

    // No broker at all: alive, but not ready, and it says why.
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let nowhere = f.config("nowhere", &unique_name("probes"), port);
    let text = std::fs::read_to_string(&nowhere)
        .unwrap()
        .replace(f.bootstrap.as_str(), &format!("127.0.0.1:{}", free_port()));
    std::fs::write(&nowhere, text).unwrap();
    let mut lonely = Daemon::start_logging_to(&nowhere, "info,rdkafka=off", &log);
    let answered = wait_for(Duration::from_secs(60), || async {
        let health = http_get(addr, "/healthz").await?;
        let ready = http_get(addr, "/readyz").await?;
        (health.0 == 200 && ready.1.contains("consumer group")).then_some(ready)
    })
    .await;
    assert_eq!(
        answered.map(|r| r.0),
        Some(503),
        "alive but not ready without a group"
    );
    lonely.kill();

    // Two replicas, one partition: both become ready, though only one owns the partition.
    let group = unique_name("probes");
    let (pa, pb) = (free_port(), free_port());
    let mut a = Daemon::start_logging_to(&f.config("a", &group, pa), "info,rdkafka=warn", &log);
    let mut b = Daemon::start_logging_to(&f.config("b", &group, pb), "info,rdkafka=warn", &log);
    let mut owned = 0.0;
    for port in [pa, pb] {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let ready = wait_for(Duration::from_secs(90), || async {
            http_get(addr, "/readyz").await.filter(|(s, _)| *s == 200)
        })
        .await;
        assert!(ready.is_some(), "replica on {port} ready");
    }
    // The group settles on one owner; the other replica stays ready with nothing assigned.
    let settled = wait_for(Duration::from_secs(60), || async {
        let mut total = 0.0;
        let mut idle_and_ready = false;
        for port in [pa, pb] {
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let (_, s) = parse(&scrape(addr).await);
            let assigned = sum(&s, "kbq_partitions_assigned", &[]);
            total += assigned;
            if assigned == 0.0 {
                idle_and_ready = http_get(addr, "/readyz").await?.0 == 200;
            }
        }
        (total == 1.0 && idle_and_ready).then_some(total)
    })
    .await;
    owned += settled.unwrap_or(0.0);
    assert_eq!(
        owned, 1.0,
        "one replica owns the partition, the idle one is ready"
    );
    assert!(a.terminate().success());
    assert!(b.terminate().success());
    assert_no_secrets("probe logs", &std::fs::read_to_string(&log).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_whose_appends_hang_is_counted_stalled_and_turns_readiness_false() {
    stalled_partition(Delivery::ExactlyOnce).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_a_partition_whose_appends_hang_is_counted_stalled() {
    stalled_partition(Delivery::AtLeastOnce).await;
}

/// The stall watch of the one readiness rule: a partition whose appends hang while records
/// wait turns readiness false and is counted, then recovers.
async fn stalled_partition(delivery: Delivery) {
    let f = Fixture::with_delivery(1, delivery).await;
    let group = unique_name("stall");
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = f.config("stall", &group, port);
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("\n  interval: 300ms\n"), "{text}");
    let text = text.replace(
        "  interval: 300ms\n",
        "  interval: 300ms\n  partition_stall_timeout: 3s\n",
    );
    std::fs::write(&config, text).unwrap();
    let log = f.dir.path().join("stall.log");
    f.produce_events(0..100, 1);
    let mut daemon = Daemon::start_logging_to(&config, "info,rdkafka=warn", &log);
    let ready = wait_for(Duration::from_secs(90), || async {
        http_get(addr, "/readyz").await.filter(|(s, _)| *s == 200)
    })
    .await;
    assert!(ready.is_some(), "ready at first; log:\n{}", tail(&log));
    let all = wait_for(Duration::from_secs(90), || async {
        (f.visible_count() == 100).then_some(())
    })
    .await;
    assert!(all.is_some(), "{} rows visible", f.visible_count());

    // Every append now hangs for 20 s: records wait, nothing is acknowledged, and every
    // checkpoint cycle is empty (a success for the other readiness rules).
    f.install_faults(serde_json::json!([
        {"rpc": "AppendRows", "action": {"delay": {"ms": 20000}}}
    ]))
    .await;
    f.produce_events(100..300, 1);
    let stalled = wait_for(Duration::from_secs(60), || async {
        http_get(addr, "/readyz")
            .await
            .filter(|(s, body)| *s == 503 && body.contains("stalled"))
    })
    .await;
    assert!(
        stalled
            .as_ref()
            .is_some_and(|(_, body)| body.contains(&f.topic)),
        "readiness names the stalled partition: {stalled:?}; log:\n{}",
        tail(&log)
    );
    let (text, counted) = scrape_until(addr, Duration::from_secs(10), |s| {
        sum(s, "kbq_partitions_stalled", &[]) == 1.0
            && sum(s, "kbq_consumer_lag_records", &[]) == 200.0
    })
    .await;
    assert!(counted, "one stalled partition, the real lag 200:\n{text}");
    assert_matches_spec(&text, &[]);
    let lines = json_log_lines(&log);
    let line = lines
        .iter()
        .find(|l| l["message"] == "partition stalled")
        .unwrap_or_else(|| panic!("a stall is logged:\n{}", tail(&log)));
    assert_eq!(line["severity"], "WARNING");
    assert!(
        line["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{line}"
    );
    assert_eq!(line["high"], 300, "{line}");

    // The appends come back: the partition moves, readiness returns.
    let cleared = reqwest::Client::new()
        .delete(format!("http://{}/emulator/v1/faults", f.emulator.addr))
        .send()
        .await
        .expect("clear faults");
    assert!(cleared.status().is_success());
    let moving = wait_for(Duration::from_secs(90), || async {
        let ready = http_get(addr, "/readyz").await?.0 == 200;
        (ready && f.visible_count() == 300).then_some(())
    })
    .await;
    assert!(moving.is_some(), "ready again; log:\n{}", tail(&log));
    let (text, cleared) = scrape_until(addr, Duration::from_secs(10), |s| {
        sum(s, "kbq_partitions_stalled", &[]) == 0.0
    })
    .await;
    assert!(cleared, "{text}");
    assert!(
        json_log_lines(&log)
            .iter()
            .any(|l| l["message"] == "stalled partition moves again"),
        "{}",
        tail(&log)
    );
    assert!(daemon.terminate().success());
}

/// `log.format: text` written to a file (as a container runtime collects it) carries no colour
/// codes: they are for terminals only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_written_to_a_file_carry_no_colour_codes() {
    let f = Fixture::new(1).await;
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = f.config("text", &unique_name("text-logs"), port);
    let text = std::fs::read_to_string(&config)
        .expect("config")
        .replace("format: json", "format: text");
    std::fs::write(&config, text).expect("config");
    let log = f.dir.path().join("text.log");
    let mut daemon = Daemon::start_logging_to(&config, "info,rdkafka=warn", &log);
    let healthz = wait_for(Duration::from_secs(60), || async {
        http_get(addr, "/healthz").await.filter(|(s, _)| *s == 200)
    })
    .await;
    assert!(healthz.is_some(), "/healthz answers 200");
    assert!(daemon.terminate().success());
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(logged.contains("INFO"), "text logs were written:\n{logged}");
    assert!(
        !logged.contains('\x1b'),
        "colour codes in a log file:\n{}",
        logged.lines().take(5).collect::<Vec<_>>().join("\n")
    );
}
