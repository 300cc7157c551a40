//! Delivery: the checkpoint cycle, the writers, the dead-letter topic and the recovery policies.

use serde::Deserialize;

use super::{ByteSize, Config, CreateTableConfig, HumanDuration, Properties, defaults};
use kbq_core::protocol::{
    AnomalyPolicy, LostStreamPolicy, MissingCheckpointPolicy, OutOfRangePolicy, ResolveFallback,
    StartFrom,
};
use kbq_transcode::MetadataColumns;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    ExactlyOnce,
    AtLeastOnce,
}

/// The checkpoint cycle.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointConfig {
    /// Time between checkpoint cycles (default 5s): the latency until rows are visible.
    pub interval: HumanDuration,
    /// Deprecated, no effect: accepted so that old configs load, and `validate` warns. No
    /// cycle waits for its writers (they report acknowledgements as they come,
    /// docs/design-changes.md, "No barrier round trip"), so there is nothing to bound.
    pub barrier_timeout: Option<HumanDuration>,
    /// Consecutive failed Kafka commits of one partition after which it is isolated: stopped,
    /// counted and reported not ready (default 5).
    pub commit_failure_isolation_threshold: u32,
    /// The brokers' `offset.metadata.max.bytes` (default 4096); the worst-case checkpoint
    /// metadata must fit.
    pub metadata_max_bytes: u32,
    /// A partition whose acknowledged position has not advanced for this long while records
    /// wait for it is stalled: readiness false, `kbq_partitions_stalled` (default 2m; at least
    /// 1s and at least `interval`).
    pub partition_stall_timeout: HumanDuration,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            interval: HumanDuration(defaults::CHECKPOINT_INTERVAL),
            barrier_timeout: None,
            commit_failure_isolation_threshold: defaults::COMMIT_FAILURE_ISOLATION_THRESHOLD,
            metadata_max_bytes: defaults::CHECKPOINT_METADATA_MAX_BYTES,
            partition_stall_timeout: HumanDuration(defaults::PARTITION_STALL_TIMEOUT),
        }
    }
}

/// The writers.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WriterConfig {
    /// Largest AppendRows request (default 8MiB, at most 20MiB).
    pub max_request_bytes: ByteSize,
    /// Most rows in one request (default 50000).
    pub max_rows_per_request: u32,
    /// How long a partial batch waits for more records (default 50ms).
    pub linger: HumanDuration,
    /// Appends in flight per stream (default 4).
    pub max_inflight_requests: u32,
    /// Bytes in flight per stream (default 32MiB); at least `max_request_bytes`.
    pub max_inflight_bytes: ByteSize,
    /// Appended but not yet committed bytes per partition (default 256MiB); at the cap the
    /// partition pauses until a checkpoint commits.
    pub max_uncommitted_bytes: ByteSize,
    /// Bound on what the whole process holds of the records it has read from Kafka and BigQuery
    /// has not acknowledged yet — key, value and headers in consumer stashes, writer channels,
    /// open batches and requests in flight, plus the encoded row of each (default 64MiB; at
    /// least `max_inflight_bytes`). The copy of each request in flight counts too. At the limit
    /// the consumer takes no more messages (it keeps serving the group) until acknowledgements
    /// free an eighth of it; one partition may hold at most half as much again as its even
    /// share, at least a quarter of it (all of it when it is the only partition); requests are capped at a quarter of a partition's even share and
    /// at 1/256 of the limit (not under a sixteenth of the share). A record larger than what is
    /// left still passes. librdkafka's prefetch
    /// (`queued.max.messages.kbytes`) comes on top; see the sizing rule in docs/operations.md.
    pub memory_limit: ByteSize,
    /// A BigQuery answer (append, flush, create, finalize) later than this counts as lost: the
    /// connection is reopened and the request retried (default 60s).
    pub response_timeout: HumanDuration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            max_request_bytes: defaults::WRITER_MAX_REQUEST_BYTES,
            max_rows_per_request: defaults::WRITER_MAX_ROWS_PER_REQUEST,
            linger: HumanDuration(defaults::WRITER_LINGER),
            max_inflight_requests: defaults::WRITER_MAX_INFLIGHT_REQUESTS,
            max_inflight_bytes: defaults::WRITER_MAX_INFLIGHT_BYTES,
            max_uncommitted_bytes: defaults::WRITER_MAX_UNCOMMITTED_BYTES,
            memory_limit: defaults::WRITER_MEMORY_LIMIT,
            response_timeout: HumanDuration(defaults::WRITER_RESPONSE_TIMEOUT),
        }
    }
}

