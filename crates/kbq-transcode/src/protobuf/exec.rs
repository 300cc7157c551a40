//! Runs a compiled Protobuf plan over a message's wire bytes, appending the row's proto2 bytes to
//! the caller's buffer. Each field occurrence on the wire becomes one field occurrence in the row
//! (renumbered, converted where the column needs it), so protobuf's own rules carry over: the
//! last occurrence of a singular scalar wins, repeated fields keep their order. What the wire
//! cannot say by itself is filled in at the end of each message: the defaults of
//! implicit-presence fields it omitted.
//!
//! This file is the walk over a message's fields and the copy of the runs that are already the
//! row's bytes; the wire cursor is `reader.rs`, a scalar's conversions `scalar.rs`, and the
//! well-known messages read as one value (timestamps, dates, decimals, wrappers) `special.rs`.

use std::sync::Arc;

use crate::RecordError;
use crate::exec::put_i64;
use crate::proto::{close_len, open_len, put_len_delimited, put_varint, varint_len};

use super::ops::{Fast, FieldKind, FieldOp, MessageOp};
use super::reader::{Reader, WIRE_END_GROUP, WIRE_I64, WIRE_LEN, WIRE_VARINT};
use super::scalar::{utf8, write_scalar};
use super::special::write_special;

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
            skip_unknown(op, wire, number, key_at, &mut r)?;
            continue;
        };
        let field = &op.fields[i];
        let again = seen.mark(i);
        if fast(field, wire, &mut r, out)? {
            continue;
        }
        write_field(field, again, wire, number, key_at, &mut r, out)?;
    }
    if run != NO_RUN {
        out.extend_from_slice(&buf[run..]);
    }
    fill_and_check_presence(op, &seen, out)?;
    if let Some(at) = at {
        close_len(out, at);
    }
    Ok(())
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
/// `again`: the field occurred before in this message.
#[inline(always)]
pub(super) fn write_field(
    field: &FieldOp,
    again: bool,
    wire: u8,
    number: u64,
    key_at: usize,
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
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
    Ok(())
}

/// What the wire cannot say by itself, at the end of a message: the defaults of the
/// implicit-presence fields it left out, then the required fields and oneofs checked.
#[inline(always)]
fn fill_and_check_presence(
    op: &MessageOp,
    seen: &Seen,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    for (i, bytes) in op.defaults.iter() {
        if !seen.has(*i as usize) {
            out.extend_from_slice(bytes);
        }
    }
    check_presence(op, seen)
}

/// The required fields and the oneofs of a message, checked against the fields seen.
#[inline(always)]
pub(super) fn check_presence(op: &MessageOp, seen: &Seen) -> Result<(), RecordError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf::{MessagePath, ProtoSchema};
    use crate::{Plan, PlanOptions};

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
