//! One writer incarnation's AppendRows session on its own write stream (docs/architecture.md):
//! requests with explicit offsets, several in flight within a byte bound, responses matched in
//! order, and every error handled where the Storage Write API defines it:
//!
//! * the call breaks (transient status, dropped connection, a response overdue, the 600 s idle
//!   close): reconnect with backoff and resend every unacknowledged request in order at the same
//!   offsets. Their first send may have been applied, so each is marked *uncertain*: an
//!   `ALREADY_EXISTS` for it then means "already appended" and counts as success;
//! * a request fails in-stream (row errors, quota, an injected fault): it appended nothing and
//!   every request behind it fails with `OUT_OF_RANGE` because the end of the stream did not
//!   advance. The session drains those answers, drops the rejected rows (row errors go back to
//!   the caller for the dead-letter path), renumbers what is left from the failed offset and
//!   resends it. On the `_default` stream (at-least-once mode, no offsets) requests are
//!   independent: those behind a failed one may be appended, are kept as such and are never
//!   resent (resending them would write them twice and read as an offset conflict);
//! * `STREAM_FINALIZED` on our own stream: another incarnation superseded this one; we are a
//!   zombie and stop (invariant 5). `NOT_FOUND`: the stream expired; the caller opens a new one.
//!
//! The session owns no Kafka state: each row carries an opaque tag (its Kafka offset) that comes
//! back with the acknowledgement, so the writer can build its committable prefix.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::{
    AppendRowsRequest, ProtoRows, ProtoSchema, TableSchema as ProtoTableSchema,
    append_rows_request::{ProtoData, Rows},
};
use prost::Message;
use tokio::time::Instant;

use crate::backoff::{Backoff, jitter};
use crate::bigquery::error::{ErrorClass, WriteError};
use crate::bigquery::write_client::{AppendConnection, AppendReply, WriteClient};
use kbq_core::offsets::{RowCount, RowOffset};

use super::admission::InflightWindow;

/// Limits of one session.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    /// Requests sent and not yet answered.
    pub max_inflight_requests: usize,
    /// Encoded bytes of those requests.
    pub max_inflight_bytes: usize,
    /// A response later than this counts as a broken connection.
    pub response_timeout: Duration,
    /// Backoff between reconnect attempts: doubles from `min` up to `max`.
    pub reconnect_backoff_min: Duration,
    pub reconnect_backoff_max: Duration,
    /// Consecutive failed reconnects before the session gives up (the partition then restarts
    /// its incarnation with the protocol's backoff).
    pub max_reconnect_attempts: u32,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_inflight_requests: 8,
            max_inflight_bytes: 32 << 20,
            response_timeout: Duration::from_secs(60),
            reconnect_backoff_min: Duration::from_millis(100),
            reconnect_backoff_max: Duration::from_secs(10),
            max_reconnect_attempts: 20,
        }
    }
}

/// Rows to append, each with the caller's tag (e.g. its Kafka offset).
#[derive(Debug, Clone)]
pub struct Batch<T> {
    pub rows: Vec<Bytes>,
    pub tags: Vec<T>,
}

impl<T> Default for Batch<T> {
    fn default() -> Self {
        Batch {
            rows: Vec::new(),
            tags: Vec::new(),
        }
    }
}

