//! RowCodec::render: how each column type's values come back in the REST shape of
//! `tabledata.list` (docs/mapping.md).

use super::testkit::*;
use super::*;

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
