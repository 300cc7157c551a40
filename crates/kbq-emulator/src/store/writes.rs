//! The writes on a stream: AppendRows, FlushRows, FinalizeWriteStream, BatchCommitWriteStreams,
//! the fault-injection shortcuts, and their replay at restart.

use std::ops::Range;
use std::sync::Arc;
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

use crate::persist::MetaRecord;

use super::stream::chunks_between;
use super::{
    CommitOutcome, RowBatch, Store, StoreError, StreamFailure, StreamInner, StreamKind, StreamName,
    StreamPhase, TableRef, TableState, WriteStream, now_us, storage_code,
};

impl Store {
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

    pub(super) fn finalize(&self, stream: &WriteStream) -> Result<i64, StoreError> {
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
        let (mut streams, mut failures) = self.commit_candidates(parent, names, &table);
        // Lock every stream (in id order, so concurrent commits cannot deadlock) and check them
        // all before changing any: the commit is all-or-nothing.
        streams.sort_by(|a, b| a.id.cmp(&b.id));
        let mut guards: Vec<(&Arc<WriteStream>, MutexGuard<'_, StreamInner>)> =
            streams.iter().map(|s| (s, s.lock())).collect();
        failures.extend(
            guards
                .iter()
                .filter_map(|(s, inner)| commit_refusal(s, inner, names)),
        );
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

    /// The distinct streams of a batch commit that exist on `table`, and a failure for every
    /// name that does not.
    fn commit_candidates(
        &self,
        parent: &str,
        names: &[String],
        table: &Arc<TableState>,
    ) -> (Vec<Arc<WriteStream>>, Vec<StreamFailure>) {
        let mut failures = Vec::new();
        let mut streams: Vec<Arc<WriteStream>> = Vec::new();
        for name in names {
            match self.open_stream(name) {
                Ok(s) if !Arc::ptr_eq(&s.table, table) => failures.push(StreamFailure {
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
        (streams, failures)
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

/// Why a locked stream of a batch commit cannot be committed, if it cannot: not PENDING, already
/// committed, or not finalized. `entity` echoes the name as the caller spelled it.
fn commit_refusal(s: &WriteStream, inner: &StreamInner, names: &[String]) -> Option<StreamFailure> {
    let name = names
        .iter()
        .find(|n| StreamName::parse(n).map(|p| p.canonical()) == Some(s.name.clone()))
        .cloned()
        .unwrap_or_else(|| s.name.clone());
    if s.kind != StreamKind::Pending {
        Some(StreamFailure {
            code: storage_code::INVALID_STREAM_TYPE,
            entity: name.clone(),
            message: format!(
                "Stream must be created in pending mode, actual: {}",
                s.kind.internal_name()
            ),
        })
    } else if inner.phase == StreamPhase::Committed {
        Some(StreamFailure {
            code: storage_code::STREAM_ALREADY_COMMITTED,
            entity: name.clone(),
            message: format!("Stream has already been committed. Entity: {name}"),
        })
    } else if inner.phase != StreamPhase::Finalized {
        Some(StreamFailure {
            code: storage_code::INVALID_STREAM_STATE,
            entity: name.clone(),
            message: format!("Stream is not finalized and cannot be committed. Entity: {name}"),
        })
    } else {
        None
    }
}
