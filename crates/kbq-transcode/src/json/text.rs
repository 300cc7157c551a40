//! Date and time text as JSON carries it (RFC 3339 / JSON Schema `date-time`, `date`, `time`),
//! parsed into what the Storage Write API takes (`crates/kbq-transcode/src/convert.rs`). A value BigQuery
//! cannot hold is a reason string; the caller names the column.

use crate::convert::days_from_civil;

const MICROS_PER_DAY: i64 = 86_400_000_000;

fn digits(s: &[u8], at: usize, n: usize) -> Option<i64> {
    let d = s.get(at..at + n)?;
    d.iter().try_fold(0i64, |v, c| {
        c.is_ascii_digit().then(|| v * 10 + (c - b'0') as i64)
    })
}

fn bad(what: &str, text: &str) -> String {
    format!("{text:?} is not a {what}")
}

/// `YYYY-MM-DD` → days since 1970-01-01.
pub fn date(text: &str) -> Result<i64, String> {
    let s = text.as_bytes();
    if s.len() != 10 {
        return Err(bad("date (YYYY-MM-DD)", text));
    }
    date_at(s, text)
}

fn date_at(s: &[u8], text: &str) -> Result<i64, String> {
    let (Some(y), Some(m), Some(d)) = (digits(s, 0, 4), digits(s, 5, 2), digits(s, 8, 2)) else {
        return Err(bad("date (YYYY-MM-DD)", text));
    };
    if s[4] != b'-' || s[7] != b'-' {
        return Err(bad("date (YYYY-MM-DD)", text));
    }
    days_from_civil(y, m, d)
}

/// `HH:MM:SS[.fraction]` → µs of the day; digits below the µs are truncated. Returns the
/// index after the time.
fn time_at(s: &[u8], at: usize, text: &str) -> Result<(i64, usize), String> {
    let what = "time (HH:MM:SS[.ffffff])";
    let (Some(h), Some(m), Some(sec)) =
        (digits(s, at, 2), digits(s, at + 3, 2), digits(s, at + 6, 2))
    else {
        return Err(bad(what, text));
    };
    if s[at + 2] != b':' || s[at + 5] != b':' || h > 23 || m > 59 || sec > 59 {
        return Err(bad(what, text));
    }
    let mut i = at + 8;
    let mut micros = 0i64;
    if s.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while let Some(c) = s.get(i).filter(|c| c.is_ascii_digit()) {
            if i - start < 6 {
                micros = micros * 10 + (c - b'0') as i64;
            }
            i += 1;
        }
        if i == start {
            return Err(bad(what, text));
        }
        for _ in (i - start)..6 {
            micros *= 10;
        }
    }
    Ok((((h * 60 + m) * 60 + sec) * 1_000_000 + micros, i))
}

/// A civil time of day in µs; a trailing `Z` or `+00:00` is accepted (and nothing else), since
/// a TIME column has no zone.
pub fn time(text: &str) -> Result<i64, String> {
    let s = text.as_bytes();
    if s.len() < 8 {
        return Err(bad("time (HH:MM:SS[.ffffff])", text));
    }
    let (micros, i) = time_at(s, 0, text)?;
    match &s[i..] {
        b"" | b"Z" | b"z" | b"+00:00" => Ok(micros),
        _ => Err(format!(
            "{text:?} is not a time without a zone offset (TIME has none)"
        )),
    }
}

/// `YYYY-MM-DD[T ]HH:MM:SS[.fraction]` without a zone → µs since 1970-01-01T00:00:00.
pub fn datetime(text: &str) -> Result<i64, String> {
    let (local, rest) = local_datetime(text)?;
    if !rest.is_empty() {
        return Err(format!(
            "{text:?} is not a datetime without a zone offset (DATETIME has none)"
        ));
    }
    Ok(local)
}

fn local_datetime(text: &str) -> Result<(i64, &[u8]), String> {
    let s = text.as_bytes();
    let what = "date-time (YYYY-MM-DDTHH:MM:SS[.ffffff])";
    if s.len() < 19 || !matches!(s[10], b'T' | b't' | b' ') {
        return Err(bad(what, text));
    }
    let days = date_at(&s[..10], text)?;
    let (micros, i) = time_at(s, 11, text)?;
    Ok((days * MICROS_PER_DAY + micros, &s[i..]))
}

/// RFC 3339 `date-time` with its offset (`Z` or `±HH:MM`) → µs since the epoch.
pub fn timestamp(text: &str) -> Result<i64, String> {
    let (local, rest) = local_datetime(text)?;
    let offset_minutes = match rest {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let z = [*h1, *h2, *m1, *m2];
            let (Some(h), Some(m)) = (digits(&z, 0, 2), digits(&z, 2, 2)) else {
                return Err(bad("date-time offset", text));
            };
            if h > 23 || m > 59 {
                return Err(bad("date-time offset", text));
            }
            let v = h * 60 + m;
            if *sign == b'-' { -v } else { v }
        }
        _ => {
            return Err(format!(
                "{text:?} is not an RFC 3339 date-time with a zone offset (Z or ±HH:MM)"
            ));
        }
    };
    Ok(local - offset_minutes * 60_000_000)
}

/// Non-zero digits below the microsecond in a date-time or time's fraction are an error (the
/// parsers above truncate them; a value Kafka Connect or Debezium names is never truncated).
pub(crate) fn whole_micros(s: &str) -> Result<(), String> {
    let Some(dot) = s.find('.') else {
        return Ok(());
    };
    let fraction = s[dot + 1..].bytes().take_while(u8::is_ascii_digit).skip(6);
    match fraction.clone().all(|d| d == b'0') {
        true => Ok(()),
        false => Err(format!(
            "{s:?} has digits below the microsecond, which bigquery cannot hold"
        )),
    }
}

/// The text before its zone, which must be UTC (`Z` or `+00:00`): Debezium's `IsoDate` and
/// `IsoTimestamp` write UTC always; any other offset would move the value.
pub(crate) fn utc(s: &str) -> Result<&str, String> {
    for zone in ["Z", "z", "+00:00"] {
        if let Some(local) = s.strip_suffix(zone) {
            return Ok(local);
        }
    }
    // Any other offset stays and the date or date-time refuses it.
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_honour_their_offset_and_truncate_below_the_microsecond() {
        assert_eq!(timestamp("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(timestamp("1970-01-01T01:00:00+01:00"), Ok(0));
        assert_eq!(timestamp("1969-12-31T23:59:59.9999999Z"), Ok(-1));
        assert_eq!(
            timestamp("2024-02-29 12:00:00.5-00:30"),
            Ok(1_709_209_800_500_000)
        );
        assert!(timestamp("2024-02-30T00:00:00Z").is_err());
        assert!(timestamp("2024-01-01T00:00:00").is_err());
        assert!(timestamp("2024-01-01T24:00:00Z").is_err());
    }

    #[test]
    fn dates_times_and_datetimes_are_civil() {
        assert_eq!(date("1970-01-02"), Ok(1));
        assert_eq!(date("0001-01-01"), Ok(-719_162));
        assert!(date("2023-02-29").is_err());
        assert!(date("2023-2-28").is_err());
        assert_eq!(time("00:00:01.25"), Ok(1_250_000));
        assert_eq!(time("23:59:59Z"), Ok(86_399_000_000));
        assert!(time("12:00:00+01:00").is_err());
        assert_eq!(datetime("1970-01-01T00:00:00.000001"), Ok(1));
        assert!(datetime("1970-01-01T00:00:00Z").is_err());
    }
}
