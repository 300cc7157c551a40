//! The writer actor of one partition incarnation (docs/architecture.md#the-shape): takes the
//! partition's records in offset order, transcodes them into a batch, appends batches to its own
//! BUFFERED stream with explicit offsets, and reports the acknowledged prefix to the checkpoint
//! coordinator.
//!
//! The acknowledged prefix is what a checkpoint may cover: records below `next` are each either
//! an acknowledged row of the stream (rows `0..rows`) or a dead-lettered record whose produce the
//! broker acknowledged (invariant 6). A bad record never stalls the partition.
//!
//! The actor is sequential on purpose: AppendSession's recovery (reconnect, resend, resequence)
//! must never be cancelled half-way, so the actor awaits it outside any `select!`.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::Instant;

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::TableSchema as ProtoTableSchema;

use crate::bigquery::write_client::{StreamKind, WriteClient};
use crate::checkpoint::offsets::{Acknowledged, Incarnation, NextOffset, RowCount, StreamId};
use crate::checkpoint::protocol::TopicPartition;
use crate::kafka::consumer::Record;
use crate::kafka::dead_letter::{BadRecord, DeadLetterProducer};
use crate::kafka::memory_budget::PartitionBudget;
use crate::ops::metrics::{Metrics, ReasonLabel, TableLabel, TopicLabel};
use crate::transcode::{KafkaHeader, KafkaMetadata, Plan, RecordError};
use prometheus_client::metrics::{counter::Counter, histogram::Histogram};

use super::append_session::{AppendSession, Batch, SessionError, SessionEvent, SessionLimits};
use super::stream_quota::StreamCreationLimiter;
use crate::tables::cdc_plans::ChangePlans;

mod change;

/// Why a schema lookup failed.
#[derive(Debug, Clone)]
pub enum PlanLookupError {
    /// This record's schema can never be used (unknown id, incompatible with the table): the
    /// record is bad.
    BadRecord(BadRecord),
    /// The registry or the table is unreachable: the partition waits and retries, it never
    /// dead-letters good data (invariant 6).
    Unavailable(String),
}

/// The plan for a payload and the offset of the Avro body inside the payload.
pub type PlanLookup<'a> =
    Pin<Box<dyn Future<Output = Result<(Arc<Plan>, usize), PlanLookupError>> + Send + 'a>>;

/// Where plans come from: the Schema Registry (by the id in the Confluent header) or a fixed
/// `.avsc` (raw Avro).
pub trait PlanSource: Send + Sync {
    /// The plan for this payload and the Avro body inside it.
    fn plan_for<'a>(&'a self, payload: &'a [u8]) -> PlanLookup<'a>;

    /// The plan for this payload when it is known without waiting (a cached schema id), or
    /// `None` to ask [`plan_for`](Self::plan_for): the common case then costs no boxed future.
    fn cached_plan(&self, _payload: &[u8]) -> Option<Result<(Arc<Plan>, usize), BadRecord>> {
        None
    }

    /// The plan of every payload, when there is only one and the body is the whole payload (a
    /// fixed `.avsc`): the writer then skips [`plan_for`](Self::plan_for) per record.
    fn fixed_plan(&self) -> Option<&Arc<Plan>> {
        None
    }

    /// An AppendRows response carried `updated_schema`: the table changed under the connection.
    fn table_schema_updated(&self, _schema: &ProtoTableSchema) {}
}

/// What to do with a record that cannot become a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRecordPolicy {
    DeadLetter,
    /// Count it and move on (explicit opt-in).
    Skip,
    /// Stop the partition.
    Fail,
}

/// The table a writer appends to: its topic's route.
pub struct WriterRoute {
    /// `projects/{p}/datasets/{d}/tables/{t}`.
    pub table: String,
    /// Short table name for metric labels.
    pub table_label: String,
    pub plans: Arc<dyn PlanSource>,
    /// A CDC route: records are changes by primary key (docs/cdc.md).
    pub cdc: Option<Arc<ChangePlans>>,
}

#[derive(Debug, Clone)]
pub struct WriterSettings {
    pub max_request_bytes: usize,
    pub max_rows_per_request: usize,
    pub linger: Duration,
    pub session: SessionLimits,
    pub on_bad_record: BadRecordPolicy,
    /// Pause between attempts while the schema source is unavailable.
    pub lookup_backoff: Duration,
    /// At-least-once mode: append to the table's `_default` stream without offsets instead of
    /// a BUFFERED stream of this incarnation.
    pub default_stream: bool,
}

