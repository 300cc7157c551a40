//! `set` from a static value or a Kafka header, and `mask` with a value: top-level columns the
//! plan fills beside the Kafka metadata. A static value is encoded once, when the plan is
//! compiled, and copied into each row; a header column reads one header per record.

use std::sync::Arc;

use prost_types::FieldDescriptorProto;
use prost_types::field_descriptor_proto::{Label, Type};

use super::{HeaderEncoding, Literal, Transform};
use crate::compile::column_type;
use crate::descriptor::{self, ProtoType};
use crate::error::{PlanError, RecordError};
use crate::exec::KafkaHeader;
use crate::proto::{Tag, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT, put_len_delimited, put_varint};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

/// The columns a plan's transforms fill.
#[derive(Debug, Clone, Default)]
pub struct SetOps {
    /// Every static value's field (key and value), encoded once, copied into each row.
    constants: Box<[u8]>,
    headers: Box<[HeaderOp]>,
    /// The columns set from the key's fields (`keys.rs`), written apart from the value.
    keys: Box<[super::keys::KeyColumn]>,
}

#[derive(Debug, Clone)]
pub(crate) struct HeaderOp {
    tag: Tag,
    name: Box<[u8]>,
    encoding: HeaderEncoding,
    column: Arc<str>,
    required: bool,
}

/// The ops of the `set` and valued `mask` transforms of `list`, their fields appended to the
/// root message's `protos`.
pub(crate) fn set_ops(
    list: &[Transform],
    table: &TableSchema,
    protos: &mut Vec<FieldDescriptorProto>,
) -> Result<SetOps, PlanError> {
    let mut constants = Vec::new();
    let mut headers = Vec::new();
    let keys = super::keys::key_columns(list, table, protos)?;
    for t in list {
        let (column, value, header) = match t {
            Transform::Set(s) if s.from.is_none() => (
                &s.column,
                s.value.as_ref(),
                s.header.as_ref().zip(s.encoding),
            ),
            Transform::Mask(m) if m.value.is_some() => (&m.field, m.value.as_ref(), None),
            _ => continue,
        };
        let bad = |reason: String| PlanError::Transform {
            transform: t.describe(),
            reason,
        };
        let col = (table.fields.iter())
            .find(|f| f.name.eq_ignore_ascii_case(column))
            .ok_or_else(|| bad("the table has no such column".into()))?;
        if col.mode() == Mode::Repeated {
            return Err(bad(format!(
                "a {} column cannot hold one value",
                column_type(col)
            )));
        }
        if !descriptor::is_proto_identifier(&col.name) {
            return Err(PlanError::BadColumnName {
                column: col.name.clone(),
            });
        }
        let number = protos.len() as u32 + 1;
        let ty = match (value, header) {
            (Some(v), _) => literal(v, col, number, &mut constants).map_err(bad)?,
            (None, Some((name, encoding))) => {
                let (ty, wire) = header_type(encoding, col).map_err(bad)?;
                headers.push(HeaderOp {
                    tag: Tag::new(number, wire),
                    name: name.as_bytes().into(),
                    encoding,
                    column: col.name.as_str().into(),
                    required: col.mode() == Mode::Required,
                });
                ty
            }
            (None, None) => unreachable!("check: a set has one source"),
        };
        protos.push(descriptor::field(
            &col.name,
            number as i32,
            Label::Optional,
            &ProtoType::scalar(ty),
        ));
    }
    Ok(SetOps {
        constants: constants.into_boxed_slice(),
        headers: headers.into_boxed_slice(),
        keys,
    })
}

/// Encodes a static value into `out` as the column's field; only values the column holds
/// exactly, of the YAML type that says what they are.
fn literal(
    v: &Literal,
    col: &TableFieldSchema,
    number: u32,
    out: &mut Vec<u8>,
) -> Result<Type, String> {
    // Doubles hold every integer up to 2^53 exactly.
    const EXACT_IN_DOUBLE: u64 = 1 << 53;
    match (&col.field_type, v) {
        (FieldType::String, Literal::Text(s)) => {
            put_len_delimited(out, Tag::new(number, WIRE_LEN), s.as_bytes());
            Ok(Type::String)
        }
        (FieldType::Bytes, Literal::Text(s)) => {
            put_len_delimited(out, Tag::new(number, WIRE_LEN), s.as_bytes());
            Ok(Type::Bytes)
        }
        (FieldType::Int64, Literal::Int(i)) => {
            Tag::new(number, WIRE_VARINT).put(out);
            put_varint(out, *i as u64);
            Ok(Type::Int64)
        }
        (FieldType::Float64, Literal::Float(f)) => {
            Tag::new(number, WIRE_FIXED64).put(out);
            out.extend_from_slice(&f.to_le_bytes());
            Ok(Type::Double)
        }
        (FieldType::Float64, Literal::Int(i)) if i.unsigned_abs() <= EXACT_IN_DOUBLE => {
            Tag::new(number, WIRE_FIXED64).put(out);
            out.extend_from_slice(&(*i as f64).to_le_bytes());
            Ok(Type::Double)
        }
        (FieldType::Bool, Literal::Bool(b)) => {
            Tag::new(number, WIRE_VARINT).put(out);
            put_varint(out, *b as u64);
            Ok(Type::Bool)
        }
        (_, v) => Err(format!(
            "{} cannot be written exactly to a {} column (static values: text into STRING or BYTES, integers into INT64 or FLOAT64 up to 2^53, numbers into FLOAT64, true/false into BOOL)",
            describe_literal(v),
            column_type(col)
        )),
    }
}

