//! The consumer task: one OS thread owns the rdkafka consumer, polls it, routes records to the
//! writer of their partition, and executes the coordinator's commands between polls.
//!
//! Why a thread and not an async task: librdkafka's rebalance callbacks are synchronous and run
//! inside `poll`. A revoke must hand off inside that callback — stop the writer, commit once —
//! and the commit must be made by this consumer. So the callback itself serves the command channel
//! (a rendezvous with the coordinator) until the coordinator releases every revoked partition or
//! the handoff deadline passes. Because one thread executes every commit, a commit and a revoke can
//! never interleave: that is the commit lock of docs/architecture.md, invariant 4.
//!
//! Invariant 4 at this edge: a cycle commit the coordinator built before it learned of a revoke
//! can still be in the channel when the callback starts. The callback tells the coordinator that
//! the revoke began and waits for its `RevokeSeen`; every commit that arrives before it was built
//! earlier, and its entries for revoked partitions are dropped (reported as failed), so the only
//! commit made for a revoked partition is the handoff commit.
//!
//! Backpressure: a writer whose channel is full gets its partition paused; the records already
//! polled are kept in a per-partition stash (librdkafka resumes a paused partition from the
//! application's position, so dropping them would lose them) and handed over as room appears.
//! The thread keeps polling all the while, so group membership never lapses.
//!
//! Memory: every record carries a charge of `writer.memory_limit` ([`MemoryBudget`]) from the
//! moment it is read until it is dropped (acknowledged, dead-lettered, or discarded). While the
//! budget is used up the thread takes no messages from librdkafka, and a partition above its
//! share cap is paused; see [`super::memory_budget`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::mpsc;

use crate::checkpoint::offsets::NextOffset;
use crate::checkpoint::protocol::{
    Assignment, CommitEntry, CommitError, CommitId, CommitOutcome, PartitionOrigin, TopicPartition,
};
use crate::ops::metrics::{Metrics, PartitionLabels};

use super::committed::{self, CommittedReads, ConsumerFaults, Watermarks, tpl_of};
use super::memory_budget::{Charge, MemoryBudget, PartitionBudget};

/// Read-only re-export: the tools and tests read checkpoints through it.
pub use super::committed::read_committed;

/// Tries of a seek (the first and its retries, backed off by [`crate::backoff::delay`], about
/// 3 s in all) before the partition fails closed: resuming at librdkafka's old position would
/// skip the records in between.
const SEEK_ATTEMPTS: u32 = 5;

/// Longest time the consumer thread goes without polling while the memory budget is used up:
/// rebalance callbacks and errors only arrive through the poll.
pub const MAX_GATE: Duration = Duration::from_millis(100);

/// Bytes of the chunks records are copied into, per partition. A chunk lives until its last
/// record is acknowledged; a partition's records go in order, so beyond what the memory budget
/// counts, a partition holds about one chunk of slack.
const ARENA_CHUNK: usize = 32 << 10;

/// One Kafka record, owned, as a writer needs it.
#[derive(Debug)]
pub struct Record {
    pub offset: i64,
    /// Milliseconds since the epoch, if the record has a timestamp.
    pub timestamp_ms: Option<i64>,
    /// The value's bytes followed by the key's, a slice of a chunk shared with the records
    /// read next to it: one allocation per chunk of records, not two per record (the allocator
    /// was a large share of the sink's CPU, and records are freed on another thread).
    data: Bytes,
    /// Length of the value inside `data`; `None` for a record without a value (a tombstone).
    value_len: Option<u32>,
    has_key: bool,
    pub headers: Vec<(String, Bytes)>,
    /// Its bytes in the process's memory budget, given back when the record is dropped.
    pub charge: Charge,
}

impl Record {
    pub fn new(
        offset: i64,
        timestamp_ms: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: Vec<(String, Bytes)>,
        arena: &mut BytesMut,
    ) -> Record {
        let (k, v) = (key.unwrap_or_default(), value.unwrap_or_default());
        let need = k.len() + v.len();
        if arena.capacity() < need {
            *arena = BytesMut::with_capacity(need.max(ARENA_CHUNK));
        }
        arena.extend_from_slice(v);
        arena.extend_from_slice(k);
        Record {
            offset,
            timestamp_ms,
            data: arena.split().freeze(),
            // Kafka caps a record far below 4 GiB.
            value_len: value.map(|v| u32::try_from(v.len()).expect("kafka record under 4 GiB")),
            has_key: key.is_some(),
            headers,
            charge: Charge::default(),
        }
    }

    pub fn key(&self) -> Option<&[u8]> {
        let at = self.value_len.unwrap_or(0) as usize;
        self.has_key.then(|| &self.data[at..])
    }

    pub fn value(&self) -> Option<&[u8]> {
        self.value_len.map(|len| &self.data[..len as usize])
    }

    pub fn size(&self) -> usize {
        self.data.len()
    }

    /// The size of its encoded row before the row exists (about the Avro value's). A record is
    /// charged twice this when it is read — the row and the gRPC copy of the request that
    /// carries it — and the writer replaces the estimate with the row's real size. Charging it
    /// up front keeps records read before the gate closed from growing the total past the
    /// limit when they are transcoded and sent.
    pub fn row_estimate(&self) -> usize {
        self.value_len.unwrap_or(0) as usize
    }
}

