//! `set … from: key, field:` (docs/mapping.md, "Transforms"): columns filled from fields of the
//! Kafka key, decoded by the key's own schema. Each value format's plan with each key format's
//! plan gives one row; a key without the field, of a type its column cannot hold, that does not
//! decode, or absent, is refused or its record's error, naming the column.

use std::sync::Arc;

use kbq_core::table_schema::TableSchema;
use kbq_transcode::json::JsonSchema;
use kbq_transcode::protobuf::ProtoSchema;
use kbq_transcode::transforms::{self, KeyPlan, KeySchema, Transform};
use kbq_transcode::{
    AvroSchema, KafkaMetadata, Plan, PlanError, PlanOptions, RecordError, UnknownFields, file_for,
};
use prost_reflect::{DescriptorPool, DynamicMessage, Value as PValue};
use prost_types::FileDescriptorSet;
use serde_json::{Value as Json, json};

use crate::support::differential::Both;
use crate::support::proto_json::message_json;

const VALUE_AVRO: &str = r#"{"type":"record","name":"Order","fields":[
  {"name":"amount","type":"long"}]}"#;
const VALUE_PROTO: &str = r#"
syntax = "proto3";
package v;
message Order { int64 amount = 1; }
"#;
const VALUE_JSON: &str = r#"{"amount":12}"#;

const KEY_AVRO: &str = r#"{"type":"record","name":"Key","fields":[
  {"name":"id","type":"long"},{"name":"region","type":"string"},{"name":"other","type":"string"}]}"#;
const KEY_PROTO: &str = r#"
syntax = "proto3";
package k;
message Key { int64 id = 1; string region = 2; string other = 3; }
"#;
const KEY_JSON: &str = r#"{"id":9,"region":"eu","other":"x"}"#;

fn table() -> TableSchema {
    serde_json::from_value(json!({"fields": [
        {"name": "amount", "type": "INT64"},
        {"name": "customer_id", "type": "INT64", "mode": "REQUIRED"},
        {"name": "region", "type": "STRING"}]}))
    .unwrap()
}

fn list(v: Json) -> Vec<Transform> {
    serde_json::from_value(v).unwrap()
}

fn both_fields() -> Vec<Transform> {
    list(json!([
        {"set": {"column": "customer_id", "from": "key", "field": "id", "key_format": "schema_registry"}},
        {"set": {"column": "region", "from": "key", "field": "region", "key_format": "schema_registry"}}
    ]))
}

fn options(t: Vec<Transform>) -> PlanOptions {
    PlanOptions {
        unknown_fields: UnknownFields::Error,
        transforms: t,
        ..PlanOptions::default()
    }
}

fn key_json_schema() -> Arc<JsonSchema> {
    let s = json!({"type": "object", "properties": {
        "id": {"type": "integer"}, "region": {"type": "string"}, "other": {"type": "string"}}});
    Arc::new(JsonSchema::parse(&s.to_string(), &[]).unwrap())
}

/// Each value format's plan and its body of `{amount: 12}`.
fn values(t: &[Transform]) -> Vec<(&'static str, Plan, Vec<u8>)> {
    let o = options(t.to_vec());
    let avro = AvroSchema::parse(VALUE_AVRO).unwrap();
    let proto = ProtoSchema::compile(VALUE_PROTO, &[]).unwrap();
    let message = proto.pool().get_message_by_name("v.Order").unwrap();
    let mut m = DynamicMessage::new(message.clone());
    m.set_field_by_name("amount", PValue::I64(12));
    let schema = Arc::new(
        JsonSchema::parse(
            &json!({"type": "object", "properties": {"amount": {"type": "integer"}}}).to_string(),
            &[],
        )
        .unwrap(),
    );
    vec![
        (
            "avro",
            Plan::compile(&avro, &table(), &o).unwrap(),
            vec![24], // zigzag 12
        ),
        (
            "protobuf",
            Plan::compile_protobuf(&message, &table(), &o).unwrap(),
            prost::Message::encode_to_vec(&m),
        ),
        (
            "json schema",
            Plan::compile_json(Some(&schema), false, &table(), &o).unwrap(),
            VALUE_JSON.into(),
        ),
        (
            "schemaless json",
            Plan::compile_json(None, false, &table(), &o).unwrap(),
            VALUE_JSON.into(),
        ),
    ]
}

fn avro_key_body(schema: &str, fields: Vec<(&str, apache_avro::types::Value)>) -> Vec<u8> {
    let schema = apache_avro::Schema::parse_str(schema).unwrap();
    let value = apache_avro::types::Value::Record(
        fields.into_iter().map(|(n, v)| (n.to_owned(), v)).collect(),
    );
    apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
        .build()
        .unwrap()
        .write_value_to_vec(value)
        .unwrap()
}

