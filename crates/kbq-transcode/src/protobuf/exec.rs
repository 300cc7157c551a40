//! Runs a compiled Protobuf plan over a message's wire bytes, appending the row's proto2 bytes to
//! the caller's buffer. Each field occurrence on the wire becomes one field occurrence in the row
//! (renumbered, converted where the column needs it), so protobuf's own rules carry over: the
//! last occurrence of a singular scalar wins, repeated fields keep their order. What the wire
//! cannot say by itself is filled in at the end of each message: the defaults of
//! implicit-presence fields it omitted.

use std::sync::Arc;

use crate::RecordError;
use crate::convert::{
    Wide, date_days, datetime_packed, days_from_civil, time_packed, timestamp_micros,
};
use crate::exec::{check_json, put_decimal, put_f64, put_i64, value_error};
use crate::proto::{Tag, close_len, open_len, put_len_delimited};

use super::ops::{Conv, Fast, FieldKind, FieldOp, MessageOp, Special, Src};

const WIRE_VARINT: u8 = 0;
const WIRE_I64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_START_GROUP: u8 = 3;
const WIRE_END_GROUP: u8 = 4;
const WIRE_I32: u8 = 5;
/// Unknown groups nest at most this deep (protobuf's own parsers stop at 100).
const MAX_GROUP_DEPTH: usize = 100;

/// One decoded scalar.
#[derive(Debug, Clone, Copy)]
pub enum Val<'a> {
    I(i64),
    U(u64),
    F32(f32),
    F64(f64),
    B(&'a [u8]),
}

