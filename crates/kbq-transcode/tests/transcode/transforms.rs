//! Transforms compiled into the plan (docs/mapping.md, "Transforms"): one record, written in
//! each input format, through one list of transforms (drop, rename at the top and nested, mask
//! to NULL and to a value, set from a value, two headers and the topic) gives the same golden
//! row; each refusal names the transform and why.

use std::sync::Arc;

use kbq_core::table_schema::{Mode, TableSchema};
use kbq_transcode::json::{JsonSchema, table_schema_from_json};
use kbq_transcode::protobuf::{ProtoSchema, table_schema_from_protobuf};
use kbq_transcode::transforms::{self, Filter, FilterMatch, Transform};
use kbq_transcode::{
    AvroSchema, DeriveError, DeriveOptions, KafkaHeader, KafkaMetadata, Plan, PlanError,
    PlanOptions, RecordError, UnknownFields, file_for, table_schema_from_avro,
};
use prost_reflect::{DescriptorPool, DynamicMessage, Value as PValue};
use prost_types::FileDescriptorSet;
use serde_json::{Value as Json, json};

use crate::support::differential::Both;
use crate::support::proto_json::message_json;

pub(crate) const AVRO: &str = r#"{"type":"record","name":"Order","fields":[
  {"name":"id","type":"long"},
  {"name":"email","type":"string"},
  {"name":"note","type":["null","string"]},
  {"name":"ssn","type":"string"},
  {"name":"card","type":"string"},
  {"name":"customer","type":{"type":"record","name":"Customer","fields":[
     {"name":"name","type":"string"},{"name":"secret","type":"string"}]}}]}"#;

pub(crate) const PROTO: &str = r#"
syntax = "proto3";
package t;
message Customer { string name = 1; string secret = 2; }
message Order {
  int64 id = 1; string email = 2; optional string note = 3; string ssn = 4; string card = 5;
  Customer customer = 6;
}
"#;

pub(crate) const RECORD: &str = r#"{"id":7,"email":"a@x","note":"n","ssn":"123","card":"4111","customer":{"name":"Ann","secret":"s"}}"#;

fn json_schema() -> Json {
    json!({"type": "object", "properties": {
        "id": {"type": "integer"}, "email": {"type": "string"}, "note": {"type": "string"},
        "ssn": {"type": "string"}, "card": {"type": "string"},
        "customer": {"type": "object", "properties": {
            "name": {"type": "string"}, "secret": {"type": "string"}}}}})
}

fn table() -> TableSchema {
    serde_json::from_value(json!({"fields": [
        {"name": "id", "type": "INT64", "mode": "REQUIRED"},
        {"name": "mail", "type": "STRING"},
        {"name": "note", "type": "STRING"},
        {"name": "ssn", "type": "STRING"},
        {"name": "card", "type": "STRING"},
        {"name": "customer", "type": "RECORD", "fields": [
            {"name": "alias", "type": "STRING"}, {"name": "secret", "type": "STRING"}]},
        {"name": "source", "type": "STRING"},
        {"name": "trace", "type": "STRING"},
        {"name": "seq", "type": "INT64"},
        {"name": "kafka_topic", "type": "STRING"}]}))
    .unwrap()
}

pub(crate) fn list(v: Json) -> Vec<Transform> {
    serde_json::from_value(v).unwrap()
}

fn every_transform() -> Vec<Transform> {
    list(json!([
        {"drop": {"field": "note"}},
        {"rename": {"field": "email", "to": "mail"}},
        {"mask": {"field": "ssn"}},
        {"mask": {"field": "card", "value": "****"}},
        {"rename": {"field": "customer.name", "to": "alias"}},
        {"drop": {"field": "customer.secret"}},
        {"set": {"column": "source", "value": "eu"}},
        {"set": {"column": "trace", "header": "trace", "encoding": "string"}},
        {"set": {"column": "seq", "header": "seq", "encoding": "int64_be"}},
        {"set": {"column": "kafka_topic", "from": "topic"}}
    ]))
}

/// Every column the transforms touch is filled or left NULL as they say; `note`, `ssn` and
/// `customer.secret` hold nothing of the record.
fn golden() -> Json {
    json!({"id": 7, "mail": "a@x", "card": "****", "customer": {"alias": "Ann"},
           "source": "eu", "trace": "t-1", "seq": 42, "kafka_topic": "orders"})
}

