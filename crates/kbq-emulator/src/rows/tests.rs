//! RowCodec against rows encoded by an independent implementation (prost-reflect), for every
//! column type of docs/mapping.md and every schema and row error the emulator models.

use super::civil::{civil_from_days, days_from_civil, valid_date};
use super::validate::{MAX_DATE_DAYS, MAX_TIMESTAMP_MICROS, MIN_DATE_DAYS};
use super::*;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, Value as Pv};
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{EnumDescriptorProto, FieldDescriptorProto};
use prost_types::{FieldOptions, FileDescriptorProto};

fn field(name: &str, number: i32, t: Type) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(Label::Optional as i32),
        r#type: Some(t as i32),
        ..Default::default()
    }
}

fn typed(name: &str, number: i32, t: Type, type_name: &str) -> FieldDescriptorProto {
    FieldDescriptorProto {
        type_name: Some(type_name.into()),
        ..field(name, number, t)
    }
}

fn repeated(mut f: FieldDescriptorProto, packed: bool) -> FieldDescriptorProto {
    f.label = Some(Label::Repeated as i32);
    if packed {
        f.options = Some(FieldOptions {
            packed: Some(true),
            ..Default::default()
        });
    }
    f
}

fn required(mut f: FieldDescriptorProto) -> FieldDescriptorProto {
    f.label = Some(Label::Required as i32);
    f
}

fn message(name: &str, fields: Vec<FieldDescriptorProto>) -> DescriptorProto {
    DescriptorProto {
        name: Some(name.into()),
        field: fields,
        ..Default::default()
    }
}

fn col(name: &str, t: &str) -> TableFieldSchema {
    TableFieldSchema::new(name, FieldType::parse(t), Mode::Nullable)
}

fn col_mode(name: &str, t: &str, mode: Mode) -> TableFieldSchema {
    TableFieldSchema::new(name, FieldType::parse(t), mode)
}

fn record(name: &str, mode: Mode, fields: Vec<TableFieldSchema>) -> TableFieldSchema {
    TableFieldSchema {
        fields,
        ..TableFieldSchema::new(name, FieldType::Record, mode)
    }
}

fn table(fields: Vec<TableFieldSchema>) -> TableSchema {
    TableSchema { fields }
}

/// Encodes a row of `descriptor` with prost-reflect, as a proto2 file named like BigQuery's.
fn encode(descriptor: &DescriptorProto, fill: impl FnOnce(&mut DynamicMessage)) -> Vec<u8> {
    let mut pool = DescriptorPool::new();
    pool.add_file_descriptor_proto(FileDescriptorProto {
        name: Some("BqMessage.proto".into()),
        syntax: Some("proto2".into()),
        message_type: vec![descriptor.clone()],
        ..Default::default()
    })
    .expect("test descriptor is valid");
    let desc = pool
        .get_message_by_name(descriptor.name())
        .expect("root message");
    let mut row = DynamicMessage::new(desc);
    fill(&mut row);
    row.encode_to_vec()
}

fn nested_message(
    descriptor: &DescriptorProto,
    path: &str,
    fill: impl FnOnce(&mut DynamicMessage),
) -> Pv {
    let mut pool = DescriptorPool::new();
    pool.add_file_descriptor_proto(FileDescriptorProto {
        name: Some("BqMessage.proto".into()),
        syntax: Some("proto2".into()),
        message_type: vec![descriptor.clone()],
        ..Default::default()
    })
    .expect("test descriptor is valid");
    let mut m = DynamicMessage::new(pool.get_message_by_name(path).expect("nested message"));
    fill(&mut m);
    Pv::Message(m)
}

/// The `v` of each top-level cell.
fn cells(row: &serde_json::Value) -> Vec<serde_json::Value> {
    row["f"]
        .as_array()
        .expect("f is an array")
        .iter()
        .map(|c| c["v"].clone())
        .collect()
}

fn one_column(
    proto: FieldDescriptorProto,
    column: TableFieldSchema,
) -> (DescriptorProto, TableSchema, RowCodec) {
    let d = message("Row", vec![proto]);
    let t = table(vec![column]);
    let codec = RowCodec::compile(&d, &t).expect("schema compiles");
    (d, t, codec)
}

/// Validates and renders a single-column row; returns the cell or the row error.
fn roundtrip(
    proto: FieldDescriptorProto,
    column: TableFieldSchema,
    value: Pv,
) -> Result<serde_json::Value, String> {
    let name = proto.name().to_string();
    let (d, t, codec) = one_column(proto, column);
    let row = encode(&d, |m| m.set_field_by_name(&name, value));
    codec.validate(&row)?;
    Ok(cells(&codec.render(&row, &t))[0].clone())
}

