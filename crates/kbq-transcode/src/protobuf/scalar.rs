//! A decoded scalar written as its column's value: protobuf's own types where the column matches
//! them, and the conversions `docs/mapping.md` lists where it does not (unsigned to INT64 or
//! NUMERIC, enum numbers to names, JSON text). Also used at compile time for the defaults of
//! implicit-presence fields.

use std::sync::Arc;

use crate::RecordError;
use crate::convert::Wide;
use crate::exec::{check_json, put_decimal, put_f64, put_i64, value_error};
use crate::proto::{Tag, put_len_delimited};
use crate::transforms::Scalar;

use super::ops::Conv;
use super::reader::Val;

#[inline]
pub(super) fn int(v: Val<'_>) -> i64 {
    match v {
        Val::I(i) => i,
        Val::U(u) => u as i64,
        Val::F32(f) => f as i64,
        Val::F64(f) => f as i64,
        Val::B(_) => 0,
    }
}

#[inline]
pub(super) fn bytes(v: Val<'_>) -> &[u8] {
    match v {
        Val::B(b) => b,
        _ => &[],
    }
}

#[inline]
pub(super) fn utf8<'a>(b: &'a [u8], column: &Arc<str>) -> Result<&'a [u8], RecordError> {
    if !crate::utf8::valid(b) {
        return Err(value_error(column, "string is not valid utf-8".into()));
    }
    Ok(b)
}

/// Writes one converted scalar (also used at compile time for the defaults).
#[inline]
pub fn write_scalar(
    conv: &Conv,
    tag: Tag,
    v: Val<'_>,
    column: &Arc<str>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    match conv {
        Conv::Int | Conv::EnumNumber => put_i64(out, tag, int(v)),
        Conv::Str | Conv::BytesAsStr => put_len_delimited(out, tag, utf8(bytes(v), column)?),
        Conv::Bytes | Conv::StrAsBytes => put_len_delimited(out, tag, bytes(v)),
        Conv::Double => match v {
            Val::F64(f) => put_f64(out, tag, f),
            other => put_f64(out, tag, int(other) as f64),
        },
        Conv::Float => match v {
            Val::F32(f) => put_f64(out, tag, f as f64),
            other => put_f64(out, tag, int(other) as f64),
        },
        Conv::Bool => {
            tag.put(out);
            out.push((int(v) != 0) as u8);
        }
        _ => write_scalar_cold(conv, tag, v, column, out)?,
    }
    Ok(())
}

#[inline(never)]
fn write_scalar_cold(
    conv: &Conv,
    tag: Tag,
    v: Val<'_>,
    column: &Arc<str>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    match (conv, v) {
        (Conv::UInt, Val::U(u)) => {
            let i = i64::try_from(u).map_err(|_| {
                value_error(column, format!("unsigned value {u} does not fit INT64"))
            })?;
            put_i64(out, tag, i);
        }
        (Conv::UInt, other) => put_i64(out, tag, int(other)),
        (Conv::IntToDouble, v) => put_f64(out, tag, int(v) as f64),
        (Conv::UIntToDouble, Val::U(u)) => put_f64(out, tag, u as f64),
        (Conv::UIntToDouble, v) => put_f64(out, tag, int(v) as f64),
        (Conv::IntToNumeric(t), v) => put_decimal(out, tag, Wide::from_i64(int(v)), 0, *t, column)?,
        (Conv::UIntToNumeric(t), Val::U(u)) => {
            put_decimal(out, tag, Wide::from_u64(u), 0, *t, column)?
        }
        (Conv::UIntToNumeric(t), v) => {
            put_decimal(out, tag, Wide::from_i64(int(v)), 0, *t, column)?
        }
        (Conv::EnumName(names), v) => {
            let n = int(v) as i32;
            let Ok(i) = names.binary_search_by_key(&n, |(k, _)| *k) else {
                return Err(value_error(
                    column,
                    format!("enum number {n} has no name in the writer schema"),
                ));
            };
            put_len_delimited(out, tag, names[i].1.as_bytes());
        }
        (Conv::JsonStr, v) => {
            let s = utf8(bytes(v), column)?;
            check_json(s).map_err(|e| value_error(column, e))?;
            put_len_delimited(out, tag, s);
        }
        (Conv::Value { op, text }, v) => {
            let value = match v {
                Val::B(b) if *text => Scalar::Str(utf8(b, column)?),
                Val::B(b) => Scalar::Bytes(b),
                Val::I(i) => Scalar::Int(i),
                Val::U(u) => Scalar::UInt(u),
                Val::F32(f) => Scalar::F32(f),
                Val::F64(f) => Scalar::F64(f),
            };
            op.write(value, tag, column, out)?;
        }
        _ => unreachable!("handled by write_scalar"),
    }
    Ok(())
}
