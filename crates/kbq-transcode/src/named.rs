//! Avro values that Kafka Connect's `AvroData` names with `connect.name` (Connect's and
//! Debezium's logical types, [`ConnectType`]): which column types each can fill, and the
//! conversions the plain Avro types do not already have. The name says what the value means (its
//! unit, its zone, its encoding), so it decides the conversion, never the value's shape; a column
//! the named type cannot fill refuses the plan. The table is docs/mapping.md's "Kafka Connect and
//! Debezium types in Avro".

use std::sync::Arc;

use prost_types::field_descriptor_proto::Type;

use super::connect_types::{ConnectType, Physical, TimeUnit};
use super::convert::{DecimalTarget, Wide, datetime_packed, time_packed, timestamp_micros};
use super::error::{PlanError, RecordError};
use super::exec::{put_decimal, put_i64, value_error};
use super::json::text;
use super::ops::Conv;
use super::proto::{Tag, WIRE_LEN, WIRE_VARINT, put_len_delimited};
use super::reader::AvroReader;
use super::schema::{AvroSchema, Kind, Logical, NodeId, kind_name};
use kbq_core::table_schema::{FieldType, TableFieldSchema};

/// A conversion only a named type needs.
#[derive(Debug, Clone)]
pub enum NamedConv {
    /// `io.debezium.time.NanoTime`: ns since midnight into TIME.
    TimeNanos,
    /// `io.debezium.time.NanoTimestamp`: ns since the epoch into TIMESTAMP.
    TimestampNanos,
    /// `io.debezium.time.NanoTimestamp`: ns since the epoch into DATETIME.
    DateTimeNanos,
    /// `io.debezium.time.ZonedTimestamp` or `IsoTimestamp`: ISO-8601 text with its offset into
    /// TIMESTAMP.
    ZonedTimestamp,
    /// `io.debezium.time.IsoTimestamp` into DATETIME: the wall clock, written at UTC.
    UtcDateTime,
    /// `io.debezium.time.ZonedTime` or `IsoTime`: ISO-8601 time text into TIME, its offset
    /// zero.
    ZonedTime,
    /// `io.debezium.time.IsoDate`: `YYYY-MM-DDZ` into DATE.
    IsoDate,
    /// Connect's Decimal into STRING: the decimal text at its scale. The fixed size is a `u32`
    /// (the schema parser bounds it so) to keep every op as small as before this variant.
    DecimalText { fixed: Option<u32>, scale: u32 },
    /// `io.debezium.data.VariableScaleDecimal` (`{scale: int, value: bytes}`) into
    /// NUMERIC/BIGNUMERIC.
    VariableScale(DecimalTarget),
    /// The same into STRING: the decimal text at the record's scale.
    VariableScaleText,
}

impl NamedConv {
    pub(super) fn proto(&self) -> (u32, Type) {
        match self {
            NamedConv::TimeNanos
            | NamedConv::TimestampNanos
            | NamedConv::DateTimeNanos
            | NamedConv::ZonedTimestamp
            | NamedConv::UtcDateTime
            | NamedConv::ZonedTime => (WIRE_VARINT, Type::Int64),
            NamedConv::IsoDate => (WIRE_VARINT, Type::Int32),
            NamedConv::DecimalText { .. } | NamedConv::VariableScaleText => {
                (WIRE_LEN, Type::String)
            }
            NamedConv::VariableScale(_) => (WIRE_LEN, Type::Bytes),
        }
    }
}

/// How a named value is written.
#[derive(Debug)]
pub(super) enum Named {
    /// As one scalar.
    Conv(Conv),
    /// As one field of its record, the others read and skipped: a geometry's `wkb` into BYTES.
    Field(usize),
}

