//! Typed offsets. Two counting spaces meet in a checkpoint and mixing them up is the classic way to
//! lose or duplicate a record, so each has its own type:
//!
//! * Kafka record offsets: [`KafkaOffset`] names one record (inclusive), [`NextOffset`] is the
//!   exclusive "next to consume" position that Kafka stores as the committed offset `K` and that
//!   the checkpoint uses for `f` (visible_through: every record below it is visible).
//! * Stream row offsets: [`RowOffset`] names one row of a write stream (inclusive, the `r` of the
//!   checkpoint and the argument of FlushRows), [`RowCount`] is the exclusive "next row to append".
//!
//! A [`Committable`] can only be sealed from an [`Acknowledged`] prefix: the acknowledgement is the
//! proof that every row it covers was accepted by BigQuery at its explicit offset.

use std::fmt;

/// One Kafka record offset, inclusive: the record itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct KafkaOffset(pub i64);

/// A Kafka position, exclusive: the next record to consume. This is what Kafka stores as a
/// committed offset, and what the checkpoint's `K` and `f` are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NextOffset(pub i64);

impl NextOffset {
    /// The position just after `record`.
    pub fn after(record: KafkaOffset) -> Self {
        NextOffset(record.0 + 1)
    }

    /// Whether `record` lies below this position.
    pub fn covers(self, record: KafkaOffset) -> bool {
        record.0 < self.0
    }

    /// The number of offsets in `[self, end)`; zero when `end` is not above `self`.
    pub fn distance_to(self, end: NextOffset) -> u64 {
        u64::try_from(end.0 - self.0).unwrap_or(0)
    }
}

impl fmt::Display for NextOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One row of a write stream, inclusive: FlushRows(s, r) makes rows `0..=r` visible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RowOffset(pub i64);

/// The number of rows appended to a stream, i.e. the offset of the next row (exclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RowCount(pub i64);

impl RowCount {
    /// The last appended row, or `None` for a stream without rows (nothing to flush).
    pub fn last_row(self) -> Option<RowOffset> {
        (self.0 > 0).then(|| RowOffset(self.0 - 1))
    }
}

/// A write stream id: the part of the stream name after `/streams/`. Restricted to the characters
/// BigQuery uses so that it can be embedded in the commit metadata without escaping.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(String);

/// Longest stream id accepted; bounds the worst-case metadata length.
pub const MAX_STREAM_ID_LEN: usize = 128;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid stream id {id:?}: {why}")]
pub struct InvalidStreamId {
    pub id: String,
    pub why: &'static str,
}

impl StreamId {
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidStreamId> {
        let id = id.into();
        let why = if id.is_empty() {
            Some("empty")
        } else if id.len() > MAX_STREAM_ID_LEN {
            Some("too long")
        } else if !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            Some("characters outside [A-Za-z0-9_-]")
        } else {
            None
        };
        match why {
            Some(why) => Err(InvalidStreamId { id, why }),
            None => Ok(StreamId(id)),
        }
    }

    /// Takes the id from a full stream name `projects/…/streams/<id>`.
    pub fn from_stream_name(name: &str) -> Result<Self, InvalidStreamId> {
        match name.rsplit_once("/streams/") {
            Some((_, id)) => Self::new(id),
            None => Err(InvalidStreamId {
                id: name.to_owned(),
                why: "not a stream name",
            }),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Identifies one writer incarnation of a partition (one per assignment or in-process restart).
/// Acknowledgements carry it so that a late ack of a previous incarnation is never mistaken for
/// progress of the current one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Incarnation(pub u64);

/// The acknowledged prefix of one writer incarnation: records `[start, next)` are fully handled
/// (appended and acknowledged, or dead-lettered and acknowledged) and their rows are rows
/// `0..rows` of `stream`. Only the writer's append path and the protocol's incarnation start
/// build one; the protocol moves one over a range it counted lost ([`Self::over_lost_range`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acknowledged {
    incarnation: Incarnation,
    stream: Option<StreamId>,
    rows: RowCount,
    next: NextOffset,
    bytes: u64,
}

impl Acknowledged {
    /// The state of an incarnation before its first row: nothing appended, position `from`.
    pub fn incarnation_start(incarnation: Incarnation, from: NextOffset) -> Self {
        Acknowledged {
            incarnation,
            stream: None,
            rows: RowCount(0),
            next: from,
            bytes: 0,
        }
    }

    /// Built by the writer from an AppendRows response (or a DLQ delivery report) that
    /// acknowledged every row below `rows` on `stream` and every record below `next`.
    /// `bytes` is the cumulative appended size of the incarnation (for the uncommitted-tail cap).
    pub fn from_append_response(
        incarnation: Incarnation,
        stream: StreamId,
        rows: RowCount,
        next: NextOffset,
        bytes: u64,
    ) -> Self {
        Acknowledged {
            incarnation,
            stream: Some(stream),
            rows,
            next,
            bytes,
        }
    }

    /// The prefix over `[from, to)`, a range retention deleted that the protocol counted lost:
    /// once every record below `from` is handled, so is every record below `to` (none of them
    /// will ever be delivered). Unchanged while the prefix is below `from` (records before the
    /// range are still in flight) or already at `to` or past it.
    pub fn over_lost_range(&self, from: NextOffset, to: NextOffset) -> Acknowledged {
        let mut ack = self.clone();
        if from <= self.next && self.next < to {
            ack.next = to;
        }
        ack
    }

    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }
    pub fn stream(&self) -> Option<&StreamId> {
        self.stream.as_ref()
    }
    pub fn rows(&self) -> RowCount {
        self.rows
    }
    pub fn next(&self) -> NextOffset {
        self.next
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// The content of one partition's durable checkpoint: committed offset `K` plus the metadata
/// fields `s`, `r`, `f` (the table fingerprint is checked, not carried).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// `K`: the next Kafka offset to consume.
    pub next: NextOffset,
    /// `s`: the stream holding the rows of the records below `K` that are not yet known visible.
    pub stream: Option<StreamId>,
    /// `r`: the last row of `s` to flush (inclusive); `None` when `s` has no rows.
    pub flush_to: Option<RowOffset>,
    /// `f`: every record below it is visible.
    pub visible_through: NextOffset,
}

impl Checkpoint {
    /// Whether something is in doubt: rows below `K` that may not be visible yet.
    pub fn needs_flush(&self) -> bool {
        self.visible_through < self.next && self.flush_to.is_some() && self.stream.is_some()
    }

    /// A checkpoint that leaves nothing to flush: everything below `next` is visible.
    pub fn at_rest(next: NextOffset) -> Self {
        Checkpoint {
            next,
            stream: None,
            flush_to: None,
            visible_through: next,
        }
    }
}

/// A checkpoint sealed from an acknowledged prefix, ready to be committed to Kafka.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committable {
    checkpoint: Checkpoint,
    incarnation: Incarnation,
    bytes: u64,
}

