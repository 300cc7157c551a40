//! The mechanism the checkpoint protocol rests on (docs/architecture.md#the-checkpoint), checked
//! against a real broker: a committed offset carries its metadata to the next owner of the
//! partition, and the broker's metadata limit rejects an oversized checkpoint for that partition
//! alone.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, RebalanceProtocol,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};

use support::kafka::{
    KafkaBroker, consumer_config, consumer_config_kip848, create_topic_blocking,
    produce_to_partition, producer, unique_name,
};

/// What a consumer saw in its assign callbacks, copied out of librdkafka's lists (a list kept
/// alive past the consumer would hang its drop, crates.md §1.7).
#[derive(Default)]
struct AssignLog {
    /// (partition, committed offset, committed metadata), read inside the assign callback.
    committed: Mutex<Vec<(i32, Offset, String)>>,
    /// Per assign callback: the rebalance protocol (`RebalanceProtocol` has no `PartialEq`)
    /// and the partitions added.
    assignments: Mutex<Vec<(&'static str, Vec<i32>)>>,
    errors: Mutex<Vec<String>>,
}

impl ClientContext for AssignLog {}

impl ConsumerContext for AssignLog {
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Assign(assigned) = rebalance else {
            return;
        };
        let protocol = match consumer.rebalance_protocol() {
            RebalanceProtocol::Cooperative => "cooperative",
            RebalanceProtocol::Eager => "eager",
            RebalanceProtocol::None => "none",
        };
        let mut added: Vec<i32> = assigned.elements().iter().map(|e| e.partition()).collect();
        added.sort_unstable();
        self.assignments.lock().unwrap().push((protocol, added));
        // A fresh list rather than a clone of librdkafka's: nothing of the callback's list may
        // escape it.
        let mut query = TopicPartitionList::new();
        for e in assigned.elements() {
            query.add_partition(e.topic(), e.partition());
        }
        match consumer.committed_offsets(query, Duration::from_secs(10)) {
            Ok(tpl) => {
                let mut out = self.committed.lock().unwrap();
                for e in tpl.elements() {
                    out.push((e.partition(), e.offset(), e.metadata().to_owned()));
                }
            }
            Err(e) => self.errors.lock().unwrap().push(e.to_string()),
        }
    }
}

fn assigned_partitions<C: ConsumerContext>(c: &BaseConsumer<C>) -> Vec<i32> {
    let tpl = c.assignment().expect("assignment");
    let mut parts: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
    parts.sort_unstable();
    parts
}

/// A group member and what its polls returned.
struct Member {
    consumer: BaseConsumer<AssignLog>,
    /// The first record polled per partition: (offset, payload).
    first_record: BTreeMap<i32, (i64, Vec<u8>)>,
    errors: Vec<KafkaError>,
}

impl Member {
    fn join(bootstrap: &str, group: &str, topic: &str) -> Member {
        Member::join_with(&consumer_config(bootstrap, group), topic)
    }

    fn join_with(config: &ClientConfig, topic: &str) -> Member {
        let consumer: BaseConsumer<AssignLog> = config
            .create_with_context(AssignLog::default())
            .expect("consumer");
        consumer.subscribe(&[topic]).expect("subscribe");
        Member {
            consumer,
            first_record: BTreeMap::new(),
            errors: Vec::new(),
        }
    }

    fn poll_once(&mut self) {
        match self.consumer.poll(Duration::from_millis(50)) {
            None => {}
            Some(Ok(m)) => {
                self.first_record
                    .entry(m.partition())
                    .or_insert_with(|| (m.offset(), m.payload().unwrap_or_default().to_vec()));
            }
            Some(Err(e)) => self.errors.push(e),
        }
    }

    fn assigned(&self) -> Vec<i32> {
        assigned_partitions(&self.consumer)
    }
}

/// Polls every member (a cooperative rebalance needs all of them to poll) until `done`.
fn poll_until(
    members: &mut [&mut Member],
    what: &str,
    mut done: impl FnMut(&[&mut Member]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(members) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        for m in members.iter_mut() {
            m.poll_once();
        }
    }
}

/// Checkpoint-shaped metadata (docs/architecture.md#the-checkpoint) that differs per partition.
fn checkpoint_metadata(partition: i32, next_offset: i64) -> String {
    format!(
        r#"{{"v":1,"s":"Cg{partition}stream-{partition}","t":"00ff00ff00ff00ff","r":{},"f":0}}"#,
        next_offset - 1
    )
}

