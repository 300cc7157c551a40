//! Rows of an AppendRows request: decoded with the writer's proto2 descriptor and checked against
//! the table schema the way BigQuery does (the types of docs/mapping.md), then rendered
//! in the JSON shape of `tabledata.list`.
//!
//! A [`RowCodec`] is compiled once per (writer descriptor, table schema): names are resolved,
//! fields matched to columns and every (proto type, column type) pair checked up front, so that
//! [`RowCodec::validate`] is a single pass over the wire bytes without allocation unless a row is
//! bad. The store keeps the raw row bytes and renders them only when a user reads the table.
//!
//! Not honoured: the `column_name` field annotation (extension 454943157). prost drops unknown
//! extensions when it decodes `ProtoSchema`, so the annotation never reaches this module; fields
//! match columns by name, case-insensitively.

use std::collections::HashMap;

use base64::Engine as _;
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::storage_error::StorageErrorCode;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, EnumDescriptorProto, FieldDescriptorProto};
use serde_json::{Value, json};

use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

mod civil;
mod decimal;
mod pseudo;
mod wire;

pub use civil::timestamp_seconds_text;
use civil::*;
use decimal::*;
pub use pseudo::PseudoColumns;
use wire::*;

/// The writer schema cannot be used with the table: the whole AppendRows call fails with
/// `INVALID_ARGUMENT`. [`SchemaError::message`] is BigQuery's text without the ` Entity: …` suffix
/// the caller appends.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaError {
    #[error("Input schema has more fields than BigQuery schema, extra fields: {}", quote_list(.fields))]
    ExtraFields { fields: Vec<String> },
    #[error(
        "The proto field mismatched with BigQuery field at {path}, the proto field type {proto_type}, BigQuery field type {column_type}"
    )]
    TypeMismatch {
        path: String,
        proto_type: String,
        column_type: String,
    },
    #[error(
        "The proto field mismatched with BigQuery field at {path}, the proto field label {proto_label}, BigQuery field mode {column_mode}"
    )]
    ModeMismatch {
        path: String,
        proto_label: &'static str,
        column_mode: &'static str,
    },
    #[error("Invalid proto schema: BqMessage.proto: {0}")]
    InvalidDescriptor(String),
}

impl SchemaError {
    pub fn message(&self) -> String {
        self.to_string()
    }

    /// The `StorageError.code` BigQuery attaches, when it attaches one.
    pub fn storage_code(&self) -> Option<i32> {
        match self {
            SchemaError::ExtraFields { .. } => {
                Some(StorageErrorCode::SchemaMismatchExtraFields as i32)
            }
            _ => None,
        }
    }
}

