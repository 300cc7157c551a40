//! Simulated BigQuery behind the `WriteTransport` seam of the real `WriteClient`: the
//! emulator's own store and AppendRows handler (BUFFERED streams with offsets, row validation,
//! `ALREADY_EXISTS`/`OUT_OF_RANGE`/`NOT_FOUND`, finalized streams), with seeded faults on every
//! call: refused unapplied, applied with the answer lost, delayed; on the AppendRows call also
//! a call broken before a request, a request refused in-stream, an answer delayed past the
//! response timeout.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::{
    self as bq, AppendRowsRequest, WriteStream,
};
use rand::Rng;

use super::TABLE;
use super::world::{Gate, Shared, SharedDebug, SimStream, World, lock};
use kafka_bigquery_sink::bigquery::error::WriteError;
use kafka_bigquery_sink::bigquery::write_client::{
    AppendReply, AppendTransport, StreamKind, TransportFuture, WriteTransport,
};
use kbq_emulator::grpc::{AppendOutcome, AppendSession as EmulatorSession};
use kbq_emulator::status::BqError;
use kbq_emulator::store::StoreError;

#[derive(Debug)]
pub(super) struct SimWrite {
    pub(super) world: SharedDebug,
    pub(super) gate: Arc<Gate>,
    /// The replica.
    pub(super) process: usize,
    /// The process of the replica that sends through this transport (`#n` in the trace).
    pub(super) number: usize,
}

pub(super) fn status_error(e: &StoreError) -> WriteError {
    WriteError::from_status(&BqError::from(e).to_status())
}

pub(super) fn transient(what: &str) -> WriteError {
    WriteError::from_status(&tonic::Status::unavailable(format!("simulated: {what}")))
}

pub(super) fn lost_answer(what: &str) -> WriteError {
    WriteError::from_status(&tonic::Status::deadline_exceeded(format!(
        "simulated: {what} applied, answer lost"
    )))
}

/// Before a unary call: maybe fail it unapplied, maybe delay it.
pub(super) async fn before(world: &Shared, gate: &Gate, what: &str) -> Result<(), WriteError> {
    gate.pass().await;
    let (fail, delay) = {
        let mut w = lock(world);
        let fail = w.chance(0.04);
        let delay = if w.chance(0.05) {
            Some(Duration::from_millis(w.rng.random_range(10..3_000)))
        } else {
            None
        };
        (fail, delay)
    };
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    if fail {
        return Err(transient(what));
    }
    Ok(())
}

/// After a unary call was applied: maybe lose its answer.
pub(super) async fn after<T>(
    world: &Shared,
    gate: &Gate,
    what: &str,
    r: Result<T, WriteError>,
) -> Result<T, WriteError> {
    let lose = lock(world).chance(0.03);
    gate.pass().await;
    if lose {
        return Err(lost_answer(what));
    }
    r
}

impl WriteTransport for SimWrite {
    fn create_write_stream(
        &self,
        table: String,
        kind: StreamKind,
    ) -> TransportFuture<'_, WriteStream> {
        Box::pin(async move {
            let world = &self.world.0;
            before(world, &self.gate, "CreateWriteStream").await?;
            assert_eq!(
                kind,
                StreamKind::Buffered,
                "the sink creates BUFFERED streams"
            );
            let result = {
                let mut w = lock(world);
                match w
                    .store
                    .create_write_stream(&table, kbq_emulator::store::StreamKind::Buffered)
                {
                    Ok(info) => {
                        let sim = format!("{TABLE}/streams/s{}", w.names.len() + 1);
                        w.names.insert(sim.clone(), info.name.clone());
                        w.streams.insert(
                            sim.clone(),
                            SimStream {
                                partition: None,
                                rows: Vec::new(),
                                finalized_by_sink: false,
                            },
                        );
                        w.trace(format!("bq create {} by r{}", short(&sim), self.process));
                        Ok(WriteStream {
                            name: sim,
                            r#type: bq::write_stream::Type::Buffered as i32,
                            ..Default::default()
                        })
                    }
                    Err(e) => Err(status_error(&e)),
                }
            };
            after(world, &self.gate, "CreateWriteStream", result).await
        })
    }

    fn flush_rows(&self, stream: String, offset: i64) -> TransportFuture<'_, i64> {
        Box::pin(async move {
            let world = &self.world.0;
            before(world, &self.gate, "FlushRows").await?;
            let result = {
                let mut w = lock(world);
                w.check_flush(&stream, offset);
                let name = w.store_name(&stream);
                let r = w.store.flush_rows(&name, Some(offset));
                w.trace(format!(
                    "bq flush {} through {offset} by r{}: {}",
                    short(&stream),
                    self.process,
                    r.as_ref().map_or_else(|e| e.to_string(), |o| o.to_string())
                ));
                r.map_err(|e| status_error(&e))
            };
            after(world, &self.gate, "FlushRows", result).await
        })
    }

    fn finalize_write_stream(&self, stream: String) -> TransportFuture<'_, i64> {
        Box::pin(async move {
            let world = &self.world.0;
            before(world, &self.gate, "FinalizeWriteStream").await?;
            let result = {
                let mut w = lock(world);
                w.check_finalize(&stream, self.process);
                let name = w.store_name(&stream);
                let r = w.store.finalize_write_stream(&name);
                if r.is_ok()
                    && let Some(st) = w.streams.get_mut(&stream)
                {
                    st.finalized_by_sink = true;
                }
                w.trace(format!(
                    "bq finalize {} by r{}: {}",
                    short(&stream),
                    self.process,
                    r.as_ref().map_or_else(|e| e.to_string(), |o| o.to_string())
                ));
                r.map_err(|e| status_error(&e))
            };
            after(world, &self.gate, "FinalizeWriteStream", result).await
        })
    }

    fn open_append(
        &self,
        first: AppendRowsRequest,
    ) -> TransportFuture<'_, Box<dyn AppendTransport>> {
        Box::pin(async move {
            let world = &self.world.0;
            before(world, &self.gate, "AppendRows open").await?;
            let store = lock(world).store.clone();
            let call = SimAppend {
                world: self.world.clone(),
                gate: self.gate.clone(),
                process: self.process,
                number: self.number,
                inner: Mutex::new(AppendCall {
                    session: EmulatorSession::new(store, 10 << 20),
                    stream: first.write_stream.clone(),
                    replies: VecDeque::new(),
                    broken: false,
                }),
            };
            call.apply(first);
            Ok(Box::new(call) as Box<dyn AppendTransport>)
        })
    }
}

