//! The JSON transcoder, one golden case per row of `docs/mapping.md`'s JSON tables: a record's
//! JSON text through a plan compiled for one column (with a JSON Schema property, or schemaless),
//! the row decoded by prost-reflect from the plan's own descriptor. Expected values are written
//! out by hand (dates and instants computed here independently).

use kbq_core::table_schema::TableSchema;
use kbq_transcode::json::{JsonSchema, validate};
use kbq_transcode::{Plan, PlanError, PlanOptions, RecordError, UnknownFields, file_for};
use num_bigint::BigInt;
use prost_reflect::{DescriptorPool, DynamicMessage, ReflectMessage, Value as PValue};
use prost_types::FileDescriptorSet;
use serde_json::{Map, Value as Json, json};
use std::sync::Arc;

fn to_json(v: &PValue) -> Json {
    match v {
        PValue::Bool(b) => json!(b),
        PValue::I32(i) => json!(i),
        PValue::I64(i) => json!(i),
        PValue::F64(f) if f.is_nan() => json!("NaN"),
        PValue::F64(f) if f.is_infinite() => json!(if *f > 0.0 { "inf" } else { "-inf" }),
        PValue::F64(f) => json!(f),
        PValue::String(s) => json!(s),
        PValue::Bytes(b) => {
            json!({"hex": b.iter().map(|x| format!("{x:02x}")).collect::<String>()})
        }
        PValue::List(l) => Json::Array(l.iter().map(to_json).collect()),
        PValue::Message(m) => message_json(m),
        other => panic!("unexpected proto value {other:?}"),
    }
}

fn message_json(m: &DynamicMessage) -> Json {
    let mut obj = Map::new();
    for fd in m.descriptor().fields() {
        if m.has_field(&fd) {
            obj.insert(fd.name().to_owned(), to_json(&m.get_field(&fd)));
        }
    }
    Json::Object(obj)
}

fn table(columns: Json) -> TableSchema {
    serde_json::from_value(json!({ "fields": columns })).unwrap()
}

fn col(ty: &str) -> Json {
    json!([{"name": "c", "type": ty}])
}

fn compile(schema: Option<Json>, columns: Json, options: &PlanOptions) -> Result<Plan, PlanError> {
    let schema = schema.map(|s| Arc::new(JsonSchema::parse(&s.to_string(), &[]).unwrap()));
    Plan::compile_json(schema.as_ref(), true, &table(columns), options)
}

fn run(plan: &Plan, record: &str) -> Result<Json, RecordError> {
    let mut out = vec![0xAA];
    let range = plan.transcode(record.as_bytes(), None, &mut out)?;
    assert_eq!(range.start, 1);
    let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(plan.descriptor())],
    })
    .unwrap();
    let row =
        DynamicMessage::decode(pool.get_message_by_name("Row").unwrap(), &out[range]).unwrap();
    Ok(message_json(&row))
}

/// Column `c` of type `ty` fed `value`, schemaless; the written value (`null` when none).
fn schemaless(ty: &str, value: &str) -> Result<Json, RecordError> {
    let plan = compile(None, col(ty), &PlanOptions::default()).unwrap();
    run(&plan, &format!("{{\"c\": {value}}}")).map(|r| r.get("c").cloned().unwrap_or(Json::Null))
}

/// The same through a JSON Schema whose property `c` is `property`.
fn typed(property: Json, ty: &str, value: &str) -> Result<Json, RecordError> {
    let schema = json!({"type": "object", "properties": {"c": property}});
    let plan = compile(Some(schema), col(ty), &PlanOptions::default()).unwrap();
    run(&plan, &format!("{{\"c\": {value}}}")).map(|r| r.get("c").cloned().unwrap_or(Json::Null))
}

fn class(r: Result<Json, RecordError>) -> &'static str {
    r.expect_err("a per-record error").class()
}

