//! Change events in Protobuf and JSON (docs/cdc.md): where the row is, what the record does, and
//! the rows the CDC plans write, read back by the emulator's own row codec (the side BigQuery
//! plays). The records are encoded by `prost-reflect` (Protobuf) and written as JSON text, not by
//! the code under test.

use std::sync::Arc;

use kbq_core::table_schema::TableSchema;
use kbq_emulator::rows::RowCodec;
use kbq_transcode::change::{
    ChangeColumns, ChangeFormat, ChangeKind, ConnectEnvelope, JsonShape, Located, NotAChange,
    ProtoShape, renumber, sequence_number, with_change_fields,
};
use kbq_transcode::json::{JsonSchema, table_schema_from_json};
use kbq_transcode::protobuf::{MessagePath, ProtoSchema, table_schema_from_protobuf};
use kbq_transcode::{DeriveOptions, Plan, PlanOptions};
use prost_reflect::{DynamicMessage, MessageDescriptor, Value as PValue};

const PROTO: &str = r#"syntax = "proto3";
package db.inv.customers;
import "google/protobuf/wrappers.proto";
message Envelope {
  Value before = 1;
  Value after = 2;
  Source source = 3;
  string op = 4;
  optional int64 ts_ms = 5;
}
message Value {
  int64 id = 1;
  string name = 2;
  optional string email = 3;
}
message Source {
  string connector = 1;
  optional int64 lsn = 2;
}
message Key {
  int64 id = 1;
}
message Unwrapped {
  int64 id = 1;
  string name = 2;
  string __op = 3;
  string __deleted = 4;
}
message Wrapped {
  int64 id = 1;
  string name = 2;
  google.protobuf.StringValue __op = 3;
  google.protobuf.BoolValue __deleted = 4;
}
message Plain {
  int64 id = 1;
  string name = 2;
  Kind kind = 3;
  enum Kind {
    INSERT = 0;
    UPDATE = 1;
    DELETE = 2;
    MERGE = 3;
  }
}
"#;

fn table() -> TableSchema {
    serde_json::from_str(
        r#"{"fields":[
        {"name":"id","type":"INTEGER","mode":"REQUIRED"},
        {"name":"name","type":"STRING","mode":"REQUIRED"},
        {"name":"email","type":"STRING"}]}"#,
    )
    .unwrap()
}

fn relaxed() -> TableSchema {
    serde_json::from_str(
        r#"{"fields":[{"name":"id","type":"INTEGER"},{"name":"name","type":"STRING"},{"name":"email","type":"STRING"}]}"#,
    )
    .unwrap()
}

fn message(index: u32) -> MessageDescriptor {
    let schema = ProtoSchema::compile(PROTO, &[]).expect("the schema compiles");
    schema
        .message(&MessagePath::new(&[index]).unwrap())
        .expect("a message")
}

fn value(id: i64, name: &str) -> DynamicMessage {
    let mut m = DynamicMessage::new(message(1));
    m.set_field_by_name("id", PValue::I64(id));
    m.set_field_by_name("name", PValue::String(name.into()));
    m
}

fn proto_envelope(
    op: &str,
    before: Option<DynamicMessage>,
    after: Option<DynamicMessage>,
    lsn: Option<i64>,
) -> Vec<u8> {
    let mut m = DynamicMessage::new(message(0));
    if let Some(b) = before {
        m.set_field_by_name("before", PValue::Message(b));
    }
    if let Some(a) = after {
        m.set_field_by_name("after", PValue::Message(a));
    }
    let mut source = DynamicMessage::new(message(2));
    source.set_field_by_name("connector", PValue::String("postgresql".into()));
    if let Some(l) = lsn {
        source.set_field_by_name("lsn", PValue::I64(l));
    }
    m.set_field_by_name("source", PValue::Message(source));
    m.set_field_by_name("op", PValue::String(op.into()));
    m.set_field_by_name("ts_ms", PValue::I64(1));
    prost::Message::encode_to_vec(&m)
}

/// The emulator's view of a written row: its rendered cells and its pseudo-column values.
fn as_bigquery_reads(plan: &Plan, row: &[u8]) -> (serde_json::Value, String, String) {
    let codec = RowCodec::compile(plan.descriptor(), &table()).expect("bigquery takes the schema");
    assert!(codec.pseudo_columns().any());
    let values = codec.pseudo_values(row);
    let text = |b: Option<&[u8]>| String::from_utf8(b.unwrap_or_default().to_vec()).unwrap();
    (
        codec.render(row, &table()),
        text(values.change_type),
        text(values.sequence),
    )
}

