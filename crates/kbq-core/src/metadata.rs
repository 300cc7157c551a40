//! The commit metadata that makes a Kafka committed offset a checkpoint
//! (docs/architecture.md#the-checkpoint).
//!
//! Wire form, compact ASCII, fields in this order, optional ones left out:
//!
//! ```text
//! kbq;v=1;s=<stream id>;t=<16 hex>;r=<row>;f=<offset>     exactly-once checkpoint
//! kbq;v=1;t=<16 hex>;f=<offset>                           exactly-once, no stream in doubt
//! kbq;v=1;m=alo;t=<16 hex>                                 written by at-least-once mode
//! ```
//!
//! Parsing is strict because a misread checkpoint silently abandons an unflushed tail: empty
//! metadata is "no checkpoint" (an operator reset, warn), anything that is not exactly one of the
//! shapes above is an error that carries the raw bytes, and the caller fails the partition closed.
//! Readers accept [`MetadataVersion::CURRENT`] and [`MetadataVersion::PREVIOUS`]; writers write
//! whichever version the rollout allows (the previous one until every replica reads the current).

use crate::offsets::{Checkpoint, MAX_STREAM_ID_LEN, NextOffset, RowOffset, StreamId};
use std::fmt;

const PREFIX: &str = "kbq;";

/// A metadata format version. Version 1 is the first; when version 2 is introduced, `PREVIOUS`
/// becomes 1 and the reader keeps its parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetadataVersion(u32);

impl MetadataVersion {
    pub const CURRENT: MetadataVersion = MetadataVersion(1);
    /// The version the previous release writes. There is no release before version 1, so the
    /// reader's window is just the current version for now.
    pub const PREVIOUS: MetadataVersion = MetadataVersion(1);

    fn readable(v: u32) -> bool {
        v == Self::CURRENT.0 || v == Self::PREVIOUS.0
    }
}

/// A 64-bit fingerprint of the destination table path: a checkpoint written for another table
/// (a reused group id) must not be flushed into this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableFingerprint(pub u64);

impl TableFingerprint {
    /// FNV-1a of the table path `projects/<p>/datasets/<d>/tables/<t>`: stable across releases
    /// and platforms, which `std`'s hasher does not promise.
    pub fn of_table_path(path: &str) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in path.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        TableFingerprint(h)
    }
}

