//! `set … from: key, field:`: top-level columns filled from fields of the Kafka key, decoded by
//! the key's own schema. The value's plan declares each column's field (its proto type the one
//! a schemaless JSON plan gives the column, so it does not depend on the key's schema); a
//! [`KeyPlan`], compiled once per key schema by the same compilers as a value's (only the key's
//! fields that fill these columns, under the column's name), writes them. Its fields come out
//! numbered as in its own descriptor and are renumbered as the value's plan declares them, so
//! a plan without key columns runs exactly as before.

use std::sync::Arc;

use prost_reflect::MessageDescriptor;
use prost_types::FieldDescriptorProto;
use prost_types::field_descriptor_proto::{Label, Type};

use super::{RenameField, SetColumn, Transform};
use crate::compile::{PlanOptions, UnknownFields, column_type};
use crate::descriptor::{self, ProtoType};
use crate::error::{PlanError, RecordError};
use crate::proto::{Tag, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT};
use crate::{AvroSchema, Plan};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

/// Proto wire type 5: four bytes (`float`, `fixed32`).
const WIRE_FIXED32: u32 = 5;

/// One column of a value's plan set from a key's field.
#[derive(Debug, Clone)]
pub(crate) struct KeyColumn {
    /// The field number the value's plan declares for the column.
    number: u32,
    column: Arc<str>,
    required: bool,
}

/// The `set … from: key, field:` entries of `list`, in order.
fn key_sets(list: &[Transform]) -> impl Iterator<Item = (&Transform, &SetColumn, &str)> {
    list.iter().filter_map(|t| match t {
        Transform::Set(s) => s.key_field().map(|f| (t, s, f)),
        _ => None,
    })
}

/// The table's column `name`, if one value of the key can fill it.
fn key_target<'t>(
    t: &Transform,
    name: &str,
    table: &'t TableSchema,
) -> Result<&'t TableFieldSchema, PlanError> {
    let bad = |reason: String| PlanError::Transform {
        transform: t.describe(),
        reason,
    };
    let col = (table.fields.iter())
        .find(|f| f.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| bad("the table has no such column".into()))?;
    if col.mode() == Mode::Repeated || col.field_type == FieldType::Record {
        return Err(bad(format!(
            "a {} column: a field of the key fills a scalar column",
            column_type(col)
        )));
    }
    if !descriptor::is_proto_identifier(&col.name) {
        return Err(PlanError::BadColumnName {
            column: col.name.clone(),
        });
    }
    Ok(col)
}

