//! The protobuf wire format, just enough to walk a row without a generated type: fields as
//! (number, wire value) pairs, packed runs, and scalars by their declared proto kind.

use super::ProtoKind;

pub(super) const WIRE_VARINT: u8 = 0;
pub(super) const WIRE_I64: u8 = 1;
pub(super) const WIRE_LEN: u8 = 2;
pub(super) const WIRE_START_GROUP: u8 = 3;
pub(super) const WIRE_END_GROUP: u8 = 4;
pub(super) const WIRE_I32: u8 = 5;

#[derive(Debug, Clone, Copy)]
pub(super) enum Wire<'a> {
    Varint(u64),
    I64(u64),
    I32(u32),
    Len(&'a [u8]),
}

pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pub(super) pos: usize,
}

pub(super) const PARSE_ERROR: &str =
    "Could not parse the row as a protocol buffer message of the writer schema";

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    #[inline(always)]
    pub(super) fn varint(&mut self) -> Result<u64, ()> {
        // Tags, lengths and small values are one byte.
        if let Some(&byte) = self.buf.get(self.pos)
            && byte < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(byte));
        }
        self.varint_slow()
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Result<u64, ()> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let byte = *self.buf.get(self.pos).ok_or(())?;
            self.pos += 1;
            if shift == 63 && byte > 1 {
                return Err(());
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(())
    }

    #[inline(always)]
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], ()> {
        let end = self.pos.checked_add(n).ok_or(())?;
        let slice = self.buf.get(self.pos..end).ok_or(())?;
        self.pos = end;
        Ok(slice)
    }

    /// The next (field number, wire type, value); groups of unknown fields are skipped whole.
    #[inline(always)]
    pub(super) fn next(&mut self) -> Result<Option<(u32, Wire<'a>)>, ()> {
        loop {
            if self.pos >= self.buf.len() {
                return Ok(None);
            }
            let key = self.varint()?;
            let number = u32::try_from(key >> 3).map_err(|_| ())?;
            if number == 0 {
                return Err(());
            }
            let wire = match (key & 7) as u8 {
                WIRE_VARINT => Wire::Varint(self.varint()?),
                WIRE_I64 => Wire::I64(u64::from_le_bytes(
                    self.take(8)?.try_into().map_err(|_| ())?,
                )),
                WIRE_I32 => Wire::I32(u32::from_le_bytes(
                    self.take(4)?.try_into().map_err(|_| ())?,
                )),
                WIRE_LEN => {
                    let len = usize::try_from(self.varint()?).map_err(|_| ())?;
                    Wire::Len(self.take(len)?)
                }
                WIRE_START_GROUP => {
                    self.skip_group(number, 0)?;
                    continue;
                }
                _ => return Err(()),
            };
            return Ok(Some((number, wire)));
        }
    }

    pub(super) fn skip_group(&mut self, number: u32, depth: u32) -> Result<(), ()> {
        if depth > 64 {
            return Err(());
        }
        loop {
            let key = self.varint()?;
            let inner = u32::try_from(key >> 3).map_err(|_| ())?;
            match (key & 7) as u8 {
                WIRE_VARINT => {
                    self.varint()?;
                }
                WIRE_I64 => {
                    self.take(8)?;
                }
                WIRE_I32 => {
                    self.take(4)?;
                }
                WIRE_LEN => {
                    let len = usize::try_from(self.varint()?).map_err(|_| ())?;
                    self.take(len)?;
                }
                WIRE_START_GROUP => self.skip_group(inner, depth + 1)?,
                WIRE_END_GROUP if inner == number => return Ok(()),
                _ => return Err(()),
            }
        }
    }
}

#[inline]
pub(super) fn wire_type_of(wire: &Wire<'_>) -> u8 {
    match wire {
        Wire::Varint(_) => WIRE_VARINT,
        Wire::I64(_) => WIRE_I64,
        Wire::I32(_) => WIRE_I32,
        Wire::Len(_) => WIRE_LEN,
    }
}

/// A decoded proto scalar.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scalar<'a> {
    Signed(i64),
    Unsigned(u64),
    Float(f64),
    Bool(bool),
    Enum(i32),
    Text(&'a [u8]),
}

#[inline(always)]
pub(super) fn scalar<'a>(proto: ProtoKind, wire: Wire<'a>) -> Scalar<'a> {
    match (proto, wire) {
        (ProtoKind::Int64, Wire::Varint(v)) => Scalar::Signed(v as i64),
        (ProtoKind::Int32, Wire::Varint(v)) => Scalar::Signed(i64::from(v as i32)),
        (ProtoKind::Uint64, Wire::Varint(v)) => Scalar::Unsigned(v),
        (ProtoKind::Uint32, Wire::Varint(v)) => Scalar::Unsigned(u64::from(v as u32)),
        (ProtoKind::Sint64, Wire::Varint(v)) => {
            Scalar::Signed(((v >> 1) as i64) ^ -((v & 1) as i64))
        }
        (ProtoKind::Sint32, Wire::Varint(v)) => {
            let v = v as u32;
            Scalar::Signed(i64::from(((v >> 1) as i32) ^ -((v & 1) as i32)))
        }
        (ProtoKind::Bool, Wire::Varint(v)) => Scalar::Bool(v != 0),
        (ProtoKind::Enum, Wire::Varint(v)) => Scalar::Enum(v as i32),
        (ProtoKind::Fixed64, Wire::I64(v)) => Scalar::Unsigned(v),
        (ProtoKind::Sfixed64, Wire::I64(v)) => Scalar::Signed(v as i64),
        (ProtoKind::Double, Wire::I64(v)) => Scalar::Float(f64::from_bits(v)),
        (ProtoKind::Fixed32, Wire::I32(v)) => Scalar::Unsigned(u64::from(v)),
        (ProtoKind::Sfixed32, Wire::I32(v)) => Scalar::Signed(i64::from(v as i32)),
        (ProtoKind::Float, Wire::I32(v)) => Scalar::Float(f64::from(f32::from_bits(v))),
        (_, Wire::Len(b)) => Scalar::Text(b),
        // Callers check the wire type first; a mismatch never reaches here.
        (_, Wire::Varint(v)) | (_, Wire::I64(v)) => Scalar::Unsigned(v),
        (_, Wire::I32(v)) => Scalar::Unsigned(u64::from(v)),
    }
}
