//! Plan sources: where a writer gets the compiled transcoding plan for a record. Plans are
//! compiled once per writer schema against the table schema and shared by all partitions.
//!
//! One plan source serves every registry format (Avro, Protobuf, JSON Schema): a schema id's
//! registered type (or the route's pinned format) picks the schema reader, the framing after the
//! header and the plan compiler.
//!
//! Schema evolution (new writer schemas adding columns, the table followed when it changes) is
//! in [`super::evolution`].

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::TableSchema as ProtoTableSchema;
use prometheus_client::metrics::counter::Counter;
use prost_reflect::MessageDescriptor;

use crate::ops::metrics::{Metrics, ResultLabel};
use crate::registry::{AnySchema, RegistryError, SchemaKind, SchemaRegistry};
use kbq_core::bad_record::BadRecord;
use kbq_core::table_schema::TableSchema;
use kbq_transcode::json::{JsonSchema, table_schema_from_json};
use kbq_transcode::protobuf::{
    MessageIndexEncoding, MessagePath, split_message_indexes, table_schema_from_protobuf,
};
use kbq_transcode::transforms;
use kbq_transcode::{
    AvroSchema, DeriveError, DeriveOptions, Plan, PlanOptions, RecordError, split_confluent,
    table_schema_from_avro,
};

use crate::writer::plan_source::{PlanLookup, PlanLookupError, PlanSource};

use super::evolution::{SchemaEvolution, TableState};

/// What a registry route reads: the schema type it expects (`None`: each id's registered
/// `schemaType` decides), how Protobuf records frame their message path, whether JSON
/// records are checked against their schema first, and the subject of a topic's schemas.
#[derive(Debug, Clone)]
pub struct RegistryInput {
    pub kind: Option<SchemaKind>,
    pub message_indexes: MessageIndexEncoding,
    pub json_validate: bool,
    /// The subject of a topic's writer schemas (`schema_registry.table_subject`, `{topic}`
    /// replaced), whose versions say whether a field a writer lacks is one a transform may
    /// name (`absent_fields.rs`).
    pub subject: Arc<str>,
    /// The topics written into the same fixed table (the route's `topics`, or the
    /// subscription's for the top-level settings): their subjects' versions count as well,
    /// since the table is the union of their fields.
    pub table_topics: Arc<[String]>,
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

    pub(super) fn compile(
        &self,
        table: &TableSchema,
        options: &PlanOptions,
        json_validate: bool,
    ) -> Result<Plan, kbq_transcode::PlanError> {
        match self {
            WriterSchema::Avro(s) => Plan::compile(s, table, options),
            WriterSchema::Protobuf(m) => Plan::compile_protobuf(m, table, options),
            WriterSchema::Json(s) => Plan::compile_json(Some(s), json_validate, table, options),
        }
    }

