//! Kafka Connect's and Debezium's named types through the JSON plan, one golden case per row of
//! docs/mapping.md's tables "Kafka Connect's names" and "Debezium's names": a field of a Connect
//! schema block (as `JsonConverter` writes it in its envelope) read into one column of each
//! type a user would choose, the row decoded from the plan's own descriptor and rendered as
//! BigQuery shows it. Expected values are written out by hand; instants and dates are rendered
//! here independently (chrono, num-bigint), not by the transcoder's own conversions.

use std::sync::Arc;

use chrono::{DateTime, NaiveDate};
use kbq_core::table_schema::TableSchema;
use kbq_transcode::json::connect_schema;
use kbq_transcode::{Plan, PlanOptions, file_for};
use num_bigint::BigInt;
use prost_reflect::{DescriptorPool, DynamicMessage, ReflectMessage, Value as PValue};
use prost_types::FileDescriptorSet;
use serde_json::{Value as Json, json};

/// A Connect field `c` of `ty`, named `name` with `params`, optional.
fn field(ty: &str, name: &str, params: Json) -> Json {
    let mut f = json!({"type": ty, "optional": true, "field": "c"});
    if !name.is_empty() {
        f["name"] = json!(name);
        f["version"] = json!(1);
    }
    if !params.is_null() {
        f["parameters"] = params;
    }
    f
}

/// A struct field `c` with `fields`, named `name`.
fn structure(name: &str, fields: Json) -> Json {
    json!({"type": "struct", "optional": true, "field": "c", "name": name, "fields": fields})
}

fn render(column: &str, v: &PValue) -> String {
    match (column, v) {
        ("TIMESTAMP", PValue::I64(us)) => DateTime::from_timestamp_micros(*us)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string(),
        ("DATE", PValue::I32(days)) => NaiveDate::from_num_days_from_ce_opt(days + 719_163)
            .unwrap()
            .format("%Y-%m-%d")
            .to_string(),
        ("TIME", PValue::I64(p)) => time(*p),
        ("DATETIME", PValue::I64(p)) => {
            let date = p >> 37;
            format!(
                "{:04}-{:02}-{:02}T{}",
                date >> 9,
                (date >> 5) & 0xF,
                date & 0x1F,
                time(p & ((1 << 37) - 1))
            )
        }
        ("NUMERIC" | "BIGNUMERIC", PValue::Bytes(b)) => {
            let scale = if column == "NUMERIC" { 9 } else { 38 };
            decimal(BigInt::from_signed_bytes_le(b), scale)
        }
        (_, PValue::Bytes(b)) => b.iter().map(|x| format!("{x:02x}")).collect(),
        (_, PValue::String(s)) => s.clone(),
        (_, PValue::I64(i)) => i.to_string(),
        (_, other) => panic!("unexpected {other:?}"),
    }
}

fn time(p: i64) -> String {
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        (p >> 32) & 0x1F,
        (p >> 26) & 0x3F,
        (p >> 20) & 0x3F,
        p & 0xFFFFF
    )
}

/// `unscaled / 10^scale` as decimal text without trailing zeros.
fn decimal(unscaled: BigInt, scale: usize) -> String {
    let negative = unscaled.sign() == num_bigint::Sign::Minus;
    let digits = unscaled.magnitude().to_string();
    let digits = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = digits.split_at(digits.len() - scale);
    let frac = frac.trim_end_matches('0');
    let sign = if negative { "-" } else { "" };
    match frac {
        "" => format!("{sign}{int}"),
        _ => format!("{sign}{int}.{frac}"),
    }
}

/// The value written into column `c` of type `column` from `value` of the Connect field, or
/// `plan: …` / `record: …` with the reason.
fn write(field: Json, column: &str, value: &str) -> Result<String, String> {
    let block = json!({"type": "struct", "optional": false, "fields": [field]});
    let schema = connect_schema::parse(block.to_string().as_bytes()).unwrap();
    let table: TableSchema =
        serde_json::from_value(json!({"fields": [{"name": "c", "type": column}]})).unwrap();
    let plan = Plan::compile_json(
        Some(&Arc::new(schema)),
        false,
        &table,
        &PlanOptions::default(),
    )
    .map_err(|e| format!("plan: {e}"))?;
    let mut out = Vec::new();
    let record = format!(r#"{{"c": {value}}}"#);
    let range = plan
        .transcode(record.as_bytes(), None, &mut out)
        .map_err(|e| format!("record: {e}"))?;
    let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(plan.descriptor())],
    })
    .unwrap();
    let row =
        DynamicMessage::decode(pool.get_message_by_name("Row").unwrap(), &out[range]).unwrap();
    let fd = row.descriptor().get_field_by_name("c").unwrap();
    if !row.has_field(&fd) {
        return Ok("NULL".into());
    }
    Ok(render(column, &row.get_field(&fd)))
}

