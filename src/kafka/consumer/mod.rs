//! The consumer task: one OS thread owns the rdkafka consumer, polls it, dispatches records to the
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

use std::collections::{BTreeSet, HashMap};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;

use crate::config::defaults;
use kbq_core::model::TopicPartition;
use kbq_core::offsets::NextOffset;

use super::memory_budget::MemoryBudget;
use super::reconnect::BrokerWatch;

mod backpressure;
mod commands;
mod commits;
mod lag;
mod rebalance;
mod record;
mod seeks;

use backpressure::{Backpressure, Outlet};
pub use commands::*;
use lag::{LagBook, WatermarkReader};
use rebalance::SinkContext;
pub use record::Record;
use record::record_of;

/// Read-only re-export: the tools and tests read checkpoints through it.
pub use super::committed::read_committed;

/// Tries of a seek (the first and its retries, backed off by [`crate::backoff::delay`], about
/// 3 s in all) before the partition fails closed: resuming at librdkafka's old position would
/// skip the records in between.
const SEEK_ATTEMPTS: u32 = 5;

/// Longest time the consumer thread goes without polling while the memory budget is used up:
/// rebalance callbacks and errors only arrive through the poll.
pub const MAX_GATE: Duration = Duration::from_millis(100);

/// The consumer loop reads the clock (for the once-a-second lag book) every this many turns, or
/// on the turn after a poll that returned nothing: a turn handles at most one message, so at
/// any rate the lag book is at most this many messages (or one idle poll) late.
const CLOCK_EVERY_TURNS: u32 = 256;

/// Starts the consumer thread. Events arrive on the returned receiver.
pub fn spawn(
    settings: ConsumerSettings,
) -> Result<(ConsumerHandle, mpsc::UnboundedReceiver<ConsumerEvent>), KafkaError> {
    let (command_tx, command_rx) = std_mpsc::channel();
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    let config = client_config(&settings);
    let lag = Arc::new(LagBook::default());
    let watermarks = watermark_reader(&settings, &config, &lag, &event_tx)?;
    let events = event_tx.clone();
    let context = SinkContext {
        shared: Mutex::new(Shared::new(command_rx, event_tx, lag)),
        settings: settings.clone(),
        brokers: BrokerWatch::new("consumer", &config),
    };
    let consumer: BaseConsumer<SinkContext> = config
        .create_with_context(context)
        .map_err(crate::kafka::redact::redacted)?;
    count_initial_partitions(&consumer, &settings);
    let topics: Vec<&str> = settings.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics)?;
    let thread = std::thread::Builder::new()
        .name("kafka-consumer".into())
        .spawn(move || {
            // A panic here (a bug: nothing a record carries may reach one) must not leave a
            // process that holds its partitions without consuming them: the coordinator hears
            // the consumer failed and the process ends (the panic hook also fails `/healthz`).
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&consumer))) {
                Ok(()) => leave_group(consumer),
                Err(payload) => {
                    let cause = crate::ops::panics::cause(payload.as_ref());
                    let _ = events.send(ConsumerEvent::Fatal(format!(
                        "the consumer thread panicked: {cause}"
                    )));
                    // Closing the consumer runs the revoke callback, which finds the state
                    // lock poisoned and makes no handoff (see `rebalance`).
                    drop(consumer);
                    let _ = events.send(ConsumerEvent::Closed);
                }
            }
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

/// The librdkafka properties, with the statistics on whenever there are metrics to feed.
fn client_config(settings: &ConsumerSettings) -> ClientConfig {
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
        let every = defaults::KAFKA_STATISTICS_INTERVAL.as_millis();
        config.set("statistics.interval.ms", every.to_string());
    }
    config
}