/// Each key format's plan and its body of `{id: 9, region: "eu", other: "x"}`.
fn keys(t: &[Transform]) -> Vec<(&'static str, Result<KeyPlan, PlanError>, Vec<u8>)> {
    use apache_avro::types::Value as A;
    let o = options(t.to_vec());
    let avro = AvroSchema::parse(KEY_AVRO).unwrap();
    let proto = ProtoSchema::compile(KEY_PROTO, &[]).unwrap();
    let message = proto.pool().get_message_by_name("k.Key").unwrap();
    let mut m = DynamicMessage::new(message.clone());
    m.set_field_by_name("id", PValue::I64(9));
    m.set_field_by_name("region", PValue::String("eu".into()));
    m.set_field_by_name("other", PValue::String("x".into()));
    let json = key_json_schema();
    vec![
        (
            "avro",
            KeyPlan::compile(KeySchema::Avro(&avro), &table(), &o),
            avro_key_body(
                KEY_AVRO,
                vec![
                    ("id", A::Long(9)),
                    ("region", A::String("eu".into())),
                    ("other", A::String("x".into())),
                ],
            ),
        ),
        (
            "protobuf",
            KeyPlan::compile(KeySchema::Protobuf(&message), &table(), &o),
            prost::Message::encode_to_vec(&m),
        ),
        (
            "json schema",
            KeyPlan::compile(KeySchema::Json(Some(&json)), &table(), &o),
            KEY_JSON.into(),
        ),
        (
            "schemaless json",
            KeyPlan::compile(KeySchema::Json(None), &table(), &o),
            KEY_JSON.into(),
        ),
    ]
}

/// The row of `body` with its key columns from `key`.
fn run(plan: &Plan, body: &[u8], key: Option<(&KeyPlan, &[u8])>) -> Result<Json, RecordError> {
    let meta = KafkaMetadata::default();
    let mut out = vec![0xAA]; // a row before it in the batch stays as it is
    let range = plan.transcode_both(body, Some(&meta), &mut out)?;
    let before = out.clone();
    if let Err(e) = plan.transcode_key(key, &mut out) {
        assert_eq!(out, before, "a refused key leaves the buffer as it was");
        return Err(e);
    }
    let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(plan.descriptor())],
    })
    .unwrap();
    let row = DynamicMessage::decode(
        pool.get_message_by_name("Row").unwrap(),
        &out[range.start..],
    )
    .unwrap();
    Ok(message_json(&row))
}

#[test]
fn every_value_format_takes_columns_from_every_key_formats_fields() {
    transforms::check(&both_fields()).unwrap();
    for (value_format, plan, body) in values(&both_fields()) {
        assert!(plan.reads_key(), "{value_format}");
        for (key_format, key, key_body) in keys(&both_fields()) {
            let key = key.unwrap_or_else(|e| panic!("{key_format}: {e}"));
            assert_eq!(
                run(&plan, &body, Some((&key, &key_body))).unwrap(),
                json!({"amount": 12, "customer_id": 9, "region": "eu"}),
                "{value_format} value, {key_format} key"
            );
        }
    }
}

#[test]
fn a_record_without_a_key_leaves_nullable_columns_null_and_fails_a_required_one() {
    let region = list(json!([
        {"set": {"column": "region", "from": "key", "field": "region", "key_format": "json"}}
    ]));
    let mut t = table();
    t.fields.retain(|c| c.name != "customer_id");
    let plan = Plan::compile_json(None, false, &t, &options(region)).unwrap();
    assert_eq!(
        run(&plan, VALUE_JSON.as_bytes(), None).unwrap(),
        json!({"amount": 12})
    );
    for (format, plan, body) in values(&both_fields()) {
        let e = run(&plan, &body, None).unwrap_err();
        assert_eq!(e.class(), "incompatible_schema", "{format}");
        assert_eq!(
            e.to_string(),
            "column customer_id is REQUIRED but the value is null"
        );
    }
}

