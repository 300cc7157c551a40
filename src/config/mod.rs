//! The daemon's YAML configuration (docs/configuration.md): typed sections, `${ENV}`
//! substitution, every default in [`defaults`], and [`validate`], which checks a parsed config
//! without any I/O and names the field path of every error.
//!
//! Loading runs in two steps. [`Config::from_yaml`] parses (unknown keys are errors everywhere,
//! `${NAME}` and `${NAME:-default}` are substituted in unquoted values, a missing variable
//! without a default is an error naming it) and reports parse errors with their field path and
//! line. [`validate`] then checks the rules between fields and returns every violation at once.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use kbq_core::bad_record::BadRecordPolicy;
use kbq_transcode::protobuf::MessageIndexEncoding;

mod bigquery;
mod cdc;
pub mod defaults;
mod delivery;
mod kafka_properties;
pub mod limits;
mod load;
mod ops;
mod routes;
mod schema_file_checks;
mod secret_files;
pub mod template;
mod topic_pattern;
mod validate;
mod values;

// The config's face: each type under its own name, from the room that declares it.
/// The metadata columns a route names (schema evolution never relaxes them).
pub(crate) use bigquery::named_columns;
pub use bigquery::{
    BigQueryConfig, CreateTableConfig, Credentials, PartitionType, SchemaUpdate, TimePartitioning,
};
pub use delivery::{CheckpointConfig, DeadLetterConfig, Delivery, RecoveryConfig, WriterConfig};
pub use kafka_properties::FORCED_CONSUMER_PROPERTIES;
pub use load::{ConfigError, LoadError};
pub use ops::{LogConfig, LogFormat, MetricsConfig};
pub use routes::{RouteConfig, TopicRoute, sanitize_table_name, table_for_topic};
pub use validate::{checkpoint_metadata_worst_case_len, validate, warnings};
pub use values::{ByteSize, HumanDuration, Properties, Secret};

pub use cdc::{CdcConfig, CdcFormat, CdcMode, MAX_KEY_COLUMNS, SequenceConfig};
pub use topic_pattern::{TopicPattern, is_internal_topic};

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
    #[serde(default = "default_delivery")]
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
    #[serde(default = "default_on_bad_record")]
    pub on_bad_record: BadRecordPolicy,
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

pub(super) fn default_shutdown_deadline() -> HumanDuration {
    HumanDuration(defaults::SHUTDOWN_DEADLINE)
}
fn default_delivery() -> Delivery {
    defaults::DELIVERY
}
fn default_on_bad_record() -> BadRecordPolicy {
    defaults::ON_BAD_RECORD
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
    /// librdkafka properties whose values are read from files (a mounted Kubernetes Secret),
    /// e.g. `sasl.password: /var/run/secrets/kafka/password`; read once at start, one trailing
    /// newline dropped. A property is set here or in `properties`, not both.
    #[serde(default)]
    pub property_files: BTreeMap<String, PathBuf>,
}

impl KafkaConfig {
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
    /// A file holding the password (a mounted Kubernetes Secret), instead of `password`; read
    /// once at start, one trailing newline dropped.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Bearer token, instead of basic auth.
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    /// A file holding the bearer token, instead of `bearer_token`.
    #[serde(default)]
    pub bearer_token_file: Option<PathBuf>,
    /// PEM file of CA certificates to trust, in addition to the system roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Per-request timeout (default 10s).
    #[serde(default = "default_sr_timeout")]
    pub timeout: HumanDuration,
    /// Attempts of a failing lookup, the first included, before the partition waits and tries
    /// again later (default 5). A registry outage stalls a partition; it never dead-letters good
    /// records.
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
    #[serde(default = "default_sr_message_indexes")]
    pub protobuf_message_indexes: MessageIndexEncoding,
    /// The largest registry answer read (default 64MiB, at most 1GiB): an answer longer is cut
    /// off and counts as a registry outage (the partition waits and asks again, it never
    /// dead-letters good records), so a registry answering without end cannot take the memory.
    #[serde(default = "default_sr_max_response_bytes")]
    pub max_response_bytes: ByteSize,
}

/// The encoding of record values read through the Schema Registry (`docs/mapping.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputFormat {
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

pub(super) fn default_sr_timeout() -> HumanDuration {
    HumanDuration(defaults::SCHEMA_REGISTRY_TIMEOUT)
}
pub(super) fn default_sr_retries() -> u32 {
    defaults::SCHEMA_REGISTRY_RETRIES
}
pub(super) fn default_sr_not_found_grace() -> HumanDuration {
    HumanDuration(defaults::SCHEMA_REGISTRY_NOT_FOUND_GRACE)
}
pub(super) fn default_sr_table_subject() -> String {
    defaults::SCHEMA_REGISTRY_TABLE_SUBJECT.into()
}
fn default_sr_max_response_bytes() -> ByteSize {
    defaults::SCHEMA_REGISTRY_MAX_RESPONSE_BYTES
}
fn default_sr_message_indexes() -> MessageIndexEncoding {
    defaults::SCHEMA_REGISTRY_PROTOBUF_MESSAGE_INDEXES
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