/// What the writer does with a located change: the row transcoded, then the pseudo-columns.
fn write(
    located: &Located,
    plan: &Plan,
    columns: ChangeColumns,
    body: &[u8],
    offset: i64,
) -> Vec<u8> {
    let sequence = sequence_number(3, located.source.unwrap_or(0), offset);
    let row = &body[located.row.clone().expect("a row")];
    let mut out = Vec::new();
    columns
        .transcode(plan, row, located.kind, &sequence, &mut out)
        .expect("transcodes");
    out
}

fn proto_plan(format: ChangeFormat, source: Option<&str>) -> (ProtoShape, Plan, ChangeColumns) {
    let (shape, row) = ProtoShape::new(&message(0), &format, source).expect("an envelope");
    assert_eq!(row.full_name(), "db.inv.customers.Value");
    let plan = Plan::compile_protobuf(&row, &table(), &PlanOptions::default()).unwrap();
    let (plan, columns) = with_change_fields(plan);
    (shape, plan, columns)
}

#[test]
fn protobuf_debezium_upserts_after_and_deletes_before() {
    let (shape, plan, columns) = proto_plan(ChangeFormat::Debezium, None);
    for op in ["c", "u", "r"] {
        let body = proto_envelope(op, Some(value(1, "old")), Some(value(1, "new")), None);
        let located = shape.locate(&body).unwrap();
        assert_eq!(located.kind, ChangeKind::Upsert);
        let written = write(&located, &plan, columns, &body, 0x2a);
        let (cells, change, sequence) = as_bigquery_reads(&plan, &written);
        assert_eq!(cells["f"][0]["v"], "1", "{op}");
        assert_eq!(cells["f"][1]["v"], "new", "{op}: the after row");
        assert!(cells["f"][2]["v"].is_null());
        assert_eq!((change.as_str(), sequence.as_str()), ("UPSERT", "3/0/2A"));
    }
    let body = proto_envelope("d", Some(value(7, "gone")), None, None);
    let located = shape.locate(&body).unwrap();
    assert_eq!(located.kind, ChangeKind::Delete);
    let (cells, change, _) = as_bigquery_reads(&plan, &write(&located, &plan, columns, &body, 9));
    assert_eq!(
        (cells["f"][0]["v"].as_str(), change.as_str()),
        (Some("7"), "DELETE")
    );
    // A delete without a before row leaves the key to the Kafka key.
    let keyless = shape
        .locate(&proto_envelope("d", None, None, None))
        .unwrap();
    assert_eq!((keyless.row, keyless.kind), (None, ChangeKind::Delete));
}

#[test]
fn protobuf_truncates_unknown_ops_and_missing_rows_are_bad_records() {
    let (shape, _, _) = proto_plan(ChangeFormat::Debezium, None);
    for op in ["t", "m", "x", ""] {
        let e = shape
            .locate(&proto_envelope(op, None, None, None))
            .unwrap_err();
        assert_eq!(e.class(), "cdc_operation", "{op:?}");
        assert!(e.to_string().contains(&format!("{op:?}")), "{e}");
    }
    let e = shape
        .locate(&proto_envelope("c", None, None, None))
        .unwrap_err();
    assert!(matches!(e, NotAChange::NoRow { side: "after", .. }), "{e}");
    let e = shape.locate(&[0x0a, 0x05, 0x01]).unwrap_err();
    assert_eq!(e.class(), "malformed_protobuf", "{e}");
}

#[test]
fn protobuf_source_position_orders_changes_ahead_of_the_offset() {
    let (shape, plan, columns) = proto_plan(ChangeFormat::Debezium, Some("source.lsn"));
    let body = proto_envelope("u", None, Some(value(1, "x")), Some(0x1234));
    let located = shape.locate(&body).unwrap();
    let (_, _, sequence) = as_bigquery_reads(&plan, &write(&located, &plan, columns, &body, 5));
    assert_eq!(sequence, "3/1234/5");
    let e = shape
        .locate(&proto_envelope("u", None, Some(value(1, "x")), None))
        .unwrap_err();
    assert_eq!(e.class(), "cdc_no_sequence_source", "an unset optional lsn");
    let e = ProtoShape::new(
        &message(0),
        &ChangeFormat::Debezium,
        Some("source.connector"),
    )
    .unwrap_err();
    assert!(e.contains("not an integer"), "{e}");
}

