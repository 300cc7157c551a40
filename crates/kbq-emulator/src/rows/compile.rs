//! Compilation: a writer descriptor resolved against a table schema into a [`RowCodec`], every
//! (proto type, column type) pair checked once, proto2 defaults parsed.

use std::collections::HashMap;

use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, EnumDescriptorProto, FieldDescriptorProto};

use super::validate::check_value;
use super::wire::Wire;
use super::{
    ColumnKind, FieldPlan, MessagePlan, NumericSpec, ProtoKind, PseudoColumns, RowCodec,
    SMALL_NUMBERS, SchemaError, ValueCheck,
};

pub(super) enum Named<'d> {
    Message(&'d DescriptorProto),
    Enum(&'d EnumDescriptorProto),
}

pub(super) struct Compiler<'d> {
    /// Fully-qualified names (no leading dot) of every type nested in the root.
    names: HashMap<String, Named<'d>>,
    extras: Vec<String>,
    pseudo: PseudoColumns,
}

impl RowCodec {
    pub fn compile(
        descriptor: &DescriptorProto,
        table: &TableSchema,
    ) -> Result<RowCodec, SchemaError> {
        let root_name = descriptor.name();
        if root_name.is_empty() {
            return Err(SchemaError::InvalidDescriptor(
                "Missing name of the root message.".into(),
            ));
        }
        let mut compiler = Compiler {
            names: HashMap::new(),
            extras: Vec::new(),
            pseudo: PseudoColumns::default(),
        };
        compiler
            .names
            .insert(root_name.to_string(), Named::Message(descriptor));
        compiler.index(root_name.to_string(), descriptor)?;
        let mut root = compiler.message(descriptor, root_name, &table.fields, "", "")?;
        if !compiler.extras.is_empty() {
            return Err(SchemaError::ExtraFields {
                fields: compiler.extras,
            });
        }
        let defaults = super::defaults::plan_defaults(&mut root, &table.fields)?;
        Ok(RowCodec {
            descriptor: descriptor.clone(),
            root,
            pseudo: compiler.pseudo,
            defaults,
        })
    }

    pub fn descriptor(&self) -> &DescriptorProto {
        &self.descriptor
    }
}

pub(super) fn column_kind(column: &TableFieldSchema) -> ColumnKind {
    let param = |v: &Option<String>| v.as_deref().and_then(|s| s.trim().parse::<u64>().ok());
    match &column.field_type {
        FieldType::Int64 => ColumnKind::Int64,
        FieldType::Float64 => ColumnKind::Float64,
        FieldType::Bool => ColumnKind::Bool,
        FieldType::String => ColumnKind::String {
            max_length: param(&column.max_length),
        },
        FieldType::Bytes => ColumnKind::Bytes {
            max_length: param(&column.max_length),
        },
        FieldType::Numeric | FieldType::BigNumeric => {
            let big = column.field_type == FieldType::BigNumeric;
            // BIGNUMERIC reaches 5.8e38: 39 integer digits (the top one only partly).
            let (wire_scale, max_int) = if big { (38, 39) } else { (9, 29) };
            let precision = param(&column.precision).map(|p| p as u32);
            let declared_scale = param(&column.scale).map(|s| s as u32);
            let (scale, max_int_digits) = match (precision, declared_scale) {
                (Some(p), s) => {
                    let s = s.unwrap_or(0);
                    (s, p.saturating_sub(s))
                }
                (None, _) => (wire_scale, max_int),
            };
            ColumnKind::Numeric(NumericSpec {
                big,
                wire_scale,
                scale,
                max_int_digits,
            })
        }
        FieldType::Date => ColumnKind::Date,
        FieldType::Timestamp => ColumnKind::Timestamp,
        FieldType::DateTime => ColumnKind::DateTime,
        FieldType::Time => ColumnKind::Time,
        FieldType::Json => ColumnKind::Json,
        FieldType::Geography => ColumnKind::Geography,
        FieldType::Record => ColumnKind::Record,
        FieldType::Other(name) => ColumnKind::Other(name.to_ascii_uppercase()),
    }
}

