//! The Kafka metadata columns of a plan (topic, partition, offset, timestamp, key, headers):
//! which columns receive them (the configuration's [`MetadataColumns`], with those the
//! transforms add), each checked against the table and given its field in the root message.

use prost_types::FieldDescriptorProto;
use prost_types::field_descriptor_proto::{Label, Type};
use serde::Deserialize;

use super::compile::{PlanOptions, column_type};
use super::descriptor::{self, DescriptorBuilder, ProtoType};
use super::error::PlanError;
use super::ops::{HeadersColumn, MetaColumn, MetadataOps};
use super::proto::{Tag, WIRE_LEN, WIRE_VARINT};
use super::transforms;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

/// Names of the table columns that receive Kafka metadata; unset ones are not written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetadataColumns {
    /// STRING column for the topic name.
    pub topic: Option<String>,
    /// INT64 column for the partition.
    pub partition: Option<String>,
    /// INT64 column for the offset.
    pub offset: Option<String>,
    /// TIMESTAMP (or INT64 for raw milliseconds) column for the record timestamp.
    pub timestamp: Option<String>,
    /// BYTES (or STRING, UTF-8 checked) column for the record key.
    pub key: Option<String>,
    /// REPEATED RECORD column with `key` STRING and `value` BYTES/STRING subfields.
    pub headers: Option<String>,
}

impl PlanOptions {
    /// The metadata columns with those `set … from:` adds.
    pub(crate) fn effective_metadata(&self) -> Result<MetadataColumns, PlanError> {
        transforms::metadata_with(&self.metadata, &self.transforms).map_err(|reason| {
            PlanError::Transform {
                transform: "set".into(),
                reason,
            }
        })
    }
}

/// Column types a metadata value can be written to, each with the proto type it is sent as;
/// the first is the natural one, the others alternates.
type Accepted = &'static [(FieldType, Type)];

const STRING: Accepted = &[(FieldType::String, Type::String)];
const INT64: Accepted = &[(FieldType::Int64, Type::Int64)];
const TIMESTAMP: Accepted = &[
    (FieldType::Timestamp, Type::Int64),
    (FieldType::Int64, Type::Int64),
];
const KEY: Accepted = &[
    (FieldType::Bytes, Type::Bytes),
    (FieldType::String, Type::String),
];

/// The Kafka metadata columns' ops, their fields appended to the root message's `protos` (in
/// this order: topic, partition, offset, timestamp, key, headers, then the columns the
/// transforms set).
pub(crate) fn metadata_ops(
    desc: &mut DescriptorBuilder,
    options: &PlanOptions,
    table: &TableSchema,
    protos: &mut Vec<FieldDescriptorProto>,
) -> Result<MetadataOps, PlanError> {
    let m = &options.effective_metadata()?;
    let mut scalar = |name: &Option<String>, accepted: Accepted, wire: u32| match name {
        Some(name) => scalar_column(protos, find(table, name)?, accepted, wire).map(Some),
        None => Ok(None),
    };
    let topic = scalar(&m.topic, STRING, WIRE_LEN)?;
    let partition = scalar(&m.partition, INT64, WIRE_VARINT)?;
    let offset = scalar(&m.offset, INT64, WIRE_VARINT)?;
    let timestamp = scalar(&m.timestamp, TIMESTAMP, WIRE_VARINT)?;
    let key = scalar(&m.key, KEY, WIRE_LEN)?;
    let headers = match &m.headers {
        Some(name) => Some(headers_column(desc, protos, find(table, name)?)?),
        None => None,
    };
    let set = crate::transforms::set_ops(&options.transforms, table, protos)?;
    Ok(MetadataOps {
        topic,
        partition,
        offset,
        timestamp,
        key,
        headers,
        set,
    })
}

fn find<'t>(table: &'t TableSchema, name: &str) -> Result<&'t TableFieldSchema, PlanError> {
    (table.fields.iter())
        .find(|f| f.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| PlanError::Metadata {
            column: name.to_owned(),
            reason: "the table has no such column".into(),
        })
}

/// A column holding one value per row, of one of the `accepted` types.
fn scalar_column(
    protos: &mut Vec<FieldDescriptorProto>,
    col: &TableFieldSchema,
    accepted: Accepted,
    wire: u32,
) -> Result<MetaColumn, PlanError> {
    let Some(pos) = accepted.iter().position(|(t, _)| *t == col.field_type) else {
        return Err(PlanError::Metadata {
            column: col.name.clone(),
            reason: format!("a {} column cannot hold it", column_type(col)),
        });
    };
    if col.mode() == Mode::Repeated {
        return Err(PlanError::Metadata {
            column: col.name.clone(),
            reason: "the column must not be REPEATED".into(),
        });
    }
    let number = protos.len() as i32 + 1;
    let wire = if accepted[pos].1 == Type::String || accepted[pos].1 == Type::Bytes {
        WIRE_LEN
    } else {
        wire
    };
    protos.push(descriptor::field(
        &col.name,
        number,
        Label::Optional,
        &ProtoType::scalar(accepted[pos].1),
    ));
    Ok(MetaColumn {
        tag: Tag::new(number as u32, wire),
        column: col.name.as_str().into(),
        required: col.mode() == Mode::Required,
        alternate: pos > 0,
    })
}

/// The headers column: a REPEATED RECORD of a STRING `key` and a BYTES or STRING `value`,
/// sent as a nested message of its own.
fn headers_column(
    desc: &mut DescriptorBuilder,
    protos: &mut Vec<FieldDescriptorProto>,
    col: &TableFieldSchema,
) -> Result<HeadersColumn, PlanError> {
    let bad = |reason: &str| PlanError::Metadata {
        column: col.name.clone(),
        reason: reason.into(),
    };
    if col.field_type != FieldType::Record || col.mode() != Mode::Repeated {
        return Err(bad("headers need a REPEATED RECORD column"));
    }
    let sub = |name: &str| {
        col.fields
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name))
    };
    let key = sub("key").filter(|k| k.field_type == FieldType::String);
    let value =
        sub("value").filter(|v| matches!(v.field_type, FieldType::Bytes | FieldType::String));
    let (Some(key), Some(value)) = (key, value) else {
        return Err(bad(
            "headers need a STRING `key` and a BYTES or STRING `value` subfield",
        ));
    };
    let value_is_string = value.field_type == FieldType::String;
    let name = desc.reserve_name(&col.name);
    let value_type = if value_is_string {
        Type::String
    } else {
        Type::Bytes
    };
    desc.add(descriptor::message(
        &name,
        vec![
            descriptor::field(
                &key.name,
                1,
                Label::Optional,
                &ProtoType::scalar(Type::String),
            ),
            descriptor::field(
                &value.name,
                2,
                Label::Optional,
                &ProtoType::scalar(value_type),
            ),
        ],
    ));
    let number = protos.len() as i32 + 1;
    protos.push(descriptor::field(
        &col.name,
        number,
        Label::Repeated,
        &ProtoType {
            ty: Type::Message,
            message: Some(name),
        },
    ));
    Ok(HeadersColumn {
        tag: Tag::new(number as u32, WIRE_LEN),
        key: Tag::new(1, WIRE_LEN),
        value: Tag::new(2, WIRE_LEN),
        value_is_string,
        column: col.name.as_str().into(),
    })
}
