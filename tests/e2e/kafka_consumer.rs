//! The consumer thread (`kafka::consumer`) against a real broker, with the test in the
//! coordinator's place: it receives the thread's events and sends its commands. Each test pins
//! one edge of the exactly-once argument that the protocol's model cannot see: a seek that did
//! not happen, an offset or watermark read that failed, a commit for a partition this member no
//! longer owns, a fetch position deleted by retention, the lag of a partition that stopped.
//!
//! Seek, offset-read and watermark-read failures cannot be provoked on demand on a healthy
//! broker; `ConsumerFaults` replaces librdkafka's answer with an error element in the production
//! code path (for a seek, the seek is then not made, as when librdkafka refuses it).

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use kafka_bigquery_sink::kafka::committed::ConsumerFaults;
use kafka_bigquery_sink::kafka::consumer::{
    self, ConsumerCommand, ConsumerEvent, ConsumerHandle, ConsumerSettings, Record,
};
use kafka_bigquery_sink::ops::metrics::{Metrics, PartitionLabels};
use kbq_core::offsets::NextOffset;
use kbq_core::protocol::{CommitEntry, CommitId, CommitOutcome, TopicPartition};
use rdkafka::admin::AdminOptions;
use rdkafka::consumer::BaseConsumer;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;

use support::kafka::{
    KafkaBroker, admin_client, consumer_config, create_topic_blocking, produce_to_partition,
    producer, unique_name,
};

const WAIT: Duration = Duration::from_secs(60);

/// The consumer thread under test and its event stream.
struct Thread {
    handle: Option<ConsumerHandle>,
    events: mpsc::UnboundedReceiver<ConsumerEvent>,
    metrics: Arc<Metrics>,
}

impl Thread {
    fn spawn(bootstrap: &str, group: &str, topic: &str, faults: Arc<ConsumerFaults>) -> Thread {
        Self::spawn_with(
            bootstrap,
            group,
            topic,
            faults,
            &[],
            Duration::from_secs(20),
        )
    }

    /// As `spawn`, with `extra` consumer properties and a handoff deadline.
    fn spawn_with(
        bootstrap: &str,
        group: &str,
        topic: &str,
        faults: Arc<ConsumerFaults>,
        extra: &[(&str, &str)],
        handoff_deadline: Duration,
    ) -> Thread {
        let mut properties: BTreeMap<String, String> = [
            ("bootstrap.servers", bootstrap),
            ("group.id", group),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("isolation.level", "read_committed"),
            ("auto.offset.reset", "error"),
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "500"),
            ("statistics.interval.ms", "500"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        properties.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let metrics = Arc::new(Metrics::new());
        let (handle, events) = consumer::spawn(ConsumerSettings {
            properties,
            topics: vec![topic.to_string()],
            excluded_topics: Vec::new(),
            handoff_deadline,
            request_timeout: Duration::from_secs(10),
            max_stash_records: 1,
            metrics: Some(metrics.clone()),
            memory: None,
            read_headers: false,
            faults,
        })
        .expect("spawn the consumer thread");
        Thread {
            handle: Some(handle),
            events,
            metrics,
        }
    }

    fn send(&self, command: ConsumerCommand) {
        assert!(self.handle.as_ref().expect("running").send(command));
    }

    /// The first event `pick` takes (others are dropped), or a panic naming `what`.
    fn wait<T>(&mut self, what: &str, mut pick: impl FnMut(ConsumerEvent) -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            match self.events.try_recv() {
                Ok(event) => {
                    if let Some(found) = pick(event) {
                        return found;
                    }
                }
                Err(mpsc::error::TryRecvError::Empty) => {
                    assert!(Instant::now() < deadline, "timed out waiting for {what}");
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("consumer thread gone while waiting for {what}: {e}"),
            }
        }
    }

    fn lag(&self, tp: &TopicPartition) -> i64 {
        self.metrics
            .consumer_lag
            .get_or_create(&PartitionLabels {
                topic: tp.topic.clone(),
                partition: tp.partition,
            })
            .get()
    }
}

impl Drop for Thread {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.send(ConsumerCommand::Shutdown);
            handle.join();
        }
    }
}

