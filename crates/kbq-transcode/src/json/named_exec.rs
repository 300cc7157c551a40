//! Writes the values Kafka Connect and Debezium name (`named.rs` decided the conversion): each
//! exact, or a per-record error with its reason. Digits below the microsecond that are not zero
//! are an error, never dropped (BigQuery holds microseconds).

use base64::Engine;

use super::exec::{BASE64, integer, type_error};
use super::ops::{FieldOp, Named};
use super::scan::{Scanner, Token};
use super::text;
use crate::RecordError;
use crate::connect_types::TimeUnit;
use crate::convert::{Wide, datetime_packed, time_packed, timestamp_micros};
use crate::exec::{put_decimal, put_i64, value_error};
use crate::proto::put_len_delimited;

pub(super) fn write(
    n: Named,
    f: &FieldOp,
    token: Token,
    sc: &mut Scanner<'_>,
    depth: usize,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let column = &f.column;
    let checked = |r: Result<i64, String>| r.map_err(|e| value_error(column, e));
    let micros = |sc: &mut Scanner<'_>, unit: TimeUnit| {
        let v = integer(sc.number()?, column)?;
        checked(unit.to_micros(v))
    };
    match (n, token) {
        (Named::Timestamp(unit), Token::Number) => {
            let v = micros(sc, unit)?;
            put_i64(out, f.tag, checked(timestamp_micros(Some(v)))?);
        }
        (Named::DateTime(unit), Token::Number) => {
            let v = micros(sc, unit)?;
            put_i64(out, f.tag, checked(datetime_packed(Some(v)))?);
        }
        (Named::Time(unit), Token::Number) => {
            let v = micros(sc, unit)?;
            put_i64(out, f.tag, checked(time_packed(v))?);
        }
        (Named::ZonedTimestamp, Token::String) => {
            let s = sc.text()?;
            checked(text::whole_micros(&s).map(|()| 0))?;
            let v = checked(text::timestamp(&s))?;
            put_i64(out, f.tag, checked(timestamp_micros(Some(v)))?);
        }
        (Named::UtcDateTime, Token::String) => {
            let s = sc.text()?;
            checked(text::whole_micros(&s).map(|()| 0))?;
            let local = checked(text::utc(&s).and_then(text::datetime))?;
            put_i64(out, f.tag, checked(datetime_packed(Some(local)))?);
        }
        (Named::UtcTime, Token::String) => {
            let s = sc.text()?;
            checked(text::whole_micros(&s).map(|()| 0))?;
            let v = checked(text::time(&s))?;
            put_i64(out, f.tag, checked(time_packed(v))?);
        }
        (Named::UtcDate, Token::String) => {
            let s = sc.text()?;
            let days = checked(text::utc(&s).and_then(text::date))?;
            put_i64(out, f.tag, days);
        }
        (Named::DecimalText { scale }, Token::String) => {
            let s = sc.string()?;
            let bytes = BASE64
                .decode(&s)
                .map_err(|_| value_error(column, "connect decimal is not base64".into()))?;
            let w = Wide::from_be_twos(&bytes).map_err(|e| value_error(column, e))?;
            put_len_delimited(out, f.tag, w.to_decimal_string(scale).as_bytes());
        }
        (Named::DecimalText { .. }, Token::Number) => {
            let n = sc.number()?;
            let (w, scale) = Wide::parse_decimal(n.text()).map_err(|e| value_error(column, e))?;
            put_len_delimited(out, f.tag, w.to_decimal_string(scale).as_bytes());
        }
        (Named::VariableScaleDecimal(target), Token::Object) => {
            let (w, scale) = variable_scale(sc, depth, column)?;
            match target {
                Some(target) => put_decimal(out, f.tag, w, scale, target, column)?,
                None => put_len_delimited(out, f.tag, w.to_decimal_string(scale).as_bytes()),
            }
        }
        (Named::JsonDocument, Token::String) => {
            let s = sc.string()?;
            let mut doc = Scanner::new(&s);
            doc.peek()
                .and_then(|_| doc.skip(0))
                .and_then(|_| doc.end())
                .map_err(|e| {
                    value_error(
                        column,
                        format!("the io.debezium.data.Json string is not a json document: {e}"),
                    )
                })?;
            put_len_delimited(out, f.tag, &s);
        }
        (Named::Wkb, Token::Object) => {
            if let Some(bytes) = member_bytes(sc, depth, b"wkb", column)? {
                put_len_delimited(out, f.tag, &bytes);
            }
        }
        _ => return Err(type_error(f, token, sc, depth)),
    }
    Ok(())
}

/// Debezium's `VariableScaleDecimal`: `{"scale": int32, "value": base64}` in either order.
fn variable_scale(
    sc: &mut Scanner<'_>,
    depth: usize,
    column: &std::sync::Arc<str>,
) -> Result<(Wide, u32), RecordError> {
    let mut scale = None;
    let mut value = None;
    sc.open(b'{');
    let mut first = true;
    while let Some(key) = sc.next_key(first)? {
        first = false;
        match (&*key, sc.peek()?) {
            (b"scale", Token::Number) => {
                let v = integer(sc.number()?, column)?;
                scale = Some(u32::try_from(v).map_err(|_| {
                    value_error(
                        column,
                        format!("variable scale decimal scale {v} is negative"),
                    )
                })?);
            }
            (b"value", Token::String) => {
                let s = sc.string()?;
                let bytes = BASE64.decode(&s).map_err(|_| {
                    value_error(column, "variable scale decimal value is not base64".into())
                })?;
                value = Some(Wide::from_be_twos(&bytes).map_err(|e| value_error(column, e))?);
            }
            _ => {
                sc.skip(depth + 1)?;
            }
        }
    }
    match (value, scale) {
        (Some(w), Some(s)) => Ok((w, s)),
        _ => Err(value_error(
            column,
            "a variable scale decimal needs a scale (integer) and a value (base64)".into(),
        )),
    }
}

/// The bytes of one base64 member of an object (`None` when it is null or absent).
fn member_bytes(
    sc: &mut Scanner<'_>,
    depth: usize,
    name: &[u8],
    column: &std::sync::Arc<str>,
) -> Result<Option<Vec<u8>>, RecordError> {
    let mut found = None;
    sc.open(b'{');
    let mut first = true;
    while let Some(key) = sc.next_key(first)? {
        first = false;
        if *key == *name && sc.peek()? == Token::String {
            let s = sc.string()?;
            found = Some(BASE64.decode(&s).map_err(|_| {
                value_error(
                    column,
                    format!("{} is not base64", String::from_utf8_lossy(name)),
                )
            })?);
        } else {
            sc.skip(depth + 1)?;
        }
    }
    Ok(found)
}