impl<T> Batch<T> {
    pub fn push(&mut self, row: Bytes, tag: T) {
        self.rows.push(row);
        self.tags.push(tag);
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// What the session reports, in stream order.
#[derive(Debug)]
pub enum SessionEvent<T> {
    /// Rows `[first_offset, first_offset + tags.len())` of the stream are appended.
    Appended {
        first_offset: RowOffset,
        tags: Vec<T>,
        /// The table's schema changed since the connection started (schema evolution).
        updated_schema: Option<ProtoTableSchema>,
        /// From the request's last send to this answer.
        latency: Duration,
    },
    /// BigQuery refused these rows (`row_errors`); they were taken out of the request and the
    /// rest was resent. They must go to the dead-letter path.
    RowsRejected {
        rows: Vec<(T, Bytes, String)>,
        /// Every row of the request was rejected: no `Appended` will follow for it.
        request_emptied: bool,
    },
}

/// Why a session ended. Each variant tells the caller what to do with the incarnation.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Our own stream was finalized: another incarnation took over (invariant 5). Stop, create
    /// nothing, wait for the group to say what we own.
    #[error("stream {stream} was finalized behind this writer: it is a zombie")]
    Zombie { stream: String },
    /// The stream no longer exists (idle TTL): open a new stream, keep the known flush point.
    #[error("stream {stream} was lost: {error}")]
    StreamLost { stream: String, error: WriteError },
    /// The writer schema does not fit the table.
    #[error("writer schema rejected on {stream}: {error}")]
    SchemaRejected { stream: String, error: WriteError },
    /// The stream's offsets disagree with ours: something else wrote into our stream.
    /// `offset` is the row the conflict was seen at, when known.
    #[error("offset conflict on {stream} at row {}: {error}", .offset.map_or("unknown".to_owned(), |r| r.0.to_string()))]
    OffsetConflict {
        stream: String,
        offset: Option<RowOffset>,
        error: WriteError,
    },
    /// Reconnecting kept failing, or the error cannot be retried.
    #[error("append session on {stream} failed: {error}")]
    Failed { stream: String, error: WriteError },
}

struct Inflight<T> {
    /// The request's first row.
    offset: RowOffset,
    batch: Batch<T>,
    encoded_bytes: usize,
    /// A send of this request at this offset may have been applied (its connection broke before
    /// the answer came), so `ALREADY_EXISTS` for it means success.
    uncertain: bool,
    /// `_default` stream only: this request was appended while a request ahead of it failed
    /// (requests without offsets are independent). It is reported, in order, once everything
    /// ahead of it is, and never sent again.
    appended: bool,
    sent_at: Instant,
}

/// One stream, one connection at a time, requests in order.
pub struct AppendSession<T> {
    client: WriteClient,
    stream: String,
    writer_schema: prost_types::DescriptorProto,
    limits: SessionLimits,
    connection: Option<AppendConnection>,
    /// Whether the current connection has carried the writer schema yet.
    schema_sent: bool,
    /// Offset of the next row to send.
    next_offset: RowCount,
    inflight: VecDeque<Inflight<T>>,
    inflight_bytes: usize,
    /// AppendRows calls opened so far; all but the first are reconnects (a metric).
    pub connections_opened: u64,
    /// Requests carry their offset (explicit streams). The `_default` stream takes none, and a
    /// resend there may append twice: accepted by at-least-once mode only.
    explicit_offsets: bool,
    /// Told of every error BigQuery (or the transport) answered, handled or not (a metric).
    error_observer: Option<ErrorObserver>,
}

/// See [`AppendSession::observe_errors`].
pub type ErrorObserver = std::sync::Arc<dyn Fn(&WriteError) + Send + Sync>;

impl<T> AppendSession<T> {
    /// A session on a stream that has `next_offset` rows already (0 for a new stream).
    pub fn new(
        client: WriteClient,
        stream: String,
        writer_schema: prost_types::DescriptorProto,
        next_offset: RowCount,
        limits: SessionLimits,
    ) -> Self {
        AppendSession {
            client,
            stream,
            writer_schema,
            limits,
            connection: None,
            schema_sent: false,
            next_offset,
            inflight: VecDeque::new(),
            inflight_bytes: 0,
            connections_opened: 0,
            explicit_offsets: true,
            error_observer: None,
        }
    }

    /// Calls `observer` with every error of the session, including the ones it recovers from.
    pub fn observe_errors(mut self, observer: ErrorObserver) -> Self {
        self.error_observer = Some(observer);
        self
    }

    fn observe(&self, error: &WriteError) {
        if let Some(observer) = &self.error_observer {
            observer(error);
        }
    }

    /// Sends requests without offsets (the `_default` stream, at-least-once mode).
    pub fn without_offsets(mut self) -> Self {
        self.explicit_offsets = false;
        self
    }

    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// Offset the next appended row will get.
    pub fn next_offset(&self) -> RowCount {
        self.next_offset
    }

