//! Finding the cluster again after librdkafka dropped every broker it knew, for each of the
//! daemon's three librdkafka clients: the group consumer, its watermark reader and the
//! dead-letter producer.
//!
//! librdkafka (since 2.10; 2.12.1 is what we build) removes from its broker list every broker a
//! Metadata answer does not name, the bootstrap servers included. A broker fenced by its
//! controller (a single node whose controller answered its heartbeat late) answers Metadata with
//! every topic but no broker: the client drops all its brokers (`Group coordinator
//! decommissioned`, `1/1 brokers are down`), and the re-bootstrap librdkafka starts then did not
//! bring one back in our runs: minutes later the client still had no broker to ask anything
//! (docs/operations.md, "Capacity planning"). The group consumer then has no coordinator, no
//! rejoin, no fetch (the group gives its partitions to the other replicas once the session
//! expires, so nothing is lost, but the replica consumes nothing until it restarts); the
//! watermark reader reads no watermark (the lag gauges and the writers' loads freeze); the
//! dead-letter producer times out every dead letter, and a bad record then fails its partition.
//!
//! The statistics say which brokers the client has and whether one is up. A [`BrokerWatch`],
//! fed by the client context's `stats` callback, decides: when none has been up for
//! [`BROKERLESS_GRACE`], the thread that serves the client hands the bootstrap servers to
//! librdkafka again (`rd_kafka_brokers_add`), and again every [`BROKERLESS_GRACE`] until one is.
//! While a broker exists with that address the call adds nothing; when none does, the new
//! bootstrap broker fetches Metadata and the client finds the cluster (and the group and its
//! coordinator) again. Which thread that is: the consumer's own thread, between two polls; the
//! watermark reader's thread, which polls its client for the statistics; for the dead-letter
//! producer, whose polling thread is rust-rdkafka's, a small thread of its own ([`BrokerFinder`]).
//!
//! No test makes a fenced broker answer Metadata with no broker: freezing a single-node test
//! cluster's broker did not get it fenced without the load of the scale test
//! (docs/operations.md). The unit tests prove the decision's timing and that each client's
//! statistics reach its watch; `tests/e2e/kafka_reconnect.rs` strands the three clients on a broker
//! address where nothing listens (librdkafka's mock cluster) and proves each comes back.

use std::ffi::CString;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::Client;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::ConsumerContext;
use rdkafka::{ClientContext, Statistics};

use crate::config::defaults;

/// How long the client may have no broker up before the bootstrap servers are added again (and
/// between two additions): longer than a broker's restart, the statistics interval (5 s by
/// default) being how often it is looked at.
pub const BROKERLESS_GRACE: Duration = Duration::from_secs(15);

/// What the statistics said of one client's brokers, and when its bootstrap servers were last
/// added again.
#[derive(Debug)]
pub(crate) struct BrokerWatch {
    /// Which client this is, for the log: `consumer`, `watermarks`, `dead-letter producer`.
    client: &'static str,
    /// The client's `bootstrap.servers` (none: nothing to add again).
    bootstrap: Option<String>,
    /// Written by the statistics callback, read by the finder thread; plain values set whole,
    /// so a poisoned lock (a panic elsewhere in the holder's thread) is taken as is.
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
    /// The watch of the client `config` creates.
    pub(crate) fn new(client: &'static str, config: &ClientConfig) -> Self {
        BrokerWatch {
            client,
            bootstrap: config.get("bootstrap.servers").map(str::to_string),
            state: Mutex::default(),
        }
    }

    /// Records one statistics report (librdkafka's, every `statistics.interval.ms`).
    pub(crate) fn observe(&self, statistics: &Statistics, now: Instant) {
        self.observe_up(any_broker_up(statistics), now);
    }

    fn observe_up(&self, up: bool, now: Instant) {
        let mut w = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if up {
            *w = Watch::default();
        } else {
            w.brokerless_since.get_or_insert(now);
        }
    }

