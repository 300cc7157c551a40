//! `check -c config.yaml`: the config against the real services, before the first `run`
//! (docs/operations.md, `check`). Read-only: it joins no group, commits nothing, produces
//! nothing, creates and patches no table and writes no row. Each item prints `ok`, or `FAIL`
//! with what is wrong and how to fix it; the exit code is 0 only when no item fails.
//!
//! What it cannot see without writing is said as such (`not checked`): the group's commit
//! permission (an OffsetCommit would move the group's offsets) and the dead-letter topic's
//! write permission (a produce would add a record; Kafka has no read-only test of WRITE, and
//! DescribeAcls needs a cluster permission the sink's principal should not hold).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use crate::bigquery::rest_client::{RestClient, TableReference};
use crate::config::{Config, SchemaUpdate, TopicPattern, defaults};
use crate::inspect::{group_reader, read_committed_retrying};
use crate::ops::metrics::Metrics;
use crate::registry::{RegistryConfig, SchemaRegistry, SubjectError};
use crate::tables::router::Router;
use crate::writer::plan_source::PlanLookupError;
use kbq_core::bigquery_facts::SINK_TABLE_PERMISSIONS;
use kbq_core::offsets::KafkaOffset;
use kbq_core::protocol::TopicPartition;
use kbq_transcode::{KafkaHeader, KafkaMetadata};

/// How long the dry run waits for the newest records of every partition.
const DRY_RUN_DEADLINE: Duration = Duration::from_secs(30);

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub item: String,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok(String),
    /// What the check could not verify without writing, and why.
    NotChecked(String),
    Fail {
        what: String,
        fix: String,
    },
}

impl Finding {
    fn ok(item: impl Into<String>, detail: impl Into<String>) -> Self {
        Finding {
            item: item.into(),
            outcome: Outcome::Ok(detail.into()),
        }
    }
    fn not_checked(item: impl Into<String>, why: impl Into<String>) -> Self {
        Finding {
            item: item.into(),
            outcome: Outcome::NotChecked(why.into()),
        }
    }
    fn fail(item: impl Into<String>, what: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            item: item.into(),
            outcome: Outcome::Fail {
                what: what.into(),
                fix: fix.into(),
            },
        }
    }
    pub fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Fail { .. })
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.outcome {
            Outcome::Ok(detail) => write!(f, "ok           {}: {detail}", self.item),
            Outcome::NotChecked(why) => write!(f, "not checked  {}: {why}", self.item),
            Outcome::Fail { what, fix } => {
                write!(
                    f,
                    "FAIL         {}: {what}\n             fix: {fix}",
                    self.item
                )
            }
        }
    }
}

/// One record of the dry run.
struct Sample {
    partition: i32,
    offset: i64,
    timestamp_ms: Option<i64>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Runs every check; `records` is the dry run's newest records per partition.
pub fn run(config: &Config, records: i64) -> Vec<Finding> {
    let mut findings = Vec::new();
    let samples = check_kafka(config, records, &mut findings);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            findings.push(Finding::fail(
                "check",
                format!("cannot start the async runtime: {e}"),
                "none: a local resource limit",
            ));
            return findings;
        }
    };
    runtime.block_on(async {
        check_registry(config, samples.keys(), &mut findings).await;
        check_bigquery(config, &samples, &mut findings).await;
    });
    findings
}

