//! `flatten` (docs/mapping.md, "Transforms"): a top-level record's fields fill top-level
//! `parent_child` columns, in every input format (each executor against its reference through
//! `transcode_both`); a null or absent record leaves them NULL; the refusals name the
//! transform and both sides of a collision; a derived table gets the flattened columns.

use std::sync::Arc;

use kbq_core::table_schema::TableSchema;
use kbq_transcode::json::{JsonSchema, table_schema_from_json};
use kbq_transcode::protobuf::{ProtoSchema, table_schema_from_protobuf};
use kbq_transcode::transforms::{self, Transform};
use kbq_transcode::{
    AvroSchema, DeriveOptions, KafkaMetadata, Plan, PlanError, PlanOptions, RecordError,
    UnknownFields, file_for, table_schema_from_avro,
};
use prost_reflect::{DescriptorPool, DynamicMessage, Value as PValue};
use prost_types::FileDescriptorSet;
use serde_json::{Value as Json, json};

use crate::support::differential::Both;
use crate::support::proto_json::message_json;

const AVRO: &str = r#"{"type":"record","name":"Order","fields":[
  {"name":"id","type":"long"},
  {"name":"address","type":["null",{"type":"record","name":"Address","fields":[
     {"name":"street","type":"string"},{"name":"zip","type":["null","long"]},
     {"name":"geo","type":{"type":"record","name":"Geo","fields":[{"name":"lat","type":"double"}]}}]}]}]}"#;

const PROTO: &str = r#"
syntax = "proto3";
package t;
message Geo { double lat = 1; }
message Address { string street = 1; optional int64 zip = 2; Geo geo = 3; }
message Order { int64 id = 1; Address address = 2; }
"#;

fn json_schema() -> Json {
    json!({"type": "object", "properties": {
        "id": {"type": "integer"},
        "address": {"type": ["object", "null"], "properties": {
            "street": {"type": "string"}, "zip": {"type": "integer"},
            "geo": {"type": "object", "properties": {"lat": {"type": "number"}}}}}}})
}

const RECORD: &str = r#"{"id":7,"address":{"street":"Main","zip":12345,"geo":{"lat":1.5}}}"#;

fn table(street_mode: &str) -> TableSchema {
    serde_json::from_value(json!({"fields": [
        {"name": "id", "type": "INT64", "mode": "REQUIRED"},
        {"name": "address_street", "type": "STRING", "mode": street_mode},
        {"name": "address_zip", "type": "INT64"},
        {"name": "address_geo", "type": "RECORD", "fields": [{"name": "lat", "type": "FLOAT64"}]},
        {"name": "kafka_topic", "type": "STRING"}]}))
    .unwrap()
}

fn flatten(extra: Json) -> Vec<Transform> {
    let mut list = vec![json!({"flatten": {"field": "address", "separator": "_"}})];
    if let Json::Array(more) = extra {
        list.extend(more);
    }
    serde_json::from_value(Json::Array(list)).unwrap()
}

fn options(t: &[Transform]) -> PlanOptions {
    PlanOptions {
        unknown_fields: UnknownFields::Error,
        transforms: t.to_vec(),
        metadata: kbq_transcode::MetadataColumns {
            topic: Some("kafka_topic".into()),
            ..Default::default()
        },
    }
}

/// Each format's plan under `t` against `table`.
fn plans(t: &[Transform], table: &TableSchema) -> Vec<(&'static str, Result<Plan, PlanError>)> {
    let o = options(t);
    let proto = ProtoSchema::compile(PROTO, &[]).unwrap();
    let order = proto.pool().get_message_by_name("t.Order").unwrap();
    let json = Arc::new(JsonSchema::parse(&json_schema().to_string(), &[]).unwrap());
    vec![
        (
            "avro",
            Plan::compile(&AvroSchema::parse(AVRO).unwrap(), table, &o),
        ),
        ("protobuf", Plan::compile_protobuf(&order, table, &o)),
        (
            "json schema",
            Plan::compile_json(Some(&json), false, table, &o),
        ),
        (
            "schemaless json",
            Plan::compile_json(None, false, table, &o),
        ),
    ]
}