    pub fn inflight_requests(&self) -> usize {
        self.inflight.len()
    }

    pub fn inflight_bytes(&self) -> usize {
        self.inflight_bytes
    }

    /// Whether a request of `bytes` may be sent now without exceeding the window (one request
    /// always fits when nothing is in flight).
    pub fn has_room_for(&self, bytes: usize) -> bool {
        let window = InflightWindow {
            max_requests: self.limits.max_inflight_requests,
            max_bytes: self.limits.max_inflight_bytes,
        };
        window.admits(self.inflight.len(), self.inflight_bytes, bytes)
    }

    fn build_request(
        &self,
        offset: RowOffset,
        rows: &[Bytes],
        with_schema: bool,
    ) -> AppendRowsRequest {
        AppendRowsRequest {
            write_stream: if with_schema {
                self.stream.clone()
            } else {
                String::new()
            },
            offset: self.explicit_offsets.then_some(offset.0),
            rows: Some(Rows::ProtoRows(ProtoData {
                writer_schema: with_schema.then(|| ProtoSchema {
                    proto_descriptor: Some(self.writer_schema.clone()),
                }),
                rows: Some(ProtoRows {
                    serialized_rows: rows.to_vec(),
                }),
            })),
            ..Default::default()
        }
    }

    /// Sends `batch` at the end of the stream. Call only when [`has_room_for`] says so (or
    /// accept that the window grows by one request).
    pub async fn submit(&mut self, batch: Batch<T>) -> Result<(), SessionError> {
        debug_assert!(!batch.is_empty(), "empty appends are rejected by BigQuery");
        let offset = RowOffset(self.next_offset.0);
        self.next_offset = RowCount(offset.0 + batch.len() as i64);
        let entry = Inflight {
            offset,
            encoded_bytes: 0,
            batch,
            uncertain: false,
            appended: false,
            sent_at: Instant::now(),
        };
        self.inflight.push_back(entry);
        let index = self.inflight.len() - 1;
        if self.connection.is_none() {
            // Opening the connection sends everything in flight, this request included.
            return self.reconnect(None).await;
        }
        if let Err(error) = self.send_one(index).await {
            return self.reconnect(Some(error)).await;
        }
        Ok(())
    }

    async fn send_one(&mut self, index: usize) -> Result<(), WriteError> {
        let with_schema = !self.schema_sent;
        let entry = &self.inflight[index];
        let request = self.build_request(entry.offset, &entry.batch.rows, with_schema);
        let size = request.encoded_len();
        let connection = self.connection.as_ref().expect("connected");
        connection.send(request).await?;
        self.schema_sent = true;
        let entry = &mut self.inflight[index];
        self.inflight_bytes = self.inflight_bytes - entry.encoded_bytes + size;
        entry.encoded_bytes = size;
        entry.sent_at = Instant::now();
        Ok(())
    }

    /// Opens a new connection and resends everything in flight, in order, at the same offsets.
    /// `cause` is the error that broke the previous connection (None for the first one).
    async fn reconnect(&mut self, cause: Option<WriteError>) -> Result<(), SessionError> {
        let had_connection = self.connection.take().is_some();
        if had_connection || cause.is_some() {
            // Whatever was sent on the broken call may or may not have been applied.
            for entry in self.inflight.iter_mut() {
                entry.uncertain = true;
            }
        }
        let mut backoff = Backoff::new(
            self.limits.reconnect_backoff_min,
            self.limits.reconnect_backoff_max,
        );
        let mut last_error = cause;
        loop {
            if let Some(error) = &last_error {
                match error.class() {
                    ErrorClass::Transient | ErrorClass::Throttled => {}
                    _ => return Err(self.terminal(error.clone(), None)),
                }
                if backoff.attempts() >= self.limits.max_reconnect_attempts {
                    return Err(SessionError::Failed {
                        stream: self.stream.clone(),
                        error: error.clone(),
                    });
                }
                let pause = backoff.next_delay();
                let pause = if error.class() == ErrorClass::Throttled {
                    pause.max(jitter(Duration::from_secs(1)))
                } else {
                    pause
                };
                tokio::time::sleep(pause).await;
            }
            match self.open_and_resend().await {
                Ok(()) => return Ok(()),
                Err(error) => {
                    self.observe(&error);
                    self.connection = None;
                    last_error = Some(error);
                }
            }
        }
    }

