//! `quickstart`: the main job on embedded defaults, in one command and with nothing installed.
//!
//! This process hosts everything the sink talks to — librdkafka's in-process mock Kafka cluster,
//! the BigQuery emulator and a small Schema Registry — all on loopback ports. It produces
//! generated orders ([`records`]) in Confluent framing while the sink runs as a *child process*
//! of the same binary (`run -c`), kills that child with SIGKILL part-way (a real crash: no final
//! checkpoint, appended rows left unflushed), starts a new one, waits until every record is
//! visible, stops the sink cleanly and then checks the table through the Kafka metadata columns:
//! every (partition, offset) exactly once. A child process rather than an in-process pipeline,
//! because only a killed process proves that nothing the crashed incarnation held in memory is
//! needed for exactly-once.

pub mod records;
pub mod registry;

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

use crate::bigquery::table_schema::TableSchema;
use crate::emulator::server::{Emulator, EmulatorConfig};
use crate::emulator::store::{Dataset, Store, Table, TableRef};
use crate::transcode::{AvroSchema, DeriveOptions, MapMode, MetadataColumns};

use self::records::{OrderGenerator, SCHEMA, confluent_frame};
use self::registry::LocalRegistry;

const TOPIC: &str = "orders";
const DEAD_LETTER_TOPIC: &str = "orders-dlq";
const GROUP: &str = "kbq-quickstart";
const PROJECT: &str = "quickstart";
const DATASET: &str = "shop";
const TABLE: &str = "orders";
const SCHEMA_ID: u32 = 1;
const PARTITION_COLUMN: &str = "kafka_partition";
const OFFSET_COLUMN: &str = "kafka_offset";
/// The sink is killed once this share of the records is visible.
const CRASH_AT: f64 = 0.4;
/// How far production may run ahead of what is visible, per partition. librdkafka's mock
/// cluster keeps only the newest 5 MB of each partition (a fixed limit in its source) and drops
/// older records as if retention had deleted them; 3,000 records of at most ~1.3 KB stay below
/// it, so nothing the sink still needs is ever dropped.
const PRODUCE_AHEAD: u64 = 3_000;
/// No new visible row for this long while production waits for the sink: give up and check.
const STALL: Duration = Duration::from_secs(90);

/// Flags of `quickstart`.
#[derive(Debug, Clone, clap::Args)]
pub struct QuickstartArgs {
    /// Records to produce.
    #[arg(long, default_value_t = 300_000)]
    pub records: u64,
    /// Partitions of the topic (one write stream each).
    #[arg(long, default_value_t = 8)]
    pub partitions: i32,
    /// Give up when the records are not all visible after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// Keep the working directory (sink config and logs) even when the run succeeds.
    #[arg(long)]
    pub keep: bool,
}

