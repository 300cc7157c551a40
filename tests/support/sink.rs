//! The daemon under test: a fixture (topic, dead-letter topic, emulator, table, config file) for
//! the real binary (`support::daemon::Daemon`, its logs kept for assertions). Every check
//! of the result goes through the Kafka metadata columns of the table: each (partition, offset)
//! the producer wrote must be visible exactly once.
//!
//! The fixture's own topic and table are the simple case; routing tests add topics
//! (`Fixture::add_topic`), each with the table it is routed to and the metadata columns that
//! table holds, and check every table by (topic, partition, offset) (`wait_exactly_once_in`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use apache_avro::Schema;
use apache_avro::types::Value;
use kbq_core::metadata::CommitMetadata;
use kbq_core::model::TopicPartition;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use kbq_emulator::server::{Emulator, EmulatorConfig};
use kbq_emulator::store::{Dataset, StreamKind, StreamPhase, Table, TableRef};
use rdkafka::consumer::{BaseConsumer, Consumer};

// The daemon process lives in `support::daemon`; re-exported for the tests that import it here.
#[allow(unused_imports)] // not every test binary that includes the fixture runs a daemon
pub use super::daemon::Daemon;
use super::kafka::{
    KafkaBroker, consumer_config, create_topic_blocking, delivered, produce_to_partition, producer,
    send_to_partition, unique_name,
};

pub const SCHEMA: &str = r#"{
  "type": "record", "name": "Order", "namespace": "test",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "created", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "note", "type": ["null", "string"], "default": null}
  ]
}"#;

/// The Avro body of the record with id `id`.
#[allow(deprecated)] // the GenericDatumWriter replacement needs more ceremony for a test helper
pub fn encode(schema: &Schema, id: i64) -> Vec<u8> {
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

/// Confluent wire format: magic 0, the schema id big-endian, the Avro body.
pub fn confluent(schema_id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(0);
    out.extend_from_slice(&schema_id.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A (partition, offset) pair as the metadata columns hold it.
pub type Position = (i64, i64);

/// A (topic, partition, offset) triple as the metadata columns hold it: a row of a table that
/// several topics feed.
pub type Row = (String, i64, i64);

/// The metadata columns a table holds a row's Kafka coordinates in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetadataColumns {
    pub topic: &'static str,
    pub partition: &'static str,
    pub offset: &'static str,
}

/// The metadata columns the fixture's config names (a route may name others).
pub const KAFKA_COLUMNS: MetadataColumns = MetadataColumns {
    topic: "kafka_topic",
    partition: "kafka_partition",
    offset: "kafka_offset",
};

/// A record's key and value.
type KeyValue = (Vec<u8>, Vec<u8>);

/// What produces good records into a topic; shared with background producer threads.
pub struct Source {
    bootstrap: String,
    topic: String,
    /// The table the topic's records are expected in, and the metadata columns it holds.
    table: String,
    columns: MetadataColumns,
    schema: Schema,
    partitions: i32,
    /// Confluent framing with this schema id, or raw Avro.
    framing: Option<u32>,
    next_id: AtomicI64,
    produced: Mutex<BTreeSet<Position>>,
    /// The id of the record at each position `produce` wrote (what its row must hold).
    ids: Mutex<BTreeMap<Position, i64>>,
}

impl Source {
    /// Produces the next `n` ids round-robin over the partitions and waits for every ack.
    pub fn produce(&self, n: i64) {
        let first = self.next_id.fetch_add(n, Ordering::SeqCst);
        let p = producer(&self.bootstrap);
        let mut per: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
        for id in first..first + n {
            let body = encode(&self.schema, id);
            let value = match self.framing {
                Some(schema_id) => confluent(schema_id, &body),
                None => body,
            };
            per.entry((id % self.partitions as i64) as i32)
                .or_default()
                .push((id.to_string().into_bytes(), value));
        }
        // Every partition's records are enqueued before any is waited for: one partition at a
        // time took a loaded broker minutes for 1,200 partitions (tests/e2e_slow/sink_scale.rs).
        let sent: Vec<_> = per
            .iter()
            .map(|(&partition, records)| {
                let refs: Vec<(&[u8], &[u8])> = records
                    .iter()
                    .map(|(k, v)| (k.as_slice(), v.as_slice()))
                    .collect();
                send_to_partition(&p, &self.topic, partition, &refs)
            })
            .collect();
        for ((partition, records), sent) in per.into_iter().zip(sent) {
            let offsets = delivered(sent, partition);
            let mut ids = self.ids.lock().expect("ids");
            for ((key, _), offset) in records.iter().zip(&offsets) {
                let id = std::str::from_utf8(key).expect("key").parse().expect("id");
                ids.insert((partition as i64, *offset), id);
            }
            let mut produced = self.produced.lock().expect("produced");
            produced.extend(offsets.into_iter().map(|o| (partition as i64, o)));
        }
    }

    /// Produces `payloads` to one partition; they are not expected in the table.
    pub fn produce_raw(&self, partition: i32, payloads: &[Vec<u8>]) -> Vec<i64> {
        let p = producer(&self.bootstrap);
        let refs: Vec<(&[u8], &[u8])> = payloads
            .iter()
            .map(|v| (b"bad".as_slice(), v.as_slice()))
            .collect();
        produce_to_partition(&p, &self.topic, partition, &refs)
    }

    /// Marks positions as good records that must be visible.
    pub fn expect(&self, positions: impl IntoIterator<Item = Position>) {
        self.produced.lock().expect("produced").extend(positions);
    }

    pub fn expected(&self) -> BTreeSet<Position> {
        self.produced.lock().expect("produced").clone()
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn table(&self) -> &str {
        &self.table
    }
}

/// A producer thread that keeps producing `batch` records every `every` until stopped.
pub struct BackgroundProducer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BackgroundProducer {
    pub fn start(source: Arc<Source>, batch: i64, every: Duration) -> BackgroundProducer {
        BackgroundProducer::over(vec![source], batch, every)
    }

    /// `batch` records into each of `sources` in turn, every `every`.
    pub fn over(sources: Vec<Arc<Source>>, batch: i64, every: Duration) -> BackgroundProducer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                for source in &sources {
                    source.produce(batch);
                }
                std::thread::sleep(every);
            }
        });
        BackgroundProducer {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops producing; every record produced so far is acknowledged when this returns.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("producer thread");
        }
    }
}

