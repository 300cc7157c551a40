//! Value conversions from Avro logical types into what BigQuery's Storage Write API accepts
//! (docs/mapping.md): TIMESTAMP as int64 µs, DATE as int32 days, DATETIME
//! and TIME as packed civil-time int64 (so seconds are always present), NUMERIC/BIGNUMERIC as
//! little-endian two's-complement unscaled integers at scale 9/38. Each range check returns a
//! human reason; the caller adds the column name.

/// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z in µs since the epoch.
pub const MIN_TIMESTAMP_MICROS: i64 = -62_135_596_800_000_000;
pub const MAX_TIMESTAMP_MICROS: i64 = 253_402_300_799_999_999;
/// 0001-01-01 and 9999-12-31 in days since the epoch.
pub const MIN_DATE_DAYS: i32 = -719_162;
pub const MAX_DATE_DAYS: i32 = 2_932_896;
const MICROS_PER_DAY: i64 = 86_400_000_000;

pub fn timestamp_micros(micros: Option<i64>) -> Result<i64, String> {
    match micros {
        Some(m) if (MIN_TIMESTAMP_MICROS..=MAX_TIMESTAMP_MICROS).contains(&m) => Ok(m),
        _ => Err("timestamp is outside 0001-01-01..9999-12-31".into()),
    }
}

pub fn date_days(days: i32) -> Result<i32, String> {
    if (MIN_DATE_DAYS..=MAX_DATE_DAYS).contains(&days) {
        Ok(days)
    } else {
        Err(format!(
            "date {days} days from 1970-01-01 is outside 0001-01-01..9999-12-31"
        ))
    }
}

/// Packed TIME: `hour<<32 | minute<<26 | second<<20 | micros` (CivilTimeEncoder's layout).
pub fn time_packed(micros_of_day: i64) -> Result<i64, String> {
    if !(0..MICROS_PER_DAY).contains(&micros_of_day) {
        return Err(format!(
            "time of day {micros_of_day} µs is outside 00:00:00..23:59:59.999999"
        ));
    }
    Ok(pack_time(micros_of_day))
}

fn pack_time(micros_of_day: i64) -> i64 {
    let secs = micros_of_day / 1_000_000;
    let micros = micros_of_day % 1_000_000;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    (((h << 12) | (m << 6) | s) << 20) | micros
}

/// Packed DATETIME from local µs since 1970-01-01T00:00:00 (no time zone).
pub fn datetime_packed(local_micros: Option<i64>) -> Result<i64, String> {
    let Some(m) =
        local_micros.filter(|m| (MIN_TIMESTAMP_MICROS..=MAX_TIMESTAMP_MICROS).contains(m))
    else {
        return Err("datetime is outside 0001-01-01..9999-12-31".into());
    };
    let days = m.div_euclid(MICROS_PER_DAY);
    let (y, mo, d) = civil_from_days(days);
    let time = pack_time(m.rem_euclid(MICROS_PER_DAY));
    let date = (y << 14) | (mo << 10) | (d << 5);
    // The date part sits above the 17 bits of h:m:s and the 20 bits of micros.
    Ok((date << 32) | time)
}

/// Days since 1970-01-01 of a proleptic Gregorian date, or why it is not a date.
pub fn days_from_civil(year: i64, month: i64, day: i64) -> Result<i64, String> {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Err(format!("month {month} is not 1..12")),
    };
    if !(1..=9999).contains(&year) || !(1..=month_days).contains(&day) {
        return Err(format!(
            "{year:04}-{month:02}-{day:02} is not a date in 0001-01-01..9999-12-31"
        ));
    }
    // Howard Hinnant's days_from_civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Ok(era * 146_097 + doe - 719_468)
}

/// Howard Hinnant's days → (year, month, day) in the proleptic Gregorian calendar.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// BigQuery's two decimal column types, by the scale their bytes are written at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecimalTarget {
    Numeric,
    BigNumeric,
}

impl DecimalTarget {
    pub fn scale(self) -> u32 {
        match self {
            DecimalTarget::Numeric => 9,
            DecimalTarget::BigNumeric => 38,
        }
    }
}

/// A signed integer of up to 320 bits as sign + magnitude, enough for any BIGNUMERIC value
/// (256 bits) with room to rescale before the range check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wide {
    negative: bool,
    mag: [u64; LIMBS],
}

const LIMBS: usize = 5;
const POW10_19: u64 = 10_000_000_000_000_000_000;