/// A topic of `partitions` partitions with `records` records `r{offset}` in each.
fn topic_with(bootstrap: &str, prefix: &str, partitions: i32, records: i64) -> String {
    let topic = unique_name(prefix);
    create_topic_blocking(bootstrap, &topic, partitions);
    let p = producer(bootstrap);
    for partition in 0..partitions {
        produce(&p, &topic, partition, 0..records);
    }
    topic
}

fn produce(
    p: &rdkafka::producer::FutureProducer,
    topic: &str,
    partition: i32,
    ids: std::ops::Range<i64>,
) {
    let values: Vec<Vec<u8>> = ids.map(|i| format!("r{i}").into_bytes()).collect();
    let records: Vec<(&[u8], &[u8])> = values.iter().map(|v| (&b"k"[..], &v[..])).collect();
    produce_to_partition(p, topic, partition, &records);
}

/// Commits `offset` for `tp` in `group` without joining it. On a broker that has just started,
/// the group coordinator may still be loading `__consumer_offsets`: those answers are retried
/// (for up to 60 s), as the daemon's own commits are, so the test does not depend on timing.
fn commit(bootstrap: &str, group: &str, tp: &TopicPartition, offset: i64) {
    support::kafka::commit_outside_group(bootstrap, group, &tp.topic, tp.partition, offset, None)
        .expect("commit");
}

/// The group's committed offset of `tp` (`None`: nothing committed).
fn committed(bootstrap: &str, group: &str, tp: &TopicPartition) -> Option<i64> {
    let c: BaseConsumer = consumer_config(bootstrap, group).create().expect("client");
    consumer::read_committed(&c, std::slice::from_ref(tp), Duration::from_secs(10))
        .expect("read the committed offset")[tp]
        .as_ref()
        .map(|c| c.offset.0)
}

/// The next assignment: per partition, its committed offset and high watermark.
type Assigned = Vec<(TopicPartition, Result<(Option<i64>, i64), String>)>;

fn assigned(thread: &mut Thread) -> Assigned {
    thread.wait("an assignment", |e| match e {
        ConsumerEvent::Assigned(list) => Some(
            list.into_iter()
                .map(|(tp, r)| (tp, r.map(|a| (a.committed.map(|c| c.offset.0), a.high.0))))
                .collect(),
        ),
        _ => None,
    })
}