impl Drop for BackgroundProducer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Knobs of the generated daemon config.
#[derive(Clone, Debug)]
pub struct Tweaks {
    /// Confluent-framed input through this registry instead of the fixed `.avsc`; the table must
    /// exist then.
    pub registry_url: Option<String>,
    /// `schema_registry.username` and `password` with a registry.
    pub registry_credentials: Option<(&'static str, &'static str)>,
    /// `schema_registry.not_found_grace` with a registry.
    pub not_found_grace: &'static str,
    /// Lines under `recovery:` (indented by the caller's two spaces).
    pub recovery: Vec<String>,
    /// Lines under `writer:`.
    pub writer: Vec<String>,
    pub checkpoint_interval: &'static str,
    pub shutdown_deadline: &'static str,
    /// `delivery:` (`exactly_once` | `at_least_once`); left out (the default) when `None`.
    pub delivery: Option<&'static str>,
    /// Topics subscribed instead of the fixture's (when not empty).
    pub topics: Vec<String>,
    /// `kafka.topic_pattern` instead of a topic list.
    pub topic_pattern: Option<String>,
    /// `schema_registry.format` with a registry (`protobuf`, `json_schema`).
    pub format: Option<&'static str>,
    /// `schema_registry.json_validate: true`.
    pub json_validate: bool,
    /// Schemaless JSON (`json: {}`) instead of the fixture's Avro, without a registry.
    pub schemaless_json: bool,
    /// With a registry: `create_table: {}` and `schema_update: add_columns` (or the level
    /// `schema_update` names).
    pub registry_tables: bool,
    /// `bigquery.create_table: {}` (`Some(true)`) or none (`Some(false)`) instead of what the
    /// input implies (created from the fixed `.avsc`, not with a registry).
    pub create_table: Option<bool>,
    /// `bigquery.table` instead of the fixture's table, e.g. the `{topic}` template.
    pub bigquery_table: Option<&'static str>,
    /// Lines under `routes:`.
    pub routes: Vec<String>,
    /// `bigquery.schema_update` on a table that exists (`add_columns`, `none`).
    pub schema_update: Option<&'static str>,
    /// Lines under `kafka.properties:` after the fixture's own (indented by the caller's four
    /// spaces).
    pub kafka_properties: Vec<String>,
    /// The port of `metrics.listen` on loopback; 0 lets the system pick one.
    pub metrics_port: u16,
    /// Appended to the config file's name: two configs of one group that differ in what the
    /// name does not show (e.g. the metrics port of two replicas) need distinct files.
    pub name: Option<&'static str>,
    /// `bigquery.metadata_columns.headers`: the headers column's name.
    pub metadata_headers: Option<&'static str>,
    /// Lines under `dead_letter.properties:` (indented by the caller's four spaces).
    pub dead_letter_properties: Vec<String>,
    /// `bigquery.credentials` (YAML flow text, e.g. `{file: "/x.json"}`) with
    /// `local_emulator: true` instead of `credentials: none`.
    pub credentials: Option<String>,
}

