//! Schema changes (`allowNewBigQueryFields` and its kin) and the metadata columns
//! (`kafkaKeyFieldName`, `kafkaDataFieldName`).

use super::Source;
use super::key_column::{KeyColumn, KeyContext};
use crate::migrate::report::Outcome;

/// Whether new fields add columns (`schema_update: add_columns`); schemaless JSON has no
/// schema to add them from.
pub(super) fn schema_changes(s: &mut Source, json_input: bool) -> bool {
    let add_columns =
        s.flag("allowNewBigQueryFields") == Some(true) || s.flag("autoUpdateSchemas") == Some(true);
    for key in ["allowNewBigQueryFields", "autoUpdateSchemas"] {
        let outcome = if add_columns && json_input {
            Outcome::NotTranslatable(
                "schemaless JSON has no schema to add columns from; new keys without a column are ignored (unknown_fields: ignore)".into(),
            )
        } else if add_columns {
            Outcome::Mapped(
                "bigquery.schema_update: add_columns: a new nullable field adds a NULLABLE column before its records are written; a new required field dead-letters its records (BigQuery adds no REQUIRED column)".into(),
            )
        } else {
            Outcome::Mapped("bigquery.schema_update: none, the default".into())
        };
        s.note(key, outcome);
    }
    let add_columns = add_columns && !json_input;
    for (key, what) in [
        (
            "allowBigQueryRequiredFieldRelaxation",
            "REQUIRED columns stay REQUIRED: a record without the field is a bad record (dead-letter topic with the reason)",
        ),
        (
            "allowSchemaUnionization",
            "the table keeps its own schema; a field without a column is ignored (unknown_fields: ignore) and a new field adds a column only with schema_update: add_columns",
        ),
    ] {
        let outcome = if s.flag(key) == Some(true) {
            Outcome::NotTranslatable(format!("no such schema change here yet: {what}"))
        } else {
            Outcome::Mapped("false: the behaviour here".into())
        };
        s.note(key, outcome);
    }
    for (key, why) in [
        (
            "allBQFieldsNullable",
            "created columns are REQUIRED where the schema's field is not nullable",
        ),
        (
            "sanitizeFieldNames",
            "field names are not rewritten: Avro and Protobuf names are valid column names already; a JSON key that is not one has no column (ignored)",
        ),
        (
            "convertDoubleSpecialValues",
            "not needed for the write itself: the Storage Write API stores NaN and ±Infinity in FLOAT64 as they are; the connector wrote Double.MAX_VALUE/MIN_VALUE instead, so the stored values differ",
        ),
        (
            "convertDebeziumTimestampToInteger",
            "Debezium timestamps are written as TIMESTAMP/DATETIME columns by their named types (docs/mapping.md)",
        ),
    ] {
        let outcome = if s.flag(key) == Some(true) {
            Outcome::NotTranslatable(why.into())
        } else {
            Outcome::Mapped("false: the behaviour here".into())
        };
        s.note(key, outcome);
    }
    add_columns
}

/// `bigquery.metadata_columns` from the connector's key and data fields; `key_column`: the
/// key's field that `kafkaKeyFieldName` holds instead of the key (`key_column.rs`).
pub(super) fn metadata_columns(
    s: &mut Source,
    key_column: Option<&KeyColumn>,
    cx: &KeyContext,
) -> Vec<(&'static str, String)> {
    let mut metadata_columns: Vec<(&'static str, String)> = Vec::new();
    if let Some(k) = key_column {
        s.note("kafkaKeyFieldName", k.outcome(cx));
    } else if let Some(key) = s
        .get("kafkaKeyFieldName")
        .filter(|k| !k.is_empty())
        .map(str::to_string)
    {
        metadata_columns.push(("key", key.clone()));
        s.note(
            "kafkaKeyFieldName",
            Outcome::Changed(format!(
                "bigquery.metadata_columns.key \"{key}\": a BYTES column with the key's raw bytes; the connector wrote a RECORD of the key's converted fields"
            )),
        );
    }
    if let Some(data) = s
        .get("kafkaDataFieldName")
        .filter(|k| !k.is_empty())
        .map(str::to_string)
    {
        for (field, suffix) in [
            ("topic", "topic"),
            ("partition", "partition"),
            ("offset", "offset"),
        ] {
            metadata_columns.push((field, format!("{data}_{suffix}")));
        }
        s.note(
            "kafkaDataFieldName",
            Outcome::Changed(format!(
                "bigquery.metadata_columns topic/partition/offset as columns {data}_topic, {data}_partition, {data}_offset; the connector wrote one RECORD `{data}` with those and insertTime (its processing time), which has no counterpart (metadata_columns.timestamp is the record's own timestamp)"
            )),
        );
    }
    metadata_columns
}