impl Wide {
    /// From Avro's big-endian two's-complement bytes (any length).
    pub fn from_be_twos(bytes: &[u8]) -> Result<Wide, String> {
        let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
        // Sign-extension bytes carry no value.
        let pad = if negative { 0xff } else { 0x00 };
        let skip = bytes.iter().take_while(|b| **b == pad).count();
        let body = &bytes[skip.min(bytes.len())..];
        if body.len() > LIMBS * 8 - 1 {
            return Err("decimal is too large for BIGNUMERIC".into());
        }
        let mut twos = [if negative { u64::MAX } else { 0 }; LIMBS];
        for (i, b) in body.iter().rev().enumerate() {
            let limb = &mut twos[i / 8];
            let shift = (i % 8) * 8;
            *limb = (*limb & !(0xff << shift)) | ((*b as u64) << shift);
        }
        let mag = if negative { negate(twos) } else { twos };
        Ok(Wide { negative, mag })
    }

    pub fn from_i64(v: i64) -> Wide {
        let mut mag = [0u64; LIMBS];
        mag[0] = v.unsigned_abs();
        Wide {
            negative: v < 0,
            mag,
        }
    }

    pub fn from_u64(v: u64) -> Wide {
        let mut mag = [0u64; LIMBS];
        mag[0] = v;
        Wide {
            negative: false,
            mag,
        }
    }

