//! The Protobuf executor the product runs. Per message, a table by key (field number and wire
//! type, `MessageOp::keys`) gives each occurrence's step, decided once per plan:
//!
//! * a string, bytes, int64, non-negative int32, bool or double field whose row tag is its own
//!   key is checked (canonical length or varint, UTF-8) and copied with its neighbours in one
//!   piece;
//! * a nested message is walked by this executor;
//! * an enum number into a STRING column is one table load of the row's bytes (tag, length and
//!   name);
//! * `google.protobuf.Timestamp`, `google.type.Date` and `confluent.type.Decimal` laid out as
//!   writers lay them out (their fields in order, each at most once) are read in place; a
//!   decimal of up to eight bytes is rescaled in `i128` and written as its fewest
//!   two's-complement bytes, not through the 320-bit integer of the general path;
//! * the defaults of implicit-presence fields and the required fields are found from two bit
//!   masks against the set of fields seen, not by a loop over every field.
//!
//! Every occurrence a step does not take (another layout, a value out of range, a longer or
//! overlong key, length or varint, a wire type the field does not have, an unknown field) takes
//! the steps the reference walk (`exec.rs`, `Plan::transcode_reference`) takes for it, from
//! `field.rs` which both share, on the same bytes, so that rows and errors are the reference's
//! by construction (`tests/transcode/differential.rs` checks it). A message of more than 64
//! fields, or with field numbers too large for a dense table, is walked that way throughout;
//! nothing here calls the reference walk.

use crate::RecordError;
use crate::convert::{
    DecimalTarget, MAX_DATE_DAYS, MAX_TIMESTAMP_MICROS, MIN_DATE_DAYS, MIN_TIMESTAMP_MICROS,
    days_from_civil,
};
use crate::exec::put_i64;
use std::ptr;

use crate::proto::{Tag, close_len, open_len, varint_word};

use super::field::{NO_RUN, Seen, check_presence, fast, same, skip_unknown, write_field};
use super::ops::{Act, FieldKind, FieldOp, MessageOp, Special};
use super::reader::{Reader, WIRE_LEN, WIRE_VARINT};

/// 10^k for the rescaling of decimals, k ≤ 38.
const POW10: [i128; 39] = {
    let mut t = [1i128; 39];
    let mut k = 1;
    while k < 39 {
        t[k] = t[k - 1] * 10;
        k += 1;
    }
    t
};

