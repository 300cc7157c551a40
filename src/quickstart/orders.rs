//! The append-only quickstart (the default mode): generated orders through the sink in
//! exactly-once mode, with a SIGKILL of the sink part-way, then the check that every Kafka
//! record became exactly one row ([`super::check`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rdkafka::mocking::MockCluster;

use crate::emulator::server::{Emulator, EmulatorConfig};
use crate::emulator::store::{Dataset, Store, Table, TableRef};
use crate::transcode::{AvroSchema, DeriveOptions, MapMode, MetadataColumns};

use super::check::{Check, Progress, verify};
use super::production::{PRODUCE_AHEAD, Production};
use super::records::SCHEMA;
use super::registry::LocalRegistry;
use super::sink::{Sink, free_loopback_port, metric, scrape};
use super::{QuickstartArgs, Report};

pub(super) const TOPIC: &str = "orders";
const DEAD_LETTER_TOPIC: &str = "orders-dlq";
const GROUP: &str = "kbq-quickstart";
const PROJECT: &str = "quickstart";
const DATASET: &str = "shop";
const TABLE: &str = "orders";
pub(super) const SCHEMA_ID: u32 = 1;
pub(super) const PARTITION_COLUMN: &str = "kafka_partition";
pub(super) const OFFSET_COLUMN: &str = "kafka_offset";
/// The sink is killed once this share of the records is visible.
const CRASH_AT: f64 = 0.4;
/// No new visible row for this long while production waits for the sink: give up and check.
const STALL: Duration = Duration::from_secs(90);

/// What one run saw.
pub(super) struct Outcome {
    records: u64,
    partitions: i32,
    avro_bytes: u64,
    visible: u64,
    check: Check,
    crash: Option<Crash>,
    checkpoints: Vec<u64>,
    recovery: Vec<(String, u64)>,
    sink_elapsed: Duration,
    wall: Duration,
    metrics_url: String,
    registry_lookups: u64,
    clean_stop: Result<(), String>,
    stalled: Option<String>,
}

struct Crash {
    at_visible: u64,
    unflushed: u64,
    pid: u32,
    /// From the restart to the first row the new incarnation made visible.
    resumed_after: Option<Duration>,
}

impl Report for Outcome {
    fn verified(&self) -> bool {
        self.check.duplicates == 0
            && self.check.missing == 0
            && self.check.unexpected == 0
            && self.check.distinct == self.records
            && self.clean_stop.is_ok()
            && self.stalled.is_none()
    }

