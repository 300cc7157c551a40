//! The daemon's YAML configuration (README, "Configuration reference"): typed sections, `${ENV}`
//! substitution, every default in [`defaults`], and [`validate`], which checks a parsed config
//! without any I/O and names the field path of every error.
//!
//! Loading runs in two steps. [`Config::from_yaml`] parses (unknown keys are errors everywhere,
//! `${NAME}` and `${NAME:-default}` are substituted in unquoted values, a missing variable
//! without a default is an error naming it) and reports parse errors with their field path and
//! line. [`validate`] then checks the rules between fields and returns every violation at once.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use crate::kafka::topic_pattern::TopicPattern;

/// Every default of the config, in one place. The doc comment of each field says which one
/// applies.
mod cdc;

pub use cdc::{CdcConfig, CdcFormat, CdcMode, MAX_KEY_COLUMNS, SequenceConfig};

pub mod defaults {
    use super::ByteSize;
    use std::time::Duration;

    /// The first section of CDC sequence numbers until an operator raises it.
    pub const CDC_SEQUENCE_EPOCH: u64 = 0;

    pub const PARTITION_ASSIGNMENT_STRATEGY: &str = "cooperative-sticky";
    /// librdkafka properties the sink sets unless `kafka.properties` does.
    pub const CONSUMER_PROPERTIES: &[(&str, &str)] = &[
        ("queued.max.messages.kbytes", "16384"),
        ("fetch.max.bytes", "16777216"),
        ("fetch.queue.backoff.ms", "20"),
    ];
    pub const SCHEMA_REGISTRY_TIMEOUT: Duration = Duration::from_secs(10);
    pub const SCHEMA_REGISTRY_RETRIES: u32 = 5;
    /// A 404 from the registry can be transient (failover, restore).
    pub const SCHEMA_REGISTRY_NOT_FOUND_GRACE: Duration = Duration::from_secs(60);
    /// The TopicNameStrategy subject of a topic's values.
    pub const SCHEMA_REGISTRY_TABLE_SUBJECT: &str = "{topic}-value";
    pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5);
    pub const CHECKPOINT_BARRIER_TIMEOUT: Duration = Duration::from_secs(10);
    pub const COMMIT_FAILURE_ISOLATION_THRESHOLD: u32 = 5;
    /// Long enough for a slow BigQuery answer and a recovery; short enough that a stuck
    /// partition turns readiness false within minutes.
    pub const PARTITION_STALL_TIMEOUT: Duration = Duration::from_secs(120);
    /// The broker default of `offset.metadata.max.bytes`.
    pub const CHECKPOINT_METADATA_MAX_BYTES: u32 = 4096;
    pub const WRITER_MAX_REQUEST_BYTES: ByteSize = ByteSize(8 * 1024 * 1024);
    pub const WRITER_MAX_ROWS_PER_REQUEST: u32 = 50_000;
    pub const WRITER_LINGER: Duration = Duration::from_millis(50);
    pub const WRITER_MAX_INFLIGHT_REQUESTS: u32 = 4;
    pub const WRITER_MAX_INFLIGHT_BYTES: ByteSize = ByteSize(32 * 1024 * 1024);
    pub const WRITER_MAX_UNCOMMITTED_BYTES: ByteSize = ByteSize(256 * 1024 * 1024);
    /// Enough for the sink's pace on 2 cores at 64 partitions, small enough that the process
    /// stays under 256 MiB with librdkafka's default prefetch (BENCHMARKS.md).
    pub const WRITER_MEMORY_LIMIT: ByteSize = ByteSize(64 * 1024 * 1024);
    pub const WRITER_RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
    /// Below Kubernetes' default `terminationGracePeriodSeconds` of 30 s.
    pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(25);
    pub const METRICS_LISTEN: &str = "0.0.0.0:9464";
    pub const LOG_LEVEL: &str = "info";
}

/// Hard limits the validation checks against.
pub mod limits {
    use super::ByteSize;

    /// No AppendRows request may be larger than this (BigQuery's own limit is 10 MB on many
    /// projects and never above this).
    pub const MAX_REQUEST_BYTES: ByteSize = ByteSize(20 * 1024 * 1024);
    pub const MIN_REQUEST_BYTES: ByteSize = ByteSize(64 * 1024);
    /// BigQuery allows at most four clustering columns.
    pub const MAX_CLUSTERING_FIELDS: usize = 4;
    /// The longest table id BigQuery accepts.
    pub const MAX_TABLE_ID_BYTES: usize = 1024;
}

// ---------------------------------------------------------------------------------------------
// Value types

/// A duration written with a unit: `250ms`, `5s`, `2m`, `1h`, `7d` or a sum such as `1m30s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "invalid duration `{s}`: use a number with a unit (ms, s, m, h, d), e.g. 5s or 250ms"
            )
        };
        let text = s.trim();
        if text.is_empty() {
            return Err(bad());
        }
        let mut total = Duration::ZERO;
        let mut rest = text;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(bad());
            }
            let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            let unit = &rest[..unit_len];
            rest = &rest[unit_len..];
            let part = match unit {
                "ms" => Duration::from_millis(n),
                "s" => Duration::from_secs(n),
                "m" => n.checked_mul(60).map(Duration::from_secs).ok_or_else(bad)?,
                "h" => n
                    .checked_mul(3600)
                    .map(Duration::from_secs)
                    .ok_or_else(bad)?,
                "d" => n
                    .checked_mul(86_400)
                    .map(Duration::from_secs)
                    .ok_or_else(bad)?,
                _ => return Err(bad()),
            };
            total = total.checked_add(part).ok_or_else(bad)?;
        }
        Ok(HumanDuration(total))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if !ms.is_multiple_of(1000) || ms == 0 {
            write!(f, "{ms}ms")
        } else {
            write!(f, "{}s", ms / 1000)
        }
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = HumanDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with a unit, e.g. 5s or 250ms")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<HumanDuration, E> {
                HumanDuration::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<HumanDuration, E> {
                Err(E::custom(format!(
                    "invalid duration `{v}`: add a unit (ms, s, m, h, d), e.g. {v}s"
                )))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<HumanDuration, E> {
                Err(E::custom(format!(
                    "invalid duration `{v}`: add a unit, e.g. 5s"
                )))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<HumanDuration, E> {
                Err(E::custom(format!(
                    "invalid duration `{v}`: use a whole number with a unit, e.g. 1500ms"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

/// A byte size: a plain number of bytes or a number with a unit, `KiB`/`MiB`/`GiB` (powers of
/// 1024) or `KB`/`MB`/`GB` (powers of 1000): `8MiB`, `512 KiB`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "invalid size `{s}`: use bytes or a number with a unit (KiB, MiB, GiB, KB, MB, GB), e.g. 8MiB"
            )
        };
        let text = s.trim();
        let digits = text.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = text[..digits].parse().map_err(|_| bad())?;
        let factor: u64 = match text[digits..].trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            _ => return Err(bad()),
        };
        n.checked_mul(factor).map(ByteSize).ok_or_else(bad)
    }

    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if b >= size && b.is_multiple_of(size) {
                return write!(f, "{}{unit}", b / size);
            }
        }
        write!(f, "{b}B")
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size in bytes or with a unit, e.g. 8MiB")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("invalid size `{v}`: must not be negative")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A secret (password, token): never printed, not even by `Debug`, so that a logged config
/// cannot leak it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// librdkafka properties. `Debug` hides the values of secret ones (passwords, keys, JAAS and
/// OAUTHBEARER configs), so that a logged config or property list cannot leak them.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Properties(pub BTreeMap<String, String>);

impl Properties {
    /// Whether librdkafka treats the value of `key` as a credential.
    pub fn is_secret(key: &str) -> bool {
        let key = key.to_ascii_lowercase();
        key.contains("password")
            || key.contains("secret")
            || key.ends_with(".pem")
            || key == "sasl.jaas.config"
            || key == "sasl.oauthbearer.config"
    }
}

impl std::ops::Deref for Properties {
    type Target = BTreeMap<String, String>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Properties {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl fmt::Debug for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| {
                let shown = if Properties::is_secret(k) {
                    "<redacted>"
                } else {
                    v.as_str()
                };
                (k, shown)
            }))
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// The config

/// The whole config file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where to consume from.
    pub kafka: KafkaConfig,
    /// Confluent wire format (magic byte + schema id) resolved through a Schema Registry.
    /// Exactly one of `schema_registry` and `avro` is required.
    #[serde(default)]
    pub schema_registry: Option<SchemaRegistryConfig>,
    /// Raw Avro records with one fixed writer schema.
    #[serde(default)]
    pub avro: Option<AvroConfig>,
    /// Schemaless JSON records, typed by the table (`json: {}`).
    #[serde(default)]
    pub json: Option<JsonConfig>,
    /// Where to write to. Its table settings apply to every topic that no entry of `routes`
    /// matches.
    pub bigquery: BigQueryConfig,
    /// Per-topic overrides of the table settings, tried in order: the first entry whose
    /// `topics` lists the topic (or whose `topic_pattern` matches it) decides.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    /// `exactly_once` (default: BUFFERED streams flushed after each Kafka commit) or
    /// `at_least_once` (the `_default` stream, Kafka commit after acknowledged appends).
    #[serde(default)]
    pub delivery: Delivery,
    /// The two-phase checkpoint cycle (docs/architecture.md#the-cycle).
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    /// Batching and memory bounds of the per-partition writers.
    #[serde(default)]
    pub writer: WriterConfig,
    /// The dead-letter topic for records that cannot be written.
    #[serde(default)]
    pub dead_letter: Option<DeadLetterConfig>,
    /// What happens to a record that cannot be decoded or that BigQuery rejects:
    /// `dead_letter` (default; requires `dead_letter.topic`), `fail` (the partition stops) or
    /// `skip` (counted and dropped). Never dropped silently.
    #[serde(default)]
    pub on_bad_record: OnBadRecord,
    /// Policies for the cases where no exact continuation exists.
    #[serde(default)]
    pub recovery: RecoveryConfig,
    /// Time allowed for the final checkpoint cycle on SIGTERM (default 25s). Keep it below the
    /// pod's `terminationGracePeriodSeconds`.
    #[serde(default = "default_shutdown_deadline")]
    pub shutdown_deadline: HumanDuration,
    /// The Prometheus endpoint.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Logging.
    #[serde(default)]
    pub log: LogConfig,
}

