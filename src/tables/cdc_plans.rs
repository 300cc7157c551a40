//! Plans of a CDC route (docs/cdc.md): per writer schema (Avro, Protobuf message or JSON Schema,
//! or schemaless JSON), where the change is in a record ([`ChangeShape`]) and the plan that writes
//! its row with the two pseudo-columns; per key schema, the plan that writes a key-only DELETE
//! row for a tombstone. Cached by schema id (and Protobuf message path) for the life of the
//! process (ids are immutable), like the plans of an ordinary route; records in Kafka Connect's
//! JSON envelope carry their schema, and their plans are cached by its block
//! (`connect_schemas.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::connect_schemas::SchemaBlocks;
use super::plans::{RegistryInput, WriterSchema, writer_schema};
use crate::config::defaults::CONNECT_SCHEMAS_PER_ROUTE;
use crate::registry::{AnySchema, RegistryError, SchemaRegistry};
use kbq_core::bad_record::BadRecord;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use kbq_transcode::change::{
    CHANGE_SEQUENCE_NUMBER, CHANGE_TYPE, ChangeColumns, ChangeShape, ConnectEnvelope, JsonShape,
    NotAChange, ProtoShape, connect_schema, key_row_schema, with_change_fields, with_unset_fields,
};
use kbq_transcode::json::connect_schema as connect;
use kbq_transcode::protobuf::{MessagePath, split_message_indexes};
use kbq_transcode::{AvroSchema, Plan, PlanOptions, split_confluent};

use crate::writer::change_source::{ChangeLookup, ChangePlan, ChangeRules, ChangeSource, KeyPlan};
use crate::writer::plan_source::{PlanLookup, PlanLookupError, PlanSource};

/// Where the writer schemas come from.
pub enum ChangeSchemas {
    /// Confluent-framed Avro, Protobuf or JSON Schema (values and keys alike).
    Registry(Arc<SchemaRegistry>, RegistryInput),
    /// Raw Avro with one schema, or schemaless JSON: the plan, compiled at start.
    Fixed(Arc<ChangePlan>),
    /// JSON in Kafka Connect's envelope: each record's `schema` block is its schema.
    Envelope,
}

/// The tables plans compile against: Avro rows declare the pseudo-columns as fields, so their
/// plans compile against the table with them; Protobuf and JSON plans get them added after.
struct Tables {
    with_pseudo: TableSchema,
    plain: TableSchema,
}

/// Plans by schema id and, for Protobuf, the message path.
type Cache<T> = Mutex<HashMap<(u32, MessagePath), Result<T, BadRecord>>>;

/// How a CDC route turns records into changes.
pub struct ChangePlans {
    schemas: ChangeSchemas,
    tables: Tables,
    options: PlanOptions,
    pub rules: ChangeRules,
    /// Schemaless JSON: keys are schemaless JSON too.
    schemaless: bool,
    values: Cache<Arc<ChangePlan>>,
    keys: Cache<Arc<KeyPlan>>,
    /// Whether a schema id is Protobuf (its records carry a message-index array).
    protobuf_ids: Mutex<HashMap<u32, bool>>,
    /// Plans by Kafka Connect schema block, of values and of keys.
    value_blocks: SchemaBlocks<Result<Arc<ChangePlan>, BadRecord>>,
    key_blocks: SchemaBlocks<Result<Arc<KeyPlan>, BadRecord>>,
}

/// The table schema plans compile against: the table's columns and the pseudo-columns.
pub fn with_pseudo_columns(table: &TableSchema) -> TableSchema {
    let mut out = table.clone();
    for name in [CHANGE_TYPE, CHANGE_SEQUENCE_NUMBER] {
        out.fields.push(TableFieldSchema::new(
            name,
            FieldType::String,
            Mode::Nullable,
        ));
    }
    out
}

fn relax(table: &TableSchema) -> TableSchema {
    let mut out = table.clone();
    for column in &mut out.fields {
        if column.mode() == Mode::Required {
            column.mode = Some(Mode::Nullable);
        }
    }
    out
}

fn bad(class: &'static str, reason: String) -> BadRecord {
    BadRecord { class, reason }
}