    async fn open_and_resend(&mut self) -> Result<(), WriteError> {
        let Some(first_index) = self.inflight.iter().position(|e| !e.appended) else {
            // Nothing to send: connect lazily on the next submit.
            return Ok(());
        };
        let first = &self.inflight[first_index];
        let request = self.build_request(first.offset, &first.batch.rows, true);
        let first_size = request.encoded_len();
        let window = self.limits.max_inflight_requests + 1;
        let connection = self.client.open_append(request, window).await?;
        self.connections_opened += 1;
        self.connection = Some(connection);
        self.schema_sent = true;
        let now = Instant::now();
        for entry in self.inflight.iter_mut() {
            entry.sent_at = now;
        }
        self.inflight[first_index].encoded_bytes = first_size;
        self.inflight_bytes = self.inflight.iter().map(|e| e.encoded_bytes).sum();
        for index in first_index + 1..self.inflight.len() {
            if !self.inflight[index].appended {
                self.send_one(index).await?;
            }
        }
        Ok(())
    }

    /// Waits for the answer to the oldest request in flight and handles it. Returns `None` when
    /// nothing is in flight.
    pub async fn next_event(&mut self) -> Result<Option<SessionEvent<T>>, SessionError> {
        loop {
            let Some(head) = self.inflight.front() else {
                return Ok(None);
            };
            if head.appended {
                let head = self.inflight.pop_front().expect("head");
                self.inflight_bytes -= head.encoded_bytes;
                return Ok(Some(SessionEvent::Appended {
                    first_offset: head.offset,
                    tags: head.batch.tags,
                    updated_schema: None,
                    latency: head.sent_at.elapsed(),
                }));
            }
            if self.connection.is_none() {
                self.reconnect(None).await?;
                continue;
            }
            let deadline = head.sent_at + self.limits.response_timeout;
            let connection = self.connection.as_mut().expect("connected");
            let reply = match tokio::time::timeout_at(deadline, connection.next_reply()).await {
                Ok(reply) => reply,
                Err(_) => Err(WriteError::from_status(&tonic::Status::deadline_exceeded(
                    "append response overdue",
                ))),
            };
            match reply {
                Err(broken) => {
                    self.observe(&broken);
                    self.reconnect(Some(broken)).await?
                }
                Ok(AppendReply::Appended {
                    offset,
                    updated_schema,
                }) => {
                    let head = self.inflight.pop_front().expect("head");
                    self.inflight_bytes -= head.encoded_bytes;
                    if self.explicit_offsets && offset.is_some_and(|o| o != head.offset) {
                        let error = WriteError::disconnected(format!(
                            "append acknowledged at offset {:?}, sent at {}",
                            offset.map(|o| o.0),
                            head.offset.0
                        ));
                        return Err(SessionError::OffsetConflict {
                            stream: self.stream.clone(),
                            offset: Some(head.offset),
                            error,
                        });
                    }
                    return Ok(Some(SessionEvent::Appended {
                        first_offset: head.offset,
                        tags: head.batch.tags,
                        updated_schema,
                        latency: head.sent_at.elapsed(),
                    }));
                }
                Ok(AppendReply::Failed(error)) => {
                    self.observe(&error);
                    if let Some(event) = self.handle_failure(error).await? {
                        return Ok(Some(event));
                    }
                }
            }
        }
    }

