//! Test vectors from an independent Avro implementation: `tests/python/avro_vectors.py` encodes
//! records with fastavro and computes the expected BigQuery values in Python; every vector must
//! transcode to exactly those values.
//!
//! The interpreter is `KBQ_PYTHON`, else the repository's `.venv/bin/python` (made by
//! `scripts/venv.sh` from `tests/python/requirements.txt`).

use std::path::PathBuf;
use std::process::Command;

use kafka_bigquery_sink::bigquery::table_schema::TableSchema;
use kafka_bigquery_sink::transcode::{AvroSchema, Plan, PlanOptions, RecordError, file_for};
use prost_reflect::{DescriptorPool, DynamicMessage, ReflectMessage, Value as PValue};
use prost_types::FileDescriptorSet;
use serde_json::{Map, Value as Json, json};

#[path = "support/python.rs"]
mod oracle;
use oracle::python;

fn to_json(v: &PValue) -> Json {
    match v {
        PValue::Bool(b) => json!(b),
        PValue::I32(i) => json!(i),
        PValue::I64(i) => json!(i),
        PValue::U32(i) => json!(i),
        PValue::U64(i) => json!(i),
        PValue::F32(f) => json!(f),
        PValue::F64(f) => json!(f),
        PValue::String(s) => json!(s),
        PValue::Bytes(b) => {
            json!({"hex": b.iter().map(|x| format!("{x:02x}")).collect::<String>()})
        }
        PValue::List(l) => Json::Array(l.iter().map(to_json).collect()),
        PValue::Message(m) => message_json(m),
        other => panic!("unexpected proto value {other:?}"),
    }
}

fn message_json(m: &DynamicMessage) -> Json {
    let mut obj = Map::new();
    for fd in m.descriptor().fields() {
        if m.has_field(&fd) {
            obj.insert(fd.name().to_owned(), to_json(&m.get_field(&fd)));
        }
    }
    Json::Object(obj)
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn fastavro_vectors_transcode_to_the_values_python_expects() {
    let Some(python) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vectors.jsonl");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/avro_vectors.py");
    let status = Command::new(python)
        .arg(&script)
        .arg(&file)
        .status()
        .expect("python runs");
    assert!(status.success(), "avro_vectors.py failed");
    let text = std::fs::read_to_string(&file).unwrap();
    let mut checked = 0;
    for line in text.lines() {
        let v: Json = serde_json::from_str(line).unwrap();
        let name = v["name"].as_str().unwrap();
        let schema = AvroSchema::parse(&v["schema"].to_string()).unwrap();
        let table: TableSchema =
            serde_json::from_value(json!({"fields": v["table"].clone()})).unwrap();
        let plan = Plan::compile(&schema, &table, &PlanOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let avro = hex(v["avro_hex"].as_str().unwrap());
        let mut out = Vec::new();
        let result = plan.transcode(&avro, None, &mut out);
        if v["error"] == json!(true) {
            assert!(
                matches!(result, Err(RecordError::Value { .. })),
                "{name}: expected a per-record error, got {result:?}"
            );
        } else {
            let range = result.unwrap_or_else(|e| panic!("{name}: {e}"));
            let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
                file: vec![file_for(plan.descriptor())],
            })
            .unwrap();
            let row = DynamicMessage::decode(pool.get_message_by_name("Row").unwrap(), &out[range])
                .unwrap();
            assert_eq!(message_json(&row), v["expected"], "{name}");
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} vectors");
}