pub(super) fn proto_kind(t: Type) -> Option<ProtoKind> {
    Some(match t {
        Type::Double => ProtoKind::Double,
        Type::Float => ProtoKind::Float,
        Type::Int64 => ProtoKind::Int64,
        Type::Uint64 => ProtoKind::Uint64,
        Type::Int32 => ProtoKind::Int32,
        Type::Fixed64 => ProtoKind::Fixed64,
        Type::Fixed32 => ProtoKind::Fixed32,
        Type::Bool => ProtoKind::Bool,
        Type::String => ProtoKind::String,
        Type::Bytes => ProtoKind::Bytes,
        Type::Uint32 => ProtoKind::Uint32,
        Type::Enum => ProtoKind::Enum,
        Type::Sfixed32 => ProtoKind::Sfixed32,
        Type::Sfixed64 => ProtoKind::Sfixed64,
        Type::Sint32 => ProtoKind::Sint32,
        Type::Sint64 => ProtoKind::Sint64,
        Type::Message => ProtoKind::Message,
        Type::Group => return None,
    })
}

impl<'d> Compiler<'d> {
    fn index(
        &mut self,
        full_name: String,
        message: &'d DescriptorProto,
    ) -> Result<(), SchemaError> {
        for nested in &message.nested_type {
            let name = format!("{full_name}.{}", nested.name());
            self.index(name.clone(), nested)?;
            if self
                .names
                .insert(name.clone(), Named::Message(nested))
                .is_some()
            {
                return Err(SchemaError::InvalidDescriptor(format!(
                    "\"{name}\" is already defined."
                )));
            }
        }
        for nested in &message.enum_type {
            let name = format!("{full_name}.{}", nested.name());
            if self
                .names
                .insert(name.clone(), Named::Enum(nested))
                .is_some()
            {
                return Err(SchemaError::InvalidDescriptor(format!(
                    "\"{name}\" is already defined."
                )));
            }
        }
        Ok(())
    }

    /// Protobuf scoping: a relative name is looked up in the innermost scope first.
    fn resolve(&self, scope: &str, type_name: &str) -> Option<(String, &Named<'d>)> {
        if let Some(absolute) = type_name.strip_prefix('.') {
            return self
                .names
                .get(absolute)
                .map(|named| (absolute.to_string(), named));
        }
        let mut scope = scope.to_string();
        loop {
            let candidate = if scope.is_empty() {
                type_name.to_string()
            } else {
                format!("{scope}.{type_name}")
            };
            if let Some(named) = self.names.get(&candidate) {
                return Some((candidate, named));
            }
            if scope.is_empty() {
                return None;
            }
            match scope.rfind('.') {
                Some(dot) => scope.truncate(dot),
                None => scope.clear(),
            }
        }
    }