/// The dead-letter topic.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// Topic for bad records (their key, value and headers, plus headers with the reason and the
    /// source topic/partition/offset). Required when `on_bad_record` is `dead_letter`.
    #[serde(default)]
    pub topic: Option<String>,
    /// librdkafka producer properties. Unset connection settings (`bootstrap.servers`,
    /// `security.protocol`, `sasl.*`, `ssl.*`) are taken from `kafka`. `acks` is `all`: a
    /// dead-lettered record must be durable before its checkpoint commits.
    #[serde(default)]
    pub properties: Properties,
    /// Producer properties whose values are read from files, as `kafka.property_files`.
    #[serde(default)]
    pub property_files: std::collections::BTreeMap<String, std::path::PathBuf>,
}

/// What to do where no exact continuation exists (docs/architecture.md#recovery).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecoveryConfig {
    /// A checkpointed stream is gone before its rows were flushed: `resolve` (ask the table for
    /// the highest visible offset; needs the `partition` and `offset` metadata columns, and
    /// `topic` when several topics share a table), `rewind` (re-deliver the window: at least
    /// once for it) or `fail`. Default: `resolve` when those columns are configured, else
    /// `rewind`.
    pub lost_stream: Option<LostStreamPolicy>,
    /// A re-flush finds rows past the checkpoint already visible: `fail` (default) or
    /// `continue` (counted and logged).
    pub on_anomaly: AnomalyPolicy,
    /// Where a group that never committed starts: `earliest` (default) or `latest`.
    pub start_from: StartFrom,
    /// A group that committed before but whose offsets are gone (expired, or below the log
    /// start), or a partition that never committed although its table is marked (a new topic
    /// routed to an existing table): `fail` (default), `earliest`, `latest`, or `resolve` (ask
    /// the table for the highest visible offset, exact; needs the metadata columns that
    /// `lost_stream: resolve` needs).
    pub lost_offsets: MissingCheckpointPolicy,
    /// A partition's position is below the log start: retention deleted records before they
    /// were written (a checkpoint older than the topic's retention, or a partition that fell
    /// that far behind). `fail` (default: the partition stops, readiness turns false) or
    /// `earliest` (continue at the log start; the deleted range is logged as lost).
    pub on_out_of_range: OutOfRangePolicy,
    /// A partition added while running: `earliest` (default) or `latest`.
    pub new_partitions: StartFrom,
    /// How many failed `resolve` queries (backing off up to 30 s between them) before
    /// `resolve_fallback` applies. Default 10 (about 2 minutes).
    pub resolve_attempts: Option<u32>,
    /// What `resolve` does when its query keeps failing: `fail` (default: the partition stops,
    /// readiness turns false) or `rewind` (re-deliver the window, at least once for it).
    pub resolve_fallback: ResolveFallback,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            lost_stream: None,
            on_anomaly: defaults::RECOVERY_ON_ANOMALY,
            start_from: defaults::RECOVERY_START_FROM,
            lost_offsets: defaults::RECOVERY_LOST_OFFSETS,
            on_out_of_range: defaults::RECOVERY_ON_OUT_OF_RANGE,
            new_partitions: defaults::RECOVERY_NEW_PARTITIONS,
            resolve_attempts: None,
            resolve_fallback: defaults::RECOVERY_RESOLVE_FALLBACK,
        }
    }
}

