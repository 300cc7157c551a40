//! Change events in Avro (docs/cdc.md): where the row is, what the record does, and the rows the
//! CDC plans write, read back by the emulator's own row codec (the side BigQuery plays).

use apache_avro::Schema;
use apache_avro::types::Value;
use kafka_bigquery_sink::tables::cdc_plans::with_pseudo_columns;
use kbq_core::table_schema::TableSchema;
use kbq_emulator::cdc::Sequence;
use kbq_emulator::rows::RowCodec;
use kbq_transcode::change::{
    ChangeFormat, ChangeKind, ChangeShape, NotAChange, append_change, key_row_schema, renumber,
    sequence_number,
};
use kbq_transcode::{AvroSchema, Plan, PlanOptions};

const ENVELOPE: &str = r#"{"type":"record","name":"Envelope","namespace":"db.inv.customers","fields":[
  {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
    {"name":"id","type":"long"},
    {"name":"name","type":"string"},
    {"name":"email","type":["null","string"],"default":null}]}],"default":null},
  {"name":"after","type":["null","Value"],"default":null},
  {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium","fields":[
    {"name":"connector","type":"string"},
    {"name":"lsn","type":["null","long"],"default":null}]}},
  {"name":"op","type":"string"},
  {"name":"ts_ms","type":["null","long"],"default":null}]}"#;

const KEY: &str = r#"{"type":"record","name":"Key","namespace":"db.inv.customers","fields":[
  {"name":"id","type":"long"}]}"#;

/// Avro binary of `value` (no framing), written by apache-avro.
fn datum(schema: &Schema, value: Value) -> Result<Vec<u8>, apache_avro::Error> {
    apache_avro::writer::datum::GenericDatumWriter::builder(schema)
        .build()?
        .write_value_to_vec(value)
}

fn table() -> TableSchema {
    serde_json::from_str(
        r#"{"fields":[
        {"name":"id","type":"INTEGER","mode":"REQUIRED"},
        {"name":"name","type":"STRING","mode":"REQUIRED"},
        {"name":"email","type":"STRING"}]}"#,
    )
    .unwrap()
}

fn row(id: i64, name: &str) -> Value {
    Value::Union(
        1,
        Box::new(Value::Record(vec![
            ("id".into(), Value::Long(id)),
            ("name".into(), Value::String(name.into())),
            ("email".into(), Value::Union(0, Box::new(Value::Null))),
        ])),
    )
}

fn null() -> Value {
    Value::Union(0, Box::new(Value::Null))
}

fn envelope(op: &str, before: Value, after: Value, lsn: Option<i64>) -> Vec<u8> {
    let schema = Schema::parse_str(ENVELOPE).unwrap();
    let lsn = match lsn {
        Some(l) => Value::Union(1, Box::new(Value::Long(l))),
        None => null(),
    };
    let value = Value::Record(vec![
        ("before".into(), before),
        ("after".into(), after),
        (
            "source".into(),
            Value::Record(vec![
                ("connector".into(), Value::String("postgresql".into())),
                ("lsn".into(), lsn),
            ]),
        ),
        ("op".into(), Value::String(op.into())),
        ("ts_ms".into(), Value::Union(1, Box::new(Value::Long(1)))),
    ]);
    datum(&schema, value).unwrap()
}

