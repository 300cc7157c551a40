//! Schema evolution (`bigquery.schema_update`, docs/configuration.md). It hangs off the plan
//! source because that is where a new writer schema is first seen: before compiling its plan, the
//! table is changed for the writer schema (Avro, Protobuf or JSON Schema) through `tables.patch`,
//! and the plan is compiled only once the Storage Write API reports the change (GetWriteStream
//! FULL), so the first append that needs it cannot fail. The writer then sees a new descriptor
//! and reconnects its stream with it. Plans of older schemas stay valid: a column they do not
//! write is NULL. What may change, by level ([`SchemaUpdate`]):
//!
//! * `add_columns`: fields without a column become NULLABLE columns, inside RECORD columns too.
//! * `relax_columns`: also, a REQUIRED column the writer schema makes optional, or does not
//!   have, becomes NULLABLE (BigQuery relaxes a mode through `tables.patch`, never tightens
//!   one). The route's metadata columns and columns with a default value are never relaxed: the
//!   sink fills them itself, or BigQuery does.
//! * `union`: also, several writer schemas (of one topic or of several topics routed to the
//!   table) make the table the union of their fields: a field required in its own schema is
//!   added NULLABLE, since the others have no value for it; a field whose type differs from its
//!   column's is refused at compile time, naming the column's source as this process saw it.
//!
//! Without any of them the table is still followed: an AppendRows response that reports a
//! changed table (`updated_schema`) makes the plans recompile against the table as it is now.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::{
    TableFieldSchema as ProtoField, TableSchema as ProtoTableSchema,
    table_field_schema::Mode as ProtoMode,
};
use tokio::time::Instant;

use crate::bigquery::rest_client::{RestClient, RestError, TableReference};
use crate::bigquery::write_client::WriteClient;
use crate::config::SchemaUpdate;
use crate::writer::plan_source::PlanLookupError;
use kbq_core::bad_record::BadRecord;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use kbq_transcode::{DeriveOptions, PlanOptions};

use super::plans::{RegistryPlans, WriterSchema, incompatible};

/// How the plans follow the table: the REST and Write API clients to read it, and how far new
/// writer schemas may change it (`schema_update`).
#[derive(Clone)]
pub struct SchemaEvolution {
    /// `none`: the table is only re-read when an AppendRows response says it changed
    /// (`updated_schema`).
    pub update: SchemaUpdate,
    pub rest: RestClient,
    pub client: WriteClient,
    pub table: TableReference,
    /// How Avro fields become columns (the same rules as `create_table`; no metadata columns).
    pub derive: DeriveOptions,
    /// The route's metadata columns: no writer schema has them, and they are never relaxed.
    pub metadata_columns: Vec<String>,
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
    /// `union`: the first writer schema this process saw with each column (lower-case path), so
    /// that a type conflict names both sources.
    pub(super) sources: Mutex<HashMap<String, String>>,
}

impl TableState {
    pub(super) fn new(schema: TableSchema) -> TableState {
        TableState {
            schema: RwLock::new(Arc::new(schema)),
            version: AtomicU64::new(0),
            refreshing: AtomicBool::new(false),
            sources: Mutex::new(HashMap::new()),
        }
    }

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

    /// Records `source` for every column of `fields` that has none yet.
    fn note_sources(&self, fields: &[TableFieldSchema], source: &str) {
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        for (path, _) in column_paths(fields, "") {
            sources.entry(path).or_insert_with(|| source.to_string());
        }
    }

    fn source_of(&self, path: &str) -> Option<String> {
        let sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        sources.get(&path.to_ascii_lowercase()).cloned()
    }
}