fn numeric(unscaled_at_scale: BigInt) -> Json {
    json!({"hex": unscaled_at_scale.to_signed_bytes_le().iter().map(|x| format!("{x:02x}")).collect::<String>()})
}

fn packed_time(h: i64, m: i64, s: i64, micros: i64) -> i64 {
    (h << 32) | (m << 26) | (s << 20) | micros
}

#[test]
fn integers_into_int64_exactly_or_a_record_error() {
    assert_eq!(
        schemaless("INT64", "-9223372036854775808"),
        Ok(json!(i64::MIN))
    );
    assert_eq!(
        schemaless("INT64", "9223372036854775807"),
        Ok(json!(i64::MAX))
    );
    assert_eq!(schemaless("INT64", "1e3"), Ok(json!(1000)));
    assert_eq!(schemaless("INT64", "\"-42\""), Ok(json!(-42)));
    assert_eq!(
        class(schemaless("INT64", "9223372036854775808")),
        "out_of_range"
    );
    assert_eq!(class(schemaless("INT64", "1.5")), "out_of_range");
    assert_eq!(class(schemaless("INT64", "\"x\"")), "out_of_range");
    assert_eq!(class(schemaless("INT64", "true")), "incompatible_schema");
    assert_eq!(
        typed(json!({"type": "integer"}), "INT64", "7"),
        Ok(json!(7))
    );
}

#[test]
fn numbers_into_float64_and_the_protojson_spellings_of_special_values() {
    assert_eq!(schemaless("FLOAT64", "0.1"), Ok(json!(0.1)));
    assert_eq!(schemaless("FLOAT64", "-2"), Ok(json!(-2.0)));
    assert_eq!(schemaless("FLOAT64", "1e308"), Ok(json!(1e308)));
    assert_eq!(schemaless("FLOAT64", "\"NaN\""), Ok(json!("NaN")));
    assert_eq!(schemaless("FLOAT64", "\"-Infinity\""), Ok(json!("-inf")));
    assert_eq!(class(schemaless("FLOAT64", "\"1.5\"")), "out_of_range");
    assert_eq!(
        typed(json!({"type": "integer"}), "FLOAT64", "3"),
        Ok(json!(3.0))
    );
}

#[test]
fn numbers_and_decimal_strings_into_numeric_exactly_as_written() {
    let nine = BigInt::from(10).pow(9);
    assert_eq!(
        schemaless("NUMERIC", "12.345"),
        Ok(numeric(BigInt::from(12_345) * BigInt::from(1_000_000)))
    );
    assert_eq!(
        schemaless("NUMERIC", "\"-0.000000001\""),
        Ok(numeric(BigInt::from(-1)))
    );
    assert_eq!(
        schemaless("NUMERIC", "1e2"),
        Ok(numeric(BigInt::from(100) * &nine))
    );
    // 0.1 + 17 digits: a double would have rounded it; the text is exact.
    assert_eq!(
        schemaless("BIGNUMERIC", "0.12345678901234567890123456789"),
        Ok(numeric(
            "12345678901234567890123456789000000000"
                .parse::<BigInt>()
                .unwrap()
        ))
    );
    assert_eq!(class(schemaless("NUMERIC", "0.0000000001")), "out_of_range");
    assert_eq!(class(schemaless("NUMERIC", "1e29")), "out_of_range");
    assert_eq!(
        typed(json!({"type": "string"}), "NUMERIC", "\"2\""),
        Ok(numeric(BigInt::from(2) * nine))
    );
}

