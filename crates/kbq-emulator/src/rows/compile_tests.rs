//! RowCodec::compile: how a writer's proto schema maps onto the table's columns, and every
//! schema error BigQuery answers for it (docs/mapping.md).

use super::testkit::*;
use super::*;

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
    // (A string into TIMESTAMP is taken: it is a TIMESTAMP literal.)
    let d = message("Song", vec![field("released", 1, Type::Bool)]);
    let t = table(vec![col("released", "TIMESTAMP")]);
    let err = RowCodec::compile(&d, &t).unwrap_err();
    assert_eq!(
        err.message(),
        "The proto field mismatched with BigQuery field at Song.released, the proto field type bool, BigQuery field type TIMESTAMP"
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