impl SchemaEvolution {
    /// An AppendRows response said the table changed under a connection (another replica added
    /// columns, or an operator did): read the table again so the next plans write them.
    pub(super) fn follow(&self, state: &Arc<TableState>, updated: &ProtoTableSchema) {
        let (known, _) = state.current();
        let known_paths = column_paths(&known.fields, "");
        // A column added, or one relaxed (its mode is part of what is compared).
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
    /// Makes the table fit `writer` as far as `schema_update` allows: its new fields as
    /// NULLABLE columns, and (`relax_columns`) the REQUIRED columns it leaves optional relaxed.
    pub(super) async fn evolve(
        &self,
        evolution: &SchemaEvolution,
        options: &PlanOptions,
        topic: &str,
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
        let policy = Policy::of(evolution);
        let what = writer.describe(id);
        let source = format!("{what} of topic {topic}");
        if merge(&known.fields, &wanted.fields, "", &policy).is_ok_and(|m| m.is_unchanged()) {
            self.table.note_sources(&wanted.fields, &source);
            return Ok(Ok(()));
        }
        let _one_at_a_time = self.evolving.lock().await;
        // Another replica (or partition) may have changed the table already: decide on the
        // table as it is now, and patch with its etag so a concurrent change is not overwritten.
        let unavailable = |e: &dyn std::fmt::Display| {
            PlanLookupError::Unavailable(format!("schema evolution of {what}: {e}"))
        };
        let table = evolution
            .rest
            .get_table(&evolution.table)
            .await
            .map_err(|e| unavailable(&e))?;
        let merged = match merge(&table.schema.fields, &wanted.fields, "", &policy) {
            Ok(m) => m,
            Err(refusal) => {
                let reason = refusal.explain(&source, |path| self.table.source_of(path));
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
        if let Err(e) = writer.compile(&target, options, self.input.json_validate) {
            return Ok(Err(incompatible(format!(
                "{what} does not fit table {}: {e}",
                self.table_name
            ))));
        }
        if !(merged.added.is_empty() && merged.relaxed.is_empty()) {
            match evolution
                .rest
                .patch_table_schema(&evolution.table, &target, table.etag.as_deref())
                .await
            {
                Ok(_) => {
                    tracing::info!(table = %evolution.table.resource_name(), topic, schema_id = id, added = ?merged.added, relaxed = ?merged.relaxed, "table schema changed");
                }
                // 412: the table changed since it was read (another replica patched it first).
                Err(e) if e.is_retryable() || matches!(&e, RestError::Api { status: 412, .. }) => {
                    return Err(unavailable(&e));
                }
                Err(e) => {
                    return Ok(Err(incompatible(format!(
                        "{what}: table {} refused the change (columns added {:?}, relaxed {:?}): {e}",
                        self.table_name, merged.added, merged.relaxed
                    ))));
                }
            }
        }
        let wanted_paths = column_paths(&target.fields, "");
        self.wait_until_writable(evolution, &wanted_paths)
            .await
            .map_err(|e| unavailable(&e))?;
        self.table.replace(target);
        self.table.note_sources(&wanted.fields, &source);
        Ok(Ok(()))
    }

    /// Polls GetWriteStream(FULL) of the table's `_default` stream until its table schema has
    /// every column of `paths`, each in its mode (a relaxed column NULLABLE).
    async fn wait_until_writable(
        &self,
        evolution: &SchemaEvolution,
        paths: &[(String, bool)],
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
            let missing: Vec<&(String, bool)> =
                paths.iter().filter(|p| !seen.contains(p)).collect();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the write api does not see columns (path, required) {missing:?} yet"
                ));
            }
            tokio::time::sleep(evolution.poll_interval).await;
        }
    }
}

/// What [`merge`] may change, from the route's `schema_update`.
struct Policy<'a> {
    relax: bool,
    union: bool,
    /// Top-level columns never relaxed (the metadata columns); empty below the top level.
    keep: &'a [String],
}

impl<'a> Policy<'a> {
    fn of(evolution: &'a SchemaEvolution) -> Policy<'a> {
        Policy {
            relax: evolution.update >= SchemaUpdate::RelaxColumns,
            union: evolution.update >= SchemaUpdate::Union,
            keep: &evolution.metadata_columns,
        }
    }

    fn nested(&self) -> Policy<'a> {
        Policy { keep: &[], ..*self }
    }
}

/// The table's fields changed for the wanted ones, and the paths of what changed.
#[derive(Debug)]
struct Merged {
    fields: Vec<TableFieldSchema>,
    added: Vec<String>,
    relaxed: Vec<String>,
}

impl Merged {
    fn is_unchanged(&self) -> bool {
        self.added.is_empty() && self.relaxed.is_empty()
    }
}

/// Why a writer schema cannot change the table.
#[derive(Debug, PartialEq)]
enum Refusal {
    /// A new field that can never be null, without `union`.
    Required { path: String },
    /// `union`: a field whose type (or repetition) differs from its column's.
    Conflict {
        path: String,
        field: String,
        column: String,
    },
}