#[test]
fn booleans_strings_and_bytes() {
    assert_eq!(schemaless("BOOL", "false"), Ok(json!(false)));
    assert_eq!(class(schemaless("BOOL", "0")), "incompatible_schema");
    assert_eq!(
        schemaless("STRING", r#""a\"\u00e9\ud83d\ude00""#),
        Ok(json!("a\"é😀"))
    );
    assert_eq!(
        schemaless("GEOGRAPHY", "\"POINT(1 2)\""),
        Ok(json!("POINT(1 2)"))
    );
    assert_eq!(class(schemaless("STRING", "12")), "incompatible_schema");
    assert_eq!(
        schemaless("BYTES", "\"AP8Q\""),
        Ok(json!({"hex": "00ff10"}))
    );
    assert_eq!(schemaless("BYTES", "\"_-8=\""), Ok(json!({"hex": "ffef"})));
    assert_eq!(
        class(schemaless("BYTES", "\"not base64!\"")),
        "out_of_range"
    );
}

#[test]
fn any_value_into_a_json_column_as_its_text() {
    assert_eq!(
        schemaless("JSON", r#"{"k": [1, 2.5, null]}"#),
        Ok(json!(r#"{"k": [1, 2.5, null]}"#))
    );
    assert_eq!(schemaless("JSON", "\"s\""), Ok(json!("\"s\"")));
    assert_eq!(schemaless("JSON", "3"), Ok(json!("3")));
    // JSON null is SQL NULL, as for every column.
    assert_eq!(schemaless("JSON", "null"), Ok(Json::Null));
}

#[test]
fn timestamps_from_rfc3339_text_or_integers_in_a_known_unit() {
    // 2024-02-29T21:30:00.123456Z = 1709242200.123456 s (date -d, independently).
    let micros = 1_709_242_200_123_456i64;
    assert_eq!(
        schemaless("TIMESTAMP", "\"2024-02-29T23:30:00.1234569+02:00\""),
        Ok(json!(micros))
    );
    assert_eq!(
        schemaless("TIMESTAMP", "\"2024-02-29t21:30:00.123456z\""),
        Ok(json!(micros))
    );
    assert_eq!(
        class(schemaless("TIMESTAMP", "\"2024-02-29T21:30:00\"")),
        "out_of_range"
    );
    assert_eq!(
        class(schemaless("TIMESTAMP", "\"10000-01-01T00:00:00Z\"")),
        "out_of_range"
    );
    // Schemaless integers are µs (BigQuery's own convention for integer TIMESTAMP input).
    assert_eq!(schemaless("TIMESTAMP", "-1"), Ok(json!(-1)));
    let connect = json!({"type": "integer", "title": "org.apache.kafka.connect.data.Timestamp"});
    assert_eq!(typed(connect, "TIMESTAMP", "-1"), Ok(json!(-1000)));
    let text = json!({"type": "string", "format": "date-time"});
    assert_eq!(
        typed(text, "TIMESTAMP", "\"1970-01-01T00:00:01Z\""),
        Ok(json!(1_000_000))
    );
}

#[test]
fn an_integer_without_connects_title_has_no_unit_and_refuses_the_plan() {
    let schema = json!({"type": "object", "properties": {"c": {"type": "integer"}}});
    for ty in ["TIMESTAMP", "DATE", "TIME"] {
        let err = compile(Some(schema.clone()), col(ty), &PlanOptions::default()).unwrap_err();
        assert!(
            err.to_string().contains("org.apache.kafka.connect.data."),
            "{err}"
        );
    }
}

#[test]
fn dates_times_and_datetimes_are_civil() {
    assert_eq!(schemaless("DATE", "\"0001-01-01\""), Ok(json!(-719_162)));
    assert_eq!(schemaless("DATE", "\"2024-02-29\""), Ok(json!(19_782)));
    assert_eq!(schemaless("DATE", "19782"), Ok(json!(19_782)));
    assert_eq!(class(schemaless("DATE", "\"2023-02-29\"")), "out_of_range");
    assert_eq!(class(schemaless("DATE", "2932897")), "out_of_range");
    let connect_date = json!({"type": "integer", "title": "org.apache.kafka.connect.data.Date"});
    assert_eq!(typed(connect_date, "DATE", "1"), Ok(json!(1)));
    assert_eq!(
        schemaless("TIME", "\"23:59:59.999999\""),
        Ok(json!(packed_time(23, 59, 59, 999_999)))
    );
    assert_eq!(
        schemaless("TIME", "\"12:00:00Z\""),
        Ok(json!(packed_time(12, 0, 0, 0)))
    );
    assert_eq!(
        class(schemaless("TIME", "\"12:00:00+01:00\"")),
        "out_of_range"
    );
    assert_eq!(class(schemaless("TIME", "3600000")), "incompatible_schema");
    let connect_time = json!({"type": "integer", "title": "org.apache.kafka.connect.data.Time"});
    assert_eq!(
        typed(connect_time, "TIME", "3723004"),
        Ok(json!(packed_time(1, 2, 3, 4000)))
    );
    // DATETIME: year<<46 | month<<42 | day<<37 | time.
    let dt = (2024i64 << 46) | (2 << 42) | (29 << 37) | packed_time(1, 2, 3, 5);
    assert_eq!(
        schemaless("DATETIME", "\"2024-02-29 01:02:03.000005\""),
        Ok(json!(dt))
    );
    assert_eq!(
        class(schemaless("DATETIME", "\"2024-02-29T01:02:03Z\"")),
        "out_of_range"
    );
}

#[test]
fn objects_into_records_and_arrays_into_repeated_columns() {
    let columns = json!([
        {"name": "r", "type": "RECORD", "fields": [{"name": "a", "type": "INT64"}, {"name": "b", "type": "STRING"}]},
        {"name": "xs", "type": "INT64", "mode": "REPEATED"},
        {"name": "rs", "type": "RECORD", "mode": "REPEATED", "fields": [{"name": "a", "type": "INT64"}]},
    ]);
    let plan = compile(None, columns, &PlanOptions::default()).unwrap();
    assert_eq!(
        run(
            &plan,
            r#"{"r": {"B": "x", "a": 1, "extra": [1]}, "xs": [1, 2], "rs": [{"a": 3}, {}]}"#
        ),
        Ok(json!({"r": {"a": 1, "b": "x"}, "xs": [1, 2], "rs": [{"a": 3}, {}]}))
    );
    assert_eq!(run(&plan, r#"{"xs": null, "rs": []}"#), Ok(json!({})));
    assert_eq!(
        class(run(&plan, r#"{"xs": [1, null]}"#)),
        "incompatible_schema"
    );
    assert_eq!(class(run(&plan, r#"{"xs": 1}"#)), "incompatible_schema");
    assert_eq!(class(run(&plan, r#"{"r": []}"#)), "incompatible_schema");
}

#[test]
fn nulls_absent_keys_required_columns_and_keys_matched_by_name() {
    let columns = json!([
        {"name": "id", "type": "INT64", "mode": "REQUIRED"},
        {"name": "Name", "type": "STRING"},
    ]);
    let plan = compile(None, columns.clone(), &PlanOptions::default()).unwrap();
    assert_eq!(
        run(&plan, r#"{"name": "x", "id": 1, "other": {"a": [1]}}"#),
        Ok(json!({"id": 1, "Name": "x"}))
    );
    assert_eq!(
        run(&plan, r#"{"id": 1, "Name": null}"#),
        Ok(json!({"id": 1}))
    );
    assert_eq!(class(run(&plan, r#"{"Name": "x"}"#)), "incompatible_schema");
    assert_eq!(class(run(&plan, r#"{"id": null}"#)), "incompatible_schema");
    assert_eq!(class(run(&plan, r#"{"id": 1, "id": 2}"#)), "malformed_json");
    let strict = PlanOptions {
        unknown_fields: UnknownFields::Error,
        ..PlanOptions::default()
    };
    let plan = compile(None, columns.clone(), &strict).unwrap();
    assert_eq!(
        class(run(&plan, r#"{"id": 1, "other": 2}"#)),
        "incompatible_schema"
    );
    // With a schema, a property without a column refuses the plan instead.
    let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}, "other": {}}});
    let err = compile(Some(schema), columns, &strict).unwrap_err();
    assert!(err.to_string().contains("other"), "{err}");
}

#[test]
fn schema_types_a_column_cannot_hold_refuse_the_plan_naming_both() {
    for (property, ty) in [
        (json!({"type": "string"}), "INT64"),
        (json!({"type": "number"}), "INT64"),
        (json!({"type": "integer"}), "STRING"),
        (json!({"type": "object"}), "STRING"),
        (
            json!({"type": "array", "items": {"type": "string"}}),
            "INT64",
        ),
        (json!({"type": "string"}), "RECORD"),
    ] {
        let schema = json!({"type": "object", "properties": {"c": property}});
        let columns = if ty == "RECORD" {
            json!([{"name": "c", "type": "RECORD", "fields": [{"name": "a", "type": "STRING"}]}])
        } else {
            col(ty)
        };
        let err = compile(Some(schema), columns, &PlanOptions::default()).unwrap_err();
        assert!(err.to_string().starts_with("column c: json "), "{err}");
    }
    // References, unions with null and allOf are read through.
    let schema = json!({
        "type": "object",
        "definitions": {"n": {"type": "integer"}},
        "properties": {
            "a": {"$ref": "#/definitions/n"},
            "b": {"oneOf": [{"type": "null"}, {"type": "integer"}]},
            "c": {"type": ["integer", "null"]},
            "d": {"allOf": [{"type": "integer"}, {"minimum": 0}]},
        }
    });
    let columns = json!([
        {"name": "a", "type": "STRING"}, {"name": "b", "type": "STRING"},
        {"name": "c", "type": "STRING"}, {"name": "d", "type": "STRING"},
    ]);
    let errs: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|keep| {
            let mut s = schema.clone();
            let props = s["properties"].as_object_mut().unwrap();
            props.retain(|k, _| k == keep);
            let cols = json!([columns
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == *keep)
                .unwrap()]);
            compile(Some(s), cols, &PlanOptions::default())
                .unwrap_err()
                .to_string()
        })
        .collect();
    for e in &errs {
        assert!(
            e.contains("json integer cannot be written to a STRING column"),
            "{e}"
        );
    }
}

#[test]
fn kafka_connect_decimals_and_typeless_enums() {
    let nine = BigInt::from(10).pow(9);
    // Connect's Decimal at `connect.parameters.scale`: a number as written, or the base64 of
    // the unscaled big-endian two's complement (`decimal.format: BASE64`): 0x04d2 = 1234.
    let number = json!({"type": "number", "title": "org.apache.kafka.connect.data.Decimal",
                        "connect.parameters": {"scale": "2"}});
    assert_eq!(
        typed(number, "NUMERIC", "12.34"),
        Ok(numeric(BigInt::from(1234) * &nine / 100))
    );
    let bytes = json!({"title": "org.apache.kafka.connect.data.Decimal", "connect.type": "bytes",
                       "connect.parameters": {"scale": "2"}});
    assert_eq!(
        typed(bytes.clone(), "NUMERIC", "\"BNI=\""),
        Ok(numeric(BigInt::from(1234) * &nine / 100))
    );
    // 0xfb2e = -1234, into BIGNUMERIC (scale 38).
    assert_eq!(
        typed(bytes.clone(), "BIGNUMERIC", "\"+y4=\""),
        Ok(numeric(BigInt::from(-1234) * BigInt::from(10).pow(36)))
    );
    assert_eq!(
        class(typed(bytes, "NUMERIC", "\"not base64\"")),
        "out_of_range"
    );
    // An enum without `type` is the type its values share: a string enum fits STRING only.
    let status = json!({"enum": ["NEW", "SHIPPED"]});
    assert_eq!(typed(status.clone(), "STRING", "\"NEW\""), Ok(json!("NEW")));
    let schema = json!({"type": "object", "properties": {"c": status}});
    let err = compile(Some(schema), col("INT64"), &PlanOptions::default()).unwrap_err();
    assert!(err.to_string().contains("json string"), "{err}");
}

#[test]
fn malformed_json_is_a_record_error_never_a_panic() {
    let plan = compile(None, col("STRING"), &PlanOptions::default()).unwrap();
    for bad in [
        "",
        "[]",
        "{",
        "{\"c\": }",
        "{\"c\": \"x\"",
        "{\"c\": \"x\"} x",
        "{\"c\" \"x\"}",
        "{\"c\": \"x\",}",
        "{c: 1}",
        "{\"c\": tru}",
        "{\"c\": \"\\q\"}",
        "{\"c\": 01}",
    ] {
        assert_eq!(class(run(&plan, bad)), "malformed_json", "{bad:?}");
    }
    let mut out = Vec::new();
    let err = plan
        .transcode(b"{\"c\": \"\xff\"}", None, &mut out)
        .unwrap_err();
    assert_eq!(err.class(), "malformed_json");
    let deep = format!("{{\"x\": {}{}}}", "[".repeat(200), "]".repeat(200));
    assert_eq!(class(run(&plan, &deep)), "malformed_json");
}

#[test]
fn validation_applies_the_registered_schema_before_the_plan() {
    let schema = json!({
        "type": "object",
        "properties": {
            "c": {"type": "string", "maxLength": 3, "enum": ["a", "abc"]},
            "n": {"type": "integer", "minimum": 0, "exclusiveMaximum": 10},
            "xs": {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
        },
        "required": ["c"],
        "additionalProperties": false,
    });
    let plan = compile(Some(schema.clone()), col("STRING"), &PlanOptions::default()).unwrap();
    assert_eq!(
        run(&plan, r#"{"c": "abc", "n": 9, "xs": [1]}"#),
        Ok(json!({"c": "abc"}))
    );
    for bad in [
        r#"{"c": "ab"}"#,
        r#"{"c": "abcd"}"#,
        r#"{"n": 1}"#,
        r#"{"c": "a", "n": 10}"#,
        r#"{"c": "a", "n": -1}"#,
        r#"{"c": "a", "xs": [1, 2, 3]}"#,
        r#"{"c": "a", "xs": ["1"]}"#,
        r#"{"c": "a", "z": 1}"#,
    ] {
        assert_eq!(class(run(&plan, bad)), "schema_violation", "{bad}");
    }
    // Without validation the same plan writes what fits the table.
    let s = Arc::new(JsonSchema::parse(&schema.to_string(), &[]).unwrap());
    let loose = Plan::compile_json(
        Some(&s),
        false,
        &table(col("STRING")),
        &PlanOptions::default(),
    )
    .unwrap();
    assert_eq!(
        run(&loose, r#"{"c": "abcd", "z": 1}"#),
        Ok(json!({"c": "abcd"}))
    );
    assert!(validate(&s, &json!({"c": "a"})).is_ok());
}

/// BYTES take base64 as protojson does: either alphabet, with or without `=` padding (`"YQ"`
/// is `a`, as `"YQ=="` is).
#[test]
fn bytes_take_base64_with_or_without_padding() {
    for text in ["\"YQ\"", "\"YQ==\"", "\"YWI\"", "\"_-8\""] {
        let want = match text {
            "\"YQ\"" | "\"YQ==\"" => "61",
            "\"YWI\"" => "6162",
            _ => "ffef",
        };
        assert_eq!(
            schemaless("BYTES", text),
            Ok(json!({ "hex": want })),
            "{text}"
        );
    }
    // padding where none belongs is still not base64
    assert_eq!(class(schemaless("BYTES", "\"YQ=\"")), "out_of_range");
}
