//! `quickstart --cdc`: change data capture on embedded defaults (docs/cdc.md). A seeded source
//! database ([`super::cdc_source`]) streams its change log in Debezium's shape — snapshot reads,
//! creates, updates, deletes with their tombstones, re-inserts of deleted keys — into a topic;
//! the sink, a child process with a CDC route, writes it into a table it creates with the primary
//! key of the Kafka key's schema. Sink #1 is killed with SIGKILL while it has written changes
//! whose offsets are not committed yet; sink #2 resumes from the committed offsets and writes
//! those changes again. Once the group's offsets reach the end of the topic, the table is read
//! as a query reads it and compared with the source table key by key ([`super::cdc_check`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use rdkafka::TopicPartitionList;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::Offset;

use kbq_emulator::store::{Dataset, Store, TableRef};

use super::cdc_check::{COLUMNS, KeyCheck, verify};
use super::cdc_source::{Counts, ENVELOPE, KEY, KEY_ID, Source, VALUE_ID};
use super::runner::{Scenario, Services, Setup, supervise};
use super::sink::metric;
use super::{QuickstartArgs, Report};

const TOPIC: &str = "dbserver1.inventory.customers";
const DEAD_LETTER_TOPIC: &str = "dbserver1.inventory.customers-dlq";
const GROUP: &str = "kbq-quickstart-cdc";
const PROJECT: &str = "quickstart";
const DATASET: &str = "inventory";
const TABLE: &str = "customers";
/// The seed of the source's change schedule: every run writes the same change log.
const SEED: u64 = 0x00c0_ffee_0cdc;
/// The change log is streamed over this many ticks of 100 ms (about 4 s), whatever its size.
const PRODUCE_TICKS: u64 = 40;
/// Sink #1 is killed once this share of the change events is produced and it holds changes
/// written past the committed offsets.
const CRASH_AT: f64 = 0.5;

/// What one run saw.
pub(super) struct Outcome {
    partitions: i32,
    counts: Counts,
    records: u64,
    crash: Option<Crash>,
    /// UPSERT and DELETE rows each sink wrote, from its metrics.
    written: Vec<(u64, u64)>,
    primary_key: Vec<String>,
    check: KeyCheck,
    dead_letters: u64,
    wall: Duration,
    metrics_url: String,
    clean_stop: Result<(), String>,
    stalled: Option<String>,
}

struct Crash {
    pid: u32,
    produced: u64,
    appended: u64,
    committed: u64,
}

impl Report for Outcome {
    fn verified(&self) -> bool {
        self.check.equal_everywhere()
            && self.crash.is_some()
            && self.dead_letters == 0
            && self.clean_stop.is_ok()
            && self.stalled.is_none()
    }