pub fn run_message(
    op: &MessageOp,
    buf: &[u8],
    base: usize,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    if op.keys.is_empty() {
        return run_general(op, buf, base, out);
    }
    if let Some(column) = &op.missing_required {
        return Err(RecordError::MissingRequired {
            column: column.clone(),
        });
    }
    let at = op.tag.map(|t| open_len(out, t));
    let mut bits = 0u64;
    // Occurrences that are already the row's bytes, copied in one piece (as the reference does).
    let mut run = NO_RUN;
    let mut pos = 0;
    while pos < buf.len() {
        let key_pos = pos;
        let Some((key, value_pos)) = key_at(buf, pos).filter(|(k, _)| *k < op.keys.len()) else {
            pos = general_field(op, buf, base, key_pos, &mut run, &mut bits, out)?;
            continue;
        };
        let k = op.keys[key];
        let bit = 1u64 << k.field;
        // A singular message seen before is the general path's error.
        if k.act == Act::General || (!k.repeated && bits & bit != 0) {
            pos = general_field(op, buf, base, key_pos, &mut run, &mut bits, out)?;
            continue;
        }
        let next = match k.act {
            Act::CopyStr => len_at(buf, value_pos).filter(|&(s, e)| crate::utf8::valid(&buf[s..e])),
            Act::CopyBytes => len_at(buf, value_pos),
            Act::CopyInt64 => canonical_varint(buf, value_pos, 10).map(|e| (e, e)),
            Act::CopyInt32 => canonical_varint(buf, value_pos, 4).map(|e| (e, e)),
            Act::CopyBool => match buf.get(value_pos) {
                Some(&b) if b <= 1 => Some((value_pos + 1, value_pos + 1)),
                _ => None,
            },
            Act::CopyDouble => {
                (buf.len() - value_pos >= 8).then_some((value_pos + 8, value_pos + 8))
            }
            _ => None,
        };
        if let Some((_, end)) = next {
            bits |= bit;
            if run == NO_RUN {
                run = key_pos;
            }
            pos = end;
            continue;
        }
        let field = &op.fields[k.field as usize];
        let done = match k.act {
            Act::Enum => match buf.get(value_pos) {
                Some(&n) if n < 0x80 => match field.enum_rows.get(n as usize) {
                    Some(row) if !row.is_empty() => {
                        flush(buf, &mut run, key_pos, out);
                        out.extend_from_slice(row);
                        Some(value_pos + 1)
                    }
                    _ => None,
                },
                _ => None,
            },
            Act::Message => match (&field.kind, len_at(buf, value_pos)) {
                (FieldKind::Message { op: inner, .. }, Some((s, e))) => {
                    flush(buf, &mut run, key_pos, out);
                    run_message(inner, &buf[s..e], base + s, out)?;
                    Some(e)
                }
                _ => None,
            },
            Act::Timestamp | Act::Date | Act::Decimal => {
                match (&field.kind, len_at(buf, value_pos)) {
                    (FieldKind::Special { special, tag, .. }, Some((s, e))) => {
                        flush(buf, &mut run, key_pos, out);
                        let bytes = &buf[s..e];
                        let ok = match special {
                            Special::Timestamp => timestamp(*tag, bytes, out),
                            Special::Date => date(*tag, bytes, out),
                            Special::ConfluentDecimal(target) => decimal(*tag, *target, bytes, out),
                            _ => false,
                        };
                        // Not taken: the run flushed stays, as the general path flushes it too.
                        ok.then_some(e)
                    }
                    _ => None,
                }
            }
            Act::SkipLen => len_at(buf, value_pos).map(|(_, e)| {
                flush(buf, &mut run, key_pos, out);
                e
            }),
            Act::SkipVarint => canonical_or_not_varint(buf, value_pos)
                .inspect(|_| flush(buf, &mut run, key_pos, out)),
            _ => None,
        };
        match done {
            Some(end) => {
                bits |= bit;
                pos = end;
            }
            None => pos = general_field(op, buf, base, key_pos, &mut run, &mut bits, out)?,
        }
    }
    flush(buf, &mut run, buf.len(), out);
    presence(op, &Seen::Small(bits), out)?;
    if let Some(at) = at {
        close(out, at);
    }
    Ok(())
}

/// Copies the pending run of fields that are already the row's bytes, up to `to`.
#[inline(always)]
fn flush(buf: &[u8], run: &mut usize, to: usize, out: &mut Vec<u8>) {
    if *run != NO_RUN {
        out.extend_from_slice(&buf[*run..to]);
        *run = NO_RUN;
    }
}

/// A canonical key of one or two bytes at `pos < buf.len()`: its value and where its value
/// starts; `None` for any other key, which the general path reads.
#[inline(always)]
fn key_at(buf: &[u8], pos: usize) -> Option<(usize, usize)> {
    let b0 = buf[pos];
    if b0 < 0x80 {
        return Some((b0 as usize, pos + 1));
    }
    match buf.get(pos + 1) {
        Some(&b1) if b1 != 0 && b1 < 0x80 => {
            Some(((b1 as usize) << 7 | (b0 & 0x7f) as usize, pos + 2))
        }
        _ => None,
    }
}

/// A length of one or two canonical bytes at `pos` and the bytes it covers: their start and
/// end; `None` when the length is longer, not canonical, or runs past the buffer.
#[inline(always)]
fn len_at(buf: &[u8], pos: usize) -> Option<(usize, usize)> {
    let (len, start) = match buf.get(pos) {
        Some(&b0) if b0 < 0x80 => (b0 as usize, pos + 1),
        Some(&b0) => match buf.get(pos + 1) {
            Some(&b1) if b1 != 0 && b1 < 0x80 => {
                ((b1 as usize) << 7 | (b0 & 0x7f) as usize, pos + 2)
            }
            _ => return None,
        },
        None => return None,
    };
    (buf.len() - start >= len).then_some((start, start + len))
}