/// The conversion of the named value `id` into `column`. `Ok(None)`: the node names no type, or
/// a struct going into a RECORD column as it stands, read as any unnamed value. A column the
/// type cannot fill, a name on an Avro type it cannot ride on, or a name with parameters it
/// cannot use refuses the plan, naming the column.
pub(super) fn conv(
    schema: &AvroSchema,
    id: NodeId,
    column: &TableFieldSchema,
    path: &str,
) -> Result<Option<Named>, PlanError> {
    let node = schema.node(id);
    let named = match &node.connect {
        None => return Ok(None),
        Some(Ok(named)) => *named,
        Some(Err(reason)) => {
            return Err(PlanError::Unsupported {
                column: path.to_owned(),
                reason: reason.clone(),
            });
        }
    };
    let unsupported = |reason: String| PlanError::Unsupported {
        column: path.to_owned(),
        reason,
    };
    let rides = matches!(
        (named.physical(), &node.kind),
        (Physical::Int32, Kind::Int)
            | (Physical::Int64, Kind::Long)
            | (Physical::String, Kind::String)
            | (Physical::Bytes, Kind::Bytes | Kind::Fixed { .. })
            | (Physical::Struct, Kind::Record(_))
    );
    if !rides {
        return Err(unsupported(format!(
            "avro {} is named {}, which is not written as that avro type",
            kind_name(&node.kind),
            named.name()
        )));
    }
    let fixed = match node.kind {
        Kind::Fixed { size, .. } => Some(size),
        _ => None,
    };
    let target = match column.field_type {
        FieldType::Numeric => Some(DecimalTarget::Numeric),
        FieldType::BigNumeric => Some(DecimalTarget::BigNumeric),
        _ => None,
    };
    use ConnectType as C;
    use FieldType as F;
    use NamedConv as N;
    let conv = match (named, &column.field_type) {
        (C::VariableScaleDecimal | C::Geometry | C::Geography | C::Point, F::Record) => {
            return Ok(None);
        }
        // GEOGRAPHY takes WKT or GeoJSON; the WKB is not converted.
        (C::Geometry | C::Geography | C::Point, F::Bytes) => {
            return wkb_field(schema, id)
                .map(|i| Some(Named::Field(i)))
                .map_err(unsupported);
        }
        (C::Decimal { scale, .. }, F::Numeric | F::BigNumeric | F::String) => {
            if scale > MAX_DECIMAL_SCALE as u32 {
                return Err(unsupported(format!(
                    "decimal scale {scale} is beyond {MAX_DECIMAL_SCALE}"
                )));
            }
            // AvroData writes Avro's own decimal beside the name when the scale fits it; the two
            // must agree, or the value's meaning is not known.
            if let Logical::Decimal { scale: avro, .. } = node.logical
                && avro != scale
            {
                return Err(unsupported(format!(
                    "connect.parameters scale {scale} and the avro decimal's scale {avro} differ"
                )));
            }
            match target {
                Some(target) => Conv::Decimal {
                    fixed,
                    scale,
                    target,
                },
                None => Conv::Named(N::DecimalText {
                    fixed: fixed.map(|n| n as u32),
                    scale,
                }),
            }
        }
        (C::ConnectDate | C::Date, F::Date) => Conv::Date,
        (C::ConnectTime | C::Time, F::Time) => Conv::TimeMillis,
        (C::MicroTime, F::Time) => Conv::TimeMicros,
        (C::NanoTime, F::Time) => Conv::Named(N::TimeNanos),
        (C::ConnectTimestamp | C::Timestamp, F::Timestamp) => Conv::TimestampMillis,
        (C::ConnectTimestamp | C::Timestamp, F::DateTime) => Conv::DateTimeMillis,
        (C::MicroTimestamp, F::Timestamp) => Conv::TimestampMicros,
        (C::MicroTimestamp, F::DateTime) => Conv::DateTimeMicros,
        (C::NanoTimestamp, F::Timestamp) => Conv::Named(N::TimestampNanos),
        (C::NanoTimestamp, F::DateTime) => Conv::Named(N::DateTimeNanos),
        // Debezium's `isostring` mode writes its temporal values as text in UTC (`Z`).
        (C::ZonedTimestamp | C::IsoTimestamp, F::Timestamp) => Conv::Named(N::ZonedTimestamp),
        (C::IsoTimestamp, F::DateTime) => Conv::Named(N::UtcDateTime),
        (C::ZonedTime | C::IsoTime, F::Time) => Conv::Named(N::ZonedTime),
        (C::IsoDate, F::Date) => Conv::Named(N::IsoDate),
        // The integer itself, in the unit its name says (docs/mapping.md lists them).
        (
            C::ConnectDate
            | C::ConnectTime
            | C::Date
            | C::Time
            | C::Year
            | C::ConnectTimestamp
            | C::MicroTime
            | C::NanoTime
            | C::Timestamp
            | C::MicroTimestamp
            | C::NanoTimestamp
            | C::MicroDuration,
            F::Int64,
        ) => match named.physical() {
            Physical::Int32 => Conv::Int,
            _ => Conv::Long,
        },
        (C::VariableScaleDecimal, F::Numeric | F::BigNumeric | F::String) => {
            variable_scale_shape(schema, id).map_err(unsupported)?;
            match target {
                Some(target) => Conv::Named(N::VariableScale(target)),
                None => Conv::Named(N::VariableScaleText),
            }
        }
        (C::Json, F::Json) => Conv::JsonStr,
        (
            C::ZonedTimestamp
            | C::ZonedTime
            | C::IsoDate
            | C::IsoTime
            | C::IsoTimestamp
            | C::Interval
            | C::Json
            | C::Uuid
            | C::Xml
            | C::Enum
            | C::EnumSet,
            F::String,
        ) => Conv::Str,
        (C::Bits, F::Bytes) => match fixed {
            Some(n) => Conv::Fixed(n),
            None => Conv::Bytes,
        },
        _ => {
            return Err(PlanError::Incompatible {
                column: path.to_owned(),
                avro: format!("{} {}", kind_name(&node.kind), named.name()),
                column_type: super::compile::column_type(column),
            });
        }
    };
    Ok(Some(Named::Conv(conv)))
}

