//! What the rows tests share (`compile_tests.rs`, `validate_tests.rs`, `render_tests.rs`): rows
//! are encoded by an independent implementation (prost-reflect) from descriptors and table
//! schemas built here, so RowCodec is checked against someone else's reading of the wire format.

use super::RowCodec;
pub(super) use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use prost::Message as _;
use prost_reflect::DescriptorPool;
pub(super) use prost_reflect::{DynamicMessage, Value as Pv};
pub(super) use prost_types::field_descriptor_proto::{Label, Type};
pub(super) use prost_types::{DescriptorProto, EnumDescriptorProto, FieldDescriptorProto};
use prost_types::{FieldOptions, FileDescriptorProto};

pub(super) fn field(name: &str, number: i32, t: Type) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(Label::Optional as i32),
        r#type: Some(t as i32),
        ..Default::default()
    }
}

pub(super) fn typed(name: &str, number: i32, t: Type, type_name: &str) -> FieldDescriptorProto {
    FieldDescriptorProto {
        type_name: Some(type_name.into()),
        ..field(name, number, t)
    }
}

pub(super) fn repeated(mut f: FieldDescriptorProto, packed: bool) -> FieldDescriptorProto {
    f.label = Some(Label::Repeated as i32);
    if packed {
        f.options = Some(FieldOptions {
            packed: Some(true),
            ..Default::default()
        });
    }
    f
}

pub(super) fn required(mut f: FieldDescriptorProto) -> FieldDescriptorProto {
    f.label = Some(Label::Required as i32);
    f
}

pub(super) fn message(name: &str, fields: Vec<FieldDescriptorProto>) -> DescriptorProto {
    DescriptorProto {
        name: Some(name.into()),
        field: fields,
        ..Default::default()
    }
}

pub(super) fn col(name: &str, t: &str) -> TableFieldSchema {
    TableFieldSchema::new(name, FieldType::parse(t), Mode::Nullable)
}

pub(super) fn col_mode(name: &str, t: &str, mode: Mode) -> TableFieldSchema {
    TableFieldSchema::new(name, FieldType::parse(t), mode)
}

pub(super) fn record(name: &str, mode: Mode, fields: Vec<TableFieldSchema>) -> TableFieldSchema {
    TableFieldSchema {
        fields,
        ..TableFieldSchema::new(name, FieldType::Record, mode)
    }
}

pub(super) fn table(fields: Vec<TableFieldSchema>) -> TableSchema {
    TableSchema { fields }
}

/// A pool holding `descriptor` as a proto2 file named like BigQuery's.
fn pool(descriptor: &DescriptorProto) -> DescriptorPool {
    let mut pool = DescriptorPool::new();
    pool.add_file_descriptor_proto(FileDescriptorProto {
        name: Some("BqMessage.proto".into()),
        syntax: Some("proto2".into()),
        message_type: vec![descriptor.clone()],
        ..Default::default()
    })
    .expect("test descriptor is valid");
    pool
}

/// Encodes a row of `descriptor` with prost-reflect.
pub(super) fn encode(
    descriptor: &DescriptorProto,
    fill: impl FnOnce(&mut DynamicMessage),
) -> Vec<u8> {
    let desc = pool(descriptor)
        .get_message_by_name(descriptor.name())
        .expect("root message");
    let mut row = DynamicMessage::new(desc);
    fill(&mut row);
    row.encode_to_vec()
}

/// A value of the nested message `path` of `descriptor`.
pub(super) fn nested_message(
    descriptor: &DescriptorProto,
    path: &str,
    fill: impl FnOnce(&mut DynamicMessage),
) -> Pv {
    let nested = pool(descriptor).get_message_by_name(path);
    let mut m = DynamicMessage::new(nested.expect("nested message"));
    fill(&mut m);
    Pv::Message(m)
}

/// The `v` of each top-level cell.
pub(super) fn cells(row: &serde_json::Value) -> Vec<serde_json::Value> {
    row["f"]
        .as_array()
        .expect("f is an array")
        .iter()
        .map(|c| c["v"].clone())
        .collect()
}

pub(super) fn one_column(
    proto: FieldDescriptorProto,
    column: TableFieldSchema,
) -> (DescriptorProto, TableSchema, RowCodec) {
    let d = message("Row", vec![proto]);
    let t = table(vec![column]);
    let codec = RowCodec::compile(&d, &t).expect("schema compiles");
    (d, t, codec)
}

/// Validates and renders a single-column row; returns the cell or the row error.
pub(super) fn roundtrip(
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

pub(super) fn le_twos_complement(v: i128, width: usize) -> Vec<u8> {
    let mut bytes = v.to_le_bytes().to_vec();
    bytes.resize(width, if v < 0 { 0xff } else { 0 });
    bytes
}

pub(super) fn pack_time(h: i64, mi: i64, s: i64, micros: i64) -> i64 {
    (((h << 12) | (mi << 6) | s) << 20) | micros
}

pub(super) fn pack_datetime(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, micros: i64) -> i64 {
    (((y << 26) | (mo << 22) | (d << 17) | (h << 12) | (mi << 6) | s) << 20) | micros
}

pub(super) fn color_enum() -> EnumDescriptorProto {
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

pub(super) fn nested_descriptor() -> DescriptorProto {
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

pub(super) fn nested_table() -> TableSchema {
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
