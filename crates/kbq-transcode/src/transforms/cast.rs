//! `cast`: a field's value written as another scalar type, only where that is exact
//! (docs/mapping.md, "Transforms"). The pair of types decides at compile time whether any value
//! could lose a digit (int64 into FLOAT64, a double into INT64 or NUMERIC, a decimal of a
//! greater scale than its column's): such a cast is refused with both types named. A value that
//! cannot be written exactly (text that is not a number, an unsigned value past INT64, a decimal
//! past NUMERIC's range) is its record's error, never rounded.

use prost_types::field_descriptor_proto::Type;

use super::values::{JsonKind, Scalar, Source};
use super::{CastField, CastType};
use crate::compile::column_type;
use crate::convert::{DecimalTarget, Wide};
use crate::proto::{
    Tag, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT, close_len, open_len, put_len_delimited, put_varint,
};
use kbq_core::table_schema::{FieldType, TableFieldSchema};

/// Doubles hold every integer up to 2^53 exactly.
const EXACT_IN_DOUBLE: u64 = 1 << 53;

/// A compiled cast: what the field is and what its column takes.
#[derive(Debug, Clone)]
pub(crate) struct Cast {
    from: Source,
    to: CastType,
}

impl Cast {
    /// The cast of a field of kind `source` into `column`, with the column field's proto type
    /// and wire type; or why not (both types named).
    pub(crate) fn compile(
        c: &CastField,
        source: Source,
        column: &TableFieldSchema,
    ) -> Result<(Cast, (Type, u32)), String> {
        let (fits, ty) = match c.to {
            CastType::Int64 => (FieldType::Int64, (Type::Int64, WIRE_VARINT)),
            CastType::Numeric => (FieldType::Numeric, (Type::Bytes, WIRE_LEN)),
            CastType::BigNumeric => (FieldType::BigNumeric, (Type::Bytes, WIRE_LEN)),
            CastType::Float64 => (FieldType::Float64, (Type::Double, WIRE_FIXED64)),
            CastType::String => (FieldType::String, (Type::String, WIRE_LEN)),
            CastType::Bool => (FieldType::Bool, (Type::Bool, WIRE_VARINT)),
        };
        if column.field_type != fits {
            return Err(format!(
                "the cast writes {}, and the column is {}",
                c.to.name(),
                column_type(column)
            ));
        }
        if let Err(why) = exact(source, c.to) {
            return Err(format!(
                "the field is {}, and a cast to {} {why}",
                source.describe(),
                c.to.name()
            ));
        }
        Ok((
            Cast {
                from: source,
                to: c.to,
            },
            ty,
        ))
    }

