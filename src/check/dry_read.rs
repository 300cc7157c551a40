//! The dry run's records: the newest N of each partition, read by assignment (no group
//! membership) and never committed.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::{Finding, redact};
use crate::config::defaults;
use kbq_core::protocol::TopicPartition;

/// How long the dry run waits for the newest records of every partition.
const DRY_RUN_DEADLINE: Duration = Duration::from_secs(30);

/// One record of the dry run.
pub(super) struct Sample {
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Reads the newest `records` of each partition by assignment: no group membership, no commit.
pub(super) fn dry_read(
    consumer: &BaseConsumer,
    partitions: &[TopicPartition],
    records: i64,
    samples: &mut BTreeMap<String, Vec<Sample>>,
    findings: &mut Vec<Finding>,
) {
    let mut assignment = TopicPartitionList::new();
    let mut ends: HashMap<(String, i32), i64> = HashMap::new();
    for tp in partitions {
        match consumer.fetch_watermarks(&tp.topic, tp.partition, defaults::KAFKA_REQUEST_TIMEOUT) {
            Ok((low, high)) if high > low => {
                let start = low.max(high - records);
                ends.insert((tp.topic.clone(), tp.partition), high);
                let _ =
                    assignment.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(start));
            }
            Ok(_) => {}
            Err(e) => findings.push(Finding::fail(
                format!("kafka topic {} read", tp.topic),
                format!("cannot read the offsets of {tp}: {}", redact(&e)),
                format!(
                    "grant DESCRIBE and READ on topic {} to the principal",
                    tp.topic
                ),
            )),
        }
    }
    for tp in partitions {
        samples.entry(tp.topic.clone()).or_default();
    }
    if ends.is_empty() {
        return;
    }
    if let Err(e) = consumer.assign(&assignment) {
        findings.push(Finding::fail(
            "kafka read",
            format!("cannot assign the partitions: {}", redact(&e)),
            "none known: report it",
        ));
        return;
    }
    let deadline = Instant::now() + DRY_RUN_DEADLINE;
    let mut denied: BTreeMap<String, String> = BTreeMap::new();
    while !ends.is_empty() && Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = match message {
            Ok(m) => m,
            Err(KafkaError::MessageConsumption(code)) => {
                // A fetch error names no topic here: it applies to every topic still read.
                for (topic, _) in ends.keys() {
                    denied.insert(topic.clone(), format!("{code:?}"));
                }
                if format!("{code:?}").contains("Authorization") {
                    break;
                }
                continue;
            }
            Err(_) => continue,
        };
        let key = (m.topic().to_string(), m.partition());
        let sample = Sample {
            partition: m.partition(),
            offset: m.offset(),
            timestamp_ms: m.timestamp().to_millis(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers: m
                .headers()
                .map(|hs| {
                    hs.iter()
                        .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                        .collect()
                })
                .unwrap_or_default(),
        };
        samples.entry(key.0.clone()).or_default().push(sample);
        if ends.get(&key).is_some_and(|end| m.offset() + 1 >= *end) {
            ends.remove(&key);
        }
    }
    let _ = consumer.unassign();
    for (topic, read) in samples.iter() {
        let item = format!("kafka topic {topic} read");
        match denied.get(topic) {
            Some(e) if read.is_empty() => findings.push(Finding::fail(
                item,
                format!("the brokers refuse the fetch ({e})"),
                format!("grant READ on topic {topic} to the sink's principal"),
            )),
            _ => findings.push(Finding::ok(
                item,
                format!(
                    "{} of its newest records read, without joining the group or committing",
                    read.len()
                ),
            )),
        }
    }
}