/// The record in `format`: with its address, or without one (null; absent in Protobuf).
fn body(format: &str, with_address: bool) -> Vec<u8> {
    match format {
        "avro" => {
            use apache_avro::types::Value as A;
            let schema = apache_avro::Schema::parse_str(AVRO).unwrap();
            let address = match with_address {
                true => A::Union(
                    1,
                    Box::new(A::Record(vec![
                        ("street".into(), A::String("Main".into())),
                        ("zip".into(), A::Union(1, Box::new(A::Long(12345)))),
                        (
                            "geo".into(),
                            A::Record(vec![("lat".into(), A::Double(1.5))]),
                        ),
                    ])),
                ),
                false => A::Union(0, Box::new(A::Null)),
            };
            let value = A::Record(vec![("id".into(), A::Long(7)), ("address".into(), address)]);
            apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
                .build()
                .unwrap()
                .write_value_to_vec(value)
                .unwrap()
        }
        "protobuf" => {
            let schema = ProtoSchema::compile(PROTO, &[]).unwrap();
            let pool = schema.pool();
            let mut m = DynamicMessage::new(pool.get_message_by_name("t.Order").unwrap());
            m.set_field_by_name("id", PValue::I64(7));
            if with_address {
                let mut geo = DynamicMessage::new(pool.get_message_by_name("t.Geo").unwrap());
                geo.set_field_by_name("lat", PValue::F64(1.5));
                let mut a = DynamicMessage::new(pool.get_message_by_name("t.Address").unwrap());
                a.set_field_by_name("street", PValue::String("Main".into()));
                a.set_field_by_name("zip", PValue::I64(12345));
                a.set_field_by_name("geo", PValue::Message(geo));
                m.set_field_by_name("address", PValue::Message(a));
            }
            prost::Message::encode_to_vec(&m)
        }
        _ => match with_address {
            true => RECORD.as_bytes().to_vec(),
            false => br#"{"id":7,"address":null}"#.to_vec(),
        },
    }
}

fn run(plan: &Plan, body: &[u8]) -> Result<Json, RecordError> {
    let meta = KafkaMetadata {
        topic: "orders",
        ..KafkaMetadata::default()
    };
    let mut out = Vec::new();
    let range = plan.transcode_both(body, Some(&meta), &mut out)?;
    let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(plan.descriptor())],
    })
    .unwrap();
    let row =
        DynamicMessage::decode(pool.get_message_by_name("Row").unwrap(), &out[range]).unwrap();
    Ok(message_json(&row))
}