    fn print(&self) {
        let secs = self.sink_elapsed.as_secs_f64().max(1e-3);
        let mib = self.avro_bytes as f64 / (1024.0 * 1024.0);
        println!();
        println!("quickstart summary");
        println!(
            "  records produced   {} to {} partitions ({:.0} MiB of Avro, {} bytes per record on average)",
            self.records,
            self.partitions,
            mib,
            self.avro_bytes / self.records.max(1)
        );
        println!(
            "  rows visible       {} ({} distinct (partition, offset) pairs)",
            self.visible, self.check.distinct
        );
        println!("  duplicates         {}", self.check.duplicates);
        println!("  missing            {}", self.check.missing);
        if self.check.unexpected > 0 {
            println!(
                "  unexpected rows    {} (partition or offset never produced)",
                self.check.unexpected
            );
        }
        match &self.crash {
            Some(c) => println!(
                "  crash              SIGKILL to sink #1 (pid {}) at {} visible rows, with about {} rows appended but not yet visible; sink #2 made rows visible again {} after its start",
                c.pid,
                c.at_visible,
                c.unflushed,
                c.resumed_after
                    .map(|d| format!("{:.1}s", d.as_secs_f64()))
                    .unwrap_or_else(|| "(never)".into())
            ),
            None => println!(
                "  crash              none (all records were visible before the crash point)"
            ),
        }
        let total: u64 = self.checkpoints.iter().sum();
        let per: Vec<String> = self
            .checkpoints
            .iter()
            .enumerate()
            .map(|(i, n)| format!("sink #{}: {n}", i + 1))
            .collect();
        println!(
            "  checkpoints        {total} committed ({})",
            per.join(", ")
        );
        if !self.recovery.is_empty() {
            let r: Vec<String> = self
                .recovery
                .iter()
                .map(|(outcome, n)| format!("{outcome} {n}"))
                .collect();
            println!(
                "  recovery           {} (partitions, by outcome)",
                r.join(", ")
            );
        }
        println!(
            "  throughput         {:.0} records/s, {:.1} MiB/s (first sink start to last row visible, crash and restart included)",
            self.records as f64 / secs,
            mib / secs
        );
        println!("  wall time          {:.1}s", self.wall.as_secs_f64());
        println!(
            "  schema registry    {} lookup(s) for schema id {SCHEMA_ID} (the sink caches by id)",
            self.registry_lookups
        );
        println!(
            "  clean stop         {}",
            match &self.clean_stop {
                Ok(()) => format!(
                    "sink #{} stopped on SIGTERM after its final checkpoint (exit 0)",
                    self.checkpoints.len()
                ),
                Err(e) => format!("FAILED: {e}"),
            }
        );
        println!(
            "  metrics            {} while the sink runs (kbq_* series, see docs/metrics.md); run the daemon yourself with `kafka-bigquery-sink run -c config.yaml` to keep it up",
            self.metrics_url
        );
        println!();
        let line = format!(
            "records={} rows_visible={} duplicates={} missing={}",
            self.records, self.visible, self.check.duplicates, self.check.missing
        );
        if let Some(stalled) = &self.stalled {
            println!("  stalled            {stalled}");
        }
        if self.verified() {
            println!("quickstart: exactly-once verified: {line}");
        } else {
            println!("quickstart: FAILED: {line}");
        }
    }
}

