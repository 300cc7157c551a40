//! A bounds-checked cursor over Avro binary data. Every read either returns a value or a
//! [`RecordError`] naming the byte offset; nothing here can panic on any input.

use super::error::RecordError;

pub struct AvroReader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Items of zero encoded size (nulls, empty records) the rest of the record may still hold.
    zero_size_budget: u64,
}

/// Zero-size items cost no input, so only a budget per record stops a few bytes of block headers
/// from asking for billions of them (nested or in many blocks).
pub(crate) const MAX_ZERO_SIZE_ITEMS: u64 = 1 << 16;

impl<'a> AvroReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        AvroReader {
            buf,
            pos: 0,
            zero_size_budget: MAX_ZERO_SIZE_ITEMS,
        }
    }

    /// A reader at `pos` of `buf` with what is left of a record's zero-size budget: the flat
    /// executor (`flat/`) hands its cold paths to this reader mid-record and takes back
    /// [`AvroReader::position`] and [`AvroReader::zero_size_budget`].
    pub(crate) fn resume(buf: &'a [u8], pos: usize, zero_size_budget: u64) -> Self {
        AvroReader {
            buf,
            pos,
            zero_size_budget,
        }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn zero_size_budget(&self) -> u64 {
        self.zero_size_budget
    }

    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Zigzag varint as Avro's `long`.
    #[inline]
    pub fn long(&mut self) -> Result<i64, RecordError> {
        let start = self.pos;
        // Fast path: most values fit in one byte.
        if let Some(&b) = self.buf.get(start)
            && b < 0x80
        {
            self.pos = start + 1;
            return Ok(((b >> 1) as i64) ^ -((b & 1) as i64));
        }
        let mut value: u64 = 0;
        let mut shift = 0u32;
        loop {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(RecordError::Truncated {
                    offset: self.pos,
                    what: "a varint",
                });
            };
            self.pos += 1;
            // The 10th byte may only carry the last bit of a 64-bit value.
            if shift == 63 && b > 1 {
                return Err(RecordError::BadVarint { offset: start });
            }
            value |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                break;
            }
            shift += 7;
        }
        Ok(((value >> 1) as i64) ^ -((value & 1) as i64))
    }

    /// Avro's `int`: a zigzag varint that must fit 32 bits.
    #[inline]
    pub fn int(&mut self) -> Result<i32, RecordError> {
        let offset = self.pos;
        let v = self.long()?;
        i32::try_from(v).map_err(|_| RecordError::IntOutOfRange { offset, value: v })
    }

    #[inline]
    pub fn boolean(&mut self) -> Result<bool, RecordError> {
        let offset = self.pos;
        match self.buf.get(offset) {
            Some(0) => {
                self.pos += 1;
                Ok(false)
            }
            Some(1) => {
                self.pos += 1;
                Ok(true)
            }
            Some(&value) => Err(RecordError::BadBoolean { offset, value }),
            None => Err(RecordError::Truncated {
                offset,
                what: "a boolean",
            }),
        }
    }

    #[inline]
    pub fn fixed(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RecordError> {
        if self.remaining() < n {
            return Err(RecordError::Truncated {
                offset: self.pos,
                what,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    pub fn float(&mut self) -> Result<f32, RecordError> {
        let b = self.fixed(4, "a float")?;
        Ok(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    pub fn double(&mut self) -> Result<f64, RecordError> {
        let b = self.fixed(8, "a double")?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(f64::from_le_bytes(a))
    }

    /// A length prefix, checked against the bytes that are left.
    #[inline]
    pub fn len(&mut self) -> Result<usize, RecordError> {
        let offset = self.pos;
        let len = self.long()?;
        if len < 0 {
            return Err(RecordError::NegativeLength { offset, len });
        }
        if len as u64 > self.remaining() as u64 {
            return Err(RecordError::LengthTooLarge {
                offset,
                len,
                remaining: self.remaining(),
            });
        }
        Ok(len as usize)
    }

    #[inline]
    pub fn bytes(&mut self) -> Result<&'a [u8], RecordError> {
        let n = self.len()?;
        self.fixed(n, "bytes")
    }

    #[inline]
    pub fn string(&mut self) -> Result<&'a [u8], RecordError> {
        let n = self.len()?;
        let offset = self.pos;
        let s = self.fixed(n, "a string")?;
        if !crate::utf8::valid(s) {
            return Err(RecordError::InvalidUtf8 { offset });
        }
        Ok(s)
    }

    /// A union branch index, checked against the number of branches.
    #[inline]
    pub fn branch(&mut self, branches: usize) -> Result<usize, RecordError> {
        let offset = self.pos;
        let index = self.long()?;
        if index < 0 || index as u64 >= branches as u64 {
            return Err(RecordError::BadUnionBranch {
                offset,
                index,
                branches,
            });
        }
        Ok(index as usize)
    }

    #[inline]
    pub fn enum_index(&mut self, symbols: usize) -> Result<usize, RecordError> {
        let offset = self.pos;
        let index = self.int()? as i64;
        if index < 0 || index as u64 >= symbols as u64 {
            return Err(RecordError::BadEnumIndex {
                offset,
                index,
                symbols,
            });
        }
        Ok(index as usize)
    }

    /// The item count of the next array/map block (0 ends the sequence). A negative count is
    /// followed by the block's size in bytes, which is read and checked. `min_item_size` bounds
    /// the count by the bytes left; zero-size items draw on the record's budget, so a tiny
    /// payload cannot make us loop (or write) for 2^63 iterations.
    #[inline]
    pub fn block(&mut self, min_item_size: usize) -> Result<usize, RecordError> {
        let offset = self.pos;
        let count = self.long()?;
        let n = if count < 0 {
            self.len()?;
            count.unsigned_abs()
        } else {
            count as u64
        };
        let limit = self
            .remaining()
            .checked_div(min_item_size)
            .map_or(self.zero_size_budget, |n| n as u64);
        if n > limit {
            return Err(RecordError::AbsurdCount { offset, count });
        }
        if min_item_size == 0 {
            self.zero_size_budget -= n;
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zigzag(v: i64) -> Vec<u8> {
        let mut u = ((v << 1) ^ (v >> 63)) as u64;
        let mut out = Vec::new();
        loop {
            if u < 0x80 {
                out.push(u as u8);
                return out;
            }
            out.push((u as u8) | 0x80);
            u >>= 7;
        }
    }

    #[test]
    fn longs_round_trip_at_the_extremes() {
        for v in [0, -1, 1, 63, -64, 64, i64::MAX, i64::MIN, i32::MIN as i64] {
            let b = zigzag(v);
            let mut r = AvroReader::new(&b);
            assert_eq!(r.long().unwrap(), v);
            assert_eq!(r.remaining(), 0);
        }
    }

    #[test]
    fn an_overlong_varint_is_an_error_not_a_wrap() {
        let b = [0xff; 11];
        assert!(matches!(
            AvroReader::new(&b).long(),
            Err(RecordError::BadVarint { offset: 0 })
        ));
        let b = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(AvroReader::new(&b).long().is_err());
    }

    #[test]
    fn lengths_are_checked_against_the_data() {
        let mut b = zigzag(-3);
        assert!(matches!(
            AvroReader::new(&b).bytes(),
            Err(RecordError::NegativeLength { len: -3, .. })
        ));
        b = zigzag(1 << 40);
        assert!(matches!(
            AvroReader::new(&b).bytes(),
            Err(RecordError::LengthTooLarge { .. })
        ));
        let mut b = zigzag(2);
        b.extend_from_slice(&[0xc3, 0x28]);
        assert!(matches!(
            AvroReader::new(&b).string(),
            Err(RecordError::InvalidUtf8 { offset: 1 })
        ));
    }

    #[test]
    fn zero_size_items_share_one_budget_across_blocks() {
        // Two blocks of 40000 zero-size items each: the second exceeds the record's budget.
        let mut b = zigzag(40_000);
        b.extend(zigzag(40_000));
        let mut r = AvroReader::new(&b);
        assert_eq!(r.block(0).unwrap(), 40_000);
        assert!(matches!(r.block(0), Err(RecordError::AbsurdCount { .. })));
        // Items of at least one byte are bounded by the bytes left instead.
        let b = zigzag(3);
        assert!(matches!(
            AvroReader::new(&b).block(1),
            Err(RecordError::AbsurdCount { .. })
        ));
    }

    #[test]
    fn ints_outside_32_bits_are_rejected() {
        let b = zigzag(1 << 31);
        assert!(matches!(
            AvroReader::new(&b).int(),
            Err(RecordError::IntOutOfRange { .. })
        ));
    }
}
