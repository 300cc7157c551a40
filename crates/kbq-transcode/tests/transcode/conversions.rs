//! The transforms that rewrite a value into another type (docs/mapping.md, "Transforms"):
//! `cast`, one record in each input format through one list of casts to one golden row (each
//! format's executor and its reference, `transcode_both`); each refusal of a pair of types that
//! can lose digits names both; each value that cannot be written exactly is its record's error.

use std::sync::Arc;

use kbq_core::table_schema::TableSchema;
use kbq_transcode::json::JsonSchema;
use kbq_transcode::protobuf::ProtoSchema;
use kbq_transcode::transforms::{self, Transform};
use kbq_transcode::{
    AvroSchema, DeriveOptions, Plan, PlanError, PlanOptions, UnknownFields, table_schema_from_avro,
};
use prost_reflect::{DynamicMessage, Value as PValue};
use serde_json::{Value as Json, json};

use crate::transforms::run;

const AVRO: &str = r#"{"type":"record","name":"Casts","fields":[
  {"name":"a","type":"int"},
  {"name":"b","type":"long"},
  {"name":"c","type":"float"},
  {"name":"d","type":"boolean"},
  {"name":"e","type":"string"},
  {"name":"f","type":"string"},
  {"name":"g","type":"string"},
  {"name":"h","type":["null","long"]},
  {"name":"p","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}}]}"#;

const PROTO: &str = r#"
syntax = "proto3";
package t;
message Casts {
  int32 a = 1; int64 b = 2; float c = 3; bool d = 4; string e = 5; string f = 6; string g = 7;
  optional int64 h = 8;
}
"#;

const RECORD: &str =
    r#"{"a":7,"b":-12,"c":0.1,"d":true,"e":"42","f":"1.5","g":"true","h":9007199254740993}"#;

fn json_schema() -> Json {
    json!({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "number"},
        "d": {"type": "boolean"}, "e": {"type": "string"}, "f": {"type": "string"},
        "g": {"type": "string"}, "h": {"type": "integer"}}})
}

fn table() -> TableSchema {
    serde_json::from_value(json!({"fields": [
        {"name": "a", "type": "INT64"},
        {"name": "b", "type": "NUMERIC"},
        {"name": "c", "type": "STRING"},
        {"name": "d", "type": "STRING"},
        {"name": "e", "type": "INT64"},
        {"name": "f", "type": "BIGNUMERIC"},
        {"name": "g", "type": "BOOL"},
        {"name": "h", "type": "STRING"},
        {"name": "p", "type": "STRING"}]}))
    .unwrap()
}

fn list(v: Json) -> Vec<Transform> {
    serde_json::from_value(v).unwrap()
}

fn casts() -> Vec<Transform> {
    list(json!([
        {"cast": {"field": "a", "to": "INT64"}},
        {"cast": {"field": "b", "to": "NUMERIC"}},
        {"cast": {"field": "c", "to": "STRING"}},
        {"cast": {"field": "d", "to": "STRING"}},
        {"cast": {"field": "e", "to": "INT64"}},
        {"cast": {"field": "f", "to": "BIGNUMERIC"}},
        {"cast": {"field": "g", "to": "BOOL"}},
        {"cast": {"field": "h", "to": "STRING"}}
    ]))
}

fn options(t: Vec<Transform>) -> PlanOptions {
    PlanOptions {
        unknown_fields: UnknownFields::Ignore,
        transforms: t,
        ..PlanOptions::default()
    }
}

/// The minimal little-endian two's complement bytes of an unscaled decimal, as the row holds
/// NUMERIC and BIGNUMERIC, in the test's hex form.
fn decimal(unscaled: i128) -> Json {
    let b = unscaled.to_le_bytes();
    let mut n = b.len();
    while n > 1
        && ((b[n - 1] == 0 && b[n - 2] & 0x80 == 0) || (b[n - 1] == 0xff && b[n - 2] & 0x80 != 0))
    {
        n -= 1;
    }
    json!({"hex": b[..n].iter().map(|x| format!("{x:02x}")).collect::<String>()})
}

fn avro_body(p: &[u8]) -> Vec<u8> {
    use apache_avro::types::Value as A;
    let schema = apache_avro::Schema::parse_str(AVRO).unwrap();
    let s = |x: &str| A::String(x.into());
    let value = A::Record(vec![
        ("a".into(), A::Int(7)),
        ("b".into(), A::Long(-12)),
        ("c".into(), A::Float(0.1)),
        ("d".into(), A::Boolean(true)),
        ("e".into(), s("42")),
        ("f".into(), s("1.5")),
        ("g".into(), s("true")),
        (
            "h".into(),
            A::Union(1, Box::new(A::Long(9_007_199_254_740_993))),
        ),
        (
            "p".into(),
            A::Decimal(apache_avro::Decimal::from(p.to_vec())),
        ),
    ]);
    apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
        .build()
        .unwrap()
        .write_value_to_vec(value)
        .unwrap()
}

