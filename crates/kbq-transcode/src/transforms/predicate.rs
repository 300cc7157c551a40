//! `filter` on a field's value (docs/mapping.md, "Transforms"): the literals are checked against
//! the type the writer schema declares for the field when the plan is compiled (a literal is
//! compared as its own type, never converted), and each format's reader (`field_path.rs`) hands
//! over the value it found for [`ValueTest::drops`] to compare.

use std::sync::Arc;

use super::values::{Scalar, Source};
use super::{FilterRecords, Literal};
use crate::error::RecordError;

/// One compiled field filter of a plan: the record is dropped when its field's value passes
/// the test (with `negate`, when it does not).
#[derive(Debug, Clone)]
pub(crate) struct ValueTest {
    /// The field path as the YAML writes it, for a record's error.
    field: Arc<str>,
    cond: Cond,
    negate: bool,
}

#[derive(Debug, Clone)]
enum Cond {
    /// `is_null: true` (the field is null or absent) or `is_null: false`.
    IsNull(bool),
    /// `equals` (one value) or `in`: the value is one of these.
    OneOf(Box<[Want]>),
}

/// A literal, as the field's type reads it.
#[derive(Debug, Clone, PartialEq)]
enum Want {
    Text(Box<[u8]>),
    Int(i64),
    /// A float or double field's value (an integer literal only where the type holds it
    /// exactly).
    Float(f64),
    Bool(bool),
}

impl ValueTest {
    /// The test of `f` (checked by [`super::check`]: a field and one condition) for a field
    /// of kind `source`; `nullable` says whether the field can be null or absent at all. The
    /// reason a literal does not fit the field's type.
    pub(crate) fn compile(
        f: &FilterRecords,
        source: Source,
        nullable: bool,
    ) -> Result<ValueTest, String> {
        let field: Arc<str> = f.field.as_deref().unwrap_or_default().into();
        let cond = if let Some(is_null) = f.is_null {
            if !nullable {
                return Err(format!(
                    "field {field} is never null (it is not an Avro union with null, nor a Protobuf field with presence, which reads as its default when absent): is_null would {} hold",
                    if is_null { "never" } else { "always" }
                ));
            }
            Cond::IsNull(is_null)
        } else {
            let literals = match (&f.equals, &f.one_of) {
                (Some(e), _) => std::slice::from_ref(e),
                (None, Some(list)) => list.as_slice(),
                (None, None) => unreachable!("check: a field filter has a condition"),
            };
            let wants = (literals.iter())
                .map(|l| want(l, source, &field))
                .collect::<Result<Vec<_>, _>>()?;
            Cond::OneOf(wants.into_boxed_slice())
        };
        Ok(ValueTest {
            field,
            cond,
            negate: f.negate,
        })
    }

    /// Whether the record is dropped, given its field's value (`None`: null or absent). A
    /// value that cannot be compared exactly is the record's error.
    pub(crate) fn drops(&self, value: Option<Scalar<'_>>) -> Result<bool, RecordError> {
        let holds = match (&self.cond, value) {
            (Cond::IsNull(is_null), v) => v.is_none() == *is_null,
            (Cond::OneOf(_), None) => false,
            (Cond::OneOf(wants), Some(v)) => {
                let mut any = false;
                for w in wants.iter() {
                    if equal(v, w).map_err(|reason| RecordError::Value {
                        column: self.field.clone(),
                        reason,
                    })? {
                        any = true;
                        break;
                    }
                }
                any
            }
        };
        Ok(holds != self.negate)
    }

    /// The field path, for a record's error.
    pub(crate) fn field(&self) -> &Arc<str> {
        &self.field
    }
}