/// What the consumer thread tells the coordinator.
#[derive(Debug)]
pub enum ConsumerEvent {
    /// New partitions, paused, with what Kafka holds for them. Nothing flows for a partition
    /// until the coordinator answers with [`ConsumerCommand::Start`]. `Err`: the committed
    /// offset or the watermarks could not be read (a coordinator loading, a leader away): the
    /// partition is owned but unknown; ask again with [`ConsumerCommand::ReadAssignment`].
    Assigned(Vec<(TopicPartition, Result<Assignment, String>)>),
    /// Answer to [`ConsumerCommand::ReadAssignment`] for a partition still owned.
    AssignmentRead {
        tp: TopicPartition,
        result: Result<Assignment, String>,
    },
    /// A revoke (or loss) began; the callback now serves commands until every partition is
    /// released or `deadline` passes. Answer first with [`ConsumerCommand::RevokeSeen`].
    RevokeBegan {
        partitions: Vec<TopicPartition>,
        lost: bool,
    },
    /// The handoff deadline passed inside the callback: these partitions were not released.
    HandoffDeadline(Vec<TopicPartition>),
    CommitDone {
        commit: CommitId,
        outcome: CommitOutcome,
    },
    /// Answer to [`ConsumerCommand::ReadCommitted`].
    Reread {
        tp: TopicPartition,
        assignment: Assignment,
    },
    /// [`ConsumerCommand::ReadCommitted`] failed (timeout, stale member epoch): ask again later.
    RereadFailed { tp: TopicPartition, reason: String },
    /// Answer to [`ConsumerCommand::ConfirmOwnership`]: `tp` is still in this member's
    /// assignment, which is not lost; what Kafka holds for it now.
    OwnershipConfirmed {
        tp: TopicPartition,
        assignment: Assignment,
    },
    /// Answer to [`ConsumerCommand::ConfirmOwnership`]: the question could not be answered now
    /// (the committed offset could not be read); ask again later.
    OwnershipUnknown { tp: TopicPartition, reason: String },
    /// The seek of a [`ConsumerCommand::Start`] or [`ConsumerCommand::Seek`] could not be made
    /// after its retries: nothing of `tp` is routed, and the partition stays paused.
    SeekFailed { tp: TopicPartition, reason: String },
    /// librdkafka stopped fetching a started partition because its position `position` is
    /// below the log start `low` (`auto.offset.reset=error`): retention deleted records that
    /// were not handled yet.
    OffsetOutOfRange {
        tp: TopicPartition,
        position: NextOffset,
        low: NextOffset,
    },
    /// Where each owned partition stands, read every statistics interval: what readiness
    /// needs to see a partition that does not move while records wait.
    Loads(Vec<PartitionLoad>),
    /// The consumer hit an error it cannot continue after (e.g. authentication).
    Fatal(String),
    /// The thread ended (after [`ConsumerCommand::Shutdown`]).
    Closed,
}

/// What the coordinator asks the consumer thread to do.
#[derive(Debug)]
pub enum ConsumerCommand {
    /// Seek `tp` to `from`, route its records to `sink`, resume it.
    Start {
        tp: TopicPartition,
        from: NextOffset,
        sink: mpsc::Sender<Record>,
    },
    /// Move `tp`'s fetch position to `to` (same writer; stashed records are dropped).
    Seek {
        tp: TopicPartition,
        to: NextOffset,
    },
    /// Stop routing records of `tp` (its writer is stopping) and pause it.
    Stop {
        tp: TopicPartition,
    },
    Pause {
        tp: TopicPartition,
    },
    Resume {
        tp: TopicPartition,
    },
    /// The coordinator fed the revoke to the protocol: commits from now on were built after it.
    RevokeSeen,
    Commit {
        commit: CommitId,
        entries: Vec<CommitEntry>,
    },
    /// Read the committed offset, metadata and watermarks of `tp` again.
    ReadCommitted {
        tp: TopicPartition,
    },
    /// Read what [`ConsumerEvent::Assigned`] could not, for a partition still owned; answered
    /// with [`ConsumerEvent::AssignmentRead`].
    ReadAssignment {
        tp: TopicPartition,
    },
    /// A zombie's question to the group: is `tp` still ours? Answered with
    /// [`ConsumerEvent::OwnershipConfirmed`] when it is; when it is not, the revoke or loss
    /// that follows (or came) answers it.
    ConfirmOwnership {
        tp: TopicPartition,
    },
    /// The protocol is done with a revoked partition.
    Release {
        tp: TopicPartition,
    },
    /// Leave the group and end the thread.
    Shutdown,
}

/// One partition's high watermark and how far the consumer thread got towards it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionLoad {
    pub tp: TopicPartition,
    /// The high watermark (the last stable offset under `read_committed`).
    pub high: NextOffset,
    /// The consumer's position: past every record polled and every transaction marker
    /// librdkafka skipped (`None`: not known since the last seek).
    pub fetched: Option<NextOffset>,
    /// After the last record handed to (or stashed for) the partition's writer.
    pub routed: Option<NextOffset>,
}

/// Settings of the consumer thread.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// librdkafka properties, the sink's forced ones already applied.
    pub properties: BTreeMap<String, String>,
    pub topics: Vec<String>,
    /// Topics never consumed, even when assigned: the dead-letter topic, which a pattern
    /// subscription may match (`Config::excluded_topics`).
    pub excluded_topics: Vec<String>,
    /// Longest time one revoke callback may take (counts against `max.poll.interval.ms`).
    pub handoff_deadline: Duration,
    /// Timeout of the blocking Kafka calls (commit, committed offsets, watermarks).
    pub request_timeout: Duration,
    /// Records kept per paused partition before the thread stops taking more of it.
    pub max_stash_records: usize,
    /// Where librdkafka's statistics go: consumer lag per partition and group membership.
    pub metrics: Option<Arc<Metrics>>,
    /// `writer.memory_limit`; `None` leaves the records uncharged (tests, tools).
    pub memory: Option<Arc<MemoryBudget>>,
    /// Whether records carry their headers (a headers column, dead-lettering). librdkafka
    /// parses a message's headers on every request, allocating even when there are none, so
    /// a sink that never uses them does not ask.
    pub read_headers: bool,
    /// Faults injected by tests (none in production).
    pub faults: Arc<ConsumerFaults>,
}

/// How often librdkafka reports statistics (group membership) and the high watermarks are read
/// (the lag gauges, stall detection) unless configured.
const DEFAULT_STATISTICS_INTERVAL_MS: &str = "5000";

/// The handle the coordinator holds.
pub struct ConsumerHandle {
    commands: std_mpsc::Sender<ConsumerCommand>,
    thread: Option<JoinHandle<()>>,
}

impl ConsumerHandle {
    pub fn send(&self, command: ConsumerCommand) -> bool {
        self.commands.send(command).is_ok()
    }

    /// A sender for commands issued later (e.g. a retry after a backoff).
    pub fn sender(&self) -> std_mpsc::Sender<ConsumerCommand> {
        self.commands.clone()
    }

    /// A handle whose commands go to `commands` and that has no thread (the deterministic
    /// simulation plays the consumer thread's part).
    #[cfg(test)]
    pub(crate) fn detached(commands: std_mpsc::Sender<ConsumerCommand>) -> ConsumerHandle {
        ConsumerHandle {
            commands,
            thread: None,
        }
    }