fn le_twos_complement(v: i128, width: usize) -> Vec<u8> {
    let mut bytes = v.to_le_bytes().to_vec();
    bytes.resize(width, if v < 0 { 0xff } else { 0 });
    bytes
}

#[test]
fn int64_column_accepts_every_integer_kind_and_renders_decimal_strings() {
    let cases = [
        (Type::Int64, Pv::I64(-42), "-42"),
        (Type::Int32, Pv::I32(-7), "-7"),
        (Type::Uint32, Pv::U32(4_000_000_000), "4000000000"),
        (Type::Sint64, Pv::I64(i64::MIN), "-9223372036854775808"),
        (Type::Sint32, Pv::I32(-3), "-3"),
        (Type::Sfixed64, Pv::I64(-5), "-5"),
        (Type::Fixed32, Pv::U32(9), "9"),
    ];
    for (t, v, want) in cases {
        let got = roundtrip(field("n", 1, t), col("n", "INT64"), v).unwrap();
        assert_eq!(got, want, "{t:?}");
    }
}

#[test]
fn uint64_above_int64_max_is_a_row_error() {
    let err = roundtrip(
        field("n", 1, Type::Uint64),
        col("n", "INTEGER"),
        Pv::U64(u64::MAX),
    )
    .unwrap_err();
    assert!(err.contains("on field n."), "{err}");
    let ok = roundtrip(field("n", 1, Type::Uint64), col("n", "INTEGER"), Pv::U64(5)).unwrap();
    assert_eq!(ok, "5");
}

#[test]
fn float64_renders_round_trip_text_and_special_values() {
    let cases = [
        (Pv::F64(1.5), "1.5"),
        (Pv::F64(f64::INFINITY), "Infinity"),
        (Pv::F64(f64::NEG_INFINITY), "-Infinity"),
        (Pv::F64(f64::NAN), "NaN"),
        (Pv::F64(1e300), "1e300"),
    ];
    for (v, want) in cases {
        let got = roundtrip(field("x", 1, Type::Double), col("x", "FLOAT64"), v).unwrap();
        assert_eq!(got, want);
    }
    let got = roundtrip(field("x", 1, Type::Float), col("x", "FLOAT"), Pv::F32(0.25)).unwrap();
    assert_eq!(got, "0.25");
}

#[test]
fn bool_column_accepts_bool_and_integers() {
    let got = roundtrip(field("b", 1, Type::Bool), col("b", "BOOL"), Pv::Bool(true)).unwrap();
    assert_eq!(got, "true");
    let got = roundtrip(
        field("b", 1, Type::Bool),
        col("b", "BOOLEAN"),
        Pv::Bool(false),
    )
    .unwrap();
    assert_eq!(got, "false");
    let got = roundtrip(field("b", 1, Type::Int64), col("b", "BOOL"), Pv::I64(2)).unwrap();
    assert_eq!(got, "true");
}

#[test]
fn string_column_checks_max_length_in_characters() {
    let mut c = col("foo", "STRING");
    c.max_length = Some("3".into());
    let got = roundtrip(
        field("foo", 1, Type::String),
        c.clone(),
        Pv::String("äöü".into()),
    )
    .unwrap();
    assert_eq!(got, "äöü");
    let err = roundtrip(field("foo", 1, Type::String), c, Pv::String("abcd".into())).unwrap_err();
    assert_eq!(
        err,
        "Field foo: STRING(3) has maximum length 3 but got a value with length 4 on field foo."
    );
}

#[test]
fn bytes_column_renders_base64_and_checks_max_length_in_bytes() {
    let got = roundtrip(
        field("b", 1, Type::Bytes),
        col("b", "BYTES"),
        Pv::Bytes(vec![0, 1, 0xfe].into()),
    )
    .unwrap();
    assert_eq!(got, "AAH+");
    let mut c = col("b", "BYTES");
    c.max_length = Some("2".into());
    let err = roundtrip(
        field("b", 1, Type::Bytes),
        c,
        Pv::Bytes(vec![1, 2, 3].into()),
    )
    .unwrap_err();
    assert_eq!(
        err,
        "Field b: BYTES(2) has maximum length 2 but got a value with length 3 on field b."
    );
}

