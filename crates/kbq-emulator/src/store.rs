//! The emulator's state: datasets, tables, write streams, their rows and flush cursors.
//!
//! Locking is per object so that appends to different streams never wait on each other for more
//! than a map lookup: the dataset/table/stream maps are behind `RwLock`s that are held only to
//! find or insert an `Arc`; each stream has its own `Mutex` (rows, row count, cursor, phase); each
//! table has one `Mutex` over its *visible* row log, held only to push or read chunk pointers.
//! Lock order, where two are held: stream(s) (sorted by id) → table visible log.
//!
//! Visibility follows the reference (§2.3): `_default` and COMMITTED rows become visible when the
//! append is acknowledged, BUFFERED rows when a flush covers them, PENDING rows when the batch
//! commit succeeds. The table's visible log is ordered by the moment rows became visible.
//!
//! Rows are kept as the caller's `Bytes` (zero copy from the gRPC frame) in batches that share one
//! `Arc<RowCodec>`, so a reader can render them with the writer's descriptor.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::persist::{Journal, MetaRecord, RowLog};
use crate::rows::RowCodec;
use kbq_core::table_schema::TableSchema;

mod applied;

/// Lifetimes of idle streams, as in BigQuery (docs/architecture.md#bigquery-facts): COMMITTED 3
/// days, BUFFERED 7 days; PENDING is not documented and defaults to the BUFFERED value.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub committed_ttl: Duration,
    pub buffered_ttl: Duration,
    pub pending_ttl: Duration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            committed_ttl: Duration::from_secs(3 * 24 * 3600),
            buffered_ttl: Duration::from_secs(7 * 24 * 3600),
            pending_ttl: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// `projects/{project}/datasets/{dataset}/tables/{table}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TableRef {
    pub project: String,
    pub dataset: String,
    pub table: String,
}

impl TableRef {
    pub fn new(
        project: impl Into<String>,
        dataset: impl Into<String>,
        table: impl Into<String>,
    ) -> Self {
        TableRef {
            project: project.into(),
            dataset: dataset.into(),
            table: table.into(),
        }
    }

    /// Parses the resource path; `None` when it is not exactly a table path.
    pub fn parse(path: &str) -> Option<TableRef> {
        let parts: Vec<&str> = path.split('/').collect();
        match parts.as_slice() {
            ["projects", p, "datasets", d, "tables", t]
                if valid_segment(p) && valid_segment(d) && valid_segment(t) =>
            {
                Some(TableRef::new(*p, *d, *t))
            }
            _ => None,
        }
    }

    pub fn path(&self) -> String {
        format!(
            "projects/{}/datasets/{}/tables/{}",
            self.project, self.dataset, self.table
        )
    }

    /// `project:dataset.table`, the spelling of REST error messages.
    pub fn legacy(&self) -> String {
        format!("{}:{}.{}", self.project, self.dataset, self.table)
    }
}

fn valid_segment(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(|c| c.is_control() || c == '/')
}

fn valid_stream_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 512
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Which stream of a table a name designates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamId {
    Default,
    Explicit(String),
}

/// A parsed stream name; both `_default` spellings are accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamName {
    pub table: TableRef,
    pub id: StreamId,
}

impl StreamName {
    pub fn parse(name: &str) -> Option<StreamName> {
        let parts: Vec<&str> = name.split('/').collect();
        let (table, rest) = match parts.as_slice() {
            ["projects", p, "datasets", d, "tables", t, rest @ ..] => {
                if !(valid_segment(p) && valid_segment(d) && valid_segment(t)) {
                    return None;
                }
                (TableRef::new(*p, *d, *t), rest)
            }
            _ => return None,
        };
        let id = match rest {
            ["_default"] | ["streams", "_default"] => StreamId::Default,
            ["streams", id] if valid_stream_id(id) => StreamId::Explicit((*id).to_string()),
            _ => return None,
        };
        Some(StreamName { table, id })
    }

    /// The canonical spelling (`…/streams/<id>`).
    pub fn canonical(&self) -> String {
        match &self.id {
            StreamId::Default => format!("{}/streams/_default", self.table.path()),
            StreamId::Explicit(id) => format!("{}/streams/{id}", self.table.path()),
        }
    }
}

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

/// One `stream_errors` entry of BatchCommitWriteStreams.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamFailure {
    /// `google.cloud.bigquery.storage.v1.StorageError.StorageErrorCode` value.
    pub code: i32,
    pub entity: String,
    pub message: String,
}

/// StorageErrorCode values (storage.proto).
pub mod storage_code {
    pub const TABLE_NOT_FOUND: i32 = 1;
    pub const STREAM_ALREADY_COMMITTED: i32 = 2;
    pub const STREAM_NOT_FOUND: i32 = 3;
    pub const INVALID_STREAM_TYPE: i32 = 4;
    pub const INVALID_STREAM_STATE: i32 = 5;
    pub const STREAM_FINALIZED: i32 = 6;
    pub const SCHEMA_MISMATCH_EXTRA_FIELDS: i32 = 7;
    pub const OFFSET_ALREADY_EXISTS: i32 = 8;
    pub const OFFSET_OUT_OF_RANGE: i32 = 9;
}

