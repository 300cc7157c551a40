//! The Protobuf transcoder: golden cases for each mapping rule and wire-level behaviour, a
//! property test over random messages (fixed seed; `PROTOBUF_PROPS_SEED` replays another), and a
//! bounded fuzzer that mutates valid messages (`PROTOBUF_FUZZ_SEED`, `PROTOBUF_FUZZ_ITERATIONS`).
//! Inputs are encoded by prost-reflect from descriptors, never by the code under test.

use std::sync::Arc;

use kbq_core::table_schema::TableSchema;
use kbq_transcode::protobuf::{MessagePath, ProtoSchema};
use kbq_transcode::{
    KafkaMetadata, MetadataColumns, Plan, PlanError, PlanOptions, RecordError, UnknownFields,
    file_for,
};
use num_bigint::BigInt;
use prost::Message;
use prost_reflect::{
    DescriptorPool, DynamicMessage, MapKey, MessageDescriptor, ReflectMessage, Value as PValue,
};
use prost_types::FileDescriptorSet;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value as Json, json};

use crate::support::differential::Both;
use crate::support::proto_json::{message_json, to_json};
use crate::support::{case, proto_case};

const SCHEMA: &str = r#"
syntax = "proto3";
package p;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/duration.proto";
import "google/type/decimal.proto";
enum Color { RED = 0; GREEN = 1; BLUE = 5; }
message Inner { string s = 1; sint64 n = 2; repeated double ds = 3; }
message Rec {
  int32 i32 = 1; int64 i64 = 2; uint32 u32 = 3; uint64 u64 = 4; sint32 s32 = 5; sint64 s64 = 6;
  fixed32 f32 = 7; fixed64 f64 = 8; sfixed32 sf32 = 9; sfixed64 sf64 = 10; float fl = 11;
  double db = 12; bool b = 13; string s = 14; bytes by = 15; Color c = 16;
  optional int64 opt = 17;
  repeated int32 ri = 18; repeated string rs = 19; repeated Color rc = 20;
  Inner inner = 21; repeated Inner inners = 22;
  map<string, Inner> mi = 23; map<int32, string> ms = 24;
  oneof choice { string cs = 25; int64 ci = 26; }
  google.protobuf.Timestamp ts = 27; google.protobuf.DoubleValue wd = 28;
  google.protobuf.Duration dur = 29; google.type.Decimal dec = 30;
  int64 big_tag = 100000;
}
"#;

const PROTO2: &str = r#"
syntax = "proto2";
package q;
message Old {
  optional int32 a = 1;
  required string b = 2;
  optional int64 c = 3 [default = 7];
  repeated int32 packed = 4 [packed = true];
}
"#;

fn schema(text: &str) -> ProtoSchema {
    ProtoSchema::compile(text, &[]).unwrap()
}

fn rec() -> MessageDescriptor {
    schema(SCHEMA).pool().get_message_by_name("p.Rec").unwrap()
}

fn col(name: &str, ty: &str) -> Json {
    json!({"name": name, "type": ty, "mode": "NULLABLE"})
}

fn rep(name: &str, ty: &str) -> Json {
    json!({"name": name, "type": ty, "mode": "REPEATED"})
}

fn record(name: &str, mode: &str, fields: Vec<Json>) -> Json {
    json!({"name": name, "type": "RECORD", "mode": mode, "fields": fields})
}

fn table(cols: Vec<Json>) -> TableSchema {
    serde_json::from_value(json!({ "fields": cols })).unwrap()
}

fn inner_cols() -> Vec<Json> {
    vec![col("s", "STRING"), col("n", "INTEGER"), rep("ds", "FLOAT")]
}

fn rec_table() -> TableSchema {
    table(vec![
        col("i32", "INTEGER"),
        col("I64", "INTEGER"),
        col("u32", "INTEGER"),
        col("u64", "NUMERIC"),
        col("s32", "INTEGER"),
        col("s64", "INTEGER"),
        col("f32", "INTEGER"),
        col("f64", "BIGNUMERIC"),
        col("sf32", "INTEGER"),
        col("sf64", "INTEGER"),
        col("fl", "FLOAT"),
        col("db", "FLOAT"),
        col("b", "BOOLEAN"),
        col("s", "STRING"),
        col("by", "BYTES"),
        col("c", "STRING"),
        col("opt", "INTEGER"),
        rep("ri", "INTEGER"),
        rep("rs", "STRING"),
        rep("rc", "STRING"),
        record("inner", "NULLABLE", inner_cols()),
        record("inners", "REPEATED", inner_cols()),
        record(
            "mi",
            "REPEATED",
            vec![
                col("key", "STRING"),
                record("value", "NULLABLE", inner_cols()),
            ],
        ),
        record(
            "ms",
            "REPEATED",
            vec![col("key", "INTEGER"), col("value", "STRING")],
        ),
        col("cs", "STRING"),
        col("ci", "INTEGER"),
        col("ts", "TIMESTAMP"),
        col("wd", "FLOAT"),
        col("dur", "INTEGER"),
        col("dec", "NUMERIC"),
        col("big_tag", "INTEGER"),
    ])
}

