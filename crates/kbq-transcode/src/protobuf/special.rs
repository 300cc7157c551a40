//! The messages a column reads as one value: `google.protobuf.Timestamp` and `Duration`, the
//! wrappers, `google.type.Date`, `TimeOfDay` and `Decimal`, and Confluent's `Decimal`
//! (`docs/mapping.md`). Each is read field by field, converted and written as one scalar.

use std::sync::Arc;

use crate::RecordError;
use crate::convert::{
    Wide, date_days, datetime_packed, days_from_civil, time_packed, timestamp_micros,
};
use crate::exec::{put_decimal, put_i64, value_error};
use crate::proto::Tag;

use super::ops::{Special, Src};
use super::reader::{Reader, Val, WIRE_END_GROUP};
use super::scalar::{bytes, int, write_scalar};

/// The last value of each listed field of a small well-known message, by number (1-based);
/// other fields are skipped. Wire types are checked against `srcs`.
fn fields<'a, const N: usize>(
    bytes: &'a [u8],
    base: usize,
    srcs: [Src; N],
) -> Result<[Option<Val<'a>>; N], RecordError> {
    let mut vals = [None; N];
    let mut r = Reader::new(bytes, base);
    while !r.done() {
        let key_at = r.offset();
        let key = r.varint()?;
        let (number, wire) = (key >> 3, (key & 7) as u8);
        match (number as usize)
            .checked_sub(1)
            .and_then(|i| srcs.get(i).map(|s| (i, *s)))
        {
            Some((i, src)) if wire == src.wire() => vals[i] = Some(r.value(src)?),
            Some(_) => {
                return Err(RecordError::ProtoWireType {
                    offset: key_at,
                    number,
                    wire,
                });
            }
            None if number == 0 || wire == WIRE_END_GROUP => {
                return Err(RecordError::ProtoWireType {
                    offset: key_at,
                    number,
                    wire,
                });
            }
            None => r.skip(wire, number, key_at)?,
        }
    }
    Ok(vals)
}

fn int_or_zero(v: Option<Val<'_>>) -> i64 {
    v.map_or(0, int)
}

/// A `Timestamp` as writers lay it out: `seconds` then `nanos`, each there or not, nothing else.
/// `None` for any other layout, which [`fields`] reads (with its checks and errors).
#[inline]
pub(super) fn seconds_nanos(bytes: &[u8]) -> Option<(i64, i64)> {
    let mut r = Reader::new(bytes, 0);
    let (mut seconds, mut nanos) = (0, 0);
    if r.buf.first() == Some(&0x08) {
        r.pos = 1;
        seconds = r.varint().ok()? as i64;
    }
    if r.buf.get(r.pos) == Some(&0x10) {
        r.pos += 1;
        nanos = r.varint().ok()? as i32 as i64;
    }
    r.done().then_some((seconds, nanos))
}

fn timestamp(bytes: &[u8], base: usize, column: &Arc<str>) -> Result<i64, RecordError> {
    let (seconds, nanos) = match seconds_nanos(bytes) {
        Some(pair) => pair,
        None => {
            let [seconds, nanos] = fields(bytes, base, [Src::Int64, Src::Int32])?;
            (int_or_zero(seconds), int_or_zero(nanos))
        }
    };
    if !(0..1_000_000_000).contains(&nanos) {
        return Err(value_error(
            column,
            format!("timestamp nanos {nanos} are outside 0..999999999"),
        ));
    }
    timestamp_micros(
        seconds
            .checked_mul(1_000_000)
            .and_then(|m| m.checked_add(nanos / 1000)),
    )
    .map_err(|e| value_error(column, e))
}

/// Writes the one value a well-known message stands for; each type's reading and checks are a
/// function of their own below.
#[inline(never)]
pub(super) fn write_special(
    special: &Special,
    tag: Tag,
    bytes: &[u8],
    base: usize,
    column: &Arc<str>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    match special {
        Special::Timestamp => put_i64(out, tag, timestamp(bytes, base, column)?),
        Special::TimestampDateTime => {
            let micros = timestamp(bytes, base, column)?;
            let packed = datetime_packed(Some(micros)).map_err(|e| value_error(column, e))?;
            put_i64(out, tag, packed);
        }
        Special::DurationMicros => put_i64(out, tag, duration_micros(bytes, base, column)?),
        Special::Wrapper { src, conv } => {
            let [value] = fields(bytes, base, [*src])?;
            write_scalar(
                conv,
                tag,
                value.unwrap_or(wrapped_default(*src)),
                column,
                out,
            )?;
        }
        Special::Date => put_i64(out, tag, date(bytes, base, column)? as i64),
        Special::TimeOfDay => put_i64(out, tag, time_of_day(bytes, base, column)?),
        Special::ConfluentDecimal(target) => {
            let (w, scale) = confluent_decimal(bytes, base, column)?;
            put_decimal(out, tag, w, scale, *target, column)?;
        }
        Special::GoogleDecimal(target) => {
            let (w, scale) = google_decimal(bytes, base, column)?;
            put_decimal(out, tag, w, scale, *target, column)?;
        }
    }
    Ok(())
}

