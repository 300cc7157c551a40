//! The JSON executor as it was before `exec.rs` took its fast paths (keys matched in place,
//! small decimals in an `i128`), kept unchanged as the reference the differential tests and the
//! fuzzers compare `exec.rs` with (`Plan::transcode_reference`,
//! `crates/kbq-transcode/tests/transcode/json_differential.rs`). Not run by the product.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

use super::exec::{BASE64, column_type, integer};
use super::keys::same;
use super::named_exec;
use super::ops::{Conv, FieldOp, IntUnit, ObjectOp};
use super::scan::{MAX_DEPTH, Scanner, Token, malformed};
use super::text;
use crate::RecordError;
use crate::convert::{Wide, date_days, datetime_packed, time_packed, timestamp_micros};
use crate::exec::{put_decimal, put_f64, put_i64, value_error};
use crate::proto::{close_len, open_len, put_len_delimited};

/// The whole record: one object, then nothing but whitespace.
pub fn run_row(root: &ObjectOp, body: &[u8], out: &mut Vec<u8>) -> Result<(), RecordError> {
    let mut sc = Scanner::new(body);
    if sc.peek()? != Token::Object {
        return Err(malformed(sc.pos, "an object (a row)"));
    }
    object(root, &mut sc, 0, out)?;
    sc.end()
}

/// Which fields an object has set, without allocating for up to 64 columns.
enum Seen {
    Small(u64),
    Big(Vec<u64>),
}

impl Seen {
    fn new(n: usize) -> Seen {
        if n <= 64 {
            Seen::Small(0)
        } else {
            Seen::Big(vec![0; n.div_ceil(64)])
        }
    }

    /// Marks `i`; false if it was already marked.
    #[inline]
    fn mark(&mut self, i: usize) -> bool {
        let (word, bit) = match self {
            Seen::Small(w) => (w, i),
            Seen::Big(v) => (&mut v[i / 64], i % 64),
        };
        let was = *word & (1 << bit) != 0;
        *word |= 1 << bit;
        !was
    }

    fn has(&self, i: usize) -> bool {
        match self {
            Seen::Small(w) => w & (1 << i) != 0,
            Seen::Big(v) => v[i / 64] & (1 << (i % 64)) != 0,
        }
    }
}

fn object(
    op: &ObjectOp,
    sc: &mut Scanner<'_>,
    depth: usize,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    if depth >= MAX_DEPTH {
        return Err(malformed(sc.pos, "objects nested at most 128 deep"));
    }
    let at = op.tag.map(|t| open_len(out, t));
    sc.open(b'{');
    let mut seen = Seen::new(op.fields.len());
    let mut hint = 0usize;
    let mut first = true;
    while let Some(key) = sc.next_key(first)? {
        first = false;
        let Some(i) = find(op, &key, hint) else {
            if op.unknown_is_error {
                return Err(RecordError::JsonUnknownKey {
                    key: String::from_utf8_lossy(&key).into_owned(),
                });
            }
            sc.skip_reference(depth + 1)?;
            continue;
        };
        hint = i + 1;
        if !seen.mark(i) {
            return Err(RecordError::JsonDuplicateKey {
                key: op.fields[i].column.clone(),
            });
        }
        field(&op.fields[i], sc, depth + 1, out)?;
    }
    for (i, f) in op.fields.iter().enumerate() {
        if f.required && !seen.has(i) {
            return Err(RecordError::MissingRequired {
                column: f.column.clone(),
            });
        }
    }
    if let Some(at) = at {
        close_len(out, at);
    }
    Ok(())
}

/// The column of `key`: the one after the previous key's (serializers that follow the schema's
/// order), then by the exact bytes, then case-insensitively.
#[inline]
fn find(op: &ObjectOp, key: &[u8], hint: usize) -> Option<usize> {
    if let Some(f) = op.fields.get(hint)
        && same(f.key.as_bytes(), key)
    {
        return Some(hint);
    }
    if let Some(i) = op.keys.get(key, |i| op.fields[i].key.as_bytes()) {
        return Some(i);
    }
    find_lower(op, key)
}

#[cold]
fn find_lower(op: &ObjectOp, key: &[u8]) -> Option<usize> {
    let lower = std::str::from_utf8(key).ok()?.to_ascii_lowercase();
    op.by_lower.get(lower.as_str()).map(|&i| i as usize)
}

fn field(
    f: &FieldOp,
    sc: &mut Scanner<'_>,
    depth: usize,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let token = sc.peek()?;
    if token == Token::Null {
        sc.null()?;
        return if f.required {
            Err(RecordError::NullRequired {
                column: f.column.clone(),
            })
        } else {
            Ok(())
        };
    }
    if matches!(f.conv, Conv::Skip) {
        return sc.skip_reference(depth).map(|_| ());
    }
    if !f.repeated {
        return value(f, token, sc, depth, out);
    }
    if token != Token::Array {
        return Err(type_error(f, token, sc, depth));
    }
    sc.open(b'[');
    let mut first = true;
    while sc.next_element(first)? {
        first = false;
        let token = sc.peek()?;
        if token == Token::Null {
            return Err(RecordError::NullElement {
                column: f.column.clone(),
            });
        }
        value(f, token, sc, depth + 1, out)?;
    }
    Ok(())
}