fn offsets_received(rx: &mut mpsc::Receiver<Record>, n: usize) -> Vec<i64> {
    let deadline = Instant::now() + WAIT;
    let mut out = Vec::new();
    while out.len() < n {
        match rx.try_recv() {
            Ok(r) => out.push(r.offset.0),
            Err(_) => {
                assert!(Instant::now() < deadline, "received only {out:?}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    out
}

#[test]
fn a_seek_that_fails_is_retried_and_the_partition_starts_exactly_where_it_was_told() {
    let bootstrap = KafkaBroker::shared();
    let topic = topic_with(bootstrap, "seek-retry", 1, 20);
    let group = unique_name("seek-retry");
    let tp = TopicPartition::new(&topic, 0);
    // librdkafka is assigned at the committed offset 10; the protocol starts the partition at 3
    // (a rewind). A seek that did not happen would resume at 10 and skip 3..10.
    commit(bootstrap, &group, &tp, 10);
    let faults = Arc::new(ConsumerFaults::default());
    faults.seek.store(2, Ordering::SeqCst);
    let mut thread = Thread::spawn(bootstrap, &group, &topic, faults.clone());
    assert_eq!(
        assigned(&mut thread),
        vec![(tp.clone(), Ok((Some(10), 20)))]
    );
    let (tx, mut rx) = mpsc::channel(100);
    thread.send(ConsumerCommand::Start {
        tp: tp.clone(),
        from: NextOffset(3),
        sink: tx,
    });
    assert_eq!(offsets_received(&mut rx, 17), (3..20).collect::<Vec<_>>());
    assert_eq!(faults.seek.load(Ordering::SeqCst), 0, "both faults fired");
}

#[test]
fn a_seek_that_keeps_failing_fails_the_partition_closed_and_hands_out_nothing() {
    let bootstrap = KafkaBroker::shared();
    let topic = topic_with(bootstrap, "seek-fail", 1, 20);
    let group = unique_name("seek-fail");
    let tp = TopicPartition::new(&topic, 0);
    commit(bootstrap, &group, &tp, 10);
    let faults = Arc::new(ConsumerFaults::default());
    faults.seek.store(u32::MAX, Ordering::SeqCst);
    let mut thread = Thread::spawn(bootstrap, &group, &topic, faults);
    assigned(&mut thread);
    let (tx, mut rx) = mpsc::channel(100);
    thread.send(ConsumerCommand::Start {
        tp: tp.clone(),
        from: NextOffset(3),
        sink: tx,
    });
    let failed = thread.wait("the seek to fail for good", |e| match e {
        ConsumerEvent::SeekFailed { tp, reason } => Some((tp, reason)),
        _ => None,
    });
    assert_eq!(failed.0, tp);
    assert!(failed.1.contains("injected seek fault"), "{}", failed.1);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        rx.try_recv().is_err(),
        "no record is handed out after a seek that was not made"
    );
}

#[test]
fn an_unreadable_committed_offset_or_watermark_at_assignment_is_unknown_and_read_again() {
    let bootstrap = KafkaBroker::shared();
    let topic = topic_with(bootstrap, "assign-unknown", 1, 20);
    let group = unique_name("assign-unknown");
    let tp = TopicPartition::new(&topic, 0);
    commit(bootstrap, &group, &tp, 10);
    let faults = Arc::new(ConsumerFaults::default());
    faults.committed_read.store(1, Ordering::SeqCst);
    faults.watermarks.store(2, Ordering::SeqCst);
    let mut thread = Thread::spawn(bootstrap, &group, &topic, faults);
    // Neither "no committed offset" (a first start) nor watermarks (0, 0) (a committed offset
    // above the high watermark), and not the end of the process: unknown, for this partition.
    let first = thread.wait("an assignment or a fatal error", |e| match e {
        ConsumerEvent::Assigned(list) => Some(Ok(list)),
        ConsumerEvent::Fatal(reason) => Some(Err(reason)),
        _ => None,
    });
    let list = first.expect("no fatal error");
    assert_eq!(list.len(), 1);
    let reason = list[0].1.as_ref().expect_err("the partition is unknown");
    assert!(reason.contains("injected"), "{reason}");
    // The retry reads the committed offset, but its watermark read fails again.
    thread.send(ConsumerCommand::ReadAssignment { tp: tp.clone() });
    let again = thread.wait("the second read", |e| match e {
        ConsumerEvent::AssignmentRead { tp, result } => Some((tp, result)),
        _ => None,
    });
    assert!(
        again.1.as_ref().is_err_and(|e| e.contains("watermark")),
        "{again:?}"
    );
    thread.send(ConsumerCommand::ReadAssignment { tp: tp.clone() });
    let known = thread.wait("the third read", |e| match e {
        ConsumerEvent::AssignmentRead { result, .. } => Some(result),
        _ => None,
    });
    let a = known.expect("read");
    assert_eq!(a.committed.map(|c| c.offset), Some(NextOffset(10)));
    assert_eq!((a.low, a.high), (NextOffset(0), NextOffset(20)));
}

#[test]
fn commits_for_partitions_this_member_no_longer_owns_never_reach_the_broker() {
    let bootstrap = KafkaBroker::shared();
    let topic = topic_with(bootstrap, "owned", 2, 5);
    let group = unique_name("owned");
    let mut a = Thread::spawn(bootstrap, &group, &topic, Arc::default());
    assert_eq!(assigned(&mut a).len(), 2);
    let mut b = Thread::spawn(bootstrap, &group, &topic, Arc::default());
    let (revoked, lost) = a.wait("a's revoke", |e| match e {
        ConsumerEvent::RevokeBegan { partitions, lost } => Some((partitions, lost)),
        _ => None,
    });
    assert!(!lost);
    assert_eq!(revoked.len(), 1, "cooperative-sticky moves one of two");
    let moved = revoked[0].clone();
    let kept = TopicPartition::new(&topic, 1 - moved.partition);
    let entry = |tp: &TopicPartition, offset| CommitEntry {
        tp: tp.clone(),
        offset: NextOffset(offset),
        metadata: String::new(),
    };
    // A cycle commit built before the coordinator saw the revoke: its revoked entry is dropped.
    a.send(ConsumerCommand::Commit {
        commit: CommitId(1),
        entries: vec![entry(&kept, 2), entry(&moved, 2)],
    });
    let outcome = a.wait("the stale commit's answer", |e| match e {
        ConsumerEvent::CommitDone {
            commit: CommitId(1),
            outcome,
        } => Some(outcome),
        _ => None,
    });
    let CommitOutcome::PerPartition(mut results) = outcome else {
        panic!("answered per partition: {outcome:?}")
    };
    results.sort_by_key(|(tp, _)| tp.partition);
    for (tp, result) in &results {
        if *tp == moved {
            assert!(
                result
                    .as_ref()
                    .is_err_and(|e| e.to_string().contains("revoked")),
                "{results:?}"
            );
        } else {
            assert_eq!(result, &Ok(()));
        }
    }
    // The handoff: the coordinator saw the revoke, releases the partition without a commit.
    a.send(ConsumerCommand::RevokeSeen);
    a.send(ConsumerCommand::Release { tp: moved.clone() });
    b.wait("b's assignment of the moved partition", |e| match e {
        ConsumerEvent::Assigned(list) if list.iter().any(|(tp, _)| *tp == moved) => Some(()),
        _ => None,
    });
    // A handoff commit built after the callback left (at its deadline, or a coordinator behind
    // the revoke): refused, not sent with a's current generation.
    a.send(ConsumerCommand::Commit {
        commit: CommitId(2),
        entries: vec![entry(&moved, 4)],
    });
    let outcome = a.wait("the late commit's answer", |e| match e {
        ConsumerEvent::CommitDone {
            commit: CommitId(2),
            outcome,
        } => Some(outcome),
        _ => None,
    });
    let CommitOutcome::PerPartition(results) = outcome else {
        panic!("answered per partition: {outcome:?}")
    };
    assert!(
        matches!(&results[..], [(tp, Err(e))] if *tp == moved && e.to_string().contains("no longer owned")),
        "{results:?}"
    );
    assert_eq!(committed(bootstrap, &group, &kept), Some(2));
    assert_eq!(
        committed(bootstrap, &group, &moved),
        None,
        "nothing of a's reached the broker for the partition it gave away"
    );
}

#[test]
fn a_position_deleted_by_retention_is_reported_as_out_of_range_with_the_log_start() {
    let bootstrap = KafkaBroker::shared();
    let topic = topic_with(bootstrap, "out-of-range", 1, 100);
    let group = unique_name("out-of-range");
    let tp = TopicPartition::new(&topic, 0);
    let mut thread = Thread::spawn(bootstrap, &group, &topic, Arc::default());
    assigned(&mut thread);
    // A writer that takes one record and then hangs: the partition is paused with one record
    // stashed, its position near the start.
    let (tx, mut rx) = mpsc::channel(1);
    thread.send(ConsumerCommand::Start {
        tp: tp.clone(),
        from: NextOffset(0),
        sink: tx,
    });
    let first = offsets_received(&mut rx, 1);
    assert_eq!(first, vec![0]);
    std::thread::sleep(Duration::from_secs(1));
    // Retention (here: delete-records) removes records the writer has not taken yet.
    let mut delete = TopicPartitionList::new();
    delete
        .add_partition_offset(&topic, 0, Offset::Offset(50))
        .expect("offset");
    let admin = admin_client(bootstrap);
    futures::executor::block_on(admin.delete_records(&delete, &AdminOptions::new()))
        .expect("delete records");
    // The writer takes records again: the partition resumes below the log start.
    let drain = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut got = Vec::new();
        while Instant::now() < deadline {
            if let Ok(r) = rx.try_recv() {
                got.push(r.offset.0);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        got
    });
    let (at, position, low) = thread.wait("the out-of-range report", |e| match e {
        ConsumerEvent::OffsetOutOfRange { tp, position, low } => Some((tp, position, low)),
        _ => None,
    });
    assert_eq!(at, tp);
    assert_eq!(low, NextOffset(50));
    assert!(position < low, "position {position} below the log start");
    let got = drain.join().expect("drain");
    assert!(
        got.iter().all(|o| *o < 50),
        "nothing at or past the log start was handed out before the protocol answered: {got:?}"
    );
}

#[test]
fn the_lag_of_a_partition_that_stopped_taking_records_keeps_counting_new_records() {
    let bootstrap = KafkaBroker::shared();
    let topic = topic_with(bootstrap, "lag", 1, 50);
    let group = unique_name("lag");
    let tp = TopicPartition::new(&topic, 0);
    commit(bootstrap, &group, &tp, 0);
    let mut thread = Thread::spawn(bootstrap, &group, &topic, Arc::default());
    assigned(&mut thread);
    // A stuck writer: it takes one record, the partition pauses.
    let (tx, mut rx) = mpsc::channel(1);
    thread.send(ConsumerCommand::Start {
        tp: tp.clone(),
        from: NextOffset(0),
        sink: tx,
    });
    offsets_received(&mut rx, 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while thread.lag(&tp) != 50 {
        assert!(Instant::now() < deadline, "lag {}", thread.lag(&tp));
        std::thread::sleep(Duration::from_millis(100));
    }
    // Records keep arriving; nothing is committed. (After the fetches in flight when the
    // partition paused have come back: librdkafka fetches nothing more for it.)
    std::thread::sleep(Duration::from_secs(2));
    produce(&producer(bootstrap), &topic, 0, 50..250);
    let deadline = Instant::now() + Duration::from_secs(20);
    while thread.lag(&tp) != 250 {
        assert!(
            Instant::now() < deadline,
            "the lag gauge shows {} while the real lag is 250",
            thread.lag(&tp)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The consumer's report for readiness says the same.
    let load = thread.wait("a load report", |e| match e {
        ConsumerEvent::Loads(loads) => loads
            .into_iter()
            .find(|l| l.tp == tp && l.high == NextOffset(250) && l.dispatched.is_some()),
        _ => None,
    });
    assert_eq!(load.high, NextOffset(250));
    assert!(
        load.dispatched.is_some_and(|r| r < NextOffset(50))
            && load.fetched.is_some_and(|f| f < NextOffset(250)),
        "{load:?}"
    );
}

/// Every log line of this test binary's threads, as JSON objects with their fields at the top
/// level (the consumer thread logs from its own thread, so the subscriber is global).
fn captured_logs() -> Vec<serde_json::Value> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    let buffer = LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || Capture(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        buffer
    });
    let bytes = buffer.lock().expect("logs").clone();
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A commit the broker refuses is logged with its reason (the consumer thread makes
/// every commit of both delivery modes). The refusal is made certain, not raced: member `a`
/// holds its revoke callback open (a coordinator that has not seen the revoke yet), so it
/// cannot rejoin; a third member's join then makes the broker wait `a`'s rebalance timeout
/// (`max.poll.interval.ms`) for it and drop it from the group. Once another member owns the
/// partition `a` kept, `a` commits that partition with the membership it no longer has.
#[test]
fn a_commit_the_broker_refuses_is_logged_with_its_partition_offset_and_reason() {
    captured_logs();
    let bootstrap = KafkaBroker::shared();
    let topic = topic_with(bootstrap, "refused", 2, 5);
    let group = unique_name("refused");
    let mut a = Thread::spawn_with(
        bootstrap,
        &group,
        &topic,
        Arc::default(),
        // The shortest rebalance timeout librdkafka accepts (not below the session timeout).
        &[("max.poll.interval.ms", "6000")],
        // Well past the broker's rebalance timeout: the callback stays open until the test
        // releases it.
        Duration::from_secs(60),
    );
    assert_eq!(assigned(&mut a).len(), 2);
    let mut b = Thread::spawn(bootstrap, &group, &topic, Arc::default());
    let revoked = a.wait("a's revoke", |e| match e {
        ConsumerEvent::RevokeBegan { partitions, .. } => Some(partitions),
        _ => None,
    });
    let moved = revoked[0].clone();
    let kept = TopicPartition::new(&topic, 1 - moved.partition);
    let mut c = Thread::spawn(bootstrap, &group, &topic, Arc::default());
    let started = Instant::now();
    'out: loop {
        for thread in [&mut b, &mut c] {
            while let Ok(event) = thread.events.try_recv() {
                if matches!(&event, ConsumerEvent::Assigned(list) if list.iter().any(|(tp, _)| *tp == kept))
                {
                    break 'out;
                }
            }
        }
        assert!(
            started.elapsed() < WAIT,
            "the broker never gave a's partition to another member"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    a.send(ConsumerCommand::Commit {
        commit: CommitId(7),
        entries: vec![CommitEntry {
            tp: kept.clone(),
            offset: NextOffset(3),
            metadata: String::new(),
        }],
    });
    let outcome = a.wait("the refused commit's answer", |e| match e {
        ConsumerEvent::CommitDone {
            commit: CommitId(7),
            outcome,
        } => Some(outcome),
        _ => None,
    });
    let CommitOutcome::PerPartition(results) = outcome else {
        panic!("answered per partition: {outcome:?}")
    };
    let [(tp, Err(error))] = &results[..] else {
        panic!("the commit was refused: {results:?}")
    };
    assert_eq!(*tp, kept);
    assert_ne!(
        committed(bootstrap, &group, &kept),
        Some(3),
        "nothing landed"
    );
    let logged: Vec<serde_json::Value> = captured_logs()
        .into_iter()
        .filter(|l| {
            l["message"] == "kafka commit failed for partition"
                && l["partition"] == kept.to_string()
        })
        .collect();
    let [line] = &logged[..] else {
        panic!("one log line for the refused commit: {logged:?}")
    };
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["commit"], 7, "{line}");
    assert_eq!(line["offset"], 3, "{line}");
    let reason = line["reason"].as_str().unwrap_or_default();
    assert!(
        !reason.is_empty() && error.to_string().contains(reason),
        "the line gives the broker's reason ({error}): {line}"
    );
    // End a's callback; a then learns it lost the partition it kept, and releases it too.
    a.send(ConsumerCommand::RevokeSeen);
    a.send(ConsumerCommand::Release { tp: moved });
    a.wait("a's loss of the partition it kept", |e| match e {
        ConsumerEvent::RevokeBegan { partitions, .. } if partitions.contains(&kept) => Some(()),
        _ => None,
    });
    a.send(ConsumerCommand::RevokeSeen);
    a.send(ConsumerCommand::Release { tp: kept });
}