pub(super) async fn run(args: &QuickstartArgs, workdir: &Path) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    println!(
        "quickstart: {} generated orders (~1 KB of Avro each) through kafka-bigquery-sink, exactly once, with a crash in the middle",
        args.records
    );

    let kafka =
        MockCluster::new(1).map_err(|e| anyhow!("cannot start the mock kafka cluster: {e}"))?;
    kafka
        .create_topic(TOPIC, args.partitions, 1)
        .map_err(|e| anyhow!("cannot create topic {TOPIC}: {e}"))?;
    kafka
        .create_topic(DEAD_LETTER_TOPIC, 1, 1)
        .map_err(|e| anyhow!("cannot create topic {DEAD_LETTER_TOPIC}: {e}"))?;
    let bootstrap = kafka.bootstrap_servers();

    let emulator = Emulator::start(EmulatorConfig::local())
        .await
        .context("cannot start the bigquery emulator")?;
    let table = create_table(&emulator.store)?;
    let registry = LocalRegistry::start(
        HashMap::from([(SCHEMA_ID, SCHEMA.to_string())]),
        HashMap::new(),
    )
    .await
    .context("cannot start the schema registry")?;
    let metrics_addr = free_loopback_port().context("cannot find a free port for /metrics")?;
    let metrics_url = format!("http://{metrics_addr}/metrics");
    let config_path = workdir.join("sink.yaml");
    std::fs::write(
        &config_path,
        sink_config(&bootstrap, &registry.url(), emulator.addr, metrics_addr),
    )
    .context("cannot write the sink config")?;
    println!(
        "  kafka (librdkafka mock cluster)  {bootstrap}, topic {TOPIC} with {} partitions",
        args.partitions
    );
    println!(
        "  bigquery emulator                http://{}  table {PROJECT}.{DATASET}.{TABLE}",
        emulator.addr
    );
    println!("  schema registry                  {}", registry.url());
    println!("  sink metrics                     {metrics_url}");
    println!(
        "  sink config                      {}",
        config_path.display()
    );
    println!();

    let crash_point = (((args.records as f64) * CRASH_AT) as u64).max(1);
    let production = Production::start(
        bootstrap.clone(),
        args.records,
        args.partitions,
        crash_point,
    );
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let scraper = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .context("http client")?;

    let mut progress = Progress::new(&emulator.store, &table, args.partitions)?;
    let sink_started = Instant::now();
    let mut sink = Sink::spawn(&exe, &config_path, workdir, 1)?;
    let mut checkpoints = vec![0u64];
    let mut crash: Option<Crash> = None;
    let mut restarted_at: Option<Instant> = None;
    let deadline = Duration::from_secs(args.timeout_secs);
    let mut last_visible = 0u64;
    let mut last_tick = Instant::now();
    let mut last_metrics = String::new();
    let mut last_change = (Instant::now(), 0u64);
    let mut stalled: Option<String> = None;
    let all_visible_at = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(failure) = production.failure() {
            sink.kill();
            bail!("producing to the mock cluster failed: {failure}");
        }
        if let Some(status) = sink.exited() {
            bail!(
                "sink #{} exited early ({status}); see {}",
                sink.incarnation,
                sink.log.display()
            );
        }
        if let Some(text) = scrape(&scraper, &metrics_url).await {
            *checkpoints.last_mut().expect("one per sink") = metric(
                &text,
                "kbq_checkpoints_total",
                Some("outcome=\"committed\""),
            ) as u64;
            last_metrics = text;
        }
        let visible = progress.update(&emulator.store, &table);
        for (p, end) in progress.ends.iter().enumerate() {
            production.advance(p, *end);
        }
        if let (Some(at), Some(c)) = (restarted_at, crash.as_mut())
            && c.resumed_after.is_none()
            && visible > c.at_visible
        {
            c.resumed_after = Some(at.elapsed());
        }
        if last_tick.elapsed() >= Duration::from_secs(1) {
            let rate =
                (visible.saturating_sub(last_visible)) as f64 / last_tick.elapsed().as_secs_f64();
            println!(
                "  {:>6.1}s  produced {:>8}/{}  visible {:>8}  {:>7.0} rows/s  checkpoints {:>3}  sink #{} pid {}",
                started.elapsed().as_secs_f64(),
                production.delivered(),
                args.records,
                visible,
                rate,
                checkpoints.iter().sum::<u64>(),
                sink.incarnation,
                sink.pid
            );
            last_visible = visible;
            last_tick = Instant::now();
        }
        // The crash: once sink #1 has made the first part visible, the rest is released and the
        // sink is killed as soon as it holds appended rows that are not yet visible (or, if it
        // is too quick for that, once everything is visible).
        if crash.is_none() && visible >= crash_point {
            production.release();
            let appended = metric(&last_metrics, "kbq_rows_appended_total", None) as u64;
            let flushed = metric(&last_metrics, "kbq_rows_flushed_total", None) as u64;
            if appended > flushed || visible >= args.records {
                let pid = sink.pid;
                sink.kill();
                let unflushed = appended.saturating_sub(flushed);
                println!(
                    "  crash: SIGKILL to sink #1 (pid {pid}) with {visible} rows visible and {unflushed} appended but not yet visible; starting sink #2"
                );
                crash = Some(Crash {
                    at_visible: visible,
                    unflushed,
                    pid,
                    resumed_after: None,
                });
                sink = Sink::spawn(&exe, &config_path, workdir, 2)?;
                checkpoints.push(0);
                restarted_at = Some(Instant::now());
                continue;
            }
        }
        if visible >= args.records && production.done() && crash.is_some() {
            break Instant::now();
        }
        // Stop waiting when nothing moves any more (or the deadline passes) and let the check
        // say which records never arrived.
        if visible != last_change.1 {
            last_change = (Instant::now(), visible);
        }
        let stalled_for = last_change.0.elapsed();
        if sink_started.elapsed() > deadline || (stalled_for > STALL && production.waiting()) {
            stalled = Some(format!(
                "only {visible} of {} records became visible (nothing new for {:.0}s)",
                args.records,
                stalled_for.as_secs_f64()
            ));
            break Instant::now();
        }
    };
    let sink_elapsed = all_visible_at - sink_started;

    // One more scrape for the final figures, then a clean stop: SIGTERM runs the final cycle.
    let mut recovery = Vec::new();
    if let Some(text) = scrape(&scraper, &metrics_url).await {
        *checkpoints.last_mut().expect("one per sink") = metric(
            &text,
            "kbq_checkpoints_total",
            Some("outcome=\"committed\""),
        ) as u64;
        if crash.is_some() {
            for outcome in [
                "reflushed",
                "resolve_failed",
                "resolved",
                "rewound",
                "anomaly",
                "failed",
            ] {
                let n = metric(
                    &text,
                    "kbq_recovery_actions_total",
                    Some(&format!("outcome=\"{outcome}\"")),
                ) as u64;
                if n > 0 {
                    recovery.push((outcome.to_string(), n));
                }
            }
        }
    }
    let clean_stop = sink.terminate(Duration::from_secs(60));
    if stalled.is_some() {
        // Let a waiting producer finish: the check then counts what never became visible.
        production.release();
        production.advance_all(u64::MAX - PRODUCE_AHEAD);
    }
    let produced = production.join()?;

    let (visible, check) = verify(&emulator.store, &table, &produced.ends)?;
    Ok(Outcome {
        records: args.records,
        partitions: args.partitions,
        avro_bytes: produced.bytes,
        visible,
        check,
        crash,
        checkpoints,
        recovery,
        sink_elapsed,
        wall: started.elapsed(),
        metrics_url,
        registry_lookups: registry.lookups(),
        clean_stop,
        stalled,
    })
}

