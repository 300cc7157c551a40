//! Finding the cluster again after librdkafka dropped every broker it knew.
//!
//! librdkafka (since 2.10; 2.12.1 is what we build) removes from its broker list every broker a
//! Metadata answer does not name, the bootstrap servers included. A broker fenced by its
//! controller (a single node whose controller answered its heartbeat late) answers Metadata with
//! every topic but no broker: the client drops all its brokers (`Group coordinator
//! decommissioned`, `1/1 brokers are down`), and the re-bootstrap librdkafka starts then did not
//! bring one back in our runs: minutes later the client still had no broker to ask anything (no
//! coordinator, no rejoin, no fetch; docs/operations.md, "Capacity planning"). The group gives
//! the partitions to the other replicas once the session expires, so nothing is lost, but the
//! replica consumes nothing until it restarts.
//!
//! The statistics say which brokers the client has and whether one is up. When none has been up
//! for [`BROKERLESS_GRACE`], the consumer thread hands the bootstrap servers to librdkafka again
//! (`rd_kafka_brokers_add`), and again every [`BROKERLESS_GRACE`] until one is. While a broker
//! exists with that address the call adds nothing; when none does, the new bootstrap broker
//! fetches Metadata and the client finds the cluster, the group and its coordinator again.

use std::ffi::CString;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::Statistics;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

/// How long the client may have no broker up before the bootstrap servers are added again (and
/// between two additions): longer than a broker's restart, the statistics interval (5 s by
/// default) being how often it is looked at.
pub const BROKERLESS_GRACE: Duration = Duration::from_secs(15);

/// What the statistics said of the client's brokers, and when the bootstrap servers were last
/// added again.
#[derive(Debug, Default)]
pub(super) struct BrokerWatch {
    state: Mutex<Watch>,
}

#[derive(Debug, Default)]
struct Watch {
    /// Since when no statistics showed a broker up (`None`: the last ones did).
    brokerless_since: Option<Instant>,
    /// When the bootstrap servers were last added again.
    readded: Option<Instant>,
}

impl BrokerWatch {
    /// Records one statistics report (librdkafka's, every `statistics.interval.ms`).
    pub(super) fn observe(&self, statistics: &Statistics, now: Instant) {
        self.observe_up(any_broker_up(statistics), now);
    }

    fn observe_up(&self, up: bool, now: Instant) {
        let mut w = self.state.lock().expect("broker watch");
        if up {
            *w = Watch::default();
        } else {
            w.brokerless_since.get_or_insert(now);
        }
    }

    /// Whether the bootstrap servers are to be added again now (and, if so, notes that they are).
    pub(super) fn readd_due(&self, now: Instant) -> Option<Duration> {
        let mut w = self.state.lock().expect("broker watch");
        let since = w.brokerless_since?;
        let waited = now.saturating_duration_since(since);
        let last = w.readded.unwrap_or(since);
        if waited < BROKERLESS_GRACE || now.saturating_duration_since(last) < BROKERLESS_GRACE {
            return None;
        }
        w.readded = Some(now);
        Some(waited)
    }
}

/// Whether any broker of the cluster (learned from Metadata, or a bootstrap server) is up:
/// librdkafka's logical (group coordinator) and internal brokers are not connections of their own.
fn any_broker_up(statistics: &Statistics) -> bool {
    statistics
        .brokers
        .values()
        .any(|b| b.state == "UP" && (b.source == "learned" || b.source == "configured"))
}

/// Adds the bootstrap servers to the client's broker list again; returns how many librdkafka
/// added (0 when a broker with each address still exists).
pub(super) fn add_bootstrap_servers<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    bootstrap: &str,
) -> i32 {
    let Ok(list) = CString::new(bootstrap) else {
        return 0;
    };
    // SAFETY: the client pointer is valid for as long as `consumer` is borrowed, and
    // `rd_kafka_brokers_add` copies the NUL-terminated list it is given; it may be called from
    // any thread.
    unsafe {
        rdkafka::bindings::rd_kafka_brokers_add(consumer.client().native_ptr(), list.as_ptr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bootstrap_servers_are_added_again_only_after_a_grace_without_any_broker_up() {
        let watch = BrokerWatch::default();
        let t0 = Instant::now();
        assert_eq!(watch.readd_due(t0), None, "nothing observed yet");
        watch.observe_up(false, t0);
        assert_eq!(watch.readd_due(t0 + BROKERLESS_GRACE / 2), None);
        assert_eq!(
            watch.readd_due(t0 + BROKERLESS_GRACE),
            Some(BROKERLESS_GRACE),
            "no broker up for the grace"
        );
        // Still none: again only after another grace.
        watch.observe_up(false, t0 + BROKERLESS_GRACE);
        assert_eq!(watch.readd_due(t0 + BROKERLESS_GRACE * 3 / 2), None);
        assert!(watch.readd_due(t0 + BROKERLESS_GRACE * 2).is_some());
        // A broker up resets it all.
        watch.observe_up(true, t0 + BROKERLESS_GRACE * 2);
        assert_eq!(watch.readd_due(t0 + BROKERLESS_GRACE * 10), None);
        watch.observe_up(false, t0 + BROKERLESS_GRACE * 10);
        assert_eq!(watch.readd_due(t0 + BROKERLESS_GRACE * 10), None);
    }
}