/// The index of a geometry record's `wkb` field, `bytes` or `["null", "bytes"]` (debezium/debezium
/// `debezium-connector-common/src/main/java/io/debezium/data/geometry/{Geometry,Geography,Point}.java`).
fn wkb_field(schema: &AvroSchema, id: NodeId) -> Result<usize, String> {
    let Kind::Record(r) = &schema.node(id).kind else {
        return Err("a geometry is not a record".into());
    };
    let is_bytes = |n: NodeId| schema.node(n).kind == Kind::Bytes;
    r.fields
        .iter()
        .position(|f| {
            f.name == "wkb"
                && (is_bytes(f.schema)
                    || schema
                        .nullable_branch(f.schema)
                        .is_some_and(|(_, b)| is_bytes(b)))
        })
        .ok_or_else(|| "a geometry record has no wkb field of bytes".into())
}

/// Debezium's `VariableScaleDecimal` struct as `AvroData` writes it: a record of `scale` (int)
/// then `value` (bytes), in that order (debezium/debezium,
/// `debezium-connector-common/src/main/java/io/debezium/schema/SchemaFactory.java`).
fn variable_scale_shape(schema: &AvroSchema, id: NodeId) -> Result<(), String> {
    let Kind::Record(r) = &schema.node(id).kind else {
        return Err("io.debezium.data.VariableScaleDecimal is not a record".into());
    };
    let kinds: Vec<(&str, &Kind)> = r
        .fields
        .iter()
        .map(|f| (f.name.as_str(), &schema.node(f.schema).kind))
        .collect();
    match kinds.as_slice() {
        [("scale", Kind::Int), ("value", Kind::Bytes)] => Ok(()),
        _ => Err(
            "io.debezium.data.VariableScaleDecimal must be a record of scale (int) then value \
             (bytes)"
                .into(),
        ),
    }
}

/// The largest scale magnitude of a decimal read: PostgreSQL's numeric keeps at most 16383
/// fractional digits, more than any other source Debezium reads. It bounds the work of rescaling
/// or printing a hostile record's decimal.
const MAX_DECIMAL_SCALE: i32 = 16_383;

