//! Write streams: creation, lookup by name (with expiry), snapshots, and their replay at restart.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::persist::MetaRecord;

use super::{
    Store, StoreError, StreamId, StreamInfo, StreamInner, StreamKind, StreamName, StreamPhase,
    TableRef, TableState, WriteStream, new_stream_id, now_ms, now_us,
};

impl Store {
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

    pub(super) fn new_stream(
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

    pub(super) fn ttl(&self, kind: StreamKind) -> Option<Duration> {
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

    pub(super) fn is_expired(&self, stream: &WriteStream) -> bool {
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

    /// Snapshots of the explicit write streams of `table` (`_default` is not among them), live
    /// or not. BigQuery has no such listing; a test reads from it what a writer appended and has
    /// not made visible (a BUFFERED stream's rows past its flush cursor).
    pub fn write_streams(&self, table: &TableRef) -> Vec<StreamInfo> {
        self.all_streams()
            .iter()
            .filter(|s| s.table() == table)
            .map(|s| self.info(s))
            .collect()
    }
}
