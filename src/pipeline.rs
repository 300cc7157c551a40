//! `run`: builds the daemon from a validated config — the ops server, BigQuery clients, the table,
//! plan source, dead-letter producer, consumer thread and checkpoint coordinator — and runs it
//! until SIGTERM/SIGINT (or the consumer fails for good).

use std::sync::Arc;
use std::time::Duration;

use crate::writer::stream_quota::StreamCreationLimiter;
use anyhow::{Context, anyhow, bail};
use tokio_util::sync::CancellationToken;

use crate::bigquery::auth::Auth;
use crate::bigquery::rest_client::{
    Clustering, RestClient, Table, TableReference, TimePartitioning,
};
use crate::bigquery::write_client::{WriteClient, WriteClientOptions};
use crate::checkpoint::at_least_once::AtLeastOnceCoordinator;
use crate::checkpoint::coordinator::{Coordinator, CoordinatorSettings, Exit, ResolveColumns};
use crate::checkpoint::metadata::TableFingerprint;
use crate::checkpoint::protocol::{
    AnomalyPolicy, CheckpointProtocol, LostStreamPolicy, MissingCheckpointPolicy, OutOfRangePolicy,
    ProtocolConfig, StartFrom,
};
use crate::config::{self, Config, Credentials, Delivery, OnBadRecord};
use crate::kafka::consumer::{self, ConsumerSettings};
use crate::kafka::dead_letter::DeadLetterProducer;
use crate::kafka::memory_budget::MemoryBudget;
use crate::ops::http::{self, Health};
use crate::ops::metrics::Metrics;
use crate::registry::{BasicAuth, RegistryConfig, SchemaRegistry};
use crate::transcode::{
    AvroSchema, DeriveOptions, MapMode, MetadataColumns, PlanOptions, UnknownFields,
    table_schema_from_avro,
};
use crate::writer::append_session::SessionLimits;
use crate::writer::partition_writer::{BadRecordPolicy, PlanSource, WriterSettings, WriterShared};
use crate::writer::plans::{FixedPlan, RegistryPlans, SchemaEvolution};

const GOOGLE_STORAGE_ENDPOINT: &str = "https://bigquerystorage.googleapis.com";
const GOOGLE_REST_ENDPOINT: &str = "https://bigquery.googleapis.com";

