//! Kafka Connect's and Debezium's named types in Avro, with the schemas exactly as Confluent's
//! `AvroData.fromConnectSchema` writes them (confluentinc/schema-registry,
//! `avro-data/src/main/java/io/confluent/connect/avro/AvroData.java`): the Connect schema's name
//! in `connect.name`, its version in `connect.version`, its parameters as strings in
//! `connect.parameters`; Connect's Decimal, Date, Time and Timestamp also with Avro's own
//! `logicalType` (a Decimal's `precision` 64 when the parameters have none); an optional value
//! as `["null", T]` with default null. The Debezium schemas are the ones its builders declare
//! (debezium/debezium, `debezium-connector-common/src/main/java/io/debezium/{time,data}/*.java`,
//! `.../schema/SchemaFactory.java`).
//!
//! One golden row per (named type, column type) of docs/mapping.md's "Kafka Connect and Debezium
//! types in Avro", each also run as the optional `["null", T]` AvroData writes for a nullable
//! column; then the columns each type cannot fill (the plan refuses them, naming the column), the
//! values that cannot be written exactly (a per-record error with its reason), and the table
//! `create_table` derives.

use crate::support::differential::Both;
use kbq_core::table_schema::{FieldType, Mode, TableSchema};
use kbq_transcode::{
    AvroSchema, DeriveOptions, Plan, PlanError, PlanOptions, RecordError, file_for,
    table_schema_from_avro,
};
use num_bigint::BigInt;
use prost_reflect::{DescriptorPool, DynamicMessage, ReflectMessage, Value as PValue};
use prost_types::FileDescriptorSet;

// --- the schemas AvroData writes ----------------------------------------------------------------

