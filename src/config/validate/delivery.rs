//! How delivery runs: checkpoints, the writer, the dead-letter topic, recovery, metrics and
//! logging.

use std::time::Duration;

use crate::config::delivery::{resolve_missing_columns, resolve_partition_filters};
use crate::config::{CheckpointConfig, Config, ConfigError, Delivery, WriterConfig, limits};
use kbq_core::bad_record::BadRecordPolicy;
use kbq_core::protocol::{LostStreamPolicy, MissingCheckpointPolicy};

use super::{Validator, checkpoint_metadata_worst_case_len, is_kafka_topic_name, quoted_key};

impl Validator {
    pub(super) fn checkpoint(&mut self, cp: &CheckpointConfig) {
        if cp.interval.0 < Duration::from_millis(100) {
            self.err("checkpoint.interval", "must be at least 100ms");
        }
        if cp.commit_failure_isolation_threshold == 0 {
            self.err(
                "checkpoint.commit_failure_isolation_threshold",
                "must be at least 1",
            );
        }
        if cp.partition_stall_timeout.0 < Duration::from_secs(1)
            || cp.partition_stall_timeout.0 < cp.interval.0
        {
            self.err(
                "checkpoint.partition_stall_timeout",
                "must be at least 1s and at least checkpoint.interval",
            );
        }
        let needed = checkpoint_metadata_worst_case_len();
        if (cp.metadata_max_bytes as usize) < needed {
            self.err(
                "checkpoint.metadata_max_bytes",
                format!(
                    "{} is below the worst-case checkpoint metadata length {needed}",
                    cp.metadata_max_bytes
                ),
            );
        }
    }

    pub(super) fn writer(&mut self, w: &WriterConfig, cp: &CheckpointConfig) {
        if w.max_request_bytes > limits::MAX_REQUEST_BYTES {
            self.err(
                "writer.max_request_bytes",
                format!("must be at most {}", limits::MAX_REQUEST_BYTES),
            );
        }
        if w.max_request_bytes < limits::MIN_REQUEST_BYTES {
            self.err(
                "writer.max_request_bytes",
                format!("must be at least {}", limits::MIN_REQUEST_BYTES),
            );
        }
        if w.max_rows_per_request == 0 {
            self.err("writer.max_rows_per_request", "must be at least 1");
        }
        if w.max_inflight_requests == 0 {
            self.err("writer.max_inflight_requests", "must be at least 1");
        }
        if w.response_timeout.0 < Duration::from_millis(100) {
            self.err("writer.response_timeout", "must be at least 100ms");
        }
        if w.linger > cp.interval {
            self.err(
                "writer.linger",
                format!("must not exceed checkpoint.interval ({})", cp.interval),
            );
        }
        if w.max_inflight_bytes < w.max_request_bytes {
            self.err(
                "writer.max_inflight_bytes",
                format!(
                    "must be at least writer.max_request_bytes ({})",
                    w.max_request_bytes
                ),
            );
        }
        if w.max_uncommitted_bytes < w.max_inflight_bytes {
            self.err(
                "writer.max_uncommitted_bytes",
                format!(
                    "must be at least writer.max_inflight_bytes ({})",
                    w.max_inflight_bytes
                ),
            );
        }
        if w.memory_limit < w.max_inflight_bytes {
            self.err(
                "writer.memory_limit",
                format!(
                    "must be at least writer.max_inflight_bytes ({})",
                    w.max_inflight_bytes
                ),
            );
        }
    }