fn unavailable(e: &RegistryError) -> PlanLookupError {
    PlanLookupError::Unavailable(e.to_string())
}

/// What a change plan is compiled from.
pub enum ChangeInput<'a> {
    Registry(Arc<SchemaRegistry>, RegistryInput),
    /// Raw Avro with one schema.
    FixedAvro(&'a AvroSchema),
    SchemalessJson,
}

impl ChangePlans {
    pub fn new(
        input: ChangeInput<'_>,
        table: &TableSchema,
        options: PlanOptions,
        rules: ChangeRules,
    ) -> Result<ChangePlans, String> {
        let tables = Tables {
            with_pseudo: with_pseudo_columns(table),
            plain: table.clone(),
        };
        let fixed = |writer: Option<WriterSchema>| {
            compile(writer.as_ref(), &tables, &options, &rules, false)
                .map(|p| ChangeSchemas::Fixed(Arc::new(p)))
                .map_err(|b| b.reason)
        };
        let (schemas, schemaless) = match input {
            ChangeInput::FixedAvro(schema) => {
                (fixed(Some(WriterSchema::Avro(schema.clone())))?, false)
            }
            ChangeInput::SchemalessJson if rules.json_envelope == ConnectEnvelope::On => {
                (ChangeSchemas::Envelope, true)
            }
            ChangeInput::SchemalessJson => (fixed(None)?, true),
            ChangeInput::Registry(registry, input) => {
                (ChangeSchemas::Registry(registry, input), false)
            }
        };
        Ok(ChangePlans {
            schemas,
            tables,
            options,
            rules,
            schemaless,
            values: Mutex::new(HashMap::new()),
            keys: Mutex::new(HashMap::new()),
            protobuf_ids: Mutex::new(HashMap::new()),
            value_blocks: SchemaBlocks::new(CONNECT_SCHEMAS_PER_ROUTE),
            key_blocks: SchemaBlocks::new(CONNECT_SCHEMAS_PER_ROUTE),
        })
    }

    /// The change plan of a value payload and where its body starts.
    pub async fn value_plan(
        &self,
        payload: &[u8],
    ) -> Result<(Arc<ChangePlan>, usize), PlanLookupError> {
        let (registry, input) = match &self.schemas {
            ChangeSchemas::Fixed(plan) => return Ok((plan.clone(), 0)),
            ChangeSchemas::Envelope => {
                let block = schema_block(payload, "")?;
                let found = self.value_blocks.get_or_compile(block, |block| {
                    let writer = connect_writer(block, "")?;
                    let mut plan = compile(
                        Some(&writer),
                        &self.tables,
                        &self.options,
                        &self.rules,
                        false,
                    )?;
                    if let ChangeShape::Json(shape) = plan.shape {
                        plan.shape = ChangeShape::Json(shape.with_envelope(ConnectEnvelope::On));
                    }
                    Ok(Arc::new(plan))
                });
                return found.map(|p| (p, 0)).map_err(PlanLookupError::BadRecord);
            }
            ChangeSchemas::Registry(r, input) => (r, input),
        };
        let bad_value = |class: &'static str, reason: String| bad(class, reason);
        let (writer, cached, at) = self
            .writer(registry, input, payload, &self.values, bad_value)
            .await?;
        if let Some(found) = cached {
            return found.map(|p| (p, at)).map_err(PlanLookupError::BadRecord);
        }
        let (key, writer) = writer.expect("not cached");
        let found = writer.and_then(|w| {
            compile(
                Some(&w),
                &self.tables,
                &self.options,
                &self.rules,
                input.json_validate,
            )
            .map(Arc::new)
        });
        cache(&self.values, key, found).map(|p| (p, at))
    }

