//! Test vectors from an independent Avro implementation: `tests/python/avro_vectors.py` encodes
//! records with fastavro and computes the expected BigQuery values in Python; every vector must
//! transcode to exactly those values.
//!
//! The interpreter is `KBQ_PYTHON`, else the repository's `.venv/bin/python` (made by
//! `scripts/venv.sh` from `tests/python/requirements.txt`).

use crate::support::differential::Both;
use std::process::Command;

use kbq_core::table_schema::TableSchema;
use kbq_transcode::{AvroSchema, Plan, PlanOptions, RecordError, file_for};
use prost_reflect::{DescriptorPool, DynamicMessage};
use prost_types::FileDescriptorSet;
use serde_json::{Value as Json, json};

use crate::support::proto_json::{hex, message_json};
use crate::support::python::{python, repository};

#[test]
fn fastavro_vectors_transcode_to_the_values_python_expects() {
    let Some(python) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vectors.jsonl");
    let script = repository().join("tests/python/avro_vectors.py");
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
        let result = plan.transcode_both(&avro, None, &mut out);
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
