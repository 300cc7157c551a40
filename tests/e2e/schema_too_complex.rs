//! A registered schema whose named types expand exponentially (3 KB of Avro that would build a
//! plan of 4^16 nodes) reaches the daemon as the schema of one record: the plan compiler refuses
//! it within its budget, the record goes to the dead-letter topic as `schema_too_complex`, and
//! the replica stays up and writes the good records around it exactly once. Before the budget
//! the compilation took every byte of memory and the replica with it.

use crate::support;

use std::time::Duration;

use kbq_core::table_schema::TableSchema;
use support::kafka::unique_name;
use support::registry::Registry;
use support::sink::{Daemon, Fixture, SCHEMA, SinkOptions, Tweaks, confluent, encode};

const REGISTERED: u32 = 1;
const BOMB: u32 = 13;

/// 16 record types, each with 4 fields of the next one; the row's `bomb` field has the first.
fn bomb() -> String {
    let mut ty =
        r#"{"type":"record","name":"T16","fields":[{"name":"leaf","type":"string"}]}"#.to_string();
    for level in (1..16).rev() {
        let next = format!("T{}", level + 1);
        ty = format!(
            r#"{{"type":"record","name":"T{level}","fields":[{{"name":"a","type":{ty}}},{{"name":"b","type":"{next}"}},{{"name":"c","type":"{next}"}},{{"name":"d","type":"{next}"}}]}}"#
        );
    }
    format!(
        r#"{{"type":"record","name":"Order","fields":[{{"name":"id","type":"long"}},{{"name":"bomb","type":{ty}}}]}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_schema_past_the_plan_budget_dead_letters_its_record_and_the_replica_goes_on() {
    let (registry, _reg) = Registry::serve(
        [(REGISTERED, SCHEMA.to_string()), (BOMB, bomb())].into(),
        None,
    )
    .await;
    let f = Fixture::with(SinkOptions {
        framing: Some(REGISTERED),
        ..SinkOptions::partitions(2)
    })
    .await;
    let table_schema: TableSchema = serde_json::from_value(serde_json::json!({"fields": [
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "customer", "type": "STRING", "mode": "REQUIRED"},
        {"name": "amount", "type": "NUMERIC", "mode": "REQUIRED", "precision": "12", "scale": "2"},
        {"name": "created", "type": "TIMESTAMP", "mode": "REQUIRED"},
        {"name": "note", "type": "STRING"},
        {"name": "kafka_topic", "type": "STRING"},
        {"name": "kafka_partition", "type": "INTEGER"},
        {"name": "kafka_offset", "type": "INTEGER"}
    ]}))
    .expect("table schema");
    f.create_table(table_schema);
    let config = f.config_with(
        &unique_name("budget"),
        &Tweaks {
            registry_url: Some(format!("http://{registry}")),
            ..Tweaks::default()
        },
    );

    f.produce(100);
    // The body is never read: the plan is refused first.
    let bad = f
        .source
        .produce_raw(1, &[confluent(BOMB, &encode(&f.schema, 1_000_000))]);
    f.produce(100);

    let mut d = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));
    let dead = f.dead_letters(1);
    assert_eq!(dead.len(), 1, "{dead:?}");
    let (partition, offset, class, reason) = &dead[0];
    assert_eq!((*partition, *offset), (1, bad[0]), "{dead:?}");
    assert_eq!(class, "schema_too_complex");
    assert!(
        reason.contains(&format!("writer schema {BOMB}")) && reason.contains("plan nodes"),
        "the reason names the schema and the budget: {reason}"
    );
    assert!(d.errors().is_empty(), "{:?}", d.errors());
    assert!(d.terminate().success());
}
