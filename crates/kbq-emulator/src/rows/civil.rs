//! Civil dates and times: BigQuery's literals, Java's CivilTimeEncoder packing, and the text the
//! REST API writes.

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub(super) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub(super) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

pub(super) fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Date {
    pub(super) year: i64,
    pub(super) month: u32,
    pub(super) day: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Time {
    hour: u32,
    minute: u32,
    second: u32,
    micros: u32,
}

impl Time {
    pub(super) fn micros_of_day(self) -> i64 {
        ((self.hour as i64 * 60 + self.minute as i64) * 60 + self.second as i64) * 1_000_000
            + self.micros as i64
    }

    /// The time of day of `micros` in `0..86_400_000_000`.
    pub(super) fn from_micros_of_day(micros: i64) -> Time {
        let micros = micros.rem_euclid(86_400_000_000);
        let seconds = micros / 1_000_000;
        Time {
            hour: (seconds / 3600) as u32,
            minute: (seconds / 60 % 60) as u32,
            second: (seconds % 60) as u32,
            micros: (micros % 1_000_000) as u32,
        }
    }
}

pub(super) fn valid_date(year: i64, month: u32, day: u32) -> Option<Date> {
    ((1..=9999).contains(&year)
        && (1..=12).contains(&month)
        && day >= 1
        && day <= days_in_month(year, month))
    .then_some(Date { year, month, day })
}

pub(super) fn valid_time(hour: u32, minute: u32, second: u32, micros: u32) -> Option<Time> {
    (hour < 24 && minute < 60 && second < 60 && micros < 1_000_000).then_some(Time {
        hour,
        minute,
        second,
        micros,
    })
}

/// A run of 1..=max ASCII digits.
pub(super) fn digits(s: &[u8], pos: &mut usize, max: usize) -> Option<u32> {
    let start = *pos;
    let mut value = 0u32;
    while *pos < s.len() && *pos - start < max && s[*pos].is_ascii_digit() {
        value = value * 10 + u32::from(s[*pos] - b'0');
        *pos += 1;
    }
    (*pos > start).then_some(value)
}

pub(super) fn expect(s: &[u8], pos: &mut usize, c: u8) -> Option<()> {
    (s.get(*pos) == Some(&c)).then(|| *pos += 1)
}

pub(super) fn parse_date_at(s: &[u8], pos: &mut usize) -> Option<Date> {
    let year = digits(s, pos, 4)?;
    expect(s, pos, b'-')?;
    let month = digits(s, pos, 2)?;
    expect(s, pos, b'-')?;
    let day = digits(s, pos, 2)?;
    valid_date(i64::from(year), month, day)
}

pub(super) fn parse_time_at(s: &[u8], pos: &mut usize) -> Option<Time> {
    let hour = digits(s, pos, 2)?;
    expect(s, pos, b':')?;
    let minute = digits(s, pos, 2)?;
    expect(s, pos, b':')?;
    let second = digits(s, pos, 2)?;
    let mut micros = 0;
    if s.get(*pos) == Some(&b'.') {
        *pos += 1;
        let start = *pos;
        let fraction = digits(s, pos, 6)?;
        micros = fraction * 10u32.pow(6 - (*pos - start) as u32);
    }
    valid_time(hour, minute, second, micros)
}

/// A DATE literal: `YYYY-[M]M-[D]D`.
pub(super) fn parse_date(s: &[u8]) -> Option<Date> {
    let s = s.trim_ascii();
    let mut pos = 0;
    let date = parse_date_at(s, &mut pos)?;
    (pos == s.len()).then_some(date)
}

/// A TIME literal: `[H]H:[M]M:[S]S[.F…]`, up to microseconds.
pub(super) fn parse_time(s: &[u8]) -> Option<Time> {
    let s = s.trim_ascii();
    let mut pos = 0;
    let time = parse_time_at(s, &mut pos)?;
    (pos == s.len()).then_some(time)
}

/// A DATETIME literal: a date, optionally followed by ` ` or `T` and a time.
pub(super) fn parse_datetime(s: &[u8]) -> Option<(Date, Time)> {
    let s = s.trim_ascii();
    let mut pos = 0;
    let date = parse_date_at(s, &mut pos)?;
    if pos == s.len() {
        return Some((date, valid_time(0, 0, 0, 0)?));
    }
    match s[pos] {
        b' ' | b'T' | b't' => pos += 1,
        _ => return None,
    }
    let time = parse_time_at(s, &mut pos)?;
    (pos == s.len()).then_some((date, time))
}

/// A TIMESTAMP literal's text as microseconds since the epoch: a DATETIME literal, then
/// optionally a zone: ` UTC`, `Z`, or an offset `±hh[:mm]` (with or without a space before it).
/// Named zones (`America/Los_Angeles`) are not read.
pub(super) fn parse_timestamp(s: &[u8]) -> Option<i64> {
    let s = s.trim_ascii();
    let (civil, offset_secs) = if let Some(civil) = s.strip_suffix(b" UTC") {
        (civil, 0)
    } else if let Some(civil) = s.strip_suffix(b"Z").or_else(|| s.strip_suffix(b"z")) {
        (civil, 0)
    } else {
        match zone_offset(s) {
            Some((civil, offset)) => (civil, offset),
            None => (s, 0),
        }
    };
    let (date, time) = parse_datetime(civil)?;
    let days = days_from_civil(date.year, date.month, date.day);
    Some((days * 86_400 - offset_secs) * 1_000_000 + time.micros_of_day())
}

/// A trailing `±hh` or `±hh:mm` after a time of day: (the text before it, the offset in seconds).
fn zone_offset(s: &[u8]) -> Option<(&[u8], i64)> {
    let sign_at = s.iter().rposition(|&b| b == b'+' || b == b'-')?;
    // The sign must follow the time (a date's own dashes come before the first ':').
    let first_colon = s.iter().position(|&b| b == b':')?;
    if sign_at < first_colon {
        return None;
    }
    let zone = &s[sign_at + 1..];
    let mut pos = 0;
    let hours = digits(zone, &mut pos, 2)?;
    let minutes = if pos < zone.len() {
        expect(zone, &mut pos, b':')?;
        digits(zone, &mut pos, 2)?
    } else {
        0
    };
    if pos != zone.len() || hours > 14 || minutes > 59 {
        return None;
    }
    let sign = if s[sign_at] == b'-' { -1 } else { 1 };
    let offset = sign * (i64::from(hours) * 3600 + i64::from(minutes) * 60);
    Some((s[..sign_at].trim_ascii_end(), offset))
}

/// CivilTimeEncoder's packed TIME: `hour<<32 | minute<<26 | second<<20 | micros`.
pub(super) fn decode_packed_time(packed: i64) -> Option<Time> {
    if packed < 0 || packed >> 37 != 0 {
        return None;
    }
    let p = packed as u64;
    valid_time(
        ((p >> 32) & 0x1f) as u32,
        ((p >> 26) & 0x3f) as u32,
        ((p >> 20) & 0x3f) as u32,
        (p & 0xf_ffff) as u32,
    )
}

/// CivilTimeEncoder's packed DATETIME: `year<<46 | month<<42 | day<<37 | packed TIME`.
pub(super) fn decode_packed_datetime(packed: i64) -> Option<(Date, Time)> {
    if packed < 0 || packed >> 60 != 0 {
        return None;
    }
    let p = packed as u64;
    let date = valid_date(
        ((p >> 46) & 0x3fff) as i64,
        ((p >> 42) & 0xf) as u32,
        ((p >> 37) & 0x1f) as u32,
    )?;
    let time = decode_packed_time((p & ((1 << 37) - 1)) as i64)?;
    Some((date, time))
}

pub(super) fn format_date(d: Date) -> String {
    format!("{:04}-{:02}-{:02}", d.year, d.month, d.day)
}

pub(super) fn format_time(t: Time) -> String {
    if t.micros == 0 {
        format!("{:02}:{:02}:{:02}", t.hour, t.minute, t.second)
    } else {
        format!(
            "{:02}:{:02}:{:02}.{:06}",
            t.hour, t.minute, t.second, t.micros
        )
    }
}

/// TIMESTAMP as the REST API's default: seconds since the epoch in Java's `Double.toString`
/// notation (`1.7E9`), written from the exact microseconds so no precision is lost in the text.
pub fn timestamp_seconds_text(micros: i64) -> String {
    if micros == 0 {
        return "0.0".into();
    }
    let negative = micros < 0;
    let digits = micros.unsigned_abs().to_string();
    // micros = 0.d1d2d3… × 10^len → seconds = d1.d2d3… × 10^(len − 1 − 6)
    let exponent = digits.len() as i64 - 1 - 6;
    let mantissa_rest = digits[1..].trim_end_matches('0');
    let mut out = String::with_capacity(digits.len() + 8);
    if negative {
        out.push('-');
    }
    out.push_str(&digits[..1]);
    out.push('.');
    out.push_str(if mantissa_rest.is_empty() {
        "0"
    } else {
        mantissa_rest
    });
    out.push('E');
    out.push_str(&exponent.to_string());
    out
}