/// The proto type rows carry `col` as: the one a schemaless JSON plan gives it, which only the
/// column decides.
fn row_type(col: &TableFieldSchema) -> Result<Type, PlanError> {
    let one = TableSchema {
        fields: vec![col.clone()],
    };
    let plan = crate::json::compile(None, false, &one, &PlanOptions::default())?;
    Ok(plan.descriptor().field[0].r#type())
}

/// The key columns of `list`, their fields appended to the root message's `protos`.
pub(crate) fn key_columns(
    list: &[Transform],
    table: &TableSchema,
    protos: &mut Vec<FieldDescriptorProto>,
) -> Result<Box<[KeyColumn]>, PlanError> {
    let mut out = Vec::new();
    for (t, s, _) in key_sets(list) {
        let col = key_target(t, &s.column, table)?;
        let ty = row_type(col)?;
        let number = protos.len() as u32 + 1;
        protos.push(descriptor::field(
            &col.name,
            number as i32,
            Label::Optional,
            &ProtoType::scalar(ty),
        ));
        out.push(KeyColumn {
            number,
            column: col.name.as_str().into(),
            required: col.mode() == Mode::Required,
        });
    }
    Ok(out.into_boxed_slice())
}

/// The writer schema of a Kafka key.
pub enum KeySchema<'a> {
    Avro(&'a AvroSchema),
    Protobuf(&'a MessageDescriptor),
    /// A JSON Schema, or `None`: schemaless JSON, typed by the columns.
    Json(Option<&'a Arc<crate::json::JsonSchema>>),
}

/// The plan of one key schema: writes the key's fields that fill the route's key columns.
#[derive(Debug, Clone)]
pub struct KeyPlan {
    plan: Plan,
    /// By the key plan's field number (from 1): the index of its column among the route's key
    /// columns (the value plan's [`KeyColumn`]s, in the same order).
    slots: Box<[u8]>,
    /// The key columns' names, for the error of a key that does not decode.
    columns: Arc<str>,
}

impl KeyPlan {
    /// The plan of `key`'s records for the `set … from: key, field:` columns of
    /// `options.transforms` in `table`: each field as a value's field of that name would be
    /// written into its column (a type it cannot fill, or a REQUIRED column the key lacks,
    /// refuses it, naming the column).
    pub fn compile(
        key: KeySchema<'_>,
        table: &TableSchema,
        options: &PlanOptions,
    ) -> Result<KeyPlan, PlanError> {
        let mut columns = Vec::new();
        let mut renames = Vec::new();
        for (t, s, field) in key_sets(&options.transforms) {
            let col = key_target(t, &s.column, table)?;
            if !field.eq_ignore_ascii_case(&col.name) {
                renames.push(Transform::Rename(RenameField {
                    field: field.to_owned(),
                    to: col.name.clone(),
                }));
            }
            columns.push(col.clone());
        }
        if columns.len() > u8::MAX as usize {
            return Err(PlanError::Transform {
                transform: "set".into(),
                reason: format!("{} columns from the key: at most 255", columns.len()),
            });
        }
        let sub = TableSchema {
            fields: columns.clone(),
        };
        let sub_options = PlanOptions {
            unknown_fields: UnknownFields::Ignore,
            transforms: renames,
            ..PlanOptions::default()
        };
        let plan = match key {
            KeySchema::Avro(s) => Plan::compile(s, &sub, &sub_options),
            KeySchema::Protobuf(m) => Plan::compile_protobuf(m, &sub, &sub_options),
            KeySchema::Json(s) => Plan::compile_json(s, false, &sub, &sub_options),
        }?;
        let fields = &plan.descriptor().field;
        let last = fields.iter().map(|f| f.number()).max().unwrap_or(0);
        let mut slots = vec![u8::MAX; last as usize + 1];
        for f in fields {
            let i = (columns.iter())
                .position(|c| c.name.eq_ignore_ascii_case(f.name()))
                .expect("a key plan's fields are its columns");
            let want = row_type(&columns[i])?;
            if f.r#type() != want {
                return Err(PlanError::Unsupported {
                    column: columns[i].name.clone(),
                    reason: format!(
                        "the key's field is written as protobuf {:?}, rows carry the column as {want:?}",
                        f.r#type()
                    ),
                });
            }
            slots[f.number() as usize] = i as u8;
        }
        let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        Ok(KeyPlan {
            plan,
            slots: slots.into_boxed_slice(),
            columns: names.join(", ").into(),
        })
    }

    /// Appends the key columns of one record (`body`: the key without its framing) to `out`,
    /// numbered as `columns` (the value plan's) declare them. On error `out` is left as it was.
    pub(crate) fn write(
        &self,
        columns: &[KeyColumn],
        body: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        let start = out.len();
        if let Err(e) = self.plan.transcode(body, None, out) {
            return Err(RecordError::KafkaKey {
                columns: self.columns.clone(),
                source: Box::new(e),
            });
        }
        // The key plan's fields, each copied under the value plan's number, then the originals
        // removed: a move within the buffer, no allocation of its own.
        let end = out.len();
        let mut at = start;
        while at < end {
            let (tag, n) = varint(&out[at..end]);
            at += n;
            let wire = (tag & 7) as u32;
            let len = match wire {
                WIRE_VARINT => varint(&out[at..end]).1,
                WIRE_FIXED64 => 8,
                WIRE_FIXED32 => 4,
                WIRE_LEN => {
                    let (len, n) = varint(&out[at..end]);
                    n + len as usize
                }
                _ => unreachable!("a plan writes no groups"),
            };
            let slot = self.slots[(tag >> 3) as usize] as usize;
            Tag::new(columns[slot].number, wire).put(out);
            out.extend_from_within(at..at + len);
            at += len;
        }
        out.drain(start..end);
        Ok(())
    }
}

/// A varint of bytes the plan itself just wrote, and its length.
fn varint(b: &[u8]) -> (u64, usize) {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return (v, i + 1);
        }
    }
    unreachable!("a plan writes whole varints")
}

/// Writes the key columns of one record: from `key` (its plan and its body) or, for a record
/// without a key, nothing (NULL), or the error of the first REQUIRED key column.
pub(crate) fn write_key(
    columns: &[KeyColumn],
    key: Option<(&KeyPlan, &[u8])>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    match key {
        Some((plan, body)) => plan.write(columns, body, out),
        None => match columns.iter().find(|c| c.required) {
            Some(c) => Err(RecordError::NullRequired {
                column: c.column.clone(),
            }),
            None => Ok(()),
        },
    }
}
