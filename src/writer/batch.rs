//! What goes into the next AppendRows request: the rows collected so far, the Kafka offsets the
//! request covers, and when it is sent. Pure (no tokio, no I/O): the writer's shell transcodes
//! into [`OpenBatch::buffer_mut`], asks where a row goes and whether to send, and sends what
//! [`OpenBatch::seal`] hands back.
//!
//! Why a request covers a range of Kafka offsets and not just its rows' records: a record
//! handled without a row (dead-lettered, skipped, a CDC change the mode ignores) while the batch
//! is open is acknowledged together with that batch (docs/architecture.md, invariant 6), and
//! offsets without records (transaction markers, compacted records) lie between its rows. The
//! request's range `[start, end)` starts where the previous request ended, so acknowledging
//! requests in order moves the acknowledged prefix without a gap.

use std::ops::Range;
use std::time::{Duration, Instant};

use kbq_core::offsets::{KafkaOffset, NextOffset};

/// Bytes of an AppendRows request besides its rows and writer schema: the stream name's
/// framing, the offset, the field tags. A generous bound, not an exact count.
const REQUEST_FIELDS: usize = 128;

/// The smallest buffer reserved for a batch.
const MIN_RESERVE: usize = 16 << 10;

/// Room a reservation may take above the request limit: a row transcoded into a full buffer
/// before the writer learns it does not fit.
const RESERVE_SLACK: usize = 64 << 10;

/// How large one request may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Bytes of the encoded request.
    pub max_bytes: usize,
    /// Rows of the request.
    pub max_rows: usize,
    /// Bytes the request carries besides its rows: the stream name, the offset, and the writer
    /// schema (on a connection's first request).
    pub overhead: usize,
}

impl RequestLimits {
    /// `max_request_bytes` as configured, lowered to `budget_cap` (the memory budget's request
    /// cap, which shrinks as partitions are added); `table` is the table's full name and
    /// `schema_len` the encoded size of the writer schema a request may carry.
    pub fn new(
        max_request_bytes: usize,
        max_rows: usize,
        budget_cap: Option<usize>,
        table: &str,
        schema_len: usize,
    ) -> Self {
        RequestLimits {
            max_bytes: budget_cap.unwrap_or(usize::MAX).min(max_request_bytes),
            max_rows,
            overhead: schema_len + table.len() + REQUEST_FIELDS,
        }
    }

    /// Upper bound of the encoded request whose rows take `rows_encoded` bytes.
    pub fn request_bound(&self, rows_encoded: usize) -> usize {
        rows_encoded + self.overhead
    }

    /// The buffer to reserve for a new batch when the last one took `last_len` bytes: about
    /// that size (so the buffer is not grown by doubling, each growth a copy), at least
    /// [`MIN_RESERVE`], at most a full request and a row.
    pub fn reserve_len(&self, last_len: usize) -> usize {
        let hint = last_len + last_len / 8;
        hint.clamp(MIN_RESERVE, self.max_bytes.saturating_add(RESERVE_SLACK))
    }

    /// The rows to reserve for a new batch when the last one took `last_rows`: about as many
    /// (so the rows' ranges and records are not grown by doubling, each growth a copy of every
    /// record so far), at most a full request's.
    pub fn reserve_rows(&self, last_rows: usize) -> usize {
        (last_rows + last_rows / 8).min(self.max_rows)
    }
}

/// The encoded size of a row of `len` bytes inside `ProtoRows`: its field tag, its length as a
/// varint, its bytes.
pub fn encoded_row_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Where a new row goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Into the open batch.
    Append,
    /// The row would take the open batch past the request limit: the open batch is sent first
    /// and the row starts the next one.
    SealFirst,
}

/// Rows being collected for the next request, each with the record it came from (`R`).
#[derive(Debug)]
pub struct OpenBatch<R> {
    buffer: Vec<u8>,
    ranges: Vec<Range<usize>>,
    records: Vec<R>,
    /// Exact encoded size of the rows inside ProtoRows.
    rows_encoded: usize,
    opened_at: Option<Instant>,
    /// The Kafka offsets the batch covers, `[start, end)`, once it has a row.
    kafka: Option<(NextOffset, NextOffset)>,
}

