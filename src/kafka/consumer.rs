//! The consumer task: one OS thread owns the rdkafka consumer, polls it, routes records to the
//! writer of their partition, and executes the coordinator's commands between polls.
//!
//! Why a thread and not an async task: librdkafka's rebalance callbacks are synchronous and run
//! inside `poll`. A revoke must hand off inside that callback — stop the writer, commit once —
//! and the commit must be made by this consumer. So the callback itself serves the command channel
//! (a rendezvous with the coordinator) until the coordinator releases every revoked partition or
//! the handoff deadline passes. Because one thread executes every commit, a commit and a revoke can
//! never interleave: that is the commit lock of DESIGN §2.
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
use std::ffi::CStr;
use std::hash::{BuildHasherDefault, Hasher};
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
    Assignment, CommitEntry, CommitId, CommitOutcome, CommittedRead, PartitionOrigin,
    TopicPartition,
};
use crate::ops::metrics::{Metrics, PartitionLabels};

use super::memory_budget::{Charge, MemoryBudget, PartitionBudget};

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
    /// until the coordinator answers with [`ConsumerCommand::Start`].
    Assigned(Vec<(TopicPartition, Assignment)>),
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

/// Settings of the consumer thread.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// librdkafka properties, the sink's forced ones already applied.
    pub properties: BTreeMap<String, String>,
    pub topics: Vec<String>,
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
}

/// How often librdkafka reports statistics (the lag gauges' refresh) unless configured.
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
            committed: HashMap::new(),
            shutdown: false,
        }),
        settings: settings.clone(),
    };
    let consumer: BaseConsumer<SinkContext> = config.create_with_context(context)?;
    let topics: Vec<&str> = settings.topics.iter().map(String::as_str).collect();
    // Partition counts at subscription time: a partition above them was added at runtime, which
    // has its own start policy (DESIGN §2).
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
        .spawn(move || run(consumer))
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
    /// The committed offset of each assigned partition, as read at assignment and written by
    /// our commits: the lag gauges subtract it from the high watermark.
    committed: HashMap<TopicPartition, i64>,
    shutdown: bool,
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
}

struct SinkContext {
    /// Only the consumer thread touches this (in the poll loop or inside a callback it runs);
    /// the mutex is for the `Sync` bound of the context.
    shared: Mutex<Shared>,
    settings: ConsumerSettings,
}

