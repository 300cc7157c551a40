//! Partitions whose FlushRows BigQuery keeps denying (PERMISSION_DENIED, UNAUTHENTICATED,
//! FAILED_PRECONDITION: an IAM change, a credential being rotated). Such a flush stays pending and
//! is retried, never a permanent stop (docs/architecture.md#failure-policies), and while it is denied the partition counts in
//! `kbq_partitions_retrying`, the gauge that already turns readiness false for writers waiting out
//! the same errors: committed rows that cannot be made visible are not a healthy sink.

use std::collections::HashSet;

use prometheus_client::metrics::gauge::Gauge;

use kbq_core::protocol::{Event, FlushOutcome, TopicPartition};

/// The partitions whose last flush answer was a denial, mirrored in a gauge.
#[derive(Debug)]
pub struct DeniedFlushes {
    denied: HashSet<TopicPartition>,
    retrying: Gauge,
}

impl DeniedFlushes {
    pub fn new(retrying: Gauge) -> Self {
        DeniedFlushes {
            denied: HashSet::new(),
            retrying,
        }
    }

    /// Looks at an event on its way to the protocol: a flush answer sets or clears its
    /// partition's denial; any other event changes nothing.
    pub fn observe(&mut self, event: &Event) {
        let (tp, outcome) = match event {
            Event::FlushResult { tp, outcome, .. }
            | Event::RecoveryFlushResult { tp, outcome, .. } => (tp, outcome),
            _ => return,
        };
        if matches!(outcome, FlushOutcome::Denied(_)) {
            if self.denied.insert(tp.clone()) {
                self.retrying.inc();
            }
        } else {
            self.forget(tp);
        }
    }

    /// The partition left this process: it no longer waits for anything here.
    pub fn forget(&mut self, tp: &TopicPartition) {
        if self.denied.remove(tp) {
            self.retrying.dec();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbq_core::offsets::{RowOffset, StreamId};

    fn flushed(outcome: FlushOutcome) -> Event {
        Event::FlushResult {
            tp: TopicPartition::new("t", 0),
            stream: StreamId::new("s").unwrap(),
            through: RowOffset(3),
            outcome,
        }
    }

    #[test]
    fn a_denied_flush_counts_until_a_flush_gets_through_or_the_partition_leaves() {
        let gauge = Gauge::default();
        let mut d = DeniedFlushes::new(gauge.clone());
        d.observe(&flushed(FlushOutcome::Denied("permission denied".into())));
        d.observe(&flushed(FlushOutcome::Denied("permission denied".into())));
        assert_eq!(gauge.get(), 1, "one partition, however often denied");
        d.observe(&flushed(FlushOutcome::Transient("unavailable".into())));
        assert_eq!(gauge.get(), 0, "another answer means the denial is over");
        d.observe(&flushed(FlushOutcome::Denied("unauthenticated".into())));
        d.forget(&TopicPartition::new("t", 0));
        assert_eq!(gauge.get(), 0);
        d.forget(&TopicPartition::new("t", 0));
        assert_eq!(gauge.get(), 0, "forgetting twice does not go below zero");
    }
}
