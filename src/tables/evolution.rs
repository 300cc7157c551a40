//! Schema evolution (`bigquery.schema_update: add_columns`, docs/configuration.md). It hangs off the plan
//! source because that is where a new writer schema is first seen: before compiling its plan, the
//! writer schema's fields (Avro, Protobuf or JSON Schema) without a column become NULLABLE columns
//! (`tables.patch`), and the plan is compiled only once the Storage Write API reports them
//! (GetWriteStream FULL), so the first append carrying them cannot fail with an unknown-field
//! error. The writer then sees a new descriptor and reconnects its stream with it. Plans of older
//! schemas stay valid: a column they do not write is NULL.
//!
//! Without `add_columns` the table is still followed: an AppendRows response that reports a
//! changed table (`updated_schema`) makes the plans recompile against the table as it is now.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::{
    TableFieldSchema as ProtoField, TableSchema as ProtoTableSchema,
};
use tokio::time::Instant;

use crate::bigquery::rest_client::{RestClient, RestError, TableReference};
use crate::bigquery::write_client::WriteClient;
use crate::writer::plan_source::PlanLookupError;
use kbq_core::bad_record::BadRecord;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use kbq_transcode::DeriveOptions;

use super::plans::{RegistryPlans, WriterSchema, incompatible};

/// How the plans follow the table: the REST and Write API clients to read it, and whether new
/// writer schemas may add columns (`schema_update: add_columns`).
#[derive(Clone)]
pub struct SchemaEvolution {
    /// Add NULLABLE columns for new fields; without it the table is only re-read when an
    /// AppendRows response says it changed (`updated_schema`).
    pub add_columns: bool,
    pub rest: RestClient,
    pub client: WriteClient,
    pub table: TableReference,
    /// How Avro fields become columns (the same rules as `create_table`; no metadata columns).
    pub derive: DeriveOptions,
    /// How long one lookup waits for the Write API to see new columns before it reports the
    /// schema unavailable (the writer retries; BigQuery documents "on the order of minutes").
    pub visible_timeout: Duration,
    pub poll_interval: Duration,
}

/// The table schema plans are compiled against; replaced when columns are added.
pub(super) struct TableState {
    pub(super) schema: RwLock<Arc<TableSchema>>,
    /// Bumped on every replacement: cached plans of an older version are recompiled.
    pub(super) version: AtomicU64,
    /// A refresh triggered by `updated_schema` is running.
    pub(super) refreshing: AtomicBool,
}

impl TableState {
    pub(super) fn current(&self) -> (Arc<TableSchema>, u64) {
        let schema = self.schema.read().expect("table schema lock").clone();
        (schema, self.version.load(Ordering::Acquire))
    }

