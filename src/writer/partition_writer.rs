//! The writer actor of one partition incarnation (docs/architecture.md#the-shape): takes the
//! partition's records in offset order, transcodes them into a batch, appends batches to its own
//! BUFFERED stream with explicit offsets, and reports the acknowledged prefix to the checkpoint
//! coordinator.
//!
//! The acknowledged prefix is what a checkpoint may cover: records below `next` are each either
//! an acknowledged row of the stream (rows `0..rows`) or a dead-lettered record whose produce the
//! broker acknowledged (invariant 6). A bad record never stalls the partition.
//!
//! This file is the async shell. What it decides before any I/O lives in pure rooms beside it:
//! [`admission`](super::admission) (whether a record may be taken, its memory charge, the
//! in-flight window), [`batch`](super::batch) (what goes into the next request and when it is
//! sent) and [`prefix`](super::prefix) (what the answers acknowledge). The stream and the
//! session's failures are in `partition_writer/stream.rs`, bad records in
//! `partition_writer/bad_record.rs`, CDC changes in `partition_writer/change.rs`.
//!
//! The actor is sequential on purpose: AppendSession's recovery (reconnect, resend, resequence)
//! must never be cancelled half-way, so the actor awaits it outside any `select!`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::bigquery::write_client::WriteClient;
use crate::deadline::sleep_until;
use crate::kafka::consumer::Record;
use crate::kafka::dead_letter::DeadLetterProducer;
use crate::kafka::memory_budget::PartitionBudget;
use crate::ops::metrics::{Metrics, TableLabel, TopicLabel};
use kbq_core::bad_record::BadRecord;
use kbq_core::model::TopicPartition;
use kbq_core::offsets::{Acknowledged, Incarnation, KafkaOffset, NextOffset, StreamId};
use kbq_transcode::transforms::{FilterMatch, KeyPlan};
use kbq_transcode::{KafkaHeader, KafkaMetadata, Plan, RecordError, Transcoded};
use prometheus_client::metrics::{counter::Counter, histogram::Histogram};

use super::admission;
use super::append_session::{AppendSession, Batch, SessionEvent, SessionLimits};
use super::batch::{OpenBatch, Placement, RequestLimits, encoded_row_len};
use super::prefix::{InflightRequest, Prefix};
use super::stream_quota::StreamCreationLimiter;

use super::plan_source::{PlanLookupError, WriterRoute};
use kbq_core::bad_record::BadRecordPolicy;

mod bad_record;
mod change;
mod stream;

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
        records_filtered: m.records_filtered.get_or_create(&topic_label).clone(),
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
        batch_rows_hint: 0,
        tp,
        incarnation,
        events,
        session: None,
        stream_id: None,
        plan: None,
        plan_schema_len: 0,
        open: OpenBatch::default(),
        prefix: Prefix::new(from),
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
    /// The record's value as `Value`, and the columns from its key's fields: the key's plan and
    /// where its body starts (`None`: the record has no key).
    Keyed(usize, KeyRead),
    /// A CDC row: the input the plan transcodes, then the pseudo-column bytes that follow.
    Change(kbq_transcode::change::ChangeRow),
    /// A finished row in the plan's descriptor (a renumbered DELETE by key).
    Proto(Vec<u8>),
}

/// A key's plan and where its body starts in the key.
type KeyRead = Option<(Arc<KeyPlan>, usize)>;

/// The metric series a writer updates per record or per request.
struct HotMetrics {
    records_consumed: Counter,
    records_filtered: Counter,
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
    /// Rows of the last sealed batch, for the next batch's row vectors likewise.
    batch_rows_hint: usize,
    tp: TopicPartition,
    incarnation: Incarnation,
    events: mpsc::UnboundedSender<WriterEvent>,
    session: Option<AppendSession<Record>>,
    stream_id: Option<StreamId>,
    plan: Option<Arc<Plan>>,
    /// Encoded size of `plan`'s descriptor (the writer schema a request may carry).
    plan_schema_len: usize,
    open: OpenBatch<Record>,
    /// The writer's position, its requests in flight and what their answers acknowledged.
    prefix: Prefix,
    /// The coordinator's stop, until it came (then `None`).
    stop: Option<StopSignal>,
    /// Pauses between attempts after an error only time or an operator cures; while it is
    /// running the partition counts in `kbq_partitions_retrying` (readiness false).
    denied: crate::backoff::Backoff,
    retrying: bool,
}

