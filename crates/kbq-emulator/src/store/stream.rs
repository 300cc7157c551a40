//! The live state behind the store's maps: a write stream with its own lock, a table with its
//! visible row log, and the log's paging.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::persist::RowLog;
use kbq_core::table_schema::TableSchema;

use super::{RowBatch, StreamKind, StreamPhase, Table, TableRef, VisibleRow, applied, now_ms};

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
    pub(super) last_activity_ms: AtomicI64,
    pub(super) expired: AtomicBool,
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

    pub(super) fn lock(&self) -> MutexGuard<'_, StreamInner> {
        self.inner.lock().expect("stream lock")
    }

    pub(super) fn touch(&self) {
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
    pub(super) chunks: Vec<(u64, Arc<RowBatch>, Range<usize>)>,
    pub(super) total: u64,
    /// Whether any visible row carries `_CHANGE_TYPE`: reads then show the applied state.
    pub(super) cdc: bool,
    pub(super) applied: applied::Cache,
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

    pub(super) fn page(&self, start: u64, max: usize) -> Vec<VisibleRow> {
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

/// The parts of `batches` (sorted by first offset) covering offsets `from..to`.
pub(super) fn chunks_between(
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
