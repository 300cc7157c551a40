//! A JSON tokenizer over the record's bytes (RFC 8259, strict): it never builds a value tree.
//! Strings come back as slices of the input unless they hold escapes; numbers as their text, so
//! a NUMERIC column gets the digits exactly as written. UTF-8 is checked once, inside strings
//! only, and only for strings that hold a byte above 0x7f (the scan for the closing quote finds
//! them): outside strings the grammar admits nothing but ASCII, so every slice the scanner hands
//! out is valid UTF-8 without a second pass.

use std::borrow::Cow;

use super::keys::same;
use crate::RecordError;

/// Objects and arrays nested deeper than this are a per-record error, never a stack overflow.
pub const MAX_DEPTH: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token {
    Null,
    True,
    False,
    Number,
    String,
    Object,
    Array,
}

impl Token {
    pub fn name(self) -> &'static str {
        match self {
            Token::Null => "null",
            Token::True | Token::False => "a boolean",
            Token::Number => "a number",
            Token::String => "a string",
            Token::Object => "an object",
            Token::Array => "an array",
        }
    }
}

/// The token a value's first byte begins, by byte: one load instead of a `match`'s
/// comparisons in [`Scanner::peek`]. `None` for whitespace and for bytes no value begins with.
static TOKENS: [Option<Token>; 256] = {
    let mut t = [None; 256];
    t[b'n' as usize] = Some(Token::Null);
    t[b't' as usize] = Some(Token::True);
    t[b'f' as usize] = Some(Token::False);
    t[b'"' as usize] = Some(Token::String);
    t[b'{' as usize] = Some(Token::Object);
    t[b'[' as usize] = Some(Token::Array);
    t[b'-' as usize] = Some(Token::Number);
    let mut d = b'0';
    while d <= b'9' {
        t[d as usize] = Some(Token::Number);
        d += 1;
    }
    t
};

/// A number's text and whether it is written as an integer (no fraction, no exponent).
#[derive(Debug, Clone, Copy)]
pub struct Number<'a> {
    /// The number as written (ASCII).
    pub bytes: &'a [u8],
    pub integer: bool,
    /// The value of an integer of at most 18 digits (which cannot overflow), taken from the
    /// digits while they are scanned.
    pub value: Option<i64>,
}

/// A number as [`Scanner::small_number`] read it: `digits` × 10^-`scale`, the digits at most 18.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmallNumber {
    /// The number's digits as an integer, with its sign (`-0.5`: `-5`).
    pub digits: i64,
    /// How many of the digits follow the decimal point.
    pub scale: u32,
    /// Written with a `-` (also `-0`).
    pub negative: bool,
}

/// A key as [`Scanner::next_key_or`] found it.
pub enum Key<'a> {
    /// The object ends.
    End,
    /// The key the caller expected.
    Expected,
    Other(Cow<'a, [u8]>),
}

/// Whether `key`'s JSON text is the key itself: no quote, backslash or control character.
pub fn plain_key(key: &[u8]) -> bool {
    !key.iter().any(|&c| c == b'"' || c == b'\\' || c < 0x20)
}

pub struct Scanner<'a> {
    b: &'a [u8],
    pub pos: usize,
}

pub fn malformed(offset: usize, what: &'static str) -> RecordError {
    RecordError::MalformedJson { offset, what }
}

