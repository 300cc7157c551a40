//! Kafka: the brokers with the configured security, each routed topic, the consumer group and
//! the dead-letter topic, and what the principal may do to each, as the brokers report it
//! (their *authorized operations*, `crate::kafka::authorized`): READ on the group (joining and
//! committing), READ on each routed topic, WRITE on the dead-letter topic. Nothing is written to
//! learn it: no OffsetCommit, no produce.

use std::collections::{BTreeMap, HashMap};

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::dry_read::{self, Sample};
use super::{Finding, redact};
use crate::backoff;
use crate::config::{Config, TopicPattern, defaults};
use crate::inspect::{group_reader, read_committed_retrying};
use crate::kafka::authorized::{self, Answer, GroupAnswer, Operation, Refusal};
use kbq_core::protocol::TopicPartition;

/// Kafka: the brokers, the topics, the group, the dead-letter topic, and the newest records of
/// each partition, read by assignment (no group membership) and never committed.
pub(super) fn check_kafka(
    config: &Config,
    records: i64,
    findings: &mut Vec<Finding>,
) -> BTreeMap<String, Vec<Sample>> {
    let mut samples = BTreeMap::new();
    let Some((consumer, cluster)) = connect(config, findings) else {
        return samples;
    };
    let kafka = &config.kafka;
    let Some(routed) = routed_topics(config, &cluster, findings) else {
        return samples;
    };
    for topic in &routed {
        findings.push(topic_line(topic, &cluster));
        findings.push(route_line(config, topic));
    }
    let dead_letter = config.dead_letter.as_ref().and_then(|d| d.topic.as_ref());
    let granted = topic_permissions(&consumer, &routed, dead_letter);
    let readable: Vec<TopicPartition> = routed
        .iter()
        .filter(|t| {
            cluster.partitions.contains_key(*t) && may_read(t, granted.get(*t), records, findings)
        })
        .filter_map(|t| cluster.partitions.get(t).map(|p| (t, p)))
        .flat_map(|(t, p)| p.iter().map(move |p| TopicPartition::new(t, *p)))
        .collect();
    let group = describe_group(&consumer, &kafka.group_id);
    if !readable.is_empty() {
        findings.push(group_offsets(&consumer, &kafka.group_id, &group, &readable));
    }
    findings.push(group_commit(&kafka.group_id, group));
    if let Some(topic) = dead_letter {
        let item = format!("dead-letter topic {topic}");
        match (cluster.partitions.get(topic), cluster.errors.get(topic)) {
            (Some(_), _) => {
                findings.push(Finding::ok(item.clone(), "exists"));
                findings.push(may_write(topic, granted.get(topic)));
            }
            (None, e) => findings.push(Finding::fail(
                item,
                e.map_or("does not exist".to_string(), |e| format!("the brokers answer {e}")),
                format!(
                    "create topic {topic} and grant WRITE and DESCRIBE on it to the sink's principal"
                ),
            )),
        }
    }
    if records > 0 && !readable.is_empty() {
        dry_read::dry_read(&consumer, &readable, records, &mut samples, findings);
    }
    samples
}

/// The topics the metadata shows: their partitions, or the error the brokers gave for them.
struct Cluster {
    partitions: BTreeMap<String, Vec<i32>>,
    errors: HashMap<String, String>,
}

/// A client with the sink's consumer properties, and the cluster's metadata through it.
fn connect(config: &Config, findings: &mut Vec<Finding>) -> Option<(BaseConsumer, Cluster)> {
    let security = "kafka.bootstrap_servers and the security settings of kafka.properties \
                    (security.protocol, sasl.mechanism, sasl.username/password, ssl.ca.location)";
    let consumer = match group_reader(config) {
        Ok(c) => c,
        Err(e) => {
            findings.push(Finding::fail("kafka", format!("{e:#}"), security));
            return None;
        }
    };
    let metadata = match consumer.fetch_metadata(None, defaults::KAFKA_REQUEST_TIMEOUT) {
        Ok(m) => m,
        Err(e) => {
            findings.push(Finding::fail(
                "kafka",
                format!("cannot read the cluster's metadata: {}", redact(&e)),
                format!("check {security}, and that the brokers are reachable from here"),
            ));
            return None;
        }
    };
    findings.push(Finding::ok(
        "kafka",
        format!(
            "{} broker(s) reachable with the configured security",
            metadata.brokers().len()
        ),
    ));
    let mut cluster = Cluster {
        partitions: BTreeMap::new(),
        errors: HashMap::new(),
    };
    for t in metadata.topics() {
        match t.error() {
            Some(e) => {
                cluster
                    .errors
                    .insert(t.name().to_string(), format!("{e:?}"));
            }
            None => {
                let ids = t.partitions().iter().map(|p| p.id()).collect();
                cluster.partitions.insert(t.name().to_string(), ids);
            }
        }
    }
    drop(metadata);
    Some((consumer, cluster))
}