pub(super) fn short(stream: &str) -> &str {
    stream.rsplit('/').next().unwrap_or(stream)
}

pub(super) struct SimAppend {
    pub(super) world: SharedDebug,
    pub(super) gate: Arc<Gate>,
    pub(super) process: usize,
    /// The process that opened the call (`SimWrite::number`).
    pub(super) number: usize,
    pub(super) inner: Mutex<AppendCall>,
}

/// An answer of the AppendRows call: its delay, the reply, and the records (partition, offset)
/// whose rows a `_default` append applied.
pub(super) type Answer = (Duration, Result<AppendReply, WriteError>, Vec<(usize, i64)>);

pub(super) struct AppendCall {
    pub(super) session: EmulatorSession,
    /// The sink's name of the call's stream.
    pub(super) stream: String,
    /// The answers, in order.
    pub(super) replies: VecDeque<Answer>,
    /// The call broke: the next read fails.
    pub(super) broken: bool,
}

/// The serialized rows a request carries.
fn request_rows(request: &AppendRowsRequest) -> Vec<Bytes> {
    match &request.rows {
        Some(bq::append_rows_request::Rows::ProtoRows(d)) => d
            .rows
            .as_ref()
            .map(|r| r.serialized_rows.clone())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

impl SimAppend {
    /// The server's side of one request, decided now; its answer waits in `replies`.
    pub(super) fn apply(&self, mut request: AppendRowsRequest) {
        let mut w = lock(&self.world.0);
        let mut call = self.inner.lock().expect("call");
        if call.broken {
            return;
        }
        if !request.write_stream.is_empty() {
            call.stream = request.write_stream.clone();
            request.write_stream = w.store_name(&call.stream);
        }
        let sim = call.stream.clone();
        let offset = request.offset;
        let roll: f64 = if w.faults { w.rng.random() } else { 1.0 };
        if roll < 0.02 {
            // The call breaks before the request reaches the server.
            w.trace(format!(
                "bq append {} @{offset:?} r{}: call broken before",
                short(&sim),
                self.process
            ));
            call.broken = true;
            return;
        }
        if roll < 0.04 {
            // Refused in-stream, nothing appended (quota): the requests behind it fail with
            // OUT_OF_RANGE at the store, as BigQuery answers them.
            w.trace(format!(
                "bq append {} @{offset:?} r{}: resource exhausted",
                short(&sim),
                self.process
            ));
            let e = WriteError::from_status(&tonic::Status::resource_exhausted("simulated: quota"));
            call.replies
                .push_back((Duration::ZERO, Ok(AppendReply::Failed(e)), Vec::new()));
            return;
        }
        let rows = request_rows(&request);
        let outcome = call.session.handle(request);
        let mut applied = Vec::new();
        let reply = match outcome {
            AppendOutcome::Reply(response) => {
                let reply = kafka_bigquery_sink::bigquery::write_client::reply(*response);
                applied = self.record_reply(&mut w, &sim, offset, &rows, &reply);
                Ok(reply)
            }
            AppendOutcome::End(status) => {
                w.trace(format!(
                    "bq append {} @{offset:?} r{}: call ended {}",
                    short(&sim),
                    self.process,
                    status.code()
                ));
                call.broken = true;
                Err(WriteError::from_status(&status))
            }
        };
        let fate: f64 = if w.faults { w.rng.random() } else { 1.0 };
        if fate < 0.02 {
            // Applied, then the call broke: the answer is lost.
            w.trace(format!(
                "bq append {} r{}: answer lost",
                short(&sim),
                self.process
            ));
            call.broken = true;
            return;
        }
        let delay = if fate < 0.04 {
            Duration::from_millis(w.rng.random_range(100..12_000))
        } else {
            Duration::ZERO
        };
        call.replies.push_back((delay, reply, applied));
    }

    /// What an answer means for the simulated tables: rows appended to a BUFFERED stream at the
    /// answer's offset (kept as ids), rows of the `_default` stream visible at once (returned,
    /// as (partition, id)), or nothing; each traced.
    fn record_reply(
        &self,
        w: &mut World,
        sim: &str,
        offset: Option<i64>,
        rows: &[Bytes],
        reply: &AppendReply,
    ) -> Vec<(usize, i64)> {
        let mut applied = Vec::new();
        if let AppendReply::Appended {
            offset: Some(at), ..
        } = reply
        {
            let (id, part) = w.fields;
            let ids: Vec<i64> = rows.iter().map(|r| row_field(r, id)).collect();
            let st = w.streams.get_mut(sim).expect("a stream of ours");
            assert_eq!(st.rows.len() as i64, at.0, "the store appends at the end");
            st.rows.extend(&ids);
            let part = rows.first().map(|r| row_field(r, part) as usize);
            st.partition = st.partition.or(part);
            w.trace(format!(
                "bq append {} @{} r{}: rows {:?}",
                short(sim),
                at.0,
                self.process,
                ids
            ));
        } else if let AppendReply::Appended { offset: None, .. } = reply {
            // The `_default` stream: the rows are visible now.
            let (id, part) = w.fields;
            applied = (rows.iter())
                .map(|r| (row_field(r, part) as usize, row_field(r, id)))
                .collect();
            w.trace(format!(
                "bq append {} r{}: rows {:?}",
                short(sim),
                self.process,
                applied
            ));
            w.appended_default(self.process, self.number, &applied);
        } else {
            let what = match reply {
                AppendReply::Failed(e) => {
                    let rows: Vec<i64> = e.row_errors.iter().map(|r| r.index).collect();
                    format!("failed {:?}, row errors at {rows:?}", e.code)
                }
                AppendReply::Appended { offset, .. } => {
                    format!("appended at {:?}", offset.map(|o| o.0))
                }
            };
            w.trace(format!(
                "bq append {} @{offset:?} r{}: {what}",
                short(sim),
                self.process
            ));
        }
        applied
    }
}

impl AppendTransport for SimAppend {
    fn send(&self, request: AppendRowsRequest) -> TransportFuture<'_, ()> {
        Box::pin(async move {
            self.gate.pass().await;
            self.apply(request);
            Ok(())
        })
    }

    fn next_reply(&mut self) -> TransportFuture<'_, AppendReply> {
        Box::pin(async move {
            self.gate.pass().await;
            let next = {
                let mut call = self.inner.lock().expect("call");
                let next = call.replies.pop_front();
                (next, call.broken)
            };
            match next {
                (Some((delay, reply, applied)), _) => {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    self.gate.pass().await;
                    if !applied.is_empty() {
                        // The session learns that these rows are appended: it has no reason
                        // to send them again unless the consumer delivers them again.
                        let mut w = lock(&self.world.0);
                        for at in applied {
                            let ledger = w.ledgers.get_mut(&self.number);
                            if let Some(d) = ledger.and_then(|l| l.get_mut(&at)) {
                                d.unanswered = d.unanswered.saturating_sub(1);
                            }
                        }
                    }
                    reply
                }
                // Nothing sent that is unanswered: the session never reads then.
                (None, false) => std::future::pending().await,
                (None, true) => Err(WriteError::disconnected("simulated: connection reset")),
            }
        })
    }
}

/// Proto2 varint field `number` of a row (the id is field 1, the partition field 2).
pub(super) fn row_field(row: &[u8], number: u64) -> i64 {
    let mut i = 0;
    let varint = |i: &mut usize| {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = row[*i];
            *i += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    };
    while i < row.len() {
        let key = varint(&mut i);
        match key & 7 {
            0 => {
                let v = varint(&mut i);
                if key >> 3 == number {
                    return v as i64;
                }
            }
            2 => {
                let len = varint(&mut i) as usize;
                i += len;
            }
            1 => i += 8,
            5 => i += 4,
            _ => break,
        }
    }
    -1
}