impl<'a> Scanner<'a> {
    pub fn new(b: &'a [u8]) -> Scanner<'a> {
        Scanner { b, pos: 0 }
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.pos) {
            if matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    /// The kind of the next value, without consuming it. Whitespace before it is one more arm
    /// of the `match` on its first byte, not a loop run before every value.
    #[inline]
    pub fn peek(&mut self) -> Result<Token, RecordError> {
        match self.b.get(self.pos).and_then(|&c| TOKENS[c as usize]) {
            Some(token) => Ok(token),
            None => self.peek_after_ws(),
        }
    }

    /// [`Scanner::peek`] as a `match` on the byte, for [`Scanner::skip`]: there the `match`
    /// on the token that follows fuses with this one into one jump, where the table's load
    /// would come before it.
    #[inline(always)]
    fn peek_match(&mut self) -> Result<Token, RecordError> {
        Ok(match self.b.get(self.pos) {
            Some(b'n') => Token::Null,
            Some(b't') => Token::True,
            Some(b'f') => Token::False,
            Some(b'"') => Token::String,
            Some(b'{') => Token::Object,
            Some(b'[') => Token::Array,
            Some(b'-' | b'0'..=b'9') => Token::Number,
            _ => return self.peek_after_ws(),
        })
    }

    /// [`Scanner::peek`] after whitespace, and its errors.
    #[cold]
    #[inline(never)]
    fn peek_after_ws(&mut self) -> Result<Token, RecordError> {
        self.ws();
        Ok(match self.b.get(self.pos) {
            Some(b'n') => Token::Null,
            Some(b't') => Token::True,
            Some(b'f') => Token::False,
            Some(b'"') => Token::String,
            Some(b'{') => Token::Object,
            Some(b'[') => Token::Array,
            Some(b'-' | b'0'..=b'9') => Token::Number,
            Some(_) => return Err(malformed(self.pos, "a value")),
            None => return Err(malformed(self.pos, "a value (the data ends)")),
        })
    }

    fn literal(&mut self, word: &'static [u8], what: &'static str) -> Result<(), RecordError> {
        if self.b[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(malformed(self.pos, what))
        }
    }

    pub fn null(&mut self) -> Result<(), RecordError> {
        self.literal(b"null", "null")
    }

    pub fn boolean(&mut self) -> Result<bool, RecordError> {
        match self.b.get(self.pos) {
            Some(b't') => self.literal(b"true", "true").map(|()| true),
            _ => self.literal(b"false", "false").map(|()| false),
        }
    }

    /// After `peek` said `Number`.
    pub fn number(&mut self) -> Result<Number<'a>, RecordError> {
        let start = self.pos;
        let b = self.b;
        let mut i = self.pos;
        let negative = b.get(i) == Some(&b'-');
        if negative {
            i += 1;
        }
        let digits = i;
        let mut v = 0i64;
        match b.get(i) {
            Some(b'0') if matches!(b.get(i + 1), Some(b'0'..=b'9')) => {
                return Err(malformed(i, "no leading zero"));
            }
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while let Some(&d @ b'0'..=b'9') = b.get(i) {
                    v = v.wrapping_mul(10).wrapping_add((d - b'0') as i64);
                    i += 1;
                }
            }
            _ => return Err(malformed(i, "a digit")),
        }
        let exact = i - digits <= 18;
        let mut integer = true;
        if b.get(i) == Some(&b'.') {
            integer = false;
            i += 1;
            if !matches!(b.get(i), Some(b'0'..=b'9')) {
                return Err(malformed(i, "a digit after the decimal point"));
            }
            while matches!(b.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            integer = false;
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            if !matches!(b.get(i), Some(b'0'..=b'9')) {
                return Err(malformed(i, "a digit in the exponent"));
            }
            while matches!(b.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
        }
        self.pos = i;
        // Beyond 18 digits `v` has wrapped and is not used.
        let value = (integer && exact).then_some(if negative { v.wrapping_neg() } else { v });
        Ok(Number {
            bytes: &b[start..i],
            integer,
            value,
        })
    }

    /// After `peek` said `Number`: the value of an integer of at most 18 digits, read inline;
    /// `None` (nothing consumed) for any other number and for text that is not a number, which
    /// [`Scanner::number`] then reads, with its errors.
    #[inline(always)]
    pub fn small_int(&mut self) -> Option<i64> {
        let b = self.b;
        let negative = b.get(self.pos) == Some(&b'-');
        let start = self.pos + negative as usize;
        let mut i = start;
        let mut v = 0i64;
        while let Some(&d) = b.get(i) {
            let x = d.wrapping_sub(b'0');
            if x > 9 {
                break;
            }
            if i - start == 18 {
                return None;
            }
            v = v * 10 + x as i64;
            i += 1;
        }
        if i == start || (i - start > 1 && b[start] == b'0') {
            return None;
        }
        if matches!(b.get(i), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        self.pos = i;
        Some(if negative { -v } else { v })
    }

    /// After `peek` said `Number`: a number of at most 18 digits without an exponent, read
    /// inline as its digits and how many of them follow the point (`-12.50`: `-1250`, 2);
    /// `None` (nothing consumed) for any other number and for text that is not a number, which
    /// [`Scanner::number`] then reads, with its errors.
    #[inline(always)]
    pub fn small_number(&mut self) -> Option<SmallNumber> {
        let b = self.b;
        let negative = b.get(self.pos) == Some(&b'-');
        let start = self.pos + negative as usize;
        let mut i = start;
        let mut v = 0i64;
        while let Some(&d) = b.get(i) {
            let x = d.wrapping_sub(b'0');
            if x > 9 {
                break;
            }
            v = v.wrapping_mul(10).wrapping_add(x as i64);
            i += 1;
        }
        let whole = i - start;
        if whole == 0 || (whole > 1 && b[start] == b'0') {
            return None;
        }
        let mut fraction = 0;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let from = i;
            while let Some(&d) = b.get(i) {
                let x = d.wrapping_sub(b'0');
                if x > 9 {
                    break;
                }
                v = v.wrapping_mul(10).wrapping_add(x as i64);
                i += 1;
            }
            fraction = i - from;
            if fraction == 0 {
                return None;
            }
        }
        // Beyond 18 digits `v` may have wrapped: those take `number`'s path.
        if whole + fraction > 18 || matches!(b.get(i), Some(b'e' | b'E')) {
            return None;
        }
        self.pos = i;
        Some(SmallNumber {
            digits: if negative { -v } else { v },
            scale: fraction as u32,
            negative,
        })
    }

    /// After `peek` said `String`: the unescaped content, valid UTF-8.
    #[inline(always)]
    pub fn string(&mut self) -> Result<Cow<'a, [u8]>, RecordError> {
        let start = self.pos + 1;
        let i = ascii_run(self.b, start);
        if self.b.get(i) == Some(&b'"') {
            self.pos = i + 1;
            return Ok(Cow::Borrowed(&self.b[start..i]));
        }
        self.string_from(start, i)
    }

    /// After `peek` said `String`: steps over it, checking it as [`Scanner::string`] does.
    #[inline(always)]
    pub fn skip_string(&mut self) -> Result<(), RecordError> {
        let start = self.pos + 1;
        let i = ascii_run(self.b, start);
        if self.b.get(i) == Some(&b'"') {
            self.pos = i + 1;
            return Ok(());
        }
        self.string_from(start, i).map(drop)
    }

    /// The rest of [`Scanner::string`] from `i`, where the run of plain ASCII that began at
    /// `start` stopped at something other than the closing quote.
    #[inline(never)]
    fn string_from(&mut self, start: usize, mut i: usize) -> Result<Cow<'a, [u8]>, RecordError> {
        let b = self.b;
        let mut wide = false;
        loop {
            match b.get(i) {
                Some(b'"') => {
                    self.pos = i + 1;
                    let s = &b[start..i];
                    if wide && let Err(e) = std::str::from_utf8(s) {
                        return Err(malformed(start + e.valid_up_to(), "utf-8 text"));
                    }
                    return Ok(Cow::Borrowed(s));
                }
                Some(b'\\') => return self.escaped(start, i).map(Cow::Owned),
                Some(0..=0x1f) => return Err(malformed(i, "no control character in a string")),
                Some(0x80..) if !wide => match utf8_char(b, i) {
                    // A valid sequence before any invalid one: the string stays exactly as
                    // valid as the rest of it, so the scan goes on stopping at wide bytes.
                    Some(n) => i += n,
                    // The first sequence that is not valid UTF-8 (or one cut by the end of the
                    // data): the string is checked whole at its end, as before, so an earlier
                    // error of another kind (a control character, the end of the data) is still
                    // the one reported.
                    None => {
                        wide = true;
                        i += 1;
                    }
                },
                Some(_) => i += 1,
                None => return Err(malformed(i, "the end of a string")),
            }
            // Sixteen, then eight bytes at a time up to the next quote, backslash, control
            // character or (before the first) byte above 0x7f: once a wide byte was seen the
            // string is checked whole at its end, so the rest of them need not stop the scan.
            #[cfg(target_arch = "x86_64")]
            while let Some(chunk) = b.get(i..i + 16) {
                let stop = stop_mask16(chunk.try_into().expect("sixteen bytes"), wide);
                if stop != 0 {
                    i += stop.trailing_zeros() as usize;
                    break;
                }
                i += 16;
            }
            while let Some(chunk) = b.get(i..i + 8) {
                let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
                let stop = stop_bytes(w) | (w & if wide { 0 } else { HIGH });
                if stop != 0 {
                    i += (stop.trailing_zeros() / 8) as usize;
                    break;
                }
                i += 8;
            }
        }
    }