/// A Debezium or Connect type on a primitive Avro type: `connect.version` then `connect.name`,
/// in AvroData's order (version, parameters, name), without Avro's `logicalType`.
fn named(avro: &str, name: &str) -> String {
    format!(r#"{{"type":"{avro}","connect.version":1,"connect.name":"{name}"}}"#)
}

fn named_with(avro: &str, name: &str, parameters: &str) -> String {
    format!(
        r#"{{"type":"{avro}","connect.version":1,"connect.parameters":{parameters},"connect.name":"{name}"}}"#
    )
}

/// Connect's Date, Time and Timestamp: the name and Avro's own logical type.
fn connect_logical(avro: &str, name: &str, logical: &str) -> String {
    format!(
        r#"{{"type":"{avro}","connect.version":1,"connect.name":"org.apache.kafka.connect.data.{name}","logicalType":"{logical}"}}"#
    )
}

/// Connect's Decimal as AvroData writes it: `scale` and `precision` (the parameter
/// `connect.decimal.precision`, or 64), the parameters, the name, then `logicalType: decimal`.
fn connect_decimal(scale: u32, precision: Option<u32>) -> String {
    let parameters = match precision {
        Some(p) => format!(r#"{{"scale":"{scale}","connect.decimal.precision":"{p}"}}"#),
        None => format!(r#"{{"scale":"{scale}"}}"#),
    };
    format!(
        r#"{{"type":"bytes","scale":{scale},"precision":{},"connect.version":1,"connect.parameters":{parameters},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}}"#,
        precision.unwrap_or(64)
    )
}

/// Debezium's `VariableScaleDecimal` struct: a record named by its Connect name, fields `scale`
/// then `value`, its doc in `connect.doc`.
const VARIABLE_SCALE_DECIMAL: &str = r#"{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],"connect.doc":"Variable scaled decimal","connect.version":1,"connect.name":"io.debezium.data.VariableScaleDecimal"}"#;

/// Debezium's `Geometry` struct (`wkb`, optional `srid`, optional `extensions` map), as AvroData
/// writes optional fields: `["null", T]` with default null.
const GEOMETRY: &str = r#"{"type":"record","name":"Geometry","namespace":"io.debezium.data.geometry","fields":[{"name":"wkb","type":"bytes"},{"name":"srid","type":["null","int"],"default":null},{"name":"extensions","type":["null",{"type":"map","values":"string"}],"default":null}],"connect.doc":"Geometry","connect.version":1,"connect.name":"io.debezium.data.geometry.Geometry"}"#;

/// Debezium's `Geography` struct: `wkb`, optional `srid`.
const GEOGRAPHY: &str = r#"{"type":"record","name":"Geography","namespace":"io.debezium.data.geometry","fields":[{"name":"wkb","type":"bytes"},{"name":"srid","type":["null","int"],"default":null}],"connect.doc":"Geography","connect.version":1,"connect.name":"io.debezium.data.geometry.Geography"}"#;

/// Debezium's `Point` struct: `x`, `y`, optional `wkb`, optional `srid`.
const POINT: &str = r#"{"type":"record","name":"Point","namespace":"io.debezium.data.geometry","fields":[{"name":"x","type":"double"},{"name":"y","type":"double"},{"name":"wkb","type":["null","bytes"],"default":null},{"name":"srid","type":["null","int"],"default":null}],"connect.doc":"Geometry (POINT)","connect.version":1,"connect.name":"io.debezium.data.geometry.Point"}"#;

/// The WKB of `POINT(1 2)`.
const WKB_POINT: [u8; 21] = [
    0x01, 0x01, 0x00, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0x00, 0x40,
];

// --- Avro binary, written by hand so the bytes are exactly the datum's -------------------------

fn long(v: i64) -> Vec<u8> {
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = Vec::new();
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
    out
}

fn bytes(b: &[u8]) -> Vec<u8> {
    let mut out = long(b.len() as i64);
    out.extend_from_slice(b);
    out
}

fn string(s: &str) -> Vec<u8> {
    bytes(s.as_bytes())
}

/// A geometry: `wkb`, `srid` 4326, no extensions.
fn geometry(wkb: &[u8]) -> Vec<u8> {
    let mut out = bytes(wkb);
    out.extend(long(1));
    out.extend(long(4326));
    out.extend(long(0));
    out
}

/// A geography: `wkb`, no `srid`.
fn geography(wkb: &[u8]) -> Vec<u8> {
    let mut out = bytes(wkb);
    out.extend(long(0));
    out
}

/// A point: `x`, `y`, its `wkb`, no `srid`.
fn point(x: f64, y: f64, wkb: &[u8]) -> Vec<u8> {
    let mut out = x.to_le_bytes().to_vec();
    out.extend(y.to_le_bytes());
    out.extend(long(1));
    out.extend(bytes(wkb));
    out.extend(long(0));
    out
}

fn variable_scale(scale: i64, unscaled: &[u8]) -> Vec<u8> {
    let mut out = long(scale);
    out.extend(bytes(unscaled));
    out
}

// --- running one field --------------------------------------------------------------------------

fn record(field_type: &str) -> String {
    format!(
        r#"{{"type":"record","name":"Value","namespace":"dbserver1.public.t","fields":[{{"name":"v","type":{field_type}}}],"connect.name":"dbserver1.public.t.Value"}}"#
    )
}

/// The optional form of a field type: `["null", T]` with default null.
fn optional_record(field_type: &str) -> String {
    format!(
        r#"{{"type":"record","name":"Value","namespace":"dbserver1.public.t","fields":[{{"name":"v","type":["null",{field_type}],"default":null}}],"connect.name":"dbserver1.public.t.Value"}}"#
    )
}

fn table(column: &str) -> TableSchema {
    serde_json::from_str(&format!(
        r#"{{"fields":[{{"name":"v","type":"{column}","mode":"NULLABLE"}}]}}"#
    ))
    .unwrap()
}

fn compile(avsc: &str, column: &str) -> Result<Plan, PlanError> {
    Plan::compile(
        &AvroSchema::parse(avsc).unwrap(),
        &table(column),
        &PlanOptions::default(),
    )
}

fn run(plan: &Plan, datum: &[u8]) -> Result<Option<PValue>, RecordError> {
    let mut out = Vec::new();
    let range = plan.transcode_both(datum, None, &mut out)?;
    let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(plan.descriptor())],
    })
    .unwrap();
    let row =
        DynamicMessage::decode(pool.get_message_by_name("Row").unwrap(), &out[range]).unwrap();
    let Some(fd) = row.descriptor().get_field_by_name("v") else {
        return Ok(None);
    };
    Ok(row.has_field(&fd).then(|| row.get_field(&fd).into_owned()))
}

// --- expected values ----------------------------------------------------------------------------

