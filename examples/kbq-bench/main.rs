//! The end-to-end benchmark driver behind `bench/run.sh` (see BENCHMARKS.md).
//!
//! `kbq-bench run` expects a broker and an emulator already running (the script starts both), and
//! measures, on one preloaded topic: the raw baseline (`kbq-bench raw`, a child process, so that
//! its CPU and memory are its own), then the sink binary in each delivery mode, each from a fresh
//! consumer group, followed by a rate-limited phase for the end-to-end visibility latency.

mod generator;
mod layout;
mod report;
mod threads;

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use clap::{Parser, Subcommand};
use libc::{SIGINT, SIGTERM, kill};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{Value, json};

use layout::{CoreWatch, Layout};
use report::{Latency, LayoutRuns, Row};

#[derive(Debug, Parser)]
#[command(
    name = "kbq-bench",
    about = "End-to-end benchmark of kafka-bigquery-sink"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Preload a topic, then measure the raw baseline and the sink in each delivery mode.
    Run(Box<RunArgs>),
    /// The raw baseline: read every record of a topic with the sink's consumer settings, print
    /// one JSON line and exit.
    Raw {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        topic: String,
    },
}

#[derive(Debug, Clone, clap::Args)]
struct RunArgs {
    /// Kafka bootstrap address (loopback).
    #[arg(long)]
    bootstrap: String,
    /// The emulator's address (gRPC and REST), from its `emulator listening on` line.
    #[arg(long)]
    emulator: String,
    /// The emulator's process id, to report its CPU separately.
    #[arg(long)]
    emulator_pid: Option<u32>,
    /// The sink binary.
    #[arg(long)]
    sink_bin: PathBuf,
    #[arg(long, default_value_t = 2_000_000)]
    records: u64,
    #[arg(long, default_value_t = 16)]
    partitions: i32,
    /// Where the config files, logs and `results.json` go.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value = "1s")]
    checkpoint_interval: String,
    /// Records per second of the latency phase (0 skips it).
    #[arg(long, default_value_t = 2000)]
    latency_rate: u64,
    #[arg(long, default_value_t = 20)]
    latency_secs: u64,
    /// Modes to measure, comma-separated: `exactly_once`, `at_least_once`, `cdc` (an
    /// at-least-once route with `cdc:`, every record an upsert).
    #[arg(long, default_value = "exactly_once,at_least_once,cdc")]
    modes: String,
    /// Layouts to measure, comma-separated: `pinned` (the measured process alone on one core,
    /// the broker, the emulator and the driver on the others), `unpinned` (all on all cores).
    #[arg(long, default_value = "pinned,unpinned")]
    layouts: String,
    /// The core of the measured process in the pinned layout (default: the last usable one).
    #[arg(long)]
    sink_core: Option<usize>,
    /// The broker's process id, to pin it in the pinned layout.
    #[arg(long)]
    broker_pid: Option<u32>,
    /// A ratio to the raw baseline is refused when the raw runs before and after its sink run
    /// differ by more than this fraction (of the smaller).
    #[arg(long, default_value_t = 0.15)]
    raw_tolerance: f64,
    /// An extra librdkafka consumer property `KEY=VALUE` for the sink and the raw baseline
    /// (repeatable).
    #[arg(long = "consumer-property")]
    consumer_properties: Vec<String>,
    /// An extra `writer:` setting `KEY=VALUE` for the sink (repeatable).
    #[arg(long = "writer")]
    writer: Vec<String>,
    /// Record a CPU profile of each sink during its drain (`perf record`, written to
    /// OUT/perf-MODE.data).
    #[arg(long)]
    perf: bool,
    /// Count each sink's task clock, context switches, migrations and page faults during its
    /// drain (`perf stat`, all threads, attached like `--perf`; in `results.json`).
    #[arg(long)]
    perf_stat: bool,
    /// The columns the emulator keeps (its `--keep-columns`), recorded in `results.json`.
    #[arg(long, default_value = "all")]
    emulator_keep_columns: String,
    /// Give up on a phase after this long without progress.
    #[arg(long, default_value_t = 180)]
    stall_secs: u64,
    /// A command the measured processes (each raw consumer and each sink) run under, split at
    /// spaces: `valgrind --tool=callgrind …` for bench/instructions.sh. Each gets its phase's
    /// name (`raw-N`, `sink-LAYOUT-MODE`) in `KBQ_BENCH_PHASE`, for the wrapper's output file,
    /// and a sink is given 15 minutes, not 45 s, to stop after SIGTERM.
    #[arg(long)]
    wrap: Option<String>,
}

impl RunArgs {
    /// The command that runs `program` as phase `phase` in `layout`, under `--wrap` if given.
    fn measured(&self, layout: &Layout, program: &Path, phase: &str) -> Command {
        let wrap: Vec<&str> = self
            .wrap
            .as_deref()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let mut command = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = layout.command(Path::new(first));
                c.args(rest).arg(program);
                c
            }
            None => layout.command(program),
        };
        command.env("KBQ_BENCH_PHASE", phase);
        command
    }
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::Run(args) => run(*args),
        Cmd::Raw { config, topic } => raw(&config, &topic),
    }
}

// ---------------------------------------------------------------------------------------------
// Process statistics from the OS