/// Under `error` (the golden row's) a dropped, masked or renamed field must not count as
/// unknown; the refusals are compiled under `ignore`, where `email` without a column is no error.
fn options(transforms: Vec<Transform>, unknown_fields: UnknownFields) -> PlanOptions {
    PlanOptions {
        unknown_fields,
        transforms,
        ..PlanOptions::default()
    }
}

pub(crate) fn avro_plan(t: Vec<Transform>, u: UnknownFields) -> Result<Plan, PlanError> {
    Plan::compile(&AvroSchema::parse(AVRO).unwrap(), &table(), &options(t, u))
}

pub(crate) fn proto_plan(t: Vec<Transform>, u: UnknownFields) -> Result<Plan, PlanError> {
    let schema = ProtoSchema::compile(PROTO, &[]).unwrap();
    let message = schema.pool().get_message_by_name("t.Order").unwrap();
    Plan::compile_protobuf(&message, &table(), &options(t, u))
}

pub(crate) fn json_plan(t: Vec<Transform>, u: UnknownFields) -> Result<Plan, PlanError> {
    let schema = Arc::new(JsonSchema::parse(&json_schema().to_string(), &[]).unwrap());
    Plan::compile_json(Some(&schema), false, &table(), &options(t, u))
}

pub(crate) fn schemaless_plan(t: Vec<Transform>, u: UnknownFields) -> Result<Plan, PlanError> {
    Plan::compile_json(None, false, &table(), &options(t, u))
}

fn avro_body() -> Vec<u8> {
    use apache_avro::types::Value as A;
    let schema = apache_avro::Schema::parse_str(AVRO).unwrap();
    let s = |x: &str| A::String(x.into());
    let value = A::Record(vec![
        ("id".into(), A::Long(7)),
        ("email".into(), s("a@x")),
        ("note".into(), A::Union(1, Box::new(s("n")))),
        ("ssn".into(), s("123")),
        ("card".into(), s("4111")),
        (
            "customer".into(),
            A::Record(vec![("name".into(), s("Ann")), ("secret".into(), s("s"))]),
        ),
    ]);
    apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
        .build()
        .unwrap()
        .write_value_to_vec(value)
        .unwrap()
}

fn proto_body() -> Vec<u8> {
    let schema = ProtoSchema::compile(PROTO, &[]).unwrap();
    let order = schema.pool().get_message_by_name("t.Order").unwrap();
    let customer = schema.pool().get_message_by_name("t.Customer").unwrap();
    let mut c = DynamicMessage::new(customer);
    c.set_field_by_name("name", PValue::String("Ann".into()));
    c.set_field_by_name("secret", PValue::String("s".into()));
    let mut m = DynamicMessage::new(order);
    m.set_field_by_name("id", PValue::I64(7));
    for (name, value) in [
        ("email", "a@x"),
        ("note", "n"),
        ("ssn", "123"),
        ("card", "4111"),
    ] {
        m.set_field_by_name(name, PValue::String(value.into()));
    }
    m.set_field_by_name("customer", PValue::Message(c));
    prost::Message::encode_to_vec(&m)
}

const SEQ: [u8; 8] = 42i64.to_be_bytes();

fn headers() -> Vec<KafkaHeader<'static>> {
    vec![
        KafkaHeader {
            key: b"trace",
            value: Some(b"t-0"),
        },
        // The last header of a name is the one read, as Kafka's `Headers.lastHeader`.
        KafkaHeader {
            key: b"trace",
            value: Some(b"t-1"),
        },
        KafkaHeader {
            key: b"seq",
            value: Some(&SEQ),
        },
    ]
}

