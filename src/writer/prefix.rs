//! The acknowledged prefix of one writer incarnation: which Kafka records are handled and which
//! stream rows are appended, as requests are sent and answered. Pure (no tokio, no I/O); the
//! writer's shell tells it what happened and reports what [`Prefix::acknowledged`] says.
//!
//! The rule it keeps (docs/architecture.md, invariant 6): the prefix passes a record only when
//! the record is handled for good, its row acknowledged by BigQuery at its offset or its bad
//! record acknowledged by the dead-letter topic. Requests are answered in order, so each answer
//! moves the prefix to the end of its request's Kafka range; a record handled without a row
//! joins whatever acknowledges next (the open batch, else the last request in flight) and
//! moves the prefix at once only when nothing is ahead of it.

use std::collections::VecDeque;

use kbq_core::offsets::{Acknowledged, Incarnation, NextOffset, RowCount, RowOffset, StreamId};

/// One request in flight, in the session's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InflightRequest {
    /// Every record below this is handled once the request is acknowledged.
    pub kafka_next: NextOffset,
    /// The encoded size of its rows (the in-flight gauge, the uncommitted-tail cap).
    pub bytes: u64,
}

#[derive(Debug)]
pub struct Prefix {
    /// Records below this have been taken into a batch or handled without a row.
    position: NextOffset,
    inflight: VecDeque<InflightRequest>,
    /// Rows `0..rows` of the stream are acknowledged.
    rows: RowCount,
    /// Records below this are handled for good.
    next: NextOffset,
    /// Cumulative acknowledged bytes of the incarnation.
    bytes: u64,
}

impl Prefix {
    /// An incarnation that starts at `from` on a stream without rows.
    pub fn new(from: NextOffset) -> Self {
        Prefix {
            position: from,
            inflight: VecDeque::new(),
            rows: RowCount(0),
            next: from,
            bytes: 0,
        }
    }

    /// Where the writer is: the next record it may take.
    pub fn position(&self) -> NextOffset {
        self.position
    }

    /// The rows acknowledged so far: the offset of the stream's next row.
    pub fn rows(&self) -> RowCount {
        self.rows
    }

    pub fn has_inflight(&self) -> bool {
        !self.inflight.is_empty()
    }

    /// A record taken into the open batch: the position passes it.
    pub fn taken(&mut self, next: NextOffset) {
        self.position = next;
    }

    /// A record handled without a row, below `next` (dead-lettered and acknowledged, skipped,
    /// ignored). `covered_by_batch`: the open batch covers it (see
    /// [`OpenBatch::cover`](super::batch::OpenBatch::cover)). Returns whether the acknowledged
    /// prefix moved, to be reported now.
    pub fn handled_without_row(&mut self, next: NextOffset, covered_by_batch: bool) -> bool {
        self.position = next;
        if covered_by_batch {
            false
        } else if let Some(last) = self.inflight.back_mut() {
            last.kafka_next = next;
            false
        } else {
            self.next = next;
            true
        }
    }

    /// A request sent, covering the records below `kafka_next` (the end of its Kafka range).
    pub fn sent(&mut self, kafka_next: NextOffset, bytes: u64) -> InflightRequest {
        debug_assert!(self.position >= kafka_next, "a request past the position");
        let request = InflightRequest { kafka_next, bytes };
        self.inflight.push_back(request);
        request
    }

    /// The oldest request in flight was appended: `count` rows from `first`. Returns it.
    pub fn appended(&mut self, first: RowOffset, count: usize) -> InflightRequest {
        let request = self.pop();
        self.rows = RowCount(first.0 + count as i64);
        self.next = request.kafka_next;
        self.bytes += request.bytes;
        request
    }

    /// Every row of the oldest request in flight was rejected (each dead-lettered): its records
    /// are handled without rows. Returns it.
    pub fn emptied(&mut self) -> InflightRequest {
        let request = self.pop();
        self.next = request.kafka_next;
        request
    }

    fn pop(&mut self) -> InflightRequest {
        self.inflight
            .pop_front()
            .expect("one request per answer in flight")
    }

