//! The destination: the BigQuery project, dataset and table settings.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::HumanDuration;

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
    pub(super) fn named(&self) -> Vec<(&'static str, &str)> {
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