/// Kafka: the brokers, the topics, the group, the dead-letter topic, and the newest records of
/// each partition, read by assignment (no group membership) and never committed.
fn check_kafka(
    config: &Config,
    records: i64,
    findings: &mut Vec<Finding>,
) -> BTreeMap<String, Vec<Sample>> {
    let mut samples = BTreeMap::new();
    let security = "kafka.bootstrap_servers and the security settings of kafka.properties \
                    (security.protocol, sasl.mechanism, sasl.username/password, ssl.ca.location)";
    let consumer = match group_reader(config) {
        Ok(c) => c,
        Err(e) => {
            findings.push(Finding::fail("kafka", format!("{e:#}"), security));
            return samples;
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
            return samples;
        }
    };
    findings.push(Finding::ok(
        "kafka",
        format!(
            "{} broker(s) reachable with the configured security",
            metadata.brokers().len()
        ),
    ));
    let mut partitions: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    let mut topic_errors: HashMap<String, String> = HashMap::new();
    for t in metadata.topics() {
        match t.error() {
            Some(e) => {
                topic_errors.insert(t.name().to_string(), format!("{e:?}"));
            }
            None => {
                partitions.insert(
                    t.name().to_string(),
                    t.partitions().iter().map(|p| p.id()).collect(),
                );
            }
        }
    }
    let kafka = &config.kafka;
    let routed: Vec<String> = match &kafka.topic_pattern {
        Some(pattern) => {
            let matcher = match TopicPattern::compile(&kafka.subscription()[0]) {
                Ok(m) => m,
                Err(e) => {
                    findings.push(Finding::fail("kafka.topic_pattern", e, "fix the pattern"));
                    return samples;
                }
            };
            let matched: Vec<String> = partitions
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
            matched
        }
        None => kafka.topics.clone(),
    };
    for topic in &routed {
        let item = format!("kafka topic {topic}");
        match (partitions.get(topic), topic_errors.get(topic)) {
            (Some(p), _) => findings.push(Finding::ok(item, format!("{} partition(s)", p.len()))),
            (None, Some(e)) if e.contains("Authorization") => findings.push(Finding::fail(
                item,
                format!("the principal may not describe it ({e})"),
                format!("grant DESCRIBE and READ on topic {topic} to the sink's principal"),
            )),
            (None, Some(e)) => findings.push(Finding::fail(
                item,
                format!("the brokers answer {e}"),
                "create the topic, or fix kafka.topics",
            )),
            (None, None) => findings.push(Finding::fail(
                item,
                "does not exist",
                "create the topic, or fix kafka.topics",
            )),
        }
    }
    let readable: Vec<TopicPartition> = routed
        .iter()
        .filter_map(|t| partitions.get(t).map(|p| (t, p)))
        .flat_map(|(t, p)| p.iter().map(move |p| TopicPartition::new(t, *p)))
        .collect();
    let group_item = format!("kafka group {}", kafka.group_id);
    if !readable.is_empty() {
        // The coordinator may still be loading or moving: retried as `inspect` does.
        match read_committed_retrying(&consumer, &readable) {
            Ok(read) => {
                let with = read.values().filter(|r| r.is_some()).count();
                findings.push(Finding::ok(
                    group_item.clone(),
                    format!(
                        "committed offsets readable ({with} of {} partitions have a checkpoint)",
                        read.len()
                    ),
                ));
            }
            Err(e) => findings.push(Finding::fail(
                group_item.clone(),
                format!("cannot read its committed offsets: {e:#}"),
                format!(
                    "grant DESCRIBE and READ on group {} to the sink's principal",
                    kafka.group_id
                ),
            )),
        }
    }
    findings.push(Finding::not_checked(
        format!("{group_item} commit"),
        "committing needs READ on the group, which only an OffsetCommit proves (it would move \
         the group's offsets)",
    ));
    if let Some(topic) = config.dead_letter.as_ref().and_then(|d| d.topic.as_ref()) {
        let item = format!("dead-letter topic {topic}");
        match (partitions.get(topic), topic_errors.get(topic)) {
            (Some(_), _) => {
                findings.push(Finding::ok(item.clone(), "exists"));
                findings.push(Finding::not_checked(
                    format!("{item} write"),
                    "only a produce proves WRITE, and a check writes nothing",
                ));
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
    drop(metadata);
    if records > 0 && !readable.is_empty() {
        dry_read(&consumer, &readable, records, &mut samples, findings);
    }
    samples
}

/// Reads the newest `records` of each partition by assignment: no group membership, no commit.
fn dry_read(
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

fn redact(e: &KafkaError) -> String {
    format!("{:#}", crate::kafka::redact::redacted(e.clone()))
}

/// The registry answers with its credentials and CA: the subject of each topic is looked up
/// (a subject not found is an answer too).
async fn check_registry<'a>(
    config: &Config,
    topics: impl Iterator<Item = &'a String>,
    findings: &mut Vec<Finding>,
) {
    let Some(sr) = &config.schema_registry else {
        return;
    };
    let fix = "check schema_registry.url, its credentials (username/password or bearer_token) \
               and ca_file";
    let registry = match RegistryConfig::from_settings(sr)
        .and_then(|c| SchemaRegistry::new(c).map_err(anyhow::Error::from))
    {
        Ok(r) => r,
        Err(e) => {
            findings.push(Finding::fail("schema registry", format!("{e:#}"), fix));
            return;
        }
    };
    let Some(topic) = topics.into_iter().next() else {
        return;
    };
    let subject = sr.table_subject.replace("{topic}", topic);
    match registry.latest(&subject).await {
        Ok(_) => findings.push(Finding::ok(
            "schema registry",
            format!("reachable; subject {subject} has a schema"),
        )),
        Err(SubjectError::NotFound { .. }) => findings.push(Finding::ok(
            "schema registry",
            format!("reachable (subject {subject} is not registered)"),
        )),
        Err(e) => findings.push(Finding::fail("schema registry", e.to_string(), fix)),
    }
}

/// BigQuery: each routed table exists (or `create_table` would create it), the principal holds
/// the permissions the sink uses, and the dry run's records transcode against the table with
/// the plans `run` would compile (the table's schema is never patched: `schema_update` is off
/// for the check).
async fn check_bigquery(
    config: &Config,
    samples: &BTreeMap<String, Vec<Sample>>,
    findings: &mut Vec<Finding>,
) {
    let (client, rest) = match crate::bigquery::clients(config) {
        Ok(c) => c,
        Err(e) => {
            findings.push(Finding::fail(
                "bigquery",
                format!("{e:#}"),
                "check bigquery.credentials and bigquery.endpoint",
            ));
            return;
        }
    };
    let mut read_only = config.clone();
    read_only.bigquery.schema_update = SchemaUpdate::None;
    for route in &mut read_only.routes {
        route.schema_update = Some(SchemaUpdate::None);
    }
    let read_only = Arc::new(read_only);
    let router = Router::new(
        read_only.clone(),
        rest.clone(),
        client,
        Arc::new(Metrics::new()),
        crate::pipeline::group_label(&config.kafka.group_id),
    );
    let mut seen: HashMap<String, bool> = HashMap::new();
    for (topic, records) in samples {
        let settings = read_only.route_for(topic);
        let b = &read_only.bigquery;
        let table = TableReference::new(&b.project, &b.dataset, &settings.table);
        let item = format!("bigquery table {}", table.table_id);
        let exists = match seen.get(&table.resource_name()) {
            Some(exists) => *exists,
            None => {
                let exists = check_table(
                    &rest,
                    &table,
                    settings.create_table.is_some(),
                    &item,
                    findings,
                )
                .await;
                seen.insert(table.resource_name(), exists);
                exists
            }
        };
        if !exists {
            continue;
        }
        let dry = format!("dry run {topic}");
        let route = match router.resolve(topic).await {
            Ok(r) => r,
            Err(e) => {
                findings.push(Finding::fail(
                    dry,
                    format!("{e:#}"),
                    "make the table's columns fit the input schema (docs/mapping.md)",
                ));
                continue;
            }
        };
        if route.writer.cdc.is_some() {
            findings.push(Finding::not_checked(
                dry,
                "a CDC route: its records are not transcoded by the check",
            ));
            continue;
        }
        let mut dead: BTreeMap<&'static str, (usize, String)> = BTreeMap::new();
        let mut waiting: BTreeMap<&'static str, (usize, String)> = BTreeMap::new();
        let mut good = 0usize;
        let mut out = Vec::new();
        for record in records {
            let Some(value) = &record.value else {
                let entry = dead
                    .entry("tombstone")
                    .or_insert((0, "a record without a value".into()));
                entry.0 += 1;
                continue;
            };
            let found = match route.writer.plans.cached_plan(value) {
                Some(found) => found.map_err(PlanLookupError::BadRecord),
                None => route.writer.plans.plan_for(value).await,
            };
            let (plan, at) = match found {
                Ok(found) => found,
                Err(PlanLookupError::BadRecord(bad)) => {
                    let entry = dead.entry(bad.class).or_insert((0, bad.reason.clone()));
                    entry.0 += 1;
                    continue;
                }
                // `run` holds the partition on it (and, for an id still unknown after
                // schema_registry.not_found_grace, dead-letters the record as unknown_schema).
                Err(PlanLookupError::Unavailable(why)) => {
                    let entry = waiting.entry("schema_unavailable").or_insert((0, why));
                    entry.0 += 1;
                    continue;
                }
            };
            let headers: Vec<KafkaHeader<'_>> = record
                .headers
                .iter()
                .map(|(k, v)| KafkaHeader {
                    key: k.as_bytes(),
                    value: v.as_deref(),
                })
                .collect();
            let meta = KafkaMetadata {
                topic,
                partition: record.partition,
                offset: KafkaOffset(record.offset),
                timestamp_millis: record.timestamp_ms,
                key: record.key.as_deref(),
                headers: &headers,
            };
            out.clear();
            match plan.transcode(&value[at..], Some(&meta), &mut out) {
                Ok(_) => good += 1,
                Err(e) => {
                    let entry = dead.entry(e.class()).or_insert((0, e.to_string()));
                    entry.0 += 1;
                }
            }
        }
        if !waiting.is_empty() {
            let (n, why) = &waiting["schema_unavailable"];
            findings.push(Finding::fail(
                format!("{dry} schemas"),
                format!(
                    "{n} record(s) whose schema cannot be had now, which would hold their \
                     partition (an id still unknown after schema_registry.not_found_grace is \
                     dead-lettered as unknown_schema): {why}"
                ),
                "register the schema, or fix the producer's schema id",
            ));
        }
        if dead.is_empty() {
            findings.push(Finding::ok(
                dry,
                format!(
                    "{good} record(s) transcode against the table; none would be dead-lettered"
                ),
            ));
        } else {
            let why: Vec<String> = dead
                .iter()
                .map(|(class, (n, example))| format!("{n} {class} (e.g. {example})"))
                .collect();
            findings.push(Finding::fail(
                dry,
                format!(
                    "{good} record(s) transcode, {} would be dead-lettered: {}",
                    dead.values().map(|(n, _)| n).sum::<usize>(),
                    why.join("; ")
                ),
                "fix the producer or the table (docs/mapping.md says what each class means)",
            ));
        }
    }
}

/// The table exists and the principal holds the sink's table permissions on it
/// ([`SINK_TABLE_PERMISSIONS`], kbq-core's list of BigQuery facts); `true` when the dry
/// run can go on with it.
async fn check_table(
    rest: &RestClient,
    table: &TableReference,
    creatable: bool,
    item: &str,
    findings: &mut Vec<Finding>,
) -> bool {
    match rest.get_table(table).await {
        Ok(_) => {}
        Err(e) if e.is_not_found() && creatable => {
            findings.push(Finding::ok(
                item,
                "does not exist; run creates it (create_table; bigquery.tables.create on the \
                 dataset is not checked)",
            ));
            return false;
        }
        Err(e) if e.is_not_found() => {
            findings.push(Finding::fail(
                item,
                format!("{} does not exist", table.resource_name()),
                "create the table, or set create_table on its route",
            ));
            return false;
        }
        Err(e) => {
            findings.push(Finding::fail(
                item,
                format!("cannot read it: {e}"),
                "check bigquery.credentials and grant roles/bigquery.dataEditor on the dataset",
            ));
            return false;
        }
    }
    match rest
        .test_table_permissions(table, &SINK_TABLE_PERMISSIONS)
        .await
    {
        Ok(granted) => {
            let missing: Vec<&str> = SINK_TABLE_PERMISSIONS
                .iter()
                .copied()
                .filter(|p| !granted.iter().any(|g| g == p))
                .collect();
            if missing.is_empty() {
                findings.push(Finding::ok(
                    item,
                    format!("exists; {} granted", SINK_TABLE_PERMISSIONS.join(", ")),
                ));
                true
            } else {
                findings.push(Finding::fail(
                    item,
                    format!("the principal lacks {}", missing.join(", ")),
                    "grant roles/bigquery.dataEditor on the table or its dataset (it holds all \
                     four; bigquery.tables.update sets the group's marker label)",
                ));
                true
            }
        }
        Err(e) => {
            findings.push(Finding::fail(
                item,
                format!("cannot test its permissions: {e}"),
                "check bigquery.credentials",
            ));
            true
        }
    }
}
