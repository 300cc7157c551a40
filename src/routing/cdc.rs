//! What a CDC route needs of its table (docs/cdc.md): the row schema to create it from, the
//! primary key and `max_staleness` to create it with, and the check that an existing table has
//! the configured primary key.

use std::sync::Arc;

use anyhow::{anyhow, bail};

use crate::bigquery::rest_client::{PrimaryKey, Table, TableConstraints, TableReference};
use crate::bigquery::table_schema::TableSchema;
use crate::config::{CdcConfig, CdcFormat, CdcMode, TopicRoute};
use crate::registry::SchemaRegistry;
use crate::transcode::change::{CHANGE_SEQUENCE_NUMBER, CHANGE_TYPE, ChangeFormat, ChangeShape};
use crate::transcode::{AvroSchema, PlanOptions};
use crate::writer::cdc_plans::{ChangePlans, ChangeRules};

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
            columns: cdc.primary_key.clone(),
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
pub(super) fn check_table(
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
            cdc.primary_key.join(", ")
        );
    }
    let same = key.len() == cdc.primary_key.len()
        && key
            .iter()
            .zip(&cdc.primary_key)
            .all(|(a, b)| a.eq_ignore_ascii_case(b));
    if !same {
        bail!(
            "table {} has the primary key ({}) but {}.cdc.primary_key is ({})",
            reference.resource_name(),
            key.join(", "),
            route.path,
            cdc.primary_key.join(", ")
        );
    }
    Ok(())
}

/// The plans of a CDC route.
pub(super) fn plans(
    cdc: &CdcConfig,
    registry: Option<Arc<SchemaRegistry>>,
    fixed: Option<&AvroSchema>,
    table: &TableSchema,
    options: PlanOptions,
) -> anyhow::Result<ChangePlans> {
    ChangePlans::new(
        registry,
        fixed,
        table,
        options,
        ChangeRules {
            format: format(cdc),
            source_field: cdc.sequence.source_field.clone(),
            deletes: cdc.mode == CdcMode::UpsertDelete,
            epoch: cdc.sequence.epoch,
        },
    )
    .map_err(|e| anyhow!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_staleness_is_written_as_a_canonical_interval() {
        use std::time::Duration;
        assert_eq!(interval(Duration::from_secs(600)), "0-0 0 0:10:0");
        assert_eq!(interval(Duration::from_secs(90_061)), "0-0 1 1:1:1");
    }
}