    pub(crate) fn label(&self) -> &'static str {
        match self.to {
            CastType::Int64 => "cast to INT64",
            CastType::Numeric => "cast to NUMERIC",
            CastType::BigNumeric => "cast to BIGNUMERIC",
            CastType::Float64 => "cast to FLOAT64",
            CastType::String => "cast to STRING",
            CastType::Bool => "cast to BOOL",
        }
    }

    /// Whether a JSON value of `kind` can be cast (schemaless JSON: any the types allow).
    pub(crate) fn takes(&self, kind: JsonKind) -> bool {
        let source = match (self.from, kind) {
            (Source::Any, JsonKind::String) => Source::Str,
            (Source::Any, JsonKind::Number) => Source::Number,
            (Source::Any, JsonKind::Bool) => Source::Bool,
            (s, JsonKind::String) => return s == Source::Str,
            (s, JsonKind::Bool) => return s == Source::Bool,
            (s, JsonKind::Number) => {
                return !matches!(s, Source::Str | Source::Bool | Source::Bytes);
            }
        };
        exact(source, self.to).is_ok()
    }

    /// Writes `v` into the field `tag` as the column's type, or why it cannot be written exactly.
    pub(crate) fn write(&self, v: Scalar<'_>, tag: Tag, out: &mut Vec<u8>) -> Result<(), String> {
        // A Protobuf bool is read as the integer of its varint.
        let v = match (self.from, v) {
            (Source::Bool, Scalar::Int(i)) => Scalar::Bool(i != 0),
            _ => v,
        };
        match self.to {
            CastType::Int64 => {
                let i = int64(v)?;
                tag.put(out);
                put_varint(out, i as u64);
            }
            CastType::Numeric | CastType::BigNumeric => {
                let target = match self.to {
                    CastType::Numeric => DecimalTarget::Numeric,
                    _ => DecimalTarget::BigNumeric,
                };
                let (mut w, scale) = self.decimal(v)?;
                w.rescale(scale, target.scale())?;
                let at = open_len(out, tag);
                w.write_le(target, out)?;
                close_len(out, at);
            }
            CastType::Float64 => {
                let f = float64(v)?;
                tag.put(out);
                out.extend_from_slice(&f.to_le_bytes());
            }
            CastType::String => self.string(v, tag, out)?,
            CastType::Bool => {
                let b = match v {
                    Scalar::Bool(b) => b,
                    Scalar::Str(b"true") => true,
                    Scalar::Str(b"false") => false,
                    Scalar::Str(b) => {
                        return Err(format!(
                            "{:?} is not true or false",
                            String::from_utf8_lossy(b)
                        ));
                    }
                    other => unreachable!("compile: no {other:?} to BOOL"),
                };
                tag.put(out);
                out.push(b as u8);
            }
        }
        Ok(())
    }

    /// `v` as an unscaled decimal and its scale.
    fn decimal(&self, v: Scalar<'_>) -> Result<(Wide, u32), String> {
        Ok(match v {
            Scalar::Int(i) => (Wide::from_i64(i), 0),
            Scalar::UInt(u) => (Wide::from_u64(u), 0),
            Scalar::Str(b) => Wide::parse_decimal(text(b)?)?,
            Scalar::Number(s) => Wide::parse_decimal(s)?,
            Scalar::Decimal(b) => (Wide::from_be_twos(b)?, self.scale()),
            other => unreachable!("compile: no {other:?} to a decimal"),
        })
    }

    /// The scale of a decimal field.
    fn scale(&self) -> u32 {
        match self.from {
            Source::Decimal { scale } => scale,
            _ => unreachable!("a decimal's bytes come with its scale"),
        }
    }

    /// `v`'s canonical text into the field `tag`.
    fn string(&self, v: Scalar<'_>, tag: Tag, out: &mut Vec<u8>) -> Result<(), String> {
        let mut buf = [0u8; 40];
        let owned: String;
        let written: &[u8] = match v {
            Scalar::Str(b) => b,
            Scalar::Number(s) => s.as_bytes(),
            Scalar::Bool(true) => b"true",
            Scalar::Bool(false) => b"false",
            Scalar::Int(i) => format_to(&mut buf, format_args!("{i}")),
            Scalar::UInt(u) => format_to(&mut buf, format_args!("{u}")),
            Scalar::F32(f) => {
                owned = float_text(f as f64, f.to_string());
                owned.as_bytes()
            }
            Scalar::F64(f) => {
                owned = float_text(f, f.to_string());
                owned.as_bytes()
            }
            Scalar::Decimal(b) => {
                owned = Wide::from_be_twos(b)?.to_decimal_string(self.scale());
                owned.as_bytes()
            }
            Scalar::Bytes(_) => unreachable!("compile: no bytes to STRING"),
        };
        put_len_delimited(out, tag, written);
        Ok(())
    }
}

/// `v` as INT64, exactly.
fn int64(v: Scalar<'_>) -> Result<i64, String> {
    Ok(match v {
        Scalar::Int(i) => i,
        Scalar::UInt(u) => {
            i64::try_from(u).map_err(|_| format!("{u} is past INT64's largest value"))?
        }
        Scalar::Str(b) => {
            let s = text(b)?;
            s.parse::<i64>()
                .map_err(|_| format!("{s:?} is not an integer of INT64's range"))?
        }
        Scalar::Number(s) => number_i64(s)?,
        Scalar::Decimal(b) => {
            let s = Wide::from_be_twos(b)?.to_decimal_string(0);
            s.parse::<i64>()
                .map_err(|_| format!("{s} is past the range of INT64"))?
        }
        other => unreachable!("compile: no {other:?} to INT64"),
    })
}

/// `v` as FLOAT64, exactly (a JSON number: as JSON's numbers are read, integers only to 2^53).
fn float64(v: Scalar<'_>) -> Result<f64, String> {
    Ok(match v {
        Scalar::Int(i) => i as f64,
        Scalar::UInt(u) => u as f64,
        Scalar::F32(f) => f as f64,
        Scalar::F64(f) => f,
        Scalar::Number(s) => {
            if let Ok(i) = s.parse::<i64>()
                && i.unsigned_abs() > EXACT_IN_DOUBLE
            {
                return Err(format!(
                    "{s} is past 2^53, beyond which FLOAT64 does not hold every integer"
                ));
            }
            s.parse::<f64>().expect("json number grammar")
        }
        other => unreachable!("compile: no {other:?} to FLOAT64"),
    })
}

