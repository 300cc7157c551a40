//! The Prometheus metrics of `docs/metrics.md`, in one registry owned by the process (no global
//! state, so tests can run several daemons in one process).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabel {
    pub topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabel {
    pub table: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// How a checkpoint cycle ended: the `outcome` label of `kbq_checkpoints_total` and of the
/// `checkpoint cycle` log line (docs/metrics.md), the same in both delivery modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointOutcome {
    /// It committed offsets or flushed rows.
    Committed,
    /// Every checkpoint was current: nothing to commit or flush (a success).
    Empty,
    /// A commit or flush of it failed; the next cycle retries.
    Abandoned,
}

impl CheckpointOutcome {
    pub const ALL: [CheckpointOutcome; 3] = [
        CheckpointOutcome::Committed,
        CheckpointOutcome::Empty,
        CheckpointOutcome::Abandoned,
    ];

    pub fn label(self) -> &'static str {
        match self {
            CheckpointOutcome::Committed => "committed",
            CheckpointOutcome::Empty => "empty",
            CheckpointOutcome::Abandoned => "abandoned",
        }
    }
}

/// What recovery did for a partition: the `outcome` label of `kbq_recovery_actions_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryOutcome {
    Reflushed,
    Resolved,
    ResolveFailed,
    Rewound,
    Anomaly,
    Failed,
}

impl RecoveryOutcome {
    pub const ALL: [RecoveryOutcome; 6] = [
        RecoveryOutcome::Reflushed,
        RecoveryOutcome::Resolved,
        RecoveryOutcome::ResolveFailed,
        RecoveryOutcome::Rewound,
        RecoveryOutcome::Anomaly,
        RecoveryOutcome::Failed,
    ];

    pub fn label(self) -> &'static str {
        match self {
            RecoveryOutcome::Reflushed => "reflushed",
            RecoveryOutcome::Resolved => "resolved",
            RecoveryOutcome::ResolveFailed => "resolve_failed",
            RecoveryOutcome::Rewound => "rewound",
            RecoveryOutcome::Anomaly => "anomaly",
            RecoveryOutcome::Failed => "failed",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub rpc: &'static str,
    pub code: &'static str,
    pub storage_code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    pub topic: String,
    pub partition: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// The `reason` label values of `kbq_dead_letter_records_total` (the classes of bad records).
pub const DEAD_LETTER_REASONS: [&str; 12] = [
    "bad_magic",
    "unknown_schema",
    "malformed_avro",
    "malformed_protobuf",
    "malformed_json",
    "schema_violation",
    "out_of_range",
    "row_rejected",
    "row_too_large",
    "incompatible_schema",
    "schema_too_complex",
    "cdc_change",
];

/// The `rpc` label values of `kbq_bigquery_errors_total`: every call that counts its errors.
pub const BIGQUERY_RPCS: [&str; 5] = [
    "AppendRows",
    "CreateWriteStream",
    "FlushRows",
    "FinalizeWriteStream",
    "GetWriteStream",
];

/// The two text formats `/metrics` answers in (`ops::http` picks one from the request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    /// OpenMetrics 1.0.0: counter families without `_total` in `# TYPE`, ends in `# EOF`.
    OpenMetrics,
    /// The Prometheus text format 0.0.4, for clients that do not accept OpenMetrics.
    Prometheus,
}

impl Exposition {
    /// The `Content-Type` that declares the body's format: a body served under the other
    /// format's type loses its counters' type and help in the scraper.
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Exposition::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }
}

/// The `change` label values of `kbq_cdc_changes_total`.
pub const CDC_CHANGES: [&str; 3] = ["upsert", "delete", "ignored"];

/// The `reason` label values of `kbq_cdc_bad_records_total`.
pub const CDC_BAD_REASONS: [&str; 10] = [
    "cdc_operation",
    "cdc_no_row",
    "cdc_change_type",
    "cdc_no_sequence_source",
    "cdc_no_key",
    "cdc_json_envelope",
    "malformed_avro",
    "malformed_protobuf",
    "malformed_json",
    "schema_violation",
];

/// Labels of `kbq_cdc_changes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChangeLabels {
    pub table: String,
    /// `upsert`, `delete` or `ignored`.
    pub change: &'static str,
}