/// The end of a canonical varint at `pos` of at most `max` bytes (ten: any `int64`; four:
/// an `int32` that is not negative and so is the row's `int64` as it is); `None` otherwise.
#[inline(always)]
fn canonical_varint(buf: &[u8], pos: usize, max: usize) -> Option<usize> {
    let n = varint_bytes(buf, pos)?;
    // A varint of more than one byte ending in a zero byte is overlong.
    (n <= max && (n == 1 || buf[pos + n - 1] != 0)).then_some(pos + n)
}

/// The end of any varint of at most eight bytes at `pos` (a skipped field's value).
#[inline(always)]
fn canonical_or_not_varint(buf: &[u8], pos: usize) -> Option<usize> {
    varint_bytes(buf, pos).map(|n| pos + n)
}

/// The length of the varint at `pos` when it is one byte, or at most eight and eight bytes
/// are there to load at once.
#[inline(always)]
fn varint_bytes(buf: &[u8], pos: usize) -> Option<usize> {
    let b = buf.get(pos..)?;
    match b {
        [b0, ..] if *b0 < 0x80 => Some(1),
        _ => {
            let w = u64::from_le_bytes(*b.first_chunk::<8>()?);
            let stops = !w & 0x8080_8080_8080_8080;
            (stops != 0).then(|| (stops.trailing_zeros() as usize + 1) / 8)
        }
    }
}

/// One field occurrence at `key_pos` as the reference's walk takes it (with this executor's
/// steps where they apply); returns where the next key starts.
#[inline(never)]
fn general_field(
    op: &MessageOp,
    buf: &[u8],
    base: usize,
    key_pos: usize,
    run: &mut usize,
    bits: &mut u64,
    out: &mut Vec<u8>,
) -> Result<usize, RecordError> {
    let mut seen = Seen::Small(*bits);
    let mut r = Reader::new(buf, base);
    r.pos = key_pos;
    let result = field_step(op, buf, &mut r, run, &mut seen, out);
    if let Seen::Small(b) = seen {
        *bits = b;
    }
    result.map(|()| r.pos)
}

/// A message through [`field_step`] alone: one with more than 64 fields or a sparse lookup.
fn run_general(
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
    let mut run = NO_RUN;
    while !r.done() {
        field_step(op, buf, &mut r, &mut run, &mut seen, out)?;
    }
    if run != NO_RUN {
        out.extend_from_slice(&buf[run..]);
    }
    presence(op, &seen, out)?;
    if let Some(at) = at {
        close_len(out, at);
    }
    Ok(())
}

/// One field occurrence as the reference walks it, with this executor's [`step`]s.
#[inline(always)]
fn field_step(
    op: &MessageOp,
    buf: &[u8],
    r: &mut Reader<'_>,
    run: &mut usize,
    seen: &mut Seen,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let key_pos = r.pos;
    let key_at = r.offset();
    let key = r.varint()?;
    let (number, wire) = (key >> 3, (key & 7) as u8);
    let found = op.lookup.get(number).filter(|_| number != 0);
    if let Some(i) = found {
        let field = &op.fields[i];
        if field.same_key as usize == r.pos - key_pos {
            let value_pos = r.pos;
            if same(field, wire, r)? {
                seen.mark(i);
                if *run == NO_RUN {
                    *run = key_pos;
                }
                return Ok(());
            }
            r.pos = value_pos;
        }
    }
    if *run != NO_RUN {
        out.extend_from_slice(&buf[*run..key_pos]);
        *run = NO_RUN;
    }
    let Some(i) = found else {
        return skip_unknown(op, wire, number, key_at, r);
    };
    let field = &op.fields[i];
    let again = seen.mark(i);
    if fast(field, wire, r, out)? {
        return Ok(());
    }
    let value_pos = r.pos;
    if step(field, again, wire, r, out)? {
        return Ok(());
    }
    r.pos = value_pos;
    write_field(run_message, field, again, key, key_at, r, out)
}