    /// A string that a conversion reads as text (a number, a date, an enum-like word), without
    /// checking it as `str` a second time.
    pub fn text(&mut self) -> Result<Cow<'a, str>, RecordError> {
        Ok(match self.string()? {
            // SAFETY: `string` hands out valid UTF-8 only: a run of ASCII, or text checked by
            // `from_utf8` (`string_from`, `escaped`).
            Cow::Borrowed(s) => Cow::Borrowed(unsafe { std::str::from_utf8_unchecked(s) }),
            // SAFETY: as above.
            Cow::Owned(s) => Cow::Owned(unsafe { String::from_utf8_unchecked(s) }),
        })
    }

    #[cold]
    fn escaped(&mut self, start: usize, first: usize) -> Result<Vec<u8>, RecordError> {
        let b = self.b;
        let mut out: Vec<u8> = b[start..first].to_vec();
        let mut i = first;
        loop {
            match b.get(i) {
                None => return Err(malformed(i, "the end of a string")),
                Some(b'"') => {
                    // Escapes are ASCII and decode to scalar values, so the output is UTF-8
                    // exactly when the raw text is.
                    if let Err(e) = std::str::from_utf8(&b[start..i]) {
                        return Err(malformed(start + e.valid_up_to(), "utf-8 text"));
                    }
                    self.pos = i + 1;
                    return Ok(out);
                }
                Some(0..=0x1f) => return Err(malformed(i, "no control character in a string")),
                Some(b'\\') => {
                    let c = *b.get(i + 1).ok_or_else(|| malformed(i, "an escape"))?;
                    i += 2;
                    let simple = match c {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 8,
                        b'f' => 12,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => 0,
                        _ => return Err(malformed(i - 1, "a valid escape")),
                    };
                    if c != b'u' {
                        out.push(simple);
                        continue;
                    }
                    let hi = hex4(b, i)?;
                    i += 4;
                    let code = if (0xd800..0xdc00).contains(&hi) {
                        if b.get(i) != Some(&b'\\') || b.get(i + 1) != Some(&b'u') {
                            return Err(malformed(i, "the low half of a surrogate pair"));
                        }
                        let lo = hex4(b, i + 2)?;
                        if !(0xdc00..0xe000).contains(&lo) {
                            return Err(malformed(i, "the low half of a surrogate pair"));
                        }
                        i += 6;
                        0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                    } else if (0xdc00..0xe000).contains(&hi) {
                        return Err(malformed(i - 6, "no lone low surrogate"));
                    } else {
                        hi
                    };
                    let ch = char::from_u32(code).expect("a scalar value");
                    out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                }
                Some(&c) => {
                    out.push(c);
                    i += 1;
                }
            }
        }
    }

    /// Consumes `{`; then call `next_key` until it answers `None`.
    pub fn open(&mut self, c: u8) {
        debug_assert_eq!(self.b[self.pos], c);
        self.pos += 1;
    }

    /// The next key of an object, or `None` at its end. `first` is true right after `{`.
    #[inline(always)]
    pub fn next_key(&mut self, first: bool) -> Result<Option<Cow<'a, [u8]>>, RecordError> {
        self.ws();
        match self.b.get(self.pos) {
            Some(b'}') => {
                self.pos += 1;
                return Ok(None);
            }
            Some(b',') if !first => {
                self.pos += 1;
                self.ws();
            }
            _ if first => {}
            _ => return Err(malformed(self.pos, "`,` or `}`")),
        }
        if self.b.get(self.pos) != Some(&b'"') {
            return Err(malformed(self.pos, "a key"));
        }
        let key = self.string()?;
        self.ws();
        if self.b.get(self.pos) != Some(&b':') {
            return Err(malformed(self.pos, "`:`"));
        }
        self.pos += 1;
        Ok(Some(key))
    }

    /// [`Scanner::next_key`], with the key the caller expects: when the record's key is
    /// exactly `expected` between quotes it is taken in place, without the string scan. Only for
    /// an `expected` whose JSON text is itself (no quote, backslash or control character, which
    /// [`plain_key`] tells): then the bytes `"expected"` are that key and nothing else.
    #[inline(always)]
    pub fn next_key_or(
        &mut self,
        first: bool,
        expected: Option<&[u8]>,
    ) -> Result<Key<'a>, RecordError> {
        // Without whitespace (what most serializers write): `,"` or, first, `"`; or `}`.
        // Anything else takes the general path from the same position.
        let b = self.b;
        let at = match b.get(self.pos) {
            Some(b',') if !first => self.pos + 2,
            Some(b'"') if first => self.pos + 1,
            Some(b'}') => {
                self.pos += 1;
                return Ok(Key::End);
            }
            _ => return self.next_key_general(first, expected),
        };
        if b.get(at - 1) != Some(&b'"') {
            return self.next_key_general(first, expected);
        }
        self.pos = at - 1;
        self.key_at(at, expected)
    }

    /// [`Scanner::next_key_or`] with whitespace anywhere, and its errors.
    #[cold]
    #[inline(never)]
    fn next_key_general(
        &mut self,
        first: bool,
        expected: Option<&[u8]>,
    ) -> Result<Key<'a>, RecordError> {
        self.ws();
        match self.b.get(self.pos) {
            Some(b'}') => {
                self.pos += 1;
                return Ok(Key::End);
            }
            Some(b',') if !first => {
                self.pos += 1;
                self.ws();
            }
            _ if first => {}
            _ => return Err(malformed(self.pos, "`,` or `}`")),
        }
        if self.b.get(self.pos) != Some(&b'"') {
            return Err(malformed(self.pos, "a key"));
        }
        self.key_at(self.pos + 1, expected)
    }

    /// The rest of [`Scanner::next_key_or`] from the key's opening quote (`at` is one past it)
    /// up to its value.
    #[inline(always)]
    fn key_at(&mut self, at: usize, expected: Option<&[u8]>) -> Result<Key<'a>, RecordError> {
        let key = match expected {
            Some(e)
                if self.b.get(at + e.len()) == Some(&b'"')
                    && same(&self.b[at..at + e.len()], e) =>
            {
                self.pos = at + e.len() + 1;
                Key::Expected
            }
            _ => Key::Other(self.string()?),
        };
        if self.b.get(self.pos) != Some(&b':') {
            self.ws();
            if self.b.get(self.pos) != Some(&b':') {
                return Err(malformed(self.pos, "`:`"));
            }
        }
        self.pos += 1;
        Ok(key)
    }

    /// Whether an array has another element; consumes the `,` or `]`.
    #[inline]
    pub fn next_element(&mut self, first: bool) -> Result<bool, RecordError> {
        match self.b.get(self.pos) {
            Some(b']') => {
                self.pos += 1;
                Ok(false)
            }
            Some(b',') if !first => {
                self.pos += 1;
                Ok(true)
            }
            Some(&c) if first && !matches!(c, b' ' | b'\n' | b'\r' | b'\t') => Ok(true),
            _ => self.next_element_general(first),
        }
    }

    /// [`Scanner::next_element`] after whitespace, and its errors.
    #[cold]
    #[inline(never)]
    fn next_element_general(&mut self, first: bool) -> Result<bool, RecordError> {
        self.ws();
        match self.b.get(self.pos) {
            Some(b']') => {
                self.pos += 1;
                Ok(false)
            }
            Some(b',') if !first => {
                self.pos += 1;
                Ok(true)
            }
            _ if first => Ok(true),
            _ => Err(malformed(self.pos, "`,` or `]`")),
        }
    }

    /// Skips one value `depth` deep, checking it as the executors would read it; returns its
    /// text (valid UTF-8). One loop, no recursion and nothing produced: the open objects and
    /// arrays are a bit stack (an object's bit set), so a change's envelope is stepped over at
    /// the cost of its strings' and numbers' scans. The same errors at the same offsets as
    /// [`Scanner::skip_reference`], the recursive definition it replaced (tests below).
    pub fn skip(&mut self, depth: usize) -> Result<&'a [u8], RecordError> {
        self.ws();
        let start = self.pos;
        // Bit k: the container k levels down from the innermost open one is an object. At most
        // `MAX_DEPTH` (128) containers are open at once.
        let mut stack: u128 = 0;
        let mut open = 0usize;
        loop {
            // A value is next.
            match self.peek_match()? {
                Token::String => self.skip_string()?,
                Token::Number => self.skip_number()?,
                Token::Null => self.null()?,
                Token::True | Token::False => {
                    self.boolean()?;
                }
                token @ (Token::Object | Token::Array) => {
                    if depth + open >= MAX_DEPTH {
                        return Err(malformed(
                            self.pos,
                            "objects and arrays nested at most 128 deep",
                        ));
                    }
                    self.pos += 1;
                    let object = token == Token::Object;
                    let more = if object {
                        self.next_member(true)?
                    } else {
                        self.next_element(true)?
                    };
                    if more {
                        stack = (stack << 1) | object as u128;
                        open += 1;
                        continue;
                    }
                }
            }
            // A value ended: close what ends after it.
            loop {
                if open == 0 {
                    return Ok(&self.b[start..self.pos]);
                }
                let more = if stack & 1 == 1 {
                    self.next_member(false)?
                } else {
                    self.next_element(false)?
                };
                if more {
                    break;
                }
                stack >>= 1;
                open -= 1;
            }
        }
    }

    /// [`Scanner::next_key`] without the key: whether the object has another member (its key
    /// checked and stepped over, up to its value).
    #[inline(always)]
    fn next_member(&mut self, first: bool) -> Result<bool, RecordError> {
        // Without whitespace, as in `next_key_or`; anything else takes the general path.
        let b = self.b;
        let at = match b.get(self.pos) {
            Some(b',') if !first => self.pos + 1,
            Some(b'"') if first => self.pos,
            Some(b'}') => {
                self.pos += 1;
                return Ok(false);
            }
            _ => return self.next_member_general(first),
        };
        if b.get(at) != Some(&b'"') {
            return self.next_member_general(first);
        }
        self.pos = at;
        self.skip_string()?;
        if b.get(self.pos) == Some(&b':') {
            self.pos += 1;
            return Ok(true);
        }
        self.colon()
    }

    /// The `:` after a key, past whitespace.
    #[cold]
    #[inline(never)]
    fn colon(&mut self) -> Result<bool, RecordError> {
        self.ws();
        if self.b.get(self.pos) != Some(&b':') {
            return Err(malformed(self.pos, "`:`"));
        }
        self.pos += 1;
        Ok(true)
    }

    /// [`Scanner::next_member`] with whitespace anywhere, and its errors.
    #[cold]
    #[inline(never)]
    fn next_member_general(&mut self, first: bool) -> Result<bool, RecordError> {
        self.ws();
        match self.b.get(self.pos) {
            Some(b'}') => {
                self.pos += 1;
                return Ok(false);
            }
            Some(b',') if !first => {
                self.pos += 1;
                self.ws();
            }
            _ if first => {}
            _ => return Err(malformed(self.pos, "`,` or `}`")),
        }
        if self.b.get(self.pos) != Some(&b'"') {
            return Err(malformed(self.pos, "a key"));
        }
        self.skip_string()?;
        self.ws();
        if self.b.get(self.pos) != Some(&b':') {
            return Err(malformed(self.pos, "`:`"));
        }
        self.pos += 1;
        Ok(true)
    }

    /// After `peek` said `Number`: steps over it, checking it as [`Scanner::number`] does.
    #[inline]
    fn skip_number(&mut self) -> Result<(), RecordError> {
        let b = self.b;
        let digit = |i: usize| matches!(b.get(i), Some(b'0'..=b'9'));
        let mut i = self.pos + (b.get(self.pos) == Some(&b'-')) as usize;
        match b.get(i) {
            Some(b'0') if digit(i + 1) => return Err(malformed(i, "no leading zero")),
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => i = digit_run(b, i + 1),
            _ => return Err(malformed(i, "a digit")),
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            if !digit(i) {
                return Err(malformed(i, "a digit after the decimal point"));
            }
            i = digit_run(b, i + 1);
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            if !digit(i) {
                return Err(malformed(i, "a digit in the exponent"));
            }
            i = digit_run(b, i + 1);
        }
        self.pos = i;
        Ok(())
    }

    /// Skips one value, checking it; returns its text (valid UTF-8). Recursive: the definition
    /// [`Scanner::skip`] is tested against, and the reference executor's skip.
    pub fn skip_reference(&mut self, depth: usize) -> Result<&'a [u8], RecordError> {
        let token = self.peek()?;
        let start = self.pos;
        match token {
            Token::Null => self.null()?,
            Token::True | Token::False => {
                self.boolean()?;
            }
            Token::Number => {
                self.number()?;
            }
            Token::String => {
                self.string()?;
            }
            Token::Object | Token::Array => {
                if depth >= MAX_DEPTH {
                    return Err(malformed(
                        self.pos,
                        "objects and arrays nested at most 128 deep",
                    ));
                }
                if token == Token::Object {
                    self.open(b'{');
                    let mut first = true;
                    while self.next_key(first)?.is_some() {
                        first = false;
                        self.skip_reference(depth + 1)?;
                    }
                } else {
                    self.open(b'[');
                    let mut first = true;
                    while self.next_element(first)? {
                        first = false;
                        self.skip_reference(depth + 1)?;
                    }
                }
            }
        }
        Ok(&self.b[start..self.pos])
    }

    /// Only whitespace may follow the top-level value.
    pub fn end(&mut self) -> Result<(), RecordError> {
        self.ws();
        if self.pos == self.b.len() {
            Ok(())
        } else {
            Err(malformed(self.pos, "the end of the data after the value"))
        }
    }
}