    /// The plan of a Kafka key (through the registry, in any of its formats; schemaless JSON
    /// with schemaless values) that writes a key-only row, and where the key's body starts.
    pub async fn key_plan(&self, key: &[u8]) -> Result<(Arc<KeyPlan>, usize), PlanLookupError> {
        let relaxed = relaxed(&self.tables);
        let (registry, input) = match &self.schemas {
            ChangeSchemas::Registry(r, input) => (r, input),
            ChangeSchemas::Envelope => {
                let block = schema_block(key, "the kafka key: ")?;
                let found = self.key_blocks.get_or_compile(block, |block| {
                    let writer = connect_writer(block, "the kafka key: ")
                        .map_err(|b| bad("cdc_no_key", b.reason))?;
                    key_compile(
                        Some(&writer),
                        &self.tables,
                        &relaxed,
                        &self.options,
                        ConnectEnvelope::On,
                    )
                });
                return found.map(|p| (p, 0)).map_err(PlanLookupError::BadRecord);
            }
            ChangeSchemas::Fixed(_) if self.schemaless => {
                let found = self.key_cached((0, MessagePath::FIRST), || {
                    key_compile(
                        None,
                        &self.tables,
                        &relaxed,
                        &self.options,
                        self.rules.json_envelope,
                    )
                });
                return found.map(|p| (p, 0)).map_err(PlanLookupError::BadRecord);
            }
            ChangeSchemas::Fixed(_) => {
                return Err(PlanLookupError::BadRecord(bad(
                    "cdc_no_key",
                    "a delete by kafka key needs the key's schema from the schema registry".into(),
                )));
            }
        };
        let bad_key =
            |_: &'static str, reason: String| bad("cdc_no_key", format!("the kafka key: {reason}"));
        let (writer, cached, at) = self
            .writer(registry, input, key, &self.keys, bad_key)
            .await?;
        if let Some(found) = cached {
            return found.map(|p| (p, at)).map_err(PlanLookupError::BadRecord);
        }
        let (id, writer) = writer.expect("not cached");
        let found = writer.and_then(|w| {
            key_compile(
                Some(&w),
                &self.tables,
                &relaxed,
                &self.options,
                ConnectEnvelope::Off,
            )
        });
        cache(&self.keys, id, found).map(|p| (p, at))
    }

    fn key_cached(
        &self,
        id: (u32, MessagePath),
        compile: impl FnOnce() -> Result<Arc<KeyPlan>, BadRecord>,
    ) -> Result<Arc<KeyPlan>, BadRecord> {
        let mut keys = self.keys.lock().expect("plan cache");
        keys.entry(id).or_insert_with(compile).clone()
    }

    /// The writer schema of a Confluent-framed payload: from the cache (`cached`), or fetched
    /// (`writer`, with the cache key to store its plan under); and where the body starts.
    #[allow(clippy::type_complexity)]
    async fn writer<T: Clone>(
        &self,
        registry: &SchemaRegistry,
        input: &RegistryInput,
        payload: &[u8],
        plans: &Cache<T>,
        bad: impl Fn(&'static str, String) -> BadRecord,
    ) -> Result<
        (
            Option<((u32, MessagePath), Result<WriterSchema, BadRecord>)>,
            Option<Result<T, BadRecord>>,
            usize,
        ),
        PlanLookupError,
    > {
        let record = |class, reason| PlanLookupError::BadRecord(bad(class, reason));
        let (id, body) =
            split_confluent(payload).map_err(|e| record("bad_magic", e.to_string()))?;
        // A cached plan is found without asking the registry: only the id's format (whether a
        // message-index array follows the header) must be known.
        let known = self
            .protobuf_ids
            .lock()
            .expect("plan cache")
            .get(&id)
            .copied();
        let mut schema = None;
        let protobuf = match known {
            Some(protobuf) => protobuf,
            None => {
                let fetched = self.fetch(registry, input, id).await?;
                let protobuf = matches!(fetched, Ok(AnySchema::Protobuf(_)));
                schema = Some(fetched);
                protobuf
            }
        };
        let (path, at) = match protobuf {
            true => {
                let (path, message) = split_message_indexes(body, input.message_indexes)
                    .map_err(|e| record(e.class(), format!("schema id {id}: {e}")))?;
                (path, payload.len() - message.len())
            }
            false => (MessagePath::FIRST, payload.len() - body.len()),
        };
        if let Some(found) = plans.lock().expect("plan cache").get(&(id, path)) {
            return Ok((None, Some(found.clone()), at));
        }
        let schema = match schema {
            Some(s) => s,
            None => self.fetch(registry, input, id).await?,
        };
        self.protobuf_ids
            .lock()
            .expect("plan cache")
            .insert(id, protobuf);
        let writer = schema.and_then(|s| writer_schema(&s, id, &path));
        Ok((Some(((id, path), writer)), None, at))
    }

    /// The registered schema of `id`; `Err` inside: final for the id (an unknown schema).
    async fn fetch(
        &self,
        registry: &SchemaRegistry,
        input: &RegistryInput,
        id: u32,
    ) -> Result<Result<AnySchema, BadRecord>, PlanLookupError> {
        match registry.any_schema(id, input.kind).await {
            Ok(s) => Ok(Ok(s)),
            Err(e) if e.is_retryable() => Err(unavailable(&e)),
            Err(e) => Ok(Err(bad("unknown_schema", e.to_string()))),
        }
    }
}

/// The `schema` block of a record in Kafka Connect's envelope; `what` names a key.
fn schema_block<'a>(data: &'a [u8], what: &str) -> Result<&'a [u8], PlanLookupError> {
    let refuse = |class: &'static str, reason: String| {
        PlanLookupError::BadRecord(bad(class, format!("{what}{reason}")))
    };
    match connect_schema(data) {
        Ok(Some(range)) => Ok(&data[range]),
        Ok(None) => Err(refuse(
            "cdc_json_envelope",
            "the schema of kafka connect's json envelope is null or absent: there are no types to read the payload by".into(),
        )),
        Err(e @ NotAChange::Json(_)) => Err(refuse("malformed_json", e.to_string())),
        Err(e) => Err(refuse(e.class(), e.to_string())),
    }
}