impl fmt::Display for TableFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// What the metadata of a committed offset says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitMetadata {
    /// Empty metadata: an offset written by an operator reset (or another tool that writes none).
    Empty,
    /// An exactly-once checkpoint (the committed offset `K` is not part of the metadata).
    ExactlyOnce {
        table: TableFingerprint,
        stream: Option<StreamId>,
        flush_to: Option<RowOffset>,
        visible_through: NextOffset,
    },
    /// Written by at-least-once mode: nothing to re-flush, the offset is the whole truth.
    AtLeastOnce { table: TableFingerprint },
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum MetadataError {
    #[error("commit metadata has an unknown format: raw={raw:?}")]
    UnknownFormat { raw: String },
    #[error("commit metadata has unsupported version {version}: raw={raw:?}")]
    UnknownVersion { version: String, raw: String },
    #[error("commit metadata is malformed ({why}): raw={raw:?}")]
    Malformed { why: &'static str, raw: String },
}

impl CommitMetadata {
    /// The metadata for checkpoint `c` (its `K` goes into the committed offset itself).
    pub fn for_checkpoint(table: TableFingerprint, c: &Checkpoint) -> Self {
        CommitMetadata::ExactlyOnce {
            table,
            stream: if c.flush_to.is_some() {
                c.stream.clone()
            } else {
                None
            },
            flush_to: c.flush_to,
            visible_through: c.visible_through,
        }
    }

    /// The checkpoint this metadata describes, given the committed offset it was read with.
    pub fn checkpoint(&self, committed: NextOffset) -> Option<Checkpoint> {
        match self {
            CommitMetadata::ExactlyOnce {
                stream,
                flush_to,
                visible_through,
                ..
            } => Some(Checkpoint {
                next: committed,
                stream: stream.clone(),
                flush_to: *flush_to,
                visible_through: *visible_through,
            }),
            _ => None,
        }
    }

    pub fn encode(&self, version: MetadataVersion) -> String {
        // Only version 1 exists; a future version adds its arm here and keeps this one for the
        // rollout window in which `version` is still the previous one.
        debug_assert!(MetadataVersion::readable(version.0));
        match self {
            CommitMetadata::Empty => String::new(),
            CommitMetadata::ExactlyOnce {
                table,
                stream,
                flush_to,
                visible_through,
            } => {
                let mut out = format!("{PREFIX}v={}", version.0);
                if let Some(s) = stream {
                    out.push_str(";s=");
                    out.push_str(s.as_str());
                }
                out.push_str(&format!(";t={table}"));
                if let Some(r) = flush_to {
                    out.push_str(&format!(";r={}", r.0));
                }
                out.push_str(&format!(";f={}", visible_through.0));
                out
            }
            CommitMetadata::AtLeastOnce { table } => {
                format!("{PREFIX}v={};m=alo;t={table}", version.0)
            }
        }
    }

    /// Parses metadata read as bytes (never through a lossy or panicking UTF-8 conversion).
    pub fn parse(raw: &[u8]) -> Result<Self, MetadataError> {
        if raw.is_empty() {
            return Ok(CommitMetadata::Empty);
        }
        let shown = || String::from_utf8_lossy(raw).into_owned();
        let Ok(text) = std::str::from_utf8(raw) else {
            return Err(MetadataError::UnknownFormat { raw: shown() });
        };
        let Some(body) = text.strip_prefix(PREFIX) else {
            return Err(MetadataError::UnknownFormat { raw: shown() });
        };
        let malformed = |why| MetadataError::Malformed { why, raw: shown() };
        let mut fields = body
            .split(';')
            .map(|field| field.split_once('=').ok_or("field without '='"));
        let (key, version) = fields
            .next()
            .ok_or("no version")
            .and_then(|field| field)
            .map_err(malformed)?;
        if key != "v" {
            return Err(malformed("version is not the first field"));
        }
        match parse_u64(version) {
            Some(v) if v <= u64::from(u32::MAX) && MetadataVersion::readable(v as u32) => {}
            _ => {
                return Err(MetadataError::UnknownVersion {
                    version: version.to_owned(),
                    raw: shown(),
                });
            }
        }
        let values = fields_in_order(fields).map_err(malformed)?;
        Self::from_fields(values).map_err(malformed)
    }

    /// The metadata the fields after the version describe (`m, s, t, r, f`), or why they
    /// describe none.
    fn from_fields(
        [mode, stream, table, flush_to, visible]: [Option<&str>; 5],
    ) -> Result<Self, &'static str> {
        let table = table
            .and_then(parse_hex16)
            .map(TableFingerprint)
            .ok_or("missing or invalid table fingerprint")?;
        match mode {
            Some("alo") => {
                if stream.is_some() || flush_to.is_some() || visible.is_some() {
                    return Err("at-least-once metadata with checkpoint fields");
                }
                Ok(CommitMetadata::AtLeastOnce { table })
            }
            Some(_) => Err("unknown mode"),
            None => {
                let stream = stream
                    .map(|s| StreamId::new(s).map_err(|_| "invalid stream id"))
                    .transpose()?;
                let flush_to = flush_to
                    .map(|r| parse_i64(r).map(RowOffset).ok_or("invalid flush offset"))
                    .transpose()?;
                if stream.is_some() != flush_to.is_some() {
                    return Err("stream and flush offset must come together");
                }
                let visible_through = visible
                    .and_then(parse_i64)
                    .map(NextOffset)
                    .ok_or("missing or invalid visible offset")?;
                Ok(CommitMetadata::ExactlyOnce {
                    table,
                    stream,
                    flush_to,
                    visible_through,
                })
            }
        }
    }
}