/// A bounds-checked cursor over protobuf wire data; offsets in errors count from the start of
/// the row's message.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], base: usize) -> Self {
        Reader { buf, pos: 0, base }
    }

    #[inline]
    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline]
    fn offset(&self) -> usize {
        self.base + self.pos
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, RecordError> {
        if let Some(&b) = self.buf.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(b as u64);
        }
        let start = self.offset();
        let mut value = 0u64;
        let mut shift = 0u32;
        loop {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(RecordError::ProtoTruncated {
                    offset: self.offset(),
                    what: "a varint",
                });
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(RecordError::ProtoBadVarint { offset: start });
            }
            value |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Ok(value);
            }
            shift += 7;
        }
    }

    #[inline]
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RecordError> {
        if self.buf.len() - self.pos < n {
            return Err(RecordError::ProtoTruncated {
                offset: self.offset(),
                what,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    fn fixed32(&mut self) -> Result<u32, RecordError> {
        let b = self.take(4, "a fixed32")?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    fn fixed64(&mut self) -> Result<u64, RecordError> {
        let b = self.take(8, "a fixed64")?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A length-delimited field's bytes, and the offset they start at.
    #[inline]
    fn len_delimited(&mut self) -> Result<(&'a [u8], usize), RecordError> {
        let len = self.varint()?;
        let at = self.offset();
        if len > (self.buf.len() - self.pos) as u64 {
            return Err(RecordError::ProtoTruncated {
                offset: at,
                what: "a length-delimited field",
            });
        }
        Ok((self.take(len as usize, "a length-delimited field")?, at))
    }

    /// Skips one value of `wire` type (a whole group for a start-group tag).
    fn skip(&mut self, wire: u8, number: u64, key_at: usize) -> Result<(), RecordError> {
        match wire {
            WIRE_VARINT => self.varint().map(drop),
            WIRE_I64 => self.take(8, "a fixed64").map(drop),
            WIRE_LEN => self.len_delimited().map(drop),
            WIRE_I32 => self.take(4, "a fixed32").map(drop),
            WIRE_START_GROUP => self.skip_group(number),
            _ => Err(RecordError::ProtoWireType {
                offset: key_at,
                number,
                wire,
            }),
        }
    }

    fn skip_group(&mut self, number: u64) -> Result<(), RecordError> {
        let mut open = vec![number];
        while let Some(&current) = open.last() {
            let key_at = self.offset();
            if self.done() {
                return Err(RecordError::ProtoTruncated {
                    offset: key_at,
                    what: "a group",
                });
            }
            let key = self.varint()?;
            let (n, wire) = (key >> 3, (key & 7) as u8);
            match wire {
                WIRE_START_GROUP => {
                    if open.len() >= MAX_GROUP_DEPTH {
                        return Err(RecordError::ProtoTooDeep {
                            offset: key_at,
                            max: MAX_GROUP_DEPTH,
                        });
                    }
                    open.push(n);
                }
                WIRE_END_GROUP if n == current => {
                    open.pop();
                }
                WIRE_END_GROUP => {
                    return Err(RecordError::ProtoWireType {
                        offset: key_at,
                        number: n,
                        wire,
                    });
                }
                _ => self.skip(wire, n, key_at)?,
            }
        }
        Ok(())
    }

    #[inline]
    fn value(&mut self, src: Src) -> Result<Val<'a>, RecordError> {
        Ok(match src {
            Src::Int32 | Src::Enum => Val::I(self.varint()? as i32 as i64),
            Src::Int64 => Val::I(self.varint()? as i64),
            Src::UInt32 => Val::I(self.varint()? as u32 as i64),
            Src::UInt64 => Val::U(self.varint()?),
            Src::SInt32 => {
                let v = self.varint()? as u32;
                Val::I((((v >> 1) as i32) ^ -((v & 1) as i32)) as i64)
            }
            Src::SInt64 => {
                let v = self.varint()?;
                Val::I(((v >> 1) as i64) ^ -((v & 1) as i64))
            }
            Src::Bool => Val::I((self.varint()? != 0) as i64),
            Src::Fixed32 => Val::I(self.fixed32()? as i64),
            Src::SFixed32 => Val::I(self.fixed32()? as i32 as i64),
            Src::Float => Val::F32(f32::from_bits(self.fixed32()?)),
            Src::Fixed64 => Val::U(self.fixed64()?),
            Src::SFixed64 => Val::I(self.fixed64()? as i64),
            Src::Double => Val::F64(f64::from_bits(self.fixed64()?)),
            Src::String | Src::Bytes => Val::B(self.len_delimited()?.0),
        })
    }
}

/// Which fields of a message occurred on the wire.
enum Seen {
    Small(u128),
    Large(Vec<u64>),
}

impl Seen {
    #[inline]
    fn new(n: usize) -> Seen {
        if n <= 128 {
            Seen::Small(0)
        } else {
            Seen::Large(vec![0; n.div_ceil(64)])
        }
    }

    /// Marks field `i`; returns whether it was marked before.
    #[inline]
    fn mark(&mut self, i: usize) -> bool {
        match self {
            Seen::Small(bits) => {
                let was = *bits & (1 << i) != 0;
                *bits |= 1 << i;
                was
            }
            Seen::Large(words) => {
                let was = words[i / 64] & (1 << (i % 64)) != 0;
                words[i / 64] |= 1 << (i % 64);
                was
            }
        }
    }

    #[inline]
    fn has(&self, i: usize) -> bool {
        match self {
            Seen::Small(bits) => *bits & (1 << i) != 0,
            Seen::Large(words) => words[i / 64] & (1 << (i % 64)) != 0,
        }
    }
}

pub fn run_message(
    op: &MessageOp,
    buf: &[u8],
    base: usize,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    if let Some(column) = &op.missing_required {
        return Err(RecordError::MissingRequired {
            column: column.clone(),
        });
    }
    let at = op.tag.map(|t| open_len(out, t));
    let mut seen = Seen::new(op.tracked);
    let mut r = Reader::new(buf, base);
    while !r.done() {
        let key_at = r.offset();
        let key = r.varint()?;
        let (number, wire) = (key >> 3, (key & 7) as u8);
        let Some(i) = op.lookup.get(number).filter(|_| number != 0) else {
            if number == 0 || wire == WIRE_END_GROUP {
                return Err(RecordError::ProtoWireType {
                    offset: key_at,
                    number,
                    wire,
                });
            }
            if op.unknown_is_error {
                return Err(RecordError::ProtoUnknownField {
                    offset: key_at,
                    number,
                });
            }
            r.skip(wire, number, key_at)?;
            continue;
        };
        let field = &op.fields[i];
        let again = seen.mark(i);
        if fast(field, wire, &mut r, out)? {
            continue;
        }
        let wrong_wire = || RecordError::ProtoWireType {
            offset: key_at,
            number,
            wire,
        };
        match &field.kind {
            FieldKind::Skip => r.skip(wire, number, key_at)?,
            FieldKind::Scalar {
                src,
                conv,
                tag,
                repeated,
            } => {
                if wire == src.wire() {
                    let v = r.value(*src)?;
                    write_scalar(conv, *tag, v, &field.column, out)?;
                } else if *repeated && wire == WIRE_LEN && src.packable() {
                    let (packed, at) = r.len_delimited()?;
                    let mut p = Reader::new(packed, at);
                    while !p.done() {
                        // Each element is the field's unpacked value.
                        if !fast(field, src.wire(), &mut p, out)? {
                            let v = p.value(*src)?;
                            write_scalar(conv, *tag, v, &field.column, out)?;
                        }
                    }
                } else {
                    return Err(wrong_wire());
                }
            }
            FieldKind::Message {
                op: inner,
                repeated,
            } => {
                if wire != WIRE_LEN {
                    return Err(wrong_wire());
                }
                if again && !repeated {
                    return Err(merged(&field.column));
                }
                let (bytes, at) = r.len_delimited()?;
                run_message(inner, bytes, at, out)?;
            }
            FieldKind::Special {
                special,
                tag,
                repeated,
            } => {
                if wire != WIRE_LEN {
                    return Err(wrong_wire());
                }
                if again && !repeated {
                    return Err(merged(&field.column));
                }
                let (bytes, at) = r.len_delimited()?;
                write_special(special, *tag, bytes, at, &field.column, out)?;
            }
        }
    }
    for (i, bytes) in op.defaults.iter() {
        if !seen.has(*i as usize) {
            out.extend_from_slice(bytes);
        }
    }
    for &i in op.required.iter() {
        if !seen.has(i as usize) {
            return Err(RecordError::NullRequired {
                column: op.fields[i as usize].column.clone(),
            });
        }
    }
    for members in op.oneofs.iter() {
        let present = members.iter().filter(|&&i| seen.has(i as usize)).count();
        if present > 1 {
            return Err(RecordError::ProtoRepeatedField {
                field: op.fields[members[0] as usize].column.clone(),
                reason: "more than one member of its oneof is set",
            });
        }
    }
    if let Some(at) = at {
        close_len(out, at);
    }
    Ok(())
}

/// The field as one fused step ([`Fast`]); false when it takes the general path.
#[inline(always)]
fn fast(
    field: &FieldOp,
    wire: u8,
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
) -> Result<bool, RecordError> {
    match (field.fast, wire) {
        (Fast::Str(tag), WIRE_LEN) => {
            let (b, _) = r.len_delimited()?;
            put_len_delimited(out, tag, utf8(b, &field.column)?);
        }
        (Fast::Bytes(tag), WIRE_LEN) => put_len_delimited(out, tag, r.len_delimited()?.0),
        (Fast::Int64(tag), WIRE_VARINT) => put_i64(out, tag, r.varint()? as i64),
        (Fast::Int32(tag), WIRE_VARINT) => put_i64(out, tag, r.varint()? as i32 as i64),
        (Fast::Bool(tag), WIRE_VARINT) => {
            let b = r.varint()? != 0;
            tag.put(out);
            out.push(b as u8);
        }
        (Fast::Double(tag), WIRE_I64) => {
            let b = r.take(8, "a fixed64")?;
            tag.put(out);
            out.extend_from_slice(b);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

#[cold]
fn merged(column: &Arc<str>) -> RecordError {
    RecordError::ProtoRepeatedField {
        field: column.clone(),
        reason: "a singular message occurs twice and merging messages is not supported",
    }
}

#[inline]
fn int(v: Val<'_>) -> i64 {
    match v {
        Val::I(i) => i,
        Val::U(u) => u as i64,
        Val::F32(f) => f as i64,
        Val::F64(f) => f as i64,
        Val::B(_) => 0,
    }
}

#[inline]
fn bytes(v: Val<'_>) -> &[u8] {
    match v {
        Val::B(b) => b,
        _ => &[],
    }
}

#[inline]
fn utf8<'a>(b: &'a [u8], column: &Arc<str>) -> Result<&'a [u8], RecordError> {
    if !b.is_ascii() && std::str::from_utf8(b).is_err() {
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
        _ => unreachable!("handled by write_scalar"),
    }
    Ok(())
}

/// The last value of each listed field of a small well-known message, by number (1-based);
/// other fields are skipped. Wire types are checked against `wires`.
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

fn timestamp(bytes: &[u8], base: usize, column: &Arc<str>) -> Result<i64, RecordError> {
    let [seconds, nanos] = fields(bytes, base, [Src::Int64, Src::Int32])?;
    let (seconds, nanos) = (int_or_zero(seconds), int_or_zero(nanos));
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

#[inline(never)]
fn write_special(
    special: &Special,
    tag: Tag,
    bytes: &[u8],
    base: usize,
    column: &Arc<str>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let err = |e: String| value_error(column, e);
    match special {
        Special::Timestamp => put_i64(out, tag, timestamp(bytes, base, column)?),
        Special::TimestampDateTime => {
            let micros = timestamp(bytes, base, column)?;
            put_i64(out, tag, datetime_packed(Some(micros)).map_err(err)?);
        }
        Special::DurationMicros => {
            let [seconds, nanos] = fields(bytes, base, [Src::Int64, Src::Int32])?;
            let (seconds, nanos) = (int_or_zero(seconds), int_or_zero(nanos));
            if nanos.abs() >= 1_000_000_000
                || (seconds != 0 && nanos != 0 && (seconds < 0) != (nanos < 0))
            {
                return Err(err(format!(
                    "duration of {seconds} s and {nanos} ns is not a valid duration"
                )));
            }
            let micros = seconds
                .checked_mul(1_000_000)
                .and_then(|m| m.checked_add(nanos / 1000))
                .ok_or_else(|| err("duration overflows INT64 microseconds".into()))?;
            put_i64(out, tag, micros);
        }
        Special::Wrapper { src, conv } => {
            let [value] = fields(bytes, base, [*src])?;
            let v = value.unwrap_or(match src {
                Src::String | Src::Bytes => Val::B(b""),
                Src::Float => Val::F32(0.0),
                Src::Double => Val::F64(0.0),
                Src::UInt64 => Val::U(0),
                _ => Val::I(0),
            });
            write_scalar(conv, tag, v, column, out)?;
        }
        Special::Date => {
            let [y, m, d] = fields(bytes, base, [Src::Int32, Src::Int32, Src::Int32])?;
            let days = days_from_civil(int_or_zero(y), int_or_zero(m), int_or_zero(d))
                .map_err(|e| err(format!("google.type.Date: {e}")))?;
            let days = date_days(days as i32).map_err(err)?;
            put_i64(out, tag, days as i64);
        }
        Special::TimeOfDay => {
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
            put_i64(out, tag, time_packed(micros).map_err(err)?);
        }
        Special::ConfluentDecimal(target) => {
            let [value, _precision, scale] =
                fields(bytes, base, [Src::Bytes, Src::UInt32, Src::Int32])?;
            let mut w = Wide::from_be_twos(value.map_or(&[][..], bytes_of)).map_err(err)?;
            let scale = int_or_zero(scale);
            let scale = if scale < 0 {
                // A negative scale multiplies: 5 at scale -2 is 500.
                w.rescale(0, scale.unsigned_abs() as u32).map_err(err)?;
                0
            } else {
                scale as u32
            };
            put_decimal(out, tag, w, scale, *target, column)?;
        }
        Special::GoogleDecimal(target) => {
            let [value] = fields(bytes, base, [Src::String])?;
            let text = std::str::from_utf8(value.map_or(&[][..], bytes_of))
                .map_err(|_| err("google.type.Decimal value is not utf-8".into()))?;
            let (w, scale) = Wide::parse_decimal(text).map_err(err)?;
            put_decimal(out, tag, w, scale, *target, column)?;
        }
    }
    Ok(())
}

fn bytes_of(v: Val<'_>) -> &[u8] {
    bytes(v)
}