    fn print(&self) {
        let c = &self.counts;
        println!();
        println!("quickstart --cdc summary");
        println!(
            "  change log         {} events to {} partitions of {TOPIC} ({} records with the tombstones): {} snapshot reads (r), {} creates (c, {} of them re-inserts of a deleted key), {} updates (u), {} deletes (d) each followed by its tombstone",
            c.events(),
            self.partitions,
            self.records,
            c.reads,
            c.creates,
            c.reinserts,
            c.updates,
            c.deletes
        );
        match &self.crash {
            Some(k) => println!(
                "  crash              SIGKILL to sink #1 (pid {}) with {} of {} records produced, at least {} written to BigQuery and the group's offsets committed up to {}: sink #2 resumed there and wrote at least {} changes again, whose sequence numbers lose to the later changes of their keys",
                k.pid,
                k.produced,
                self.records,
                k.appended,
                k.committed,
                k.appended.saturating_sub(k.committed)
            ),
            None => println!("  crash              none"),
        }
        let per: Vec<String> = self
            .written
            .iter()
            .enumerate()
            .map(|(i, (u, d))| format!("sink #{}: {u} upserts, {d} deletes", i + 1))
            .collect();
        println!("  rows written       {}", per.join("; "));
        println!(
            "  table              {PROJECT}.{DATASET}.{TABLE}, primary key ({}) from subject {TOPIC}-key, created by the sink",
            self.primary_key.join(", ")
        );
        let k = &self.check;
        println!(
            "  compared           the {} rows of the source table with the {} rows of the BigQuery table (as a query reads them), key by key, columns {}",
            k.source_rows,
            k.table_rows,
            COLUMNS.join(", ")
        );
        println!("  equal              {} keys", k.equal);
        println!(
            "  missing            {} (rows of the source not in the table)",
            k.missing
        );
        println!(
            "  extra              {} (rows in the table the source deleted or never had)",
            k.extra
        );
        println!(
            "  differs            {} (rows with other values than the source's, e.g. an older version)",
            k.differs
        );
        if k.duplicate_keys > 0 {
            println!("  duplicate keys     {}", k.duplicate_keys);
        }
        if !k.examples.is_empty() {
            println!("  for example        {}", k.examples.join("; "));
        }
        println!("  dead letters       {}", self.dead_letters);
        println!("  wall time          {:.1}s", self.wall.as_secs_f64());
        println!(
            "  clean stop         {}",
            match &self.clean_stop {
                Ok(()) => format!("sink #{} stopped on SIGTERM (exit 0)", self.written.len()),
                Err(e) => format!("FAILED: {e}"),
            }
        );
        println!(
            "  metrics            {} while the sink runs (kbq_cdc_changes_total and the other kbq_* series, see docs/metrics.md)",
            self.metrics_url
        );
        if let Some(stalled) = &self.stalled {
            println!("  stalled            {stalled}");
        }
        println!();
        let line = format!(
            "source_rows={} table_rows={} equal={} missing={} extra={} differs={}",
            k.source_rows, k.table_rows, k.equal, k.missing, k.extra, k.differs
        );
        if self.verified() {
            println!("quickstart: cdc verified, the table equals the source: {line}");
        } else {
            println!("quickstart: FAILED: {line}");
        }
    }
}

pub(super) async fn run(args: &QuickstartArgs, workdir: &Path) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    println!(
        "quickstart --cdc: {} Debezium change events of a {}-row source table through kafka-bigquery-sink into a CDC table, with a crash in the middle",
        args.changes, args.keys
    );
    // Debezium's converter registers the value and key schemas under the TopicNameStrategy
    // subjects; the sink reads both to create the table.
    let services = Services::start(
        Setup {
            topic: TOPIC,
            dead_letter_topic: DEAD_LETTER_TOPIC,
            partitions: args.partitions,
            table: format!("{PROJECT}.{DATASET}.{TABLE}"),
            schemas: HashMap::from([(VALUE_ID, ENVELOPE.to_string()), (KEY_ID, KEY.to_string())]),
            subjects: HashMap::from([
                (format!("{TOPIC}-value"), VALUE_ID),
                (format!("{TOPIC}-key"), KEY_ID),
            ]),
            config: sink_config,
        },
        workdir,
    )
    .await?;
    let store = services.emulator.store.clone();
    store
        .insert_dataset(Dataset::new(PROJECT, DATASET))
        .map_err(|e| anyhow!("cannot create the dataset: {e}"))?;
    let table = TableRef::new(PROJECT, DATASET, TABLE);
    let mut changes = Changes {
        changes: args.changes,
        producer: ClientConfig::new()
            .set("bootstrap.servers", &services.bootstrap)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .create()
            .map_err(|e| anyhow!("cannot create the producer: {e}"))?,
        group: GroupOffsets::new(&services.bootstrap, args.partitions)?,
        source: Source::new(SEED, args.keys, args.partitions)?,
        ends: vec![0; args.partitions as usize],
        per_tick: args.changes.div_ceil(PRODUCE_TICKS),
        crash_point: ((args.changes as f64 * CRASH_AT) as u64).max(1),
        store: store.clone(),
        table: table.clone(),
        written: vec![(0, 0)],
        crash: None,
        appended: 0,
        committed: Vec::new(),
    };
    let timeout = Duration::from_secs(args.timeout_secs);
    let run = supervise(&mut changes, &services, workdir, started, timeout).await?;
    if let Some(text) = &run.last_metrics {
        *changes.written.last_mut().expect("one per sink") = changes_written(text);
    }
    let check = verify(&store, &table, &changes.source.state)?;
    let primary_key = (store.get_table(&table))
        .map(|t| t.primary_key())
        .unwrap_or_default();
    let dead_letters = GroupOffsets::end_of(&services.bootstrap, DEAD_LETTER_TOPIC)?;
    Ok(Outcome {
        partitions: args.partitions,
        counts: changes.source.counts.clone(),
        records: changes.ends.iter().sum(),
        crash: changes.crash,
        written: changes.written,
        primary_key,
        check,
        dead_letters,
        wall: started.elapsed(),
        metrics_url: services.metrics_url.clone(),
        clean_stop: run.clean_stop,
        stalled: run.stalled,
    })
}