/// Runs a table of `(field, column, value, expected)`: an expected value, or the start of a
/// `plan:` / `record:` error and a piece of its reason (`plan: …|piece`).
fn check(cases: &[(Json, &str, &str, &str)]) {
    let mut failed = Vec::new();
    for (field, column, value, expected) in cases {
        let got = write(field.clone(), column, value);
        let ok = match (expected.split_once('|'), &got) {
            (Some((prefix, piece)), Err(e)) => e.starts_with(prefix) && e.contains(piece),
            (None, Ok(v)) => v == expected,
            _ => false,
        };
        if !ok {
            failed.push(format!(
                "{} {value} into {column}: expected {expected}, got {got:?}",
                field["name"]
                    .as_str()
                    .unwrap_or(field["type"].as_str().unwrap())
            ));
        }
    }
    assert!(failed.is_empty(), "\n{}", failed.join("\n"));
}

const DECIMAL: &str = "org.apache.kafka.connect.data.Decimal";

fn decimal_field(scale: &str) -> Json {
    field(
        "bytes",
        DECIMAL,
        json!({"scale": scale, "connect.decimal.precision": "12"}),
    )
}

#[test]
fn kafka_connects_names_into_every_column_they_fit() {
    let date = || field("int32", "org.apache.kafka.connect.data.Date", Json::Null);
    let time = || field("int32", "org.apache.kafka.connect.data.Time", Json::Null);
    let ts = || {
        field(
            "int64",
            "org.apache.kafka.connect.data.Timestamp",
            Json::Null,
        )
    };
    check(&[
        // Decimal, decimal.format BASE64: "1234" is the base64 of 0xD76DF8, -2658824 unscaled.
        (decimal_field("3"), "NUMERIC", r#""1234""#, "-2658.824"),
        (decimal_field("3"), "BIGNUMERIC", r#""1234""#, "-2658.824"),
        (decimal_field("3"), "STRING", r#""1234""#, "-2658.824"),
        (decimal_field("3"), "NUMERIC", r#""AA==""#, "0"),
        (decimal_field("3"), "NUMERIC", r#""AQ""#, "0.001"),
        (
            decimal_field("3"),
            "NUMERIC",
            r#""not base64!""#,
            "record:|not base64",
        ),
        // Beyond NUMERIC's 9 digits of scale: an error, never rounded.
        (decimal_field("10"), "NUMERIC", r#""AQ==""#, "record:|"),
        (
            decimal_field("10"),
            "BIGNUMERIC",
            r#""AQ==""#,
            "0.0000000001",
        ),
        // decimal.format NUMERIC: a JSON number, exactly as written.
        (decimal_field("3"), "NUMERIC", "-2658.824", "-2658.824"),
        (decimal_field("3"), "STRING", "-2658.824", "-2658.824"),
        (
            decimal_field("3"),
            "INT64",
            r#""1234""#,
            "plan:|NUMERIC, BIGNUMERIC or STRING",
        ),
        (
            decimal_field("3"),
            "FLOAT64",
            r#""1234""#,
            "plan:|cannot be written to a FLOAT",
        ),
        // Date: days since 1970-01-01.
        (date(), "DATE", "19783", "2024-03-01"),
        (date(), "INT64", "19783", "19783"),
        (date(), "DATE", "2932897", "record:|outside"),
        (date(), "TIMESTAMP", "19783", "plan:|DATE or INT64"),
        // Time: milliseconds since midnight.
        (time(), "TIME", "45296789", "12:34:56.789000"),
        (time(), "INT64", "45296789", "45296789"),
        (time(), "TIME", "86400000", "record:|outside"),
        (time(), "STRING", "45296789", "plan:|TIME or INT64"),
        // Timestamp: milliseconds since the epoch.
        (
            ts(),
            "TIMESTAMP",
            "1709296496789",
            "2024-03-01T12:34:56.789000Z",
        ),
        (
            ts(),
            "TIMESTAMP",
            "253402300799999",
            "9999-12-31T23:59:59.999000Z",
        ),
        (
            ts(),
            "DATETIME",
            "1709296496789",
            "2024-03-01T12:34:56.789000",
        ),
        (ts(), "DATETIME", "-1", "1969-12-31T23:59:59.999000"),
        (ts(), "INT64", "1709296496789", "1709296496789"),
        (ts(), "TIMESTAMP", "253402300800000", "record:|outside"),
        (
            ts(),
            "TIMESTAMP",
            "9223372036854775807",
            "record:|out of range",
        ),
        (
            ts(),
            "DATE",
            "1709296496789",
            "plan:|TIMESTAMP, DATETIME or INT64",
        ),
    ]);
}

#[test]
fn debeziums_time_names_into_every_column_they_fit() {
    let t = |ty: &str, name: &str| field(ty, &format!("io.debezium.time.{name}"), Json::Null);
    check(&[
        (t("int32", "Date"), "DATE", "19783", "2024-03-01"),
        (t("int32", "Date"), "INT64", "-1", "-1"),
        (t("int32", "Time"), "TIME", "45296789", "12:34:56.789000"),
        (
            t("int64", "MicroTime"),
            "TIME",
            "45296789012",
            "12:34:56.789012",
        ),
        (
            t("int64", "MicroTime"),
            "INT64",
            "45296789012",
            "45296789012",
        ),
        (
            t("int64", "NanoTime"),
            "TIME",
            "45296789012000",
            "12:34:56.789012",
        ),
        (
            t("int64", "NanoTime"),
            "TIME",
            "45296789012345",
            "record:|below the microsecond",
        ),
        // Debezium's Timestamp: milliseconds of a wall clock without a zone, counted as UTC.
        (
            t("int64", "Timestamp"),
            "TIMESTAMP",
            "1709296496789",
            "2024-03-01T12:34:56.789000Z",
        ),
        (
            t("int64", "Timestamp"),
            "DATETIME",
            "1709296496789",
            "2024-03-01T12:34:56.789000",
        ),
        (
            t("int64", "Timestamp"),
            "INT64",
            "1709296496789",
            "1709296496789",
        ),
        (
            t("int64", "Timestamp"),
            "STRING",
            "1",
            "plan:|TIMESTAMP, DATETIME or INT64",
        ),
        (
            t("int64", "MicroTimestamp"),
            "TIMESTAMP",
            "1709296496789012",
            "2024-03-01T12:34:56.789012Z",
        ),
        (
            t("int64", "MicroTimestamp"),
            "DATETIME",
            "-62135596800000000",
            "0001-01-01T00:00:00.000000",
        ),
        (
            t("int64", "MicroTimestamp"),
            "DATETIME",
            "-62135596800000001",
            "record:|outside",
        ),
        (
            t("int64", "NanoTimestamp"),
            "TIMESTAMP",
            "1709296496789012000",
            "2024-03-01T12:34:56.789012Z",
        ),
        (
            t("int64", "NanoTimestamp"),
            "DATETIME",
            "1709296496789012000",
            "2024-03-01T12:34:56.789012",
        ),
        (
            t("int64", "NanoTimestamp"),
            "TIMESTAMP",
            "1709296496789012345",
            "record:|below the microsecond",
        ),
        // ZonedTimestamp: ISO-8601 with its offset, an instant.
        (
            t("string", "ZonedTimestamp"),
            "TIMESTAMP",
            r#""2024-03-01T12:34:56.789+02:00""#,
            "2024-03-01T10:34:56.789000Z",
        ),
        (
            t("string", "ZonedTimestamp"),
            "TIMESTAMP",
            r#""2024-03-01T12:34:56.123456000Z""#,
            "2024-03-01T12:34:56.123456Z",
        ),
        (
            t("string", "ZonedTimestamp"),
            "TIMESTAMP",
            r#""2024-03-01T12:34:56.123456789Z""#,
            "record:|below the microsecond",
        ),
        (
            t("string", "ZonedTimestamp"),
            "STRING",
            r#""2024-03-01T12:34:56.789+02:00""#,
            "2024-03-01T12:34:56.789+02:00",
        ),
        (
            t("string", "ZonedTimestamp"),
            "DATETIME",
            r#""2024-03-01T12:34:56Z""#,
            "plan:|TIMESTAMP or STRING",
        ),
        (
            t("string", "ZonedTime"),
            "TIME",
            r#""12:34:56.789Z""#,
            "12:34:56.789000",
        ),
        (
            t("string", "ZonedTime"),
            "TIME",
            r#""12:34:56.789+02:00""#,
            "record:|zone",
        ),
        (
            t("string", "ZonedTime"),
            "STRING",
            r#""12:34:56.789Z""#,
            "12:34:56.789Z",
        ),
        // time.precision.mode isostring.
        (
            t("string", "IsoDate"),
            "DATE",
            r#""1970-01-01Z""#,
            "1970-01-01",
        ),
        (
            t("string", "IsoDate"),
            "DATE",
            r#""2024-03-01""#,
            "2024-03-01",
        ),
        (
            t("string", "IsoDate"),
            "DATE",
            r#""2024-03-01+02:00""#,
            "record:|not a date",
        ),
        (
            t("string", "IsoDate"),
            "STRING",
            r#""1970-01-01Z""#,
            "1970-01-01Z",
        ),
        (
            t("string", "IsoTime"),
            "TIME",
            r#""12:34:56.789012Z""#,
            "12:34:56.789012",
        ),
        (
            t("string", "IsoTimestamp"),
            "TIMESTAMP",
            r#""2024-03-01T12:34:56.789Z""#,
            "2024-03-01T12:34:56.789000Z",
        ),
        (
            t("string", "IsoTimestamp"),
            "DATETIME",
            r#""2024-03-01T12:34:56.789Z""#,
            "2024-03-01T12:34:56.789000",
        ),
        (
            t("string", "IsoTimestamp"),
            "DATETIME",
            r#""2024-03-01T12:34:56.7890001Z""#,
            "record:|below the microsecond",
        ),
        (t("int32", "Year"), "INT64", "2024", "2024"),
        (t("int32", "Year"), "DATE", "2024", "plan:|it fits INT64"),
        (
            t("int64", "MicroDuration"),
            "INT64",
            "3600000000",
            "3600000000",
        ),
        (
            t("string", "Interval"),
            "STRING",
            r#""P1Y2M3DT4H5M6.78S""#,
            "P1Y2M3DT4H5M6.78S",
        ),
        (
            t("string", "Interval"),
            "INT64",
            r#""P1D""#,
            "plan:|it fits STRING",
        ),
        // A name on a type it is never sent as refuses the plan.
        (
            t("string", "Timestamp"),
            "TIMESTAMP",
            r#""x""#,
            "plan:|not the type it is sent as",
        ),
    ]);
}

#[test]
fn debeziums_data_names_into_every_column_they_fit() {
    let d = |ty: &str, name: &str| field(ty, &format!("io.debezium.data.{name}"), Json::Null);
    let vsd = || {
        structure(
            "io.debezium.data.VariableScaleDecimal",
            json!([{"type": "int32", "optional": false, "field": "scale"},
                   {"type": "bytes", "optional": false, "field": "value"}]),
        )
    };
    let geometry = |name: &str| {
        structure(
            &format!("io.debezium.data.geometry.{name}"),
            json!([{"type": "bytes", "optional": false, "field": "wkb"},
                   {"type": "int32", "optional": true, "field": "srid"}]),
        )
    };
    // POINT(1 2) as little-endian WKB.
    let wkb = "AQEAAAAAAAAAAADwPwAAAAAAAABA";
    let wkb_hex = "0101000000000000000000f03f0000000000000040";
    check(&[
        (
            vsd(),
            "NUMERIC",
            r#"{"scale": 3, "value": "1234"}"#,
            "-2658.824",
        ),
        (
            vsd(),
            "BIGNUMERIC",
            r#"{"value": "AQ==", "scale": 20}"#,
            "0.00000000000000000001",
        ),
        (
            vsd(),
            "STRING",
            r#"{"scale": 3, "value": "1234"}"#,
            "-2658.824",
        ),
        (
            vsd(),
            "NUMERIC",
            r#"{"scale": 20, "value": "AQ=="}"#,
            "record:|",
        ),
        (vsd(), "NUMERIC", r#"{"scale": 3}"#, "record:|needs a scale"),
        (
            vsd(),
            "INT64",
            r#"{"scale": 0, "value": "AQ=="}"#,
            "plan:|NUMERIC, BIGNUMERIC",
        ),
        // Json: the document itself, checked.
        (
            d("string", "Json"),
            "JSON",
            r#""{\"a\": [1, 2.5]}""#,
            r#"{"a": [1, 2.5]}"#,
        ),
        (d("string", "Json"), "JSON", r#""\"text\"""#, r#""text""#),
        (
            d("string", "Json"),
            "JSON",
            r#""{\"a\": 1""#,
            "record:|not a json document",
        ),
        (
            d("string", "Json"),
            "JSON",
            r#""{} x""#,
            "record:|not a json document",
        ),
        (
            d("string", "Json"),
            "STRING",
            r#""{\"a\": 1}""#,
            r#"{"a": 1}"#,
        ),
        (
            d("string", "Json"),
            "BYTES",
            r#""{}""#,
            "plan:|JSON or STRING",
        ),
        (
            d("string", "Uuid"),
            "STRING",
            r#""5f0b3c1e-8f6b-4b8e-9c1d-2a3b4c5d6e7f""#,
            "5f0b3c1e-8f6b-4b8e-9c1d-2a3b4c5d6e7f",
        ),
        (d("string", "Xml"), "STRING", r#""<a>1</a>""#, "<a>1</a>"),
        (d("string", "Enum"), "STRING", r#""red""#, "red"),
        (
            d("string", "EnumSet"),
            "STRING",
            r#""red,blue""#,
            "red,blue",
        ),
        (
            d("string", "Uuid"),
            "INT64",
            r#""x""#,
            "plan:|it fits STRING",
        ),
        (d("bytes", "Bits"), "BYTES", r#""BQ==""#, "05"),
        (d("bytes", "Bits"), "BYTES", r#""BQ""#, "05"),
        (
            geometry("Geometry"),
            "BYTES",
            &format!(r#"{{"wkb": "{wkb}", "srid": 4326}}"#),
            wkb_hex,
        ),
        (
            geometry("Geography"),
            "BYTES",
            &format!(r#"{{"srid": null, "wkb": "{wkb}"}}"#),
            wkb_hex,
        ),
        (
            geometry("Geometry"),
            "GEOGRAPHY",
            r#"{"wkb": "AA=="}"#,
            "plan:|GEOGRAPHY would need the WKB converted",
        ),
        (
            geometry("Point"),
            "STRING",
            r#"{"wkb": "AA=="}"#,
            "plan:|BYTES (the WKB) or RECORD",
        ),
    ]);
}

#[test]
fn unnamed_bytes_take_base64_with_or_without_padding() {
    let bytes = || field("bytes", "", Json::Null);
    check(&[
        (bytes(), "BYTES", r#""YQ==""#, "61"),
        (bytes(), "BYTES", r#""YQ""#, "61"),
        (bytes(), "BYTES", r#""YWI""#, "6162"),
        (bytes(), "BYTES", r#""Y""#, "record:|not base64"),
    ]);
}

#[test]
fn a_geometry_struct_into_a_record_column_is_read_field_by_field() {
    let block = json!({"type": "struct", "optional": false, "fields": [
        {"type": "struct", "optional": true, "field": "c", "name": "io.debezium.data.geometry.Point",
         "fields": [{"type": "double", "optional": false, "field": "x"},
                    {"type": "double", "optional": false, "field": "y"}]}]});
    let schema = connect_schema::parse(block.to_string().as_bytes()).unwrap();
    let table: TableSchema =
        serde_json::from_value(json!({"fields": [{"name": "c", "type": "RECORD",
        "fields": [{"name": "x", "type": "FLOAT64"}, {"name": "y", "type": "FLOAT64"}]}]}))
        .unwrap();
    let plan = Plan::compile_json(
        Some(&Arc::new(schema)),
        false,
        &table,
        &PlanOptions::default(),
    )
    .unwrap();
    let mut out = Vec::new();
    plan.transcode(br#"{"c": {"x": 1.5, "y": -2}}"#, None, &mut out)
        .unwrap();
    assert!(!out.is_empty());
}
