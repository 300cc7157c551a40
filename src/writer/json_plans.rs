//! The plan source of Confluent JSON Schema records: the schema id in the header names the
//! registered JSON Schema; its plan is compiled once per id against the table and cached for the
//! life of the process (schema ids are immutable). Like Protobuf routes, JSON routes write into
//! tables that exist (`docs/mapping.md`). Schemaless JSON has one plan (`FixedPlan`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;

use crate::bigquery::table_schema::TableSchema;
use crate::kafka::dead_letter::BadRecord;
use crate::ops::metrics::{Metrics, ResultLabel};
use crate::registry::SchemaRegistry;
use crate::transcode::{Plan, PlanOptions, split_confluent};

use super::partition_writer::{PlanLookup, PlanLookupError, PlanSource};
use super::plans::fetched_schema;

/// Where the JSON text starts: after the magic byte and the 4-byte id.
const BODY_AT: usize = 5;

pub struct JsonSchemaPlans {
    registry: Arc<SchemaRegistry>,
    table: TableSchema,
    options: PlanOptions,
    validate: bool,
    metrics: Arc<Metrics>,
    /// The `hit` result's counter, taken once: a lookup per record would hash its label.
    hits: Counter,
    cache: Mutex<HashMap<u32, Result<Arc<Plan>, BadRecord>>>,
}

impl JsonSchemaPlans {
    pub fn new(
        registry: Arc<SchemaRegistry>,
        table: TableSchema,
        options: PlanOptions,
        validate: bool,
        metrics: Arc<Metrics>,
    ) -> Self {
        let hits = metrics
            .schema_registry_requests
            .get_or_create(&ResultLabel { result: "hit" })
            .clone();
        JsonSchemaPlans {
            registry,
            table,
            options,
            validate,
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

    fn id(payload: &[u8]) -> Result<u32, BadRecord> {
        split_confluent(payload)
            .map(|(id, _)| id)
            .map_err(|e| BadRecord {
                class: e.class(),
                reason: e.to_string(),
            })
    }

    fn cached(&self, id: u32) -> Option<Result<Arc<Plan>, BadRecord>> {
        self.cache.lock().expect("plan cache").get(&id).cloned()
    }

    /// The plan of `id`, from the registry. `Err` means "unavailable, try again".
    async fn compile(&self, id: u32) -> Result<Result<Arc<Plan>, BadRecord>, String> {
        let schema = match fetched_schema(self.registry.json_schema(id).await, |r| self.count(r))? {
            Ok(found) => found,
            Err(bad) => return Ok(Err(bad)),
        };
        Ok(
            Plan::compile_json(Some(&schema), self.validate, &self.table, &self.options)
                .map(Arc::new)
                .map_err(|e| BadRecord {
                    class: "incompatible_schema",
                    reason: format!("json schema id {id} does not fit the table: {e}"),
                }),
        )
    }
}

impl PlanSource for JsonSchemaPlans {
    fn cached_plan(&self, payload: &[u8]) -> Option<Result<(Arc<Plan>, usize), BadRecord>> {
        let id = match Self::id(payload) {
            Ok(id) => id,
            Err(bad) => return Some(Err(bad)),
        };
        let plan = self.cached(id)?;
        self.hits.inc();
        Some(plan.map(|p| (p, BODY_AT)))
    }

    fn plan_for<'a>(&'a self, payload: &'a [u8]) -> PlanLookup<'a> {
        Box::pin(async move {
            let id = Self::id(payload).map_err(PlanLookupError::BadRecord)?;
            if let Some(plan) = self.cached(id) {
                self.hits.inc();
                return plan
                    .map(|p| (p, BODY_AT))
                    .map_err(PlanLookupError::BadRecord);
            }
            let plan = self
                .compile(id)
                .await
                .map_err(PlanLookupError::Unavailable)?;
            self.cache
                .lock()
                .expect("plan cache")
                .insert(id, plan.clone());
            plan.map(|p| (p, BODY_AT))
                .map_err(PlanLookupError::BadRecord)
        })
    }
}