fn default_shutdown_deadline() -> HumanDuration {
    HumanDuration(defaults::SHUTDOWN_DEADLINE)
}

/// The consumer.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Comma-separated `host:port` list.
    pub bootstrap_servers: String,
    /// The consumer group; its committed offsets and their metadata are the checkpoints.
    pub group_id: String,
    /// Topics to consume. Exactly one of `topics` and `topic_pattern` is required.
    #[serde(default)]
    pub topics: Vec<String>,
    /// A regular expression matching the topics to consume, in librdkafka's dialect: a POSIX
    /// extended regular expression, anchored at the start (a leading `^` is added when missing)
    /// but not at the end, so `orders` also takes `orders-eu`; end it with `$` to stop there.
    /// The dead-letter topic is never consumed, even when the pattern matches it.
    #[serde(default)]
    pub topic_pattern: Option<String>,
    /// Any librdkafka consumer property (SASL, SSL, timeouts, fetch sizes …), passed through.
    /// The sink forces `enable.auto.commit=false`, `enable.auto.offset.store=false`,
    /// `isolation.level=read_committed` and `auto.offset.reset=error`; setting them to anything
    /// else is an error. `partition.assignment.strategy` defaults to `cooperative-sticky`
    /// (unless `group.protocol=consumer`, whose assignor runs on the broker).
    #[serde(default)]
    pub properties: Properties,
}

/// The consumer properties the sink forces, with the reason given when a user sets them.
pub const FORCED_CONSUMER_PROPERTIES: &[(&str, &str, &str)] = &[
    (
        "enable.auto.commit",
        "false",
        "offsets are committed only with a checkpoint",
    ),
    (
        "enable.auto.offset.store",
        "false",
        "offsets are stored only with a checkpoint",
    ),
    (
        "isolation.level",
        "read_committed",
        "aborted transactional records must not reach the table",
    ),
    (
        "auto.offset.reset",
        "error",
        "the start position is decided by recovery.start_from, recovery.lost_offsets and recovery.new_partitions",
    ),
];

impl KafkaConfig {
    /// The effective librdkafka consumer properties: the user's passthrough, the defaults, the
    /// forced settings, bootstrap servers and group id.
    pub fn consumer_properties(&self) -> Properties {
        let mut props = self.properties.clone();
        if !self.is_kip848() {
            props
                .entry("partition.assignment.strategy".into())
                .or_insert_with(|| defaults::PARTITION_ASSIGNMENT_STRATEGY.into());
        }
        // The sink stops taking messages while writer.memory_limit is used up, so librdkafka's
        // queue runs full: keep it and the fetch responses (which stay allocated until their
        // last message is consumed) small, and let the fetcher resume soon after the queue
        // drains (librdkafka waits a whole second by default).
        for (key, value) in defaults::CONSUMER_PROPERTIES {
            // librdkafka refuses a fetch.max.bytes below message.max.bytes.
            if *key == "fetch.max.bytes" && props.contains_key("message.max.bytes") {
                continue;
            }
            props
                .entry((*key).into())
                .or_insert_with(|| (*value).into());
        }
        for (key, value, _) in FORCED_CONSUMER_PROPERTIES {
            props.insert((*key).into(), (*value).into());
        }
        props.insert("bootstrap.servers".into(), self.bootstrap_servers.clone());
        props.insert("group.id".into(), self.group_id.clone());
        props
    }

    /// The subscription for librdkafka: the topics, or the pattern with the `^` that marks a
    /// regular expression.
    pub fn subscription(&self) -> Vec<String> {
        match &self.topic_pattern {
            Some(p) if p.starts_with('^') => vec![p.clone()],
            Some(p) => vec![format!("^{p}")],
            None => self.topics.clone(),
        }
    }

    /// Whether more than one topic can reach the sink.
    pub fn may_have_several_topics(&self) -> bool {
        self.topic_pattern.is_some() || self.topics.len() > 1
    }

    /// Whether the group protocol is KIP-848's (`group.protocol=consumer`), whose assignor and
    /// pattern matching run on the broker.
    pub fn is_kip848(&self) -> bool {
        self.properties
            .get("group.protocol")
            .is_some_and(|p| p.eq_ignore_ascii_case("consumer"))
    }
}

/// A Confluent-compatible Schema Registry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaRegistryConfig {
    /// Base URL, `http://` or `https://`.
    pub url: String,
    /// Basic-auth user name; requires `password`.
    #[serde(default)]
    pub username: Option<String>,
    /// Basic-auth password; requires `username`.
    #[serde(default)]
    pub password: Option<Secret>,
    /// Bearer token, instead of basic auth.
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    /// PEM file of CA certificates to trust, in addition to the system roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Per-request timeout (default 10s).
    #[serde(default = "default_sr_timeout")]
    pub timeout: HumanDuration,
    /// Retries of a failed request before the partition waits and tries again later (default
    /// 5). A registry outage stalls a partition; it never dead-letters good records.
    #[serde(default = "default_sr_retries")]
    pub retries: u32,
    /// How long a schema id may stay unknown (404) before its records count as bad (default
    /// 60s): a registry failover can answer 404 for a while.
    #[serde(default = "default_sr_not_found_grace")]
    pub not_found_grace: HumanDuration,
    /// The subject whose latest schema `create_table` creates a missing table from; `{topic}`
    /// is replaced by the topic (default `{topic}-value`, the TopicNameStrategy).
    #[serde(default = "default_sr_table_subject")]
    pub table_subject: String,
    /// The encoding of the records: `avro`, `protobuf` or `json_schema`; a route may override
    /// it. Unset (the default), each schema id's registered type (`schemaType`) decides.
    #[serde(default)]
    pub format: Option<InputFormat>,
    /// Check every JSON Schema record against its registered schema before writing it; a record
    /// that does not match goes to the dead-letter topic (`schema_violation`).
    #[serde(default)]
    pub json_validate: bool,
    /// How Protobuf records encode the message-index array after the schema id: `zigzag`
    /// (default; every current Confluent serializer), `unsigned` (older non-Java clients'
    /// `use.deprecated.format`) or `none` (clients that write no array: the first message).
    #[serde(default)]
    pub protobuf_message_indexes: ProtobufMessageIndexes,
}

/// The encoding of record values read through the Schema Registry (`docs/mapping.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputFormat {
    #[default]
    Avro,
    Protobuf,
    /// Confluent JSON Schema: the registry's framing, then JSON text.
    JsonSchema,
    /// Schemaless JSON: the whole record is JSON text, typed by the table.
    Json,
}

impl InputFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            InputFormat::Avro => "avro",
            InputFormat::Protobuf => "protobuf",
            InputFormat::JsonSchema => "json_schema",
            InputFormat::Json => "json",
        }
    }
}

/// See `schema_registry.protobuf_message_indexes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtobufMessageIndexes {
    #[default]
    Zigzag,
    Unsigned,
    None,
}

fn default_sr_timeout() -> HumanDuration {
    HumanDuration(defaults::SCHEMA_REGISTRY_TIMEOUT)
}
fn default_sr_retries() -> u32 {
    defaults::SCHEMA_REGISTRY_RETRIES
}
fn default_sr_not_found_grace() -> HumanDuration {
    HumanDuration(defaults::SCHEMA_REGISTRY_NOT_FOUND_GRACE)
}
fn default_sr_table_subject() -> String {
    defaults::SCHEMA_REGISTRY_TABLE_SUBJECT.into()
}

/// Raw Avro input (no wire-format header).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AvroConfig {
    /// The `.avsc` file with the writer schema of every record.
    pub schema_file: PathBuf,
}

/// Schemaless JSON input: each record is one JSON object, written into the table by column name.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonConfig {}

/// The destination.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BigQueryConfig {
    /// Google Cloud project id.
    pub project: String,
    /// Dataset id.
    pub dataset: String,
    /// Table id, or a template where `{topic}` is replaced by the record's topic.
    pub table: String,
    /// Base URL of the API instead of Google's (the emulator: `http://127.0.0.1:9060`); gRPC and
    /// REST share it.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `adc` (default: Application Default Credentials, e.g. GKE Workload Identity),
    /// `{key_file: path}` (a service-account key) or `none` (only with an emulator `endpoint`).
    #[serde(default)]
    pub credentials: Credentials,
    /// Dataset location (e.g. `US`, `EU`, `europe-west1`), used by query jobs.
    #[serde(default)]
    pub location: Option<String>,
    /// Create a missing table from the Avro schema with these options; without it a missing
    /// table is an error.
    #[serde(default)]
    pub create_table: Option<CreateTableConfig>,
    /// `none` (default) or `add_columns`: a new writer schema with new nullable fields adds
    /// NULLABLE columns to the table.
    #[serde(default)]
    pub schema_update: SchemaUpdate,
    /// Avro fields without a table column: `ignore` (default) or `error` (a bad record).
    #[serde(default)]
    pub unknown_fields: UnknownFields,
    /// Avro maps as `struct` (default: REPEATED STRUCT<key, value>) or `json` (a JSON column).
    #[serde(default)]
    pub map_mode: MapMode,
    /// Optional columns for Kafka metadata; each names the column, unset means no column.
    #[serde(default)]
    pub metadata_columns: MetadataColumns,
}