#[derive(Debug, Clone, Copy, Default)]
struct ProcStats {
    /// utime + stime, seconds.
    cpu_s: f64,
    /// VmHWM (peak resident set), bytes.
    peak_rss: u64,
}

fn proc_stats(pid: u32) -> anyhow::Result<ProcStats> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // the command name is in parentheses and may hold spaces: fields count from the last `)`
    let rest = &stat[stat.rfind(')').ok_or_else(|| anyhow!("bad /proc stat"))? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3
    let ticks: u64 = f[11].parse::<u64>()? + f[12].parse::<u64>()?;
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let peak_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    Ok(ProcStats {
        cpu_s: ticks as f64 / hz,
        peak_rss: peak_kib * 1024,
    })
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as i64
}

// ---------------------------------------------------------------------------------------------
// HTTP (the emulator's REST API and the daemon's /metrics)

struct Http {
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
}

impl Http {
    fn new() -> anyhow::Result<Http> {
        Ok(Http {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
        })
    }

    fn get(&self, url: &str) -> anyhow::Result<(u16, String)> {
        self.rt.block_on(async {
            let resp = self.client.get(url).send().await?;
            let status = resp.status().as_u16();
            Ok((status, resp.text().await?))
        })
    }

    fn delete(&self, url: &str) -> anyhow::Result<u16> {
        self.rt
            .block_on(async { Ok(self.client.delete(url).send().await?.status().as_u16()) })
    }
}

/// The emulator's REST view of one table.
struct Table<'a> {
    http: &'a Http,
    base: String,
}

impl Table<'_> {
    fn new<'a>(http: &'a Http, emulator: &str, table: &str) -> Table<'a> {
        Table {
            http,
            base: format!(
                "http://{emulator}/bigquery/v2/projects/bench/datasets/bench/tables/{table}"
            ),
        }
    }

    /// `totalRows` of `tabledata.list`: the rows a reader sees. None before the table exists.
    fn visible_rows(&self) -> anyhow::Result<Option<u64>> {
        let (status, body) = self.http.get(&format!("{}/data?maxResults=0", self.base))?;
        if status == 404 {
            return Ok(None);
        }
        if status != 200 {
            bail!("tabledata.list answered {status}: {body}");
        }
        let v: Value = serde_json::from_str(&body)?;
        Ok(v["totalRows"].as_str().and_then(|s| s.parse().ok()))
    }

    /// Up to 10,000 visible rows from `start`, each the integers of the `selected` columns
    /// (`tabledata.list` renders INT64 and, with `useInt64Timestamp`, TIMESTAMP as strings).
    fn int_rows(&self, start: u64, selected: &str) -> anyhow::Result<Vec<Vec<i64>>> {
        let url = format!(
            "{}/data?startIndex={start}&maxResults=10000&selectedFields={selected}&formatOptions.useInt64Timestamp=true",
            self.base
        );
        let (status, body) = self.http.get(&url)?;
        if status != 200 {
            bail!("tabledata.list answered {status}: {body}");
        }
        let v: Value = serde_json::from_str(&body)?;
        let rows = v["rows"].as_array().cloned().unwrap_or_default();
        rows.iter()
            .map(|r| {
                let cells = r["f"].as_array().cloned().unwrap_or_default();
                if cells.len() != selected.split(',').count() {
                    bail!("row without the columns {selected}: {r}");
                }
                cells
                    .iter()
                    .map(|c| {
                        c["v"]
                            .as_str()
                            .and_then(|s| s.parse::<i64>().ok())
                            .ok_or_else(|| anyhow!("row without an integer {selected}: {r}"))
                    })
                    .collect()
            })
            .collect()
    }

    /// The number of distinct (`_kafka_partition`, `_kafka_offset`) pairs among the visible
    /// rows: equal to the row count only if no record was written twice.
    fn distinct_records(&self) -> anyhow::Result<u64> {
        let mut seen = std::collections::HashSet::new();
        let mut start = 0u64;
        loop {
            let rows = self.int_rows(start, "_kafka_partition,_kafka_offset")?;
            if rows.is_empty() {
                return Ok(seen.len() as u64);
            }
            start += rows.len() as u64;
            for row in rows {
                seen.insert(row);
            }
        }
    }

    /// The Kafka timestamps (µs) of the visible rows from `start`, in visibility order.
    fn timestamps_from(&self, start: u64) -> anyhow::Result<Vec<i64>> {
        Ok(self
            .int_rows(start, "_kafka_timestamp")?
            .into_iter()
            .map(|row| row[0])
            .collect())
    }

    fn delete(&self) {
        let _ = self.http.delete(&self.base);
    }
}

/// The figures read from the daemon's `/metrics`.
#[derive(Debug, Clone, Default)]
struct Metrics {
    records: f64,
    /// Rows whose appends BigQuery acknowledged (not yet committed in exactly-once mode).
    appended: f64,
    bytes: f64,
    /// kbq_checkpoint_duration_seconds: (upper bound, cumulative count)
    checkpoint_buckets: Vec<(f64, f64)>,
    checkpoint_count: f64,
    checkpoint_sum: f64,
    checkpoints: BTreeMap<String, f64>,
}

fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let at = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let end = labels[at..].find('"')?;
    Some(&labels[at..at + end])
}

