//! Plan sources: where a writer gets the compiled transcoding plan for a record. Plans are
//! compiled once per writer schema against the table schema and shared by all partitions.
//!
//! One plan source serves every registry format (Avro, Protobuf, JSON Schema): a schema id's
//! registered type (or the route's pinned format) picks the schema reader, the framing after the
//! header and the plan compiler.
//!
//! Schema evolution (`bigquery.schema_update: add_columns`, README) lives here because this is
//! where a new writer schema is first seen: before compiling its plan, the writer schema's fields
//! (Avro, Protobuf or JSON Schema) without a column become NULLABLE columns (`tables.patch`), and the plan is compiled only once the Storage
//! Write API reports them (GetWriteStream FULL), so the first append carrying them cannot fail with
//! an unknown-field error. The writer then sees a new descriptor and reconnects its stream with it.
//! Plans of older schemas stay valid: a column they do not write is NULL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::{
    TableFieldSchema as ProtoField, TableSchema as ProtoTableSchema,
};
use prometheus_client::metrics::counter::Counter;
use prost_reflect::MessageDescriptor;
use tokio::time::Instant;

use crate::bigquery::rest_client::{RestClient, RestError, TableReference};
use crate::bigquery::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use crate::bigquery::write_client::WriteClient;
use crate::kafka::dead_letter::BadRecord;
use crate::ops::metrics::{Metrics, ResultLabel};
use crate::registry::{AnySchema, RegistryError, SchemaKind, SchemaRegistry};
use crate::transcode::json::{JsonSchema, table_schema_from_json};
use crate::transcode::protobuf::{
    MessageIndexEncoding, MessagePath, split_message_indexes, table_schema_from_protobuf,
};
use crate::transcode::{
    AvroSchema, DeriveError, DeriveOptions, Plan, PlanOptions, RecordError, split_confluent,
    table_schema_from_avro,
};

use crate::writer::partition_writer::{PlanLookup, PlanLookupError, PlanSource};

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
struct TableState {
    schema: RwLock<Arc<TableSchema>>,
    /// Bumped on every replacement: cached plans of an older version are recompiled.
    version: AtomicU64,
    /// A refresh triggered by `updated_schema` is running.
    refreshing: AtomicBool,
}

impl TableState {
    fn current(&self) -> (Arc<TableSchema>, u64) {
        let schema = self.schema.read().expect("table schema lock").clone();
        (schema, self.version.load(Ordering::Acquire))
    }

