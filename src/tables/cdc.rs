//! What a CDC route needs of its table (docs/cdc.md): the row schema to create it from, the
//! primary key and `max_staleness` to create it with, and the check that an existing table has
//! the configured primary key.

use anyhow::{anyhow, bail};

use super::cdc_plans::{ChangeInput, ChangePlans};
use super::plans::{WriterSchema, writer_schema};
use crate::bigquery::rest_client::{PrimaryKey, Table, TableConstraints, TableReference};
use crate::config::{CdcConfig, CdcFormat, CdcMode, MAX_KEY_COLUMNS, TopicRoute};
use crate::registry::SchemaRegistry;
use crate::writer::change_source::ChangeRules;
use kbq_core::table_schema::{FieldType, Mode, TableSchema};
use kbq_transcode::change::{
    CHANGE_SEQUENCE_NUMBER, CHANGE_TYPE, ChangeFormat, ChangeShape, ConnectEnvelope, JsonShape,
    ProtoShape,
};
use kbq_transcode::protobuf::MessagePath;
use kbq_transcode::{AvroSchema, DeriveOptions, PlanOptions};

pub(super) fn format(cdc: &CdcConfig) -> ChangeFormat {
    match cdc.format {
        CdcFormat::Debezium => ChangeFormat::Debezium,
        CdcFormat::Unwrapped => ChangeFormat::Unwrapped,
        CdcFormat::Plain => ChangeFormat::Plain {
            field: cdc.change_type_field.clone().unwrap_or_default(),
        },
    }
}

/// The schema of the rows inside `schema`'s records (the `after` record of an envelope), which
/// a created table's columns are derived from.
pub(super) fn row_schema(schema: &AvroSchema, cdc: &CdcConfig) -> anyhow::Result<AvroSchema> {
    let (_, row) = ChangeShape::new(schema, &format(cdc), cdc.sequence.source_field.as_deref())
        .map_err(|e| anyhow!("cdc: {e}"))?;
    Ok(row)
}

/// The schema of the rows inside a writer schema's records, in its own format: what a created
/// table's columns are derived from.
pub(super) fn row_writer(writer: WriterSchema, cdc: &CdcConfig) -> anyhow::Result<WriterSchema> {
    let source = cdc.sequence.source_field.as_deref();
    let cdc_error = |e: String| anyhow!("cdc: {e}");
    Ok(match writer {
        WriterSchema::Avro(s) => WriterSchema::Avro(row_schema(&s, cdc)?),
        WriterSchema::Protobuf(m) => WriterSchema::Protobuf(
            ProtoShape::new(&m, &format(cdc), source)
                .map_err(cdc_error)?
                .1,
        ),
        WriterSchema::Json(s) => {
            let (_, row) =
                JsonShape::new(Some(&s), false, &format(cdc), source).map_err(cdc_error)?;
            WriterSchema::Json(row.unwrap_or(s))
        }
    })
}

/// The column types a primary key may have (BigQuery's table constraints).
const KEY_TYPES: [FieldType; 8] = [
    FieldType::BigNumeric,
    FieldType::Bool,
    FieldType::Date,
    FieldType::DateTime,
    FieldType::Int64,
    FieldType::Numeric,
    FieldType::String,
    FieldType::Timestamp,
];

/// The primary key a Kafka key's record schema gives: its fields, in order, each of a type a
/// primary key may have, at most 16. `Err` says why not (the caller names the subject).
pub(super) fn key_columns(key: &WriterSchema) -> Result<Vec<String>, String> {
    let columns = key
        .derive(&DeriveOptions::default())
        .map_err(|e| format!("the key schema is not a record of columns: {e}"))?
        .fields;
    if columns.is_empty() || columns.len() > MAX_KEY_COLUMNS {
        return Err(format!(
            "a primary key has 1 to {MAX_KEY_COLUMNS} columns; the key record has {}",
            columns.len()
        ));
    }
    for c in &columns {
        if c.mode() == Mode::Repeated || !KEY_TYPES.contains(&c.field_type) {
            return Err(format!(
                "key field {} is {}{}: a primary key column is BIGNUMERIC, BOOL, DATE, DATETIME, INT64, NUMERIC, STRING or TIMESTAMP",
                c.name,
                if c.mode() == Mode::Repeated {
                    "REPEATED "
                } else {
                    ""
                },
                c.field_type.as_str()
            ));
        }
    }
    Ok(columns.into_iter().map(|c| c.name).collect())
}

