//! The resources the store keeps and hands out: datasets, tables, stream kinds and phases,
//! stream snapshots, row batches and visible rows, batch-commit outcomes.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::rows::RowCodec;
use kbq_core::table_schema::TableSchema;

use super::{StreamFailure, TableRef};

/// A dataset (the REST `Dataset` resource fields the emulator keeps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    pub project: String,
    pub dataset_id: String,
    /// As given by the caller (`US`, `EU`, `us-east1`); streams report it lower-cased.
    pub location: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub friendly_name: Option<String>,
    /// Milliseconds since the epoch.
    pub creation_time: i64,
    pub last_modified_time: i64,
    pub etag: String,
}

impl Dataset {
    /// A new dataset with the server-set fields filled in; `insert_dataset` overwrites them.
    pub fn new(project: impl Into<String>, dataset_id: impl Into<String>) -> Dataset {
        Dataset {
            project: project.into(),
            dataset_id: dataset_id.into(),
            location: "US".into(),
            labels: BTreeMap::new(),
            description: None,
            friendly_name: None,
            creation_time: 0,
            last_modified_time: 0,
            etag: String::new(),
        }
    }
}

/// A table: the fields of the REST `Table` resource that the emulator keeps. `time_partitioning`
/// and `clustering` are stored verbatim in their REST JSON shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table {
    pub reference: TableRef,
    pub schema: TableSchema,
    #[serde(default)]
    pub time_partitioning: Option<serde_json::Value>,
    #[serde(default)]
    pub clustering: Option<serde_json::Value>,
    #[serde(default)]
    pub require_partition_filter: Option<bool>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub friendly_name: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `tableConstraints` in its REST JSON shape (`primaryKey.columns`, `foreignKeys`).
    #[serde(default)]
    pub table_constraints: Option<serde_json::Value>,
    /// `maxStaleness`: an SQL interval as a string (`0-0 0 0:10:0`).
    #[serde(default)]
    pub max_staleness: Option<String>,
    /// Milliseconds since the epoch.
    pub creation_time: i64,
    pub last_modified_time: i64,
    pub etag: String,
}

impl Table {
    /// The primary-key columns, in key order; empty without a primary key.
    pub fn primary_key(&self) -> Vec<String> {
        self.table_constraints
            .as_ref()
            .and_then(|c| c.pointer("/primaryKey/columns"))
            .and_then(|c| c.as_array())
            .map(|cols| {
                cols.iter()
                    .filter_map(|c| c.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A new table with the server-set fields left for `insert_table` to fill in.
    pub fn new(reference: TableRef, schema: TableSchema) -> Table {
        Table {
            reference,
            schema,
            time_partitioning: None,
            clustering: None,
            require_partition_filter: None,
            description: None,
            friendly_name: None,
            labels: BTreeMap::new(),
            table_constraints: None,
            max_staleness: None,
            creation_time: 0,
            last_modified_time: 0,
            etag: String::new(),
        }
    }
}

/// The type of a write stream. `Default` is the `_default` stream (COMMITTED semantics, no
/// offsets, cannot be finalized, flushed or committed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamKind {
    Committed,
    Pending,
    Buffered,
    Default,
}

impl StreamKind {
    /// The internal name BigQuery uses in `INVALID_STREAM_TYPE` messages (COMMITTED is
    /// `WRITE_OPTIMIZED` in an observed message; the others are guesses).
    pub fn internal_name(self) -> &'static str {
        match self {
            StreamKind::Committed | StreamKind::Default => "WRITE_OPTIMIZED",
            StreamKind::Pending => "PENDING",
            StreamKind::Buffered => "BUFFERED",
        }
    }
}

/// The phase of a stream's state machine, as in BigQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamPhase {
    Active,
    Finalized,
    /// A PENDING stream whose rows a batch commit made visible.
    Committed,
}

/// A snapshot of a stream for GetWriteStream / CreateWriteStream.
#[derive(Debug, Clone)]
pub struct StreamInfo {
    /// Canonical name (`…/streams/<id>`).
    pub name: String,
    pub kind: StreamKind,
    pub phase: StreamPhase,
    /// Microseconds since the epoch; `None` for `_default`.
    pub create_time_us: Option<i64>,
    pub commit_time_us: Option<i64>,
    pub row_count: i64,
    pub flushed_offset: Option<i64>,
    pub table_schema: TableSchema,
    /// Lower-case dataset location.
    pub location: String,
}

/// Rows of one append, sharing the codec of the connection that wrote them.
#[derive(Debug)]
pub struct RowBatch {
    pub rows: Vec<Bytes>,
    pub codec: Arc<RowCodec>,
}

/// One visible row: its serialized bytes and the codec that can render it.
#[derive(Debug, Clone)]
pub struct VisibleRow {
    pub data: Bytes,
    pub codec: Arc<RowCodec>,
}

/// A page of a table's visible rows, in visibility order.
#[derive(Debug, Clone)]
pub struct VisibleRows {
    /// All visible rows of the table.
    pub total: u64,
    pub rows: Vec<VisibleRow>,
}

/// Result of a batch commit: either the commit time or the failures (nothing committed).
#[derive(Debug, Clone, PartialEq)]
pub enum CommitOutcome {
    Committed { commit_time_us: i64 },
    Failed(Vec<StreamFailure>),
}