fn proto_plan(t: Vec<Transform>, table: &TableSchema) -> Result<Plan, PlanError> {
    let schema = ProtoSchema::compile(PROTO, &[]).unwrap();
    let message = schema.pool().get_message_by_name("t.Casts").unwrap();
    Plan::compile_protobuf(&message, table, &options(t))
}

fn proto_body() -> Vec<u8> {
    let schema = ProtoSchema::compile(PROTO, &[]).unwrap();
    let mut m = DynamicMessage::new(schema.pool().get_message_by_name("t.Casts").unwrap());
    m.set_field_by_name("a", PValue::I32(7));
    m.set_field_by_name("b", PValue::I64(-12));
    m.set_field_by_name("c", PValue::F32(0.1));
    m.set_field_by_name("d", PValue::Bool(true));
    for (name, value) in [("e", "42"), ("f", "1.5"), ("g", "true")] {
        m.set_field_by_name(name, PValue::String(value.into()));
    }
    m.set_field_by_name("h", PValue::I64(9_007_199_254_740_993));
    prost::Message::encode_to_vec(&m)
}

fn json_plan(t: Vec<Transform>, table: &TableSchema) -> Result<Plan, PlanError> {
    let schema = Arc::new(JsonSchema::parse(&json_schema().to_string(), &[]).unwrap());
    Plan::compile_json(Some(&schema), false, table, &options(t))
}

#[test]
fn one_record_in_every_format_through_every_cast_gives_one_golden_row() {
    transforms::check(&casts()).unwrap();
    let t = casts();
    let golden = json!({"a": 7, "b": decimal(-12_000_000_000), "c": "0.1", "d": "true", "e": 42,
        "f": decimal(15 * 10i128.pow(37)), "g": true, "h": "9007199254740993"});
    let mut with_decimal = t.clone();
    with_decimal.extend(list(json!([{"cast": {"field": "p", "to": "STRING"}}])));
    let avro = Plan::compile(
        &AvroSchema::parse(AVRO).unwrap(),
        &table(),
        &options(with_decimal),
    );
    // The decimal 123.45 (unscaled 12345, big-endian) as text.
    let mut with_p = golden.clone();
    with_p["p"] = json!("123.45");
    assert_eq!(
        run(&avro.unwrap(), &avro_body(&[0x30, 0x39]), &[]).unwrap(),
        with_p,
        "avro"
    );
    let proto = proto_plan(t.clone(), &table()).unwrap();
    assert_eq!(run(&proto, &proto_body(), &[]).unwrap(), golden, "protobuf");
    // JSON keeps a number's text as written: `c` is the record's 0.1, not a float's digits.
    let json = json_plan(t.clone(), &table()).unwrap();
    assert_eq!(run(&json, RECORD.as_bytes(), &[]).unwrap(), golden, "json");
    let schemaless = Plan::compile_json(None, false, &table(), &options(t)).unwrap();
    assert_eq!(
        run(&schemaless, RECORD.as_bytes(), &[]).unwrap(),
        golden,
        "schemaless json"
    );
}