/// The route's CDC settings with the primary key filled in from the Kafka key's latest
/// registered schema (`key_subject`, by default `{topic}-key`), or from the key schema of the
/// topic's newest record in Kafka Connect's envelope, when the config lists none.
pub(super) async fn with_key(
    config: &crate::config::Config,
    cdc: &CdcConfig,
    registry: Option<&SchemaRegistry>,
    topic: &str,
    route: &TopicRoute<'_>,
) -> anyhow::Result<CdcConfig> {
    if cdc.primary_key.is_some() {
        return Ok(cdc.clone());
    }
    if cdc.schemas_enable == Some(true) {
        // Kafka Connect's envelope: the key's schema comes with the records.
        let columns = super::envelope_table::key_columns(config, topic)
            .await
            .map_err(|e| anyhow!("{}.cdc.primary_key is not set and {e}", route.path))?;
        tracing::info!(topic, primary_key = ?columns, "primary key taken from the kafka key's schema in kafka connect's envelope");
        let mut out = cdc.clone();
        out.primary_key = Some(columns);
        return Ok(out);
    }
    let Some(registry) = registry else {
        bail!(
            "{}.cdc.primary_key is not set and there is no schema_registry to read the kafka key's schema from",
            route.path
        );
    };
    let subject = cdc.key_subject(topic);
    // The field that named the subject, for the error.
    let field = if cdc.key_subject.is_some() {
        format!("{}.cdc.key_subject: ", route.path)
    } else {
        format!("{}.cdc.primary_key is not set and ", route.path)
    };
    let unreadable =
        |e: &dyn std::fmt::Display| anyhow!("{field}the kafka key's schema cannot be read: {e}");
    // Any registry format: Avro, Protobuf (the file's first message, which Confluent's
    // serializers frame as `[0]`) or JSON Schema.
    let (id, kind) = registry
        .latest_id(&subject)
        .await
        .map_err(|e| unreadable(&e))?;
    let key = registry
        .any_schema(id, Some(kind))
        .await
        .map_err(|e| unreadable(&e))?;
    let columns = writer_schema(&key, id, &MessagePath::FIRST)
        .map_err(|bad| bad.reason)
        .and_then(|key| key_columns(&key))
        .map_err(|e| {
            anyhow!(
                "{field}subject {subject} (schema id {id}) gives no primary key: {e}; list the key columns"
            )
        })?;
    tracing::info!(topic, subject = %subject, schema_id = id, format = kind.as_str(), primary_key = ?columns, "primary key taken from the kafka key's schema");
    let mut out = cdc.clone();
    out.primary_key = Some(columns);
    Ok(out)
}

/// The derived columns without the pseudo-columns (they are never table columns).
pub(super) fn without_pseudo_columns(mut schema: TableSchema) -> TableSchema {
    schema
        .fields
        .retain(|f| f.name != CHANGE_TYPE && f.name != CHANGE_SEQUENCE_NUMBER);
    schema
}

/// `tableConstraints` and `maxStaleness` of a table `create_table` makes.
pub(super) fn creation_options(cdc: &CdcConfig) -> (Option<TableConstraints>, Option<String>) {
    let constraints = TableConstraints {
        primary_key: Some(PrimaryKey {
            columns: cdc.key().to_vec(),
        }),
    };
    (Some(constraints), cdc.max_staleness.map(|d| interval(d.0)))
}