/// Shared by all writers of the process.
pub struct WriterShared {
    pub client: WriteClient,
    pub dead_letter: Option<DeadLetterProducer>,
    pub metrics: Arc<Metrics>,
    /// CreateWriteStream is quota-limited per project: creations pass a token bucket.
    pub stream_creation: Arc<StreamCreationLimiter>,
    pub settings: WriterSettings,
}

/// What a writer tells the coordinator.
#[derive(Debug)]
pub enum WriterEvent {
    Acknowledged {
        tp: TopicPartition,
        ack: Acknowledged,
    },
    StreamLost {
        tp: TopicPartition,
        incarnation: Incarnation,
        stream: StreamId,
    },
    Zombie {
        tp: TopicPartition,
        incarnation: Incarnation,
        stream: StreamId,
    },
    /// Answer to a stop: the last acknowledgement was sent before this.
    Stopped {
        tp: TopicPartition,
        incarnation: Incarnation,
    },
    Failed {
        tp: TopicPartition,
        incarnation: Incarnation,
        reason: String,
    },
}

/// The coordinator's handle on a writer.
pub struct WriterHandle {
    pub incarnation: Incarnation,
    stop: Option<tokio::sync::oneshot::Sender<Duration>>,
    pub task: tokio::task::JoinHandle<()>,
}

impl WriterHandle {
    /// Asks the writer to stop taking records, wait up to `drain` for its appends in flight,
    /// report its last acknowledgement and answer `Stopped`.
    pub fn stop(&mut self, drain: Duration) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(drain);
        }
    }
}

/// Starts the writer of one incarnation. It reads `records` (routed by the consumer from offset
/// `from`) and reports on `events`.
pub fn spawn(
    shared: Arc<WriterShared>,
    route: Arc<WriterRoute>,
    tp: TopicPartition,
    incarnation: Incarnation,
    from: NextOffset,
    records: mpsc::Receiver<Record>,
    events: mpsc::UnboundedSender<WriterEvent>,
) -> WriterHandle {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let topic_label = TopicLabel {
        topic: tp.topic.clone(),
    };
    let table_label = TableLabel {
        table: route.table_label.clone(),
    };
    // Handles taken once: a family lookup hashes and locks, too much for every record.
    let m = &shared.metrics;
    let counters = HotMetrics {
        records_consumed: m.records_consumed.get_or_create(&topic_label).clone(),
        bytes_consumed: m.bytes_consumed.get_or_create(&topic_label).clone(),
        rows_appended: m.rows_appended.get_or_create(&table_label).clone(),
        append_latency: m.append_latency.get_or_create(&table_label).clone(),
    };
    let writer = PartitionWriter {
        shared,
        route,
        counters,
        account: None,
        batch_hint: 0,
        tp,
        incarnation,
        events,
        session: None,
        stream_id: None,
        plan: None,
        plan_schema_len: 0,
        open: OpenBatch::default(),
        meta: VecDeque::new(),
        acked_rows: 0,
        acked_next: from,
        acked_bytes: 0,
        pending_next: from,
        stop: Some(stop_rx),
        denied: crate::backoff::DENIED,
        retrying: false,
    };
    let task = tokio::spawn(writer.run(records));
    WriterHandle {
        incarnation,
        stop: Some(stop_tx),
        task,
    }
}

/// Where a row comes from.
enum RowBody {
    /// The record's value, its Avro body starting at this byte.
    Value(usize),
    /// Avro the writer built (a CDC row with its pseudo-columns).
    Avro(Vec<u8>),
    /// A finished row in the plan's descriptor (a renumbered DELETE by key).
    Proto(Vec<u8>),
}

/// Rows being collected for the next request.
#[derive(Default)]
struct OpenBatch {
    buffer: Vec<u8>,
    ranges: Vec<std::ops::Range<usize>>,
    records: Vec<Record>,
    /// Exact encoded size of the rows inside ProtoRows (tag + length + bytes per row).
    rows_encoded: usize,
    first_at: Option<Instant>,
}

/// Bookkeeping of one request in flight, in the session's order.
struct InflightMeta {
    /// Every record below this is handled once the request is acknowledged.
    kafka_next: NextOffset,
    bytes: u64,
}

