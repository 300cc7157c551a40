//! Compiles a (writer message, table schema) pair into a Protobuf [`Plan`]: the table is
//! authoritative, columns match the message's fields by name, case-insensitively (never by
//! number), and every decision that does not depend on a record's bytes is taken here, once.

use std::collections::HashMap;
use std::sync::Arc;

use prost_reflect::{FieldDescriptor, Kind as PKind, MessageDescriptor};
use prost_types::FieldDescriptorProto;
use prost_types::field_descriptor_proto::{Label, Type};

use super::ops::{Conv, FieldKind, FieldOp, Lookup, MessageOp, NOT_DECLARED, Special, Src};
use super::reader::Val;
use super::scalar::write_scalar;
use crate::budget::Budget;
use crate::compile::{all_column_names, column_type, data_columns, metadata_names};
use crate::convert::DecimalTarget;
use crate::descriptor::{self, DescriptorBuilder, ProtoType};
use crate::field_path::FieldFilters;
use crate::metadata_columns::metadata_ops;
use crate::proto::{Tag, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT};
use crate::transforms::{FieldRules, Source, Target, Transform, ValueOp};
use crate::{Body, Plan, PlanError, PlanOptions, RecordError, UnknownFields};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

const ROOT_MESSAGE: &str = "Row";
/// Field numbers up to this use a direct lookup table.
const DENSE_LIMIT: u32 = 4096;

pub fn compile(
    message: &MessageDescriptor,
    table: &TableSchema,
    options: &PlanOptions,
) -> Result<Plan, PlanError> {
    let mut c = Compiler {
        options,
        rules: FieldRules::new(&options.transforms),
        desc: DescriptorBuilder::new(all_column_names(table)),
        budget: Budget::plan(),
    };
    let columns = data_columns(table, options)?;
    let (root, mut protos) = c.message(message, &columns, "", None, false, None)?;
    c.rules.unapplied()?;
    // Under `unknown_fields: ignore` a message of another shape still compiles, to a plan that
    // drops every field: refused instead, so its records are dead-lettered with their data
    // rather than written as rows that hold nothing of it.
    if protos.is_empty() && message.fields().next().is_some() && !columns.is_empty() {
        return Err(PlanError::NoProtoFieldWritten {
            message: message.full_name().to_owned(),
        });
    }
    let filters = FieldFilters::compile(&options.transforms, |path| {
        super::field_path::resolve(message, path)
    })?;
    let metadata = metadata_ops(&mut c.desc, options, table, &mut protos)?;
    let root_desc = descriptor::message(ROOT_MESSAGE, protos);
    Ok(Plan {
        body: Body::Protobuf(root),
        metadata,
        filters,
        descriptor: c.desc.finish(root_desc),
    })
}

/// Marks `column` as matched by a field (`lower`: the field's lowercased name); a second field
/// that differs only in case, or a column name that cannot be a proto field, refuses the plan.
fn claim(
    matched: &mut Vec<String>,
    lower: String,
    column: &TableFieldSchema,
    prefix: &str,
) -> Result<(), PlanError> {
    if matched.contains(&lower) {
        return Err(PlanError::Unsupported {
            column: format!("{prefix}{}", column.name),
            reason: "two protobuf fields differ only in case and match this column".into(),
        });
    }
    matched.push(lower);
    if !descriptor::is_proto_identifier(&column.name) {
        return Err(PlanError::BadColumnName {
            column: column.name.clone(),
        });
    }
    Ok(())
}

/// The first REQUIRED column without a default that no field of the message matched: every
/// record of the plan is refused for it.
fn missing_required(
    columns: &[TableFieldSchema],
    matched: &[String],
    prefix: &str,
) -> Option<Arc<str>> {
    columns
        .iter()
        .find(|c| {
            c.mode() == Mode::Required
                && c.default_value_expression.is_none()
                && !matches!(c.field_type, FieldType::Other(_))
                && !matched.contains(&c.name.to_ascii_lowercase())
        })
        .map(|c| Arc::from(format!("{prefix}{}", c.name)))
}