/// One entry of `routes`: which topics, and the table settings that replace those of
/// `bigquery` for them. A setting left out is taken from `bigquery`; `metadata_columns` and
/// `create_table` replace the whole section when set.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Topics of this route. Exactly one of `topics` and `topic_pattern` is required.
    #[serde(default)]
    pub topics: Vec<String>,
    /// A regular expression (Rust `regex` syntax) that must match the whole topic name.
    #[serde(default)]
    pub topic_pattern: Option<String>,
    /// Table id or a `{topic}` template, as `bigquery.table`.
    #[serde(default)]
    pub table: Option<String>,
    #[serde(default)]
    pub metadata_columns: Option<MetadataColumns>,
    #[serde(default)]
    pub create_table: Option<CreateTableConfig>,
    #[serde(default)]
    pub schema_update: Option<SchemaUpdate>,
    #[serde(default)]
    pub unknown_fields: Option<UnknownFields>,
    #[serde(default)]
    pub map_mode: Option<MapMode>,
    /// Raw Avro with this fixed writer schema for the route's topics, instead of the top-level
    /// input (`schema_registry` or `avro`).
    #[serde(default)]
    pub avro: Option<AvroConfig>,
    /// The encoding of the route's records read through the registry, instead of
    /// `schema_registry.format`.
    #[serde(default)]
    pub format: Option<InputFormat>,
    /// Change data capture: the records are upserts and deletes by primary key (docs/cdc.md).
    #[serde(default)]
    pub cdc: Option<CdcConfig>,
}

/// The table settings in force for one topic: its route's, or the top-level `bigquery` ones.
#[derive(Clone, Debug)]
pub struct TopicRoute<'a> {
    /// The index in `routes`, or `None` for the top-level settings.
    pub route: Option<usize>,
    /// The table id, with `{topic}` replaced by the sanitised topic.
    pub table: String,
    /// The table setting as written (a template or a fixed id).
    pub table_template: &'a str,
    pub metadata_columns: &'a MetadataColumns,
    pub create_table: Option<&'a CreateTableConfig>,
    pub schema_update: SchemaUpdate,
    pub unknown_fields: UnknownFields,
    pub map_mode: MapMode,
    /// The fixed writer schema, if the topic's records are raw Avro.
    pub schema_file: Option<&'a Path>,
    /// The encoding of the records; `None`: read through the registry, each schema id's
    /// registered type decides.
    pub format: Option<InputFormat>,
    /// Change data capture, when the route has it.
    pub cdc: Option<&'a CdcConfig>,
    /// The field path of the route, for messages: `routes[1]` or `bigquery`.
    pub path: String,
}

/// BigQuery table ids are letters, digits and `_` here (BigQuery accepts more, but Kafka topic
/// names only add `.` and `-`): every other character of the topic becomes `_`, and the id is
/// cut at 1024 bytes, BigQuery's limit. `orders.v1` → `orders_v1`, `eu-payments` →
/// `eu_payments`.
pub fn sanitize_table_name(topic: &str) -> String {
    topic
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The table id of `template` for `topic`: `{topic}` replaced by the sanitised topic, at most
/// 1024 bytes.
pub fn table_for_topic(template: &str, topic: &str) -> String {
    let mut id = template.replace("{topic}", &sanitize_table_name(topic));
    if id.len() > limits::MAX_TABLE_ID_BYTES {
        let mut end = limits::MAX_TABLE_ID_BYTES;
        while !id.is_char_boundary(end) {
            end -= 1;
        }
        id.truncate(end);
    }
    id
}

impl RouteConfig {
    /// Whether this route takes `topic`. A pattern that does not compile matches nothing
    /// (`validate` refuses it).
    pub fn matches(&self, topic: &str) -> bool {
        if self.topics.iter().any(|t| t == topic) {
            return true;
        }
        self.topic_pattern.as_deref().is_some_and(|p| {
            regex::Regex::new(&format!("^(?:{p})$")).is_ok_and(|re| re.is_match(topic))
        })
    }
}

impl Config {
    /// Topics the sink never consumes, whatever the subscription matches: the dead-letter
    /// topic (consuming it would send each bad record back to itself without end).
    pub fn excluded_topics(&self) -> Vec<String> {
        self.dead_letter
            .as_ref()
            .and_then(|d| d.topic.clone())
            .into_iter()
            .collect()
    }

    /// The consumer properties of `run`: [`KafkaConfig::consumer_properties`], with the
    /// excluded topics added to librdkafka's `topic.blacklist` (after the user's entries), so
    /// that a `topic_pattern` never subscribes them. With KIP-848 the broker matches the
    /// pattern and may still assign them: the consumer leaves such partitions paused.
    pub fn consumer_properties(&self) -> Properties {
        let mut props = self.kafka.consumer_properties();
        let excluded: Vec<String> = self
            .excluded_topics()
            .iter()
            .map(String::as_str)
            .map(crate::kafka::topic_pattern::exact_name_pattern)
            .collect();
        if !excluded.is_empty() {
            let list = props
                .get("topic.blacklist")
                .map(|user| user.trim())
                .filter(|user| !user.is_empty())
                .into_iter()
                .map(str::to_string)
                .chain(excluded)
                .collect::<Vec<_>>()
                .join(",");
            props.insert("topic.blacklist".into(), list);
        }
        props
    }

    /// The input format of topics without a route that sets one: `json` with a top-level `json`
    /// section, else `schema_registry.format` (`None` when unset: each schema id's registered
    /// type decides), else Avro (raw, `avro.schema_file`).
    pub fn top_format(&self) -> Option<InputFormat> {
        if self.json.is_some() {
            return Some(InputFormat::Json);
        }
        match &self.schema_registry {
            Some(sr) => sr.format,
            None => Some(InputFormat::Avro),
        }
    }

    /// The table settings for `topic`: the first route that matches it, else `bigquery`.
    pub fn route_for(&self, topic: &str) -> TopicRoute<'_> {
        let b = &self.bigquery;
        let top_schema = self.avro.as_ref().map(|a| a.schema_file.as_path());
        let top_format = self.top_format();
        match self.routes.iter().position(|r| r.matches(topic)) {
            Some(i) => {
                let r = &self.routes[i];
                let template = r.table.as_deref().unwrap_or(&b.table);
                TopicRoute {
                    route: Some(i),
                    table: table_for_topic(template, topic),
                    table_template: template,
                    metadata_columns: r.metadata_columns.as_ref().unwrap_or(&b.metadata_columns),
                    create_table: r.create_table.as_ref().or(b.create_table.as_ref()),
                    schema_update: r.schema_update.unwrap_or(b.schema_update),
                    unknown_fields: r.unknown_fields.unwrap_or(b.unknown_fields),
                    map_mode: r.map_mode.unwrap_or(b.map_mode),
                    schema_file: r
                        .avro
                        .as_ref()
                        .map(|a| a.schema_file.as_path())
                        .or(top_schema),
                    format: r.format.or(top_format),
                    cdc: r.cdc.as_ref(),
                    path: format!("routes[{i}]"),
                }
            }
            None => TopicRoute {
                route: None,
                table: table_for_topic(&b.table, topic),
                table_template: &b.table,
                metadata_columns: &b.metadata_columns,
                create_table: b.create_table.as_ref(),
                schema_update: b.schema_update,
                unknown_fields: b.unknown_fields,
                map_mode: b.map_mode,
                schema_file: top_schema,
                format: top_format,
                cdc: None,
                path: "bigquery".into(),
            },
        }
    }
}

/// How the daemon authenticates to BigQuery.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Credentials {
    /// Application Default Credentials.
    #[default]
    Adc,
    /// A service-account key file.
    KeyFile(PathBuf),
    /// No authentication (emulator only).
    None,
}

/// Table creation options.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTableConfig {
    /// Time partitioning; unset means an unpartitioned table.
    #[serde(default)]
    pub time_partitioning: Option<TimePartitioning>,
    /// Up to four clustering columns.
    #[serde(default)]
    pub clustering: Vec<String>,
    /// Queries must filter on the partitioning column (requires `time_partitioning`).
    #[serde(default)]
    pub require_partition_filter: bool,
    /// Table description.
    #[serde(default)]
    pub description: Option<String>,
    /// Table labels (lowercase keys and values).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// Time partitioning of a created table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimePartitioning {
    /// The TIMESTAMP/DATE column; unset means ingestion-time partitioning.
    #[serde(default)]
    pub field: Option<String>,
    /// `DAY` (default), `HOUR`, `MONTH` or `YEAR`.
    #[serde(default, rename = "type")]
    pub kind: PartitionType,
    /// Partitions older than this are deleted by BigQuery; unset keeps them.
    #[serde(default)]
    pub expiration: Option<HumanDuration>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PartitionType {
    #[default]
    Day,
    Hour,
    Month,
    Year,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaUpdate {
    #[default]
    None,
    AddColumns,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownFields {
    #[default]
    Ignore,
    Error,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MapMode {
    #[default]
    Struct,
    Json,
}

/// Column names for the Kafka metadata of each record.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetadataColumns {
    /// STRING column with the source topic.
    #[serde(default)]
    pub topic: Option<String>,
    /// INT64 column with the source partition.
    #[serde(default)]
    pub partition: Option<String>,
    /// INT64 column with the source offset.
    #[serde(default)]
    pub offset: Option<String>,
    /// TIMESTAMP column with the record timestamp.
    #[serde(default)]
    pub timestamp: Option<String>,
    /// BYTES column with the record key.
    #[serde(default)]
    pub key: Option<String>,
    /// REPEATED STRUCT<key STRING, value BYTES> column with the record headers.
    #[serde(default)]
    pub headers: Option<String>,
}

impl MetadataColumns {
    fn named(&self) -> Vec<(&'static str, &str)> {
        [
            ("topic", &self.topic),
            ("partition", &self.partition),
            ("offset", &self.offset),
            ("timestamp", &self.timestamp),
            ("key", &self.key),
            ("headers", &self.headers),
        ]
        .into_iter()
        .filter_map(|(field, col)| col.as_deref().map(|c| (field, c)))
        .collect()
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    #[default]
    ExactlyOnce,
    AtLeastOnce,
}

/// The checkpoint cycle.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointConfig {
    /// Time between checkpoint cycles (default 5s): the latency until rows are visible.
    pub interval: HumanDuration,
    /// How long a cycle waits for each writer's committable (default 10s); a writer that does
    /// not answer keeps its previous checkpoint for this cycle.
    pub barrier_timeout: HumanDuration,
    /// Consecutive failed Kafka commits of one partition after which it is isolated: stopped,
    /// counted and reported not ready (default 5).
    pub commit_failure_isolation_threshold: u32,
    /// The brokers' `offset.metadata.max.bytes` (default 4096); the worst-case checkpoint
    /// metadata must fit.
    pub metadata_max_bytes: u32,
    /// A partition whose acknowledged position has not advanced for this long while records
    /// wait for it is stalled: readiness false, `kbq_partitions_stalled` (default 2m; at least
    /// 1s and at least `interval`).
    pub partition_stall_timeout: HumanDuration,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            interval: HumanDuration(defaults::CHECKPOINT_INTERVAL),
            barrier_timeout: HumanDuration(defaults::CHECKPOINT_BARRIER_TIMEOUT),
            commit_failure_isolation_threshold: defaults::COMMIT_FAILURE_ISOLATION_THRESHOLD,
            metadata_max_bytes: defaults::CHECKPOINT_METADATA_MAX_BYTES,
            partition_stall_timeout: HumanDuration(defaults::PARTITION_STALL_TIMEOUT),
        }
    }
}