/// The configured topics, or those `topic_pattern` matches; `None` for a pattern that does
/// not compile.
fn routed_topics(
    config: &Config,
    cluster: &Cluster,
    findings: &mut Vec<Finding>,
) -> Option<Vec<String>> {
    let kafka = &config.kafka;
    let Some(pattern) = &kafka.topic_pattern else {
        return Some(kafka.topics.clone());
    };
    let matcher = match TopicPattern::compile(&kafka.subscription()[0]) {
        Ok(m) => m,
        Err(e) => {
            findings.push(Finding::fail("kafka.topic_pattern", e, "fix the pattern"));
            return None;
        }
    };
    let matched: Vec<String> = cluster
        .partitions
        .keys()
        .filter(|t| !crate::config::is_internal_topic(t) && matcher.matches(t))
        .cloned()
        .collect();
    if matched.is_empty() {
        findings.push(Finding::fail(
            "kafka.topic_pattern",
            format!("`{pattern}` matches no topic the principal can describe"),
            "create a matching topic, fix the pattern, or grant DESCRIBE on the topics",
        ));
    }
    Some(matched)
}

/// A routed topic as the metadata shows it.
fn topic_line(topic: &str, cluster: &Cluster) -> Finding {
    let item = format!("kafka topic {topic}");
    match (cluster.partitions.get(topic), cluster.errors.get(topic)) {
        (Some(p), _) => Finding::ok(item, format!("{} partition(s)", p.len())),
        (None, Some(e)) if e.contains("Authorization") => Finding::fail(
            item,
            format!("the principal may not describe it ({e})"),
            format!("grant DESCRIBE and READ on topic {topic} to the sink's principal"),
        ),
        (None, Some(e)) => Finding::fail(
            item,
            format!("the brokers answer {e}"),
            "create the topic, or fix kafka.topics",
        ),
        (None, None) => Finding::fail(
            item,
            "does not exist",
            "create the topic, or fix kafka.topics",
        ),
    }
}

/// The group as the brokers describe it, asked again on the [`backoff::GROUP_COORDINATOR`]
/// schedule while its coordinator loads or moves (a fresh cluster answered NotCoordinator to the
/// first DescribeGroups), as `inspect` retries its offset reads.
fn describe_group(consumer: &BaseConsumer, group: &str) -> Result<GroupAnswer, Refusal> {
    let mut backoff = backoff::GROUP_COORDINATOR;
    loop {
        let described =
            authorized::group(consumer.client(), group, defaults::KAFKA_REQUEST_TIMEOUT);
        let moving = match &described {
            Ok(GroupAnswer {
                granted: Err(e), ..
            })
            | Err(e) => e.is_coordinator_moving(),
            Ok(_) => false,
        };
        if !moving || backoff.attempts() + 1 >= backoff::GROUP_COORDINATOR_ATTEMPTS {
            return described;
        }
        let pause = backoff.next_delay();
        tracing::debug!(
            attempt = backoff.attempts(),
            "the group's coordinator is loading or moving, describing it again"
        );
        std::thread::sleep(pause);
    }
}

/// Where `topic` is written: its route and the table it resolves to.
fn route_line(config: &Config, topic: &str) -> Finding {
    let route = config.route_for(topic);
    let item = format!("route {topic}");
    if route.table.is_empty() || route.dataset.is_empty() {
        return Finding::fail(
            item,
            format!(
                "{} gives `{}`: a template group matched nothing in the topic",
                route.path,
                route.qualified_table()
            ),
            format!(
                "make the groups {}.table and .dataset name match in every topic",
                route.path
            ),
        );
    }
    Finding::ok(
        item,
        format!("writes {} ({})", route.qualified_table(), route.path),
    )
}

/// The group's committed offsets of the readable partitions (an OffsetFetch); the coordinator
/// may still be loading or moving, so it is retried as `inspect` does. A group the principal
/// may not describe is not asked: its OffsetFetch would only be refused, each retry after a
/// request timeout.
fn group_offsets(
    consumer: &BaseConsumer,
    group: &str,
    described: &Result<GroupAnswer, Refusal>,
    readable: &[TopicPartition],
) -> Finding {
    let item = format!("kafka group {group}");
    if let Ok(GroupAnswer {
        granted: Err(e), ..
    }) = described
        && e.is_authorization()
    {
        return Finding::fail(
            item,
            format!("the principal may not describe the group ({e})"),
            format!("grant READ on group {group} to the sink's principal (it implies DESCRIBE)"),
        );
    }
    match read_committed_retrying(consumer, readable) {
        Ok(read) => {
            let with = read.values().filter(|r| r.is_some()).count();
            Finding::ok(
                item,
                format!(
                    "committed offsets readable ({with} of {} partitions have a checkpoint)",
                    read.len()
                ),
            )
        }
        Err(e) => Finding::fail(
            item,
            format!("cannot read its committed offsets: {e:#}"),
            format!("grant DESCRIBE and READ on group {group} to the sink's principal"),
        ),
    }
}

