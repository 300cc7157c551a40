//! Golden tests: one per row of `docs/mapping.md` and per edge case of a type (bounds, nulls,
//! precision), with the
//! expected BigQuery value written out by hand.

use crate::support::differential::Both;
use apache_avro::types::Value;
use apache_avro::{Decimal, Schema};
use kbq_core::table_schema::TableSchema;
use kbq_transcode::{
    AvroSchema, KafkaHeader, KafkaMetadata, MetadataColumns, Plan, PlanError, PlanOptions,
    RecordError, UnknownFields, file_for, frame_confluent, split_confluent,
};
use prost_reflect::{DescriptorPool, DynamicMessage, ReflectMessage, Value as PValue};
use prost_types::FileDescriptorSet;

fn table(json: &str) -> TableSchema {
    serde_json::from_str(&format!(r#"{{"fields":{json}}}"#)).unwrap()
}

fn record(fields: &str) -> String {
    format!(r#"{{"type":"record","name":"r","fields":{fields}}}"#)
}

fn compile(avsc: &str, table_json: &str, options: &PlanOptions) -> Result<Plan, PlanError> {
    Plan::compile(
        &AvroSchema::parse(avsc).unwrap(),
        &table(table_json),
        options,
    )
}

fn encode(avsc: &str, fields: Vec<(&str, Value)>) -> Vec<u8> {
    let schema = Schema::parse_str(avsc).unwrap();
    let value = Value::Record(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
    apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
        .build()
        .unwrap()
        .write_value_to_vec(value)
        .unwrap()
}

fn decode(plan: &Plan, row: &[u8]) -> DynamicMessage {
    let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(plan.descriptor())],
    })
    .unwrap();
    DynamicMessage::decode(pool.get_message_by_name("Row").unwrap(), row).unwrap()
}

fn transcode(plan: &Plan, avro: &[u8]) -> Result<DynamicMessage, RecordError> {
    let mut out = Vec::new();
    let range = plan.transcode_both(avro, None, &mut out)?;
    Ok(decode(plan, &out[range]))
}

fn field(msg: &DynamicMessage, name: &str) -> Option<PValue> {
    let fd = msg.descriptor().get_field_by_name(name)?;
    msg.has_field(&fd).then(|| msg.get_field(&fd).into_owned())
}

/// One column of one type: the Avro field `v` of `avro_type` into a column `v` of `column`.
fn single(avro_type: &str, column: &str, value: Value) -> Result<Option<PValue>, RecordError> {
    let avsc = record(&format!(r#"[{{"name":"v","type":{avro_type}}}]"#));
    let plan = compile(
        &avsc,
        &format!(r#"[{{"name":"v","type":"{column}"}}]"#),
        &PlanOptions::default(),
    )
    .unwrap();
    transcode(&plan, &encode(&avsc, vec![("v", value)])).map(|m| field(&m, "v"))
}

fn packed_datetime(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: i64) -> i64 {
    (((y << 26) | (mo << 22) | (d << 17) | (h << 12) | (mi << 6) | s) << 20) | us
}

fn packed_time(h: i64, mi: i64, s: i64, us: i64) -> i64 {
    (((h << 12) | (mi << 6) | s) << 20) | us
}

fn value_error(r: Result<Option<PValue>, RecordError>) -> String {
    match r {
        Err(RecordError::Value { reason, .. }) => reason,
        other => panic!("expected a value error, got {other:?}"),
    }
}

// --- primitives -------------------------------------------------------------------------------

#[test]
fn primitives_map_to_their_column_types() {
    assert_eq!(
        single(r#""int""#, "INTEGER", Value::Int(-5)).unwrap(),
        Some(PValue::I64(-5))
    );
    assert_eq!(
        single(r#""long""#, "INT64", Value::Long(i64::MIN)).unwrap(),
        Some(PValue::I64(i64::MIN))
    );
    assert_eq!(
        single(r#""float""#, "FLOAT", Value::Float(1.5)).unwrap(),
        Some(PValue::F64(1.5))
    );
    assert_eq!(
        single(r#""double""#, "FLOAT64", Value::Double(f64::INFINITY)).unwrap(),
        Some(PValue::F64(f64::INFINITY))
    );
    assert_eq!(
        single(r#""boolean""#, "BOOL", Value::Boolean(false)).unwrap(),
        Some(PValue::Bool(false)),
        "false is present, not NULL (proto2 presence)"
    );
    assert_eq!(
        single(r#""string""#, "STRING", Value::String(String::new())).unwrap(),
        Some(PValue::String(String::new()))
    );
    assert_eq!(
        single(r#""bytes""#, "BYTES", Value::Bytes(vec![0, 255])).unwrap(),
        Some(PValue::Bytes(vec![0, 255].into()))
    );
    assert_eq!(
        single(
            r#"{"type":"fixed","name":"f","size":3}"#,
            "BYTES",
            Value::Fixed(3, vec![1, 2, 3])
        )
        .unwrap(),
        Some(PValue::Bytes(vec![1, 2, 3].into()))
    );
    assert_eq!(
        single(
            r#"{"type":"enum","name":"e","symbols":["RED","GREEN"]}"#,
            "STRING",
            Value::Enum(1, "GREEN".into())
        )
        .unwrap(),
        Some(PValue::String("GREEN".into()))
    );
}

// --- timestamps, dates, times -----------------------------------------------------------------

#[test]
fn timestamps_in_millis_micros_and_nanos_become_microseconds() {
    let ts = |unit: &str, v: Value| {
        single(
            &format!(r#"{{"type":"long","logicalType":"timestamp-{unit}"}}"#),
            "TIMESTAMP",
            v,
        )
    };
    assert_eq!(
        ts("millis", Value::TimestampMillis(1_700_000_000_123)).unwrap(),
        Some(PValue::I64(1_700_000_000_123_000))
    );
    assert_eq!(
        ts("micros", Value::TimestampMicros(-1)).unwrap(),
        Some(PValue::I64(-1))
    );
    // Nanoseconds round down to the microsecond, also before the epoch.
    assert_eq!(
        ts("nanos", Value::TimestampNanos(1_999)).unwrap(),
        Some(PValue::I64(1))
    );
    assert_eq!(
        ts("nanos", Value::TimestampNanos(-1)).unwrap(),
        Some(PValue::I64(-1))
    );
    assert!(value_error(ts("millis", Value::TimestampMillis(i64::MAX))).contains("timestamp"));
    assert!(
        value_error(ts(
            "micros",
            Value::TimestampMicros(253_402_300_800_000_000)
        ))
        .contains("outside")
    );
}

#[test]
fn local_timestamps_become_datetime_with_seconds_even_on_a_minute_boundary() {
    // 2026-08-31T12:30:00: the Flink connector wrote "2026-08-31T12:30" and BigQuery refused it.
    let micros = 1_788_179_400_000_000i64;
    let dt = |unit: &str, v: Value| {
        single(
            &format!(r#"{{"type":"long","logicalType":"local-timestamp-{unit}"}}"#),
            "DATETIME",
            v,
        )
    };
    let expected = Some(PValue::I64(packed_datetime(2026, 8, 31, 12, 30, 0, 0)));
    assert_eq!(
        dt("millis", Value::LocalTimestampMillis(micros / 1000)).unwrap(),
        expected
    );
    assert_eq!(
        dt("micros", Value::LocalTimestampMicros(micros)).unwrap(),
        expected
    );
    assert_eq!(
        dt("nanos", Value::LocalTimestampNanos(micros * 1000 + 999)).unwrap(),
        expected
    );
    assert_eq!(
        dt("micros", Value::LocalTimestampMicros(micros + 7)).unwrap(),
        Some(PValue::I64(packed_datetime(2026, 8, 31, 12, 30, 0, 7)))
    );
    // A DATETIME literal string passes through as a string.
    assert_eq!(
        single(
            r#"{"type":"string","logicalType":"datetime"}"#,
            "DATETIME",
            Value::String("2026-08-31 12:30:00".into())
        )
        .unwrap(),
        Some(PValue::String("2026-08-31 12:30:00".into()))
    );
    assert!(value_error(dt("micros", Value::LocalTimestampMicros(i64::MIN))).contains("datetime"));
}

#[test]
fn times_in_millis_and_micros_are_packed_with_seconds() {
    assert_eq!(
        single(
            r#"{"type":"int","logicalType":"time-millis"}"#,
            "TIME",
            Value::TimeMillis((13 * 3600 + 5 * 60) * 1000 + 7)
        )
        .unwrap(),
        Some(PValue::I64(packed_time(13, 5, 0, 7000)))
    );
    assert_eq!(
        single(
            r#"{"type":"long","logicalType":"time-micros"}"#,
            "TIME",
            Value::TimeMicros(86_399_999_999)
        )
        .unwrap(),
        Some(PValue::I64(packed_time(23, 59, 59, 999_999)))
    );
    assert!(
        value_error(single(
            r#"{"type":"long","logicalType":"time-micros"}"#,
            "TIME",
            Value::TimeMicros(86_400_000_000)
        ))
        .contains("time of day")
    );
}

#[test]
fn dates_are_int32_days_within_0001_01_01_and_9999_12_31() {
    let date = |d| {
        single(
            r#"{"type":"int","logicalType":"date"}"#,
            "DATE",
            Value::Date(d),
        )
    };
    assert_eq!(date(-719_162).unwrap(), Some(PValue::I32(-719_162)));
    assert_eq!(date(2_932_896).unwrap(), Some(PValue::I32(2_932_896)));
    assert!(value_error(date(-719_163)).contains("outside"));
    assert!(value_error(date(2_932_897)).contains("outside"));
}

// --- decimals ---------------------------------------------------------------------------------

fn numeric_le(unscaled_at_target: i128) -> PValue {
    let mut b = unscaled_at_target.to_le_bytes().to_vec();
    while b.len() > 1 {
        let (last, prev) = (b[b.len() - 1], b[b.len() - 2]);
        if (last == 0 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0) {
            b.pop();
        } else {
            break;
        }
    }
    PValue::Bytes(b.into())
}

fn dec(bytes_or_fixed: &str, p: u32, s: u32) -> String {
    match bytes_or_fixed {
        "bytes" => {
            format!(r#"{{"type":"bytes","logicalType":"decimal","precision":{p},"scale":{s}}}"#)
        }
        _ => format!(
            r#"{{"type":"fixed","name":"d","size":16,"logicalType":"decimal","precision":{p},"scale":{s}}}"#
        ),
    }
}

/// apache-avro sign-extends or trims the big-endian bytes to the bytes/fixed encoding itself.
fn decimal_value(unscaled: i128) -> Value {
    Value::Decimal(Decimal::from(unscaled.to_be_bytes().to_vec()))
}

#[test]
fn decimals_on_bytes_and_on_fixed_become_numeric_bytes() {
    for kind in ["bytes", "fixed"] {
        // -123.45 at scale 2 → -123450000000 at scale 9.
        assert_eq!(
            single(&dec(kind, 10, 2), "NUMERIC", decimal_value(-12_345)).unwrap(),
            Some(numeric_le(-123_450_000_000)),
            "{kind}"
        );
        // The largest NUMERIC: 29 integer digits and 9 fractional digits.
        let max = 10i128.pow(38) - 1;
        assert_eq!(
            single(&dec(kind, 38, 9), "NUMERIC", decimal_value(max)).unwrap(),
            Some(numeric_le(max)),
            "{kind}"
        );
        assert_eq!(
            single(&dec(kind, 38, 9), "NUMERIC", decimal_value(-max)).unwrap(),
            Some(numeric_le(-max)),
            "{kind}"
        );
        // A finer scale is fine when the extra digits are zero, an error otherwise.
        assert_eq!(
            single(&dec(kind, 20, 12), "NUMERIC", decimal_value(5_000)).unwrap(),
            Some(numeric_le(5)),
            "{kind}"
        );
        assert!(
            value_error(single(&dec(kind, 20, 12), "NUMERIC", decimal_value(5_001)))
                .contains("fractional digits")
        );
        // BIGNUMERIC is written at scale 38.
        assert_eq!(
            single(&dec(kind, 10, 0), "BIGNUMERIC", decimal_value(-1)).unwrap(),
            Some(numeric_le(-(10i128.pow(38)))),
            "{kind}"
        );
    }
    // 10^29 does not fit NUMERIC's 29 integer digits.
    assert!(
        value_error(single(
            &dec("bytes", 38, 0),
            "NUMERIC",
            decimal_value(10i128.pow(29))
        ))
        .contains("range of NUMERIC")
    );
}

#[test]
fn integers_can_fill_numeric_columns() {
    assert_eq!(
        single(r#""long""#, "NUMERIC", Value::Long(-2)).unwrap(),
        Some(numeric_le(-2_000_000_000))
    );
}

// --- strings with meaning ---------------------------------------------------------------------

#[test]
fn uuids_become_strings_from_string_or_fixed() {
    let u = apache_avro::Uuid::parse_str("0123abcd-4567-89ef-0123-456789abcdef").unwrap();
    assert_eq!(
        single(
            r#"{"type":"string","logicalType":"uuid"}"#,
            "STRING",
            Value::Uuid(u)
        )
        .unwrap(),
        Some(PValue::String(u.to_string()))
    );
    assert_eq!(
        single(
            r#"{"type":"fixed","name":"u","size":16,"logicalType":"uuid"}"#,
            "STRING",
            Value::Uuid(u)
        )
        .unwrap(),
        Some(PValue::String(
            "0123abcd-4567-89ef-0123-456789abcdef".into()
        ))
    );
}

#[test]
fn json_columns_take_any_json_value_under_every_annotation() {
    for annotation in [
        r#""sqlType":"JSON""#,
        r#""logicalType":"Json""#,
        r#""logicalType":"json""#,
    ] {
        let ty = format!(r#"{{"type":"string",{annotation}}}"#);
        for text in [r#"{"a":1}"#, "[1,2]", "3", "\"s\"", "null", "true"] {
            assert_eq!(
                single(&ty, "JSON", Value::String(text.into())).unwrap(),
                Some(PValue::String(text.into())),
                "{annotation} {text}"
            );
        }
        assert!(value_error(single(&ty, "JSON", Value::String("{".into()))).contains("json"));
    }
}

#[test]
fn geography_strings_pass_through() {
    for annotation in [
        r#""sqlType":"GEOGRAPHY""#,
        r#""logicalType":"geography_wkt""#,
    ] {
        let ty = format!(r#"{{"type":"string",{annotation}}}"#);
        assert_eq!(
            single(&ty, "GEOGRAPHY", Value::String("POINT(1 2)".into())).unwrap(),
            Some(PValue::String("POINT(1 2)".into()))
        );
    }
}

#[test]
fn records_maps_and_arrays_render_as_json_in_json_columns() {
    let avsc = record(
        r#"[{"name":"m","type":{"type":"map","values":["null","double"]}},
            {"name":"r","type":{"type":"record","name":"n","fields":[
               {"name":"s","type":"string"},{"name":"b","type":"bytes"},
               {"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":5,"scale":2}}]}},
            {"name":"a","type":{"type":"array","items":"long"}}]"#,
    );
    let plan = compile(
        &avsc,
        r#"[{"name":"m","type":"JSON"},{"name":"r","type":"JSON"},{"name":"a","type":"STRING"}]"#,
        &PlanOptions::default(),
    )
    .unwrap();
    let bytes = encode(
        &avsc,
        vec![
            (
                "m",
                Value::Map(
                    [(
                        "k\"1".to_string(),
                        Value::Union(1, Box::new(Value::Double(0.5))),
                    )]
                    .into_iter()
                    .collect(),
                ),
            ),
            (
                "r",
                Value::Record(vec![
                    ("s".into(), Value::String("x\ny".into())),
                    ("b".into(), Value::Bytes(vec![0xff])),
                    ("d".into(), Value::Decimal(Decimal::from(vec![0xfa]))),
                ]),
            ),
            ("a", Value::Array(vec![Value::Long(1), Value::Long(-2)])),
        ],
    );
    let m = transcode(&plan, &bytes).unwrap();
    assert_eq!(
        field(&m, "m"),
        Some(PValue::String(r#"{"k\"1":0.5}"#.into()))
    );
    assert_eq!(
        field(&m, "r"),
        Some(PValue::String(
            r#"{"s":"x\ny","b":"/w==","d":"-0.06"}"#.into()
        ))
    );
    assert_eq!(field(&m, "a"), Some(PValue::String("[1,-2]".into())));
}

// --- unions, records, arrays, maps ------------------------------------------------------------

#[test]
fn nullable_unions_work_with_null_first_or_last() {
    for (ty, null_index, value_index) in
        [(r#"["null","long"]"#, 0, 1), (r#"["long","null"]"#, 1, 0)]
    {
        assert_eq!(
            single(ty, "INT64", Value::Union(null_index, Box::new(Value::Null))).unwrap(),
            None
        );
        assert_eq!(
            single(
                ty,
                "INT64",
                Value::Union(value_index, Box::new(Value::Long(0)))
            )
            .unwrap(),
            Some(PValue::I64(0))
        );
    }
}

#[test]
fn fields_that_can_only_be_null_are_read_and_write_nothing() {
    let avsc = record(
        r#"[{"name":"n","type":"null"},{"name":"u","type":["null"]},{"name":"a","type":"long"}]"#,
    );
    let plan = compile(
        &avsc,
        r#"[{"name":"n","type":"STRING"},{"name":"u","type":"INT64"},{"name":"a","type":"INT64"}]"#,
        &PlanOptions::default(),
    )
    .unwrap();
    let bytes = encode(
        &avsc,
        vec![
            ("n", Value::Null),
            ("u", Value::Union(0, Box::new(Value::Null))),
            ("a", Value::Long(5)),
        ],
    );
    let m = transcode(&plan, &bytes).unwrap();
    assert_eq!(field(&m, "a"), Some(PValue::I64(5)));
    assert_eq!(plan.descriptor().field.len(), 1);
}

#[test]
fn nested_records_arrays_of_records_and_nullable_arrays() {
    let avsc = record(
        r#"[{"name":"inner","type":{"type":"record","name":"i","fields":[
                {"name":"x","type":"long"},
                {"name":"deep","type":{"type":"record","name":"d","fields":[{"name":"s","type":"string"}]}}]}},
            {"name":"items","type":{"type":"array","items":{"type":"record","name":"it","fields":[
                {"name":"n","type":"int"}]}}},
            {"name":"maybe","type":["null",{"type":"array","items":"string"}]}]"#,
    );
    let plan = compile(
        &avsc,
        r#"[{"name":"inner","type":"RECORD","fields":[{"name":"x","type":"INT64"},
              {"name":"deep","type":"STRUCT","fields":[{"name":"s","type":"STRING"}]}]},
            {"name":"items","type":"RECORD","mode":"REPEATED","fields":[{"name":"n","type":"INT64"}]},
            {"name":"maybe","type":"STRING","mode":"REPEATED"}]"#,
        &PlanOptions::default(),
    )
    .unwrap();
    // A long string makes the nested message longer than 127 bytes (multi-byte length).
    let long = "s".repeat(300);
    let bytes = encode(
        &avsc,
        vec![
            (
                "inner",
                Value::Record(vec![
                    ("x".into(), Value::Long(7)),
                    (
                        "deep".into(),
                        Value::Record(vec![("s".into(), Value::String(long.clone()))]),
                    ),
                ]),
            ),
            (
                "items",
                Value::Array(vec![
                    Value::Record(vec![("n".into(), Value::Int(1))]),
                    Value::Record(vec![("n".into(), Value::Int(2))]),
                ]),
            ),
            ("maybe", Value::Union(0, Box::new(Value::Null))),
        ],
    );
    let m = transcode(&plan, &bytes).unwrap();
    let PValue::Message(inner) = field(&m, "inner").unwrap() else {
        panic!()
    };
    assert_eq!(field(&inner, "x"), Some(PValue::I64(7)));
    let PValue::Message(deep) = field(&inner, "deep").unwrap() else {
        panic!()
    };
    assert_eq!(field(&deep, "s"), Some(PValue::String(long)));
    let PValue::List(items) = field(&m, "items").unwrap() else {
        panic!()
    };
    let ns: Vec<PValue> = items
        .iter()
        .map(|i| field(i.as_message().unwrap(), "n").unwrap())
        .collect();
    assert_eq!(ns, vec![PValue::I64(1), PValue::I64(2)]);
    assert_eq!(
        field(&m, "maybe"),
        None,
        "a null array is an empty REPEATED"
    );
}

#[test]
fn a_null_element_in_an_array_is_a_per_record_error() {
    let r = single(
        r#"{"type":"array","items":["null","long"]}"#,
        "INT64\",\"mode\":\"REPEATED",
        Value::Array(vec![
            Value::Union(1, Box::new(Value::Long(1))),
            Value::Union(0, Box::new(Value::Null)),
        ]),
    );
    assert!(matches!(r, Err(RecordError::NullElement { .. })), "{r:?}");
}

#[test]
fn maps_become_repeated_key_value_records() {
    let avsc = record(r#"[{"name":"m","type":{"type":"map","values":"long"}}]"#);
    let plan = compile(
        &avsc,
        r#"[{"name":"m","type":"RECORD","mode":"REPEATED","fields":[
              {"name":"key","type":"STRING"},{"name":"value","type":"INT64"}]}]"#,
        &PlanOptions::default(),
    )
    .unwrap();
    let bytes = encode(
        &avsc,
        vec![(
            "m",
            Value::Map([("a".to_string(), Value::Long(1))].into_iter().collect()),
        )],
    );
    let m = transcode(&plan, &bytes).unwrap();
    let PValue::List(entries) = field(&m, "m").unwrap() else {
        panic!()
    };
    let e = entries[0].as_message().unwrap();
    assert_eq!(field(e, "key"), Some(PValue::String("a".into())));
    assert_eq!(field(e, "value"), Some(PValue::I64(1)));
}

// --- resolution against the table -------------------------------------------------------------

#[test]
fn columns_match_case_insensitively_and_missing_ones_stay_unset() {
    let avsc = record(r#"[{"name":"UserId","type":"long"},{"name":"extra","type":"string"}]"#);
    let t = r#"[{"name":"userid","type":"INT64","mode":"REQUIRED"},
                {"name":"note","type":"STRING"},
                {"name":"filled","type":"STRING","mode":"REQUIRED","defaultValueExpression":"'x'"},
                {"name":"span","type":"RANGE"}]"#;
    let plan = compile(&avsc, t, &PlanOptions::default()).unwrap();
    let names: Vec<String> = plan
        .descriptor()
        .field
        .iter()
        .map(|f| f.name().to_owned())
        .collect();
    // Only written columns are in the descriptor, so BigQuery applies NULL or the default.
    assert_eq!(names, vec!["userid"]);
    let bytes = encode(
        &avsc,
        vec![
            ("UserId", Value::Long(9)),
            ("extra", Value::String("x".into())),
        ],
    );
    let m = transcode(&plan, &bytes).unwrap();
    assert_eq!(field(&m, "userid"), Some(PValue::I64(9)));

    let strict = PlanOptions {
        unknown_fields: UnknownFields::Error,
        ..Default::default()
    };
    assert_eq!(
        compile(&avsc, t, &strict).unwrap_err(),
        PlanError::UnknownField {
            field: "extra".into()
        }
    );
}

#[test]
fn unset_required_columns_are_per_record_errors() {
    let avsc = record(r#"[{"name":"a","type":["null","long"]}]"#);
    let plan = compile(
        &avsc,
        r#"[{"name":"a","type":"INT64","mode":"REQUIRED"}]"#,
        &PlanOptions::default(),
    )
    .unwrap();
    let null = encode(&avsc, vec![("a", Value::Union(0, Box::new(Value::Null)))]);
    assert!(matches!(
        transcode(&plan, &null),
        Err(RecordError::NullRequired { column }) if &*column == "a"
    ));
    let plan = compile(
        &avsc,
        r#"[{"name":"a","type":"INT64"},{"name":"b","type":"STRING","mode":"REQUIRED"}]"#,
        &PlanOptions::default(),
    )
    .unwrap();
    let err = transcode(&plan, &null).unwrap_err();
    assert_eq!(
        err.to_string(),
        "column b is REQUIRED but the record has no value for it"
    );
}

#[test]
fn incompatible_types_are_refused_when_the_plan_is_compiled() {
    let avsc = record(r#"[{"name":"a","type":"string"}]"#);
    let err = compile(
        &avsc,
        r#"[{"name":"a","type":"INT64"}]"#,
        &PlanOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "column a: avro string cannot be written to a INTEGER column"
    );
    let avsc = record(r#"[{"name":"t","type":"long"}]"#);
    assert!(
        compile(
            &avsc,
            r#"[{"name":"t","type":"TIMESTAMP"}]"#,
            &PlanOptions::default()
        )
        .is_err()
    );
}

#[test]
fn kafka_metadata_columns_are_appended_from_the_callers_struct() {
    let avsc = record(r#"[{"name":"a","type":"long"}]"#);
    let options = PlanOptions {
        metadata: MetadataColumns {
            topic: Some("_topic".into()),
            partition: Some("_partition".into()),
            offset: Some("_offset".into()),
            timestamp: Some("_ts".into()),
            key: Some("_key".into()),
            headers: Some("_headers".into()),
        },
        ..Default::default()
    };
    let plan = compile(
        &avsc,
        r#"[{"name":"a","type":"INT64"},{"name":"_topic","type":"STRING"},
            {"name":"_partition","type":"INT64"},{"name":"_offset","type":"INT64"},
            {"name":"_ts","type":"TIMESTAMP"},{"name":"_key","type":"BYTES"},
            {"name":"_headers","type":"RECORD","mode":"REPEATED","fields":[
               {"name":"key","type":"STRING"},{"name":"value","type":"BYTES"}]}]"#,
        &options,
    )
    .unwrap();
    let headers = [
        KafkaHeader {
            key: b"trace",
            value: Some(b"abc"),
        },
        KafkaHeader {
            key: b"empty",
            value: None,
        },
    ];
    let meta = KafkaMetadata {
        topic: "orders",
        partition: 3,
        offset: kbq_core::offsets::KafkaOffset(42),
        timestamp_millis: Some(1_000),
        key: Some(b"k"),
        headers: &headers,
    };
    let mut out = Vec::new();
    let range = plan
        .transcode_both(
            &encode(&avsc, vec![("a", Value::Long(1))]),
            Some(&meta),
            &mut out,
        )
        .unwrap();
    let m = decode(&plan, &out[range]);
    assert_eq!(field(&m, "_topic"), Some(PValue::String("orders".into())));
    assert_eq!(field(&m, "_partition"), Some(PValue::I64(3)));
    assert_eq!(field(&m, "_offset"), Some(PValue::I64(42)));
    assert_eq!(field(&m, "_ts"), Some(PValue::I64(1_000_000)));
    assert_eq!(field(&m, "_key"), Some(PValue::Bytes(b"k".to_vec().into())));
    let PValue::List(h) = field(&m, "_headers").unwrap() else {
        panic!()
    };
    assert_eq!(h.len(), 2);
    assert_eq!(
        field(h[0].as_message().unwrap(), "value"),
        Some(PValue::Bytes(b"abc".to_vec().into()))
    );
    assert_eq!(field(h[1].as_message().unwrap(), "value"), None);
}

// --- batches, slices and the descriptor -------------------------------------------------------

#[test]
fn rows_of_a_batch_share_one_buffer_and_a_bad_record_leaves_it_untouched() {
    let avsc = record(r#"[{"name":"s","type":"string"}]"#);
    let plan = compile(
        &avsc,
        r#"[{"name":"s","type":"STRING"}]"#,
        &PlanOptions::default(),
    )
    .unwrap();
    let mut out = Vec::new();
    let a = plan
        .transcode_both(
            &encode(&avsc, vec![("s", Value::String("a".into()))]),
            None,
            &mut out,
        )
        .unwrap();
    let before = out.clone();
    assert!(plan.transcode_both(&[0x02, 0xc3], None, &mut out).is_err());
    assert_eq!(out, before);
    let b = plan
        .transcode_both(
            &encode(&avsc, vec![("s", Value::String("bb".into()))]),
            None,
            &mut out,
        )
        .unwrap();
    assert_eq!(a.end, b.start);
    assert_eq!(
        field(&decode(&plan, &out[b]), "s"),
        Some(PValue::String("bb".into()))
    );
}

#[test]
fn bytes_are_read_from_the_payload_slice_not_its_backing_buffer() {
    // The Flink connector copied ByteBuffer.array(), ignoring position and limit.
    let avsc = record(r#"[{"name":"b","type":"bytes"}]"#);
    let plan = compile(
        &avsc,
        r#"[{"name":"b","type":"BYTES"}]"#,
        &PlanOptions::default(),
    )
    .unwrap();
    let framed = frame_confluent(7, &encode(&avsc, vec![("b", Value::Bytes(vec![1, 2]))]));
    let mut backing = b"garbage-before".to_vec();
    backing.extend_from_slice(&framed);
    backing.extend_from_slice(b"garbage-after");
    let payload = &backing[14..14 + framed.len()];
    let (id, body) = split_confluent(payload).unwrap();
    assert_eq!(id, 7);
    assert_eq!(
        field(&transcode(&plan, body).unwrap(), "b"),
        Some(PValue::Bytes(vec![1, 2].into()))
    );
}

#[test]
fn the_descriptor_is_proto2_and_self_contained() {
    let avsc = record(
        r#"[{"name":"n","type":{"type":"record","name":"x","fields":[
              {"name":"m","type":{"type":"record","name":"y","fields":[{"name":"v","type":"int"}]}}]}}]"#,
    );
    let plan = compile(
        &avsc,
        r#"[{"name":"n","type":"RECORD","fields":[{"name":"m","type":"RECORD","fields":[
              {"name":"v","type":"INT64"}]}]}]"#,
        &PlanOptions::default(),
    )
    .unwrap();
    let d = plan.descriptor();
    assert_eq!(d.name(), "Row");
    assert_eq!(
        d.nested_type.len(),
        2,
        "every record type is nested in the root"
    );
    for f in d
        .field
        .iter()
        .chain(d.nested_type.iter().flat_map(|n| n.field.iter()))
    {
        if let Some(t) = &f.type_name {
            assert!(
                !t.starts_with('.'),
                "relative names resolve in any wrapping file: {t}"
            );
            assert!(d.nested_type.iter().any(|n| n.name() == t));
        }
    }
}

// --- malformed input --------------------------------------------------------------------------

#[test]
fn malformed_payloads_are_typed_errors_with_reasons() {
    let avsc = record(r#"[{"name":"s","type":"string"},{"name":"b","type":"boolean"}]"#);
    let plan = compile(
        &avsc,
        r#"[{"name":"s","type":"STRING"},{"name":"b","type":"BOOL"}]"#,
        &PlanOptions::default(),
    )
    .unwrap();
    let mut out = Vec::new();
    let mut run = |bytes: &[u8]| plan.transcode_both(bytes, None, &mut out).unwrap_err();
    assert!(matches!(run(&[]), RecordError::Truncated { offset: 0, .. }));
    assert!(matches!(
        run(&[0x02, b'a']),
        RecordError::Truncated { offset: 2, .. }
    ));
    assert!(matches!(
        run(&[0x02, b'a', 0x01, 0x00]),
        RecordError::TrailingBytes { trailing: 1 }
    ));
    assert!(matches!(
        run(&[0x01]),
        RecordError::NegativeLength { len: -1, .. }
    ));
    assert!(matches!(
        run(&[0xfe, 0xff, 0xff, 0xff, 0x0f]),
        RecordError::LengthTooLarge { .. }
    ));
    assert!(matches!(
        run(&[0x02, 0xff, 0x01]),
        RecordError::InvalidUtf8 { offset: 1 }
    ));
    assert!(matches!(
        run(&[0x00, 0x02]),
        RecordError::BadBoolean { value: 2, .. }
    ));
    assert_eq!(
        split_confluent(&[1, 0, 0, 0, 1]).unwrap_err().to_string(),
        "magic byte 0x01 is not the confluent wire format's 0x00"
    );
    let e = run(&[0x02, 0xff, 0x01]);
    assert_eq!(e.to_string(), "string at byte 1 is not valid utf-8");
}

#[test]
fn absurd_array_counts_are_refused_before_looping() {
    let avsc = record(r#"[{"name":"a","type":{"type":"array","items":"null"}}]"#);
    let plan = compile(
        &avsc,
        r#"[{"name":"a","type":"JSON"}]"#,
        &PlanOptions::default(),
    )
    .unwrap();
    // count = 2^62 items of zero size
    let bytes = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01];
    let mut out = Vec::new();
    assert!(matches!(
        plan.transcode_both(&bytes, None, &mut out),
        Err(RecordError::AbsurdCount { .. })
    ));
}
