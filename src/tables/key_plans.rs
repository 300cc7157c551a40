//! Plans of Kafka keys, for the columns `set … from: key, field:` fills (docs/mapping.md,
//! "Transforms"): the key read as its transform's `key_format` declares, never guessed.
//! Confluent-framed keys are read by their own schema id (Avro, Protobuf or JSON Schema, as the
//! id is registered, whatever the value's format), each id's plan compiled once and cached for
//! the life of the process (ids are immutable); schemaless JSON keys share one plan, compiled
//! at start. Plans compile against the table as the route found it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::plans::{WriterSchema, writer_schema};
use crate::registry::{AnySchema, SchemaRegistry};
use crate::writer::plan_source::{KeyLookup, KeySource, PlanLookupError};
use kbq_core::bad_record::BadRecord;
use kbq_core::table_schema::TableSchema;
use kbq_transcode::protobuf::{MessageIndexEncoding, MessagePath, split_message_indexes};
use kbq_transcode::transforms::{KeyFormat, KeyPlan, KeySchema, Transform};
use kbq_transcode::{PlanOptions, split_confluent};

type Found = Result<Arc<KeyPlan>, BadRecord>;

/// The key plans of one route.
pub enum KeyPlans {
    /// Schemaless JSON keys: one plan.
    Fixed(Arc<KeyPlan>),
    Registry(Box<RegistryKeys>),
}

pub struct RegistryKeys {
    registry: Arc<SchemaRegistry>,
    message_indexes: MessageIndexEncoding,
    table: TableSchema,
    options: PlanOptions,
    /// Whether a schema id is Protobuf (its keys carry a message-index array).
    protobuf_ids: Mutex<HashMap<u32, bool>>,
    plans: Mutex<HashMap<(u32, MessagePath), Found>>,
}

/// The format the transforms declare for the key, when one of them reads its fields.
pub fn key_format(transforms: &[Transform]) -> Option<KeyFormat> {
    transforms.iter().find_map(|t| match t {
        Transform::Set(s) if s.key_field().is_some() => s.key_format,
        _ => None,
    })
}

fn bad(class: &'static str, reason: String) -> BadRecord {
    BadRecord {
        class,
        reason: format!("the kafka key: {reason}"),
    }
}

fn compile(key: KeySchema<'_>, table: &TableSchema, options: &PlanOptions) -> Found {
    KeyPlan::compile(key, table, options)
        .map(Arc::new)
        .map_err(|e| bad(e.class(), e.to_string()))
}

impl KeyPlans {
    /// Schemaless JSON keys; `Err`: the columns refuse any JSON key (the route does not start).
    pub fn json(table: &TableSchema, options: &PlanOptions) -> Result<KeyPlans, String> {
        compile(KeySchema::Json(None), table, options)
            .map(KeyPlans::Fixed)
            .map_err(|b| b.reason)
    }

    pub fn registry(
        registry: Arc<SchemaRegistry>,
        message_indexes: MessageIndexEncoding,
        table: &TableSchema,
        options: PlanOptions,
    ) -> KeyPlans {
        KeyPlans::Registry(Box::new(RegistryKeys {
            registry,
            message_indexes,
            table: table.clone(),
            options,
            protobuf_ids: Mutex::new(HashMap::new()),
            plans: Mutex::new(HashMap::new()),
        }))
    }
}

impl RegistryKeys {
    async fn plan(&self, key: &[u8]) -> Result<(Arc<KeyPlan>, usize), PlanLookupError> {
        let record = |b: BadRecord| PlanLookupError::BadRecord(b);
        let (id, body) =
            split_confluent(key).map_err(|e| record(bad("bad_magic", e.to_string())))?;
        let known = lock(&self.protobuf_ids).get(&id).copied();
        let mut schema = None;
        let protobuf = match known {
            Some(protobuf) => protobuf,
            None => {
                let fetched = self.fetch(id).await?;
                let protobuf = matches!(fetched, Ok(AnySchema::Protobuf(_)));
                schema = Some(fetched);
                protobuf
            }
        };
        let (path, at) = if protobuf {
            let (path, message) = split_message_indexes(body, self.message_indexes)
                .map_err(|e| record(bad(e.class(), format!("schema id {id}: {e}"))))?;
            (path, key.len() - message.len())
        } else {
            (MessagePath::FIRST, key.len() - body.len())
        };
        if let Some(found) = lock(&self.plans).get(&(id, path)) {
            return found.clone().map(|p| (p, at)).map_err(record);
        }
        let schema = match schema {
            Some(s) => s,
            None => self.fetch(id).await?,
        };
        lock(&self.protobuf_ids).insert(id, protobuf);
        let found = schema
            .map_err(|b| bad(b.class, b.reason))
            .and_then(|s| writer_schema(&s, id, &path))
            .and_then(|w| {
                let key = match &w {
                    WriterSchema::Avro(s) => KeySchema::Avro(s),
                    WriterSchema::Protobuf(m) => KeySchema::Protobuf(m),
                    WriterSchema::Json(s) => KeySchema::Json(Some(s)),
                };
                compile(key, &self.table, &self.options)
            });
        lock(&self.plans).insert((id, path), found.clone());
        found.map(|p| (p, at)).map_err(record)
    }

    /// The registered schema of `id`; `Err` inside: final for the id (an unknown schema).
    async fn fetch(&self, id: u32) -> Result<Result<AnySchema, BadRecord>, PlanLookupError> {
        match self.registry.any_schema(id, None).await {
            Ok(s) => Ok(Ok(s)),
            Err(e) if e.is_retryable() => Err(PlanLookupError::Unavailable(e.to_string())),
            Err(e) => Ok(Err(BadRecord {
                class: "unknown_schema",
                reason: e.to_string(),
            })),
        }
    }
}

impl KeySource for KeyPlans {
    fn key_plan<'a>(&'a self, key: &'a [u8]) -> KeyLookup<'a> {
        Box::pin(async move {
            match self {
                KeyPlans::Fixed(plan) => Ok((plan.clone(), 0)),
                KeyPlans::Registry(r) => r.plan(key).await,
            }
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
