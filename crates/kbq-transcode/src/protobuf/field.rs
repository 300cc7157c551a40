//! One field occurrence of a Protobuf message, as both executors take it: the checks of an
//! occurrence that is already the row's bytes ([`same`]), the common scalars in one step
//! ([`fast`]), every other kind written ([`write_field`]), unknown fields, the set of fields
//! seen and the end-of-message presence checks. The product's executor (`flat.rs`) calls these
//! for every occurrence its own steps do not take; the reference walk (`exec.rs`) for all.

use std::sync::Arc;

use crate::RecordError;
use crate::exec::put_i64;
use crate::proto::{put_len_delimited, put_varint, varint_len};

use super::ops::{Fast, FieldKind, FieldOp, MessageOp};
use super::reader::{Reader, WIRE_END_GROUP, WIRE_I64, WIRE_LEN, WIRE_VARINT};
use super::scalar::{utf8, write_scalar};
use super::special::write_special;

/// An executor's walk of a message: what [`write_field`] runs a nested message with.
pub(super) type Walk = fn(&MessageOp, &[u8], usize, &mut Vec<u8>) -> Result<(), RecordError>;

/// Which fields of a message occurred on the wire: one word for up to 64 fields (a shift and
/// an or per field; a 128-bit set cost several instructions per field more).
pub(super) enum Seen {
    Small(u64),
    Large(Vec<u64>),
}

impl Seen {
    #[inline]
    pub(super) fn new(n: usize) -> Seen {
        if n <= 64 {
            Seen::Small(0)
        } else {
            Seen::Large(vec![0; n.div_ceil(64)])
        }
    }

    /// Marks field `i`; returns whether it was marked before.
    #[inline]
    pub(super) fn mark(&mut self, i: usize) -> bool {
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
    pub(super) fn has(&self, i: usize) -> bool {
        match self {
            Seen::Small(bits) => *bits & (1 << i) != 0,
            Seen::Large(words) => words[i / 64] & (1 << (i % 64)) != 0,
        }
    }
}

/// A field the plan has no column for: an impossible key (number 0, a stray end-group) or, under
/// `unknown_fields: error`, any unknown field is refused; otherwise it is skipped.
#[inline(always)]
pub(super) fn skip_unknown(
    op: &MessageOp,
    wire: u8,
    number: u64,
    key_at: usize,
    r: &mut Reader<'_>,
) -> Result<(), RecordError> {
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
    r.skip(wire, number, key_at)
}

/// A field occurrence that is neither copied nor written by [`fast`], by its kind: a scalar
/// (packed or not) converted, a nested message walked, a well-known message read as one value.
/// `again`: the field occurred before in this message; `key` is the occurrence's (field number
/// and wire type), read at `key_at`.
#[inline(always)]
pub(super) fn write_field(
    walk: Walk,
    field: &FieldOp,
    again: bool,
    key: u64,
    key_at: usize,
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let (number, wire) = (key >> 3, (key & 7) as u8);
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
            walk(inner, bytes, at, out)?;
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
    Ok(())
}

/// The required fields and the oneofs of a message, checked against the fields seen.
#[inline(always)]
pub(super) fn check_presence(op: &MessageOp, seen: &Seen) -> Result<(), RecordError> {
    for &i in op.required.iter() {
        if !seen.has(i as usize) {
            if let Some((_, e)) = op.default_errors.iter().find(|(j, _)| *j == i) {
                return Err(e.clone());
            }
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
    Ok(())
}

/// No run of copied fields is pending.
pub(super) const NO_RUN: usize = usize::MAX;

/// Reads a [`Fast`] field whose row tag is its own key ([`FieldOp::same_key`]) and checks it as
/// [`fast`] would; true when the occurrence's bytes are exactly what [`fast`] would write
/// (canonical varints, a bool of 0 or 1, an int32 as protobuf sign-extends it), so that they
/// can be copied as they are. False leaves the reader anywhere: the caller rewinds.
#[inline(always)]
pub(super) fn same(field: &FieldOp, wire: u8, r: &mut Reader<'_>) -> Result<bool, RecordError> {
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
pub(super) fn fast(
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
