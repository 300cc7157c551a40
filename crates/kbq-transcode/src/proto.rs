//! Protobuf wire-format writing into a caller's buffer.

pub const WIRE_VARINT: u32 = 0;
pub const WIRE_FIXED64: u32 = 1;
pub const WIRE_LEN: u32 = 2;

/// A field key (number and wire type), encoded once when the plan is compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    bytes: [u8; 5],
    len: u8,
}

impl Tag {
    pub fn new(number: u32, wire: u32) -> Tag {
        let mut bytes = [0u8; 5];
        let mut v = ((number << 3) | wire) as u64;
        let mut len = 0;
        loop {
            if v < 0x80 {
                bytes[len] = v as u8;
                len += 1;
                break;
            }
            bytes[len] = (v as u8) | 0x80;
            v >>= 7;
            len += 1;
        }
        Tag {
            bytes,
            len: len as u8,
        }
    }

    /// The encoded key's length in bytes (1 to 5).
    #[inline(always)]
    pub fn encoded_len(&self) -> u8 {
        self.len
    }

    /// The encoded key in the low bytes of a little-endian word, zeros above: written as one
    /// eight-byte store of which [`Tag::encoded_len`] bytes count.
    #[inline(always)]
    pub fn word(&self) -> u64 {
        let b = self.bytes;
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], 0, 0, 0])
    }

    #[inline(always)]
    pub fn put(&self, out: &mut Vec<u8>) {
        // Field numbers below 16 (most columns) have one-byte keys, below 2048 two-byte keys:
        // fixed-size copies the compiler inlines, not a call to memcpy.
        match self.len {
            1 => out.push(self.bytes[0]),
            2 => out.extend_from_slice(&[self.bytes[0], self.bytes[1]]),
            n => out.extend_from_slice(&self.bytes[..n as usize]),
        }
    }
}

#[inline(always)]
pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    if v < 0x80 {
        out.push(v as u8);
    } else {
        put_long_varint(out, v);
    }
}

/// A varint below 2^56 as the low bytes of a little-endian word, and its length: the 7-bit
/// groups spread over the word in three shifts, the continuation bits set on every byte but the
/// last.
#[inline(always)]
pub fn varint_word(v: u64) -> (u64, usize) {
    debug_assert!(v < 1 << 56);
    let n = varint_len(v);
    let x = (v & 0x0fff_ffff) | ((v & 0x00ff_ffff_f000_0000) << 4);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x0fff_c000_0fff_c000) << 2);
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x3f80_3f80_3f80_3f80) << 1);
    (
        x | (0x8080_8080_8080_8080 & ((1u64 << (8 * (n - 1))) - 1)),
        n,
    )
}

#[inline(never)]
fn put_long_varint(out: &mut Vec<u8>, mut v: u64) {
    if v < 1 << 56 {
        // Up to eight bytes at once: one fixed-size copy, then the bytes past the varint's
        // end dropped again.
        let (x, n) = varint_word(v);
        out.extend_from_slice(&x.to_le_bytes());
        out.truncate(out.len() - (8 - n));
        return;
    }
    let mut buf = [0u8; 10];
    let mut n = 0;
    while v >= 0x80 {
        buf[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    buf[n] = v as u8;
    out.extend_from_slice(&buf[..=n]);
}

#[inline]
pub fn varint_len(v: u64) -> usize {
    ((64 - (v | 1).leading_zeros() as usize) * 9 + 64) / 64
}

#[inline(always)]
pub fn put_len_delimited(out: &mut Vec<u8>, tag: Tag, data: &[u8]) {
    tag.put(out);
    put_varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// Opens a length-delimited field whose length is not known yet: one byte is reserved for the
/// length, which covers every message under 128 bytes; [`close_len`] moves the body when the
/// length needs more bytes. Returns the position of the reserved byte.
#[inline]
pub fn open_len(out: &mut Vec<u8>, tag: Tag) -> usize {
    tag.put(out);
    out.push(0);
    out.len() - 1
}

#[inline]
pub fn close_len(out: &mut Vec<u8>, at: usize) {
    let body = out.len() - at - 1;
    if body < 0x80 {
        out[at] = body as u8;
        return;
    }
    let extra = varint_len(body as u64) - 1;
    let old_len = out.len();
    out.resize(old_len + extra, 0);
    out.copy_within(at + 1..old_len, at + 1 + extra);
    let mut v = body as u64;
    let mut i = at;
    while v >= 0x80 {
        out[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    out[i] = v as u8;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_len_matches_the_encoding() {
        for v in [0u64, 1, 127, 128, 16383, 16384, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
        }
    }

    /// Varints as the specification writes them, seven bits at a time.
    fn reference_varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        out
    }

    #[test]
    fn put_varint_writes_every_length_as_the_specification_does() {
        let mut values = vec![
            0u64,
            1,
            0x7f,
            u64::MAX,
            i64::MIN as u64,
            (1 << 56) - 1,
            1 << 56,
        ];
        for bits in 1..64 {
            values.extend([(1u64 << bits) - 1, 1 << bits, (1 << bits) + 1]);
            values.push(0x9e37_79b9_7f4a_7c15 >> (64 - bits));
        }
        for v in values {
            let mut out = vec![0xaa];
            put_varint(&mut out, v);
            assert_eq!(out[1..], reference_varint(v)[..], "{v:#x}");
            assert_eq!(out[0], 0xaa);
        }
    }

    #[test]
    fn a_long_body_is_moved_behind_its_multi_byte_length() {
        for body in [0usize, 127, 128, 300, 20_000] {
            let mut out = vec![9u8];
            let at = open_len(&mut out, Tag::new(1, WIRE_LEN));
            out.extend((0..body).map(|i| i as u8));
            close_len(&mut out, at);
            let mut expected = vec![9u8];
            put_len_delimited(
                &mut expected,
                Tag::new(1, WIRE_LEN),
                &(0..body).map(|i| i as u8).collect::<Vec<_>>(),
            );
            assert_eq!(out, expected);
        }
    }
}