impl Committable {
    /// Seals the acknowledged prefix. `visible_through` is what this process knows is visible.
    /// A prefix without rows has nothing to flush, so everything below its `K` is visible (its
    /// records were dead-lettered, or it is an incarnation start whose `f` equals its start).
    pub fn seal(ack: &Acknowledged, visible_through: NextOffset) -> Self {
        let flush_to = ack.rows.last_row();
        let checkpoint = match flush_to {
            Some(r) => Checkpoint {
                next: ack.next,
                stream: ack.stream.clone(),
                flush_to: Some(r),
                visible_through: visible_through.min(ack.next),
            },
            None => Checkpoint::at_rest(ack.next),
        };
        Committable {
            checkpoint,
            incarnation: ack.incarnation,
            bytes: ack.bytes,
        }
    }

    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }
    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_offset_is_exclusive() {
        let k = NextOffset::after(KafkaOffset(9));
        assert_eq!(k, NextOffset(10));
        assert!(k.covers(KafkaOffset(9)));
        assert!(!k.covers(KafkaOffset(10)));
        assert_eq!(NextOffset(4).distance_to(NextOffset(10)), 6);
        assert_eq!(NextOffset(10).distance_to(NextOffset(4)), 0);
    }

    #[test]
    fn a_stream_without_rows_has_nothing_to_flush() {
        assert_eq!(RowCount(0).last_row(), None);
        assert_eq!(RowCount(3).last_row(), Some(RowOffset(2)));
    }

    #[test]
    fn stream_ids_are_restricted_to_metadata_safe_characters() {
        assert!(StreamId::new("Cg4xMjM-_abc").is_ok());
        assert!(StreamId::new("").is_err());
        assert!(StreamId::new("a;b").is_err());
        assert!(StreamId::new("a".repeat(MAX_STREAM_ID_LEN + 1)).is_err());
        let id = StreamId::from_stream_name("projects/p/datasets/d/tables/t/streams/abc").unwrap();
        assert_eq!(id.as_str(), "abc");
    }

    #[test]
    fn a_committable_without_rows_rests_at_its_offset() {
        let ack = Acknowledged::incarnation_start(Incarnation(1), NextOffset(7));
        let c = Committable::seal(&ack, NextOffset(3));
        assert_eq!(c.checkpoint(), &Checkpoint::at_rest(NextOffset(7)));
        assert!(!c.checkpoint().needs_flush());
    }

    #[test]
    fn a_prefix_passes_a_lost_range_only_once_it_reached_the_range() {
        let s = StreamId::new("s1").unwrap();
        let ack =
            Acknowledged::from_append_response(Incarnation(1), s, RowCount(5), NextOffset(12), 9);
        let over = ack.over_lost_range(NextOffset(12), NextOffset(20));
        assert_eq!(over.next(), NextOffset(20));
        assert_eq!(
            (over.rows(), over.bytes()),
            (RowCount(5), 9),
            "no row is added"
        );
        let behind = ack.over_lost_range(NextOffset(14), NextOffset(20));
        assert_eq!(behind, ack, "records 12 and 13 are still in flight");
        let past = ack.over_lost_range(NextOffset(4), NextOffset(10));
        assert_eq!(past, ack, "never moved back");
    }

    #[test]
    fn a_committable_with_rows_keeps_the_known_visible_offset() {
        let s = StreamId::new("s1").unwrap();
        let ack =
            Acknowledged::from_append_response(Incarnation(1), s, RowCount(5), NextOffset(12), 9);
        let c = Committable::seal(&ack, NextOffset(7));
        assert_eq!(c.checkpoint().flush_to, Some(RowOffset(4)));
        assert_eq!(c.checkpoint().visible_through, NextOffset(7));
        assert!(c.checkpoint().needs_flush());
    }
}