    /// How messages name the schema: `writer schema 3`, `message shop.Order of schema id 3`.
    pub(super) fn describe(&self, id: u32) -> String {
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
    pub(super) registry: Arc<SchemaRegistry>,
    pub(super) input: RegistryInput,
    pub(super) table: Arc<TableState>,
    pub(super) options: PlanOptions,
    pub(super) metrics: Arc<Metrics>,
    /// The `hit` result's counter, taken once: a lookup per record would hash its label.
    hits: Counter,
    pub(super) evolution: Option<SchemaEvolution>,
    /// The table as dead-letter reasons name it (`project.dataset.table`): one table id may be
    /// in several datasets.
    pub(super) table_name: String,
    /// Schema ids are immutable, so a compiled plan (or the reason a schema cannot be used)
    /// is cached for the life of the process, per table schema version.
    cache: Mutex<HashMap<u32, IdEntry>>,
    /// One table change at a time in this process: partitions that meet the same new schema
    /// together patch once.
    pub(super) evolving: tokio::sync::Mutex<()>,
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
        table_name: String,
    ) -> Self {
        let hits = metrics
            .schema_registry_requests
            .get_or_create(&ResultLabel { result: "hit" })
            .clone();
        RegistryPlans {
            registry,
            input,
            table: Arc::new(TableState::new(table)),
            options,
            hits,
            metrics,
            evolution,
            table_name,
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
    /// configured. A transform of a field the writer lacks and another version of its subject
    /// has applies as to an absent field (`absent_fields.rs`). `Err` means "unavailable, try
    /// again" (nothing is cached).
    async fn compile(
        &self,
        topic: &str,
        id: u32,
        writer: &WriterSchema,
    ) -> Result<(Result<Arc<Plan>, BadRecord>, u64), PlanLookupError> {
        let absent = self.absent_fields(topic, writer).await?;
        let own = absent.as_ref().map(|a| {
            let mut options = self.options.clone();
            options.transforms = transforms::without_absent(&options.transforms, &a.fields);
            let evolution = self.evolution.clone().map(|mut e| {
                e.derive.transforms = transforms::without_absent(&e.derive.transforms, &a.fields);
                e
            });
            (options, evolution)
        });
        let (options, evolution) = match &own {
            Some((o, e)) => (o, e.as_ref()),
            None => (&self.options, self.evolution.as_ref()),
        };
        if let Some(evolution) = evolution.filter(|e| e.update.adds_columns()) {
            let (table, version) = self.table.current();
            if let Err(bad) = (self.evolve(evolution, options, topic, id, writer, &table)).await? {
                return Ok((Err(bad), version));
            }
        }
        let (table, version) = self.table.current();
        if let Some(a) = &absent
            && let Err(e) =
                transforms::check_absent(&self.options.transforms, &a.fields, &table, &a.derived)
        {
            let bad = plan_refused(&writer.describe(id), &self.table_name, &e);
            return Ok((Err(bad), version));
        }
        let plan = writer
            .compile(&table, options, self.input.json_validate)
            .map(Arc::new)
            .map_err(|e| plan_refused(&writer.describe(id), &self.table_name, &e));
        Ok((plan, version))
    }
}

impl PlanSource for RegistryPlans {
    fn malformed_class(&self) -> Option<&'static str> {
        self.input.kind.map(SchemaKind::malformed_class)
    }

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

    fn plan_for<'a>(&'a self, topic: &'a str, payload: &'a [u8]) -> PlanLookup<'a> {
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
                Ok(writer) => self.compile(topic, id, &writer).await?,
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
        if let Some(evolution) = &self.evolution {
            evolution.follow(&self.table, updated);
        }
    }
}

/// The bad record of a plan the compiler refused: `schema_too_complex` when the schema expands
/// past the compiler's budget, `incompatible_schema` when it does not fit the table.
pub(super) fn plan_refused(what: &str, table: &str, e: &kbq_transcode::PlanError) -> BadRecord {
    let class = e.class();
    let reason = match class {
        "incompatible_schema" => format!("{what} does not fit table {table}: {e}"),
        _ => format!("{what}: {e}"),
    };
    BadRecord { class, reason }
}

pub(super) fn incompatible(reason: String) -> BadRecord {
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
    ) -> Result<Self, kbq_transcode::PlanError> {
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
    fn plan_for<'a>(&'a self, _topic: &'a str, _payload: &'a [u8]) -> PlanLookup<'a> {
        let plan = self.plan.clone();
        Box::pin(async move { Ok((plan, 0)) })
    }

    fn fixed_plan(&self) -> Option<&Arc<Plan>> {
        Some(&self.plan)
    }

    fn malformed_class(&self) -> Option<&'static str> {
        Some(self.plan.malformed_class())
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

    #[test]
    fn a_schema_that_does_not_fit_names_the_table_with_its_dataset_and_project() {
        let e = kbq_transcode::PlanError::Incompatible {
            column: "amount".into(),
            avro: "string".into(),
            column_type: "INT64".into(),
        };
        let bad = plan_refused("writer schema 3", "p.finance.orders", &e);
        assert_eq!(bad.class, "incompatible_schema");
        assert!(
            bad.reason
                .starts_with("writer schema 3 does not fit table p.finance.orders: column amount"),
            "{}",
            bad.reason
        );
    }
}