impl<R> Default for OpenBatch<R> {
    fn default() -> Self {
        OpenBatch {
            buffer: Vec::new(),
            ranges: Vec::new(),
            records: Vec::new(),
            rows_encoded: 0,
            opened_at: None,
            kafka: None,
        }
    }
}

/// A batch taken out to be sent: its rows are `buffer[range]`, in order, with their records.
#[derive(Debug)]
pub struct SealedBatch<R> {
    pub buffer: Vec<u8>,
    pub ranges: Vec<Range<usize>>,
    pub records: Vec<R>,
    pub rows_encoded: usize,
    /// The Kafka offsets the request covers: `start` is where the batch's first row was taken
    /// (its record or an earlier record handled without a row), every record below `end` is
    /// handled once the request is acknowledged.
    pub start: NextOffset,
    pub end: NextOffset,
}

impl<R> OpenBatch<R> {
    /// Whether the batch has no row (then there is nothing to send).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn rows_encoded(&self) -> usize {
        self.rows_encoded
    }

    /// Whether no buffer is reserved yet (the first row of a writer, or after a seal).
    pub fn needs_reserve(&self) -> bool {
        self.buffer.capacity() == 0
    }

    /// Room for `bytes` of rows and `rows` rows.
    pub fn reserve(&mut self, bytes: usize, rows: usize) {
        self.buffer.reserve(bytes);
        self.ranges.reserve(rows);
        self.records.reserve(rows);
    }

    /// The buffer a row is transcoded into, at its end; the row is then [`push`](Self::push)ed
    /// with the range it took, or taken back with [`detach_row`](Self::detach_row).
    pub fn buffer_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buffer
    }

    /// Where a row of `encoded` bytes (see [`encoded_row_len`]) goes under `limits`. A row never
    /// waits for an empty batch: one that is alone over the limit is sent alone (BigQuery
    /// answers it, and a row it refuses is a bad record).
    pub fn placement(&self, encoded: usize, limits: &RequestLimits) -> Placement {
        if !self.is_empty() && limits.request_bound(self.rows_encoded + encoded) > limits.max_bytes
        {
            Placement::SealFirst
        } else {
            Placement::Append
        }
    }

    /// Takes back the bytes of the row at the end of the buffer (`range`, not pushed yet), to be
    /// put into the next batch after this one is sealed.
    pub fn detach_row(&mut self, range: Range<usize>) -> Vec<u8> {
        debug_assert_eq!(range.end, self.buffer.len(), "the row is the buffer's tail");
        let row = self.buffer[range.clone()].to_vec();
        self.buffer.truncate(range.start);
        row
    }

    /// Drops the row at the end of the buffer (`range`, not pushed): a row that cannot be sent.
    pub fn discard_row(&mut self, range: Range<usize>) {
        debug_assert_eq!(range.end, self.buffer.len(), "the row is the buffer's tail");
        self.buffer.truncate(range.start);
    }

    /// Appends a row's bytes to the buffer and returns its range (a row that was detached, or
    /// a row built outside the transcoder).
    pub fn append_bytes(&mut self, row: &[u8]) -> Range<usize> {
        let start = self.buffer.len();
        self.buffer.extend_from_slice(row);
        start..self.buffer.len()
    }

    /// Adds the row `range` of `encoded` bytes, from the record at `offset`. `position` is the
    /// writer's position before this record (where the batch starts if this is its first
    /// row); `now` starts the linger of a new batch, and is read only then: a clock read per
    /// row was a per-record cost of its own (BENCHMARKS.md, "Instructions, not seconds").
    pub fn push(
        &mut self,
        range: Range<usize>,
        encoded: usize,
        record: R,
        offset: KafkaOffset,
        position: NextOffset,
        now: impl FnOnce() -> Instant,
    ) {
        debug_assert!(!position.covers(offset), "a record below the position");
        let end = NextOffset::after(offset);
        match &mut self.kafka {
            Some((_, e)) => {
                debug_assert!(!e.covers(offset), "records in offset order");
                *e = end;
            }
            None => {
                self.opened_at = Some(now());
                self.kafka = Some((position, end));
            }
        }
        self.ranges.push(range);
        self.records.push(record);
        self.rows_encoded += encoded;
    }

    /// A record handled without a row, below `next`: if the batch is open, its acknowledgement
    /// covers the record (returns `true`); else the caller accounts for it.
    pub fn cover(&mut self, next: NextOffset) -> bool {
        match &mut self.kafka {
            Some((_, end)) => {
                *end = (*end).max(next);
                true
            }
            None => false,
        }
    }

    /// Whether the batch holds as many rows as a request may: send it now.
    pub fn is_full(&self, limits: &RequestLimits) -> bool {
        self.records.len() >= limits.max_rows
    }

    /// When the batch must be sent even if not full: `linger` after its first row.
    pub fn deadline(&self, linger: Duration) -> Option<Instant> {
        self.opened_at.map(|t| t + linger)
    }

    /// Whether to send the batch after a burst of records although it is neither full nor due:
    /// no more record is waiting and none will come until something is acknowledged (the
    /// memory budget, or the partition's share of it, is used up), so lingering would stall.
    pub fn starved(&self, more_waiting: bool, budget_starved: bool) -> bool {
        !self.is_empty() && !more_waiting && budget_starved
    }

    /// Takes the batch out to be sent; `None` when it has no row. The batch is empty after.
    pub fn seal(&mut self) -> Option<SealedBatch<R>> {
        let (start, end) = self.kafka?;
        let open = std::mem::take(self);
        Some(SealedBatch {
            buffer: open.buffer,
            ranges: open.ranges,
            records: open.records,
            rows_encoded: open.rows_encoded,
            start,
            end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: RequestLimits = RequestLimits {
        max_bytes: 1_000,
        max_rows: 3,
        overhead: 100,
    };

    /// Transcodes a row of `len` bytes into the batch the way the writer does, then pushes it
    /// where [`OpenBatch::placement`] says, sealing first when asked. Returns what was sealed.
    fn add(
        batch: &mut OpenBatch<i64>,
        offset: i64,
        position: NextOffset,
        len: usize,
    ) -> Option<SealedBatch<i64>> {
        let range = batch.append_bytes(&vec![offset as u8; len]);
        let encoded = encoded_row_len(len);
        let now = Instant::now();
        let offset_k = KafkaOffset(offset);
        match batch.placement(encoded, &LIMITS) {
            Placement::Append => {
                batch.push(range, encoded, offset, offset_k, position, || now);
                None
            }
            Placement::SealFirst => {
                let row = batch.detach_row(range);
                let sealed = batch.seal();
                let range = batch.append_bytes(&row);
                batch.push(range, encoded, offset, offset_k, position, || now);
                sealed
            }
        }
    }

    #[test]
    fn a_row_counts_its_tag_and_varint_length() {
        assert_eq!(encoded_row_len(0), 2);
        assert_eq!(encoded_row_len(127), 1 + 1 + 127);
        assert_eq!(encoded_row_len(128), 1 + 2 + 128);
        assert_eq!(encoded_row_len(16_383), 1 + 2 + 16_383);
        assert_eq!(encoded_row_len(16_384), 1 + 3 + 16_384);
    }

    #[test]
    fn the_request_limit_is_the_lower_of_the_config_and_the_memory_budget() {
        let l = RequestLimits::new(10 << 20, 500, None, "projects/p/tables/t", 40);
        assert_eq!(l.max_bytes, 10 << 20);
        assert_eq!(
            l.overhead,
            40 + "projects/p/tables/t".len() + REQUEST_FIELDS
        );
        let l = RequestLimits::new(10 << 20, 500, Some(256 << 10), "t", 0);
        assert_eq!(l.max_bytes, 256 << 10);
        let l = RequestLimits::new(64 << 10, 500, Some(256 << 10), "t", 0);
        assert_eq!(l.max_bytes, 64 << 10);
    }

    #[test]
    fn an_empty_batch_seals_nothing_and_has_no_deadline() {
        let mut b = OpenBatch::<i64>::default();
        assert!(b.is_empty());
        assert!(b.seal().is_none());
        assert_eq!(b.deadline(Duration::from_millis(50)), None);
        assert!(!b.is_full(&LIMITS));
        assert!(!b.starved(false, true), "nothing to send");
        assert!(!b.cover(NextOffset(9)), "nothing open to cover a record");
    }

    #[test]
    fn a_row_that_reaches_the_byte_limit_exactly_still_fits() {
        let mut b = OpenBatch::default();
        // 100 overhead + 450 + 450 = 1,000 bytes: exactly the limit.
        let row = 450 - encoded_row_len(0) - 1; // 447 bytes: 1 tag + 2 varint + 447
        assert_eq!(encoded_row_len(row), 450);
        assert!(add(&mut b, 0, NextOffset(0), row).is_none());
        assert_eq!(b.placement(450, &LIMITS), Placement::Append);
        assert!(add(&mut b, 1, NextOffset(1), row).is_none());
        assert_eq!(b.len(), 2);
        assert_eq!(LIMITS.request_bound(b.rows_encoded()), LIMITS.max_bytes);
        // One byte more would not fit.
        assert_eq!(b.placement(1, &LIMITS), Placement::SealFirst);
    }

    #[test]
    fn a_row_past_the_byte_limit_sends_the_open_batch_first_and_starts_the_next() {
        let mut b = OpenBatch::default();
        assert!(add(&mut b, 10, NextOffset(10), 500).is_none());
        let sealed = add(&mut b, 11, NextOffset(11), 500).expect("sealed first");
        assert_eq!(sealed.records, vec![10]);
        assert_eq!((sealed.start, sealed.end), (NextOffset(10), NextOffset(11)));
        assert_eq!(&sealed.buffer[sealed.ranges[0].clone()], &[10u8; 500][..]);
        // The new row moved to the front of the next batch's buffer, intact.
        assert_eq!(b.len(), 1);
        let next = b.seal().unwrap();
        assert_eq!(next.ranges, vec![0..500]);
        assert!(next.buffer.iter().all(|&x| x == 11));
        assert_eq!((next.start, next.end), (NextOffset(11), NextOffset(12)));
    }

    #[test]
    fn a_single_oversized_row_is_sent_alone() {
        let mut b = OpenBatch::default();
        assert_eq!(
            b.placement(5_000, &LIMITS),
            Placement::Append,
            "empty batch"
        );
        assert!(add(&mut b, 0, NextOffset(0), 5_000).is_none());
        // The next row, however small, goes to the next request.
        let sealed = add(&mut b, 1, NextOffset(1), 1).expect("the oversized row alone");
        assert_eq!(sealed.records, vec![0]);
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn the_row_limit_is_reached_exactly_at_max_rows() {
        let mut b = OpenBatch::default();
        for offset in 0..2 {
            add(&mut b, offset, NextOffset(offset), 1);
            assert!(!b.is_full(&LIMITS), "{} rows", b.len());
        }
        add(&mut b, 2, NextOffset(2), 1);
        assert!(b.is_full(&LIMITS), "3 rows of 3");
    }

    #[test]
    fn consecutive_requests_cover_contiguous_kafka_ranges() {
        // Records 5, 6, then a transaction marker at 7, record 8, a bad record 9 handled while
        // the batch is open, record 10; the writer's position moves after each.
        let mut b = OpenBatch::default();
        add(&mut b, 5, NextOffset(5), 1);
        add(&mut b, 6, NextOffset(6), 1);
        let first = b.seal().unwrap();
        add(&mut b, 8, NextOffset(7), 1);
        assert!(
            b.cover(NextOffset(10)),
            "the open batch covers the bad record 9"
        );
        add(&mut b, 10, NextOffset(10), 1);
        let second = b.seal().unwrap();
        assert_eq!((first.start, first.end), (NextOffset(5), NextOffset(7)));
        assert_eq!(second.start, first.end, "no gap between requests");
        assert_eq!(second.end, NextOffset(11));
        assert_eq!(second.records, vec![8, 10]);
        assert!(b.is_empty());
    }

    #[test]
    fn a_sealed_batch_leaves_an_empty_batch_that_needs_a_new_buffer() {
        let mut b = OpenBatch::default();
        b.reserve(LIMITS.reserve_len(0), LIMITS.reserve_rows(0));
        assert!(!b.needs_reserve());
        add(&mut b, 0, NextOffset(0), 10);
        let sealed = b.seal().unwrap();
        assert_eq!(sealed.rows_encoded, encoded_row_len(10));
        assert!(b.is_empty() && b.needs_reserve() && b.rows_encoded() == 0);
        assert_eq!(b.deadline(Duration::from_secs(1)), None);
    }

    #[test]
    fn the_linger_deadline_runs_from_the_first_row() {
        let mut b = OpenBatch::<i64>::default();
        let t0 = Instant::now();
        let linger = Duration::from_millis(100);
        b.push(0..0, 2, 0, KafkaOffset(0), NextOffset(0), || t0);
        b.push(0..0, 2, 1, KafkaOffset(1), NextOffset(1), || t0 + linger);
        assert_eq!(b.deadline(linger), Some(t0 + linger));
    }

    #[test]
    fn a_starved_batch_is_sent_only_when_no_record_is_waiting() {
        let mut b = OpenBatch::default();
        add(&mut b, 0, NextOffset(0), 1);
        assert!(b.starved(false, true));
        assert!(
            !b.starved(true, true),
            "records still waiting fill the batch"
        );
        assert!(!b.starved(false, false), "more records will come: linger");
    }

    #[test]
    fn a_reservation_follows_the_last_batch_within_bounds() {
        assert_eq!(LIMITS.reserve_len(0), MIN_RESERVE, "at least the minimum");
        let wide = RequestLimits {
            max_bytes: 1 << 20,
            ..LIMITS
        };
        assert_eq!(
            wide.reserve_len(800 << 10),
            900 << 10,
            "an eighth above the last"
        );
        assert_eq!(
            wide.reserve_len(2 << 20),
            (1 << 20) + RESERVE_SLACK,
            "at most a request and a row"
        );
        let unbounded = RequestLimits {
            max_bytes: usize::MAX,
            ..LIMITS
        };
        assert_eq!(unbounded.reserve_len(1 << 20), (1 << 20) + (1 << 17));
    }

    #[test]
    fn a_reservation_of_rows_follows_the_last_batch_up_to_a_full_request() {
        let wide = RequestLimits {
            max_rows: 500,
            ..LIMITS
        };
        assert_eq!(wide.reserve_rows(0), 0, "a writer's first batch grows");
        assert_eq!(wide.reserve_rows(256), 288, "an eighth above the last");
        assert_eq!(wide.reserve_rows(480), 500, "at most a full request");
        let mut b = OpenBatch::<i64>::default();
        b.reserve(wide.reserve_len(0), wide.reserve_rows(256));
        let (records, ranges) = (b.records.as_ptr(), b.ranges.as_ptr());
        for offset in 0..288 {
            b.push(
                0..0,
                1,
                offset,
                KafkaOffset(offset),
                NextOffset(0),
                Instant::now,
            );
        }
        assert!(
            records == b.records.as_ptr() && ranges == b.ranges.as_ptr(),
            "288 rows pushed without moving the rows' vectors"
        );
    }
}
