//! The format of a time written as text, for `convert` (docs/mapping.md, "Transforms"): a small
//! strftime-like language, read and written exactly. `%Y` four digits, `%m` `%d` `%H` `%M` `%S`
//! two, `%f` a fraction of 1 to 9 digits read (6 written), `%3f` `%6f` `%9f` exactly that many,
//! `%z` an offset (`Z`, `+hhmm` or `+hh:mm` read; `+0000` written), `%:z` the same written
//! `+00:00`, `%%` a `%`; any other character stands for itself. Nothing is lenient: a digit
//! short, a month 13, a 30 February or a 60th second is not a time, and a fraction is written
//! only when its digits hold the value.

use crate::convert::{civil_from_days, days_from_civil};

pub(crate) const NANOS_PER_SECOND: i128 = 1_000_000_000;
pub(crate) const NANOS_PER_DAY: i128 = 86_400 * NANOS_PER_SECOND;

/// A parsed format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TimeFormat {
    items: Box<[Item]>,
    /// The finest unit the format writes, in nanoseconds: a time finer than it is not written.
    finest: i128,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Text(Box<str>),
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    /// Digits of a fraction of a second: `None` for `%f`, else exactly this many.
    Fraction(Option<u8>),
    /// An offset from UTC; `colon` for `%:z` (written `+00:00`).
    Offset {
        colon: bool,
    },
}

const DIRECTIVES: &str = "%Y %m %d %H %M %S %f %3f %6f %9f %z %:z %%";