/// An SQL interval in BigQuery's canonical form: `0-0 D H:M:S`.
fn interval(d: std::time::Duration) -> String {
    let s = d.as_secs();
    format!(
        "0-0 {} {}:{}:{}",
        s / 86_400,
        s % 86_400 / 3600,
        s % 3600 / 60,
        s % 60
    )
}

/// An existing table must have exactly the configured primary key: BigQuery applies upserts and
/// deletes by the table's key, so another key would merge or split rows the source keeps apart.
pub fn check_table(
    table: &Table,
    cdc: &CdcConfig,
    reference: &TableReference,
    route: &TopicRoute<'_>,
) -> anyhow::Result<()> {
    let key = table.primary_key();
    if key.is_empty() {
        bail!(
            "table {} ({}.cdc) has no primary key: bigquery applies upserts and deletes only to a table with one. Add it with ALTER TABLE `{}.{}.{}` ADD PRIMARY KEY ({}) NOT ENFORCED, or let create_table make the table",
            reference.resource_name(),
            route.path,
            reference.project_id,
            reference.dataset_id,
            reference.table_id,
            cdc.key().join(", ")
        );
    }
    let same = key.len() == cdc.key().len()
        && key
            .iter()
            .zip(cdc.key())
            .all(|(a, b)| a.eq_ignore_ascii_case(b));
    if !same {
        bail!(
            "table {} has the primary key ({}) but {}.cdc.primary_key is ({})",
            reference.resource_name(),
            key.join(", "),
            route.path,
            cdc.key().join(", ")
        );
    }
    Ok(())
}

/// Where a CDC route's writer schemas come from: the fixed Avro schema, schemaless JSON, or the
/// registry (any of its formats, or the route's pinned one).
pub(super) fn input<'a>(
    config: &crate::config::Config,
    route: &TopicRoute<'_>,
    registry: Option<std::sync::Arc<SchemaRegistry>>,
    fixed: Option<&'a AvroSchema>,
) -> anyhow::Result<ChangeInput<'a>> {
    use crate::config::InputFormat;
    Ok(match (fixed, registry) {
        (Some(schema), _) => ChangeInput::FixedAvro(schema),
        (None, _) if route.format == Some(InputFormat::Json) => ChangeInput::SchemalessJson,
        (None, Some(registry)) => ChangeInput::Registry(
            registry,
            super::settings::registry_input(config, route.format),
        ),
        (None, None) => bail!(
            "{}.cdc: the route's records need schema_registry",
            route.path
        ),
    })
}