fn shape(format: ChangeFormat, source: Option<&str>) -> (ChangeShape, Plan) {
    let (shape, row) = ChangeShape::new(&AvroSchema::parse(ENVELOPE).unwrap(), &format, source)
        .expect("a debezium envelope");
    let plan = Plan::compile(
        &row,
        &with_pseudo_columns(&table()),
        &PlanOptions::default(),
    )
    .expect("the row fits the table");
    (shape, plan)
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

fn write(shape: &ChangeShape, plan: &Plan, body: &[u8], offset: i64) -> (Vec<u8>, ChangeKind) {
    let located = shape.locate(body).expect("a change");
    let sequence = sequence_number(3, located.source.unwrap_or(0), offset);
    let mut avro = body[located.row.clone().expect("a row")].to_vec();
    append_change(&mut avro, located.kind, &sequence);
    let mut out = Vec::new();
    let range = plan.transcode(&avro, None, &mut out).expect("transcodes");
    (out[range].to_vec(), located.kind)
}

#[test]
fn debezium_creates_updates_and_snapshot_reads_upsert_the_after_row() {
    let (shape, plan) = shape(ChangeFormat::Debezium, None);
    for op in ["c", "u", "r"] {
        let body = envelope(op, row(1, "old"), row(1, "new"), None);
        let (written, kind) = write(&shape, &plan, &body, 0x2a);
        assert_eq!(kind, ChangeKind::Upsert);
        let (cells, change, sequence) = as_bigquery_reads(&plan, &written);
        assert_eq!(cells["f"][1]["v"], "new", "{op}: the after row");
        assert_eq!(change, "UPSERT");
        assert_eq!(sequence, "3/0/2A");
    }
}

#[test]
fn debezium_deletes_carry_the_before_row_and_truncates_are_not_row_changes() {
    let (shape, plan) = shape(ChangeFormat::Debezium, None);
    let body = envelope("d", row(7, "gone"), null(), None);
    let (written, kind) = write(&shape, &plan, &body, 9);
    assert_eq!(kind, ChangeKind::Delete);
    let (cells, change, _) = as_bigquery_reads(&plan, &written);
    assert_eq!(cells["f"][0]["v"], "7");
    assert_eq!(change, "DELETE");
    // A delete without a before row leaves the key to the Kafka key.
    let keyless = shape.locate(&envelope("d", null(), null(), None)).unwrap();
    assert_eq!((keyless.row, keyless.kind), (None, ChangeKind::Delete));
    for (op, class) in [
        ("t", "cdc_operation"),
        ("m", "cdc_operation"),
        ("x", "cdc_operation"),
    ] {
        let e = shape
            .locate(&envelope(op, null(), null(), None))
            .unwrap_err();
        assert_eq!(e.class(), class, "{op}");
        assert!(e.to_string().contains(&format!("{op:?}")), "{e}");
    }
    let e = shape
        .locate(&envelope("c", null(), null(), None))
        .unwrap_err();
    assert!(matches!(e, NotAChange::NoRow { .. }), "{e}");
    assert_eq!(
        shape.locate(&[0x02, 0xff]).unwrap_err().class(),
        "malformed_avro"
    );
}

#[test]
fn the_source_position_orders_changes_ahead_of_the_offset() {
    let (shape, plan) = shape(ChangeFormat::Debezium, Some("source.lsn"));
    let body = envelope("u", null(), row(1, "x"), Some(0x1234));
    let (written, _) = write(&shape, &plan, &body, 5);
    let (_, _, sequence) = as_bigquery_reads(&plan, &written);
    assert_eq!(sequence, "3/1234/5");
    let e = shape
        .locate(&envelope("u", null(), row(1, "x"), None))
        .unwrap_err();
    assert_eq!(e.class(), "cdc_no_sequence_source");
    assert!(
        ChangeShape::new(
            &AvroSchema::parse(ENVELOPE).unwrap(),
            &ChangeFormat::Debezium,
            Some("source.connector")
        )
        .is_err(),
        "a string is no position"
    );
}

#[test]
fn sequence_numbers_grow_with_the_offset_and_the_epoch_as_bigquery_compares_them() {
    let parse = |s: String| Sequence::parse(&s).expect("a valid sequence number");
    assert!(parse(sequence_number(0, 0, 16)) > parse(sequence_number(0, 0, 15)));
    assert!(parse(sequence_number(1, 0, 0)) > parse(sequence_number(0, 0, i64::MAX)));
    assert!(parse(sequence_number(0, 2, 0)) > parse(sequence_number(0, 1, 99)));
    assert_eq!(
        sequence_number(u64::MAX, u64::MAX, i64::MAX),
        "FFFFFFFFFFFFFFFF/FFFFFFFFFFFFFFFF/7FFFFFFFFFFFFFFF"
    );
}

const UNWRAPPED: &str = r#"{"type":"record","name":"Value","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"},
  {"name":"__op","type":["null","string"],"default":null},
  {"name":"__deleted","type":["null","string"],"default":null}]}"#;