fn quote_list(fields: &[String]) -> String {
    fields
        .iter()
        .map(|f| format!("'{f}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A writer descriptor compiled against a table schema.
#[derive(Debug, Clone)]
pub struct RowCodec {
    descriptor: DescriptorProto,
    root: MessagePlan,
    /// The CDC pseudo-columns the writer schema declares (never table columns).
    pseudo: PseudoColumns,
}

/// Proto scalar kinds, as declared in the descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProtoKind {
    Double,
    Float,
    Int64,
    Uint64,
    Int32,
    Fixed64,
    Fixed32,
    Bool,
    String,
    Bytes,
    Uint32,
    Enum,
    Sfixed32,
    Sfixed64,
    Sint32,
    Sint64,
    Message,
}

impl ProtoKind {
    fn name(self) -> &'static str {
        match self {
            ProtoKind::Double => "double",
            ProtoKind::Float => "float",
            ProtoKind::Int64 => "int64",
            ProtoKind::Uint64 => "uint64",
            ProtoKind::Int32 => "int32",
            ProtoKind::Fixed64 => "fixed64",
            ProtoKind::Fixed32 => "fixed32",
            ProtoKind::Bool => "bool",
            ProtoKind::String => "string",
            ProtoKind::Bytes => "bytes",
            ProtoKind::Uint32 => "uint32",
            ProtoKind::Enum => "enum",
            ProtoKind::Sfixed32 => "sfixed32",
            ProtoKind::Sfixed64 => "sfixed64",
            ProtoKind::Sint32 => "sint32",
            ProtoKind::Sint64 => "sint64",
            ProtoKind::Message => "message",
        }
    }

    /// The wire type of one (unpacked) value.
    fn wire_type(self) -> u8 {
        match self {
            ProtoKind::Double | ProtoKind::Fixed64 | ProtoKind::Sfixed64 => WIRE_I64,
            ProtoKind::Float | ProtoKind::Fixed32 | ProtoKind::Sfixed32 => WIRE_I32,
            ProtoKind::String | ProtoKind::Bytes | ProtoKind::Message => WIRE_LEN,
            _ => WIRE_VARINT,
        }
    }

    fn is_integer(self) -> bool {
        matches!(
            self,
            ProtoKind::Int64
                | ProtoKind::Uint64
                | ProtoKind::Int32
                | ProtoKind::Fixed64
                | ProtoKind::Fixed32
                | ProtoKind::Uint32
                | ProtoKind::Sfixed32
                | ProtoKind::Sfixed64
                | ProtoKind::Sint32
                | ProtoKind::Sint64
        )
    }
}

/// Column types with the parameters the checks need.
#[derive(Debug, Clone, PartialEq)]
enum ColumnKind {
    Int64,
    Float64,
    Bool,
    String {
        max_length: Option<u64>,
    },
    Bytes {
        max_length: Option<u64>,
    },
    Numeric(NumericSpec),
    Date,
    Timestamp,
    DateTime,
    Time,
    Json,
    Geography,
    Record,
    /// RANGE, INTERVAL and types newer than this emulator: accepted, rendered as best we can.
    Other(String),
}

/// NUMERIC / BIGNUMERIC: the scale of the wire's unscaled bytes and the column's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
struct NumericSpec {
    big: bool,
    /// Scale of the little-endian unscaled integer encoding (9 or 38).
    wire_scale: u32,
    /// Column scale (declared, or the type's maximum).
    scale: u32,
    /// Most digits left of the decimal point.
    max_int_digits: u32,
}

impl ColumnKind {
    fn name(&self) -> String {
        match self {
            ColumnKind::Int64 => "INT64".into(),
            ColumnKind::Float64 => "FLOAT64".into(),
            ColumnKind::Bool => "BOOL".into(),
            ColumnKind::String { .. } => "STRING".into(),
            ColumnKind::Bytes { .. } => "BYTES".into(),
            ColumnKind::Numeric(n) if n.big => "BIGNUMERIC".into(),
            ColumnKind::Numeric(_) => "NUMERIC".into(),
            ColumnKind::Date => "DATE".into(),
            ColumnKind::Timestamp => "TIMESTAMP".into(),
            ColumnKind::DateTime => "DATETIME".into(),
            ColumnKind::Time => "TIME".into(),
            ColumnKind::Json => "JSON".into(),
            ColumnKind::Geography => "GEOGRAPHY".into(),
            ColumnKind::Record => "STRUCT".into(),
            ColumnKind::Other(name) => name.clone(),
        }
    }

    fn accepts(&self, proto: ProtoKind) -> bool {
        use ProtoKind as P;
        match self {
            ColumnKind::Int64 => proto.is_integer() || proto == P::Enum,
            ColumnKind::Float64 => matches!(proto, P::Double | P::Float),
            ColumnKind::Bool => proto == P::Bool || proto.is_integer(),
            ColumnKind::String { .. } => matches!(proto, P::String | P::Enum),
            ColumnKind::Bytes { .. } => matches!(proto, P::Bytes | P::String),
            ColumnKind::Numeric(_) => {
                proto.is_integer() || matches!(proto, P::Double | P::Float | P::String | P::Bytes)
            }
            ColumnKind::Date => matches!(
                proto,
                P::Int32 | P::Int64 | P::Sint32 | P::Sint64 | P::Sfixed32 | P::Sfixed64 | P::String
            ),
            ColumnKind::Timestamp => proto.is_integer(),
            ColumnKind::DateTime | ColumnKind::Time => {
                matches!(proto, P::String | P::Int64 | P::Sint64 | P::Sfixed64)
            }
            ColumnKind::Json | ColumnKind::Geography => proto == P::String,
            ColumnKind::Record => proto == P::Message,
            ColumnKind::Other(_) => true,
        }
    }
}

#[derive(Debug, Clone)]
struct MessagePlan {
    fields: Vec<FieldPlan>,
    /// Field number → index + 1 for small numbers (0 = not a field of this message).
    small_numbers: Vec<u32>,
    /// (number, index) for numbers beyond `small_numbers`, sorted.
    large_numbers: Vec<(u32, u32)>,
    /// Fields that must be present in every row, in slot order.
    required: Vec<u32>,
    /// Lower-case column name → field index, for rendering in the table's column order.
    by_column: HashMap<String, usize>,
}

const SMALL_NUMBERS: u32 = 1024;

#[derive(Debug, Clone)]
struct FieldPlan {
    /// Dotted column path, as row errors name it.
    path: String,
    proto: ProtoKind,
    repeated: bool,
    column: ColumnKind,
    /// Slot in the message's required bitmask when the row must set this field.
    required_slot: Option<u32>,
    /// Enum number → value name, for enum fields.
    enum_values: Vec<(i32, String)>,
    message: Option<Box<MessagePlan>>,
    /// The descriptor's proto2 `default_value`, written when the row leaves the field unset.
    default: Option<OwnedWire>,
    /// What a value of the declared wire type needs checked.
    check: ValueCheck,
}

/// The value check of a (proto kind, column) pair, decided at compile time so that the common
/// pairs skip [`check_value`]'s two matches per value (`benches/emulator_append.rs`, the order
/// rows: 8.1 → 4.6 ms per 8 MiB request, decode and store included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueCheck {
    /// Every value of the proto kind is valid for the column.
    Nothing,
    /// A STRING column without a maximum length: valid UTF-8 only.
    Utf8,
    /// Anything else: [`check_value`].
    Full,
}