/// The CDC scenario as the supervisor drives it: the change log streamed a slice per tick,
/// progress counted in the group's committed offsets.
struct Changes {
    /// Change events to produce (tombstones not counted).
    changes: u64,
    producer: BaseProducer,
    group: GroupOffsets,
    source: Source,
    /// Records produced per partition.
    ends: Vec<u64>,
    per_tick: u64,
    crash_point: u64,
    store: Arc<Store>,
    table: TableRef,
    /// UPSERT and DELETE rows each sink wrote.
    written: Vec<(u64, u64)>,
    crash: Option<Crash>,
    /// Records the current sink wrote, from its metrics.
    appended: u64,
    /// The group's committed offset per partition, as of this tick.
    committed: Vec<u64>,
}

/// UPSERT and DELETE rows a sink wrote, from its metrics.
fn changes_written(text: &str) -> (u64, u64) {
    (
        metric(text, "kbq_cdc_changes_total", Some("change=\"upsert\"")) as u64,
        metric(text, "kbq_cdc_changes_total", Some("change=\"delete\"")) as u64,
    )
}

impl Changes {
    fn produced(&self) -> u64 {
        self.ends.iter().sum()
    }

    fn all_produced(&self) -> bool {
        self.source.counts.events() >= self.changes
    }
}

impl Scenario for Changes {
    /// The next slice of the change log, acknowledged before the tick ends.
    fn produce(&mut self) -> anyhow::Result<()> {
        let mut n = 0;
        while n < self.per_tick && !self.all_produced() {
            for change in self.source.next_change()? {
                let mut record = BaseRecord::<[u8], [u8]>::to(TOPIC)
                    .partition(change.partition)
                    .key(change.key.as_slice());
                if let Some(value) = &change.value {
                    record = record.payload(value.as_slice());
                }
                (self.producer)
                    .send(record)
                    .map_err(|(e, _)| anyhow!("cannot produce: {e}"))?;
                self.ends[change.partition as usize] += 1;
            }
            n += 1;
        }
        if n > 0 {
            (self.producer)
                .flush(Duration::from_secs(30))
                .map_err(|e| anyhow!("cannot flush the producer: {e}"))?;
        }
        Ok(())
    }

    fn observe(&mut self, metrics: Option<&str>) -> anyhow::Result<u64> {
        if let Some(text) = metrics {
            self.appended = metric(text, "kbq_rows_appended_total", None) as u64;
            *self.written.last_mut().expect("one per sink") = changes_written(text);
        }
        self.committed = self.group.committed()?;
        Ok(self.committed.iter().sum())
    }

    fn status(&mut self, committed: u64, _since: Duration) -> String {
        format!(
            "changes {:>7}/{}  records {:>7}  written {:>7}  committed {:>7}  table rows {:>6}",
            self.source.counts.events(),
            self.changes,
            self.produced(),
            self.appended,
            committed,
            self.store.visible_row_count(&self.table).unwrap_or(0),
        )
    }