pub(super) fn run(
    conv: &NamedConv,
    tag: Tag,
    column: &Arc<str>,
    r: &mut AvroReader<'_>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let err = |e: String| value_error(column, e);
    match conv {
        NamedConv::TimeNanos => {
            let micros = TimeUnit::Nanos.to_micros(r.long()?).map_err(err)?;
            put_i64(out, tag, time_packed(micros).map_err(err)?);
        }
        NamedConv::TimestampNanos => {
            let micros = TimeUnit::Nanos.to_micros(r.long()?).map_err(err)?;
            put_i64(out, tag, timestamp_micros(Some(micros)).map_err(err)?);
        }
        NamedConv::DateTimeNanos => {
            let micros = TimeUnit::Nanos.to_micros(r.long()?).map_err(err)?;
            put_i64(out, tag, datetime_packed(Some(micros)).map_err(err)?);
        }
        NamedConv::ZonedTimestamp => {
            let s = utf8(r.string()?);
            text::whole_micros(s).map_err(err)?;
            let micros = text::timestamp(s).map_err(err)?;
            put_i64(out, tag, timestamp_micros(Some(micros)).map_err(err)?);
        }
        NamedConv::UtcDateTime => {
            let s = utf8(r.string()?);
            text::whole_micros(s).map_err(err)?;
            let local = text::utc(s).and_then(text::datetime).map_err(err)?;
            put_i64(out, tag, datetime_packed(Some(local)).map_err(err)?);
        }
        NamedConv::ZonedTime => {
            let s = utf8(r.string()?);
            text::whole_micros(s).map_err(err)?;
            let micros = text::time(s).map_err(err)?;
            put_i64(out, tag, time_packed(micros).map_err(err)?);
        }
        NamedConv::IsoDate => {
            let s = utf8(r.string()?);
            // `DateTimeFormatter.ISO_OFFSET_DATE` of a date at UTC: the date, then `Z`.
            let date = text::utc(s).and_then(text::date).map_err(err)?;
            put_i64(out, tag, date);
        }
        NamedConv::DecimalText { fixed, scale } => {
            let bytes = match fixed {
                Some(n) => r.fixed(*n as usize, "a decimal")?,
                None => r.bytes()?,
            };
            let w = Wide::from_be_twos(bytes).map_err(err)?;
            put_len_delimited(out, tag, w.to_decimal_string(*scale).as_bytes());
        }
        NamedConv::VariableScale(target) => {
            let scale = r.int()?;
            let (w, scale) = variable_scale(scale, r.bytes()?).map_err(err)?;
            put_decimal(out, tag, w, scale, *target, column)?;
        }
        NamedConv::VariableScaleText => {
            let scale = r.int()?;
            let (w, scale) = variable_scale(scale, r.bytes()?).map_err(err)?;
            put_len_delimited(out, tag, w.to_decimal_string(scale).as_bytes());
        }
    }
    Ok(())
}

/// A `VariableScaleDecimal` record's unscaled value and non-negative scale (a negative scale,
/// which Java's `BigDecimal` allows, multiplies the value instead).
fn variable_scale(scale: i32, bytes: &[u8]) -> Result<(Wide, u32), String> {
    if !(-MAX_DECIMAL_SCALE..=MAX_DECIMAL_SCALE).contains(&scale) {
        return Err(format!(
            "variable-scale decimal has scale {scale}, beyond ±{MAX_DECIMAL_SCALE}"
        ));
    }
    let mut w = Wide::from_be_twos(bytes)?;
    if scale < 0 {
        w.rescale(0, scale.unsigned_abs())?;
        return Ok((w, 0));
    }
    Ok((w, scale as u32))
}

/// The reader checked the string's UTF-8.
fn utf8(s: &[u8]) -> &str {
    std::str::from_utf8(s).unwrap_or_default()
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_named_conversions_leave_every_op_as_small_as_before() {
        // 24 and 48 bytes on 64-bit targets before `Conv::Named` existed: the plan's ops are
        // walked per field of every record, so a larger op costs cache on the hot path.
        assert!(std::mem::size_of::<Conv>() <= 24);
        assert!(std::mem::size_of::<crate::ops::Op>() <= 48);
    }
}