/// The thread reading the high watermarks for the lag gauges, at the statistics' interval;
/// none without metrics.
fn watermark_reader(
    settings: &ConsumerSettings,
    config: &ClientConfig,
    lag: &Arc<LagBook>,
    events: &mpsc::UnboundedSender<ConsumerEvent>,
) -> Result<Option<WatermarkReader>, KafkaError> {
    let Some(metrics) = &settings.metrics else {
        return Ok(None);
    };
    let every = config
        .get("statistics.interval.ms")
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(defaults::KAFKA_STATISTICS_INTERVAL, Duration::from_millis);
    Ok(Some(WatermarkReader::spawn(
        settings,
        every,
        lag.clone(),
        metrics.clone(),
        events.clone(),
    )?))
}

/// Partition counts at subscription time: a partition above them was added at runtime, which
/// has its own start policy (docs/architecture.md#start-cases).
fn count_initial_partitions(consumer: &BaseConsumer<SinkContext>, settings: &ConsumerSettings) {
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

struct Shared {
    commands: std_mpsc::Receiver<ConsumerCommand>,
    events: mpsc::UnboundedSender<ConsumerEvent>,
    /// The started partitions' outlets, their stashes and pauses.
    flow: Backpressure,
    initial_partitions: HashMap<String, i32>,
    /// The partitions this member owns: added by the assign callback, removed when the revoke
    /// callback returns. A commit for any other partition is refused here (invariant 4): a
    /// handoff commit the coordinator builds after the callback left at its deadline would
    /// otherwise land in the next generation, over the new owner's checkpoint.
    owned: BTreeSet<TopicPartition>,
    /// Seeks that failed and wait for their retry; the partition stays paused, without an outlet.
    seeking: HashMap<TopicPartition, PendingSeek>,
    /// Where each started partition was last sought to: its position until a record arrives.
    positions: HashMap<TopicPartition, NextOffset>,
    lag: Arc<LagBook>,
    shutdown: bool,
}

/// A seek to retry, and the outlet the partition gets once it is made.
struct PendingSeek {
    to: NextOffset,
    attempt: u32,
    due: Instant,
    outlet: Option<Outlet>,
}

impl Shared {
    fn new(
        commands: std_mpsc::Receiver<ConsumerCommand>,
        events: mpsc::UnboundedSender<ConsumerEvent>,
        lag: Arc<LagBook>,
    ) -> Self {
        Shared {
            commands,
            events,
            flow: Backpressure::default(),
            initial_partitions: HashMap::new(),
            owned: BTreeSet::new(),
            seeking: HashMap::new(),
            positions: HashMap::new(),
            lag,
            shutdown: false,
        }
    }

    /// Executes the commands queued since the last turn. A command may block for a request
    /// timeout (an offset read while the coordinator is away): after MAX_GATE of them the rest
    /// wait for the next turn, so the thread still polls, which serves rebalances and
    /// statistics and keeps it in the group (`max.poll.interval.ms`), however many reads the
    /// coordinator queued.
    fn serve_commands(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
    ) {
        let mut draining: Option<Instant> = None;
        while let Ok(command) = self.commands.try_recv() {
            let since = *draining.get_or_insert_with(Instant::now);
            self.execute(consumer, settings, command);
            if since.elapsed() >= MAX_GATE {
                break;
            }
        }
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
                self.flow.start(&tp);
                let account = settings.memory.as_ref().map(MemoryBudget::partition);
                let outlet = Outlet {
                    sink,
                    arena: BytesMut::new(),
                    account,
                    next: NextOffset::default(),
                };
                self.seek_and_open(consumer, settings, tp, from, 0, Some(outlet));
            }
            ConsumerCommand::Seek { tp, to } => {
                let outlet = (self.flow.seek(&tp))
                    .or_else(|| self.seeking.remove(&tp).and_then(|p| p.outlet));
                self.seek_and_open(consumer, settings, tp, to, 0, outlet);
            }
            ConsumerCommand::Stop { tp } => {
                self.seeking.remove(&tp);
                self.flow.stop(consumer, &tp);
            }
            ConsumerCommand::Pause { tp } => {
                self.flow.order_pause(consumer, &tp);
            }
            ConsumerCommand::Resume { tp } => {
                self.flow.order_resume(consumer, &tp);
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

    /// Writes each owned partition's fetch position and dispatched end into the lag book.
    fn publish_standing(&self, consumer: &BaseConsumer<SinkContext>) {
        let now = consumer.position().ok();
        for tp in &self.owned {
            let fetched = now
                .as_ref()
                .and_then(|list| list.find_partition(&tp.topic, tp.partition))
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(NextOffset(o)),
                    _ => None,
                })
                .or_else(|| self.positions.get(tp).copied());
            let dispatched = (self.flow.outlet(tp).map(|r| r.next)).filter(|n| n.0 > 0);
            self.lag.with(tp, |s| {
                s.fetched = fetched;
                if dispatched.is_some() {
                    s.dispatched = dispatched;
                }
            });
        }
    }
}