    /// Parses decimal text (`-12.50`, `1e3`, `.5`) into an unscaled value and its scale; a
    /// negative exponent beyond the digits raises the scale, a positive one multiplies.
    pub fn parse_decimal(text: &str) -> Result<(Wide, u32), String> {
        let bad = || format!("{text:?} is not a decimal number");
        let (negative, rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], rest[i + 1..].parse::<i64>().map_err(|_| bad())?),
            None => (rest, 0),
        };
        let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(bad());
        }
        // Up to 19 digits at a time in a u64, then one multiply-add over the limbs: a digit at
        // a time over every limb was most of the cost of a short decimal.
        let mut w = Wide::from_i64(0);
        let (mut chunk, mut n) = (0u64, 0u32);
        let too_large = |_| "decimal is too large".to_string();
        for c in int_part.bytes().chain(frac_part.bytes()) {
            if !c.is_ascii_digit() {
                return Err(bad());
            }
            chunk = chunk * 10 + (c - b'0') as u64;
            n += 1;
            if n == 19 {
                w.mul_small(POW10_19)
                    .and_then(|_| w.add_small(chunk))
                    .map_err(too_large)?;
                (chunk, n) = (0, 0);
            }
        }
        if n > 0 {
            w.mul_small(10u64.pow(n))
                .and_then(|_| w.add_small(chunk))
                .map_err(too_large)?;
        }
        let scale = frac_part.len() as i64 - exponent;
        if !(-100..=100).contains(&scale) {
            return Err(format!("{text:?} has an exponent out of range"));
        }
        let scale = if scale < 0 {
            w.rescale(0, scale.unsigned_abs() as u32)?;
            0
        } else {
            scale as u32
        };
        w.negative = negative && !w.is_zero();
        Ok((w, scale))
    }

    fn add_small(&mut self, a: u64) -> Result<(), ()> {
        let mut carry = a;
        for limb in self.mag.iter_mut() {
            let (v, c) = limb.overflowing_add(carry);
            *limb = v;
            carry = c as u64;
            if carry == 0 {
                return Ok(());
            }
        }
        if carry == 0 { Ok(()) } else { Err(()) }
    }

    fn is_zero(&self) -> bool {
        self.mag.iter().all(|l| *l == 0)
    }

    fn mul_small(&mut self, m: u64) -> Result<(), ()> {
        let mut carry = 0u128;
        for limb in self.mag.iter_mut() {
            let v = (*limb as u128) * (m as u128) + carry;
            *limb = v as u64;
            carry = v >> 64;
        }
        if carry == 0 { Ok(()) } else { Err(()) }
    }

    fn div_small(&mut self, d: u64) -> u64 {
        let mut rem = 0u128;
        for limb in self.mag.iter_mut().rev() {
            let v = (rem << 64) | *limb as u128;
            *limb = (v / d as u128) as u64;
            rem = v % d as u128;
        }
        rem as u64
    }

    /// Moves the value from `from` decimal places to `to`; dropping non-zero digits is an error
    /// rather than a silent rounding.
    ///
    /// Zero is zero at every scale: it returns at once, so a hostile scale (a Protobuf decimal's
    /// `scale` is any int32) costs one check, not a loop of 10^8 steps. Any other value fails
    /// within `LIMBS × 64 / log2(10^19)` steps (it overflows, or a division leaves a remainder).
    pub fn rescale(&mut self, from: u32, to: u32) -> Result<(), String> {
        if self.is_zero() {
            return Ok(());
        }
        let mut diff = from.abs_diff(to);
        while diff > 0 {
            let step = diff.min(19);
            let p = 10u64.pow(step);
            if to > from {
                self.mul_small(p)
                    .map_err(|_| "decimal is too large for the column".to_string())?;
            } else if self.div_small(p) != 0 {
                return Err(format!(
                    "decimal has more than {to} fractional digits and would be rounded"
                ));
            }
            diff -= step;
        }
        Ok(())
    }

    /// Checks the BigQuery range and appends the minimal little-endian two's-complement bytes.
    pub fn write_le(&self, target: DecimalTarget, out: &mut Vec<u8>) -> Result<(), String> {
        let in_range = match target {
            // |unscaled| ≤ 10^38 − 1, i.e. < 10^38 = 0x4b3b4ca85a86c47a098a224000000000.
            DecimalTarget::Numeric => {
                self.mag[2..].iter().all(|l| *l == 0)
                    && ((self.mag[1] as u128) << 64 | self.mag[0] as u128)
                        < 100_000_000_000_000_000_000_000_000_000_000_000_000u128
            }
            // −2^255 ≤ unscaled ≤ 2^255 − 1.
            DecimalTarget::BigNumeric => {
                let top = self.mag[3] >> 63 == 0 && self.mag[4] == 0;
                let min = self.negative
                    && self.mag[4] == 0
                    && self.mag[3] == 1 << 63
                    && self.mag[..3].iter().all(|l| *l == 0);
                top || min
            }
        };
        if !in_range {
            let name = match target {
                DecimalTarget::Numeric => "NUMERIC",
                DecimalTarget::BigNumeric => "BIGNUMERIC",
            };
            return Err(format!("decimal is outside the range of {name}"));
        }
        let twos = if self.negative && !self.is_zero() {
            negate(self.mag)
        } else {
            self.mag
        };
        let mut le = [0u8; LIMBS * 8];
        for (i, limb) in twos.iter().enumerate() {
            le[i * 8..i * 8 + 8].copy_from_slice(&limb.to_le_bytes());
        }
        out.extend_from_slice(&le[..twos_len(&twos)]);
        Ok(())
    }

    /// The decimal text of `self / 10^scale` (for JSON rendering).
    pub fn to_decimal_string(self, scale: u32) -> String {
        let mut digits = Vec::new();
        let mut v = self;
        loop {
            let chunk = v.div_small(POW10_19);
            let done = v.is_zero();
            let s = if done {
                chunk.to_string()
            } else {
                format!("{chunk:019}")
            };
            digits.push(s);
            if done {
                break;
            }
        }
        let mut s: String = digits.into_iter().rev().collect();
        let scale = scale as usize;
        if scale > 0 {
            if s.len() <= scale {
                s = format!("{}{s}", "0".repeat(scale + 1 - s.len()));
            }
            s.insert(s.len() - scale, '.');
        }
        if self.negative && !self.is_zero() {
            s.insert(0, '-');
        }
        s
    }
}

/// The fewest little-endian bytes that hold `twos` as a two's-complement number: the bytes
/// that only repeat the sign are dropped, found a limb at a time (a byte at a time from the top
/// of all 40 was most of the cost of a short decimal).
fn twos_len(twos: &[u64; LIMBS]) -> usize {
    let fill = if twos[LIMBS - 1] >> 63 == 1 {
        u64::MAX
    } else {
        0
    };
    match twos.iter().rposition(|l| *l != fill) {
        // 0 or −1: one byte.
        None => 1,
        Some(k) => {
            let bits = k * 64 + (64 - (twos[k] ^ fill).leading_zeros() as usize) + 1;
            bits.div_ceil(8)
        }
    }
}

