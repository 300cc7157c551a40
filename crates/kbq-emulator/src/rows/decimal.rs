//! NUMERIC and BIGNUMERIC digits: decimal literals, the little-endian two's-complement unscaled
//! integers of the wire, and the normalised text of the REST API.

/// The decimal digits of a little-endian two's-complement integer of up to 32 bytes, without heap.
pub(super) struct UnscaledDecimal {
    pub(super) negative: bool,
    buf: [u8; 80],
    start: usize,
}

impl UnscaledDecimal {
    pub(super) fn from_le_twos_complement(b: &[u8]) -> Self {
        let negative = b.last().is_some_and(|&last| last & 0x80 != 0);
        // Sign-extend into four u64 limbs, then negate to get the magnitude.
        let mut bytes = [if negative { 0xffu8 } else { 0 }; 32];
        let n = b.len().min(32);
        bytes[..n].copy_from_slice(&b[..n]);
        let mut limbs = [0u64; 4];
        for (i, limb) in limbs.iter_mut().enumerate() {
            *limb = u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        }
        if negative {
            let mut carry = 1u64;
            for limb in limbs.iter_mut() {
                let (v, c) = (!*limb).overflowing_add(carry);
                *limb = v;
                carry = u64::from(c);
            }
        }
        let mut buf = [b'0'; 80];
        let mut start = buf.len();
        while limbs.iter().any(|&l| l != 0) {
            // Divide by 10^19 so each step yields 19 digits.
            const CHUNK: u64 = 10_000_000_000_000_000_000;
            let mut rem: u128 = 0;
            for limb in limbs.iter_mut().rev() {
                let cur = (rem << 64) | u128::from(*limb);
                *limb = (cur / u128::from(CHUNK)) as u64;
                rem = cur % u128::from(CHUNK);
            }
            let mut chunk = rem as u64;
            let last = limbs.iter().all(|&l| l == 0);
            for _ in 0..19 {
                if last && chunk == 0 {
                    break;
                }
                start -= 1;
                buf[start] = b'0' + (chunk % 10) as u8;
                chunk /= 10;
            }
        }
        UnscaledDecimal {
            negative,
            buf,
            start,
        }
    }

    /// Number of significant digits (0 for zero).
    pub(super) fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    pub(super) fn digits(&self) -> &str {
        std::str::from_utf8(&self.buf[self.start..]).expect("ascii digits")
    }
}

/// `digits × 10^-scale` as a plain decimal string without trailing fractional zeros, rounded half
/// away from zero to `max_scale` fractional digits.
pub(super) fn format_scaled(
    negative: bool,
    digits: &str,
    scale: usize,
    max_scale: usize,
) -> String {
    let digits = digits.trim_start_matches('0');
    let mut int_part: Vec<u8>;
    let mut frac: Vec<u8>;
    if digits.len() > scale {
        int_part = digits.as_bytes()[..digits.len() - scale].to_vec();
        frac = digits.as_bytes()[digits.len() - scale..].to_vec();
    } else {
        int_part = Vec::new();
        frac = vec![b'0'; scale - digits.len()];
        frac.extend_from_slice(digits.as_bytes());
    }
    if frac.len() > max_scale {
        let round_up = frac[max_scale] >= b'5';
        frac.truncate(max_scale);
        if round_up {
            let mut carry = true;
            for d in frac.iter_mut().rev().chain(int_part.iter_mut().rev()) {
                if *d == b'9' {
                    *d = b'0';
                } else {
                    *d += 1;
                    carry = false;
                    break;
                }
            }
            if carry {
                int_part.insert(0, b'1');
            }
        }
    }
    while frac.last() == Some(&b'0') {
        frac.pop();
    }
    let int_str = if int_part.iter().all(|&d| d == b'0') {
        "0".to_string()
    } else {
        String::from_utf8(int_part)
            .expect("ascii digits")
            .trim_start_matches('0')
            .to_string()
    };
    let is_zero = int_str == "0" && frac.is_empty();
    let mut out = String::new();
    if negative && !is_zero {
        out.push('-');
    }
    out.push_str(&int_str);
    if !frac.is_empty() {
        out.push('.');
        out.push_str(std::str::from_utf8(&frac).expect("ascii digits"));
    }
    out
}

/// A decimal literal (`-12.5e3`) as a normalised decimal string at most `max_scale` places.
pub(super) fn format_decimal_text(s: &str, max_scale: usize) -> Option<String> {
    let s = s.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i64>().ok()?),
        None => (s, 0),
    };
    let (int_part, frac_part) = match mantissa.find('.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, ""),
    };
    let mut digits = String::with_capacity(int_part.len() + frac_part.len());
    digits.push_str(int_part);
    digits.push_str(frac_part);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if digits.bytes().all(|c| c == b'0') {
        // Zero at any exponent; validation bounds the exponent of every other value.
        return Some("0".into());
    }
    let mut scale = (frac_part.len() as i64).checked_sub(exponent)?;
    if scale < -100 {
        // Validation caps NUMERIC at 77 integer digits; this only guards the allocation.
        return None;
    }
    if scale < 0 {
        digits.extend(std::iter::repeat_n('0', (-scale) as usize));
        scale = 0;
    }
    if scale > 1000 {
        return Some("0".into());
    }
    Some(format_scaled(negative, &digits, scale as usize, max_scale))
}

/// Digit count of a u64 (0 for 0, which has no integer digits worth counting).
pub(super) fn decimal_len(mut v: u64) -> u32 {
    let mut n = 0;
    while v > 0 {
        v /= 10;
        n += 1;
    }
    n
}

/// The shape of a decimal literal: significant digits left of the point after the exponent.
pub(super) struct DecimalShape {
    pub(super) int_digits: u32,
}

pub(super) fn decimal_shape(b: &[u8]) -> Option<DecimalShape> {
    let s = std::str::from_utf8(b).ok()?.trim();
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
        None => (s, 0),
    };
    let (int_part, frac_part) = match mantissa.find('.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    if !int_part
        .bytes()
        .chain(frac_part.bytes())
        .all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let int_trimmed = int_part.trim_start_matches('0');
    let int_digits = if int_trimmed.is_empty() {
        // 0.00123e5 → the first significant digit decides.
        let zeros = frac_part.len() - frac_part.trim_start_matches('0').len();
        if frac_part.trim_start_matches('0').is_empty() {
            0
        } else {
            exponent.saturating_sub(zeros as i32).max(0)
        }
    } else {
        (int_trimmed.len() as i32).saturating_add(exponent).max(0)
    };
    Some(DecimalShape {
        int_digits: int_digits as u32,
    })
}
