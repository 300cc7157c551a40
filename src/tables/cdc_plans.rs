//! Plans of a CDC route (docs/cdc.md): per writer schema, where the change is in a record
//! ([`ChangeShape`]) and the plan that writes its row with the two pseudo-columns; per key schema,
//! the plan that writes a key-only DELETE row for a tombstone. Cached by schema id for the life
//! of the process (ids are immutable), like the plans of an ordinary route.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::bigquery::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use crate::kafka::dead_letter::BadRecord;
use crate::registry::{RegistryError, SchemaRegistry};
use crate::transcode::change::{
    CHANGE_SEQUENCE_NUMBER, CHANGE_TYPE, ChangeFormat, ChangeShape, key_row_schema,
};
use crate::transcode::{AvroSchema, Plan, PlanOptions, split_confluent};

use crate::writer::partition_writer::{PlanLookup, PlanLookupError, PlanSource};

/// A writer schema's change shape and row plan.
pub struct ChangePlan {
    pub shape: ChangeShape,
    pub plan: Arc<Plan>,
}

/// Where the writer schemas come from.
pub enum ChangeSchemas {
    Registry(Arc<SchemaRegistry>),
    /// Raw Avro with one schema: its plan, compiled at start.
    Fixed(Arc<ChangePlan>),
}

/// A route's CDC settings, as the writer applies them.
#[derive(Debug, Clone)]
pub struct ChangeRules {
    pub format: ChangeFormat,
    /// A dotted path to the record's source position (the sequence number's second section).
    pub source_field: Option<String>,
    /// `upsert_delete`: deletes and tombstones remove rows; otherwise they are ignored.
    pub deletes: bool,
    /// The first section of every sequence number.
    pub epoch: u64,
}

/// How a CDC route turns records into changes.
pub struct ChangePlans {
    schemas: ChangeSchemas,
    /// The table with the pseudo-columns as two more STRING columns: the plans write them.
    table: TableSchema,
    options: PlanOptions,
    pub rules: ChangeRules,
    values: Mutex<HashMap<u32, Result<Arc<ChangePlan>, BadRecord>>>,
    keys: Mutex<HashMap<u32, Result<Arc<Plan>, BadRecord>>>,
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

/// The table with its REQUIRED columns NULLABLE: a DELETE row needs only the key columns.
fn relaxed(table: &TableSchema) -> TableSchema {
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

impl ChangePlans {
    pub fn new(
        schemas: Option<Arc<SchemaRegistry>>,
        fixed: Option<&AvroSchema>,
        table: &TableSchema,
        options: PlanOptions,
        rules: ChangeRules,
    ) -> Result<ChangePlans, String> {
        let table = with_pseudo_columns(table);
        let schemas = match (fixed, schemas) {
            (Some(schema), _) => ChangeSchemas::Fixed(Arc::new(
                compile(schema, &table, &options, &rules).map_err(|b| b.reason)?,
            )),
            (None, Some(registry)) => ChangeSchemas::Registry(registry),
            (None, None) => return Err("a cdc route needs an avro input".into()),
        };
        Ok(ChangePlans {
            schemas,
            table,
            options,
            rules,
            values: Mutex::new(HashMap::new()),
            keys: Mutex::new(HashMap::new()),
        })
    }

    /// The change plan of a value payload and where its Avro body starts.
    pub async fn value_plan(
        &self,
        payload: &[u8],
    ) -> Result<(Arc<ChangePlan>, usize), PlanLookupError> {
        let registry = match &self.schemas {
            ChangeSchemas::Fixed(plan) => return Ok((plan.clone(), 0)),
            ChangeSchemas::Registry(r) => r,
        };
        let (id, body) = split_confluent(payload)
            .map_err(|e| PlanLookupError::BadRecord(bad("bad_magic", e.to_string())))?;
        let at = payload.len() - body.len();
        if let Some(found) = self.values.lock().expect("plan cache").get(&id) {
            return found
                .clone()
                .map(|p| (p, at))
                .map_err(PlanLookupError::BadRecord);
        }
        let found = match registry.schema(id).await {
            Ok(s) => compile(&s.schema, &self.table, &self.options, &self.rules).map(Arc::new),
            Err(e) if e.is_retryable() => return Err(unavailable(&e)),
            Err(e) => Err(bad("unknown_schema", e.to_string())),
        };
        self.values
            .lock()
            .expect("plan cache")
            .insert(id, found.clone());
        found.map(|p| (p, at)).map_err(PlanLookupError::BadRecord)
    }

    /// The plan of a key payload (Avro through the registry) that writes a key-only row with
    /// the pseudo-columns, and where its Avro body starts.
    pub async fn key_plan(&self, key: &[u8]) -> Result<(Arc<Plan>, usize), PlanLookupError> {
        let ChangeSchemas::Registry(registry) = &self.schemas else {
            return Err(PlanLookupError::BadRecord(bad(
                "cdc_no_key",
                "a delete by kafka key needs the key's schema from the schema registry".into(),
            )));
        };
        let (id, body) = split_confluent(key).map_err(|e| {
            PlanLookupError::BadRecord(bad("cdc_no_key", format!("the kafka key: {e}")))
        })?;
        let at = key.len() - body.len();
        if let Some(found) = self.keys.lock().expect("plan cache").get(&id) {
            return found
                .clone()
                .map(|p| (p, at))
                .map_err(PlanLookupError::BadRecord);
        }
        let found = match registry.schema(id).await {
            Ok(s) => Plan::compile(
                &key_row_schema(&s.schema),
                &relaxed(&self.table),
                &self.options,
            )
            .map(Arc::new)
            .map_err(|e| {
                bad(
                    "cdc_no_key",
                    format!("key schema {id} does not fit the table: {e}"),
                )
            }),
            Err(e) if e.is_retryable() => return Err(unavailable(&e)),
            Err(e) => Err(bad("cdc_no_key", e.to_string())),
        };
        self.keys
            .lock()
            .expect("plan cache")
            .insert(id, found.clone());
        found.map(|p| (p, at)).map_err(PlanLookupError::BadRecord)
    }
}

fn compile(
    schema: &AvroSchema,
    table: &TableSchema,
    options: &PlanOptions,
    rules: &ChangeRules,
) -> Result<ChangePlan, BadRecord> {
    let (shape, row) = ChangeShape::new(schema, &rules.format, rules.source_field.as_deref())
        .map_err(|reason| bad("incompatible_schema", reason))?;
    let plan = Plan::compile(&row, table, options).map_err(|e| {
        bad(
            "incompatible_schema",
            format!("the change rows do not fit the table: {e}"),
        )
    })?;
    Ok(ChangePlan {
        shape,
        plan: Arc::new(plan),
    })
}

impl PlanSource for ChangePlans {
    /// A CDC route's writer asks [`ChangePlans::value_plan`]; this entry point is not used.
    fn plan_for<'a>(&'a self, payload: &'a [u8]) -> PlanLookup<'a> {
        Box::pin(async move {
            self.value_plan(payload)
                .await
                .map(|(p, at)| (p.plan.clone(), at))
        })
    }
}