/// How long one poll waits when no message is ready: the commands queued meanwhile (commits
/// among them) wait at most this long for the next turn.
const POLL_TIMEOUT: Duration = Duration::from_millis(20);

/// The consumer thread's loop: each turn serves the commands and the housekeeping, then
/// (unless the memory gate is closed) polls once and handles the message or error.
fn run(consumer: &BaseConsumer<SinkContext>) {
    let settings = &consumer.context().settings;
    let mut poll_loop = PollLoop::new();
    // The message of the last poll, dispatched at the start of the next turn under the lock
    // that turn takes anyway: one lock of the state per message, not two.
    let mut polled = None;
    loop {
        match poll_loop.between_polls(consumer, settings, polled.take()) {
            Turn::Shutdown => break,
            Turn::Gated if poll_loop.wait_at_gate(consumer, settings) => continue,
            Turn::Gated | Turn::Poll => {}
        }
        poll_loop.gated_since = None;
        // The rebalance callbacks run inside this poll and lock `shared` themselves.
        match consumer.poll(POLL_TIMEOUT) {
            // Idle: the lag book is refreshed on the next turn's clock read.
            None => poll_loop.since_clock = CLOCK_EVERY_TURNS,
            Some(Ok(message)) => polled = Some(message),
            Some(Err(error)) => on_poll_error(consumer, settings, &error),
        }
    }
}

/// What the work between two polls decided.
enum Turn {
    Poll,
    /// The memory budget is used up.
    Gated,
    Shutdown,
}

/// What the consumer thread keeps from one turn of its loop to the next.
struct PollLoop {
    /// The partition of the last message: consecutive messages mostly come from one partition,
    /// so its key is not rebuilt (allocated) per message.
    current: TopicPartition,
    /// When the memory gate closed, while it stays closed.
    gated_since: Option<Instant>,
    /// When the lag book was last written.
    published: Instant,
    /// Loop turns since the clock was last read for the lag book: a clock read per message was
    /// a visible share of this thread's profile (BENCHMARKS.md, "Where the time goes").
    since_clock: u32,
}

impl PollLoop {
    fn new() -> Self {
        PollLoop {
            current: TopicPartition::new(String::new(), -1),
            gated_since: None,
            published: Instant::now(),
            since_clock: 0,
        }
    }

    /// The last poll's message handed over first (before any command: a command sees the
    /// state as after the poll, as when the message was dispatched under a lock of its own);
    /// then the commands, so commits are not delayed behind a full poll; then the seeks due
    /// for a retry, the lag book (once a second), the stashes, the caps and the memory gate.
    fn between_polls(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        polled: Option<BorrowedMessage<'_>>,
    ) -> Turn {
        let mut shared = consumer.context().shared.lock().expect("consumer state");
        if let Some(message) = polled {
            self.dispatch(consumer, settings, &mut shared, &message);
        }
        shared.serve_commands(consumer, settings);
        shared.retry_seeks(consumer, settings);
        self.since_clock += 1;
        if self.since_clock >= CLOCK_EVERY_TURNS {
            self.since_clock = 0;
            if self.published.elapsed() >= Duration::from_secs(1) {
                self.published = Instant::now();
                shared.publish_standing(consumer);
                // Between two polls: a thread that may call into librdkafka (see `reconnect`).
                (consumer.context().brokers).find_brokers_again(consumer.client(), self.published);
            }
        }
        shared.flow.drain_stashes(consumer);
        shared.flow.uncap(consumer, settings.memory.as_deref());
        if let Some(budget) = &settings.memory {
            budget.set_partitions(shared.flow.partitions());
        }
        if shared.shutdown {
            Turn::Shutdown
        } else if settings.memory.as_ref().is_some_and(|b| b.update_gate()) {
            Turn::Gated
        } else {
            Turn::Poll
        }
    }