#[test]
fn committed_offsets_with_metadata_reach_the_next_group_member_after_a_cooperative_rebalance() {
    const PARTITIONS: i32 = 3;
    const RECORDS: i64 = 10;
    let bootstrap = KafkaBroker::shared();
    let topic = unique_name("smoke-handover");
    let group = unique_name("smoke-handover-group");
    create_topic_blocking(bootstrap, &topic, PARTITIONS);

    let producer = producer(bootstrap);
    for p in 0..PARTITIONS {
        let values: Vec<Vec<u8>> = (0..RECORDS)
            .map(|i| format!("p{p}-o{i}").into_bytes())
            .collect();
        let records: Vec<(&[u8], &[u8])> = values.iter().map(|v| (&b"k"[..], &v[..])).collect();
        let offsets = produce_to_partition(&producer, &topic, p, &records);
        assert_eq!(offsets, (0..RECORDS).collect::<Vec<_>>());
    }

    // Committed offset K = the next offset to consume; a different K per partition.
    let expected: BTreeMap<i32, (i64, String)> = (0..PARTITIONS)
        .map(|p| {
            let k = 3 + i64::from(p);
            (p, (k, checkpoint_metadata(p, k)))
        })
        .collect();

    let mut first = Member::join(bootstrap, &group, &topic);
    // A new group has nothing committed. With auto.offset.reset=error librdkafka does not pick a
    // start position: it reports an error (one per partition, but rust-rdkafka's error does not say
    // which partition) and fetches nothing, so the daemon must choose the start position itself
    // when the assign callback finds no committed offset (docs/architecture.md, invariant 7).
    poll_until(
        &mut [&mut first],
        "the first member to own every partition and report that none has an offset",
        |m| {
            m[0].assigned().len() == PARTITIONS as usize && m[0].errors.len() >= PARTITIONS as usize
        },
    );
    for e in &first.errors {
        assert_eq!(
            e,
            &KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset)
        );
    }
    assert!(first.first_record.is_empty(), "{:?}", first.first_record);
    {
        let log = first.consumer.context();
        assert_eq!(
            log.assignments.lock().unwrap().as_slice(),
            &[("cooperative", vec![0, 1, 2])]
        );
        let mut seen = log.committed.lock().unwrap().clone();
        seen.sort_by_key(|(p, _, _)| *p);
        let none: Vec<_> = (0..PARTITIONS)
            .map(|p| (p, Offset::Invalid, String::new()))
            .collect();
        assert_eq!(seen, none, "no committed offset, empty metadata");
    }

    {
        let mut tpl = TopicPartitionList::new();
        for (p, (k, metadata)) in &expected {
            let mut e = tpl.add_partition(&topic, *p);
            e.set_offset(Offset::Offset(*k)).expect("offset");
            e.set_metadata(metadata);
        }
        first
            .consumer
            .commit(&tpl, CommitMode::Sync)
            .expect("commit");
    }
    let read_back: BTreeMap<i32, (i64, String)> = {
        let tpl = first
            .consumer
            .committed(Duration::from_secs(10))
            .expect("committed");
        tpl.elements()
            .iter()
            .map(|e| {
                let Offset::Offset(k) = e.offset() else {
                    panic!("partition {} has no committed offset", e.partition())
                };
                (e.partition(), (k, e.metadata().to_owned()))
            })
            .collect()
    };
    assert_eq!(
        read_back, expected,
        "the committing member reads its own checkpoint"
    );

    // The second member joins while the first still owns everything: the cooperative assignor
    // moves some partitions now and the rest when the first member leaves.
    let mut second = Member::join(bootstrap, &group, &topic);
    poll_until(
        &mut [&mut first, &mut second],
        "the second member to get a partition",
        |m| !m[1].assigned().is_empty(),
    );
    let moved_first = second.assigned();
    assert!(
        moved_first.len() < PARTITIONS as usize,
        "cooperative-sticky leaves the first member some partitions, moved {moved_first:?}"
    );
    // The first member leaves the group (close = LeaveGroup); none of its lists is alive.
    drop(first);
    poll_until(
        &mut [&mut second],
        "the second member to own every partition and read from each",
        |m| {
            m[0].assigned().len() == PARTITIONS as usize
                && m[0].first_record.len() == PARTITIONS as usize
        },
    );

    assert!(second.errors.is_empty(), "{:?}", second.errors);
    let log = second.consumer.context();
    assert!(log.errors.lock().unwrap().is_empty(), "{:?}", log.errors);
    assert_eq!(
        log.assignments.lock().unwrap().as_slice(),
        &[
            // cooperative: the first rebalance only revokes from the first member
            ("cooperative", vec![]),
            ("cooperative", moved_first.clone()),
            (
                "cooperative",
                (0..PARTITIONS)
                    .filter(|p| !moved_first.contains(p))
                    .collect()
            ),
        ],
        "incremental assignments: one while the first member lived, one after it left"
    );
    let seen_in_callback: BTreeMap<i32, (i64, String)> = log
        .committed
        .lock()
        .unwrap()
        .iter()
        .map(|(p, offset, metadata)| {
            let Offset::Offset(k) = offset else {
                panic!("partition {p}: no committed offset in the assign callback: {offset:?}")
            };
            (*p, (*k, metadata.clone()))
        })
        .collect();
    assert_eq!(seen_in_callback, expected);

    // The new owner resumes exactly at each committed offset.
    for (p, (offset, payload)) in &second.first_record {
        let k = expected[p].0;
        assert_eq!(*offset, k, "partition {p} resumes at its committed offset");
        assert_eq!(payload, format!("p{p}-o{k}").as_bytes());
    }
}