/// Where the run of ASCII digits that begins at `i` ends: eight bytes a step, then one.
#[inline(always)]
fn digit_run(b: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = b.get(i..i + 8) {
        // A digit is 0x30..=0x39: `x` is below ten exactly for digits, and adding 0x76 sets
        // the high bit of every byte of ten or more. A carry only leaves a byte that is not a
        // digit, so the lowest set high bit marks the first non-digit exactly.
        let x = u64::from_le_bytes(chunk.try_into().expect("eight bytes")) ^ (ONES * 0x30);
        let stop = (x | x.wrapping_add(ONES * 0x76)) & HIGH;
        if stop != 0 {
            return i + (stop.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while matches!(b.get(i), Some(b'0'..=b'9')) {
        i += 1;
    }
    i
}

/// Where the run of plain string content (no quote, backslash, control character or byte above
/// 0x7f) that begins at `i` ends: sixteen bytes a step with SSE2, then eight, then one.
#[inline(always)]
fn ascii_run(b: &[u8], mut i: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    while let Some(chunk) = b.get(i..i + 16) {
        let stop = stop_mask16(chunk.try_into().expect("sixteen bytes"), false);
        if stop != 0 {
            return i + stop.trailing_zeros() as usize;
        }
        i += 16;
    }
    while let Some(chunk) = b.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let stop = stop_bytes(w) | (w & HIGH);
        if stop != 0 {
            return i + (stop.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || !(0x20..=0x7f).contains(&c) {
            break;
        }
        i += 1;
    }
    i
}

/// The length of the UTF-8 sequence of a scalar value that begins at `b[i]` (a byte above
/// 0x7f), or `None` when the bytes there are not one: the well-formed sequences of RFC 3629
/// (no overlong form, no surrogate, nothing above U+10FFFF), exactly what `str::from_utf8`
/// accepts. Checking each sequence where the scan finds it spares a string of mostly ASCII the
/// second pass of `from_utf8` over all of it.
#[inline(always)]
fn utf8_char(b: &[u8], i: usize) -> Option<usize> {
    let cont = |k: usize| matches!(b.get(i + k), Some(0x80..=0xbf));
    let second = |lo: u8, hi: u8| matches!(b.get(i + 1), Some(&c) if (lo..=hi).contains(&c));
    let n = match b[i] {
        0xc2..=0xdf => return cont(1).then_some(2),
        0xe0 => second(0xa0, 0xbf) && cont(2),
        0xe1..=0xec | 0xee..=0xef => cont(1) && cont(2),
        0xed => second(0x80, 0x9f) && cont(2),
        0xf0 => return (second(0x90, 0xbf) && cont(2) && cont(3)).then_some(4),
        0xf1..=0xf3 => return (cont(1) && cont(2) && cont(3)).then_some(4),
        0xf4 => return (second(0x80, 0x8f) && cont(2) && cont(3)).then_some(4),
        _ => false,
    };
    n.then_some(3)
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The bytes of `w` (little-endian) that end a run of string content: a quote, a backslash or
/// a control character. The lowest set 0x80 bit marks the first such byte exactly; bits above
/// it may be false alarms from borrows, which the caller never looks at.
#[inline(always)]
fn stop_bytes(w: u64) -> u64 {
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let quote = zero(w ^ (ONES * b'"' as u64));
    let backslash = zero(w ^ (ONES * b'\\' as u64));
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    quote | backslash | control
}

/// [`stop_bytes`] over sixteen bytes with SSE2 (part of every x86-64 processor, so no
/// `target-cpu` flag is needed): bit `k` is set when byte `k` ends a run of string content, and
/// (unless `wide`) when it is above 0x7f.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn stop_mask16(chunk: &[u8; 16], wide: bool) -> u32 {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    // SAFETY: SSE2 is enabled on every x86-64 target; the unaligned load reads exactly the
    // sixteen bytes of `chunk`.
    unsafe {
        let x = _mm_loadu_si128(chunk.as_ptr().cast());
        let quote = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\\' as i8));
        // A signed comparison: below 0x20 are the control characters and the bytes above 0x7f.
        let low = _mm_cmplt_epi8(x, _mm_set1_epi8(0x20));
        let stop = _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), low)) as u32;
        if wide {
            stop & !(_mm_movemask_epi8(x) as u32)
        } else {
            stop
        }
    }
}

fn hex4(b: &[u8], at: usize) -> Result<u32, RecordError> {
    let digits = b
        .get(at..at + 4)
        .ok_or_else(|| malformed(at, "four hex digits"))?;
    let mut v = 0u32;
    for d in digits {
        let x = (*d as char)
            .to_digit(16)
            .ok_or_else(|| malformed(at, "four hex digits"))?;
        v = v * 16 + x;
    }
    Ok(v)
}

impl<'a> Number<'a> {
    /// The text, for the conversions that parse it (floats, decimals) and for messages.
    pub fn text(&self) -> &'a str {
        std::str::from_utf8(self.bytes).expect("ascii digits")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Result<String, RecordError> {
        let mut sc = Scanner::new(s.as_bytes());
        sc.peek()?;
        let v = sc.text()?.into_owned();
        sc.end()?;
        Ok(v)
    }

    #[test]
    fn escapes_and_surrogate_pairs_decode() {
        assert_eq!(
            text(r#""a\"\\\/\b\f\n\r\t""#).unwrap(),
            "a\"\\/\u{8}\u{c}\n\r\t"
        );
        assert_eq!(text(r#""\u00e9\ud83d\ude00""#).unwrap(), "é😀");
        assert!(text(r#""\ud83d""#).is_err());
        assert!(text(r#""\ude00""#).is_err());
        assert!(text("\"a\u{1}\"").is_err());
        assert!(text(r#""\x""#).is_err());
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_sixteen_byte_scan_stops_at_exactly_the_first_special_byte() {
        // Every byte value at every position, after every kind of prefix, with and without a
        // wide byte seen before.
        let reference = |w: &[u8; 16], wide: bool| {
            w.iter()
                .position(|&c| matches!(c, b'"' | b'\\' | 0..=0x1f) || (!wide && c > 0x7f))
        };
        for fill in [b'a', 0x7f, 0x20, 0xff, 0x80] {
            for at in 0..16 {
                for c in 0..=255u8 {
                    let mut w = [fill; 16];
                    w[at] = c;
                    for wide in [false, true] {
                        let stop = stop_mask16(&w, wide);
                        let found = (stop != 0).then_some(stop.trailing_zeros() as usize);
                        assert_eq!(found, reference(&w, wide), "{w:?} {wide}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_word_scan_stops_at_exactly_the_first_special_byte() {
        // Every byte value at every position of a word, after every kind of prefix.
        let reference = |w: &[u8; 8]| w.iter().position(|&c| matches!(c, b'"' | b'\\' | 0..=0x1f));
        for fill in [b'a', 0x7f, 0x20, 0xff, 0x80] {
            for at in 0..8 {
                for c in 0..=255u8 {
                    let mut w = [fill; 8];
                    w[at] = c;
                    let stop = stop_bytes(u64::from_le_bytes(w));
                    let found = (stop != 0).then_some((stop.trailing_zeros() / 8) as usize);
                    assert_eq!(found, reference(&w), "{w:?}");
                }
            }
        }
    }

    #[test]
    fn utf8_is_checked_in_strings_wherever_the_bad_byte_falls() {
        for pad in 0..20 {
            let mut ok = format!("\"{}é{}\"", "a".repeat(pad), "b".repeat(pad)).into_bytes();
            assert_eq!(
                text(std::str::from_utf8(&ok).unwrap()).unwrap(),
                format!("{}é{}", "a".repeat(pad), "b".repeat(pad))
            );
            // A lone continuation byte, and a truncated sequence before the quote.
            let at = 1 + pad;
            ok[at] = 0x80;
            let mut sc = Scanner::new(&ok);
            sc.peek().unwrap();
            assert_eq!(sc.string().unwrap_err(), malformed(at, "utf-8 text"));
            let bad = [&b"\""[..], &b"x".repeat(pad), &[0xc3], b"\""].concat();
            let mut sc = Scanner::new(&bad);
            sc.peek().unwrap();
            assert_eq!(sc.string().unwrap_err(), malformed(1 + pad, "utf-8 text"));
            // The same after an escape.
            let bad = [&b"\"\\n"[..], &b"x".repeat(pad), &[0xff], b"\""].concat();
            let mut sc = Scanner::new(&bad);
            sc.peek().unwrap();
            assert_eq!(sc.string().unwrap_err(), malformed(3 + pad, "utf-8 text"));
        }
    }

    #[test]
    fn each_wide_sequence_is_checked_as_from_utf8_checks_the_string() {
        // Every lead byte with every second byte, then the continuation bytes at the edges of
        // the ranges RFC 3629 allows and others: the string is accepted exactly when
        // `from_utf8` accepts its content, and refused at the offset `from_utf8` names.
        let after = [0x80u8, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0x41, 0xe9];
        for lead in 0x80..=0xffu8 {
            for second in 0x20..=0xffu8 {
                if second == b'"' || second == b'\\' {
                    continue;
                }
                for &third in &after {
                    for &fourth in &after {
                        let content = [b'a', lead, second, third, fourth, b'z'];
                        let doc = [&b"\""[..], &content, b"\""].concat();
                        let mut sc = Scanner::new(&doc);
                        sc.peek().unwrap();
                        let got = sc.string().map(|s| s.into_owned());
                        match std::str::from_utf8(&content) {
                            Ok(_) => assert_eq!(got.unwrap(), content, "{content:x?}"),
                            Err(e) => assert_eq!(
                                got.unwrap_err(),
                                malformed(1 + e.valid_up_to(), "utf-8 text"),
                                "{content:x?}"
                            ),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_wide_byte_outside_a_string_is_malformed() {
        for bad in [
            &b"\xc3\xa9"[..],
            b"[1,\xc3\xa9]",
            b"{\"a\":1}\xff",
            b"[ \xa0]",
        ] {
            let mut sc = Scanner::new(bad);
            let r = sc.skip(0).and_then(|_| sc.end());
            assert!(r.is_err(), "{bad:?}");
        }
    }

    #[test]
    fn numbers_follow_the_grammar() {
        for ok in [
            "0",
            "-0",
            "12",
            "-1.5",
            "1e9",
            "1E+2",
            "2.5e-3",
            "-999999999999999999",
            "-99999999999999999999",
        ] {
            let mut sc = Scanner::new(ok.as_bytes());
            let n = sc.number().unwrap();
            assert_eq!(n.text(), ok);
            assert_eq!(n.value, ok.parse::<i64>().ok());
            sc.end().unwrap();
        }
        for bad in ["01", "-", "1.", ".5", "1e", "+1"] {
            let mut sc = Scanner::new(bad.as_bytes());
            let r = sc.peek().and_then(|_| sc.number()).and_then(|_| sc.end());
            assert!(r.is_err(), "{bad}");
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        let mut sc = Scanner::new(deep.as_bytes());
        assert!(sc.skip(0).is_err());
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        let mut sc = Scanner::new(ok.as_bytes());
        sc.skip(0).unwrap();
    }

    /// Both skips on `input` at `depth`: the same result, and the same position after it.
    fn same_skip(input: &[u8], depth: usize) {
        let mut a = Scanner::new(input);
        let mut b = Scanner::new(input);
        let ra = a.skip(depth);
        let rb = b.skip_reference(depth);
        assert_eq!(
            ra,
            rb,
            "{:?} at depth {depth}",
            String::from_utf8_lossy(input)
        );
        if ra.is_ok() {
            assert_eq!(a.pos, b.pos, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn the_loop_skip_agrees_with_the_recursive_one_on_mutated_documents() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        let docs: [&[u8]; 7] = [
            "{\"street\":\"Hauptstraße 221b, Hinterhaus 3. OG\"}".as_bytes(),
            br#"{"a":[1,-2.5e+3,0,true,false,null,"x\"y\u00e9\ud83d\ude00"],"b":{"c":{},"d":[]},"e":"Hauptstrasse 221b"}"#,
            br#" [ {"k" : "v" , "n" : -0.001E-2 } , [ [ ] , { } ] , "" ] "#,
            br#"{"before":{"id":1,"tags":["x","y"],"s":{"lat":52.5}},"after":null,"op":"u","ts_ms":1764460800000}"#,
            b"\"a long string of plain ascii text that runs for more than sixteen bytes\"",
            b"123456789012345678901234567890",
            b"[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]",
        ];
        const SPLICES: &[&[u8]] = &[
            b"\\",
            b"\\u12",
            b"\\ud83d",
            b"\xff",
            b"\xc3",
            b"\x01",
            b" ",
            b"\"",
            b",",
            b":",
            b"{",
            b"}",
            b"[",
            b"]",
            b"null",
            b"tru",
            b"-",
            b"0",
            b"01",
            b".",
            b"e",
            b"E+",
            b"\xe2\x82",
        ];
        let mut rng = StdRng::seed_from_u64(31);
        for doc in docs {
            for depth in [0, 1, MAX_DEPTH - 3, MAX_DEPTH - 1, MAX_DEPTH] {
                same_skip(doc, depth);
            }
            for cut in 0..doc.len() {
                same_skip(&doc[..cut], 0);
            }
            for _ in 0..4000 {
                let mut m = doc.to_vec();
                for _ in 0..rng.random_range(1..4) {
                    let at = rng.random_range(0..=m.len());
                    match rng.random_range(0..4) {
                        0 if at < m.len() => m[at] = rng.random(),
                        1 if at < m.len() => {
                            m.remove(at);
                        }
                        2 => {
                            let piece = SPLICES[rng.random_range(0..SPLICES.len())];
                            m.splice(at..at, piece.iter().copied());
                        }
                        _ => m.truncate(at),
                    }
                }
                same_skip(&m, rng.random_range(0..3) * 63);
            }
        }
        // Nesting at and past the bound, from every starting depth near it.
        for n in [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1] {
            for open in ["[", "{\"k\":"] {
                let close = if open == "[" { "]" } else { "}" };
                let deep = open.repeat(n) + "0" + &close.repeat(n);
                for depth in [0, 1, 5] {
                    same_skip(deep.as_bytes(), depth);
                }
            }
        }
    }

    #[test]
    fn the_digit_run_ends_at_exactly_the_first_non_digit() {
        // Every byte value at every position of a word, after digits, with bytes beyond it.
        for at in 0..12 {
            for c in 0..=255u8 {
                let mut w = [b'7'; 12];
                w[at] = c;
                let reference = w.iter().position(|c| !c.is_ascii_digit()).unwrap_or(12);
                assert_eq!(digit_run(&w, 0), reference, "{w:?}");
                assert_eq!(digit_run(&w[..at], 0), at, "{w:?}");
            }
        }
    }

    /// The fixed cases, then 20,000 strings of 1 to 23 bytes drawn from the characters of
    /// numbers and what may follow one, from `seed`: the inputs the inline number readers are
    /// compared with [`Scanner::number`] on.
    fn number_inputs(seed: u64, fixed: &[&str]) -> Vec<Vec<u8>> {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(seed);
        let alphabet = b"0123456789-.eE+ ,]x";
        let mut inputs: Vec<Vec<u8>> = fixed.iter().map(|s| s.as_bytes().to_vec()).collect();
        for _ in 0..20_000 {
            let n = rng.random_range(1..24);
            inputs.push(
                (0..n)
                    .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                    .collect(),
            );
        }
        inputs
    }

    #[test]
    fn a_small_number_is_what_number_reads_or_nothing() {
        let inputs = number_inputs(
            32,
            &[
                "0",
                "-0",
                "-0.0",
                "0.",
                "00",
                "-",
                "7",
                "-7.25,",
                "1.",
                ".5",
                "1.5e3",
                "1.5E",
                "01.5",
                "-0.000000000000000001",
                "123456789.123456789",
                "12345678.123456789",
            ],
        );
        for input in inputs {
            let mut fast = Scanner::new(&input);
            let mut full = Scanner::new(&input);
            match fast.small_number() {
                Some(n) => {
                    let text = full.number().unwrap().text();
                    assert_eq!(fast.pos, full.pos, "{input:?}");
                    let digits: String = text.chars().filter(char::is_ascii_digit).collect();
                    let scale = text.split_once('.').map_or(0, |(_, f)| f.len());
                    let sign = if text.starts_with('-') { -1 } else { 1 };
                    let expected = SmallNumber {
                        digits: sign * digits.parse::<i64>().unwrap(),
                        scale: scale as u32,
                        negative: sign < 0,
                    };
                    assert!(
                        !text.contains(['e', 'E']) && digits.len() <= 18,
                        "{input:?}"
                    );
                    assert_eq!(n, expected, "{input:?}");
                }
                None => {
                    assert_eq!(fast.pos, 0, "{input:?}");
                    if let Ok(n) = full.number() {
                        let digits = n.bytes.iter().filter(|c| c.is_ascii_digit()).count();
                        assert!(!n.integer || digits > 18, "{input:?}: {}", n.text());
                        assert!(
                            n.text().contains(['e', 'E']) || digits > 18,
                            "{input:?}: {}",
                            n.text()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_small_int_is_what_number_reads_or_nothing() {
        let inputs = number_inputs(
            31,
            &[
                "0",
                "-0",
                "00",
                "-",
                "7",
                "-7,",
                "123456789012345678",
                "1234567890123456789",
                "-999999999999999999]",
                "1.5",
                "1e3",
                "01",
                "-01",
                "9223372036854775807",
            ],
        );
        for input in inputs {
            let mut fast = Scanner::new(&input);
            let mut full = Scanner::new(&input);
            match fast.small_int() {
                Some(v) => {
                    let n = full.number().unwrap();
                    assert_eq!((n.integer, n.value), (true, Some(v)), "{input:?}");
                    assert_eq!(fast.pos, full.pos, "{input:?}");
                }
                None => assert_eq!(fast.pos, 0, "{input:?}"),
            }
        }
    }
}