fn describe_literal(v: &Literal) -> String {
    match v {
        Literal::Bool(b) => format!("the boolean {b}"),
        Literal::Int(i) => format!("the integer {i}"),
        Literal::Float(f) => format!("the number {f}"),
        Literal::Text(s) => format!("the text {s:?}"),
    }
}

/// The proto type and wire type a header of `encoding` is written as into `col`.
fn header_type(encoding: HeaderEncoding, col: &TableFieldSchema) -> Result<(Type, u32), String> {
    match (encoding, &col.field_type) {
        (HeaderEncoding::String, FieldType::String) => Ok((Type::String, WIRE_LEN)),
        (HeaderEncoding::Bytes, FieldType::Bytes) => Ok((Type::Bytes, WIRE_LEN)),
        (HeaderEncoding::Int64Be | HeaderEncoding::Int32Be, FieldType::Int64) => {
            Ok((Type::Int64, WIRE_VARINT))
        }
        (e, _) => Err(format!(
            "a header read as {} cannot fill a {} column (string: STRING, bytes: BYTES, int64_be and int32_be: INT64)",
            encoding_name(e),
            column_type(col)
        )),
    }
}

fn encoding_name(e: HeaderEncoding) -> &'static str {
    match e {
        HeaderEncoding::String => "string",
        HeaderEncoding::Bytes => "bytes",
        HeaderEncoding::Int64Be => "int64_be",
        HeaderEncoding::Int32Be => "int32_be",
    }
}

impl SetOps {
    /// Every static value's field, encoded once: copied into each row as it is.
    #[inline(always)]
    pub(crate) fn constants(&self) -> &[u8] {
        &self.constants
    }

    #[inline(always)]
    pub(crate) fn headers(&self) -> &[HeaderOp] {
        &self.headers
    }

    pub(crate) fn keys(&self) -> &[super::keys::KeyColumn] {
        &self.keys
    }
}

/// What a header column writes for one record, found once in its headers.
pub(crate) enum HeaderValue<'a> {
    /// Nothing: no header of the name, or a null value, into a NULLABLE column.
    Null,
    /// Text not yet checked for UTF-8 (the writer checks it as it copies it, and then asks
    /// [`HeaderOp::not_utf8`] for the error).
    Text(&'a [u8]),
    Bytes(&'a [u8]),
    Int(i64),
}

impl HeaderOp {
    #[inline(always)]
    pub(crate) fn tag(&self) -> Tag {
        self.tag
    }

    /// The value of the last header of this column's name (absent, or with a null value:
    /// NULL), in the column's encoding.
    #[inline(always)]
    pub(crate) fn value<'a>(
        &self,
        headers: &[KafkaHeader<'a>],
    ) -> Result<HeaderValue<'a>, RecordError> {
        let value = headers
            .iter()
            .rev()
            .find(|x| x.key == &*self.name)
            .and_then(|x| x.value);
        let Some(v) = value else {
            if self.required {
                return Err(RecordError::NullRequired {
                    column: self.column.clone(),
                });
            }
            return Ok(HeaderValue::Null);
        };
        Ok(match self.encoding {
            HeaderEncoding::String => HeaderValue::Text(v),
            HeaderEncoding::Bytes => HeaderValue::Bytes(v),
            HeaderEncoding::Int64Be => match <[u8; 8]>::try_from(v) {
                Ok(b) => HeaderValue::Int(i64::from_be_bytes(b)),
                Err(_) => return Err(self.wrong_length(v.len(), 8, "int64_be")),
            },
            HeaderEncoding::Int32Be => match <[u8; 4]>::try_from(v) {
                Ok(b) => HeaderValue::Int(i32::from_be_bytes(b) as i64),
                Err(_) => return Err(self.wrong_length(v.len(), 4, "int32_be")),
            },
        })
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn not_utf8(&self) -> RecordError {
        self.wrong(format!("header {:?} is not valid utf-8", self.name()))
    }

    #[cold]
    #[inline(never)]
    fn wrong_length(&self, len: usize, want: usize, encoding: &str) -> RecordError {
        self.wrong(format!(
            "header {:?} has {len} bytes, not the {want} of {encoding}",
            self.name()
        ))
    }

    fn wrong(&self, reason: String) -> RecordError {
        RecordError::Value {
            column: self.column.clone(),
            reason,
        }
    }

    fn name(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// Writes the transforms' columns of one record: the static values, then each header column.
#[inline]
pub(crate) fn write_set(
    ops: &SetOps,
    headers: &[KafkaHeader<'_>],
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    out.extend_from_slice(&ops.constants);
    for h in ops.headers.iter() {
        match h.value(headers)? {
            HeaderValue::Null => {}
            HeaderValue::Text(v) => {
                if std::str::from_utf8(v).is_err() {
                    return Err(h.not_utf8());
                }
                put_len_delimited(out, h.tag, v);
            }
            HeaderValue::Bytes(v) => put_len_delimited(out, h.tag, v),
            HeaderValue::Int(i) => {
                h.tag.put(out);
                put_varint(out, i as u64);
            }
        }
    }
    Ok(())
}