/// The steps this executor takes itself (the module's list); false, with the reader anywhere
/// and nothing written, for an occurrence the reference's `write_field` must take.
#[inline(always)]
fn step(
    field: &FieldOp,
    again: bool,
    wire: u8,
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
) -> Result<bool, RecordError> {
    match &field.kind {
        FieldKind::Scalar { .. } if wire == WIRE_VARINT && !field.enum_rows.is_empty() => {
            let n = r.varint()? as i32;
            match field.enum_rows.get(n as u32 as usize) {
                Some(row) if !row.is_empty() => {
                    out.extend_from_slice(row);
                    Ok(true)
                }
                _ => Ok(false),
            }
        }
        FieldKind::Message { op, repeated } if wire == WIRE_LEN && (!again || *repeated) => {
            let (bytes, at) = r.len_delimited()?;
            run_message(op, bytes, at, out)?;
            Ok(true)
        }
        FieldKind::Special {
            special,
            tag,
            repeated,
        } if wire == WIRE_LEN && (!again || *repeated) => {
            let Ok((bytes, _)) = r.len_delimited() else {
                return Ok(false);
            };
            Ok(match special {
                Special::Timestamp => timestamp(*tag, bytes, out),
                Special::Date => date(*tag, bytes, out),
                Special::ConfluentDecimal(target) => decimal(*tag, *target, bytes, out),
                _ => false,
            })
        }
        _ => Ok(false),
    }
}

/// A `Timestamp` of `seconds` then `nanos` whose value is a TIMESTAMP.
#[inline(always)]
fn timestamp(tag: Tag, bytes: &[u8], out: &mut Vec<u8>) -> bool {
    // The layout `special::seconds_nanos` reads, with the varints read here.
    let (mut seconds, mut nanos, mut pos) = (0, 0, 0);
    if let Some((v, end)) = next_varint(bytes, pos, 1) {
        (seconds, pos) = (v as i64, end);
    }
    if let Some((v, end)) = next_varint(bytes, pos, 2) {
        (nanos, pos) = (v as i32 as i64, end);
    }
    if pos != bytes.len() || !(0..1_000_000_000).contains(&nanos) {
        return false;
    }
    match seconds
        .checked_mul(1_000_000)
        .and_then(|m| m.checked_add(nanos / 1000))
    {
        Some(m) if (MIN_TIMESTAMP_MICROS..=MAX_TIMESTAMP_MICROS).contains(&m) => {
            put_tag_varint(out, tag, m as u64);
            true
        }
        _ => false,
    }
}

/// The next field of a small message laid out in order: the varint of field `number` and its
/// end when the key at `pos` is that field's as a varint; `None` for any other key and for a
/// varint that does not read (ten bytes at most, the tenth 0 or 1), which the general path
/// reads again with its errors.
#[inline(always)]
fn next_varint(bytes: &[u8], pos: usize, number: u8) -> Option<(u64, usize)> {
    if bytes.get(pos) != Some(&(number << 3)) {
        return None;
    }
    let mut v = 0u64;
    for i in 0..10 {
        let b = *bytes.get(pos + 1 + i)?;
        v |= ((b & 0x7f) as u64) << (7 * i);
        if b < 0x80 {
            return (i < 9 || b <= 1).then_some((v, pos + 2 + i));
        }
    }
    None
}

/// A `google.type.Date` of `year`, `month`, `day` in order whose value is a DATE.
#[inline(always)]
fn date(tag: Tag, bytes: &[u8], out: &mut Vec<u8>) -> bool {
    let mut pos = 0;
    let mut ymd = [0i64; 3];
    for (k, v) in ymd.iter_mut().enumerate() {
        if let Some((x, end)) = next_varint(bytes, pos, k as u8 + 1) {
            (*v, pos) = (x as i32 as i64, end);
        }
    }
    if pos != bytes.len() {
        return false;
    }
    match days_from_civil(ymd[0], ymd[1], ymd[2]) {
        Ok(days) if (MIN_DATE_DAYS..=MAX_DATE_DAYS).contains(&(days as i32)) => {
            put_tag_varint(out, tag, days as i32 as i64 as u64);
            true
        }
        _ => false,
    }
}

