//! Protobuf wire reading for change events: the fields of one message level (where an envelope's
//! `after` or `op` is), and the renumbering of a key-only row into the value rows' descriptor.

use std::ops::Range;

use crate::RecordError;

/// One field of a message as it is on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WireField {
    pub number: u32,
    pub wire: u8,
    /// The value: a varint's or fixed value's bytes, a length-delimited field's payload.
    pub value: Range<usize>,
}

/// The fields of the message in `data` (offsets relative to `data`), in wire order.
pub(super) fn fields(data: &[u8]) -> Result<Vec<WireField>, RecordError> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let at = pos;
        let key = read_varint(data, &mut pos).ok_or(RecordError::ProtoBadVarint { offset: at })?;
        let (number, wire) = ((key >> 3) as u32, (key & 7) as u8);
        let truncated = |what| RecordError::ProtoTruncated { offset: at, what };
        let start = pos;
        match wire {
            0 => {
                read_varint(data, &mut pos).ok_or(RecordError::ProtoBadVarint { offset: start })?;
            }
            1 => {
                pos = pos
                    .checked_add(8)
                    .filter(|&p| p <= data.len())
                    .ok_or_else(|| truncated("a fixed64"))?
            }
            5 => {
                pos = pos
                    .checked_add(4)
                    .filter(|&p| p <= data.len())
                    .ok_or_else(|| truncated("a fixed32"))?
            }
            2 => {
                let len = read_varint(data, &mut pos)
                    .ok_or(RecordError::ProtoBadVarint { offset: start })?;
                let begin = pos;
                pos = usize::try_from(len)
                    .ok()
                    .and_then(|l| pos.checked_add(l))
                    .filter(|&p| p <= data.len())
                    .ok_or_else(|| truncated("a length-delimited field"))?;
                out.push(WireField {
                    number,
                    wire,
                    value: begin..pos,
                });
                continue;
            }
            _ => {
                return Err(RecordError::ProtoWireType {
                    offset: at,
                    number: number.into(),
                    wire,
                });
            }
        }
        out.push(WireField {
            number,
            wire,
            value: start..pos,
        });
    }
    Ok(out)
}

/// The last occurrence of field `number` (the one a parser keeps for a singular field).
pub(super) fn last(fields: &[WireField], number: u32) -> Option<&WireField> {
    fields.iter().rev().find(|f| f.number == number)
}

pub(super) fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

/// Rewrites a flat proto row (top-level scalar and string fields, as key rows are) from the
/// field numbers of `from` to those of `to`, matching fields by name: a key-only DELETE row can
/// then travel in a request of the value rows' writer schema. `None` when a field of the row has
/// no same-named field of the same type in `to`, or the row is not flat.
pub fn renumber(
    row: &[u8],
    from: &prost_types::DescriptorProto,
    to: &prost_types::DescriptorProto,
    out: &mut Vec<u8>,
) -> Option<()> {
    let start = out.len();
    let result = (|| {
        for f in fields(row).ok()? {
            let field = from.field.iter().find(|d| d.number() as u32 == f.number)?;
            let target = to.field.iter().find(|d| {
                d.name().eq_ignore_ascii_case(field.name())
                    && d.r#type == field.r#type
                    && d.type_name.is_none()
            })?;
            let tag = ((target.number() as u64) << 3) | f.wire as u64;
            crate::proto::put_varint(out, tag);
            if f.wire == 2 {
                crate::proto::put_varint(out, f.value.len() as u64);
            }
            out.extend_from_slice(&row[f.value]);
        }
        Some(())
    })();
    if result.is_none() {
        out.truncate(start);
    }
    result
}
