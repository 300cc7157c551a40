//! The flat executor's two cursors: [`Input`] over a record's Avro bytes and [`Output`] onto the
//! batch buffer. The only `unsafe` of the flat executor is here, in [`Output`]: it writes into
//! the buffer's spare capacity and then sets its length.
//!
//! Invariants, each checked in the function that relies on it:
//! * every write first makes sure the buffer has room for the widest store it makes
//!   ([`Output::room`], one comparison, growing on a cold path), so a store never leaves the
//!   allocation;
//! * the length is set only over bytes that were written, so no uninitialised byte becomes part
//!   of the buffer;
//! * [`Input`] reads only through slices: its fast paths check the bytes left and hand every
//!   other case (long varints, truncation, bad lengths, the zero-size budget) to the reference
//!   reader, [`AvroReader`], which also makes every error exactly the reference's.

use std::ptr;

use crate::error::RecordError;
use crate::proto::{Tag, close_len};
use crate::reader::{AvroReader, MAX_ZERO_SIZE_ITEMS};

/// A cursor over one record's Avro bytes with the record's budget of zero-size items.
pub(super) struct Input<'a> {
    buf: &'a [u8],
    pos: usize,
    budget: u64,
}

const HIGH: u64 = 0x8080_8080_8080_8080;

impl<'a> Input<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Input {
            buf,
            pos: 0,
            budget: MAX_ZERO_SIZE_ITEMS,
        }
    }

    #[inline(always)]
    pub(super) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Runs `f` on the reference reader at this position and takes its position and budget
    /// back: the cold half of every read, and the ops the flat plan leaves to the reference.
    #[inline(always)]
    pub(super) fn reference<T>(
        &mut self,
        f: impl FnOnce(&mut AvroReader<'a>) -> Result<T, RecordError>,
    ) -> Result<T, RecordError> {
        let mut r = AvroReader::resume(self.buf, self.pos, self.budget);
        let v = f(&mut r);
        self.pos = r.position();
        self.budget = r.zero_size_budget();
        v
    }

    #[cold]
    #[inline(never)]
    fn cold_long(&mut self) -> Result<i64, RecordError> {
        self.reference(|r| r.long())
    }

    /// The raw varint, if it has at most eight bytes and they are there: one byte, two bytes,
    /// else one word load.
    #[inline(always)]
    fn varint(&mut self) -> Option<u64> {
        let b = self.buf.get(self.pos..)?;
        match b {
            [b0, ..] if *b0 < 0x80 => {
                self.pos += 1;
                Some(*b0 as u64)
            }
            [b0, b1, ..] if *b1 < 0x80 => {
                self.pos += 2;
                Some((*b0 & 0x7f) as u64 | (*b1 as u64) << 7)
            }
            _ => {
                let word = u64::from_le_bytes(*b.first_chunk::<8>()?);
                let stops = !word & HIGH;
                if stops == 0 {
                    return None;
                }
                let bytes = (stops.trailing_zeros() as usize + 1) / 8;
                let keep = if bytes == 8 {
                    word
                } else {
                    word & ((1u64 << (8 * bytes)) - 1)
                };
                self.pos += bytes;
                Some(compress(keep & !HIGH))
            }
        }
    }

    /// Avro's `long` (a zigzag varint).
    #[inline(always)]
    pub(super) fn long(&mut self) -> Result<i64, RecordError> {
        match self.varint() {
            Some(v) => Ok(((v >> 1) as i64) ^ -((v & 1) as i64)),
            None => self.cold_long(),
        }
    }

    #[inline(always)]
    pub(super) fn int(&mut self) -> Result<i32, RecordError> {
        let at = self.pos;
        let v = self.long()?;
        match i32::try_from(v) {
            Ok(v) => Ok(v),
            Err(_) => {
                self.pos = at;
                self.cold_int()
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn cold_int(&mut self) -> Result<i32, RecordError> {
        self.reference(|r| r.int())
    }

    /// A length prefix followed by that many bytes.
    #[inline(always)]
    pub(super) fn bytes(&mut self) -> Result<&'a [u8], RecordError> {
        // A length of one byte (under 64 bytes: most strings): one test for both the varint's
        // end and the zigzag sign, one comparison with the bytes left.
        if let Some(&b) = self.buf.get(self.pos)
            && b & 0x81 == 0
        {
            let start = self.pos + 1;
            let n = (b >> 1) as usize;
            if n <= self.buf.len() - start {
                self.pos = start + n;
                return Ok(&self.buf[start..][..n]);
            }
        }
        let at = self.pos;
        // A zigzag length is even when non-negative.
        if let Some(v) = self.varint()
            && v & 1 == 0
            && let Some(s) = self.buf.get(self.pos..self.pos + (v >> 1) as usize)
        {
            self.pos += s.len();
            return Ok(s);
        }
        self.pos = at;
        self.cold_bytes()
    }

    #[cold]
    #[inline(never)]
    fn cold_bytes(&mut self) -> Result<&'a [u8], RecordError> {
        self.reference(|r| r.bytes())
    }

    /// The eight bytes that end at the position, big-endian, if the record has that many
    /// before it.
    #[inline(always)]
    pub(super) fn word_before(&self) -> Option<u64> {
        let b = self.buf.get(..self.pos)?.last_chunk::<8>()?;
        Some(u64::from_be_bytes(*b))
    }

    /// The position a string's bytes started at, for its UTF-8 error.
    #[inline(always)]
    pub(super) fn position(&self) -> usize {
        self.pos
    }

    #[inline(always)]
    pub(super) fn fixed(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RecordError> {
        match self.buf.get(self.pos..self.pos.wrapping_add(n)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            _ => self.cold_fixed(n, what),
        }
    }

    #[cold]
    #[inline(never)]
    fn cold_fixed(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RecordError> {
        self.reference(|r| r.fixed(n, what))
    }

    #[inline(always)]
    pub(super) fn boolean(&mut self) -> Result<bool, RecordError> {
        match self.buf.get(self.pos) {
            Some(&b) if b <= 1 => {
                self.pos += 1;
                Ok(b == 1)
            }
            _ => self.cold_boolean(),
        }
    }

    #[cold]
    #[inline(never)]
    fn cold_boolean(&mut self) -> Result<bool, RecordError> {
        self.reference(|r| r.boolean())
    }

    #[inline(always)]
    pub(super) fn double(&mut self) -> Result<f64, RecordError> {
        match self.buf.get(self.pos..).and_then(|b| b.first_chunk::<8>()) {
            Some(b) => {
                self.pos += 8;
                Ok(f64::from_le_bytes(*b))
            }
            None => self.cold_double(),
        }
    }

    #[cold]
    #[inline(never)]
    fn cold_double(&mut self) -> Result<f64, RecordError> {
        self.reference(|r| r.double())
    }

    /// An index below `n` (a union branch or an enum symbol) in one byte; anything else, and
    /// every error, through the reference reader (`cold`).
    #[inline(always)]
    pub(super) fn small_index(
        &mut self,
        n: u32,
        cold: fn(&mut AvroReader<'a>, usize) -> Result<usize, RecordError>,
    ) -> Result<usize, RecordError> {
        if let Some(&b) = self.buf.get(self.pos)
            && b & 0x81 == 0
            && ((b >> 1) as u32) < n
        {
            self.pos += 1;
            return Ok((b >> 1) as usize);
        }
        self.cold_index(n, cold)
    }

    #[cold]
    #[inline(never)]
    fn cold_index(
        &mut self,
        n: u32,
        cold: fn(&mut AvroReader<'a>, usize) -> Result<usize, RecordError>,
    ) -> Result<usize, RecordError> {
        self.reference(|r| cold(r, n as usize))
    }

    /// The item count of an array block: a one-byte positive count the bytes left can hold, else
    /// the reference's [`AvroReader::block`] (negative counts, zero-size items and errors).
    #[inline(always)]
    pub(super) fn block(&mut self, min_item: u32) -> Result<usize, RecordError> {
        if let Some(&b) = self.buf.get(self.pos)
            && b & 0x81 == 0
            && min_item > 0
        {
            let n = (b >> 1) as usize;
            if n * (min_item as usize) < self.buf.len() - self.pos {
                self.pos += 1;
                return Ok(n);
            }
        }
        self.cold_block(min_item)
    }

    #[cold]
    #[inline(never)]
    fn cold_block(&mut self, min_item: u32) -> Result<usize, RecordError> {
        self.reference(|r| r.block(min_item as usize))
    }
}

/// The seven-bit groups of up to eight varint bytes (continuation bits already cleared) packed
/// into one number: the inverse of the spread `proto.rs` writes with.
#[inline(always)]
fn compress(x: u64) -> u64 {
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

/// The proto row being written at the end of the batch buffer. `CHECKED`: every write makes
/// sure of its room first; unchecked, the room was reserved for the whole record up front
/// ([`Output::reserved`]).
pub(super) struct Output<'v, const CHECKED: bool> {
    vec: &'v mut Vec<u8>,
    /// Debug builds: the length the record's bound allows, checked at every unchecked write.
    #[cfg(debug_assertions)]
    limit: usize,
}

/// A field's key as the writer stores it: [`Tag::word`]'s bytes with the key's length in the
/// top byte, built once when the plan is lowered instead of from the tag's bytes at every write
/// (one load instead of two loads, a shift, an or and a mask). The eight-byte store also writes
/// the length byte, past the key's at most five bytes: the value written next covers it or it
/// lies beyond the committed length.
#[derive(Debug, Clone, Copy)]
pub(super) struct Key(u64);

impl From<Tag> for Key {
    #[inline(always)]
    fn from(tag: Tag) -> Key {
        Key(tag.word() | (tag.encoded_len() as u64) << 56)
    }
}

impl Key {
    /// The tag back, for the tree executor's writers (cold paths).
    pub(super) fn tag(self) -> Tag {
        let mut v = 0u64;
        for i in 0..self.len() {
            v |= ((self.0 >> (8 * i)) & 0x7f) << (7 * i);
        }
        Tag::new((v >> 3) as u32, (v & 7) as u32)
    }

    #[inline(always)]
    fn len(self) -> usize {
        (self.0 >> 56) as usize
    }

    /// Stores the key's word at `p`; returns the key's length.
    ///
    /// # Safety
    /// `p` has eight writable bytes.
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) -> usize {
        // SAFETY: the caller's eight bytes.
        unsafe { ptr::write_unaligned(p.cast::<u64>(), self.0.to_le()) };
        self.len()
    }
}

/// The widest store of a tag and a varint: eight bytes of tag, up to ten of varint.
const TAG_VARINT_ROOM: usize = 8 + 10;

/// The most any write asks [`Output::room`] for beyond the bytes it keeps (an empty string:
/// eighteen bytes of header stores and sixteen of string stores for two kept): what a bound
/// on the bytes a record writes must add for [`Output::reserved`].
pub(super) const STORE_SLACK: usize = 32;

impl<'v> Output<'v, true> {
    pub(super) fn checked(vec: &'v mut Vec<u8>) -> Self {
        Output {
            #[cfg(debug_assertions)]
            limit: usize::MAX,
            vec,
        }
    }
}

impl<'v> Output<'v, false> {
    /// An output whose writes do not check the capacity.
    ///
    /// # Safety
    /// The buffer has `bound` bytes of spare capacity, and everything written through the
    /// output (its own writes and those through [`Output::vec`]) plus [`STORE_SLACK`] fits in
    /// `bound`. The flat plan bounds what a record writes from its ops (`Room` in `mod.rs`);
    /// debug builds check every write against `bound`, so the tests and fuzzers check the
    /// bound on every record they run.
    pub(super) unsafe fn reserved(vec: &'v mut Vec<u8>, bound: usize) -> Self {
        debug_assert!(vec.capacity() - vec.len() >= bound);
        Output {
            #[cfg(debug_assertions)]
            limit: vec.len() + bound,
            vec,
        }
    }
}

impl<const CHECKED: bool> Output<'_, CHECKED> {
    /// The buffer itself, for the ops the reference executor writes.
    #[inline(always)]
    pub(super) fn vec(&mut self) -> &mut Vec<u8> {
        self.vec
    }

    /// A pointer to the end of the buffer with at least `n` bytes of capacity behind it.
    #[inline(always)]
    fn room(&mut self, n: usize) -> *mut u8 {
        if CHECKED {
            if self.vec.capacity() - self.vec.len() < n {
                self.grow(n);
            }
        } else {
            #[cfg(debug_assertions)]
            assert!(
                self.vec.len() + n <= self.limit,
                "a record wrote more than its plan's bound"
            );
        }
        // SAFETY: `len <= capacity`, so the pointer is inside the allocation or one past it.
        unsafe { self.vec.as_mut_ptr().add(self.vec.len()) }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, n: usize) {
        self.vec.reserve(n);
    }

    /// Writes a tag and then a varint at `p`; returns the bytes written.
    ///
    /// # Safety
    /// `p` has [`TAG_VARINT_ROOM`] writable bytes.
    #[inline(always)]
    unsafe fn tag_varint_at(p: *mut u8, key: Key, v: u64) -> usize {
        // SAFETY: the caller's room covers eight bytes of key and ten of varint.
        unsafe {
            let t = key.store(p);
            t + varint_at(p.add(t), v)
        }
    }

    /// Marks `n` more bytes as part of the buffer.
    ///
    /// # Safety
    /// The `n` bytes after the current length were written.
    #[inline(always)]
    unsafe fn commit(&mut self, n: usize) {
        debug_assert!(self.vec.len() + n <= self.vec.capacity());
        // SAFETY: the caller wrote them, inside the capacity `room` checked.
        unsafe { self.vec.set_len(self.vec.len() + n) }
    }

    #[inline(always)]
    pub(super) fn tag_varint(&mut self, key: Key, v: u64) {
        let p = self.room(TAG_VARINT_ROOM);
        // SAFETY: `room` checked the capacity; the bytes counted were written.
        unsafe {
            let n = Self::tag_varint_at(p, key, v);
            self.commit(n);
        }
    }

    #[inline(always)]
    pub(super) fn tag_u8(&mut self, key: Key, b: u8) {
        let p = self.room(9);
        // SAFETY: nine bytes of room: the key's eight-byte store, then one byte at most at 5.
        unsafe {
            let t = key.store(p);
            p.add(t).write(b);
            self.commit(t + 1);
        }
    }

    #[inline(always)]
    pub(super) fn tag_f64(&mut self, key: Key, v: f64) {
        let p = self.room(16);
        // SAFETY: sixteen bytes of room: eight of key store, eight of value after at most five.
        unsafe {
            let t = key.store(p);
            ptr::write_unaligned(p.add(t).cast::<u64>(), v.to_bits().to_le());
            self.commit(t + 8);
        }
    }

    /// A length-delimited field.
    #[inline(always)]
    pub(super) fn tag_bytes(&mut self, key: Key, s: &[u8]) {
        let p = self.room(TAG_VARINT_ROOM + s.len());
        // SAFETY: room for the key, the length and the bytes.
        unsafe {
            let h = Self::tag_varint_at(p, key, s.len() as u64);
            ptr::copy_nonoverlapping(s.as_ptr(), p.add(h), s.len());
            self.commit(h + s.len());
        }
    }

    /// A string field: copied and checked for ASCII in one pass, the full UTF-8 check only for
    /// a string with a high bit. `false` (nothing written) when it is not UTF-8.
    #[inline(always)]
    pub(super) fn tag_str(&mut self, key: Key, s: &[u8]) -> bool {
        let p = self.room(TAG_VARINT_ROOM + s.len().max(16));
        // SAFETY: room for the tag, the length and the bytes, and at least sixteen bytes
        // behind the header for the wide stores of `copy_ascii`.
        unsafe {
            let h = Self::tag_varint_at(p, key, s.len() as u64);
            let ascii = copy_ascii(s, p.add(h));
            if !ascii && std::str::from_utf8(s).is_err() {
                return false;
            }
            self.commit(h + s.len());
        }
        true
    }

    /// Bytes already in the row's form, of any length (the static values' fields).
    #[inline(always)]
    pub(super) fn copy(&mut self, s: &[u8]) {
        let p = self.room(s.len());
        // SAFETY: room for the bytes, which are another allocation's.
        unsafe {
            ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
            self.commit(s.len());
        }
    }

    /// Bytes already in the row's form (an enum's symbol with its tag and length).
    #[inline(always)]
    pub(super) fn raw(&mut self, s: &[u8]) {
        let p = self.room(s.len().max(16));
        // SAFETY: room for the bytes and at least sixteen for the wide stores of `copy_ascii`
        // (whose verdict does not matter here).
        unsafe {
            copy_ascii(s, p);
            self.commit(s.len());
        }
    }

    /// A NUMERIC or BIGNUMERIC value: the fewest little-endian two's-complement bytes.
    #[inline(always)]
    pub(super) fn tag_i128(&mut self, key: Key, v: i128) {
        let p = self.room(8 + 1 + 16);
        let bits = 128 - (v ^ (v >> 127)).leading_zeros() as usize + 1;
        let n = bits.div_ceil(8);
        // SAFETY: room for the key's eight-byte store, one length byte and sixteen of value.
        unsafe {
            let t = key.store(p);
            p.add(t).write(n as u8);
            ptr::write_unaligned(p.add(t + 1).cast::<[u8; 16]>(), v.to_le_bytes());
            self.commit(t + 1 + n);
        }
    }

    /// Opens a length-delimited message: its tag and one byte reserved for the length.
    #[inline(always)]
    pub(super) fn open(&mut self, key: Key) -> usize {
        let p = self.room(9);
        // SAFETY: nine bytes of room: the key's eight-byte store, then the length byte.
        unsafe {
            let t = key.store(p);
            p.add(t).write(0);
            self.commit(t + 1);
        }
        self.vec.len() - 1
    }

    #[inline(always)]
    pub(super) fn close(&mut self, at: usize) {
        let body = self.vec.len() - at - 1;
        if body < 0x80 {
            self.vec[at] = body as u8;
        } else {
            close_len(self.vec, at);
        }
    }
}

/// Writes `v` as a varint at `p`; returns its length.
///
/// # Safety
/// `p` has ten writable bytes.
#[inline(always)]
unsafe fn varint_at(p: *mut u8, v: u64) -> usize {
    // SAFETY: every branch writes at most ten bytes.
    unsafe {
        if v < 0x80 {
            p.write(v as u8);
            1
        } else if v < 1 << 14 {
            p.write(v as u8 | 0x80);
            p.add(1).write((v >> 7) as u8);
            2
        } else if v < 1 << 56 {
            // The seven-bit groups spread over a word, continuation bits on all but the last.
            let n = crate::proto::varint_len(v);
            let x = (v & 0x0fff_ffff) | ((v & 0x00ff_ffff_f000_0000) << 4);
            let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x0fff_c000_0fff_c000) << 2);
            let x = (x & 0x007f_007f_007f_007f) | ((x & 0x3f80_3f80_3f80_3f80) << 1);
            let x = x | (HIGH & ((1u64 << (8 * (n - 1))) - 1));
            ptr::write_unaligned(p.cast::<u64>(), x.to_le());
            n
        } else {
            let mut v = v;
            let mut n = 0;
            while v >= 0x80 {
                p.add(n).write(v as u8 | 0x80);
                v >>= 7;
                n += 1;
            }
            p.add(n).write(v as u8);
            n + 1
        }
    }
}

/// Copies `s` to `dst` and says whether it is all ASCII: overlapping moves for short strings
/// (two of four or eight bytes, or three single bytes), sixteen bytes a step above.
///
/// # Safety
/// `dst` has `max(s.len(), 16)` writable bytes that do not overlap `s`.
#[inline(always)]
unsafe fn copy_ascii(s: &[u8], dst: *mut u8) -> bool {
    let n = s.len();
    let src = s.as_ptr();
    // SAFETY: every load is of `k` bytes at `i` with `i + k <= n`, inside `s`; every store
    // ends at or before `dst + max(n, 16)`.
    unsafe {
        let word = |i: usize| ptr::read_unaligned(src.add(i).cast::<u64>());
        let put = |i: usize, w: u64| ptr::write_unaligned(dst.add(i).cast::<u64>(), w);
        let acc = if n >= 16 {
            return copy_ascii_wide(src, dst, n);
        } else if n >= 8 {
            let (a, b) = (word(0), word(n - 8));
            put(0, a);
            put(n - 8, b);
            a | b
        } else if n >= 4 {
            let half = |i: usize| ptr::read_unaligned(src.add(i).cast::<u32>());
            let (a, b) = (half(0), half(n - 4));
            ptr::write_unaligned(dst.cast::<u32>(), a);
            ptr::write_unaligned(dst.add(n - 4).cast::<u32>(), b);
            (a | b) as u64
        } else if n > 0 {
            // One, two or three bytes: the first, the middle and the last cover them.
            let (a, b, c) = (*src, *src.add(n / 2), *src.add(n - 1));
            *dst = a;
            *dst.add(n / 2) = b;
            *dst.add(n - 1) = c;
            (a | b | c) as u64
        } else {
            0
        };
        acc & HIGH == 0
    }
}

/// [`copy_ascii`] of sixteen bytes or more: sixty-four bytes a step in SSE2 registers (part of
/// every x86-64 processor, so no `target-cpu` is needed), the rest sixteen at a time, the last
/// sixteen overlapping.
///
/// # Safety
/// `src` has `n >= 16` readable bytes, `dst` `n` writable bytes, not overlapping.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn copy_ascii_wide(src: *const u8, dst: *mut u8, n: usize) -> bool {
    use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_setzero_si128,
        _mm_storeu_si128,
    };
    // SAFETY: every load and store is of sixteen bytes at `i` with `i + 16 <= n`.
    unsafe {
        let load = |i: usize| _mm_loadu_si128(src.add(i).cast::<__m128i>());
        let store = |i: usize, v: __m128i| _mm_storeu_si128(dst.add(i).cast::<__m128i>(), v);
        let mut acc = _mm_setzero_si128();
        let mut i = 0;
        while i + 64 <= n {
            let (a, b, c, d) = (load(i), load(i + 16), load(i + 32), load(i + 48));
            store(i, a);
            store(i + 16, b);
            store(i + 32, c);
            store(i + 48, d);
            acc = _mm_or_si128(acc, _mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d)));
            i += 64;
        }
        while i + 16 <= n {
            let a = load(i);
            store(i, a);
            acc = _mm_or_si128(acc, a);
            i += 16;
        }
        let a = load(n - 16);
        store(n - 16, a);
        _mm_movemask_epi8(_mm_or_si128(acc, a)) == 0
    }
}