/// Runs the daemon. Returns when shutdown completed.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::new(Duration::from_secs(30)));
    let ops = http::serve(
        config.metrics.listen,
        metrics.clone(),
        health.clone(),
        shutdown.clone(),
    )
    .await
    .with_context(|| format!("cannot listen on metrics.listen {}", config.metrics.listen))?;
    tracing::info!(address = %ops, "ops endpoints: /metrics /healthz /readyz");

    let (client, rest) = bigquery_clients(&config)?;

    let table_id = single_table(&config)?;
    metrics.preregister(&table_id, &config.kafka.topics);
    let table_ref = TableReference::new(
        &config.bigquery.project,
        &config.bigquery.dataset,
        &table_id,
    );
    let fixed_schema = match &config.avro {
        Some(avro) => Some(
            AvroSchema::read_avsc(&avro.schema_file)
                .map_err(|e| anyhow!("avro.schema_file: {e}"))?,
        ),
        None => None,
    };
    let table = ensure_table(&config, &rest, &table_ref, fixed_schema.as_ref()).await?;
    let group_label = group_label(&config.kafka.group_id);
    let table_marked = table.labels.contains_key(&group_label);

    let plan_options = PlanOptions {
        unknown_fields: match config.bigquery.unknown_fields {
            config::UnknownFields::Ignore => UnknownFields::Ignore,
            config::UnknownFields::Error => UnknownFields::Error,
        },
        metadata: metadata_columns(&config),
    };
    let plans: Arc<dyn PlanSource> = match (&config.schema_registry, &fixed_schema) {
        (_, Some(schema)) => Arc::new(
            FixedPlan::new(schema, &table.schema, &plan_options)
                .map_err(|e| anyhow!("the avro schema does not fit the table: {e}"))?,
        ),
        (Some(sr), None) => {
            let registry = SchemaRegistry::new(registry_config(sr)?).map_err(|e| anyhow!("{e}"))?;
            let evolution = Some(SchemaEvolution {
                add_columns: config.bigquery.schema_update == config::SchemaUpdate::AddColumns,
                rest: rest.clone(),
                client: client.clone(),
                table: table_ref.clone(),
                derive: DeriveOptions {
                    map_mode: map_mode(&config),
                    metadata: MetadataColumns::default(),
                },
                visible_timeout: Duration::from_secs(30),
                poll_interval: Duration::from_millis(500),
            });
            Arc::new(RegistryPlans::new(
                registry,
                table.schema.clone(),
                plan_options,
                metrics.clone(),
                evolution,
            ))
        }
        (None, None) => bail!("neither schema_registry nor avro.schema_file is configured"),
    };

    let dead_letter = match (&config.dead_letter, config.on_bad_record) {
        (Some(dl), OnBadRecord::DeadLetter) => {
            let topic = dl
                .topic
                .as_deref()
                .ok_or_else(|| anyhow!("dead_letter.topic is required"))?;
            Some(DeadLetterProducer::new(
                &dl.producer_properties(&config.kafka),
                topic,
                Duration::from_secs(30),
            )?)
        }
        (None, OnBadRecord::DeadLetter) => {
            bail!("dead_letter.topic is required when on_bad_record is dead_letter")
        }
        _ => None,
    };
    let w = &config.writer;
    let writer_shared = Arc::new(WriterShared {
        client,
        plans,
        dead_letter,
        metrics: metrics.clone(),
        // A burst covers the partitions of one assignment; the steady rate stays far below the
        // project's ~10,000 creations an hour even with several replicas rebalancing.
        stream_creation: Arc::new(StreamCreationLimiter::new(64, 1.0)),
        settings: WriterSettings {
            table: table_ref.resource_name(),
            table_label: table_id.clone(),
            max_request_bytes: w.max_request_bytes.0 as usize,
            max_rows_per_request: w.max_rows_per_request as usize,
            linger: w.linger.0,
            session: SessionLimits {
                max_inflight_requests: w.max_inflight_requests as usize,
                max_inflight_bytes: w.max_inflight_bytes.0 as usize,
                response_timeout: w.response_timeout.0,
                ..SessionLimits::default()
            },
            on_bad_record: match config.on_bad_record {
                OnBadRecord::DeadLetter => BadRecordPolicy::DeadLetter,
                OnBadRecord::Skip => BadRecordPolicy::Skip,
                OnBadRecord::Fail => BadRecordPolicy::Fail,
            },
            lookup_backoff: Duration::from_secs(1),
            default_stream: config.delivery == Delivery::AtLeastOnce,
        },
    });

    let recovery = protocol_config(&config, &table_ref);
    let consumer_properties = config.kafka.consumer_properties().0;
    let session_timeout = consumer_properties
        .get("session.timeout.ms")
        .and_then(|ms| ms.parse::<u64>().ok())
        .map_or(Duration::from_secs(45), Duration::from_millis);
    let (consumer, events) = consumer::spawn(ConsumerSettings {
        properties: consumer_properties,
        topics: config.kafka.subscription(),
        handoff_deadline: config.shutdown_deadline.0.min(Duration::from_secs(30)),
        request_timeout: Duration::from_secs(10),
        max_stash_records: 10_000,
        metrics: Some(metrics.clone()),
        memory: Some(MemoryBudget::new(
            config.writer.memory_limit.0,
            metrics.memory_budget_used.clone(),
        )),
    })?;
    let cols = &config.bigquery.metadata_columns;
    let resolve = match (&cols.partition, &cols.offset) {
        (Some(partition), Some(offset)) => Some(ResolveColumns {
            topic: cols.topic.clone(),
            partition: partition.clone(),
            offset: offset.clone(),
        }),
        _ => None,
    };
    let settings = CoordinatorSettings {
        table: table_ref,
        checkpoint_interval: config.checkpoint.interval.0,
        writer_drain: config.shutdown_deadline.0 / 2,
        shutdown_deadline: config.shutdown_deadline.0,
        writer_channel: 4096,
        group_label,
        resolve,
        zombie_confirm_after: session_timeout.max(Duration::from_secs(1)),
    };
    let exit = match config.delivery {
        Delivery::ExactlyOnce => {
            let protocol = CheckpointProtocol::new(recovery, table_marked);
            Coordinator::new(
                protocol,
                settings,
                consumer,
                events,
                writer_shared,
                rest,
                metrics,
                health,
            )
            .run(shutdown)
            .await
        }
        Delivery::AtLeastOnce => {
            AtLeastOnceCoordinator::new(
                recovery,
                table_marked,
                settings,
                consumer,
                events,
                writer_shared,
                rest,
                metrics,
                health,
            )
            .run(shutdown)
            .await
        }
    };
    match exit {
        Exit::Shutdown => Ok(()),
        Exit::ConsumerFailed(reason) => Err(anyhow!("kafka consumer failed: {reason}")),
    }
}