    /// The plan of `message` against `columns`: each field checked as BigQuery checks it (its
    /// number, its type and mode against its column's, its default), its nested message
    /// compiled against the column's subfields. A field without a column is an extra (or a CDC
    /// pseudo-column at the top level).
    pub(super) fn message(
        &mut self,
        message: &'d DescriptorProto,
        full_name: &str,
        columns: &[TableFieldSchema],
        column_prefix: &str,
        extra_prefix: &str,
    ) -> Result<MessagePlan, SchemaError> {
        let mut by_lower: HashMap<String, &TableFieldSchema> = HashMap::new();
        for column in columns {
            by_lower.insert(column.name.to_lowercase(), column);
        }
        let mut plan = MessagePlan {
            fields: Vec::with_capacity(message.field.len()),
            small_numbers: Vec::new(),
            large_numbers: Vec::new(),
            required: Vec::new(),
            by_column: HashMap::new(),
            fills: HashMap::new(),
        };
        let mut seen_numbers: HashMap<u32, &str> = HashMap::new();
        for field in &message.field {
            let where_ = format!("{full_name}.{}", field.name());
            let number = field_number(field, full_name, &where_, &mut seen_numbers)?;
            let (proto, named) = self.field_type(full_name, field, &where_)?;
            let lower = field.name().to_lowercase();
            let Some(column) = by_lower.get(&lower).copied() else {
                if column_prefix.is_empty() && self.pseudo.claim(&lower, number, proto, &where_)? {
                    continue;
                }
                self.extras.push(format!("{extra_prefix}{lower}"));
                continue;
            };
            if plan.by_column.contains_key(&lower) {
                return Err(SchemaError::InvalidDescriptor(format!(
                    "{where_}: Field name \"{}\" maps to column \"{}\" more than once.",
                    field.name(),
                    column.name
                )));
            }
            let kind = column_kind(column);
            let timestamp_message = kind == ColumnKind::Timestamp
                && matches!(&named, Some((name, Named::Message(m))) if is_timestamp_message(name, m));
            let proto = check_shape(field, proto, column, &kind, timestamp_message, &where_)?;
            let column_path = format!("{column_prefix}{}", column.name);
            let mut enum_values = Vec::new();
            let mut nested = None;
            match named {
                Some((name, Named::Enum(e))) => enum_values = enum_values_of(&name, e)?,
                Some((name, Named::Message(m))) if kind == ColumnKind::Record => {
                    let m: &'d DescriptorProto = m;
                    nested = Some(Box::new(self.message(
                        m,
                        &name,
                        &column.fields,
                        &format!("{column_path}."),
                        &format!("{extra_prefix}{lower}."),
                    )?));
                }
                _ => {}
            }
            let repeated = field.label() == Label::Repeated;
            let default = match field.default_value.as_deref() {
                Some(text) if !repeated && proto != ProtoKind::Message => {
                    Some(parse_default(proto, text, &enum_values).ok_or_else(|| {
                        SchemaError::InvalidDescriptor(format!(
                            "{where_}: Couldn't parse default value \"{text}\"."
                        ))
                    })?)
                }
                _ => None,
            };
            // A REQUIRED top-level column with a default may be left unset: the request's
            // missing-value interpretation decides (defaults.rs).
            let column_default =
                column_prefix.is_empty() && column.default_value_expression.is_some();
            let must_be_set = !repeated
                && default.is_none()
                && ((column.mode() == Mode::Required && !column_default)
                    || field.label() == Label::Required);
            let index = plan.fields.len();
            let required_slot = must_be_set.then(|| {
                plan.required.push(index as u32);
                (plan.required.len() - 1) as u32
            });
            let field_plan = FieldPlan {
                path: column_path,
                proto,
                repeated,
                check: ValueCheck::of(proto, &kind),
                column: kind,
                required_slot,
                enum_values,
                message: nested,
                default,
            };
            if let Some(default) = &field_plan.default {
                // A default the column would reject is a schema error, not a per-row one.
                check_value(&field_plan, default.as_wire()).map_err(|e| {
                    SchemaError::InvalidDescriptor(format!("{where_}: {}", e.message(&field_plan)))
                })?;
            }
            plan.by_column.insert(lower, index);
            plan.fields.push(field_plan);
            plan.number(number, index);
        }
        plan.large_numbers.sort_unstable();
        Ok(plan)
    }

    /// The field's proto kind (`None` for groups) and, for enums and messages, the resolved type.
    #[allow(clippy::type_complexity)]
    fn field_type(
        &self,
        scope: &str,
        field: &FieldDescriptorProto,
        where_: &str,
    ) -> Result<(Option<ProtoKind>, Option<(String, &Named<'d>)>), SchemaError> {
        let declared = field.r#type.and_then(|t| Type::try_from(t).ok());
        let needs_name = match declared {
            Some(Type::Message) | Some(Type::Enum) | Some(Type::Group) | None => true,
            Some(_) => false,
        };
        if !needs_name {
            return Ok((declared.and_then(proto_kind), None));
        }
        let type_name = field.type_name();
        if type_name.is_empty() {
            return Err(SchemaError::InvalidDescriptor(format!(
                "{where_}: Missing field type."
            )));
        }
        let Some((name, named)) = self.resolve(scope, type_name) else {
            return Err(SchemaError::InvalidDescriptor(format!(
                "{where_}: \"{type_name}\" is not defined."
            )));
        };
        let kind = match (declared, named) {
            (Some(Type::Group), _) => None,
            (Some(Type::Message) | None, Named::Message(_)) => Some(ProtoKind::Message),
            (Some(Type::Enum) | None, Named::Enum(_)) => Some(ProtoKind::Enum),
            _ => {
                return Err(SchemaError::InvalidDescriptor(format!(
                    "{where_}: \"{type_name}\" is not a {}.",
                    if declared == Some(Type::Enum) {
                        "enum type"
                    } else {
                        "message type"
                    }
                )));
            }
        };
        Ok((kind, Some((name, named))))
    }
}

/// A proto2 `default_value` in its wire form.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum OwnedWire {
    Varint(u64),
    I64(u64),
    I32(u32),
    Len(Vec<u8>),
}