/// Labels of `kbq_cdc_bad_records_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChangeBadLabels {
    pub table: String,
    pub reason: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 1 ms … ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Every metric of the spec. Cheap to share behind an `Arc`; updates are atomic.
pub struct Metrics {
    registry: Registry,
    pub records_consumed: Family<TopicLabel, Counter>,
    pub records_filtered: Family<TopicLabel, Counter>,
    pub bytes_consumed: Family<TopicLabel, Counter>,
    pub rows_appended: Family<TableLabel, Counter>,
    pub rows_flushed: Family<TableLabel, Counter>,
    pub append_latency: Histograms<TableLabel>,
    pub flush_latency: Histograms<TableLabel>,
    pub checkpoint_duration: Histogram,
    pub checkpoints: Family<OutcomeLabel, Counter>,
    checkpoint_age: Gauge<f64, AtomicU64>,
    last_checkpoint_unix_ms: AtomicU64,
    /// When this process started (Unix seconds): a restart shows as a change of the value.
    process_start_time: Gauge<f64, AtomicU64>,
    pub inflight_requests: Gauge,
    pub inflight_bytes: Gauge,
    /// Bytes of `writer.memory_limit` in use (the budget counts on this gauge directly).
    pub memory_budget_used: Gauge,
    pub open_streams: Gauge,
    pub streams_created: Family<TableLabel, Counter>,
    pub streams_finalized: Family<TableLabel, Counter>,
    pub bigquery_errors: Family<ErrorLabels, Counter>,
    pub dead_letter_records: Family<ReasonLabel, Counter>,
    pub cdc_changes: Family<ChangeLabels, Counter>,
    pub cdc_bad_records: Family<ChangeBadLabels, Counter>,
    pub recovery_actions: Family<OutcomeLabel, Counter>,
    pub rewound_records: Family<TopicLabel, Counter>,
    pub lost_records: Family<TopicLabel, Counter>,
    pub consumer_lag: Family<PartitionLabels, Gauge>,
    pub rebalances: Family<KindLabel, Counter>,
    pub schema_registry_requests: Family<ResultLabel, Counter>,
    pub partitions_assigned: Gauge,
    pub partitions_failed: Gauge,
    /// Partitions whose acknowledged position has not moved for
    /// `checkpoint.partition_stall_timeout` while records wait for them.
    pub partitions_stalled: Gauge,
    /// Writers waiting out an error only time or an operator cures (permission denied,
    /// credentials, a failed precondition) before they retry; readiness is false while > 0.
    pub partitions_retrying: Gauge,
    /// Tables whose group marker could not be written and has not landed since.
    pub table_markers_failing: Gauge,
    /// 1 while the consumer is a member of its group in a steady state (from librdkafka's
    /// statistics); readiness needs it.
    pub group_joined: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            records_consumed: Family::default(),
            records_filtered: Family::default(),
            bytes_consumed: Family::default(),
            rows_appended: Family::default(),
            rows_flushed: Family::default(),
            append_latency: Family::new_with_constructor(latency_histogram),
            flush_latency: Family::new_with_constructor(latency_histogram),
            checkpoint_duration: latency_histogram(),
            checkpoints: Family::default(),
            checkpoint_age: Gauge::default(),
            last_checkpoint_unix_ms: AtomicU64::new(0),
            process_start_time: Gauge::default(),
            inflight_requests: Gauge::default(),
            inflight_bytes: Gauge::default(),
            memory_budget_used: Gauge::default(),
            open_streams: Gauge::default(),
            streams_created: Family::default(),
            streams_finalized: Family::default(),
            bigquery_errors: Family::default(),
            dead_letter_records: Family::default(),
            cdc_changes: Family::default(),
            cdc_bad_records: Family::default(),
            recovery_actions: Family::default(),
            rewound_records: Family::default(),
            lost_records: Family::default(),
            consumer_lag: Family::default(),
            rebalances: Family::default(),
            schema_registry_requests: Family::default(),
            partitions_assigned: Gauge::default(),
            partitions_failed: Gauge::default(),
            partitions_stalled: Gauge::default(),
            partitions_retrying: Gauge::default(),
            table_markers_failing: Gauge::default(),
            group_joined: Gauge::default(),
            registry: Registry::default(),
        };
        m.process_start_time.set(unix_ms() as f64 / 1000.0);
        // prometheus-client appends `_total` to counters itself.
        m.register_throughput(&mut registry);
        m.register_checkpoints(&mut registry);
        m.register_bigquery(&mut registry);
        m.register_records(&mut registry);
        m.register_partitions(&mut registry);
        Metrics { registry, ..m }
    }

    /// The data path: records in, rows appended and made visible, what is in flight.
    fn register_throughput(&self, r: &mut Registry) {
        r.register(
            "kbq_records_consumed",
            "Kafka records handed to writers",
            self.records_consumed.clone(),
        );
        r.register(
            "kbq_records_filtered",
            "Records a filter transform dropped: committed, neither a row nor a dead letter",
            self.records_filtered.clone(),
        );
        r.register(
            "kbq_bytes_consumed",
            "Key and value bytes of consumed records",
            self.bytes_consumed.clone(),
        );
        r.register(
            "kbq_rows_appended",
            "Rows acknowledged by AppendRows",
            self.rows_appended.clone(),
        );
        r.register(
            "kbq_rows_flushed",
            "Rows made visible",
            self.rows_flushed.clone(),
        );
        r.register(
            "kbq_append_latency_seconds",
            "AppendRows request to response",
            self.append_latency.clone(),
        );
        r.register(
            "kbq_flush_latency_seconds",
            "One FlushRows call",
            self.flush_latency.clone(),
        );
        r.register(
            "kbq_inflight_requests",
            "AppendRows requests in flight",
            self.inflight_requests.clone(),
        );
        r.register(
            "kbq_inflight_bytes",
            "Encoded bytes of AppendRows requests in flight",
            self.inflight_bytes.clone(),
        );
        r.register(
            "kbq_memory_budget_used_bytes",
            "Bytes of writer.memory_limit held by records read and not yet acknowledged",
            self.memory_budget_used.clone(),
        );
    }

    /// Checkpoint cycles, the process's start, and what recovery did.
    fn register_checkpoints(&self, r: &mut Registry) {
        r.register(
            "kbq_checkpoint_duration_seconds",
            "One checkpoint cycle, barrier to finalize",
            self.checkpoint_duration.clone(),
        );
        r.register(
            "kbq_checkpoints",
            "Checkpoint cycles by outcome",
            self.checkpoints.clone(),
        );
        r.register(
            "kbq_checkpoint_last_success_age_seconds",
            "Seconds since the last successful checkpoint cycle",
            self.checkpoint_age.clone(),
        );
        r.register(
            "kbq_process_start_time_seconds",
            "When this process started, in seconds since the Unix epoch",
            self.process_start_time.clone(),
        );
        r.register(
            "kbq_recovery_actions",
            "Recovery actions by outcome",
            self.recovery_actions.clone(),
        );
        r.register(
            "kbq_rewound_records",
            "Records re-delivered by a rewind recovery",
            self.rewound_records.clone(),
        );
        r.register(
            "kbq_lost_records",
            "Records deleted by retention before they were written, skipped under recovery.on_out_of_range: earliest",
            self.lost_records.clone(),
        );
    }

    /// Write streams and BigQuery's errors.
    fn register_bigquery(&self, r: &mut Registry) {
        r.register(
            "kbq_open_streams",
            "Write streams held open",
            self.open_streams.clone(),
        );
        r.register(
            "kbq_streams_created",
            "CreateWriteStream successes",
            self.streams_created.clone(),
        );
        r.register(
            "kbq_streams_finalized",
            "FinalizeWriteStream successes",
            self.streams_finalized.clone(),
        );
        r.register(
            "kbq_bigquery_errors",
            "BigQuery errors by rpc, grpc code and storage error code",
            self.bigquery_errors.clone(),
        );
    }

    /// Records that are not plain rows: dead letters and CDC changes.
    fn register_records(&self, r: &mut Registry) {
        r.register(
            "kbq_dead_letter_records",
            "Records sent to the dead-letter topic",
            self.dead_letter_records.clone(),
        );
        r.register(
            "kbq_cdc_changes",
            "CDC records taken into requests by change (a replay counts again)",
            self.cdc_changes.clone(),
        );
        r.register(
            "kbq_cdc_bad_records",
            "CDC records that are not a row change, by reason",
            self.cdc_bad_records.clone(),
        );
    }

    /// Kafka, the registry, and the state of the partitions this replica owns.
    fn register_partitions(&self, r: &mut Registry) {
        r.register(
            "kbq_consumer_lag_records",
            "High watermark minus committed offset",
            self.consumer_lag.clone(),
        );
        r.register(
            "kbq_rebalances",
            "Rebalance callbacks by kind",
            self.rebalances.clone(),
        );
        r.register(
            "kbq_schema_registry_requests",
            "Schema lookups by result",
            self.schema_registry_requests.clone(),
        );
        r.register(
            "kbq_partitions_assigned",
            "Partitions owned by this replica",
            self.partitions_assigned.clone(),
        );
        r.register(
            "kbq_partitions_failed",
            "Partitions stopped by a fail-closed policy",
            self.partitions_failed.clone(),
        );
        r.register(
            "kbq_partitions_stalled",
            "Partitions not advancing while records wait for them",
            self.partitions_stalled.clone(),
        );
        r.register(
            "kbq_partitions_retrying",
            "Writers waiting out a permission, credential or precondition error",
            self.partitions_retrying.clone(),
        );
        r.register(
            "kbq_table_markers_failing",
            "Tables whose group marker cannot be written (their rows wait)",
            self.table_markers_failing.clone(),
        );
        r.register(
            "kbq_consumer_group_joined",
            "1 while the consumer is a steady member of its group",
            self.group_joined.clone(),
        );
    }

    /// Creates the series whose label values are known at start, at 0, so that dashboards and
    /// alerts see "nothing happened" rather than a missing series (prometheus-client does not
    /// render a family before its first series).
    pub fn preregister(&self, table: &str, topics: &[String]) {
        let table = TableLabel {
            table: table.to_string(),
        };
        for family in [
            &self.rows_appended,
            &self.rows_flushed,
            &self.streams_created,
            &self.streams_finalized,
        ] {
            let _ = family.get_or_create(&table);
        }
        let _ = self.append_latency.get_or_create(&table);
        let _ = self.flush_latency.get_or_create(&table);
        for topic in topics {
            let topic = TopicLabel {
                topic: topic.clone(),
            };
            for family in [
                &self.records_consumed,
                &self.records_filtered,
                &self.bytes_consumed,
                &self.rewound_records,
                &self.lost_records,
            ] {
                let _ = family.get_or_create(&topic);
            }
        }
        for outcome in CheckpointOutcome::ALL {
            let outcome = outcome.label();
            let _ = self.checkpoints.get_or_create(&OutcomeLabel { outcome });
        }
        for outcome in RecoveryOutcome::ALL {
            let outcome = outcome.label();
            let _ = self
                .recovery_actions
                .get_or_create(&OutcomeLabel { outcome });
        }
        for reason in DEAD_LETTER_REASONS {
            let _ = self
                .dead_letter_records
                .get_or_create(&ReasonLabel { reason });
        }
        // An error counter born at 1 hides its first error from `rate` and `increase`: the
        // classes without a storage error code are bounded (rpc × gRPC code) and start at 0.
        // A class with a storage code still appears with its first error (the alerts in
        // deploy/prometheus/ see a series born at 1 too).
        for rpc in BIGQUERY_RPCS {
            for code in (1..=16).map(tonic::Code::from_i32) {
                let _ = self.bigquery_errors.get_or_create(&ErrorLabels {
                    rpc,
                    code: crate::bigquery::error::code_name(code),
                    storage_code: "none",
                });
            }
        }
        for kind in ["assign", "revoke", "lost"] {
            let _ = self.rebalances.get_or_create(&KindLabel { kind });
        }
        for result in ["hit", "fetched", "not_found", "error"] {
            let _ = self
                .schema_registry_requests
                .get_or_create(&ResultLabel { result });
        }
    }

    /// The series of a CDC table (docs/cdc.md), at 0.
    pub fn preregister_cdc(&self, table: &str) {
        for change in CDC_CHANGES {
            let _ = self.cdc_changes.get_or_create(&ChangeLabels {
                table: table.to_string(),
                change,
            });
        }
        for reason in CDC_BAD_REASONS {
            let _ = self.cdc_bad_records.get_or_create(&ChangeBadLabels {
                table: table.to_string(),
                reason,
            });
        }
    }

    /// Records a successful checkpoint cycle now (drives the age gauge): one that committed, or
    /// found every checkpoint current.
    /// A checkpoint cycle ended: its duration, its outcome, and (unless abandoned) the age of
    /// the last success.
    pub fn checkpoint_cycle(&self, outcome: CheckpointOutcome, duration: std::time::Duration) {
        self.checkpoint_duration.observe(duration.as_secs_f64());
        if outcome != CheckpointOutcome::Abandoned {
            self.checkpoint_succeeded();
        }
        let outcome = outcome.label();
        self.checkpoints
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    pub fn recovery_action(&self, outcome: RecoveryOutcome) {
        let outcome = outcome.label();
        self.recovery_actions
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    pub fn checkpoint_succeeded(&self) {
        self.last_checkpoint_unix_ms
            .store(unix_ms(), Ordering::Relaxed);
    }

    /// Seconds since the last successful checkpoint cycle, `None` before the first.
    pub fn checkpoint_age_seconds(&self) -> Option<f64> {
        match self.last_checkpoint_unix_ms.load(Ordering::Relaxed) {
            0 => None,
            last => Some(unix_ms().saturating_sub(last) as f64 / 1000.0),
        }
    }

    /// Counts a BigQuery error under its bounded labels.
    pub fn bigquery_error(&self, rpc: &'static str, error: &crate::bigquery::error::WriteError) {
        debug_assert!(
            BIGQUERY_RPCS.contains(&rpc),
            "{rpc} is not in BIGQUERY_RPCS"
        );
        let storage_code = error
            .storage
            .as_ref()
            .map(|s| s.code_name())
            .unwrap_or("none");
        self.bigquery_errors
            .get_or_create(&ErrorLabels {
                rpc,
                code: error.code_name(),
                storage_code,
            })
            .inc();
    }

    /// Every metric in `format`.
    pub fn encode(&self, format: Exposition) -> String {
        self.checkpoint_age
            .set(self.checkpoint_age_seconds().unwrap_or(0.0));
        let mut out = String::with_capacity(16 << 10);
        match format {
            Exposition::OpenMetrics => {
                prometheus_client::encoding::text::encode(&mut out, &self.registry)
            }
            Exposition::Prometheus => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            }
        }
        .expect("writing to a String cannot fail");
        out
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_exports_counters_with_total_suffix_and_labels() {
        let m = Metrics::new();
        m.records_consumed
            .get_or_create(&TopicLabel {
                topic: "orders".into(),
            })
            .inc_by(3);
        m.append_latency
            .get_or_create(&TableLabel { table: "t".into() })
            .observe(0.002);
        let text = m.encode(Exposition::OpenMetrics);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(
            text.contains("kbq_records_consumed_total{topic=\"orders\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("kbq_append_latency_seconds_bucket{le=\"0.002\",table=\"t\"} 1")
                || text.contains("kbq_append_latency_seconds_bucket{table=\"t\",le=\"0.002\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE kbq_checkpoint_last_success_age_seconds gauge"),
            "{text}"
        );
    }

    #[test]
    fn the_prometheus_format_types_counters_by_their_sample_name_and_has_no_eof() {
        let m = Metrics::new();
        m.preregister("t", &["orders".to_string()]);
        let text = m.encode(Exposition::Prometheus);
        assert!(
            text.contains("# TYPE kbq_records_consumed_total counter"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
    }

    #[test]
    fn error_classes_without_a_storage_code_start_at_0() {
        let m = Metrics::new();
        m.preregister("t", &["orders".to_string()]);
        let text = m.encode(Exposition::OpenMetrics);
        for rpc in BIGQUERY_RPCS {
            for code in ["PERMISSION_DENIED", "UNAUTHENTICATED", "UNAVAILABLE"] {
                let series = format!(
                    "kbq_bigquery_errors_total{{rpc=\"{rpc}\",code=\"{code}\",storage_code=\"none\"}} 0\n"
                );
                assert!(text.contains(&series), "{series} missing:\n{text}");
            }
        }
        assert!(!text.contains("code=\"OK\""), "{text}");
    }
}