/// Runs the quickstart; exit code 0 only when exactly-once is verified.
pub fn main(args: QuickstartArgs) -> ExitCode {
    if args.records == 0 || args.partitions < 1 {
        eprintln!("error: --records and --partitions must be at least 1");
        return ExitCode::from(2);
    }
    let workdir = std::env::temp_dir().join(format!("kbq-quickstart-{}", std::process::id()));
    if let Err(error) = std::fs::create_dir_all(&workdir) {
        eprintln!("error: cannot create {}: {error}", workdir.display());
        return ExitCode::FAILURE;
    }
    init_logging(&workdir);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(&args, &workdir));
    let ok = match &result {
        Ok(outcome) => {
            outcome.print();
            outcome.verified()
        }
        Err(error) => {
            println!("quickstart: FAILED: {error:#}");
            false
        }
    };
    if ok && !args.keep {
        let _ = std::fs::remove_dir_all(&workdir);
    } else {
        println!(
            "  sink config and logs kept in {} (sink-1.log, sink-2.log, quickstart.log)",
            workdir.display()
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// This process's own logs (emulator, mock cluster) go to a file: the terminal shows progress.
fn init_logging(workdir: &Path) {
    let Ok(file) = File::create(workdir.join("quickstart.log")) else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(false)
        .with_writer(Mutex::new(file))
        .try_init();
}

/// What one run saw.
struct Outcome {
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

/// The table against the produced records.
#[derive(Debug, Default, PartialEq, Eq)]
struct Check {
    distinct: u64,
    duplicates: u64,
    missing: u64,
    unexpected: u64,
}

impl Outcome {
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

async fn run(args: &QuickstartArgs, workdir: &Path) -> anyhow::Result<Outcome> {
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
    let registry = LocalRegistry::start(HashMap::from([(SCHEMA_ID, SCHEMA.to_string())]))
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

fn free_loopback_port() -> std::io::Result<SocketAddr> {
    // The listener is dropped before the sink binds; the sink's listener sets SO_REUSEADDR, and
    // nothing else on this machine is likely to take the port within the next second.
    let listener = std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    listener.local_addr()
}

async fn scrape(client: &reqwest::Client, url: &str) -> Option<String> {
    client.get(url).send().await.ok()?.text().await.ok()
}

/// The sum of a metric's samples in Prometheus text, over the series whose labels contain
/// `label` (all series without it).
fn metric(text: &str, name: &str, label: Option<&str>) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let series_name = series.split('{').next()?;
            if series_name != name || label.is_some_and(|l| !series.contains(l)) {
                return None;
            }
            value.parse::<f64>().ok()
        })
        .sum()
}

/// The partition and offset columns alone, and their positions: rendering only them keeps
/// reading a large table cheap.
fn offset_columns(store: &Store, table: &TableRef) -> anyhow::Result<(TableSchema, usize, usize)> {
    let schema = store
        .get_table(table)
        .ok_or_else(|| anyhow!("the table is gone"))?
        .schema;
    // Rendering only the two metadata columns keeps the check cheap for large tables.
    let columns = TableSchema {
        fields: schema
            .fields
            .iter()
            .filter(|f| f.name == PARTITION_COLUMN || f.name == OFFSET_COLUMN)
            .cloned()
            .collect(),
    };
    let index = |name: &str| columns.fields.iter().position(|f| f.name == name);
    let (Some(pi), Some(oi)) = (index(PARTITION_COLUMN), index(OFFSET_COLUMN)) else {
        bail!("the table lacks the {PARTITION_COLUMN}/{OFFSET_COLUMN} columns");
    };
    Ok((columns, pi, oi))
}

/// The (partition, offset) of a visible row.
fn row_position(
    row: &crate::emulator::store::VisibleRow,
    columns: &TableSchema,
    pi: usize,
    oi: usize,
) -> Option<(i64, i64)> {
    let cells = row.codec.render(&row.data, columns);
    let cell = |i: usize| {
        cells["f"][i]["v"]
            .as_str()
            .and_then(|v| v.parse::<i64>().ok())
    };
    cell(pi).zip(cell(oi))
}

/// How far each partition is visible, read incrementally from the table's visibility log.
struct Progress {
    columns: TableSchema,
    pi: usize,
    oi: usize,
    read: u64,
    ends: Vec<u64>,
}

impl Progress {
    fn new(store: &Store, table: &TableRef, partitions: i32) -> anyhow::Result<Progress> {
        let (columns, pi, oi) = offset_columns(store, table)?;
        Ok(Progress {
            columns,
            pi,
            oi,
            read: 0,
            ends: vec![0; partitions as usize],
        })
    }

    /// Reads the rows made visible since the last call; returns the visible row count.
    fn update(&mut self, store: &Store, table: &TableRef) -> u64 {
        let Ok(page) = store.read_visible_rows(table, self.read, usize::MAX) else {
            return self.read;
        };
        for row in &page.rows {
            if let Some((p, o)) = row_position(row, &self.columns, self.pi, self.oi)
                && let Some(end) = usize::try_from(p).ok().and_then(|p| self.ends.get_mut(p))
            {
                *end = (*end).max(o as u64 + 1);
            }
        }
        self.read += page.rows.len() as u64;
        self.read
    }
}

/// Every visible row's (partition, offset) against the produced ranges `[0, ends[p])`.
fn verify(store: &Store, table: &TableRef, ends: &[u64]) -> anyhow::Result<(u64, Check)> {
    let (columns, pi, oi) = offset_columns(store, table)?;
    let page = store
        .read_visible_rows(table, 0, usize::MAX)
        .map_err(|e| anyhow!("cannot read the table: {e}"))?;
    let pairs = page
        .rows
        .iter()
        .map(|row| row_position(row, &columns, pi, oi));
    Ok((page.rows.len() as u64, tally(pairs, ends)))
}

/// Counts each (partition, offset) against the produced ranges `[0, ends[p])`; `None` is a row
/// without both values.
fn tally(pairs: impl Iterator<Item = Option<(i64, i64)>>, ends: &[u64]) -> Check {
    let mut seen: Vec<Vec<u8>> = ends.iter().map(|&n| vec![0u8; n as usize]).collect();
    let mut check = Check::default();
    for pair in pairs {
        let slot = pair
            .filter(|&(p, o)| p >= 0 && o >= 0)
            .and_then(|(p, o)| seen.get_mut(p as usize)?.get_mut(o as usize));
        match slot {
            Some(count) => {
                if *count > 0 {
                    check.duplicates += 1;
                } else {
                    check.distinct += 1;
                }
                *count = count.saturating_add(1);
            }
            None => check.unexpected += 1,
        }
    }
    check.missing = seen
        .iter()
        .map(|offsets| offsets.iter().filter(|&&c| c == 0).count() as u64)
        .sum();
    check
}

/// One incarnation of the sink: this binary's `run -c` as a child process.
struct Sink {
    child: Child,
    pid: u32,
    incarnation: u32,
    log: PathBuf,
}

impl Sink {
    fn spawn(exe: &Path, config: &Path, workdir: &Path, incarnation: u32) -> anyhow::Result<Sink> {
        let log = workdir.join(format!("sink-{incarnation}.log"));
        let out = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone().context("cannot share the log file")?;
        let child = Command::new(exe)
            .arg("run")
            .arg("-c")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .context("cannot start the sink")?;
        Ok(Sink {
            pid: child.id(),
            child,
            incarnation,
            log,
        })
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL: a crash, with no final checkpoint.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit; SIGKILL after `grace`.
    fn terminate(&mut self, grace: Duration) -> Result<(), String> {
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet (so the
        // pid cannot have been reused).
        let sent = unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
        if sent != 0 {
            return Err(format!(
                "cannot send SIGTERM to pid {}: {}",
                self.pid,
                std::io::Error::last_os_error()
            ));
        }
        let until = Instant::now() + grace;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(format!(
                        "sink #{} exited with {status}; see {}",
                        self.incarnation,
                        self.log.display()
                    ));
                }
                Ok(None) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                _ => {
                    self.kill();
                    return Err(format!(
                        "sink #{} did not stop within {}s of SIGTERM; see {}",
                        self.incarnation,
                        grace.as_secs(),
                        self.log.display()
                    ));
                }
            }
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

/// Counts acknowledged records and the end offset of each partition.
struct DeliveryCounter {
    delivered: Arc<AtomicU64>,
    failure: Arc<Mutex<Option<String>>>,
    ends: Arc<Mutex<Vec<u64>>>,
}

impl ClientContext for DeliveryCounter {}

impl ProducerContext for DeliveryCounter {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(message) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
                let mut ends = self.ends.lock().expect("ends lock");
                if let Some(end) = ends.get_mut(message.partition() as usize) {
                    *end = (*end).max(message.offset() as u64 + 1);
                }
            }
            Err((error, _)) => {
                self.failure
                    .lock()
                    .expect("failure lock")
                    .get_or_insert_with(|| error.to_string());
            }
        }
    }
}

/// What was produced: bytes of Avro and the end offset of every partition.
struct Produced {
    bytes: u64,
    ends: Vec<u64>,
}

/// The producer thread: generated orders, round-robin over the partitions.
struct Production {
    delivered: Arc<AtomicU64>,
    blocked: Arc<AtomicBool>,
    released: Arc<AtomicBool>,
    window: Arc<Vec<AtomicU64>>,
    finished: Arc<AtomicBool>,
    failure: Arc<Mutex<Option<String>>>,
    thread: std::thread::JoinHandle<anyhow::Result<Produced>>,
}

impl Production {
    /// Produces the first `held_after` records at once and the rest after [`Self::release`].
    fn start(bootstrap: String, records: u64, partitions: i32, held_after: u64) -> Production {
        let delivered = Arc::new(AtomicU64::new(0));
        let released = Arc::new(AtomicBool::new(false));
        let blocked = Arc::new(AtomicBool::new(false));
        let window: Arc<Vec<AtomicU64>> = Arc::new(
            (0..partitions)
                .map(|_| AtomicU64::new(PRODUCE_AHEAD))
                .collect(),
        );
        let finished = Arc::new(AtomicBool::new(false));
        let failure = Arc::new(Mutex::new(None));
        let context = DeliveryCounter {
            delivered: delivered.clone(),
            failure: failure.clone(),
            ends: Arc::new(Mutex::new(vec![0; partitions as usize])),
        };
        let done = finished.clone();
        let failed = failure.clone();
        let gate = Gate {
            at: held_after,
            open: released.clone(),
            window: window.clone(),
            blocked: blocked.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("quickstart-producer".into())
            .spawn(move || {
                let result = produce(&bootstrap, records, partitions, gate, context);
                if let Err(error) = &result {
                    failed
                        .lock()
                        .expect("failure lock")
                        .get_or_insert_with(|| format!("{error:#}"));
                }
                done.store(true, Ordering::Release);
                result
            })
            .expect("spawn the producer thread");
        Production {
            delivered,
            blocked,
            released,
            window,
            finished,
            failure,
            thread,
        }
    }

    /// Lets partition `p` be produced up to `PRODUCE_AHEAD` records past `visible_end`.
    fn advance(&self, p: usize, visible_end: u64) {
        if let Some(w) = self.window.get(p) {
            w.fetch_max(visible_end + PRODUCE_AHEAD, Ordering::AcqRel);
        }
    }

    fn advance_all(&self, visible_end: u64) {
        for p in 0..self.window.len() {
            self.advance(p, visible_end);
        }
    }

    fn release(&self) {
        self.released.store(true, Ordering::Release);
    }

    fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Whether the producer has nothing to do until the sink makes progress (or is finished).
    fn waiting(&self) -> bool {
        self.done() || self.blocked.load(Ordering::Acquire)
    }

    fn done(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    fn failure(&self) -> Option<String> {
        self.failure.lock().expect("failure lock").clone()
    }

    fn join(self) -> anyhow::Result<Produced> {
        self.thread
            .join()
            .map_err(|_| anyhow!("the producer thread panicked"))?
    }
}

/// Where production waits: before record `at` until the first part is visible, and on each
/// partition at the end offset in `window`.
struct Gate {
    at: u64,
    open: Arc<AtomicBool>,
    window: Arc<Vec<AtomicU64>>,
    /// Set while the producer waits.
    blocked: Arc<AtomicBool>,
}

fn produce(
    bootstrap: &str,
    records: u64,
    partitions: i32,
    gate: Gate,
    context: DeliveryCounter,
) -> anyhow::Result<Produced> {
    let ends = context.ends.clone();
    let producer: BaseProducer<DeliveryCounter> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.kbytes", "262144")
        .create_with_context(context)
        .map_err(|e| anyhow!("cannot create the producer: {e}"))?;
    let generator = OrderGenerator::new(2024);
    let (mut body, mut framed) = (Vec::with_capacity(2048), Vec::with_capacity(2048));
    let mut bytes = 0u64;
    for n in 0..records {
        if n == gate.at {
            producer
                .flush(Duration::from_secs(120))
                .map_err(|e| anyhow!("cannot flush the producer: {e}"))?;
            gate.blocked.store(true, Ordering::Release);
            while !gate.open.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(20));
            }
            gate.blocked.store(false, Ordering::Release);
        }
        let partition = (n % partitions as u64) as usize;
        let offset = n / partitions as u64;
        if offset >= gate.window[partition].load(Ordering::Acquire) {
            gate.blocked.store(true, Ordering::Release);
            while offset >= gate.window[partition].load(Ordering::Acquire) {
                producer.poll(Duration::from_millis(5));
            }
            gate.blocked.store(false, Ordering::Release);
        }
        body.clear();
        framed.clear();
        generator.encode(n, &mut body);
        confluent_frame(SCHEMA_ID, &body, &mut framed);
        bytes += framed.len() as u64;
        let key = n.to_string();
        let mut record = BaseRecord::to(TOPIC)
            .partition(partition as i32)
            .key(&key)
            .payload(&framed);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(5));
                }
                Err((e, _)) => bail!("cannot produce record {n}: {e}"),
            }
        }
        if n % 1024 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(|e| anyhow!("cannot flush the producer: {e}"))?;
    let ends = ends.lock().expect("ends lock").clone();
    let acknowledged: u64 = ends.iter().sum();
    if acknowledged != records {
        bail!("{acknowledged} of {records} records acknowledged by the mock cluster");
    }
    let _ = std::io::stdout().flush();
    Ok(Produced { bytes, ends })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_duplicates_gaps_and_strangers() {
        let rows = [
            Some((0, 0)),
            Some((0, 1)),
            Some((0, 1)),
            Some((1, 0)),
            Some((1, 5)),
            Some((2, 0)),
            None,
        ];
        let check = tally(rows.into_iter(), &[3, 2]);
        assert_eq!(
            check,
            Check {
                distinct: 3,
                duplicates: 1,
                missing: 2,
                unexpected: 3,
            }
        );
        let exact = tally([Some((0, 0)), Some((0, 1))].into_iter(), &[2]);
        assert_eq!(exact.duplicates + exact.missing + exact.unexpected, 0);
    }

    #[test]
    fn metric_sums_the_series_that_carry_the_label() {
        let text = "# HELP kbq_checkpoints_total x\n\
                    kbq_checkpoints_total{outcome=\"committed\"} 7\n\
                    kbq_checkpoints_total{outcome=\"empty\"} 3\n\
                    kbq_rows_appended_total{table=\"orders\"} 1000\n\
                    kbq_rows_appended_total{table=\"other\"} 5\n\
                    # EOF\n";
        assert_eq!(
            metric(text, "kbq_checkpoints_total", Some("outcome=\"committed\"")),
            7.0
        );
        assert_eq!(metric(text, "kbq_rows_appended_total", None), 1005.0);
        assert_eq!(metric(text, "kbq_rows_flushed_total", None), 0.0);
    }
}