/// What the brokers report the principal may do to each routed topic and to the dead-letter
/// topic; empty when they cannot be asked (the request's error is then in no line: the topic
/// lines above already say what the metadata showed, and the dry read shows a refused fetch).
fn topic_permissions(
    consumer: &BaseConsumer,
    routed: &[String],
    dead_letter: Option<&String>,
) -> HashMap<String, Answer> {
    let names: Vec<&str> = routed
        .iter()
        .chain(dead_letter)
        .map(String::as_str)
        .collect();
    if names.is_empty() {
        return HashMap::new();
    }
    match authorized::topics(consumer.client(), &names, defaults::KAFKA_REQUEST_TIMEOUT) {
        Ok(answers) => answers.into_iter().collect(),
        Err(e) => {
            tracing::warn!(error = %e, "the brokers did not report the topics' authorized operations");
            HashMap::new()
        }
    }
}

/// `true` when the dry read may read `topic`: READ granted, or not reported (the fetch then
/// tells). A topic the principal may describe but not read fails here, by name.
fn may_read(
    topic: &str,
    granted: Option<&Answer>,
    records: i64,
    findings: &mut Vec<Finding>,
) -> bool {
    let item = format!("kafka topic {topic} read");
    match granted {
        Some(Ok(Some(g))) if !g.allows(Operation::Read) => {
            findings.push(Finding::fail(
                item,
                "READ is not granted to the principal (the brokers' authorized operations for \
                 the topic)",
                format!("grant READ on topic {topic} to the sink's principal"),
            ));
            false
        }
        Some(Ok(Some(_))) if records == 0 => {
            findings.push(Finding::ok(item, "READ granted"));
            true
        }
        _ => true,
    }
}

/// WRITE on the dead-letter topic, as the brokers report it.
fn may_write(topic: &str, granted: Option<&Answer>) -> Finding {
    let item = format!("dead-letter topic {topic} write");
    let fix = format!("grant WRITE on topic {topic} to the sink's principal");
    match granted {
        Some(Ok(Some(g))) if g.allows(Operation::Write) => Finding::ok(item, "WRITE granted"),
        Some(Ok(Some(_))) => Finding::fail(
            item,
            "WRITE is not granted to the principal (the brokers' authorized operations for the \
             topic)",
            fix,
        ),
        Some(Ok(None)) => Finding::not_checked(
            item,
            "the brokers do not report authorized operations (Kafka before 2.3), and only a \
             produce would prove WRITE",
        ),
        Some(Err(e)) => Finding::fail(item, format!("the brokers answer {e}"), fix),
        None => Finding::not_checked(
            item,
            "the brokers did not answer for its authorized operations",
        ),
    }
}

/// READ on the group (which joining and committing need; it implies DESCRIBE), as the brokers
/// report it for the group. A group that does not exist yet is described too (state `Dead`),
/// with the operations the principal will have on it.
fn group_commit(group: &str, described: Result<GroupAnswer, Refusal>) -> Finding {
    let item = format!("kafka group {group} commit");
    let fix = format!("grant READ on group {group} to the sink's principal");
    match described {
        Ok(answer) => match answer.granted {
            Ok(Some(g)) if g.allows(Operation::Read) => Finding::ok(
                item,
                format!(
                    "READ granted (join and commit); the group is {}",
                    answer.state
                ),
            ),
            Ok(Some(g)) if g.allows(Operation::Describe) => Finding::fail(
                item,
                "the principal may describe the group but not commit for it (READ is not \
                 granted)",
                fix,
            ),
            Ok(Some(_)) => Finding::fail(item, "no operation on the group is granted", fix),
            Ok(None) => Finding::not_checked(
                item,
                "the brokers do not report authorized operations (Kafka before 2.3), and only \
                 an OffsetCommit would prove READ (it would move the group's offsets)",
            ),
            Err(e) if e.is_authorization() => Finding::fail(
                item,
                format!("the principal may not describe the group ({e})"),
                fix,
            ),
            Err(e) => Finding::fail(item, format!("the brokers answer {e}"), fix),
        },
        Err(e) => Finding::fail(
            item,
            format!("cannot describe the group: {e}"),
            "check that the brokers are reachable and the group coordinator is available",
        ),
    }
}