/// The metric series a writer updates per record or per request.
struct HotMetrics {
    records_consumed: Counter,
    bytes_consumed: Counter,
    rows_appended: Counter,
    append_latency: Histogram,
}

/// Records taken from the channel at once: the select (and its timers) runs per burst, not per
/// record.
const BURST: usize = 256;

struct PartitionWriter {
    shared: Arc<WriterShared>,
    route: Arc<WriterRoute>,
    counters: HotMetrics,
    /// This partition's account in the process's memory budget, learnt from the first charged
    /// record.
    account: Option<Arc<PartitionBudget>>,
    /// Bytes of the last sealed batch: the next batch's buffer is reserved at about that size,
    /// so it is not grown (copied) by doubling.
    batch_hint: usize,
    tp: TopicPartition,
    incarnation: Incarnation,
    events: mpsc::UnboundedSender<WriterEvent>,
    session: Option<AppendSession<Record>>,
    stream_id: Option<StreamId>,
    plan: Option<Arc<Plan>>,
    /// Encoded size of `plan`'s descriptor (the writer schema a request may carry).
    plan_schema_len: usize,
    open: OpenBatch,
    meta: VecDeque<InflightMeta>,
    /// The acknowledged prefix.
    acked_rows: i64,
    acked_next: NextOffset,
    acked_bytes: u64,
    /// Records below this have been taken into a batch or dead-lettered.
    pending_next: NextOffset,
    /// The coordinator's stop, until it came (then `None`).
    stop: Option<StopSignal>,
    /// Pauses between attempts after an error only time or an operator cures; while it is
    /// running the partition counts in `kbq_partitions_retrying` (readiness false).
    denied: crate::backoff::Backoff,
    retrying: bool,
}

type StopSignal = tokio::sync::oneshot::Receiver<Duration>;

/// How a writer's run ended.
enum End {
    Stopped,
    Lost(StreamId),
    /// The stream's offsets disagree with ours: reported as lost, after a pause.
    Conflict(StreamId),
    Zombie(StreamId),
    Failed(String),
}

impl PartitionWriter {
    async fn run(mut self, mut records: mpsc::Receiver<Record>) {
        let end = match self.work(&mut records).await {
            Ok(drain) => self
                .drain(drain)
                .await
                .map(|()| End::Stopped)
                .unwrap_or_else(|e| e),
            Err(end) => end,
        };
        let m = &self.shared.metrics;
        for meta in self.meta.drain(..) {
            m.inflight_requests.dec();
            m.inflight_bytes.dec_by(meta.bytes as i64);
        }
        if self.session.is_some() {
            m.open_streams.dec();
        }
        self.set_retrying(false);
        let tp = self.tp.clone();
        let incarnation = self.incarnation;
        let event = match end {
            End::Stopped => WriterEvent::Stopped { tp, incarnation },
            End::Lost(stream) => WriterEvent::StreamLost {
                tp,
                incarnation,
                stream,
            },
            End::Conflict(stream) => {
                tracing::warn!(partition = %tp, stream = %stream, "write stream offsets conflict with ours: abandoning the stream");
                // Bounds the rate of new streams should every new stream conflict too.
                tokio::time::sleep(Duration::from_secs(1)).await;
                WriterEvent::StreamLost {
                    tp,
                    incarnation,
                    stream,
                }
            }
            End::Zombie(stream) => WriterEvent::Zombie {
                tp,
                incarnation,
                stream,
            },
            End::Failed(reason) => WriterEvent::Failed {
                tp,
                incarnation,
                reason,
            },
        };
        let _ = self.events.send(event);
    }

    /// Takes records until told to stop; returns the drain budget of the stop.
    async fn work(&mut self, records: &mut mpsc::Receiver<Record>) -> Result<Duration, End> {
        let linger = self.shared.settings.linger;
        let mut burst = Vec::with_capacity(BURST);
        loop {
            let deadline = self.open.first_at.map(|t| t + linger);
            tokio::select! {
                biased;
                drain = stopped(&mut self.stop) => return Ok(drain),
                taken = records.recv_many(&mut burst, BURST) => {
                    if taken == 0 {
                        // The consumer dropped the route: wait for the stop that follows.
                        return Ok(stopped(&mut self.stop).await);
                    }
                    for record in burst.drain(..) {
                        self.take(record).await?;
                    }
                    // The process's memory budget, or this partition's share of it, is used
                    // up: no record comes until something is acknowledged, so waiting for a
                    // fuller batch would only stall (for the whole linger, at few partitions).
                    let starved = self.account.as_ref().is_some_and(|a| a.starved());
                    if records.is_empty() && starved {
                        self.seal().await?;
                    }
                }
                _ = sleep_until(deadline) => self.seal().await?,
                // Idle: no records for a linger period and nothing open. Settle what is in
                // flight so the checkpoint sees it.
                _ = tokio::time::sleep(linger), if self.open.records.is_empty() && !self.meta.is_empty() => {
                    self.settle_all().await?;
                }
            }
        }
    }