fn plan(m: &MessageDescriptor, t: &TableSchema) -> Plan {
    Plan::compile_protobuf(m, t, &PlanOptions::default()).unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn decode_row(plan: &Plan, bytes: &[u8]) -> Json {
    let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(plan.descriptor())],
    })
    .unwrap();
    let row = DynamicMessage::decode(pool.get_message_by_name("Row").unwrap(), bytes).unwrap();
    message_json(&row)
}

fn run(plan: &Plan, wire: &[u8]) -> Result<Json, RecordError> {
    let mut out = vec![0xAA];
    let range = plan.transcode_both(wire, None, &mut out)?;
    assert_eq!(range.start, 1);
    Ok(decode_row(plan, &out[range]))
}

fn msg(desc: &MessageDescriptor, fields: &[(&str, PValue)]) -> DynamicMessage {
    let mut m = DynamicMessage::new(desc.clone());
    for (name, v) in fields {
        m.set_field_by_name(name, v.clone());
    }
    m
}

/// BigQuery NUMERIC/BIGNUMERIC bytes of an integer: value × 10^scale, little-endian two's
/// complement, minimal length (computed with num-bigint).
fn numeric(v: impl Into<BigInt>, scale: u32) -> Json {
    let n: BigInt = v.into() * BigInt::from(10).pow(scale);
    json!({"hex": hex(&n.to_signed_bytes_le())})
}

// ---------------------------------------------------------------------------------------------
// Golden cases

#[test]
fn packed_and_unpacked_repeated_scalars_both_transcode() {
    let p = plan(
        &rec(),
        &table(vec![rep("ri", "INTEGER"), rep("rc", "STRING")]),
    );
    // ri = 18 (tag 0x90 0x01): unpacked 1, then packed [2, -1], then unpacked 3.
    let mut wire = vec![0x90, 0x01, 0x01, 0x92, 0x01, 11, 0x02];
    wire.extend([0xff; 9]);
    wire.push(0x01);
    wire.extend([0x90, 0x01, 0x03]);
    // rc = 20: packed enum numbers [5, 0].
    wire.extend([0xa2, 0x01, 0x02, 0x05, 0x00]);
    assert_eq!(
        run(&p, &wire).unwrap(),
        json!({"ri": [1, 2, -1, 3], "rc": ["BLUE", "RED"]})
    );
}

#[test]
fn columns_match_fields_by_name_and_are_renumbered_in_table_order() {
    let p = plan(
        &rec(),
        &table(vec![col("big_tag", "INTEGER"), col("S", "STRING")]),
    );
    let fields: Vec<(String, i32)> = p
        .descriptor()
        .field
        .iter()
        .map(|f| (f.name().to_owned(), f.number()))
        .collect();
    // The field order follows the writer message; the numbers are the row's own.
    assert_eq!(fields, vec![("S".into(), 1), ("big_tag".into(), 2)]);
    let m = msg(
        &rec(),
        &[
            ("s", PValue::String("x".into())),
            ("big_tag", PValue::I64(-4)),
        ],
    );
    assert_eq!(
        run(&p, &m.encode_to_vec()).unwrap(),
        json!({"S": "x", "big_tag": -4})
    );
}

#[test]
fn wire_fields_the_writer_schema_lacks_are_skipped_unless_unknown_fields_is_error() {
    let d = rec();
    let t = table(vec![col("i64", "INTEGER")]);
    // Field 99 as varint, fixed64, length-delimited, fixed32 and a group with a nested group.
    let mut wire = vec![0x98, 0x06, 0x05];
    wire.extend([0x99, 0x06, 1, 2, 3, 4, 5, 6, 7, 8]);
    wire.extend([0x9a, 0x06, 0x02, 0xde, 0xad]);
    wire.extend([0x9d, 0x06, 1, 2, 3, 4]);
    wire.extend([0x9b, 0x06, 0x0b, 0x08, 0x01, 0x0c, 0x9c, 0x06]);
    wire.extend([0x10, 0x2a]);
    assert_eq!(run(&plan(&d, &t), &wire).unwrap(), json!({"i64": 42}));

    let strict = PlanOptions {
        unknown_fields: UnknownFields::Error,
        ..PlanOptions::default()
    };
    // A declared field without a column is refused when the plan is compiled ...
    let err = Plan::compile_protobuf(&d, &t, &strict).unwrap_err();
    assert!(
        matches!(err, PlanError::UnknownProtoField { ref field } if field == "i32"),
        "{err}"
    );
    // ... and a field the writer schema does not declare when a record carries it.
    let inner = schema(SCHEMA)
        .pool()
        .get_message_by_name("p.Inner")
        .unwrap();
    let p = Plan::compile_protobuf(&inner, &table(inner_cols()), &strict).unwrap();
    let err = p
        .transcode_both(&[0x98, 0x06, 0x05], None, &mut Vec::new())
        .unwrap_err();
    assert!(
        matches!(err, RecordError::ProtoUnknownField { number: 99, .. }),
        "{err}"
    );
    assert_eq!(err.class(), "malformed_protobuf");
}