type StopSignal = tokio::sync::oneshot::Receiver<Duration>;

/// How a writer's run ended.
enum RunEnd {
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
                .map(|()| RunEnd::Stopped)
                .unwrap_or_else(|e| e),
            Err(end) => end,
        };
        let m = &self.shared.metrics;
        for request in self.prefix.abandon() {
            m.inflight_requests.dec();
            m.inflight_bytes.dec_by(request.bytes as i64);
        }
        if self.session.is_some() {
            m.open_streams.dec();
        }
        self.set_retrying(false);
        let tp = self.tp.clone();
        let incarnation = self.incarnation;
        let event = match end {
            RunEnd::Stopped => WriterEvent::Stopped { tp, incarnation },
            RunEnd::Lost(stream) => WriterEvent::StreamLost {
                tp,
                incarnation,
                stream,
            },
            RunEnd::Conflict(stream) => {
                tracing::warn!(partition = %tp, stream = %stream, "write stream offsets conflict with ours: abandoning the stream");
                tokio::time::sleep(crate::backoff::STREAM_CONFLICT).await;
                WriterEvent::StreamLost {
                    tp,
                    incarnation,
                    stream,
                }
            }
            RunEnd::Zombie(stream) => WriterEvent::Zombie {
                tp,
                incarnation,
                stream,
            },
            RunEnd::Failed(reason) => WriterEvent::Failed {
                tp,
                incarnation,
                reason,
            },
        };
        let _ = self.events.send(event);
    }

    /// Takes records until told to stop; returns the drain budget of the stop.
    async fn work(&mut self, records: &mut mpsc::Receiver<Record>) -> Result<Duration, RunEnd> {
        let linger = self.shared.settings.linger;
        let mut burst = Vec::with_capacity(BURST);
        loop {
            let deadline = self.open.deadline(linger).map(Instant::from_std);
            tokio::select! {
                biased;
                drain = stopped(&mut self.stop) => return Ok(drain),
                taken = records.recv_many(&mut burst, BURST) => {
                    if taken == 0 {
                        // The consumer dropped the route: wait for the stop that follows.
                        return Ok(stopped(&mut self.stop).await);
                    }
                    // Counted once a burst, not once a record (two atomic updates each):
                    // the records are taken from the channel here, whatever becomes of them.
                    let bytes: usize = burst.iter().map(Record::size).sum();
                    self.counters.records_consumed.inc_by(burst.len() as u64);
                    self.counters.bytes_consumed.inc_by(bytes as u64);
                    for record in burst.drain(..) {
                        self.take(record).await?;
                    }
                    // At few partitions a starved batch would stall for the whole linger.
                    let starved = self.account.as_ref().is_some_and(|a| a.starved());
                    if self.open.starved(!records.is_empty(), starved) {
                        self.seal().await?;
                    }
                }
                _ = sleep_until(deadline) => self.seal().await?,
                // Idle: no records for a linger period and nothing open. Settle what is in
                // flight so the checkpoint sees it.
                _ = tokio::time::sleep(linger), if self.open.is_empty() && self.prefix.has_inflight() => {
                    self.settle_all().await?;
                }
            }
        }
    }

    /// Seals what is open, waits (bounded) for every append in flight, reports the prefix.
    async fn drain(&mut self, budget: Duration) -> Result<(), RunEnd> {
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

    async fn take(&mut self, record: Record) -> Result<(), RunEnd> {
        let next = admission::admit(self.prefix.position(), record.offset)
            .map_err(|below| RunEnd::Failed(below.to_string()))?;
        if self.account.is_none() {
            self.account = record.charge.account().cloned();
        }
        if !self.route.filter.is_empty() && self.filtered(&record) {
            self.pass_filtered(record.offset);
            return Ok(());
        }
        if let Some(cdc) = self.route.cdc.clone() {
            return self.take_change(record, cdc.as_ref(), next).await;
        }
        let Some(value) = record.value() else {
            return self.bad(record, self.tombstone()).await;
        };
        let body = match self.plan_for_value(value).await? {
            Ok(body_at) if self.plan.as_ref().is_some_and(|p| p.reads_key()) => {
                match self.key_plan(&record).await? {
                    Ok(key) => RowBody::Keyed(body_at, key),
                    Err(bad) => return self.bad(record, bad).await,
                }
            }
            Ok(body_at) => RowBody::Value(body_at),
            Err(bad) => return self.bad(record, bad).await,
        };
        self.append_row(record, body).await.map(drop)
    }

    /// The plan of `record`'s key, for a plan with columns from the key's fields: `None` for a
    /// record without a key (its columns NULL, or its error), or the bad record the key is.
    async fn key_plan(&mut self, record: &Record) -> Result<Result<KeyRead, BadRecord>, RunEnd> {
        let Some(key) = record.key() else {
            return Ok(Ok(None));
        };
        let Some(keys) = self.route.keys.clone() else {
            return Ok(Err(BadRecord {
                class: "incompatible_schema",
                reason: "the route declares no format for the kafka key".into(),
            }));
        };
        Ok(self.lookup_plan(|| keys.key_plan(key)).await?.map(Some))
    }

    /// A record a filter drops: committed like any other record, written nowhere. The prefix
    /// passes it in offset order, as it passes a dead letter (invariant 6), so exactly once
    /// counts it.
    fn pass_filtered(&mut self, offset: KafkaOffset) {
        self.counters.records_filtered.inc();
        self.record_handled_out_of_band(NextOffset::after(offset));
    }

    /// Whether the route's filters drop `record` (docs/mapping.md, "Transforms").
    fn filtered(&self, record: &Record) -> bool {
        let headers: Vec<KafkaHeader<'_>> = (record.headers.iter())
            .map(|h| KafkaHeader {
                key: &h.key,
                value: h.value.as_deref(),
            })
            .collect();
        self.route.filter.drops(&FilterMatch {
            topic: &self.tp.topic,
            tombstone: record.value().is_none(),
            headers: &headers,
        })
    }

    /// A record without a value on a route that is not CDC: a record its format cannot read, so
    /// that an alert on the class points at the producers of that format. With the format left
    /// to each schema id, the format of the records this writer read; before any, no schema id
    /// says one: the record lacks the framing.
    fn tombstone(&self) -> BadRecord {
        let class = self
            .route
            .plans
            .malformed_class()
            .or_else(|| self.plan.as_ref().map(|p| p.malformed_class()));
        match class {
            Some(class) => BadRecord {
                class,
                reason: "record has no value (tombstone)".into(),
            },
            None => BadRecord {
                class: "bad_magic",
                reason: "record has no value (tombstone), so no schema id names its format".into(),
            },
        }
    }

    /// Makes the plan of `value` the writer's plan and returns where its Avro body starts, or
    /// the bad record it is.
    async fn plan_for_value(&mut self, value: &[u8]) -> Result<Result<usize, BadRecord>, RunEnd> {
        // A source with one plan for every payload (raw Avro) needs no lookup once the writer
        // holds that plan: no boxed future and no shared reference count per record.
        let plans = &self.route.plans;
        if (plans.fixed_plan())
            .is_some_and(|f| self.plan.as_ref().is_some_and(|p| Arc::ptr_eq(p, f)))
        {
            return Ok(Ok(0));
        }
        let found = match plans.cached_plan(value) {
            Some(found) => found,
            None => {
                let plans = plans.clone();
                let topic = self.tp.topic.clone();
                self.lookup_plan(|| plans.plan_for(&topic, value)).await?
            }
        };
        match found {
            Ok((plan, body_at)) => {
                self.use_plan(plan).await?;
                Ok(Ok(body_at))
            }
            Err(bad) => Ok(Err(bad)),
        }
    }

    /// Asks `lookup` until it answers: a plan, or the bad record the payload is. While the
    /// schema source is unavailable the partition waits (it never dead-letters good data,
    /// invariant 6) and still answers a stop.
    async fn lookup_plan<P, F, Fut>(
        &mut self,
        mut lookup: F,
    ) -> Result<Result<(Arc<P>, usize), BadRecord>, RunEnd>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(Arc<P>, usize), PlanLookupError>>,
    {
        loop {
            match unless_stopped(&mut self.stop, lookup()).await? {
                Ok(found) => return Ok(Ok(found)),
                Err(PlanLookupError::BadRecord(bad)) => return Ok(Err(bad)),
                Err(PlanLookupError::Unavailable(why)) => {
                    tracing::warn!(partition = %self.tp, reason = %why, "schema unavailable, waiting");
                    let pause = tokio::time::sleep(self.shared.settings.lookup_backoff);
                    unless_stopped(&mut self.stop, pause).await?;
                }
            }
        }
    }

    /// Makes `plan` the writer's plan; a new writer schema first sends what is open.
    async fn use_plan(&mut self, plan: Arc<Plan>) -> Result<(), RunEnd> {
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

    /// Transcodes the record's row with the writer's plan into the open batch (`Ok(true)`),
    /// sending the batch first when the row would overflow it (the rules are [`OpenBatch`]'s);
    /// or dead-letters it when it cannot be written, or passes it when the plan's filter on a
    /// field drops it (`Ok(false)`).
    async fn append_row(&mut self, mut record: Record, body: RowBody) -> Result<bool, RunEnd> {
        let limits = self.request_limits();
        if self.open.needs_reserve() {
            self.reserve_batch(&limits);
        }
        let range = match self.transcode(&record, &body) {
            Ok(Transcoded::Row(range)) => range,
            Ok(Transcoded::Filtered) => {
                self.pass_filtered(record.offset);
                return Ok(false);
            }
            Err(error) => {
                let bad = BadRecord {
                    class: record_error_class(&error),
                    reason: error.to_string(),
                };
                return self.bad(record, bad).await.map(|()| false);
            }
        };
        let encoded = encoded_row_len(range.len());
        // A row whose request, sent alone, is over the configured limit can never be written:
        // BigQuery refuses the request, and sending it would stop the partition. Whatever made
        // it large (its value, its key, transcoding growth, the metadata columns), it is a bad
        // record, decided before anything is sent.
        let alone = limits.request_bound(encoded);
        let max = self.shared.settings.max_request_bytes;
        if alone > max {
            self.open.discard_row(range);
            let bad = BadRecord {
                class: "row_too_large",
                reason: format!(
                    "its row of {encoded} bytes makes a request of {alone} bytes, over writer.max_request_bytes ({max} bytes)"
                ),
            };
            return self.bad(record, bad).await.map(|()| false);
        }
        let delta = admission::row_charge_delta(encoded, record.row_estimate());
        record.charge.adjust(delta);
        let range = match self.open.placement(encoded, &limits) {
            Placement::Append => range,
            Placement::SealFirst => {
                // Send what is open first, then start a new batch with this row (its bytes
                // moved to the front of the fresh buffer).
                let row = self.open.detach_row(range);
                self.seal().await?;
                self.reserve_batch(&limits);
                self.open.append_bytes(&row)
            }
        };
        let offset = record.offset;
        let position = self.prefix.position();
        let now = || Instant::now().into_std();
        self.open
            .push(range, encoded, record, offset, position, now);
        self.prefix.taken(NextOffset::after(offset));
        if self.open.is_full(&limits) {
            self.seal().await?;
        }
        Ok(true)
    }

    /// Reserves the new open batch at about the last sealed batch's size, in bytes and rows.
    fn reserve_batch(&mut self, limits: &RequestLimits) {
        (self.open).reserve(
            limits.reserve_len(self.batch_hint),
            limits.reserve_rows(self.batch_rows_hint),
        );
    }

    /// Transcodes `record`'s row (from `body`) to the end of the open batch's buffer, unless
    /// the plan's filter on a field drops the record.
    fn transcode(&mut self, record: &Record, body: &RowBody) -> Result<Transcoded, RecordError> {
        let header_values: Vec<KafkaHeader<'_>> = record
            .headers
            .iter()
            .map(|h| KafkaHeader {
                key: &h.key,
                value: h.value.as_deref(),
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
        match body {
            RowBody::Value(at) => {
                let value = record.value().unwrap_or_default();
                plan.transcode_row(&value[*at..], Some(&meta), self.open.buffer_mut())
            }
            RowBody::Keyed(at, key) => {
                let value = record.value().unwrap_or_default();
                let out = self.open.buffer_mut();
                let row = match plan.transcode_row(&value[*at..], Some(&meta), out)? {
                    Transcoded::Row(row) => row,
                    Transcoded::Filtered => return Ok(Transcoded::Filtered),
                };
                let key_bytes = record.key().unwrap_or_default();
                let key = key.as_ref().map(|(p, at)| (&**p, &key_bytes[*at..]));
                if let Err(e) = plan.transcode_key(key, out) {
                    out.truncate(row.start);
                    return Err(e);
                }
                Ok(Transcoded::Row(row.start..out.len()))
            }
            RowBody::Change(change) => {
                let row = plan.transcode(&change.input, Some(&meta), self.open.buffer_mut())?;
                let suffix = self.open.append_bytes(&change.suffix);
                Ok(Transcoded::Row(row.start..suffix.end))
            }
            RowBody::Proto(row) => Ok(Transcoded::Row(self.open.append_bytes(row))),
        }
    }

    /// The limits of the next request: the configured ones, lowered by the memory budget when
    /// many partitions share it.
    fn request_limits(&self) -> RequestLimits {
        let settings = &self.shared.settings;
        RequestLimits::new(
            settings.max_request_bytes,
            settings.max_rows_per_request,
            self.account.as_ref().map(|a| a.budget().request_cap()),
            &self.route.table,
            self.plan_schema_len,
        )
    }

    /// Sends the open batch.
    async fn seal(&mut self) -> Result<(), RunEnd> {
        if self.open.is_empty() {
            return Ok(());
        }
        if self.session.is_none() {
            self.open_stream().await?;
        }
        let Some(sealed) = self.open.seal() else {
            return Ok(());
        };
        self.batch_hint = sealed.buffer.len();
        self.batch_rows_hint = sealed.records.len();
        // The rows keep the whole allocation alive until they are acknowledged, and the budget
        // counts only the rows: give back what the reservation did not use (the allocator
        // shrinks in place).
        let mut buffer = sealed.buffer;
        buffer.shrink_to_fit();
        let buffer = Bytes::from(buffer);
        // The records go over whole, in the order of their rows: one pass over the rows (each
        // a slice of the buffer), none pushing each record again.
        let batch = Batch {
            rows: (sealed.ranges.into_iter())
                .map(|range| buffer.slice(range))
                .collect(),
            tags: sealed.records,
        };
        while !(self.session.as_ref().expect("session")).has_room_for(sealed.rows_encoded) {
            self.settle_one().await?;
        }
        let request = self.prefix.sent(sealed.end, sealed.rows_encoded as u64);
        self.shared.metrics.inflight_requests.inc();
        (self.shared.metrics.inflight_bytes).inc_by(request.bytes as i64);
        let session = self.session.as_mut().expect("session");
        match session.submit(batch).await {
            Ok(()) => Ok(()),
            // The request stays in the session, which resends it on its next call.
            Err(e) => self.ride_out(e).await,
        }
    }

    async fn settle_all(&mut self) -> Result<(), RunEnd> {
        while self.prefix.has_inflight() {
            self.settle_one().await?;
        }
        Ok(())
    }

    /// Handles the next answer of the session.
    async fn settle_one(&mut self) -> Result<(), RunEnd> {
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
                let request = self.prefix.appended(first_offset, tags.len());
                self.settled(request);
                self.counters.rows_appended.inc_by(tags.len() as u64);
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
                    // Already covered by the request's Kafka range: only dead-letter here.
                    self.dead_letter(record, bad).await?;
                }
                if request_emptied {
                    let request = self.prefix.emptied();
                    self.settled(request);
                    self.report();
                }
            }
        }
        Ok(())
    }

    /// A request left the in-flight window.
    fn settled(&self, request: InflightRequest) {
        self.shared.metrics.inflight_requests.dec();
        (self.shared.metrics.inflight_bytes).dec_by(request.bytes as i64);
    }

    fn report(&self) {
        let ack = (self.prefix).acknowledged(self.incarnation, self.stream_id.as_ref());
        let _ = self.events.send(WriterEvent::Acknowledged {
            tp: self.tp.clone(),
            ack,
        });
    }
}

fn record_error_class(error: &RecordError) -> &'static str {
    error.class()
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
/// partition's final cycle wait for their deadlines. A stop there ends the writer
/// at once with its last reported acknowledgement: nothing it has not acknowledged is counted,
/// so the next owner reads those records again.
async fn unless_stopped<T>(
    stop: &mut Option<StopSignal>,
    work: impl Future<Output = T>,
) -> Result<T, RunEnd> {
    if stop.is_none() {
        return Ok(work.await);
    }
    tokio::select! {
        biased;
        _ = stopped(stop) => Err(RunEnd::Stopped),
        out = work => Ok(out),
    }
}