    /// Seals what is open, waits (bounded) for every append in flight, reports the prefix.
    async fn drain(&mut self, budget: Duration) -> Result<(), End> {
        let work = async {
            self.seal().await?;
            self.settle_all().await
        };
        match tokio::time::timeout(budget, work).await {
            Ok(result) => result,
            // The rest stays unacknowledged: the checkpoint does not cover it, the next owner
            // reads those records again.
            Err(_) => Ok(()),
        }
    }

    async fn take(&mut self, record: Record) -> Result<(), End> {
        if record.offset < self.pending_next.0 {
            // The consumer is behind the position this incarnation starts from or has reached
            // (a seek that did not happen, issue 11 #4): taking the record would append rows the
            // checkpoint already covers. Fail closed rather than write them twice.
            return Err(End::Failed(format!(
                "record at offset {} is below the writer's position {}: the consumer is not where the checkpoint says",
                record.offset, self.pending_next.0
            )));
        }
        self.counters.records_consumed.inc();
        self.counters.bytes_consumed.inc_by(record.size() as u64);
        if self.account.is_none() {
            self.account = record.charge.account().cloned();
        }
        let next = NextOffset(record.offset + 1);
        if let Some(cdc) = self.route.cdc.clone() {
            return self.take_change(record, &cdc, next).await;
        }
        let Some(value) = record.value() else {
            return self
                .bad(
                    record,
                    BadRecord {
                        class: "malformed_avro",
                        reason: "record has no value (tombstone)".into(),
                    },
                )
                .await;
        };
        // A source with one plan for every payload (raw Avro) needs no lookup once the writer
        // holds that plan: no boxed future and no shared reference count per record.
        let fixed = self
            .route
            .plans
            .fixed_plan()
            .is_some_and(|f| self.plan.as_ref().is_some_and(|p| Arc::ptr_eq(p, f)));
        let body_at = if fixed {
            0
        } else {
            let cached = self.route.plans.cached_plan(value);
            let lookup = if let Some(found) = cached {
                found
            } else {
                loop {
                    match unless_stopped(&mut self.stop, self.route.plans.plan_for(value)).await? {
                        Ok(found) => break Ok(found),
                        Err(PlanLookupError::BadRecord(bad)) => break Err(bad),
                        Err(PlanLookupError::Unavailable(why)) => {
                            tracing::warn!(partition = %self.tp, reason = %why, "schema unavailable, waiting");
                            let pause = tokio::time::sleep(self.shared.settings.lookup_backoff);
                            unless_stopped(&mut self.stop, pause).await?;
                        }
                    }
                }
            };
            let (plan, body_at) = match lookup {
                Ok(found) => found,
                Err(bad) => return self.bad(record, bad).await,
            };
            self.use_plan(plan).await?;
            body_at
        };
        self.append_row(record, RowBody::Value(body_at), next).await
    }

    /// Makes `plan` the writer's plan; a new writer schema first sends what is open.
    async fn use_plan(&mut self, plan: Arc<Plan>) -> Result<(), End> {
        // Plans are cached and shared: the same Arc is the same descriptor, which spares the
        // deep comparison and the descriptor's size computation on every record.
        if !self.plan.as_ref().is_some_and(|p| Arc::ptr_eq(p, &plan)) {
            if self
                .plan
                .as_ref()
                .is_some_and(|p| p.descriptor() != plan.descriptor())
            {
                // A new writer schema: the rows of a request share one descriptor, and an
                // explicit stream changes schema by reconnecting (same stream, same offsets).
                self.seal().await?;
                self.settle_all().await?;
                if let Some(session) = &mut self.session {
                    session.change_writer_schema(plan.descriptor().clone());
                }
            }
            self.plan_schema_len = prost::Message::encoded_len(plan.descriptor());
            self.plan = Some(plan);
        }
        Ok(())
    }