/// `l` as a field of kind `source` holds it, or why it cannot: the YAML's type must be the
/// field's, and the value one the type can hold.
fn want(l: &Literal, source: Source, field: &str) -> Result<Want, String> {
    let name = source.describe();
    let mismatch = || {
        Err(format!(
            "{} is {}, and field {field} is {name}: a literal is compared as its own type, never converted",
            show(l),
            literal_kind(l)
        ))
    };
    let out_of_range =
        |v: &dyn std::fmt::Display| Err(format!("{v} does not fit field {field}, which is {name}"));
    match (source, l) {
        (Source::Str | Source::Any, Literal::Text(t)) => Ok(Want::Text(t.as_bytes().into())),
        (Source::Bool | Source::Any, Literal::Bool(b)) => Ok(Want::Bool(*b)),
        (Source::Int64(_) | Source::Number | Source::Any, Literal::Int(i)) => Ok(Want::Int(*i)),
        (Source::Int32(_), Literal::Int(i)) if i32::try_from(*i).is_ok() => Ok(Want::Int(*i)),
        (Source::UInt32(_), Literal::Int(i)) if u32::try_from(*i).is_ok() => Ok(Want::Int(*i)),
        (Source::UInt64(_), Literal::Int(i)) if *i >= 0 => Ok(Want::Int(*i)),
        (Source::Int32(_) | Source::UInt32(_) | Source::UInt64(_), Literal::Int(i)) => {
            out_of_range(i)
        }
        (Source::Float32(_), Literal::Int(i)) => {
            let f = *i as f32 as f64;
            if f as i128 == *i as i128 {
                Ok(Want::Float(f))
            } else {
                out_of_range(i)
            }
        }
        (Source::Float64(_), Literal::Int(i)) => {
            let f = *i as f64;
            if f as i128 == *i as i128 {
                Ok(Want::Float(f))
            } else {
                out_of_range(i)
            }
        }
        (Source::Float32(_) | Source::Float64(_), Literal::Float(x)) if !x.is_finite() => {
            Err(format!("{x} equals no value of field {field}"))
        }
        (Source::Float32(_), Literal::Float(x)) if (*x as f32) as f64 != *x => out_of_range(x),
        (Source::Float32(_) | Source::Float64(_), Literal::Float(x)) => Ok(Want::Float(*x)),
        (Source::Bytes | Source::Decimal { .. } | Source::Other(_), _) => Err(format!(
            "field {field} is {name}: a filter compares text, integers, floats and booleans; on {name} it takes is_null only"
        )),
        (Source::Number | Source::Any, Literal::Float(_)) => Err(format!(
            "{} is a number with a fraction, and field {field} is {name}: its decimal text and the float would be compared by a guess; compare a float or double field, or an integer",
            show(l)
        )),
        _ => mismatch(),
    }
}

fn literal_kind(l: &Literal) -> &'static str {
    match l {
        Literal::Bool(_) => "a boolean",
        Literal::Int(_) => "an integer",
        Literal::Float(_) => "a number with a fraction",
        Literal::Text(_) => "text",
    }
}

fn show(l: &Literal) -> String {
    match l {
        Literal::Bool(b) => b.to_string(),
        Literal::Int(i) => i.to_string(),
        Literal::Float(x) => x.to_string(),
        Literal::Text(t) => format!("{t:?}"),
    }
}

/// Whether `v` is `w`. Schemaless JSON's values come with their own kind: a value of another
/// kind than the literal's is not equal to it.
fn equal(v: Scalar<'_>, w: &Want) -> Result<bool, String> {
    Ok(match (v, w) {
        (Scalar::Str(b), Want::Text(t)) => *b == **t,
        (Scalar::Int(i), Want::Int(j)) => i == *j,
        (Scalar::UInt(u), Want::Int(j)) => u64::try_from(*j) == Ok(u),
        (Scalar::F32(f), Want::Float(x)) => f as f64 == *x,
        (Scalar::F64(f), Want::Float(x)) => f == *x,
        (Scalar::Bool(b), Want::Bool(c)) => b == *c,
        (Scalar::Number(text), Want::Int(j)) => decimal_is(text, *j)
            .ok_or_else(|| format!("{text} is not a number (the filter compares {j})"))?,
        _ => false,
    })
}

/// Whether the JSON number `text` is exactly the integer `j` (`5`, `5.0` and `5e0` are; `5.5`
/// is not); `None` when `text` is not a JSON number.
fn decimal_is(text: &str, j: i64) -> Option<bool> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() || !(int.bytes().chain(frac.bytes())).all(|b| b.is_ascii_digit()) {
        return None;
    }
    // value = digits × 10^exp, digits without leading or trailing zeros.
    let digits: String = int.chars().chain(frac.chars()).collect();
    let mut exp = exponent.checked_sub(frac.len() as i64)?;
    let trimmed = digits.trim_start_matches('0');
    let significant = trimmed.trim_end_matches('0');
    if significant.is_empty() {
        return Some(j == 0);
    }
    exp = exp.checked_add((trimmed.len() - significant.len()) as i64)?;
    if exp < 0 || significant.len() as i64 + exp > 20 || negative != (j < 0) {
        return Some(false);
    }
    let want = j.unsigned_abs().to_string();
    Some(
        want.len() as i64 == significant.len() as i64 + exp
            && want.starts_with(significant)
            && want[significant.len()..].bytes().all(|b| b == b'0'),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_number_is_an_integer_only_where_its_value_is_exactly_one() {
        for (text, j, is) in [
            ("5", 5, true),
            ("5.0", 5, true),
            ("5e0", 5, true),
            ("0.5e1", 5, true),
            ("50E-1", 5, true),
            ("5.5", 5, false),
            ("-5", 5, false),
            ("-5", -5, true),
            ("-0", 0, true),
            ("0.0e9", 0, true),
            ("1e400", 5, false),
            ("9223372036854775807", i64::MAX, true),
            ("-9223372036854775808", i64::MIN, true),
            ("92233720368547758070e-1", i64::MAX, true),
            ("50", 5, false),
        ] {
            assert_eq!(decimal_is(text, j), Some(is), "{text} vs {j}");
        }
        assert_eq!(decimal_is("x", 5), None);
    }
}
