//! What the writer decides before any I/O about letting work in: whether a record may be taken
//! at all (its offset against the writer's position), what a record's row costs in the memory
//! budget once its real size is known, and whether a request may go out now or must wait for
//! answers (the session's in-flight window). Pure (no tokio, no I/O), so each rule is unit-tested
//! on its own; the shell and the append session apply the answers.

use kbq_core::offsets::{KafkaOffset, NextOffset};

/// A record the writer cannot take: it lies below the position the writer has reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "record at offset {} is below the writer's position {position}: the consumer is not where the checkpoint says",
    .offset.0
)]
pub struct BelowPosition {
    pub offset: KafkaOffset,
    pub position: NextOffset,
}

/// Admits the record at `offset` into a writer at `position` and returns the position after
/// it. A record below the position would append rows the checkpoint already covers (the
/// consumer did not seek where this incarnation starts, or went back): it is refused and the
/// writer fails closed rather than write them twice. Records above the position are admitted:
/// offsets without records (transaction markers, compaction) lie between records.
pub fn admit(position: NextOffset, offset: KafkaOffset) -> Result<NextOffset, BelowPosition> {
    if position.covers(offset) {
        return Err(BelowPosition { offset, position });
    }
    Ok(NextOffset::after(offset))
}

/// The change of a record's memory charge once its row is built. The consumer charged it twice
/// its row estimate (the row, and the gRPC layer's encoded copy of the request; both live until
/// the request is acknowledged, the copy perhaps less, which the writer cannot see); the real
/// encoded size now replaces the estimate in both.
pub fn row_charge_delta(encoded: usize, estimate: usize) -> i64 {
    2 * (encoded as i64 - estimate as i64)
}

/// The in-flight window of one append session: how many requests, and how many encoded bytes,
/// may be sent and not yet answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InflightWindow {
    pub max_requests: usize,
    pub max_bytes: usize,
}

impl InflightWindow {
    /// Whether a request of `bytes` may be sent now, with `requests` requests of `inflight_bytes`
    /// in flight. One request always goes when nothing is in flight, whatever its size: a row
    /// larger than the window must not stall the partition for good.
    pub fn admits(&self, requests: usize, inflight_bytes: usize, bytes: usize) -> bool {
        requests == 0
            || (requests < self.max_requests
                && inflight_bytes.saturating_add(bytes) <= self.max_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_below_the_position_is_refused_and_gaps_above_it_are_admitted() {
        let at = NextOffset(10);
        assert_eq!(
            admit(at, KafkaOffset(9)),
            Err(BelowPosition {
                offset: KafkaOffset(9),
                position: at
            })
        );
        assert_eq!(
            admit(at, KafkaOffset(10)),
            Ok(NextOffset(11)),
            "the next record"
        );
        assert_eq!(
            admit(at, KafkaOffset(14)),
            Ok(NextOffset(15)),
            "after a gap"
        );
        let e = admit(NextOffset(15), KafkaOffset(3))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("record at offset 3 is below the writer's position 15"),
            "{e}"
        );
    }

    #[test]
    fn a_row_replaces_the_estimate_in_both_copies_it_was_charged_for() {
        assert_eq!(
            row_charge_delta(120, 100),
            40,
            "a row larger than estimated"
        );
        assert_eq!(row_charge_delta(80, 100), -40, "smaller: bytes given back");
        assert_eq!(row_charge_delta(100, 100), 0);
        assert_eq!(row_charge_delta(7, 0), 14, "a record without a value");
    }

    const WINDOW: InflightWindow = InflightWindow {
        max_requests: 2,
        max_bytes: 1_000,
    };

    #[test]
    fn the_window_admits_requests_up_to_its_byte_limit_exactly() {
        assert!(WINDOW.admits(1, 400, 600), "1,000 of 1,000 bytes");
        assert!(!WINDOW.admits(1, 400, 601), "one byte over");
    }

    #[test]
    fn the_window_admits_requests_up_to_its_request_limit() {
        assert!(WINDOW.admits(1, 0, 1));
        assert!(!WINDOW.admits(2, 0, 1), "two in flight of two");
    }

    #[test]
    fn an_oversized_request_goes_alone_when_nothing_is_in_flight() {
        assert!(WINDOW.admits(0, 0, 5_000));
        assert!(!WINDOW.admits(1, 1, 5_000), "but never beside another");
        let none = InflightWindow {
            max_requests: 0,
            max_bytes: 0,
        };
        assert!(none.admits(0, 0, 1), "even a zero window lets one through");
    }
}
