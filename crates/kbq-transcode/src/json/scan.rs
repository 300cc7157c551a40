//! A JSON tokenizer over the record's bytes (RFC 8259, strict): it never builds a value tree.
//! Strings come back as slices of the input unless they hold escapes; numbers as their text, so
//! a NUMERIC column gets the digits exactly as written. The input is checked as UTF-8 once, up
//! front, so every slice cut at an ASCII delimiter is valid UTF-8.

use std::borrow::Cow;

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

/// A number's text and whether it is written as an integer (no fraction, no exponent).
#[derive(Debug, Clone, Copy)]
pub struct Number<'a> {
    pub text: &'a str,
    pub integer: bool,
}

pub struct Scanner<'a> {
    b: &'a [u8],
    pub pos: usize,
}

pub fn malformed(offset: usize, what: &'static str) -> RecordError {
    RecordError::MalformedJson { offset, what }
}

impl<'a> Scanner<'a> {
    pub fn new(b: &'a [u8]) -> Result<Scanner<'a>, RecordError> {
        if let Err(e) = std::str::from_utf8(b) {
            return Err(malformed(e.valid_up_to(), "utf-8 text"));
        }
        Ok(Scanner { b, pos: 0 })
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

    /// The kind of the next value, without consuming it.
    #[inline]
    pub fn peek(&mut self) -> Result<Token, RecordError> {
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
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') if matches!(b.get(i + 1), Some(b'0'..=b'9')) => {
                return Err(malformed(i, "no leading zero"));
            }
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while matches!(b.get(i), Some(b'0'..=b'9')) {
                    i += 1;
                }
            }
            _ => return Err(malformed(i, "a digit")),
        }
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
        // ASCII only: the slice is valid UTF-8.
        let text = ascii(&b[start..i]);
        Ok(Number { text, integer })
    }

    /// After `peek` said `String`: the unescaped content.
    #[inline]
    pub fn string(&mut self) -> Result<Cow<'a, str>, RecordError> {
        let b = self.b;
        let start = self.pos + 1;
        let mut i = start;
        while let Some(&c) = b.get(i) {
            match c {
                b'"' => {
                    self.pos = i + 1;
                    // Cut at ASCII quotes of input that was checked as UTF-8.
                    return Ok(Cow::Borrowed(
                        std::str::from_utf8(&b[start..i]).expect("checked utf-8"),
                    ));
                }
                b'\\' => return self.escaped(start, i).map(Cow::Owned),
                0..=0x1f => return Err(malformed(i, "no control character in a string")),
                _ => i += 1,
            }
        }
        Err(malformed(i, "the end of a string"))
    }

    #[cold]
    fn escaped(&mut self, start: usize, first: usize) -> Result<String, RecordError> {
        let b = self.b;
        let mut out: Vec<u8> = b[start..first].to_vec();
        let mut i = first;
        loop {
            match b.get(i) {
                None => return Err(malformed(i, "the end of a string")),
                Some(b'"') => {
                    self.pos = i + 1;
                    return Ok(String::from_utf8(out).expect("utf-8 in, utf-8 out"));
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
    #[inline]
    pub fn next_key(&mut self, first: bool) -> Result<Option<Cow<'a, str>>, RecordError> {
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

    /// Whether an array has another element; consumes the `,` or `]`.
    #[inline]
    pub fn next_element(&mut self, first: bool) -> Result<bool, RecordError> {
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

    /// Skips one value, checking it; returns its text.
    pub fn skip(&mut self, depth: usize) -> Result<&'a str, RecordError> {
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
                        self.skip(depth + 1)?;
                    }
                } else {
                    self.open(b'[');
                    let mut first = true;
                    while self.next_element(first)? {
                        first = false;
                        self.skip(depth + 1)?;
                    }
                }
            }
        }
        Ok(std::str::from_utf8(&self.b[start..self.pos]).expect("checked utf-8"))
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

fn ascii(b: &[u8]) -> &str {
    std::str::from_utf8(b).expect("ascii digits")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Result<String, RecordError> {
        let mut sc = Scanner::new(s.as_bytes())?;
        sc.peek()?;
        let v = sc.string()?.into_owned();
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

    #[test]
    fn numbers_follow_the_grammar() {
        for ok in ["0", "-0", "12", "-1.5", "1e9", "1E+2", "2.5e-3"] {
            let mut sc = Scanner::new(ok.as_bytes()).unwrap();
            assert_eq!(sc.number().unwrap().text, ok);
            sc.end().unwrap();
        }
        for bad in ["01", "-", "1.", ".5", "1e", "+1"] {
            let mut sc = Scanner::new(bad.as_bytes()).unwrap();
            let r = sc.peek().and_then(|_| sc.number()).and_then(|_| sc.end());
            assert!(r.is_err(), "{bad}");
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        let mut sc = Scanner::new(deep.as_bytes()).unwrap();
        assert!(sc.skip(0).is_err());
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        let mut sc = Scanner::new(ok.as_bytes()).unwrap();
        sc.skip(0).unwrap();
    }
}