/// The oneofs with more than one written member (at most one may be set), in name order.
fn oneof_groups(oneofs: HashMap<String, Vec<u16>>) -> Box<[Box<[u16]>]> {
    let mut oneofs: Vec<(String, Vec<u16>)> = oneofs.into_iter().collect();
    oneofs.sort();
    oneofs
        .into_iter()
        .filter(|(_, m)| m.len() > 1)
        .map(|(_, m)| m.into_boxed_slice())
        .collect()
}

/// A message flattened into the row (`flatten`): its fields fill the row's columns
/// `{parent}{separator}{field}`, numbered after the row's fields so far (`base`); the columns
/// they fill are added to `matched`.
struct Flat<'s> {
    parent: &'s str,
    separator: &'s str,
    siblings: &'s [&'s str],
    reserved: &'s [String],
    base: usize,
    matched: &'s mut Vec<String>,
}

impl Flat<'_> {
    /// The lowercased row column the flattened message's field `name` fills.
    fn column(&self, rules: &FieldRules<'_>, name: &str) -> Result<String, PlanError> {
        let column = rules.flat_column(
            self.parent,
            self.separator,
            name,
            self.siblings,
            self.reserved,
        )?;
        Ok(column.to_ascii_lowercase())
    }

    /// Claims the row column `lower` for the field `name` (in the message's `matched` and the
    /// row's); its path is the column's name.
    fn claim(
        &mut self,
        matched: &mut Vec<String>,
        lower: String,
        column: &TableFieldSchema,
        name: &str,
    ) -> Result<Arc<str>, PlanError> {
        if self.matched.contains(&lower) {
            return Err(PlanError::Unsupported {
                column: column.name.clone(),
                reason: format!(
                    "two fields fill this column (one of them {}.{name})",
                    self.parent
                ),
            });
        }
        self.matched.push(lower.clone());
        claim(matched, lower, column, "")?;
        Ok(column.name.as_str().into())
    }
}

struct Compiler<'a> {
    options: &'a PlanOptions,
    /// Which column each field fills, as the route's transforms say.
    rules: FieldRules<'a>,
    desc: DescriptorBuilder,
    /// What the plan may still build: a message type is compiled again at each field that
    /// uses it (with a RECORD column), so a small schema could build a large plan.
    budget: Budget,
}