/// The writer schema a Kafka Connect schema block describes.
fn connect_writer(block: &[u8], what: &str) -> Result<WriterSchema, BadRecord> {
    connect::parse(block)
        .map(|s| WriterSchema::Json(Arc::new(s)))
        .map_err(|e| bad("incompatible_schema", format!("{what}{e}")))
}

fn cache<T: Clone>(
    plans: &Cache<T>,
    key: (u32, MessagePath),
    found: Result<T, BadRecord>,
) -> Result<T, PlanLookupError> {
    plans.lock().expect("plan cache").insert(key, found.clone());
    found.map_err(PlanLookupError::BadRecord)
}

/// The table with its REQUIRED columns NULLABLE (a DELETE row needs only the key columns).
fn relaxed(tables: &Tables) -> Tables {
    Tables {
        with_pseudo: relax(&tables.with_pseudo),
        plain: relax(&tables.plain),
    }
}

/// A value schema's change plan (`None`: schemaless JSON, typed by the table).
fn compile(
    writer: Option<&WriterSchema>,
    tables: &Tables,
    options: &PlanOptions,
    rules: &ChangeRules,
    json_validate: bool,
) -> Result<ChangePlan, BadRecord> {
    let source = rules.source_field.as_deref();
    let incompatible = |reason: String| bad("incompatible_schema", reason);
    let unfit = |e: kbq_transcode::PlanError| match e.class() {
        "incompatible_schema" => incompatible(format!("the change rows do not fit the table: {e}")),
        class => bad(class, format!("the change rows: {e}")),
    };
    let (shape, plan, columns) = match writer {
        Some(WriterSchema::Avro(schema)) => {
            let (shape, row) =
                ChangeShape::new(schema, &rules.format, source).map_err(incompatible)?;
            let plan = Plan::compile(&row, &tables.with_pseudo, options).map_err(unfit)?;
            (shape, plan, ChangeColumns::Avro)
        }
        Some(WriterSchema::Protobuf(message)) => {
            let (shape, row) =
                ProtoShape::new(message, &rules.format, source).map_err(incompatible)?;
            let plan = Plan::compile_protobuf(&row, &tables.plain, options).map_err(unfit)?;
            let (plan, columns) = with_change_fields(plan);
            (ChangeShape::Protobuf(shape), plan, columns)
        }
        Some(WriterSchema::Json(schema)) => {
            let (shape, row) = JsonShape::new(Some(schema), json_validate, &rules.format, source)
                .map_err(incompatible)?;
            let plan =
                Plan::compile_json(row.as_ref(), false, &tables.plain, options).map_err(unfit)?;
            let (plan, columns) = with_change_fields(plan);
            (ChangeShape::Json(shape), plan, columns)
        }
        None => {
            let (shape, _) =
                JsonShape::new(None, false, &rules.format, source).map_err(incompatible)?;
            let shape = shape.with_envelope(rules.json_envelope);
            let plan = Plan::compile_json(None, false, &tables.plain, options).map_err(unfit)?;
            let (plan, columns) = with_change_fields(plan);
            (ChangeShape::Json(shape), plan, columns)
        }
    };
    Ok(ChangePlan {
        shape,
        plan: Arc::new(plan),
        columns,
    })
}