impl ValueCheck {
    fn of(proto: ProtoKind, column: &ColumnKind) -> ValueCheck {
        use ProtoKind as P;
        match column {
            ColumnKind::Float64 | ColumnKind::Bool | ColumnKind::Record => ValueCheck::Nothing,
            ColumnKind::Bytes { max_length: None } => ValueCheck::Nothing,
            // Values that cannot exceed i64::MAX (unsigned 64-bit kinds and enums can).
            ColumnKind::Int64 => match proto {
                P::Int64 | P::Int32 | P::Sint64 | P::Sint32 | P::Sfixed64 | P::Sfixed32 => {
                    ValueCheck::Nothing
                }
                P::Uint32 | P::Fixed32 | P::Bool | P::Double | P::Float => ValueCheck::Nothing,
                _ => ValueCheck::Full,
            },
            ColumnKind::String { max_length: None } if matches!(proto, P::String | P::Bytes) => {
                ValueCheck::Utf8
            }
            _ => ValueCheck::Full,
        }
    }
}

impl FieldPlan {
    fn enum_name(&self, number: i32) -> Option<&str> {
        self.enum_values
            .iter()
            .find(|(n, _)| *n == number)
            .map(|(_, name)| name.as_str())
    }
}

impl MessagePlan {
    #[inline]
    fn field_index(&self, number: u32) -> Option<usize> {
        if number < SMALL_NUMBERS {
            match self.small_numbers.get(number as usize) {
                Some(&i) if i > 0 => Some(i as usize - 1),
                _ => None,
            }
        } else {
            let pos = self
                .large_numbers
                .binary_search_by_key(&number, |&(n, _)| n)
                .ok()?;
            Some(self.large_numbers[pos].1 as usize)
        }
    }

    #[inline]
    fn field(&self, number: u32) -> Option<&FieldPlan> {
        self.field_index(number).map(|i| &self.fields[i])
    }
}

// ---------------------------------------------------------------------------------------------
// Compilation
// ---------------------------------------------------------------------------------------------

enum Named<'d> {
    Message(&'d DescriptorProto),
    Enum(&'d EnumDescriptorProto),
}

struct Compiler<'d> {
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
        let root = compiler.message(descriptor, root_name, &table.fields, "", "")?;
        if !compiler.extras.is_empty() {
            return Err(SchemaError::ExtraFields {
                fields: compiler.extras,
            });
        }
        Ok(RowCodec {
            descriptor: descriptor.clone(),
            root,
            pseudo: compiler.pseudo,
        })
    }

    pub fn descriptor(&self) -> &DescriptorProto {
        &self.descriptor
    }
}