    pub(super) fn replace(&self, schema: TableSchema) {
        let mut slot = self.schema.write().expect("table schema lock");
        if **slot != schema {
            *slot = Arc::new(schema);
            self.version.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl SchemaEvolution {
    /// An AppendRows response said the table changed under a connection (another replica added
    /// columns, or an operator did): read the table again so the next plans write them.
    pub(super) fn follow(&self, state: &Arc<TableState>, updated: &ProtoTableSchema) {
        let (known, _) = state.current();
        let known_paths = column_paths(&known.fields, "");
        if proto_paths(&updated.fields, "")
            .iter()
            .all(|p| known_paths.contains(p))
        {
            return;
        }
        if state.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let state = state.clone();
        let rest = self.rest.clone();
        let table = self.table.clone();
        tokio::spawn(async move {
            match rest.get_table(&table).await {
                Ok(t) => {
                    tracing::info!(table = %table.resource_name(), "table schema changed: plans recompile against it");
                    state.replace(t.schema);
                }
                Err(e) => {
                    tracing::warn!(table = %table.resource_name(), error = %e, "cannot read the changed table schema")
                }
            }
            state.refreshing.store(false, Ordering::Release);
        });
    }
}

impl RegistryPlans {
    /// Makes the table hold a column for every field of `writer` (nullable ones only).
    pub(super) async fn evolve(
        &self,
        evolution: &SchemaEvolution,
        id: u32,
        writer: &WriterSchema,
        known: &TableSchema,
    ) -> Result<Result<(), BadRecord>, PlanLookupError> {
        let wanted = match writer.derive(&evolution.derive) {
            Ok(w) => w,
            // A schema without a table shape of its own adds nothing: the plan compiler decides
            // whether it fits the table as it is.
            Err(e) => {
                tracing::debug!(schema_id = id, error = %e, "no columns derived from the writer schema");
                return Ok(Ok(()));
            }
        };
        if merge(&known.fields, &wanted.fields, "").is_ok_and(|m| m.added.is_empty()) {
            return Ok(Ok(()));
        }
        let _one_at_a_time = self.evolving.lock().await;
        let what = writer.describe(id);
        // Another replica (or partition) may have added the columns already: decide on the
        // table as it is now, and patch with its etag so a concurrent change is not overwritten.
        let unavailable = |e: &dyn std::fmt::Display| {
            PlanLookupError::Unavailable(format!("schema evolution of {what}: {e}"))
        };
        let table = evolution
            .rest
            .get_table(&evolution.table)
            .await
            .map_err(|e| unavailable(&e))?;
        let merged = match merge(&table.schema.fields, &wanted.fields, "") {
            Ok(m) => m,
            Err(reason) => {
                return Ok(Err(incompatible(format!(
                    "{what} cannot evolve table {}: {reason}",
                    self.table_name
                ))));
            }
        };
        let target = TableSchema {
            fields: merged.fields,
        };
        // A type change elsewhere in the schema would make the records unusable anyway: check
        // before changing the table for them.
        if let Err(e) = writer.compile(&target, &self.options, self.input.json_validate) {
            return Ok(Err(incompatible(format!(
                "{what} does not fit table {}: {e}",
                self.table_name
            ))));
        }
        if !merged.added.is_empty() {
            match evolution
                .rest
                .patch_table_schema(&evolution.table, &target, table.etag.as_deref())
                .await
            {
                Ok(_) => {
                    tracing::info!(table = %evolution.table.resource_name(), schema_id = id, columns = ?merged.added, "columns added to the table");
                }
                // 412: the table changed since it was read (another replica patched it first).
                Err(e) if e.is_retryable() || matches!(&e, RestError::Api { status: 412, .. }) => {
                    return Err(unavailable(&e));
                }
                Err(e) => {
                    return Ok(Err(incompatible(format!(
                        "{what}: table {} refused the new columns {:?}: {e}",
                        self.table_name, merged.added
                    ))));
                }
            }
        }
        let wanted_paths = column_paths(&target.fields, "");
        self.wait_until_writable(evolution, &wanted_paths)
            .await
            .map_err(|e| unavailable(&e))?;
        self.table.replace(target);
        Ok(Ok(()))
    }

    /// Polls GetWriteStream(FULL) of the table's `_default` stream until its table schema has
    /// every column of `paths`.
    async fn wait_until_writable(
        &self,
        evolution: &SchemaEvolution,
        paths: &[String],
    ) -> Result<(), String> {
        let stream = format!("{}/streams/_default", evolution.table.resource_name());
        let deadline = Instant::now() + evolution.visible_timeout;
        loop {
            let seen = match evolution.client.get_write_stream(&stream, true).await {
                Ok(s) => s
                    .table_schema
                    .map(|t| proto_paths(&t.fields, ""))
                    .unwrap_or_default(),
                Err(e) => {
                    self.metrics.bigquery_error("GetWriteStream", &e);
                    Vec::new()
                }
            };
            let missing: Vec<&String> = paths.iter().filter(|p| !seen.contains(p)).collect();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the write api does not see columns {missing:?} yet"
                ));
            }
            tokio::time::sleep(evolution.poll_interval).await;
        }
    }
}

/// The table's fields with the wanted ones added, and the paths of what was added.
struct Merged {
    fields: Vec<TableFieldSchema>,
    added: Vec<String>,
}

/// Adds every field of `wanted` the table lacks (case-insensitive names, into RECORDs too).
/// Existing columns are left as they are: whether a field fits its column is the plan
/// compiler's decision. A new REQUIRED field is refused: BigQuery adds only NULLABLE or REPEATED
/// columns, and rows written before have no value for it.
fn merge(
    table: &[TableFieldSchema],
    wanted: &[TableFieldSchema],
    prefix: &str,
) -> Result<Merged, String> {
    let mut fields = table.to_vec();
    let mut added = Vec::new();
    for w in wanted {
        let path = format!("{prefix}{}", w.name);
        match fields
            .iter_mut()
            .find(|f| f.name.eq_ignore_ascii_case(&w.name))
        {
            None => {
                if w.mode() == Mode::Required {
                    return Err(format!(
                        "new field {path} is required (not nullable): only nullable fields can be added as columns"
                    ));
                }
                fields.push(nullable_copy(w));
                added.push(path);
            }
            Some(existing)
                if existing.field_type == FieldType::Record
                    && w.field_type == FieldType::Record =>
            {
                let inner = merge(&existing.fields, &w.fields, &format!("{path}."))?;
                existing.fields = inner.fields;
                added.extend(inner.added);
            }
            Some(_) => {}
        }
    }
    Ok(Merged { fields, added })
}