#[test]
fn a_flattened_record_fills_top_level_columns_in_every_format_and_a_null_one_leaves_them_null() {
    let t = flatten(json!([]));
    transforms::check(&t).unwrap();
    for (format, plan) in plans(&t, &table("NULLABLE")) {
        let plan = plan.unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_eq!(
            run(&plan, &body(format, true)).unwrap(),
            json!({"id": 7, "address_street": "Main", "address_zip": 12345,
                   "address_geo": {"lat": 1.5}, "kafka_topic": "orders"}),
            "{format}"
        );
        assert_eq!(
            run(&plan, &body(format, false)).unwrap(),
            json!({"id": 7, "kafka_topic": "orders"}),
            "{format}"
        );
    }
    // JSON: an absent object is a null one.
    for (format, plan) in plans(&t, &table("NULLABLE")).into_iter().skip(2) {
        assert_eq!(
            run(&plan.unwrap(), br#"{"id":7}"#).unwrap(),
            json!({"id": 7, "kafka_topic": "orders"}),
            "{format}"
        );
    }
}

#[test]
fn a_null_record_whose_flattened_column_is_required_is_the_records_error() {
    let t = flatten(json!([]));
    for (format, plan) in plans(&t, &table("REQUIRED")) {
        let plan = plan.unwrap_or_else(|e| panic!("{format}: {e}"));
        assert!(run(&plan, &body(format, true)).is_ok(), "{format}");
        let e = run(&plan, &body(format, false)).unwrap_err();
        assert_eq!(e.class(), "incompatible_schema", "{format}");
        assert!(e.to_string().contains("address_street"), "{format}: {e}");
    }
}

#[test]
fn a_flattened_name_taken_by_a_field_a_set_or_a_metadata_column_refuses_the_plan_naming_both() {
    // A field of the row named as a flattened column: Avro, Protobuf and JSON Schema know it.
    let avro = AVRO.replace(
        r#"{"name":"id","type":"long"},"#,
        r#"{"name":"id","type":"long"},{"name":"address_street","type":"string"},"#,
    );
    let t = flatten(json!([]));
    let e = Plan::compile(
        &AvroSchema::parse(&avro).unwrap(),
        &table("NULLABLE"),
        &options(&t),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "transform flatten address: its field address.street would fill column address_street, which the field address_street fills as well: drop or rename one"
    );
    let proto = PROTO.replace(
        "Address address = 2;",
        "Address address = 2; string address_street = 3;",
    );
    let schema = ProtoSchema::compile(&proto, &[]).unwrap();
    let order = schema.pool().get_message_by_name("t.Order").unwrap();
    let p = Plan::compile_protobuf(&order, &table("NULLABLE"), &options(&t)).unwrap_err();
    assert_eq!(p.to_string(), e.to_string());
    let mut js = json_schema();
    js["properties"]["address_street"] = json!({"type": "string"});
    let js = Arc::new(JsonSchema::parse(&js.to_string(), &[]).unwrap());
    let j = Plan::compile_json(Some(&js), false, &table("NULLABLE"), &options(&t)).unwrap_err();
    assert_eq!(j.to_string(), e.to_string());
    // The field renamed away: no collision.
    let renamed = flatten(json!([{"rename": {"field": "address_street", "to": "other"}}]));
    let mut with_other = table("NULLABLE");
    with_other
        .fields
        .push(serde_json::from_value(json!({"name": "other", "type": "STRING"})).unwrap());
    Plan::compile(
        &AvroSchema::parse(&avro).unwrap(),
        &with_other,
        &options(&renamed),
    )
    .unwrap();

    // A column a `set` fills, or a metadata column: in every format.
    let set = flatten(json!([{"set": {"column": "address_zip", "value": 1}}]));
    for (format, plan) in plans(&set, &table("NULLABLE")) {
        if format == "schemaless json" {
            continue;
        }
        assert_eq!(
            plan.unwrap_err().to_string(),
            "transform flatten address: its field address.zip would fill column address_zip, which transforms[1] sets as well",
            "{format}"
        );
    }
    let meta = serde_json::from_value::<Vec<Transform>>(json!([
        {"flatten": {"field": "address", "separator": "_x_"}}
    ]))
    .unwrap();
    let mut o = options(&meta);
    o.metadata.topic = Some("address_x_street".into());
    let e = Plan::compile(&AvroSchema::parse(AVRO).unwrap(), &table("NULLABLE"), &o).unwrap_err();
    assert_eq!(
        e.to_string(),
        "transform flatten address: its field address.street would fill column address_x_street, which is a Kafka metadata column"
    );
}

#[test]
fn only_a_record_can_be_flattened() {
    let cases: [(&str, &str); 3] = [
        (
            r#"{"type":"record","name":"R","fields":[{"name":"address","type":"string"}]}"#,
            "transform flatten address: the field is a string: only a record, or a union of a record and null, has fields to flatten (a record inside an array has no columns of its own)",
        ),
        (
            r#"{"type":"record","name":"R","fields":[{"name":"address","type":{"type":"array","items":{"type":"record","name":"A","fields":[{"name":"street","type":"string"}]}}}]}"#,
            "transform flatten address: the field is an array: only a record, or a union of a record and null, has fields to flatten (a record inside an array has no columns of its own)",
        ),
        (
            r#"{"type":"record","name":"R","fields":[{"name":"address","type":["string",{"type":"record","name":"A","fields":[{"name":"street","type":"string"}]}]}]}"#,
            "transform flatten address: the field is a union of other types: only a record, or a union of a record and null, has fields to flatten (a record inside an array has no columns of its own)",
        ),
    ];
    let t = flatten(json!([]));
    let mut o = options(&t);
    o.unknown_fields = UnknownFields::Ignore;
    for (schema, want) in cases {
        let e = Plan::compile(&AvroSchema::parse(schema).unwrap(), &table("NULLABLE"), &o);
        assert_eq!(e.unwrap_err().to_string(), want);
    }
    let proto = "syntax = \"proto3\"; package t; message A { string street = 1; } message R { repeated A address = 1; }";
    let schema = ProtoSchema::compile(proto, &[]).unwrap();
    let r = schema.pool().get_message_by_name("t.R").unwrap();
    assert_eq!(
        Plan::compile_protobuf(&r, &table("NULLABLE"), &o)
            .unwrap_err()
            .to_string(),
        "transform flatten address: the field is repeated: only a singular message has fields to flatten (a message inside a repeated field has no columns of its own)"
    );
    let js = json!({"type": "object", "properties": {"address": {"type": "array", "items": {"type": "object"}}}});
    let js = Arc::new(JsonSchema::parse(&js.to_string(), &[]).unwrap());
    assert_eq!(
        Plan::compile_json(Some(&js), false, &table("NULLABLE"), &o)
            .unwrap_err()
            .to_string(),
        "transform flatten address: the property is array: only an object has fields to flatten (an object inside an array has no columns of its own)"
    );
    // A writer schema without the field: the transform would not apply.
    let none = r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"}]}"#;
    let e = Plan::compile(&AvroSchema::parse(none).unwrap(), &table("NULLABLE"), &o).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("transform flatten address: no field address reaches"),
        "{e}"
    );
}