/// Everything the store can refuse. `entity` is the resource name as the caller spelled it, so
/// messages echo it back. `status.rs` maps each variant to BigQuery's gRPC code, StorageError code
/// and message; the REST side maps the dataset/table variants to its JSON errors.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    #[error("invalid stream name {entity}")]
    InvalidStreamName { entity: String },
    #[error("invalid table name {entity}")]
    InvalidTableName { entity: String },
    #[error("not found: dataset {project}:{dataset}")]
    DatasetNotFound { project: String, dataset: String },
    #[error("already exists: dataset {project}:{dataset}")]
    DatasetExists { project: String, dataset: String },
    #[error("not found: table {}", table.legacy())]
    TableNotFound { table: TableRef, entity: String },
    #[error("already exists: table {}", table.legacy())]
    TableExists { table: TableRef },
    #[error("stream not found {entity}")]
    StreamNotFound { entity: String },
    #[error("invalid write stream type {kind}")]
    InvalidStreamType { kind: i32 },
    #[error("offset {received} is within the stream {entity}, expected {expected}")]
    OffsetAlreadyExists {
        expected: i64,
        received: i64,
        entity: String,
    },
    #[error("offset {received} is beyond the stream {entity}, expected {expected}")]
    OffsetOutOfRange {
        expected: i64,
        received: i64,
        entity: String,
    },
    #[error("negative offset {received} on {entity}")]
    NegativeOffset { received: i64, entity: String },
    #[error("offset given on the default stream {entity}")]
    OffsetOnDefault { entity: String },
    #[error("stream finalized {entity}")]
    StreamFinalized { entity: String },
    #[error("{operation} is not supported on stream {entity} of kind {kind:?}")]
    WrongStreamKind {
        operation: &'static str,
        kind: StreamKind,
        entity: String,
    },
    #[error("flush offset missing on {entity}")]
    FlushOffsetMissing { entity: String },
    #[error("flush offset {offset} is beyond the end of {entity}")]
    FlushBeyondEnd { offset: i64, entity: String },
    #[error("flush offset {offset} is below the flush cursor {cursor} of {entity}")]
    FlushBelowCursor {
        offset: i64,
        cursor: i64,
        entity: String,
    },
    #[error("no streams to commit on {entity}")]
    NothingToCommit { entity: String },
    #[error("persistence failed: {0}")]
    Persist(String),
}

/// A write stream: immutable identity plus its own lock over the mutable part.
#[derive(Debug)]
pub struct WriteStream {
    pub id: String,
    /// Canonical name.
    pub name: String,
    pub kind: StreamKind,
    pub create_time_us: Option<i64>,
    pub(crate) table: Arc<TableState>,
    /// Milliseconds since the epoch of the last use, for the TTL.
    last_activity_ms: AtomicI64,
    expired: AtomicBool,
    pub(crate) inner: Mutex<StreamInner>,
}

#[derive(Debug)]
pub(crate) struct StreamInner {
    pub(crate) phase: StreamPhase,
    pub(crate) row_count: i64,
    /// Rows of BUFFERED and PENDING streams, by first offset; COMMITTED and `_default` rows go
    /// straight to the table's visible log and are not kept here.
    pub(crate) batches: Vec<(i64, Arc<RowBatch>)>,
    /// Inclusive flush cursor of a BUFFERED stream.
    pub(crate) flushed: Option<i64>,
    pub(crate) commit_time_us: Option<i64>,
    pub(crate) log: Option<RowLog>,
}

impl WriteStream {
    /// The table this stream writes to.
    pub fn table(&self) -> &TableRef {
        &self.table.reference
    }

    /// Bumped whenever the table's schema changes (for `updated_schema`).
    pub fn table_schema_version(&self) -> u64 {
        self.table.schema_version.load(Ordering::Acquire)
    }

    /// The table's current schema.
    pub fn table_schema(&self) -> TableSchema {
        self.table.meta.read().expect("table lock").schema.clone()
    }

    pub fn is_default(&self) -> bool {
        self.kind == StreamKind::Default
    }

    /// The table's primary-key columns (empty without one).
    pub fn primary_key(&self) -> Vec<String> {
        self.table.meta.read().expect("table lock").primary_key()
    }

    fn lock(&self) -> MutexGuard<'_, StreamInner> {
        self.inner.lock().expect("stream lock")
    }

    fn touch(&self) {
        self.last_activity_ms.store(now_ms(), Ordering::Relaxed);
    }
}

/// A table: metadata, its `_default` stream and its visible row log.
#[derive(Debug)]
pub struct TableState {
    pub reference: TableRef,
    /// Distinguishes a re-created table from a deleted one with the same name (file names too).
    pub(crate) uid: String,
    pub(crate) meta: RwLock<Table>,
    pub(crate) schema_version: AtomicU64,
    pub(crate) deleted: AtomicBool,
    pub(crate) location: String,
    pub(crate) visible: Mutex<VisibleLog>,
    pub(crate) default_stream: std::sync::OnceLock<Arc<WriteStream>>,
}

/// Visible rows as chunks of batches, with the running row count before each chunk.
#[derive(Debug, Default)]
pub(crate) struct VisibleLog {
    chunks: Vec<(u64, Arc<RowBatch>, Range<usize>)>,
    total: u64,
    /// Whether any visible row carries `_CHANGE_TYPE`: reads then show the applied state.
    cdc: bool,
    applied: applied::Cache,
}

impl VisibleLog {
    pub(crate) fn push(&mut self, batch: Arc<RowBatch>, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        self.cdc |= batch.codec.pseudo_columns().change_type.is_some();
        let len = range.len() as u64;
        self.chunks.push((self.total, batch, range));
        self.total += len;
    }