impl Config {
    /// The policy in force for a lost stream, with the default resolved against the metadata
    /// columns of every route: `resolve` only when each table it may query has them.
    pub fn effective_lost_stream(&self) -> LostStreamPolicy {
        self.recovery.lost_stream.unwrap_or_else(|| {
            if resolve_missing_columns(self).is_empty()
                && resolve_partition_filters(self).is_empty()
            {
                LostStreamPolicy::Resolve
            } else {
                LostStreamPolicy::Rewind
            }
        })
    }

    /// Whether topics can reach the top-level `bigquery` settings (no route matches them): a
    /// pattern subscription may always bring such a topic.
    pub(super) fn unrouted_topics(&self) -> Option<Vec<&String>> {
        if self.kafka.topic_pattern.is_some() {
            return None;
        }
        Some(
            self.kafka
                .topics
                .iter()
                .filter(|t| !self.routes.iter().any(|r| r.matches(t)))
                .collect(),
        )
    }
}

/// Per route (and the top-level settings, when topics can reach them), the metadata columns
/// that `lost_stream: resolve` needs but the route lacks: `(path of its metadata_columns,
/// missing)`.
pub(super) fn resolve_missing_columns(c: &Config) -> Vec<(String, Vec<&'static str>)> {
    let mut scopes = Vec::new();
    let unrouted = c.unrouted_topics();
    if unrouted.as_ref().is_none_or(|t| !t.is_empty()) {
        let several = unrouted.is_none_or(|t| t.len() > 1);
        scopes.push((
            "bigquery.metadata_columns".to_string(),
            &c.bigquery.metadata_columns,
            c.bigquery.table.as_str(),
            several,
        ));
    }
    for (i, r) in c.routes.iter().enumerate() {
        let several = r.topic_pattern.is_some() || r.topics.len() > 1;
        scopes.push((
            format!("routes[{i}].metadata_columns"),
            r.metadata_columns
                .as_ref()
                .unwrap_or(&c.bigquery.metadata_columns),
            r.table.as_deref().unwrap_or(&c.bigquery.table),
            several,
        ));
    }
    scopes
        .into_iter()
        .filter_map(|(path, cols, table, several)| {
            let missing = missing_resolve_columns(cols, !table.contains("{topic}") && several);
            (!missing.is_empty()).then_some((path, missing))
        })
        .collect()
}

/// The `create_table.require_partition_filter` settings, as field paths, of the tables `resolve`
/// may query: its query filters on partition and offset only, which such a table refuses.
pub(super) fn resolve_partition_filters(c: &Config) -> Vec<String> {
    let mut paths = Vec::new();
    let requires =
        |ct: Option<&CreateTableConfig>| ct.is_some_and(|ct| ct.require_partition_filter);
    if c.unrouted_topics().is_none_or(|t| !t.is_empty())
        && requires(c.bigquery.create_table.as_ref())
    {
        paths.push("bigquery.create_table.require_partition_filter".to_string());
    }
    for (i, r) in c.routes.iter().enumerate() {
        match &r.create_table {
            Some(ct) if ct.require_partition_filter => {
                paths.push(format!("routes[{i}].create_table.require_partition_filter"));
            }
            None if requires(c.bigquery.create_table.as_ref()) => {
                paths.push("bigquery.create_table.require_partition_filter".to_string());
            }
            _ => {}
        }
    }
    paths.dedup();
    paths
}

/// The columns `resolve` needs in one table: partition and offset, and the topic when several
/// topics share the table.
pub(super) fn missing_resolve_columns(
    cols: &MetadataColumns,
    shared_table: bool,
) -> Vec<&'static str> {
    let mut missing = Vec::new();
    if shared_table && cols.topic.is_none() {
        missing.push("topic");
    }
    if cols.partition.is_none() {
        missing.push("partition");
    }
    if cols.offset.is_none() {
        missing.push("offset");
    }
    missing
}