    /// Waits for the thread to end (after `Shutdown`), on a blocking-friendly thread.
    pub fn join(mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts the consumer thread. Events arrive on the returned receiver.
pub fn spawn(
    settings: ConsumerSettings,
) -> Result<(ConsumerHandle, mpsc::UnboundedReceiver<ConsumerEvent>), KafkaError> {
    let (command_tx, command_rx) = std_mpsc::channel();
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    let mut config = ClientConfig::new();
    for (k, v) in &settings.properties {
        config.set(k, v);
    }
    // Readiness and the lag gauges depend on the statistics: they cannot be switched off.
    let statistics_off = settings
        .properties
        .get("statistics.interval.ms")
        .is_none_or(|v| v.trim() == "0");
    if settings.metrics.is_some() && statistics_off {
        config.set("statistics.interval.ms", DEFAULT_STATISTICS_INTERVAL_MS);
    }
    let lag = Arc::new(LagBook::default());
    let watermarks = match &settings.metrics {
        Some(metrics) => {
            let every = config
                .get("statistics.interval.ms")
                .and_then(|ms| ms.trim().parse::<u64>().ok())
                .filter(|ms| *ms > 0)
                .map_or(Duration::from_secs(5), Duration::from_millis);
            Some(WatermarkReader::spawn(
                &settings,
                every,
                lag.clone(),
                metrics.clone(),
                event_tx.clone(),
            )?)
        }
        None => None,
    };
    let context = SinkContext {
        shared: Mutex::new(Shared {
            commands: command_rx,
            events: event_tx,
            routes: HashMap::default(),
            stashes: HashMap::new(),
            paused: BTreeSet::new(),
            ordered_paused: BTreeSet::new(),
            capped: BTreeSet::new(),
            initial_partitions: HashMap::new(),
            owned: BTreeSet::new(),
            seeking: HashMap::new(),
            positions: HashMap::new(),
            lag,
            shutdown: false,
        }),
        settings: settings.clone(),
    };
    let consumer: BaseConsumer<SinkContext> = config.create_with_context(context)?;
    let topics: Vec<&str> = settings.topics.iter().map(String::as_str).collect();
    // Partition counts at subscription time: a partition above them was added at runtime, which
    // has its own start policy (docs/architecture.md#start-cases).
    {
        let mut shared = consumer.context().shared.lock().expect("consumer state");
        for topic in &settings.topics {
            if let Ok(md) = consumer.fetch_metadata(Some(topic), settings.request_timeout) {
                for t in md.topics() {
                    shared
                        .initial_partitions
                        .insert(t.name().to_string(), t.partitions().len() as i32);
                }
            }
        }
    }
    consumer.subscribe(&topics)?;
    let thread = std::thread::Builder::new()
        .name("kafka-consumer".into())
        .spawn(move || {
            run(consumer);
            if let Some(reader) = watermarks {
                reader.stop();
            }
        })
        .expect("spawning the consumer thread");
    Ok((
        ConsumerHandle {
            commands: command_tx,
            thread: Some(thread),
        },
        event_rx,
    ))
}

struct Shared {
    commands: std_mpsc::Receiver<ConsumerCommand>,
    events: mpsc::UnboundedSender<ConsumerEvent>,
    routes: HashMap<TopicPartition, Route, BuildHasherDefault<RouteHasher>>,
    stashes: HashMap<TopicPartition, VecDeque<Record>>,
    /// Partitions paused in librdkafka now, for whatever reason.
    paused: BTreeSet<TopicPartition>,
    /// Paused by the coordinator (`Pause`, e.g. the uncommitted-bytes cap) until it resumes them.
    ordered_paused: BTreeSet<TopicPartition>,
    /// Paused because they hold their share cap of the memory budget.
    capped: BTreeSet<TopicPartition>,
    initial_partitions: HashMap<String, i32>,
    /// The partitions this member owns: added by the assign callback, removed when the revoke
    /// callback returns. A commit for any other partition is refused here (invariant 4): a
    /// handoff commit the coordinator builds after the callback left at its deadline would
    /// otherwise land in the next generation, over the new owner's checkpoint.
    owned: BTreeSet<TopicPartition>,
    /// Seeks that failed and wait for their retry; the partition stays paused and unrouted.
    seeking: HashMap<TopicPartition, PendingSeek>,
    /// Where each started partition was last sought to: its position until a record arrives.
    positions: HashMap<TopicPartition, NextOffset>,
    lag: Arc<LagBook>,
    shutdown: bool,
}

/// A seek to retry, and the route the partition gets once it is made.
struct PendingSeek {
    to: NextOffset,
    attempt: u32,
    due: Instant,
    route: Option<Route>,
}

/// Per owned partition, what the consumer thread knows for the [`WatermarkReader`].
#[derive(Default)]
struct LagBook {
    book: Mutex<HashMap<TopicPartition, Standing>>,
}

#[derive(Clone, Copy, Default)]
struct Standing {
    /// The offset the lag counts from: the committed offset (read at assignment, written by
    /// our commits), else where the partition started.
    base: Option<i64>,
    fetched: Option<i64>,
    routed: Option<i64>,
}

impl LagBook {
    fn with(&self, tp: &TopicPartition, f: impl FnOnce(&mut Standing)) {
        f(self
            .book
            .lock()
            .expect("lag book")
            .entry(tp.clone())
            .or_default());
    }

    fn set(&self, tp: &TopicPartition, offset: i64) {
        self.with(tp, |s| s.base = Some(offset));
    }

    fn set_if_absent(&self, tp: &TopicPartition, offset: i64) {
        self.with(tp, |s| {
            s.base.get_or_insert(offset);
        });
    }

    /// Forgets `tp` and its gauge, under the lock the reader sets gauges with: a revoked
    /// partition keeps no series.
    fn remove(&self, tp: &TopicPartition, metrics: Option<&Metrics>) {
        let mut book = self.book.lock().expect("lag book");
        book.remove(tp);
        if let Some(metrics) = metrics {
            metrics.consumer_lag.remove(&lag_labels(tp));
        }
    }
}

/// A thread that reads the high watermark of every owned partition every statistics interval,
/// with a client of its own: librdkafka's statistics carry the high watermark of the last fetch
/// only, so a paused or stopped partition (a stuck writer) showed the lag it had when it stopped,
/// however many records arrived after. Blocking reads here never hold the consumer thread.
struct WatermarkReader {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl WatermarkReader {
    fn spawn(
        settings: &ConsumerSettings,
        every: Duration,
        lag: Arc<LagBook>,
        metrics: Arc<Metrics>,
        events: mpsc::UnboundedSender<ConsumerEvent>,
    ) -> Result<WatermarkReader, KafkaError> {
        let mut config = ClientConfig::new();
        for (k, v) in &settings.properties {
            // It never joins the group; a static member id must stay the group member's.
            if k != "group.instance.id" && k != "statistics.interval.ms" {
                config.set(k, v);
            }
        }
        let client: BaseConsumer = config.create()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let timeout = settings.request_timeout;
        let thread = std::thread::Builder::new()
            .name("kafka-watermarks".into())
            .spawn(move || {
                let mut next = Instant::now() + every;
                while !stopped.load(Ordering::SeqCst) {
                    if Instant::now() < next {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                    next = Instant::now() + every;
                    let partitions: Vec<TopicPartition> =
                        lag.book.lock().expect("lag book").keys().cloned().collect();
                    if partitions.is_empty() {
                        continue;
                    }
                    let highs = committed::high_watermarks(&client, &partitions, timeout);
                    let mut loads = Vec::with_capacity(highs.len());
                    {
                        let book = lag.book.lock().expect("lag book");
                        for (tp, high) in highs {
                            let (Ok(high), Some(standing)) = (high, book.get(&tp)) else {
                                continue;
                            };
                            if let Some(base) = standing.base {
                                metrics
                                    .consumer_lag
                                    .get_or_create(&lag_labels(&tp))
                                    .set((high - base).max(0));
                            }
                            loads.push(PartitionLoad {
                                tp,
                                high: NextOffset(high),
                                fetched: standing.fetched.map(NextOffset),
                                routed: standing.routed.map(NextOffset),
                            });
                        }
                    }
                    if events.send(ConsumerEvent::Loads(loads)).is_err() {
                        break;
                    }
                }
            })
            .expect("spawning the watermark thread");
        Ok(WatermarkReader { stop, thread })
    }

    /// Asks the thread to end; it is not waited for: a read in flight may take up to the
    /// request timeout, and nothing depends on its end.
    fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        drop(self.thread);
    }
}

/// A multiply-rotate hash for the route table, looked up once per message: SipHash's
/// resistance to chosen keys buys nothing for this member's own assignment, and its cost
/// showed in the consumer thread's profile.
#[derive(Default)]
struct RouteHasher(u64);

impl RouteHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for RouteHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let mut tail = [0u8; 8];
        let rest = chunks.remainder();
        tail[..rest.len()].copy_from_slice(rest);
        self.add(u64::from_le_bytes(tail) ^ ((rest.len() as u64) << 59));
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_i32(&mut self, i: i32) {
        self.add(i as u32 as u64);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // The table indexes by the low bits, which the multiply mixes least: fold the high
        // bits into them.
        self.0 ^ (self.0 >> 32)
    }
}

/// Where a started partition's records go.
struct Route {
    sink: mpsc::Sender<Record>,
    /// The tail of the chunk this partition's next records are copied into.
    arena: BytesMut,
    /// Its account in the memory budget (a new one per `Start`).
    account: Option<Arc<PartitionBudget>>,
    /// After the last record routed (0: none yet).
    next: i64,
}

struct SinkContext {
    /// Only the consumer thread touches this (in the poll loop or inside a callback it runs);
    /// the mutex is for the `Sync` bound of the context.
    shared: Mutex<Shared>,
    settings: ConsumerSettings,
}

impl ClientContext for SinkContext {
    /// Group membership. (The lag gauges come from the [`WatermarkReader`].)
    fn stats(&self, statistics: rdkafka::Statistics) {
        let Some(metrics) = &self.settings.metrics else {
            return;
        };
        let joined = statistics.cgrp.as_ref().is_some_and(|g| {
            g.state == "up" && (g.join_state == "steady" || g.assignment_size > 0)
        });
        metrics.group_joined.set(i64::from(joined));
    }
}

fn lag_labels(tp: &TopicPartition) -> PartitionLabels {
    PartitionLabels {
        topic: tp.topic.clone(),
        partition: tp.partition,
    }
}

impl ConsumerContext for SinkContext {
    /// librdkafka's rebalance, done here rather than by the default handler for one reason: new
    /// partitions are assigned at an explicit position (the committed offset, else the log
    /// start), so that librdkafka never applies `auto.offset.reset` (forced to `error`) and the
    /// partition stays seekable while recovery decides where it really starts.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: rdkafka::types::RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        use rdkafka::consumer::RebalanceProtocol;
        use rdkafka::types::RDKafkaRespErr;
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let (excluded, partitions) = self.split_excluded(partitions_of(tpl));
                let committed = committed::read_committed_each(
                    consumer,
                    &partitions,
                    self.settings.request_timeout,
                    &self.settings.faults,
                );
                for tp in &partitions {
                    // Where librdkafka may fetch from until recovery seeks; an unknown offset
                    // is read again later, and the partition stays paused meanwhile.
                    let start = match committed.get(tp) {
                        Some(Ok(Some(c))) => Offset::Offset(c.offset.0),
                        _ => Offset::Beginning,
                    };
                    if let Some(mut elem) = tpl.find_partition(&tp.topic, tp.partition)
                        && let Err(e) = elem.set_offset(start)
                    {
                        tracing::error!(partition = %tp, error = %e, "cannot set the assigned position");
                    }
                }
                let result = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = result {
                    tracing::error!(error = %e, "assign failed");
                }
                if !excluded.is_empty() {
                    // Assigned by the group (the broker matches a pattern itself under
                    // KIP-848), so librdkafka holds them; paused, they are never fetched, and
                    // without a route a prefetched record is dropped.
                    for tp in &excluded {
                        tracing::warn!(partition = %tp, "excluded topic assigned: its partition stays paused and is never consumed");
                    }
                    if let Err(e) = consumer.pause(&tpl_of(&excluded)) {
                        tracing::error!(error = %e, "cannot pause the partitions of an excluded topic");
                    }
                }
                if partitions.is_empty() {
                    return;
                }
                let mut shared = self.shared.lock().expect("consumer state");
                shared.assigned(consumer, &self.settings, partitions, committed);
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                // The protocol never had the excluded ones: nothing to hand off.
                let (_, partitions) = self.split_excluded(partitions_of(tpl));
                if !partitions.is_empty() {
                    let lost = consumer.assignment_lost();
                    let mut shared = self.shared.lock().expect("consumer state");
                    shared.handoff(consumer, &self.settings, partitions, lost);
                }
                let result = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = result {
                    tracing::error!(error = %e, "unassign failed");
                }
            }
            other => {
                tracing::error!(error = ?other, "rebalance error");
                // librdkafka requires an unassign on a rebalance error.
                let _ = consumer.unassign();
            }
        }
    }
}