#[test]
fn the_list_refuses_a_nested_path_a_bad_separator_and_a_path_inside_the_flattened_record() {
    let refused = |v: Json| {
        let e =
            transforms::check(&serde_json::from_value::<Vec<Transform>>(v).unwrap()).unwrap_err();
        (e.index, e.key, e.message)
    };
    assert_eq!(
        refused(json!([{"flatten": {"field": "a.b", "separator": "_"}}])),
        (
            0,
            "field",
            "flatten writes top-level columns: `a.b` is not a top-level record".into()
        )
    );
    assert_eq!(
        refused(json!([{"flatten": {"field": "a", "separator": "."}}])),
        (0, "separator", "\".\" cannot join column names: letters, digits and `_` only (a column name holds no other)".into())
    );
    assert_eq!(
        refused(json!([{"flatten": {"field": "a", "separator": ""}}])).1,
        "separator"
    );
    assert_eq!(
        refused(json!([{"flatten": {"field": "a", "separator": "_"}}, {"drop": {"field": "a.b"}}]))
            .2,
        "field a.b and the field of transforms[0] are one inside the other: a record that is dropped, renamed or masked takes its fields with it"
    );
    // Both keys are required: which record, and how the names join.
    assert!(
        serde_json::from_value::<Vec<Transform>>(json!([{"flatten": {"field": "a"}}])).is_err()
    );
}

/// `create_table` derives the flattened columns (NULLABLE: the record may be null), and the
/// plan compiled against that table writes the row.
#[test]
fn a_derived_table_gets_the_flattened_columns() {
    let t = flatten(json!([]));
    let options = DeriveOptions {
        transforms: t.clone(),
        ..DeriveOptions::default()
    };
    let proto = ProtoSchema::compile(PROTO, &[]).unwrap();
    let order = proto.pool().get_message_by_name("t.Order").unwrap();
    let json = JsonSchema::parse(&json_schema().to_string(), &[]).unwrap();
    let derived = [
        (
            "avro",
            table_schema_from_avro(&AvroSchema::parse(AVRO).unwrap(), &options),
        ),
        ("protobuf", table_schema_from_protobuf(&order, &options)),
        ("json schema", table_schema_from_json(&json, &options)),
    ];
    for (format, table) in derived {
        let table = table.unwrap_or_else(|e| panic!("{format}: {e}"));
        let mut columns: Vec<(&str, &str, String)> = (table.fields.iter())
            .map(|c| {
                (
                    c.name.as_str(),
                    c.field_type.as_str(),
                    format!("{:?}", c.mode()),
                )
            })
            .collect();
        columns.sort();
        let id_mode = if format == "avro" {
            "Required"
        } else {
            "Nullable"
        };
        let n = || "Nullable".to_string();
        assert_eq!(
            columns,
            [
                ("address_geo", "RECORD", n()),
                ("address_street", "STRING", n()),
                ("address_zip", "INTEGER", n()),
                ("id", "INTEGER", id_mode.to_string()),
            ],
            "{format}"
        );
        let mut o = self::options(&t);
        o.metadata = Default::default();
        let plan = match format {
            "avro" => Plan::compile(&AvroSchema::parse(AVRO).unwrap(), &table, &o),
            "protobuf" => Plan::compile_protobuf(&order, &table, &o),
            _ => {
                let json = JsonSchema::parse(&json_schema().to_string(), &[]).unwrap();
                Plan::compile_json(Some(&Arc::new(json)), false, &table, &o)
            }
        }
        .unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_eq!(
            run(&plan, &body(format, true)).unwrap(),
            json!({"id": 7, "address_street": "Main", "address_zip": 12345, "address_geo": {"lat": 1.5}}),
            "{format}"
        );
    }
    // A derived column of the flattened name: refused naming both.
    let avro = AVRO.replace(
        r#"{"name":"id","type":"long"},"#,
        r#"{"name":"id","type":"long"},{"name":"address_zip","type":"long"},"#,
    );
    let e = table_schema_from_avro(&AvroSchema::parse(&avro).unwrap(), &options).unwrap_err();
    assert!(
        e.to_string().contains("its field address.zip would fill column address_zip, which the field address_zip fills as well"),
        "{e}"
    );
}
