//! Delivery and the connector's own machinery (batching, batch loads through Cloud Storage,
//! retries, caches): exactly once here, or what has no counterpart.

use super::Source;
use crate::migrate::report::Outcome;

/// The delivery line and those of the connector's machinery. `at_least_once`: upsert routes.
pub(super) fn delivery(s: &mut Source, at_least_once: bool) {
    let exactly = "delivery: exactly_once: at-least-once delivery (insertAll, or the Storage Write API's default stream) becomes exactly once: rows go to BUFFERED streams flushed only after Kafka committed their offsets";
    if !at_least_once {
        if s.props.contains_key("useStorageWriteApi") {
            s.note("useStorageWriteApi", Outcome::Changed(exactly.into()));
        } else {
            s.remark("delivery (insertAll)", Outcome::Changed(exactly.into()));
        }
    } else {
        s.note(
            "useStorageWriteApi",
            Outcome::Changed(
                "the Storage Write API always; at least once for upsert routes (above)".into(),
            ),
        );
    }
    for (key, outcome) in [
        ("enableBatchMode", Outcome::Changed("rows become visible every checkpoint.interval (5s) after their Kafka commit, not per batch commit".into())),
        ("commitInterval", Outcome::Changed("checkpoint.interval (default 5s) is the visibility latency; not copied, as the connector's 60 s minimum would only delay rows".into())),
        ("enableBatchLoad", Outcome::NotTranslatable("no batch loading through Cloud Storage: every topic streams through the Storage Write API".into())),
        ("gcsBucketName", Outcome::NotTranslatable("no batch loading through Cloud Storage".into())),
        ("gcsFolderName", Outcome::NotTranslatable("no batch loading through Cloud Storage".into())),
        ("batchLoadIntervalSec", Outcome::NotTranslatable("no batch loading through Cloud Storage".into())),
        ("autoCreateBucket", Outcome::NotTranslatable("no batch loading through Cloud Storage".into())),
        ("schemaRetriever", Outcome::Dropped("schemas come from the registry by the record's schema id".into())),
        ("avroDataCacheSize", Outcome::Dropped("compiled plans are cached per (schema, table) without a size setting".into())),
        ("queueSize", Outcome::Dropped("backpressure is writer.memory_limit (bytes held across the process)".into())),
        ("threadPoolSize", Outcome::Dropped("every partition has its own writer; requests in flight per stream: writer.max_inflight_requests".into())),
        ("bigQueryRetry", Outcome::Dropped("BigQuery errors are retried with backoff until they pass (src/backoff.rs)".into())),
        ("bigQueryRetryWait", Outcome::Dropped("BigQuery errors are retried with backoff until they pass (src/backoff.rs)".into())),
        ("max.retries", Outcome::Dropped("BigQuery errors are retried with backoff until they pass (src/backoff.rs)".into())),
        ("enableRetries", Outcome::Dropped("BigQuery errors are retried with backoff until they pass (src/backoff.rs)".into())),
        ("runtimeProvider", Outcome::Dropped("a user-agent detail".into())),
        ("config.action.reload", Outcome::Dropped("a config change is a rolling restart of the replicas".into())),
        ("intermediateTableSuffix", Outcome::Dropped("no intermediate tables".into())),
        ("mergeIntervalMs", Outcome::Dropped("no intermediate tables".into())),
        ("mergeRecordsThreshold", Outcome::Dropped("no intermediate tables".into())),
    ] {
        s.note(key, outcome);
    }
}