/// The table, with the Kafka metadata columns that make the check (and `resolve`) possible.
/// The sink creates tables only from a fixed `.avsc`, so with a registry it is created here.
fn create_table(store: &Arc<Store>) -> anyhow::Result<TableRef> {
    let schema = AvroSchema::parse(SCHEMA).map_err(|e| anyhow!("order schema: {e}"))?;
    let derived = crate::transcode::table_schema_from_avro(
        &schema,
        &DeriveOptions {
            map_mode: MapMode::Repeated,
            metadata: MetadataColumns {
                topic: Some("kafka_topic".into()),
                partition: Some(PARTITION_COLUMN.into()),
                offset: Some(OFFSET_COLUMN.into()),
                timestamp: Some("kafka_timestamp".into()),
                key: None,
                headers: None,
            },
        },
    )
    .map_err(|e| anyhow!("cannot derive the table schema: {e}"))?;
    store
        .insert_dataset(Dataset::new(PROJECT, DATASET))
        .map_err(|e| anyhow!("cannot create the dataset: {e}"))?;
    let table = TableRef::new(PROJECT, DATASET, TABLE);
    store
        .insert_table(Table::new(table.clone(), derived))
        .map_err(|e| anyhow!("cannot create the table: {e}"))?;
    Ok(table)
}

fn sink_config(
    bootstrap: &str,
    registry: &str,
    emulator: SocketAddr,
    metrics: SocketAddr,
) -> String {
    format!(
        r#"# Written by `kafka-bigquery-sink quickstart`: the sink against the in-process services.
kafka:
  bootstrap_servers: "{bootstrap}"
  group_id: {GROUP}
  topics: [{TOPIC}]
  properties:
    # a restarted sink must get its partitions back quickly: the killed member leaves the
    # group only when its session times out
    session.timeout.ms: "3000"
    heartbeat.interval.ms: "300"
schema_registry:
  url: "{registry}"
bigquery:
  project: {PROJECT}
  dataset: {DATASET}
  table: {TABLE}
  endpoint: "http://{emulator}"
  credentials: none
  metadata_columns:
    topic: kafka_topic
    partition: {PARTITION_COLUMN}
    offset: {OFFSET_COLUMN}
    timestamp: kafka_timestamp
dead_letter:
  topic: {DEAD_LETTER_TOPIC}
checkpoint:
  interval: 500ms
metrics:
  listen: "{metrics}"
shutdown_deadline: 20s
log:
  format: text
  level: info
"#
    )
}