/// A `confluent.type.Decimal` of `value` (one to eight bytes, or none), `precision` and `scale`
/// in order, at a scale the column's can hold.
#[inline(always)]
fn decimal(tag: Tag, target: DecimalTarget, bytes: &[u8], out: &mut Vec<u8>) -> bool {
    let mut value: &[u8] = &[];
    let mut pos = 0;
    if bytes.first() == Some(&0x0a) {
        match bytes.get(1) {
            Some(&n) if n <= 8 && bytes.len() >= 2 + n as usize => {
                value = &bytes[2..2 + n as usize];
                pos = 2 + n as usize;
            }
            _ => return false,
        }
    }
    if let Some((_, end)) = next_varint(bytes, pos, 2) {
        pos = end;
    }
    let mut scale = 0;
    if let Some((s, end)) = next_varint(bytes, pos, 3) {
        (scale, pos) = (s as i32 as i64, end);
    }
    if pos != bytes.len() || !(0..=target.scale() as i64).contains(&scale) {
        return false;
    }
    // Big-endian two's complement; no bytes is zero, as the general path reads them.
    let mut v = 0u64;
    for &b in value {
        v = v << 8 | b as u64;
    }
    let shift = 64 - 8 * value.len() as u32;
    let v = v.checked_shl(shift).map_or(0, |v| v as i64 >> shift) as i128;
    let Some(v) = v.checked_mul(POW10[(target.scale() as i64 - scale) as usize]) else {
        return false;
    };
    // The fewest little-endian two's-complement bytes (one for 0 and -1). An `i64` times at
    // most 10^9 is inside NUMERIC's range, and any `i128` inside BIGNUMERIC's.
    let n = (128 - (v ^ (v >> 127)).leading_zeros() as usize + 1).div_ceil(8);
    out.reserve(8 + 1 + 16);
    let t = tag.encoded_len() as usize;
    // SAFETY: 25 bytes of spare capacity were reserved: the tag's eight-byte store (of which at
    // most five count), the length byte after it and sixteen bytes of value after that; the
    // length is set over the `t + 1 + n` bytes written.
    unsafe {
        let p = out.as_mut_ptr().add(out.len());
        ptr::write_unaligned(p.cast::<u64>(), tag.word().to_le());
        p.add(t).write(n as u8);
        ptr::write_unaligned(p.add(t + 1).cast::<[u8; 16]>(), v.to_le_bytes());
        out.set_len(out.len() + t + 1 + n);
    }
    true
}

/// A tag and a varint (a timestamp's microseconds, a date's days) in two eight-byte stores
/// instead of `put_i64`'s out-of-line varint write.
#[inline(always)]
fn put_tag_varint(out: &mut Vec<u8>, tag: Tag, v: u64) {
    if v >= 1 << 56 {
        return put_i64(out, tag, v as i64);
    }
    let (x, n) = varint_word(v);
    let t = tag.encoded_len() as usize;
    out.reserve(16);
    // SAFETY: sixteen bytes of spare capacity were reserved: the tag's eight-byte store and the
    // varint's after at most five; the length is set over the `t + n` bytes written.
    unsafe {
        let p = out.as_mut_ptr().add(out.len());
        ptr::write_unaligned(p.cast::<u64>(), tag.word().to_le());
        ptr::write_unaligned(p.add(t).cast::<u64>(), x.to_le());
        out.set_len(out.len() + t + n);
    }
}

/// Sets the length byte [`open_len`] reserved: in place for a body under 128 bytes, else
/// `close_len` moves the body.
#[inline(always)]
fn close(out: &mut Vec<u8>, at: usize) {
    let body = out.len() - at - 1;
    if body < 0x80 {
        out[at] = body as u8;
    } else {
        close_len(out, at);
    }
}

/// The end of a message as the reference's `fill_and_check_presence` ends it: the defaults of
/// the implicit-presence fields not seen, in field order, then the required fields, then the
/// oneofs. With up to 64 fields, from masks; with more, the reference's loops.
#[inline(always)]
fn presence(op: &MessageOp, seen: &Seen, out: &mut Vec<u8>) -> Result<(), RecordError> {
    let bits = match seen {
        Seen::Small(bits) => *bits,
        Seen::Large(_) => {
            for (i, bytes) in op.defaults.iter() {
                if !seen.has(*i as usize) {
                    out.extend_from_slice(bytes);
                }
            }
            return check_presence(op, seen);
        }
    };
    let mut missing = op.implicit_mask & !bits;
    while missing != 0 {
        let i = missing.trailing_zeros() as usize;
        out.extend_from_slice(&op.default_of[i]);
        missing &= missing - 1;
    }
    if op.required_mask & !bits != 0 || !op.oneofs.is_empty() {
        return check_presence(op, seen);
    }
    Ok(())
}