    /// The head request failed in-stream and appended nothing.
    async fn handle_failure(
        &mut self,
        error: WriteError,
    ) -> Result<Option<SessionEvent<T>>, SessionError> {
        let head_offset = self.inflight.front().expect("head").offset;
        match error.class() {
            ErrorClass::AlreadyExists if self.inflight.front().is_some_and(|h| h.uncertain) => {
                // The first send of this request was applied before its connection broke.
                let head = self.inflight.pop_front().expect("head");
                self.inflight_bytes -= head.encoded_bytes;
                Ok(Some(SessionEvent::Appended {
                    first_offset: head.offset,
                    tags: head.batch.tags,
                    updated_schema: None,
                    latency: head.sent_at.elapsed(),
                }))
            }
            ErrorClass::RowErrors => self.take_out_rejected_rows(error, head_offset).await,
            ErrorClass::Transient | ErrorClass::Throttled
                if self.inflight.front().is_some_and(|h| h.uncertain) =>
            {
                // The head's earlier send may have been applied (an answer lost): then the stream's
                // end is past it, the requests behind it may be appended, and renumbering would
                // forget that. Treat it as a broken call instead: every request in flight is
                // resent at its offset and stays uncertain, so ALREADY_EXISTS still means
                // "appended".
                self.reconnect(Some(error)).await?;
                Ok(None)
            }
            ErrorClass::Transient | ErrorClass::Throttled => {
                self.drain_rejected_tail().await?;
                let pause = if error.class() == ErrorClass::Throttled {
                    Duration::from_secs(1)
                } else {
                    self.limits.reconnect_backoff_min
                };
                tokio::time::sleep(jitter(pause)).await;
                self.renumber_and_resend(head_offset).await?;
                Ok(None)
            }
            _ => {
                // The requests behind the head are still answered on this call: a caller that
                // tries again later must start on a new connection, in step.
                self.connection = None;
                Err(self.terminal(error, Some(head_offset)))
            }
        }
    }

    /// The head request failed with row errors: the rows BigQuery named are taken out and
    /// reported, the rest of the request (and every request behind it) is renumbered and sent
    /// again. A row error naming no row of the request is terminal.
    async fn take_out_rejected_rows(
        &mut self,
        error: WriteError,
        head_offset: RowOffset,
    ) -> Result<Option<SessionEvent<T>>, SessionError> {
        self.drain_rejected_tail().await?;
        let head = self.inflight.front_mut().expect("head");
        let mut bad: Vec<usize> = error
            .row_errors
            .iter()
            .filter_map(|e| usize::try_from(e.index).ok())
            .filter(|&i| i < head.batch.len())
            .collect();
        bad.sort_unstable();
        bad.dedup();
        if bad.is_empty() {
            return Err(self.terminal(error, Some(head_offset)));
        }
        let mut rejected = Vec::with_capacity(bad.len());
        let mut keep = Batch {
            rows: Vec::with_capacity(head.batch.len() - bad.len()),
            tags: Vec::with_capacity(head.batch.len() - bad.len()),
        };
        let old = std::mem::take(&mut head.batch);
        let mut bad_iter = bad.iter().peekable();
        for (i, (row, tag)) in old.rows.into_iter().zip(old.tags).enumerate() {
            if bad_iter.peek() == Some(&&i) {
                bad_iter.next();
                let reason = error
                    .row_errors
                    .iter()
                    .find(|e| e.index == i as i64)
                    .map(|e| e.message.clone())
                    .unwrap_or_default();
                rejected.push((tag, row, reason));
            } else {
                keep.push(row, tag);
            }
        }
        head.batch = keep;
        let request_emptied = head.batch.is_empty();
        if request_emptied {
            let head = self.inflight.pop_front().expect("head");
            self.inflight_bytes -= head.encoded_bytes;
        }
        self.renumber_and_resend(head_offset).await?;
        Ok(Some(SessionEvent::RowsRejected {
            rows: rejected,
            request_emptied,
        }))
    }