fn checked<T>(column: &Arc<str>, r: Result<T, String>) -> Result<T, RecordError> {
    r.map_err(|e| value_error(column, e))
}

#[inline]
fn value(
    f: &FieldOp,
    token: Token,
    sc: &mut Scanner<'_>,
    depth: usize,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let column = &f.column;
    let tag = f.tag;
    match (&f.conv, token) {
        (Conv::Str, Token::String) => {
            let s = sc.string()?;
            put_len_delimited(out, tag, &s);
        }
        (Conv::Int, Token::Number) => {
            let v = integer(sc.number()?, column)?;
            put_i64(out, tag, v);
        }
        (Conv::Int, Token::String) => {
            let s = sc.text()?;
            let v = s
                .parse::<i64>()
                .map_err(|_| value_error(column, format!("{s:?} is not an INT64")))?;
            put_i64(out, tag, v);
        }
        (Conv::Float, Token::Number) => {
            let n = sc.number()?;
            put_f64(out, tag, n.text().parse().expect("json number grammar"));
        }
        (Conv::Float, Token::String) => {
            let s = sc.text()?;
            let v = match &*s {
                "NaN" => f64::NAN,
                "Infinity" => f64::INFINITY,
                "-Infinity" => f64::NEG_INFINITY,
                _ => {
                    return Err(value_error(
                        column,
                        format!("{s:?} is not NaN, Infinity or -Infinity"),
                    ));
                }
            };
            put_f64(out, tag, v);
        }
        (Conv::ConnectDecimal { target, scale }, Token::String) => {
            let s = sc.string()?;
            let bytes = BASE64
                .decode(&s)
                .map_err(|_| value_error(column, "connect decimal is not base64".into()))?;
            let w = checked(column, Wide::from_be_twos(&bytes))?;
            put_decimal(out, tag, w, *scale, *target, column)?;
        }
        (Conv::ConnectDecimal { target, .. }, Token::Number)
        | (Conv::Decimal(target), Token::Number | Token::String) => {
            let text = if token == Token::Number {
                std::borrow::Cow::Borrowed(sc.number()?.text())
            } else {
                sc.text()?
            };
            let (w, scale) = checked(column, Wide::parse_decimal(&text))?;
            put_decimal(out, tag, w, scale, *target, column)?;
        }
        (Conv::Bool, Token::True | Token::False) => {
            let b = sc.boolean()?;
            put_i64(out, tag, b as i64);
        }
        (Conv::Bytes, Token::String) => {
            let s = sc.string()?;
            // As protojson reads bytes: either alphabet, padded in full or not at all.
            let (standard, url_safe) = if s.ends_with(b"=") {
                (STANDARD, URL_SAFE)
            } else {
                (STANDARD_NO_PAD, URL_SAFE_NO_PAD)
            };
            let bytes = standard
                .decode(&s)
                .or_else(|_| url_safe.decode(&s))
                .map_err(|_| value_error(column, "string is not base64".into()))?;
            put_len_delimited(out, tag, &bytes);
        }
        (Conv::Json, _) => {
            let text = sc.skip_reference(depth)?;
            put_len_delimited(out, tag, text);
        }
        (Conv::Timestamp(_), Token::String) => {
            let s = sc.text()?;
            let v = checked(column, text::timestamp(&s))?;
            put_i64(out, tag, checked(column, timestamp_micros(Some(v)))?);
        }
        (Conv::Timestamp(IntUnit::Micros), Token::Number) => {
            let v = integer(sc.number()?, column)?;
            put_i64(out, tag, checked(column, timestamp_micros(Some(v)))?);
        }
        (Conv::Date(_), Token::String) => {
            let s = sc.text()?;
            let days = checked(column, text::date(&s))?;
            put_i64(out, tag, days);
        }
        (Conv::Date(IntUnit::Days), Token::Number) => {
            let v = integer(sc.number()?, column)?;
            let days = i32::try_from(v)
                .map_err(|_| value_error(column, format!("{v} days is out of range")))?;
            put_i64(out, tag, checked(column, date_days(days))? as i64);
        }
        (Conv::Time, Token::String) => {
            let s = sc.text()?;
            let micros = checked(column, text::time(&s))?;
            put_i64(out, tag, checked(column, time_packed(micros))?);
        }
        (Conv::DateTime, Token::String) => {
            let s = sc.text()?;
            let local = checked(column, text::datetime(&s))?;
            put_i64(out, tag, checked(column, datetime_packed(Some(local)))?);
        }
        (Conv::Record(op), Token::Object) => object(op, sc, depth, out)?,
        (Conv::Named(n), _) => named_exec::write(*n, f, token, sc, depth, out)?,
        (Conv::Value(op), _) if super::exec::takes(op, token) => {
            super::exec::transformed(op, f, token, sc, out)?
        }
        _ => return Err(type_error(f, token, sc, depth)),
    }
    Ok(())
}

/// A value of the wrong JSON type; malformed JSON in it is reported first (through the recursive
/// skip).
fn type_error(f: &FieldOp, token: Token, sc: &mut Scanner<'_>, depth: usize) -> RecordError {
    if let Err(e) = sc.skip_reference(depth) {
        return e;
    }
    RecordError::JsonType {
        column: f.column.clone(),
        found: token.name(),
        column_type: column_type(&f.conv),
    }
}
