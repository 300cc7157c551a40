//! The per-record cost of transforms compiled into the plan (docs/mapping.md, "Transforms"),
//! counted in instructions rather than seconds: the benchmarks' Avro order
//! (`benches/common/mod.rs`) through its plan without transforms (`plain`) or with a rename
//! (`user_agent` → `agent`), a drop (`channel`), a mask with a fixed value (`coupon`) and a
//! column set from a header (`trace`, read as `string`), `transforms`. Each run transcodes `N`
//! records, each with the same Kafka metadata (three headers), and exits:
//!
//! ```text
//! cargo build --release -p kbq-transcode --example transforms_cost
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/transforms_cost plain 20000
//! ```
//!
//! Two record counts per mode give the instructions per record without the set-up (BENCHMARKS.md,
//! "Transforms").
use std::hint::black_box;

#[path = "../benches/common/mod.rs"]
mod common;

use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};
use kbq_transcode::transforms::Transform;
use kbq_transcode::{AvroSchema, KafkaHeader, KafkaMetadata, Plan, PlanOptions};

fn plan(mode: &str) -> Plan {
    let schema = AvroSchema::parse(common::AVRO_SCHEMA).unwrap();
    let mut table = common::table();
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
        other => panic!("unknown mode {other}: plain or transforms"),
    };
    let options = PlanOptions {
        transforms,
        ..PlanOptions::default()
    };
    Plan::compile(&schema, &table, &options).unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("plain");
    let n: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(20_000);
    let plan = plan(mode);
    let inputs = common::avro_orders(&apache_avro::Schema::parse_str(common::AVRO_SCHEMA).unwrap());
    let headers = [
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
    let meta = KafkaMetadata {
        topic: "orders",
        headers: &headers,
        ..KafkaMetadata::default()
    };
    let mut out = Vec::with_capacity(1 << 20);
    for (k, input) in inputs.iter().cycle().take(n).enumerate() {
        if k.is_multiple_of(512) {
            out.clear();
        }
        black_box(
            plan.transcode(black_box(input), Some(&meta), &mut out)
                .unwrap(),
        );
    }
    println!("{mode}: {n} records");
}
