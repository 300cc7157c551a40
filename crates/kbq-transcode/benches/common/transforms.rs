//! The benchmarks' Avro order (`common/mod.rs`) through its plan without transforms (`plain`)
//! or with a rename (`user_agent` → `agent`), a drop (`channel`), a mask with a fixed value
//! (`coupon`) and a column set from a header (`trace`, read as `string`), `transforms`; or with
//! `customer_email` masked by its HMAC-SHA256 in hex, `hash`, which the issue measures on its
//! own; or with a filter on `status` that keeps every order, `filter`: the cost
//! docs/mapping.md ("Transforms") bounds, measured by `benches/transcode.rs` (group
//! `avro_transforms`) and, in instructions, by `examples/transforms_cost.rs` (BENCHMARKS.md,
//! "Transforms").

use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};
use kbq_transcode::transforms::Transform;
use kbq_transcode::{AvroSchema, KafkaHeader, KafkaMetadata, Plan, PlanOptions};

pub fn plan(mode: &str) -> Plan {
    let schema = AvroSchema::parse(crate::common::AVRO_SCHEMA).unwrap();
    let mut table = crate::common::table();
    let transforms: Vec<Transform> = match mode {
        "plain" => Vec::new(),
        "transforms" => {
            for c in &mut table.fields {
                if c.name == "user_agent" {
                    c.name = "agent".into();
                }
            }
            table.fields.push(TableFieldSchema::new(
                "trace",
                FieldType::String,
                Mode::Nullable,
            ));
            serde_json::from_str(
                r#"[{"rename": {"field": "user_agent", "to": "agent"}},
                    {"drop": {"field": "channel"}},
                    {"mask": {"field": "coupon", "value": "****"}},
                    {"set": {"column": "trace", "header": "trace", "encoding": "string"}}]"#,
            )
            .unwrap()
        }
        "hash" => {
            let mut t: Vec<Transform> = serde_json::from_str(
                r#"[{"mask": {"field": "customer_email", "hash": "hmac_sha256",
                              "key": {"env": "KEY"}, "encoding": "hex"}}]"#,
            )
            .unwrap();
            if let Transform::Mask(m) = &mut t[0] {
                m.key
                    .as_mut()
                    .unwrap()
                    .set(b"a 32-byte key for the benchmark!".to_vec());
            }
            t
        }
        // A filter on a field's value that keeps every order: `status` (the fifth field, a
        // string) read and compared before the row is written.
        "filter" => serde_json::from_str(
            r#"[{"filter": {"field": "status", "in": ["CANCELLED", "DELETED"]}}]"#,
        )
        .unwrap(),
        other => panic!("unknown mode {other}: plain, transforms, hash or filter"),
    };
    let options = PlanOptions {
        transforms,
        ..PlanOptions::default()
    };
    Plan::compile(&schema, &table, &options).unwrap()
}

/// Each record's three headers, one of them the `trace` the header column reads.
pub const HEADERS: [KafkaHeader<'static>; 3] = [
    KafkaHeader {
        key: b"source",
        value: Some(b"web"),
    },
    KafkaHeader {
        key: b"trace",
        value: Some(b"3f2a9c1e-7b4d-4e8a-9f60-2c5d8e1a7b34"),
    },
    KafkaHeader {
        key: b"schema",
        value: Some(b"v7"),
    },
];

pub fn meta() -> KafkaMetadata<'static> {
    KafkaMetadata {
        topic: "orders",
        headers: &HEADERS,
        ..KafkaMetadata::default()
    }
}