fn column_kind(column: &TableFieldSchema) -> ColumnKind {
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

fn proto_kind(t: Type) -> Option<ProtoKind> {
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

    fn message(
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
        };
        let mut seen_numbers: HashMap<u32, &str> = HashMap::new();
        for field in &message.field {
            let where_ = format!("{full_name}.{}", field.name());
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
            if let Some(other) = seen_numbers.insert(number, field.name()) {
                return Err(SchemaError::InvalidDescriptor(format!(
                    "{where_}: Field number {number} has already been used in \"{full_name}\" by field \"{other}\"."
                )));
            }
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
            let column_path = format!("{column_prefix}{}", column.name);
            let Some(proto) = proto else {
                return Err(SchemaError::TypeMismatch {
                    path: where_,
                    proto_type: "group".into(),
                    column_type: kind.name(),
                });
            };
            if !kind.accepts(proto) {
                return Err(SchemaError::TypeMismatch {
                    path: where_,
                    proto_type: proto.name().into(),
                    column_type: kind.name(),
                });
            }
            let repeated = field.label() == Label::Repeated;
            let column_repeated = column.mode() == Mode::Repeated;
            if repeated != column_repeated {
                return Err(SchemaError::ModeMismatch {
                    path: where_,
                    proto_label: if repeated { "repeated" } else { "optional" },
                    column_mode: match column.mode() {
                        Mode::Nullable => "NULLABLE",
                        Mode::Required => "REQUIRED",
                        Mode::Repeated => "REPEATED",
                    },
                });
            }
            let mut enum_values = Vec::new();
            let mut nested = None;
            match named {
                Some((name, Named::Enum(e))) => {
                    if e.value.is_empty() {
                        return Err(SchemaError::InvalidDescriptor(format!(
                            "{name}: Enums must contain at least one value."
                        )));
                    }
                    enum_values = e
                        .value
                        .iter()
                        .map(|v| (v.number(), v.name().to_string()))
                        .collect();
                }
                Some((name, Named::Message(m))) => {
                    let m: &'d DescriptorProto = m;
                    if kind == ColumnKind::Record {
                        nested = Some(Box::new(self.message(
                            m,
                            &name,
                            &column.fields,
                            &format!("{column_path}."),
                            &format!("{extra_prefix}{lower}."),
                        )?));
                    }
                }
                None => {}
            }
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
            let must_be_set = !repeated
                && default.is_none()
                && (column.mode() == Mode::Required || field.label() == Label::Required);
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
            if number < SMALL_NUMBERS {
                if plan.small_numbers.len() <= number as usize {
                    plan.small_numbers.resize(number as usize + 1, 0);
                }
                plan.small_numbers[number as usize] = index as u32 + 1;
            } else {
                plan.large_numbers.push((number, index as u32));
            }
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
enum OwnedWire {
    Varint(u64),
    I64(u64),
    I32(u32),
    Len(Vec<u8>),
}

impl OwnedWire {
    fn as_wire(&self) -> Wire<'_> {
        match self {
            OwnedWire::Varint(v) => Wire::Varint(*v),
            OwnedWire::I64(v) => Wire::I64(*v),
            OwnedWire::I32(v) => Wire::I32(*v),
            OwnedWire::Len(v) => Wire::Len(v),
        }
    }
}

fn parse_default(proto: ProtoKind, text: &str, enum_values: &[(i32, String)]) -> Option<OwnedWire> {
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
fn unescape_c(text: &str) -> Option<Vec<u8>> {
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

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

/// What is wrong with one value; turned into text only on the error path.
#[derive(Debug)]
enum ValueError {
    Parse,
    MissingRequired,
    MaxLength {
        kind: &'static str,
        max: u64,
        got: u64,
    },
    InvalidUtf8,
    TimestampRange(i64),
    DateRange(i64),
    Int64Range(u64),
    BadEnum(i32),
    BadLiteral(&'static str),
    NumericRange,
    NotFinite,
    BadJson,
}

impl ValueError {
    fn message(&self, field: &FieldPlan) -> String {
        let path = &field.path;
        match self {
            ValueError::Parse => format!("{PARSE_ERROR} on field {path}."),
            ValueError::MissingRequired => format!("Missing required field: {path}."),
            ValueError::MaxLength { kind, max, got } => format!(
                "Field {path}: {kind}({max}) has maximum length {max} but got a value with length {got} on field {path}."
            ),
            ValueError::InvalidUtf8 => format!("Invalid UTF-8 string on field {path}."),
            ValueError::TimestampRange(v) => {
                format!("Timestamp field value is out of range: {v} on field {path}.")
            }
            ValueError::DateRange(v) => {
                format!("Date field value is out of range: {v} on field {path}.")
            }
            ValueError::Int64Range(v) => {
                format!("Integer value is out of range for INT64: {v} on field {path}.")
            }
            ValueError::BadEnum(v) => format!("Invalid enum value: {v} on field {path}."),
            ValueError::BadLiteral(kind) => format!("Invalid {kind} value on field {path}."),
            ValueError::NumericRange => format!(
                "Invalid {} value: out of range on field {path}.",
                field.column.name()
            ),
            ValueError::NotFinite => format!(
                "Invalid {} value: NaN and infinity are not allowed on field {path}.",
                field.column.name()
            ),
            ValueError::BadJson => format!("Invalid JSON value on field {path}."),
        }
    }
}

/// Bitmask of required fields seen in one message instance; heap only for very wide messages.
enum SeenRequired {
    Small(u128),
    Wide(Vec<bool>),
}

impl SeenRequired {
    fn new(count: usize) -> Self {
        if count <= 128 {
            SeenRequired::Small(0)
        } else {
            SeenRequired::Wide(vec![false; count])
        }
    }

    #[inline]
    fn set(&mut self, slot: u32) {
        match self {
            SeenRequired::Small(bits) => *bits |= 1u128 << slot,
            SeenRequired::Wide(v) => v[slot as usize] = true,
        }
    }

    fn first_missing(&self, count: usize) -> Option<usize> {
        match self {
            SeenRequired::Small(bits) => {
                let all = if count == 128 {
                    u128::MAX
                } else {
                    (1u128 << count) - 1
                };
                let missing = all & !bits;
                (missing != 0).then(|| missing.trailing_zeros() as usize)
            }
            SeenRequired::Wide(v) => v.iter().position(|seen| !seen),
        }
    }
}

const MAX_DEPTH: u32 = 32;

impl RowCodec {
    /// Checks one serialized row; `Err` is the FIELDS_ERROR message of that row.
    pub fn validate(&self, row: &[u8]) -> Result<(), String> {
        self.validate_with(row, true)
    }

    /// [`RowCodec::validate`], optionally without the check that required top-level fields are
    /// set (a CDC DELETE row needs only its key columns).
    fn validate_with(&self, row: &[u8], root_required: bool) -> Result<(), String> {
        validate_message(&self.root, row, 0, root_required).map_err(|(field, error)| match field {
            Some(field) => error.message(field),
            None => format!("{PARSE_ERROR}."),
        })
    }
}

impl RowCodec {
    /// Field numbers of the named top-level columns (matched case-insensitively, as fields match
    /// columns); names the writer schema does not have select nothing.
    pub fn column_numbers(&self, names: &[String]) -> Vec<u32> {
        let numbered = self
            .root
            .small_numbers
            .iter()
            .enumerate()
            .filter(|&(_, &i)| i > 0)
            .map(|(number, &i)| (number as u32, i as usize - 1))
            .chain(
                self.root
                    .large_numbers
                    .iter()
                    .map(|&(number, i)| (number, i as usize)),
            );
        numbered
            .filter(|&(_, i)| {
                let path = &self.root.fields[i].path;
                names.iter().any(|name| name.eq_ignore_ascii_case(path))
            })
            .map(|(number, _)| number)
            .collect()
    }

    /// Appends to `out` the wire bytes of the row's top-level fields numbered in `keep`, in row
    /// order: a row of the same descriptor with every other field unset. For rows that passed
    /// [`RowCodec::validate`]; a row that does not parse contributes what precedes the fault.
    pub fn project_into(row: &[u8], keep: &[u32], out: &mut Vec<u8>) {
        let mut reader = Reader::new(row);
        loop {
            let start = reader.pos;
            match reader.next() {
                Ok(Some((number, _))) if keep.contains(&number) => {
                    out.extend_from_slice(&row[start..reader.pos]);
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(()) => break,
            }
        }
    }
}

type Failure<'p> = (Option<&'p FieldPlan>, ValueError);

fn validate_message<'p>(
    plan: &'p MessagePlan,
    bytes: &[u8],
    depth: u32,
    required: bool,
) -> Result<(), Failure<'p>> {
    if depth > MAX_DEPTH {
        return Err((None, ValueError::Parse));
    }
    let mut seen = SeenRequired::new(plan.required.len());
    let mut reader = Reader::new(bytes);
    while let Some((number, wire)) = reader.next().map_err(|()| (None, ValueError::Parse))? {
        // Unknown field numbers are kept as unknown fields by proto2 parsers; BigQuery ignores them.
        let Some(field) = plan.field(number) else {
            continue;
        };
        let expected = field.proto.wire_type();
        let actual = wire_type_of(&wire);
        if actual == expected {
            if field.proto == ProtoKind::Message {
                if let (Some(nested), Wire::Len(b)) = (&field.message, wire) {
                    validate_message(nested, b, depth + 1, true)?;
                }
            } else {
                match (field.check, wire) {
                    (ValueCheck::Nothing, _) => {}
                    (ValueCheck::Utf8, Wire::Len(b)) => {
                        if !b.is_ascii() && std::str::from_utf8(b).is_err() {
                            return Err((Some(field), ValueError::InvalidUtf8));
                        }
                    }
                    _ => check_value(field, wire).map_err(|e| (Some(field), e))?,
                }
            }
        } else if field.repeated && actual == WIRE_LEN && expected != WIRE_LEN {
            let Wire::Len(packed) = wire else {
                unreachable!("wire type checked above")
            };
            // Packed runs are walked even when their values need no check: a truncated run is
            // still a parse error.
            let check = field.check != ValueCheck::Nothing;
            for_each_packed(field.proto, packed, |w| {
                if check { check_value(field, w) } else { Ok(()) }
            })
            .map_err(|e| (Some(field), e))?;
        } else {
            return Err((Some(field), ValueError::Parse));
        }
        if let Some(slot) = field.required_slot {
            seen.set(slot);
        }
    }
    if let Some(missing) = seen.first_missing(plan.required.len()).filter(|_| required) {
        let field = &plan.fields[plan.required[missing] as usize];
        return Err((Some(field), ValueError::MissingRequired));
    }
    Ok(())
}

#[inline]
fn for_each_packed<'a, E>(
    proto: ProtoKind,
    packed: &'a [u8],
    mut f: impl FnMut(Wire<'a>) -> Result<(), E>,
) -> Result<(), E>
where
    E: From<ValueError>,
{
    let mut reader = Reader::new(packed);
    while reader.pos < packed.len() {
        let wire = match proto.wire_type() {
            WIRE_VARINT => reader.varint().map(Wire::Varint),
            WIRE_I64 => reader
                .take(8)
                .map(|b| Wire::I64(u64::from_le_bytes(b.try_into().expect("8 bytes")))),
            _ => reader
                .take(4)
                .map(|b| Wire::I32(u32::from_le_bytes(b.try_into().expect("4 bytes")))),
        }
        .map_err(|()| E::from(ValueError::Parse))?;
        f(wire)?;
    }
    Ok(())
}

const MIN_TIMESTAMP_MICROS: i64 = -62_135_596_800_000_000;
const MAX_TIMESTAMP_MICROS: i64 = 253_402_300_799_999_999;
const MIN_DATE_DAYS: i64 = -719_162;
const MAX_DATE_DAYS: i64 = 2_932_896;

#[inline(always)]
fn check_value(field: &FieldPlan, wire: Wire<'_>) -> Result<(), ValueError> {
    let value = scalar(field.proto, wire);
    match &field.column {
        ColumnKind::Int64 => match value {
            Scalar::Unsigned(v) if v > i64::MAX as u64 => Err(ValueError::Int64Range(v)),
            Scalar::Enum(v) => check_enum(field, v),
            _ => Ok(()),
        },
        ColumnKind::Float64 | ColumnKind::Bool | ColumnKind::Record => Ok(()),
        ColumnKind::String { max_length } => match value {
            Scalar::Text(b) => {
                // Most strings are ASCII: a word-at-a-time scan instead of a full UTF-8 decode.
                let ascii = b.is_ascii();
                if !ascii && std::str::from_utf8(b).is_err() {
                    return Err(ValueError::InvalidUtf8);
                }
                if let Some(max) = *max_length {
                    // Byte length bounds the character count; count only when it could exceed.
                    if b.len() as u64 > max {
                        // Valid UTF-8: one character per byte that is not a continuation byte.
                        let chars = if ascii {
                            b.len() as u64
                        } else {
                            b.iter().filter(|&&c| (c as i8) >= -0x40).count() as u64
                        };
                        if chars > max {
                            return Err(ValueError::MaxLength {
                                kind: "STRING",
                                max,
                                got: chars,
                            });
                        }
                    }
                }
                Ok(())
            }
            Scalar::Enum(v) => check_enum(field, v),
            _ => Ok(()),
        },
        ColumnKind::Bytes { max_length } => match (value, max_length) {
            (Scalar::Text(b), Some(max)) if b.len() as u64 > *max => Err(ValueError::MaxLength {
                kind: "BYTES",
                max: *max,
                got: b.len() as u64,
            }),
            _ => Ok(()),
        },
        ColumnKind::Numeric(spec) => check_numeric(field.proto, spec, value),
        ColumnKind::Date => match value {
            Scalar::Signed(days) if !(MIN_DATE_DAYS..=MAX_DATE_DAYS).contains(&days) => {
                Err(ValueError::DateRange(days))
            }
            Scalar::Text(b) => parse_date(b)
                .map(|_| ())
                .ok_or(ValueError::BadLiteral("DATE")),
            _ => Ok(()),
        },
        ColumnKind::Timestamp => {
            let micros = match value {
                Scalar::Signed(v) => v,
                Scalar::Unsigned(v) => i64::try_from(v).unwrap_or(i64::MAX),
                _ => return Ok(()),
            };
            if (MIN_TIMESTAMP_MICROS..=MAX_TIMESTAMP_MICROS).contains(&micros) {
                Ok(())
            } else {
                Err(ValueError::TimestampRange(match value {
                    Scalar::Unsigned(v) if v > i64::MAX as u64 => i64::MAX,
                    _ => micros,
                }))
            }
        }
        ColumnKind::DateTime => match value {
            Scalar::Signed(packed) => decode_packed_datetime(packed)
                .map(|_| ())
                .ok_or(ValueError::BadLiteral("DATETIME")),
            Scalar::Text(b) => parse_datetime(b)
                .map(|_| ())
                .ok_or(ValueError::BadLiteral("DATETIME")),
            _ => Ok(()),
        },
        ColumnKind::Time => match value {
            Scalar::Signed(packed) => decode_packed_time(packed)
                .map(|_| ())
                .ok_or(ValueError::BadLiteral("TIME")),
            Scalar::Text(b) => parse_time(b)
                .map(|_| ())
                .ok_or(ValueError::BadLiteral("TIME")),
            _ => Ok(()),
        },
        ColumnKind::Json => match value {
            Scalar::Text(b) => serde_json::from_slice::<serde::de::IgnoredAny>(b)
                .map(|_| ())
                .map_err(|_| ValueError::BadJson),
            _ => Ok(()),
        },
        ColumnKind::Geography | ColumnKind::Other(_) => match value {
            Scalar::Text(b) if field.proto == ProtoKind::String => std::str::from_utf8(b)
                .map(|_| ())
                .map_err(|_| ValueError::InvalidUtf8),
            _ => Ok(()),
        },
    }
}

fn check_enum(field: &FieldPlan, number: i32) -> Result<(), ValueError> {
    match field.enum_name(number) {
        Some(_) => Ok(()),
        None => Err(ValueError::BadEnum(number)),
    }
}

fn check_numeric(
    proto: ProtoKind,
    spec: &NumericSpec,
    value: Scalar<'_>,
) -> Result<(), ValueError> {
    let int_digits = match value {
        Scalar::Signed(v) => decimal_len(v.unsigned_abs()),
        Scalar::Unsigned(v) => decimal_len(v),
        Scalar::Float(f) => {
            if !f.is_finite() {
                return Err(ValueError::NotFinite);
            }
            let whole = f.abs().trunc();
            if whole < 1.0 {
                0
            } else {
                // 1e38 and beyond have more digits than any NUMERIC allows except BIGNUMERIC.
                whole.log10().floor() as u32 + 1
            }
        }
        Scalar::Text(b) if proto == ProtoKind::Bytes => return check_unscaled_bytes(spec, b),
        Scalar::Text(b) => match decimal_shape(b) {
            Some(shape) => shape.int_digits,
            None => {
                return Err(ValueError::BadLiteral(if spec.big {
                    "BIGNUMERIC"
                } else {
                    "NUMERIC"
                }));
            }
        },
        Scalar::Bool(_) | Scalar::Enum(_) => 0,
    };
    if int_digits > spec.max_int_digits {
        Err(ValueError::NumericRange)
    } else {
        Ok(())
    }
}

/// 10^n for every digit count a 16-byte NUMERIC can have (`pow` per value showed in profiles).
const POW10: [u128; 39] = {
    let mut t = [1u128; 39];
    let mut i = 1;
    while i < t.len() {
        t[i] = t[i - 1] * 10;
        i += 1;
    }
    t
};

fn check_unscaled_bytes(spec: &NumericSpec, b: &[u8]) -> Result<(), ValueError> {
    let max_len = if spec.big { 32 } else { 16 };
    if b.is_empty() || b.len() > max_len {
        return Err(ValueError::NumericRange);
    }
    let total_digits = spec.max_int_digits + spec.wire_scale;
    if b.len() <= 16 && total_digits <= 38 {
        // The common case (NUMERIC, 16 bytes or fewer): compare the integer with 10^digits
        // instead of writing out its decimal digits.
        let negative = b[b.len() - 1] & 0x80 != 0;
        let mut le = [if negative { 0xff } else { 0 }; 16];
        le[..b.len()].copy_from_slice(b);
        let unscaled = i128::from_le_bytes(le);
        return if unscaled.unsigned_abs() < POW10[total_digits as usize] {
            Ok(())
        } else {
            Err(ValueError::NumericRange)
        };
    }
    let digits = UnscaledDecimal::from_le_twos_complement(b);
    let int_digits = digits.len().saturating_sub(spec.wire_scale as usize) as u32;
    if int_digits > spec.max_int_digits {
        Err(ValueError::NumericRange)
    } else {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

/// Output knobs of `tabledata.list` that change how cells are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// `formatOptions.useInt64Timestamp`: TIMESTAMP as integer microseconds (what Google's
    /// Python client asks for) instead of floating-point seconds.
    pub int64_timestamp: bool,
}

impl RowCodec {
    /// One `tabledata.list` row (`{"f":[{"v":…},…]}`) in the table's current column order, with
    /// the REST API's default formatting. A row that does not decode renders what it can;
    /// `validate` keeps such rows out of a table.
    pub fn render(&self, row: &[u8], table: &TableSchema) -> Value {
        self.render_with(row, table, RenderOptions::default())
    }

    /// [`RowCodec::render`] with explicit `formatOptions`.
    pub fn render_with(&self, row: &[u8], table: &TableSchema, options: RenderOptions) -> Value {
        render_message(Some(&self.root), &[row], &table.fields, options, 0)
    }
}

fn null_cell() -> Value {
    json!({ "v": Value::Null })
}

/// Renders a message from its occurrences (proto merges repeated occurrences of a singular
/// message field, which is the same as decoding them one after another).
fn render_message(
    plan: Option<&MessagePlan>,
    parts: &[&[u8]],
    columns: &[TableFieldSchema],
    options: RenderOptions,
    depth: u32,
) -> Value {
    let Some(plan) = plan.filter(|_| depth <= MAX_DEPTH) else {
        return json!({ "f": columns.iter().map(|_| null_cell()).collect::<Vec<_>>() });
    };
    let mut values: Vec<Vec<Wire<'_>>> = vec![Vec::new(); plan.fields.len()];
    for part in parts {
        let mut reader = Reader::new(part);
        while let Ok(Some((number, wire))) = reader.next() {
            let Some(index) = plan.field_index(number) else {
                continue;
            };
            let field = &plan.fields[index];
            let expected = field.proto.wire_type();
            let actual = wire_type_of(&wire);
            if actual == expected {
                values[index].push(wire);
            } else if actual == WIRE_LEN
                && let Wire::Len(packed) = wire
            {
                let _ = for_each_packed::<ValueError>(field.proto, packed, |w| {
                    values[index].push(w);
                    Ok(())
                });
            }
        }
    }
    let cells: Vec<Value> = columns
        .iter()
        .map(|column| {
            let Some(&index) = plan.by_column.get(&column.name.to_lowercase()) else {
                return if column.mode() == Mode::Repeated {
                    json!({ "v": [] })
                } else {
                    null_cell()
                };
            };
            let field = &plan.fields[index];
            let occurrences = &values[index];
            if field.proto == ProtoKind::Message && field.message.is_none() {
                // A message in a column of a type this emulator does not model (RANGE).
                return null_cell();
            }
            if field.repeated {
                let items: Vec<Value> = if field.proto == ProtoKind::Message {
                    occurrences
                        .iter()
                        .map(|w| match w {
                            Wire::Len(b) => json!({
                                "v": render_message(field.message.as_deref(), &[b], &column.fields, options, depth + 1)
                            }),
                            _ => null_cell(),
                        })
                        .collect()
                } else {
                    occurrences
                        .iter()
                        .map(|w| json!({ "v": render_scalar(field, *w, options) }))
                        .collect()
                };
                return json!({ "v": items });
            }
            if field.proto == ProtoKind::Message {
                if occurrences.is_empty() {
                    return null_cell();
                }
                let parts: Vec<&[u8]> = occurrences
                    .iter()
                    .filter_map(|w| match w {
                        Wire::Len(b) => Some(*b),
                        _ => None,
                    })
                    .collect();
                return json!({
                    "v": render_message(field.message.as_deref(), &parts, &column.fields, options, depth + 1)
                });
            }
            match occurrences.last() {
                Some(w) => json!({ "v": render_scalar(field, *w, options) }),
                None => match &field.default {
                    Some(default) => json!({ "v": render_scalar(field, default.as_wire(), options) }),
                    None => null_cell(),
                },
            }
        })
        .collect();
    json!({ "f": cells })
}

fn render_scalar(field: &FieldPlan, wire: Wire<'_>, options: RenderOptions) -> Value {
    let value = scalar(field.proto, wire);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let s: Option<String> = match &field.column {
        ColumnKind::Int64 => match value {
            Scalar::Signed(v) => Some(v.to_string()),
            Scalar::Unsigned(v) => Some(v.to_string()),
            Scalar::Enum(v) => Some(v.to_string()),
            Scalar::Bool(b) => Some(u8::from(b).to_string()),
            _ => None,
        },
        ColumnKind::Float64 => match value {
            Scalar::Float(f) => Some(format_float(f)),
            _ => None,
        },
        ColumnKind::Bool => Some(
            match value {
                Scalar::Bool(b) => b,
                Scalar::Signed(v) => v != 0,
                Scalar::Unsigned(v) => v != 0,
                _ => false,
            }
            .to_string(),
        ),
        ColumnKind::String { .. } => match value {
            Scalar::Text(b) => Some(text(b)),
            Scalar::Enum(v) => field.enum_name(v).map(str::to_string),
            _ => None,
        },
        ColumnKind::Bytes { .. } => match value {
            Scalar::Text(b) => Some(base64::engine::general_purpose::STANDARD.encode(b)),
            _ => None,
        },
        ColumnKind::Numeric(spec) => render_numeric(field.proto, spec, value),
        ColumnKind::Date => match value {
            Scalar::Signed(days) => {
                let (year, month, day) = civil_from_days(days);
                Some(format_date(Date { year, month, day }))
            }
            Scalar::Text(b) => parse_date(b).map(format_date),
            _ => None,
        },
        ColumnKind::Timestamp => {
            let micros = match value {
                Scalar::Signed(v) => Some(v),
                Scalar::Unsigned(v) => i64::try_from(v).ok(),
                _ => None,
            };
            micros.map(|v| {
                if options.int64_timestamp {
                    v.to_string()
                } else {
                    timestamp_seconds_text(v)
                }
            })
        }
        ColumnKind::DateTime => match value {
            Scalar::Signed(p) => decode_packed_datetime(p).map(format_datetime),
            Scalar::Text(b) => parse_datetime(b).map(format_datetime),
            _ => None,
        },
        ColumnKind::Time => match value {
            Scalar::Signed(p) => decode_packed_time(p).map(format_time),
            Scalar::Text(b) => parse_time(b).map(format_time),
            _ => None,
        },
        // BigQuery stores JSON parsed and returns it re-serialised without insignificant spaces.
        ColumnKind::Json => match value {
            Scalar::Text(b) => serde_json::from_slice::<Value>(b)
                .map(|v| v.to_string())
                .ok()
                .or_else(|| Some(text(b))),
            _ => None,
        },
        ColumnKind::Geography => match value {
            Scalar::Text(b) => Some(text(b)),
            _ => None,
        },
        ColumnKind::Record => None,
        ColumnKind::Other(_) => match value {
            Scalar::Text(b) if field.proto == ProtoKind::String => Some(text(b)),
            Scalar::Signed(v) => Some(v.to_string()),
            Scalar::Unsigned(v) => Some(v.to_string()),
            _ => None,
        },
    };
    s.map_or(Value::Null, Value::String)
}

fn format_datetime((date, time): (Date, Time)) -> String {
    format!("{}T{}", format_date(date), format_time(time))
}

/// FLOAT64 as the REST API writes it: the shortest round-trip text, with the special values
/// spelled as Python's `float()` and Java's `Double.parseDouble` accept them.
fn format_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{f:?}")
    }
}

fn render_numeric(proto: ProtoKind, spec: &NumericSpec, value: Scalar<'_>) -> Option<String> {
    let max_scale = spec.scale as usize;
    match value {
        Scalar::Signed(v) => Some(v.to_string()),
        Scalar::Unsigned(v) => Some(v.to_string()),
        Scalar::Bool(b) => Some(u8::from(b).to_string()),
        Scalar::Enum(v) => Some(v.to_string()),
        Scalar::Float(f) => format_decimal_text(&format!("{f:e}"), max_scale),
        Scalar::Text(b) if proto == ProtoKind::Bytes => {
            let d = UnscaledDecimal::from_le_twos_complement(b);
            Some(format_scaled(
                d.negative,
                d.digits(),
                spec.wire_scale as usize,
                max_scale,
            ))
        }
        Scalar::Text(b) => format_decimal_text(std::str::from_utf8(b).ok()?, max_scale),
    }
}

#[cfg(test)]
mod tests;