#[test]
fn a_cast_whose_types_can_lose_digits_is_refused_naming_both() {
    let one = |field: &str, to: &str, column: &str| {
        (
            list(json!([{"cast": {"field": field, "to": to}}])),
            serde_json::from_value::<TableSchema>(
                json!({"fields": [{"name": field, "type": column}]}),
            )
            .unwrap(),
        )
    };
    let avro = |(t, table): (Vec<Transform>, TableSchema)| {
        Plan::compile(&AvroSchema::parse(AVRO).unwrap(), &table, &options(t))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        avro(one("b", "FLOAT64", "FLOAT64")),
        "transform cast b to FLOAT64: the field is long, and a cast to FLOAT64 can lose digits: FLOAT64 holds every integer only up to 2^53 (cast to NUMERIC)"
    );
    assert_eq!(
        avro(one("c", "INT64", "INT64")),
        "transform cast c to INT64: the field is float, and a cast to INT64 can lose digits: a binary floating-point value is not a decimal (cast to STRING: its text reads back as the same value)"
    );
    assert_eq!(
        avro(one("b", "INT64", "STRING")),
        "transform cast b to INT64: the cast writes INT64, and the column is STRING"
    );
    assert_eq!(
        avro(one("e", "FLOAT64", "FLOAT64")),
        "transform cast e to FLOAT64: the field is string, and a cast to FLOAT64 would round most decimal fractions to the nearest double: cast to NUMERIC or BIGNUMERIC"
    );
    assert_eq!(
        avro(one("p", "INT64", "INT64")),
        "transform cast p to INT64: the field is a decimal with scale 2, and a cast to INT64 can lose digits: the decimal has a fraction, which INT64 does not (cast to NUMERIC)"
    );
    // A decimal of a greater scale than NUMERIC's 9 cannot go into NUMERIC.
    let wide = AVRO.replace(r#""scale":2"#, r#""scale":10"#);
    let (t, table) = one("p", "NUMERIC", "NUMERIC");
    assert_eq!(
        Plan::compile(&AvroSchema::parse(&wide).unwrap(), &table, &options(t))
            .unwrap_err()
            .to_string(),
        "transform cast p to NUMERIC: the field is a decimal with scale 10, and a cast to NUMERIC can lose digits: NUMERIC holds 9 fractional digits"
    );
    let (t, table) = one("b", "FLOAT64", "FLOAT64");
    assert_eq!(
        proto_plan(t.clone(), &table).unwrap_err().to_string(),
        "transform cast b to FLOAT64: the field is int64, and a cast to FLOAT64 can lose digits: FLOAT64 holds every integer only up to 2^53 (cast to NUMERIC)"
    );
    assert_eq!(
        json_plan(t, &table).unwrap_err().to_string(),
        "transform cast b to FLOAT64: the field is integer, and a cast to FLOAT64 can lose digits: FLOAT64 holds every integer only up to 2^53 (cast to NUMERIC)"
    );
    let (t, table) = one("d", "INT64", "INT64");
    assert_eq!(
        proto_plan(t, &table).unwrap_err().to_string(),
        "transform cast d to INT64: the field is boolean, and a cast to INT64 would give a boolean a number nobody declared"
    );
}

#[test]
fn a_value_a_cast_cannot_write_exactly_is_its_records_error() {
    let t = list(json!([
        {"cast": {"field": "e", "to": "INT64"}},
        {"cast": {"field": "f", "to": "NUMERIC"}},
        {"cast": {"field": "g", "to": "BOOL"}},
        {"cast": {"field": "a", "to": "INT64"}},
        {"cast": {"field": "c", "to": "FLOAT64"}}
    ]));
    let table: TableSchema = serde_json::from_value(json!({"fields": [
        {"name": "e", "type": "INT64"}, {"name": "f", "type": "NUMERIC"},
        {"name": "g", "type": "BOOL"}, {"name": "a", "type": "INT64"},
        {"name": "c", "type": "FLOAT64"}]}))
    .unwrap();
    let plan = Plan::compile_json(None, false, &table, &options(t)).unwrap();
    let cases = [
        (
            r#"{"e":"4x"}"#,
            "column e: \"4x\" is not an integer of INT64's range",
        ),
        (
            r#"{"e":"9223372036854775808"}"#,
            "column e: \"9223372036854775808\" is not an integer of INT64's range",
        ),
        (
            r#"{"f":"0.1234567891"}"#,
            "column f: decimal has more than 9 fractional digits and would be rounded",
        ),
        (r#"{"g":"yes"}"#, "column g: \"yes\" is not true or false"),
        (r#"{"a":1.5}"#, "column a: 1.5 is not an integer"),
        (
            r#"{"c":9007199254740993}"#,
            "column c: 9007199254740993 is past 2^53, beyond which FLOAT64 does not hold every integer",
        ),
    ];
    for (body, want) in cases {
        let e = run(&plan, body.as_bytes(), &[]).unwrap_err();
        assert_eq!(e.to_string(), want, "{body}");
        assert_eq!(e.class(), "out_of_range", "{body}");
    }
    // Integral numbers are exact: 1e3 is the integer 1000.
    assert_eq!(
        run(&plan, br#"{"a":1e3,"e":"-5","f":"1.5","g":"false"}"#, &[]).unwrap(),
        json!({"a": 1000, "e": -5, "f": decimal(1_500_000_000), "g": false})
    );
    // A JSON value of a type no cast reads is the record's error, as a value of the wrong type.
    let e = run(&plan, br#"{"g":1}"#, &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "column g: json a number cannot be written to a cast to BOOL column"
    );
    assert_eq!(e.class(), "incompatible_schema");
}

#[test]
fn a_table_derived_under_a_cast_has_the_casts_column_type() {
    let options = DeriveOptions {
        transforms: casts(),
        ..DeriveOptions::default()
    };
    let table = table_schema_from_avro(&AvroSchema::parse(AVRO).unwrap(), &options).unwrap();
    let types: Vec<(&str, &str)> = (table.fields.iter())
        .map(|c| (c.name.as_str(), c.field_type.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("a", "INTEGER"),
            ("b", "NUMERIC"),
            ("c", "STRING"),
            ("d", "STRING"),
            ("e", "INTEGER"),
            ("f", "BIGNUMERIC"),
            ("g", "BOOLEAN"),
            ("h", "STRING"),
            ("p", "NUMERIC"),
        ]
    );
    let plan = Plan::compile(
        &AvroSchema::parse(AVRO).unwrap(),
        &table,
        &PlanOptions {
            unknown_fields: UnknownFields::Error,
            transforms: casts(),
            ..PlanOptions::default()
        },
    )
    .unwrap();
    assert_eq!(
        run(&plan, &avro_body(&[0x30, 0x39]), &[]).unwrap()["h"],
        json!("9007199254740993")
    );
}