/// A `google.protobuf.Duration` in INT64 microseconds: `seconds` and `nanos` of one sign.
fn duration_micros(bytes: &[u8], base: usize, column: &Arc<str>) -> Result<i64, RecordError> {
    let [seconds, nanos] = fields(bytes, base, [Src::Int64, Src::Int32])?;
    let (seconds, nanos) = (int_or_zero(seconds), int_or_zero(nanos));
    if nanos.abs() >= 1_000_000_000 || (seconds != 0 && nanos != 0 && (seconds < 0) != (nanos < 0))
    {
        return Err(value_error(
            column,
            format!("duration of {seconds} s and {nanos} ns is not a valid duration"),
        ));
    }
    seconds
        .checked_mul(1_000_000)
        .and_then(|m| m.checked_add(nanos / 1000))
        .ok_or_else(|| value_error(column, "duration overflows INT64 microseconds".into()))
}

/// A wrapper's value when its message leaves it out: the wrapped type's zero.
fn wrapped_default(src: Src) -> Val<'static> {
    match src {
        Src::String | Src::Bytes => Val::B(b""),
        Src::Float => Val::F32(0.0),
        Src::Double => Val::F64(0.0),
        Src::UInt64 => Val::U(0),
        _ => Val::I(0),
    }
}

/// A `google.type.Date` as days since the epoch, in DATE's range.
fn date(bytes: &[u8], base: usize, column: &Arc<str>) -> Result<i32, RecordError> {
    let err = |e: String| value_error(column, e);
    let [y, m, d] = fields(bytes, base, [Src::Int32, Src::Int32, Src::Int32])?;
    let days = days_from_civil(int_or_zero(y), int_or_zero(m), int_or_zero(d))
        .map_err(|e| err(format!("google.type.Date: {e}")))?;
    date_days(days as i32).map_err(err)
}

/// A `google.type.TimeOfDay` as TIME's packed microseconds.
fn time_of_day(bytes: &[u8], base: usize, column: &Arc<str>) -> Result<i64, RecordError> {
    let err = |e: String| value_error(column, e);
    let [h, m, s, n] = fields(bytes, base, [Src::Int32; 4])?;
    let (h, m, s, n) = (
        int_or_zero(h),
        int_or_zero(m),
        int_or_zero(s),
        int_or_zero(n),
    );
    if !(0..24).contains(&h)
        || !(0..60).contains(&m)
        || !(0..60).contains(&s)
        || !(0..1_000_000_000).contains(&n)
    {
        return Err(err(format!(
            "google.type.TimeOfDay {h}:{m}:{s}.{n:09} is not a time of day"
        )));
    }
    let micros = ((h * 60 + m) * 60 + s) * 1_000_000 + n / 1000;
    time_packed(micros).map_err(err)
}

/// Confluent's `Decimal` (big-endian two's complement digits, a precision, a scale) as digits
/// and a scale of 0 or more.
fn confluent_decimal(
    bytes: &[u8],
    base: usize,
    column: &Arc<str>,
) -> Result<(Wide, u32), RecordError> {
    let err = |e: String| value_error(column, e);
    let [value, _precision, scale] = fields(bytes, base, [Src::Bytes, Src::UInt32, Src::Int32])?;
    let mut w = Wide::from_be_twos(value.map_or(&[][..], bytes_of)).map_err(err)?;
    let scale = int_or_zero(scale);
    let scale = if scale < 0 {
        // A negative scale multiplies: 5 at scale -2 is 500.
        w.rescale(0, scale.unsigned_abs() as u32).map_err(err)?;
        0
    } else {
        scale as u32
    };
    Ok((w, scale))
}

/// A `google.type.Decimal` (decimal text) as digits and a scale.
fn google_decimal(
    bytes: &[u8],
    base: usize,
    column: &Arc<str>,
) -> Result<(Wide, u32), RecordError> {
    let err = |e: String| value_error(column, e);
    let [value] = fields(bytes, base, [Src::String])?;
    let text = std::str::from_utf8(value.map_or(&[][..], bytes_of))
        .map_err(|_| err("google.type.Decimal value is not utf-8".into()))?;
    Wide::parse_decimal(text).map_err(err)
}

fn bytes_of(v: Val<'_>) -> &[u8] {
    bytes(v)
}
