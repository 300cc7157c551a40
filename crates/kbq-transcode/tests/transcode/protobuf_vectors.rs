//! Test vectors from Confluent's own Protobuf serializer: `tests/python/protobuf_vectors.py`
//! builds messages with Google's protobuf runtime (descriptors compiled by protoc), frames them
//! with confluent-kafka's `ProtobufSerializer` against its in-memory registry, and computes the
//! expected BigQuery values in Python. Every vector must transcode to exactly those values, with
//! the schema taken both as the serializer registered it (a base64 descriptor plus references)
//! and as the `.proto` text it was written in.
//!
//! The interpreter is `KBQ_PYTHON`, else the repository's `.venv/bin/python` (made by
//! `scripts/venv.sh` from `tests/python/requirements.txt`).

use std::collections::BTreeMap;
use std::process::Command;

use kbq_core::table_schema::TableSchema;
use kbq_transcode::protobuf::{MessageIndexEncoding, ProtoSchema, split_message_indexes};
use kbq_transcode::{Plan, PlanOptions, RecordError, file_for, split_confluent};
use prost_reflect::{DescriptorPool, DynamicMessage};
use prost_types::FileDescriptorSet;
use serde_json::{Value as Json, json};

use crate::support::differential::Both;
use crate::support::proto_json::{hex, message_json};
use crate::support::python::{python, repository};

/// The references of a registered schema, resolved recursively through the subjects, as
/// `(import name, text)`.
fn references(registry: &Json, entry: &Json, out: &mut BTreeMap<String, String>) {
    for r in entry["references"].as_array().unwrap() {
        let version = r["version"].to_string();
        let referenced = &registry["subjects"][r["subject"].as_str().unwrap()][&version];
        assert!(referenced.is_object(), "reference {r} is not registered");
        out.insert(
            r["name"].as_str().unwrap().to_owned(),
            referenced["schema"].as_str().unwrap().to_owned(),
        );
        references(registry, referenced, out);
    }
}

fn vectors() -> Option<Vec<Json>> {
    let python = python()?;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vectors.jsonl");
    let script = repository().join("tests/python/protobuf_vectors.py");
    let status = Command::new(python)
        .arg(&script)
        .arg(&file)
        .status()
        .expect("python runs");
    assert!(status.success(), "protobuf_vectors.py failed");
    let text = std::fs::read_to_string(&file).unwrap();
    Some(
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
    )
}

fn transcode(schema: &ProtoSchema, v: &Json) -> Result<Json, RecordError> {
    let name = v["name"].as_str().unwrap();
    let payload = hex(v["payload_hex"].as_str().unwrap());
    let (_, body) = split_confluent(&payload).unwrap();
    let (path, message) = split_message_indexes(body, MessageIndexEncoding::Zigzag).unwrap();
    let descriptor = schema.message(&path).unwrap();
    assert_eq!(
        descriptor.full_name(),
        v["message"],
        "{name}: message path {path}"
    );
    let table: TableSchema = serde_json::from_value(json!({"fields": v["table"].clone()})).unwrap();
    let plan = Plan::compile_protobuf(&descriptor, &table, &PlanOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut out = Vec::new();
    let range = plan.transcode_both(message, None, &mut out)?;
    let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(plan.descriptor())],
    })
    .unwrap();
    let row =
        DynamicMessage::decode(pool.get_message_by_name("Row").unwrap(), &out[range]).unwrap();
    Ok(message_json(&row))
}

#[test]
fn confluent_serializer_vectors_transcode_to_the_values_python_expects() {
    let Some(lines) = vectors() else {
        return;
    };
    let header = &lines[0];
    let registry = &header["registry"];
    let sources: Vec<(String, String)> = header["protos"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect();
    let from_text = ProtoSchema::compile(
        &sources
            .iter()
            .find(|(n, _)| n == "shop/order.proto")
            .unwrap()
            .1,
        &sources,
    )
    .unwrap();
    let mut checked = 0;
    for v in &lines[1..] {
        let name = v["name"].as_str().unwrap();
        let payload = hex(v["payload_hex"].as_str().unwrap());
        let (id, _) = split_confluent(&payload).unwrap();
        let entry = &registry["ids"][id.to_string()];
        assert_eq!(entry["schemaType"], "PROTOBUF");
        let mut refs = BTreeMap::new();
        references(registry, entry, &mut refs);
        let refs: Vec<(String, String)> = refs.into_iter().collect();
        let registered = ProtoSchema::compile(entry["schema"].as_str().unwrap(), &refs)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for schema in [&registered, &from_text] {
            let result = transcode(schema, v);
            if v["error"] == json!(true) {
                assert!(
                    matches!(result, Err(RecordError::Value { .. })),
                    "{name}: expected a per-record value error, got {result:?}"
                );
            } else {
                let row = result.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(row, v["expected"], "{name}");
            }
        }
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} vectors");
}

/// The well-known files the sink bundles (Confluent never registers them) declare the same
/// messages and fields as the descriptors Confluent's and Google's Python packages ship.
#[test]
fn bundled_well_known_files_match_the_published_descriptors() {
    let Some(lines) = vectors() else {
        return;
    };
    let known = lines[0]["known"].as_object().unwrap();
    let imports: String = known
        .keys()
        .map(|name| format!("import \"{name}\";\n"))
        .collect();
    let schema = ProtoSchema::compile(
        &format!("syntax = \"proto3\";\n{imports}message Uses {{ int32 x = 1; }}"),
        &[],
    )
    .unwrap();
    let pool = schema.pool();
    let mut compared = 0;
    for (file, messages) in known {
        let fd = pool
            .get_file_by_name(file)
            .unwrap_or_else(|| panic!("{file} is not bundled"));
        for (message, fields) in messages.as_object().unwrap() {
            let full = format!("{}.{message}", fd.package_name());
            let m = pool
                .get_message_by_name(&full)
                .unwrap_or_else(|| panic!("{full} is missing"));
            let ours: Vec<Json> = m
                .descriptor_proto()
                .field
                .iter()
                .map(|f| json!([f.name(), f.number(), f.r#type, f.label]))
                .collect();
            assert_eq!(&Json::Array(ours), fields, "{full}");
            compared += 1;
        }
    }
    assert!(compared >= 8, "only {compared} messages compared");
}