impl TimeFormat {
    /// The format `text` spells, or why it is not one.
    pub(crate) fn parse(text: &str) -> Result<TimeFormat, String> {
        let mut items: Vec<Item> = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                literal.push(c);
                continue;
            }
            let item = match chars.next() {
                Some('%') => {
                    literal.push('%');
                    continue;
                }
                Some('Y') => Item::Year,
                Some('m') => Item::Month,
                Some('d') => Item::Day,
                Some('H') => Item::Hour,
                Some('M') => Item::Minute,
                Some('S') => Item::Second,
                Some('f') => Item::Fraction(None),
                Some('z') => Item::Offset { colon: false },
                Some(d @ ('3' | '6' | '9')) if chars.next() == Some('f') => {
                    Item::Fraction(Some(d as u8 - b'0'))
                }
                Some(':') if chars.next() == Some('z') => Item::Offset { colon: true },
                other => {
                    let at = other
                        .map(|c| format!("%{c}"))
                        .unwrap_or("a `%` at the end".into());
                    return Err(format!(
                        "{at} is not a directive of the format ({DIRECTIVES})"
                    ));
                }
            };
            let same = |i: &Item| {
                std::mem::discriminant(i) == std::mem::discriminant(&item)
                    || matches!((i, &item), (Item::Offset { .. }, Item::Offset { .. }))
            };
            if items.iter().any(same) {
                return Err("a directive occurs twice: a time has one of each part".into());
            }
            if !literal.is_empty() {
                items.push(Item::Text(std::mem::take(&mut literal).into()));
            }
            items.push(item);
        }
        if !literal.is_empty() {
            items.push(Item::Text(literal.into()));
        }
        if !items.iter().any(|i| !matches!(i, Item::Text(_))) {
            return Err(format!(
                "no directive: the format would write the same text for every time ({DIRECTIVES})"
            ));
        }
        let mut format = TimeFormat {
            items: items.into_boxed_slice(),
            finest: 0,
        };
        format.finest = format.finest().0;
        Ok(format)
    }

    /// Why the format cannot read or write a time, if it cannot: it needs a date (`%Y`, `%m`,
    /// `%d`), and a part of the time of day only beneath the parts above it (`%M` with `%H`, …),
    /// so that what it leaves out is only below its last part.
    pub(crate) fn check_parts(&self) -> Result<(), String> {
        let has = |want: &Item| self.items.iter().any(|i| i == want);
        let fraction = self.items.iter().any(|i| matches!(i, Item::Fraction(_)));
        if !(has(&Item::Year) && has(&Item::Month) && has(&Item::Day)) {
            return Err("a time's format needs a whole date: %Y, %m and %d".into());
        }
        if (has(&Item::Minute) && !has(&Item::Hour))
            || (has(&Item::Second) && !has(&Item::Minute))
            || (fraction && !has(&Item::Second))
        {
            return Err(
                "a part of the time of day needs the parts above it: %M with %H, %S with %M, a fraction with %S"
                    .into(),
            );
        }
        Ok(())
    }

    /// Whether a text of this format says its offset from UTC (an instant), or not (a civil
    /// time).
    pub(crate) fn has_offset(&self) -> bool {
        self.items.iter().any(|i| matches!(i, Item::Offset { .. }))
    }

    /// The time `text` spells, in nanoseconds since 1970-01-01T00:00:00: UTC when the format has
    /// an offset, else the civil time as it is written.
    pub(crate) fn read(&self, text: &[u8]) -> Result<i128, String> {
        let shown = || String::from_utf8_lossy(text).into_owned();
        let mismatch = |at: usize, what: &str| {
            format!(
                "{:?} does not match its format: {what} expected at byte {at}",
                shown()
            )
        };
        let (mut year, mut month, mut day) = (0i64, 0i64, 0i64);
        let (mut hour, mut minute, mut second, mut nanos) = (0i64, 0i64, 0i64, 0i64);
        let mut offset = 0i64;
        let mut at = 0usize;
        let digits = |at: &mut usize, n: usize, what: &str| -> Result<i64, String> {
            let end = *at + n;
            match text.get(*at..end) {
                Some(d) if d.iter().all(u8::is_ascii_digit) => {
                    *at = end;
                    Ok(d.iter().fold(0, |v, b| v * 10 + (b - b'0') as i64))
                }
                _ => Err(mismatch(*at, what)),
            }
        };
        for item in self.items.iter() {
            match item {
                Item::Text(t) => {
                    if !text[at..].starts_with(t.as_bytes()) {
                        return Err(mismatch(at, &format!("{t:?}")));
                    }
                    at += t.len();
                }
                Item::Year => year = digits(&mut at, 4, "a year of 4 digits")?,
                Item::Month => month = digits(&mut at, 2, "a month of 2 digits")?,
                Item::Day => day = digits(&mut at, 2, "a day of 2 digits")?,
                Item::Hour => hour = digits(&mut at, 2, "an hour of 2 digits")?,
                Item::Minute => minute = digits(&mut at, 2, "minutes of 2 digits")?,
                Item::Second => second = digits(&mut at, 2, "seconds of 2 digits")?,
                Item::Fraction(Some(n)) => {
                    let n = *n as usize;
                    let v = digits(&mut at, n, &format!("a fraction of {n} digits"))?;
                    nanos = v * 10i64.pow(9 - n as u32);
                }
                Item::Fraction(None) => {
                    let n = text[at..].iter().take_while(|b| b.is_ascii_digit()).count();
                    if !(1..=9).contains(&n) {
                        return Err(mismatch(at, "a fraction of 1 to 9 digits"));
                    }
                    let v = digits(&mut at, n, "")?;
                    nanos = v * 10i64.pow(9 - n as u32);
                }
                Item::Offset { .. } => {
                    offset = read_offset(text, &mut at).ok_or_else(|| {
                        mismatch(at, "an offset (Z, +hhmm or +hh:mm, hours to 23)")
                    })?;
                }
            }
        }
        if at != text.len() {
            return Err(format!(
                "{:?} does not match its format: text after byte {at}",
                shown()
            ));
        }
        let days = days_from_civil(year, month, day).map_err(|e| format!("{:?}: {e}", shown()))?;
        if hour > 23 || minute > 59 || second > 59 {
            return Err(format!(
                "{:?}: {hour:02}:{minute:02}:{second:02} is not a time of day (no leap seconds)",
                shown()
            ));
        }
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
        Ok(seconds as i128 * NANOS_PER_SECOND + nanos as i128)
    }

    /// The finest unit the format writes, in nanoseconds, and what a time finer than it has.
    fn finest(&self) -> (i128, String) {
        let has = |want: &Item| self.items.iter().any(|i| i == want);
        let fraction = self.items.iter().find_map(|i| match i {
            Item::Fraction(n) => Some(n.unwrap_or(6) as u32),
            _ => None,
        });
        match fraction {
            Some(n) => (
                10i128.pow(9 - n),
                format!("digits of a second past the {n} of its format"),
            ),
            None if has(&Item::Second) => (
                NANOS_PER_SECOND,
                "a fraction of a second, which its format does not write".into(),
            ),
            None if has(&Item::Minute) => (
                60 * NANOS_PER_SECOND,
                "seconds, which its format does not write".into(),
            ),
            None if has(&Item::Hour) => (
                3600 * NANOS_PER_SECOND,
                "minutes or seconds, which its format does not write".into(),
            ),
            None => (
                NANOS_PER_DAY,
                "a time of day, which its format does not write".into(),
            ),
        }
    }

    /// Appends the text of `nanos` (since 1970-01-01T00:00:00, UTC or civil) to `out`, or why
    /// the format cannot write it exactly (a year past 9999, more fraction than its digits).
    pub(crate) fn write(&self, nanos: i128, out: &mut Vec<u8>) -> Result<(), String> {
        let days = nanos.div_euclid(NANOS_PER_DAY) as i64;
        let of_day = nanos.rem_euclid(NANOS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        if !(1..=9999).contains(&year) {
            return Err("the time is outside 0001-01-01..9999-12-31".into());
        }
        // What the format leaves out must be zero: its last part is the finest it writes.
        if of_day % self.finest != 0 {
            return Err(format!("the time has {}", self.finest().1));
        }
        let seconds = (of_day / NANOS_PER_SECOND) as i64;
        let fraction = (of_day % NANOS_PER_SECOND) as i64;
        let two = |out: &mut Vec<u8>, v: i64| {
            out.extend_from_slice(&[b'0' + (v / 10) as u8, b'0' + (v % 10) as u8])
        };
        for item in self.items.iter() {
            match item {
                Item::Text(t) => out.extend_from_slice(t.as_bytes()),
                Item::Year => {
                    two(out, year / 100);
                    two(out, year % 100);
                }
                Item::Month => two(out, month),
                Item::Day => two(out, day),
                Item::Hour => two(out, seconds / 3600),
                Item::Minute => two(out, seconds / 60 % 60),
                Item::Second => two(out, seconds % 60),
                Item::Fraction(n) => {
                    let n = n.unwrap_or(6) as u32;
                    let v = fraction / 10i64.pow(9 - n);
                    for k in (0..n).rev() {
                        out.push(b'0' + (v / 10i64.pow(k) % 10) as u8);
                    }
                }
                Item::Offset { colon: false } => out.extend_from_slice(b"+0000"),
                Item::Offset { colon: true } => out.extend_from_slice(b"+00:00"),
            }
        }
        Ok(())
    }
}