impl Compiler<'_> {
    /// The op of one message written to `columns`, and the proto fields it writes.
    fn message(
        &mut self,
        message: &MessageDescriptor,
        columns: &[TableFieldSchema],
        prefix: &str,
        tag: Option<Tag>,
        map_entry: bool,
        mut flat: Option<Flat<'_>>,
    ) -> Result<(MessageOp, Vec<FieldDescriptorProto>), PlanError> {
        self.budget.nodes(message.fields().len() + columns.len())?;
        let by_name: HashMap<String, &TableFieldSchema> = columns
            .iter()
            .map(|c| (c.name.to_ascii_lowercase(), c))
            .collect();
        let mut fields = Vec::new();
        let mut numbers = Vec::new();
        let mut protos = Vec::new();
        let mut defaults = Defaults::default();
        let mut required = Vec::new();
        let mut oneofs: HashMap<String, Vec<u16>> = HashMap::new();
        let mut matched: Vec<String> = Vec::new();
        let field_names: Vec<String> = message.fields().map(|f| f.name().to_owned()).collect();
        (self.rules).check_record(prefix, field_names.iter().map(String::as_str))?;
        for fd in message.fields() {
            let index = fields.len() as u16;
            numbers.push((fd.number(), index));
            let (lower, dropped) = match self.rules.target(prefix, fd.name())? {
                Target::Column(name) => match &flat {
                    Some(f) => (f.column(&self.rules, name)?, false),
                    None => (name.to_ascii_lowercase(), false),
                },
                Target::Dropped => (String::new(), true),
                Target::Flatten(separator) => {
                    let separator = separator.to_owned();
                    let (names, into) = (&field_names, (&mut protos, &mut matched));
                    let (field, required_child) =
                        self.flattened(&fd, &separator, names, columns, into)?;
                    required.extend(required_child.then_some(index));
                    fields.push(field);
                    continue;
                }
            };
            let column = by_name.get(&lower).copied().filter(|_| !dropped);
            let Some(column) = column.filter(|c| !matches!(c.field_type, FieldType::Other(_)))
            else {
                // A dropped field is never an unknown one.
                fields.push(self.skipped(&fd, column.is_none() && !dropped, prefix)?);
                continue;
            };
            let path: Arc<str> = match &mut flat {
                Some(f) => f.claim(&mut matched, lower, column, fd.name())?,
                None => {
                    claim(&mut matched, lower, column, prefix)?;
                    format!("{prefix}{}", column.name).into()
                }
            };
            let number = (flat.as_ref().map_or(0, |f| f.base) + protos.len()) as i32 + 1;
            let (kind, ty) = match self.rules.conversion(prefix, fd.name()) {
                Some(t) => converted(&fd, t, column, number)?,
                None => self.field(&fd, column, &path, number)?,
            };
            let label = if column.mode() == Mode::Repeated {
                Label::Repeated
            } else {
                Label::Optional
            };
            protos.push(descriptor::field(&column.name, number, label, &ty));
            let scalar = matches!(
                kind,
                FieldKind::Scalar {
                    repeated: false,
                    ..
                }
            );
            // Implicit presence: a proto3 scalar outside a oneof, or a map entry's key or value.
            // The wire omits its default value, which the column must still receive.
            let implicit = scalar && (map_entry || (!fd.supports_presence() && !fd.is_list()));
            if implicit {
                if let FieldKind::Scalar { src, conv, tag, .. } = &kind {
                    let default = default_bytes(&fd, *src, conv, *tag, &path);
                    defaults.add(index, default, &mut required);
                }
            } else if column.mode() == Mode::Required {
                required.push(index);
            }
            if let Some(oneof) = fd.containing_oneof().filter(|o| !o.is_synthetic()) {
                oneofs
                    .entry(oneof.name().to_owned())
                    .or_default()
                    .push(index);
            }
            fields.push(FieldOp::new(kind, path, fd.number()));
        }
        let missing_required = match flat {
            // The row's columns: checked with the row's.
            Some(_) => None,
            None => missing_required(columns, &matched, prefix),
        };
        Ok((
            MessageOp {
                tag,
                lookup: lookup(numbers),
                tracked: fields.len(),
                fields: fields.into_boxed_slice(),
                defaults: defaults.bytes.into_boxed_slice(),
                default_errors: defaults.errors.into_boxed_slice(),
                required: required.into_boxed_slice(),
                oneofs: oneof_groups(oneofs),
                missing_required,
                unknown_is_error: self.options.unknown_fields == UnknownFields::Error,
                implicit_mask: 0,
                required_mask: 0,
                default_of: Box::default(),
                keys: Box::default(),
            }
            .with_masks(),
            protos,
        ))
    }

    /// The message field `fd` flattened into the row (`flatten`): a field whose message is
    /// written inline (no message of its own), its fields appended to the row's; whether one
    /// of the columns it fills is REQUIRED (then a record without the message is refused).
    fn flattened(
        &mut self,
        fd: &FieldDescriptor,
        separator: &str,
        siblings: &[String],
        columns: &[TableFieldSchema],
        (row_protos, matched): (&mut Vec<FieldDescriptorProto>, &mut Vec<String>),
    ) -> Result<(FieldOp, bool), PlanError> {
        let number = row_protos.len() + 1;
        let not_message = |what: &str| PlanError::Transform {
            transform: format!("flatten {}", fd.name()),
            reason: format!(
                "the field is {what}: only a singular message has fields to flatten (a message inside a repeated field has no columns of its own)"
            ),
        };
        let PKind::Message(m) = fd.kind() else {
            return Err(not_message("a scalar"));
        };
        if fd.is_list() || fd.is_map() {
            return Err(not_message("repeated"));
        }
        if m.full_name().starts_with("google.protobuf.") {
            return Err(not_message("a well-known type, written as one value"));
        }
        let siblings: Vec<&str> = siblings.iter().map(String::as_str).collect();
        let reserved = metadata_names(self.options)?;
        let before = matched.len();
        let (op, protos) = self.message(
            &m,
            columns,
            &format!("{}.", fd.name()),
            None,
            false,
            Some(Flat {
                parent: fd.name(),
                separator,
                siblings: &siblings,
                reserved: &reserved,
                base: number - 1,
                matched,
            }),
        )?;
        let required = columns.iter().find(|c| {
            matched[before..].contains(&c.name.to_ascii_lowercase())
                && c.mode() == Mode::Required
                && c.default_value_expression.is_none()
        });
        let path: Arc<str> = match required {
            Some(c) => c.name.as_str().into(),
            None => fd.name().into(),
        };
        let field = FieldOp::new(
            FieldKind::Message {
                op: Box::new(op),
                repeated: false,
            },
            path,
            fd.number(),
        );
        row_protos.extend(protos);
        Ok((field, required.is_some()))
    }

    /// A field no column takes: refused under `unknown_fields: error` when no column has its
    /// name, otherwise skipped (also when its column has a type the sink does not write).
    fn skipped(
        &self,
        fd: &FieldDescriptor,
        no_column: bool,
        prefix: &str,
    ) -> Result<FieldOp, PlanError> {
        if no_column && self.options.unknown_fields == UnknownFields::Error {
            return Err(PlanError::UnknownProtoField {
                field: format!("{prefix}{}", fd.name()),
            });
        }
        Ok(FieldOp::new(
            FieldKind::Skip,
            format!("{prefix}{}", fd.name()).into(),
            fd.number(),
        ))
    }

    fn field(
        &mut self,
        fd: &FieldDescriptor,
        column: &TableFieldSchema,
        path: &Arc<str>,
        number: i32,
    ) -> Result<(FieldKind, ProtoType), PlanError> {
        let incompatible = || PlanError::ProtoIncompatible {
            column: path.to_string(),
            proto: describe(fd),
            column_type: column_type(column),
        };
        let repeated = column.mode() == Mode::Repeated;
        if repeated != (fd.is_list() || fd.is_map()) {
            return Err(incompatible());
        }
        if fd.is_group() {
            return Err(PlanError::Unsupported {
                column: path.to_string(),
                reason: "proto2 groups are not supported".into(),
            });
        }
        let kind = fd.kind();
        if let PKind::Message(m) = &kind {
            if column.field_type == FieldType::Record {
                let name = self.desc.reserve_name(path);
                let tag = Tag::new(number as u32, WIRE_LEN);
                let (op, protos) = self.message(
                    m,
                    &column.fields,
                    &format!("{path}."),
                    Some(tag),
                    m.is_map_entry(),
                    None,
                )?;
                self.desc.add(descriptor::message(&name, protos));
                return Ok((
                    FieldKind::Message {
                        op: Box::new(op),
                        repeated,
                    },
                    ProtoType {
                        ty: Type::Message,
                        message: Some(name),
                    },
                ));
            }
            let special = special(m, column).ok_or_else(incompatible)?;
            let (wire, ty) = special_proto(&special);
            return Ok((
                FieldKind::Special {
                    special,
                    tag: Tag::new(number as u32, wire),
                    repeated,
                },
                ProtoType::scalar(ty),
            ));
        }
        let src = src_of(&kind).expect("scalar kind");
        let conv = scalar_conv(src, &kind, &column.field_type).ok_or_else(incompatible)?;
        let (wire, ty) = proto_of(&conv);
        Ok((
            FieldKind::Scalar {
                src,
                conv,
                tag: Tag::new(number as u32, wire),
                repeated,
            },
            ProtoType::scalar(ty),
        ))
    }
}