    pub(super) fn dead_letter(&mut self, c: &Config) {
        let topic = c.dead_letter.as_ref().and_then(|d| d.topic.as_deref());
        if c.on_bad_record == BadRecordPolicy::DeadLetter && topic.is_none() {
            self.err(
                "dead_letter.topic",
                "dead_letter.topic is required when on_bad_record is dead_letter (or choose on_bad_record: fail or skip)",
            );
        }
        let Some(dl) = &c.dead_letter else { return };
        self.librdkafka_properties("dead_letter.properties", &dl.properties);
        if let Some(topic) = topic {
            if !is_kafka_topic_name(topic) {
                self.err(
                    "dead_letter.topic",
                    format!("`{topic}` is not a valid topic name"),
                );
            }
            if c.kafka.topics.iter().any(|t| t == topic) {
                self.err(
                    "dead_letter.topic",
                    "must not be one of kafka.topics (bad records would come back)",
                );
            }
        }
        if let Some(size) = dl.properties.get("message.max.bytes")
            && !(size.trim().parse::<usize>()).is_ok_and(|n| (1_000..=1_000_000_000).contains(&n))
        {
            self.err(
                format!(
                    "dead_letter.properties.{}",
                    quoted_key("message.max.bytes")
                ),
                "must be a number of bytes from 1000 to 1000000000 (librdkafka's range): it sizes the dead letters, a larger one is cut to fit",
            );
        }
        if let Some(acks) = dl.properties.get("acks")
            && !matches!(acks.trim(), "all" | "-1")
        {
            self.err(
                format!("dead_letter.properties.{}", quoted_key("acks")),
                "forced to all by the sink (a dead-lettered record is durable before its checkpoint commits)",
            );
        }
    }

    pub(super) fn recovery(&mut self, c: &Config) {
        if c.recovery.resolve_attempts == Some(0) {
            self.err("recovery.resolve_attempts", "must be at least 1");
        }
        let resolving = [
            (
                c.recovery.lost_stream == Some(LostStreamPolicy::Resolve),
                "recovery.lost_stream",
                "rewind or fail",
            ),
            (
                // Under at-least-once `resolve` starts at the log start and queries nothing
                // (the ledger; `warnings` below says so).
                c.recovery.lost_offsets == MissingCheckpointPolicy::Resolve
                    && c.delivery == Delivery::ExactlyOnce,
                "recovery.lost_offsets",
                "fail, earliest or latest",
            ),
        ];
        for (_, field, others) in resolving.into_iter().filter(|(on, ..)| *on) {
            for path in resolve_partition_filters(c) {
                self.err(
                    field,
                    format!(
                        "resolve queries by partition and offset, which a table created with \
                         {path} refuses: use {others}, or drop that setting"
                    ),
                );
            }
            for (path, missing) in resolve_missing_columns(c) {
                self.err(
                    field,
                    format!(
                        "resolve needs the metadata columns {}: set {path}.{}",
                        missing.join(", "),
                        missing.join(&format!(", {path}."))
                    ),
                );
            }
        }
    }

    pub(super) fn ops(&mut self, c: &Config) {
        if c.shutdown_deadline.0.is_zero() {
            self.err(
                "shutdown_deadline",
                "must be above zero: the final cycle needs a commit and a flush",
            );
        }
        // A bare word is a valid filter for `tracing` (a target name), so `verbose` would
        // silently log nothing: a single directive without `=` must be a level.
        let Some(level) = c.log.level.as_deref().map(str::trim) else {
            return;
        };
        let bare = !level.contains(['=', ',', '[']);
        const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
        if bare && !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            self.err(
                "log.level",
                format!("`{level}` is not a level (trace, debug, info, warn, error, off) or a filter like info,kafka_bigquery_sink=debug"),
            );
        } else if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(level) {
            self.err("log.level", format!("not a level or filter: {e}"));
        }
    }
}

/// Delivery settings that load but do not do what their names say:
/// * `checkpoint.barrier_timeout` is kept only so that old configs load: no cycle waits for its
///   writers (docs/design-changes.md, "No barrier round trip");
/// * `lost_offsets: resolve` under at-least-once: the ledger starts a partition without a
///   checkpoint at the log start instead (docs/operations.md, missing checkpoints), so an
///   operator should know that expired offsets replay the retained log.
pub(super) fn warnings(c: &Config, out: &mut Vec<ConfigError>) {
    if c.checkpoint.barrier_timeout.is_some() {
        out.push(ConfigError::at(
            "checkpoint.barrier_timeout",
            "deprecated, has no effect: no cycle waits for its writers (they report acknowledgements as they come, docs/design-changes.md); remove it",
        ));
    }
    if c.delivery == Delivery::AtLeastOnce
        && c.recovery.lost_offsets == MissingCheckpointPolicy::Resolve
    {
        out.push(ConfigError::at(
            "recovery.lost_offsets",
            "resolve starts at the log start under delivery: at_least_once: the _default stream's visible rows may have holes below the highest one, so a partition without a checkpoint replays its whole retained log (duplicates, nothing lost): `earliest` says the same plainly",
        ));
    }
}
