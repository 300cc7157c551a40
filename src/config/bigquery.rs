//! The destination: the BigQuery project, dataset and table settings.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::{HumanDuration, defaults};
/// The transcoder's own types, deserialized as they are (no copies): `unknown_fields`,
/// `map_mode`, `metadata_columns` and `transforms` of `bigquery` and of each route.
use kbq_transcode::transforms::Transform;
use kbq_transcode::{MapMode, MetadataColumns, UnknownFields};

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
    /// The `endpoint` is a local emulator: only then may an `http://` endpoint receive real
    /// credentials (`adc`, `file`, `env`, `key_file`), whose bearer token it would carry in the
    /// clear.
    #[serde(default)]
    pub local_emulator: bool,
    /// `adc` (default: Application Default Credentials, e.g. GKE Workload Identity),
    /// `{file: path}` or `{env: VAR}` (a Google credential file of any type, named by its path or
    /// by the variable that holds its path), `{key_file: path}` (a service-account key) or `none`
    /// (only with an emulator `endpoint`).
    #[serde(default = "default_credentials")]
    pub credentials: Credentials,
    /// Dataset location (e.g. `US`, `EU`, `europe-west1`), used by query jobs.
    #[serde(default)]
    pub location: Option<String>,
    /// Create a missing table from the Avro schema with these options; without it a missing
    /// table is an error.
    #[serde(default)]
    pub create_table: Option<CreateTableConfig>,
    /// `none` (default), `add_columns` (a new writer schema with new nullable fields adds
    /// NULLABLE columns, nested ones too), `relax_columns` (that, and a REQUIRED column the
    /// writer schema makes optional or drops becomes NULLABLE) or `union` (that, and a table
    /// several schemas or topics write holds the union of their fields).
    #[serde(default = "default_schema_update")]
    pub schema_update: SchemaUpdate,
    /// Avro fields without a table column: `ignore` (default) or `error` (a bad record).
    #[serde(default = "default_unknown_fields")]
    pub unknown_fields: UnknownFields,
    /// Avro maps as `struct` (default: REPEATED STRUCT<key, value>) or `json` (a JSON column).
    #[serde(default = "default_map_mode")]
    pub map_mode: MapMode,
    /// Optional columns for Kafka metadata; each names the column, unset means no column.
    #[serde(default)]
    pub metadata_columns: MetadataColumns,
    /// Transforms of the topics without a route, applied in order: drop, rename, mask, set,
    /// filter (docs/mapping.md, "Transforms").
    #[serde(default)]
    pub transforms: Vec<Transform>,
}

fn default_credentials() -> Credentials {
    defaults::CREDENTIALS
}
fn default_schema_update() -> SchemaUpdate {
    defaults::SCHEMA_UPDATE
}
fn default_partition_type() -> PartitionType {
    defaults::TIME_PARTITIONING_TYPE
}
fn default_unknown_fields() -> UnknownFields {
    defaults::UNKNOWN_FIELDS
}
fn default_map_mode() -> MapMode {
    defaults::MAP_MODE
}

/// How the daemon authenticates to BigQuery.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Credentials {
    /// Application Default Credentials.
    Adc,
    /// A Google credential file of any type read from a file (service account, authorized user,
    /// external account, impersonated service account), named by its path.
    File(PathBuf),
    /// A Google credential file named by the environment variable that holds its path.
    Env(String),
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
    /// The full name of the Protobuf message the table is created from (`shop.Order`, or a
    /// nested `shop.Order.Line`): required when the subject's latest schema declares more than
    /// one top-level message; unset, the only one.
    #[serde(default)]
    pub protobuf_message: Option<String>,
}

/// Time partitioning of a created table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimePartitioning {
    /// The TIMESTAMP/DATE column; unset means ingestion-time partitioning.
    #[serde(default)]
    pub field: Option<String>,
    /// `DAY` (default), `HOUR`, `MONTH` or `YEAR`.
    #[serde(default = "default_partition_type", rename = "type")]
    pub kind: PartitionType,
    /// Partitions older than this are deleted by BigQuery; unset keeps them.
    #[serde(default)]
    pub expiration: Option<HumanDuration>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PartitionType {
    Day,
    Hour,
    Month,
    Year,
}

/// How far a new writer schema may change the table (docs/configuration.md,
/// `bigquery.schema_update`). Each level allows what the one before it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaUpdate {
    /// The table is never changed.
    None,
    /// New fields become NULLABLE columns (also inside RECORD columns).
    AddColumns,
    /// And a REQUIRED column the writer schema makes optional, or lacks, becomes NULLABLE.
    RelaxColumns,
    /// And the table is the union of every writer schema's fields: a field required in its
    /// own schema is added NULLABLE (the other schemas have no value for it), and two schemas
    /// that give one field different types are refused, naming both.
    Union,
}

impl SchemaUpdate {
    /// The table may change at all (columns are added).
    pub fn adds_columns(self) -> bool {
        self >= SchemaUpdate::AddColumns
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SchemaUpdate::None => "none",
            SchemaUpdate::AddColumns => "add_columns",
            SchemaUpdate::RelaxColumns => "relax_columns",
            SchemaUpdate::Union => "union",
        }
    }
}

/// The metadata columns that are set, with the name of their field.
pub(crate) fn named_columns(c: &MetadataColumns) -> Vec<(&'static str, &str)> {
    [
        ("topic", &c.topic),
        ("partition", &c.partition),
        ("offset", &c.offset),
        ("timestamp", &c.timestamp),
        ("key", &c.key),
        ("headers", &c.headers),
    ]
    .into_iter()
    .filter_map(|(field, col)| col.as_deref().map(|c| (field, c)))
    .collect()
}