/// The writers.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WriterConfig {
    /// Largest AppendRows request (default 8MiB, at most 20MiB).
    pub max_request_bytes: ByteSize,
    /// Most rows in one request (default 50000).
    pub max_rows_per_request: u32,
    /// How long a partial batch waits for more records (default 50ms).
    pub linger: HumanDuration,
    /// Appends in flight per stream (default 4).
    pub max_inflight_requests: u32,
    /// Bytes in flight per stream (default 32MiB); at least `max_request_bytes`.
    pub max_inflight_bytes: ByteSize,
    /// Appended but not yet committed bytes per partition (default 256MiB); at the cap the
    /// partition pauses until a checkpoint commits.
    pub max_uncommitted_bytes: ByteSize,
    /// Bound on what the whole process holds of the records it has read from Kafka and BigQuery
    /// has not acknowledged yet — key, value and headers in consumer stashes, writer channels,
    /// open batches and requests in flight, plus the encoded row of each (default 64MiB; at
    /// least `max_inflight_bytes`). The copy of each request in flight counts too. At the limit
    /// the consumer takes no more messages (it keeps serving the group) until acknowledgements
    /// free an eighth of it; one partition may hold at most half as much again as its even
    /// share, at least a quarter of it (all of it when it is the only partition); requests are capped at a quarter of a partition's even share and
    /// at 1/256 of the limit (not under a sixteenth of the share). A record larger than what is
    /// left still passes. librdkafka's prefetch
    /// (`queued.max.messages.kbytes`) comes on top; see the sizing rule in docs/operations.md.
    pub memory_limit: ByteSize,
    /// A BigQuery answer (append, flush, create, finalize) later than this counts as lost: the
    /// connection is reopened and the request retried (default 60s).
    pub response_timeout: HumanDuration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            max_request_bytes: defaults::WRITER_MAX_REQUEST_BYTES,
            max_rows_per_request: defaults::WRITER_MAX_ROWS_PER_REQUEST,
            linger: HumanDuration(defaults::WRITER_LINGER),
            max_inflight_requests: defaults::WRITER_MAX_INFLIGHT_REQUESTS,
            max_inflight_bytes: defaults::WRITER_MAX_INFLIGHT_BYTES,
            max_uncommitted_bytes: defaults::WRITER_MAX_UNCOMMITTED_BYTES,
            memory_limit: defaults::WRITER_MEMORY_LIMIT,
            response_timeout: HumanDuration(defaults::WRITER_RESPONSE_TIMEOUT),
        }
    }
}

/// The dead-letter topic.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// Topic for bad records (their key, value and headers, plus headers with the reason and the
    /// source topic/partition/offset). Required when `on_bad_record` is `dead_letter`.
    #[serde(default)]
    pub topic: Option<String>,
    /// librdkafka producer properties. Unset connection settings (`bootstrap.servers`,
    /// `security.protocol`, `sasl.*`, `ssl.*`) are taken from `kafka`. `acks` is `all`: a
    /// dead-lettered record must be durable before its checkpoint commits.
    #[serde(default)]
    pub properties: Properties,
}

/// Consumer properties that describe the connection to the cluster, inherited by the
/// dead-letter producer.
fn is_connection_property(key: &str) -> bool {
    key == "security.protocol"
        || key == "client.dns.lookup"
        || key.starts_with("sasl.")
        || key.starts_with("ssl.")
        || key.starts_with("ssl_")
}

impl DeadLetterConfig {
    /// The effective librdkafka producer properties: the connection settings of `kafka` unless
    /// set here, the user's properties, and the durability the sink needs.
    pub fn producer_properties(&self, kafka: &KafkaConfig) -> Properties {
        let mut props = Properties(
            kafka
                .properties
                .iter()
                .filter(|(k, _)| is_connection_property(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        );
        props.insert("bootstrap.servers".into(), kafka.bootstrap_servers.clone());
        props.extend(self.properties.0.clone());
        props.insert("acks".into(), "all".into());
        props
            .entry("enable.idempotence".into())
            .or_insert_with(|| "true".into());
        props
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnBadRecord {
    #[default]
    DeadLetter,
    Fail,
    Skip,
}

/// What to do where no exact continuation exists (docs/architecture.md#recovery).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecoveryConfig {
    /// A checkpointed stream is gone before its rows were flushed: `resolve` (ask the table for
    /// the highest visible offset; needs the `partition` and `offset` metadata columns, and
    /// `topic` when several topics share a table), `rewind` (re-deliver the window: at least
    /// once for it) or `fail`. Default: `resolve` when those columns are configured, else
    /// `rewind`.
    pub lost_stream: Option<LostStream>,
    /// A re-flush finds rows past the checkpoint already visible: `fail` (default) or
    /// `continue` (counted and logged).
    pub on_anomaly: OnAnomaly,
    /// Where a group that never committed starts: `earliest` (default) or `latest`.
    pub start_from: StartFrom,
    /// A group that committed before but whose offsets are gone (expired, or below the log
    /// start), or a partition that never committed although its table is marked (a new topic
    /// routed to an existing table): `fail` (default), `earliest`, `latest`, or `resolve` (ask
    /// the table for the highest visible offset, exact; needs the metadata columns that
    /// `lost_stream: resolve` needs).
    pub lost_offsets: LostOffsets,
    /// A partition added while running: `earliest` (default) or `latest`.
    pub new_partitions: StartFrom,
    /// How many failed `resolve` queries (backing off up to 30 s between them) before
    /// `resolve_fallback` applies. Default 10 (about 2 minutes).
    pub resolve_attempts: Option<u32>,
    /// What `resolve` does when its query keeps failing: `fail` (default: the partition stops,
    /// readiness turns false) or `rewind` (re-deliver the window, at least once for it).
    pub resolve_fallback: ResolveFallback,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResolveFallback {
    #[default]
    Fail,
    Rewind,
}

impl Config {
    /// The policy in force for a lost stream, with the default resolved against the metadata
    /// columns of every route: `resolve` only when each table it may query has them.
    pub fn effective_lost_stream(&self) -> LostStream {
        self.recovery.lost_stream.unwrap_or_else(|| {
            if resolve_missing_columns(self).is_empty()
                && resolve_partition_filters(self).is_empty()
            {
                LostStream::Resolve
            } else {
                LostStream::Rewind
            }
        })
    }

    /// Whether topics can reach the top-level `bigquery` settings (no route matches them): a
    /// pattern subscription may always bring such a topic.
    fn unrouted_topics(&self) -> Option<Vec<&String>> {
        if self.kafka.topic_pattern.is_some() {
            return None;
        }
        Some(
            self.kafka
                .topics
                .iter()
                .filter(|t| !self.routes.iter().any(|r| r.matches(t)))
                .collect(),
        )
    }
}

/// Per route (and the top-level settings, when topics can reach them), the metadata columns
/// that `lost_stream: resolve` needs but the route lacks: `(path of its metadata_columns,
/// missing)`.
fn resolve_missing_columns(c: &Config) -> Vec<(String, Vec<&'static str>)> {
    let mut scopes = Vec::new();
    let unrouted = c.unrouted_topics();
    if unrouted.as_ref().is_none_or(|t| !t.is_empty()) {
        let several = unrouted.is_none_or(|t| t.len() > 1);
        scopes.push((
            "bigquery.metadata_columns".to_string(),
            &c.bigquery.metadata_columns,
            c.bigquery.table.as_str(),
            several,
        ));
    }
    for (i, r) in c.routes.iter().enumerate() {
        let several = r.topic_pattern.is_some() || r.topics.len() > 1;
        scopes.push((
            format!("routes[{i}].metadata_columns"),
            r.metadata_columns
                .as_ref()
                .unwrap_or(&c.bigquery.metadata_columns),
            r.table.as_deref().unwrap_or(&c.bigquery.table),
            several,
        ));
    }
    scopes
        .into_iter()
        .filter_map(|(path, cols, table, several)| {
            let missing = missing_resolve_columns(cols, !table.contains("{topic}") && several);
            (!missing.is_empty()).then_some((path, missing))
        })
        .collect()
}

/// The `create_table.require_partition_filter` settings, as field paths, of the tables `resolve`
/// may query: its query filters on partition and offset only, which such a table refuses.
fn resolve_partition_filters(c: &Config) -> Vec<String> {
    let mut paths = Vec::new();
    let requires =
        |ct: Option<&CreateTableConfig>| ct.is_some_and(|ct| ct.require_partition_filter);
    if c.unrouted_topics().is_none_or(|t| !t.is_empty())
        && requires(c.bigquery.create_table.as_ref())
    {
        paths.push("bigquery.create_table.require_partition_filter".to_string());
    }
    for (i, r) in c.routes.iter().enumerate() {
        match &r.create_table {
            Some(ct) if ct.require_partition_filter => {
                paths.push(format!("routes[{i}].create_table.require_partition_filter"));
            }
            None if requires(c.bigquery.create_table.as_ref()) => {
                paths.push("bigquery.create_table.require_partition_filter".to_string());
            }
            _ => {}
        }
    }
    paths.dedup();
    paths
}

/// The columns `resolve` needs in one table: partition and offset, and the topic when several
/// topics share the table.
fn missing_resolve_columns(cols: &MetadataColumns, shared_table: bool) -> Vec<&'static str> {
    let mut missing = Vec::new();
    if shared_table && cols.topic.is_none() {
        missing.push("topic");
    }
    if cols.partition.is_none() {
        missing.push("partition");
    }
    if cols.offset.is_none() {
        missing.push("offset");
    }
    missing
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LostStream {
    Resolve,
    Rewind,
    Fail,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnAnomaly {
    #[default]
    Fail,
    Continue,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartFrom {
    #[default]
    Earliest,
    Latest,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LostOffsets {
    #[default]
    Fail,
    Earliest,
    Latest,
    Resolve,
}

/// The Prometheus endpoint (`/metrics`, `/healthz`, `/readyz`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Listen address (default `0.0.0.0:9464`).
    pub listen: SocketAddr,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: defaults::METRICS_LISTEN
                .parse()
                .expect("the default listen address parses"),
        }
    }
}

/// Logging.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` (default, for humans) or `json` (for GKE / Cloud Logging).
    pub format: LogFormat,
    /// A `tracing` filter: a level (`info`, default) or directives like
    /// `info,kafka_bigquery_sink::writer=debug`.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::default(),
            level: defaults::LOG_LEVEL.into(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

// ---------------------------------------------------------------------------------------------
// Loading

/// One problem in a config, at a field path such as `writer.max_request_bytes` or
/// `kafka.properties."enable.auto.commit"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
    /// 1-based line of the problem in the file, when known (parse errors).
    pub line: Option<u64>,
}

impl ConfigError {
    fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
            line: None,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "<root>"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)?;
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        Ok(())
    }
}

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<ConfigError>),
}