#[test]
fn numeric_bytes_are_little_endian_twos_complement_with_scale_nine() {
    // -123.456 = -123456000000 × 10^-9
    let bytes = le_twos_complement(-123_456_000_000, 16);
    let got = roundtrip(
        field("n", 1, Type::Bytes),
        col("n", "NUMERIC"),
        Pv::Bytes(bytes.into()),
    )
    .unwrap();
    assert_eq!(got, "-123.456");
    // The shortest encoding (as Java's BigDecimalByteStringEncoder may produce) works too.
    let got = roundtrip(
        field("n", 1, Type::Bytes),
        col("n", "NUMERIC"),
        Pv::Bytes(vec![0x00, 0xca, 0x9a, 0x3b].into()),
    )
    .unwrap();
    assert_eq!(got, "1");
    // 10^38 unscaled is one digit too many for NUMERIC(38, 9).
    let too_big = le_twos_complement(10i128.pow(38), 16);
    let err = roundtrip(
        field("n", 1, Type::Bytes),
        col("n", "NUMERIC"),
        Pv::Bytes(too_big.into()),
    )
    .unwrap_err();
    assert!(
        err.contains("NUMERIC") && err.contains("on field n."),
        "{err}"
    );
}

#[test]
fn bignumeric_bytes_use_scale_thirty_eight_and_thirty_two_bytes() {
    // 2^200 - 1 as the unscaled value: a 61-digit integer, 23 integer digits at scale 38.
    let mut bytes = vec![0xffu8; 25];
    bytes.push(0);
    let got = roundtrip(
        field("n", 1, Type::Bytes),
        col("n", "BIGNUMERIC"),
        Pv::Bytes(bytes.into()),
    )
    .unwrap();
    assert_eq!(
        got,
        "16069380442589902755419.62092341162602522202993782792835301375"
    );
    let got = roundtrip(
        field("n", 1, Type::Bytes),
        col("n", "BIGNUMERIC"),
        Pv::Bytes(le_twos_complement(-1, 32).into()),
    )
    .unwrap();
    assert_eq!(got, "-0.00000000000000000000000000000000000001");
}

#[test]
fn numeric_strings_and_numbers_are_normalised_and_range_checked() {
    let cases = [
        (Pv::String("12.500".into()), "12.5"),
        (Pv::String("-1e3".into()), "-1000"),
        (Pv::String("0.0000000015".into()), "0.000000002"),
        (Pv::String("0".into()), "0"),
        (Pv::String("-0.000e2000000000".into()), "0"),
    ];
    for (v, want) in cases {
        let got = roundtrip(field("n", 1, Type::String), col("n", "NUMERIC"), v).unwrap();
        assert_eq!(got, want);
    }
    let got = roundtrip(field("n", 1, Type::Int64), col("n", "NUMERIC"), Pv::I64(-7)).unwrap();
    assert_eq!(got, "-7");
    let got = roundtrip(
        field("n", 1, Type::Double),
        col("n", "NUMERIC"),
        Pv::F64(0.25),
    )
    .unwrap();
    assert_eq!(got, "0.25");
    let err = roundtrip(
        field("n", 1, Type::Double),
        col("n", "NUMERIC"),
        Pv::F64(f64::NAN),
    )
    .unwrap_err();
    assert!(err.contains("NaN"), "{err}");
    let err = roundtrip(
        field("n", 1, Type::String),
        col("n", "NUMERIC"),
        Pv::String("1e29".into()),
    )
    .unwrap_err();
    assert!(err.contains("out of range"), "{err}");
    let err = roundtrip(
        field("n", 1, Type::String),
        col("n", "NUMERIC"),
        Pv::String("1.2.3".into()),
    )
    .unwrap_err();
    assert!(err.contains("Invalid NUMERIC"), "{err}");
}

#[test]
fn parameterised_numeric_limits_integer_digits_and_rounds_the_scale() {
    let mut c = col("n", "NUMERIC");
    c.precision = Some("5".into());
    c.scale = Some("2".into());
    let got = roundtrip(
        field("n", 1, Type::String),
        c.clone(),
        Pv::String("123.455".into()),
    )
    .unwrap();
    assert_eq!(got, "123.46");
    let err = roundtrip(field("n", 1, Type::String), c, Pv::String("1234.5".into())).unwrap_err();
    assert!(err.contains("out of range"), "{err}");
}

