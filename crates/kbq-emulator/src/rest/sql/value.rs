//! The values a query computes with: a stored cell read into a typed value, BigQuery's
//! comparisons between them, and a value written back as a REST result cell.

use std::cmp::Ordering;

use base64::Engine as _;
use serde_json::{Value as Json, json};

use crate::rows::format_float;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};

/// One SQL value. TIMESTAMP is kept as integer microseconds (the cell rendered with
/// `useInt64Timestamp`); DATE, TIME, DATETIME, JSON and GEOGRAPHY as their canonical text, which
/// orders as the values do for the first three.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum V {
    Null,
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Bytes(Vec<u8>),
    /// NUMERIC or BIGNUMERIC, as decimal text.
    Num(String),
    Timestamp(i64),
    /// DATE, TIME, DATETIME, JSON, GEOGRAPHY: its type and canonical text.
    Text(FieldType, String),
    Array(Vec<V>),
    /// A STRUCT cell, passed through untouched (the emulator computes nothing on it).
    Struct(Json),
}

/// Reads a rendered cell (`{"v": …}` content) of a column into a value.
pub(super) fn read_cell(cell: &Json, field: &TableFieldSchema) -> V {
    if cell.is_null() {
        return V::Null;
    }
    if field.mode() == Mode::Repeated {
        let items = cell.as_array().map(Vec::as_slice).unwrap_or_default();
        let mut one = field.clone();
        one.mode = Some(Mode::Nullable);
        return V::Array(items.iter().map(|i| read_cell(&i["v"], &one)).collect());
    }
    let text = cell.as_str().unwrap_or_default();
    match &field.field_type {
        FieldType::Record => V::Struct(cell.clone()),
        FieldType::Int64 => text.parse().map_or(V::Null, V::Int),
        FieldType::Float64 => V::Float(match text {
            "NaN" => f64::NAN,
            "Infinity" => f64::INFINITY,
            "-Infinity" => f64::NEG_INFINITY,
            other => other.parse().unwrap_or(f64::NAN),
        }),
        FieldType::Bool => V::Bool(text == "true"),
        FieldType::String => V::Str(text.to_string()),
        FieldType::Bytes => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_or(V::Null, V::Bytes),
        FieldType::Numeric | FieldType::BigNumeric => V::Num(text.to_string()),
        FieldType::Timestamp => text.parse().map_or(V::Null, V::Timestamp),
        other => V::Text(other.clone(), text.to_string()),
    }
}

/// The value as a REST result cell, TIMESTAMP as integer microseconds.
pub(super) fn write_cell(v: &V) -> Json {
    match v {
        V::Null => Json::Null,
        V::Int(i) => json!(i.to_string()),
        V::Float(f) => json!(format_float(*f)),
        V::Bool(b) => json!(b.to_string()),
        V::Str(s) | V::Num(s) | V::Text(_, s) => json!(s),
        V::Bytes(b) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        V::Timestamp(t) => json!(t.to_string()),
        V::Array(items) => Json::Array(
            items
                .iter()
                .map(|i| json!({ "v": write_cell(i) }))
                .collect(),
        ),
        V::Struct(j) => j.clone(),
    }
}

/// BigQuery's comparison of two non-NULL values of comparable types (the types were checked
/// when the query was planned). `None` when unordered: a NaN against anything but in ORDER BY.
pub(super) fn compare(a: &V, b: &V) -> Option<Ordering> {
    match (a, b) {
        (V::Int(x), V::Int(y)) => Some(x.cmp(y)),
        (V::Int(_) | V::Float(_), V::Int(_) | V::Float(_)) => as_f64(a).partial_cmp(&as_f64(b)),
        (V::Num(x), V::Num(y)) => Some(compare_decimal(x, y)),
        (V::Num(x), V::Int(y)) => Some(compare_decimal(x, &y.to_string())),
        (V::Int(x), V::Num(y)) => Some(compare_decimal(&x.to_string(), y)),
        (V::Num(x), V::Float(y)) => x.parse::<f64>().ok()?.partial_cmp(y),
        (V::Float(x), V::Num(y)) => x.partial_cmp(&y.parse::<f64>().ok()?),
        (V::Bool(x), V::Bool(y)) => Some(x.cmp(y)),
        (V::Str(x), V::Str(y)) => Some(x.cmp(y)),
        (V::Bytes(x), V::Bytes(y)) => Some(x.cmp(y)),
        (V::Timestamp(x), V::Timestamp(y)) => Some(x.cmp(y)),
        (V::Text(t, x), V::Text(u, y)) if t == u => Some(x.cmp(y)),
        _ => None,
    }
}

