//! The tables the connector would create: `autoCreateTables` and its partitioning and
//! clustering, and the partition decorator the Storage Write API does without.

use super::{MigrateError, Source, list, refuse};
use crate::migrate::draft::CreateTable;
use crate::migrate::report::Outcome;

/// `bigquery.create_table` from `autoCreateTables` and the partitioning it implies.
pub(super) fn create_table(s: &mut Source) -> Option<CreateTable> {
    let partition_type = s.get("timePartitioningType").map(str::to_ascii_uppercase);
    let create = s.flag("autoCreateTables");
    let changes = s.flag("upsertEnabled") == Some(true) || s.flag("deleteEnabled") == Some(true);
    match create {
        Some(true) => {
            // The connector partitions a created table by day of arrival unless told NONE; a
            // table of upserts gets that only when asked for (BigQuery applies changes by key,
            // and arrival-time partitions would only split one row's history).
            let partitioned = match partition_type.as_deref() {
                Some("NONE") => false,
                Some(_) => true,
                None => !changes || s.get("timestampPartitionFieldName").is_some(),
            };
            let ct = CreateTable {
                partition_field: s
                    .get("timestampPartitionFieldName")
                    .filter(|f| !f.is_empty())
                    .map(str::to_string),
                partition_type: if partitioned {
                    Some(partition_type.clone().unwrap_or_else(|| "DAY".into()))
                } else {
                    None
                },
                partitioned,
                expiration_ms: s.get("partitionExpirationMs").and_then(|v| v.parse().ok()),
                clustering: s
                    .get("clusteringPartitionFieldNames")
                    .map(list)
                    .unwrap_or_default(),
            };
            s.note(
                "autoCreateTables",
                Outcome::Mapped(
                    "bigquery.create_table: a missing table is created from the input's schema (Avro, Protobuf, JSON Schema through the registry)".into(),
                ),
            );
            Some(ct)
        }
        Some(false) => {
            s.note(
                "autoCreateTables",
                Outcome::Mapped(
                    "no bigquery.create_table: a missing table stops the sink at start, naming it"
                        .into(),
                ),
            );
            None
        }
        None => {
            s.remark(
                "autoCreateTables (unset)",
                Outcome::Changed(
                    "the connector's default differs by version (true in Confluent's and Aiven's 2.x, false in WePay's 1.x); here no table is created: set bigquery.create_table to create them".into(),
                ),
            );
            None
        }
    }
}

/// The partitioning and clustering settings, kept only for created tables.
pub(super) fn table_settings(
    s: &mut Source,
    create_table: Option<&CreateTable>,
) -> Result<(), MigrateError> {
    let table_settings = [
        (
            "timePartitioningType",
            "bigquery.create_table.time_partitioning.type (NONE: no time_partitioning)",
        ),
        (
            "timestampPartitionFieldName",
            "bigquery.create_table.time_partitioning.field",
        ),
        (
            "partitionExpirationMs",
            "bigquery.create_table.time_partitioning.expiration",
        ),
        (
            "clusteringPartitionFieldNames",
            "bigquery.create_table.clustering",
        ),
    ];
    for (key, place) in table_settings {
        let outcome = if create_table.is_some() {
            Outcome::Mapped(place.into())
        } else {
            Outcome::Dropped(format!(
                "only for created tables, and this config creates none ({place})"
            ))
        };
        s.note(key, outcome);
    }
    if let Some(ct) = create_table
        && ct.clustering.len() > crate::config::limits::MAX_CLUSTERING_FIELDS
    {
        return Err(refuse(
            "clusteringPartitionFieldNames",
            "at most four clustering fields",
        ));
    }
    s.note(
        "bigQueryPartitionDecorator",
        Outcome::Dropped(
            "the Storage Write API writes a partitioned table by its partitioning column or by arrival time, without a `$YYYYMMDD` decorator".into(),
        ),
    );
    if s.flag("bigQueryMessageTimePartitioning") == Some(true) {
        s.note(
            "bigQueryMessageTimePartitioning",
            Outcome::NotTranslatable(
                "ingestion-time partitions chosen by the record's timestamp need the partition decorator, which the Storage Write API does not take; rows land in the partition of their arrival. To partition by the record's time, add bigquery.metadata_columns.timestamp and partition by that column".into(),
            ),
        );
    } else {
        s.note(
            "bigQueryMessageTimePartitioning",
            Outcome::Mapped("false: partitions by arrival time, as here".into()),
        );
    }
    Ok(())
}
