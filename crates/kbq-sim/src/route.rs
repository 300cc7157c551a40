//! The route a seed runs, built as the daemon builds it for its mode (docs/simulation.md): the
//! table in the simulated BigQuery, the config the processes read, and the plans their writers
//! use. Exactly once and at least once share the append-only table and the fixed Avro plan; CDC
//! declares the primary key on the table, reads the route's `cdc:` settings from the config and
//! compiles the change plans through the function route resolution calls
//! (`tables::cdc::plans`), after the same primary-key check (`tables::cdc::check_table`).

use std::sync::Arc;

use futures::FutureExt;

use super::{AVRO, CDC_AVRO, MAX_PAYLOAD, Mode, TABLE, TOPIC};
use kafka_bigquery_sink::bigquery::rest_client::{self, TableReference};
use kafka_bigquery_sink::config::Config;
use kafka_bigquery_sink::tables::cdc::{check_table, plans};
use kafka_bigquery_sink::tables::cdc_plans::{ChangeInput, ChangePlans};
use kafka_bigquery_sink::tables::plans::FixedPlan;
use kafka_bigquery_sink::writer::plan_source::PlanSource;
use kbq_core::table_schema::{FieldType, Mode as ColumnMode, TableFieldSchema, TableSchema};
use kbq_emulator::store::{Dataset, Store, Table, TableRef};
use kbq_transcode::{AvroSchema, Plan, PlanOptions};

/// What every process of a seed writes with.
pub(super) struct SimRoute {
    pub(super) config: Arc<Config>,
    pub(super) plans: Arc<dyn PlanSource>,
    pub(super) cdc: Option<Arc<ChangePlans>>,
    /// Proto field numbers of the `id` and `part` columns in the rows the plan encodes.
    pub(super) fields: (u64, u64),
}

/// Creates the seed's table in `store` and builds the route of `mode`.
pub(super) fn build(store: &Store, mode: Mode, seed: u64) -> SimRoute {
    let cdc = matches!(mode, Mode::Cdc { .. });
    let table_ref = TableRef::parse(TABLE).expect("table");
    store
        .insert_dataset(Dataset::new(&table_ref.project, &table_ref.dataset))
        .expect("dataset");
    let table = store.insert_table(table(table_ref, cdc)).expect("table");
    let config =
        Arc::new(Config::from_yaml(&yaml(mode, seed), Default::default()).expect("config"));
    if cdc {
        cdc_route(config, &table)
    } else {
        append_route(config, &table.schema)
    }
}

/// The seed's table: `id`, `part` and a bounded `payload`; under CDC a primary key `k` first.
fn table(table_ref: TableRef, cdc: bool) -> Table {
    let mut payload = TableFieldSchema::new("payload", FieldType::String, ColumnMode::Nullable);
    payload.max_length = Some(MAX_PAYLOAD.to_string());
    let mut fields = vec![
        TableFieldSchema::new("id", FieldType::Int64, ColumnMode::Required),
        TableFieldSchema::new("part", FieldType::Int64, ColumnMode::Required),
        payload,
    ];
    if cdc {
        fields.insert(
            0,
            TableFieldSchema::new("k", FieldType::Int64, ColumnMode::Required),
        );
    }
    let mut table = Table::new(table_ref, TableSchema { fields });
    if cdc {
        table.table_constraints = Some(serde_json::json!({"primaryKey": {"columns": ["k"]}}));
    }
    table
}

/// The append-only route: one fixed Avro plan.
fn append_route(config: Arc<Config>, schema: &TableSchema) -> SimRoute {
    let avro = AvroSchema::parse(AVRO).expect("avro");
    let plan = Arc::new(FixedPlan::new(&avro, schema, &PlanOptions::default()).expect("plan"));
    let fields = {
        let plan = plan.fixed_plan().expect("a fixed plan");
        (field_number(plan, "id"), field_number(plan, "part"))
    };
    SimRoute {
        config,
        plans: plan,
        cdc: None,
        fields,
    }
}

/// The CDC route: the table checked as route resolution checks it, and the change plans
/// compiled as it compiles them.
fn cdc_route(config: Arc<Config>, table: &Table) -> SimRoute {
    let route = config.route_for(TOPIC);
    let settings = route.cdc.expect("the route has cdc");
    // What route resolution reads of the table (tables.get), checked as it checks it.
    let read: rest_client::Table = serde_json::from_value(serde_json::json!({
        "tableReference": {"projectId": "p", "datasetId": "d", "tableId": "events"},
        "schema": table.schema,
        "tableConstraints": table.table_constraints,
    }))
    .expect("a table resource");
    check_table(
        &read,
        settings,
        &TableReference::new("p", "d", "events"),
        &route,
    )
    .expect("the table has the route's primary key");
    let envelope = AvroSchema::parse(CDC_AVRO).expect("avro");
    let change = Arc::new(
        plans(
            settings,
            ChangeInput::FixedAvro(&envelope),
            &read.schema,
            PlanOptions::default(),
        )
        .expect("change plans"),
    );
    let plan = (change.value_plan(&[]).now_or_never())
        .expect("a fixed plan is ready at once")
        .expect("the fixed plan")
        .0;
    let fields = (
        field_number(&plan.plan, "id"),
        field_number(&plan.plan, "part"),
    );
    SimRoute {
        config,
        plans: change.clone(),
        cdc: Some(change),
        fields,
    }
}

/// The processes' config: the append-only route, or the CDC route of the example
/// (docs/cdc.md) with the sequence's epoch taken from the seed.
fn yaml(mode: Mode, seed: u64) -> String {
    let mut yaml = "kafka:\n  bootstrap_servers: 127.0.0.1:9\n  group_id: sim\n  topics: [events]\n\
                    avro:\n  schema_file: s.avsc\nbigquery:\n  project: p\n  dataset: d\n  table: events\n\
                    dead_letter:\n  topic: events-dlq\n"
        .to_string();
    if mode.at_least_once() {
        yaml.push_str("delivery: at_least_once\n");
    }
    if let Mode::Cdc { deletes } = mode {
        let cdc_mode = if deletes { "upsert_delete" } else { "upsert" };
        yaml.push_str(&format!(
            "routes:\n  - topics: [events]\n    table: events\n    cdc:\n      mode: {cdc_mode}\n      \
             format: debezium\n      primary_key: [k]\n      sequence:\n        epoch: {}\n",
            seed % 3
        ));
    }
    yaml
}

fn field_number(plan: &Plan, name: &str) -> u64 {
    plan.descriptor()
        .field
        .iter()
        .find(|f| f.name() == name)
        .and_then(|f| f.number)
        .expect("the column is in the descriptor") as u64
}