fn parse_metrics(text: &str) -> Metrics {
    let mut m = Metrics::default();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.find('{') {
            Some(i) => (&series[..i], &series[i..]),
            None => (series, ""),
        };
        match name {
            "kbq_records_consumed_total" => m.records += value,
            "kbq_rows_appended_total" => m.appended += value,
            "kbq_bytes_consumed_total" => m.bytes += value,
            "kbq_checkpoint_duration_seconds_bucket" => {
                let le = label(labels, "le").unwrap_or("+Inf");
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::INFINITY)
                };
                m.checkpoint_buckets.push((le, value));
            }
            "kbq_checkpoint_duration_seconds_count" => m.checkpoint_count = value,
            "kbq_checkpoint_duration_seconds_sum" => m.checkpoint_sum = value,
            "kbq_checkpoints_total" => {
                let outcome = label(labels, "outcome").unwrap_or("unknown");
                *m.checkpoints.entry(outcome.to_string()).or_default() += value;
            }
            _ => {}
        }
    }
    m.checkpoint_buckets
        .sort_by(|a, b| a.0.partial_cmp(&b.0).expect("bucket bounds are numbers"));
    m
}

impl Metrics {
    /// The checkpoints between `earlier` and `self`.
    fn since(&self, earlier: &Metrics) -> Metrics {
        let mut m = self.clone();
        for (b, e) in m
            .checkpoint_buckets
            .iter_mut()
            .zip(&earlier.checkpoint_buckets)
        {
            b.1 -= e.1;
        }
        m.checkpoint_count -= earlier.checkpoint_count;
        m.checkpoint_sum -= earlier.checkpoint_sum;
        for (k, v) in m.checkpoints.iter_mut() {
            *v -= earlier.checkpoints.get(k).copied().unwrap_or(0.0);
        }
        m
    }

    /// A quantile of the checkpoint durations, interpolated inside its bucket the way
    /// Prometheus' `histogram_quantile` does (the buckets double, so this is an estimate).
    fn checkpoint_quantile(&self, q: f64) -> Option<f64> {
        if self.checkpoint_count <= 0.0 {
            return None;
        }
        let rank = q * self.checkpoint_count;
        let (mut lower, mut below) = (0.0, 0.0);
        for &(le, cum) in &self.checkpoint_buckets {
            if cum >= rank {
                if le.is_infinite() {
                    return Some(lower);
                }
                let inside = cum - below;
                let frac = if inside > 0.0 {
                    (rank - below) / inside
                } else {
                    1.0
                };
                return Some(lower + (le - lower) * frac);
            }
            lower = le;
            below = cum;
        }
        Some(lower)
    }

    fn committed_checkpoints(&self) -> f64 {
        self.checkpoints.get("committed").copied().unwrap_or(0.0)
    }
}

// ---------------------------------------------------------------------------------------------
// Kafka: topic, producer

fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let results = rt.block_on(admin.create_topics(
        &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
    ))?;
    for r in results {
        r.map_err(|(t, e)| anyhow!("cannot create topic {t}: {e}"))?;
    }
    // the topic is usable once every partition has a leader
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(5))?;
        let ready = md.topics().iter().any(|t| {
            t.partitions().len() == partitions as usize
                && t.partitions().iter().all(|p| p.leader() >= 0)
        });
        if ready {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("topic {topic} has no leaders after 60s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// (partition, low watermark, high watermark)
type Watermarks = (i32, i64, i64);

/// The sum of the partitions' high watermarks: how many records a full read returns.
fn topic_end(bootstrap: &str, topic: &str) -> anyhow::Result<(u64, Vec<Watermarks>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let t = md
        .topics()
        .first()
        .ok_or_else(|| anyhow!("topic {topic} not found"))?;
    let mut total = 0;
    let mut parts = Vec::new();
    for p in t.partitions() {
        let (low, high) = consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(10))?;
        total += (high - low) as u64;
        parts.push((p.id(), low, high));
    }
    Ok((total, parts))
}

/// Counts failed deliveries: the preload must be complete or the figures mean nothing.
#[derive(Default)]
struct CountingContext {
    failed: AtomicU64,
}

impl ClientContext for CountingContext {}

impl ProducerContext for CountingContext {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Produced {
    records: u64,
    bytes: u64,
    elapsed: Duration,
}

/// Produces records `seqs` round-robin over the partitions; paced to `rate` records/s if given
/// (the latency phase), as fast as the broker takes them otherwise (the preload).
fn produce(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    seqs: std::ops::Range<u64>,
    rate: Option<u64>,
) -> anyhow::Result<Produced> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("compression.type", "none")
        .set("queue.buffering.max.kbytes", "262144");
    match rate {
        // a latency-minded producer: small batches, sent at once
        Some(_) => config.set("linger.ms", "5"),
        None => config
            .set("linger.ms", "50")
            .set("batch.size", "1000000")
            .set("batch.num.messages", "100000"),
    };
    let producer: BaseProducer<CountingContext> =
        config.create_with_context(CountingContext::default())?;
    let started = Instant::now();
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut value = Vec::with_capacity(2048);
    let first = seqs.start;
    for seq in seqs {
        if let Some(rate) = rate {
            let due = started + Duration::from_secs_f64((seq - first) as f64 / rate as f64);
            let now = Instant::now();
            if due > now {
                producer.poll(Duration::ZERO);
                std::thread::sleep(due - now);
            }
        }
        value.clear();
        let now_us = now_micros();
        generator::encode(seq, &mut value);
        let key = generator::key(seq);
        let partition = (seq % partitions as u64) as i32;
        loop {
            let record = BaseRecord::to(topic)
                .partition(partition)
                .key(&key)
                .payload(&value)
                .timestamp(now_us / 1000);
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
        records += 1;
        bytes += (key.len() + value.len()) as u64;
        if records % 10_000 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(Duration::from_secs(120))?;
    let failed = producer.context().failed.load(Ordering::Relaxed);
    if failed > 0 {
        bail!("{failed} records were not delivered to {topic}");
    }
    Ok(Produced {
        records,
        bytes,
        elapsed: started.elapsed(),
    })
}

// ---------------------------------------------------------------------------------------------
// The raw baseline (child process)

fn raw(config_path: &Path, topic: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    let config = kafka_bigquery_sink::config::Config::load(config_path)
        .map_err(|e| anyhow!("cannot load {}: {e}", config_path.display()))?;
    let mut cc = ClientConfig::new();
    for (k, v) in &config.kafka.consumer_properties().0 {
        cc.set(k, v);
    }
    let consumer: BaseConsumer = cc.create()?;
    let (_, parts) = topic_end(&config.kafka.bootstrap_servers, topic)?;
    let mut tpl = TopicPartitionList::new();
    let mut remaining: BTreeMap<i32, i64> = BTreeMap::new();
    for &(p, low, high) in &parts {
        if high > low {
            // an explicit position, as the sink assigns: `auto.offset.reset` stays `error`
            tpl.add_partition_offset(topic, p, Offset::Offset(low))?;
            remaining.insert(p, high);
        }
    }
    consumer.assign(&tpl)?;
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut first: Option<Duration> = None;
    let mut last_progress = Instant::now();
    while !remaining.is_empty() {
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => {
                first.get_or_insert_with(|| started.elapsed());
                records += 1;
                bytes +=
                    (m.key().map_or(0, <[u8]>::len) + m.payload().map_or(0, <[u8]>::len)) as u64;
                if remaining
                    .get(&m.partition())
                    .is_some_and(|&end| m.offset() + 1 >= end)
                {
                    remaining.remove(&m.partition());
                }
                last_progress = Instant::now();
            }
            Some(Err(e)) => bail!("consumer error: {e}"),
            None if last_progress.elapsed() > Duration::from_secs(120) => {
                bail!("no record for 120s; partitions left: {remaining:?}")
            }
            None => {}
        }
    }
    let last = started.elapsed();
    let stats = proc_stats(std::process::id())?;
    let detail = threads::read(std::process::id())?;
    println!(
        "{}",
        json!({
            "records": records,
            "bytes": bytes,
            "first_record_s": first.unwrap_or_default().as_secs_f64(),
            "last_record_s": last.as_secs_f64(),
            "cpu_s": stats.cpu_s,
            "peak_rss": stats.peak_rss,
            "cpu_detail": detail.to_json(),
        })
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The run

fn run(args: RunArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    check_generator()?;
    let unique = format!(
        "{}{}",
        std::process::id(),
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() % 100_000
    );
    let topic = format!("kbq-bench-{unique}");
    let avsc = args.out.join("order.avsc");
    std::fs::write(&avsc, generator::SCHEMA)?;

    eprintln!(
        "bench: topic {topic}, {} partitions, preloading {} records",
        args.partitions, args.records
    );
    create_topic(&args.bootstrap, &topic, args.partitions)?;
    let pre = produce(
        &args.bootstrap,
        &topic,
        args.partitions,
        0..args.records,
        None,
    )?;
    eprintln!(
        "bench: preloaded {} records, {:.1} MB ({:.0} B/record) in {:.1}s",
        pre.records,
        pre.bytes as f64 / 1e6,
        pre.bytes as f64 / pre.records.max(1) as f64,
        pre.elapsed.as_secs_f64()
    );
    let mut next_seq = args.records;

    let http = Http::new()?;
    let cores = layout::online_cores()?;
    let layouts = args
        .layouts
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| Layout::parse(l, &cores, args.sink_core))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let modes: Vec<&str> = args
        .modes
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .collect();
    let load_before = layout::loadavg();
    eprintln!("bench: load before: {load_before}");
    let mut all = Vec::new();
    // The latency phase runs once per mode, in the unpinned layout (as the daemon runs in
    // production), else in the first.
    let latency_layout = layouts
        .iter()
        .position(|l| matches!(l, Layout::Unpinned { .. }))
        .unwrap_or(0);
    for (i, layout) in layouts.iter().enumerate() {
        // the processes that are not measured: the broker, the emulator and this driver
        let unmeasured: Vec<u32> = [args.broker_pid, args.emulator_pid, Some(std::process::id())]
            .into_iter()
            .flatten()
            .collect();
        if matches!(layout, Layout::Pinned { .. }) && args.broker_pid.is_none() {
            eprintln!("bench: the broker's pid is unknown: it is not pinned");
        }
        layout.place(&unmeasured)?;
        let mut runs = LayoutRuns {
            layout: layout.name().to_string(),
            raws: Vec::new(),
            sinks: Vec::new(),
            load_before: layout::loadavg(),
            load_after: String::new(),
        };
        eprintln!("bench: {} layout, load {}", layout.name(), runs.load_before);
        let raw = |runs: &mut LayoutRuns| -> anyhow::Result<()> {
            let n = runs.raws.len() + 1;
            let row = raw_phase(&args, &topic, &avsc, &unique, layout, n)?;
            eprintln!(
                "bench: {} raw {n}: {:.0} records/s, {:.1} MB/s, {:.2} CPU-s/GB",
                layout.name(),
                row.records_per_s(),
                row.mb_per_s(),
                row.cpu_per_gb()
            );
            runs.raws.push(row);
            Ok(())
        };
        raw(&mut runs)?;
        for mode in &modes {
            let row = sink_phase(
                &args,
                &http,
                &Subject {
                    topic: &topic,
                    avsc: &avsc,
                    unique: &unique,
                },
                mode,
                &mut next_seq,
                layout,
                i == latency_layout,
            )?;
            match &row.not_measured {
                Some(why) => eprintln!("bench: {mode} not measured: {why}"),
                None => eprintln!(
                    "bench: {} {mode}: {:.1} MB/s visible, {} MB/s appended, {:.2} CPU-s/GB",
                    layout.name(),
                    row.mb_per_s(),
                    row.appended_mb_per_s()
                        .map_or("-".into(), |v| format!("{v:.1}")),
                    row.cpu_per_gb()
                ),
            }
            runs.sinks.push(row);
            raw(&mut runs)?;
        }
        runs.load_after = layout::loadavg();
        all.push(runs);
    }
    // leave the broker and the emulator as they were found: on every core
    Layout::Unpinned { all: cores }.place(
        &[args.broker_pid, args.emulator_pid]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>(),
    )?;
    let load_after = layout::loadavg();
    eprintln!("bench: load after: {load_after}");

    let mut text = format!("load before: {load_before}\n\n");
    text.push_str(&report::render_all(&all, args.raw_tolerance));
    text.push_str(&format!("\nload after: {load_after}\n"));
    println!("{text}");
    let results = json!({
        "records": args.records,
        "partitions": args.partitions,
        "record_bytes_mean": pre.bytes as f64 / pre.records.max(1) as f64,
        "checkpoint_interval": args.checkpoint_interval,
        "emulator_keep_columns": args.emulator_keep_columns,
        "preload_seconds": pre.elapsed.as_secs_f64(),
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "raw_tolerance": args.raw_tolerance,
        "loadavg_before": load_before,
        "loadavg_at_end": load_after,
        "layouts": all.iter().map(|r| report::layout_json(r, args.raw_tolerance)).collect::<Vec<_>>(),
    });
    let path = args.out.join("results.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results)? + "\n")?;
    std::fs::write(args.out.join("results.txt"), text)?;
    eprintln!("bench: figures written to {}", path.display());
    Ok(())
}

/// The generator writes Avro by hand: check it against apache-avro's reader before measuring.
fn check_generator() -> anyhow::Result<()> {
    let schema = apache_avro::Schema::parse_str(generator::SCHEMA)?;
    let reader = apache_avro::reader::datum::GenericDatumReader::builder(&schema).build()?;
    for seq in [0, 1, 2, 3, 17, 1_000_003] {
        let mut buf = Vec::new();
        generator::encode(seq, &mut buf);
        let mut rest = buf.as_slice();
        reader
            .read_value(&mut rest)
            .with_context(|| format!("generated record {seq} does not decode"))?;
        if !rest.is_empty() {
            bail!("generated record {seq} has {} trailing bytes", rest.len());
        }
    }
    Ok(())
}

fn write_config(
    args: &RunArgs,
    path: &Path,
    topic: &str,
    group: &str,
    avsc: &Path,
    table: &str,
    mode: &str,
) -> anyhow::Result<()> {
    let cdc = mode == "cdc";
    // The bench's session settings, unless `--consumer-property` sets them (a run under
    // valgrind needs a longer session).
    let given = |key: &str| {
        (args.consumer_properties.iter())
            .any(|p| p.split_once('=').is_some_and(|(k, _)| k.trim() == key))
    };
    let consumer_properties: Vec<String> = [
        ("session.timeout.ms", "10000"),
        ("heartbeat.interval.ms", "1000"),
    ]
    .into_iter()
    .filter(|(k, _)| !given(k))
    .map(|(k, v)| format!("{k}={v}"))
    .chain(args.consumer_properties.iter().cloned())
    .collect();
    let text = format!(
        r#"# generated by kbq-bench
kafka:
  bootstrap_servers: "{bootstrap}"
  group_id: "{group}"
  topics: ["{topic}"]
  properties:
{consumer_properties}avro:
  schema_file: "{avsc}"
bigquery:
  project: bench
  dataset: bench
  table: "{table}"
  endpoint: "http://{emulator}"
  credentials: none
  create_table: {{}}
  metadata_columns:
    partition: _kafka_partition
    offset: _kafka_offset
    timestamp: _kafka_timestamp
{routes}delivery: {delivery}
checkpoint:
  interval: {interval}
on_bad_record: fail
{writer}metrics:
  listen: "127.0.0.1:0"
log:
  format: json
  level: info
shutdown_deadline: 30s
"#,
        bootstrap = args.bootstrap,
        avsc = avsc.display(),
        emulator = args.emulator,
        interval = args.checkpoint_interval,
        routes = if cdc {
            cdc_route(topic, table)
        } else {
            String::new()
        },
        delivery = if cdc { "at_least_once" } else { mode },
        consumer_properties = yaml_pairs(&consumer_properties, "    ")?,
        writer = match yaml_pairs(&args.writer, "  ")? {
            w if w.is_empty() => w,
            w => format!("writer:\n{w}"),
        },
    );
    std::fs::write(path, text)?;
    Ok(())
}

/// The CDC mode (docs/cdc.md): the orders as `unwrapped` change records keyed by their `sequence`
/// (unique per record, so every record stays a row and the exactness check holds), each one an
/// UPSERT on the _default stream.
fn cdc_route(topic: &str, table: &str) -> String {
    format!(
        r#"routes:
  - topics: ["{topic}"]
    table: "{table}"
    create_table: {{}}
    metadata_columns:
      partition: _kafka_partition
      offset: _kafka_offset
      timestamp: _kafka_timestamp
    cdc:
      mode: upsert
      format: unwrapped
      primary_key: [sequence]
"#
    )
}

/// `KEY=VALUE` pairs as YAML mapping lines at `indent`, values quoted.
fn yaml_pairs(pairs: &[String], indent: &str) -> anyhow::Result<String> {
    let mut out = String::new();
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| anyhow!("expected KEY=VALUE, got {pair}"))?;
        out.push_str(&format!(
            "{indent}{}: {}\n",
            k.trim(),
            serde_json::to_string(v)?
        ));
    }
    Ok(out)
}

fn raw_phase(
    args: &RunArgs,
    topic: &str,
    avsc: &Path,
    unique: &str,
    layout: &Layout,
    repetition: usize,
) -> anyhow::Result<Row> {
    let config = args.out.join("raw.yaml");
    let group = format!("kbq-bench-raw-{unique}");
    write_config(args, &config, topic, &group, avsc, "raw", "exactly_once")?;
    let watch = CoreWatch::start(layout);
    let out = args
        .measured(
            layout,
            &std::env::current_exe()?,
            &format!("raw-{repetition}"),
        )
        .args(["raw", "--topic", topic, "--config"])
        .arg(&config)
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        bail!("the raw baseline failed: {}", out.status);
    }
    let v: Value = serde_json::from_slice(&out.stdout).context("raw baseline output")?;
    let num = |k: &str| v[k].as_f64().unwrap_or(0.0);
    Ok(Row {
        name: format!("raw consumer {repetition}"),
        records: num("records") as u64,
        bytes: num("bytes") as u64,
        seconds: num("last_record_s") - num("first_record_s"),
        cpu_s: num("cpu_s"),
        peak_rss: num("peak_rss") as u64,
        core_others_pct: watch.and_then(|w| w.others_pct(num("cpu_s"))),
        cpu_detail: Some(v["cpu_detail"].clone()),
        ..Row::default()
    })
}

/// The sink daemon as a child process, with its stderr kept for the ops address and errors.
struct Daemon {
    child: Child,
    ops: Arc<Mutex<Option<String>>>,
    tail: Arc<Mutex<VecDeque<String>>>,
    /// How long a graceful stop may take before the sink is killed.
    stop_within: Duration,
}

impl Daemon {
    fn start(mut command: Command, config: &Path, log: &Path) -> anyhow::Result<Daemon> {
        let mut child = command
            .arg("run")
            .arg("-c")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {:?}", command.get_program()))?;
        let stderr = child.stderr.take().expect("piped stderr");
        let ops = Arc::new(Mutex::new(None));
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let mut file = std::fs::File::create(log)?;
        let (ops2, tail2) = (ops.clone(), tail.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = writeln!(file, "{line}");
                if line.contains("ops endpoints") {
                    *ops2.lock().expect("ops") = loopback_address(&line);
                }
                let mut t = tail2.lock().expect("tail");
                t.push_back(line);
                if t.len() > 20 {
                    t.pop_front();
                }
            }
        });
        Ok(Daemon {
            child,
            ops,
            tail,
            stop_within: Duration::from_secs(45),
        })
    }

    fn metrics(&self, http: &Http) -> Option<Metrics> {
        let addr = self.ops.lock().expect("ops").clone()?;
        let (status, body) = http.get(&format!("http://{addr}/metrics")).ok()?;
        (status == 200).then(|| parse_metrics(&body))
    }

    /// Why the daemon exited, if it has.
    fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok().flatten()?;
        // let the reader thread drain the last lines
        std::thread::sleep(Duration::from_millis(200));
        let tail = self.tail.lock().expect("tail");
        let why = tail
            .iter()
            .rev()
            .find(|l| l.contains("error") || l.contains("ERROR"))
            .or(tail.back())
            .cloned()
            .unwrap_or_default();
        Some(format!("the sink exited ({status}): {why}"))
    }

    fn stop(mut self) {
        let pid = self.child.id() as i32;
        unsafe { kill(pid, SIGTERM) };
        let deadline = Instant::now() + self.stop_within;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "bench: the sink did not stop within {}s of SIGTERM, killing it",
            self.stop_within.as_secs()
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The first `127.0.0.1:PORT` in a log line.
fn loopback_address(line: &str) -> Option<String> {
    let at = line.find("127.0.0.1:")?;
    let digits: String = line[at + 10..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    (!digits.is_empty()).then(|| format!("127.0.0.1:{digits}"))
}

fn emulator_cpu(args: &RunArgs) -> Option<f64> {
    args.emulator_pid
        .and_then(|pid| proc_stats(pid).ok())
        .map(|s| s.cpu_s)
}

/// The topic every phase reads, its writer schema file, and the suffix that keeps this run's
/// groups and tables apart from other runs'.
struct Subject<'a> {
    topic: &'a str,
    avsc: &'a Path,
    unique: &'a str,
}

fn sink_phase(
    args: &RunArgs,
    http: &Http,
    subject: &Subject<'_>,
    mode: &str,
    next_seq: &mut u64,
    layout: &Layout,
    with_latency: bool,
) -> anyhow::Result<Row> {
    let Subject {
        topic,
        avsc,
        unique,
    } = *subject;
    let name = format!("sink {mode}");
    let (target, _) = topic_end(&args.bootstrap, topic)?;
    let at = format!("{}-{mode}", layout.name());
    let table_name = format!("bench_{mode}_{}_{unique}", layout.name());
    let config = args.out.join(format!("sink-{at}.yaml"));
    write_config(
        args,
        &config,
        topic,
        &format!("kbq-bench-{at}-{unique}"),
        avsc,
        &table_name,
        mode,
    )?;
    let table = Table::new(http, &args.emulator, &table_name);
    // A CDC table's rows are applied when read (docs/cdc.md, "In the emulator"): polling it would
    // make the emulator re-apply the whole log ten times a second. Its rows are on the _default
    // stream, readable once appended, so the drain ends when every append is acknowledged.
    let cdc = mode == "cdc";
    let emu_before = emulator_cpu(args);
    let watch = CoreWatch::start(layout);
    let mut daemon = Daemon::start(
        args.measured(layout, &args.sink_bin, &format!("sink-{at}")),
        &config,
        &args.out.join(format!("sink-{at}.log")),
    )?;
    if args.wrap.is_some() {
        // under valgrind the final checkpoint and the shutdown run ~50x slower
        daemon.stop_within = Duration::from_secs(900);
    }
    let pid = daemon.child.id();
    // perf -p follows only the threads that exist when it attaches: start it once the daemon
    // consumes, when its consumer, librdkafka and runtime threads are all up.
    let mut perf: Option<std::process::Child> = None;
    let mut perf_stat: Option<std::process::Child> = None;
    let perf_stat_file = args.out.join(format!("perfstat-{at}.csv"));
    // the sink's CPU at the first consumed record (its start-up) and at the last acknowledged
    // append (the drain without the wait for the last checkpoint)
    let (mut cpu_at_first, mut cpu_at_appended) = (None, None);
    let stall = Duration::from_secs(args.stall_secs);
    let (mut first, mut last_progress) = (None, Instant::now());
    let mut appended_at: Option<Instant> = None;
    let (mut seen_rows, mut seen_records) = (0u64, 0f64);
    loop {
        if let Some(why) = daemon.exited() {
            return Ok(Row {
                name,
                not_measured: Some(why),
                ..Row::default()
            });
        }
        let (consumed, appended) = daemon
            .metrics(http)
            .map_or((0.0, 0.0), |m| (m.records, m.appended));
        if appended_at.is_none() && appended >= target as f64 {
            appended_at = Some(Instant::now());
            cpu_at_appended = proc_stats(pid).ok().map(|s| s.cpu_s);
        }
        let visible = if cdc {
            appended as u64
        } else {
            table.visible_rows()?.unwrap_or(0)
        };
        if first.is_none() && consumed > 0.0 {
            first = Some(Instant::now());
            cpu_at_first = proc_stats(pid).ok().map(|s| s.cpu_s);
            if args.perf_stat {
                perf_stat = Some(
                    Command::new("perf")
                        .args([
                            "stat",
                            "-e",
                            "task-clock,context-switches,cpu-migrations,page-faults",
                            "-x",
                            ",",
                            "-o",
                        ])
                        .arg(&perf_stat_file)
                        .args(["-p", &pid.to_string()])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .context("cannot start perf stat")?,
                );
            }
            if args.perf {
                perf = Some(
                    Command::new("perf")
                        .args(["record", "-F", "499", "-g", "-o"])
                        .arg(args.out.join(format!("perf-{at}.data")))
                        .args(["-p", &pid.to_string()])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .context("cannot start perf")?,
                );
            }
        }
        if visible >= target {
            break;
        }
        if visible != seen_rows || consumed != seen_records {
            (seen_rows, seen_records, last_progress) = (visible, consumed, Instant::now());
        } else if last_progress.elapsed() > stall {
            bail!(
                "{mode}: no progress for {}s ({visible} of {target} rows visible, {consumed} consumed); log in {}",
                stall.as_secs(),
                args.out.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let done = Instant::now();
    let stats = proc_stats(pid)?;
    let detail = threads::read(pid)?;
    let mut counts = None;
    for (mut p, stat) in [(perf.take(), false), (perf_stat.take(), true)]
        .into_iter()
        .filter_map(|(p, stat)| p.map(|p| (p, stat)))
    {
        // perf writes its file on SIGINT
        unsafe { kill(p.id() as i32, SIGINT) };
        let _ = p.wait();
        if stat {
            counts = std::fs::read_to_string(&perf_stat_file)
                .ok()
                .map(|text| perf_stat_counts(&text));
        }
    }
    let emu_after = emulator_cpu(args);
    let drained = daemon
        .metrics(http)
        .ok_or_else(|| anyhow!("{mode}: no /metrics"))?;
    let mut row = Row {
        name,
        records: target,
        bytes: drained.bytes as u64,
        // the first poll that saw a consumed record is up to one poll late: at most 0.1s
        seconds: (done - first.unwrap_or(done)).as_secs_f64(),
        // at-least-once rows are visible as soon as the emulator takes them, which can be a poll
        // before the sink has read the acknowledgement: never later than `done`
        appended_seconds: first.map(|first| (appended_at.unwrap_or(done) - first).as_secs_f64()),
        cpu_s: stats.cpu_s,
        peak_rss: stats.peak_rss,
        checkpoints: Some(drained.committed_checkpoints()),
        checkpoint_p50: drained.checkpoint_quantile(0.5),
        checkpoint_p99: drained.checkpoint_quantile(0.99),
        emulator_cpu_s: emu_before.zip(emu_after).map(|(b, a)| a - b),
        core_others_pct: watch.and_then(|w| w.others_pct(stats.cpu_s)),
        cpu_detail: Some(json!({
            "process": detail.to_json(),
            "cpu_seconds_at_first_record": cpu_at_first,
            "cpu_seconds_at_last_append": cpu_at_appended,
            "perf_stat_during_drain": counts,
        })),
        ..Row::default()
    };

    let mut expected_rows = target;
    // no latency phase on a CDC table: each poll would re-apply its whole log in the emulator
    if with_latency && !cdc && args.latency_rate > 0 && args.latency_secs > 0 {
        let count = args.latency_rate * args.latency_secs;
        let latency = latency_phase(args, &table, topic, target, *next_seq, count)?;
        *next_seq += count;
        expected_rows += count;
        let after = daemon
            .metrics(http)
            .ok_or_else(|| anyhow!("{mode}: no /metrics"))?;
        let phase = after.since(&drained);
        row.latency = Some(Latency {
            checkpoint_p50: phase.checkpoint_quantile(0.5),
            checkpoint_p99: phase.checkpoint_quantile(0.99),
            ..latency
        });
    }
    daemon.stop();
    // after a graceful stop nothing is in flight: the table holds each record once, or not
    let final_rows = table.visible_rows()?.unwrap_or(0);
    let distinct = table.distinct_records()?;
    row.exact = Some(final_rows == expected_rows && distinct == expected_rows);
    if row.exact != Some(true) {
        eprintln!(
            "bench: {mode}: {final_rows} rows visible ({distinct} distinct records), {expected_rows} records produced"
        );
    }
    // the emulator keeps rows in memory: free them for the next phase
    table.delete();
    Ok(row)
}

/// `perf stat -x,` output as `{event: count}`.
fn perf_stat_counts(text: &str) -> Value {
    let mut counts = serde_json::Map::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(',').collect();
        if let (Some(value), Some(event)) = (f.first(), f.get(2))
            && let Ok(v) = value.trim().parse::<f64>()
        {
            counts.insert(event.trim().to_string(), json!(v));
        }
    }
    Value::Object(counts)
}

/// Produces `count` records at `rate`/s and records, for each, the time from its Kafka timestamp
/// until a `tabledata.list` poll first returned it.
fn latency_phase(
    args: &RunArgs,
    table: &Table<'_>,
    topic: &str,
    visible_before: u64,
    first_seq: u64,
    count: u64,
) -> anyhow::Result<Latency> {
    let rate = args.latency_rate;
    let (bootstrap, partitions) = (args.bootstrap.clone(), args.partitions);
    let topic_owned = topic.to_string();
    let producer = std::thread::spawn(move || {
        produce(
            &bootstrap,
            &topic_owned,
            partitions,
            first_seq..first_seq + count,
            Some(rate),
        )
    });
    let mut latencies_us = Vec::with_capacity(count as usize);
    let mut next = visible_before;
    let mut producer_done_at: Option<Instant> = None;
    let mut producer = Some(producer);
    while (latencies_us.len() as u64) < count {
        let timestamps = table.timestamps_from(next)?;
        let now = now_micros();
        next += timestamps.len() as u64;
        latencies_us.extend(timestamps.iter().map(|ts| now - ts));
        if producer.as_ref().is_some_and(|p| p.is_finished()) {
            producer
                .take()
                .expect("checked above")
                .join()
                .map_err(|_| anyhow!("the latency producer panicked"))??;
            producer_done_at = Some(Instant::now());
        }
        if producer_done_at.is_some_and(|t| t.elapsed() > Duration::from_secs(args.stall_secs)) {
            bail!(
                "latency phase: only {} of {count} records visible",
                latencies_us.len()
            );
        }
        if timestamps.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if let Some(p) = producer {
        p.join()
            .map_err(|_| anyhow!("the latency producer panicked"))??;
    }
    latencies_us.sort_unstable();
    let q = |q: f64| {
        let i = ((latencies_us.len() as f64 * q).ceil() as usize).clamp(1, latencies_us.len());
        latencies_us[i - 1] as f64 / 1000.0
    };
    Ok(Latency {
        rate,
        records: count,
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        max_ms: q(1.0),
        checkpoint_p50: None,
        checkpoint_p99: None,
    })
}