    /// Transcodes one record's row with the writer's plan into the open batch, sending the batch
    /// first when the row would overflow it.
    async fn append_row(
        &mut self,
        mut record: Record,
        body: RowBody,
        next: NextOffset,
    ) -> Result<(), End> {
        if self.open.buffer.capacity() == 0 {
            self.reserve_batch();
        }
        let transcoded = {
            let header_values: Vec<KafkaHeader<'_>> = record
                .headers
                .iter()
                .map(|(k, v)| KafkaHeader {
                    key: k,
                    value: Some(v.as_ref()),
                })
                .collect();
            let meta = KafkaMetadata {
                topic: &self.tp.topic,
                partition: self.tp.partition,
                offset: record.offset,
                timestamp_millis: record.timestamp_ms,
                key: record.key(),
                headers: &header_values,
            };
            let plan = self.plan.as_ref().expect("a plan was just chosen");
            match &body {
                RowBody::Value(at) => {
                    let value = record.value().unwrap_or_default();
                    plan.transcode(&value[*at..], Some(&meta), &mut self.open.buffer)
                }
                RowBody::Avro(avro) => plan.transcode(avro, Some(&meta), &mut self.open.buffer),
                RowBody::Proto(row) => {
                    let start = self.open.buffer.len();
                    self.open.buffer.extend_from_slice(row);
                    Ok(start..self.open.buffer.len())
                }
            }
        };
        let range = match transcoded {
            Ok(range) => range,
            Err(error) => {
                let bad = BadRecord {
                    class: record_error_class(&error),
                    reason: error.to_string(),
                };
                return self.bad(record, bad).await;
            }
        };
        let len = range.len();
        let encoded = 1 + varint_len(len as u64) + len;
        // The row, and the gRPC layer's encoded copy of it, live as long as its record (until the
        // request is acknowledged; the copy may go sooner, which the writer cannot see): their
        // size replaces the estimate the record was charged with.
        let estimate = record.row_estimate();
        record.charge.adjust(2 * (encoded as i64 - estimate as i64));
        // With many partitions the memory budget asks for smaller requests than configured.
        let max_request = match &self.account {
            Some(a) => a.budget().request_cap(),
            None => usize::MAX,
        }
        .min(self.shared.settings.max_request_bytes);
        if !self.open.records.is_empty()
            && self.request_bound(self.open.rows_encoded + encoded) > max_request
        {
            // This row would overflow the request: send what is open first, then start a new
            // batch with this row (moving its bytes to the front of the fresh buffer).
            let row = self.open.buffer[range.clone()].to_vec();
            self.open.buffer.truncate(range.start);
            self.seal().await?;
            self.reserve_batch();
            self.open.buffer.extend_from_slice(&row);
            self.push_row(0..row.len(), encoded, record, next);
        } else {
            self.push_row(range, encoded, record, next);
        }
        if self.open.records.len() >= self.shared.settings.max_rows_per_request {
            self.seal().await?;
        }
        Ok(())
    }

    /// Reserves the open batch's buffer at about the size of the last batch.
    fn reserve_batch(&mut self) {
        let hint = self.batch_hint + self.batch_hint / 8;
        let cap = match &self.account {
            Some(a) => a.budget().request_cap(),
            None => usize::MAX,
        }
        .min(self.shared.settings.max_request_bytes)
            + (64 << 10);
        self.open.buffer.reserve(hint.clamp(16 << 10, cap));
    }

    fn push_row(
        &mut self,
        range: std::ops::Range<usize>,
        encoded: usize,
        record: Record,
        next: NextOffset,
    ) {
        if self.open.first_at.is_none() {
            self.open.first_at = Some(Instant::now());
        }
        self.open.ranges.push(range);
        self.open.records.push(record);
        self.open.rows_encoded += encoded;
        self.pending_next = next;
    }

    /// Upper bound of the encoded request for rows of `rows_encoded` bytes: the rows plus the
    /// request's other fields (stream name, offset, the writer schema on a connection's first
    /// request).
    fn request_bound(&self, rows_encoded: usize) -> usize {
        rows_encoded + self.plan_schema_len + self.route.table.len() + 128
    }

    /// A record that cannot become a row, taken in offset order: dead-letter it (acknowledged)
    /// or apply the policy, then let the prefix pass it.
    async fn bad(&mut self, record: Record, bad: BadRecord) -> Result<(), End> {
        let next = NextOffset(record.offset + 1);
        self.dead_letter(record, bad).await?;
        self.record_handled_out_of_band(next);
        Ok(())
    }

