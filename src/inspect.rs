//! `inspect -c config.yaml`: the checkpoint of every partition of the group, read from Kafka
//! without joining the group (docs/operations.md, `inspect`). A consumer that subscribes would
//! join, trigger a rebalance and possibly be assigned partitions it never processes; this one never
//! subscribes: it reads the committed offsets with an OffsetFetch under the group id and the
//! watermarks of each partition, and never commits.
//!
//! Which partitions: those of the configured topics, plus every partition of any topic the group
//! has a committed offset for (an unsubscribed topic with a checkpoint is what `recover` is for).

use std::collections::BTreeSet;

use anyhow::Context;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::json;

use crate::backoff;
use crate::config::{Config, defaults};
use crate::kafka::consumer::read_committed;
use kbq_core::metadata::{CommitMetadata, TableFingerprint};
use kbq_core::protocol::{CommittedRead, TopicPartition};

/// What Kafka holds for one partition of the group.
#[derive(Debug, Clone)]
pub struct PartitionView {
    pub tp: TopicPartition,
    pub committed: Option<CommittedRead>,
    pub low: i64,
    pub high: i64,
}

/// A consumer with the group's id and connection settings that never subscribes, so it never
/// joins the group.
pub fn group_reader(config: &Config) -> anyhow::Result<BaseConsumer> {
    let mut client = ClientConfig::new();
    for (k, v) in &config.kafka.consumer_properties().0 {
        client.set(k, v);
    }
    client
        .create()
        .map_err(crate::kafka::redact::redacted)
        .context("cannot create a kafka client for the group")
}

/// Reads the committed offset and watermarks of every partition of `topics` and of every topic
/// the group has committed offsets for.
pub fn read_group(
    consumer: &BaseConsumer,
    topics: &[String],
) -> anyhow::Result<Vec<PartitionView>> {
    let metadata = consumer
        .fetch_metadata(None, defaults::KAFKA_REQUEST_TIMEOUT)
        .context("cannot read the cluster's topic metadata")?;
    let mut all = Vec::new();
    for topic in metadata.topics() {
        if topic.name().starts_with("__") || topic.error().is_some() {
            continue;
        }
        for p in topic.partitions() {
            all.push(TopicPartition::new(topic.name(), p.id()));
        }
    }
    drop(metadata);
    let committed = if all.is_empty() {
        Default::default()
    } else {
        read_committed_retrying(consumer, &all)?
    };
    let wanted: BTreeSet<&str> = topics.iter().map(String::as_str).collect();
    let with_checkpoint: BTreeSet<&str> = committed
        .iter()
        .filter(|(_, read)| read.is_some())
        .map(|(tp, _)| tp.topic.as_str())
        .collect();
    let mut out = Vec::new();
    for tp in &all {
        if !wanted.contains(tp.topic.as_str()) && !with_checkpoint.contains(tp.topic.as_str()) {
            continue;
        }
        let (low, high) = consumer
            .fetch_watermarks(&tp.topic, tp.partition, defaults::KAFKA_REQUEST_TIMEOUT)
            .with_context(|| format!("cannot read the watermarks of {tp}"))?;
        out.push(PartitionView {
            tp: tp.clone(),
            committed: committed.get(tp).cloned().flatten(),
            low,
            high,
        });
    }
    out.sort_by(|a, b| a.tp.cmp(&b.tp));
    Ok(out)
}

/// The group coordinator can be moving or loading (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)
/// for a while after a broker start or a failover: those answers are retried, never read as
/// "no checkpoint".
pub(crate) fn read_committed_retrying(
    consumer: &BaseConsumer,
    partitions: &[TopicPartition],
) -> anyhow::Result<std::collections::HashMap<TopicPartition, Option<CommittedRead>>> {
    let mut backoff = backoff::GROUP_COORDINATOR;
    loop {
        match read_committed(consumer, partitions, defaults::KAFKA_REQUEST_TIMEOUT) {
            Ok(read) => return Ok(read),
            Err(e) if backoff.attempts() + 1 < backoff::GROUP_COORDINATOR_ATTEMPTS => {
                let pause = backoff.next_delay();
                let attempt = backoff.attempts();
                tracing::debug!(error = %e, attempt, "cannot read committed offsets yet, retrying");
                std::thread::sleep(pause);
            }
            Err(e) => {
                return Err(e).context("cannot read the group's committed offsets");
            }
        }
    }
}

/// One row of the report.
struct Row {
    view: PartitionView,
    mode: &'static str,
    stream: Option<String>,
    flush_to: Option<i64>,
    visible_through: Option<i64>,
    note: String,
}