/// The total order of ORDER BY, MIN and MAX: NULL first, then NaN, then the other values.
pub(super) fn order(a: &V, b: &V) -> Ordering {
    let rank = |v: &V| match v {
        V::Null => 0,
        V::Float(f) if f.is_nan() => 1,
        _ => 2,
    };
    rank(a)
        .cmp(&rank(b))
        .then_with(|| compare(a, b).unwrap_or(Ordering::Equal))
}

pub(super) fn as_f64(v: &V) -> f64 {
    match v {
        V::Int(i) => *i as f64,
        V::Float(f) => *f,
        _ => f64::NAN,
    }
}

/// A key equal for values COUNT(DISTINCT) counts once: `-0.0` is `0.0`, every NaN is one.
pub(super) fn distinct_key(v: &V) -> String {
    match v {
        V::Float(f) if f.is_nan() => "f:NaN".into(),
        V::Float(f) if *f == 0.0 => "f:0".into(),
        V::Num(n) => format!("n:{}", normalise_decimal(n)),
        other => format!("{other:?}"),
    }
}

fn normalise_decimal(s: &str) -> String {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let int = int.trim_start_matches('0');
    let frac = frac.trim_end_matches('0');
    let zero = int.is_empty() && frac.is_empty();
    format!("{}{int}.{frac}", if neg && !zero { "-" } else { "" })
}

/// Compares two plain decimal strings (`-12.5`, `3`).
pub(super) fn compare_decimal(a: &str, b: &str) -> Ordering {
    let split = |s: &str| {
        let (neg, digits) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        let int = int.trim_start_matches('0').to_string();
        let frac = frac.trim_end_matches('0').to_string();
        let zero = int.is_empty() && frac.is_empty();
        (neg && !zero, int, frac)
    };
    let (an, ai, af) = split(a);
    let (bn, bi, bf) = split(b);
    let magnitude = ai
        .len()
        .cmp(&bi.len())
        .then_with(|| ai.cmp(&bi))
        .then_with(|| af.cmp(&bf));
    match (an, bn) {
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
        (false, false) => magnitude,
        (true, true) => magnitude.reverse(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_compare_by_value() {
        assert_eq!(compare_decimal("10", "9.99"), Ordering::Greater);
        assert_eq!(compare_decimal("-10", "-9.99"), Ordering::Less);
        assert_eq!(compare_decimal("0.5", "0.50"), Ordering::Equal);
        assert_eq!(compare_decimal("-0", "0"), Ordering::Equal);
        assert_eq!(compare_decimal("-1", "0.1"), Ordering::Less);
        assert_eq!(
            distinct_key(&V::Num("1.50".into())),
            distinct_key(&V::Num("01.5".into()))
        );
    }

    #[test]
    fn order_puts_null_then_nan_first_and_compares_numbers_as_numbers() {
        assert_eq!(order(&V::Int(10), &V::Int(9)), Ordering::Greater);
        assert_eq!(order(&V::Null, &V::Float(f64::NAN)), Ordering::Less);
        assert_eq!(
            order(&V::Float(f64::NAN), &V::Float(-1e300)),
            Ordering::Less
        );
        assert_eq!(
            order(&V::Timestamp(-5), &V::Timestamp(-40)),
            Ordering::Greater
        );
        assert_eq!(compare(&V::Int(1), &V::Float(1.0)), Some(Ordering::Equal));
        assert_eq!(compare(&V::Float(f64::NAN), &V::Float(1.0)), None);
    }
}