impl Refusal {
    /// The reason a dead letter carries; `source` is the writer schema's, `column_source` what
    /// this process knows of where a column came from.
    fn explain(&self, source: &str, column_source: impl Fn(&str) -> Option<String>) -> String {
        match self {
            Refusal::Required { path } => format!(
                "new field {path} is required (not nullable): only nullable fields can be added as columns (schema_update: union adds it NULLABLE)"
            ),
            Refusal::Conflict {
                path,
                field,
                column,
            } => {
                let theirs = column_source(path).unwrap_or_else(|| {
                    "the table (no writer schema with it seen by this process)".to_string()
                });
                format!(
                    "type conflict on field {path}: {field} in {source}, but {column} in {theirs} (column {path})"
                )
            }
        }
    }
}

/// A column's type as a conflict names it: `INTEGER`, `STRING REPEATED`.
fn shape(f: &TableFieldSchema) -> String {
    match f.mode() {
        Mode::Repeated => format!("{} REPEATED", f.field_type.as_str()),
        _ => f.field_type.as_str().to_string(),
    }
}

/// Adds every field of `wanted` the table lacks (case-insensitive names, into RECORDs too) and,
/// by `policy`, relaxes REQUIRED columns the wanted fields leave optional or lack. Whether a
/// field fits its column is otherwise the plan compiler's decision, except under `union`, where
/// a different type is a conflict between two sources. A new REQUIRED field is refused without
/// `union` (BigQuery adds only NULLABLE or REPEATED columns, and rows written before have no
/// value for it); with it, it becomes NULLABLE.
fn merge(
    table: &[TableFieldSchema],
    wanted: &[TableFieldSchema],
    prefix: &str,
    policy: &Policy<'_>,
) -> Result<Merged, Refusal> {
    let mut fields = table.to_vec();
    let mut added = Vec::new();
    let mut relaxed = Vec::new();
    for w in wanted {
        let path = format!("{prefix}{}", w.name);
        let Some(existing) = fields
            .iter_mut()
            .find(|f| f.name.eq_ignore_ascii_case(&w.name))
        else {
            if w.mode() == Mode::Required && !policy.union {
                return Err(Refusal::Required { path });
            }
            fields.push(nullable_copy(w));
            added.push(path);
            continue;
        };
        let repeated = |f: &TableFieldSchema| f.mode() == Mode::Repeated;
        if policy.union
            && (existing.field_type != w.field_type || repeated(existing) != repeated(w))
        {
            return Err(Refusal::Conflict {
                path,
                field: shape(w),
                column: shape(existing),
            });
        }
        if existing.field_type == FieldType::Record && w.field_type == FieldType::Record {
            let inner = merge(
                &existing.fields,
                &w.fields,
                &format!("{path}."),
                &policy.nested(),
            )?;
            existing.fields = inner.fields;
            added.extend(inner.added);
            relaxed.extend(inner.relaxed);
        }
        if policy.relax && existing.mode() == Mode::Required && w.mode() == Mode::Nullable {
            existing.mode = Some(Mode::Nullable);
            relaxed.push(path);
        }
    }
    if policy.relax {
        for f in &mut fields {
            let lacking = !wanted.iter().any(|w| w.name.eq_ignore_ascii_case(&f.name));
            let kept = policy.keep.iter().any(|k| k.eq_ignore_ascii_case(&f.name));
            if lacking
                && !kept
                && f.mode() == Mode::Required
                && f.default_value_expression.is_none()
            {
                f.mode = Some(Mode::Nullable);
                relaxed.push(format!("{prefix}{}", f.name));
            }
        }
    }
    Ok(Merged {
        fields,
        added,
        relaxed,
    })
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

/// Every column's lower-case path and whether it is REQUIRED.
fn column_paths(fields: &[TableFieldSchema], prefix: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for f in fields {
        let path = format!("{prefix}{}", f.name.to_ascii_lowercase());
        out.extend(column_paths(&f.fields, &format!("{path}.")));
        out.push((path, f.mode() == Mode::Required));
    }
    out
}

fn proto_paths(fields: &[ProtoField], prefix: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for f in fields {
        let path = format!("{prefix}{}", f.name.to_ascii_lowercase());
        out.extend(proto_paths(&f.fields, &format!("{path}.")));
        out.push((path, f.mode == ProtoMode::Required as i32));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: FieldType, mode: Mode) -> TableFieldSchema {
        TableFieldSchema::new(name, ty, mode)
    }

    const ADD: Policy<'static> = Policy {
        relax: false,
        union: false,
        keep: &[],
    };
    const RELAX: Policy<'static> = Policy {
        relax: true,
        union: false,
        keep: &[],
    };
    const UNION: Policy<'static> = Policy {
        relax: true,
        union: true,
        keep: &[],
    };

    fn modes(fields: &[TableFieldSchema]) -> Vec<(String, Mode)> {
        fields.iter().map(|f| (f.name.clone(), f.mode())).collect()
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
        let m = merge(&table, &wanted, "", &ADD).unwrap();
        assert_eq!(m.added, vec!["Address.zip".to_string(), "email".into()]);
        assert!(m.relaxed.is_empty());
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
        let m = merge(&table, &[address], "", &ADD).unwrap();
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
        let new_required = [col("tier", FieldType::Int64, Mode::Required)];
        for policy in [&ADD, &RELAX] {
            let err = merge(&table, &new_required, "", policy).unwrap_err();
            assert_eq!(
                err,
                Refusal::Required {
                    path: "tier".into()
                }
            );
            let reason = err.explain("writer schema 4 of topic t", |_| None);
            assert!(
                reason.contains("tier") && reason.contains("required"),
                "{reason}"
            );
        }
        let m = merge(
            &table,
            &[col("id", FieldType::String, Mode::Required)],
            "",
            &RELAX,
        )
        .unwrap();
        assert!(m.is_unchanged());
        assert_eq!(m.fields, table);
    }

    #[test]
    fn add_columns_leaves_required_columns_required_whatever_the_writer_schema_says() {
        let table = vec![
            col("id", FieldType::Int64, Mode::Required),
            col("name", FieldType::String, Mode::Required),
        ];
        let m = merge(
            &table,
            &[col("name", FieldType::String, Mode::Nullable)],
            "",
            &ADD,
        )
        .unwrap();
        assert!(m.is_unchanged());
        assert_eq!(m.fields, table);
    }

    #[test]
    fn relax_columns_relaxes_what_the_writer_makes_optional_or_lacks_at_any_depth() {
        let mut address = col("address", FieldType::Record, Mode::Required);
        address.fields = vec![
            col("city", FieldType::String, Mode::Required),
            col("zip", FieldType::String, Mode::Required),
            col("street", FieldType::String, Mode::Required),
        ];
        let mut defaulted = col("region", FieldType::String, Mode::Required);
        defaulted.default_value_expression = Some("'eu'".into());
        let table = vec![
            col("id", FieldType::Int64, Mode::Required),
            col("name", FieldType::String, Mode::Required),
            col("score", FieldType::Int64, Mode::Required),
            address,
            defaulted,
            col("kafka_offset", FieldType::Int64, Mode::Required),
        ];
        let mut wanted_address = col("address", FieldType::Record, Mode::Required);
        wanted_address.fields = vec![
            col("city", FieldType::String, Mode::Required),
            col("zip", FieldType::String, Mode::Nullable),
            col("floor", FieldType::Int64, Mode::Nullable),
        ];
        let wanted = vec![
            col("id", FieldType::Int64, Mode::Required),
            col("name", FieldType::String, Mode::Nullable),
            wanted_address,
        ];
        let keep = ["kafka_offset".to_string()];
        let policy = Policy {
            keep: &keep,
            ..RELAX
        };
        let m = merge(&table, &wanted, "", &policy).unwrap();
        assert_eq!(m.added, vec!["address.floor".to_string()]);
        assert_eq!(
            m.relaxed,
            vec![
                "name".to_string(),
                "address.zip".into(),
                "address.street".into(),
                "score".into()
            ]
        );
        assert_eq!(
            modes(&m.fields),
            vec![
                ("id".into(), Mode::Required),
                ("name".into(), Mode::Nullable),
                ("score".into(), Mode::Nullable),
                ("address".into(), Mode::Required),
                // a default fills it, and the sink writes the metadata columns itself
                ("region".into(), Mode::Required),
                ("kafka_offset".into(), Mode::Required),
            ]
        );
        assert_eq!(
            modes(&m.fields[3].fields),
            vec![
                ("city".into(), Mode::Required),
                ("zip".into(), Mode::Nullable),
                ("street".into(), Mode::Nullable),
                ("floor".into(), Mode::Nullable),
            ]
        );
        // Relaxed once, the same writer schema changes nothing more.
        assert!(
            merge(&m.fields, &wanted, "", &policy)
                .unwrap()
                .is_unchanged()
        );
    }

    #[test]
    fn union_adds_a_required_field_nullable_and_keeps_the_other_schemas_columns() {
        let table = vec![
            col("id", FieldType::Int64, Mode::Required),
            col("sku", FieldType::String, Mode::Required),
        ];
        let wanted = vec![
            col("id", FieldType::Int64, Mode::Required),
            col("user", FieldType::String, Mode::Required),
        ];
        let m = merge(&table, &wanted, "", &UNION).unwrap();
        assert_eq!(m.added, vec!["user".to_string()]);
        assert_eq!(m.relaxed, vec!["sku".to_string()]);
        assert_eq!(
            modes(&m.fields),
            vec![
                ("id".into(), Mode::Required),
                ("sku".into(), Mode::Nullable),
                ("user".into(), Mode::Nullable),
            ]
        );
    }

    #[test]
    fn union_refuses_a_type_conflict_naming_both_sources() {
        let mut address = col("address", FieldType::Record, Mode::Nullable);
        address.fields = vec![col("zip", FieldType::Int64, Mode::Nullable)];
        let table = vec![col("id", FieldType::Int64, Mode::Required), address];
        let mut wanted_address = col("address", FieldType::Record, Mode::Nullable);
        wanted_address.fields = vec![col("zip", FieldType::String, Mode::Nullable)];
        let wanted = vec![col("id", FieldType::Int64, Mode::Required), wanted_address];
        let err = merge(&table, &wanted, "", &UNION).unwrap_err();
        assert_eq!(
            err,
            Refusal::Conflict {
                path: "address.zip".into(),
                field: "STRING".into(),
                column: "INTEGER".into(),
            }
        );
        let sources = |path: &str| {
            (path == "address.zip").then(|| "writer schema 1 of topic orders".to_string())
        };
        assert_eq!(
            err.explain("writer schema 2 of topic returns", sources),
            "type conflict on field address.zip: STRING in writer schema 2 of topic returns, but INTEGER in writer schema 1 of topic orders (column address.zip)"
        );
        let unknown = err.explain("writer schema 2 of topic returns", |_| None);
        assert!(
            unknown
                .contains("INTEGER in the table (no writer schema with it seen by this process)"),
            "{unknown}"
        );

        // An array against a scalar is a conflict too; without union the compiler decides.
        let tags = [col("id", FieldType::Int64, Mode::Repeated)];
        let err = merge(&table, &tags, "", &UNION).unwrap_err();
        assert!(matches!(&err, Refusal::Conflict { field, .. } if field == "INTEGER REPEATED"));
        assert!(merge(&table, &wanted, "", &RELAX).is_ok());
    }

    #[test]
    fn table_state_names_the_first_source_of_each_column() {
        let state = TableState::new(TableSchema { fields: vec![] });
        let mut address = col("Address", FieldType::Record, Mode::Nullable);
        address.fields = vec![col("zip", FieldType::Int64, Mode::Nullable)];
        state.note_sources(&[address.clone()], "writer schema 1 of topic a");
        state.note_sources(&[address], "writer schema 2 of topic b");
        assert_eq!(
            state.source_of("address.ZIP").as_deref(),
            Some("writer schema 1 of topic a")
        );
        assert_eq!(state.source_of("other"), None);
    }

    #[test]
    fn the_write_api_schema_is_compared_with_its_modes() {
        use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::table_field_schema::Type;
        let proto = |mode: ProtoMode| ProtoField {
            name: "Name".into(),
            r#type: Type::String as i32,
            mode: mode as i32,
            ..Default::default()
        };
        let relaxed = column_paths(&[col("name", FieldType::String, Mode::Nullable)], "");
        assert!(!proto_paths(&[proto(ProtoMode::Required)], "").contains(&relaxed[0]));
        assert!(proto_paths(&[proto(ProtoMode::Nullable)], "").contains(&relaxed[0]));
    }
}
