//! `run`: builds the daemon from a validated config — the ops server, BigQuery clients, the
//! router (tables and plan sources per topic), dead-letter producer, consumer thread and
//! checkpoint coordinator — and runs it
//! until SIGTERM/SIGINT (or the consumer fails for good).

use std::sync::Arc;
use std::time::Duration;

use crate::writer::stream_quota::StreamCreationLimiter;
use anyhow::{Context, anyhow, bail};
use tokio_util::sync::CancellationToken;

use crate::checkpoint::coordinator::{Coordinator, CoordinatorSettings, Exit};
use crate::checkpoint::machine::Machine;
use crate::config::{Config, Delivery, defaults};
use crate::kafka::consumer::{self, ConsumerSettings};
use crate::kafka::dead_letter::DeadLetterProducer;
use crate::kafka::memory_budget::MemoryBudget;
use crate::ops::http::{self, Health};
use crate::ops::metrics::Metrics;
use crate::tables::Router;
use crate::writer::append_session::SessionLimits;
use crate::writer::partition_writer::{WriterSettings, WriterShared};
use kbq_core::bad_record::BadRecordPolicy;
use kbq_core::ledger::AtLeastOnceLedger;
use kbq_core::metadata::{MetadataVersion, TableFingerprint};
use kbq_core::protocol::{CheckpointProtocol, ProtocolConfig};

/// Runs the daemon. Returns when shutdown completed.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::new(defaults::HEALTH_STALE_AFTER));
    crate::ops::panics::install(health.clone());
    let ops = http::serve(
        config.metrics.listen,
        metrics.clone(),
        health.clone(),
        shutdown.clone(),
    )
    .await
    .with_context(|| format!("cannot listen on metrics.listen {}", config.metrics.listen))?;
    tracing::info!(address = %ops, "ops endpoints: /metrics /healthz /readyz");

    let (client, rest) = crate::bigquery::clients(&config)?;

    let config = Arc::new(config);
    let router = Arc::new(Router::new(
        config.clone(),
        rest.clone(),
        client.clone(),
        metrics.clone(),
        group_label(&config.kafka.group_id),
    ));
    if !resolve_listed_topics(&config, &router, &shutdown).await? {
        return Ok(());
    }
    let writer_shared = Arc::new(WriterShared {
        client,
        dead_letter: dead_letter_producer(&config).await?,
        metrics: metrics.clone(),
        stream_creation: Arc::new(StreamCreationLimiter::for_a_replica()),
        settings: writer_settings(&config),
    });
    let consumer_settings = consumer_settings(&config, &metrics);
    let settings = coordinator_settings(&config, router, &consumer_settings);
    let (consumer, events) = consumer::spawn(consumer_settings)?;
    let recovery = protocol_config(&config);
    let machine = match config.delivery {
        Delivery::ExactlyOnce => Machine::ExactlyOnce(CheckpointProtocol::new(recovery)),
        Delivery::AtLeastOnce => Machine::AtLeastOnce(AtLeastOnceLedger::new(recovery)),
    };
    let exit = Coordinator::new(
        machine,
        settings,
        consumer,
        events,
        writer_shared,
        rest,
        metrics,
        health,
    )
    .run(shutdown)
    .await;
    match exit {
        Exit::Shutdown => Ok(()),
        Exit::ConsumerFailed(reason) => Err(anyhow!("kafka consumer failed: {reason}")),
    }
}

/// Resolves the routes of an explicit topic list now, so that a table that cannot be written
/// fails the start; topics of a pattern are routed when their first partition is assigned.
/// Returns `false` when a shutdown was requested meanwhile.
async fn resolve_listed_topics(
    config: &Config,
    router: &Router,
    shutdown: &CancellationToken,
) -> anyhow::Result<bool> {
    // A table read is retried for up to about a minute; a SIGTERM meanwhile must not wait for
    // it (Kubernetes kills the pod 30 s after the signal): nothing is consumed yet, so there is
    // nothing to checkpoint and the process leaves at once.
    for topic in &config.kafka.topics {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                tracing::info!(topic, "shutdown requested during start-up: leaving before the topic is routed");
                return Ok(false);
            }
            routed = router.resolve(topic) => {
                routed.with_context(|| format!("topic {topic}"))?;
            }
        }
    }
    Ok(true)
}

/// The dead-letter producer, when bad records go to a dead-letter topic.
async fn dead_letter_producer(config: &Config) -> anyhow::Result<Option<DeadLetterProducer>> {
    match (&config.dead_letter, config.on_bad_record) {
        (Some(dl), BadRecordPolicy::DeadLetter) => {
            let topic = dl
                .topic
                .as_deref()
                .ok_or_else(|| anyhow!("dead_letter.topic is required"))?;
            let properties = dl.producer_properties(&config.kafka);
            let limit = crate::kafka::dead_letter::topic_max_message_bytes(
                &properties,
                topic,
                defaults::KAFKA_REQUEST_TIMEOUT,
            )
            .await;
            Ok(Some(DeadLetterProducer::sized(
                &properties,
                topic,
                defaults::DEAD_LETTER_SEND_TIMEOUT,
                limit,
            )?))
        }
        (None, BadRecordPolicy::DeadLetter) => {
            bail!("dead_letter.topic is required when on_bad_record is dead_letter")
        }
        _ => Ok(None),
    }
}