impl OwnedWire {
    pub(super) fn as_wire(&self) -> Wire<'_> {
        match self {
            OwnedWire::Varint(v) => Wire::Varint(*v),
            OwnedWire::I64(v) => Wire::I64(*v),
            OwnedWire::I32(v) => Wire::I32(*v),
            OwnedWire::Len(v) => Wire::Len(v),
        }
    }
}

pub(super) fn parse_default(
    proto: ProtoKind,
    text: &str,
    enum_values: &[(i32, String)],
) -> Option<OwnedWire> {
    let float = |t: &str| -> Option<f64> {
        match t {
            "inf" => Some(f64::INFINITY),
            "-inf" => Some(f64::NEG_INFINITY),
            "nan" => Some(f64::NAN),
            _ => t.parse().ok(),
        }
    };
    Some(match proto {
        ProtoKind::Double => OwnedWire::I64(float(text)?.to_bits()),
        ProtoKind::Float => OwnedWire::I32((float(text)? as f32).to_bits()),
        ProtoKind::Int64 | ProtoKind::Int32 => OwnedWire::Varint(text.parse::<i64>().ok()? as u64),
        ProtoKind::Uint64 | ProtoKind::Uint32 => OwnedWire::Varint(text.parse::<u64>().ok()?),
        ProtoKind::Sint32 | ProtoKind::Sint64 => {
            let v: i64 = text.parse().ok()?;
            OwnedWire::Varint(((v << 1) ^ (v >> 63)) as u64)
        }
        ProtoKind::Fixed64 => OwnedWire::I64(text.parse::<u64>().ok()?),
        ProtoKind::Sfixed64 => OwnedWire::I64(text.parse::<i64>().ok()? as u64),
        ProtoKind::Fixed32 => OwnedWire::I32(text.parse::<u32>().ok()?),
        ProtoKind::Sfixed32 => OwnedWire::I32(text.parse::<i32>().ok()? as u32),
        ProtoKind::Bool => OwnedWire::Varint(match text {
            "true" => 1,
            "false" => 0,
            _ => return None,
        }),
        ProtoKind::String => OwnedWire::Len(text.as_bytes().to_vec()),
        ProtoKind::Bytes => OwnedWire::Len(unescape_c(text)?),
        ProtoKind::Enum => {
            let number = enum_values.iter().find(|(_, n)| n == text)?.0;
            OwnedWire::Varint(number as i64 as u64)
        }
        ProtoKind::Message => return None,
    })
}

/// The C escapes protoc writes for `bytes` defaults.
pub(super) fn unescape_c(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let next = *bytes.get(i + 1)?;
        i += 2;
        match next {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'a' => out.push(0x07),
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'v' => out.push(0x0b),
            b'\\' | b'\'' | b'"' | b'?' => out.push(next),
            b'x' => {
                let start = i;
                while i < bytes.len() && i - start < 2 && bytes[i].is_ascii_hexdigit() {
                    i += 1;
                }
                out.push(u8::from_str_radix(text.get(start..i)?, 16).ok()?);
            }
            b'0'..=b'7' => {
                let start = i - 1;
                while i < bytes.len() && i - start < 3 && (b'0'..=b'7').contains(&bytes[i]) {
                    i += 1;
                }
                out.push(u8::try_from(u32::from_str_radix(&text[start..i], 8).ok()?).ok()?);
            }
            _ => return None,
        }
    }
    Some(out)
}

