//! Validation: one pass over a row's wire bytes against the compiled plan, with BigQuery's
//! FIELDS_ERROR texts on the error path.

use super::civil::{
    decode_packed_datetime, decode_packed_time, parse_date, parse_datetime, parse_time,
    parse_timestamp,
};
use super::decimal::{UnscaledDecimal, decimal_len, decimal_shape};
use super::wire::{
    PARSE_ERROR, Reader, Scalar, WIRE_I64, WIRE_LEN, WIRE_VARINT, Wire, scalar, wire_type_of,
};
use super::{ColumnKind, FieldPlan, MessagePlan, NumericSpec, ProtoKind, RowCodec, ValueCheck};

/// What is wrong with one value; turned into text only on the error path.
#[derive(Debug)]
pub(super) enum ValueError {
    Parse,
    MissingRequired,
    MaxLength {
        kind: &'static str,
        max: u64,
        got: u64,
    },
    InvalidUtf8,
    TimestampRange(i64),
    DateRange(i64),
    Int64Range(u64),
    BadEnum(i32),
    BadLiteral(&'static str),
    NumericRange,
    NotFinite,
    BadJson,
}

impl ValueError {
    pub(super) fn message(&self, field: &FieldPlan) -> String {
        let path = &field.path;
        match self {
            ValueError::Parse => format!("{PARSE_ERROR} on field {path}."),
            ValueError::MissingRequired => format!("Missing required field: {path}."),
            ValueError::MaxLength { kind, max, got } => format!(
                "Field {path}: {kind}({max}) has maximum length {max} but got a value with length {got} on field {path}."
            ),
            ValueError::InvalidUtf8 => format!("Invalid UTF-8 string on field {path}."),
            ValueError::TimestampRange(v) => {
                format!("Timestamp field value is out of range: {v} on field {path}.")
            }
            ValueError::DateRange(v) => {
                format!("Date field value is out of range: {v} on field {path}.")
            }
            ValueError::Int64Range(v) => {
                format!("Integer value is out of range for INT64: {v} on field {path}.")
            }
            ValueError::BadEnum(v) => format!("Invalid enum value: {v} on field {path}."),
            ValueError::BadLiteral(kind) => format!("Invalid {kind} value on field {path}."),
            ValueError::NumericRange => format!(
                "Invalid {} value: out of range on field {path}.",
                field.column.name()
            ),
            ValueError::NotFinite => format!(
                "Invalid {} value: NaN and infinity are not allowed on field {path}.",
                field.column.name()
            ),
            ValueError::BadJson => format!("Invalid JSON value on field {path}."),
        }
    }
}

/// Bitmask of required fields seen in one message instance; heap only for very wide messages.
pub(super) enum SeenRequired {
    Small(u128),
    Wide(Vec<bool>),
}

impl SeenRequired {
    pub(super) fn new(count: usize) -> Self {
        if count <= 128 {
            SeenRequired::Small(0)
        } else {
            SeenRequired::Wide(vec![false; count])
        }
    }

    #[inline]
    pub(super) fn set(&mut self, slot: u32) {
        match self {
            SeenRequired::Small(bits) => *bits |= 1u128 << slot,
            SeenRequired::Wide(v) => v[slot as usize] = true,
        }
    }

    pub(super) fn first_missing(&self, count: usize) -> Option<usize> {
        match self {
            SeenRequired::Small(bits) => {
                let all = if count == 128 {
                    u128::MAX
                } else {
                    (1u128 << count) - 1
                };
                let missing = all & !bits;
                (missing != 0).then(|| missing.trailing_zeros() as usize)
            }
            SeenRequired::Wide(v) => v.iter().position(|seen| !seen),
        }
    }
}

pub(super) const MAX_DEPTH: u32 = 32;

impl RowCodec {
    /// Checks one serialized row; `Err` is the FIELDS_ERROR message of that row.
    pub fn validate(&self, row: &[u8]) -> Result<(), String> {
        self.validate_with(row, true)
    }

    /// [`RowCodec::validate`], optionally without the check that required top-level fields are
    /// set (a CDC DELETE row needs only its key columns).
    pub(super) fn validate_with(&self, row: &[u8], root_required: bool) -> Result<(), String> {
        validate_message(&self.root, row, 0, root_required).map_err(|(field, error)| match field {
            Some(field) => error.message(field),
            None => format!("{PARSE_ERROR}."),
        })
    }
}

pub(super) type Failure<'p> = (Option<&'p FieldPlan>, ValueError);