    /// The requests still in flight when the writer ends (never acknowledged).
    pub fn abandon(&mut self) -> impl Iterator<Item = InflightRequest> + '_ {
        self.inflight.drain(..)
    }

    /// What the coordinator is told: the prefix on `stream` once it has rows, else the
    /// incarnation's position without a stream.
    pub fn acknowledged(
        &self,
        incarnation: Incarnation,
        stream: Option<&StreamId>,
    ) -> Acknowledged {
        match stream {
            Some(stream) if self.rows.0 > 0 => Acknowledged::from_append_response(
                incarnation,
                stream.clone(),
                self.rows,
                self.next,
                self.bytes,
            ),
            _ => Acknowledged::incarnation_start(incarnation, self.next),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INC: Incarnation = Incarnation(3);

    fn stream() -> StreamId {
        StreamId::new("s1").unwrap()
    }

    #[test]
    fn a_new_incarnation_reports_its_start_without_a_stream() {
        let p = Prefix::new(NextOffset(7));
        assert_eq!(
            p.acknowledged(INC, Some(&stream())),
            Acknowledged::incarnation_start(INC, NextOffset(7)),
            "no row yet: nothing on the stream"
        );
    }

    #[test]
    fn answers_move_the_prefix_request_by_request_with_contiguous_rows() {
        let mut p = Prefix::new(NextOffset(0));
        p.taken(NextOffset(3));
        p.sent(NextOffset(3), 30);
        p.taken(NextOffset(5));
        p.sent(NextOffset(5), 20);
        assert_eq!(p.acknowledged(INC, Some(&stream())).next(), NextOffset(0));
        p.appended(RowOffset(0), 3);
        let ack = p.acknowledged(INC, Some(&stream()));
        assert_eq!(
            (ack.rows(), ack.next(), ack.bytes()),
            (RowCount(3), NextOffset(3), 30)
        );
        p.appended(RowOffset(3), 2);
        let ack = p.acknowledged(INC, Some(&stream()));
        assert_eq!(
            (ack.rows(), ack.next(), ack.bytes()),
            (RowCount(5), NextOffset(5), 50)
        );
        assert_eq!(ack.stream(), Some(&stream()));
        assert!(!p.has_inflight());
        assert_eq!(p.rows(), RowCount(5), "the next row of the stream");
    }

    #[test]
    fn a_bad_record_with_nothing_ahead_moves_the_prefix_at_once() {
        let mut p = Prefix::new(NextOffset(4));
        assert!(p.handled_without_row(NextOffset(5), false));
        assert_eq!(p.position(), NextOffset(5));
        assert_eq!(p.acknowledged(INC, None).next(), NextOffset(5));
    }

    #[test]
    fn a_bad_record_behind_a_request_in_flight_waits_for_its_answer() {
        let mut p = Prefix::new(NextOffset(0));
        p.taken(NextOffset(2));
        p.sent(NextOffset(2), 10);
        assert!(!p.handled_without_row(NextOffset(3), false));
        assert_eq!(p.acknowledged(INC, None).next(), NextOffset(0), "not yet");
        let request = p.appended(RowOffset(0), 2);
        assert_eq!(request.kafka_next, NextOffset(3), "the request carries it");
        assert_eq!(p.acknowledged(INC, Some(&stream())).next(), NextOffset(3));
    }

    #[test]
    fn a_bad_record_inside_the_open_batch_leaves_the_prefix_to_the_batch() {
        let mut p = Prefix::new(NextOffset(0));
        p.taken(NextOffset(1));
        assert!(!p.handled_without_row(NextOffset(2), true));
        assert_eq!(p.position(), NextOffset(2));
        assert_eq!(p.acknowledged(INC, None).next(), NextOffset(0));
        assert!(!p.has_inflight(), "the batch is not sent yet");
    }

    #[test]
    fn a_request_whose_rows_were_all_rejected_moves_the_records_but_not_the_rows() {
        let mut p = Prefix::new(NextOffset(0));
        p.taken(NextOffset(2));
        p.sent(NextOffset(2), 10);
        p.appended(RowOffset(0), 2);
        p.taken(NextOffset(4));
        p.sent(NextOffset(4), 10);
        p.emptied();
        let ack = p.acknowledged(INC, Some(&stream()));
        assert_eq!(
            (ack.rows(), ack.next(), ack.bytes()),
            (RowCount(2), NextOffset(4), 10)
        );
    }

    #[test]
    fn requests_never_answered_are_abandoned_in_order() {
        let mut p = Prefix::new(NextOffset(0));
        p.taken(NextOffset(2));
        p.sent(NextOffset(2), 10);
        p.taken(NextOffset(3));
        p.sent(NextOffset(3), 5);
        let left: Vec<u64> = p.abandon().map(|r| r.bytes).collect();
        assert_eq!(left, vec![10, 5]);
        assert!(!p.has_inflight());
        assert_eq!(p.acknowledged(INC, None).next(), NextOffset(0));
    }
}
