//! `convert`: a time read from a field (a count since the epoch, or text in a format) and written
//! as another kind of time (docs/mapping.md, "Transforms"), exactly. Every value passes through
//! one count of nanoseconds since 1970-01-01T00:00:00 (UTC, or the civil time as written: the
//! only zone is UTC, so the count is the same). What cannot be written exactly is its record's
//! error: nanoseconds into a microsecond TIMESTAMP, a time of day into a DATE, a count finer than
//! its INT64 unit, a time outside 0001..9999, text that does not match its format. The checks
//! that need no schema are [`check`]'s (part of `validate`); the field's type and the column's
//! are checked when the plan is compiled.

use prost_types::field_descriptor_proto::Type;

use super::cast::number_i64;
use super::time_format::{NANOS_PER_DAY, TimeFormat};
use super::values::{JsonKind, Scalar, Source};
use super::{ConvertField, EpochUnit, TimeFrom, TimeTo};
use crate::compile::column_type;
use crate::convert::{date_days, datetime_packed, timestamp_micros};
use crate::proto::{Tag, WIRE_LEN, WIRE_VARINT, close_len, open_len, put_varint};
use kbq_core::table_schema::{FieldType, TableFieldSchema};

/// A compiled `convert`.
#[derive(Debug, Clone)]
pub(crate) struct Convert {
    from: Read,
    to: Write,
}

#[derive(Debug, Clone)]
enum Read {
    Epoch(EpochUnit),
    Text(TimeFormat),
}

#[derive(Debug, Clone)]
enum Write {
    Timestamp,
    Date,
    DateTime,
    Epoch(EpochUnit),
    Text(TimeFormat),
}

/// Checks a `convert` without a schema: a format where text is read or written (with a whole date,
/// each part of the time of day beneath the parts above it), a unit with INT64, and `zone` exactly where an instant meets a civil time.
/// The key of the entry and why.
pub(crate) fn check(c: &ConvertField) -> Result<(), (&'static str, String)> {
    let from_text = c.from == TimeFrom::String;
    let to_text = c.to == TimeTo::String;
    if from_text && to_text {
        return Err((
            "to",
            "text written again as text: convert reads a time from text or writes one as text, not both".into(),
        ));
    }
    let format = match (&c.format, from_text || to_text) {
        (Some(f), true) => {
            let parsed = TimeFormat::parse(f).map_err(|e| ("format", e))?;
            parsed.check_parts().map_err(|e| ("format", e))?;
            Some(parsed)
        }
        (None, true) => {
            return Err((
                "format",
                "text needs its format (`%Y-%m-%d %H:%M:%S`, docs/mapping.md): a time's text is never guessed".into(),
            ));
        }
        (Some(_), false) => {
            return Err(("format", "only with `from: string` or `to: STRING`".into()));
        }
        (None, false) => None,
    };
    match (c.to, c.unit) {
        (TimeTo::Int64, None) => {
            return Err((
                "unit",
                "an INT64 of a time needs its unit: epoch_seconds, epoch_millis, epoch_micros or epoch_nanos".into(),
            ));
        }
        (TimeTo::Int64, Some(_)) | (_, None) => {}
        (_, Some(_)) => return Err(("unit", "only with `to: INT64`".into())),
    }
    check_zone(c, format.as_ref().is_some_and(TimeFormat::has_offset))
}

/// `zone` exactly where an instant (an epoch count, TIMESTAMP, INT64, text with an offset) meets
/// a civil time (DATE, DATETIME, text without one).
fn check_zone(c: &ConvertField, offset: bool) -> Result<(), (&'static str, String)> {
    let from_text = c.from == TimeFrom::String;
    let to_text = c.to == TimeTo::String;
    let from_instant = !from_text || offset;
    let to_instant = match c.to {
        TimeTo::Timestamp | TimeTo::Int64 => true,
        TimeTo::Date | TimeTo::Datetime => false,
        TimeTo::String => offset,
    };
    let describe = |instant: bool| {
        if instant {
            "an instant"
        } else {
            "a civil time"
        }
    };
    match (from_instant == to_instant, c.zone) {
        (false, None) => Err((
            "zone",
            format!(
                "{} from {} becomes {} {}: say the zone of the civil time (zone: UTC), it is never guessed",
                describe(from_instant),
                if from_text {
                    "text without %z"
                } else {
                    c.from.name()
                },
                describe(to_instant),
                if to_text {
                    "as text without %z"
                } else {
                    c.to.name()
                },
            ),
        )),
        (true, Some(_)) => Err((
            "zone",
            format!(
                "only where an instant becomes a civil time or back; here both are {}",
                if from_instant {
                    "instants"
                } else {
                    "civil times"
                }
            ),
        )),
        _ => Ok(()),
    }
}

