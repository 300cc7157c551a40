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

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::storage_error::StorageErrorCode;
use prost_types::DescriptorProto;

mod civil;
mod compile;
#[cfg(test)]
mod compile_tests;
mod decimal;
mod defaults;
mod pseudo;
mod render;
#[cfg(test)]
mod render_tests;
#[cfg(test)]
mod testkit;
mod validate;
#[cfg(test)]
mod validate_tests;
mod wire;

pub use civil::timestamp_seconds_text;
use compile::OwnedWire;
pub use defaults::{FillErrors, Interpretation, MissingValues};
pub use pseudo::PseudoColumns;
pub use render::{RenderOptions, format_float};
use wire::{Reader, WIRE_I32, WIRE_I64, WIRE_LEN, WIRE_VARINT};

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
    /// REQUIRED columns without a default that the writer schema omits (our wording: no text of
    /// BigQuery's is on record).
    #[error(
        "The proto schema has no field for the REQUIRED column(s) {}, which have no default value",
        quote_list(.columns)
    )]
    MissingRequired { columns: Vec<String> },
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
    /// The top-level columns with a default value expression.
    defaults: Vec<defaults::ColumnDefault>,
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
            // A string is a TIMESTAMP literal: BigQuery takes one (Java's
            // testStreamWriterWithDefaultValue writes "2022-02-02 01:02:03" from a string field),
            // although the documented type table lists none.
            ColumnKind::Timestamp => proto.is_integer() || proto == P::String,
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
    /// Lower-case column name → index of the field holding its default when a row got it (top
    /// level only; `defaults.rs`).
    fills: HashMap<String, usize>,
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

    /// The field number of field `index`.
    fn number_of(&self, index: usize) -> u32 {
        let small = self
            .small_numbers
            .iter()
            .position(|&i| i as usize == index + 1);
        match small {
            Some(number) => number as u32,
            None => self
                .large_numbers
                .iter()
                .find(|&&(_, i)| i as usize == index)
                .map(|&(n, _)| n)
                .unwrap_or(0),
        }
    }

    /// The largest field number in use.
    fn max_number(&self) -> u32 {
        let small = self.small_numbers.iter().rposition(|&i| i > 0).unwrap_or(0) as u32;
        let large = self
            .large_numbers
            .iter()
            .map(|&(n, _)| n)
            .max()
            .unwrap_or(0);
        small.max(large)
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