    /// Dead-letters `record` (its produce acknowledged) or applies the policy, and counts it.
    /// No prefix bookkeeping: a row BigQuery rejected out of a request in flight is already
    /// covered by that request's `kafka_next`, which must not move (issue 11 #1).
    async fn dead_letter(&mut self, record: Record, bad: BadRecord) -> Result<(), End> {
        match self.shared.settings.on_bad_record {
            BadRecordPolicy::Fail => {
                return Err(End::Failed(format!(
                    "bad record at offset {}: {}",
                    record.offset, bad.reason
                )));
            }
            BadRecordPolicy::Skip => {
                tracing::warn!(partition = %self.tp, offset = record.offset, reason = %bad.reason, "bad record skipped");
            }
            BadRecordPolicy::DeadLetter => {
                let producer = self
                    .shared
                    .dead_letter
                    .as_ref()
                    .expect("validated: dead_letter policy has a producer");
                let mut backoff = crate::backoff::DEAD_LETTER;
                loop {
                    let send = producer.send(&self.tp.topic, self.tp.partition, &record, &bad);
                    match unless_stopped(&mut self.stop, send).await? {
                        Ok(()) => break,
                        Err(e) => {
                            // The DLQ must acknowledge before the record counts as handled;
                            // until it does, the partition waits (and still answers a stop).
                            tracing::warn!(partition = %self.tp, offset = record.offset, error = %e, "dead-letter produce failed, retrying");
                            unless_stopped(&mut self.stop, backoff.wait()).await?;
                        }
                    }
                }
                tracing::info!(partition = %self.tp, offset = record.offset, class = bad.class, reason = %bad.reason, "record dead-lettered");
            }
        }
        self.shared
            .metrics
            .dead_letter_records
            .get_or_create(&ReasonLabel { reason: bad.class })
            .inc();
        Ok(())
    }

    /// A record handled without a row: it joins the unit that decides when the prefix passes it.
    fn record_handled_out_of_band(&mut self, next: NextOffset) {
        self.pending_next = next;
        if !self.open.records.is_empty() {
            // The open batch's acknowledgement will cover it (its kafka_next is pending_next).
        } else if let Some(last) = self.meta.back_mut() {
            last.kafka_next = next;
        } else {
            self.acked_next = next;
            self.report();
        }
    }

    /// Sends the open batch.
    async fn seal(&mut self) -> Result<(), End> {
        if self.open.records.is_empty() {
            return Ok(());
        }
        if self.session.is_none() {
            self.open_stream().await?;
        }
        let mut open = std::mem::take(&mut self.open);
        self.batch_hint = open.buffer.len();
        // The rows keep the whole allocation alive until they are acknowledged, and the budget
        // counts only the rows: give back what the reservation did not use (the allocator
        // shrinks in place).
        open.buffer.shrink_to_fit();
        let buffer = Bytes::from(open.buffer);
        let mut batch = Batch {
            rows: Vec::with_capacity(open.ranges.len()),
            tags: Vec::with_capacity(open.ranges.len()),
        };
        for (range, record) in open.ranges.into_iter().zip(open.records) {
            batch.push(buffer.slice(range), record);
        }
        let bytes = open.rows_encoded as u64;
        loop {
            let session = self.session.as_ref().expect("session");
            if session.has_room_for(open.rows_encoded) {
                break;
            }
            self.settle_one().await?;
        }
        self.meta.push_back(InflightMeta {
            kafka_next: self.pending_next,
            bytes,
        });
        self.shared.metrics.inflight_requests.inc();
        self.shared.metrics.inflight_bytes.inc_by(bytes as i64);
        let session = self.session.as_mut().expect("session");
        match session.submit(batch).await {
            Ok(()) => Ok(()),
            // The request stays in the session, which resends it on its next call.
            Err(e) => self.ride_out(e).await,
        }
    }