impl SinkContext {
    /// Splits `partitions` into those of excluded topics and the others.
    fn split_excluded(
        &self,
        partitions: Vec<TopicPartition>,
    ) -> (Vec<TopicPartition>, Vec<TopicPartition>) {
        partitions
            .into_iter()
            .partition(|tp| self.settings.excluded_topics.contains(&tp.topic))
    }
}

impl Shared {
    fn assigned(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        partitions: Vec<TopicPartition>,
        committed: CommittedReads,
    ) {
        // Nothing may flow before recovery decided where the partition starts.
        let tpl = tpl_of(&partitions);
        if let Err(e) = consumer.pause(&tpl) {
            tracing::error!(error = %e, "cannot pause newly assigned partitions");
        }
        self.paused.extend(partitions.iter().cloned());
        self.owned.extend(partitions.iter().cloned());
        let watermarks = committed::watermarks(
            consumer,
            &partitions,
            settings.request_timeout,
            &settings.faults,
        );
        let out = partitions
            .into_iter()
            .map(|tp| {
                let result = self.assignment_of(&tp, &committed, &watermarks);
                (tp, result)
            })
            .collect();
        let _ = self.events.send(ConsumerEvent::Assigned(out));
    }

    /// What Kafka holds for `tp` now: its committed offset and its watermarks, or why they could
    /// not be read (never a default: "no offset" or `(0, 0)` would be a wrong recovery).
    fn read_assignment(
        &self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        tp: &TopicPartition,
    ) -> Result<Assignment, String> {
        let one = std::slice::from_ref(tp);
        let committed = committed::read_committed_each(
            consumer,
            one,
            settings.request_timeout,
            &settings.faults,
        );
        let watermarks =
            committed::watermarks(consumer, one, settings.request_timeout, &settings.faults);
        self.assignment_of(tp, &committed, &watermarks)
    }