pub(crate) fn run(
    plan: &Plan,
    body: &[u8],
    headers: &[KafkaHeader<'_>],
) -> Result<Json, RecordError> {
    let meta = KafkaMetadata {
        topic: "orders",
        headers,
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

/// Each format's plan and its body of the one record.
pub(crate) fn formats_with(
    t: &[Transform],
    u: UnknownFields,
) -> Vec<(&'static str, Result<Plan, PlanError>, Vec<u8>)> {
    vec![
        ("avro", avro_plan(t.to_vec(), u), avro_body()),
        ("protobuf", proto_plan(t.to_vec(), u), proto_body()),
        (
            "json schema",
            json_plan(t.to_vec(), u),
            RECORD.as_bytes().to_vec(),
        ),
        (
            "schemaless json",
            schemaless_plan(t.to_vec(), u),
            RECORD.as_bytes().to_vec(),
        ),
    ]
}

fn formats(t: &[Transform]) -> Vec<(&'static str, Result<Plan, PlanError>, Vec<u8>)> {
    formats_with(t, UnknownFields::Error)
}

#[test]
fn one_record_in_every_format_through_every_transform_gives_one_golden_row() {
    transforms::check(&every_transform()).unwrap();
    for (format, plan, body) in formats(&every_transform()) {
        let plan = plan.unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_eq!(run(&plan, &body, &headers()).unwrap(), golden(), "{format}");
    }
}

#[test]
fn without_transforms_the_same_record_fills_the_columns_of_its_own_names() {
    let none = list(json!([]));
    for (format, plan, _) in formats(&none) {
        // `email` has no column: refused under `unknown_fields: error` when the schema says so.
        assert!(plan.is_err() || format == "schemaless json", "{format}");
    }
    let plan = Plan::compile(
        &AvroSchema::parse(AVRO).unwrap(),
        &table(),
        &PlanOptions::default(),
    )
    .unwrap();
    assert_eq!(
        run(&plan, &avro_body(), &headers()).unwrap(),
        json!({"id": 7, "note": "n", "ssn": "123", "card": "4111", "customer": {"secret": "s"}})
    );
}

#[test]
fn a_header_column_reads_the_headers_bytes_as_its_encoding_says() {
    let t = list(json!([
        {"set": {"column": "trace", "header": "trace", "encoding": "string"}},
        {"set": {"column": "seq", "header": "seq", "encoding": "int32_be"}},
        {"drop": {"field": "email"}}
    ]));
    let plan = Plan::compile(
        &AvroSchema::parse(AVRO).unwrap(),
        &table(),
        &PlanOptions {
            transforms: t,
            ..PlanOptions::default()
        },
    )
    .unwrap();
    let body = avro_body();
    let seq = (-5i32).to_be_bytes();
    let row = |h: &[KafkaHeader<'_>]| run(&plan, &body, h);
    let ok = row(&[KafkaHeader {
        key: b"seq",
        value: Some(&seq),
    }])
    .unwrap();
    assert_eq!(ok["seq"], json!(-5));
    // Absent, or present with a null value: NULL.
    assert_eq!(row(&[]).unwrap().get("trace"), None);
    let null = row(&[KafkaHeader {
        key: b"trace",
        value: None,
    }])
    .unwrap();
    assert_eq!(null.get("trace"), None);
    // Bytes that are not what the encoding says: a per-record error naming the column.
    let short = row(&[KafkaHeader {
        key: b"seq",
        value: Some(b"\x01\x02"),
    }])
    .unwrap_err();
    assert_eq!(short.class(), "out_of_range");
    assert_eq!(
        short.to_string(),
        "column seq: header \"seq\" has 2 bytes, not the 4 of int32_be"
    );
    let not_text = row(&[KafkaHeader {
        key: b"trace",
        value: Some(b"\xff"),
    }])
    .unwrap_err();
    assert_eq!(
        not_text.to_string(),
        "column trace: header \"trace\" is not valid utf-8"
    );
}

/// The refusals the plan compiler shares with `validate`, in every format whose schema is
/// known when the plan is compiled.
#[test]
fn transforms_that_cannot_apply_refuse_the_plan_naming_the_transform() {
    let cases = [
        (
            json!([{"mask": {"field": "customer.phone"}}]),
            "transform mask customer.phone: no field customer.phone reaches a column of its own: the writer schema lacks it, or a record around it has no column or is written whole into a JSON or STRING column",
        ),
        (
            json!([{"rename": {"field": "email", "to": "ssn"}}]),
            "transform rename email to ssn: the record already has a field ssn, which fills that column",
        ),
        (
            json!([{"rename": {"field": "customer.name", "to": "SECRET"}}]),
            "transform rename customer.name to SECRET: the record already has a field customer.secret, which fills that column",
        ),
        (
            json!([{"set": {"column": "seq", "value": "x"}}]),
            "transform set seq: the text \"x\" cannot be written exactly to a INTEGER column (static values: text into STRING or BYTES, integers into INT64 or FLOAT64 up to 2^53, numbers into FLOAT64, true/false into BOOL)",
        ),
        (
            json!([{"set": {"column": "seq", "header": "seq", "encoding": "string"}}]),
            "transform set seq: a header read as string cannot fill a INTEGER column (string: STRING, bytes: BYTES, int64_be and int32_be: INT64)",
        ),
        (
            json!([{"set": {"column": "missing", "value": 1}}]),
            "transform set missing: the table has no such column",
        ),
        (
            json!([{"set": {"column": "ssn", "value": "x"}}]),
            "transform set ssn: field ssn fills column ssn as well: drop or rename the field",
        ),
    ];
    for (t, want) in cases {
        let t = list(t);
        for (format, plan, _) in formats_with(&t, UnknownFields::Ignore) {
            // No schema: nothing to check the fields against before a record comes. A key of
            // a set column's name is then a key without a column (`unknown_fields`).
            let needs_fields = !want.starts_with("transform set") || want.contains("field ssn");
            if format == "schemaless json" && needs_fields {
                continue;
            }
            let refused = match plan {
                Err(e) => e,
                Ok(_) => panic!("{format}: {want}"),
            };
            assert_eq!(refused.to_string(), want, "{format}");
            assert_eq!(refused.class(), "incompatible_schema");
        }
    }
}

#[test]
fn a_field_written_whole_into_a_json_column_cannot_be_masked_inside() {
    let json_table: TableSchema = serde_json::from_value(json!({"fields": [
        {"name": "id", "type": "INT64"}, {"name": "customer", "type": "JSON"}]}))
    .unwrap();
    let t = list(json!([{"mask": {"field": "customer.secret"}}]));
    let plan = Plan::compile(
        &AvroSchema::parse(AVRO).unwrap(),
        &json_table,
        &PlanOptions {
            transforms: t,
            ..PlanOptions::default()
        },
    );
    let e = plan.unwrap_err().to_string();
    assert!(
        e.starts_with("transform mask customer.secret: no field"),
        "{e}"
    );
}

#[test]
fn the_list_is_checked_without_a_schema() {
    let refused = |v: Json| {
        let e = transforms::check(&list(v)).unwrap_err();
        (e.index, e.key, e.message)
    };
    assert_eq!(
        refused(json!([{"drop": {"field": "a"}}, {"mask": {"field": "A"}}])),
        (
            1,
            "field",
            "transforms[0] already transforms field A".into()
        )
    );
    assert_eq!(
        refused(json!([{"drop": {"field": "a"}}, {"drop": {"field": "a.b"}}])).0,
        1
    );
    assert_eq!(
        refused(json!([{"rename": {"field": "a", "to": "b.c"}}])).1,
        "to"
    );
    assert_eq!(
        refused(json!([{"mask": {"field": "a.b", "value": "x"}}])).1,
        "value"
    );
    assert_eq!(
        refused(json!([{"set": {"column": "c", "header": "h"}}])),
        (
            0,
            "encoding",
            "a header's bytes have no type of their own: say how to read them (string, bytes, int64_be, int32_be)".into()
        )
    );
    assert_eq!(
        refused(json!([{"set": {"column": "c", "value": 1, "from": "topic"}}])).2,
        "needs exactly one of `value`, `header` and `from`"
    );
    assert_eq!(
        refused(json!([{"set": {"column": "a", "from": "topic"}}, {"set": {"column": "b", "from": "topic"}}])).2,
        "transforms[0] already sets a column from the topic"
    );
    assert_eq!(refused(json!([{"filter": {}}])).1, "filter");
    assert_eq!(
        refused(json!([{"filter": {"topic_pattern": "("}}])).1,
        "topic_pattern"
    );
}

#[test]
fn set_from_a_kafka_coordinate_is_a_metadata_column() {
    let t = list(json!([{"set": {"column": "kafka_topic", "from": "topic"}}]));
    let m = transforms::metadata_with(&Default::default(), &t).unwrap();
    assert_eq!(m.topic.as_deref(), Some("kafka_topic"));
    let old = kbq_transcode::MetadataColumns {
        topic: Some("t".into()),
        ..Default::default()
    };
    assert_eq!(
        transforms::metadata_with(&old, &t).unwrap_err(),
        "the topic already goes to column t (metadata_columns.topic)"
    );
}

#[test]
fn filters_drop_what_matches_every_condition_given() {
    let f = Filter::new(&list(json!([
        {"filter": {"tombstone": true}},
        {"filter": {"header": "env", "equals": "test"}},
        {"filter": {"topic_pattern": "tmp-.*"}}
    ])));
    let record = |topic, tombstone, headers| FilterMatch {
        topic,
        tombstone,
        headers,
    };
    let test = [KafkaHeader {
        key: b"env",
        value: Some(b"test"),
    }];
    let prod = [KafkaHeader {
        key: b"env",
        value: Some(b"prod"),
    }];
    let keep = [KafkaHeader {
        key: b"keep",
        value: None,
    }];
    assert!(f.drops(&record("orders", true, &[])));
    assert!(!f.drops(&record("orders", false, &[])));
    assert!(f.drops(&record("orders", false, &test)));
    assert!(!f.drops(&record("orders", false, &prod)));
    assert!(f.drops(&record("tmp-1", false, &[])));
    assert!(!f.drops(&record("xtmp-1", false, &[])));
    // `negate`: only the records with a `keep` header stay.
    let only_kept = Filter::new(&list(
        json!([{"filter": {"header": "keep", "negate": true}}]),
    ));
    assert!(only_kept.drops(&record("orders", false, &[])));
    assert!(!only_kept.drops(&record("orders", false, &keep)));
    assert!(Filter::new(&[]).is_empty());
}

/// The table `create_table` derives from each format's writer schema under `t`.
fn derived(t: &[Transform]) -> Vec<(&'static str, Result<TableSchema, DeriveError>)> {
    let options = DeriveOptions {
        transforms: t.to_vec(),
        ..DeriveOptions::default()
    };
    let proto = ProtoSchema::compile(PROTO, &[]).unwrap();
    let order = proto.pool().get_message_by_name("t.Order").unwrap();
    let json = JsonSchema::parse(&json_schema().to_string(), &[]).unwrap();
    vec![
        (
            "avro",
            table_schema_from_avro(&AvroSchema::parse(AVRO).unwrap(), &options),
        ),
        ("protobuf", table_schema_from_protobuf(&order, &options)),
        ("json schema", table_schema_from_json(&json, &options)),
    ]
}

/// A table derived under the transforms (`create_table`, `schema_update`) has the columns the
/// transformed rows fill, so each format's plan compiles against it under `unknown_fields:
/// error` and writes the golden row.
#[test]
fn a_table_derived_under_the_transforms_holds_the_transformed_rows() {
    let t = every_transform();
    for (format, table) in derived(&t) {
        let table = table.unwrap_or_else(|e| panic!("{format}: {e}"));
        // JSON Schema's properties derive in name order; the others in the schema's.
        let mut columns: Vec<(&str, &str)> = (table.fields.iter())
            .map(|c| (c.name.as_str(), c.field_type.as_str()))
            .collect();
        columns.sort();
        assert_eq!(
            columns,
            [
                ("card", "STRING"),
                ("customer", "RECORD"),
                ("id", "INTEGER"),
                ("kafka_topic", "STRING"),
                ("mail", "STRING"),
                ("seq", "INTEGER"),
                ("source", "STRING"),
                ("ssn", "STRING"),
                ("trace", "STRING"),
            ],
            "{format}"
        );
        let column = |name: &str| table.fields.iter().find(|c| c.name == name).unwrap();
        let customer: Vec<&str> = (column("customer").fields.iter())
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(customer, ["alias"], "{format}");
        // Masked to NULL: its column stays, and takes NULL.
        assert_eq!(column("ssn").mode(), Mode::Nullable, "{format}");
        let options = options(t.clone(), UnknownFields::Error);
        let (plan, body) = match format {
            "avro" => (
                Plan::compile(&AvroSchema::parse(AVRO).unwrap(), &table, &options),
                avro_body(),
            ),
            "protobuf" => {
                let schema = ProtoSchema::compile(PROTO, &[]).unwrap();
                let message = schema.pool().get_message_by_name("t.Order").unwrap();
                (
                    Plan::compile_protobuf(&message, &table, &options),
                    proto_body(),
                )
            }
            _ => {
                let schema = Arc::new(JsonSchema::parse(&json_schema().to_string(), &[]).unwrap());
                (
                    Plan::compile_json(Some(&schema), false, &table, &options),
                    RECORD.as_bytes().to_vec(),
                )
            }
        };
        let plan = plan.unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_eq!(run(&plan, &body, &headers()).unwrap(), golden(), "{format}");
    }
}

#[test]
fn a_transform_that_meets_no_field_or_a_taken_column_refuses_the_derived_table() {
    let cases = [
        (
            json!([{"drop": {"field": "customer.phone"}}]),
            "field drop customer.phone: the writer schema has no field customer.phone",
        ),
        (
            json!([{"rename": {"field": "email.x", "to": "y"}}]),
            "field rename email.x to y: email derives a STRING column, not a record: its fields have no columns of their own",
        ),
        (
            json!([{"rename": {"field": "email", "to": "SSN"}}]),
            "field rename email to SSN: the record already has a field ssn, which fills that column",
        ),
        (
            json!([{"set": {"column": "card", "value": 1}}]),
            "field set card: the writer schema has a field card too, which fills that column: drop or rename the field",
        ),
        (
            json!([{"drop": {"field": "customer.name"}}, {"drop": {"field": "customer.secret"}}]),
            "field drop customer.secret: it is its record's last field: a RECORD column needs one (drop the record)",
        ),
    ];
    for (t, want) in cases {
        for (format, table) in derived(&list(t)) {
            let e = table.expect_err(format).to_string();
            assert_eq!(e, want, "{format}");
        }
    }
}

/// `list` with the key of every hashing mask read as the config reads it (`Config::load`).
fn keyed(v: Json, key: &[u8]) -> Vec<Transform> {
    let mut t = list(v);
    for x in &mut t {
        if let Transform::Mask(m) = x
            && let Some(k) = &mut m.key
        {
            k.set(key.to_vec());
        }
    }
    t
}

/// HMAC-SHA256 with the key `Jefe` (RFC 4231's second key), computed outside the sink.
const HMAC_123_HEX: &str = "235555e21ca6792a24f832eedf01568b1c3ea0867e0e2ff19c61ab1176967055";
const HMAC_4111_BASE64: &str = "3704zV80dCHP8s6Xqe7qUZzNLbGK5oZSetukQfocqT8=";

#[test]
fn a_hash_mask_writes_the_keyed_digest_of_the_value_in_every_format() {
    let t = keyed(
        json!([
            {"drop": {"field": "note"}},
            {"rename": {"field": "email", "to": "mail"}},
            {"mask": {"field": "ssn", "hash": "hmac_sha256", "key": {"env": "K"}, "encoding": "hex"}},
            {"mask": {"field": "card", "hash": "hmac_sha256", "key": {"file": "/k"}, "encoding": "base64"}},
            {"drop": {"field": "customer.name"}},
            {"mask": {"field": "customer.secret", "hash": "hmac_sha256", "key": {"env": "K"}, "encoding": "hex"}}
        ]),
        b"Jefe",
    );
    transforms::check(&t).unwrap();
    // HMAC-SHA256(Jefe, "s"), computed outside the sink.
    let secret = "96284e34270990bb013d75104143ca4eefeb6edf9e259ff4d0f52da59350f66e";
    for (format, plan, body) in formats(&t) {
        let plan = plan.unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_eq!(
            run(&plan, &body, &[]).unwrap(),
            json!({"id": 7, "mail": "a@x", "ssn": HMAC_123_HEX, "card": HMAC_4111_BASE64,
                   "customer": {"secret": secret}}),
            "{format}"
        );
    }
}

#[test]
fn a_hash_mask_writes_raw_bytes_into_a_bytes_column_and_refuses_what_does_not_fit() {
    let bytes_table: TableSchema = serde_json::from_value(json!({"fields": [
        {"name": "id", "type": "INT64"}, {"name": "ssn", "type": "BYTES"}]}))
    .unwrap();
    let mask = |field: &str, encoding: &str| {
        keyed(
            json!([{"mask": {"field": field, "hash": "hmac_sha256", "key": {"env": "K"}, "encoding": encoding}}]),
            b"Jefe",
        )
    };
    let compile = |t: Vec<Transform>, table: &TableSchema| {
        Plan::compile(
            &AvroSchema::parse(AVRO).unwrap(),
            table,
            &PlanOptions {
                transforms: t,
                ..PlanOptions::default()
            },
        )
    };
    let plan = compile(mask("ssn", "bytes"), &bytes_table).unwrap();
    let row = run(&plan, &avro_body(), &[]).unwrap();
    // The test's row JSON writes bytes as hex: the 32 bytes of the digest.
    assert_eq!(row, json!({"id": 7, "ssn": {"hex": HMAC_123_HEX}}));
    let refused = |t, table: &TableSchema| compile(t, table).unwrap_err().to_string();
    assert_eq!(
        refused(mask("ssn", "hex"), &bytes_table),
        "transform mask ssn with a hash: a digest written as hex fills a STRING column, and the column is BYTES"
    );
    assert_eq!(
        refused(mask("ssn", "bytes"), &table()),
        "transform mask ssn with a hash: a digest written as bytes fills a BYTES column, and the column is STRING"
    );
    assert_eq!(
        refused(mask("id", "hex"), &table()),
        "transform mask id with a hash: a hash is taken of text or bytes, and the field is long: the bytes of another type would be a guess"
    );
    // A key the config did not read (a plan compiled without `Config::load`) is no key.
    let unread = list(
        json!([{"mask": {"field": "ssn", "hash": "hmac_sha256", "key": {"env": "K"}, "encoding": "hex"}}]),
    );
    assert_eq!(
        refused(unread, &table()),
        "transform mask ssn with a hash: its key was not read (the config reads it when it is loaded)"
    );
}

#[test]
fn a_hash_mask_refuses_a_field_that_is_not_text_in_every_format_and_schemaless_json_per_record() {
    let t = keyed(
        json!([{"mask": {"field": "id", "hash": "hmac_sha256", "key": {"env": "K"}, "encoding": "hex"}}]),
        b"Jefe",
    );
    let id_as_text: TableSchema = serde_json::from_value(json!({"fields": [
        {"name": "id", "type": "STRING"}]}))
    .unwrap();
    let o = options(t.clone(), UnknownFields::Ignore);
    let avro = Plan::compile(&AvroSchema::parse(AVRO).unwrap(), &id_as_text, &o);
    assert!(
        avro.unwrap_err()
            .to_string()
            .ends_with("the field is long: the bytes of another type would be a guess")
    );
    let schema = ProtoSchema::compile(PROTO, &[]).unwrap();
    let message = schema.pool().get_message_by_name("t.Order").unwrap();
    let proto = Plan::compile_protobuf(&message, &id_as_text, &o);
    assert!(
        proto
            .unwrap_err()
            .to_string()
            .contains("the field is int64")
    );
    let js = Arc::new(JsonSchema::parse(&json_schema().to_string(), &[]).unwrap());
    let json = Plan::compile_json(Some(&js), false, &id_as_text, &o);
    assert!(
        json.unwrap_err()
            .to_string()
            .contains("the field is integer")
    );
    // Without a schema the value's type is known only when it comes: a dead letter then.
    let plan = Plan::compile_json(None, false, &id_as_text, &o).unwrap();
    let e = run(&plan, RECORD.as_bytes(), &[]).unwrap_err();
    assert_eq!(e.class(), "incompatible_schema");
    assert!(e.to_string().contains("column id"), "{e}");
    let text = run(&plan, br#"{"id":"123"}"#, &[]).unwrap();
    assert_eq!(text, json!({"id": HMAC_123_HEX}));
}

#[test]
fn a_hash_mask_needs_its_key_and_encoding_and_no_value() {
    let refused = |v: Json| {
        let e = transforms::check(&list(v)).unwrap_err();
        (e.index, e.key, e.message)
    };
    assert_eq!(
        refused(json!([{"mask": {"field": "a", "hash": "hmac_sha256", "encoding": "hex"}}])),
        (
            0,
            "key",
            "a keyed hash needs its key: {file: path} or {env: NAME} (never the key itself)".into()
        )
    );
    assert_eq!(
        refused(json!([{"mask": {"field": "a", "hash": "hmac_sha256", "key": {"env": "K"}}}])).1,
        "encoding"
    );
    assert_eq!(
        refused(json!([{"mask": {"field": "a", "hash": "hmac_sha256", "key": {"env": "K"}, "encoding": "hex", "value": "x"}}])).1,
        "value"
    );
    assert_eq!(
        refused(json!([{"mask": {"field": "a", "key": {"env": "K"}}}])),
        (0, "key", "only with `hash`".into())
    );
    let empty = keyed(
        json!([{"mask": {"field": "a", "hash": "hmac_sha256", "key": {"env": "K"}, "encoding": "hex"}}]),
        b"",
    );
    assert_eq!(
        transforms::check(&empty).unwrap_err().message,
        "the key is empty"
    );
    // The key itself is never printed.
    assert!(!format!("{:?}", keyed(json!([{"mask": {"field": "a", "hash": "hmac_sha256", "key": {"env": "K"}, "encoding": "hex"}}]), b"Jefe")).contains("Jefe"));
}
