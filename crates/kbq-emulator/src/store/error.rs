//! What the store refuses, and the StorageError codes it answers with.

use super::{StreamKind, TableRef};

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
    #[error("dataset {project}:{dataset} is still in use")]
    DatasetInUse { project: String, dataset: String },
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