#[test]
fn date_accepts_day_numbers_in_range_and_date_literals() {
    let got = roundtrip(field("d", 1, Type::Int32), col("d", "DATE"), Pv::I32(0)).unwrap();
    assert_eq!(got, "1970-01-01");
    let got = roundtrip(
        field("d", 1, Type::Int32),
        col("d", "DATE"),
        Pv::I32(-719_162),
    )
    .unwrap();
    assert_eq!(got, "0001-01-01");
    let got = roundtrip(
        field("d", 1, Type::Int64),
        col("d", "DATE"),
        Pv::I64(2_932_896),
    )
    .unwrap();
    assert_eq!(got, "9999-12-31");
    let got = roundtrip(
        field("d", 1, Type::String),
        col("d", "DATE"),
        Pv::String("2024-2-29".into()),
    )
    .unwrap();
    assert_eq!(got, "2024-02-29");
    let err = roundtrip(
        field("d", 1, Type::Int32),
        col("d", "DATE"),
        Pv::I32(2_932_897),
    )
    .unwrap_err();
    assert_eq!(err, "Date field value is out of range: 2932897 on field d.");
    let err = roundtrip(
        field("d", 1, Type::String),
        col("d", "DATE"),
        Pv::String("2023-02-29".into()),
    )
    .unwrap_err();
    assert!(err.contains("Invalid DATE"), "{err}");
}

#[test]
fn day_numbers_and_civil_dates_agree_over_the_whole_range() {
    for days in (MIN_DATE_DAYS..=MAX_DATE_DAYS).step_by(997) {
        let (y, m, d) = civil_from_days(days);
        assert_eq!(days_from_civil(y, m, d), days);
        assert!(valid_date(y, m, d).is_some());
    }
}

#[test]
fn timestamp_is_microseconds_rendered_as_seconds_or_int64() {
    let micros = 1_700_000_000_123_456i64;
    let (d, t, codec) = one_column(field("ts", 1, Type::Int64), col("ts", "TIMESTAMP"));
    let row = encode(&d, |m| m.set_field_by_name("ts", Pv::I64(micros)));
    codec.validate(&row).unwrap();
    assert_eq!(cells(&codec.render(&row, &t))[0], "1.700000000123456E9");
    let int64 = RenderOptions {
        int64_timestamp: true,
    };
    assert_eq!(
        cells(&codec.render_with(&row, &t, int64))[0],
        "1700000000123456"
    );
    assert_eq!(timestamp_seconds_text(1_700_000_000_000_000), "1.7E9");
    assert_eq!(timestamp_seconds_text(-1_500_000), "-1.5E0");
    assert_eq!(timestamp_seconds_text(1), "1.0E-6");
    let parsed: f64 = timestamp_seconds_text(micros).parse().unwrap();
    assert!((parsed - 1_700_000_000.123_456).abs() < 1e-5);
}

#[test]
fn timestamp_out_of_range_is_a_row_error_with_bigquerys_text() {
    let err = roundtrip(
        field("bar", 1, Type::Int64),
        col("bar", "TIMESTAMP"),
        Pv::I64(i64::MIN),
    )
    .unwrap_err();
    assert_eq!(
        err,
        "Timestamp field value is out of range: -9223372036854775808 on field bar."
    );
    let ok = roundtrip(
        field("bar", 1, Type::Int64),
        col("bar", "TIMESTAMP"),
        Pv::I64(MAX_TIMESTAMP_MICROS),
    );
    assert!(ok.is_ok());
}

fn pack_time(h: i64, mi: i64, s: i64, micros: i64) -> i64 {
    (((h << 12) | (mi << 6) | s) << 20) | micros
}

fn pack_datetime(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, micros: i64) -> i64 {
    (((y << 26) | (mo << 22) | (d << 17) | (h << 12) | (mi << 6) | s) << 20) | micros
}

#[test]
fn datetime_accepts_civil_time_encoder_packing_and_literals() {
    let packed = pack_datetime(2024, 3, 9, 13, 5, 59, 120);
    let got = roundtrip(
        field("dt", 1, Type::Int64),
        col("dt", "DATETIME"),
        Pv::I64(packed),
    )
    .unwrap();
    assert_eq!(got, "2024-03-09T13:05:59.000120");
    let got = roundtrip(
        field("dt", 1, Type::String),
        col("dt", "DATETIME"),
        Pv::String("2024-03-09 13:05:59".into()),
    )
    .unwrap();
    assert_eq!(got, "2024-03-09T13:05:59");
    let got = roundtrip(
        field("dt", 1, Type::String),
        col("dt", "DATETIME"),
        Pv::String("2024-03-09".into()),
    )
    .unwrap();
    assert_eq!(got, "2024-03-09T00:00:00");
    let bad = pack_datetime(2024, 13, 9, 0, 0, 0, 0);
    let err = roundtrip(
        field("dt", 1, Type::Int64),
        col("dt", "DATETIME"),
        Pv::I64(bad),
    )
    .unwrap_err();
    assert!(err.contains("Invalid DATETIME"), "{err}");
}