impl Default for Tweaks {
    fn default() -> Self {
        Tweaks {
            registry_url: None,
            registry_credentials: None,
            not_found_grace: "1s",
            recovery: Vec::new(),
            writer: Vec::new(),
            checkpoint_interval: "200ms",
            shutdown_deadline: "20s",
            delivery: None,
            topics: Vec::new(),
            topic_pattern: None,
            format: None,
            json_validate: false,
            schemaless_json: false,
            registry_tables: false,
            create_table: None,
            bigquery_table: None,
            routes: Vec::new(),
            schema_update: None,
            kafka_properties: Vec::new(),
            metrics_port: 0,
            name: None,
            metadata_headers: None,
            dead_letter_properties: Vec::new(),
            credentials: None,
        }
    }
}

pub struct SinkOptions {
    pub partitions: i32,
    /// The fixture's topic instead of a unique `orders-…`.
    pub topic: Option<String>,
    /// The table the topic's records are expected in instead of the topic's name made a table
    /// id (`.` and `-` become `_`, as the `{topic}` template does).
    pub table: Option<String>,
    /// A broker of the test's own (restart tests); the shared one otherwise.
    pub bootstrap: Option<String>,
    pub emulator: EmulatorConfig,
    pub framing: Option<u32>,
}

impl SinkOptions {
    pub fn partitions(partitions: i32) -> SinkOptions {
        SinkOptions {
            partitions,
            topic: None,
            table: None,
            bootstrap: None,
            emulator: EmulatorConfig::local(),
            framing: None,
        }
    }
}

pub struct Fixture {
    pub emulator: Emulator,
    pub bootstrap: String,
    pub topic: String,
    pub dlq: String,
    pub table: String,
    pub dir: tempfile::TempDir,
    pub schema: Schema,
    pub partitions: i32,
    /// The fixture's topic.
    pub source: Arc<Source>,
    /// Every topic records are produced to: the fixture's and those `add_topic` added.
    sources: Mutex<Vec<Arc<Source>>>,
    framing: Option<u32>,
}

impl Fixture {
    pub async fn new(partitions: i32) -> Fixture {
        Fixture::with(SinkOptions::partitions(partitions)).await
    }