pub(super) fn validate_message<'p>(
    plan: &'p MessagePlan,
    bytes: &[u8],
    depth: u32,
    required: bool,
) -> Result<(), Failure<'p>> {
    if depth > MAX_DEPTH {
        return Err((None, ValueError::Parse));
    }
    let mut seen = SeenRequired::new(plan.required.len());
    let mut reader = Reader::new(bytes);
    while let Some((number, wire)) = reader.next().map_err(|()| (None, ValueError::Parse))? {
        // Unknown field numbers are kept as unknown fields by proto2 parsers; BigQuery ignores them.
        let Some(field) = plan.field(number) else {
            continue;
        };
        let expected = field.proto.wire_type();
        let actual = wire_type_of(&wire);
        if actual == expected {
            if field.proto == ProtoKind::Message {
                match (&field.message, wire) {
                    (Some(nested), Wire::Len(b)) => validate_message(nested, b, depth + 1, true)?,
                    (None, Wire::Len(b)) if field.column == ColumnKind::Timestamp => {
                        timestamp_message_micros(b).map_err(|e| (Some(field), e))?;
                    }
                    _ => {}
                }
            } else {
                match (field.check, wire) {
                    (ValueCheck::Nothing, _) => {}
                    (ValueCheck::Utf8, Wire::Len(b)) => {
                        if !b.is_ascii() && std::str::from_utf8(b).is_err() {
                            return Err((Some(field), ValueError::InvalidUtf8));
                        }
                    }
                    _ => check_value(field, wire).map_err(|e| (Some(field), e))?,
                }
            }
        } else if field.repeated && actual == WIRE_LEN && expected != WIRE_LEN {
            let Wire::Len(packed) = wire else {
                unreachable!("wire type checked above")
            };
            // Packed runs are walked even when their values need no check: a truncated run is
            // still a parse error.
            let check = field.check != ValueCheck::Nothing;
            for_each_packed(field.proto, packed, |w| {
                if check { check_value(field, w) } else { Ok(()) }
            })
            .map_err(|e| (Some(field), e))?;
        } else {
            return Err((Some(field), ValueError::Parse));
        }
        if let Some(slot) = field.required_slot {
            seen.set(slot);
        }
    }
    if let Some(missing) = seen.first_missing(plan.required.len()).filter(|_| required) {
        let field = &plan.fields[plan.required[missing] as usize];
        return Err((Some(field), ValueError::MissingRequired));
    }
    Ok(())
}

#[inline]
pub(super) fn for_each_packed<'a, E>(
    proto: ProtoKind,
    packed: &'a [u8],
    mut f: impl FnMut(Wire<'a>) -> Result<(), E>,
) -> Result<(), E>
where
    E: From<ValueError>,
{
    let mut reader = Reader::new(packed);
    while reader.pos < packed.len() {
        let wire = match proto.wire_type() {
            WIRE_VARINT => reader.varint().map(Wire::Varint),
            WIRE_I64 => reader
                .take(8)
                .map(|b| Wire::I64(u64::from_le_bytes(b.try_into().expect("8 bytes")))),
            _ => reader
                .take(4)
                .map(|b| Wire::I32(u32::from_le_bytes(b.try_into().expect("4 bytes")))),
        }
        .map_err(|()| E::from(ValueError::Parse))?;
        f(wire)?;
    }
    Ok(())
}

pub(super) const MIN_TIMESTAMP_MICROS: i64 = -62_135_596_800_000_000;
pub(super) const MAX_TIMESTAMP_MICROS: i64 = 253_402_300_799_999_999;
pub(super) const MIN_DATE_DAYS: i64 = -719_162;
pub(super) const MAX_DATE_DAYS: i64 = 2_932_896;