fn negate(mut v: [u64; LIMBS]) -> [u64; LIMBS] {
    let mut carry = true;
    for limb in v.iter_mut() {
        let (x, c) = (!*limb).overflowing_add(carry as u64);
        *limb = x;
        carry = c;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(be: &[u8], scale: u32, target: DecimalTarget) -> Result<Vec<u8>, String> {
        let mut w = Wide::from_be_twos(be)?;
        w.rescale(scale, target.scale())?;
        let mut out = Vec::new();
        w.write_le(target, &mut out)?;
        Ok(out)
    }

    #[test]
    fn datetime_at_a_minute_boundary_keeps_its_seconds_field() {
        // 2026-08-31T12:30:00 local: the Flink connector dropped ":00" (bug #350).
        let days = 20_696i64; // 2026-08-31
        let micros = days * MICROS_PER_DAY + (12 * 3600 + 30 * 60) * 1_000_000;
        let packed = datetime_packed(Some(micros)).unwrap();
        let expected = ((2026i64 << 26) | (8 << 22) | (31 << 17) | (12 << 12) | (30 << 6)) << 20;
        assert_eq!(packed, expected);
    }

    #[test]
    fn datetime_before_the_epoch_uses_floor_division() {
        // 1969-12-31T23:59:59.999999
        let packed = datetime_packed(Some(-1)).unwrap();
        let expected = (((1969i64 << 26) | (12 << 22) | (31 << 17) | (23 << 12) | (59 << 6) | 59)
            << 20)
            | 999_999;
        assert_eq!(packed, expected);
        assert!(datetime_packed(Some(MIN_TIMESTAMP_MICROS - 1)).is_err());
        assert!(datetime_packed(Some(MAX_TIMESTAMP_MICROS)).is_ok());
        assert!(datetime_packed(None).is_err());
    }

    #[test]
    fn civil_dates_match_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(MIN_DATE_DAYS as i64), (1, 1, 1));
        assert_eq!(civil_from_days(MAX_DATE_DAYS as i64), (9999, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn time_packs_hours_minutes_seconds_and_micros() {
        let t = ((23 * 3600 + 59 * 60 + 59) * 1_000_000) + 123_456;
        assert_eq!(
            time_packed(t).unwrap(),
            (((23 << 12) | (59 << 6) | 59) << 20) | 123_456
        );
        assert!(time_packed(MICROS_PER_DAY).is_err());
        assert!(time_packed(-1).is_err());
    }

    #[test]
    fn a_rescale_over_any_distance_ends_at_once() {
        let mut zero = Wide::from_be_twos(&[0]).unwrap();
        assert!(zero.rescale(0, u32::MAX).is_ok());
        assert!(zero.rescale(u32::MAX, 0).is_ok());
        assert!(zero.is_zero());
        let mut one = Wide::from_be_twos(&[1]).unwrap();
        assert!(one.rescale(0, u32::MAX).is_err());
        let mut one = Wide::from_be_twos(&[1]).unwrap();
        assert!(one.rescale(u32::MAX, 0).is_err());
    }

    #[test]
    fn decimals_are_rescaled_to_little_endian_twos_complement() {
        // 1.5 at scale 1 → 1_500_000_000 at scale 9 = 0x59682F00.
        assert_eq!(
            numeric(&[0x0f], 1, DecimalTarget::Numeric).unwrap(),
            vec![0x00, 0x2f, 0x68, 0x59]
        );
        // −1 at scale 0 → −1e9 = two's complement 0xC4653600 (with sign byte kept minimal).
        assert_eq!(
            numeric(&[0xff], 0, DecimalTarget::Numeric).unwrap(),
            (-1_000_000_000i64).to_le_bytes()[..4].to_vec()
        );
        assert_eq!(numeric(&[], 0, DecimalTarget::Numeric).unwrap(), vec![0]);
        // 128 needs a sign byte: 0x80 0x00 little-endian.
        assert_eq!(
            numeric(&[0x00, 0x80], 9, DecimalTarget::Numeric).unwrap(),
            vec![0x80, 0x00]
        );
    }

    #[test]
    fn the_shortest_twos_complement_keeps_the_sign_bit() {
        // The byte-at-a-time definition: drop the top byte while it only repeats the sign of
        // the byte below it.
        fn reference(twos: &[u64; LIMBS]) -> usize {
            let le: Vec<u8> = twos.iter().flat_map(|l| l.to_le_bytes()).collect();
            let mut n = le.len();
            while n > 1 {
                let (last, prev) = (le[n - 1], le[n - 2]);
                if (last == 0 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            n
        }
        let mut cases = vec![[0u64; LIMBS], [u64::MAX; LIMBS]];
        for limb in 0..LIMBS {
            for bit in 0..64 {
                for v in [1u64 << bit, (1u64 << bit) - 1, (1u64 << bit) | 1] {
                    let mut w = [0u64; LIMBS];
                    w[limb] = v;
                    cases.push(w);
                    cases.push(negate(w));
                }
            }
        }
        for twos in cases {
            assert_eq!(twos_len(&twos), reference(&twos), "{twos:x?}");
        }
    }

    #[test]
    fn numeric_range_and_rounding_are_errors() {
        // 10^29 at scale 0 does not fit NUMERIC(38, 9).
        let big = Wide::from_i64(10i64.pow(18));
        let mut w = big;
        w.rescale(0, 20).unwrap();
        let mut out = Vec::new();
        assert!(w.write_le(DecimalTarget::Numeric, &mut out).is_err());
        assert!(w.write_le(DecimalTarget::BigNumeric, &mut out).is_ok());
        // 0.0000000001 needs scale 10.
        assert!(numeric(&[0x01], 10, DecimalTarget::Numeric).is_err());
        // 0.0000000010 at scale 10 is exact at scale 9.
        assert_eq!(
            numeric(&[0x0a], 10, DecimalTarget::Numeric).unwrap(),
            vec![1]
        );
    }

    #[test]
    fn bignumeric_accepts_exactly_the_256_bit_range() {
        let mut max = vec![0x7f];
        max.extend([0xff; 31]);
        let out = numeric(&max, 38, DecimalTarget::BigNumeric).unwrap();
        assert_eq!(out.len(), 32);
        let mut min = vec![0x80];
        min.extend([0x00; 31]);
        let out = numeric(&min, 38, DecimalTarget::BigNumeric).unwrap();
        assert_eq!(out[31], 0x80);
        let mut over = vec![0x00, 0x80];
        over.extend([0x00; 31]);
        assert!(numeric(&over, 38, DecimalTarget::BigNumeric).is_err());
    }

    #[test]
    fn civil_dates_round_trip_and_invalid_ones_are_refused() {
        for days in [
            MIN_DATE_DAYS as i64,
            -1,
            0,
            11_016,
            20_696,
            MAX_DATE_DAYS as i64,
        ] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d).unwrap(), days);
        }
        assert!(days_from_civil(2023, 2, 29).is_err());
        assert!(days_from_civil(2024, 13, 1).is_err());
        assert!(days_from_civil(0, 1, 1).is_err());
        assert!(days_from_civil(2024, 1, 0).is_err());
    }

    #[test]
    fn decimal_text_parses_with_sign_point_and_exponent() {
        let text = |s: &str| {
            let (w, scale) = Wide::parse_decimal(s).unwrap();
            w.to_decimal_string(scale)
        };
        assert_eq!(text("-12.50"), "-12.50");
        assert_eq!(text("1e3"), "1000");
        assert_eq!(text(".5"), "0.5");
        assert_eq!(text("2.5E-3"), "0.0025");
        assert_eq!(text("-0"), "0");
        for bad in ["", "-", "1.2.3", "abc", "1e", "."] {
            assert!(Wide::parse_decimal(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn long_decimal_text_is_read_in_chunks_without_losing_a_digit() {
        // Lengths around the 19-digit chunks, up to what 320 bits hold (96 digits).
        for n in [18, 19, 20, 37, 38, 39, 57, 76, 77, 96] {
            let digits: String = (0..n).map(|i| char::from(b'1' + (i % 9) as u8)).collect();
            let (w, scale) = Wide::parse_decimal(&format!("-{digits}")).unwrap();
            assert_eq!(
                (w.to_decimal_string(scale), scale),
                (format!("-{digits}"), 0)
            );
            let split = format!("{}.{}", &digits[..n / 2], &digits[n / 2..]);
            let (w, scale) = Wide::parse_decimal(&split).unwrap();
            assert_eq!(w.to_decimal_string(scale), split);
        }
        assert!(Wide::parse_decimal(&"9".repeat(97)).is_err());
    }

    #[test]
    fn decimal_text_places_the_point() {
        assert_eq!(Wide::from_i64(-1505).to_decimal_string(2), "-15.05");
        assert_eq!(Wide::from_i64(5).to_decimal_string(3), "0.005");
        assert_eq!(Wide::from_i64(0).to_decimal_string(0), "0");
        let mut w = Wide::from_i64(1);
        w.rescale(0, 40).unwrap();
        assert_eq!(w.to_decimal_string(0), format!("1{}", "0".repeat(40)));
    }
}