fn describe(view: PartitionView, table: TableFingerprint) -> Row {
    let mut row = Row {
        mode: "none",
        stream: None,
        flush_to: None,
        visible_through: None,
        note: String::new(),
        view,
    };
    let Some(read) = &row.view.committed else {
        row.note = "no committed offset".into();
        return row;
    };
    let k = read.offset.0;
    match CommitMetadata::parse(&read.metadata) {
        Ok(CommitMetadata::Empty) => {
            row.mode = "reset";
            row.note = "offset without metadata (operator reset or another tool)".into();
        }
        Ok(CommitMetadata::AtLeastOnce { table: t }) => {
            row.mode = "at_least_once";
            if t != table {
                row.note = format!("checkpoint of another table ({t})");
            }
        }
        Ok(CommitMetadata::ExactlyOnce {
            table: t,
            stream,
            flush_to,
            visible_through,
        }) => {
            row.mode = "exactly_once";
            row.stream = stream.map(|s| s.as_str().to_owned());
            row.flush_to = flush_to.map(|r| r.0);
            row.visible_through = Some(visible_through.0);
            let mut notes = Vec::new();
            if t != table {
                notes.push(format!("checkpoint of another table ({t})"));
            }
            if visible_through.0 < k {
                notes.push(format!(
                    "flush pending: records [{}, {k}) not yet known visible",
                    visible_through.0
                ));
            }
            row.note = notes.join("; ");
        }
        Err(e) => {
            row.mode = "unreadable";
            row.note = format!(
                "unreadable metadata ({e}); raw={:?}",
                String::from_utf8_lossy(&read.metadata)
            );
        }
    }
    row
}

fn lag(view: &PartitionView) -> Option<i64> {
    view.committed
        .as_ref()
        .map(|c| (view.high - c.offset.0).max(0))
}

