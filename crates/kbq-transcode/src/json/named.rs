//! Which column a value Kafka Connect or Debezium names (`crate::connect_types`) may go into,
//! and how: decided by the name, never by the JSON shape. A name into a column it does not fit
//! refuses the plan naming the column and the columns it fits. The table is docs/mapping.md's
//! "Kafka Connect and Debezium types"; the values are written by `named_exec.rs`.

use prost_types::field_descriptor_proto::Type;

use super::ops::{Conv, IntUnit, Named};
use super::schema::{Kind, Shape};
use crate::PlanError;
use crate::connect_types::{ConnectType, Physical, Temporal};
use crate::convert::DecimalTarget;
use kbq_core::table_schema::{FieldType, TableFieldSchema};

/// The named type of a schema node (its `title`, with `connect.parameters`), if it names one.
pub(super) fn named_type(shape: &Shape<'_>) -> Result<Option<ConnectType>, String> {
    let Some(title) = shape.title else {
        return Ok(None);
    };
    let params = shape.connect_parameters;
    ConnectType::from_name(title, |key| params?.get(key)?.as_str())
}

/// [`named_type`] for a plan: a malformed name refuses it, naming the column.
pub(super) fn connect_type(
    shape: &Shape<'_>,
    path: &str,
) -> Result<Option<ConnectType>, PlanError> {
    named_type(shape).map_err(|reason| PlanError::Unsupported {
        column: path.to_owned(),
        reason,
    })
}

/// The conversion of a value of type `t` into `column`; `Ok(None)` when the name changes
/// nothing for this column (a struct into a RECORD column: read field by field).
pub(super) fn conversion(
    t: ConnectType,
    shape: &Shape<'_>,
    column: &TableFieldSchema,
    path: &str,
) -> Result<Option<(Conv, Type)>, PlanError> {
    use ConnectType as C;
    use FieldType as F;
    check_physical(t, shape, path)?;
    let target = match column.field_type {
        F::BigNumeric => DecimalTarget::BigNumeric,
        _ => DecimalTarget::Numeric,
    };
    let temporal = t.temporal();
    let named = |n: Named, ty: Type| Ok(Some((Conv::Named(n), ty)));
    match (t, &column.field_type, temporal) {
        (C::Decimal { scale, .. }, F::Numeric | F::BigNumeric, _) => {
            Ok(Some((Conv::ConnectDecimal { target, scale }, Type::Bytes)))
        }
        (C::Decimal { scale, .. }, F::String, _) => {
            named(Named::DecimalText { scale }, Type::String)
        }
        (C::VariableScaleDecimal, F::Numeric | F::BigNumeric, _) => {
            named(Named::VariableScaleDecimal(Some(target)), Type::Bytes)
        }
        (C::VariableScaleDecimal, F::String, _) => {
            named(Named::VariableScaleDecimal(None), Type::String)
        }
        (_, F::Int64, _) if matches!(t.physical(), Physical::Int32 | Physical::Int64) => {
            Ok(Some((Conv::Int, Type::Int64)))
        }
        (_, F::Date, Some(Temporal::Days)) => Ok(Some((Conv::Date(IntUnit::Days), Type::Int32))),
        (_, F::Time, Some(Temporal::TimeOfDay(unit))) => named(Named::Time(unit), Type::Int64),
        (_, F::Timestamp, Some(Temporal::Instant(unit) | Temporal::LocalDateTime(unit))) => {
            named(Named::Timestamp(unit), Type::Int64)
        }
        (_, F::DateTime, Some(Temporal::Instant(unit) | Temporal::LocalDateTime(unit))) => {
            named(Named::DateTime(unit), Type::Int64)
        }
        (C::ZonedTimestamp | C::IsoTimestamp, F::Timestamp, _) => {
            named(Named::ZonedTimestamp, Type::Int64)
        }
        (C::IsoTimestamp, F::DateTime, _) => named(Named::UtcDateTime, Type::Int64),
        (C::IsoTime | C::ZonedTime, F::Time, _) => named(Named::UtcTime, Type::Int64),
        (C::IsoDate, F::Date, _) => named(Named::UtcDate, Type::Int32),
        (C::Json, F::Json, _) => named(Named::JsonDocument, Type::String),
        (_, F::String, _) if t.physical() == Physical::String => {
            Ok(Some((Conv::Str, Type::String)))
        }
        (C::Bits, F::Bytes, _) => Ok(Some((Conv::Bytes, Type::Bytes))),
        (C::Geometry | C::Geography | C::Point, F::Bytes, _) => named(Named::Wkb, Type::Bytes),
        (C::VariableScaleDecimal | C::Geometry | C::Geography | C::Point, F::Record, _) => Ok(None),
        _ => Err(PlanError::Unsupported {
            column: path.to_owned(),
            reason: format!(
                "{} cannot be written to a {} column; it fits {}",
                t.name(),
                column.field_type.as_str(),
                fits(t)
            ),
        }),
    }
}

/// The column types a named type fits, for the refusal.
pub(super) fn fits(t: ConnectType) -> &'static str {
    use ConnectType as C;
    match (t, t.temporal()) {
        (C::Decimal { .. }, _) => "NUMERIC, BIGNUMERIC or STRING",
        (C::VariableScaleDecimal, _) => "NUMERIC, BIGNUMERIC, STRING or RECORD",
        (_, Some(Temporal::Days)) => "DATE or INT64",
        (_, Some(Temporal::TimeOfDay(_))) => "TIME or INT64",
        (_, Some(_)) => "TIMESTAMP, DATETIME or INT64",
        (C::ZonedTimestamp, _) => "TIMESTAMP or STRING",
        (C::IsoTimestamp, _) => "TIMESTAMP, DATETIME or STRING",
        (C::IsoTime | C::ZonedTime, _) => "TIME or STRING",
        (C::IsoDate, _) => "DATE or STRING",
        (C::Year | C::MicroDuration, _) => "INT64",
        (C::Json, _) => "JSON or STRING",
        (C::Bits, _) => "BYTES",
        (C::Geometry | C::Geography | C::Point, _) => {
            "BYTES (the WKB) or RECORD (GEOGRAPHY would need the WKB converted, which the sink does not do)"
        }
        _ => "STRING",
    }
}

/// The schema's type is the one the name rides on (a Decimal under `decimal.format: NUMERIC` is
/// a number on a `bytes` schema).
fn check_physical(t: ConnectType, shape: &Shape<'_>, path: &str) -> Result<(), PlanError> {
    let Some(kind) = shape.kind else {
        return Ok(());
    };
    let ok = match t.physical() {
        Physical::Int32 | Physical::Int64 => kind == Kind::Integer,
        Physical::String => kind == Kind::String,
        Physical::Bytes => {
            kind == Kind::String
                || (matches!(t, ConnectType::Decimal { .. })
                    && matches!(kind, Kind::Integer | Kind::Number))
        }
        Physical::Struct => kind == Kind::Object,
    };
    if ok {
        return Ok(());
    }
    Err(PlanError::Unsupported {
        column: path.to_owned(),
        reason: format!(
            "the schema names {} on a json {}, which is not the type it is sent as",
            t.name(),
            kind.name()
        ),
    })
}
