//! The compiled form of a JSON plan: per object, its columns by key, each with the conversion
//! its column type (and the schema, when there is one) decided. Built by `compile`, run by
//! `exec`.

use std::collections::HashMap;
use std::sync::Arc;

use super::keys::KeyTable;
use crate::connect_types::TimeUnit;
use crate::convert::DecimalTarget;
use crate::proto::Tag;
use crate::transforms::ValueOp;

#[derive(Debug, Clone)]
pub struct ObjectOp {
    /// `None` for the row itself, which is not length-prefixed.
    pub tag: Option<Tag>,
    pub fields: Box<[FieldOp]>,
    /// The exact keys of `fields`, by their bytes.
    pub keys: KeyTable,
    /// Lower-cased key → index into `fields`, for keys not spelled as the column is.
    pub by_lower: HashMap<Box<str>, u16>,
    /// A key without a column is a per-record error (`unknown_fields: error`, schemaless).
    pub unknown_is_error: bool,
    /// Every key's JSON text is the key itself (`scan::plain_key`), so the executor may match
    /// the record's keys against them in place.
    pub plain_keys: bool,
    /// The indices of the `required` fields, in order.
    pub required: Box<[u16]>,
}

#[derive(Debug, Clone)]
pub struct FieldOp {
    /// The key as the column spells it (tried first, exactly).
    pub key: Box<str>,
    pub column: Arc<str>,
    pub tag: Tag,
    pub conv: Conv,
    pub repeated: bool,
    /// REQUIRED without a default value expression: absent or null is an error.
    pub required: bool,
}

/// The unit of an integer written into a time column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntUnit {
    /// Integers are refused (the unit would be a guess).
    None,
    Micros,
    /// Days since the epoch (DATE).
    Days,
}

#[derive(Debug, Clone)]
pub enum Conv {
    /// A column of a type the sink does not write (RANGE, ...): the key is skipped.
    Skip,
    /// INT64 ← an integer, or a string holding one (protojson writes 64-bit integers so).
    Int,
    /// FLOAT64 ← a number, or `"NaN"`, `"Infinity"`, `"-Infinity"`.
    Float,
    /// NUMERIC/BIGNUMERIC ← a number's exact text, or a decimal string.
    Decimal(DecimalTarget),
    /// NUMERIC/BIGNUMERIC ← Kafka Connect's Decimal: a number's exact text, or (its default
    /// `decimal.format: BASE64`) the base64 of the unscaled big-endian two's complement at
    /// `scale` (`connect.parameters.scale`).
    ConnectDecimal {
        target: DecimalTarget,
        scale: u32,
    },
    Bool,
    /// STRING, GEOGRAPHY ← a string.
    Str,
    /// BYTES ← a base64 string.
    Bytes,
    /// JSON ← any value, as its text.
    Json,
    /// TIMESTAMP ← an RFC 3339 string, or (schemaless) an integer of µs.
    Timestamp(IntUnit),
    /// DATE ← `YYYY-MM-DD`, or days.
    Date(IntUnit),
    /// TIME ← `HH:MM:SS[.f]` (integers come named: [`Named::Time`]).
    Time,
    /// DATETIME ← `YYYY-MM-DD[T ]HH:MM:SS[.f]`.
    DateTime,
    /// RECORD ← an object.
    Record(Box<ObjectOp>),
    /// A value transform of the route (`transforms/values.rs`) of a string.
    Value(Arc<ValueOp>),
    /// A value a Kafka Connect or Debezium name types (`crate::connect_types`), where the name,
    /// not the JSON shape, decides what is written (`named.rs`).
    Named(Named),
}

/// The conversions of named values that no shape-typed [`Conv`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// TIMESTAMP ← an integer since the epoch in the unit.
    Timestamp(TimeUnit),
    /// DATETIME ← an integer since the epoch in the unit: the wall clock counted as UTC.
    DateTime(TimeUnit),
    /// TIME ← an integer since midnight in the unit.
    Time(TimeUnit),
    /// TIMESTAMP ← an ISO-8601 date-time with its offset, digits below the µs zero.
    ZonedTimestamp,
    /// DATETIME ← an ISO-8601 date-time with `Z` (Debezium's `IsoTimestamp`), the wall clock.
    UtcDateTime,
    /// TIME ← an ISO-8601 time with `Z`, digits below the µs zero.
    UtcTime,
    /// DATE ← `YYYY-MM-DD`, with `Z` or not (Debezium's `IsoDate`).
    UtcDate,
    /// STRING ← Connect's Decimal (base64 or a number) at `scale`, as decimal text.
    DecimalText { scale: u32 },
    /// NUMERIC/BIGNUMERIC (or STRING when `None`) ← Debezium's `VariableScaleDecimal` struct.
    VariableScaleDecimal(Option<DecimalTarget>),
    /// JSON ← a string holding a JSON document (Debezium's `Json`): the document itself.
    JsonDocument,
    /// BYTES ← the `wkb` member of Debezium's geometry structs.
    Wkb,
}