/// Runs `inspect`: prints the report to stdout.
pub fn run(config: &Config, json_output: bool) -> anyhow::Result<()> {
    let consumer = group_reader(config)?;
    let views = read_group(&consumer, &config.kafka.topics)?;
    drop(consumer);
    // Each topic's checkpoints are checked against the table of its route.
    let rows: Vec<Row> = views
        .into_iter()
        .map(|v| {
            let table = TableFingerprint::of_table_path(&table_path(config, &v.tp.topic));
            describe(v, table)
        })
        .collect();
    let group = &config.kafka.group_id;
    if json_output {
        let items: Vec<serde_json::Value> = rows.iter().map(Row::json).collect();
        let out = json!({
            "group": group,
            "partitions": items,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("group {group}");
        print_table(&rows);
    }
    Ok(())
}

impl Row {
    /// The partition as `inspect --json` prints it.
    fn json(&self) -> serde_json::Value {
        json!({
            "topic": self.view.tp.topic,
            "partition": self.view.tp.partition,
            "committed": self.view.committed.as_ref().map(|c| c.offset.0),
            "metadata": self.view.committed.as_ref().map(|c| String::from_utf8_lossy(&c.metadata).into_owned()),
            "mode": self.mode,
            "stream": self.stream,
            "flush_to": self.flush_to,
            "visible_through": self.visible_through,
            "low_watermark": self.view.low,
            "high_watermark": self.view.high,
            "lag": lag(&self.view),
            "note": self.note,
        })
    }

    /// The partition's cells in the table `inspect` prints (`-` where there is no value).
    fn cells(&self) -> Vec<String> {
        let dash = || "-".to_string();
        vec![
            self.view.tp.topic.clone(),
            self.view.tp.partition.to_string(),
            self.view
                .committed
                .as_ref()
                .map_or_else(dash, |c| c.offset.0.to_string()),
            self.mode.to_string(),
            self.stream.clone().unwrap_or_else(dash),
            self.flush_to.map_or_else(dash, |v| v.to_string()),
            self.visible_through.map_or_else(dash, |v| v.to_string()),
            self.view.high.to_string(),
            lag(&self.view).map_or_else(dash, |v| v.to_string()),
            self.note.clone(),
        ]
    }
}

/// The partitions as a table with aligned columns.
fn print_table(rows: &[Row]) {
    let header = [
        "TOPIC",
        "PARTITION",
        "COMMITTED",
        "MODE",
        "STREAM",
        "FLUSH_TO",
        "VISIBLE_THROUGH",
        "HIGH",
        "LAG",
        "NOTE",
    ];
    let cells: Vec<Vec<String>> = rows.iter().map(Row::cells).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for line in &cells {
        for (w, c) in widths.iter_mut().zip(line) {
            *w = (*w).max(c.len());
        }
    }
    let print = |line: &[String]| {
        let text: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", text.join("  ").trim_end());
    };
    print(&header.map(str::to_string));
    for line in &cells {
        print(line);
    }
}

/// The path of the table `topic` is routed to, which its checkpoints are fingerprinted with.
pub fn table_path(config: &Config, topic: &str) -> String {
    let route = config.route_for(topic);
    crate::bigquery::rest_client::TableReference::new(route.project, &route.dataset, &route.table)
        .resource_name()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbq_core::offsets::NextOffset;

    fn table() -> TableFingerprint {
        TableFingerprint::of_table_path("projects/p/datasets/d/tables/t")
    }

    fn view(offset: i64, metadata: &[u8]) -> PartitionView {
        PartitionView {
            tp: TopicPartition::new("orders", 0),
            committed: Some(CommittedRead {
                offset: NextOffset(offset),
                metadata: metadata.to_vec(),
            }),
            low: 0,
            high: 120,
        }
    }

    #[test]
    fn a_checkpoint_with_an_unflushed_tail_shows_stream_flush_point_and_the_pending_range() {
        let raw = format!("kbq;v=1;s=abc;t={};r=99;f=40", table());
        let row = describe(view(100, raw.as_bytes()), table());
        assert_eq!(row.mode, "exactly_once");
        assert_eq!(row.stream.as_deref(), Some("abc"));
        assert_eq!((row.flush_to, row.visible_through), (Some(99), Some(40)));
        assert!(
            row.note.contains("flush pending: records [40, 100)"),
            "{}",
            row.note
        );
        assert_eq!(lag(&row.view), Some(20));
    }

    #[test]
    fn a_checkpoint_at_rest_has_no_note() {
        let raw = format!("kbq;v=1;t={};f=100", table());
        let row = describe(view(100, raw.as_bytes()), table());
        assert_eq!(row.mode, "exactly_once");
        assert!(row.note.is_empty(), "{}", row.note);
    }

    #[test]
    fn unreadable_metadata_is_printed_raw_and_never_read_as_no_checkpoint() {
        let row = describe(view(7, b"{\"flink\":1}"), table());
        assert_eq!(row.mode, "unreadable");
        assert!(row.note.contains("{\\\"flink\\\":1}"), "{}", row.note);
        let row = describe(view(7, b"\xff\xfe"), table());
        assert_eq!(row.mode, "unreadable");
    }

    #[test]
    fn at_least_once_reset_and_foreign_checkpoints_are_named() {
        let alo = format!("kbq;v=1;m=alo;t={}", table());
        assert_eq!(
            describe(view(5, alo.as_bytes()), table()).mode,
            "at_least_once"
        );
        assert_eq!(describe(view(5, b""), table()).mode, "reset");
        let other = TableFingerprint::of_table_path("projects/p/datasets/d/tables/other");
        let foreign = format!("kbq;v=1;t={other};f=5");
        let row = describe(view(5, foreign.as_bytes()), table());
        assert!(row.note.contains("another table"), "{}", row.note);
    }

    #[test]
    fn each_topic_is_checked_against_the_table_of_its_route() {
        let yaml = "kafka:\n  bootstrap_servers: 127.0.0.1:9092\n  group_id: g\n  topics: [shop.orders, audit]\navro:\n  schema_file: s.avsc\nbigquery:\n  project: p\n  dataset: d\n  table: \"{topic}\"\non_bad_record: skip\nroutes:\n  - topics: [audit]\n    table: audit_all\n";
        let config = Config::from_yaml(yaml, Default::default()).expect("parses");
        assert_eq!(
            table_path(&config, "shop.orders"),
            "projects/p/datasets/d/tables/shop_orders"
        );
        assert_eq!(
            table_path(&config, "audit"),
            "projects/p/datasets/d/tables/audit_all"
        );
        // A checkpoint written for the orders table, found on the audit topic: another table.
        let orders = TableFingerprint::of_table_path(&table_path(&config, "shop.orders"));
        let audit = TableFingerprint::of_table_path(&table_path(&config, "audit"));
        let raw = format!("kbq;v=1;t={orders};f=100");
        assert!(describe(view(100, raw.as_bytes()), orders).note.is_empty());
        let row = describe(view(100, raw.as_bytes()), audit);
        assert!(row.note.contains("another table"), "{}", row.note);
    }
}