#[test]
fn proto3_defaults_fill_implicit_fields_and_explicit_ones_stay_null() {
    let p = plan(&rec(), &rec_table());
    let row = run(&p, &[]).unwrap();
    assert_eq!(
        row,
        json!({
            "i32": 0, "I64": 0, "u32": 0, "u64": numeric(0, 9), "s32": 0, "s64": 0, "f32": 0,
            "f64": numeric(0, 38), "sf32": 0, "sf64": 0, "fl": 0.0, "db": 0.0, "b": false,
            "s": "", "by": {"hex": ""}, "c": "RED", "big_tag": 0
        })
    );
    // Present zero values of explicit-presence fields are values, not NULL.
    let m = msg(
        &rec(),
        &[
            ("opt", PValue::I64(0)),
            ("ci", PValue::I64(0)),
            (
                "wd",
                PValue::Message(DynamicMessage::new(
                    schema(SCHEMA)
                        .pool()
                        .get_message_by_name("google.protobuf.DoubleValue")
                        .unwrap(),
                )),
            ),
        ],
    );
    let row = run(&p, &m.encode_to_vec()).unwrap();
    assert_eq!(
        (&row["opt"], &row["ci"], &row["wd"]),
        (&json!(0), &json!(0), &json!(0.0))
    );
}

#[test]
fn proto2_optional_fields_are_null_when_absent_whatever_their_default() {
    let d = schema(PROTO2).pool().get_message_by_name("q.Old").unwrap();
    let t = table(vec![
        col("a", "INTEGER"),
        json!({"name": "b", "type": "STRING", "mode": "REQUIRED"}),
        col("c", "INTEGER"),
        rep("packed", "INTEGER"),
    ]);
    let p = plan(&d, &t);
    let m = msg(
        &d,
        &[
            ("b", PValue::String("x".into())),
            ("packed", PValue::List(vec![PValue::I32(-3)])),
        ],
    );
    assert_eq!(
        run(&p, &m.encode_to_vec()).unwrap(),
        json!({"b": "x", "packed": [-3]})
    );
    // A REQUIRED column whose explicit-presence field is absent is a per-record error.
    let err = run(&p, &msg(&d, &[("a", PValue::I32(1))]).encode_to_vec()).unwrap_err();
    assert!(
        matches!(err, RecordError::NullRequired { ref column } if &**column == "b"),
        "{err}"
    );
    assert_eq!(err.class(), "incompatible_schema");
}

#[test]
fn the_last_occurrence_of_a_scalar_wins_as_in_protobuf() {
    let p = plan(
        &rec(),
        &table(vec![col("i64", "INTEGER"), col("s", "STRING")]),
    );
    let wire = [0x10, 0x01, 0x72, 0x01, b'a', 0x10, 0x02, 0x72, 0x01, b'b'];
    assert_eq!(run(&p, &wire).unwrap(), json!({"i64": 2, "s": "b"}));
}

#[test]
fn what_cannot_be_written_exactly_is_a_record_error() {
    let p = plan(&rec(), &rec_table());
    // Two members of one oneof.
    let err = run(&p, &[0xca, 0x01, 0x00, 0xd0, 0x01, 0x01]).unwrap_err();
    assert!(
        matches!(err, RecordError::ProtoRepeatedField { .. }),
        "{err}"
    );
    // A singular message twice (protobuf would merge them).
    let err = run(&p, &[0xaa, 0x01, 0x00, 0xaa, 0x01, 0x00]).unwrap_err();
    assert!(
        matches!(err, RecordError::ProtoRepeatedField { .. }),
        "{err}"
    );
    // An enum number without a name into a STRING column.
    let err = run(&p, &[0x80, 0x01, 0x03]).unwrap_err();
    assert!(matches!(err, RecordError::Value { .. }), "{err}");
    // Timestamp nanos out of range; a decimal that is not a number.
    let mut negative_nanos = vec![0xda, 0x01, 11, 0x10];
    negative_nanos.extend([0xff; 9]);
    negative_nanos.push(0x01);
    let err = run(&p, &negative_nanos).unwrap_err();
    assert!(err.to_string().contains("nanos"), "{err}");
    let err = run(&p, &[0xf2, 0x01, 0x03, 0x0a, 0x01, b'x']).unwrap_err();
    assert!(matches!(err, RecordError::Value { .. }), "{err}");
    // Invalid UTF-8 in a string column.
    let err = run(&p, &[0x72, 0x01, 0xff]).unwrap_err();
    assert!(matches!(err, RecordError::Value { .. }), "{err}");
}