#[inline(always)]
pub(super) fn check_value(field: &FieldPlan, wire: Wire<'_>) -> Result<(), ValueError> {
    let value = scalar(field.proto, wire);
    match &field.column {
        ColumnKind::Int64 => match value {
            Scalar::Unsigned(v) if v > i64::MAX as u64 => Err(ValueError::Int64Range(v)),
            Scalar::Enum(v) => check_enum(field, v),
            _ => Ok(()),
        },
        ColumnKind::Float64 | ColumnKind::Bool | ColumnKind::Record => Ok(()),
        ColumnKind::String { max_length } => match value {
            Scalar::Text(b) => {
                // Most strings are ASCII: a word-at-a-time scan instead of a full UTF-8 decode.
                let ascii = b.is_ascii();
                if !ascii && std::str::from_utf8(b).is_err() {
                    return Err(ValueError::InvalidUtf8);
                }
                if let Some(max) = *max_length {
                    // Byte length bounds the character count; count only when it could exceed.
                    if b.len() as u64 > max {
                        // Valid UTF-8: one character per byte that is not a continuation byte.
                        let chars = if ascii {
                            b.len() as u64
                        } else {
                            b.iter().filter(|&&c| (c as i8) >= -0x40).count() as u64
                        };
                        if chars > max {
                            return Err(ValueError::MaxLength {
                                kind: "STRING",
                                max,
                                got: chars,
                            });
                        }
                    }
                }
                Ok(())
            }
            Scalar::Enum(v) => check_enum(field, v),
            _ => Ok(()),
        },
        ColumnKind::Bytes { max_length } => match (value, max_length) {
            (Scalar::Text(b), Some(max)) if b.len() as u64 > *max => Err(ValueError::MaxLength {
                kind: "BYTES",
                max: *max,
                got: b.len() as u64,
            }),
            _ => Ok(()),
        },
        ColumnKind::Numeric(spec) => check_numeric(field.proto, spec, value),
        ColumnKind::Date => match value {
            Scalar::Signed(days) if !(MIN_DATE_DAYS..=MAX_DATE_DAYS).contains(&days) => {
                Err(ValueError::DateRange(days))
            }
            Scalar::Text(b) => parse_date(b)
                .map(|_| ())
                .ok_or(ValueError::BadLiteral("DATE")),
            _ => Ok(()),
        },
        ColumnKind::Timestamp => {
            let micros = match value {
                Scalar::Signed(v) => v,
                Scalar::Unsigned(v) => i64::try_from(v).unwrap_or(i64::MAX),
                Scalar::Text(b) => {
                    return parse_timestamp(b)
                        .filter(|m| (MIN_TIMESTAMP_MICROS..=MAX_TIMESTAMP_MICROS).contains(m))
                        .map(|_| ())
                        .ok_or(ValueError::BadLiteral("TIMESTAMP"));
                }
                _ => return Ok(()),
            };
            if (MIN_TIMESTAMP_MICROS..=MAX_TIMESTAMP_MICROS).contains(&micros) {
                Ok(())
            } else {
                Err(ValueError::TimestampRange(match value {
                    Scalar::Unsigned(v) if v > i64::MAX as u64 => i64::MAX,
                    _ => micros,
                }))
            }
        }
        ColumnKind::DateTime => match value {
            Scalar::Signed(packed) => decode_packed_datetime(packed)
                .map(|_| ())
                .ok_or(ValueError::BadLiteral("DATETIME")),
            Scalar::Text(b) => parse_datetime(b)
                .map(|_| ())
                .ok_or(ValueError::BadLiteral("DATETIME")),
            _ => Ok(()),
        },
        ColumnKind::Time => match value {
            Scalar::Signed(packed) => decode_packed_time(packed)
                .map(|_| ())
                .ok_or(ValueError::BadLiteral("TIME")),
            Scalar::Text(b) => parse_time(b)
                .map(|_| ())
                .ok_or(ValueError::BadLiteral("TIME")),
            _ => Ok(()),
        },
        ColumnKind::Json => match value {
            Scalar::Text(b) => serde_json::from_slice::<serde::de::IgnoredAny>(b)
                .map(|_| ())
                .map_err(|_| ValueError::BadJson),
            _ => Ok(()),
        },
        ColumnKind::Geography | ColumnKind::Other(_) => match value {
            Scalar::Text(b) if field.proto == ProtoKind::String => std::str::from_utf8(b)
                .map(|_| ())
                .map_err(|_| ValueError::InvalidUtf8),
            _ => Ok(()),
        },
    }
}

pub(super) fn check_enum(field: &FieldPlan, number: i32) -> Result<(), ValueError> {
    match field.enum_name(number) {
        Some(_) => Ok(()),
        None => Err(ValueError::BadEnum(number)),
    }
}