    async fn open_stream(&mut self) -> Result<(), End> {
        let plan = self.plan.clone().expect("a plan before the first row");
        if self.shared.settings.default_stream {
            return self.open_default_stream(plan);
        }
        let stream = {
            unless_stopped(&mut self.stop, self.shared.stream_creation.acquire()).await?;
            let mut backoff = crate::backoff::CREATE_STREAM;
            loop {
                let attempt = (self.shared.client)
                    .create_write_stream(&self.route.table, StreamKind::Buffered);
                let e = match unless_stopped(&mut self.stop, attempt).await? {
                    Ok(stream) => break stream,
                    Err(e) => e,
                };
                self.shared.metrics.bigquery_error("CreateWriteStream", &e);
                use crate::bigquery::error::ErrorClass::*;
                let pause = match e.class() {
                    Transient | Throttled | NotFound => {
                        tracing::warn!(partition = %self.tp, error = %e, "create write stream failed, retrying");
                        backoff.next_delay()
                    }
                    Denied => {
                        self.set_retrying(true);
                        let pause = self.denied.next_delay();
                        tracing::error!(partition = %self.tp, error = %e, retry_in = ?pause, "create write stream denied, retrying");
                        pause
                    }
                    _ => {
                        return Err(End::Failed(format!("cannot create a write stream: {e}")));
                    }
                };
                unless_stopped(&mut self.stop, tokio::time::sleep(pause)).await?;
            }
        };
        self.set_retrying(false);
        let id = StreamId::from_stream_name(&stream.name)
            .map_err(|e| End::Failed(format!("bad stream name {}: {}", e.id, e.why)))?;
        let m = &self.shared.metrics;
        m.streams_created
            .get_or_create(&TableLabel {
                table: self.route.table_label.clone(),
            })
            .inc();
        m.open_streams.inc();
        tracing::info!(partition = %self.tp, stream = %id, incarnation = self.incarnation.0, "opened write stream");
        let next_offset = self.acked_rows;
        let metrics = self.shared.metrics.clone();
        self.session = Some(
            AppendSession::new(
                self.shared.client.clone(),
                stream.name,
                plan.descriptor().clone(),
                next_offset,
                self.shared.settings.session.clone(),
            )
            .observe_errors(Arc::new(move |e| metrics.bigquery_error("AppendRows", e))),
        );
        self.stream_id = Some(id);
        Ok(())
    }

    /// At-least-once mode: the `_default` stream exists with the table and takes no offsets.
    fn open_default_stream(&mut self, plan: Arc<Plan>) -> Result<(), End> {
        let name = format!("{}/streams/_default", self.route.table);
        let id = StreamId::from_stream_name(&name)
            .map_err(|e| End::Failed(format!("bad stream name {}: {}", e.id, e.why)))?;
        self.shared.metrics.open_streams.inc();
        tracing::info!(partition = %self.tp, incarnation = self.incarnation.0, "appending to the default stream");
        let metrics = self.shared.metrics.clone();
        self.session = Some(
            AppendSession::new(
                self.shared.client.clone(),
                name,
                plan.descriptor().clone(),
                self.acked_rows,
                self.shared.settings.session.clone(),
            )
            .without_offsets()
            .observe_errors(Arc::new(move |e| metrics.bigquery_error("AppendRows", e))),
        );
        self.stream_id = Some(id);
        Ok(())
    }

    async fn settle_all(&mut self) -> Result<(), End> {
        while !self.meta.is_empty() {
            self.settle_one().await?;
        }
        Ok(())
    }

    /// Handles the next answer of the session.
    async fn settle_one(&mut self) -> Result<(), End> {
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        let event = match session.next_event().await {
            Ok(Some(event)) => event,
            Ok(None) => return Ok(()),
            // Nothing was lost: the session resends what is in flight on its next call.
            Err(e) => return self.ride_out(e).await,
        };
        match event {
            SessionEvent::Appended {
                first_offset,
                tags,
                updated_schema,
                latency,
            } => {
                self.set_retrying(false);
                let meta = self.pop_meta();
                let rows = tags.len() as i64;
                self.acked_rows = first_offset + rows;
                self.acked_next = meta.kafka_next;
                self.acked_bytes += meta.bytes;
                self.counters.rows_appended.inc_by(rows as u64);
                self.counters.append_latency.observe(latency.as_secs_f64());
                if let Some(schema) = &updated_schema {
                    self.route.plans.table_schema_updated(schema);
                }
                self.report();
            }
            SessionEvent::RowsRejected {
                rows,
                request_emptied,
            } => {
                for (record, _row, reason) in rows {
                    let bad = BadRecord {
                        class: "row_rejected",
                        reason,
                    };
                    // Already covered by the request's kafka_next: only dead-letter here.
                    self.dead_letter(record, bad).await?;
                }
                if request_emptied {
                    let meta = self.pop_meta();
                    self.acked_next = meta.kafka_next;
                    self.report();
                }
            }
        }
        Ok(())
    }