/// An offset from UTC in seconds (`Z`, `+hhmm` or `+hh:mm`) at `at`, which it moves past.
fn read_offset(text: &[u8], at: &mut usize) -> Option<i64> {
    if text.get(*at) == Some(&b'Z') {
        *at += 1;
        return Some(0);
    }
    let sign = match text.get(*at) {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ => return None,
    };
    let two = |i: usize| -> Option<i64> {
        let d = text.get(i..i + 2)?;
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| ((d[0] - b'0') * 10 + (d[1] - b'0')) as i64)
    };
    let h = two(*at + 1)?;
    let colon = text.get(*at + 3) == Some(&b':');
    let m = two(*at + 3 + colon as usize)?;
    if h > 23 || m > 59 {
        return None;
    }
    *at += 5 + colon as usize;
    Some(sign * (h * 3600 + m * 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(format: &str, text: &str) -> Result<i128, String> {
        TimeFormat::parse(format).unwrap().read(text.as_bytes())
    }

    fn write(format: &str, nanos: i128) -> Result<String, String> {
        let mut out = Vec::new();
        TimeFormat::parse(format).unwrap().write(nanos, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn a_time_reads_and_writes_back_exactly() {
        let f = "%Y-%m-%dT%H:%M:%S.%9f%:z";
        let t = "2024-02-29T23:59:58.123456789+00:00";
        let nanos = read(f, t).unwrap();
        // 2024-02-29 is day 19782 since the epoch.
        assert_eq!(
            nanos,
            (19_782 * 86_400 + 86_398) as i128 * NANOS_PER_SECOND + 123_456_789
        );
        assert_eq!(write(f, nanos).unwrap(), t);
        assert_eq!(
            read("%Y-%m-%d %H:%M%z", "1970-01-01 01:00+0100"),
            Ok(0),
            "an offset is taken off"
        );
        assert_eq!(read("%Y-%m-%d %H:%M:%S%z", "1970-01-01 00:00:00Z"), Ok(0));
        assert_eq!(read("%Y%m%d", "19700102"), Ok(NANOS_PER_DAY));
        assert_eq!(read("%d/%m/%Y %%", "02/01/1970 %"), Ok(NANOS_PER_DAY));
        assert_eq!(
            read("%Y-%m-%d %H:%M:%S.%f", "1970-01-01 00:00:00.5"),
            Ok(500_000_000)
        );
        assert_eq!(write("%Y-%m-%d", -NANOS_PER_DAY).unwrap(), "1969-12-31");
        assert_eq!(
            write("%H:%M:%S.%3f", 1_500_000_000).unwrap(),
            "00:00:01.500"
        );
    }

    #[test]
    fn nothing_is_lenient() {
        for (format, text) in [
            ("%Y-%m-%d", "2024-2-01"),
            ("%Y-%m-%d", "2024-02-30"),
            ("%Y-%m-%d", "2024-13-01"),
            ("%Y-%m-%d", "2024-01-01 "),
            ("%Y-%m-%d %H:%M:%S", "2024-01-01 23:59:60"),
            ("%Y-%m-%d %H", "2024-01-01 24"),
            ("%Y-%m-%d %H:%M:%S.%3f", "2024-01-01 00:00:00.12"),
            ("%Y-%m-%d %H:%M:%S.%f", "2024-01-01 00:00:00.1234567891"),
            ("%Y-%m-%d%z", "2024-01-01+01"),
        ] {
            assert!(read(format, text).is_err(), "{format} {text}");
        }
        assert_eq!(
            write("%H:%M:%S.%3f", 1_500_100_000),
            Err("the time has digits of a second past the 3 of its format".into())
        );
        assert!(write("%Y-%m-%d", 10_000 * 366 * NANOS_PER_DAY).is_err());
        assert_eq!(
            write("%Y-%m-%d %H:%M", 61 * NANOS_PER_SECOND),
            Err("the time has seconds, which its format does not write".into())
        );
        assert_eq!(
            write("%Y-%m-%d", NANOS_PER_SECOND),
            Err("the time has a time of day, which its format does not write".into())
        );
    }

    #[test]
    fn a_format_is_refused_for_what_it_cannot_do() {
        assert_eq!(
            TimeFormat::parse("%Y-%b").unwrap_err(),
            format!("%b is not a directive of the format ({DIRECTIVES})")
        );
        assert!(TimeFormat::parse("%Y-%Y").is_err());
        assert!(TimeFormat::parse("%z %:z").is_err());
        assert!(TimeFormat::parse("date").is_err());
        assert!(TimeFormat::parse("%Y%").is_err());
        let no_day = TimeFormat::parse("%Y-%m").unwrap();
        assert!(no_day.check_parts().is_err());
        let no_hour = TimeFormat::parse("%Y-%m-%d %M").unwrap();
        assert!(no_hour.check_parts().is_err());
        assert!(TimeFormat::parse("%Y-%m-%d").unwrap().check_parts().is_ok());
    }
}