#[test]
fn scalars_into_the_other_column_types_of_the_mapping() {
    let d = rec();
    // One column per row of docs/mapping.md's Protobuf scalar table not covered above: an
    // integer into FLOAT64, NUMERIC and BIGNUMERIC, a string into BYTES, GEOGRAPHY, JSON and
    // the literal types, bytes into STRING, an enum into INT64.
    let t = table(vec![
        col("i32", "FLOAT"),
        col("u64", "FLOAT"),
        col("i64", "NUMERIC"),
        col("s64", "BIGNUMERIC"),
        col("s", "BYTES"),
        col("by", "STRING"),
        col("c", "INTEGER"),
    ]);
    let p = plan(&d, &t);
    let m = msg(
        &d,
        &[
            ("i32", PValue::I32(-7)),
            ("u64", PValue::U64(u64::MAX)),
            ("i64", PValue::I64(-12)),
            ("s64", PValue::I64(3)),
            ("s", PValue::String("é".into())),
            ("by", PValue::Bytes(b"ok".to_vec().into())),
            ("c", PValue::EnumNumber(5)),
        ],
    );
    assert_eq!(
        run(&p, &m.encode_to_vec()).unwrap(),
        json!({"i32": -7.0, "u64": 18446744073709551615.0, "i64": numeric(-12, 9),
               "s64": numeric(3, 38), "s": {"hex": "c3a9"}, "by": "ok", "c": 5})
    );
    // Bytes that are not UTF-8 into a STRING column.
    let bad = msg(&d, &[("by", PValue::Bytes(vec![0xff].into()))]);
    assert_eq!(
        run(&p, &bad.encode_to_vec()).unwrap_err().class(),
        "out_of_range"
    );
    for ty in [
        "GEOGRAPHY",
        "DATE",
        "TIME",
        "DATETIME",
        "NUMERIC",
        "BIGNUMERIC",
    ] {
        let p = plan(&d, &table(vec![col("s", ty)]));
        let m = msg(&d, &[("s", PValue::String("2024-02-29".into()))]);
        assert_eq!(
            run(&p, &m.encode_to_vec()).unwrap(),
            json!({"s": "2024-02-29"}),
            "a literal into {ty}"
        );
    }
    let p = plan(&d, &table(vec![col("s", "JSON")]));
    let m = msg(&d, &[("s", PValue::String("[1, {\"a\": null}]".into()))]);
    assert_eq!(
        run(&p, &m.encode_to_vec()).unwrap(),
        json!({"s": "[1, {\"a\": null}]"})
    );
    let m = msg(&d, &[("s", PValue::String("{not json".into()))]);
    assert_eq!(
        run(&p, &m.encode_to_vec()).unwrap_err().class(),
        "out_of_range"
    );
}

#[test]
fn malformed_wire_data_is_a_malformed_protobuf_record() {
    let p = plan(&rec(), &rec_table());
    for wire in [
        &[0x10][..],         // a key without its value
        &[0x72, 0x05, b'a'], // a length past the end
        &[0x15, 0x00],       // i64 as fixed32: wrong wire type
        &[0x00, 0x01],       // field number 0
        &[0x0f],             // wire type 7
        &[
            0x98, 0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
        ], // 10-byte overflow
        &[0x9b, 0x06, 0x08, 0x01], // an unterminated group
        &[0x9c, 0x06],       // an end-group without a start
    ] {
        let err = run(&p, wire).unwrap_err();
        assert_eq!(err.class(), "malformed_protobuf", "{wire:02x?}: {err}");
    }
}

#[test]
fn well_known_types_become_bigquery_scalars() {
    let pool = schema(SCHEMA).pool().clone();
    let d = rec();
    let ts = msg(
        &pool
            .get_message_by_name("google.protobuf.Timestamp")
            .unwrap(),
        &[
            ("seconds", PValue::I64(-62_135_596_800)),
            ("nanos", PValue::I32(999)),
        ],
    );
    let dur = msg(
        &pool
            .get_message_by_name("google.protobuf.Duration")
            .unwrap(),
        &[("seconds", PValue::I64(90)), ("nanos", PValue::I32(1_500))],
    );
    let dec = msg(
        &pool.get_message_by_name("google.type.Decimal").unwrap(),
        &[("value", PValue::String("-0.000000001".into()))],
    );
    let m = msg(
        &d,
        &[
            ("ts", PValue::Message(ts)),
            ("dur", PValue::Message(dur)),
            ("dec", PValue::Message(dec)),
        ],
    );
    let p = plan(
        &d,
        &table(vec![
            col("ts", "TIMESTAMP"),
            col("dur", "INTEGER"),
            col("dec", "NUMERIC"),
        ]),
    );
    assert_eq!(
        run(&p, &m.encode_to_vec()).unwrap(),
        json!({"ts": -62_135_596_800_000_000i64, "dur": 90_000_001, "dec": numeric(-1, 0)})
    );
    // A timestamp into a DATETIME column is its UTC civil time.
    let p = plan(&d, &table(vec![col("ts", "DATETIME")]));
    let row = run(&p, &m.encode_to_vec()).unwrap();
    assert_eq!(
        row["ts"],
        json!((((1i64 << 14) | (1 << 10) | (1 << 5)) << 32))
    );
}

#[test]
fn maps_become_repeated_key_value_records_with_defaults_for_missing_parts() {
    let p = plan(&rec(), &rec_table());
    // ms = 24 (map<int32,string>): an entry with only a value, one with only a key.
    let wire = [
        0xc2, 0x01, 0x03, 0x12, 0x01, b'v', 0xc2, 0x01, 0x02, 0x08, 0x07,
    ];
    let row = run(&p, &wire).unwrap();
    assert_eq!(
        row["ms"],
        json!([{"key": 0, "value": "v"}, {"key": 7, "value": ""}])
    );
    // mi = 23 (map<string, Inner>): a message value absent is NULL, present is a record.
    let wire = [
        0xba, 0x01, 0x03, 0x0a, 0x01, b'k', 0xba, 0x01, 0x02, 0x12, 0x00,
    ];
    let row = run(&p, &wire).unwrap();
    assert_eq!(
        row["mi"],
        json!([{"key": "k"}, {"key": "", "value": {"s": "", "n": 0}}])
    );
}