fn packed_datetime(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: i64) -> PValue {
    PValue::I64((((y << 26) | (mo << 22) | (d << 17) | (h << 12) | (mi << 6) | s) << 20) | us)
}

fn packed_time(h: i64, mi: i64, s: i64, us: i64) -> PValue {
    PValue::I64((((h << 12) | (mi << 6) | s) << 20) | us)
}

/// NUMERIC (scale 9) or BIGNUMERIC (scale 38) bytes: the unscaled value at the column's scale,
/// little-endian two's complement, minimal length.
fn numeric(unscaled: i64, scale: u32, column_scale: u32) -> PValue {
    let v = BigInt::from(unscaled) * BigInt::from(10).pow(column_scale - scale);
    PValue::Bytes(v.to_signed_bytes_le().into())
}

fn s(text: &str) -> PValue {
    PValue::String(text.to_owned())
}

const TS_MS: i64 = 1_709_296_496_789; // 2024-03-01T12:34:56.789
const TIME_MS: i64 = 45_296_789; // 12:34:56.789
const DAY: i64 = 19_783; // 2024-03-01
/// -2658.824 at scale 3: the value the issue saw stored as NUMERIC 1234 (its base64 is "1234").
const MINUS_2658_824: [u8; 3] = [0xd7, 0x6d, 0xf8];

struct Golden {
    field_type: String,
    column: &'static str,
    datum: Vec<u8>,
    expect: PValue,
}

fn g(field_type: &str, column: &'static str, datum: Vec<u8>, expect: PValue) -> Golden {
    Golden {
        field_type: field_type.to_owned(),
        column,
        datum,
        expect,
    }
}

