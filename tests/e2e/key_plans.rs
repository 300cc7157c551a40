//! The plans of Kafka keys through the registry (`src/tables/key_plans.rs`), for columns set from
//! a field of the key (docs/mapping.md, "Transforms"), against the tests' registry: each key read
//! by its own schema id whatever its type, its plan cached per id; an unknown id, a key without
//! the Confluent framing, and a key schema without the field of a REQUIRED column are bad
//! records naming why.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use kafka_bigquery_sink::registry::{RegistryConfig, SchemaRegistry};
use kafka_bigquery_sink::tables::key_plans::KeyPlans;
use kafka_bigquery_sink::writer::plan_source::{KeySource, PlanLookupError};
use kbq_core::table_schema::TableSchema;
use kbq_transcode::protobuf::MessageIndexEncoding;
use kbq_transcode::{Plan, PlanOptions, frame_confluent};
use serde_json::json;
use support::registry::Registry;

const AVRO_KEY: &str = r#"{"type":"record","name":"Key","fields":[{"name":"id","type":"long"}]}"#;
const NO_ID: &str =
    r#"{"type":"record","name":"Key","fields":[{"name":"region","type":"string"}]}"#;

fn table() -> TableSchema {
    serde_json::from_value(json!({"fields": [
        {"name": "amount", "type": "INT64"},
        {"name": "customer_id", "type": "INT64", "mode": "REQUIRED"}]}))
    .unwrap()
}

fn options() -> PlanOptions {
    PlanOptions {
        transforms: serde_json::from_value(json!([
            {"set": {"column": "customer_id", "from": "key", "field": "id", "key_format": "schema_registry"}}
        ]))
        .unwrap(),
        ..PlanOptions::default()
    }
}

#[tokio::test]
async fn keys_are_read_by_their_own_schema_id_and_bad_ones_are_bad_records() {
    let reg = Registry::new(
        json!({"ids": {
            "1": {"schema": AVRO_KEY},
            "2": {"schema": "syntax = \"proto3\"; package k; message Key { int64 id = 1; }", "schemaType": "PROTOBUF"},
            "3": {"schema": json!({"type": "object", "properties": {"id": {"type": "integer"}}}).to_string(), "schemaType": "JSON"},
            "4": {"schema": NO_ID}
        }}),
        None,
    );
    let url = format!("http://{}", reg.listen().await);
    let client = SchemaRegistry::new(RegistryConfig {
        url,
        request_timeout: Duration::from_secs(2),
        not_found_grace: Duration::ZERO,
        ..Default::default()
    })
    .unwrap();
    let keys = KeyPlans::registry(
        Arc::new(client),
        MessageIndexEncoding::Zigzag,
        &table(),
        options(),
    );
    let value = Plan::compile_json(None, false, &table(), &options()).unwrap();
    // id 9 in each format: Avro's zig-zag long, Protobuf's field 1 after a message-index 0,
    // JSON text.
    for (key, body_at) in [
        (frame_confluent(1, &[18]), 5),
        (frame_confluent(2, &[0, 0x08, 9]), 6),
        (frame_confluent(3, br#"{"id":9}"#), 5),
    ] {
        let (plan, at) = keys.key_plan(&key).await.unwrap();
        assert_eq!(at, body_at);
        let mut out = Vec::new();
        value.transcode(br#"{"amount":1}"#, None, &mut out).unwrap();
        value
            .transcode_key(Some((&plan, &key[at..])), &mut out)
            .unwrap();
        // amount = 1 (field 1), customer_id = 9 (field 2).
        assert_eq!(out, [0x08, 1, 0x10, 9]);
        // The second time from the cache: no request.
        let before = reg.id_requests(1) + reg.id_requests(2) + reg.id_requests(3);
        keys.key_plan(&key).await.unwrap();
        assert_eq!(
            reg.id_requests(1) + reg.id_requests(2) + reg.id_requests(3),
            before
        );
    }
    let bad = |e: Result<_, PlanLookupError>| match e {
        Err(PlanLookupError::BadRecord(b)) => (b.class, b.reason),
        Err(PlanLookupError::Unavailable(why)) => panic!("unavailable: {why}"),
        Ok(_) => panic!("a plan"),
    };
    let (class, reason) = bad(keys.key_plan(&frame_confluent(9, &[18])).await);
    assert_eq!(class, "unknown_schema", "{reason}");
    let (class, reason) = bad(keys.key_plan(b"9").await);
    assert_eq!(class, "bad_magic", "{reason}");
    assert!(reason.starts_with("the kafka key: "), "{reason}");
    let (class, reason) = bad(keys.key_plan(&frame_confluent(4, &[4, b'e', b'u'])).await);
    assert_eq!(class, "incompatible_schema");
    assert!(reason.contains("customer_id"), "{reason}");
}