#[test]
fn kafka_metadata_columns_follow_the_message() {
    let mut cols = vec![col("i64", "INTEGER")];
    cols.push(col("kafka_topic", "STRING"));
    cols.push(col("kafka_offset", "INTEGER"));
    let options = PlanOptions {
        metadata: MetadataColumns {
            topic: Some("kafka_topic".into()),
            offset: Some("kafka_offset".into()),
            ..MetadataColumns::default()
        },
        ..PlanOptions::default()
    };
    let p = Plan::compile_protobuf(&rec(), &table(cols), &options).unwrap();
    let meta = KafkaMetadata {
        topic: "orders",
        partition: 3,
        offset: kbq_core::offsets::KafkaOffset(77),
        ..KafkaMetadata::default()
    };
    let mut out = Vec::new();
    let range = p
        .transcode_both(&[0x10, 0x05], Some(&meta), &mut out)
        .unwrap();
    assert_eq!(
        decode_row(&p, &out[range]),
        json!({"i64": 5, "kafka_topic": "orders", "kafka_offset": 77})
    );
}

#[test]
fn a_message_none_of_whose_fields_has_a_column_is_refused_rather_than_written_as_metadata_alone() {
    let pool = schema(SCHEMA).pool().clone();
    let inner = pool.get_message_by_name("p.Inner").unwrap();
    let metadata = MetadataColumns {
        topic: Some("kafka_topic".into()),
        offset: Some("kafka_offset".into()),
        ..MetadataColumns::default()
    };
    let options = PlanOptions {
        unknown_fields: UnknownFields::Ignore,
        metadata,
        ..PlanOptions::default()
    };
    // Columns of p.Rec that none of p.Inner's fields (s, n, ds) names.
    let rec_columns = vec![
        col("i64", "INTEGER"),
        col("b", "BOOLEAN"),
        col("kafka_topic", "STRING"),
        col("kafka_offset", "INTEGER"),
    ];
    let err = Plan::compile_protobuf(&inner, &table(rec_columns.clone()), &options).unwrap_err();
    assert!(
        matches!(&err, PlanError::NoProtoFieldWritten { message } if message == "p.Inner"),
        "{err}"
    );
    assert_eq!(err.class(), "incompatible_schema");
    // One field with a column is enough: the others are dropped as `ignore` says.
    let mut with_s = rec_columns;
    with_s.push(col("s", "STRING"));
    Plan::compile_protobuf(&inner, &table(with_s), &options).unwrap();
    // A table of metadata columns alone keeps nothing of any message, by its own design.
    let only_metadata = table(vec![
        col("kafka_topic", "STRING"),
        col("kafka_offset", "INTEGER"),
    ]);
    Plan::compile_protobuf(&inner, &only_metadata, &options).unwrap();
    // A message without fields has nothing to lose.
    let empty = schema(r#"syntax = "proto3"; package e; message Nothing {}"#)
        .pool()
        .get_message_by_name("e.Nothing")
        .unwrap();
    let rec_table = table(vec![
        col("i64", "INTEGER"),
        col("kafka_topic", "STRING"),
        col("kafka_offset", "INTEGER"),
    ]);
    Plan::compile_protobuf(&empty, &rec_table, &options).unwrap();
}

#[test]
fn the_table_message_is_the_one_named_or_the_only_one_never_the_first_of_several() {
    let several = schema(
        r#"syntax = "proto3"; package shop;
           message Order { message Line { string sku = 1; } int64 id = 1; }
           message Refund { int64 id = 1; string why = 2; }
           message Audit { string who = 1; }"#,
    );
    let err = several.table_message(None).unwrap_err();
    assert!(
        err.contains("3 top-level messages")
            && err.contains("shop.Audit")
            && err.contains("create_table.protobuf_message"),
        "{err}"
    );
    for name in ["shop.Refund", "shop.Audit", "shop.Order.Line"] {
        assert_eq!(several.table_message(Some(name)).unwrap().full_name(), name);
    }
    let err = several.table_message(Some("shop.Nope")).unwrap_err();
    assert!(err.contains("no message shop.Nope"), "{err}");
    // A message of an imported file is not one the records' index can name.
    let err = schema(SCHEMA)
        .table_message(Some("google.protobuf.Timestamp"))
        .unwrap_err();
    assert!(
        err.contains("no message google.protobuf.Timestamp"),
        "{err}"
    );
    let one = schema(PROTO2);
    assert_eq!(one.table_message(None).unwrap().full_name(), "q.Old");
}

#[test]
fn columns_that_cannot_hold_a_field_are_plan_errors_naming_both() {
    let d = rec();
    for (columns, needle) in [
        (vec![col("s", "INTEGER")], "string"),
        (vec![col("ri", "INTEGER")], "repeated int32"),
        (vec![rep("i64", "INTEGER")], "int64"),
        (vec![col("ts", "DATE")], "google.protobuf.Timestamp"),
        (vec![col("inner", "STRING")], "p.Inner"),
    ] {
        let err = Plan::compile_protobuf(&d, &table(columns), &PlanOptions::default()).unwrap_err();
        assert!(
            matches!(err, PlanError::ProtoIncompatible { .. }) && err.to_string().contains(needle),
            "{err}"
        );
    }
    // A REQUIRED column no field fills fails every record, as for Avro.
    let t = table(vec![
        col("i64", "INTEGER"),
        json!({"name": "nope", "type": "STRING", "mode": "REQUIRED"}),
    ]);
    let p = plan(&d, &t);
    assert!(matches!(
        p.transcode_both(&[], None, &mut Vec::new()),
        Err(RecordError::MissingRequired { .. })
    ));
}

#[test]
fn a_failed_record_leaves_the_batch_buffer_as_it_was() {
    let p = plan(&rec(), &rec_table());
    let mut out = vec![1, 2, 3];
    assert!(
        p.transcode_both(&[0x08, 0x01, 0x72, 0x01, 0xff], None, &mut out)
            .is_err()
    );
    assert_eq!(out, vec![1, 2, 3]);
}

// ---------------------------------------------------------------------------------------------
// Property test and fuzzer

fn env_u64(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn random_string(rng: &mut StdRng) -> String {
    let alphabet = ['a', 'Z', '0', ' ', 'é', 'ß', '"', '\\', '\n', '😀'];
    (0..rng.random_range(0..6))
        .map(|_| alphabet[rng.random_range(0..alphabet.len())])
        .collect()
}

fn random_inner(pool: &DescriptorPool, rng: &mut StdRng) -> DynamicMessage {
    let d = pool.get_message_by_name("p.Inner").unwrap();
    let mut m = DynamicMessage::new(d);
    if rng.random_bool(0.7) {
        m.set_field_by_name("s", PValue::String(random_string(rng)));
    }
    if rng.random_bool(0.7) {
        m.set_field_by_name("n", PValue::I64(rng.random()));
    }
    let ds: Vec<PValue> = (0..rng.random_range(0..3))
        .map(|_| PValue::F64(rng.random_range(-1e9..1e9)))
        .collect();
    m.set_field_by_name("ds", PValue::List(ds));
    m
}

fn random_rec(pool: &DescriptorPool, rng: &mut StdRng) -> DynamicMessage {
    let d = pool.get_message_by_name("p.Rec").unwrap();
    let mut m = DynamicMessage::new(d.clone());
    let colors = [0, 1, 5];
    for fd in d.fields() {
        if !rng.random_bool(0.6) {
            continue;
        }
        let v = match fd.name() {
            "i32" | "s32" | "sf32" => PValue::I32(rng.random()),
            "i64" | "s64" | "sf64" | "opt" | "ci" | "big_tag" => PValue::I64(rng.random()),
            "u32" | "f32" => PValue::U32(rng.random()),
            "u64" | "f64" => PValue::U64(rng.random()),
            "fl" => PValue::F32(rng.random_range(-1e6..1e6)),
            "db" => PValue::F64(rng.random_range(-1e300..1e300)),
            "b" => PValue::Bool(rng.random()),
            "s" | "cs" => PValue::String(random_string(rng)),
            "by" => PValue::Bytes(
                (0..rng.random_range(0..5))
                    .map(|_| rng.random::<u8>())
                    .collect::<Vec<_>>()
                    .into(),
            ),
            "c" => PValue::EnumNumber(colors[rng.random_range(0..3)]),
            "ri" => PValue::List(
                (0..rng.random_range(0..4))
                    .map(|_| PValue::I32(rng.random()))
                    .collect(),
            ),
            "rs" => PValue::List(
                (0..rng.random_range(0..4))
                    .map(|_| PValue::String(random_string(rng)))
                    .collect(),
            ),
            "rc" => PValue::List(
                (0..rng.random_range(0..4))
                    .map(|_| PValue::EnumNumber(colors[rng.random_range(0..3)]))
                    .collect(),
            ),
            "inner" => PValue::Message(random_inner(pool, rng)),
            "inners" => PValue::List(
                (0..rng.random_range(0..3))
                    .map(|_| PValue::Message(random_inner(pool, rng)))
                    .collect(),
            ),
            "mi" => PValue::Map(
                (0..rng.random_range(0..3))
                    .map(|_| {
                        (
                            MapKey::String(random_string(rng)),
                            PValue::Message(random_inner(pool, rng)),
                        )
                    })
                    .collect(),
            ),
            "ms" => PValue::Map(
                (0..rng.random_range(0..3))
                    .map(|_| {
                        (
                            MapKey::I32(rng.random()),
                            PValue::String(random_string(rng)),
                        )
                    })
                    .collect(),
            ),
            "ts" => {
                let t = pool
                    .get_message_by_name("google.protobuf.Timestamp")
                    .unwrap();
                PValue::Message(msg(
                    &t,
                    &[
                        (
                            "seconds",
                            PValue::I64(rng.random_range(-62_135_596_800..253_402_300_799)),
                        ),
                        ("nanos", PValue::I32(rng.random_range(0..1_000_000_000))),
                    ],
                ))
            }
            "wd" => {
                let t = pool
                    .get_message_by_name("google.protobuf.DoubleValue")
                    .unwrap();
                PValue::Message(msg(
                    &t,
                    &[("value", PValue::F64(rng.random_range(-1.0..1.0)))],
                ))
            }
            "dur" => {
                let t = pool
                    .get_message_by_name("google.protobuf.Duration")
                    .unwrap();
                let s: i64 = rng.random_range(-1_000_000_000..1_000_000_000);
                let n: i32 = rng.random_range(0..1_000_000_000);
                PValue::Message(msg(
                    &t,
                    &[
                        ("seconds", PValue::I64(s)),
                        ("nanos", PValue::I32(if s < 0 { -n } else { n })),
                    ],
                ))
            }
            "dec" => {
                let t = pool.get_message_by_name("google.type.Decimal").unwrap();
                let v: i64 = rng.random_range(-1_000_000_000_000..1_000_000_000_000);
                PValue::Message(msg(&t, &[("value", PValue::String(format!("{v}e-3")))]))
            }
            other => panic!("no generator for {other}"),
        };
        m.set_field(&fd, v);
    }
    m
}

/// The row the sink must write for `m`, computed from prost-reflect's reading of the message.
fn expected(m: &DynamicMessage) -> Json {
    let mut obj = Map::new();
    let d = m.descriptor();
    for fd in d.fields() {
        let present = m.has_field(&fd);
        let implicit = !fd.supports_presence() && !fd.is_list() && !fd.is_map();
        if !present && !implicit {
            continue;
        }
        let v = m.get_field(&fd);
        let name = if fd.name() == "i64" { "I64" } else { fd.name() };
        let value = match (fd.name(), &*v) {
            ("u64", PValue::U64(u)) => numeric(*u, 9),
            ("f64", PValue::U64(u)) => numeric(*u, 38),
            ("c", PValue::EnumNumber(n)) => json!(enum_name(*n)),
            ("rc", PValue::List(l)) => Json::Array(
                l.iter()
                    .map(|e| json!(enum_name(e.as_enum_number().unwrap())))
                    .collect(),
            ),
            ("fl", PValue::F32(f)) => json!(*f as f64),
            ("i32" | "s32" | "sf32", PValue::I32(i)) => json!(*i as i64),
            ("u32" | "f32", PValue::U32(i)) => json!(*i as i64),
            ("inner", PValue::Message(inner)) => inner_expected(inner),
            ("inners", PValue::List(l)) => Json::Array(
                l.iter()
                    .map(|e| inner_expected(e.as_message().unwrap()))
                    .collect(),
            ),
            ("mi", PValue::Map(map)) => {
                let mut entries: Vec<Json> = map
                    .iter()
                    .map(|(k, v)| {
                        json!({"key": k.as_str().unwrap(), "value": inner_expected(v.as_message().unwrap())})
                    })
                    .collect();
                entries.sort_by_key(|e| e.to_string());
                Json::Array(entries)
            }
            ("ms", PValue::Map(map)) => {
                let mut entries: Vec<Json> = map
                    .iter()
                    .map(|(k, v)| json!({"key": k.as_i32().unwrap() as i64, "value": v.as_str().unwrap()}))
                    .collect();
                entries.sort_by_key(|e| e.to_string());
                Json::Array(entries)
            }
            ("ts", PValue::Message(t)) => {
                let s = t.get_field_by_name("seconds").unwrap().as_i64().unwrap();
                let n = t.get_field_by_name("nanos").unwrap().as_i32().unwrap() as i64;
                json!(s * 1_000_000 + n / 1000)
            }
            ("dur", PValue::Message(t)) => {
                let s = t.get_field_by_name("seconds").unwrap().as_i64().unwrap();
                let n = t.get_field_by_name("nanos").unwrap().as_i32().unwrap() as i64;
                json!(s * 1_000_000 + n / 1000)
            }
            ("wd", PValue::Message(t)) => to_json(&t.get_field_by_name("value").unwrap()),
            ("dec", PValue::Message(t)) => {
                let text = t
                    .get_field_by_name("value")
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned();
                let thousandths: i64 = text.trim_end_matches("e-3").parse().unwrap();
                // value / 1000 at scale 9 = value × 10^6.
                numeric(thousandths, 6)
            }
            (_, PValue::List(l)) if l.is_empty() => continue,
            (_, PValue::Map(map)) if map.is_empty() => continue,
            (_, other) => to_json(other),
        };
        obj.insert(name.to_owned(), value);
    }
    Json::Object(obj)
}

fn inner_expected(m: &DynamicMessage) -> Json {
    let mut obj = Map::new();
    obj.insert("s".into(), to_json(&m.get_field_by_name("s").unwrap()));
    obj.insert("n".into(), to_json(&m.get_field_by_name("n").unwrap()));
    let ds = m.get_field_by_name("ds").unwrap();
    if !ds.as_list().unwrap().is_empty() {
        obj.insert("ds".into(), to_json(&ds));
    }
    Json::Object(obj)
}

fn enum_name(n: i32) -> &'static str {
    match n {
        0 => "RED",
        1 => "GREEN",
        5 => "BLUE",
        _ => unreachable!(),
    }
}

fn sort_maps(row: &mut Json) {
    for key in ["mi", "ms"] {
        if let Some(Json::Array(entries)) = row.get_mut(key) {
            entries.sort_by_key(|e| e.to_string());
        }
    }
}

/// The message's fields encoded one by one and concatenated in a random order: protobuf allows
/// fields in any order, and the row must not depend on it.
fn shuffled_encoding(m: &DynamicMessage, rng: &mut StdRng) -> Vec<u8> {
    let mut chunks: Vec<Vec<u8>> = m
        .fields()
        .map(|(fd, v)| {
            let mut one = DynamicMessage::new(m.descriptor());
            one.set_field(&fd, v.clone());
            one.encode_to_vec()
        })
        .collect();
    for i in (1..chunks.len()).rev() {
        chunks.swap(i, rng.random_range(0..=i));
    }
    chunks.concat()
}

#[test]
fn random_messages_in_any_field_order_transcode_to_what_prost_reflect_reads() {
    let seed = env_u64("PROTOBUF_PROPS_SEED", 0x5eed_0001);
    let cases = seed_cases();
    eprintln!("protobuf property test: seed {seed}, {cases} cases (PROTOBUF_PROPS_SEED replays)");
    let s = schema(SCHEMA);
    let pool = s.pool().clone();
    let p = plan(
        &s.message(&MessagePath::new(&[1]).unwrap()).unwrap(),
        &rec_table(),
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    for case in 0..cases {
        let m = random_rec(&pool, &mut rng);
        let wire = if case % 2 == 0 {
            m.encode_to_vec()
        } else {
            shuffled_encoding(&m, &mut rng)
        };
        out.clear();
        let range = p
            .transcode_both(&wire, None, &mut out)
            .unwrap_or_else(|e| panic!("case {case}: {e}\n{m:?}"));
        let mut row = decode_row(&p, &out[range]);
        sort_maps(&mut row);
        assert_eq!(row, expected(&m), "case {case}: {m:?}");
    }
}

fn seed_cases() -> u64 {
    env_u64("PROTOBUF_PROPS_CASES", 2000)
}

/// Also the Protobuf fuzz case (`support/proto_case.rs`, the coverage-guided target's) on the
/// same inputs: the executor against the reference, the batch left as it was on an error.
#[test]
fn mutated_messages_never_panic_and_every_row_written_decodes() {
    let seed = env_u64("PROTOBUF_FUZZ_SEED", 0xf022_0001);
    let iterations = env_u64("PROTOBUF_FUZZ_ITERATIONS", 20_000);
    eprintln!("protobuf fuzz: seed {seed}, {iterations} iterations (PROTOBUF_FUZZ_SEED replays)");
    let s = schema(SCHEMA);
    let pool = s.pool().clone();
    let p = Arc::new(plan(
        &pool.get_message_by_name("p.Rec").unwrap(),
        &rec_table(),
    ));
    let row_pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(p.descriptor())],
    })
    .unwrap();
    let row_desc = row_pool.get_message_by_name("Row").unwrap();
    let case_plan = proto_case::plan(&proto_case::table());
    let mut rng = StdRng::seed_from_u64(seed);
    let seeds: Vec<Vec<u8>> = (0..32)
        .map(|_| random_rec(&pool, &mut rng).encode_to_vec())
        .collect();
    let (mut ok, mut refused) = (0u64, 0u64);
    let mut out = Vec::new();
    for _ in 0..iterations {
        let mut input = seeds[rng.random_range(0..seeds.len())].clone();
        for _ in 0..rng.random_range(1..4) {
            match rng.random_range(0..4) {
                0 if !input.is_empty() => {
                    let i = rng.random_range(0..input.len());
                    input[i] ^= 1 << rng.random_range(0..8);
                }
                1 if !input.is_empty() => {
                    let i = rng.random_range(0..input.len());
                    input[i] = rng.random();
                }
                2 => {
                    let i = rng.random_range(0..=input.len());
                    input.insert(i, rng.random());
                }
                _ => {
                    let n = rng.random_range(0..=input.len());
                    input.truncate(n);
                }
            }
        }
        // The fuzz case's message (`support/proto_case.rs`) declares the same fields and more;
        // its REQUIRED record is added to each input.
        let mut with_req = input.clone();
        with_req.extend([0xba, 0x02, 0x00]);
        let mut batch = vec![0xaa; input.len() % 3];
        case::transcode_checked(&case_plan, &with_req, &mut batch);
        out.clear();
        match p.transcode_both(&input, None, &mut out) {
            Ok(range) => {
                DynamicMessage::decode(row_desc.clone(), &out[range])
                    .unwrap_or_else(|e| panic!("row of {input:02x?} does not decode: {e}"));
                ok += 1;
            }
            Err(_) => {
                assert!(out.is_empty(), "a refused record left bytes behind");
                refused += 1;
            }
        }
    }
    assert!(ok > 0 && refused > 0, "ok {ok}, refused {refused}");
}
