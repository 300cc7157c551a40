//! Per-partition stall detection for readiness (docs/metrics.md, "Probes"). A cycle with nothing
//! to commit counts as a successful checkpoint, so a partition that stops moving — a stuck
//! writer, a zombie that never asks the group, a fetch that stopped — left every other signal
//! green. This watch sees it: a partition is *stalled* when records wait for it and its
//! acknowledged position has not advanced for `after`.
//!
//! "Records wait" is judged from what the consumer thread reports (never from the committed
//! offset against the high watermark alone: a transactional topic's last offset is a marker no
//! record ever acknowledges): records were handed to the writer and are not acknowledged, or the
//! consumer's position (which librdkafka moves past markers) is below the high watermark. A
//! partition still recovering (no incarnation yet) is stalled once its recovery takes longer
//! than `after` while records wait in Kafka.
//!
//! Pure: the shell passes the time in.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::kafka::consumer::PartitionLoad;
use kbq_core::model::TopicPartition;
use kbq_core::offsets::NextOffset;

#[derive(Debug)]
pub struct StallWatch {
    after: Duration,
    partitions: BTreeMap<TopicPartition, Watch>,
}

#[derive(Debug)]
struct Watch {
    /// The acknowledged position (`None`: no incarnation started yet) and its base for a
    /// partition still recovering: the committed offset or the log start.
    acked: Option<NextOffset>,
    base: NextOffset,
    /// The last load the consumer reported.
    load: Option<PartitionLoad>,
    /// Since when nothing moved while records waited.
    since: Instant,
    stalled: bool,
}

/// A partition that turned stalled or moved again, for the shell's log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StallChange {
    Stalled {
        tp: TopicPartition,
        /// The acknowledged position, if an incarnation started.
        acked: Option<NextOffset>,
        high: NextOffset,
        for_secs: u64,
    },
    Moving {
        tp: TopicPartition,
    },
}

impl StallWatch {
    pub fn new(after: Duration) -> Self {
        StallWatch {
            after,
            partitions: BTreeMap::new(),
        }
    }

    /// `tp` is assigned; its recovery starts from `base`.
    pub fn assigned(&mut self, tp: TopicPartition, base: NextOffset, now: Instant) {
        self.partitions.insert(
            tp,
            Watch {
                acked: None,
                base,
                load: None,
                since: now,
                stalled: false,
            },
        );
    }

    /// A new incarnation of `tp` appends from `from`.
    pub fn started(&mut self, tp: &TopicPartition, from: NextOffset, now: Instant) {
        if let Some(w) = self.partitions.get_mut(tp) {
            w.acked = Some(from);
            // The records handed to the old incarnation are not this one's.
            if let Some(load) = &mut w.load {
                load.dispatched = None;
            }
            w.since = now;
        }
    }

    /// `tp` acknowledged records up to `next`.
    pub fn acknowledged(&mut self, tp: &TopicPartition, next: NextOffset, now: Instant) {
        if let Some(w) = self.partitions.get_mut(tp)
            && w.acked.is_none_or(|a| next > a)
        {
            w.acked = Some(next);
            w.since = now;
        }
    }

    pub fn loaded(&mut self, load: PartitionLoad) {
        if let Some(w) = self.partitions.get_mut(&load.tp) {
            w.load = Some(load);
        }
    }

    pub fn forget(&mut self, tp: &TopicPartition) {
        self.partitions.remove(tp);
    }

    /// Re-judges every partition at `now`; returns the ones that changed.
    pub fn check(&mut self, now: Instant) -> Vec<StallChange> {
        let mut changes = Vec::new();
        for (tp, w) in &mut self.partitions {
            let waiting = w.load.as_ref().is_some_and(|load| match w.acked {
                Some(acked) => {
                    load.dispatched.is_some_and(|r| r > acked)
                        || load.fetched.is_some_and(|f| f < load.high)
                }
                None => load.high > w.base,
            });
            if !waiting {
                // Idle is not stalled; the clock starts when records arrive.
                w.since = now;
            }
            let stalled = waiting && now.saturating_duration_since(w.since) >= self.after;
            if stalled && !w.stalled {
                changes.push(StallChange::Stalled {
                    tp: tp.clone(),
                    acked: w.acked,
                    high: w.load.as_ref().map_or(NextOffset(0), |l| l.high),
                    for_secs: now.saturating_duration_since(w.since).as_secs(),
                });
            } else if !stalled && w.stalled {
                changes.push(StallChange::Moving { tp: tp.clone() });
            }
            w.stalled = stalled;
        }
        changes
    }