#[test]
fn protobuf_unwrapped_and_plain_records_are_the_row() {
    let (shape, row) = ProtoShape::new(&message(4), &ChangeFormat::Unwrapped, None).unwrap();
    assert_eq!(row.full_name(), "db.inv.customers.Unwrapped");
    let encode = |op: &str, deleted: &str| {
        let mut m = DynamicMessage::new(message(4));
        m.set_field_by_name("id", PValue::I64(1));
        m.set_field_by_name("name", PValue::String("n".into()));
        m.set_field_by_name("__op", PValue::String(op.into()));
        m.set_field_by_name("__deleted", PValue::String(deleted.into()));
        prost::Message::encode_to_vec(&m)
    };
    let kind = |op, deleted| shape.locate(&encode(op, deleted)).map(|l| l.kind);
    assert_eq!(kind("c", "false"), Ok(ChangeKind::Upsert));
    assert_eq!(
        kind("", ""),
        Ok(ChangeKind::Upsert),
        "proto3 leaves both off"
    );
    assert_eq!(kind("u", "true"), Ok(ChangeKind::Delete));
    assert_eq!(kind("d", ""), Ok(ChangeKind::Delete));
    assert_eq!(kind("t", "").unwrap_err().class(), "cdc_operation");
    let body = encode("c", "false");
    assert_eq!(shape.locate(&body).unwrap().row, Some(0..body.len()));

    let format = ChangeFormat::Plain {
        field: "kind".into(),
    };
    let (shape, _) = ProtoShape::new(&message(6), &format, None).unwrap();
    let kind = |k: i32| {
        let mut m = DynamicMessage::new(message(6));
        m.set_field_by_name("id", PValue::I64(1));
        m.set_field_by_name("kind", PValue::EnumNumber(k));
        shape
            .locate(&prost::Message::encode_to_vec(&m))
            .map(|l| l.kind)
    };
    assert_eq!(kind(0), Ok(ChangeKind::Upsert), "INSERT is the default");
    assert_eq!(kind(1), Ok(ChangeKind::Upsert));
    assert_eq!(kind(2), Ok(ChangeKind::Delete));
    assert_eq!(kind(3).unwrap_err().class(), "cdc_change_type");
    let missing = ChangeFormat::Plain {
        field: "nope".into(),
    };
    assert!(ProtoShape::new(&message(6), &missing, None).is_err());
    assert!(
        ProtoShape::new(&message(1), &ChangeFormat::Debezium, None)
            .unwrap_err()
            .contains("not a debezium envelope")
    );
}

#[test]
fn protobuf_wrapped_op_and_deleted_are_read_inside_their_wrappers() {
    let (shape, _) = ProtoShape::new(&message(5), &ChangeFormat::Unwrapped, None).unwrap();
    let wrapper = |name: &str, value: PValue| {
        let descriptor = message(5).get_field_by_name(name).unwrap();
        let prost_reflect::Kind::Message(m) = descriptor.kind() else {
            panic!("a wrapper")
        };
        let mut w = DynamicMessage::new(m);
        w.set_field_by_name("value", value);
        PValue::Message(w)
    };
    let encode = |op: Option<&str>, deleted: Option<bool>| {
        let mut m = DynamicMessage::new(message(5));
        m.set_field_by_name("id", PValue::I64(1));
        if let Some(op) = op {
            m.set_field_by_name("__op", wrapper("__op", PValue::String(op.into())));
        }
        if let Some(d) = deleted {
            m.set_field_by_name("__deleted", wrapper("__deleted", PValue::Bool(d)));
        }
        prost::Message::encode_to_vec(&m)
    };
    let kind = |op, deleted| shape.locate(&encode(op, deleted)).map(|l| l.kind);
    assert_eq!(kind(Some("u"), Some(false)), Ok(ChangeKind::Upsert));
    assert_eq!(kind(None, None), Ok(ChangeKind::Upsert));
    assert_eq!(kind(Some("c"), Some(true)), Ok(ChangeKind::Delete));
    assert_eq!(kind(Some("d"), None), Ok(ChangeKind::Delete));
    assert_eq!(kind(Some("t"), None).unwrap_err().class(), "cdc_operation");
}

#[test]
fn a_protobuf_kafka_key_deletes_in_the_value_rows_descriptor() {
    let (_, value_plan, _) = proto_plan(ChangeFormat::Debezium, None);
    let key_plan =
        Plan::compile_protobuf(&message(3), &relaxed(), &PlanOptions::default()).unwrap();
    let (key_plan, key_columns) = with_change_fields(key_plan);
    let mut key = DynamicMessage::new(message(3));
    key.set_field_by_name("id", PValue::I64(42));
    let mut key_row = Vec::new();
    key_columns
        .transcode(
            &key_plan,
            &prost::Message::encode_to_vec(&key),
            ChangeKind::Delete,
            "0/0/7",
            &mut key_row,
        )
        .unwrap();
    let mut row = Vec::new();
    renumber(
        &key_row,
        key_plan.descriptor(),
        value_plan.descriptor(),
        &mut row,
    )
    .expect("every key column is in the value descriptor");
    let (cells, change, sequence) = as_bigquery_reads(&value_plan, &row);
    assert_eq!(cells["f"][0]["v"], "42");
    assert!(cells["f"][1]["v"].is_null());
    assert_eq!((change.as_str(), sequence.as_str()), ("DELETE", "0/0/7"));
}