/// What kind of scalar a field is, for a transform.
pub(super) fn source_of(fd: &FieldDescriptor) -> Source {
    match src_of(&fd.kind()) {
        _ if fd.is_list() || fd.is_map() => Source::Other("a repeated field"),
        Some(Src::String) => Source::Str,
        Some(Src::Bytes) => Source::Bytes,
        Some(Src::Int32) => Source::Int32("int32"),
        Some(Src::SInt32) => Source::Int32("sint32"),
        Some(Src::SFixed32) => Source::Int32("sfixed32"),
        Some(Src::Int64) => Source::Int64("int64"),
        Some(Src::SInt64) => Source::Int64("sint64"),
        Some(Src::SFixed64) => Source::Int64("sfixed64"),
        Some(Src::UInt32) => Source::UInt32("uint32"),
        Some(Src::Fixed32) => Source::UInt32("fixed32"),
        Some(Src::UInt64) => Source::UInt64("uint64"),
        Some(Src::Fixed64) => Source::UInt64("fixed64"),
        Some(Src::Float) => Source::Float32("float"),
        Some(Src::Double) => Source::Float64("double"),
        Some(Src::Bool) => Source::Bool,
        Some(Src::Enum) => Source::Other("an enum"),
        None => Source::Other("a message"),
    }
}

