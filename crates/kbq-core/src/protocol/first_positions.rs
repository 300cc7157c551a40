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

    /// Whether a cycle is due for a first position now. `running` gives the table of a
    /// partition that is running; one that is not any more (handed off, failed, lost) is
    /// dropped: its handoff or its next owner decides. The caller checks that no cycle is in
    /// flight and that it is not shutting down.
    pub fn due(
        &mut self,
        markers: &Markers,
        running: impl Fn(&TopicPartition) -> Option<TableFingerprint>,
    ) -> bool {
        self.0.retain(|tp| running(tp).is_some());
        self.0
            .iter()
            .any(|tp| running(tp).is_some_and(|table| markers.contains(&table)))
    }
}
