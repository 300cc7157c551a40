//! Partitions whose first position waits for its commit (docs/architecture.md, "First
//! positions"). A partition that started without a committed offset is committed by a cycle
//! started as soon as its table carries the marker and no cycle is in flight, not an interval
//! later. The exactly-once protocol and the at-least-once ledger each hold one
//! `FirstPositions`, as each holds one [`Markers`]; each starts its own cycle when
//! [`FirstPositions::due`] says so.

use std::collections::BTreeSet;

use super::{Markers, TopicPartition};
use crate::metadata::TableFingerprint;

#[derive(Debug, Default)]
pub struct FirstPositions(BTreeSet<TopicPartition>);

impl FirstPositions {
    /// `tp` started without a committed offset: its position waits for a cycle.
    pub fn insert(&mut self, tp: TopicPartition) {
        self.0.insert(tp);
    }

    /// `tp`'s position went with a cycle (whatever its answer: a failed one is committed again
    /// by the regular cycles, so a commit that keeps failing costs no loop of cycles), or `tp`
    /// starts again.
    pub fn remove(&mut self, tp: &TopicPartition) {
        self.0.remove(tp);
    }

    /// Whether a cycle is due for a first position now. `waiting` gives the table of a
    /// partition that is running with a position not committed yet; any other is dropped: one
    /// handed off, failed or lost (its handoff or its next owner decides), and one whose
    /// position is committed already (nothing waits; kept, it would start a cycle after every
    /// event that could never send it: a fresh model seed, 16002392437258046416, looped so
    /// without end when a rejected commit ended each of those cycles at once). The caller
    /// checks that no cycle is in flight and that it is not shutting down.
    pub fn due(
        &mut self,
        markers: &Markers,
        waiting: impl Fn(&TopicPartition) -> Option<TableFingerprint>,
    ) -> bool {
        self.0.retain(|tp| waiting(tp).is_some());
        self.0
            .iter()
            .any(|tp| waiting(tp).is_some_and(|table| markers.contains(&table)))
    }
}