/// [`copy_ascii`] of sixteen bytes or more, a word at a time.
///
/// # Safety
/// `src` has `n >= 16` readable bytes, `dst` `n` writable bytes, not overlapping.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
unsafe fn copy_ascii_wide(src: *const u8, dst: *mut u8, n: usize) -> bool {
    // SAFETY: every load and store is of eight bytes at `i` with `i + 8 <= n`.
    unsafe {
        let word = |i: usize| ptr::read_unaligned(src.add(i).cast::<u64>());
        let put = |i: usize, w: u64| ptr::write_unaligned(dst.add(i).cast::<u64>(), w);
        let mut acc = 0;
        let mut i = 0;
        while i + 16 <= n {
            let (a, b) = (word(i), word(i + 8));
            put(i, a);
            put(i + 8, b);
            acc |= a | b;
            i += 16;
        }
        let (a, b) = (word(n - 16), word(n - 8));
        put(n - 16, a);
        put(n - 8, b);
        (acc | a | b) & HIGH == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{WIRE_LEN, WIRE_VARINT, put_len_delimited, put_varint};

    fn zigzag(v: i64) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, ((v << 1) ^ (v >> 63)) as u64);
        out
    }

    #[test]
    fn varints_of_every_length_read_as_the_reference_reads_them() {
        let mut values = vec![0i64, -1, 1, 63, -64, 64, 8191, -8192, i64::MAX, i64::MIN];
        for bits in 1..63 {
            values.extend([
                1i64 << bits,
                (1 << bits) - 1,
                -(1 << bits),
                -(1 << bits) - 1,
            ]);
        }
        for v in values {
            let mut b = zigzag(v);
            for tail in [0usize, 3, 12] {
                b.resize(zigzag(v).len() + tail, 0x7f);
                let mut fast = Input::new(&b);
                let mut reference = AvroReader::new(&b);
                assert_eq!(fast.long(), reference.long(), "{v} {tail}");
                assert_eq!(fast.pos, reference.position(), "{v} {tail}");
            }
        }
        // Overlong forms, truncations and overflow: the reference's result and error.
        for b in [
            &[0x80, 0x00][..],
            &[0x80, 0x80, 0x00, 1, 1, 1, 1, 1, 1],
            &[0xff; 11],
            &[0xff, 0xff],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
            &[],
        ] {
            assert_eq!(Input::new(b).long(), AvroReader::new(b).long(), "{b:x?}");
        }
    }

    #[test]
    fn writes_match_the_reference_writer_at_every_capacity() {
        let tag = Tag::new(3, WIRE_LEN);
        let long_tag = Tag::new(100_000, WIRE_VARINT);
        for len in 0..70usize {
            let s: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            for cap in [0, len, len + 40] {
                let mut out = Vec::with_capacity(cap);
                out.push(7);
                let mut w = Output::checked(&mut out);
                assert!(w.tag_str(tag.into(), &s));
                w.tag_varint(long_tag.into(), len as u64 * 977_123);
                w.tag_bytes(long_tag.into(), &s);
                let mut expected = vec![7];
                put_len_delimited(&mut expected, tag, &s);
                long_tag.put(&mut expected);
                put_varint(&mut expected, len as u64 * 977_123);
                put_len_delimited(&mut expected, long_tag, &s);
                assert_eq!(out, expected, "{len} {cap}");
            }
            // A high bit anywhere is found; valid UTF-8 is kept, invalid leaves nothing.
            for at in 0..len {
                let mut t = s.clone();
                t[at] = 0x80;
                let mut out = Vec::new();
                assert!(
                    !Output::checked(&mut out).tag_str(tag.into(), &t),
                    "{len} {at}"
                );
                assert!(out.is_empty());
                if at + 1 < len {
                    t[at] = 0xc3;
                    t[at + 1] = 0x9f;
                    assert!(
                        Output::checked(&mut out).tag_str(tag.into(), &t),
                        "{len} {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn keys_store_their_tags_bytes_and_give_the_tag_back() {
        for number in [
            1u32,
            15,
            16,
            2047,
            2048,
            262_143,
            262_144,
            (1 << 25) - 1,
            1 << 25,
            (1 << 29) - 1,
        ] {
            for wire in [WIRE_VARINT, WIRE_LEN] {
                let tag = Tag::new(number, wire);
                let key = Key::from(tag);
                assert_eq!(key.tag(), tag);
                let mut expected = Vec::new();
                tag.put(&mut expected);
                let mut out = Vec::new();
                Output::checked(&mut out).tag_u8(key, 1);
                expected.push(1);
                assert_eq!(out, expected, "{number}");
            }
        }
    }

    #[test]
    fn decimals_take_the_fewest_twos_complement_bytes() {
        for v in [
            0i128,
            -1,
            127,
            128,
            -128,
            -129,
            i64::MAX as i128,
            i128::MAX,
            i128::MIN,
        ] {
            let mut out = Vec::new();
            Output::checked(&mut out).tag_i128(Tag::new(1, WIRE_LEN).into(), v);
            let n = out[1] as usize;
            assert_eq!(out.len(), 2 + n);
            let mut le = [if v < 0 { 0xff } else { 0 }; 16];
            le[..n].copy_from_slice(&out[2..]);
            assert_eq!(i128::from_le_bytes(le), v);
            // One byte fewer would lose the value or its sign.
            if n > 1 {
                let mut le = [if out[n] & 0x80 != 0 { 0xff } else { 0 }; 16];
                le[..n - 1].copy_from_slice(&out[2..1 + n]);
                assert_ne!(i128::from_le_bytes(le), v);
            }
        }
    }
}