    /// The budget is used up: take no message until acknowledgements release some, but keep
    /// serving commands meanwhile. Whether the turn ends here: it does not once the gate has
    /// been closed for MAX_GATE, so the thread polls now and then for rebalances.
    fn wait_at_gate(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
    ) -> bool {
        let since = *self.gated_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= MAX_GATE {
            return false;
        }
        let mut shared = consumer.context().shared.lock().expect("consumer state");
        match shared.commands.recv_timeout(Duration::from_millis(2)) {
            Ok(command) => shared.execute(consumer, settings, command),
            Err(std_mpsc::RecvTimeoutError::Timeout) => {}
            Err(std_mpsc::RecvTimeoutError::Disconnected) => {
                drop(shared);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        true
    }

    /// Hands a polled message to its partition's writer (or stash).
    fn dispatch(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        shared: &mut Shared,
        message: &BorrowedMessage<'_>,
    ) {
        if self.current.partition != message.partition() || !of_topic(message, &self.current.topic)
        {
            self.current = TopicPartition::new(topic_name(message), message.partition());
        }
        let memory = settings.memory.as_deref();
        let stash = settings.max_stash_records;
        shared
            .flow
            .dispatch(consumer, memory, stash, &self.current, |outlet| {
                let account = outlet.account.as_ref();
                record_of(message, account, settings.read_headers, &mut outlet.arena)
            });
    }
}

/// A fatal error ends the sink; a position out of range goes to its policy; the rest is
/// librdkafka's to retry.
fn on_poll_error(
    consumer: &BaseConsumer<SinkContext>,
    settings: &ConsumerSettings,
    error: &KafkaError,
) {
    if is_fatal(error) {
        let shared = consumer.context().shared.lock().expect("consumer state");
        let _ = shared.events.send(ConsumerEvent::Fatal(error.to_string()));
    } else if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AutoOffsetReset) {
        let mut shared = consumer.context().shared.lock().expect("consumer state");
        shared.out_of_range(consumer, settings);
    } else {
        tracing::warn!(error = %error, "kafka consumer error");
    }
}

/// Leaving the group: unsubscribe runs the revoke callback (its handoff is a no-op now that
/// the coordinator released everything), then the consumer is closed on drop.
fn leave_group(consumer: BaseConsumer<SinkContext>) {
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

/// Whether `message` is of `topic`, without [`Message::topic`]'s UTF-8 check of the name: that
/// check, made for every message, was 1.6 % of the sink's instructions (BENCHMARKS.md,
/// "Instructions, not seconds"). The names are compared, not the topic handles' addresses: after
/// a topic is gone, librdkafka may give its address to another topic's handle.
fn of_topic(message: &BorrowedMessage<'_>, topic: &str) -> bool {
    // SAFETY: a polled message holds a reference on its topic handle, whose name is a
    // NUL-terminated string owned by the handle and never changed; it outlives this call.
    let name = unsafe {
        std::ffi::CStr::from_ptr(rdkafka::bindings::rd_kafka_topic_name(message.topic_ptr()))
    };
    name.to_bytes() == topic.as_bytes()
}

/// The topic of `message`, without [`Message::topic`]'s panic on a name that is not UTF-8. A
/// broker admits only ASCII letters, digits, `.`, `_` and `-` in a topic name, so the lossy
/// form never changes a name a broker sent.
fn topic_name(message: &BorrowedMessage<'_>) -> String {
    // SAFETY: as in `of_topic`.
    let name = unsafe {
        std::ffi::CStr::from_ptr(rdkafka::bindings::rd_kafka_topic_name(message.topic_ptr()))
    };
    name.to_string_lossy().into_owned()
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