impl LoadError {
    /// Every problem, one per line, each naming its field.
    pub fn errors(&self) -> Vec<String> {
        match self {
            LoadError::Read { .. } => vec![self.to_string()],
            LoadError::Invalid(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    }
}

impl Config {
    /// Reads, parses and validates a config file, substituting `${NAME}` from the process
    /// environment.
    pub fn load(path: &Path) -> Result<Config, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let env: HashMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let config = Config::from_yaml(&text, env).map_err(LoadError::Invalid)?;
        validate(&config).map_err(LoadError::Invalid)?;
        Ok(config)
    }

    /// Parses a config (no validation beyond types and unknown keys), substituting `${NAME}`
    /// and `${NAME:-default}` in unquoted values from `env`.
    pub fn from_yaml(text: &str, env: HashMap<String, String>) -> Result<Config, Vec<ConfigError>> {
        // Substitution happens on unquoted scalars only (the parser's rule); a `${` left in a
        // quoted value would silently stay literal, so it is refused instead.
        if !yaml_paths::has_content(text) {
            return Err(vec![ConfigError::at(
                "",
                "the config is empty: at least kafka, bigquery and an input (schema_registry or avro) are required",
            )]);
        }
        let quoted = yaml_paths::quoted_substitutions(text);
        if !quoted.is_empty() {
            return Err(quoted);
        }
        let options = serde_saphyr::options! {
            strict_booleans: true,
        }
        .with_properties(env);
        serde_saphyr::from_str_with_options::<Config>(text, options)
            .map_err(|e| vec![yaml_paths::parse_error(text, &e)])
    }
}

/// Field paths for YAML positions: serde-saphyr reports a line and column, the user wants to
/// know which field.
mod yaml_paths {
    use super::ConfigError;
    use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle};

    enum Frame {
        Map {
            key: Option<String>,
            awaiting_key: bool,
        },
        Seq {
            current: Option<usize>,
            next: usize,
        },
    }

    fn render(stack: &[Frame]) -> String {
        let mut out = String::new();
        for frame in stack {
            match frame {
                Frame::Map { key: Some(k), .. } => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    let bare = !k.is_empty()
                        && k.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                    if bare {
                        out.push_str(k);
                    } else {
                        out.push('"');
                        out.push_str(k);
                        out.push('"');
                    }
                }
                Frame::Seq {
                    current: Some(i), ..
                } => out.push_str(&format!("[{i}]")),
                _ => {}
            }
        }
        out
    }

    /// A node as [`walk`] sees it.
    struct Node<'a> {
        /// The field path; for a mapping key, the path of the field it names.
        path: String,
        /// For a mapping key, the path of its mapping.
        container: Option<String>,
        line: u64,
        column: u64,
        scalar: Option<(&'a str, ScalarStyle)>,
    }

    /// Visits every node in document order with its field path and 1-based line and column.
    /// Stops at the first parse error: the deserializer reports that one.
    fn walk(text: &str, mut visit: impl FnMut(&Node<'_>) -> bool) {
        let mut stack: Vec<Frame> = Vec::new();
        for item in Parser::new_from_str(text) {
            let Ok((event, span)) = item else { return };
            let is_node = matches!(
                event,
                Event::Scalar(..)
                    | Event::MappingStart(..)
                    | Event::SequenceStart(..)
                    | Event::Alias(..)
            );
            if is_node {
                let mut is_key = false;
                match stack.last_mut() {
                    Some(Frame::Map { key, awaiting_key }) => {
                        is_key = *awaiting_key;
                        if is_key {
                            *key = Some(match &event {
                                Event::Scalar(s, ..) => s.to_string(),
                                _ => "?".to_string(),
                            });
                        }
                        *awaiting_key = !is_key;
                    }
                    Some(Frame::Seq { current, next }) => {
                        *current = Some(*next);
                        *next += 1;
                    }
                    None => {}
                }
                let node = Node {
                    path: render(&stack),
                    container: is_key.then(|| render(&stack[..stack.len() - 1])),
                    line: span.start.line() as u64,
                    column: span.start.col() as u64 + 1,
                    scalar: match &event {
                        Event::Scalar(s, style, ..) => Some((s.as_ref(), *style)),
                        _ => None,
                    },
                };
                if !visit(&node) {
                    return;
                }
            }
            match event {
                Event::MappingStart(..) => stack.push(Frame::Map {
                    key: None,
                    awaiting_key: true,
                }),
                Event::SequenceStart(..) => stack.push(Frame::Seq {
                    current: None,
                    next: 0,
                }),
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                }
                _ => {}
            }
        }
    }

    /// The path of the last node that starts at or before (line, column), and the path of the
    /// mapping that holds it when that node is a key.
    pub(super) fn path_at(text: &str, line: u64, column: u64) -> (String, Option<String>) {
        let mut found = (String::new(), None);
        walk(text, |node| {
            if (node.line, node.column) <= (line, column) {
                found = (node.path.clone(), node.container.clone());
                true
            } else {
                false
            }
        });
        found
    }

    /// Whether the document has any node (not only comments and blank lines). A YAML syntax
    /// error counts as content: the deserializer reports it.
    pub(super) fn has_content(text: &str) -> bool {
        let mut nodes = 0;
        walk(text, |_| {
            nodes += 1;
            false
        });
        nodes > 0 || Parser::new_from_str(text).any(|e| e.is_err())
    }

    pub(super) fn quoted_substitutions(text: &str) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        walk(text, |node| {
            if let Some((value, style)) = node.scalar
                && style != ScalarStyle::Plain
                && value.contains("${")
            {
                errors.push(ConfigError {
                    path: node.path.clone(),
                    message: "`${...}` is substituted only in unquoted values: remove the quotes"
                        .into(),
                    line: Some(node.line),
                });
            }
            true
        });
        errors
    }

    /// A serde-saphyr error as a `ConfigError` with the field path of its position.
    pub(super) fn parse_error(text: &str, e: &serde_saphyr::Error) -> ConfigError {
        let mut message = e
            .without_snippet()
            .render_with_options(serde_saphyr::render_options! {
                snippets: serde_saphyr::SnippetMode::Off,
            });
        let Some(loc) = e.location().filter(|l| l.line() > 0) else {
            return ConfigError::at("", message);
        };
        let (line, column) = (loc.line(), loc.column());
        for suffix in [
            format!(" at line {line}, column {column}"),
            format!(" at line {line} column {column}"),
        ] {
            if let Some(stripped) = message.strip_suffix(&suffix) {
                message = stripped.to_string();
            }
        }
        if let Some(name) = message
            .strip_prefix("missing property `")
            .and_then(|r| r.strip_suffix('`'))
        {
            message = format!(
                "environment variable `{name}` is not set (write ${{{name}:-default}} for a default)"
            );
        }
        let (mut path, container) = path_at(text, line, column);
        // "missing field `x`" points at the last key of the mapping that lacks `x` (or at the
        // mapping itself when it is empty): name the missing field.
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|r| r.strip_suffix('`'))
        {
            let mapping = container.unwrap_or(path);
            path = if mapping.is_empty() {
                field.to_string()
            } else {
                format!("{mapping}.{field}")
            };
            message = "missing field".into();
        }
        ConfigError {
            path,
            message,
            line: Some(line),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation

/// The longest checkpoint metadata the daemon can write (the codec's own bound, so the two
/// cannot drift).
pub fn checkpoint_metadata_worst_case_len() -> usize {
    crate::checkpoint::metadata::worst_case_len()
}

/// Settings that are valid but probably not what was meant; `validate` prints them and `run`
/// logs them at start. Each names its field, like an error.
pub fn warnings(config: &Config) -> Vec<ConfigError> {
    let mut out = Vec::new();
    let subscription = config.kafka.subscription().concat();
    let pattern = config
        .kafka
        .topic_pattern
        .as_ref()
        .and_then(|_| TopicPattern::compile(&subscription).ok());
    if let Some(pattern) = pattern {
        for topic in config.excluded_topics() {
            if pattern.matches(&topic) {
                out.push(ConfigError::at(
                    "kafka.topic_pattern",
                    format!(
                        "matches the dead-letter topic `{topic}` (dead_letter.topic): the sink never consumes it (it is excluded from the subscription), but a pattern that does not match it says so plainly, e.g. one ending in `$`"
                    ),
                ));
            }
        }
    }
    cdc::warnings(config, &mut out);
    out
}

/// Checks a parsed config without any I/O; returns every problem found.
pub fn validate(config: &Config) -> Result<(), Vec<ConfigError>> {
    let mut v = Validator::default();
    v.kafka(&config.kafka);
    v.input(config);
    v.bigquery(config);
    v.routes(config);
    v.formats(config);
    v.checkpoint(&config.checkpoint);
    v.writer(&config.writer, &config.checkpoint);
    v.dead_letter(config);
    v.recovery(config);
    v.ops(config);
    cdc::validate(config, &mut v.errors);
    if v.errors.is_empty() {
        Ok(())
    } else {
        Err(v.errors)
    }
}

#[derive(Default)]
struct Validator {
    errors: Vec<ConfigError>,
}

fn quoted_key(key: &str) -> String {
    format!("\"{key}\"")
}

fn is_kafka_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn is_column_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= 300
}