#[test]
fn time_accepts_civil_time_encoder_packing_and_literals() {
    let got = roundtrip(
        field("t", 1, Type::Int64),
        col("t", "TIME"),
        Pv::I64(pack_time(23, 59, 58, 999_999)),
    )
    .unwrap();
    assert_eq!(got, "23:59:58.999999");
    let got = roundtrip(
        field("t", 1, Type::String),
        col("t", "TIME"),
        Pv::String("7:05:00.5".into()),
    )
    .unwrap();
    assert_eq!(got, "07:05:00.500000");
    let err = roundtrip(
        field("t", 1, Type::Int64),
        col("t", "TIME"),
        Pv::I64(pack_time(24, 0, 0, 0)),
    )
    .unwrap_err();
    assert!(err.contains("Invalid TIME"), "{err}");
}

#[test]
fn json_must_parse_and_geography_is_text() {
    let got = roundtrip(
        field("j", 1, Type::String),
        col("j", "JSON"),
        Pv::String(r#"{ "a" : [1, 2] }"#.into()),
    )
    .unwrap();
    assert_eq!(got, r#"{"a":[1,2]}"#);
    let err = roundtrip(
        field("j", 1, Type::String),
        col("j", "JSON"),
        Pv::String("{".into()),
    )
    .unwrap_err();
    assert_eq!(err, "Invalid JSON value on field j.");
    let got = roundtrip(
        field("g", 1, Type::String),
        col("g", "GEOGRAPHY"),
        Pv::String("POINT(1 2)".into()),
    )
    .unwrap();
    assert_eq!(got, "POINT(1 2)");
}

fn color_enum() -> EnumDescriptorProto {
    EnumDescriptorProto {
        name: Some("Color".into()),
        value: vec![
            prost_types::EnumValueDescriptorProto {
                name: Some("RED".into()),
                number: Some(1),
                ..Default::default()
            },
            prost_types::EnumValueDescriptorProto {
                name: Some("BLUE".into()),
                number: Some(2),
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

#[test]
fn enums_render_as_names_in_string_columns_and_numbers_in_int64_columns() {
    let mut d = message(
        "Row",
        vec![
            typed("s", 1, Type::Enum, ".Row.Color"),
            typed("n", 2, Type::Enum, "Color"),
        ],
    );
    d.enum_type.push(color_enum());
    let t = table(vec![col("s", "STRING"), col("n", "INT64")]);
    let codec = RowCodec::compile(&d, &t).unwrap();
    let row = encode(&d, |m| {
        m.set_field_by_name("s", Pv::EnumNumber(2));
        m.set_field_by_name("n", Pv::EnumNumber(1));
    });
    codec.validate(&row).unwrap();
    assert_eq!(cells(&codec.render(&row, &t)), vec!["BLUE", "1"]);
}

fn nested_descriptor() -> DescriptorProto {
    let mut inner = message(
        "Inner",
        vec![
            field("x", 1, Type::Int64),
            repeated(field("tags", 2, Type::String), false),
        ],
    );
    inner.name = Some("Inner".into());
    let mut d = message(
        "Row",
        vec![
            typed("rec", 1, Type::Message, "Inner"),
            repeated(typed("recs", 2, Type::Message, ".Row.Inner"), false),
            repeated(field("packed", 3, Type::Int64), true),
            repeated(field("unpacked", 4, Type::Int32), false),
        ],
    );
    d.nested_type.push(inner);
    d
}

fn nested_table() -> TableSchema {
    let inner = || {
        vec![
            col("x", "INTEGER"),
            col_mode("tags", "STRING", Mode::Repeated),
        ]
    };
    table(vec![
        record("rec", Mode::Nullable, inner()),
        record("recs", Mode::Repeated, inner()),
        col_mode("packed", "INT64", Mode::Repeated),
        col_mode("unpacked", "INT64", Mode::Repeated),
    ])
}

#[test]
fn records_and_repeated_fields_render_in_the_rest_shape() {
    let d = nested_descriptor();
    let t = nested_table();
    let codec = RowCodec::compile(&d, &t).unwrap();
    let inner = |x: i64, tags: &[&str]| {
        nested_message(&d, "Row.Inner", |m| {
            m.set_field_by_name("x", Pv::I64(x));
            m.set_field_by_name(
                "tags",
                Pv::List(tags.iter().map(|s| Pv::String(s.to_string())).collect()),
            );
        })
    };
    let row = encode(&d, |m| {
        m.set_field_by_name("rec", inner(1, &["a", "b"]));
        m.set_field_by_name("recs", Pv::List(vec![inner(2, &[]), inner(3, &["c"])]));
        m.set_field_by_name("packed", Pv::List(vec![Pv::I64(5), Pv::I64(-6)]));
        m.set_field_by_name("unpacked", Pv::List(vec![Pv::I32(7)]));
    });
    codec.validate(&row).unwrap();
    let got = codec.render(&row, &t);
    let want = serde_json::json!({"f": [
        {"v": {"f": [{"v": "1"}, {"v": [{"v": "a"}, {"v": "b"}]}]}},
        {"v": [
            {"v": {"f": [{"v": "2"}, {"v": []}]}},
            {"v": {"f": [{"v": "3"}, {"v": [{"v": "c"}]}]}}
        ]},
        {"v": [{"v": "5"}, {"v": "-6"}]},
        {"v": [{"v": "7"}]}
    ]});
    assert_eq!(got, want);
}

#[test]
fn packed_and_unpacked_encodings_of_one_repeated_field_are_both_accepted() {
    // Field 1, repeated int64: an unpacked element then a packed run, as a proto2 parser allows.
    let d = message("Row", vec![repeated(field("v", 1, Type::Int64), false)]);
    let t = table(vec![col_mode("v", "INT64", Mode::Repeated)]);
    let codec = RowCodec::compile(&d, &t).unwrap();
    let row = [0x08, 0x01, 0x0a, 0x02, 0x02, 0x03];
    codec.validate(&row).unwrap();
    assert_eq!(
        codec.render(&row, &t),
        serde_json::json!({"f": [{"v": [{"v": "1"}, {"v": "2"}, {"v": "3"}]}]})
    );
}

#[test]
fn nested_row_errors_name_the_dotted_column_path() {
    let d = nested_descriptor();
    let mut t = nested_table();
    t.fields[0].fields[0] = col_mode("x", "INTEGER", Mode::Required);
    let codec = RowCodec::compile(&d, &t).unwrap();
    let row = encode(&d, |m| {
        m.set_field_by_name("rec", nested_message(&d, "Row.Inner", |_| {}));
    });
    assert_eq!(
        codec.validate(&row).unwrap_err(),
        "Missing required field: rec.x."
    );
}

#[test]
fn field_names_match_columns_case_insensitively_and_render_in_table_order() {
    let d = message(
        "Row",
        vec![field("ID", 1, Type::Int64), field("name", 2, Type::String)],
    );
    let t = table(vec![col("Name", "STRING"), col("id", "INT64")]);
    let codec = RowCodec::compile(&d, &t).unwrap();
    let row = encode(&d, |m| {
        m.set_field_by_name("ID", Pv::I64(9));
        m.set_field_by_name("name", Pv::String("z".into()));
    });
    codec.validate(&row).unwrap();
    assert_eq!(cells(&codec.render(&row, &t)), vec!["z", "9"]);
}

#[test]
fn columns_added_after_the_append_render_as_null_and_omitted_columns_are_fine() {
    let d = message("Row", vec![field("a", 1, Type::Int64)]);
    let t = table(vec![col("a", "INT64"), col("b", "STRING")]);
    let codec = RowCodec::compile(&d, &t).unwrap();
    let row = encode(&d, |m| m.set_field_by_name("a", Pv::I64(1)));
    codec.validate(&row).unwrap();
    let mut later = t.clone();
    later.fields.push(col("c", "INT64"));
    later.fields.push(col_mode("r", "INT64", Mode::Repeated));
    let got = codec.render(&row, &later);
    assert_eq!(
        got,
        serde_json::json!({"f": [{"v": "1"}, {"v": null}, {"v": null}, {"v": []}]})
    );
}

#[test]
fn extra_writer_fields_fail_the_schema_with_code_seven_and_lower_case_names() {
    let d = message(
        "Row",
        vec![
            field("a", 1, Type::Int64),
            field("TestField", 2, Type::String),
        ],
    );
    let t = table(vec![col("a", "INT64")]);
    let err = RowCodec::compile(&d, &t).unwrap_err();
    assert_eq!(
        err.message(),
        "Input schema has more fields than BigQuery schema, extra fields: 'testfield'"
    );
    assert_eq!(err.storage_code(), Some(7));
}

#[test]
fn extra_fields_inside_records_are_reported_with_their_path() {
    let d = nested_descriptor();
    let mut t = nested_table();
    t.fields[0].fields.pop();
    let err = RowCodec::compile(&d, &t).unwrap_err();
    assert_eq!(
        err.message(),
        "Input schema has more fields than BigQuery schema, extra fields: 'rec.tags'"
    );
}

#[test]
fn incompatible_types_fail_the_schema_with_bigquerys_text() {
    let d = message("Song", vec![field("released", 1, Type::String)]);
    let t = table(vec![col("released", "TIMESTAMP")]);
    let err = RowCodec::compile(&d, &t).unwrap_err();
    assert_eq!(
        err.message(),
        "The proto field mismatched with BigQuery field at Song.released, the proto field type string, BigQuery field type TIMESTAMP"
    );
    assert_eq!(err.storage_code(), None);
    let d = message("Song", vec![field("n", 1, Type::Double)]);
    let t = table(vec![col("n", "INT64")]);
    assert!(matches!(
        RowCodec::compile(&d, &t),
        Err(SchemaError::TypeMismatch { .. })
    ));
}

#[test]
fn repeated_proto_field_needs_a_repeated_column() {
    let d = message("Row", vec![repeated(field("n", 1, Type::Int64), false)]);
    let t = table(vec![col("n", "INT64")]);
    assert!(matches!(
        RowCodec::compile(&d, &t),
        Err(SchemaError::ModeMismatch { .. })
    ));
}

#[test]
fn references_outside_the_root_message_are_an_invalid_proto_schema() {
    let d = message(
        "Song",
        vec![typed("composer", 1, Type::Message, ".Composer")],
    );
    let t = table(vec![record(
        "composer",
        Mode::Nullable,
        vec![col("x", "INT64")],
    )]);
    let err = RowCodec::compile(&d, &t).unwrap_err();
    assert_eq!(
        err.message(),
        "Invalid proto schema: BqMessage.proto: Song.composer: \".Composer\" is not defined."
    );
    assert_eq!(err.storage_code(), None);
}

#[test]
fn unset_required_column_is_a_row_error_and_absent_nullable_is_null() {
    let d = message(
        "Row",
        vec![field("id", 1, Type::Int64), field("note", 2, Type::String)],
    );
    let t = table(vec![
        col_mode("id", "INT64", Mode::Required),
        col("note", "STRING"),
    ]);
    let codec = RowCodec::compile(&d, &t).unwrap();
    let row = encode(&d, |m| m.set_field_by_name("note", Pv::String("x".into())));
    assert_eq!(
        codec.validate(&row).unwrap_err(),
        "Missing required field: id."
    );
    // A proto3 writer leaves zero values off the wire: they are NULL, not 0.
    let row = encode(&d, |m| m.set_field_by_name("id", Pv::I64(0)));
    codec.validate(&row).unwrap();
    assert_eq!(
        cells(&codec.render(&row, &t)),
        vec![serde_json::json!("0"), serde_json::Value::Null]
    );
    let empty: [u8; 0] = [];
    assert_eq!(cells(&codec.render(&empty, &t))[1], serde_json::Value::Null);
}

#[test]
fn proto2_required_label_is_enforced_even_on_nullable_columns() {
    let d = message("Row", vec![required(field("id", 1, Type::Int64))]);
    let t = table(vec![col("id", "INT64")]);
    let codec = RowCodec::compile(&d, &t).unwrap();
    assert_eq!(
        codec.validate(&[]).unwrap_err(),
        "Missing required field: id."
    );
}

#[test]
fn proto2_default_values_fill_unset_fields() {
    let mut with_default = field("note", 1, Type::String);
    with_default.default_value = Some("custom default".into());
    let mut n = field("n", 2, Type::Int64);
    n.default_value = Some("-4".into());
    let d = message("Row", vec![with_default, n]);
    let t = table(vec![
        col_mode("note", "STRING", Mode::Required),
        col("n", "INT64"),
    ]);
    let codec = RowCodec::compile(&d, &t).unwrap();
    codec.validate(&[]).unwrap();
    assert_eq!(cells(&codec.render(&[], &t)), vec!["custom default", "-4"]);
}

#[test]
fn a_default_the_column_rejects_is_an_invalid_schema() {
    let mut d = field("d", 1, Type::String);
    d.default_value = Some("not a date".into());
    let err =
        RowCodec::compile(&message("Row", vec![d]), &table(vec![col("d", "DATE")])).unwrap_err();
    assert!(matches!(err, SchemaError::InvalidDescriptor(_)), "{err}");
}

#[test]
fn unknown_column_types_never_crash() {
    let d = message(
        "Row",
        vec![field("span", 1, Type::String), field("r", 2, Type::Int64)],
    );
    let t = table(vec![col("span", "INTERVAL"), col("r", "RANGE")]);
    let codec = RowCodec::compile(&d, &t).unwrap();
    let row = encode(&d, |m| {
        m.set_field_by_name("span", Pv::String("1-2 3 4:5:6".into()));
        m.set_field_by_name("r", Pv::I64(3));
    });
    codec.validate(&row).unwrap();
    assert_eq!(cells(&codec.render(&row, &t)), vec!["1-2 3 4:5:6", "3"]);
}

#[test]
fn malformed_rows_are_row_errors() {
    let d = message(
        "Row",
        vec![field("a", 1, Type::Int64), field("s", 2, Type::String)],
    );
    let t = table(vec![col("a", "INT64"), col("s", "STRING")]);
    let codec = RowCodec::compile(&d, &t).unwrap();
    // Truncated varint.
    assert!(codec.validate(&[0x08, 0x80]).is_err());
    // Wrong wire type for field 1 (length-delimited instead of varint).
    let err = codec.validate(&[0x0a, 0x00]).unwrap_err();
    assert!(err.contains("on field a."), "{err}");
    // Invalid UTF-8 in a string.
    let err = codec.validate(&[0x12, 0x01, 0xff]).unwrap_err();
    assert_eq!(err, "Invalid UTF-8 string on field s.");
    // Unknown field numbers are ignored like proto2 unknown fields, groups included.
    codec
        .validate(&[0x18, 0x01, 0x23, 0x08, 0x01, 0x24])
        .unwrap();
}

#[test]
fn duplicate_field_numbers_are_an_invalid_proto_schema() {
    let d = message(
        "Row",
        vec![field("a", 1, Type::Int64), field("b", 1, Type::Int64)],
    );
    let t = table(vec![col("a", "INT64"), col("b", "INT64")]);
    let err = RowCodec::compile(&d, &t).unwrap_err();
    assert!(
        err.message()
            .starts_with("Invalid proto schema: BqMessage.proto: Row.b: Field number 1"),
        "{err}"
    );
}

#[test]
fn wide_messages_use_the_large_number_index() {
    let d = message(
        "Row",
        vec![field("a", 5000, Type::Int64), field("b", 3, Type::Int64)],
    );
    let t = table(vec![
        col("a", "INT64"),
        col_mode("b", "INT64", Mode::Required),
    ]);
    let codec = RowCodec::compile(&d, &t).unwrap();
    let row = encode(&d, |m| {
        m.set_field_by_name("a", Pv::I64(11));
        m.set_field_by_name("b", Pv::I64(12));
    });
    codec.validate(&row).unwrap();
    assert_eq!(cells(&codec.render(&row, &t)), vec!["11", "12"]);
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
        let d = nested_descriptor();
        let t = nested_table();
        let codec = RowCodec::compile(&d, &t).unwrap();
        let _ = codec.validate(&bytes);
        let _ = codec.render(&bytes, &t);
    }
}

proptest::proptest! {
    #[test]
    fn arbitrary_numeric_and_date_text_never_panics(text in "[-+0-9.eE :T]{0,40}") {
        for column in ["NUMERIC", "BIGNUMERIC", "DATE", "DATETIME", "TIME"] {
            let (d, t, codec) = one_column(field("v", 1, Type::String), col("v", column));
            let row = encode(&d, |m| m.set_field_by_name("v", Pv::String(text.clone())));
            let valid = codec.validate(&row).is_ok();
            let cell = cells(&codec.render(&row, &t))[0].clone();
            // Whatever validates also renders to a value.
            proptest::prop_assert!(!valid || cell.is_string(), "{column} {text:?} {cell}");
        }
    }
}

#[test]
fn parameterised_numeric_bounds_apply_to_unscaled_bytes_too() {
    let mut c = col("n", "NUMERIC");
    c.precision = Some("5".into());
    c.scale = Some("2".into());
    let ok = le_twos_complement(-999_990_000_000, 6);
    let got = roundtrip(field("n", 1, Type::Bytes), c.clone(), Pv::Bytes(ok.into())).unwrap();
    assert_eq!(got, "-999.99");
    let too_big = le_twos_complement(1_000_000_000_000, 16);
    let err = roundtrip(field("n", 1, Type::Bytes), c, Pv::Bytes(too_big.into())).unwrap_err();
    assert!(err.contains("out of range"), "{err}");
}
