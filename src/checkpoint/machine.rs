//! The pure machine a coordinator drives: the exactly-once [`CheckpointProtocol`] or the
//! at-least-once [`AtLeastOnceLedger`] (docs/architecture.md). Both speak the same events and
//! actions, so one shell serves both delivery modes; what differs between the modes is data
//! here, not a second shell.

use std::time::Duration;

use kbq_core::ledger::AtLeastOnceLedger;
use kbq_core::protocol::{Action, CheckpointProtocol, Event, MarkerRequests, TopicPartition};

pub enum Machine {
    ExactlyOnce(CheckpointProtocol),
    AtLeastOnce(AtLeastOnceLedger),
}

/// How old the last successful checkpoint may be before `/readyz` turns false while the replica
/// owns partitions: `max(intervals × checkpoint.interval, floor)` (docs/metrics.md, "Probes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadinessBound {
    pub intervals: u32,
    pub floor: Duration,
}

impl ReadinessBound {
    pub fn of(self, interval: Duration) -> Duration {
        (interval * self.intervals).max(self.floor)
    }
}

impl Machine {
    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        match self {
            Machine::ExactlyOnce(p) => p.handle(event),
            Machine::AtLeastOnce(l) => l.handle(event),
        }
    }

    pub fn cycle_in_flight(&self) -> bool {
        match self {
            Machine::ExactlyOnce(p) => p.cycle_in_flight(),
            Machine::AtLeastOnce(l) => l.cycle_in_flight(),
        }
    }

    /// How many table markers the machine asked for so far: noted when an assignment's
    /// committed offset is received, so that the recovery knows which markers landed after it.
    pub fn marker_requests(&self) -> MarkerRequests {
        match self {
            Machine::ExactlyOnce(p) => p.marker_requests(),
            Machine::AtLeastOnce(l) => l.marker_requests(),
        }
    }

    /// Whether `tp` stopped as a zombie and waits for the group to say what this member owns
    /// (exactly-once only: the `_default` stream has no zombies).
    pub fn is_zombie(&self, tp: &TopicPartition) -> bool {
        match self {
            Machine::ExactlyOnce(p) => p.is_zombie(tp),
            Machine::AtLeastOnce(_) => false,
        }
    }

    /// The mode's readiness bound. An exactly-once cycle waits for a commit and a FlushRows
    /// round trip per partition, so it gets ten intervals and at least 30 s; an at-least-once
    /// cycle is one commit, so six intervals say it is stuck.
    pub fn readiness_bound(&self) -> ReadinessBound {
        match self {
            Machine::ExactlyOnce(_) => ReadinessBound {
                intervals: 10,
                floor: Duration::from_secs(30),
            },
            Machine::AtLeastOnce(_) => ReadinessBound {
                intervals: 6,
                floor: Duration::ZERO,
            },
        }
    }
}