/// BigQuery label rules: lowercase letters (international ones too), digits, `_` and `-`, at
/// most 63 characters; a key is not empty and starts with a letter.
fn is_label(s: &str, key: bool) -> bool {
    let letter = |c: char| c.is_alphabetic() && !c.is_uppercase();
    let chars_ok = s
        .chars()
        .all(|c| letter(c) || c.is_ascii_digit() || c == '_' || c == '-');
    let first_ok = !key || s.chars().next().is_some_and(letter);
    chars_ok && first_ok && s.chars().count() <= 63
}

fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
}

/// The input settings one route (or the top level) is read with, and the fields that set them.
struct Scope {
    format_path: String,
    /// `None`: read through the registry, each schema id as its registered type.
    format: Option<InputFormat>,
    raw_avro: bool,
    create_table: Option<String>,
    add_columns: Option<String>,
}

impl Validator {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError::at(path, message));
    }

    fn kafka(&mut self, k: &KafkaConfig) {
        if k.bootstrap_servers.trim().is_empty() {
            self.err("kafka.bootstrap_servers", "must not be empty");
        }
        for server in k
            .bootstrap_servers
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let port_ok = server.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
            });
            if !port_ok {
                self.err(
                    "kafka.bootstrap_servers",
                    format!("`{server}` is not host:port"),
                );
            }
        }
        if k.group_id.trim().is_empty() {
            self.err("kafka.group_id", "must not be empty");
        }
        match (&k.topic_pattern, k.topics.is_empty()) {
            (None, true) => self.err("kafka.topics", "set kafka.topics or kafka.topic_pattern"),
            (Some(_), false) => self.err(
                "kafka.topic_pattern",
                "set either kafka.topics or kafka.topic_pattern, not both",
            ),
            (Some(p), true) if p.trim().is_empty() => {
                self.err("kafka.topic_pattern", "must not be empty")
            }
            (Some(_), true) => {
                let subscription = k.subscription().concat();
                if let Err(e) = TopicPattern::compile(&subscription) {
                    self.err(
                        "kafka.topic_pattern",
                        format!(
                            "not a regular expression librdkafka accepts (POSIX extended): {e}"
                        ),
                    );
                } else if k.is_kip848()
                    && let Err(e) = regex::Regex::new(&subscription)
                {
                    // The broker matches the pattern with RE2/J under group.protocol=consumer.
                    self.err(
                        "kafka.topic_pattern",
                        format!("not a regular expression the broker accepts with group.protocol=consumer: {e}"),
                    );
                }
            }
            _ => {}
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, topic) in k.topics.iter().enumerate() {
            if !is_kafka_topic_name(topic) {
                self.err(
                    format!("kafka.topics[{i}]"),
                    format!("`{topic}` is not a valid topic name (letters, digits, `.`, `_`, `-`; at most 249)"),
                );
            } else if !seen.insert(topic) {
                self.err(
                    format!("kafka.topics[{i}]"),
                    format!("`{topic}` is listed twice"),
                );
            }
        }
        for (key, value, why) in FORCED_CONSUMER_PROPERTIES {
            if let Some(set) = k.properties.get(*key)
                && !set.trim().eq_ignore_ascii_case(value)
            {
                self.err(
                    format!("kafka.properties.{}", quoted_key(key)),
                    format!("forced to {value} by the sink ({why})"),
                );
            }
        }
        for (key, field) in [
            ("bootstrap.servers", "bootstrap_servers"),
            ("group.id", "group_id"),
        ] {
            if k.properties.contains_key(key) {
                self.err(
                    format!("kafka.properties.{}", quoted_key(key)),
                    format!("set kafka.{field} instead"),
                );
            }
        }
        if k.is_kip848() && k.properties.contains_key("partition.assignment.strategy") {
            self.err(
                format!(
                    "kafka.properties.{}",
                    quoted_key("partition.assignment.strategy")
                ),
                "not used with group.protocol=consumer (the broker assigns partitions)",
            );
        }
    }

    fn input(&mut self, c: &Config) {
        match (&c.schema_registry, &c.avro) {
            (None, None) if c.json.is_none() => self.err(
                "schema_registry",
                "set schema_registry (Confluent wire format), avro.schema_file (raw Avro) or json (schemaless JSON)",
            ),
            (Some(_), Some(_)) => self.err(
                "avro",
                "set either schema_registry or avro.schema_file, not both",
            ),
            (_, Some(_)) if c.json.is_some() => {
                self.err("json", "set either json or avro.schema_file, not both")
            }
            _ => {}
        }
        if let Some(sr) = &c.schema_registry {
            if !is_http_url(&sr.url) {
                self.err("schema_registry.url", "must be an http:// or https:// URL");
            }
            match (&sr.username, &sr.password) {
                (Some(_), None) => self.err(
                    "schema_registry.password",
                    "required with schema_registry.username",
                ),
                (None, Some(_)) => self.err(
                    "schema_registry.username",
                    "required with schema_registry.password",
                ),
                _ => {}
            }
            if sr.bearer_token.is_some() && (sr.username.is_some() || sr.password.is_some()) {
                self.err(
                    "schema_registry.bearer_token",
                    "use either basic auth (username/password) or a bearer token, not both",
                );
            }
            if sr.timeout.0.is_zero() {
                self.err("schema_registry.timeout", "must be above zero");
            }
            if sr.table_subject.trim().is_empty() {
                self.err("schema_registry.table_subject", "must not be empty");
            } else if sr.table_subject.replace("{topic}", "").contains(['{', '}']) {
                self.err(
                    "schema_registry.table_subject",
                    "the only placeholder is {topic}",
                );
            }
        }
        if let Some(avro) = &c.avro
            && avro.schema_file.as_os_str().is_empty()
        {
            self.err("avro.schema_file", "must not be empty");
        }
    }

    fn bigquery(&mut self, c: &Config) {
        let b = &c.bigquery;
        if b.project.trim().is_empty() {
            self.err("bigquery.project", "must not be empty");
        }
        if b.dataset.is_empty()
            || !b
                .dataset
                .bytes()
                .all(|x| x.is_ascii_alphanumeric() || x == b'_')
        {
            self.err(
                "bigquery.dataset",
                "must be letters, digits and underscores",
            );
        }
        self.table_setting("bigquery.table", &b.table);
        if let Some(endpoint) = &b.endpoint
            && !is_http_url(endpoint)
        {
            self.err("bigquery.endpoint", "must be an http:// or https:// URL");
        }
        if b.credentials == Credentials::None && b.endpoint.is_none() {
            self.err(
                "bigquery.credentials",
                "none is only for an emulator: set bigquery.endpoint, or use adc or key_file",
            );
        }
        if let Credentials::KeyFile(p) = &b.credentials
            && p.as_os_str().is_empty()
        {
            self.err("bigquery.credentials.key_file", "must not be empty");
        }
        if let Some(ct) = &b.create_table {
            self.create_table("bigquery.create_table", ct);
        }
        self.metadata_columns("bigquery.metadata_columns", &b.metadata_columns);
    }

    /// `bigquery.table` or a route's `table`: a table id or a `{topic}` template.
    fn table_setting(&mut self, path: &str, table: &str) {
        let without_placeholder = table.replace("{topic}", "");
        if table.trim().is_empty() {
            self.err(path, "must not be empty");
        } else if without_placeholder.contains(['{', '}']) {
            self.err(path, "the only placeholder is {topic}");
        } else if without_placeholder.contains(['.', '/']) {
            self.err(
                path,
                "a table id, not a path (set project and dataset separately)",
            );
        } else if without_placeholder.len() > limits::MAX_TABLE_ID_BYTES {
            self.err(
                path,
                format!("at most {} bytes", limits::MAX_TABLE_ID_BYTES),
            );
        }
    }

    fn create_table(&mut self, path: &str, ct: &CreateTableConfig) {
        if ct.clustering.len() > limits::MAX_CLUSTERING_FIELDS {
            self.err(
                format!("{path}.clustering"),
                format!("at most {} columns", limits::MAX_CLUSTERING_FIELDS),
            );
        }
        for (i, col) in ct.clustering.iter().enumerate() {
            if !is_column_name(col) {
                self.err(
                    format!("{path}.clustering[{i}]"),
                    format!("`{col}` is not a column name"),
                );
            }
        }
        if ct.require_partition_filter && ct.time_partitioning.is_none() {
            self.err(
                format!("{path}.require_partition_filter"),
                format!("requires {path}.time_partitioning"),
            );
        }
        if let Some(tp) = &ct.time_partitioning {
            if let Some(field) = &tp.field
                && !is_column_name(field)
            {
                self.err(
                    format!("{path}.time_partitioning.field"),
                    format!("`{field}` is not a column name"),
                );
            }
            if tp.expiration.is_some_and(|e| e.0.is_zero()) {
                self.err(
                    format!("{path}.time_partitioning.expiration"),
                    "must be above zero (leave it out to keep partitions)",
                );
            }
        }
        for (key, value) in &ct.labels {
            if !is_label(key, true) {
                self.err(
                    format!("{path}.labels.{}", quoted_key(key)),
                    "a label key is lowercase letters, digits, `_` or `-`, starts with a letter, at most 63",
                );
            }
            if !is_label(value, false) {
                self.err(
                    format!("{path}.labels.{}", quoted_key(key)),
                    "a label value is lowercase letters, digits, `_` or `-`, at most 63",
                );
            }
        }
    }

    fn metadata_columns(&mut self, path: &str, cols: &MetadataColumns) {
        let mut seen: BTreeMap<String, &str> = BTreeMap::new();
        for (field, col) in cols.named() {
            let field_path = format!("{path}.{field}");
            if !is_column_name(col) {
                self.err(&field_path, format!("`{col}` is not a column name"));
            } else if let Some(other) = seen.insert(col.to_ascii_lowercase(), field) {
                self.err(
                    &field_path,
                    format!("column `{col}` is also {path}.{other}"),
                );
            }
        }
    }

    fn routes(&mut self, c: &Config) {
        for (i, r) in c.routes.iter().enumerate() {
            let path = format!("routes[{i}]");
            match (&r.topic_pattern, r.topics.is_empty()) {
                (None, true) => self.err(
                    format!("{path}.topics"),
                    "set topics or topic_pattern: which topics the route takes",
                ),
                (Some(_), false) => self.err(
                    format!("{path}.topic_pattern"),
                    "set either topics or topic_pattern, not both",
                ),
                (Some(p), true) => {
                    if let Err(e) = regex::Regex::new(&format!("^(?:{p})$")) {
                        self.err(
                            format!("{path}.topic_pattern"),
                            format!("not a regular expression: {e}"),
                        );
                    }
                }
                (None, false) => {}
            }
            for (j, topic) in r.topics.iter().enumerate() {
                if !is_kafka_topic_name(topic) {
                    self.err(
                        format!("{path}.topics[{j}]"),
                        format!("`{topic}` is not a valid topic name"),
                    );
                } else if c.kafka.topic_pattern.is_none() && !c.kafka.topics.contains(topic) {
                    self.err(
                        format!("{path}.topics[{j}]"),
                        format!("`{topic}` is not in kafka.topics"),
                    );
                }
            }
            if let Some(table) = &r.table {
                self.table_setting(&format!("{path}.table"), table);
            }
            if let Some(ct) = &r.create_table {
                self.create_table(&format!("{path}.create_table"), ct);
            }
            if let Some(cols) = &r.metadata_columns {
                self.metadata_columns(&format!("{path}.metadata_columns"), cols);
            }
            if let Some(avro) = &r.avro
                && avro.schema_file.as_os_str().is_empty()
            {
                self.err(format!("{path}.avro.schema_file"), "must not be empty");
            }
        }
        self.table_collisions(c);
    }

    /// Protobuf and JSON Schema are read through the registry, raw Avro from its schema file,
    /// schemaless JSON needs neither and has no schema to create or evolve a table from. A
    /// registry route without a format reads each schema id as its registered type. Each
    /// refusal names the field that asks for it (the route's own, else the top-level one it
    /// inherits).
    fn formats(&mut self, c: &Config) {
        let top_path = if c.json.is_some() {
            "json"
        } else {
            "schema_registry.format"
        };
        let b = &c.bigquery;
        let mut scopes = vec![Scope {
            format_path: top_path.into(),
            format: c.top_format(),
            raw_avro: c.avro.is_some(),
            create_table: b
                .create_table
                .is_some()
                .then(|| "bigquery.create_table".into()),
            add_columns: (b.schema_update == SchemaUpdate::AddColumns)
                .then(|| "bigquery.schema_update".into()),
        }];
        for (i, r) in c.routes.iter().enumerate() {
            let create_table = match (&r.create_table, &b.create_table) {
                (Some(_), _) => Some(format!("routes[{i}].create_table")),
                (None, Some(_)) => Some("bigquery.create_table".into()),
                (None, None) => None,
            };
            let add_columns = match r.schema_update {
                Some(SchemaUpdate::AddColumns) => Some(format!("routes[{i}].schema_update")),
                Some(_) => None,
                None => (b.schema_update == SchemaUpdate::AddColumns)
                    .then(|| "bigquery.schema_update".into()),
            };
            let format = r.format.or(c.top_format());
            scopes.push(Scope {
                format_path: match r.format {
                    Some(_) => format!("routes[{i}].format"),
                    None => top_path.into(),
                },
                format,
                // A route reads the top-level schema file unless it has its own (`route_for`).
                raw_avro: r.avro.is_some() || c.avro.is_some(),
                create_table,
                add_columns,
            });
            // Without a format, a CDC route reads Avro ids; others are bad records.
            if let Some(format) = format.filter(|f| r.cdc.is_some() && *f != InputFormat::Avro) {
                self.err(
                    format!("routes[{i}].cdc"),
                    format!(
                        "change data capture reads avro records only, not {}",
                        format.as_str()
                    ),
                );
            }
        }
        for s in scopes {
            let Some(format) = s.format else {
                // Each schema id's registered type: `top_format` is `None` only with a registry.
                continue;
            };
            let name = format.as_str();
            match format {
                InputFormat::Avro => {
                    if !s.raw_avro && c.schema_registry.is_none() && c.json.is_some() {
                        self.err(
                            &s.format_path,
                            "avro needs schema_registry or avro.schema_file",
                        );
                    }
                }
                InputFormat::Protobuf | InputFormat::JsonSchema => {
                    if s.raw_avro {
                        self.err(
                            &s.format_path,
                            format!(
                                "{name} records are read through schema_registry (raw input is avro only)"
                            ),
                        );
                    } else if c.schema_registry.is_none() {
                        self.err(&s.format_path, format!("{name} needs schema_registry"));
                    }
                }
                InputFormat::Json => {
                    if s.raw_avro {
                        self.err(
                            &s.format_path,
                            "json is not read beside avro.schema_file (its schema would be ignored)",
                        );
                    }
                    if let Some(path) = s.create_table {
                        self.err(
                            &path,
                            format!(
                                "create_table is not supported for schemaless json ({}): there is no schema to create the table from; create the table first",
                                s.format_path
                            ),
                        );
                    }
                    if let Some(path) = s.add_columns {
                        self.err(
                            &path,
                            format!(
                                "add_columns is not supported for schemaless json ({}): there is no schema to add columns from",
                                s.format_path
                            ),
                        );
                    }
                }
            }
        }
    }

    /// One table is written with one set of settings: two listed topics that a `{topic}`
    /// template sanitises into the same id, or two routes naming the same fixed table, are
    /// refused. Several topics into one table is a fixed `table` in one route (or at the top).
    fn table_collisions(&mut self, c: &Config) {
        let mut by_table: BTreeMap<String, (usize, &str, Option<usize>)> = BTreeMap::new();
        for (i, topic) in c.kafka.topics.iter().enumerate() {
            let route = c.route_for(topic);
            match by_table.get(&route.table) {
                None => {
                    by_table.insert(route.table.clone(), (i, topic, route.route));
                }
                Some((_, other, other_route)) if *other_route != route.route => {
                    let name = |r: &Option<usize>| {
                        r.map_or("bigquery".to_string(), |r| format!("routes[{r}]"))
                    };
                    self.err(
                        format!("kafka.topics[{i}]"),
                        format!(
                            "`{topic}` ({}) and `{other}` ({}) both write table `{}` with different settings: route them together",
                            route.path,
                            name(other_route),
                            route.table
                        ),
                    );
                }
                Some((_, other, _)) if route.table_template.contains("{topic}") => {
                    self.err(
                        format!("kafka.topics[{i}]"),
                        format!(
                            "`{topic}` and `{other}` both become table `{}` through the {{topic}} template ({}): to write them into one table on purpose, give them a fixed table in a route",
                            route.table, route.path
                        ),
                    );
                }
                Some(_) => {}
            }
        }
        // With a pattern subscription the topics are unknown here: compare the fixed tables.
        let mut fixed: BTreeMap<&str, String> = BTreeMap::new();
        if c.unrouted_topics().is_none_or(|t| !t.is_empty()) && !c.bigquery.table.contains('{') {
            fixed.insert(&c.bigquery.table, "bigquery.table".into());
        }
        for (i, r) in c.routes.iter().enumerate() {
            let table = r.table.as_deref().unwrap_or(&c.bigquery.table);
            if table.contains('{') {
                continue;
            }
            if let Some(other) = fixed.insert(table, format!("routes[{i}].table")) {
                self.err(
                    format!("routes[{i}].table"),
                    format!(
                        "table `{table}` is also written by {other}: list all its topics in one route"
                    ),
                );
            }
        }
    }

    fn checkpoint(&mut self, cp: &CheckpointConfig) {
        if cp.interval.0 < Duration::from_millis(100) {
            self.err("checkpoint.interval", "must be at least 100ms");
        }
        if cp.barrier_timeout.0.is_zero() {
            self.err("checkpoint.barrier_timeout", "must be above zero");
        }
        if cp.commit_failure_isolation_threshold == 0 {
            self.err(
                "checkpoint.commit_failure_isolation_threshold",
                "must be at least 1",
            );
        }
        if cp.partition_stall_timeout.0 < Duration::from_secs(1)
            || cp.partition_stall_timeout.0 < cp.interval.0
        {
            self.err(
                "checkpoint.partition_stall_timeout",
                "must be at least 1s and at least checkpoint.interval",
            );
        }
        let needed = checkpoint_metadata_worst_case_len();
        if (cp.metadata_max_bytes as usize) < needed {
            self.err(
                "checkpoint.metadata_max_bytes",
                format!(
                    "{} is below the worst-case checkpoint metadata length {needed}",
                    cp.metadata_max_bytes
                ),
            );
        }
    }

    fn writer(&mut self, w: &WriterConfig, cp: &CheckpointConfig) {
        if w.max_request_bytes > limits::MAX_REQUEST_BYTES {
            self.err(
                "writer.max_request_bytes",
                format!("must be at most {}", limits::MAX_REQUEST_BYTES),
            );
        }
        if w.max_request_bytes < limits::MIN_REQUEST_BYTES {
            self.err(
                "writer.max_request_bytes",
                format!("must be at least {}", limits::MIN_REQUEST_BYTES),
            );
        }
        if w.max_rows_per_request == 0 {
            self.err("writer.max_rows_per_request", "must be at least 1");
        }
        if w.max_inflight_requests == 0 {
            self.err("writer.max_inflight_requests", "must be at least 1");
        }
        if w.response_timeout.0 < Duration::from_millis(100) {
            self.err("writer.response_timeout", "must be at least 100ms");
        }
        if w.linger > cp.interval {
            self.err(
                "writer.linger",
                format!("must not exceed checkpoint.interval ({})", cp.interval),
            );
        }
        if w.max_inflight_bytes < w.max_request_bytes {
            self.err(
                "writer.max_inflight_bytes",
                format!(
                    "must be at least writer.max_request_bytes ({})",
                    w.max_request_bytes
                ),
            );
        }
        if w.max_uncommitted_bytes < w.max_inflight_bytes {
            self.err(
                "writer.max_uncommitted_bytes",
                format!(
                    "must be at least writer.max_inflight_bytes ({})",
                    w.max_inflight_bytes
                ),
            );
        }
        if w.memory_limit < w.max_inflight_bytes {
            self.err(
                "writer.memory_limit",
                format!(
                    "must be at least writer.max_inflight_bytes ({})",
                    w.max_inflight_bytes
                ),
            );
        }
    }

    fn dead_letter(&mut self, c: &Config) {
        let topic = c.dead_letter.as_ref().and_then(|d| d.topic.as_deref());
        if c.on_bad_record == OnBadRecord::DeadLetter && topic.is_none() {
            self.err(
                "dead_letter.topic",
                "dead_letter.topic is required when on_bad_record is dead_letter (or choose on_bad_record: fail or skip)",
            );
        }
        let Some(dl) = &c.dead_letter else { return };
        if let Some(topic) = topic {
            if !is_kafka_topic_name(topic) {
                self.err(
                    "dead_letter.topic",
                    format!("`{topic}` is not a valid topic name"),
                );
            }
            if c.kafka.topics.iter().any(|t| t == topic) {
                self.err(
                    "dead_letter.topic",
                    "must not be one of kafka.topics (bad records would come back)",
                );
            }
        }
        if let Some(acks) = dl.properties.get("acks")
            && !matches!(acks.trim(), "all" | "-1")
        {
            self.err(
                format!("dead_letter.properties.{}", quoted_key("acks")),
                "forced to all by the sink (a dead-lettered record is durable before its checkpoint commits)",
            );
        }
    }

    fn recovery(&mut self, c: &Config) {
        if c.recovery.resolve_attempts == Some(0) {
            self.err("recovery.resolve_attempts", "must be at least 1");
        }
        let resolving = [
            (
                c.recovery.lost_stream == Some(LostStream::Resolve),
                "recovery.lost_stream",
                "rewind or fail",
            ),
            (
                c.recovery.lost_offsets == LostOffsets::Resolve,
                "recovery.lost_offsets",
                "fail, earliest or latest",
            ),
        ];
        for (_, field, others) in resolving.into_iter().filter(|(on, ..)| *on) {
            for path in resolve_partition_filters(c) {
                self.err(
                    field,
                    format!(
                        "resolve queries by partition and offset, which a table created with \
                         {path} refuses: use {others}, or drop that setting"
                    ),
                );
            }
            for (path, missing) in resolve_missing_columns(c) {
                self.err(
                    field,
                    format!(
                        "resolve needs the metadata columns {}: set {path}.{}",
                        missing.join(", "),
                        missing.join(&format!(", {path}."))
                    ),
                );
            }
        }
    }

    fn ops(&mut self, c: &Config) {
        if c.shutdown_deadline <= c.checkpoint.barrier_timeout {
            self.err(
                "shutdown_deadline",
                format!(
                    "must exceed checkpoint.barrier_timeout ({}): the final cycle needs a barrier, a commit and a flush",
                    c.checkpoint.barrier_timeout
                ),
            );
        }
        // A bare word is a valid filter for `tracing` (a target name), so `verbose` would
        // silently log nothing: a single directive without `=` must be a level.
        let level = c.log.level.trim();
        let bare = !level.contains(['=', ',', '[']);
        const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
        if bare && !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            self.err(
                "log.level",
                format!("`{level}` is not a level (trace, debug, info, warn, error, off) or a filter like info,kafka_bigquery_sink=debug"),
            );
        } else if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(level) {
            self.err("log.level", format!("not a level or filter: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_sums() {
        assert_eq!(
            HumanDuration::parse("250ms").unwrap().0,
            Duration::from_millis(250)
        );
        assert_eq!(
            HumanDuration::parse("5s").unwrap().0,
            Duration::from_secs(5)
        );
        assert_eq!(
            HumanDuration::parse("1m30s").unwrap().0,
            Duration::from_secs(90)
        );
        assert_eq!(
            HumanDuration::parse("7d").unwrap().0,
            Duration::from_secs(7 * 86_400)
        );
        for bad in ["", "5", "5 s", "s", "5sec", "-1s", "1.5s"] {
            assert!(HumanDuration::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(ByteSize::parse("8MiB").unwrap().0, 8 << 20);
        assert_eq!(ByteSize::parse("512 KiB").unwrap().0, 512 << 10);
        assert_eq!(ByteSize::parse("10MB").unwrap().0, 10_000_000);
        assert_eq!(ByteSize::parse("4096").unwrap().0, 4096);
        assert_eq!(ByteSize(20 << 20).to_string(), "20MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000B");
        for bad in ["", "MiB", "8 XB", "-1"] {
            assert!(ByteSize::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn secrets_do_not_print() {
        assert_eq!(format!("{:?}", Secret::new("hunter2")), "<redacted>");
    }

    #[test]
    fn paths_name_keys_sequence_items_and_dotted_keys() {
        let text =
            "a:\n  b: 1\n  list:\n    - x\n    - y: 2\n  props:\n    enable.auto.commit: true\n";
        let path = |line, col| yaml_paths::path_at(text, line, col);
        assert_eq!(path(2, 3), ("a.b".into(), Some("a".into())));
        assert_eq!(path(4, 7), ("a.list[0]".into(), None));
        assert_eq!(path(5, 7), ("a.list[1].y".into(), Some("a.list[1]".into())));
        assert_eq!(path(5, 10), ("a.list[1].y".into(), None));
        assert_eq!(
            path(7, 5),
            (
                "a.props.\"enable.auto.commit\"".into(),
                Some("a.props".into())
            )
        );
    }

    #[test]
    fn topics_become_table_ids_of_letters_digits_and_underscores_at_most_1024_bytes() {
        assert_eq!(
            table_for_topic("{topic}", "shop.orders-v2"),
            "shop_orders_v2"
        );
        assert_eq!(table_for_topic("raw_{topic}_t", "a.b"), "raw_a_b_t");
        assert_eq!(table_for_topic("fixed", "a.b"), "fixed");
        let long = "x".repeat(249);
        let id = table_for_topic(&format!("{}{{topic}}", "p".repeat(900)), &long);
        assert_eq!(id.len(), limits::MAX_TABLE_ID_BYTES);
        assert!(id.starts_with(&"p".repeat(900)));
    }

    #[test]
    fn worst_case_metadata_is_well_below_the_broker_default() {
        let n = checkpoint_metadata_worst_case_len();
        // The longest encoding of the codec: prefix, version, a 128-character stream id, the
        // 16-hex table fingerprint and two 19-digit offsets.
        let longest = crate::checkpoint::metadata::worst_case_len();
        assert_eq!(n, longest);
        assert!(n > 128 + 16 + 2 * 19, "the bound covers every field: {n}");
        assert!(n < defaults::CHECKPOINT_METADATA_MAX_BYTES as usize);
    }
}