/// A new column as BigQuery accepts it: neither the column nor any field under it is REQUIRED
/// (a table patch refuses "required fields added to an existing schema", subfields of a new
/// RECORD included). A nullable Avro record whose own fields are never null derives REQUIRED
/// subfields; they become NULLABLE, which the plan writes like REQUIRED ones. REPEATED stays.
fn nullable_copy(field: &TableFieldSchema) -> TableFieldSchema {
    let mut f = field.clone();
    if f.mode() == Mode::Required {
        f.mode = Some(Mode::Nullable);
    }
    f.fields = f.fields.iter().map(nullable_copy).collect();
    f
}

fn column_paths(fields: &[TableFieldSchema], prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for f in fields {
        let path = format!("{prefix}{}", f.name.to_ascii_lowercase());
        out.extend(column_paths(&f.fields, &format!("{path}.")));
        out.push(path);
    }
    out
}

fn proto_paths(fields: &[ProtoField], prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for f in fields {
        let path = format!("{prefix}{}", f.name.to_ascii_lowercase());
        out.extend(proto_paths(&f.fields, &format!("{path}.")));
        out.push(path);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: FieldType, mode: Mode) -> TableFieldSchema {
        TableFieldSchema::new(name, ty, mode)
    }

    #[test]
    fn merge_adds_missing_nullable_fields_and_nested_ones() {
        let mut addr = col("Address", FieldType::Record, Mode::Nullable);
        addr.fields = vec![col("city", FieldType::String, Mode::Nullable)];
        let table = vec![col("id", FieldType::Int64, Mode::Required), addr.clone()];
        let mut wanted_addr = addr.clone();
        wanted_addr
            .fields
            .push(col("zip", FieldType::String, Mode::Nullable));
        let wanted = vec![
            col("ID", FieldType::Int64, Mode::Required),
            wanted_addr,
            col("email", FieldType::String, Mode::Nullable),
        ];
        let m = merge(&table, &wanted, "").unwrap();
        assert_eq!(m.added, vec!["Address.zip".to_string(), "email".into()]);
        assert_eq!(m.fields.len(), 3);
        assert_eq!(m.fields[1].fields.len(), 2);
        assert_eq!(m.fields[2].mode(), Mode::Nullable);
    }

    #[test]
    fn a_new_record_column_has_no_required_field_at_any_depth() {
        let mut inner = col("geo", FieldType::Record, Mode::Required);
        inner.fields = vec![
            col("lat", FieldType::Float64, Mode::Required),
            col("tags", FieldType::String, Mode::Repeated),
        ];
        let mut address = col("address", FieldType::Record, Mode::Nullable);
        address.fields = vec![col("city", FieldType::String, Mode::Required), inner];
        let table = vec![col("id", FieldType::Int64, Mode::Required)];
        let m = merge(&table, &[address], "").unwrap();
        assert_eq!(m.added, vec!["address".to_string()]);
        let added = &m.fields[1];
        assert_eq!(added.mode(), Mode::Nullable);
        assert_eq!(added.fields[0].mode(), Mode::Nullable);
        assert_eq!(added.fields[1].mode(), Mode::Nullable);
        assert_eq!(added.fields[1].fields[0].mode(), Mode::Nullable);
        assert_eq!(added.fields[1].fields[1].mode(), Mode::Repeated);
        // existing columns keep their mode
        assert_eq!(m.fields[0].mode(), Mode::Required);
    }

    #[test]
    fn merge_refuses_a_new_required_field_and_leaves_type_changes_to_the_compiler() {
        let table = vec![col("id", FieldType::Int64, Mode::Required)];
        let err = merge(&table, &[col("tier", FieldType::Int64, Mode::Required)], "")
            .err()
            .unwrap();
        assert!(err.contains("tier") && err.contains("required"), "{err}");
        let m = merge(&table, &[col("id", FieldType::String, Mode::Required)], "").unwrap();
        assert!(m.added.is_empty());
        assert_eq!(m.fields, table);
    }
}