impl Convert {
    /// The conversion of a field of kind `source` into `column`, with the column field's proto
    /// type and wire type; or why not.
    pub(crate) fn compile(
        c: &ConvertField,
        source: Source,
        column: &TableFieldSchema,
    ) -> Result<(Convert, (Type, u32)), String> {
        let format = || {
            let text = c.format.as_deref().expect("check: text has its format");
            TimeFormat::parse(text).expect("check: the format parses")
        };
        let (fits, ty, to) = match c.to {
            TimeTo::Timestamp => (FieldType::Timestamp, Type::Int64, Write::Timestamp),
            TimeTo::Date => (FieldType::Date, Type::Int32, Write::Date),
            TimeTo::Datetime => (FieldType::DateTime, Type::Int64, Write::DateTime),
            TimeTo::String => (FieldType::String, Type::String, Write::Text(format())),
            TimeTo::Int64 => (
                FieldType::Int64,
                Type::Int64,
                Write::Epoch(c.unit.expect("check: INT64 has its unit")),
            ),
        };
        if column.field_type != fits {
            return Err(format!(
                "the conversion writes {}, and the column is {}",
                c.to.name(),
                column_type(column)
            ));
        }
        let from = match (c.from.unit(), source) {
            (None, Source::Str | Source::Any) => Read::Text(format()),
            (Some(unit), Source::Int32(_) | Source::Int64(_) | Source::UInt32(_))
            | (Some(unit), Source::UInt64(_) | Source::Any) => Read::Epoch(unit),
            (None, other) => {
                return Err(format!(
                    "the field is {}, and `from: string` reads text",
                    other.describe()
                ));
            }
            (Some(_), Source::Number) => {
                return Err(format!(
                    "the field is {}, and {} is a count: declare the property an integer",
                    source.describe(),
                    c.from.name()
                ));
            }
            (Some(_), other) => {
                return Err(format!(
                    "the field is {}, and {} is an integer count",
                    other.describe(),
                    c.from.name()
                ));
            }
        };
        let wire = if ty == Type::String {
            WIRE_LEN
        } else {
            WIRE_VARINT
        };
        Ok((Convert { from, to }, (ty, wire)))
    }

    pub(crate) fn label(&self) -> &'static str {
        match self.from {
            Read::Epoch(_) => "time from an epoch count",
            Read::Text(_) => "time from text",
        }
    }

    /// Whether a JSON value of `kind` is what `from` reads.
    pub(crate) fn takes(&self, kind: JsonKind) -> bool {
        match self.from {
            Read::Epoch(_) => kind == JsonKind::Number,
            Read::Text(_) => kind == JsonKind::String,
        }
    }

    /// Writes `v` into the field `tag` as the column's kind of time, or why it cannot be
    /// written exactly.
    pub(crate) fn write(&self, v: Scalar<'_>, tag: Tag, out: &mut Vec<u8>) -> Result<(), String> {
        let nanos = match (&self.from, v) {
            (Read::Epoch(unit), Scalar::Int(i)) => i as i128 * unit.nanos(),
            (Read::Epoch(unit), Scalar::UInt(u)) => u as i128 * unit.nanos(),
            (Read::Epoch(unit), Scalar::Number(s)) => number_i64(s)? as i128 * unit.nanos(),
            (Read::Text(format), Scalar::Str(b)) => format.read(b)?,
            (_, other) => unreachable!("compile: convert reads no {other:?}"),
        };
        let shown = || match v {
            Scalar::Int(i) => format!("{i}"),
            Scalar::UInt(u) => format!("{u}"),
            Scalar::Number(s) => s.to_string(),
            Scalar::Str(b) => format!("{:?}", String::from_utf8_lossy(b)),
            _ => String::new(),
        };
        match &self.to {
            Write::Timestamp | Write::DateTime => {
                if nanos % 1000 != 0 {
                    return Err(format!(
                        "{} has a fraction of a microsecond, which a {} does not hold",
                        shown(),
                        if matches!(self.to, Write::Timestamp) {
                            "TIMESTAMP"
                        } else {
                            "DATETIME"
                        }
                    ));
                }
                let micros = i64::try_from(nanos / 1000).ok();
                let v = match self.to {
                    Write::Timestamp => timestamp_micros(micros),
                    _ => datetime_packed(micros),
                };
                let v = v.map_err(|e| format!("{}: {e}", shown()))?;
                tag.put(out);
                put_varint(out, v as u64);
            }
            Write::Date => {
                if nanos % NANOS_PER_DAY != 0 {
                    return Err(format!(
                        "{} has a time of day, which a DATE does not hold",
                        shown()
                    ));
                }
                let days = i32::try_from(nanos / NANOS_PER_DAY)
                    .map_err(|_| format!("{} is outside 0001-01-01..9999-12-31", shown()))?;
                let days = date_days(days).map_err(|e| format!("{}: {e}", shown()))?;
                tag.put(out);
                put_varint(out, days as i64 as u64);
            }
            Write::Epoch(unit) => {
                if nanos % unit.nanos() != 0 {
                    return Err(format!(
                        "{} is not a whole count of {}",
                        shown(),
                        unit.name()
                    ));
                }
                let count = i64::try_from(nanos / unit.nanos())
                    .map_err(|_| format!("{} in {} is past INT64", shown(), unit.name()))?;
                tag.put(out);
                put_varint(out, count as u64);
            }
            Write::Text(format) => {
                let at = open_len(out, tag);
                format
                    .write(nanos, out)
                    .map_err(|e| format!("{}: {e}", shown()))?;
                close_len(out, at);
            }
        }
        Ok(())
    }
}