    pub async fn with(options: SinkOptions) -> Fixture {
        let mut config = options.emulator;
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        let emulator = Emulator::start(config).await.expect("emulator starts");
        let bootstrap = options
            .bootstrap
            .unwrap_or_else(|| KafkaBroker::shared().to_string());
        let topic = options.topic.unwrap_or_else(|| unique_name("orders"));
        let table = options
            .table
            .unwrap_or_else(|| topic.replace(['.', '-'], "_"));
        let dlq = format!("{topic}-dlq");
        create_topic_blocking(&bootstrap, &topic, options.partitions);
        create_topic_blocking(&bootstrap, &dlq, 1);
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("order.avsc"), SCHEMA).expect("write avsc");
        let schema = Schema::parse_str(SCHEMA).expect("schema");
        let source = Arc::new(Source {
            bootstrap: bootstrap.clone(),
            topic: topic.clone(),
            table: table.clone(),
            columns: KAFKA_COLUMNS,
            schema: schema.clone(),
            partitions: options.partitions,
            framing: options.framing,
            next_id: AtomicI64::new(0),
            produced: Mutex::new(BTreeSet::new()),
            ids: Mutex::new(BTreeMap::new()),
        });
        Fixture {
            emulator,
            bootstrap,
            table,
            topic,
            dlq,
            dir,
            schema,
            partitions: options.partitions,
            sources: Mutex::new(vec![source.clone()]),
            source,
            framing: options.framing,
        }
    }

    /// Creates another topic with `partitions` partitions, whose records (framed as the
    /// fixture's) are expected in `table`, under its metadata columns `columns`.
    pub fn add_topic(
        &self,
        topic: &str,
        partitions: i32,
        table: &str,
        columns: MetadataColumns,
    ) -> Arc<Source> {
        create_topic_blocking(&self.bootstrap, topic, partitions);
        let source = Arc::new(Source {
            bootstrap: self.bootstrap.clone(),
            topic: topic.to_string(),
            table: table.to_string(),
            columns,
            schema: self.schema.clone(),
            partitions,
            framing: self.framing,
            next_id: AtomicI64::new(0),
            produced: Mutex::new(BTreeSet::new()),
            ids: Mutex::new(BTreeMap::new()),
        });
        self.sources.lock().expect("sources").push(source.clone());
        source
    }

    pub fn config(&self, group: &str) -> PathBuf {
        self.config_with(group, &Tweaks::default())
    }

    pub fn config_with(&self, group: &str, tweaks: &Tweaks) -> PathBuf {
        // One file per distinct config: a test may run one group with several of them.
        let mut name = group.to_string();
        let topics = tweaks.topics.join("-");
        for part in [
            tweaks.delivery,
            (!topics.is_empty()).then_some(topics.as_str()),
            tweaks.topic_pattern.as_ref().map(|_| "pattern"),
            tweaks.name,
        ]
        .into_iter()
        .flatten()
        {
            name = format!("{name}-{part}");
        }
        let path = self.dir.path().join(format!("{name}.yaml"));
        let input = match &tweaks.registry_url {
            Some(url) => format!(
                "schema_registry:\n  url: \"{url}\"\n  retries: 2\n  not_found_grace: {}\n{}{}",
                tweaks.not_found_grace,
                tweaks
                    .registry_credentials
                    .map(|(user, password)| format!(
                        "  username: \"{user}\"\n  password: \"{password}\"\n"
                    ))
                    .unwrap_or_default(),
                tweaks
                    .format
                    .map(|f| format!("  format: {f}\n"))
                    .unwrap_or_default()
                    + if tweaks.json_validate {
                        "  json_validate: true\n"
                    } else {
                        ""
                    }
            ),
            None if tweaks.schemaless_json => "json: {}\n".to_string(),
            None => format!(
                "avro:\n  schema_file: \"{}\"\n",
                self.dir.path().join("order.avsc").display()
            ),
        };
        let create_table = if let Some(create) = tweaks.create_table {
            assert!(
                !tweaks.registry_tables && tweaks.schema_update.is_none(),
                "create_table replaces what those set"
            );
            if create {
                "  create_table: {}\n".to_string()
            } else {
                String::new()
            }
        } else if tweaks.registry_tables {
            // `schema_update` set beside it names a level other than `add_columns`.
            let update = tweaks.schema_update.unwrap_or("add_columns");
            format!("  create_table: {{}}\n  schema_update: {update}\n")
        } else if let Some(update) = tweaks.schema_update {
            format!("  schema_update: {update}\n")
        } else if tweaks.registry_url.is_some() || tweaks.schemaless_json {
            String::new()
        } else {
            "  create_table: {}\n".to_string()
        };
        let subscription = match &tweaks.topic_pattern {
            Some(pattern) => format!("topic_pattern: '{pattern}'"),
            None if tweaks.topics.is_empty() => format!("topics: [\"{}\"]", self.topic),
            None => format!(
                "topics: [{}]",
                tweaks
                    .topics
                    .iter()
                    .map(|t| format!("\"{t}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let block = |name: &str, lines: &[String]| {
            if lines.is_empty() {
                String::new()
            } else {
                format!("{name}:\n{}\n", lines.join("\n"))
            }
        };
        let text = format!(
            r#"
kafka:
  bootstrap_servers: "{bootstrap}"
  group_id: "{group}"
  {subscription}
  properties:
    session.timeout.ms: "6000"
    heartbeat.interval.ms: "500"
{properties}{input}bigquery:
  project: p
  dataset: d
  table: "{table}"
  endpoint: "http://{emulator}"
  {credentials}
{create_table}  metadata_columns:
    topic: kafka_topic
    partition: kafka_partition
    offset: kafka_offset
{headers}dead_letter:
  topic: "{dlq}"
{dead_letter_properties}checkpoint:
  interval: {interval}
metrics:
  listen: "127.0.0.1:{metrics_port}"
log:
  format: json
shutdown_deadline: {deadline}
{delivery}{recovery}{writer}{routes}"#,
            bootstrap = self.bootstrap,
            table = tweaks.bigquery_table.unwrap_or(&self.table),
            emulator = self.emulator.addr,
            dlq = self.dlq,
            properties = tweaks
                .kafka_properties
                .iter()
                .map(|line| format!("{line}\n"))
                .collect::<String>(),
            metrics_port = tweaks.metrics_port,
            headers = tweaks
                .metadata_headers
                .map(|h| format!("    headers: {h}\n"))
                .unwrap_or_default(),
            dead_letter_properties = if tweaks.dead_letter_properties.is_empty() {
                String::new()
            } else {
                format!(
                    "  properties:\n{}\n",
                    tweaks.dead_letter_properties.join("\n")
                )
            },
            credentials = match &tweaks.credentials {
                Some(c) => format!("credentials: {c}\n  local_emulator: true"),
                None => "credentials: none".to_string(),
            },
            interval = tweaks.checkpoint_interval,
            deadline = tweaks.shutdown_deadline,
            delivery = tweaks
                .delivery
                .map(|d| format!("delivery: {d}\n"))
                .unwrap_or_default(),
            recovery = block("recovery", &tweaks.recovery),
            writer = block("writer", &tweaks.writer),
            routes = block("routes", &tweaks.routes),
        );
        std::fs::write(&path, text).expect("write config");
        path
    }

    /// Produces the next `n` good records round-robin over the partitions.
    pub fn produce(&self, n: i64) {
        self.source.produce(n);
    }

    pub fn expected(&self) -> BTreeSet<Position> {
        self.source.expected()
    }

    pub fn table_ref(&self) -> TableRef {
        table_ref(&self.table)
    }

    /// Creates the dataset and the table in the emulator: registry input does not create it.
    pub fn create_table(&self, schema: TableSchema) {
        let store = &self.emulator.store;
        store
            .insert_dataset(Dataset::new("p", "d"))
            .expect("dataset");
        store
            .insert_table(Table::new(self.table_ref(), schema))
            .expect("table");
    }

    /// `create_table` with `columns` followed by the metadata columns the fixture's config
    /// names (kafka_topic, kafka_partition, kafka_offset).
    pub fn create_table_with_metadata(&self, mut columns: Vec<TableFieldSchema>) {
        columns.extend([
            TableFieldSchema::new("kafka_topic", FieldType::String, Mode::Required),
            TableFieldSchema::new("kafka_partition", FieldType::Int64, Mode::Required),
            TableFieldSchema::new("kafka_offset", FieldType::Int64, Mode::Required),
        ]);
        self.create_table(TableSchema { fields: columns });
    }

    /// The rendered values of `columns` in every visible row of `table`; none while the table
    /// does not exist.
    fn visible_values<const N: usize>(&self, table: &str, columns: [&str; N]) -> Vec<[String; N]> {
        let store = &self.emulator.store;
        let Some(t) = store.get_table(&table_ref(table)) else {
            return Vec::new();
        };
        let at = columns.map(|name| {
            t.schema
                .fields
                .iter()
                .position(|f| f.name == name)
                .unwrap_or_else(|| panic!("table {table} has no column {name}"))
        });
        let page = store
            .read_visible_rows(&table_ref(table), 0, usize::MAX)
            .expect("rows");
        page.rows
            .iter()
            .map(|row| {
                let r = row.codec.render(&row.data, &t.schema);
                at.map(|i| r["f"][i]["v"].as_str().expect("value").to_string())
            })
            .collect()
    }

    /// Every visible (partition, offset) of the fixture's table, with how often it appears.
    pub fn visible(&self) -> BTreeMap<Position, usize> {
        let mut out = BTreeMap::new();
        let columns = [KAFKA_COLUMNS.partition, KAFKA_COLUMNS.offset];
        for [partition, offset] in self.visible_values(&self.table, columns) {
            *out.entry((int(&partition), int(&offset))).or_insert(0) += 1;
        }
        out
    }

    /// Every visible (topic, partition, offset) of `table`, read from the metadata columns of
    /// the topics routed to it, with how often it appears.
    pub fn visible_rows(&self, table: &str) -> BTreeMap<Row, usize> {
        let c = self.metadata_columns(table);
        let mut out = BTreeMap::new();
        for [topic, partition, offset] in
            self.visible_values(table, [c.topic, c.partition, c.offset])
        {
            *out.entry((topic, int(&partition), int(&offset)))
                .or_insert(0) += 1;
        }
        out
    }

    /// Every (topic, partition, offset) produced to a topic routed to `table`.
    pub fn expected_rows(&self, table: &str) -> BTreeSet<Row> {
        self.routed_to(table)
            .iter()
            .flat_map(|s| {
                s.expected()
                    .into_iter()
                    .map(|(p, o)| (s.topic.clone(), p, o))
            })
            .collect()
    }

    /// The metadata columns of `table`, which every topic routed to it shares.
    fn metadata_columns(&self, table: &str) -> MetadataColumns {
        let sources = self.routed_to(table);
        let columns = sources.first().map(|s| s.columns);
        assert!(
            columns.is_some() && sources.iter().all(|s| Some(s.columns) == columns),
            "the fixture's topics routed to {table} must name its metadata columns, all alike"
        );
        columns.expect("checked")
    }

    fn routed_to(&self, table: &str) -> Vec<Arc<Source>> {
        let sources = self.sources.lock().expect("sources");
        sources
            .iter()
            .filter(|s| s.table == table)
            .cloned()
            .collect()
    }

    /// The column names of `table`, or `None` while it does not exist.
    pub fn table_columns(&self, table: &str) -> Option<Vec<String>> {
        let t = self.emulator.store.get_table(&table_ref(table))?;
        Some(t.schema.fields.iter().map(|f| f.name.clone()).collect())
    }

    /// Rows appended to `table`'s write streams that are not visible and that a flush or a
    /// commit could still make visible: an active BUFFERED stream's rows past its flush cursor,
    /// an uncommitted PENDING stream's rows. Read while a daemon runs, the rows in flight; read
    /// after a SIGKILL, what the crash caught appended and not yet visible.
    pub fn appended_not_visible(&self, table: &str) -> i64 {
        self.emulator
            .store
            .write_streams(&table_ref(table))
            .iter()
            .map(|s| match (s.kind, s.phase) {
                (StreamKind::Buffered, StreamPhase::Active) => {
                    s.row_count - s.flushed_offset.map_or(0, |o| o + 1)
                }
                (StreamKind::Pending, StreamPhase::Active | StreamPhase::Finalized) => s.row_count,
                _ => 0,
            })
            .sum()
    }

    /// Value by value: every record `produce` wrote is exactly one row, and that row holds the
    /// record's own values (id, customer, amount, created, note, as `encode` wrote them) at
    /// its position; no other row is visible. Returns the number of rows checked.
    pub fn assert_rows_hold_their_records(&self) -> usize {
        use kbq_emulator::rows::RenderOptions;
        let ids = self.source.ids.lock().expect("ids").clone();
        let table = self
            .emulator
            .store
            .get_table(&self.table_ref())
            .expect("the table exists");
        let names: Vec<String> = table.schema.fields.iter().map(|f| f.name.clone()).collect();
        let at = |name: &str| {
            names
                .iter()
                .position(|n| n == name)
                .unwrap_or_else(|| panic!("column {name}"))
        };
        let page = self
            .emulator
            .store
            .read_visible_rows(&self.table_ref(), 0, usize::MAX)
            .expect("rows");
        let mut seen: BTreeMap<Position, usize> = BTreeMap::new();
        let mut wrong = Vec::new();
        for row in &page.rows {
            let r = row.codec.render_with(
                &row.data,
                &table.schema,
                RenderOptions {
                    int64_timestamp: true,
                },
            );
            let text = |name: &str| r["f"][at(name)]["v"].as_str().map(str::to_string);
            let int = |name: &str| text(name).and_then(|v| v.parse::<i64>().ok());
            let position = (
                int("kafka_partition").expect("partition"),
                int("kafka_offset").expect("offset"),
            );
            *seen.entry(position).or_default() += 1;
            let Some(&id) = ids.get(&position) else {
                wrong.push(format!("{position:?}: a row no record was produced for"));
                continue;
            };
            let got = (
                int("id"),
                text("customer"),
                text("amount").map(|a| cents(&a)),
                int("created"),
                text("note"),
                text("kafka_topic"),
            );
            let want = (
                Some(id),
                Some(format!("customer-{}", id % 97)),
                Some(id * 7 % 100_000),
                Some(1_700_000_000_000_000 + id),
                (id % 3 == 0).then(|| "n".to_string()),
                Some(self.topic.clone()),
            );
            if got != want {
                wrong.push(format!("{position:?}: got {got:?}, want {want:?}"));
            }
        }
        let dupes: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
        let missing: Vec<_> = ids
            .keys()
            .filter(|p| !seen.contains_key(p))
            .take(5)
            .collect();
        assert!(
            wrong.is_empty() && dupes.is_empty() && missing.is_empty(),
            "{} rows with wrong values, e.g. {:?}; duplicated positions e.g. {dupes:?}; {} records without a row, e.g. {missing:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)],
            ids.keys().filter(|p| !seen.contains_key(p)).count(),
        );
        page.rows.len()
    }

    pub fn visible_count(&self) -> usize {
        self.visible().values().sum()
    }

    /// Waits until at least `at_least` rows are visible (or the timeout passes).
    pub fn wait_visible(&self, at_least: usize, timeout: Duration) -> BTreeMap<Position, usize> {
        let started = Instant::now();
        loop {
            let v = self.visible();
            if v.values().sum::<usize>() >= at_least || started.elapsed() > timeout {
                return v;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every expected position is visible, then checks exactly-once.
    pub fn wait_exactly_once(&self, timeout: Duration) {
        let expected = self.expected();
        let v = self.wait_for(timeout, |v| {
            expected.iter().all(|p| v.contains_key(p)) || v.values().any(|n| *n > 1)
        });
        assert_exactly_once(&v, &expected);
    }

    /// Waits until every record produced to a topic routed to one of `tables` is visible in its
    /// table, then checks that each table holds exactly the records routed to it, once.
    pub fn wait_exactly_once_in(&self, tables: &[&str], timeout: Duration) {
        let expected: Vec<(&str, BTreeSet<Row>)> = tables
            .iter()
            .map(|table| (*table, self.expected_rows(table)))
            .collect();
        let started = Instant::now();
        while started.elapsed() < timeout
            && !expected.iter().all(|(table, rows)| {
                let v = self.visible_rows(table);
                rows.iter().all(|r| v.contains_key(r)) || v.values().any(|n| *n > 1)
            })
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        for (table, rows) in &expected {
            if let Err(why) = exactly_once(&self.visible_rows(table), rows) {
                panic!("table {table}: {why}");
            }
        }
    }

    /// Polls the visible rows until `done` holds for them (or the timeout passes).
    pub fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&BTreeMap<Position, usize>) -> bool,
    ) -> BTreeMap<Position, usize> {
        let started = Instant::now();
        loop {
            let v = self.visible();
            if done(&v) || started.elapsed() > timeout {
                return v;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The dead letters: (source partition, source offset, error class, reason). Waits up to
    /// 30 s for `expect` of them, then reads on until it holds every letter the topic holds (its
    /// high watermark, so a letter the broker has and this consumer has not fetched yet is
    /// counted) and none more arrives for [`EXTRA_LETTER_WAIT`]: a caller that asserts exactly
    /// `expect` sees an extra one.
    pub fn dead_letters(&self, expect: usize) -> Vec<(i64, i64, String, String)> {
        // Assigned, not subscribed: no group to join before the first fetch.
        let consumer: BaseConsumer = consumer_config(&self.bootstrap, &unique_name("dlq-reader"))
            .create()
            .expect("consumer");
        let mut assignment = rdkafka::TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.dlq, 0, rdkafka::Offset::Beginning)
            .expect("the dead-letter topic's partition");
        consumer.assign(&assignment).expect("assign");
        let mut out = Vec::new();
        let started = Instant::now();
        let mut last_read = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if out.len() >= expect && last_read.elapsed() >= EXTRA_LETTER_WAIT {
                let (low, high) = consumer
                    .fetch_watermarks(&self.dlq, 0, Duration::from_secs(10))
                    .expect("dead-letter watermarks");
                if out.len() as i64 >= high - low {
                    break;
                }
            }
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                last_read = Instant::now();
                // As bytes: a dead letter keeps its record's headers, whose keys need not be
                // text (rust-rdkafka's `Headers::iter` panics on such a key).
                let headers = kafka_bigquery_sink::kafka::headers::read(&m);
                let get = |name: &str| {
                    headers
                        .iter()
                        .find(|h| h.key == name.as_bytes())
                        .and_then(|h| h.value.as_ref())
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                        .unwrap_or_default()
                };
                out.push((
                    get("kbq.source.partition").parse().unwrap_or(-1),
                    get("kbq.source.offset").parse().unwrap_or(-1),
                    get("kbq.error.class"),
                    get("kbq.error.reason"),
                ));
            }
        }
        out
    }

    /// How many records the dead-letter topic holds (one partition: its watermarks).
    pub fn dead_letter_count(&self) -> i64 {
        let consumer: BaseConsumer = consumer_config(&self.bootstrap, &unique_name("dlq-count"))
            .create()
            .expect("consumer");
        let (low, high) = consumer
            .fetch_watermarks(&self.dlq, 0, Duration::from_secs(10))
            .expect("dead-letter watermarks");
        high - low
    }

    /// The group's committed offset and parsed metadata per partition of the fixture's topic
    /// (read without joining).
    pub fn checkpoints(&self, group: &str) -> BTreeMap<i32, (i64, CommitMetadata)> {
        self.try_checkpoints(group).expect("read committed offsets")
    }

    /// [`Self::checkpoints`], or the broker's error: a group that has just formed may have no
    /// coordinator yet (`NotCoordinator` while the offsets topic's leader is elected), which a
    /// test that polls from the daemon's start must read as "none yet".
    pub fn try_checkpoints(
        &self,
        group: &str,
    ) -> Result<BTreeMap<i32, (i64, CommitMetadata)>, rdkafka::error::KafkaError> {
        let consumer: BaseConsumer = consumer_config(&self.bootstrap, group)
            .create()
            .expect("consumer");
        let partitions: Vec<TopicPartition> = (0..self.partitions)
            .map(|p| TopicPartition::new(&self.topic, p))
            .collect();
        let read = kafka_bigquery_sink::kafka::consumer::read_committed(
            &consumer,
            &partitions,
            Duration::from_secs(10),
        )?;
        Ok(read
            .into_iter()
            .filter_map(|(tp, c)| {
                let c = c?;
                let meta = CommitMetadata::parse(&c.metadata).expect("our metadata parses");
                Some((tp.partition, (c.offset.0, meta)))
            })
            .collect())
    }

    /// `projects/…/streams/{id}` for a stream id of a checkpoint.
    pub fn stream_name(&self, id: &str) -> String {
        format!("{}/streams/{id}", self.table_ref().path())
    }
}

/// How long [`Fixture::dead_letters`] waits, once it holds the expected letters and every one the
/// topic holds, for one more: a letter whose produce is in flight when the expected ones are read.
pub const EXTRA_LETTER_WAIT: Duration = Duration::from_millis(500);

/// Every expected row (a [`Position`] or a [`Row`]) is visible once, and nothing else is.
pub fn assert_exactly_once<K: Ord + Clone + std::fmt::Debug>(
    visible: &BTreeMap<K, usize>,
    expected: &BTreeSet<K>,
) {
    if let Err(why) = exactly_once(visible, expected) {
        panic!("{why}");
    }
}

fn exactly_once<K: Ord + Clone + std::fmt::Debug>(
    visible: &BTreeMap<K, usize>,
    expected: &BTreeSet<K>,
) -> Result<(), String> {
    let dupes: Vec<_> = visible.iter().filter(|(_, n)| **n > 1).take(5).collect();
    let total_dupes: usize = visible.values().map(|n| n.saturating_sub(1)).sum();
    if !dupes.is_empty() {
        return Err(format!("{total_dupes} duplicate rows, e.g. {dupes:?}"));
    }
    let seen: BTreeSet<K> = visible.keys().cloned().collect();
    let missing: Vec<_> = expected.difference(&seen).take(5).collect();
    let extra: Vec<_> = seen.difference(expected).take(5).collect();
    if !(missing.is_empty() && extra.is_empty()) {
        return Err(format!(
            "missing {} e.g. {missing:?}, unexpected {} e.g. {extra:?} ({} visible, {} expected)",
            expected.difference(&seen).count(),
            seen.difference(expected).count(),
            seen.len(),
            expected.len()
        ));
    }
    Ok(())
}

/// The table `table` names: a table id of the fixture's dataset `d`, or `dataset.table` for a
/// table of another dataset (a table id holds no `.`).
fn table_ref(table: &str) -> TableRef {
    let (dataset, table) = table.split_once('.').unwrap_or(("d", table));
    TableRef::parse(&format!("projects/p/datasets/{dataset}/tables/{table}")).expect("table ref")
}

fn int(text: &str) -> i64 {
    text.parse().expect("int")
}

/// A NUMERIC(12, 2) as rendered (`12.3`, `-4`, `0.05`) in hundredths.
fn cents(text: &str) -> i64 {
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let fraction = format!("{fraction:0<2}");
    assert!(fraction.len() == 2, "scale 2: {text}");
    sign * (whole.parse::<i64>().expect("whole part") * 100
        + fraction.parse::<i64>().expect("fraction"))
}
