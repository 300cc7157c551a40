//! The append-only quickstart (the default mode): generated orders through the sink in
//! exactly-once mode, with a SIGKILL of the sink part-way, then the check that every Kafka
//! record became exactly one row ([`super::check`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};

use kbq_emulator::store::{Dataset, Store, Table, TableRef};
use kbq_transcode::{AvroSchema, DeriveOptions, MapMode, MetadataColumns};

use super::check::{Check, Progress, verify};
use super::production::{PRODUCE_AHEAD, Production};
use super::records::SCHEMA;
use super::runner::{Scenario, Services, Setup, supervise};
use super::sink::metric;
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
/// From the crash point until the crash, production runs at most this many records ahead of
/// what is visible: sink #1 then keeps appending rows that only its next checkpoint makes
/// visible, for many cycles, so the supervisor sees rows in flight before the records run out.
const CRASH_TRICKLE: u64 = 1_000;

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
    /// Rows sink #1 had appended (its last scrape before the kill) less the rows visible right
    /// after the kill: a lower bound of what the crash caught appended and not yet visible.
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
                "  crash              SIGKILL to sink #1 (pid {}) at {} visible rows, with at least {} rows appended but not yet visible; sink #2 made rows visible again {} after its start",
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
    let services = Services::start(
        Setup {
            topic: TOPIC,
            dead_letter_topic: DEAD_LETTER_TOPIC,
            partitions: args.partitions,
            table: format!("{PROJECT}.{DATASET}.{TABLE}"),
            schemas: HashMap::from([(SCHEMA_ID, SCHEMA.to_string())]),
            subjects: HashMap::new(),
            config: sink_config,
        },
        workdir,
    )
    .await?;
    let store = services.emulator.store.clone();
    let table = create_table(&store)?;
    let crash_point = (((args.records as f64) * CRASH_AT) as u64).max(1);
    let mut orders = Orders {
        records: args.records,
        production: Production::start(
            services.bootstrap.clone(),
            args.records,
            args.partitions,
            crash_point,
        ),
        progress: Progress::new(&store, &table, args.partitions)?,
        store,
        table,
        crash_point,
        checkpoints: vec![0],
        crash: None,
        restarted_at: None,
        last_visible: 0,
        last_metrics: String::new(),
    };
    let timeout = Duration::from_secs(args.timeout_secs);
    let run = supervise(&mut orders, &services, workdir, started, timeout).await?;
    let recovery = match &run.last_metrics {
        Some(text) => orders.final_figures(text),
        None => Vec::new(),
    };
    let Orders {
        production,
        store,
        table,
        checkpoints,
        crash,
        ..
    } = orders;
    if run.stalled.is_some() {
        // Let a waiting producer finish: the check then counts what never became visible.
        production.release();
        production.advance_all(u64::MAX - PRODUCE_AHEAD);
    }
    let produced = production.join()?;
    let (visible, check) = verify(&store, &table, &produced.ends)?;
    Ok(Outcome {
        records: args.records,
        partitions: args.partitions,
        avro_bytes: produced.bytes,
        visible,
        check,
        crash,
        checkpoints,
        recovery,
        sink_elapsed: run.elapsed,
        wall: started.elapsed(),
        metrics_url: services.metrics_url.clone(),
        registry_lookups: services.registry.lookups(),
        clean_stop: run.clean_stop,
        stalled: run.stalled,
    })
}

/// The append-only scenario as the supervisor drives it: the producer held at the crash point
/// and kept a window ahead of what is visible, progress counted in visible rows.
struct Orders {
    records: u64,
    production: Production,
    progress: Progress,
    store: Arc<Store>,
    table: TableRef,
    crash_point: u64,
    /// Checkpoints committed, per sink.
    checkpoints: Vec<u64>,
    crash: Option<Crash>,
    restarted_at: Option<Instant>,
    /// Visible rows at the last progress line.
    last_visible: u64,
    last_metrics: String,
}

impl Orders {
    /// Takes the last sink's checkpoint count from its final metrics; returns the recovery
    /// actions it took after the crash, by outcome.
    fn final_figures(&mut self, text: &str) -> Vec<(String, u64)> {
        *self.checkpoints.last_mut().expect("one per sink") = committed_checkpoints(text);
        if self.crash.is_none() {
            return Vec::new();
        }
        let outcomes = [
            "reflushed",
            "resolve_failed",
            "resolved",
            "rewound",
            "anomaly",
            "failed",
        ];
        (outcomes.into_iter())
            .filter_map(|outcome| {
                let label = format!("outcome=\"{outcome}\"");
                let n = metric(text, "kbq_recovery_actions_total", Some(&label)) as u64;
                (n > 0).then(|| (outcome.to_string(), n))
            })
            .collect()
    }
}