#[test]
fn a_created_table_has_the_protobuf_rows_columns_and_the_key_gives_the_primary_key() {
    let (_, row) = ProtoShape::new(&message(0), &ChangeFormat::Debezium, None).unwrap();
    let columns = table_schema_from_protobuf(&row, &DeriveOptions::default()).unwrap();
    let names: Vec<&str> = columns.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["id", "name", "email"]);
}

const JSON_SCHEMA: &str = r##"{
  "type": "object", "title": "Envelope",
  "definitions": {
    "Value": {"type": "object", "properties": {
      "id": {"type": "integer"}, "name": {"type": "string"},
      "email": {"oneOf": [{"type": "null"}, {"type": "string"}]}},
      "required": ["id", "name"]}
  },
  "properties": {
    "before": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Value"}]},
    "after": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Value"}]},
    "source": {"type": "object", "properties": {"lsn": {"type": "integer"},
                                                "connector": {"type": "string"}}},
    "op": {"type": "string"},
    "ts_ms": {"type": "integer"}
  },
  "required": ["op"]
}"##;

fn json_plan(
    schema: Option<&Arc<JsonSchema>>,
    format: ChangeFormat,
    source: Option<&str>,
) -> (JsonShape, Plan, ChangeColumns) {
    let (shape, row) = JsonShape::new(schema, true, &format, source).expect("a shape");
    let plan = Plan::compile_json(row.as_ref(), false, &table(), &PlanOptions::default()).unwrap();
    let (plan, columns) = with_change_fields(plan);
    (shape, plan, columns)
}

fn json_envelope(op: &str, before: &str, after: &str, lsn: &str) -> Vec<u8> {
    format!(
        r#"{{"before": {before}, "after": {after}, "source": {{"connector": "pg", "lsn": {lsn}}}, "op": "{op}", "ts_ms": 1}}"#
    )
    .into_bytes()
}