/// What every partition writer is configured with.
fn writer_settings(config: &Config) -> WriterSettings {
    let w = &config.writer;
    WriterSettings {
        max_request_bytes: w.max_request_bytes.0 as usize,
        max_rows_per_request: w.max_rows_per_request as usize,
        linger: w.linger.0,
        session: SessionLimits {
            max_inflight_requests: w.max_inflight_requests as usize,
            max_inflight_bytes: w.max_inflight_bytes.0 as usize,
            response_timeout: w.response_timeout.0,
            reconnect_backoff_min: defaults::SESSION_RECONNECT_BACKOFF_MIN,
            reconnect_backoff_max: defaults::SESSION_RECONNECT_BACKOFF_MAX,
            max_reconnect_attempts: defaults::SESSION_MAX_RECONNECT_ATTEMPTS,
        },
        on_bad_record: config.on_bad_record,
        lookup_backoff: defaults::PLAN_LOOKUP_BACKOFF,
        default_stream: config.delivery == Delivery::AtLeastOnce,
    }
}

/// The consumer thread's settings: librdkafka's properties, the subscription, the memory budget.
fn consumer_settings(config: &Config, metrics: &Arc<Metrics>) -> ConsumerSettings {
    ConsumerSettings {
        properties: config.consumer_properties().0,
        topics: config.kafka.subscription(),
        excluded_topics: config.excluded_topics(),
        handoff_deadline: config.shutdown_deadline.0.min(defaults::HANDOFF_DEADLINE),
        request_timeout: defaults::KAFKA_REQUEST_TIMEOUT,
        max_stash_records: defaults::MAX_STASH_RECORDS,
        metrics: Some(metrics.clone()),
        memory: Some(MemoryBudget::new(
            config.writer.memory_limit.0,
            metrics.memory_budget_used.clone(),
        )),
        read_headers: config.on_bad_record == BadRecordPolicy::DeadLetter
            || config.bigquery.metadata_columns.headers.is_some()
            || (config.routes.iter()).any(|r| {
                r.metadata_columns
                    .as_ref()
                    .is_some_and(|m| m.headers.is_some())
            }),
        faults: Default::default(),
    }
}

/// The coordinator's timing: the checkpoint interval, drain and shutdown deadlines, when a
/// silent partition is a zombie (after the consumer's session timeout) or stalled.
fn coordinator_settings(
    config: &Config,
    router: Arc<Router>,
    consumer: &ConsumerSettings,
) -> CoordinatorSettings {
    let session_timeout = (consumer.properties)
        .get("session.timeout.ms")
        .and_then(|ms| ms.parse::<u64>().ok())
        .map_or(defaults::KAFKA_SESSION_TIMEOUT, Duration::from_millis);
    CoordinatorSettings {
        router,
        checkpoint_interval: config.checkpoint.interval.0,
        writer_drain: config.shutdown_deadline.0 / 2,
        shutdown_deadline: config.shutdown_deadline.0,
        // Records in a writer's channel are charged to `writer.memory_limit`, whose gate bounds
        // them; a full channel stashes records and pauses the partition, and librdkafka resumes
        // fetching a broker's partitions after all were paused only at its next one-second tick
        // (one partition drained at 36 MB/s with 4,096 here). So the channel is sized to be
        // filled only by records far smaller than 1 KB.
        writer_channel: defaults::WRITER_CHANNEL_RECORDS,
        zombie_confirm_after: session_timeout.max(defaults::MIN_ZOMBIE_CONFIRM),
        stall_after: config.checkpoint.partition_stall_timeout.0,
    }
}

/// The protocol's (and the ledger's) policies, every one from the config or its defaults.
fn protocol_config(config: &Config) -> ProtocolConfig {
    let r = &config.recovery;
    ProtocolConfig {
        write_version: MetadataVersion::CURRENT,
        lost_stream: config.effective_lost_stream(),
        on_anomaly: r.on_anomaly,
        initial_position: r.start_from,
        on_missing_checkpoint: r.lost_offsets,
        new_partition: r.new_partitions,
        on_out_of_range: r.on_out_of_range,
        isolate_after_commit_failures: config.checkpoint.commit_failure_isolation_threshold,
        not_found_retries: defaults::STREAM_NOT_FOUND_RETRIES,
        resolve_attempts: r
            .resolve_attempts
            .unwrap_or(defaults::RECOVERY_RESOLVE_ATTEMPTS),
        resolve_fallback: r.resolve_fallback,
        max_uncommitted_bytes: config.writer.max_uncommitted_bytes.0,
    }
}

/// The table label that marks "this consumer group has committed a checkpoint for this table"
/// (docs/architecture.md, invariant 7): `kbq_group_` + FNV-1a of the group id (label keys allow
/// only lower-case letters, digits, `_` and `-`).
pub fn group_label(group_id: &str) -> String {
    // The same stable hash as the table fingerprint of the checkpoint metadata.
    format!("kbq_group_{}", TableFingerprint::of_table_path(group_id))
}
