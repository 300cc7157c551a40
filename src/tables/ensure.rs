//! A route's table as it must be before anything is consumed: read, or created (with its
//! dataset) when the route has `create_table`, from the fixed Avro schema, from the latest
//! schema of the topic's subject in the registry, or from the Kafka Connect schema of the topic's
//! newest record (`envelope_table.rs`).

use anyhow::{Context, anyhow, bail};

use super::cdc;
use super::envelope_table;
use super::plans::{WriterSchema, writer_schema};
use super::router::Creates;
use super::settings::registry_input;
use crate::backoff;
use crate::bigquery::rest_client::{
    Clustering, RestClient, Table, TableReference, TimePartitioning,
};
use crate::config::{self, Config, CreateTableConfig, TopicRoute};
use crate::registry::{AnySchema, SchemaRegistry};
use kbq_core::table_schema::TableSchema;
use kbq_transcode::protobuf::MessagePath;
use kbq_transcode::{AvroSchema, DeriveOptions, table_schema_from_avro};

/// Retries of a table read that failed transiently (about 75 s in all with
/// [`backoff::TABLE_READ`]) before the route fails.
const TABLE_READ_RETRIES: u32 = 10;

/// Reads the table, creating it (and its dataset) when the route has `create_table`: from the
/// fixed Avro schema, or from the latest schema of the topic's subject in the registry. With
/// [`Creates::Nothing`] beside the REST client, the table it would create is returned instead,
/// and nothing is written.
pub(super) async fn ensure_table(
    config: &Config,
    route: &TopicRoute<'_>,
    topic: &str,
    (rest, creates): (&RestClient, Creates),
    table: &TableReference,
    schema: Option<&AvroSchema>,
    registry: Option<&SchemaRegistry>,
) -> anyhow::Result<Table> {
    if let Some(existing) = read_table(rest, table).await? {
        return Ok(existing);
    }
    // Kafka Connect's envelope carries the schema: the one schemaless json that can make a table.
    let envelope = route.cdc.filter(|c| c.schemas_enable == Some(true));
    if route.format == Some(config::InputFormat::Json) && envelope.is_none() {
        bail!(
            "table {} (topic {topic}, {}) does not exist; schemaless json routes do not create tables",
            table.resource_name(),
            route.path,
        );
    }
    let Some(create) = route.create_table else {
        bail!(
            "table {} (topic {topic}, {}) does not exist and create_table is not set",
            table.resource_name(),
            route.path
        );
    };
    let options = DeriveOptions {
        map_mode: route.map_mode,
        metadata: route.metadata_columns.clone(),
        transforms: route.transforms.to_vec(),
    };
    let derived = match (schema, registry, &config.schema_registry) {
        _ if envelope.is_some() => {
            let cdc = envelope.expect("checked");
            envelope_table::derive(config, cdc, topic, &options).await?
        }
        (Some(schema), _, _) => derive_avro(schema, route.cdc, &options)?,
        (None, Some(registry), Some(sr)) => {
            let subject = sr.table_subject.replace("{topic}", topic);
            let from = Subject {
                registry,
                subject: &subject,
                topic,
                table,
            };
            derive_from_subject(config, route, from, &options).await?
        }
        (None, _, _) => bail!("neither schema_registry nor avro.schema_file is configured"),
    };
    let resource = table_resource(table, cdc::without_pseudo_columns(derived), create, route);
    if creates == Creates::Nothing {
        return Ok(resource);
    }
    rest.ensure_dataset(
        &table.project_id,
        &table.dataset_id,
        config.bigquery.location.as_deref(),
    )
    .await
    .with_context(|| format!("dataset {}", table.dataset_id))?;
    match rest.insert_table(&resource).await {
        Ok(t) => {
            tracing::info!(table = %table.resource_name(), topic, "table created");
            Ok(t)
        }
        // Another replica created it first.
        Err(e) if e.is_already_exists() => Ok(rest.get_table(table).await?),
        Err(e) => Err(e.into()),
    }
}