    fn assignment_of(
        &self,
        tp: &TopicPartition,
        committed: &CommittedReads,
        watermarks: &Watermarks,
    ) -> Result<Assignment, String> {
        let committed = committed
            .get(tp)
            .cloned()
            .unwrap_or_else(|| Err("no committed offset in the answer".into()))
            .map_err(|e| format!("cannot read the committed offset: {e}"))?;
        let (low, high) = watermarks
            .get(tp)
            .cloned()
            .unwrap_or_else(|| Err("no watermarks in the answer".into()))
            .map_err(|e| format!("cannot read the watermarks: {e}"))?;
        if let Some(c) = &committed {
            self.lag.set(tp, c.offset.0);
        }
        let origin = match self.initial_partitions.get(&tp.topic) {
            Some(&n) if tp.partition >= n => PartitionOrigin::AddedAtRuntime,
            _ => PartitionOrigin::Existing,
        };
        Ok(Assignment {
            committed,
            low,
            high,
            origin,
        })
    }

    /// Inside the revoke callback: serve commands until every revoked partition is released.
    fn handoff(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        partitions: Vec<TopicPartition>,
        lost: bool,
    ) {
        for tp in &partitions {
            // The writer gets its stop from the coordinator; from here on nothing more is routed.
            self.routes.remove(tp);
            self.stashes.remove(tp);
            self.ordered_paused.remove(tp);
            self.capped.remove(tp);
            self.seeking.remove(tp);
            self.positions.remove(tp);
            self.lag.remove(tp, settings.metrics.as_deref());
        }
        if self.shutdown {
            // Leaving after the coordinator's final checkpoint: it already released everything
            // and will not answer.
            for tp in &partitions {
                self.owned.remove(tp);
            }
            return;
        }
        let mut waiting: BTreeSet<TopicPartition> = partitions.iter().cloned().collect();
        let revoking = waiting.clone();
        let _ = self
            .events
            .send(ConsumerEvent::RevokeBegan { partitions, lost });
        let deadline = Instant::now() + settings.handoff_deadline;
        let mut seen = false;
        while !waiting.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    partitions = waiting.len(),
                    "handoff deadline passed inside the revoke callback"
                );
                let _ = self.events.send(ConsumerEvent::HandoffDeadline(
                    waiting.into_iter().collect(),
                ));
                break;
            }
            let command = match self.commands.recv_timeout(left) {
                Ok(c) => c,
                Err(std_mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std_mpsc::RecvTimeoutError::Disconnected) => break,
            };
            match command {
                ConsumerCommand::RevokeSeen => seen = true,
                ConsumerCommand::Release { tp } => {
                    waiting.remove(&tp);
                }
                ConsumerCommand::Commit { commit, entries } if !seen => {
                    // Built before the coordinator knew of the revoke: it must not commit the
                    // revoked partitions (invariant 4).
                    let outcome = self.commit_only(consumer, settings, commit, entries, |tp| {
                        revoking
                            .contains(tp)
                            .then_some("partition revoked before the commit was made")
                    });
                    let _ = self
                        .events
                        .send(ConsumerEvent::CommitDone { commit, outcome });
                }
                other => self.execute(consumer, settings, other),
            }
        }
        for tp in &revoking {
            self.paused.remove(tp);
            // From here on a commit for it is refused: the next owner's commits are the only
            // ones that may land.
            self.owned.remove(tp);
        }
    }

    /// Commits the entries `refuse` has no reason against; the others are answered with the
    /// reason as their error, never sent.
    fn commit_only(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        commit: CommitId,
        entries: Vec<CommitEntry>,
        refuse: impl Fn(&TopicPartition) -> Option<&'static str>,
    ) -> CommitOutcome {
        let mut refused = Vec::new();
        let mut keep = Vec::with_capacity(entries.len());
        for e in entries {
            match refuse(&e.tp) {
                Some(reason) => {
                    tracing::warn!(commit = commit.0, partition = %e.tp, offset = e.offset.0, reason, "commit refused for a partition");
                    refused.push((e.tp, Err(CommitError::Request(reason.to_string()))));
                }
                None => keep.push(e),
            }
        }
        let mut outcome = self.commit(consumer, settings, commit, keep);
        if let CommitOutcome::PerPartition(results) = &mut outcome {
            results.extend(refused);
        }
        outcome
    }

    fn execute(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        command: ConsumerCommand,
    ) {
        match command {
            ConsumerCommand::Start { tp, from, sink } if !self.owned.contains(&tp) => {
                // Revoked since the coordinator decided: its records are the next owner's.
                tracing::info!(partition = %tp, from = from.0, "start of a partition no longer owned ignored");
                drop(sink);
            }
            ConsumerCommand::Start { tp, from, sink } => {
                self.routes.remove(&tp);
                self.stashes.remove(&tp);
                self.ordered_paused.remove(&tp);
                self.capped.remove(&tp);
                let account = settings.memory.as_ref().map(MemoryBudget::partition);
                let route = Route {
                    sink,
                    arena: BytesMut::new(),
                    account,
                    next: 0,
                };
                self.seek_and_route(consumer, settings, tp, from, 0, Some(route));
            }
            ConsumerCommand::Seek { tp, to } => {
                self.stashes.remove(&tp);
                self.ordered_paused.remove(&tp);
                let route = self
                    .routes
                    .remove(&tp)
                    .or_else(|| self.seeking.remove(&tp).and_then(|p| p.route));
                self.seek_and_route(consumer, settings, tp, to, 0, route);
            }
            ConsumerCommand::Stop { tp } => {
                self.routes.remove(&tp);
                self.stashes.remove(&tp);
                self.capped.remove(&tp);
                self.seeking.remove(&tp);
                self.pause(consumer, &tp);
            }
            ConsumerCommand::Pause { tp } => {
                self.ordered_paused.insert(tp.clone());
                self.pause(consumer, &tp);
            }
            ConsumerCommand::Resume { tp } => {
                self.ordered_paused.remove(&tp);
                self.settle(consumer, &tp);
            }
            ConsumerCommand::Commit { commit, entries } => {
                // Only what this member owns (invariant 4): a commit built before a revoke
                // whose callback already returned must not reach the broker.
                let owned = &self.owned.clone();
                let outcome = self.commit_only(consumer, settings, commit, entries, |tp| {
                    (!owned.contains(tp)).then_some("partition no longer owned by this member")
                });
                let _ = self
                    .events
                    .send(ConsumerEvent::CommitDone { commit, outcome });
            }
            ConsumerCommand::ReadCommitted { tp } => {
                let event = match self.read_assignment(consumer, settings, &tp) {
                    Ok(assignment) => ConsumerEvent::Reread { tp, assignment },
                    Err(reason) => ConsumerEvent::RereadFailed { tp, reason },
                };
                let _ = self.events.send(event);
            }
            ConsumerCommand::ReadAssignment { tp } => {
                // A partition revoked meanwhile: its revoke already told the coordinator.
                if self.owned.contains(&tp) {
                    let result = self.read_assignment(consumer, settings, &tp);
                    let _ = self
                        .events
                        .send(ConsumerEvent::AssignmentRead { tp, result });
                }
            }
            ConsumerCommand::ConfirmOwnership { tp } => {
                let owned = !consumer.assignment_lost()
                    && consumer
                        .assignment()
                        .is_ok_and(|a| a.find_partition(&tp.topic, tp.partition).is_some());
                if !owned {
                    tracing::info!(partition = %tp, "zombie partition is no longer ours");
                    return;
                }
                let event = match self.read_assignment(consumer, settings, &tp) {
                    Ok(assignment) => ConsumerEvent::OwnershipConfirmed { tp, assignment },
                    Err(reason) => ConsumerEvent::OwnershipUnknown { tp, reason },
                };
                let _ = self.events.send(event);
            }
            ConsumerCommand::RevokeSeen | ConsumerCommand::Release { .. } => {}
            ConsumerCommand::Shutdown => self.shutdown = true,
        }
    }

    /// Seeks `tp` to `to` (attempt `attempt`) with the partition paused; once the seek is made
    /// and confirmed, the partition gets `route` and resumes. A failed seek is retried after a
    /// backoff, then fails the partition closed: resuming at librdkafka's old position would
    /// skip the records in between, and the next commit would jump over them.
    fn seek_and_route(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        tp: TopicPartition,
        to: NextOffset,
        attempt: u32,
        route: Option<Route>,
    ) {
        self.pause(consumer, &tp);
        match committed::seek(
            consumer,
            &tp,
            to,
            settings.request_timeout,
            &settings.faults,
        ) {
            Ok(()) => {
                self.positions.insert(tp.clone(), to);
                // The lag of a partition without a committed offset counts from its start.
                self.lag.set_if_absent(&tp, to.0);
                self.lag.with(&tp, |s| s.routed = None);
                if let Some(route) = route {
                    self.routes.insert(tp.clone(), route);
                }
                self.settle(consumer, &tp);
            }
            Err(reason) if attempt + 1 < SEEK_ATTEMPTS => {
                let attempt = attempt + 1;
                let wait = crate::backoff::delay(attempt);
                tracing::warn!(partition = %tp, to = to.0, attempt, reason = %reason, retry_in_ms = wait.as_millis() as u64, "seek failed, retrying");
                self.seeking.insert(
                    tp,
                    PendingSeek {
                        to,
                        attempt,
                        due: Instant::now() + wait,
                        route,
                    },
                );
            }
            Err(reason) => {
                tracing::error!(partition = %tp, to = to.0, attempts = SEEK_ATTEMPTS, reason = %reason, "seek failed for good: partition stopped");
                let _ = self.events.send(ConsumerEvent::SeekFailed { tp, reason });
            }
        }
    }

    /// Retries the seeks that are due.
    fn retry_seeks(&mut self, consumer: &BaseConsumer<SinkContext>, settings: &ConsumerSettings) {
        if self.seeking.is_empty() {
            return;
        }
        let now = Instant::now();
        let due: Vec<TopicPartition> = (self.seeking.iter())
            .filter(|(_, p)| p.due <= now)
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in due {
            let p = self.seeking.remove(&tp).expect("listed");
            self.seek_and_route(consumer, settings, tp, p.to, p.attempt, p.route);
        }
    }

    /// librdkafka reported that a partition's fetch position is out of range, without saying
    /// which partition (rust-rdkafka drops it): every started partition whose position is below
    /// its log start is reported. Until the protocol answers (fail closed, or seek to the log
    /// start) librdkafka fetches nothing for it.
    fn out_of_range(&mut self, consumer: &BaseConsumer<SinkContext>, settings: &ConsumerSettings) {
        let started: Vec<TopicPartition> = self.routes.keys().cloned().collect();
        if started.is_empty() {
            return;
        }
        let now = consumer.position().ok();
        let lows = committed::watermarks(
            consumer,
            &started,
            settings.request_timeout,
            &settings.faults,
        );
        let mut found = false;
        for tp in started {
            let at = now
                .as_ref()
                .and_then(|list| list.find_partition(&tp.topic, tp.partition))
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(NextOffset(o)),
                    _ => None,
                })
                .or_else(|| self.positions.get(&tp).copied());
            let (Some(position), Some(Ok((low, _)))) = (at, lows.get(&tp)) else {
                continue;
            };
            if position < *low {
                found = true;
                tracing::error!(partition = %tp, position = position.0, low = low.0, "fetch position below the log start: records were deleted before they were written");
                let _ = self.events.send(ConsumerEvent::OffsetOutOfRange {
                    tp,
                    position,
                    low: *low,
                });
            }
        }
        if !found {
            tracing::warn!(
                "kafka reported an offset out of range, but no started partition is below its log start"
            );
        }
    }

    /// Writes each owned partition's fetch position and routed end into the lag book.
    fn publish_standing(&self, consumer: &BaseConsumer<SinkContext>) {
        let now = consumer.position().ok();
        for tp in &self.owned {
            let fetched = now
                .as_ref()
                .and_then(|list| list.find_partition(&tp.topic, tp.partition))
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                })
                .or_else(|| self.positions.get(tp).map(|p| p.0));
            let routed = self.routes.get(tp).map(|r| r.next).filter(|n| *n > 0);
            self.lag.with(tp, |s| {
                s.fetched = fetched;
                if routed.is_some() {
                    s.routed = routed;
                }
            });
        }
    }

    fn pause(&mut self, consumer: &BaseConsumer<SinkContext>, tp: &TopicPartition) {
        if self.paused.insert(tp.clone())
            && let Err(e) = consumer.pause(&tpl_of(std::slice::from_ref(tp)))
        {
            tracing::warn!(partition = %tp, error = %e, "pause failed");
        }
    }

    /// Resumes `tp` when nothing holds it back: it is routed, has no stash, is not paused by
    /// the coordinator and is under its share of the memory budget.
    fn settle(&mut self, consumer: &BaseConsumer<SinkContext>, tp: &TopicPartition) {
        let run = self.routes.contains_key(tp)
            && self.stashes.get(tp).is_none_or(VecDeque::is_empty)
            && !self.ordered_paused.contains(tp)
            && !self.capped.contains(tp);
        if run {
            self.resume(consumer, tp);
        }
    }

    fn resume(&mut self, consumer: &BaseConsumer<SinkContext>, tp: &TopicPartition) {
        if self.paused.remove(tp)
            && let Err(e) = consumer.resume(&tpl_of(std::slice::from_ref(tp)))
        {
            tracing::warn!(partition = %tp, error = %e, "resume failed");
        }
    }

    /// One synchronous commit of offsets + metadata. The broker answers per partition but
    /// librdkafka reports one error for the list, so on an error the committed offsets are read
    /// back: a partition whose durable offset and metadata equal what we sent is committed,
    /// whatever the call said.
    fn commit(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        commit: CommitId,
        entries: Vec<CommitEntry>,
    ) -> CommitOutcome {
        if entries.is_empty() {
            return CommitOutcome::PerPartition(Vec::new());
        }
        let mut tpl = TopicPartitionList::new();
        for e in &entries {
            let mut elem = tpl.add_partition(&e.tp.topic, e.tp.partition);
            if let Err(err) = elem.set_offset(Offset::Offset(e.offset.0)) {
                tracing::error!(partition = %e.tp, error = %err, "bad commit offset");
            }
            elem.set_metadata(e.metadata.as_str());
        }
        let result = consumer.commit(&tpl, CommitMode::Sync);
        drop(tpl);
        let offsets: HashMap<TopicPartition, i64> =
            entries.iter().map(|e| (e.tp.clone(), e.offset.0)).collect();
        let outcome = Self::commit_outcome(consumer, settings, commit, entries, result);
        if let CommitOutcome::PerPartition(results) = &outcome {
            for (tp, result) in results {
                match result {
                    Ok(()) => {
                        if let Some(offset) = offsets.get(tp) {
                            self.lag.set(tp, *offset);
                        }
                    }
                    Err(reason) => {
                        tracing::warn!(commit = commit.0, partition = %tp, offset = offsets.get(tp).copied(), reason = %reason, "kafka commit failed for partition");
                    }
                }
            }
        }
        outcome
    }

    fn commit_outcome(
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        commit: CommitId,
        entries: Vec<CommitEntry>,
        result: Result<(), KafkaError>,
    ) -> CommitOutcome {
        match result {
            Ok(()) => {
                CommitOutcome::PerPartition(entries.into_iter().map(|e| (e.tp, Ok(()))).collect())
            }
            Err(error) => {
                let partitions: Vec<TopicPartition> =
                    entries.iter().map(|e| e.tp.clone()).collect();
                match read_committed(consumer, &partitions, settings.request_timeout) {
                    Ok(now) => CommitOutcome::PerPartition(
                        entries
                            .into_iter()
                            .map(|e| {
                                let durable = now.get(&e.tp).cloned().flatten();
                                let landed = durable.is_some_and(|d| {
                                    d.offset == e.offset && d.metadata == e.metadata.as_bytes()
                                });
                                let result = if landed {
                                    Ok(())
                                } else {
                                    Err(super::commit_error::classify(&error))
                                };
                                (e.tp, result)
                            })
                            .collect(),
                    ),
                    Err(read_error) => {
                        tracing::warn!(commit = commit.0, reason = %error, read_back = %read_error, "kafka commit failed and could not be read back");
                        CommitOutcome::Rejected(format!("{error}; read-back failed: {read_error}"))
                    }
                }
            }
        }
    }

    /// Hands a newly polled message to its writer (or its stash when the writer is full, pausing
    /// the partition); pauses a partition that holds its share cap of the memory budget.
    fn route(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        tp: &TopicPartition,
        message: &BorrowedMessage<'_>,
    ) {
        let partitions = self.routes.len();
        let Some(route) = self.routes.get_mut(tp) else {
            // Not started (recovering) or stopping: the partition is paused and will be sought
            // to its start offset, so a prefetched record can be dropped.
            return;
        };
        let record = record_of(
            message,
            route.account.as_ref(),
            settings.read_headers,
            &mut route.arena,
        );
        route.next = record.offset + 1;
        let capped = match (&settings.memory, &route.account) {
            (Some(budget), Some(account)) => budget.over_cap(account, partitions),
            _ => false,
        };
        // Most of the time no partition has a stash: skip the lookup then.
        let stashed = if self.stashes.is_empty() {
            None
        } else {
            self.stashes.get_mut(tp)
        };
        let stash = match stashed {
            Some(stash) if !stash.is_empty() => {
                stash.push_back(record);
                stash
            }
            _ => match route.sink.try_send(record) {
                Ok(()) => {
                    if capped {
                        self.capped.insert(tp.clone());
                        self.pause(consumer, tp);
                    }
                    return;
                }
                Err(mpsc::error::TrySendError::Full(record)) => {
                    let stash = self.stashes.entry(tp.clone()).or_default();
                    stash.push_back(record);
                    stash
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.routes.remove(tp);
                    return;
                }
            },
        };
        let full = stash.len() >= settings.max_stash_records.max(1);
        if capped {
            self.capped.insert(tp.clone());
        }
        if full || capped || !self.paused.contains(tp) {
            self.pause(consumer, tp);
        }
    }

    /// Resumes the partitions paused for their share cap that are back under half of it.
    fn uncap(&mut self, consumer: &BaseConsumer<SinkContext>, settings: &ConsumerSettings) {
        let Some(budget) = &settings.memory else {
            return;
        };
        if self.capped.is_empty() {
            return;
        }
        let partitions = self.routes.len();
        let ready: Vec<TopicPartition> = self
            .capped
            .iter()
            .filter(|tp| {
                self.routes
                    .get(*tp)
                    .and_then(|r| r.account.as_ref())
                    .is_none_or(|a| budget.back_under_cap(a, partitions))
            })
            .cloned()
            .collect();
        for tp in ready {
            self.capped.remove(&tp);
            self.settle(consumer, &tp);
        }
    }

    /// Moves stashed records into writers with room; resumes partitions whose stash emptied.
    fn drain_stashes(&mut self, consumer: &BaseConsumer<SinkContext>) {
        let mut emptied = Vec::new();
        for (tp, stash) in self.stashes.iter_mut() {
            let Some(Route { sink, .. }) = self.routes.get(tp) else {
                continue;
            };
            while let Some(record) = stash.pop_front() {
                match sink.try_send(record) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(record)) => {
                        stash.push_front(record);
                        break;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        stash.clear();
                        break;
                    }
                }
            }
            if stash.is_empty() {
                emptied.push(tp.clone());
            }
        }
        for tp in emptied {
            self.stashes.remove(&tp);
            self.settle(consumer, &tp);
        }
    }
}