pub(super) fn check_numeric(
    proto: ProtoKind,
    spec: &NumericSpec,
    value: Scalar<'_>,
) -> Result<(), ValueError> {
    let int_digits = match value {
        Scalar::Signed(v) => decimal_len(v.unsigned_abs()),
        Scalar::Unsigned(v) => decimal_len(v),
        Scalar::Float(f) => {
            if !f.is_finite() {
                return Err(ValueError::NotFinite);
            }
            let whole = f.abs().trunc();
            if whole < 1.0 {
                0
            } else {
                // 1e38 and beyond have more digits than any NUMERIC allows except BIGNUMERIC.
                whole.log10().floor() as u32 + 1
            }
        }
        Scalar::Text(b) if proto == ProtoKind::Bytes => return check_unscaled_bytes(spec, b),
        Scalar::Text(b) => match decimal_shape(b) {
            Some(shape) => shape.int_digits,
            None => {
                return Err(ValueError::BadLiteral(if spec.big {
                    "BIGNUMERIC"
                } else {
                    "NUMERIC"
                }));
            }
        },
        Scalar::Bool(_) | Scalar::Enum(_) => 0,
    };
    if int_digits > spec.max_int_digits {
        Err(ValueError::NumericRange)
    } else {
        Ok(())
    }
}

/// 10^n for every digit count a 16-byte NUMERIC can have (`pow` per value showed in profiles).
pub(super) const POW10: [u128; 39] = {
    let mut t = [1u128; 39];
    let mut i = 1;
    while i < t.len() {
        t[i] = t[i - 1] * 10;
        i += 1;
    }
    t
};

pub(super) fn check_unscaled_bytes(spec: &NumericSpec, b: &[u8]) -> Result<(), ValueError> {
    let max_len = if spec.big { 32 } else { 16 };
    if b.is_empty() || b.len() > max_len {
        return Err(ValueError::NumericRange);
    }
    let total_digits = spec.max_int_digits + spec.wire_scale;
    if b.len() <= 16 && total_digits <= 38 {
        // The common case (NUMERIC, 16 bytes or fewer): compare the integer with 10^digits
        // instead of writing out its decimal digits.
        let negative = b[b.len() - 1] & 0x80 != 0;
        let mut le = [if negative { 0xff } else { 0 }; 16];
        le[..b.len()].copy_from_slice(b);
        let unscaled = i128::from_le_bytes(le);
        return if unscaled.unsigned_abs() < POW10[total_digits as usize] {
            Ok(())
        } else {
            Err(ValueError::NumericRange)
        };
    }
    let digits = UnscaledDecimal::from_le_twos_complement(b);
    let int_digits = digits.len().saturating_sub(spec.wire_scale as usize) as u32;
    if int_digits > spec.max_int_digits {
        Err(ValueError::NumericRange)
    } else {
        Ok(())
    }
}

/// A `google.protobuf.Timestamp` (`seconds = 1`, `nanos = 2`) as microseconds since the epoch,
/// within TIMESTAMP's range. Nanoseconds below a microsecond are dropped: BigQuery keeps
/// microseconds (what the real service does with them is not on record).
pub(super) fn timestamp_message_micros(bytes: &[u8]) -> Result<i64, ValueError> {
    let (mut seconds, mut nanos) = (0i64, 0i64);
    let mut reader = Reader::new(bytes);
    while let Some((number, wire)) = reader.next().map_err(|()| ValueError::Parse)? {
        match (number, wire) {
            (1, Wire::Varint(v)) => seconds = v as i64,
            (2, Wire::Varint(v)) => nanos = i64::from(v as i32),
            (1 | 2, _) => return Err(ValueError::Parse),
            _ => {}
        }
    }
    let micros = seconds
        .checked_mul(1_000_000)
        .filter(|_| (0..1_000_000_000).contains(&nanos))
        .map(|m| m + nanos / 1_000)
        .filter(|m| (MIN_TIMESTAMP_MICROS..=MAX_TIMESTAMP_MICROS).contains(m));
    // The text names the seconds as sent (Java's testRowErrors: seconds = Long.MIN_VALUE reads
    // "Timestamp field value is out of range: -9223372036854775808 on field bar.").
    micros.ok_or(ValueError::TimestampRange(seconds))
}
