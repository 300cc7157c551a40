//! Compiled plans by writer schema id, for one table schema. Plans are compiled once per
//! (writer schema, table schema) pair: a new table schema (after `updated_schema` or a
//! `tables.patch`) clears the cache.

use std::collections::HashMap;
use std::sync::Arc;

use super::{AvroSchema, Plan, PlanError, PlanOptions};
use crate::bigquery::table_schema::TableSchema;

pub struct PlanCache {
    table: TableSchema,
    options: PlanOptions,
    plans: HashMap<u32, Arc<Plan>>,
}

impl PlanCache {
    pub fn new(table: TableSchema, options: PlanOptions) -> Self {
        PlanCache {
            table,
            options,
            plans: HashMap::new(),
        }
    }

    pub fn table(&self) -> &TableSchema {
        &self.table
    }

    /// The plan for a writer schema, compiled on first use. A schema that cannot be mapped is
    /// not cached: the error is the caller's to classify, and compiling it again is cheap.
    pub fn plan(&mut self, schema_id: u32, writer: &AvroSchema) -> Result<Arc<Plan>, PlanError> {
        if let Some(p) = self.plans.get(&schema_id) {
            return Ok(p.clone());
        }
        let plan = Arc::new(Plan::compile(writer, &self.table, &self.options)?);
        self.plans.insert(schema_id, plan.clone());
        Ok(plan)
    }

    /// Switches to a new table schema; every plan is compiled again on next use.
    pub fn set_table(&mut self, table: TableSchema) {
        if table != self.table {
            self.table = table;
            self.plans.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bigquery::table_schema::{FieldType, Mode, TableFieldSchema};

    #[test]
    fn plans_are_reused_per_schema_id_until_the_table_changes() {
        let writer = AvroSchema::parse(
            r#"{"type":"record","name":"r","fields":[{"name":"a","type":"long"}]}"#,
        )
        .unwrap();
        let table = TableSchema {
            fields: vec![TableFieldSchema::new("a", FieldType::Int64, Mode::Nullable)],
        };
        let mut cache = PlanCache::new(table.clone(), PlanOptions::default());
        let p1 = cache.plan(1, &writer).unwrap();
        assert!(Arc::ptr_eq(&p1, &cache.plan(1, &writer).unwrap()));
        cache.set_table(table.clone());
        assert!(Arc::ptr_eq(&p1, &cache.plan(1, &writer).unwrap()));
        let mut wider = table;
        wider.fields.push(TableFieldSchema::new(
            "b",
            FieldType::String,
            Mode::Nullable,
        ));
        cache.set_table(wider);
        assert!(!Arc::ptr_eq(&p1, &cache.plan(1, &writer).unwrap()));
    }
}