fn committed_checkpoints(text: &str) -> u64 {
    metric(text, "kbq_checkpoints_total", Some("outcome=\"committed\"")) as u64
}

impl Scenario for Orders {
    fn produce(&mut self) -> anyhow::Result<()> {
        match self.production.failure() {
            Some(failure) => bail!("producing to the mock cluster failed: {failure}"),
            None => Ok(()),
        }
    }

    fn observe(&mut self, metrics: Option<&str>) -> anyhow::Result<u64> {
        if let Some(text) = metrics {
            *self.checkpoints.last_mut().expect("one per sink") = committed_checkpoints(text);
            self.last_metrics = text.to_string();
        }
        let visible = self.progress.update(&self.store, &self.table);
        for (p, end) in self.progress.ends.iter().enumerate() {
            self.production.advance(p, *end);
        }
        if let (Some(at), Some(c)) = (self.restarted_at, self.crash.as_mut())
            && c.resumed_after.is_none()
            && visible > c.at_visible
        {
            c.resumed_after = Some(at.elapsed());
        }
        Ok(visible)
    }

    fn status(&mut self, visible: u64, since: Duration) -> String {
        let rate = (visible.saturating_sub(self.last_visible)) as f64 / since.as_secs_f64();
        self.last_visible = visible;
        format!(
            "produced {:>8}/{}  visible {:>8}  {:>7.0} rows/s  checkpoints {:>3}",
            self.production.delivered(),
            self.records,
            visible,
            rate,
            self.checkpoints.iter().sum::<u64>(),
        )
    }

    /// Once sink #1 has made the first part visible, production trickles a little ahead of what
    /// is visible, and the sink is killed as soon as it has appended rows (by its last scrape)
    /// that the table, read after that scrape, does not show: rows in flight. Only a run too
    /// small to have any is killed once everything is visible.
    fn crash_due(&mut self, visible: u64) -> bool {
        if visible < self.crash_point {
            return false;
        }
        if self.appended() > visible || visible >= self.records {
            return true;
        }
        self.production.release_up_to(visible + CRASH_TRICKLE);
        false
    }

    fn crashed(&mut self, pid: u32, _: u64) -> anyhow::Result<String> {
        // Sink #1 is dead: what the table shows now is all it made visible (sink #2 is not
        // started yet), so its appended rows beyond that were caught in flight.
        let visible = self.progress.update(&self.store, &self.table);
        let unflushed = self.appended().saturating_sub(visible);
        self.crash = Some(Crash {
            at_visible: visible,
            unflushed,
            pid,
            resumed_after: None,
        });
        Ok(format!(
            "crash: SIGKILL to sink #1 (pid {pid}) with {visible} rows visible and {unflushed} appended but not yet visible; starting sink #2"
        ))
    }

    fn restarted(&mut self) {
        self.production.release();
        self.checkpoints.push(0);
        self.restarted_at = Some(Instant::now());
    }

    fn done(&self, visible: u64) -> bool {
        visible >= self.records && self.production.done()
    }

    fn may_stall(&self) -> bool {
        self.production.waiting()
    }

    fn stall_reason(&self, visible: u64, stalled_for: Duration) -> String {
        format!(
            "only {visible} of {} records became visible (nothing new for {:.0}s)",
            self.records,
            stalled_for.as_secs_f64()
        )
    }
}

impl Orders {
    /// Rows sink #1 had appended by its last scrape (acknowledged by AppendRows; in
    /// exactly-once mode visible only once a checkpoint flushes them).
    fn appended(&self) -> u64 {
        metric(&self.last_metrics, "kbq_rows_appended_total", None) as u64
    }
}

/// The table, with the Kafka metadata columns that make the check (and `resolve`) possible.
/// The sink creates tables only from a fixed `.avsc`, so with a registry it is created here.
fn create_table(store: &Arc<Store>) -> anyhow::Result<TableRef> {
    let schema = AvroSchema::parse(SCHEMA).map_err(|e| anyhow!("order schema: {e}"))?;
    let derived = kbq_transcode::table_schema_from_avro(
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
            transforms: Vec::new(),
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
