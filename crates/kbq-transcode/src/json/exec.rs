//! Runs a JSON plan: one pass over the record's bytes with the tokenizer, each value written
//! straight into the row's proto field — no value tree. Keys are matched exactly as the column
//! spells them first (serializers write one spelling), then case-insensitively. The key after
//! the previous one's column is compared in place, before it is scanned as a string (most
//! serializers follow the schema's order); a decimal number of up to 18 digits is rescaled in an
//! `i128`, not in `Wide`. `reference.rs` is the executor without these, which the differential
//! tests compare this one with.

use std::sync::Arc;

use base64::Engine;
use base64::alphabet;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use super::keys::same;
use super::named_exec;
use super::ops::{Conv, FieldOp, IntUnit, Named, ObjectOp};
use super::scan::{Key, MAX_DEPTH, Number, Scanner, SmallNumber, Token, malformed};
use super::text;
use crate::RecordError;
use crate::convert::{Wide, date_days, datetime_packed, time_packed, timestamp_micros};
use crate::exec::{put_decimal, put_f64, put_i64, value_error};
use crate::proto::{Tag, close_len, open_len, put_len_delimited};
use crate::transforms::{JsonKind, Scalar, ValueOp};

/// Base64 of Kafka Connect's bytes (a Decimal, a geometry's WKB): padded by `JsonConverter`, taken
/// without padding too.
pub(super) const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

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
    loop {
        let expected = match op.plain_keys {
            true => op.fields.get(hint).map(|f| f.key.as_bytes()),
            false => None,
        };
        let i = match sc.next_key_or(first, expected)? {
            Key::End => break,
            Key::Expected => hint,
            Key::Other(key) => match find(op, &key, hint) {
                Some(i) => i,
                None => {
                    if op.unknown_is_error {
                        return Err(RecordError::JsonUnknownKey {
                            key: String::from_utf8_lossy(&key).into_owned(),
                        });
                    }
                    first = false;
                    sc.skip(depth + 1)?;
                    continue;
                }
            },
        };
        first = false;
        hint = i + 1;
        if !seen.mark(i) {
            return Err(RecordError::JsonDuplicateKey {
                key: op.fields[i].column.clone(),
            });
        }
        field(&op.fields[i], sc, depth + 1, out)?;
    }
    for &i in op.required.iter() {
        if !seen.has(i as usize) {
            return Err(RecordError::MissingRequired {
                column: op.fields[i as usize].column.clone(),
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
        return sc.skip(depth).map(|_| ());
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

/// A value of the wrong JSON type; malformed JSON in it is reported first.
pub(super) fn type_error(
    f: &FieldOp,
    token: Token,
    sc: &mut Scanner<'_>,
    depth: usize,
) -> RecordError {
    if let Err(e) = sc.skip(depth) {
        return e;
    }
    RecordError::JsonType {
        column: f.column.clone(),
        found: token.name(),
        column_type: column_type(&f.conv),
    }
}

pub(super) fn column_type(conv: &Conv) -> &'static str {
    match conv {
        Conv::Skip => "skipped",
        Conv::Int => "INT64",
        Conv::Float => "FLOAT64",
        Conv::Decimal(_) | Conv::ConnectDecimal { .. } => "NUMERIC/BIGNUMERIC",
        Conv::Bool => "BOOL",
        Conv::Str => "STRING",
        Conv::Bytes => "BYTES",
        Conv::Json => "JSON",
        Conv::Timestamp(_) => "TIMESTAMP",
        Conv::Date(_) => "DATE",
        Conv::Time => "TIME",
        Conv::DateTime => "DATETIME",
        Conv::Record(_) => "RECORD",
        Conv::Value(op) => op.label(),
        Conv::Named(n) => match n {
            Named::Timestamp(_) | Named::ZonedTimestamp => "TIMESTAMP",
            Named::DateTime(_) | Named::UtcDateTime => "DATETIME",
            Named::Time(_) | Named::UtcTime => "TIME",
            Named::UtcDate => "DATE",
            Named::VariableScaleDecimal(Some(_)) => "NUMERIC/BIGNUMERIC",
            Named::DecimalText { .. } | Named::VariableScaleDecimal(None) => "STRING",
            Named::JsonDocument => "JSON",
            Named::Wkb => "BYTES",
        },
    }
}

fn checked<T>(column: &Arc<str>, r: Result<T, String>) -> Result<T, RecordError> {
    r.map_err(|e| value_error(column, e))
}

/// A JSON integer (or an integral number such as `1e3`) as i64.
pub(super) fn integer(n: Number<'_>, column: &Arc<str>) -> Result<i64, RecordError> {
    if let Some(v) = n.value {
        return Ok(v);
    }
    if n.integer {
        return n
            .text()
            .parse::<i64>()
            .map_err(|_| value_error(column, format!("{} does not fit INT64", n.text())));
    }
    let v: f64 = n.text().parse().unwrap_or(f64::NAN);
    // Integral and exactly representable: |v| ≤ 2^53.
    if v.fract() == 0.0 && v.abs() <= 9_007_199_254_740_992.0 {
        Ok(v as i64)
    } else {
        Err(value_error(
            column,
            format!("{} is not an integer (or not exactly)", n.text()),
        ))
    }
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
            let v = match sc.small_int() {
                Some(v) => v,
                None => integer(sc.number()?, column)?,
            };
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
            let at = sc.pos;
            let v = match sc.small_number().and_then(small_float) {
                Some(v) => v,
                None => {
                    sc.pos = at;
                    let n = sc.number()?;
                    n.text().parse().expect("json number grammar")
                }
            };
            put_f64(out, tag, v);
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
        (Conv::ConnectDecimal { target, .. } | Conv::Decimal(target), Token::Number) => {
            let at = sc.pos;
            if let Some(v) = sc.small_number().and_then(|n| rescaled(n, target.scale())) {
                put_small_decimal(out, tag, v);
                return Ok(());
            }
            sc.pos = at;
            let n = sc.number()?;
            match small_decimal(n.bytes, target.scale()) {
                Some(v) => put_small_decimal(out, tag, v),
                None => {
                    let (w, scale) = checked(column, Wide::parse_decimal(n.text()))?;
                    put_decimal(out, tag, w, scale, *target, column)?;
                }
            }
        }
        (Conv::Decimal(target), Token::String) => {
            let text = sc.text()?;
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
            let text = sc.skip(depth)?;
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
        (Conv::Value(op), _) if takes(op, token) => transformed(op, f, token, sc, out)?,
        _ => return Err(type_error(f, token, sc, depth)),
    }
    Ok(())
}

/// Whether a value transform (`transforms/values.rs`) takes a JSON value of this token; another
/// is a value of the wrong type, its record's error.
pub(super) fn takes(op: &ValueOp, token: Token) -> bool {
    let kind = match token {
        Token::String => JsonKind::String,
        Token::Number => JsonKind::Number,
        Token::True | Token::False => JsonKind::Bool,
        _ => return false,
    };
    op.takes(kind)
}

/// A value a transform rewrites, read as its token says.
pub(super) fn transformed(
    op: &ValueOp,
    f: &FieldOp,
    token: Token,
    sc: &mut Scanner<'_>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    match token {
        Token::String => {
            let s = sc.string()?;
            op.write(Scalar::Str(&s), f.tag, &f.column, out)
        }
        Token::Number => {
            let n = sc.number()?;
            op.write(Scalar::Number(n.text()), f.tag, &f.column, out)
        }
        _ => {
            let b = sc.boolean()?;
            op.write(Scalar::Bool(b), f.tag, &f.column, out)
        }
    }
}

/// 10^0 to 10^38.
const POW10: [i128; 39] = {
    let mut p = [1i128; 39];
    let mut i = 1;
    while i < 39 {
        p[i] = p[i - 1] * 10;
        i += 1;
    }
    p
};

/// The unscaled value at `to_scale` of a number (valid JSON number text) of at most 18 digits
/// without an exponent and with at most `to_scale` fractional digits: what `Wide` would make of
/// it, without `Wide`. `None` for any other number, which takes `Wide`'s path and its errors.
#[inline]
fn small_decimal(text: &[u8], to_scale: u32) -> Option<i128> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.len() > 19 {
        return None;
    }
    let (mut v, mut scale, mut dot) = (0i64, 0u32, false);
    for &c in digits {
        match c {
            b'0'..=b'9' => {
                v = v.wrapping_mul(10).wrapping_add((c - b'0') as i64);
                scale += dot as u32;
            }
            b'.' => dot = true,
            _ => return None,
        }
    }
    // Beyond 18 digits `v` may have wrapped: those take `Wide`'s path.
    if digits.len() - dot as usize > 18 || scale > to_scale {
        return None;
    }
    let v = (v as i128).checked_mul(POW10[(to_scale - scale) as usize])?;
    Some(if negative { -v } else { v })
}

/// A number read inline at the column's scale: what [`small_decimal`] makes of its text.
#[inline(always)]
fn rescaled(n: SmallNumber, to_scale: u32) -> Option<i128> {
    if n.scale > to_scale {
        return None;
    }
    (n.digits as i128).checked_mul(POW10[(to_scale - n.scale) as usize])
}

/// 10^0 to 10^22, each exactly an `f64`.
const POW10_F64: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The `f64` nearest a number read inline, as `str::parse` gives it, when its digits are an
/// integer below 2^53: that integer and 10^scale (scale at most 18) are exact `f64`s, so their
/// one IEEE division is correctly rounded, the nearest `f64` to the number (Clinger's fast
/// path). `None` for larger digits, which `parse` reads.
#[inline(always)]
fn small_float(n: SmallNumber) -> Option<f64> {
    if n.digits.unsigned_abs() >= 1 << 53 {
        return None;
    }
    let v = n.digits.unsigned_abs() as f64 / POW10_F64[n.scale as usize];
    // The sign apart, so that `-0` and `-0.0` are negative zero, as `parse` reads them.
    Some(if n.negative { -v } else { v })
}

/// A NUMERIC or BIGNUMERIC value: the fewest little-endian two's-complement bytes, as
/// `Wide::write_le` writes them.
#[inline]
fn put_small_decimal(out: &mut Vec<u8>, tag: Tag, v: i128) {
    let bits = 128 - (v ^ (v >> 127)).leading_zeros() as usize + 1;
    let n = bits.div_ceil(8);
    tag.put(out);
    out.push(n as u8);
    out.extend_from_slice(&v.to_le_bytes()[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Numbers of every length up to past what the inline paths take, every scale, both signs.
    fn numbers() -> Vec<String> {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(33);
        let mut out: Vec<String> = ["0", "-0", "0.0", "-0.0", "9007199254740993", "0.1", "0.3"]
            .map(String::from)
            .to_vec();
        for _ in 0..50_000 {
            let whole = rng.random_range(1..12);
            let fraction = rng.random_range(0..12);
            let digit = |rng: &mut StdRng| char::from(b'0' + rng.random_range(0..10u8));
            let mut s = String::new();
            if rng.random_bool(0.5) {
                s.push('-');
            }
            s.push(char::from(b'1' + rng.random_range(0..9u8)));
            (1..whole).for_each(|_| s.push(digit(&mut rng)));
            if fraction > 0 {
                s.push('.');
                (0..fraction).for_each(|_| s.push(digit(&mut rng)));
            }
            out.push(s);
        }
        out
    }

    #[test]
    fn an_inline_float_is_what_parse_reads() {
        for text in numbers() {
            let mut sc = Scanner::new(text.as_bytes());
            let Some(v) = sc.small_number().and_then(small_float) else {
                continue;
            };
            let parsed: f64 = text.parse().unwrap();
            assert_eq!(v.to_bits(), parsed.to_bits(), "{text}");
        }
    }

    #[test]
    fn an_inline_decimal_is_what_small_decimal_reads() {
        for text in numbers() {
            for to_scale in [0, 2, 9, 20, 38] {
                let mut sc = Scanner::new(text.as_bytes());
                let inline = sc.small_number().and_then(|n| rescaled(n, to_scale));
                let from_text = small_decimal(text.as_bytes(), to_scale);
                assert_eq!(inline, from_text, "{text} at scale {to_scale}");
            }
        }
    }
}