#[test]
fn json_schema_debezium_upserts_after_deletes_before_and_refuses_bad_ops() {
    let schema = Arc::new(JsonSchema::parse(JSON_SCHEMA, &[]).unwrap());
    for registered in [Some(&schema), None] {
        let (shape, plan, columns) = json_plan(registered, ChangeFormat::Debezium, None);
        let old = r#"{"id": 1, "name": "old", "email": null}"#;
        let new = r#"{"name": "new", "id": 1, "email": "n@x"}"#;
        for op in ["c", "u", "r"] {
            let body = json_envelope(op, old, new, "5");
            let located = shape.locate(&body).unwrap();
            let (cells, change, sequence) =
                as_bigquery_reads(&plan, &write(&located, &plan, columns, &body, 0x10));
            assert_eq!(cells["f"][1]["v"], "new", "{op}: the after row");
            assert_eq!(cells["f"][2]["v"], "n@x");
            assert_eq!((change.as_str(), sequence.as_str()), ("UPSERT", "3/0/10"));
        }
        let body = json_envelope("d", r#"{"id": 7, "name": "gone"}"#, "null", "5");
        let located = shape.locate(&body).unwrap();
        assert_eq!(located.kind, ChangeKind::Delete);
        let (cells, change, _) =
            as_bigquery_reads(&plan, &write(&located, &plan, columns, &body, 1));
        assert_eq!(
            (cells["f"][0]["v"].as_str(), change.as_str()),
            (Some("7"), "DELETE")
        );
        let keyless = shape
            .locate(&json_envelope("d", "null", "null", "5"))
            .unwrap();
        assert_eq!((keyless.row, keyless.kind), (None, ChangeKind::Delete));
        for op in ["t", "m", "x"] {
            let e = shape
                .locate(&json_envelope(op, "null", "null", "5"))
                .unwrap_err();
            assert_eq!(e.class(), "cdc_operation", "{op}");
        }
        let e = shape
            .locate(&json_envelope("c", "null", "null", "5"))
            .unwrap_err();
        assert!(matches!(e, NotAChange::NoRow { .. }), "{e}");
        let e = shape.locate(b"{\"op\": \"c\", ").unwrap_err();
        assert_eq!(e.class(), "malformed_json", "{e}");
    }
    // Validated against the registered schema first, when the route asks for it.
    let (shape, _, _) = json_plan(Some(&schema), ChangeFormat::Debezium, None);
    let e = shape
        .locate(br#"{"before": null, "after": null, "op": 5}"#)
        .unwrap_err();
    assert_eq!(e.class(), "schema_violation", "{e}");
}

#[test]
fn json_source_position_and_the_row_schema_of_a_created_table() {
    let schema = Arc::new(JsonSchema::parse(JSON_SCHEMA, &[]).unwrap());
    let (shape, plan, columns) =
        json_plan(Some(&schema), ChangeFormat::Debezium, Some("source.lsn"));
    let body = json_envelope("u", "null", r#"{"id": 1, "name": "x"}"#, "4660");
    let located = shape.locate(&body).unwrap();
    let (_, _, sequence) = as_bigquery_reads(&plan, &write(&located, &plan, columns, &body, 5));
    assert_eq!(sequence, "3/1234/5");
    let no_lsn = json_envelope("u", "null", r#"{"id": 1, "name": "x"}"#, "null");
    assert_eq!(
        shape.locate(&no_lsn).unwrap_err().class(),
        "schema_violation"
    );
    let (lenient, _) = JsonShape::new(
        Some(&schema),
        false,
        &ChangeFormat::Debezium,
        Some("source.lsn"),
    )
    .unwrap();
    assert_eq!(
        lenient.locate(&no_lsn).unwrap_err().class(),
        "cdc_no_sequence_source"
    );
    let e = JsonShape::new(
        Some(&schema),
        false,
        &ChangeFormat::Debezium,
        Some("source.connector"),
    )
    .unwrap_err();
    assert!(e.contains("not an integer"), "{e}");
    // `create_table` derives the columns of `after`, through its $ref and null branch.
    let (_, row) = JsonShape::new(Some(&schema), false, &ChangeFormat::Debezium, None).unwrap();
    let derived = table_schema_from_json(&row.unwrap(), &DeriveOptions::default()).unwrap();
    let mut names: Vec<(&str, String)> = derived
        .fields
        .iter()
        .map(|f| (f.name.as_str(), format!("{:?}", f.mode())))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ("email", "Nullable".to_string()),
            ("id", "Required".into()),
            ("name", "Required".into())
        ]
    );
}

#[test]
fn json_unwrapped_and_plain_records_and_a_schemaless_key() {
    let (shape, plan, columns) = json_plan(None, ChangeFormat::Unwrapped, None);
    let kind = |text: &str| shape.locate(text.as_bytes()).map(|l| l.kind);
    assert_eq!(
        kind(r#"{"id":1,"name":"a","__deleted":"false"}"#),
        Ok(ChangeKind::Upsert)
    );
    assert_eq!(
        kind(r#"{"id":1,"name":"a","__deleted":true}"#),
        Ok(ChangeKind::Delete)
    );
    assert_eq!(kind(r#"{"id":1,"__op":"d"}"#), Ok(ChangeKind::Delete));
    assert_eq!(
        kind(r#"{"id":1,"__op":"t"}"#).unwrap_err().class(),
        "cdc_operation"
    );
    let body = br#"{"id":1,"name":"a","email":null,"__op":"c"}"#;
    let located = shape.locate(body).unwrap();
    assert_eq!(located.row, Some(0..body.len()));
    let (cells, change, _) = as_bigquery_reads(&plan, &write(&located, &plan, columns, body, 0));
    assert_eq!(
        (cells["f"][1]["v"].as_str(), change.as_str()),
        (Some("a"), "UPSERT")
    );

    let format = ChangeFormat::Plain {
        field: "kind".into(),
    };
    let (shape, _, _) = json_plan(None, format, None);
    let kind = |k: &str| {
        shape
            .locate(format!(r#"{{"id":1,"kind":"{k}"}}"#).as_bytes())
            .map(|l| l.kind)
    };
    assert_eq!(kind("Insert"), Ok(ChangeKind::Upsert));
    assert_eq!(kind("DELETE"), Ok(ChangeKind::Delete));
    assert_eq!(kind("merge").unwrap_err().class(), "cdc_change_type");

    // A schemaless JSON Kafka key deletes its row in the value rows' descriptor.
    let key_plan = Plan::compile_json(None, false, &relaxed(), &PlanOptions::default()).unwrap();
    let (key_plan, key_columns) = with_change_fields(key_plan);
    let mut key_row = Vec::new();
    key_columns
        .transcode(
            &key_plan,
            br#"{"id": 42}"#,
            ChangeKind::Delete,
            "0/0/9",
            &mut key_row,
        )
        .unwrap();
    let mut row = Vec::new();
    renumber(&key_row, key_plan.descriptor(), plan.descriptor(), &mut row).expect("fits");
    let (cells, change, sequence) = as_bigquery_reads(&plan, &row);
    assert_eq!(cells["f"][0]["v"], "42");
    assert_eq!((change.as_str(), sequence.as_str()), ("DELETE", "0/0/9"));
}

/// `{"schema": …, "payload": …}` around `payload`, as Kafka Connect's `JsonConverter` writes
/// with `schemas.enable=true` (the schema's content is not read).
fn connect(payload: &str) -> Vec<u8> {
    format!(r#"{{"schema": {{"type": "struct", "optional": false, "fields": []}}, "payload": {payload}}}"#)
        .into_bytes()
}

#[test]
fn schemaless_json_in_kafka_connects_envelope_is_read_from_its_payload() {
    let old = r#"{"id": 1, "name": "old", "email": null}"#;
    let new = r#"{"name": "new", "id": 1, "email": "n@x"}"#;
    let formats = [
        (ChangeFormat::Debezium, json_envelope("u", old, new, "4660")),
        (
            ChangeFormat::Unwrapped,
            br#"{"id": 1, "name": "new", "email": "n@x", "__op": "u", "source": {"lsn": 4660}}"#
                .to_vec(),
        ),
        (
            ChangeFormat::Plain {
                field: "kind".into(),
            },
            br#"{"id": 1, "name": "new", "email": "n@x", "kind": "update", "source": {"lsn": 4660}}"#
                .to_vec(),
        ),
    ];
    for (format, plain) in formats {
        let (shape, plan, columns) = json_plan(None, format.clone(), Some("source.lsn"));
        let wrapped_shape = shape.clone().with_envelope(ConnectEnvelope::On);
        let wrapped = connect(std::str::from_utf8(&plain).unwrap());
        let located = wrapped_shape.locate(&wrapped).unwrap();
        // The row is a range of the record's own bytes: the same text as without the envelope.
        let unwrapped = shape.locate(&plain).unwrap();
        assert_eq!(
            &wrapped[located.row.clone().unwrap()],
            &plain[unwrapped.row.clone().unwrap()],
            "{format:?}"
        );
        assert_eq!(
            (located.kind, located.source),
            (ChangeKind::Upsert, Some(0x1234))
        );
        let row = write(&located, &plan, columns, &wrapped, 7);
        assert_eq!(
            row,
            write(&unwrapped, &plan, columns, &plain, 7),
            "{format:?}"
        );
        let (cells, change, sequence) = as_bigquery_reads(&plan, &row);
        assert_eq!(cells["f"][1]["v"], "new", "{format:?}");
        assert_eq!((change.as_str(), sequence.as_str()), ("UPSERT", "3/1234/7"));

        // A null payload is Connect's null value: a delete by the Kafka key.
        let null = wrapped_shape.locate(&connect("null")).unwrap();
        assert_eq!((null.row, null.kind), (None, ChangeKind::Delete));
        // With the setting on, anything but the exact envelope is a bad record with a reason.
        for bad in [
            plain.clone(),
            connect("[1]"),
            format!(
                r#"{{"schema": null, "payload": {}, "x": 1}}"#,
                String::from_utf8_lossy(&plain)
            )
            .into_bytes(),
            format!(r#"{{"payload": {}}}"#, String::from_utf8_lossy(&plain)).into_bytes(),
        ] {
            let e = wrapped_shape.locate(&bad).unwrap_err();
            assert_eq!(e.class(), "cdc_json_envelope", "{format:?} {e}");
            assert!(
                e.to_string().contains("schemas_enable is on") || e.to_string().contains("payload"),
                "{e}"
            );
        }
        // Malformed JSON inside the payload is malformed JSON.
        let e = wrapped_shape.locate(&connect(r#"{"id": 1,"#)).unwrap_err();
        assert_eq!(e.class(), "malformed_json", "{e}");

        // Unset (guarded): the envelope is refused, naming the setting, never a row without its
        // payload; plain records are read as before.
        let guarded = shape.clone().with_envelope(ConnectEnvelope::Guarded);
        let e = guarded.locate(&wrapped).unwrap_err();
        assert_eq!(e.class(), "cdc_json_envelope", "{format:?}");
        assert!(
            e.to_string().contains("set cdc.schemas_enable: true"),
            "{e}"
        );
        assert_eq!(guarded.locate(&plain), shape.locate(&plain));
    }
    // `schemas_enable: false`: plain JSON taken as it is, even of exactly these two members
    // (a table whose columns are `schema` and `payload`).
    let (off, _, _) = json_plan(None, ChangeFormat::Unwrapped, None);
    let off = off.with_envelope(ConnectEnvelope::Off);
    let wrapped = connect(r#"{"id": 1}"#);
    assert_eq!(off.locate(&wrapped).unwrap().row, Some(0..wrapped.len()));
}

#[test]
fn a_schemaless_kafka_key_in_kafka_connects_envelope_deletes_by_its_payload() {
    let key = connect(r#"{"id": 42}"#);
    let range = ConnectEnvelope::On
        .record(&key)
        .unwrap()
        .expect("a payload");
    assert_eq!(&key[range.clone()], br#"{"id": 42}"#);
    let key_plan = Plan::compile_json(None, false, &relaxed(), &PlanOptions::default()).unwrap();
    let (key_plan, key_columns) = with_change_fields(key_plan);
    let mut key_row = Vec::new();
    key_columns
        .transcode(
            &key_plan,
            &key[range],
            ChangeKind::Delete,
            "0/0/9",
            &mut key_row,
        )
        .unwrap();
    let (_, plan, _) = json_plan(None, ChangeFormat::Debezium, None);
    let mut row = Vec::new();
    renumber(&key_row, key_plan.descriptor(), plan.descriptor(), &mut row).expect("fits");
    let (cells, change, _) = as_bigquery_reads(&plan, &row);
    assert_eq!(
        (cells["f"][0]["v"].as_str(), change.as_str()),
        (Some("42"), "DELETE")
    );

    assert_eq!(ConnectEnvelope::On.record(&connect("null")).unwrap(), None);
    let plain = br#"{"id": 42}"#;
    let e = ConnectEnvelope::On.record(plain).unwrap_err();
    assert_eq!(e.class(), "cdc_json_envelope");
    let e = ConnectEnvelope::Guarded.record(&key).unwrap_err();
    assert_eq!(e.class(), "cdc_json_envelope");
    for envelope in [ConnectEnvelope::Guarded, ConnectEnvelope::Off] {
        assert_eq!(envelope.record(plain).unwrap(), Some(0..plain.len()));
    }
    assert_eq!(
        ConnectEnvelope::Off.record(&key).unwrap(),
        Some(0..key.len())
    );
}

/// A Debezium record of `after` as PostgreSQL's connector writes it under its defaults
/// (`time.precision.mode: adaptive`, `decimal.handling.mode: precise`) through Kafka Connect's
/// `JsonConverter` with `schemas.enable=true`: `ts` a `timestamp(3)`, `amount` a
/// `numeric(12,3)`, `doc` a `jsonb`.
fn debezium_defaults(after: &str) -> Vec<u8> {
    let row = r#"{"type":"struct","optional":true,"name":"pg.public.t.Value","fields":[
        {"type":"int32","optional":false,"field":"id"},
        {"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"ts"},
        {"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,
         "parameters":{"scale":"3","connect.decimal.precision":"12"},"field":"amount"},
        {"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"doc"}]"#;
    format!(
        r#"{{"schema":{{"type":"struct","optional":false,"name":"pg.public.t.Envelope","version":2,"fields":[
            {row},"field":"before"}},{row},"field":"after"}},
            {{"type":"string","optional":false,"field":"op"}},
            {{"type":"int64","optional":true,"field":"ts_ms"}}]}},
          "payload":{{"before":null,"after":{after},"op":"c","ts_ms":1}}}}"#
    )
    .into_bytes()
}

/// Kafka Connect's envelope carries the record's types: each is written by its name. On the code
/// before this, the schema block was ignored and the values typed by their JSON shape: the
/// timestamp's milliseconds read as microseconds (1970-01-20), the decimal's base64 `"1234"` read
/// as the number 1234, and the JSON document stored as a JSON string.
#[tokio::test]
async fn debeziums_default_types_in_kafka_connects_envelope_are_written_by_their_names() {
    use kafka_bigquery_sink::tables::cdc_plans::{ChangeInput, ChangePlans};
    use kafka_bigquery_sink::writer::change_source::ChangeRules;
    let table: TableSchema = serde_json::from_value(serde_json::json!({"fields": [
        {"name": "id", "type": "INTEGER"}, {"name": "ts", "type": "TIMESTAMP"},
        {"name": "amount", "type": "NUMERIC"}, {"name": "doc", "type": "JSON"}]}))
    .unwrap();
    let plans = ChangePlans::new(
        ChangeInput::SchemalessJson,
        &table,
        PlanOptions::default(),
        ChangeRules {
            format: ChangeFormat::Debezium,
            source_field: None,
            deletes: true,
            epoch: 3,
            json_envelope: ConnectEnvelope::On,
        },
    )
    .unwrap();
    // 2024-03-01 12:34:56.789 in milliseconds; -2658.824 unscaled is 0xD76DF8, base64 "1234".
    let record = debezium_defaults(
        r#"{"id":1,"ts":1709296496789,"amount":"1234","doc":"{\"a\": 1, \"b\": [true]}"}"#,
    );
    let (plan, at) = plans.value_plan(&record).await.ok().unwrap();
    let located = plan.shape.locate(&record[at..]).unwrap();
    let row = write(&located, &plan.plan, plan.columns, &record[at..], 7);
    let codec = RowCodec::compile(plan.plan.descriptor(), &table).unwrap();
    let cells = codec.render(&row, &table);
    assert_eq!(cells["f"][1]["v"], "1.709296496789E9", "{cells}");
    assert_eq!(cells["f"][2]["v"], "-2658.824", "{cells}");
    assert_eq!(cells["f"][3]["v"], r#"{"a":1,"b":[true]}"#, "{cells}");

    // The same schema block again finds the same plan, not a new one.
    let again = debezium_defaults(r#"{"id":2,"ts":null,"amount":null,"doc":null}"#);
    let (same, _) = plans.value_plan(&again).await.ok().unwrap();
    assert!(Arc::ptr_eq(&plan, &same));
    // A value the name says cannot be written exactly is a bad record with the reason.
    let bad = debezium_defaults(r#"{"id":3,"ts":1,"amount":"1234","doc":"{\"a\": "}"#);
    let located = plan.shape.locate(&bad).unwrap();
    let mut out = Vec::new();
    let e = plan
        .columns
        .transcode(
            &plan.plan,
            &bad[located.row.unwrap()],
            located.kind,
            "0/0/1",
            &mut out,
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("column doc") && e.to_string().contains("not a json document"),
        "{e}"
    );
    // A record whose schema is null has no types: a bad record, never a guess.
    let untyped = br#"{"schema":null,"payload":{"before":null,"after":{"id":1},"op":"c"}}"#;
    let e = plans.value_plan(untyped).await.err().unwrap();
    assert!(format!("{e:?}").contains("cdc_json_envelope"), "{e:?}");
}

/// The Kafka key in Kafka Connect's envelope is typed by its own schema block: a delete by a key
/// whose column is a Debezium `Timestamp` writes that instant (on the code before, its
/// milliseconds were read as microseconds, as in the value).
#[tokio::test]
async fn a_kafka_key_in_kafka_connects_envelope_is_typed_by_its_schema_block() {
    use kafka_bigquery_sink::tables::cdc_plans::{ChangeInput, ChangePlans};
    use kafka_bigquery_sink::writer::change_source::ChangeRules;
    let table: TableSchema = serde_json::from_value(serde_json::json!({"fields": [
        {"name": "day", "type": "TIMESTAMP", "mode": "REQUIRED"}, {"name": "name", "type": "STRING"}]}))
    .unwrap();
    let plans = ChangePlans::new(
        ChangeInput::SchemalessJson,
        &table,
        PlanOptions::default(),
        ChangeRules {
            format: ChangeFormat::Debezium,
            source_field: None,
            deletes: true,
            epoch: 0,
            json_envelope: ConnectEnvelope::On,
        },
    )
    .unwrap();
    let key = br#"{"schema":{"type":"struct","optional":false,"name":"pg.public.t.Key","fields":[
        {"type":"int64","optional":false,"name":"io.debezium.time.Timestamp","version":1,"field":"day"}]},
        "payload":{"day":1709296496789}}"#;
    let (key_plan, at) = plans.key_plan(key).await.ok().unwrap();
    let range = key_plan.envelope.record(&key[at..]).unwrap().unwrap();
    let mut row = Vec::new();
    key_plan
        .columns
        .transcode(
            &key_plan.plan,
            &key[range],
            ChangeKind::Delete,
            "0/0/1",
            &mut row,
        )
        .unwrap();
    let codec = RowCodec::compile(key_plan.plan.descriptor(), &table).unwrap();
    assert_eq!(codec.render(&row, &table)["f"][0]["v"], "1.709296496789E9");
    // A key whose schema does not fit the table's column is refused with the reason.
    let flag = br#"{"schema":{"type":"struct","fields":[{"type":"boolean","optional":false,"field":"day"}]},
        "payload":{"day":true}}"#;
    let e = plans.key_plan(flag).await.err().unwrap();
    assert!(format!("{e:?}").contains("cdc_no_key"), "{e:?}");
}
