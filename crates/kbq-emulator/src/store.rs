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

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;

use crate::persist::{Journal, MetaRecord};

mod applied;
mod catalog;
mod error;
mod names;
mod resources;
mod stream;
mod streams;
#[cfg(test)]
mod tests;
mod writes;

pub use error::{StoreError, StreamFailure, storage_code};
pub use names::{StreamId, StreamName, TableRef};
pub use resources::{
    CommitOutcome, Dataset, RowBatch, StreamInfo, StreamKind, StreamPhase, Table, VisibleRow,
    VisibleRows,
};
pub(crate) use stream::{StreamInner, VisibleLog};
pub use stream::{TableState, WriteStream};

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
}