    fn pop_meta(&mut self) -> InflightMeta {
        let meta = self
            .meta
            .pop_front()
            .expect("one meta per request in flight");
        self.shared.metrics.inflight_requests.dec();
        self.shared.metrics.inflight_bytes.dec_by(meta.bytes as i64);
        meta
    }

    fn report(&self) {
        let ack = match &self.stream_id {
            Some(stream) if self.acked_rows > 0 => Acknowledged::from_append_response(
                self.incarnation,
                stream.clone(),
                RowCount(self.acked_rows),
                self.acked_next,
                self.acked_bytes,
            ),
            _ => Acknowledged::incarnation_start(self.incarnation, self.acked_next),
        };
        let _ = self.events.send(WriterEvent::Acknowledged {
            tp: self.tp.clone(),
            ack,
        });
    }

    /// A session call failed. An error a pause may cure — permission denied, credentials, a failed
    /// precondition, or a transient outage that outlasted the session's reconnects — is waited out
    /// with a long backoff, readiness false, and the session resends its requests on its next call
    /// (docs/architecture.md#failure-policies: no permanent stop for these). Anything else ends the
    /// run.
    async fn ride_out(&mut self, error: SessionError) -> Result<(), End> {
        use crate::bigquery::error::ErrorClass;
        let curable = matches!(
            &error,
            SessionError::Failed { error, .. }
                if matches!(error.class(), ErrorClass::Denied | ErrorClass::Transient | ErrorClass::Throttled)
        );
        if !curable {
            return Err(self.session_end(error));
        }
        let pause = self.denied.next_delay();
        tracing::error!(partition = %self.tp, error = %error, retry_in = ?pause, attempt = self.denied.attempts(), "append failed, retrying after a pause");
        self.set_retrying(true);
        unless_stopped(&mut self.stop, tokio::time::sleep(pause)).await
    }

    /// Counts this partition in `kbq_partitions_retrying` (readiness false) or not.
    fn set_retrying(&mut self, retrying: bool) {
        if retrying == self.retrying {
            return;
        }
        self.retrying = retrying;
        if retrying {
            self.shared.metrics.partitions_retrying.inc();
        } else {
            self.denied.reset();
            self.shared.metrics.partitions_retrying.dec();
        }
    }

    fn session_end(&self, error: SessionError) -> End {
        let stream = self.stream_id.clone();
        match (error, stream) {
            (SessionError::Zombie { .. }, Some(s)) => End::Zombie(s),
            (SessionError::StreamLost { .. }, Some(s)) => End::Lost(s),
            // Offsets that disagree with ours (ALREADY_EXISTS on a request sent once,
            // OUT_OF_RANGE, an ack at another offset): this stream cannot be trusted with more
            // rows. Abandoning it is safe, the protocol restarts the incarnation on a new
            // stream from what is known visible (the rows in doubt of a checkpoint naming it
            // go through recovery.lost_stream); stopping the partition would stall it for good.
            (SessionError::OffsetConflict { .. }, Some(s)) => End::Conflict(s),
            (e, _) => End::Failed(e.to_string()),
        }
    }
}

fn record_error_class(error: &RecordError) -> &'static str {
    error.class()
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// The coordinator's stop: its drain budget (none if the handle was dropped). Pending forever
/// once it came.
async fn stopped(stop: &mut Option<StopSignal>) -> Duration {
    let Some(signal) = stop.as_mut() else {
        return std::future::pending().await;
    };
    let drain = signal.await.unwrap_or(Duration::ZERO);
    *stop = None;
    drain
}

/// Runs `work` unless the stop comes first. A writer waiting out an outage (the dead-letter
/// topic, the registry, stream creation) must still answer a stop, or the handoff and every
/// partition's final cycle wait for their deadlines (issue 11 #15). A stop there ends the writer
/// at once with its last reported acknowledgement: nothing it has not acknowledged is counted,
/// so the next owner reads those records again.
async fn unless_stopped<T>(
    stop: &mut Option<StopSignal>,
    work: impl Future<Output = T>,
) -> Result<T, End> {
    if stop.is_none() {
        return Ok(work.await);
    }
    tokio::select! {
        biased;
        _ = stopped(stop) => Err(End::Stopped),
        out = work => Ok(out),
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