/// A field a transform rewrites (`transforms/values.rs`): a singular string or bytes field.
fn converted(
    fd: &FieldDescriptor,
    t: &Transform,
    column: &TableFieldSchema,
    number: i32,
) -> Result<(FieldKind, ProtoType), PlanError> {
    let src = src_of(&fd.kind());
    let source = source_of(fd);
    let op = ValueOp::compile(t, source, column)?;
    let (ty, wire) = op.proto_type();
    Ok((
        FieldKind::Scalar {
            src: src.expect("compile: a transformed field is a scalar"),
            conv: Conv::Value {
                op,
                text: source == Source::Str,
            },
            tag: Tag::new(number as u32, wire),
            repeated: false,
        },
        ProtoType::scalar(ty),
    ))
}

fn lookup(mut numbers: Vec<(u32, u16)>) -> Lookup {
    let max = numbers.iter().map(|(n, _)| *n).max().unwrap_or(0);
    if max <= DENSE_LIMIT {
        let mut table = vec![NOT_DECLARED; max as usize + 1];
        for (n, i) in numbers {
            table[n as usize] = i;
        }
        Lookup::Dense(table.into_boxed_slice())
    } else {
        numbers.sort_unstable();
        Lookup::Sparse(numbers.into_boxed_slice())
    }
}

/// The defaults of a message's implicit-presence fields, written when the wire leaves them
/// out, and those a transform cannot write (`""` cast to INT64): a record without such a field
/// is its error, the one the same value sent would be, so the field is required.
#[derive(Default)]
struct Defaults {
    bytes: Vec<(u16, Box<[u8]>)>,
    errors: Vec<(u16, RecordError)>,
}

impl Defaults {
    fn add(
        &mut self,
        index: u16,
        default: Result<Box<[u8]>, RecordError>,
        required: &mut Vec<u16>,
    ) {
        match default {
            Ok(bytes) => self.bytes.push((index, bytes)),
            Err(e) => {
                required.push(index);
                self.errors.push((index, e));
            }
        }
    }
}

/// The bytes of the default value of an implicit-presence field, written when the wire omits
/// it. An empty string into a JSON column (it is not JSON) leaves the column NULL; a default a
/// transform cannot write is the record's error.
fn default_bytes(
    fd: &FieldDescriptor,
    src: Src,
    conv: &Conv,
    tag: Tag,
    path: &Arc<str>,
) -> Result<Box<[u8]>, RecordError> {
    let zero = match (&fd.kind(), src) {
        (PKind::Enum(e), _) => Val::I(e.default_value().number() as i64),
        (_, Src::String | Src::Bytes) => Val::B(b""),
        (_, Src::Float) => Val::F32(0.0),
        (_, Src::Double) => Val::F64(0.0),
        (_, Src::UInt64 | Src::Fixed64) => Val::U(0),
        _ => Val::I(0),
    };
    let mut out = Vec::new();
    match write_scalar(conv, tag, zero, path, &mut out) {
        Ok(()) => Ok(out.into_boxed_slice()),
        // An empty string is no JSON text: its JSON column stays NULL (docs/mapping.md).
        Err(_) if matches!(conv, Conv::JsonStr) => Ok(Box::default()),
        Err(e) => Err(e),
    }
}