fn run(consumer: BaseConsumer<SinkContext>) {
    let poll_timeout = Duration::from_millis(20);
    let settings = &consumer.context().settings;
    // The partition of the last message: consecutive messages mostly come from one partition,
    // so its key is not rebuilt (allocated) per message.
    let mut current = TopicPartition::new(String::new(), -1);
    let mut gated_since: Option<Instant> = None;
    let mut published = Instant::now();
    loop {
        // Commands first, so commits are not delayed behind a full poll.
        let gated = {
            let mut shared = consumer.context().shared.lock().expect("consumer state");
            while let Ok(command) = shared.commands.try_recv() {
                shared.execute(&consumer, settings, command);
            }
            shared.retry_seeks(&consumer, settings);
            if published.elapsed() >= Duration::from_secs(1) {
                published = Instant::now();
                shared.publish_standing(&consumer);
            }
            shared.drain_stashes(&consumer);
            shared.uncap(&consumer, settings);
            if let Some(budget) = &settings.memory {
                budget.set_partitions(shared.routes.len());
            }
            if shared.shutdown {
                break;
            }
            settings.memory.as_ref().is_some_and(|b| b.update_gate())
        };
        if gated {
            // The budget is used up: take no message until acknowledgements release some. Keep
            // serving commands meanwhile, and poll now and then for rebalances.
            let since = *gated_since.get_or_insert_with(Instant::now);
            if since.elapsed() < MAX_GATE {
                let mut shared = consumer.context().shared.lock().expect("consumer state");
                let waited = shared.commands.recv_timeout(Duration::from_millis(2));
                match waited {
                    Ok(command) => shared.execute(&consumer, settings, command),
                    Err(std_mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std_mpsc::RecvTimeoutError::Disconnected) => {
                        drop(shared);
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                continue;
            }
        }
        gated_since = None;
        // The rebalance callbacks run inside this poll and lock `shared` themselves.
        let polled = consumer.poll(poll_timeout);
        match polled {
            None => {}
            Some(Ok(message)) => {
                if current.partition != message.partition() || current.topic != message.topic() {
                    current = TopicPartition::new(message.topic(), message.partition());
                }
                let mut shared = consumer.context().shared.lock().expect("consumer state");
                shared.route(&consumer, settings, &current, &message);
            }
            Some(Err(error)) => {
                if is_fatal(&error) {
                    let shared = consumer.context().shared.lock().expect("consumer state");
                    let _ = shared.events.send(ConsumerEvent::Fatal(error.to_string()));
                } else if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AutoOffsetReset) {
                    let mut shared = consumer.context().shared.lock().expect("consumer state");
                    shared.out_of_range(&consumer, settings);
                } else {
                    tracing::warn!(error = %error, "kafka consumer error");
                }
            }
        }
    }
    // Leaving the group: unsubscribe runs the revoke callback (its handoff is a no-op now that
    // the coordinator released everything), then the consumer is closed on drop.
    consumer.unsubscribe();
    let _ = consumer.poll(Duration::from_millis(100));
    let events = consumer
        .context()
        .shared
        .lock()
        .expect("consumer state")
        .events
        .clone();
    drop(consumer);
    let _ = events.send(ConsumerEvent::Closed);
}

/// Copies a message out of librdkafka's buffer, charged to `account`.
fn record_of(
    message: &BorrowedMessage<'_>,
    account: Option<&Arc<PartitionBudget>>,
    read_headers: bool,
    arena: &mut BytesMut,
) -> Record {
    let headers: Vec<(String, Bytes)> = (read_headers.then(|| message.headers()).flatten())
        .map(|h| {
            h.iter()
                .map(|h| {
                    (
                        h.key.to_string(),
                        h.value.map(Bytes::copy_from_slice).unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut record = Record::new(
        message.offset(),
        message.timestamp().to_millis(),
        message.key(),
        message.payload(),
        headers,
        arena,
    );
    if let Some(account) = account {
        // Headers count as their bytes plus a small fixed cost each, the record as its key and
        // value plus the struct, and its future row and request copy as estimated.
        let headers: usize = (record.headers.iter())
            .map(|(k, v)| k.len() + v.len() + 64)
            .sum();
        let size =
            record.size() + 2 * record.row_estimate() + headers + std::mem::size_of::<Record>();
        record.charge = account.charge(size);
    }
    record
}

fn is_fatal(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fatal
                | RDKafkaErrorCode::Authentication
                | RDKafkaErrorCode::SaslAuthenticationFailed
        )
    )
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| TopicPartition::new(e.topic(), e.partition()))
        .collect()
}