#[test]
fn with_the_kip848_group_protocol_committed_metadata_also_reaches_the_next_owner() {
    const PARTITIONS: i32 = 3;
    let bootstrap = KafkaBroker::shared();
    let topic = unique_name("smoke-kip848");
    let group = unique_name("smoke-kip848-group");
    create_topic_blocking(bootstrap, &topic, PARTITIONS);
    let producer = producer(bootstrap);
    for p in 0..PARTITIONS {
        let values: Vec<Vec<u8>> = (0..5).map(|i| format!("p{p}-o{i}").into_bytes()).collect();
        let records: Vec<(&[u8], &[u8])> = values.iter().map(|v| (&b"k"[..], &v[..])).collect();
        produce_to_partition(&producer, &topic, p, &records);
    }
    let expected: BTreeMap<i32, (i64, String)> = (0..PARTITIONS)
        .map(|p| {
            let k = 1 + i64::from(p);
            (p, (k, checkpoint_metadata(p, k)))
        })
        .collect();
    let config = consumer_config_kip848(bootstrap, &group);

    let mut first = Member::join_with(&config, &topic);
    poll_until(
        &mut [&mut first],
        "the first member to own every partition",
        |m| m[0].assigned().len() == PARTITIONS as usize,
    );
    {
        let mut tpl = TopicPartitionList::new();
        for (p, (k, metadata)) in &expected {
            let mut e = tpl.add_partition(&topic, *p);
            e.set_offset(Offset::Offset(*k)).expect("offset");
            e.set_metadata(metadata);
        }
        first
            .consumer
            .commit(&tpl, CommitMode::Sync)
            .expect("commit");
    }
    drop(first);

    let mut second = Member::join_with(&config, &topic);
    poll_until(
        &mut [&mut second],
        "the second member to own every partition and read from each",
        |m| {
            m[0].assigned().len() == PARTITIONS as usize
                && m[0].first_record.len() == PARTITIONS as usize
        },
    );
    assert!(second.errors.is_empty(), "{:?}", second.errors);
    let log = second.consumer.context();
    assert!(log.errors.lock().unwrap().is_empty(), "{:?}", log.errors);
    let seen: BTreeMap<i32, (i64, String)> = log
        .committed
        .lock()
        .unwrap()
        .iter()
        .map(|(p, offset, metadata)| {
            let Offset::Offset(k) = offset else {
                panic!("partition {p}: no committed offset in the assign callback: {offset:?}")
            };
            (*p, (*k, metadata.clone()))
        })
        .collect();
    assert_eq!(seen, expected);
    for (p, (offset, _)) in &second.first_record {
        assert_eq!(
            *offset, expected[p].0,
            "partition {p} resumes at its committed offset"
        );
    }
    // librdkafka reports KIP-848 assignments as cooperative (incremental) ones
    let assignments = log.assignments.lock().unwrap();
    assert!(
        assignments
            .iter()
            .all(|(protocol, _)| *protocol == "cooperative"),
        "{assignments:?}"
    );
    let mut added: Vec<i32> = assignments.iter().flat_map(|(_, ps)| ps.clone()).collect();
    added.sort_unstable();
    assert_eq!(added, (0..PARTITIONS).collect::<Vec<_>>());
}