pub(super) fn src_of(kind: &PKind) -> Option<Src> {
    Some(match kind {
        PKind::Double => Src::Double,
        PKind::Float => Src::Float,
        PKind::Int32 => Src::Int32,
        PKind::Int64 => Src::Int64,
        PKind::Uint32 => Src::UInt32,
        PKind::Uint64 => Src::UInt64,
        PKind::Sint32 => Src::SInt32,
        PKind::Sint64 => Src::SInt64,
        PKind::Fixed32 => Src::Fixed32,
        PKind::Fixed64 => Src::Fixed64,
        PKind::Sfixed32 => Src::SFixed32,
        PKind::Sfixed64 => Src::SFixed64,
        PKind::Bool => Src::Bool,
        PKind::String => Src::String,
        PKind::Bytes => Src::Bytes,
        PKind::Enum(_) => Src::Enum,
        PKind::Message(_) => return None,
    })
}

/// The conversion of a scalar Protobuf value into a column of the given type, if BigQuery can
/// take it without loss of meaning.
fn scalar_conv(src: Src, kind: &PKind, column: &FieldType) -> Option<Conv> {
    use FieldType as F;
    let signed = matches!(
        src,
        Src::Int32
            | Src::Int64
            | Src::SInt32
            | Src::SInt64
            | Src::SFixed32
            | Src::SFixed64
            | Src::UInt32
            | Src::Fixed32
    );
    let unsigned64 = matches!(src, Src::UInt64 | Src::Fixed64);
    let target = match column {
        F::Numeric => Some(DecimalTarget::Numeric),
        F::BigNumeric => Some(DecimalTarget::BigNumeric),
        _ => None,
    };
    Some(match (column, src) {
        (F::Int64, _) if signed => Conv::Int,
        (F::Int64, _) if unsigned64 => Conv::UInt,
        (F::Int64, Src::Enum) => Conv::EnumNumber,
        (F::Float64, Src::Float) => Conv::Float,
        (F::Float64, Src::Double) => Conv::Double,
        (F::Float64, _) if signed => Conv::IntToDouble,
        (F::Float64, _) if unsigned64 => Conv::UIntToDouble,
        (F::Numeric | F::BigNumeric, _) if signed => Conv::IntToNumeric(target?),
        (F::Numeric | F::BigNumeric, _) if unsigned64 => Conv::UIntToNumeric(target?),
        (F::Numeric | F::BigNumeric, Src::String) => Conv::Str,
        (F::Bool, Src::Bool) => Conv::Bool,
        (F::String, Src::String) => Conv::Str,
        (F::String, Src::Bytes) => Conv::BytesAsStr,
        (F::String, Src::Enum) => {
            let PKind::Enum(e) = kind else { return None };
            let mut names: Vec<(i32, Box<str>)> = Vec::new();
            // Aliases share a number: the first name declared is the one written.
            for v in e.values() {
                if !names.iter().any(|(n, _)| *n == v.number()) {
                    names.push((v.number(), v.name().into()));
                }
            }
            names.sort_by_key(|(n, _)| *n);
            Conv::EnumName(names.into_boxed_slice())
        }
        (F::Json, Src::String) => Conv::JsonStr,
        (F::Geography, Src::String) => Conv::Str,
        (F::Date | F::DateTime | F::Time, Src::String) => Conv::Str,
        (F::Bytes, Src::Bytes) => Conv::Bytes,
        (F::Bytes, Src::String) => Conv::StrAsBytes,
        _ => return None,
    })
}