    /// While sink #1 holds changes written to BigQuery whose offsets are not committed (or, if
    /// it is too quick for that, once it has written everything).
    fn crash_due(&mut self, committed: u64) -> bool {
        self.source.counts.events() >= self.crash_point
            && (self.appended > committed
                || (self.all_produced() && self.appended >= self.produced()))
    }

    fn crashed(&mut self, pid: u32, _committed: u64) -> anyhow::Result<String> {
        // Read after the kill: a dead sink commits nothing more.
        let committed: u64 = self.group.committed()?.iter().sum();
        let appended = self.appended;
        self.crash = Some(Crash {
            pid,
            produced: self.produced(),
            appended,
            committed,
        });
        Ok(format!(
            "crash: SIGKILL to sink #1 (pid {pid}) with at least {appended} records written and offsets committed up to {committed}; starting sink #2"
        ))
    }

    fn restarted(&mut self) {
        self.written.push((0, 0));
    }

    fn done(&self, _committed: u64) -> bool {
        self.all_produced() && self.committed.iter().zip(&self.ends).all(|(c, e)| c >= e)
    }

    fn stall_reason(&self, committed: u64, stalled_for: Duration) -> String {
        format!(
            "the group's offsets reached {committed} of {} records (nothing new for {:.0}s)",
            self.produced(),
            stalled_for.as_secs_f64()
        )
    }
}

/// The sink's consumer group, read from the outside: its committed offset per partition.
struct GroupOffsets {
    consumer: BaseConsumer,
    partitions: i32,
}

impl GroupOffsets {
    fn new(bootstrap: &str, partitions: i32) -> anyhow::Result<GroupOffsets> {
        // Never subscribes: it only reads the group's offsets and takes no partitions.
        let consumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", GROUP)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|e| anyhow!("cannot create the offset reader: {e}"))?;
        Ok(GroupOffsets {
            consumer,
            partitions,
        })
    }

    fn committed(&self) -> anyhow::Result<Vec<u64>> {
        let mut tpl = TopicPartitionList::new();
        for p in 0..self.partitions {
            tpl.add_partition(TOPIC, p);
        }
        let got = tokio::task::block_in_place(|| {
            self.consumer.committed_offsets(tpl, Duration::from_secs(5))
        })
        .map_err(|e| anyhow!("cannot read the group's committed offsets: {e}"))?;
        Ok((0..self.partitions)
            .map(|p| match got.find_partition(TOPIC, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) if o > 0 => o as u64,
                _ => 0,
            })
            .collect())
    }

    /// The end offset of partition 0 of `topic` (records in a one-partition topic).
    fn end_of(bootstrap: &str, topic: &str) -> anyhow::Result<u64> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .map_err(|e| anyhow!("cannot create a consumer: {e}"))?;
        let (_, high) = tokio::task::block_in_place(|| {
            consumer.fetch_watermarks(topic, 0, Duration::from_secs(5))
        })
        .map_err(|e| anyhow!("cannot read the end of {topic}: {e}"))?;
        Ok(high.max(0) as u64)
    }
}

fn sink_config(
    bootstrap: &str,
    registry: &str,
    emulator: SocketAddr,
    metrics: SocketAddr,
) -> String {
    format!(
        r#"# Written by `kafka-bigquery-sink quickstart --cdc`: a CDC route against the in-process
# services (docs/cdc.md).
kafka:
  bootstrap_servers: "{bootstrap}"
  group_id: {GROUP}
  topics: ["{TOPIC}"]
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
routes:
  - topics: ["{TOPIC}"]
    table: {TABLE}
    create_table: {{}}             # columns from the envelope's row, primary key from {TOPIC}-key
    cdc:
      mode: upsert_delete
      format: debezium
delivery: at_least_once          # BigQuery applies changes only on the _default stream
dead_letter:
  topic: "{DEAD_LETTER_TOPIC}"
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