/// A key schema's plan of key-only rows against the relaxed table (`None`: schemaless JSON),
/// its writer schema declaring the REQUIRED columns of `tables` too.
fn key_compile(
    writer: Option<&WriterSchema>,
    tables: &Tables,
    relaxed: &Tables,
    options: &PlanOptions,
    envelope: ConnectEnvelope,
) -> Result<Arc<KeyPlan>, BadRecord> {
    let compiled = match writer {
        Some(WriterSchema::Avro(schema)) => {
            Plan::compile(&key_row_schema(schema), &relaxed.with_pseudo, options)
                .map(|p| (p, ChangeColumns::Avro))
        }
        Some(WriterSchema::Protobuf(m)) => {
            Plan::compile_protobuf(m, &relaxed.plain, options).map(with_change_fields)
        }
        Some(WriterSchema::Json(s)) => {
            Plan::compile_json(Some(s), false, &relaxed.plain, options).map(with_change_fields)
        }
        None => Plan::compile_json(None, false, &relaxed.plain, options).map(with_change_fields),
    };
    let (plan, columns) = compiled.map_err(|e| {
        bad(
            "cdc_no_key",
            format!("the kafka key's schema does not fit the table: {e}"),
        )
    })?;
    let plan = with_required_columns(plan, tables, relaxed, options);
    Ok(Arc::new(KeyPlan {
        plan: Arc::new(plan),
        columns,
        envelope,
    }))
}

/// `plan` (a key-only row's) with a never-written field for each REQUIRED column without a default
/// that it lacks, typed as the table's schemaless JSON plan types it: a writer schema must declare
/// every such column, or BigQuery refuses the whole AppendRows call, so a tombstone that opens a
/// connection (the first record after a restart) would stop the partition. Unchanged when the
/// table has none, or when that plan does not compile (BigQuery's refusal then names them).
fn with_required_columns(
    plan: Plan,
    tables: &Tables,
    relaxed: &Tables,
    options: &PlanOptions,
) -> Plan {
    let required: Vec<&str> = tables
        .plain
        .fields
        .iter()
        .filter(|c| c.mode() == Mode::Required && c.default_value_expression.is_none())
        .map(|c| c.name.as_str())
        .collect();
    if required.is_empty() {
        return plan;
    }
    match Plan::compile_json(None, false, &relaxed.plain, options) {
        Ok(table) => with_unset_fields(plan, table.descriptor(), &required),
        Err(_) => plan,
    }
}

impl PlanSource for ChangePlans {
    /// A CDC route's writer asks [`ChangePlans::value_plan`]; this entry point is not used.
    fn plan_for<'a>(&'a self, _topic: &'a str, payload: &'a [u8]) -> PlanLookup<'a> {
        Box::pin(async move {
            self.value_plan(payload)
                .await
                .map(|(p, at)| (p.plan.clone(), at))
        })
    }
}

impl ChangeSource for ChangePlans {
    fn rules(&self) -> &ChangeRules {
        &self.rules
    }

    fn change_plan<'a>(&'a self, value: &'a [u8]) -> ChangeLookup<'a, ChangePlan> {
        Box::pin(self.value_plan(value))
    }

    fn delete_plan<'a>(&'a self, key: &'a [u8]) -> ChangeLookup<'a, KeyPlan> {
        Box::pin(self.key_plan(key))
    }
}
