//! The plan source of Confluent Protobuf records: the schema id in the header and the
//! message-index array after it name the writer message; its plan is compiled once per
//! (schema id, message path) against the table and cached for the life of the process (schema
//! ids are immutable). The table is read once, when the route is resolved: Protobuf routes do
//! not evolve the table (`docs/mapping.md`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;

use crate::bigquery::table_schema::TableSchema;
use crate::kafka::dead_letter::BadRecord;
use crate::ops::metrics::{Metrics, ResultLabel};
use crate::registry::SchemaRegistry;
use crate::transcode::protobuf::{MessageIndexEncoding, MessagePath, split_message_indexes};
use crate::transcode::{Plan, PlanOptions, split_confluent};

use super::partition_writer::{PlanLookup, PlanLookupError, PlanSource};
use super::plans::fetched_schema;

type Key = (u32, MessagePath);

pub struct ProtobufPlans {
    registry: Arc<SchemaRegistry>,
    table: TableSchema,
    options: PlanOptions,
    indexes: MessageIndexEncoding,
    metrics: Arc<Metrics>,
    /// The `hit` result's counter, taken once: a lookup per record would hash its label.
    hits: Counter,
    cache: Mutex<HashMap<Key, Result<Arc<Plan>, BadRecord>>>,
}

impl ProtobufPlans {
    pub fn new(
        registry: Arc<SchemaRegistry>,
        table: TableSchema,
        options: PlanOptions,
        indexes: MessageIndexEncoding,
        metrics: Arc<Metrics>,
    ) -> Self {
        let hits = metrics
            .schema_registry_requests
            .get_or_create(&ResultLabel { result: "hit" })
            .clone();
        ProtobufPlans {
            registry,
            table,
            options,
            indexes,
            metrics,
            hits,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn count(&self, result: &'static str) {
        self.metrics
            .schema_registry_requests
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// The schema id, message path and where the message starts in the payload.
    fn split(&self, payload: &[u8]) -> Result<(Key, usize), BadRecord> {
        let (id, body) = split_confluent(payload).map_err(|e| BadRecord {
            class: e.class(),
            reason: e.to_string(),
        })?;
        let (path, message) = split_message_indexes(body, self.indexes).map_err(|e| BadRecord {
            class: e.class(),
            reason: format!("schema id {id}: {e}"),
        })?;
        Ok(((id, path), payload.len() - message.len()))
    }

    fn cached(&self, key: &Key) -> Option<Result<Arc<Plan>, BadRecord>> {
        self.cache.lock().expect("plan cache").get(key).cloned()
    }

    /// The plan of `key`, from the registry. `Err` means "unavailable, try again".
    async fn compile(&self, (id, path): Key) -> Result<Result<Arc<Plan>, BadRecord>, String> {
        let registered =
            match fetched_schema(self.registry.protobuf_schema(id).await, |r| self.count(r))? {
                Ok(found) => found,
                Err(bad) => return Ok(Err(bad)),
            };
        let Some(message) = registered.schema.message(&path) else {
            return Ok(Err(BadRecord {
                class: "unknown_schema",
                reason: format!(
                    "message index path {path} names no message of schema id {id} (top-level messages: {:?})",
                    registered.schema.message_names()
                ),
            }));
        };
        Ok(Plan::compile_protobuf(&message, &self.table, &self.options)
            .map(Arc::new)
            .map_err(|e| BadRecord {
                class: "incompatible_schema",
                reason: format!(
                    "message {} of schema id {id} does not fit the table: {e}",
                    message.full_name()
                ),
            }))
    }
}

impl PlanSource for ProtobufPlans {
    fn cached_plan(&self, payload: &[u8]) -> Option<Result<(Arc<Plan>, usize), BadRecord>> {
        let (key, body_at) = match self.split(payload) {
            Ok(split) => split,
            Err(bad) => return Some(Err(bad)),
        };
        let plan = self.cached(&key)?;
        self.hits.inc();
        Some(plan.map(|p| (p, body_at)))
    }

    fn plan_for<'a>(&'a self, payload: &'a [u8]) -> PlanLookup<'a> {
        Box::pin(async move {
            let (key, body_at) = self.split(payload).map_err(PlanLookupError::BadRecord)?;
            if let Some(plan) = self.cached(&key) {
                self.hits.inc();
                return plan
                    .map(|p| (p, body_at))
                    .map_err(PlanLookupError::BadRecord);
            }
            let plan = self
                .compile(key)
                .await
                .map_err(PlanLookupError::Unavailable)?;
            self.cache
                .lock()
                .expect("plan cache")
                .insert(key, plan.clone());
            plan.map(|p| (p, body_at))
                .map_err(PlanLookupError::BadRecord)
        })
    }
}