    fn page(&self, start: u64, max: usize) -> Vec<VisibleRow> {
        let mut out = Vec::new();
        if start >= self.total || max == 0 {
            return out;
        }
        // The chunk holding `start`: the last one whose first row is at or before it.
        let first = self
            .chunks
            .partition_point(|(before, _, _)| *before <= start)
            - 1;
        let mut skip = (start - self.chunks[first].0) as usize;
        for (_, batch, range) in &self.chunks[first..] {
            for row in &batch.rows[range.start + skip..range.end] {
                if out.len() == max {
                    return out;
                }
                out.push(VisibleRow {
                    data: row.clone(),
                    codec: batch.codec.clone(),
                });
            }
            skip = 0;
        }
        out
    }
}

/// The whole emulator state.
#[derive(Debug)]
pub struct Store {
    config: StoreConfig,
    datasets: RwLock<HashMap<(String, String), Dataset>>,
    tables: RwLock<HashMap<TableRef, Arc<TableState>>>,
    streams: RwLock<HashMap<String, Arc<WriteStream>>>,
    /// Orders visibility events, so that a restart rebuilds the visible log in the same order.
    pub(crate) visibility_seq: AtomicU64,
    pub(crate) journal: Option<Journal>,
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

fn new_stream_id() -> String {
    // Opaque, URL-safe, base64-looking like BigQuery's ids; random so ids never repeat across
    // restarts of a persistent emulator.
    let bytes: [u8; 30] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn new_etag() -> String {
    let bytes: [u8; 12] = rand::random();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

impl Store {
    /// An in-memory store.
    pub fn new(config: StoreConfig) -> Arc<Store> {
        Arc::new(Store::with_journal(config, None))
    }

    pub(crate) fn with_journal(config: StoreConfig, journal: Option<Journal>) -> Store {
        Store {
            config,
            datasets: RwLock::default(),
            tables: RwLock::default(),
            streams: RwLock::default(),
            visibility_seq: AtomicU64::new(0),
            journal,
        }
    }

    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    fn journal(&self, record: &MetaRecord) -> Result<(), StoreError> {
        match &self.journal {
            Some(j) => j
                .write(record)
                .map_err(|e| StoreError::Persist(e.to_string())),
            None => Ok(()),
        }
    }

    // ----- datasets -----

    /// Inserts a dataset; fills in creation/modification time and etag.
    pub fn insert_dataset(&self, mut dataset: Dataset) -> Result<Dataset, StoreError> {
        let key = (dataset.project.clone(), dataset.dataset_id.clone());
        let mut datasets = self.datasets.write().expect("datasets lock");
        if datasets.contains_key(&key) {
            return Err(StoreError::DatasetExists {
                project: key.0,
                dataset: key.1,
            });
        }
        let now = now_ms();
        dataset.creation_time = now;
        dataset.last_modified_time = now;
        dataset.etag = new_etag();
        self.journal(&MetaRecord::Dataset {
            dataset: dataset.clone(),
        })?;
        datasets.insert(key, dataset.clone());
        Ok(dataset)
    }

    pub fn get_dataset(&self, project: &str, dataset: &str) -> Option<Dataset> {
        self.datasets
            .read()
            .expect("datasets lock")
            .get(&(project.to_string(), dataset.to_string()))
            .cloned()
    }

    pub(crate) fn restore_dataset(&self, dataset: Dataset) {
        self.datasets.write().expect("datasets lock").insert(
            (dataset.project.clone(), dataset.dataset_id.clone()),
            dataset,
        );
    }

    // ----- tables -----

    /// Inserts a table into an existing dataset; fills in creation/modification time and etag.
    pub fn insert_table(&self, mut table: Table) -> Result<Table, StoreError> {
        let r = table.reference.clone();
        let location = self
            .get_dataset(&r.project, &r.dataset)
            .ok_or_else(|| StoreError::DatasetNotFound {
                project: r.project.clone(),
                dataset: r.dataset.clone(),
            })?
            .location;
        let mut tables = self.tables.write().expect("tables lock");
        if tables.contains_key(&r) {
            return Err(StoreError::TableExists { table: r });
        }
        let now = now_ms();
        table.creation_time = now;
        table.last_modified_time = now;
        table.etag = new_etag();
        let uid = new_stream_id();
        self.journal(&MetaRecord::Table {
            uid: uid.clone(),
            location: location.clone(),
            table: table.clone(),
        })?;
        let state = self.new_table_state(uid, location, table.clone())?;
        tables.insert(r, state);
        Ok(table)
    }

    fn new_table_state(
        &self,
        uid: String,
        location: String,
        table: Table,
    ) -> Result<Arc<TableState>, StoreError> {
        let state = Arc::new(TableState {
            reference: table.reference.clone(),
            uid: uid.clone(),
            meta: RwLock::new(table),
            schema_version: AtomicU64::new(0),
            deleted: AtomicBool::new(false),
            location: location.to_ascii_lowercase(),
            visible: Mutex::default(),
            default_stream: std::sync::OnceLock::new(),
        });
        let log = match &self.journal {
            Some(j) => Some(
                j.row_log(&format!("{uid}._default"))
                    .map_err(|e| StoreError::Persist(e.to_string()))?,
            ),
            None => None,
        };
        let default = Arc::new(WriteStream {
            id: "_default".into(),
            name: format!("{}/streams/_default", state.reference.path()),
            kind: StreamKind::Default,
            create_time_us: None,
            table: state.clone(),
            last_activity_ms: AtomicI64::new(now_ms()),
            expired: AtomicBool::new(false),
            inner: Mutex::new(StreamInner {
                phase: StreamPhase::Active,
                row_count: 0,
                batches: Vec::new(),
                flushed: None,
                commit_time_us: None,
                log,
            }),
        });
        let _ = state.default_stream.set(default);
        Ok(state)
    }

    pub(crate) fn restore_table(
        &self,
        uid: String,
        location: String,
        table: Table,
    ) -> Result<Arc<TableState>, StoreError> {
        let mut tables = self.tables.write().expect("tables lock");
        if let Some(existing) = tables.get(&table.reference)
            && existing.uid == uid
        {
            if existing.meta.read().expect("table lock").schema != table.schema {
                existing.schema_version.fetch_add(1, Ordering::AcqRel);
            }
            *existing.meta.write().expect("table lock") = table;
            return Ok(existing.clone());
        }
        let state = self.new_table_state(uid, location, table)?;
        tables.insert(state.reference.clone(), state.clone());
        Ok(state)
    }

    pub fn get_table(&self, r: &TableRef) -> Option<Table> {
        self.table_state(r)
            .map(|t| t.meta.read().expect("table lock").clone())
    }

    /// Tables of a dataset, by name.
    pub fn list_tables(&self, project: &str, dataset: &str) -> Vec<Table> {
        let tables = self.tables.read().expect("tables lock");
        let mut out: Vec<Table> = tables
            .iter()
            .filter(|(r, _)| r.project == project && r.dataset == dataset)
            .map(|(_, t)| t.meta.read().expect("table lock").clone())
            .collect();
        out.sort_by(|a, b| a.reference.table.cmp(&b.reference.table));
        out
    }

    pub(crate) fn table_state(&self, r: &TableRef) -> Option<Arc<TableState>> {
        self.tables.read().expect("tables lock").get(r).cloned()
    }

    /// Applies `change` to a table (the REST patch). The caller validates what may change (e.g.
    /// only new NULLABLE columns); the store bumps `lastModifiedTime`, the etag and — when the
    /// schema changed — the schema version that drives `updated_schema` on open connections.
    pub fn update_table<E>(
        &self,
        r: &TableRef,
        change: impl FnOnce(&mut Table) -> Result<(), E>,
    ) -> Result<Result<Table, E>, StoreError> {
        let state = self
            .table_state(r)
            .ok_or_else(|| StoreError::TableNotFound {
                table: r.clone(),
                entity: r.path(),
            })?;
        let mut meta = state.meta.write().expect("table lock");
        let mut next = meta.clone();
        if let Err(e) = change(&mut next) {
            return Ok(Err(e));
        }
        next.reference = meta.reference.clone();
        next.creation_time = meta.creation_time;
        next.last_modified_time = now_ms().max(meta.last_modified_time + 1);
        next.etag = new_etag();
        self.journal(&MetaRecord::Table {
            uid: state.uid.clone(),
            location: state.location.clone(),
            table: next.clone(),
        })?;
        if next.schema != meta.schema {
            state.schema_version.fetch_add(1, Ordering::AcqRel);
        }
        *meta = next.clone();
        Ok(Ok(next))
    }

    /// Deletes a table with its rows and streams.
    pub fn delete_table(&self, r: &TableRef) -> Result<(), StoreError> {
        let mut tables = self.tables.write().expect("tables lock");
        let Some(state) = tables.get(r).cloned() else {
            return Err(StoreError::TableNotFound {
                table: r.clone(),
                entity: r.path(),
            });
        };
        self.journal(&MetaRecord::TableDelete {
            uid: state.uid.clone(),
        })?;
        tables.remove(r);
        state.deleted.store(true, Ordering::Release);
        drop(tables);
        self.streams
            .write()
            .expect("streams lock")
            .retain(|_, s| !Arc::ptr_eq(&s.table, &state));
        Ok(())
    }

    pub(crate) fn restore_table_delete(&self, uid: &str) {
        let mut tables = self.tables.write().expect("tables lock");
        let found = tables
            .iter()
            .find(|(_, t)| t.uid == uid)
            .map(|(r, t)| (r.clone(), t.clone()));
        if let Some((r, state)) = found {
            tables.remove(&r);
            state.deleted.store(true, Ordering::Release);
            drop(tables);
            self.streams
                .write()
                .expect("streams lock")
                .retain(|_, s| !Arc::ptr_eq(&s.table, &state));
        }
    }

    /// The number of visible rows of a table.
    pub fn visible_row_count(&self, r: &TableRef) -> Result<u64, StoreError> {
        let state = self
            .table_state(r)
            .ok_or_else(|| StoreError::TableNotFound {
                table: r.clone(),
                entity: r.path(),
            })?;
        // The table's metadata first: the lock order is never visible log → table metadata.
        let table = state.meta.read().expect("table lock").clone();
        let mut visible = state.visible.lock().expect("visible lock");
        if visible.cdc {
            return Ok(visible.applied_rows(&table).len() as u64);
        }
        Ok(visible.total)
    }

    /// Up to `max` visible rows from index `start`, in the order they became visible
    /// (`tabledata.list`'s `startIndex`/`maxResults`).
    pub fn read_visible_rows(
        &self,
        r: &TableRef,
        start: u64,
        max: usize,
    ) -> Result<VisibleRows, StoreError> {
        let state = self
            .table_state(r)
            .ok_or_else(|| StoreError::TableNotFound {
                table: r.clone(),
                entity: r.path(),
            })?;
        // The table's metadata first: the lock order is never visible log → table metadata.
        let table = state.meta.read().expect("table lock").clone();
        let mut visible = state.visible.lock().expect("visible lock");
        if visible.cdc {
            let rows = visible.applied_rows(&table);
            let from = (start.min(rows.len() as u64)) as usize;
            return Ok(VisibleRows {
                total: rows.len() as u64,
                rows: rows[from..].iter().take(max).cloned().collect(),
            });
        }
        Ok(VisibleRows {
            total: visible.total,
            rows: visible.page(start, max),
        })
    }

    // ----- streams -----

    /// CreateWriteStream: a new explicit stream on an existing table.
    pub fn create_write_stream(
        &self,
        parent: &str,
        kind: StreamKind,
    ) -> Result<StreamInfo, StoreError> {
        let r = TableRef::parse(parent).ok_or_else(|| StoreError::InvalidTableName {
            entity: parent.to_string(),
        })?;
        let table = self
            .table_state(&r)
            .ok_or_else(|| StoreError::TableNotFound {
                table: r.clone(),
                entity: parent.to_string(),
            })?;
        if kind == StreamKind::Default {
            return Err(StoreError::InvalidStreamType { kind: 0 });
        }
        let id = new_stream_id();
        let create_time_us = now_us();
        self.journal(&MetaRecord::Stream {
            id: id.clone(),
            table_uid: table.uid.clone(),
            kind,
            create_time_us,
        })?;
        let stream = self.new_stream(id, table, kind, create_time_us)?;
        let info = self.info(&stream);
        self.streams
            .write()
            .expect("streams lock")
            .insert(stream.name.clone(), stream);
        Ok(info)
    }

    fn new_stream(
        &self,
        id: String,
        table: Arc<TableState>,
        kind: StreamKind,
        create_time_us: i64,
    ) -> Result<Arc<WriteStream>, StoreError> {
        let log = match &self.journal {
            Some(j) => Some(
                j.row_log(&id)
                    .map_err(|e| StoreError::Persist(e.to_string()))?,
            ),
            None => None,
        };
        Ok(Arc::new(WriteStream {
            name: format!("{}/streams/{id}", table.reference.path()),
            id,
            kind,
            create_time_us: Some(create_time_us),
            table,
            last_activity_ms: AtomicI64::new(now_ms()),
            expired: AtomicBool::new(false),
            inner: Mutex::new(StreamInner {
                phase: StreamPhase::Active,
                row_count: 0,
                batches: Vec::new(),
                flushed: None,
                // COMMITTED streams have been visible since creation (proto: commit_time equals
                // create_time for COMMITTED streams).
                commit_time_us: (kind == StreamKind::Committed).then_some(create_time_us),
                log,
            }),
        }))
    }

    pub(crate) fn restore_stream(
        &self,
        id: String,
        table_uid: &str,
        kind: StreamKind,
        create_time_us: i64,
    ) -> Result<Option<Arc<WriteStream>>, StoreError> {
        let table = self
            .tables
            .read()
            .expect("tables lock")
            .values()
            .find(|t| t.uid == table_uid)
            .cloned();
        let Some(table) = table else {
            return Ok(None);
        };
        let stream = self.new_stream(id, table, kind, create_time_us)?;
        self.streams
            .write()
            .expect("streams lock")
            .insert(stream.name.clone(), stream.clone());
        Ok(Some(stream))
    }

    pub(crate) fn all_tables(&self) -> Vec<Arc<TableState>> {
        self.tables
            .read()
            .expect("tables lock")
            .values()
            .cloned()
            .collect()
    }

    pub(crate) fn all_streams(&self) -> Vec<Arc<WriteStream>> {
        self.streams
            .read()
            .expect("streams lock")
            .values()
            .cloned()
            .collect()
    }

    pub(crate) fn stream_by_id(&self, id: &str) -> Option<Arc<WriteStream>> {
        self.streams
            .read()
            .expect("streams lock")
            .values()
            .find(|s| s.id == id)
            .cloned()
    }

    pub(crate) fn default_stream_by_table_uid(&self, uid: &str) -> Option<Arc<WriteStream>> {
        self.tables
            .read()
            .expect("tables lock")
            .values()
            .find(|t| t.uid == uid)
            .and_then(|t| t.default_stream.get().cloned())
    }

    fn ttl(&self, kind: StreamKind) -> Option<Duration> {
        match kind {
            StreamKind::Default => None,
            StreamKind::Committed => Some(self.config.committed_ttl),
            StreamKind::Buffered => Some(self.config.buffered_ttl),
            StreamKind::Pending => Some(self.config.pending_ttl),
        }
    }

    /// Resolves a stream name (either `_default` spelling) to a live stream. Unknown, expired or
    /// orphaned streams are NOT_FOUND; malformed names are INVALID_ARGUMENT.
    pub fn open_stream(&self, name: &str) -> Result<Arc<WriteStream>, StoreError> {
        let parsed = StreamName::parse(name).ok_or_else(|| StoreError::InvalidStreamName {
            entity: name.to_string(),
        })?;
        let stream = match &parsed.id {
            StreamId::Default => {
                let table =
                    self.table_state(&parsed.table)
                        .ok_or_else(|| StoreError::TableNotFound {
                            table: parsed.table.clone(),
                            entity: name.to_string(),
                        })?;
                return Ok(table
                    .default_stream
                    .get()
                    .cloned()
                    .expect("default stream is set at table creation"));
            }
            StreamId::Explicit(_) => self
                .streams
                .read()
                .expect("streams lock")
                .get(&parsed.canonical())
                .cloned(),
        };
        let not_found = || StoreError::StreamNotFound {
            entity: name.to_string(),
        };
        let stream = stream.ok_or_else(not_found)?;
        if stream.table.deleted.load(Ordering::Acquire) || self.is_expired(&stream) {
            return Err(not_found());
        }
        Ok(stream)
    }

    fn is_expired(&self, stream: &WriteStream) -> bool {
        if stream.expired.load(Ordering::Acquire) {
            return true;
        }
        let Some(ttl) = self.ttl(stream.kind) else {
            return false;
        };
        let idle = now_ms() - stream.last_activity_ms.load(Ordering::Relaxed);
        if idle >= 0 && idle as u128 > ttl.as_millis() {
            stream.expired.store(true, Ordering::Release);
            return true;
        }
        false
    }

    /// A snapshot of a stream (GetWriteStream, CreateWriteStream).
    pub fn info(&self, stream: &WriteStream) -> StreamInfo {
        let inner = stream.lock();
        StreamInfo {
            name: stream.name.clone(),
            kind: stream.kind,
            phase: inner.phase,
            create_time_us: stream.create_time_us,
            commit_time_us: inner.commit_time_us,
            row_count: inner.row_count,
            flushed_offset: inner.flushed,
            table_schema: stream.table_schema(),
            location: stream.table.location.clone(),
        }
    }

    /// GetWriteStream.
    pub fn get_write_stream(&self, name: &str) -> Result<StreamInfo, StoreError> {
        let stream = self.open_stream(name)?;
        Ok(self.info(&stream))
    }

    /// AppendRows for one request whose rows are already validated. Returns the offset of the
    /// first row for explicit streams, `None` for `_default`. Nothing is appended on error.
    /// `entity` is the stream name as the caller spelled it.
    pub fn append(
        &self,
        stream: &WriteStream,
        offset: Option<i64>,
        batch: RowBatch,
        entity: &str,
    ) -> Result<Option<i64>, StoreError> {
        if stream.is_default() && offset.is_some() {
            return Err(StoreError::OffsetOnDefault {
                entity: entity.to_string(),
            });
        }
        if stream.table.deleted.load(Ordering::Acquire) || self.is_expired(stream) {
            return Err(StoreError::StreamNotFound {
                entity: entity.to_string(),
            });
        }
        let mut inner = stream.lock();
        if inner.phase != StreamPhase::Active {
            return Err(StoreError::StreamFinalized {
                entity: entity.to_string(),
            });
        }
        let first = inner.row_count;
        if let Some(offset) = offset {
            if offset < 0 {
                return Err(StoreError::NegativeOffset {
                    received: offset,
                    entity: entity.to_string(),
                });
            }
            if offset < first {
                return Err(StoreError::OffsetAlreadyExists {
                    expected: first,
                    received: offset,
                    entity: entity.to_string(),
                });
            }
            if offset > first {
                return Err(StoreError::OffsetOutOfRange {
                    expected: first,
                    received: offset,
                    entity: entity.to_string(),
                });
            }
        }
        let n = batch.rows.len();
        let batch = Arc::new(batch);
        let visible_now = matches!(stream.kind, StreamKind::Committed | StreamKind::Default);
        let seq = self.visibility_seq.fetch_add(1, Ordering::AcqRel);
        if let Some(log) = inner.log.as_mut() {
            log.append(seq, first, &batch, || stream.table_schema())
                .map_err(|e| StoreError::Persist(e.to_string()))?;
        }
        inner.row_count += n as i64;
        if visible_now {
            stream
                .table
                .visible
                .lock()
                .expect("visible lock")
                .push(batch, 0..n);
        } else {
            inner.batches.push((first, batch));
        }
        drop(inner);
        stream.touch();
        Ok((!stream.is_default()).then_some(first))
    }

    /// Re-applies a logged append at restart (offsets were checked when it was first written).
    pub(crate) fn restore_append(
        &self,
        stream: &WriteStream,
        first: i64,
        batch: Arc<RowBatch>,
    ) -> Option<(u64, Arc<RowBatch>, Range<usize>)> {
        let mut inner = stream.lock();
        let n = batch.rows.len();
        inner.row_count = inner.row_count.max(first + n as i64);
        if matches!(stream.kind, StreamKind::Committed | StreamKind::Default) {
            Some((0, batch, 0..n))
        } else {
            inner.batches.push((first, batch));
            None
        }
    }

    /// FlushRows: makes rows up to and including `offset` of a BUFFERED stream visible.
    pub fn flush_rows(&self, name: &str, offset: Option<i64>) -> Result<i64, StoreError> {
        let stream = self.open_stream(name)?;
        if stream.kind != StreamKind::Buffered {
            return Err(StoreError::WrongStreamKind {
                operation: "FlushRows",
                kind: stream.kind,
                entity: name.to_string(),
            });
        }
        let Some(offset) = offset else {
            return Err(StoreError::FlushOffsetMissing {
                entity: name.to_string(),
            });
        };
        let mut inner = stream.lock();
        // Verified against the real service: a finalized stream refuses every flush, whether
        // the offset was already flushed or not.
        if inner.phase != StreamPhase::Active {
            return Err(StoreError::StreamFinalized {
                entity: name.to_string(),
            });
        }
        if offset < 0 {
            return Err(StoreError::NegativeOffset {
                received: offset,
                entity: name.to_string(),
            });
        }
        if offset >= inner.row_count {
            return Err(StoreError::FlushBeyondEnd {
                offset,
                entity: name.to_string(),
            });
        }
        match inner.flushed {
            Some(cursor) if offset < cursor => {
                return Err(StoreError::FlushBelowCursor {
                    offset,
                    cursor,
                    entity: name.to_string(),
                });
            }
            Some(cursor) if offset == cursor => {
                drop(inner);
                stream.touch();
                return Ok(offset);
            }
            _ => {}
        }
        let from = inner.flushed.map_or(0, |c| c + 1);
        let seq = self.visibility_seq.fetch_add(1, Ordering::AcqRel);
        self.journal(&MetaRecord::Flush {
            id: stream.id.clone(),
            offset,
            seq,
        })?;
        let chunks = chunks_between(&inner.batches, from, offset + 1);
        inner.flushed = Some(offset);
        let mut visible = stream.table.visible.lock().expect("visible lock");
        for (batch, range) in chunks {
            visible.push(batch, range);
        }
        drop(visible);
        drop(inner);
        stream.touch();
        Ok(offset)
    }

    /// Re-applies a logged flush at restart; returns the chunks that became visible.
    pub(crate) fn restore_flush(
        &self,
        stream: &WriteStream,
        offset: i64,
    ) -> Vec<(Arc<RowBatch>, Range<usize>)> {
        let mut inner = stream.lock();
        let from = inner.flushed.map_or(0, |c| c + 1);
        if offset < from {
            return Vec::new();
        }
        inner.flushed = Some(offset);
        chunks_between(&inner.batches, from, offset + 1)
    }

    /// FinalizeWriteStream: idempotent; returns the number of rows appended.
    pub fn finalize_write_stream(&self, name: &str) -> Result<i64, StoreError> {
        let stream = self.open_stream(name)?;
        if stream.is_default() {
            return Err(StoreError::WrongStreamKind {
                operation: "FinalizeWriteStream",
                kind: stream.kind,
                entity: name.to_string(),
            });
        }
        self.finalize(&stream)
    }

    fn finalize(&self, stream: &WriteStream) -> Result<i64, StoreError> {
        let mut inner = stream.lock();
        if inner.phase == StreamPhase::Active {
            self.journal(&MetaRecord::Finalize {
                id: stream.id.clone(),
            })?;
            inner.phase = StreamPhase::Finalized;
        }
        let rows = inner.row_count;
        drop(inner);
        stream.touch();
        Ok(rows)
    }

    pub(crate) fn restore_finalize(&self, stream: &WriteStream) {
        let mut inner = stream.lock();
        if inner.phase == StreamPhase::Active {
            inner.phase = StreamPhase::Finalized;
        }
    }

    /// BatchCommitWriteStreams: all listed PENDING streams become visible atomically, or none.
    pub fn batch_commit(
        &self,
        parent: &str,
        names: &[String],
    ) -> Result<CommitOutcome, StoreError> {
        let r = TableRef::parse(parent).ok_or_else(|| StoreError::InvalidTableName {
            entity: parent.to_string(),
        })?;
        let table = self
            .table_state(&r)
            .ok_or_else(|| StoreError::TableNotFound {
                table: r.clone(),
                entity: parent.to_string(),
            })?;
        if names.is_empty() {
            return Err(StoreError::NothingToCommit {
                entity: parent.to_string(),
            });
        }
        let mut failures = Vec::new();
        let mut streams: Vec<Arc<WriteStream>> = Vec::new();
        for name in names {
            match self.open_stream(name) {
                Ok(s) if !Arc::ptr_eq(&s.table, &table) => failures.push(StreamFailure {
                    code: storage_code::STREAM_NOT_FOUND,
                    entity: name.clone(),
                    message: format!("Stream does not belong to table {parent}. Entity: {name}"),
                }),
                Ok(s) => {
                    if !streams.iter().any(|x| Arc::ptr_eq(x, &s)) {
                        streams.push(s);
                    }
                }
                Err(_) => failures.push(StreamFailure {
                    code: storage_code::STREAM_NOT_FOUND,
                    entity: name.clone(),
                    message: format!("Requested entity was not found. Entity: {name}"),
                }),
            }
        }
        // Lock every stream (in id order, so concurrent commits cannot deadlock) and check them
        // all before changing any: the commit is all-or-nothing.
        streams.sort_by(|a, b| a.id.cmp(&b.id));
        let mut guards: Vec<(&Arc<WriteStream>, MutexGuard<'_, StreamInner>)> =
            streams.iter().map(|s| (s, s.lock())).collect();
        for (s, inner) in &guards {
            let name = names
                .iter()
                .find(|n| StreamName::parse(n).map(|p| p.canonical()) == Some(s.name.clone()))
                .cloned()
                .unwrap_or_else(|| s.name.clone());
            if s.kind != StreamKind::Pending {
                failures.push(StreamFailure {
                    code: storage_code::INVALID_STREAM_TYPE,
                    entity: name.clone(),
                    message: format!(
                        "Stream must be created in pending mode, actual: {}",
                        s.kind.internal_name()
                    ),
                });
            } else if inner.phase == StreamPhase::Committed {
                failures.push(StreamFailure {
                    code: storage_code::STREAM_ALREADY_COMMITTED,
                    entity: name.clone(),
                    message: format!("Stream has already been committed. Entity: {name}"),
                });
            } else if inner.phase != StreamPhase::Finalized {
                failures.push(StreamFailure {
                    code: storage_code::INVALID_STREAM_STATE,
                    entity: name.clone(),
                    message: format!(
                        "Stream is not finalized and cannot be committed. Entity: {name}"
                    ),
                });
            }
        }
        if !failures.is_empty() {
            return Ok(CommitOutcome::Failed(failures));
        }
        let commit_time_us = now_us();
        let seq = self.visibility_seq.fetch_add(1, Ordering::AcqRel);
        self.journal(&MetaRecord::Commit {
            ids: guards.iter().map(|(s, _)| s.id.clone()).collect(),
            time_us: commit_time_us,
            seq,
        })?;
        let mut visible = table.visible.lock().expect("visible lock");
        for (_, inner) in guards.iter_mut() {
            inner.phase = StreamPhase::Committed;
            inner.commit_time_us = Some(commit_time_us);
            for (_, batch) in &inner.batches {
                visible.push(batch.clone(), 0..batch.rows.len());
            }
        }
        drop(visible);
        for (s, _) in &guards {
            s.touch();
        }
        Ok(CommitOutcome::Committed { commit_time_us })
    }

    /// Re-applies a logged commit at restart; returns the chunks that became visible.
    pub(crate) fn restore_commit(
        &self,
        stream: &WriteStream,
        time_us: i64,
    ) -> Vec<(Arc<RowBatch>, Range<usize>)> {
        let mut inner = stream.lock();
        inner.phase = StreamPhase::Committed;
        inner.commit_time_us = Some(time_us);
        inner
            .batches
            .iter()
            .map(|(_, b)| (b.clone(), 0..b.rows.len()))
            .collect()
    }

    /// Fault injection: finalize a stream now, as if a FinalizeWriteStream had arrived.
    pub fn finalize_now(&self, name: &str) -> Result<i64, StoreError> {
        self.finalize_write_stream(name)
    }

    /// Fault injection: let a stream expire now (its TTL elapsed); later use is NOT_FOUND.
    pub fn expire_now(&self, name: &str) -> Result<(), StoreError> {
        let stream = self.open_stream(name)?;
        if stream.is_default() {
            return Err(StoreError::WrongStreamKind {
                operation: "expire",
                kind: stream.kind,
                entity: name.to_string(),
            });
        }
        self.journal(&MetaRecord::Expire {
            id: stream.id.clone(),
        })?;
        stream.expired.store(true, Ordering::Release);
        Ok(())
    }

    pub(crate) fn restore_expire(&self, stream: &WriteStream) {
        stream.expired.store(true, Ordering::Release);
    }

    /// Pushes restored visible chunks into a table's log in the given order.
    pub(crate) fn restore_visible(
        &self,
        table: &TableState,
        chunks: impl IntoIterator<Item = (Arc<RowBatch>, Range<usize>)>,
    ) {
        let mut visible = table.visible.lock().expect("visible lock");
        for (batch, range) in chunks {
            visible.push(batch, range);
        }
    }
}

/// The parts of `batches` (sorted by first offset) covering offsets `from..to`.
fn chunks_between(
    batches: &[(i64, Arc<RowBatch>)],
    from: i64,
    to: i64,
) -> Vec<(Arc<RowBatch>, Range<usize>)> {
    let mut out = Vec::new();
    let start = batches.partition_point(|(first, b)| first + b.rows.len() as i64 <= from);
    for (first, batch) in &batches[start..] {
        if *first >= to {
            break;
        }
        let lo = (from - first).max(0) as usize;
        let hi = ((to - first) as usize).min(batch.rows.len());
        if lo < hi {
            out.push((batch.clone(), lo..hi));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_names_accept_both_default_spellings_and_reject_garbage() {
        let t = "projects/p/datasets/d/tables/t";
        assert_eq!(
            StreamName::parse(&format!("{t}/_default")).unwrap().id,
            StreamId::Default
        );
        assert_eq!(
            StreamName::parse(&format!("{t}/streams/_default"))
                .unwrap()
                .id,
            StreamId::Default
        );
        assert_eq!(
            StreamName::parse(&format!("{t}/streams/abc-_1"))
                .unwrap()
                .id,
            StreamId::Explicit("abc-_1".into())
        );
        for bad in [
            "",
            "projects/p",
            "projects/p/datasets/d/tables/t",
            "projects/p/datasets/d/tables/t/streams/",
            "projects/p/datasets/d/tables/t/streams/a b",
            "projects/p/datasets/d/tables/t/streams/a/b",
            "projects//datasets/d/tables/t/_default",
        ] {
            assert!(StreamName::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn chunks_between_cuts_batches_at_offsets() {
        let codec = Arc::new(
            RowCodec::compile(
                &prost_types::DescriptorProto {
                    name: Some("Row".into()),
                    ..Default::default()
                },
                &TableSchema::default(),
            )
            .unwrap(),
        );
        let batch = |n: usize| {
            Arc::new(RowBatch {
                rows: (0..n).map(|i| Bytes::from(vec![i as u8])).collect(),
                codec: codec.clone(),
            })
        };
        let batches = vec![(0, batch(2)), (2, batch(3)), (5, batch(1))];
        let got: Vec<(i64, Range<usize>)> = chunks_between(&batches, 1, 4)
            .into_iter()
            .map(|(b, r)| (b.rows.len() as i64, r))
            .collect();
        assert_eq!(got, vec![(2, 1..2), (3, 0..2)]);
        assert!(chunks_between(&batches, 6, 6).is_empty());
    }

    #[test]
    fn visible_log_pages_across_chunks() {
        let codec = Arc::new(
            RowCodec::compile(
                &prost_types::DescriptorProto {
                    name: Some("Row".into()),
                    ..Default::default()
                },
                &TableSchema::default(),
            )
            .unwrap(),
        );
        let mut log = VisibleLog::default();
        let batch = Arc::new(RowBatch {
            rows: (0..5u8).map(|i| Bytes::from(vec![i])).collect(),
            codec,
        });
        log.push(batch.clone(), 0..2);
        log.push(batch.clone(), 3..5);
        let page: Vec<u8> = log.page(1, 10).iter().map(|r| r.data[0]).collect();
        assert_eq!(page, vec![1, 3, 4]);
        assert_eq!(log.page(3, 10).len(), 1);
        assert!(log.page(4, 10).is_empty());
        assert_eq!(log.page(0, 2).len(), 2);
    }
}
