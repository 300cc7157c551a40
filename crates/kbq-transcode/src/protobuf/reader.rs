//! A bounds-checked cursor over Protobuf wire data, for the message walk ([`super::exec`]) and
//! the small well-known messages ([`super::special`]). Every read either returns a value or a
//! [`RecordError`] naming the byte offset; nothing here can panic on any input.

use crate::RecordError;

use super::ops::Src;

pub(super) const WIRE_VARINT: u8 = 0;
pub(super) const WIRE_I64: u8 = 1;
pub(super) const WIRE_LEN: u8 = 2;
const WIRE_START_GROUP: u8 = 3;
pub(super) const WIRE_END_GROUP: u8 = 4;
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
pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8], base: usize) -> Self {
        Reader { buf, pos: 0, base }
    }

    #[inline]
    pub(super) fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline]
    pub(super) fn offset(&self) -> usize {
        self.base + self.pos
    }

    #[inline]
    pub(super) fn varint(&mut self) -> Result<u64, RecordError> {
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
    pub(super) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RecordError> {
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
    pub(super) fn fixed32(&mut self) -> Result<u32, RecordError> {
        let b = self.take(4, "a fixed32")?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    pub(super) fn fixed64(&mut self) -> Result<u64, RecordError> {
        let b = self.take(8, "a fixed64")?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A length-delimited field's bytes, and the offset they start at.
    #[inline(always)]
    pub(super) fn len_delimited(&mut self) -> Result<(&'a [u8], usize), RecordError> {
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
    pub(super) fn skip(&mut self, wire: u8, number: u64, key_at: usize) -> Result<(), RecordError> {
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
    pub(super) fn value(&mut self, src: Src) -> Result<Val<'a>, RecordError> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