    /// After the head request failed, every request behind it fails too (its offset is past the
    /// end). Read those answers so the connection is in step again. A success among them would
    /// mean the stream's end moved under us.
    ///
    /// On the `_default` stream (no offsets) the requests behind are independent of the head: a
    /// success among them is appended and is kept (marked, reported in order later, never
    /// resent); a failure is resent behind the head and handled when it is the head.
    async fn drain_rejected_tail(&mut self) -> Result<(), SessionError> {
        if !self.explicit_offsets {
            return self.drain_independent_tail().await;
        }
        let behind = self.inflight.len() - 1;
        for _ in 0..behind {
            let connection = self.connection.as_mut().expect("connected");
            match tokio::time::timeout(self.limits.response_timeout, connection.next_reply()).await
            {
                Ok(Ok(AppendReply::Failed(_))) => {}
                Ok(Ok(AppendReply::Appended { offset, .. })) => {
                    let error = WriteError::disconnected(format!(
                        "append behind a failed request succeeded at offset {:?}",
                        offset.map(|o| o.0)
                    ));
                    return Err(SessionError::OffsetConflict {
                        stream: self.stream.clone(),
                        offset,
                        error,
                    });
                }
                // The call broke while draining: a new connection starts in step anyway. None of
                // these requests was applied (the head failed), so they are not uncertain.
                Ok(Err(_)) | Err(_) => {
                    self.connection = None;
                    break;
                }
            }
        }
        Ok(())
    }

    /// [`drain_rejected_tail`](Self::drain_rejected_tail) on the `_default` stream.
    async fn drain_independent_tail(&mut self) -> Result<(), SessionError> {
        for index in 1..self.inflight.len() {
            if self.inflight[index].appended {
                continue;
            }
            let connection = self.connection.as_mut().expect("connected");
            match tokio::time::timeout(self.limits.response_timeout, connection.next_reply()).await
            {
                Ok(Ok(AppendReply::Appended { .. })) => self.inflight[index].appended = true,
                Ok(Ok(AppendReply::Failed(error))) => self.observe(&error),
                // The call broke: the requests not answered yet may have been appended; they
                // are resent (at-least-once accepts a duplicate there).
                Ok(Err(_)) | Err(_) => {
                    for entry in self.inflight.iter_mut().skip(index) {
                        entry.uncertain = true;
                    }
                    self.connection = None;
                    break;
                }
            }
        }
        Ok(())
    }

    /// Renumbers every request in flight from `from` (nothing at or after `from` was applied, so
    /// none of them is uncertain any more) and sends them again.
    async fn renumber_and_resend(&mut self, from: RowOffset) -> Result<(), SessionError> {
        let mut offset = from.0;
        for entry in self.inflight.iter_mut() {
            entry.offset = RowOffset(offset);
            entry.uncertain = false;
            offset += entry.batch.len() as i64;
        }
        self.next_offset = RowCount(offset);
        // The failed head may have been the connection's first request, the one that named the
        // stream; whether a failed first request still binds the connection to its stream is
        // the server's business, so the resend names it (and the writer schema) again.
        self.schema_sent = false;
        if self.connection.is_none() {
            return self.reconnect(None).await;
        }
        for index in 0..self.inflight.len() {
            if self.inflight[index].appended {
                continue;
            }
            if let Err(error) = self.send_one(index).await {
                return self.reconnect(Some(error)).await;
            }
        }
        Ok(())
    }

    fn terminal(&self, error: WriteError, offset: Option<RowOffset>) -> SessionError {
        let stream = self.stream.clone();
        match error.class() {
            ErrorClass::StreamFinalized => SessionError::Zombie { stream },
            ErrorClass::NotFound => SessionError::StreamLost { stream, error },
            ErrorClass::SchemaMismatch => SessionError::SchemaRejected { stream, error },
            ErrorClass::AlreadyExists | ErrorClass::OutOfRange => SessionError::OffsetConflict {
                stream,
                offset,
                error,
            },
            _ => SessionError::Failed { stream, error },
        }
    }

    /// Switches to a new writer schema (schema evolution) on the same stream: call with nothing
    /// in flight. The next append opens a new connection that carries `schema`.
    pub fn change_writer_schema(&mut self, schema: prost_types::DescriptorProto) {
        debug_assert!(
            self.inflight.is_empty(),
            "schema change with appends in flight"
        );
        self.close();
        self.writer_schema = schema;
    }

    /// Closes the connection after every request was answered (a clean half-close).
    pub fn close(&mut self) {
        self.connection = None;
        self.schema_sent = false;
    }
}