/// The plans of a CDC route.
pub fn plans(
    cdc: &CdcConfig,
    input: ChangeInput<'_>,
    table: &TableSchema,
    options: PlanOptions,
) -> anyhow::Result<ChangePlans> {
    ChangePlans::new(
        input,
        table,
        options,
        ChangeRules {
            format: format(cdc),
            source_field: cdc.sequence.source_field.clone(),
            deletes: cdc.mode == CdcMode::UpsertDelete,
            epoch: cdc.sequence.epoch,
            json_envelope: match cdc.schemas_enable {
                None => ConnectEnvelope::Guarded,
                Some(false) => ConnectEnvelope::Off,
                Some(true) => ConnectEnvelope::On,
            },
        },
    )
    .map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fields: &str) -> WriterSchema {
        WriterSchema::Avro(
            AvroSchema::parse(&format!(
                r#"{{"type":"record","name":"Key","namespace":"db.inventory.customers","fields":[{fields}]}}"#
            ))
            .unwrap(),
        )
    }

    #[test]
    fn the_primary_key_is_the_key_records_fields_of_allowed_types() {
        assert_eq!(
            key_columns(&key(
                r#"{"name":"id","type":"long"},{"name":"region","type":"string"},
                {"name":"day","type":{"type":"int","logicalType":"date"}}"#
            )),
            Ok(vec!["id".to_string(), "region".into(), "day".into()])
        );
        let e = key_columns(&key(
            r#"{"name":"id","type":"long"},{"name":"w","type":"double"}"#,
        ))
        .unwrap_err();
        assert!(e.contains("key field w is FLOAT"), "{e}");
        let e = key_columns(&key(
            r#"{"name":"ids","type":{"type":"array","items":"long"}}"#,
        ))
        .unwrap_err();
        assert!(e.contains("key field ids is REPEATED"), "{e}");
        let seventeen: Vec<String> = (0..17)
            .map(|i| format!(r#"{{"name":"k{i}","type":"int"}}"#))
            .collect();
        let e = key_columns(&key(&seventeen.join(","))).unwrap_err();
        assert!(e.contains("1 to 16 columns") && e.contains("17"), "{e}");
        let e = key_columns(&WriterSchema::Avro(
            AvroSchema::parse(r#""string""#).unwrap(),
        ))
        .unwrap_err();
        assert!(e.contains("not a record"), "{e}");
    }

    #[tokio::test]
    async fn an_unset_primary_key_is_read_from_the_kafka_keys_latest_schema() {
        use crate::config::Config;
        use crate::registry::RegistryConfig;
        let key = r#"{"type":"record","name":"Key","fields":[
            {"name":"id","type":"long"},{"name":"region","type":"string"}]}"#;
        let body = serde_json::json!({"subject": "customers-key", "version": 1, "id": 7,
                                      "schema": key})
        .to_string();
        let by_id = serde_json::json!({ "schema": key }).to_string();
        let app = axum::Router::new()
            .route(
                "/subjects/customers-key/versions/latest",
                axum::routing::get(move || async move { body }),
            )
            .route(
                "/schemas/ids/7",
                axum::routing::get(move || async move { by_id }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let registry = SchemaRegistry::new(RegistryConfig {
            url: format!("http://{addr}"),
            max_attempts: 1,
            ..RegistryConfig::default()
        })
        .unwrap();
        let yaml = format!(
            "kafka:\n  bootstrap_servers: 127.0.0.1:9092\n  group_id: g\n  topics: [customers, orders]\n\
             schema_registry:\n  url: http://{addr}\n\
             bigquery:\n  project: p\n  dataset: d\n  table: t\n\
             dead_letter:\n  topic: dlq\ndelivery: at_least_once\n\
             routes:\n  - topics: [customers, orders]\n    table: customers\n    cdc:\n      mode: upsert_delete\n"
        );
        let config = Config::from_yaml(&yaml, std::collections::HashMap::new()).unwrap();
        let route = config.route_for("customers");
        let cdc = route.cdc.unwrap();
        assert!(cdc.primary_key.is_none());
        let keyed = with_key(&config, cdc, Some(&registry), "customers", &route)
            .await
            .unwrap();
        assert_eq!(keyed.key(), ["id", "region"]);
        let e = with_key(&config, cdc, Some(&registry), "orders", &route)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("routes[0].cdc.primary_key is not set") && e.contains("orders-key"),
            "{e}"
        );
        // Another subject (the RecordNameStrategy's, or one with the topic in it).
        let mut named = cdc.clone();
        named.key_subject = Some("{topic}-key".into());
        let keyed = with_key(&config, &named, Some(&registry), "customers", &route)
            .await
            .unwrap();
        assert_eq!(keyed.key(), ["id", "region"]);
        named.key_subject = Some("db.customers.Key".into());
        let e = with_key(&config, &named, Some(&registry), "customers", &route)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("routes[0].cdc.key_subject: ") && e.contains("db.customers.Key"),
            "{e}"
        );
    }

    #[test]
    fn max_staleness_is_written_as_a_canonical_interval() {
        use std::time::Duration;
        assert_eq!(interval(Duration::from_secs(600)), "0-0 0 0:10:0");
        assert_eq!(interval(Duration::from_secs(90_061)), "0-0 1 1:1:1");
    }
}