#[test]
fn checkpoint_metadata_over_the_broker_limit_fails_only_its_own_partition() {
    // Broker default offset.metadata.max.bytes = 4096, checked as `length > max`.
    const LIMIT: usize = 4096;
    let bootstrap = KafkaBroker::shared();
    let topic = unique_name("smoke-metadata-limit");
    let group = unique_name("smoke-metadata-limit-group");
    create_topic_blocking(bootstrap, &topic, 2);

    // Manual assignment: no group membership is needed to commit, and none is wanted here.
    let consumer: BaseConsumer = consumer_config(bootstrap, &group)
        .create()
        .expect("consumer");
    let commit = |entries: &[(i32, i64, String)]| -> Result<(), KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for (p, k, metadata) in entries {
            let mut e = tpl.add_partition(&topic, *p);
            e.set_offset(Offset::Offset(*k)).expect("offset");
            e.set_metadata(metadata);
        }
        consumer.commit(&tpl, CommitMode::Sync)
    };
    let committed = || -> Vec<(i32, Offset, String)> {
        let mut query = TopicPartitionList::new();
        query.add_partition(&topic, 0);
        query.add_partition(&topic, 1);
        let tpl = consumer
            .committed_offsets(query, Duration::from_secs(10))
            .expect("read committed offsets");
        tpl.elements()
            .iter()
            .map(|e| (e.partition(), e.offset(), e.metadata().to_owned()))
            .collect()
    };

    commit(&[(0, 1, "small-0".into()), (1, 1, "small-1".into())]).expect("small commit");

    // One request: partition 0 exactly at the limit, partition 1 one byte over it.
    let at_limit = "a".repeat(LIMIT);
    let over_limit = "b".repeat(LIMIT + 1);
    let result = commit(&[(0, 5, at_limit.clone()), (1, 5, over_limit)]);

    // Finding (Kafka 4.1, librdkafka 2.12.1): the broker answers per partition; the request
    // as a whole fails with OFFSET_METADATA_TOO_LARGE (librdkafka reports one error code for
    // the list), yet the partition at the limit IS committed and the oversized one keeps its
    // previous checkpoint. So a failed commit says nothing about which partitions committed:
    // the coordinator must read them back (docs/architecture.md#the-cycle, step 2).
    assert_eq!(
        result,
        Err(KafkaError::ConsumerCommit(
            RDKafkaErrorCode::OffsetMetadataTooLarge
        ))
    );
    assert_eq!(
        committed(),
        vec![
            (0, Offset::Offset(5), at_limit),
            (1, Offset::Offset(1), "small-1".to_owned()),
        ]
    );
}

#[test]
fn a_committed_checkpoint_survives_a_broker_crash_and_restart_on_the_same_address() {
    // Its own broker: killing the shared one would break the other tests.
    let broker = KafkaBroker::start_private();
    let bootstrap = broker.bootstrap().to_owned();
    let topic = unique_name("smoke-restart");
    let group = unique_name("smoke-restart-group");
    create_topic_blocking(&bootstrap, &topic, 1);
    let metadata = checkpoint_metadata(0, 7);

    let read_committed = |consumer: &BaseConsumer| -> (Offset, String) {
        let mut query = TopicPartitionList::new();
        query.add_partition(&topic, 0);
        let tpl = consumer
            .committed_offsets(query, Duration::from_secs(30))
            .expect("read committed offsets");
        let e = tpl.elements().pop().expect("one partition");
        (e.offset(), e.metadata().to_owned())
    };
    // The first commit of a fresh broker may meet its `__consumer_offsets` still loading
    // (NOT_COORDINATOR under load); the helper waits that out, and any other refusal fails here.
    support::kafka::commit_outside_group(&bootstrap, &group, &topic, 0, 7, Some(&metadata))
        .expect("commit");

    // SIGKILL: the commit was acknowledged, so it is in __consumer_offsets' log already.
    broker.kill();
    broker.start_again();

    let consumer: BaseConsumer = consumer_config(&bootstrap, &group)
        .create()
        .expect("consumer after the restart");
    assert_eq!(read_committed(&consumer), (Offset::Offset(7), metadata));
}
