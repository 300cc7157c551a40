//! Runs a compiled Protobuf plan over a message's wire bytes, appending the row's proto2 bytes to
//! the caller's buffer. Each field occurrence on the wire becomes one field occurrence in the row
//! (renumbered, converted where the column needs it), so protobuf's own rules carry over: the
//! last occurrence of a singular scalar wins, repeated fields keep their order. What the wire
//! cannot say by itself is filled in at the end of each message: the defaults of
//! implicit-presence fields it omitted.
//!
//! The reference executor: `Plan::transcode_reference`, which the differential tests and the
//! fuzzers compare the product's executor (`flat.rs`) with. This file is its walk over a
//! message's fields and the copy of the runs that are already the row's bytes; each occurrence's
//! checks and writes are `field.rs` (which `flat.rs` shares for what its own steps do not take),
//! the wire cursor `reader.rs`, a scalar's conversions `scalar.rs`, and the well-known messages
//! read as one value (timestamps, dates, decimals, wrappers) `special.rs`.

use crate::RecordError;
use crate::proto::{close_len, open_len};

use super::field::{NO_RUN, Seen, check_presence, fast, same, skip_unknown, write_field};
use super::ops::MessageOp;
use super::reader::Reader;

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
        write_field(run_message, field, again, key, key_at, &mut r, out)?;
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