/// The table, or `None` when it does not exist; a transient failure is retried
/// [`TABLE_READ_RETRIES`] times.
async fn read_table(rest: &RestClient, table: &TableReference) -> anyhow::Result<Option<Table>> {
    let mut backoff = backoff::TABLE_READ;
    loop {
        match rest.get_table(table).await {
            Ok(t) => return Ok(Some(t)),
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) if e.is_retryable() && backoff.attempts() < TABLE_READ_RETRIES => {
                let after = backoff.next_delay();
                tracing::warn!(error = %e, attempt = backoff.attempts(), retry_in = ?after, table = %table.resource_name(), "cannot read the table yet, retrying");
                tokio::time::sleep(after).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The registry subject a table is created from, and what it is for.
struct Subject<'a> {
    registry: &'a SchemaRegistry,
    subject: &'a str,
    topic: &'a str,
    table: &'a TableReference,
}

/// The columns of the subject's latest schema. By default the subject is the TopicNameStrategy's
/// `<topic>-value`: its latest schema is what producers write now; older records still fit (the
/// registry's compatibility rules), and later ones add columns through schema_update.
async fn derive_from_subject(
    config: &Config,
    route: &TopicRoute<'_>,
    from: Subject<'_>,
    options: &DeriveOptions,
) -> anyhow::Result<TableSchema> {
    let Subject {
        registry,
        subject,
        topic,
        table,
    } = from;
    let context = || {
        format!(
            "cannot create table {} from the registry",
            table.resource_name()
        )
    };
    let (id, kind) = registry.latest_id(subject).await.with_context(context)?;
    let pinned = registry_input(config, route.format).kind;
    if let Some(pinned) = pinned.filter(|p| *p != kind) {
        bail!(
            "cannot create table {}: the latest schema of subject {subject} (id {id}) is {}, but {} reads {}",
            table.resource_name(),
            kind.as_str(),
            route.path,
            pinned.as_str()
        );
    }
    let registered = registry
        .any_schema(id, Some(kind))
        .await
        .with_context(context)?;
    tracing::info!(topic, subject = %subject, schema_id = id, format = kind.as_str(), "creating the table from the subject's latest schema");
    let derived = match &registered {
        AnySchema::Avro(r) => derive_avro(&r.schema, route.cdc, options)?,
        other => {
            let writer = match other {
                // The message the route names, or the file's only one: never a guess among
                // several (docs/mapping.md, "Which message a table holds").
                AnySchema::Protobuf(p) => {
                    let named = route.create_table.and_then(|c| c.protobuf_message.as_deref());
                    let message = p.schema.table_message(named).map_err(|e| {
                        anyhow!(
                            "cannot create table {} (topic {topic}, {}) from schema id {id} of subject {subject}: {e}",
                            table.resource_name(),
                            route.path
                        )
                    })?;
                    WriterSchema::Protobuf(message)
                }
                _ => writer_schema(other, id, &MessagePath::FIRST)
                    .map_err(|bad| anyhow!("{}", bad.reason))?,
            };
            match route.cdc {
                Some(c) => cdc::row_writer(writer, c)?,
                None => writer,
            }
        }
        .derive(options)
        .map_err(|e| {
            anyhow!(
                "cannot derive a table schema from the {} schema {id}: {e}",
                kind.as_str()
            )
        })?,
    };
    Ok(derived)
}

/// The table to insert: its columns, and the route's `create_table` options (with a CDC route's
/// primary key and staleness).
fn table_resource(
    table: &TableReference,
    schema: TableSchema,
    create: &CreateTableConfig,
    route: &TopicRoute<'_>,
) -> Table {
    let (table_constraints, max_staleness) = match route.cdc {
        Some(c) => cdc::creation_options(c),
        None => (None, None),
    };
    Table {
        table_reference: table.clone(),
        schema,
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
        table_constraints,
        max_staleness,
        etag: None,
    }
}

/// The columns of an Avro writer schema (of the rows inside it, for a CDC route).
fn derive_avro(
    schema: &AvroSchema,
    cdc: Option<&config::CdcConfig>,
    options: &DeriveOptions,
) -> anyhow::Result<TableSchema> {
    let row;
    let schema = match cdc {
        Some(c) => {
            row = cdc::row_schema(schema, c)?;
            &row
        }
        None => schema,
    };
    table_schema_from_avro(schema, options)
        .map_err(|e| anyhow!("cannot derive a table schema from the avro schema: {e}"))
}