#[test]
fn a_key_that_does_not_decode_is_its_records_error_naming_the_columns() {
    let (_, plan, body) = values(&both_fields()).remove(0);
    let mut cases = keys(&both_fields());
    let (_, avro, good) = cases.remove(0);
    let e = run(&plan, &body, Some((&avro.unwrap(), &good[..2]))).unwrap_err();
    assert_eq!(e.class(), "malformed_avro");
    assert_eq!(
        e.to_string(),
        "column customer_id, region from the kafka key: length 2 at byte 1 exceeds the 0 bytes left"
    );
    let (_, json, _) = cases.pop().unwrap();
    let e = run(&plan, &body, Some((&json.unwrap(), b"[1]"))).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("column customer_id, region from the kafka key: "),
        "{e}"
    );
    let e = run(
        &plan,
        &body,
        Some((
            &keys(&both_fields()).pop().unwrap().1.unwrap(),
            br#"{"id":"nine"}"#,
        )),
    )
    .unwrap_err();
    // As a value's text in an INT64 column of schemaless JSON.
    assert_eq!(e.class(), "out_of_range", "{e}");
    assert_eq!(
        e.to_string(),
        "column customer_id, region from the kafka key: column customer_id: \"nine\" is not an INT64"
    );
}

#[test]
fn a_key_schema_without_the_field_or_of_another_type_refuses_its_plan_naming_the_column() {
    let avro = |schema: &str| {
        KeyPlan::compile(
            KeySchema::Avro(&AvroSchema::parse(schema).unwrap()),
            &table(),
            &options(both_fields()),
        )
    };
    // No `id` for the REQUIRED customer_id.
    let e = avro(r#"{"type":"record","name":"Key","fields":[{"name":"region","type":"string"}]}"#)
        .map(|_| ())
        .unwrap_err();
    assert!(e.to_string().contains("customer_id"), "{e}");
    // A text `id` cannot fill an INT64 column, as a value's text field cannot.
    let e = avro(r#"{"type":"record","name":"Key","fields":[{"name":"id","type":"string"}]}"#)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "column customer_id: avro string cannot be written to a INTEGER column"
    );
    // No `region` for the NULLABLE region: NULL.
    let only_id =
        avro(r#"{"type":"record","name":"Key","fields":[{"name":"id","type":"long"}]}"#).unwrap();
    let (_, plan, body) = values(&both_fields()).remove(0);
    assert_eq!(
        run(&plan, &body, Some((&only_id, &[18]))).unwrap(),
        json!({"amount": 12, "customer_id": 9})
    );
    // The value plan: a column the table lacks, or a REPEATED one.
    let missing = list(json!([
        {"set": {"column": "nope", "from": "key", "field": "id", "key_format": "json"}}
    ]));
    let e = Plan::compile_json(None, false, &table(), &options(missing))
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "transform set nope from the key's field id: the table has no such column"
    );
}

#[test]
fn a_value_field_cannot_fill_a_column_the_key_fills() {
    let t = list(json!([
        {"set": {"column": "amount", "from": "key", "field": "id", "key_format": "json"}}
    ]));
    let e = Plan::compile(
        &AvroSchema::parse(VALUE_AVRO).unwrap(),
        &table(),
        &options(t),
    )
    .map(|_| ())
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "transform set amount from the key's field id: field amount fills column amount as well: drop or rename the field"
    );
}

#[test]
fn a_column_from_a_key_field_is_checked_without_a_schema() {
    let refused = |v: Json| {
        let e = transforms::check(&list(v)).unwrap_err();
        (e.index, e.key, e.message)
    };
    assert_eq!(
        refused(json!([{"set": {"column": "c", "from": "key", "field": "id"}}])),
        (
            0,
            "key_format",
            "the key's bytes have no format of their own: say how to read them (schema_registry: confluent-framed avro, protobuf or json schema; json: schemaless json)".into()
        )
    );
    assert_eq!(
        refused(json!([{"set": {"column": "c", "from": "topic", "field": "id"}}])).1,
        "field"
    );
    assert_eq!(
        refused(
            json!([{"set": {"column": "c", "from": "key", "field": "a.b", "key_format": "json"}}])
        )
        .1,
        "field"
    );
    assert_eq!(
        refused(json!([{"set": {"column": "c", "from": "key", "key_format": "json"}}])).1,
        "key_format"
    );
    assert_eq!(
        refused(json!([
            {"set": {"column": "c", "from": "key", "field": "a", "key_format": "json"}},
            {"set": {"column": "d", "from": "key", "field": "b", "key_format": "schema_registry"}}
        ])),
        (
            1,
            "key_format",
            "transforms[0] reads the key as json: one key has one format".into()
        )
    );
    // The key's bytes and its fields are columns apart.
    let t = list(json!([
        {"set": {"column": "raw_key", "from": "key"}},
        {"set": {"column": "c", "from": "key", "field": "a", "key_format": "json"}}
    ]));
    transforms::check(&t).unwrap();
    let m = transforms::metadata_with(&Default::default(), &t).unwrap();
    assert_eq!(m.key.as_deref(), Some("raw_key"));
}