    /// The stalled partitions, as of the last [`StallWatch::check`].
    pub fn stalled(&self) -> impl Iterator<Item = &TopicPartition> {
        self.partitions
            .iter()
            .filter(|(_, w)| w.stalled)
            .map(|(tp, _)| tp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(60);

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    fn load(high: i64, fetched: Option<i64>, dispatched: Option<i64>) -> PartitionLoad {
        PartitionLoad {
            tp: tp(),
            high: NextOffset(high),
            fetched: fetched.map(NextOffset),
            dispatched: dispatched.map(NextOffset),
        }
    }

    fn running(t0: Instant) -> StallWatch {
        let mut w = StallWatch::new(AFTER);
        w.assigned(tp(), NextOffset(10), t0);
        w.started(&tp(), NextOffset(10), t0);
        w
    }

    #[test]
    fn records_handed_to_a_writer_that_acknowledges_nothing_stall_the_partition_after_the_bound() {
        let t0 = Instant::now();
        let mut w = running(t0);
        w.loaded(load(300, Some(300), Some(300)));
        assert_eq!(w.check(t0 + AFTER / 2), vec![]);
        let changes = w.check(t0 + AFTER);
        assert!(
            matches!(
                &changes[..],
                [StallChange::Stalled {
                    acked: Some(NextOffset(10)),
                    high: NextOffset(300),
                    ..
                }]
            ),
            "{changes:?}"
        );
        assert_eq!(w.stalled().count(), 1);
        w.acknowledged(&tp(), NextOffset(50), t0 + AFTER);
        assert_eq!(
            w.check(t0 + AFTER + Duration::from_secs(1)),
            vec![StallChange::Moving { tp: tp() }]
        );
        assert_eq!(w.stalled().count(), 0);
    }

    #[test]
    fn a_partition_that_fetches_nothing_while_records_wait_is_stalled() {
        let t0 = Instant::now();
        let mut w = running(t0);
        // A paused zombie: everything dispatched was acknowledged, the position sits below high.
        w.loaded(load(300, Some(10), Some(10)));
        assert_eq!(w.check(t0 + AFTER).len(), 1);
    }

    #[test]
    fn an_idle_partition_resting_before_a_transaction_marker_is_not_stalled() {
        let t0 = Instant::now();
        let mut w = running(t0);
        w.acknowledged(&tp(), NextOffset(299), t0);
        // The last offset is a commit marker: never acknowledged, but fetched past.
        w.loaded(load(300, Some(300), Some(299)));
        assert_eq!(w.check(t0 + AFTER * 10), vec![]);
    }

    #[test]
    fn the_clock_starts_when_records_arrive_not_when_the_partition_went_idle() {
        let t0 = Instant::now();
        let mut w = running(t0);
        w.loaded(load(10, Some(10), None));
        assert_eq!(w.check(t0 + AFTER * 5), vec![]);
        w.loaded(load(20, Some(20), Some(20)));
        assert_eq!(w.check(t0 + AFTER * 5 + Duration::from_secs(1)), vec![]);
        assert_eq!(w.check(t0 + AFTER * 6 + Duration::from_secs(1)).len(), 1);
    }

    #[test]
    fn a_recovery_that_outlasts_the_bound_while_records_wait_is_stalled() {
        let t0 = Instant::now();
        let mut w = StallWatch::new(AFTER);
        w.assigned(tp(), NextOffset(10), t0);
        w.loaded(load(300, None, None));
        assert_eq!(w.check(t0 + AFTER / 2), vec![]);
        assert_eq!(w.check(t0 + AFTER).len(), 1);
        w.forget(&tp());
        assert_eq!(w.stalled().count(), 0);
    }
}