impl ClientContext for SinkContext {
    /// Lag per assigned partition (high watermark − committed offset) and group membership.
    /// Runs inside `poll` on the consumer thread; skips a round rather than wait for the lock.
    fn stats(&self, statistics: rdkafka::Statistics) {
        let Some(metrics) = &self.settings.metrics else {
            return;
        };
        let joined = statistics.cgrp.as_ref().is_some_and(|g| {
            g.state == "up" && (g.join_state == "steady" || g.assignment_size > 0)
        });
        metrics.group_joined.set(i64::from(joined));
        let Ok(shared) = self.shared.try_lock() else {
            return;
        };
        for (tp, committed) in &shared.committed {
            let high = statistics
                .topics
                .get(&tp.topic)
                .and_then(|t| t.partitions.get(&tp.partition))
                .map(|p| p.hi_offset)
                .filter(|h| *h >= 0);
            if let Some(high) = high {
                metrics
                    .consumer_lag
                    .get_or_create(&lag_labels(tp))
                    .set((high - committed).max(0));
            }
        }
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
                let partitions = partitions_of(tpl);
                let committed =
                    read_committed(consumer, &partitions, self.settings.request_timeout);
                for tp in &partitions {
                    let start = match &committed {
                        Ok(map) => match map.get(tp).cloned().flatten() {
                            Some(c) => Offset::Offset(c.offset.0),
                            None => Offset::Beginning,
                        },
                        Err(_) => Offset::Beginning,
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
                if partitions.is_empty() {
                    return;
                }
                let mut shared = self.shared.lock().expect("consumer state");
                shared.assigned(consumer, &self.settings, partitions, committed);
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let partitions = partitions_of(tpl);
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

impl Shared {
    fn assigned(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        partitions: Vec<TopicPartition>,
        committed: Result<HashMap<TopicPartition, Option<CommittedRead>>, KafkaError>,
    ) {
        // Nothing may flow before recovery decided where the partition starts.
        let tpl = tpl_of(&partitions);
        if let Err(e) = consumer.pause(&tpl) {
            tracing::error!(error = %e, "cannot pause newly assigned partitions");
        }
        self.paused.extend(partitions.iter().cloned());
        let mut out = Vec::with_capacity(partitions.len());
        for tp in partitions {
            match &committed {
                Ok(map) => {
                    let committed = map.get(&tp).cloned().flatten();
                    if let Some(c) = &committed {
                        self.committed.insert(tp.clone(), c.offset.0);
                    }
                    let assignment = self.assignment_of(consumer, settings, &tp, committed);
                    out.push((tp, assignment));
                }
                Err(e) => {
                    // Without the committed offset nothing safe can be decided.
                    let _ = self.events.send(ConsumerEvent::Fatal(format!(
                        "cannot read committed offset of {tp}: {e}"
                    )));
                }
            }
        }
        let _ = self.events.send(ConsumerEvent::Assigned(out));
    }

    fn assignment_of(
        &self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        tp: &TopicPartition,
        committed: Option<CommittedRead>,
    ) -> Assignment {
        let (low, high) = consumer
            .fetch_watermarks(&tp.topic, tp.partition, settings.request_timeout)
            .unwrap_or((0, 0));
        let origin = match self.initial_partitions.get(&tp.topic) {
            Some(&n) if tp.partition >= n => PartitionOrigin::AddedAtRuntime,
            _ => PartitionOrigin::Existing,
        };
        Assignment {
            committed,
            low: NextOffset(low),
            high: NextOffset(high),
            origin,
        }
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
            self.committed.remove(tp);
            if let Some(metrics) = &settings.metrics {
                metrics.consumer_lag.remove(&lag_labels(tp));
            }
        }
        if self.shutdown {
            // Leaving after the coordinator's final checkpoint: it already released everything
            // and will not answer.
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
                    let (stale, keep): (Vec<_>, Vec<_>) =
                        entries.into_iter().partition(|e| revoking.contains(&e.tp));
                    let mut outcome = self.commit(consumer, settings, commit, keep);
                    if let CommitOutcome::PerPartition(results) = &mut outcome {
                        results.extend(stale.into_iter().map(|e| {
                            (
                                e.tp,
                                Err("partition revoked before the commit was made".into()),
                            )
                        }));
                    }
                    let _ = self
                        .events
                        .send(ConsumerEvent::CommitDone { commit, outcome });
                }
                other => self.execute(consumer, settings, other),
            }
        }
        for tp in &revoking {
            self.paused.remove(tp);
        }
    }

    fn execute(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        command: ConsumerCommand,
    ) {
        match command {
            ConsumerCommand::Start { tp, from, sink } => {
                let mut tpl = TopicPartitionList::new();
                if let Err(e) =
                    tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(from.0))
                {
                    tracing::error!(partition = %tp, error = %e, "bad start offset");
                }
                match consumer.seek_partitions(tpl, settings.request_timeout) {
                    Ok(result) => {
                        for elem in result.elements() {
                            if let Err(e) = elem.error() {
                                tracing::warn!(partition = %tp, error = %e, "seek reported an error");
                            }
                        }
                    }
                    Err(e) => tracing::warn!(partition = %tp, error = %e, "seek failed"),
                }
                self.stashes.remove(&tp);
                self.ordered_paused.remove(&tp);
                self.capped.remove(&tp);
                let account = settings.memory.as_ref().map(MemoryBudget::partition);
                self.routes.insert(
                    tp.clone(),
                    Route {
                        sink,
                        arena: BytesMut::new(),
                        account,
                    },
                );
                self.settle(consumer, &tp);
            }
            ConsumerCommand::Seek { tp, to } => {
                self.stashes.remove(&tp);
                self.ordered_paused.remove(&tp);
                seek(consumer, &tp, to, settings.request_timeout);
                self.settle(consumer, &tp);
            }
            ConsumerCommand::Stop { tp } => {
                self.routes.remove(&tp);
                self.stashes.remove(&tp);
                self.capped.remove(&tp);
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
                let outcome = self.commit(consumer, settings, commit, entries);
                let _ = self
                    .events
                    .send(ConsumerEvent::CommitDone { commit, outcome });
            }
            ConsumerCommand::ReadCommitted { tp } => {
                let event = match read_committed(
                    consumer,
                    std::slice::from_ref(&tp),
                    settings.request_timeout,
                ) {
                    Ok(map) => {
                        let committed = map.get(&tp).cloned().flatten();
                        if let Some(c) = &committed {
                            self.committed.insert(tp.clone(), c.offset.0);
                        }
                        let assignment = self.assignment_of(consumer, settings, &tp, committed);
                        ConsumerEvent::Reread { tp, assignment }
                    }
                    Err(e) => ConsumerEvent::RereadFailed {
                        tp,
                        reason: e.to_string(),
                    },
                };
                let _ = self.events.send(event);
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
                let event = match read_committed(
                    consumer,
                    std::slice::from_ref(&tp),
                    settings.request_timeout,
                ) {
                    Ok(map) => {
                        let committed = map.get(&tp).cloned().flatten();
                        let assignment = self.assignment_of(consumer, settings, &tp, committed);
                        ConsumerEvent::OwnershipConfirmed { tp, assignment }
                    }
                    Err(e) => ConsumerEvent::OwnershipUnknown {
                        tp,
                        reason: e.to_string(),
                    },
                };
                let _ = self.events.send(event);
            }
            ConsumerCommand::RevokeSeen | ConsumerCommand::Release { .. } => {}
            ConsumerCommand::Shutdown => self.shutdown = true,
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
                if result.is_ok()
                    && let Some(offset) = offsets.get(tp)
                {
                    self.committed.insert(tp.clone(), *offset);
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
                                    Err(error.to_string())
                                };
                                (e.tp, result)
                            })
                            .collect(),
                    ),
                    Err(read_error) => {
                        tracing::warn!(commit = commit.0, error = %error, read_back = %read_error, "commit failed and could not be read back");
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
    loop {
        // Commands first, so commits are not delayed behind a full poll.
        let gated = {
            let mut shared = consumer.context().shared.lock().expect("consumer state");
            while let Ok(command) = shared.commands.try_recv() {
                shared.execute(&consumer, settings, command);
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

fn seek(
    consumer: &BaseConsumer<SinkContext>,
    tp: &TopicPartition,
    to: NextOffset,
    timeout: Duration,
) {
    let mut tpl = TopicPartitionList::new();
    if let Err(e) = tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(to.0)) {
        tracing::error!(partition = %tp, error = %e, "bad seek offset");
        return;
    }
    match consumer.seek_partitions(tpl, timeout) {
        Ok(result) => {
            for elem in result.elements() {
                if let Err(e) = elem.error() {
                    tracing::warn!(partition = %tp, error = %e, "seek reported an error");
                }
            }
        }
        Err(e) => tracing::warn!(partition = %tp, error = %e, "seek failed"),
    }
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

fn tpl_of(partitions: &[TopicPartition]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for tp in partitions {
        tpl.add_partition(&tp.topic, tp.partition);
    }
    tpl
}

/// Committed offset and raw metadata bytes per partition (`None`: nothing committed). The
/// metadata is read as bytes: rdkafka's `metadata()` panics on non-UTF-8, and metadata written by
/// another client must fail closed with its raw value, not crash the process.
pub fn read_committed<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    partitions: &[TopicPartition],
    timeout: Duration,
) -> Result<HashMap<TopicPartition, Option<CommittedRead>>, KafkaError> {
    let tpl = consumer.committed_offsets(tpl_of(partitions), timeout)?;
    let mut out = HashMap::with_capacity(partitions.len());
    // SAFETY: `tpl` is a valid list owned by us for the whole loop; `cnt` elements are
    // initialised by librdkafka; `metadata` points to `metadata_size` bytes or is null.
    unsafe {
        let list = &*tpl.ptr();
        for i in 0..list.cnt as usize {
            let elem = &*list.elems.add(i);
            let topic = CStr::from_ptr(elem.topic).to_string_lossy().into_owned();
            let tp = TopicPartition::new(topic, elem.partition);
            let read = if elem.offset >= 0 {
                let metadata = if elem.metadata.is_null() || elem.metadata_size == 0 {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(elem.metadata as *const u8, elem.metadata_size)
                        .to_vec()
                };
                Some(CommittedRead {
                    offset: NextOffset(elem.offset),
                    metadata,
                })
            } else {
                None
            };
            out.insert(tp, read);
        }
    }
    drop(tpl);
    Ok(out)
}
