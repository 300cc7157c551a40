//! UTF-8 checks of the strings the plans copy. Almost every string is ASCII, which eight bytes
//! at a time confirm: no early exit, no alignment prologue (the standard library's `is_ascii`
//! has both and was a third of the check on strings of a few dozen bytes). Anything else gets
//! the full UTF-8 check.

/// Whether `b` is valid UTF-8.
#[inline]
pub fn valid(b: &[u8]) -> bool {
    ascii(b) || std::str::from_utf8(b).is_ok()
}

#[inline]
fn ascii(b: &[u8]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().expect("eight bytes"));
    if b.len() < 8 {
        return b.iter().fold(0u8, |acc, &x| acc | x) < 0x80;
    }
    // The last eight bytes (overlapping the chunks) cover the tail.
    let mut acc = word(&b[b.len() - 8..]);
    for c in b.chunks_exact(8) {
        acc |= word(c);
    }
    acc & HIGH == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_and_position_of_a_high_byte_is_found() {
        for len in 0..40 {
            let s = vec![b'a'; len];
            assert!(ascii(&s) && valid(&s), "{len}");
            for at in 0..len {
                let mut t = s.clone();
                t[at] = 0x80;
                assert!(!ascii(&t), "{len} {at}");
                assert!(!valid(&t), "{len} {at}");
                t[at] = 0xc3;
                if at + 1 < len {
                    t[at + 1] = 0x9f; // ß
                    assert!(valid(&t), "{len} {at}");
                }
            }
        }
    }
}