/// Why a cast of `from` into `to` could lose digits or has no exact meaning, completing
/// "a cast to X …"; `Ok` when every value either converts exactly or is refused by itself.
fn exact(from: Source, to: CastType) -> Result<(), String> {
    use CastType as T;
    use Source as S;
    match (from, to) {
        (S::Any, _) => Ok(()),
        (S::Other(_), _) => Err("is a cast between scalar types".into()),
        (S::Bytes, _) => Err("would read bytes as text or a number: a guess".into()),
        (S::Str, T::Float64) => Err(
            "would round most decimal fractions to the nearest double: cast to NUMERIC or BIGNUMERIC"
                .into(),
        ),
        (S::Str, _) => Ok(()),
        (S::Bool, T::Bool | T::String) => Ok(()),
        (S::Bool, _) => Err("would give a boolean a number nobody declared".into()),
        (_, T::Bool) => Err("has no exact meaning: only text true/false or a boolean is one".into()),
        (S::Int32(_) | S::UInt32(_), _) => Ok(()),
        (S::Int64(_) | S::UInt64(_), T::Float64) => Err(
            "can lose digits: FLOAT64 holds every integer only up to 2^53 (cast to NUMERIC)".into(),
        ),
        (S::Int64(_) | S::UInt64(_), _) => Ok(()),
        (S::Float32(_) | S::Float64(_), T::Float64 | T::String) => Ok(()),
        (S::Float32(_) | S::Float64(_), _) => Err(
            "can lose digits: a binary floating-point value is not a decimal (cast to STRING: its text reads back as the same value)"
                .into(),
        ),
        (S::Number, T::Float64 | T::String | T::Numeric | T::BigNumeric | T::Int64) => Ok(()),
        (S::Decimal { scale }, T::Numeric | T::BigNumeric) => {
            let target = match to {
                T::Numeric => DecimalTarget::Numeric,
                _ => DecimalTarget::BigNumeric,
            };
            if scale > target.scale() {
                Err(format!(
                    "can lose digits: {} holds {} fractional digits",
                    to.name(),
                    target.scale()
                ))
            } else {
                Ok(())
            }
        }
        (S::Decimal { .. }, T::String) => Ok(()),
        (S::Decimal { scale: 0 }, T::Int64) => Ok(()),
        (S::Decimal { .. }, T::Int64) => Err(
            "can lose digits: the decimal has a fraction, which INT64 does not (cast to NUMERIC)"
                .into(),
        ),
        (S::Decimal { .. }, T::Float64) => Err(
            "can lose digits: a double holds about 16 significant digits (cast to NUMERIC)".into(),
        ),
    }
}

/// A JSON number's integer value, also written with an exponent (`1e3`); a fraction, or a value
/// past INT64, is refused.
pub(super) fn number_i64(s: &str) -> Result<i64, String> {
    if let Ok(i) = s.parse::<i64>() {
        return Ok(i);
    }
    let (mut w, scale) = Wide::parse_decimal(s)?;
    w.rescale(scale, 0)
        .map_err(|_| format!("{s} is not an integer"))?;
    let digits = w.to_decimal_string(0);
    digits
        .parse::<i64>()
        .map_err(|_| format!("{s} is past the range of INT64"))
}

fn text(b: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(b).map_err(|_| "string is not valid utf-8".into())
}

/// `args` written into `buf` (an integer's text: at most 20 bytes).
fn format_to<'b>(buf: &'b mut [u8; 40], args: std::fmt::Arguments<'_>) -> &'b [u8] {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    cursor.write_fmt(args).expect("an integer fits 40 bytes");
    let n = cursor.position() as usize;
    &buf[..n]
}

/// The canonical text of a double: the shortest decimal that reads back as the same value,
/// without an exponent (Rust's `Display`), and `NaN`, `Infinity`, `-Infinity`.
fn float_text(f: f64, display: String) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        display
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_written_as_the_shortest_text_that_reads_back() {
        assert_eq!(float_text(0.1, 0.1f64.to_string()), "0.1");
        assert_eq!(float_text(0.1f32 as f64, 0.1f32.to_string()), "0.1");
        assert_eq!(
            float_text(1e21, 1e21f64.to_string()),
            "1000000000000000000000"
        );
        assert_eq!(float_text(f64::NEG_INFINITY, String::new()), "-Infinity");
    }

    #[test]
    fn a_pair_of_types_that_can_lose_digits_is_refused() {
        assert!(exact(Source::Int64("long"), CastType::Float64).is_err());
        assert!(exact(Source::Float64("double"), CastType::Int64).is_err());
        assert!(exact(Source::Float64("double"), CastType::Numeric).is_err());
        assert!(exact(Source::Decimal { scale: 10 }, CastType::Numeric).is_err());
        assert!(exact(Source::Decimal { scale: 10 }, CastType::BigNumeric).is_ok());
        assert!(exact(Source::Int32("int"), CastType::Float64).is_ok());
    }
}