/// The Storage Write API and REST clients for the configured endpoint and credentials.
pub(crate) fn bigquery_clients(config: &Config) -> anyhow::Result<(WriteClient, RestClient)> {
    let auth = match &config.bigquery.credentials {
        Credentials::Adc => Auth::application_default()?,
        Credentials::KeyFile(path) => Auth::service_account_key_file(path)?,
        Credentials::None => Auth::None,
    };
    let (grpc_endpoint, rest_endpoint) = match &config.bigquery.endpoint {
        Some(e) => (e.clone(), e.clone()),
        None => (
            GOOGLE_STORAGE_ENDPOINT.to_string(),
            GOOGLE_REST_ENDPOINT.to_string(),
        ),
    };
    let rest = RestClient::new(&rest_endpoint, auth.clone(), Duration::from_secs(60))?;
    let client = WriteClient::new(
        &WriteClientOptions {
            endpoint: grpc_endpoint,
            rpc_timeout: config.writer.response_timeout.0,
            connect_timeout: Duration::from_secs(10),
        },
        auth,
    )
    .map_err(|e| anyhow!("{e}"))?;
    Ok((client, rest))
}

/// This release writes one table per process: a `{topic}` template is allowed when it resolves
/// to one table (one topic).
pub(crate) fn single_table(config: &Config) -> anyhow::Result<String> {
    let t = &config.bigquery.table;
    if !t.contains("{topic}") {
        return Ok(t.clone());
    }
    match (config.kafka.topics.as_slice(), &config.kafka.topic_pattern) {
        ([topic], None) => Ok(t.replace("{topic}", &sanitize_table_name(topic))),
        _ => bail!(
            "bigquery.table: routing several topics to several tables is not implemented yet; name one table or subscribe to one topic"
        ),
    }
}

