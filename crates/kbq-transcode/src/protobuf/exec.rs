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
use crate::proto::{Tag, close_len, open_len, put_len_delimited, put_varint, varint_len};

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
        if let Some(word) = self.buf.get(self.pos..self.pos + 8) {
            // Up to eight bytes at once: the first byte without its continuation bit ends the
            // varint, and the 7-bit groups below it are gathered in three shifts.
            let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
            let stops = !w & 0x8080_8080_8080_8080;
            if stops != 0 {
                let n = (stops.trailing_zeros() as usize + 1) / 8;
                self.pos += n;
                return Ok(gather(w & (u64::MAX >> (64 - 8 * n))));
            }
        }
        self.varint_slow()
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Result<u64, RecordError> {
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
    #[inline(always)]
    fn len_delimited(&mut self) -> Result<(&'a [u8], usize), RecordError> {
        let len = self.varint()?;
        let at = self.offset();
        let rest = &self.buf[self.pos..];
        if len > rest.len() as u64 {
            return Err(RecordError::ProtoTruncated {
                offset: at,
                what: "a length-delimited field",
            });
        }
        self.pos += len as usize;
        Ok((&rest[..len as usize], at))
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

/// The value of a varint of at most eight bytes, given as a little-endian word with the bytes
/// after its last one cleared.
#[inline(always)]
fn gather(w: u64) -> u64 {
    let x = w & 0x7f7f_7f7f_7f7f_7f7f;
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

/// Which fields of a message occurred on the wire: one word for up to 64 fields (a shift and
/// an or per field; a 128-bit set cost several instructions per field more).
enum Seen {
    Small(u64),
    Large(Vec<u64>),
}

impl Seen {
    #[inline]
    fn new(n: usize) -> Seen {
        if n <= 64 {
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
    // Where the field occurrences that are already the row's bytes begin (`NO_RUN`: none
    // pending): a run of them is copied in one piece when the next field needs writing.
    let mut run = NO_RUN;
    while !r.done() {
        let key_pos = r.pos;
        let key_at = r.offset();
        let key = r.varint()?;
        let (number, wire) = (key >> 3, (key & 7) as u8);
        let found = op.lookup.get(number).filter(|_| number != 0);
        if let Some(i) = found {
            let field = &op.fields[i];
            if field.same_key as usize == r.pos - key_pos {
                let value_pos = r.pos;
                if same(field, wire, &mut r)? {
                    seen.mark(i);
                    if run == NO_RUN {
                        run = key_pos;
                    }
                    continue;
                }
                r.pos = value_pos;
            }
        }
        if run != NO_RUN {
            out.extend_from_slice(&buf[run..key_pos]);
            run = NO_RUN;
        }
        let Some(i) = found else {
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
    if run != NO_RUN {
        out.extend_from_slice(&buf[run..]);
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

/// No run of copied fields is pending.
const NO_RUN: usize = usize::MAX;

/// Reads a [`Fast`] field whose row tag is its own key ([`FieldOp::same_key`]) and checks it as
/// [`fast`] would; true when the occurrence's bytes are exactly what [`fast`] would write
/// (canonical varints, a bool of 0 or 1, an int32 as protobuf sign-extends it), so that they
/// can be copied as they are. False leaves the reader anywhere: the caller rewinds.
#[inline(always)]
fn same(field: &FieldOp, wire: u8, r: &mut Reader<'_>) -> Result<bool, RecordError> {
    let start = r.pos;
    Ok(match (field.fast, wire) {
        (Fast::Str(_), WIRE_LEN) => {
            let (b, _) = r.len_delimited()?;
            utf8(b, &field.column)?;
            r.pos - start - b.len() == varint_len(b.len() as u64)
        }
        (Fast::Bytes(_), WIRE_LEN) => {
            let (b, _) = r.len_delimited()?;
            r.pos - start - b.len() == varint_len(b.len() as u64)
        }
        (Fast::Int64(_), WIRE_VARINT) => {
            let v = r.varint()?;
            r.pos - start == varint_len(v)
        }
        (Fast::Int32(_), WIRE_VARINT) => {
            let v = r.varint()?;
            r.pos - start == varint_len(v) && v == v as i32 as i64 as u64
        }
        (Fast::Bool(_), WIRE_VARINT) => r.varint()? <= 1 && r.pos - start == 1,
        (Fast::Double(_), WIRE_I64) => {
            r.take(8, "a fixed64")?;
            true
        }
        _ => false,
    })
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
        (Fast::Int64(tag), WIRE_VARINT) => {
            let start = r.pos;
            let v = r.varint()?;
            let n = r.pos - start;
            tag.put(out);
            // A canonical varint is the row's bytes: eight of them copied in one piece and
            // the surplus dropped, rather than decoded and encoded again.
            match r.buf.get(start..start + 8) {
                Some(word) if n <= 8 && n == varint_len(v) => {
                    out.extend_from_slice(&<[u8; 8]>::try_from(word).expect("eight bytes"));
                    out.truncate(out.len() - (8 - n));
                }
                _ => put_varint(out, v),
            }
        }
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

/// A `Timestamp` as writers lay it out: `seconds` then `nanos`, each there or not, nothing else.
/// `None` for any other layout, which [`fields`] reads (with its checks and errors).
#[inline]
fn seconds_nanos(bytes: &[u8]) -> Option<(i64, i64)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf::{MessagePath, ProtoSchema};
    use crate::{Plan, PlanOptions};

    /// A varint as the specification writes it.
    fn varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        out
    }

    #[test]
    fn varints_of_every_length_read_as_the_specification_says() {
        let mut values = vec![0u64, 1, 0x7f, 0x80, u64::MAX, i64::MIN as u64];
        for bits in 1..64 {
            values.extend([
                (1u64 << bits) - 1,
                1 << bits,
                0x9e37_79b9_7f4a_7c15 >> (64 - bits),
            ]);
        }
        for v in values {
            // Alone (the byte-at-a-time path near the end) and followed by more data (the word
            // at a time path), whose continuation bits must not leak into the value.
            for tail in [&[][..], &[0xff; 12][..], &[0x00; 12][..]] {
                let mut bytes = varint(v);
                let n = bytes.len();
                bytes.extend_from_slice(tail);
                let mut r = Reader::new(&bytes, 0);
                assert_eq!(r.varint().unwrap(), v, "{v:#x} before {tail:?}");
                assert_eq!(r.pos, n);
            }
        }
        let overlong = [0xffu8; 11];
        assert!(matches!(
            Reader::new(&overlong, 0).varint(),
            Err(RecordError::ProtoBadVarint { offset: 0 })
        ));
        let cut = [0xffu8; 9];
        assert!(matches!(
            Reader::new(&cut, 0).varint(),
            Err(RecordError::ProtoTruncated { .. })
        ));
    }

    fn plan() -> Plan {
        let schema = ProtoSchema::compile(
            r#"syntax = "proto3";
               message M { string s = 1; int64 l = 2; int32 i = 3; bool b = 4; double d = 5;
                           bytes y = 6; repeated string t = 7; repeated int64 r = 8; }"#,
            &[],
        )
        .unwrap();
        let table = serde_json::from_str(
            r#"{"fields":[{"name":"s","type":"STRING"},{"name":"l","type":"INT64"},
               {"name":"i","type":"INT64"},{"name":"b","type":"BOOL"},
               {"name":"d","type":"FLOAT64"},{"name":"y","type":"BYTES"},
               {"name":"t","type":"STRING","mode":"REPEATED"},
               {"name":"r","type":"INT64","mode":"REPEATED"}]}"#,
        )
        .unwrap();
        let writer = schema.message(&MessagePath::FIRST).unwrap();
        Plan::compile_protobuf(&writer, &table, &PlanOptions::default()).unwrap()
    }

    fn run(plan: &Plan, input: &[u8]) -> Result<Vec<u8>, RecordError> {
        let mut out = vec![0xaa];
        let range = plan.transcode(input, None, &mut out)?;
        assert_eq!(range.start, 1);
        Ok(out.split_off(1))
    }

    /// Every field of the plan has the row's tag as its own key, so whole runs of the input are
    /// copied; an occurrence the row writes differently (a non-canonical key, length or varint,
    /// a bool above 1, an int32 with bits above its 32) must be rewritten, and the run must stop
    /// before it and before any skipped field.
    #[test]
    fn copied_runs_equal_the_field_by_field_encoding() {
        let plan = plan();
        let canonical = [
            &[0x0a, 3, b'a', b'b', b'c'][..],
            &[0x10, 0xac, 0x02],
            &[0x18, 0x05],
            &[0x20, 0x01],
            &[0x29, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f],
            &[0x32, 2, 0xff, 0x00],
            &[0x3a, 1, b'x'],
            &[0x3a, 0],
        ]
        .concat();
        assert_eq!(run(&plan, &canonical).unwrap(), canonical);
        let defaults = [
            &[0x0a, 0][..],
            &[0x10, 0],
            &[0x18, 0],
            &[0x20, 0],
            &[0x29, 0, 0, 0, 0, 0, 0, 0, 0],
            &[0x32, 0],
        ]
        .concat();
        let rewritten: [(&[u8], &[u8]); 10] = [
            // An overlong key (field 2 as two bytes), an overlong length, an overlong varint.
            (&[0x90, 0x00, 0x07], &[0x10, 0x07]),
            (
                &[0x0a, 0x83, 0x00, b'a', b'b', b'c'],
                &[0x0a, 3, b'a', b'b', b'c'],
            ),
            (&[0x10, 0x87, 0x80, 0x00], &[0x10, 0x07]),
            // A bool of 2 is true; an int32 keeps only its low 32 bits, sign-extended.
            (&[0x20, 0x02], &[0x20, 0x01]),
            (&[0x18, 0x85, 0x80, 0x80, 0x80, 0x10], &[0x18, 0x05]),
            (
                &[0x18, 0xff, 0xff, 0xff, 0xff, 0x0f],
                &[
                    0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                ],
            ),
            // A negative int32 as protobuf writes it is copied.
            (
                &[
                    0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                ],
                &[
                    0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                ],
            ),
            // Unknown fields are skipped, not copied with their neighbours.
            (&[0x48, 0x01, 0x52, 1, b'z'], &[]),
            // A packed int64 is written unpacked, each canonical element as it is.
            (
                &[0x42, 4, 0x01, 0xac, 0x02, 0x02],
                &[0x40, 0x01, 0x40, 0xac, 0x02, 0x40, 0x02],
            ),
            (&[0x42, 3, 0x81, 0x00, 0x05], &[0x40, 0x01, 0x40, 0x05]),
        ];
        for (odd, row) in rewritten {
            // The odd occurrence between two copied ones, and the same at the very start.
            let input = [&canonical[..5], odd, &canonical[5..]].concat();
            let expected = [&canonical[..5], row, &canonical[5..]].concat();
            assert_eq!(run(&plan, &input).unwrap(), expected, "{odd:02x?}");
            let input = [odd, &canonical[..]].concat();
            let expected = [row, &canonical[..]].concat();
            assert_eq!(run(&plan, &input).unwrap(), expected, "{odd:02x?}");
            // Alone: the fields it is not get their defaults.
            let alone = run(&plan, odd).unwrap();
            assert!(alone.starts_with(row), "{odd:02x?}: {alone:02x?}");
        }
        assert_eq!(run(&plan, &[]).unwrap(), defaults);
        // Checks still apply to copied fields: invalid UTF-8, a cut-off value.
        assert!(run(&plan, &[0x0a, 2, 0xc3, 0x28]).is_err());
        assert!(run(&plan, &[0x0a, 2, b'a', b'b', 0x29, 0, 0]).is_err());
        assert!(run(&plan, &[0x0a, 2, b'a', b'b', 0x10]).is_err());
    }
}
