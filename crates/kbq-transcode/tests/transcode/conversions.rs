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

const TIMES_AVRO: &str = r#"{"type":"record","name":"Times","fields":[
  {"name":"ms","type":"long"},
  {"name":"s","type":"int"},
  {"name":"txt","type":"string"},
  {"name":"z","type":["null","string"]},
  {"name":"us","type":"long"},
  {"name":"ns","type":"long"},
  {"name":"d","type":"double"},
  {"name":"logical","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;

const TIMES_PROTO: &str = r#"
syntax = "proto3";
package t;
message Times { int64 ms = 1; int32 s = 2; string txt = 3; string z = 4; int64 us = 5; int64 ns = 6; double d = 7; }
"#;

/// 2024-02-29T12:34:56.5Z: 19,782 days and 45,296.5 s after the epoch.
const MS: i64 = 1_709_210_096_500;
const TIMES: &str = r#"{"ms":1709210096500,"s":1709164800,"txt":"2024-02-29 12:34:56.5","z":"2024-02-29T13:34:56+01:00","us":1709210096500001,"ns":1709210096500000000}"#;

fn times_table() -> TableSchema {
    serde_json::from_value(json!({"fields": [
        {"name": "ms", "type": "TIMESTAMP"},
        {"name": "s", "type": "DATE"},
        {"name": "txt", "type": "DATETIME"},
        {"name": "z", "type": "TIMESTAMP"},
        {"name": "us", "type": "STRING"},
        {"name": "ns", "type": "INT64"}]}))
    .unwrap()
}

fn conversions() -> Vec<Transform> {
    list(json!([
        {"convert": {"field": "ms", "from": "epoch_millis", "to": "TIMESTAMP"}},
        {"convert": {"field": "s", "from": "epoch_seconds", "to": "DATE", "zone": "UTC"}},
        {"convert": {"field": "txt", "from": "string", "format": "%Y-%m-%d %H:%M:%S.%f", "to": "DATETIME"}},
        {"convert": {"field": "z", "from": "string", "format": "%Y-%m-%dT%H:%M:%S%:z", "to": "TIMESTAMP"}},
        {"convert": {"field": "us", "from": "epoch_micros", "to": "STRING", "format": "%Y-%m-%d %H:%M:%S.%6f", "zone": "UTC"}},
        {"convert": {"field": "ns", "from": "epoch_nanos", "to": "INT64", "unit": "epoch_millis"}}
    ]))
}

fn times_avro_body() -> Vec<u8> {
    use apache_avro::types::Value as A;
    let schema = apache_avro::Schema::parse_str(TIMES_AVRO).unwrap();
    let value = A::Record(vec![
        ("ms".into(), A::Long(MS)),
        ("s".into(), A::Int(1_709_164_800)),
        ("txt".into(), A::String("2024-02-29 12:34:56.5".into())),
        (
            "z".into(),
            A::Union(1, Box::new(A::String("2024-02-29T13:34:56+01:00".into()))),
        ),
        ("us".into(), A::Long(MS * 1000 + 1)),
        ("ns".into(), A::Long(MS * 1_000_000)),
        ("d".into(), A::Double(0.0)),
        ("logical".into(), A::TimestampMillis(MS)),
    ]);
    apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
        .build()
        .unwrap()
        .write_value_to_vec(value)
        .unwrap()
}

fn times_proto_plan(t: Vec<Transform>, table: &TableSchema) -> Result<Plan, PlanError> {
    let schema = ProtoSchema::compile(TIMES_PROTO, &[]).unwrap();
    let message = schema.pool().get_message_by_name("t.Times").unwrap();
    Plan::compile_protobuf(&message, table, &options(t))
}

fn times_proto_body() -> Vec<u8> {
    let schema = ProtoSchema::compile(TIMES_PROTO, &[]).unwrap();
    let mut m = DynamicMessage::new(schema.pool().get_message_by_name("t.Times").unwrap());
    m.set_field_by_name("ms", PValue::I64(MS));
    m.set_field_by_name("s", PValue::I32(1_709_164_800));
    m.set_field_by_name("txt", PValue::String("2024-02-29 12:34:56.5".into()));
    m.set_field_by_name("z", PValue::String("2024-02-29T13:34:56+01:00".into()));
    m.set_field_by_name("us", PValue::I64(MS * 1000 + 1));
    m.set_field_by_name("ns", PValue::I64(MS * 1_000_000));
    prost::Message::encode_to_vec(&m)
}

fn times_json_schema() -> Arc<JsonSchema> {
    let schema = json!({"type": "object", "properties": {
        "ms": {"type": "integer"}, "s": {"type": "integer"}, "txt": {"type": "string"},
        "z": {"type": "string"}, "us": {"type": "integer"}, "ns": {"type": "integer"},
        "d": {"type": "number"}}});
    Arc::new(JsonSchema::parse(&schema.to_string(), &[]).unwrap())
}

/// BigQuery's packed DATETIME (the Storage Write API's CivilTimeEncoder layout).
fn packed(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, micros: i64) -> i64 {
    ((((y << 14) | (mo << 10) | (d << 5)) << 32) | (((h << 12) | (mi << 6) | s) << 20)) | micros
}

#[test]
fn one_record_in_every_format_through_every_conversion_gives_one_golden_row() {
    transforms::check(&conversions()).unwrap();
    let golden = json!({
        "ms": MS * 1000,
        "s": 19_782,
        "txt": packed(2024, 2, 29, 12, 34, 56, 500_000),
        "z": (MS - 500) * 1000,
        "us": "2024-02-29 12:34:56.500001",
        "ns": MS,
    });
    let t = conversions();
    let avro = Plan::compile(
        &AvroSchema::parse(TIMES_AVRO).unwrap(),
        &times_table(),
        &options(t.clone()),
    )
    .unwrap();
    assert_eq!(run(&avro, &times_avro_body(), &[]).unwrap(), golden, "avro");
    let proto = times_proto_plan(t.clone(), &times_table()).unwrap();
    assert_eq!(
        run(&proto, &times_proto_body(), &[]).unwrap(),
        golden,
        "protobuf"
    );
    let json = Plan::compile_json(
        Some(&times_json_schema()),
        false,
        &times_table(),
        &options(t.clone()),
    )
    .unwrap();
    assert_eq!(run(&json, TIMES.as_bytes(), &[]).unwrap(), golden, "json");
    let schemaless = Plan::compile_json(None, false, &times_table(), &options(t)).unwrap();
    assert_eq!(
        run(&schemaless, TIMES.as_bytes(), &[]).unwrap(),
        golden,
        "schemaless json"
    );
}

/// A proto3 field without presence holds its default when the wire leaves it out (`""`, 0): a
/// cast or conversion that cannot write the default is its record's error naming the column,
/// the one the value sent would be, never a NULL (the default was written once, when the plan
/// was compiled, and a failure left the column empty). One that can writes it.
#[test]
fn a_proto3_default_a_cast_or_conversion_cannot_write_is_its_records_error_as_the_value_sent() {
    let cases = [
        (
            json!({"cast": {"field": "e", "to": "INT64"}}),
            "e",
            "INT64",
            0x2a, // field 5, length-delimited
            "column e: \"\" is not an integer of INT64's range",
        ),
        (
            json!({"cast": {"field": "g", "to": "BOOL"}}),
            "g",
            "BOOL",
            0x3a,
            "column g: \"\" is not true or false",
        ),
        (
            json!({"cast": {"field": "f", "to": "NUMERIC"}}),
            "f",
            "NUMERIC",
            0x32,
            "column f: \"\" is not a decimal number",
        ),
    ];
    for (cast, column, ty, key, want) in cases {
        let table: TableSchema =
            serde_json::from_value(json!({"fields": [{"name": column, "type": ty}]})).unwrap();
        let plan = proto_plan(list(json!([cast])), &table).unwrap();
        let sent = run(&plan, &[key, 0], &[]).unwrap_err();
        assert_eq!(sent.to_string(), want, "{column}");
        assert_eq!(run(&plan, &[], &[]), Err(sent), "{column} left out");
    }
    let table: TableSchema =
        serde_json::from_value(json!({"fields": [{"name": "txt", "type": "DATETIME"}]})).unwrap();
    let convert = json!({"convert": {"field": "txt", "from": "string", "format": "%Y-%m-%d", "to": "DATETIME"}});
    let plan = times_proto_plan(list(json!([convert])), &table).unwrap();
    let sent = run(&plan, &[0x1a, 0], &[]).unwrap_err();
    assert!(sent.to_string().starts_with("column txt: \"\" "), "{sent}");
    assert_eq!(run(&plan, &[], &[]), Err(sent));
    // A default the transform can write is written: 0 seconds is 1970-01-01.
    let table: TableSchema =
        serde_json::from_value(json!({"fields": [{"name": "s", "type": "DATE"}]})).unwrap();
    let convert =
        json!({"convert": {"field": "s", "from": "epoch_seconds", "to": "DATE", "zone": "UTC"}});
    let plan = times_proto_plan(list(json!([convert])), &table).unwrap();
    assert_eq!(run(&plan, &[], &[]).unwrap(), json!({"s": 0}));
}

#[test]
fn a_time_that_cannot_be_written_exactly_is_its_records_error() {
    let t = list(json!([
        {"convert": {"field": "ms", "from": "epoch_nanos", "to": "TIMESTAMP"}},
        {"convert": {"field": "s", "from": "epoch_seconds", "to": "DATE", "zone": "UTC"}},
        {"convert": {"field": "txt", "from": "string", "format": "%Y-%m-%d %H:%M:%S.%f", "to": "DATETIME"}},
        {"convert": {"field": "z", "from": "epoch_millis", "to": "TIMESTAMP"}},
        {"convert": {"field": "us", "from": "epoch_micros", "to": "STRING", "format": "%Y-%m-%d %H:%M:%S", "zone": "UTC"}},
        {"convert": {"field": "ns", "from": "epoch_nanos", "to": "INT64", "unit": "epoch_millis"}}
    ]));
    let mut table = times_table();
    table.fields[0].field_type = kbq_core::table_schema::FieldType::Timestamp;
    let plan = Plan::compile_json(None, false, &table, &options(t)).unwrap();
    let cases = [
        (
            r#"{"ms":1709210096500000001}"#,
            "column ms: 1709210096500000001 has a fraction of a microsecond, which a TIMESTAMP does not hold",
        ),
        (
            r#"{"s":1709210096}"#,
            "column s: 1709210096 has a time of day, which a DATE does not hold",
        ),
        (
            r#"{"txt":"2024-02-30 00:00:00.0"}"#,
            "column txt: \"2024-02-30 00:00:00.0\": 2024-02-30 is not a date in 0001-01-01..9999-12-31",
        ),
        (
            r#"{"txt":"2024-02-29T00:00:00.0"}"#,
            "column txt: \"2024-02-29T00:00:00.0\" does not match its format: \" \" expected at byte 10",
        ),
        (
            r#"{"z":253402300800000}"#,
            "column z: 253402300800000: timestamp is outside 0001-01-01..9999-12-31",
        ),
        (
            r#"{"us":1709210096500001}"#,
            "column us: 1709210096500001: the time has a fraction of a second, which its format does not write",
        ),
        (
            r#"{"ns":1709210096500000001}"#,
            "column ns: 1709210096500000001 is not a whole count of epoch_millis",
        ),
        (r#"{"ms":1.5}"#, "column ms: 1.5 is not an integer"),
    ];
    for (body, want) in cases {
        let e = run(&plan, body.as_bytes(), &[]).unwrap_err();
        assert_eq!(e.to_string(), want, "{body}");
        assert_eq!(e.class(), "out_of_range", "{body}");
    }
    // A string where a count is read is a value of the wrong type.
    let e = run(&plan, br#"{"ns":"1"}"#, &[]).unwrap_err();
    assert_eq!(e.class(), "incompatible_schema", "{e}");
}

#[test]
fn a_conversion_the_field_or_the_column_cannot_take_is_refused() {
    let one = |t: Json, column: &str, ty: &str| {
        (
            list(json!([{ "convert": t }])),
            serde_json::from_value::<TableSchema>(
                json!({"fields": [{"name": column, "type": ty}]}),
            )
            .unwrap(),
        )
    };
    let avro = |(t, table): (Vec<Transform>, TableSchema)| {
        Plan::compile(&AvroSchema::parse(TIMES_AVRO).unwrap(), &table, &options(t))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        avro(one(
            json!({"field": "d", "from": "epoch_millis", "to": "TIMESTAMP"}),
            "d",
            "TIMESTAMP"
        )),
        "transform convert d from epoch_millis to TIMESTAMP: the field is double, and epoch_millis is an integer count"
    );
    assert_eq!(
        avro(one(
            json!({"field": "ms", "from": "string", "format": "%Y-%m-%d", "to": "DATE"}),
            "ms",
            "DATE"
        )),
        "transform convert ms from string to DATE: the field is long, and `from: string` reads text"
    );
    assert_eq!(
        avro(one(
            json!({"field": "ms", "from": "epoch_millis", "to": "TIMESTAMP"}),
            "ms",
            "DATETIME"
        )),
        "transform convert ms from epoch_millis to TIMESTAMP: the conversion writes TIMESTAMP, and the column is DATETIME"
    );
    // A logical type already says what the number is: the mapping writes it, not a transform.
    assert_eq!(
        avro(one(
            json!({"field": "logical", "from": "epoch_millis", "to": "TIMESTAMP"}),
            "logical",
            "TIMESTAMP"
        )),
        "transform convert logical from epoch_millis to TIMESTAMP: the field is a number of a logical type, and epoch_millis is an integer count"
    );
    let (t, table) = one(
        json!({"field": "d", "from": "epoch_millis", "to": "TIMESTAMP"}),
        "d",
        "TIMESTAMP",
    );
    assert_eq!(
        times_proto_plan(t.clone(), &table).unwrap_err().to_string(),
        "transform convert d from epoch_millis to TIMESTAMP: the field is double, and epoch_millis is an integer count"
    );
    assert_eq!(
        Plan::compile_json(Some(&times_json_schema()), false, &table, &options(t))
            .unwrap_err()
            .to_string(),
        "transform convert d from epoch_millis to TIMESTAMP: the field is number (a JSON number that may have a fraction), and epoch_millis is a count: declare the property an integer"
    );
}

#[test]
fn a_conversion_is_checked_without_a_schema() {
    let refused = |v: Json| {
        let e = transforms::check(&list(json!([{ "convert": v }]))).unwrap_err();
        (e.key, e.message)
    };
    let key = |v: Json| refused(v).0;
    assert_eq!(
        refused(json!({"field": "a", "from": "epoch_millis", "to": "DATE"})),
        ("zone", "an instant from epoch_millis becomes a civil time DATE: say the zone of the civil time (zone: UTC), it is never guessed".into())
    );
    assert_eq!(
        refused(json!({"field": "a", "from": "string", "format": "%Y-%m-%d %H:%M:%S", "to": "TIMESTAMP"})),
        ("zone", "a civil time from text without %z becomes an instant TIMESTAMP: say the zone of the civil time (zone: UTC), it is never guessed".into())
    );
    assert_eq!(
        refused(json!({"field": "a", "from": "epoch_millis", "to": "TIMESTAMP", "zone": "UTC"})),
        (
            "zone",
            "only where an instant becomes a civil time or back; here both are instants".into()
        )
    );
    assert_eq!(
        key(json!({"field": "a", "from": "string", "to": "DATE"})),
        "format"
    );
    assert_eq!(
        key(json!({"field": "a", "from": "epoch_millis", "to": "TIMESTAMP", "format": "%Y"})),
        "format"
    );
    assert_eq!(
        key(json!({"field": "a", "from": "string", "format": "%Y-%m", "to": "DATE"})),
        "format"
    );
    assert_eq!(
        key(json!({"field": "a", "from": "string", "format": "%Y-%m-%d %I", "to": "DATE"})),
        "format"
    );
    assert_eq!(
        key(json!({"field": "a", "from": "string", "format": "%Y-%m-%d", "to": "STRING"})),
        "to"
    );
    assert_eq!(
        key(json!({"field": "a", "from": "epoch_millis", "to": "INT64"})),
        "unit"
    );
    assert_eq!(
        key(
            json!({"field": "a", "from": "epoch_millis", "to": "TIMESTAMP", "unit": "epoch_seconds"})
        ),
        "unit"
    );
    // Text with its offset is an instant: into TIMESTAMP without a zone, into DATE with one.
    for ok in [
        json!({"field": "a", "from": "string", "format": "%Y-%m-%d %H:%M:%S%z", "to": "TIMESTAMP"}),
        json!({"field": "a", "from": "string", "format": "%Y-%m-%d %H:%M:%S%z", "to": "DATE", "zone": "UTC"}),
        json!({"field": "a", "from": "string", "format": "%Y-%m-%d", "to": "DATE"}),
        json!({"field": "a", "from": "epoch_millis", "to": "STRING", "format": "%Y-%m-%dT%H:%M:%S.%3f%z"}),
        json!({"field": "a", "from": "epoch_millis", "to": "STRING", "format": "%d/%m/%Y", "zone": "UTC"}),
        json!({"field": "a", "from": "epoch_seconds", "to": "INT64", "unit": "epoch_millis"}),
    ] {
        transforms::check(&list(json!([{ "convert": ok }]))).unwrap_or_else(|e| panic!("{e:?}"));
    }
}

#[test]
fn a_table_derived_under_a_conversion_has_its_column_type() {
    let options = DeriveOptions {
        transforms: conversions(),
        ..DeriveOptions::default()
    };
    let table = table_schema_from_avro(&AvroSchema::parse(TIMES_AVRO).unwrap(), &options).unwrap();
    let types: Vec<(&str, &str)> = (table.fields.iter())
        .take(6)
        .map(|c| (c.name.as_str(), c.field_type.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("ms", "TIMESTAMP"),
            ("s", "DATE"),
            ("txt", "DATETIME"),
            ("z", "TIMESTAMP"),
            ("us", "STRING"),
            ("ns", "INTEGER"),
        ]
    );
}