/// Well-known messages that fill a scalar column.
fn special(m: &MessageDescriptor, column: &TableFieldSchema) -> Option<Special> {
    use FieldType as F;
    let target = match column.field_type {
        F::Numeric => Some(DecimalTarget::Numeric),
        F::BigNumeric => Some(DecimalTarget::BigNumeric),
        _ => None,
    };
    let wrapper = |src: Src, kind: PKind| {
        scalar_conv(src, &kind, &column.field_type).map(|conv| Special::Wrapper { src, conv })
    };
    match (m.full_name(), &column.field_type) {
        ("google.protobuf.Timestamp", F::Timestamp) => Some(Special::Timestamp),
        ("google.protobuf.Timestamp", F::DateTime) => Some(Special::TimestampDateTime),
        ("google.protobuf.Duration", F::Int64) => Some(Special::DurationMicros),
        ("google.protobuf.DoubleValue", _) => wrapper(Src::Double, PKind::Double),
        ("google.protobuf.FloatValue", _) => wrapper(Src::Float, PKind::Float),
        ("google.protobuf.Int64Value", _) => wrapper(Src::Int64, PKind::Int64),
        ("google.protobuf.UInt64Value", _) => wrapper(Src::UInt64, PKind::Uint64),
        ("google.protobuf.Int32Value", _) => wrapper(Src::Int32, PKind::Int32),
        ("google.protobuf.UInt32Value", _) => wrapper(Src::UInt32, PKind::Uint32),
        ("google.protobuf.BoolValue", _) => wrapper(Src::Bool, PKind::Bool),
        ("google.protobuf.StringValue", _) => wrapper(Src::String, PKind::String),
        ("google.protobuf.BytesValue", _) => wrapper(Src::Bytes, PKind::Bytes),
        ("google.type.Date", F::Date) => Some(Special::Date),
        ("google.type.TimeOfDay", F::Time) => Some(Special::TimeOfDay),
        ("confluent.type.Decimal", F::Numeric | F::BigNumeric) => {
            Some(Special::ConfluentDecimal(target?))
        }
        ("google.type.Decimal", F::Numeric | F::BigNumeric) => {
            Some(Special::GoogleDecimal(target?))
        }
        _ => None,
    }
}

fn proto_of(conv: &Conv) -> (u32, Type) {
    match conv {
        Conv::Int | Conv::UInt | Conv::EnumNumber => (WIRE_VARINT, Type::Int64),
        Conv::IntToDouble | Conv::UIntToDouble | Conv::Float | Conv::Double => {
            (WIRE_FIXED64, Type::Double)
        }
        Conv::Bool => (WIRE_VARINT, Type::Bool),
        Conv::EnumName(_) | Conv::Str | Conv::JsonStr | Conv::BytesAsStr => {
            (WIRE_LEN, Type::String)
        }
        Conv::StrAsBytes | Conv::Bytes | Conv::IntToNumeric(_) | Conv::UIntToNumeric(_) => {
            (WIRE_LEN, Type::Bytes)
        }
        Conv::Value { op, .. } => {
            let (ty, wire) = op.proto_type();
            (wire, ty)
        }
    }
}

fn special_proto(special: &Special) -> (u32, Type) {
    match special {
        Special::Timestamp
        | Special::TimestampDateTime
        | Special::DurationMicros
        | Special::TimeOfDay => (WIRE_VARINT, Type::Int64),
        Special::Date => (WIRE_VARINT, Type::Int32),
        Special::ConfluentDecimal(_) | Special::GoogleDecimal(_) => (WIRE_LEN, Type::Bytes),
        Special::Wrapper { conv, .. } => proto_of(conv),
    }
}

/// A short description of a field's type for error messages: `repeated int64`, `map`,
/// `message google.protobuf.Timestamp`.
fn describe(fd: &FieldDescriptor) -> String {
    let base = match fd.kind() {
        PKind::Message(m) if fd.is_map() => format!("map ({})", m.full_name()),
        PKind::Message(m) => format!("message {}", m.full_name()),
        PKind::Enum(e) => format!("enum {}", e.full_name()),
        other => format!("{other:?}").to_ascii_lowercase(),
    };
    if fd.is_list() {
        format!("repeated {base}")
    } else {
        base
    }
}
