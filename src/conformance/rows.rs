//! The probe's scratch tables, their writer schemas and rows, built by hand: the probe checks
//! BigQuery, not the transcoder, so each row is a few proto fields written with prost.

use bytes::Bytes;
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::{
    AppendRowsRequest, ProtoRows, ProtoSchema, append_rows_request,
};
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto};

use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

/// Longest `name` the rows table accepts: a longer one is a row error.
pub const NAME_MAX_LENGTH: usize = 10;

/// `id INT64 REQUIRED, name STRING(10), pad BYTES`: the BUFFERED stream's table.
pub fn rows_schema() -> TableSchema {
    let mut name = TableFieldSchema::new("name", FieldType::String, Mode::Nullable);
    name.max_length = Some(NAME_MAX_LENGTH.to_string());
    TableSchema {
        fields: vec![
            TableFieldSchema::new("id", FieldType::Int64, Mode::Required),
            name,
            TableFieldSchema::new("pad", FieldType::Bytes, Mode::Nullable),
        ],
    }
}

/// The writer schema of [`rows_schema`].
pub fn rows_descriptor() -> DescriptorProto {
    descriptor(&[
        ("id", Type::Int64),
        ("name", Type::String),
        ("pad", Type::Bytes),
    ])
}

/// A row of the rows table.
pub fn row(id: i64, name: &str, pad: usize) -> Bytes {
    let mut buf = Vec::with_capacity(pad + name.len() + 16);
    prost::encoding::int64::encode(1, &id, &mut buf);
    prost::encoding::string::encode(2, &name.to_string(), &mut buf);
    if pad > 0 {
        prost::encoding::bytes::encode(3, &vec![0u8; pad], &mut buf);
    }
    Bytes::from(buf)
}

/// Rows `ids` of the rows table, without padding.
pub fn rows(ids: std::ops::Range<i64>) -> Vec<Bytes> {
    ids.map(|id| row(id, "r", 0)).collect()
}

/// Rows of the rows table whose request encodes to about `bytes` bytes.
pub fn padded_rows(first_id: i64, bytes: usize) -> Vec<Bytes> {
    const PAD: usize = 64 * 1024;
    let count = bytes.div_ceil(PAD) as i64;
    (first_id..first_id + count)
        .map(|id| row(id, "big", PAD - 16))
        .collect()
}

/// `id INT64 REQUIRED` (the schema-change table starts with it).
pub fn id_only_schema() -> TableSchema {
    TableSchema {
        fields: vec![TableFieldSchema::new(
            "id",
            FieldType::Int64,
            Mode::Required,
        )],
    }
}

pub fn id_descriptor() -> DescriptorProto {
    descriptor(&[("id", Type::Int64)])
}

pub fn id_row(id: i64) -> Bytes {
    let mut buf = Vec::new();
    prost::encoding::int64::encode(1, &id, &mut buf);
    Bytes::from(buf)
}

/// The column a schema change adds.
pub const ADDED_COLUMN: &str = "added";

/// The text a default value expression gives the defaults table's `filled` column.
pub const DEFAULT_TEXT: &str = "dflt";

/// `id INT64 REQUIRED, filled STRING REQUIRED DEFAULT 'dflt'`: written with [`id_descriptor`].
pub fn defaults_schema() -> TableSchema {
    let mut filled = TableFieldSchema::new("filled", FieldType::String, Mode::Required);
    filled.default_value_expression = Some(format!("'{DEFAULT_TEXT}'"));
    TableSchema {
        fields: vec![
            TableFieldSchema::new("id", FieldType::Int64, Mode::Required),
            filled,
        ],
    }
}

/// `k INT64 REQUIRED, v INT64`: the change table (primary key `k`).
pub fn changes_schema() -> TableSchema {
    TableSchema {
        fields: vec![
            TableFieldSchema::new("k", FieldType::Int64, Mode::Required),
            TableFieldSchema::new("v", FieldType::Int64, Mode::Nullable),
        ],
    }
}

/// The change table's writer schema with BigQuery's two CDC pseudo-columns.
pub fn changes_descriptor() -> DescriptorProto {
    descriptor(&[
        ("k", Type::Int64),
        ("v", Type::Int64),
        ("_CHANGE_TYPE", Type::String),
        ("_CHANGE_SEQUENCE_NUMBER", Type::String),
    ])
}

/// One change: `UPSERT` or `DELETE` of key `k`, with the sink's sequence number for `offset`.
pub fn change(kind: &str, k: i64, v: Option<i64>, offset: i64) -> Bytes {
    let mut buf = Vec::new();
    prost::encoding::int64::encode(1, &k, &mut buf);
    if let Some(v) = v {
        prost::encoding::int64::encode(2, &v, &mut buf);
    }
    prost::encoding::string::encode(3, &kind.to_string(), &mut buf);
    let sequence = kbq_transcode::change::sequence_number(1, 0, offset);
    prost::encoding::string::encode(4, &sequence, &mut buf);
    Bytes::from(buf)
}

fn descriptor(fields: &[(&str, Type)]) -> DescriptorProto {
    DescriptorProto {
        name: Some("ConformanceRow".into()),
        field: fields
            .iter()
            .zip(1..)
            .map(|((name, kind), number)| FieldDescriptorProto {
                name: Some((*name).into()),
                number: Some(number),
                r#type: Some(*kind as i32),
                label: Some(Label::Optional as i32),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// An AppendRows request; `writer` only on a connection's first request.
pub fn request(
    stream: &str,
    offset: Option<i64>,
    rows: Vec<Bytes>,
    writer: Option<DescriptorProto>,
) -> AppendRowsRequest {
    AppendRowsRequest {
        write_stream: stream.to_string(),
        offset,
        rows: Some(append_rows_request::Rows::ProtoRows(
            append_rows_request::ProtoData {
                writer_schema: writer.map(|d| ProtoSchema {
                    proto_descriptor: Some(d),
                }),
                rows: Some(ProtoRows {
                    serialized_rows: rows,
                }),
            },
        )),
        ..Default::default()
    }
}

/// A request the sink may send: `writer.max_request_bytes`' default.
pub const DEFAULT_REQUEST_BYTES: usize =
    crate::config::defaults::WRITER_MAX_REQUEST_BYTES.0 as usize;
/// A request above BigQuery's documented limit (10 MB on older projects, 20 MB now).
pub const OVERSIZED_REQUEST_BYTES: usize = 21 << 20;