/// The fields after the version, by their place in the fixed order `m, s, t, r, f`; each may
/// come at most once, and none out of order.
fn fields_in_order<'a>(
    fields: impl Iterator<Item = Result<(&'a str, &'a str), &'static str>>,
) -> Result<[Option<&'a str>; 5], &'static str> {
    const ORDER: [&str; 5] = ["m", "s", "t", "r", "f"];
    let mut values: [Option<&str>; 5] = [None; 5];
    let mut last = None;
    for field in fields {
        let (key, value) = field?;
        let Some(at) = ORDER.iter().position(|k| *k == key) else {
            return Err("unknown field");
        };
        if last.is_some_and(|l| at <= l) {
            return Err("fields out of order or repeated");
        }
        last = Some(at);
        values[at] = Some(value);
    }
    Ok(values)
}

/// Canonical decimal only (no sign, no leading zeros), so that every value has one spelling.
fn parse_u64(s: &str) -> Option<u64> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

fn parse_i64(s: &str) -> Option<i64> {
    parse_u64(s).and_then(|v| i64::try_from(v).ok())
}

fn parse_hex16(s: &str) -> Option<u64> {
    (s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| u64::from_str_radix(s, 16).ok())
        .flatten()
}

/// The longest metadata any checkpoint can produce, for config validation against the broker's
/// `offset.metadata.max.bytes`. Brokers measure Java `String.length()`; the metadata is ASCII, so
/// bytes and UTF-16 units agree.
pub fn worst_case_len() -> usize {
    let max_i64 = i64::MAX.to_string().len();
    let version = u32::MAX.to_string().len();
    PREFIX.len()
        + "v=".len()
        + version
        + ";s=".len()
        + MAX_STREAM_ID_LEN
        + ";t=".len()
        + 16
        + ";r=".len()
        + max_i64
        + ";f=".len()
        + max_i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TableFingerprint {
        TableFingerprint::of_table_path("projects/p/datasets/d/tables/t")
    }

    fn eo(stream: Option<&str>, r: Option<i64>, f: i64) -> CommitMetadata {
        CommitMetadata::ExactlyOnce {
            table: table(),
            stream: stream.map(|s| StreamId::new(s).unwrap()),
            flush_to: r.map(RowOffset),
            visible_through: NextOffset(f),
        }
    }

    #[test]
    fn every_shape_round_trips() {
        for m in [
            eo(Some("Cg-abc_1"), Some(41), 17),
            eo(None, None, 99),
            CommitMetadata::AtLeastOnce { table: table() },
            CommitMetadata::Empty,
        ] {
            let text = m.encode(MetadataVersion::CURRENT);
            assert!(text.is_ascii());
            assert_eq!(CommitMetadata::parse(text.as_bytes()), Ok(m));
        }
    }

    #[test]
    fn the_wire_form_is_compact_and_ordered() {
        let text = eo(Some("abc"), Some(4), 10).encode(MetadataVersion::CURRENT);
        assert_eq!(text, format!("kbq;v=1;s=abc;t={};r=4;f=10", table()));
    }

    #[test]
    fn empty_metadata_is_no_checkpoint() {
        assert_eq!(CommitMetadata::parse(b""), Ok(CommitMetadata::Empty));
    }

    #[test]
    fn foreign_metadata_fails_closed_with_the_raw_value() {
        for raw in [&b"{\"flink\":1}"[..], b"connect", b"\xff\xfe", b"kbq"] {
            match CommitMetadata::parse(raw) {
                Err(MetadataError::UnknownFormat { raw: shown }) => {
                    assert_eq!(shown, String::from_utf8_lossy(raw))
                }
                other => panic!("{raw:?} parsed as {other:?}"),
            }
        }
    }

    #[test]
    fn an_unknown_version_fails_closed_and_is_never_read_as_no_checkpoint() {
        let raw = format!("kbq;v=2;s=abc;t={};r=4;f=10", table());
        assert_eq!(
            CommitMetadata::parse(raw.as_bytes()),
            Err(MetadataError::UnknownVersion {
                version: "2".into(),
                raw: raw.clone()
            })
        );
        assert!(matches!(
            CommitMetadata::parse(b"kbq;v=01;f=1"),
            Err(MetadataError::UnknownVersion { .. })
        ));
    }

    #[test]
    fn malformed_metadata_is_rejected() {
        let t = table();
        for raw in [
            format!("kbq;v=1;t={t}"),                        // no f
            format!("kbq;v=1;s=abc;t={t};f=3"),              // s without r
            format!("kbq;v=1;t={t};r=3;f=3"),                // r without s
            format!("kbq;v=1;t={t};f=3;r=2"),                // order
            format!("kbq;v=1;t={t};f=3;f=3"),                // repeated
            format!("kbq;v=1;t={t};f=03"),                   // non-canonical
            format!("kbq;v=1;t={t};f=-3"),                   // negative
            format!("kbq;v=1;t={t};f=3;x=1"),                // unknown field
            format!("kbq;v=1;s=a b;t={t};r=1;f=3"),          // bad stream id
            "kbq;v=1;t=ABCDEF0123456789;f=1".into(),         // upper-case hex
            format!("kbq;v=1;m=alo;t={t};f=1"),              // alo with f
            format!("kbq;v=1;m=xyz;t={t}"),                  // unknown mode
            format!("kbq;t={t};v=1;f=1"),                    // version not first
            format!("kbq;v=1;t={t};f=99999999999999999999"), // overflow
        ] {
            assert!(
                matches!(
                    CommitMetadata::parse(raw.as_bytes()),
                    Err(MetadataError::Malformed { .. })
                ),
                "{raw} was accepted"
            );
        }
    }

    #[test]
    fn the_worst_case_fits_the_default_broker_limit() {
        let worst = CommitMetadata::ExactlyOnce {
            table: TableFingerprint(u64::MAX),
            stream: Some(StreamId::new("x".repeat(MAX_STREAM_ID_LEN)).unwrap()),
            flush_to: Some(RowOffset(i64::MAX)),
            visible_through: NextOffset(i64::MAX),
        };
        assert!(worst.encode(MetadataVersion::CURRENT).len() <= worst_case_len());
    }
}