impl MessagePlan {
    /// Finds field `index` by its `number` from now on.
    pub(super) fn number(&mut self, number: u32, index: usize) {
        if number < SMALL_NUMBERS {
            if self.small_numbers.len() <= number as usize {
                self.small_numbers.resize(number as usize + 1, 0);
            }
            self.small_numbers[number as usize] = index as u32 + 1;
        } else {
            self.large_numbers.push((number, index as u32));
        }
    }
}

/// The field's number: present, in range, not used twice in one message.
fn field_number<'f>(
    field: &'f FieldDescriptorProto,
    full_name: &str,
    where_: &str,
    seen: &mut HashMap<u32, &'f str>,
) -> Result<u32, SchemaError> {
    if field.name().is_empty() {
        return Err(SchemaError::InvalidDescriptor(format!(
            "{full_name}: Missing field name."
        )));
    }
    let number = match u32::try_from(field.number()) {
        Ok(n) if (1..=536_870_911).contains(&n) => n,
        _ => {
            return Err(SchemaError::InvalidDescriptor(format!(
                "{where_}: Field numbers must be positive integers."
            )));
        }
    };
    if let Some(other) = seen.insert(number, field.name()) {
        return Err(SchemaError::InvalidDescriptor(format!(
            "{where_}: Field number {number} has already been used in \"{full_name}\" by field \"{other}\"."
        )));
    }
    Ok(number)
}

/// The field's kind (`None`: a group) and label against its column's type and mode.
fn check_shape(
    field: &FieldDescriptorProto,
    proto: Option<ProtoKind>,
    column: &TableFieldSchema,
    kind: &ColumnKind,
    timestamp_message: bool,
    where_: &str,
) -> Result<ProtoKind, SchemaError> {
    let Some(proto) = proto else {
        return Err(SchemaError::TypeMismatch {
            path: where_.to_owned(),
            proto_type: "group".into(),
            column_type: kind.name(),
        });
    };
    if !kind.accepts(proto) && !timestamp_message {
        return Err(SchemaError::TypeMismatch {
            path: where_.to_owned(),
            proto_type: proto.name().into(),
            column_type: kind.name(),
        });
    }
    let repeated = field.label() == Label::Repeated;
    if repeated != (column.mode() == Mode::Repeated) {
        return Err(SchemaError::ModeMismatch {
            path: where_.to_owned(),
            proto_label: if repeated { "repeated" } else { "optional" },
            column_mode: match column.mode() {
                Mode::Nullable => "NULLABLE",
                Mode::Required => "REQUIRED",
                Mode::Repeated => "REPEATED",
            },
        });
    }
    Ok(proto)
}

/// `google.protobuf.Timestamp`, which BigQuery takes for a TIMESTAMP column (the type table of
/// the Storage Write API's documentation). A writer schema is self-contained, so the type comes
/// nested, under the name Google's Java and Go clients give it when they normalize a descriptor
/// (`google_protobuf_Timestamp`), with the well-known fields: `int64 seconds = 1; int32 nanos = 2`.
fn is_timestamp_message(name: &str, message: &DescriptorProto) -> bool {
    let short = name.rsplit('.').next().unwrap_or(name);
    let field = |number: i32, field_name: &str, kind: Type| {
        message.field.iter().any(|f| {
            f.number() == number
                && f.name() == field_name
                && f.r#type() == kind
                && f.label() != Label::Repeated
        })
    };
    (short == "google_protobuf_Timestamp" || name == "google.protobuf.Timestamp")
        && message.field.len() == 2
        && field(1, "seconds", Type::Int64)
        && field(2, "nanos", Type::Int32)
}

/// An enum's values by number; an enum without values is refused.
fn enum_values_of(name: &str, e: &EnumDescriptorProto) -> Result<Vec<(i32, String)>, SchemaError> {
    if e.value.is_empty() {
        return Err(SchemaError::InvalidDescriptor(format!(
            "{name}: Enums must contain at least one value."
        )));
    }
    Ok((e.value.iter())
        .map(|v| (v.number(), v.name().to_string()))
        .collect())
}