#[test]
fn unwrapped_records_delete_on_deleted_true_or_op_d() {
    let schema = AvroSchema::parse(UNWRAPPED).unwrap();
    let (shape, _) = ChangeShape::new(&schema, &ChangeFormat::Unwrapped, None).unwrap();
    let avro = Schema::parse_str(UNWRAPPED).unwrap();
    let opt = |v: Option<&str>| match v {
        Some(s) => Value::Union(1, Box::new(Value::String(s.into()))),
        None => null(),
    };
    let encode = |op: Option<&str>, deleted: Option<&str>| {
        datum(
            &avro,
            Value::Record(vec![
                ("id".into(), Value::Long(1)),
                ("name".into(), Value::String("n".into())),
                ("__op".into(), opt(op)),
                ("__deleted".into(), opt(deleted)),
            ]),
        )
        .unwrap()
    };
    let kind = |op, deleted| shape.locate(&encode(op, deleted)).map(|l| l.kind);
    assert_eq!(kind(Some("c"), Some("false")), Ok(ChangeKind::Upsert));
    assert_eq!(kind(None, None), Ok(ChangeKind::Upsert));
    assert_eq!(kind(Some("u"), Some("true")), Ok(ChangeKind::Delete));
    assert_eq!(kind(Some("d"), None), Ok(ChangeKind::Delete));
    assert!(kind(Some("t"), None).is_err());
    let whole = shape.locate(&encode(None, None)).unwrap().row.unwrap();
    assert_eq!(whole, 0..encode(None, None).len(), "the row is the record");
}

#[test]
fn plain_records_name_their_change_in_a_field() {
    let avsc = r#"{"type":"record","name":"R","fields":[
      {"name":"id","type":"long"},{"name":"kind","type":{"type":"enum","name":"K","symbols":["INSERT","UPDATE","DELETE","MERGE"]}}]}"#;
    let schema = AvroSchema::parse(avsc).unwrap();
    let format = ChangeFormat::Plain {
        field: "kind".into(),
    };
    let (shape, _) = ChangeShape::new(&schema, &format, None).unwrap();
    let avro = Schema::parse_str(avsc).unwrap();
    let kind = |symbol: u32, name: &str| {
        let body = datum(
            &avro,
            Value::Record(vec![
                ("id".into(), Value::Long(1)),
                ("kind".into(), Value::Enum(symbol, name.into())),
            ]),
        )
        .unwrap();
        shape.locate(&body).map(|l| l.kind)
    };
    assert_eq!(kind(0, "INSERT"), Ok(ChangeKind::Upsert));
    assert_eq!(kind(1, "UPDATE"), Ok(ChangeKind::Upsert));
    assert_eq!(kind(2, "DELETE"), Ok(ChangeKind::Delete));
    assert_eq!(kind(3, "MERGE").unwrap_err().class(), "cdc_change_type");
    let missing = ChangeFormat::Plain {
        field: "nope".into(),
    };
    assert!(ChangeShape::new(&schema, &missing, None).is_err());
}

#[test]
fn a_delete_by_kafka_key_travels_in_the_value_rows_descriptor() {
    let (_, value_plan) = shape(ChangeFormat::Debezium, None);
    let relaxed: TableSchema = serde_json::from_str(
        r#"{"fields":[{"name":"id","type":"INTEGER"},{"name":"name","type":"STRING"},{"name":"email","type":"STRING"}]}"#,
    )
    .unwrap();
    let key_plan = Plan::compile(
        &key_row_schema(&AvroSchema::parse(KEY).unwrap()),
        &with_pseudo_columns(&relaxed),
        &PlanOptions::default(),
    )
    .unwrap();
    let key_schema = Schema::parse_str(KEY).unwrap();
    let mut avro = datum(
        &key_schema,
        Value::Record(vec![("id".into(), Value::Long(42))]),
    )
    .unwrap();
    append_change(&mut avro, ChangeKind::Delete, "0/0/7");
    let mut key_row = Vec::new();
    key_plan.transcode(&avro, None, &mut key_row).unwrap();
    let mut row = Vec::new();
    renumber(
        &key_row,
        key_plan.descriptor(),
        value_plan.descriptor(),
        &mut row,
    )
    .expect("every key column is in the value descriptor");
    assert_ne!(
        row, key_row,
        "the field numbers differ between the two plans"
    );
    let (cells, change, sequence) = as_bigquery_reads(&value_plan, &row);
    assert_eq!(cells["f"][0]["v"], "42");
    assert!(cells["f"][1]["v"].is_null());
    assert_eq!((change.as_str(), sequence.as_str()), ("DELETE", "0/0/7"));
    // A column the value rows do not have: no renumbering (the writer switches schema then).
    let other = Plan::compile(
        &key_row_schema(&AvroSchema::parse(KEY).unwrap()),
        &with_pseudo_columns(&relaxed),
        &PlanOptions::default(),
    )
    .unwrap();
    let mut bare = other.descriptor().clone();
    bare.field.retain(|f| f.name() == "_CHANGE_TYPE");
    let mut out = Vec::new();
    assert!(renumber(&key_row, key_plan.descriptor(), &bare, &mut out).is_none());
    assert!(out.is_empty());
}