    fn replace(&self, schema: TableSchema) {
        let mut slot = self.schema.write().expect("table schema lock");
        if **slot != schema {
            *slot = Arc::new(schema);
            self.version.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// What a registry route reads: the schema type it expects (`None`: each id's registered
/// `schemaType` decides), how Protobuf records frame their message path, and whether JSON
/// records are checked against their schema first.
#[derive(Debug, Clone, Copy)]
pub struct RegistryInput {
    pub kind: Option<SchemaKind>,
    pub message_indexes: MessageIndexEncoding,
    pub json_validate: bool,
}

/// The writer schema one plan is compiled from: an Avro record, one message of a registered
/// Protobuf file, or a JSON Schema.
#[derive(Clone)]
pub enum WriterSchema {
    Avro(AvroSchema),
    Protobuf(MessageDescriptor),
    Json(Arc<JsonSchema>),
}

impl WriterSchema {
    /// The columns this schema's records need (`create_table`, `add_columns`).
    pub fn derive(&self, options: &DeriveOptions) -> Result<TableSchema, DeriveError> {
        match self {
            WriterSchema::Avro(s) => table_schema_from_avro(s, options),
            WriterSchema::Protobuf(m) => table_schema_from_protobuf(m, options),
            WriterSchema::Json(s) => table_schema_from_json(s, options),
        }
    }

    fn compile(
        &self,
        table: &TableSchema,
        options: &PlanOptions,
        json_validate: bool,
    ) -> Result<Plan, crate::transcode::PlanError> {
        match self {
            WriterSchema::Avro(s) => Plan::compile(s, table, options),
            WriterSchema::Protobuf(m) => Plan::compile_protobuf(m, table, options),
            WriterSchema::Json(s) => Plan::compile_json(Some(s), json_validate, table, options),
        }
    }

    /// How messages name the schema: `writer schema 3`, `message shop.Order of schema id 3`.
    fn describe(&self, id: u32) -> String {
        match self {
            WriterSchema::Avro(_) => format!("writer schema {id}"),
            WriterSchema::Protobuf(m) => format!("message {} of schema id {id}", m.full_name()),
            WriterSchema::Json(_) => format!("json schema id {id}"),
        }
    }
}

/// The writer schema a registered schema and a record's message path name; `Err` when the path
/// names no message of the Protobuf file.
pub fn writer_schema(
    schema: &AnySchema,
    id: u32,
    path: &MessagePath,
) -> Result<WriterSchema, BadRecord> {
    match schema {
        AnySchema::Avro(r) => Ok(WriterSchema::Avro(r.schema.clone())),
        AnySchema::Json(s) => Ok(WriterSchema::Json(s.clone())),
        AnySchema::Protobuf(r) => match r.schema.message(path) {
            Some(m) => Ok(WriterSchema::Protobuf(m)),
            None => Err(unknown_schema(format!(
                "message index path {path} names no message of schema id {id} (top-level messages: {:?})",
                r.schema.message_names()
            ))),
        },
    }
}

/// One schema id: the registered schema (or why it cannot be used: final for the id) and the
/// plans compiled from it, one per message path (Avro and JSON have only the first).
struct IdEntry {
    schema: Result<AnySchema, BadRecord>,
    plans: Vec<(MessagePath, Compiled)>,
}

struct Compiled {
    table_version: u64,
    plan: Result<Arc<Plan>, BadRecord>,
}

/// Confluent-framed records (Avro, Protobuf, JSON Schema): the writer schema comes from the
/// Schema Registry by id.
pub struct RegistryPlans {
    registry: Arc<SchemaRegistry>,
    input: RegistryInput,
    table: Arc<TableState>,
    options: PlanOptions,
    metrics: Arc<Metrics>,
    /// The `hit` result's counter, taken once: a lookup per record would hash its label.
    hits: Counter,
    evolution: Option<SchemaEvolution>,
    /// Schema ids are immutable, so a compiled plan (or the reason a schema cannot be used)
    /// is cached for the life of the process, per table schema version.
    cache: Mutex<HashMap<u32, IdEntry>>,
    /// One table change at a time in this process: partitions that meet the same new schema
    /// together patch once.
    evolving: tokio::sync::Mutex<()>,
}

/// A cache lookup: the plan, or what `plan_for` must do.
enum Lookup {
    Plan(Result<Arc<Plan>, BadRecord>),
    /// The schema is known; the plan of this path is missing or older than the table.
    Compile(AnySchema),
    Unknown,
}

impl RegistryPlans {
    pub fn new(
        registry: Arc<SchemaRegistry>,
        input: RegistryInput,
        table: TableSchema,
        options: PlanOptions,
        metrics: Arc<Metrics>,
        evolution: Option<SchemaEvolution>,
    ) -> Self {
        let hits = metrics
            .schema_registry_requests
            .get_or_create(&ResultLabel { result: "hit" })
            .clone();
        RegistryPlans {
            registry,
            input,
            table: Arc::new(TableState {
                schema: RwLock::new(Arc::new(table)),
                version: AtomicU64::new(0),
                refreshing: AtomicBool::new(false),
            }),
            options,
            hits,
            metrics,
            evolution,
            cache: Mutex::new(HashMap::new()),
            evolving: tokio::sync::Mutex::new(()),
        }
    }

    fn count(&self, result: &'static str) {
        if result == "hit" {
            self.hits.inc();
            return;
        }
        self.metrics
            .schema_registry_requests
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// The message path of a record and where its message starts: Protobuf records carry the
    /// message-index array after the header; Avro and JSON bodies start right after it.
    fn locate(
        &self,
        protobuf: bool,
        id: u32,
        payload: &[u8],
        body: &[u8],
    ) -> Result<(MessagePath, usize), BadRecord> {
        match protobuf {
            true => {
                let (path, message) = split_message_indexes(body, self.input.message_indexes)
                    .map_err(|e| BadRecord {
                        class: e.class(),
                        reason: format!("schema id {id}: {e}"),
                    })?;
                Ok((path, payload.len() - message.len()))
            }
            false => Ok((MessagePath::FIRST, payload.len() - body.len())),
        }
    }

    /// What the cache holds for a record of schema `id`.
    fn lookup(&self, id: u32, payload: &[u8], body: &[u8]) -> (Lookup, usize) {
        let cache = self.cache.lock().expect("plan cache");
        let Some(entry) = cache.get(&id) else {
            return (Lookup::Unknown, 0);
        };
        let protobuf = matches!(entry.schema, Ok(AnySchema::Protobuf(_)));
        let (path, body_at) = match self.locate(protobuf, id, payload, body) {
            Ok(found) => found,
            Err(bad) => return (Lookup::Plan(Err(bad)), 0),
        };
        let schema = match &entry.schema {
            Ok(schema) => schema,
            Err(bad) => return (Lookup::Plan(Err(bad.clone())), body_at),
        };
        let version = self.table.version.load(Ordering::Acquire);
        match entry.plans.iter().find(|(p, _)| *p == path) {
            Some((_, c)) if c.table_version == version || c.plan.is_err() => {
                (Lookup::Plan(c.plan.clone()), body_at)
            }
            _ => (Lookup::Compile(schema.clone()), body_at),
        }
    }

    /// Compiles the plan of a writer schema, adding its new columns to the table first when
    /// configured. `Err` means "unavailable, try again" (nothing is cached).
    async fn compile(
        &self,
        id: u32,
        writer: &WriterSchema,
    ) -> Result<(Result<Arc<Plan>, BadRecord>, u64), PlanLookupError> {
        if let Some(evolution) = self.evolution.as_ref().filter(|e| e.add_columns) {
            let (table, version) = self.table.current();
            if let Err(bad) = self.evolve(evolution, id, writer, &table).await? {
                return Ok((Err(bad), version));
            }
        }
        let (table, version) = self.table.current();
        let plan = writer
            .compile(&table, &self.options, self.input.json_validate)
            .map(Arc::new)
            .map_err(|e| {
                incompatible(format!(
                    "{} does not fit the table: {e}",
                    writer.describe(id)
                ))
            });
        Ok((plan, version))
    }

    /// Makes the table hold a column for every field of `writer` (nullable ones only).
    async fn evolve(
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
                    "{what} cannot evolve the table: {reason}"
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
                "{what} does not fit the table: {e}"
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
                        "{what}: the table refused the new columns {:?}: {e}",
                        merged.added
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

impl PlanSource for RegistryPlans {
    fn cached_plan(&self, payload: &[u8]) -> Option<Result<(Arc<Plan>, usize), BadRecord>> {
        let (id, body) = match split_confluent(payload) {
            Ok(split) => split,
            Err(e) => {
                return match bad_framing(&e) {
                    PlanLookupError::BadRecord(bad) => Some(Err(bad)),
                    PlanLookupError::Unavailable(_) => None,
                };
            }
        };
        match self.lookup(id, payload, body) {
            (Lookup::Plan(plan), body_at) => {
                self.hits.inc();
                Some(plan.map(|plan| (plan, body_at)))
            }
            // Not compiled yet, or the table changed since: plan_for's work.
            (Lookup::Compile(_) | Lookup::Unknown, _) => None,
        }
    }

    fn plan_for<'a>(&'a self, payload: &'a [u8]) -> PlanLookup<'a> {
        Box::pin(async move {
            let (id, body) = split_confluent(payload).map_err(|e| bad_framing(&e))?;
            let schema = match self.lookup(id, payload, body) {
                (Lookup::Plan(plan), body_at) => {
                    self.count("hit");
                    return plan
                        .map(|plan| (plan, body_at))
                        .map_err(PlanLookupError::BadRecord);
                }
                (Lookup::Compile(schema), _) => {
                    self.count("hit");
                    schema
                }
                (Lookup::Unknown, _) => match self.registry.any_schema(id, self.input.kind).await {
                    Ok(schema) => {
                        self.count("fetched");
                        schema
                    }
                    Err(e) if e.is_retryable() => {
                        self.count("error");
                        return Err(PlanLookupError::Unavailable(e.to_string()));
                    }
                    Err(e) => {
                        self.count(if matches!(e, RegistryError::NotFound { .. }) {
                            "not_found"
                        } else {
                            "error"
                        });
                        let bad = unknown_schema(e.to_string());
                        self.cache.lock().expect("plan cache").insert(
                            id,
                            IdEntry {
                                schema: Err(bad.clone()),
                                plans: Vec::new(),
                            },
                        );
                        return Err(PlanLookupError::BadRecord(bad));
                    }
                },
            };
            let protobuf = matches!(schema, AnySchema::Protobuf(_));
            let (path, body_at) = self
                .locate(protobuf, id, payload, body)
                .map_err(PlanLookupError::BadRecord)?;
            let (plan, table_version) = match writer_schema(&schema, id, &path) {
                Ok(writer) => self.compile(id, &writer).await?,
                Err(bad) => (Err(bad), self.table.version.load(Ordering::Acquire)),
            };
            let mut cache = self.cache.lock().expect("plan cache");
            let entry = cache.entry(id).or_insert_with(|| IdEntry {
                schema: Ok(schema),
                plans: Vec::new(),
            });
            let compiled = Compiled {
                table_version,
                plan: plan.clone(),
            };
            match entry.plans.iter_mut().find(|(p, _)| *p == path) {
                Some((_, c)) => *c = compiled,
                None => entry.plans.push((path, compiled)),
            }
            drop(cache);
            plan.map(|plan| (plan, body_at))
                .map_err(PlanLookupError::BadRecord)
        })
    }

    /// An AppendRows response said the table changed under a connection (another replica added
    /// columns, or an operator did): read the table again so the next plans write them.
    fn table_schema_updated(&self, updated: &ProtoTableSchema) {
        let Some(evolution) = &self.evolution else {
            return;
        };
        let (known, _) = self.table.current();
        let known_paths = column_paths(&known.fields, "");
        if proto_paths(&updated.fields, "")
            .iter()
            .all(|p| known_paths.contains(p))
        {
            return;
        }
        if self.table.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let state = self.table.clone();
        let rest = evolution.rest.clone();
        let table = evolution.table.clone();
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

fn incompatible(reason: String) -> BadRecord {
    BadRecord {
        class: "incompatible_schema",
        reason,
    }
}

fn unknown_schema(reason: String) -> BadRecord {
    BadRecord {
        class: "unknown_schema",
        reason,
    }
}

/// Raw Avro binary written with one fixed schema (an `.avsc` named in the config), or schemaless
/// JSON typed by the table.
pub struct FixedPlan {
    plan: Arc<Plan>,
}

impl FixedPlan {
    pub fn new(
        schema: &AvroSchema,
        table: &TableSchema,
        options: &PlanOptions,
    ) -> Result<Self, crate::transcode::PlanError> {
        Ok(FixedPlan {
            plan: Arc::new(Plan::compile(schema, table, options)?),
        })
    }

    pub fn from_plan(plan: Plan) -> Self {
        FixedPlan {
            plan: Arc::new(plan),
        }
    }
}

impl PlanSource for FixedPlan {
    fn plan_for<'a>(&'a self, _payload: &'a [u8]) -> PlanLookup<'a> {
        let plan = self.plan.clone();
        Box::pin(async move { Ok((plan, 0)) })
    }

    fn fixed_plan(&self) -> Option<&Arc<Plan>> {
        Some(&self.plan)
    }
}

fn bad_framing(e: &RecordError) -> PlanLookupError {
    PlanLookupError::BadRecord(BadRecord {
        class: "bad_magic",
        reason: e.to_string(),
    })
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