/// Every (named type, column type) the sink writes, with a value and what BigQuery receives.
#[rustfmt::skip]
fn golden_rows() -> Vec<Golden> {
    let dbz = |n: &str| format!("io.debezium.time.{n}");
    let data = |n: &str| format!("io.debezium.data.{n}");
    vec![
        // org.apache.kafka.connect.data.*
        g(&connect_decimal(3, Some(12)), "NUMERIC", bytes(&MINUS_2658_824), numeric(-2_658_824, 3, 9)),
        g(&connect_decimal(3, Some(12)), "BIGNUMERIC", bytes(&MINUS_2658_824), numeric(-2_658_824, 3, 38)),
        g(&connect_decimal(3, Some(12)), "STRING", bytes(&MINUS_2658_824), s("-2658.824")),
        // Without `connect.decimal.precision` AvroData writes precision 64.
        g(&connect_decimal(2, None), "NUMERIC", bytes(&[0x30, 0x39]), numeric(12_345, 2, 9)),
        g(&connect_decimal(2, None), "BIGNUMERIC", bytes(&[0x30, 0x39]), numeric(12_345, 2, 38)),
        g(&connect_logical("int", "Date", "date"), "DATE", long(DAY), PValue::I32(DAY as i32)),
        g(&connect_logical("int", "Date", "date"), "INT64", long(DAY), PValue::I64(DAY)),
        g(&connect_logical("int", "Time", "time-millis"), "TIME", long(TIME_MS), packed_time(12, 34, 56, 789_000)),
        g(&connect_logical("int", "Time", "time-millis"), "INT64", long(TIME_MS), PValue::I64(TIME_MS)),
        g(&connect_logical("long", "Timestamp", "timestamp-millis"), "TIMESTAMP", long(TS_MS), PValue::I64(TS_MS * 1000)),
        g(&connect_logical("long", "Timestamp", "timestamp-millis"), "DATETIME", long(TS_MS), packed_datetime(2024, 3, 1, 12, 34, 56, 789_000)),
        g(&connect_logical("long", "Timestamp", "timestamp-millis"), "INT64", long(TS_MS), PValue::I64(TS_MS)),
        // io.debezium.time.*
        g(&named("int", &dbz("Date")), "DATE", long(DAY), PValue::I32(DAY as i32)),
        g(&named("int", &dbz("Date")), "INT64", long(DAY), PValue::I64(DAY)),
        g(&named("int", &dbz("Time")), "TIME", long(TIME_MS), packed_time(12, 34, 56, 789_000)),
        g(&named("int", &dbz("Time")), "INT64", long(TIME_MS), PValue::I64(TIME_MS)),
        g(&named("long", &dbz("MicroTime")), "TIME", long(TIME_MS * 1000 + 123), packed_time(12, 34, 56, 789_123)),
        g(&named("long", &dbz("MicroTime")), "INT64", long(TIME_MS * 1000 + 123), PValue::I64(TIME_MS * 1000 + 123)),
        g(&named("long", &dbz("NanoTime")), "TIME", long((TIME_MS * 1000 + 123) * 1000), packed_time(12, 34, 56, 789_123)),
        g(&named("long", &dbz("NanoTime")), "INT64", long(TIME_MS * 1_000_000), PValue::I64(TIME_MS * 1_000_000)),
        g(&named("long", &dbz("Timestamp")), "DATETIME", long(TS_MS), packed_datetime(2024, 3, 1, 12, 34, 56, 789_000)),
        g(&named("long", &dbz("Timestamp")), "TIMESTAMP", long(TS_MS), PValue::I64(TS_MS * 1000)),
        g(&named("long", &dbz("Timestamp")), "INT64", long(TS_MS), PValue::I64(TS_MS)),
        g(&named("long", &dbz("MicroTimestamp")), "DATETIME", long(TS_MS * 1000 + 123), packed_datetime(2024, 3, 1, 12, 34, 56, 789_123)),
        g(&named("long", &dbz("MicroTimestamp")), "TIMESTAMP", long(TS_MS * 1000 + 123), PValue::I64(TS_MS * 1000 + 123)),
        g(&named("long", &dbz("MicroTimestamp")), "INT64", long(-1), PValue::I64(-1)),
        g(&named("long", &dbz("NanoTimestamp")), "DATETIME", long((TS_MS * 1000 + 123) * 1000), packed_datetime(2024, 3, 1, 12, 34, 56, 789_123)),
        g(&named("long", &dbz("NanoTimestamp")), "TIMESTAMP", long(-1000), PValue::I64(-1)),
        g(&named("long", &dbz("NanoTimestamp")), "INT64", long(-1), PValue::I64(-1)),
        g(&named("string", &dbz("ZonedTimestamp")), "TIMESTAMP", string("2024-03-01T12:34:56.789+01:00"), PValue::I64((TS_MS - 3_600_000) * 1000)),
        g(&named("string", &dbz("ZonedTimestamp")), "TIMESTAMP", string("2024-03-01T12:34:56.789123000Z"), PValue::I64(TS_MS * 1000 + 123)),
        g(&named("string", &dbz("ZonedTimestamp")), "STRING", string("2024-03-01T12:34:56.789+01:00"), s("2024-03-01T12:34:56.789+01:00")),
        g(&named("string", &dbz("ZonedTime")), "TIME", string("12:34:56.789Z"), packed_time(12, 34, 56, 789_000)),
        g(&named("string", &dbz("ZonedTime")), "STRING", string("12:34:56.789+05:30"), s("12:34:56.789+05:30")),
        g(&named("string", &dbz("IsoDate")), "DATE", string("2024-03-01Z"), PValue::I32(DAY as i32)),
        g(&named("string", &dbz("IsoDate")), "STRING", string("2024-03-01Z"), s("2024-03-01Z")),
        g(&named("string", &dbz("IsoTime")), "TIME", string("12:34:56.789123Z"), packed_time(12, 34, 56, 789_123)),
        g(&named("string", &dbz("IsoTime")), "STRING", string("12:34:56Z"), s("12:34:56Z")),
        g(&named("string", &dbz("IsoTimestamp")), "DATETIME", string("2024-03-01T12:34:56.789Z"), packed_datetime(2024, 3, 1, 12, 34, 56, 789_000)),
        g(&named("string", &dbz("IsoTimestamp")), "TIMESTAMP", string("2024-03-01T12:34:56.789Z"), PValue::I64(TS_MS * 1000)),
        g(&named("string", &dbz("IsoTimestamp")), "STRING", string("2024-03-01T12:34:56.789Z"), s("2024-03-01T12:34:56.789Z")),
        g(&named("int", &dbz("Year")), "INT64", long(2024), PValue::I64(2024)),
        g(&named("long", &dbz("MicroDuration")), "INT64", long(-3_600_000_001), PValue::I64(-3_600_000_001)),
        g(&named("string", &dbz("Interval")), "STRING", string("P1Y2M3DT4H5M6.78S"), s("P1Y2M3DT4H5M6.78S")),
        // io.debezium.data.*
        g(VARIABLE_SCALE_DECIMAL, "NUMERIC", variable_scale(3, &MINUS_2658_824), numeric(-2_658_824, 3, 9)),
        g(VARIABLE_SCALE_DECIMAL, "BIGNUMERIC", variable_scale(3, &MINUS_2658_824), numeric(-2_658_824, 3, 38)),
        g(VARIABLE_SCALE_DECIMAL, "STRING", variable_scale(3, &MINUS_2658_824), s("-2658.824")),
        // A negative scale (Java's BigDecimal allows it) multiplies: 5 × 10^2.
        g(VARIABLE_SCALE_DECIMAL, "NUMERIC", variable_scale(-2, &[0x05]), numeric(500, 0, 9)),
        g(VARIABLE_SCALE_DECIMAL, "STRING", variable_scale(-2, &[0x05]), s("500")),
        g(&named("string", &data("Json")), "JSON", string(r#"{"a": [1, 2.5, null]}"#), s(r#"{"a": [1, 2.5, null]}"#)),
        g(&named("string", &data("Json")), "STRING", string(r#"{"a": 1}"#), s(r#"{"a": 1}"#)),
        g(&named("string", &data("Uuid")), "STRING", string("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), s("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
        g(&named("string", &data("Xml")), "STRING", string("<a>1</a>"), s("<a>1</a>")),
        g(&named_with("string", &data("Enum"), r#"{"allowed":"red,green"}"#), "STRING", string("green"), s("green")),
        g(&named_with("string", &data("EnumSet"), r#"{"allowed":"a,b,c"}"#), "STRING", string("a,c"), s("a,c")),
        g(&named_with("bytes", &data("Bits"), r#"{"length":"3"}"#), "BYTES", bytes(&[0x05]), PValue::Bytes(vec![0x05].into())),
        // io.debezium.data.geometry.*: the WKB into BYTES, the rest of the struct read and skipped.
        g(GEOMETRY, "BYTES", geometry(&WKB_POINT), PValue::Bytes(WKB_POINT.to_vec().into())),
        g(GEOGRAPHY, "BYTES", geography(&WKB_POINT), PValue::Bytes(WKB_POINT.to_vec().into())),
        g(POINT, "BYTES", point(1.0, 2.0, &WKB_POINT), PValue::Bytes(WKB_POINT.to_vec().into())),
    ]
}

#[test]
fn every_named_type_is_written_exactly_into_each_column_it_fits() {
    let rows = golden_rows();
    for row in &rows {
        let context = format!("{} into {}", row.field_type, row.column);
        let plan = compile(&record(&row.field_type), row.column).expect(&context);
        assert_eq!(
            run(&plan, &row.datum).expect(&context),
            Some(row.expect.clone()),
            "{context}"
        );
        // The optional form: branch 1 is the value, branch 0 null (nothing written).
        let plan = compile(&optional_record(&row.field_type), row.column).expect(&context);
        let mut datum = long(1);
        datum.extend_from_slice(&row.datum);
        assert_eq!(
            run(&plan, &datum).expect(&context),
            Some(row.expect.clone()),
            "optional {context}"
        );
        assert_eq!(
            run(&plan, &long(0)).expect(&context),
            None,
            "null {context}"
        );
    }
    assert_eq!(rows.len(), 59);
}

// --- refused when the plan is compiled ----------------------------------------------------------

fn refusal(field_type: &str, column: &str) -> String {
    match compile(&record(field_type), column) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{field_type} into {column} compiled"),
    }
}

#[test]
fn a_named_type_into_a_column_it_cannot_fill_refuses_the_plan_naming_the_column() {
    let dbz = |n: &str| format!("io.debezium.time.{n}");
    let data = |n: &str| format!("io.debezium.data.{n}");
    let cases = [
        (named("long", &dbz("MicroTimestamp")), "DATE"),
        (named("long", &dbz("MicroTimestamp")), "STRING"),
        (named("long", &dbz("MicroTimestamp")), "TIME"),
        (named("long", &dbz("MicroTimestamp")), "JSON"),
        (named("long", &dbz("Timestamp")), "FLOAT64"),
        (named("int", &dbz("Date")), "TIMESTAMP"),
        (named("long", &dbz("MicroTime")), "TIMESTAMP"),
        (named("int", &dbz("Year")), "DATE"),
        (named("long", &dbz("MicroDuration")), "TIME"),
        (named("string", &dbz("ZonedTimestamp")), "DATE"),
        (named("string", &dbz("ZonedTimestamp")), "DATETIME"),
        (named("string", &dbz("ZonedTimestamp")), "INT64"),
        (named("string", &dbz("Interval")), "INT64"),
        (named("string", &data("Json")), "INT64"),
        (named("string", &data("Uuid")), "BYTES"),
        (named("string", &data("Xml")), "JSON"),
        (
            named_with("bytes", &data("Bits"), r#"{"length":"3"}"#),
            "STRING",
        ),
        (connect_decimal(3, Some(12)), "INT64"),
        (connect_decimal(3, Some(12)), "FLOAT64"),
        (VARIABLE_SCALE_DECIMAL.to_owned(), "INT64"),
        (VARIABLE_SCALE_DECIMAL.to_owned(), "JSON"),
        (VARIABLE_SCALE_DECIMAL.to_owned(), "FLOAT64"),
        (GEOMETRY.to_owned(), "GEOGRAPHY"),
        (GEOMETRY.to_owned(), "STRING"),
        (GEOMETRY.to_owned(), "JSON"),
        (POINT.to_owned(), "GEOGRAPHY"),
    ];
    for (field_type, column) in cases {
        let e = refusal(&field_type, column);
        assert!(
            e.starts_with("column v: avro ")
                && e.ends_with(&format!(
                    "cannot be written to a {} column",
                    FieldType::parse(column).as_str()
                )),
            "{field_type} into {column}: {e}"
        );
    }
}

#[test]
fn a_name_that_does_not_fit_its_avro_type_or_parameters_refuses_the_plan() {
    let e = refusal(
        &named("string", "io.debezium.time.MicroTimestamp"),
        "TIMESTAMP",
    );
    assert!(
        e.contains("column v") && e.contains("not written as that avro type"),
        "{e}"
    );
    let e = refusal(
        &named("bytes", "org.apache.kafka.connect.data.Decimal"),
        "NUMERIC",
    );
    assert!(
        e.contains("column v") && e.contains("no parameter scale"),
        "{e}"
    );
    // The name's scale and Avro's own decimal scale disagree: the value's meaning is not known.
    let e = refusal(
        r#"{"type":"bytes","scale":2,"precision":12,"connect.parameters":{"scale":"3"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}"#,
        "NUMERIC",
    );
    assert!(e.contains("differ"), "{e}");
    let e = refusal(
        r#"{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{"name":"value","type":"bytes"},{"name":"scale","type":"int"}],"connect.name":"io.debezium.data.VariableScaleDecimal"}"#,
        "NUMERIC",
    );
    assert!(e.contains("scale (int) then value (bytes)"), "{e}");
    // Without a name a long's unit is unknown: still refused, as before.
    let e = refusal(r#""long""#, "TIMESTAMP");
    assert!(
        e.contains("column v: avro long cannot be written to a TIMESTAMP column"),
        "{e}"
    );
}

#[test]
fn an_unknown_connect_name_reads_the_value_by_its_avro_type() {
    let plan = compile(&record(&named("long", "com.example.Money")), "INT64").unwrap();
    assert_eq!(run(&plan, &long(7)).unwrap(), Some(PValue::I64(7)));
    assert!(compile(&record(&named("long", "com.example.Money")), "TIMESTAMP").is_err());
}

#[test]
fn a_named_struct_into_a_record_column_is_the_struct_as_it_is() {
    let table: TableSchema = serde_json::from_str(
        r#"{"fields":[{"name":"v","type":"RECORD","fields":[
            {"name":"scale","type":"INT64"},{"name":"value","type":"BYTES"}]}]}"#,
    )
    .unwrap();
    let plan = Plan::compile(
        &AvroSchema::parse(&record(VARIABLE_SCALE_DECIMAL)).unwrap(),
        &table,
        &PlanOptions::default(),
    )
    .unwrap();
    let Some(PValue::Message(m)) = run(&plan, &variable_scale(3, &MINUS_2658_824)).unwrap() else {
        panic!("no struct")
    };
    let get = |n: &str| m.get_field_by_name(n).unwrap().into_owned();
    assert_eq!(get("scale"), PValue::I64(3));
    assert_eq!(get("value"), PValue::Bytes(MINUS_2658_824.to_vec().into()));
}

// --- values that cannot be written exactly: a per-record error with its reason ------------------

fn record_error(field_type: &str, column: &str, datum: &[u8]) -> String {
    let plan = compile(&record(field_type), column).unwrap();
    match run(&plan, datum) {
        Err(RecordError::Value { column, reason }) => {
            assert_eq!(&*column, "v");
            reason
        }
        other => panic!("{field_type} into {column}: expected a value error, got {other:?}"),
    }
}

#[test]
#[rustfmt::skip]
fn values_that_cannot_be_written_exactly_are_per_record_errors_with_their_reason() {
    let dbz = |n: &str| format!("io.debezium.time.{n}");
    let cases: Vec<(String, &str, Vec<u8>, &str)> = vec![
        (named("long", &dbz("NanoTimestamp")), "TIMESTAMP", long(TS_MS * 1_000_000 + 1), "below the microsecond"),
        (named("long", &dbz("NanoTimestamp")), "DATETIME", long(-1), "below the microsecond"),
        (named("long", &dbz("NanoTime")), "TIME", long(999), "below the microsecond"),
        (named("string", &dbz("ZonedTimestamp")), "TIMESTAMP", string("2024-03-01T12:34:56.7891234Z"), "below the microsecond"),
        (named("string", &dbz("ZonedTime")), "TIME", string("12:34:56.0000001Z"), "below the microsecond"),
        // TIME has no zone: only a zero offset is the same time of day.
        (named("string", &dbz("ZonedTime")), "TIME", string("12:34:56+01:00"), "without a zone offset"),
        (named("string", &dbz("IsoDate")), "DATE", string("2024-03-01+01:00"), "is not a date"),
        (named("string", &dbz("IsoTimestamp")), "DATETIME", string("2024-03-01T12:34:56+01:00"), "without a zone offset"),
        (named("string", &dbz("ZonedTimestamp")), "TIMESTAMP", string("not a time"), "is not a"),
        // PostgreSQL's `24:00:00`, which Debezium writes as 86 400 000 000 µs.
        (named("long", &dbz("MicroTime")), "TIME", long(86_400_000_000), "outside 00:00:00"),
        (named("int", &dbz("Date")), "DATE", long(2_932_897), "outside"),
        (named("long", &dbz("MicroTimestamp")), "TIMESTAMP", long(253_402_300_800_000_000), "outside"),
        (named("long", &dbz("Timestamp")), "DATETIME", long(i64::MAX), "outside"),
        (connect_decimal(10, Some(12)), "NUMERIC", bytes(&[0x01]), "more than 9 fractional digits"),
        (VARIABLE_SCALE_DECIMAL.to_owned(), "NUMERIC", variable_scale(12, &[0x01]), "more than 9 fractional digits"),
        (VARIABLE_SCALE_DECIMAL.to_owned(), "BIGNUMERIC", variable_scale(39, &[0x01]), "more than 38 fractional digits"),
        // 10^30 does not fit NUMERIC's 29 integer digits.
        (VARIABLE_SCALE_DECIMAL.to_owned(), "NUMERIC", variable_scale(-30, &[0x01]), "outside the range of NUMERIC"),
        (VARIABLE_SCALE_DECIMAL.to_owned(), "STRING", variable_scale(20_000, &[0x01]), "beyond"),
        (named("string", "io.debezium.data.Json"), "JSON", string("{"), "not valid json"),
    ];
    for (field_type, column, datum, reason) in cases {
        let e = record_error(&field_type, column, &datum);
        assert!(e.contains(reason), "{field_type} into {column}: {e}");
    }
}

// --- create_table ---------------------------------------------------------------------------------

#[test]
fn create_table_derives_each_named_types_natural_column() {
    let dbz = |n: &str| format!("io.debezium.time.{n}");
    let data = |n: &str| format!("io.debezium.data.{n}");
    let fields: Vec<(&str, String)> = vec![
        ("c_decimal", connect_decimal(3, Some(12))),
        ("c_decimal_free", connect_decimal(2, None)),
        ("c_date", connect_logical("int", "Date", "date")),
        ("c_time", connect_logical("int", "Time", "time-millis")),
        (
            "c_timestamp",
            connect_logical("long", "Timestamp", "timestamp-millis"),
        ),
        ("d_date", named("int", &dbz("Date"))),
        ("d_time", named("int", &dbz("Time"))),
        ("d_micro_time", named("long", &dbz("MicroTime"))),
        ("d_nano_time", named("long", &dbz("NanoTime"))),
        ("d_timestamp", named("long", &dbz("Timestamp"))),
        ("d_micro_timestamp", named("long", &dbz("MicroTimestamp"))),
        ("d_nano_timestamp", named("long", &dbz("NanoTimestamp"))),
        ("d_zoned_timestamp", named("string", &dbz("ZonedTimestamp"))),
        ("d_zoned_time", named("string", &dbz("ZonedTime"))),
        ("d_iso_date", named("string", &dbz("IsoDate"))),
        ("d_iso_time", named("string", &dbz("IsoTime"))),
        ("d_iso_timestamp", named("string", &dbz("IsoTimestamp"))),
        ("d_year", named("int", &dbz("Year"))),
        ("d_duration", named("long", &dbz("MicroDuration"))),
        ("d_interval", named("string", &dbz("Interval"))),
        ("d_numeric", VARIABLE_SCALE_DECIMAL.to_owned()),
        ("d_json", named("string", &data("Json"))),
        ("d_uuid", named("string", &data("Uuid"))),
        ("d_xml", named("string", &data("Xml"))),
        (
            "d_enum",
            named_with("string", &data("Enum"), r#"{"allowed":"a,b"}"#),
        ),
        (
            "d_set",
            named_with("string", &data("EnumSet"), r#"{"allowed":"a,b"}"#),
        ),
        (
            "d_bits",
            named_with("bytes", &data("Bits"), r#"{"length":"3"}"#),
        ),
    ];
    let avsc = format!(
        r#"{{"type":"record","name":"Value","fields":[{}]}}"#,
        fields
            .iter()
            .map(|(n, t)| format!(r#"{{"name":"{n}","type":["null",{t}],"default":null}}"#))
            .collect::<Vec<_>>()
            .join(",")
    );
    let t = table_schema_from_avro(
        &AvroSchema::parse(&avsc).unwrap(),
        &DeriveOptions::default(),
    )
    .unwrap();
    let got: Vec<(String, FieldType, Option<String>, Option<String>)> = t
        .fields
        .iter()
        .map(|c| {
            assert_eq!(c.mode(), Mode::Nullable, "{}", c.name);
            (
                c.name.clone(),
                c.field_type.clone(),
                c.precision.clone(),
                c.scale.clone(),
            )
        })
        .collect();
    use FieldType as F;
    let plain = |n: &str, t: F| (n.to_owned(), t, None, None);
    assert_eq!(
        got,
        vec![
            (
                "c_decimal".to_owned(),
                F::Numeric,
                Some("12".to_owned()),
                Some("3".to_owned())
            ),
            plain("c_decimal_free", F::BigNumeric),
            plain("c_date", F::Date),
            plain("c_time", F::Time),
            plain("c_timestamp", F::Timestamp),
            plain("d_date", F::Date),
            plain("d_time", F::Time),
            plain("d_micro_time", F::Time),
            plain("d_nano_time", F::Time),
            plain("d_timestamp", F::DateTime),
            plain("d_micro_timestamp", F::DateTime),
            plain("d_nano_timestamp", F::DateTime),
            plain("d_zoned_timestamp", F::Timestamp),
            plain("d_zoned_time", F::String),
            plain("d_iso_date", F::Date),
            plain("d_iso_time", F::Time),
            plain("d_iso_timestamp", F::DateTime),
            plain("d_year", F::Int64),
            plain("d_duration", F::Int64),
            plain("d_interval", F::String),
            plain("d_numeric", F::BigNumeric),
            plain("d_json", F::Json),
            plain("d_uuid", F::String),
            plain("d_xml", F::String),
            plain("d_enum", F::String),
            plain("d_set", F::String),
            plain("d_bits", F::Bytes),
        ]
    );
    // The derived table takes the records it was derived from.
    assert!(
        Plan::compile(
            &AvroSchema::parse(&avsc).unwrap(),
            &t,
            &PlanOptions::default()
        )
        .is_ok()
    );
}