    /// Whether statistics have shown no broker up since they last showed one (or ever).
    #[cfg(test)]
    pub(crate) fn brokerless(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .brokerless_since
            .is_some()
    }

    /// Whether the bootstrap servers are to be added again now (and, if so, notes that they are).
    fn readd_due(&self, now: Instant) -> Option<Duration> {
        let mut w = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let since = w.brokerless_since?;
        let waited = now.saturating_duration_since(since);
        let last = w.readded.unwrap_or(since);
        if waited < BROKERLESS_GRACE || now.saturating_duration_since(last) < BROKERLESS_GRACE {
            return None;
        }
        w.readded = Some(now);
        Some(waited)
    }

    /// After [`BROKERLESS_GRACE`] without any broker up, hands the bootstrap servers to `client`
    /// again (see the module) and returns how many librdkafka took ([`add_bootstrap_servers`]).
    /// Cheap when nothing is due: a lock and a comparison.
    pub(crate) fn find_brokers_again<C: ClientContext>(
        &self,
        client: &Client<C>,
        now: Instant,
    ) -> Option<i32> {
        let bootstrap = self.bootstrap.as_deref()?;
        let waited = self.readd_due(now)?;
        let added = add_bootstrap_servers(client, bootstrap);
        tracing::warn!(
            client = self.client,
            waited_s = waited.as_secs(),
            added,
            "no kafka broker up: the bootstrap servers are added again"
        );
        Some(added)
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

/// Adds the bootstrap servers to the client's broker list again; returns how many of them the
/// client has as bootstrap brokers now (librdkafka counts one it still has, and keeps it once).
fn add_bootstrap_servers<C: ClientContext>(client: &Client<C>, bootstrap: &str) -> i32 {
    let Ok(list) = CString::new(bootstrap) else {
        return 0;
    };
    // SAFETY: the client pointer is valid for as long as `client` is borrowed, and
    // `rd_kafka_brokers_add` copies the NUL-terminated list it is given; it may be called from
    // any thread.
    unsafe { rdkafka::bindings::rd_kafka_brokers_add(client.native_ptr(), list.as_ptr()) }
}

/// Turns the statistics on for a client whose only use of them is its [`BrokerWatch`]: the
/// interval `properties` give, else [`defaults::KAFKA_STATISTICS_INTERVAL`] (also when they
/// give 0, which is off: without statistics the watch never sees a broker go). Returns it.
pub(crate) fn with_statistics(config: &mut ClientConfig) -> Duration {
    let every = config
        .get("statistics.interval.ms")
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(defaults::KAFKA_STATISTICS_INTERVAL, Duration::from_millis);
    config.set("statistics.interval.ms", every.as_millis().to_string());
    every
}

/// The context of a client whose statistics only feed its [`BrokerWatch`] (the watermark
/// reader, the dead-letter producer); the group consumer's context feeds its own.
pub(crate) struct WatchedContext {
    pub(crate) brokers: Arc<BrokerWatch>,
}

impl ClientContext for WatchedContext {
    fn stats(&self, statistics: Statistics) {
        self.brokers.observe(&statistics, Instant::now());
    }
}

impl ConsumerContext for WatchedContext {}

/// How often a [`BrokerFinder`] asks its watch whether the bootstrap servers are due.
const FINDER_EVERY: Duration = Duration::from_secs(1);

/// A thread that asks a client's watch every second whether its bootstrap servers are due, for
/// a client no thread of ours serves (the dead-letter producer, polled by rust-rdkafka's own
/// thread). Its closure holds a clone of the client; the thread ends, and drops it, when the
/// [`BrokerFinder`] is dropped.
pub(crate) struct BrokerFinder {
    /// What the tests look at.
    #[cfg(test)]
    brokers: Arc<BrokerWatch>,
    /// Never sent on: its drop (the sender's) ends the thread.
    _stop: std_mpsc::Sender<()>,
}

impl BrokerFinder {
    /// `find` calls [`BrokerWatch::find_brokers_again`] on the watch with the client it holds.
    pub(crate) fn spawn(
        name: &str,
        brokers: Arc<BrokerWatch>,
        mut find: impl FnMut(&BrokerWatch, Instant) + Send + 'static,
    ) -> std::io::Result<BrokerFinder> {
        let (stop, stopped) = std_mpsc::channel::<()>();
        let watch = brokers.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while let Err(std_mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(FINDER_EVERY)
                {
                    find(&watch, Instant::now());
                }
            })?;
        Ok(BrokerFinder {
            #[cfg(test)]
            brokers,
            _stop: stop,
        })
    }

    /// The watch it consults.
    #[cfg(test)]
    pub(crate) fn watch(&self) -> &BrokerWatch {
        &self.brokers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bootstrap_servers_are_added_again_only_after_a_grace_without_any_broker_up() {
        let watch = BrokerWatch::new("consumer", &ClientConfig::new());
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

    /// A client of a bootstrap server where nothing listens (loopback port 1, refused): its
    /// statistics every 100 ms show no broker up.
    fn unreachable_client_config() -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", "127.0.0.1:1");
        config.set("statistics.interval.ms", "100");
        config
    }

    #[test]
    fn a_watched_clients_statistics_reach_its_watch() {
        use rdkafka::consumer::BaseConsumer;
        let config = unreachable_client_config();
        let brokers = Arc::new(BrokerWatch::new("watermarks", &config));
        let context = WatchedContext {
            brokers: brokers.clone(),
        };
        let client: BaseConsumer<WatchedContext> = config.create_with_context(context).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !brokers.brokerless() && Instant::now() < deadline {
            let _ = client.poll(Duration::from_millis(50));
        }
        assert!(brokers.brokerless(), "the statistics said no broker is up");
    }

    #[test]
    fn a_due_watch_hands_its_bootstrap_servers_to_librdkafka() {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let config = unreachable_client_config();
        let client: BaseConsumer = config.create().unwrap();
        // A watch whose bootstrap list names a broker the client does not have yet.
        let mut other = ClientConfig::new();
        other.set("bootstrap.servers", "127.0.0.1:2,127.0.0.1:3");
        let watch = BrokerWatch::new("consumer", &other);
        let t0 = Instant::now();
        assert_eq!(watch.find_brokers_again(client.client(), t0), None);
        watch.observe_up(false, t0);
        assert_eq!(
            watch.find_brokers_again(client.client(), t0 + BROKERLESS_GRACE),
            Some(2),
            "librdkafka added both servers"
        );
        // Again after another grace: librdkafka counts a bootstrap broker it still has (and
        // does not add it twice).
        let again = t0 + BROKERLESS_GRACE * 2;
        assert_eq!(watch.find_brokers_again(client.client(), again), Some(2));
        // No bootstrap servers known: nothing to add, ever.
        let none = BrokerWatch::new("consumer", &ClientConfig::new());
        none.observe_up(false, t0);
        assert_eq!(none.find_brokers_again(client.client(), again), None);
    }

    #[test]
    fn statistics_are_on_for_a_watched_client_unless_already_set() {
        let mut config = ClientConfig::new();
        assert_eq!(
            with_statistics(&mut config),
            defaults::KAFKA_STATISTICS_INTERVAL
        );
        assert_eq!(config.get("statistics.interval.ms"), Some("5000"));
        config.set("statistics.interval.ms", "0");
        assert_eq!(
            with_statistics(&mut config),
            defaults::KAFKA_STATISTICS_INTERVAL
        );
        config.set("statistics.interval.ms", "250");
        assert_eq!(with_statistics(&mut config), Duration::from_millis(250));
        assert_eq!(config.get("statistics.interval.ms"), Some("250"));
    }
}