/// Kafka topic names may hold `.` and `-`, which BigQuery table ids do not accept.
fn sanitize_table_name(topic: &str) -> String {
    topic
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Reads the table, creating it (and its dataset) from the Avro schema when configured.
async fn ensure_table(
    config: &Config,
    rest: &RestClient,
    table: &TableReference,
    schema: Option<&AvroSchema>,
) -> anyhow::Result<Table> {
    let mut attempt = 0u32;
    loop {
        match rest.get_table(table).await {
            Ok(t) => return Ok(t),
            Err(e) if e.is_not_found() => break,
            Err(e) if e.is_retryable() && attempt < 10 => {
                attempt += 1;
                tracing::warn!(error = %e, attempt, "cannot read the table yet, retrying");
                tokio::time::sleep(Duration::from_secs(attempt as u64)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let Some(create) = &config.bigquery.create_table else {
        bail!(
            "table {} does not exist and bigquery.create_table is not set",
            table.resource_name()
        );
    };
    let Some(schema) = schema else {
        bail!(
            "bigquery.create_table needs avro.schema_file in this release (creating from the first registry schema is not implemented yet)"
        );
    };
    let derived = table_schema_from_avro(
        schema,
        &DeriveOptions {
            map_mode: map_mode(config),
            metadata: metadata_columns(config),
        },
    )
    .map_err(|e| anyhow!("cannot derive a table schema from the avro schema: {e}"))?;
    rest.ensure_dataset(
        &table.project_id,
        &table.dataset_id,
        config.bigquery.location.as_deref(),
    )
    .await?;
    let resource = Table {
        table_reference: table.clone(),
        schema: derived,
        time_partitioning: create.time_partitioning.as_ref().map(|p| TimePartitioning {
            partition_type: format!("{:?}", p.kind).to_uppercase(),
            field: p.field.clone(),
            expiration_ms: p.expiration.map(|d| d.0.as_millis().to_string()),
        }),
        clustering: (!create.clustering.is_empty()).then(|| Clustering {
            fields: create.clustering.clone(),
        }),
        require_partition_filter: create.require_partition_filter.then_some(true),
        description: create.description.clone(),
        labels: create.labels.clone(),
        etag: None,
    };
    match rest.insert_table(&resource).await {
        Ok(t) => {
            tracing::info!(table = %table.resource_name(), "table created");
            Ok(t)
        }
        // Another replica created it first.
        Err(e) if e.is_already_exists() => Ok(rest.get_table(table).await?),
        Err(e) => Err(e.into()),
    }
}

fn map_mode(config: &Config) -> MapMode {
    match config.bigquery.map_mode {
        config::MapMode::Struct => MapMode::Repeated,
        config::MapMode::Json => MapMode::Json,
    }
}

fn metadata_columns(config: &Config) -> MetadataColumns {
    let c = &config.bigquery.metadata_columns;
    MetadataColumns {
        topic: c.topic.clone(),
        partition: c.partition.clone(),
        offset: c.offset.clone(),
        timestamp: c.timestamp.clone(),
        key: c.key.clone(),
        headers: c.headers.clone(),
    }
}

fn registry_config(sr: &config::SchemaRegistryConfig) -> anyhow::Result<RegistryConfig> {
    let ca_pem = match &sr.ca_file {
        Some(path) => Some(
            std::fs::read(path)
                .with_context(|| format!("schema_registry.ca_file {}", path.display()))?,
        ),
        None => None,
    };
    Ok(RegistryConfig {
        url: sr.url.clone(),
        basic_auth: sr.username.as_ref().map(|u| BasicAuth {
            username: u.clone(),
            password: sr
                .password
                .as_ref()
                .map(|p| p.expose().to_string())
                .unwrap_or_default(),
        }),
        bearer_token: sr.bearer_token.as_ref().map(|t| t.expose().to_string()),
        ca_pem,
        request_timeout: sr.timeout.0,
        max_attempts: sr.retries.max(1) as usize,
        ..RegistryConfig::default()
    })
}

fn protocol_config(config: &Config, table: &TableReference) -> ProtocolConfig {
    let r = &config.recovery;
    let mut p = ProtocolConfig::new(TableFingerprint::of_table_path(&table.resource_name()));
    p.lost_stream = match r.effective_lost_stream(&config.bigquery, &config.kafka) {
        config::LostStream::Resolve => LostStreamPolicy::Resolve,
        config::LostStream::Rewind => LostStreamPolicy::Rewind,
        config::LostStream::Fail => LostStreamPolicy::Fail,
    };
    p.on_anomaly = match r.on_anomaly {
        config::OnAnomaly::Fail => AnomalyPolicy::Fail,
        config::OnAnomaly::Continue => AnomalyPolicy::Continue,
    };
    let start = |s: config::StartFrom| match s {
        config::StartFrom::Earliest => StartFrom::Earliest,
        config::StartFrom::Latest => StartFrom::Latest,
    };
    p.initial_position = start(r.start_from);
    p.new_partition = start(r.new_partitions);
    p.on_missing_checkpoint = match r.lost_offsets {
        config::LostOffsets::Fail => MissingCheckpointPolicy::Fail,
        config::LostOffsets::Earliest => MissingCheckpointPolicy::Earliest,
        config::LostOffsets::Latest => MissingCheckpointPolicy::Latest,
    };
    p.on_out_of_range = OutOfRangePolicy::Fail;
    p.isolate_after_commit_failures = config.checkpoint.commit_failure_isolation_threshold;
    p.max_uncommitted_bytes = config.writer.max_uncommitted_bytes.0;
    p
}

/// The table label that marks "this consumer group has committed a checkpoint for this table"
/// (DESIGN §2, start position): `kbq_group_` + FNV-1a of the group id (label keys allow only
/// lower-case letters, digits, `_` and `-`).
pub fn group_label(group_id: &str) -> String {
    // The same stable hash as the table fingerprint of the checkpoint metadata.
    format!("kbq_group_{}", TableFingerprint::of_table_path(group_id))
}
