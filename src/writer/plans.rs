//! Plan sources: where a writer gets the compiled transcoding plan for a record. Plans are
//! compiled once per writer schema against the table schema and shared by all partitions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::bigquery::table_schema::TableSchema;
use crate::kafka::dead_letter::BadRecord;
use crate::ops::metrics::{Metrics, ResultLabel};
use crate::registry::{RegistryError, SchemaRegistry};
use crate::transcode::{AvroSchema, Plan, PlanOptions, RecordError, split_confluent};

use super::partition_writer::{PlanLookup, PlanLookupError, PlanSource};

/// Confluent-framed records: the writer schema comes from the Schema Registry by id.
pub struct RegistryPlans {
    registry: SchemaRegistry,
    table: TableSchema,
    options: PlanOptions,
    metrics: Arc<Metrics>,
    /// Schema ids are immutable, so a compiled plan (or the reason a schema cannot be used)
    /// is cached for the life of the process.
    cache: Mutex<HashMap<u32, Result<Arc<Plan>, BadRecord>>>,
}

impl RegistryPlans {
    pub fn new(
        registry: SchemaRegistry,
        table: TableSchema,
        options: PlanOptions,
        metrics: Arc<Metrics>,
    ) -> Self {
        RegistryPlans {
            registry,
            table,
            options,
            metrics,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn count(&self, result: &'static str) {
        self.metrics
            .schema_registry_requests
            .get_or_create(&ResultLabel { result })
            .inc();
    }
}

impl PlanSource for RegistryPlans {
    fn plan_for<'a>(&'a self, payload: &'a [u8]) -> PlanLookup<'a> {
        Box::pin(async move {
            let (id, body) = split_confluent(payload).map_err(|e| bad_framing(&e))?;
            let body_at = payload.len() - body.len();
            if let Some(cached) = self.cache.lock().expect("plan cache").get(&id) {
                self.count("hit");
                return cached
                    .clone()
                    .map(|plan| (plan, body_at))
                    .map_err(PlanLookupError::BadRecord);
            }
            let compiled = match self.registry.schema(id).await {
                Ok(registered) => {
                    self.count("fetched");
                    Plan::compile(&registered.schema, &self.table, &self.options)
                        .map(Arc::new)
                        .map_err(|e| BadRecord {
                            class: "incompatible_schema",
                            reason: format!("writer schema {id} does not fit the table: {e}"),
                        })
                }
                Err(e) if e.is_retryable() => {
                    self.count("error");
                    return Err(PlanLookupError::Unavailable(e.to_string()));
                }
                Err(e @ RegistryError::NotFound { .. }) => {
                    self.count("not_found");
                    Err(BadRecord {
                        class: "unknown_schema",
                        reason: e.to_string(),
                    })
                }
                Err(e) => {
                    self.count("error");
                    Err(BadRecord {
                        class: "unknown_schema",
                        reason: e.to_string(),
                    })
                }
            };
            self.cache
                .lock()
                .expect("plan cache")
                .insert(id, compiled.clone());
            compiled
                .map(|plan| (plan, body_at))
                .map_err(PlanLookupError::BadRecord)
        })
    }
}

/// Raw Avro binary written with one fixed schema (an `.avsc` named in the config).
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
}

impl PlanSource for FixedPlan {
    fn plan_for<'a>(&'a self, _payload: &'a [u8]) -> PlanLookup<'a> {
        let plan = self.plan.clone();
        Box::pin(async move { Ok((plan, 0)) })
    }
}

fn bad_framing(e: &RecordError) -> PlanLookupError {
    PlanLookupError::BadRecord(BadRecord {
        class: "bad_magic",
        reason: e.to_string(),
    })
}
