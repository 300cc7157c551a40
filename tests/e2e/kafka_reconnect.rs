//! A librdkafka client of the daemon that lost every broker it could reach finds the cluster
//! again (`kafka::reconnect`, docs/operations.md "Capacity planning"), shown with the
//! dead-letter producer and with the consumer thread's two clients (the group consumer and its
//! watermark reader) against librdkafka's own mock cluster (in process, loopback only).
//!
//! How the client loses its brokers here: once a client learned the cluster's brokers from
//! Metadata, librdkafka drops its bootstrap brokers and talks only to the learned ones, at the
//! address each one advertises. The mock broker then advertises an address where nothing listens
//! (loopback port 1) until the client's next Metadata refresh has moved its only broker there,
//! and then its real address again: the client is left with one broker it can never reach and no
//! way to learn the real address, its own re-bootstrap being switched off (see the test). That
//! is not the fenced broker's empty Metadata of the scale test (no test reproduces that one on a
//! single node), but it leaves the client in the same state: no broker up, none to ask.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kafka_bigquery_sink::kafka::consumer::{
    self, ConsumerCommand, ConsumerEvent, ConsumerSettings, Record,
};
use kafka_bigquery_sink::kafka::dead_letter::DeadLetterProducer;
use kafka_bigquery_sink::kafka::reconnect::BROKERLESS_GRACE;
use kafka_bigquery_sink::ops::metrics::Metrics;
use kbq_core::bad_record::BadRecord;
use kbq_core::model::TopicPartition;
use kbq_core::offsets::KafkaOffset;
use kbq_core::offsets::NextOffset;
use rdkafka::ClientConfig;
use rdkafka::bindings as rdsys;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use tokio::sync::mpsc;

/// librdkafka's mock cluster of one broker (id 1), driven through the C API: rust-rdkafka's
/// `MockCluster` cannot change a broker's advertised address.
struct OneBrokerCluster {
    /// The client the cluster lives in; it must outlive the cluster.
    host: BaseProducer,
    cluster: *mut rdsys::rd_kafka_mock_cluster_t,
    /// Where the broker listens.
    bootstrap: String,
}

impl OneBrokerCluster {
    fn start(topic: &str) -> Self {
        let host: BaseProducer = ClientConfig::new().create().expect("the mock's client");
        // SAFETY: the client is valid and outlives the cluster (destroyed first, in `drop`).
        let cluster = unsafe { rdsys::rd_kafka_mock_cluster_new(host.client().native_ptr(), 1) };
        assert!(!cluster.is_null(), "a mock cluster");
        // SAFETY: the cluster is valid; the list is a NUL-terminated string it owns.
        let bootstrap = unsafe { CStr::from_ptr(rdsys::rd_kafka_mock_cluster_bootstraps(cluster)) }
            .to_string_lossy()
            .into_owned();
        let name = CString::new(topic).unwrap();
        // SAFETY: the cluster is valid; the name is copied.
        let created = unsafe { rdsys::rd_kafka_mock_topic_create(cluster, name.as_ptr(), 1, 1) };
        assert_eq!(
            created,
            rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        );
        OneBrokerCluster {
            host,
            cluster,
            bootstrap,
        }
    }

    /// Produces `n` records to partition 0 of `topic`, with a client of its own.
    fn produce(&self, topic: &str, n: usize) {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .expect("a producer");
        for _ in 0..n {
            producer
                .send(BaseRecord::<(), _>::to(topic).partition(0).payload("x"))
                .expect("queued");
        }
        producer.flush(Duration::from_secs(30)).expect("produced");
    }

    /// Strands every client of the cluster: the broker advertises an address where nothing
    /// listens until the clients' Metadata refreshes moved their only broker there, then its
    /// own address again, which they can no longer ask for.
    fn strand_its_clients(&self) {
        self.advertise("127.0.0.1:1");
        std::thread::sleep(Duration::from_secs(2));
        self.advertise(&self.bootstrap);
    }

    /// Makes the broker advertise `host:port` in its Metadata answers (it keeps listening where
    /// it listens).
    fn advertise(&self, address: &str) {
        let (host, port) = address.rsplit_once(':').expect("host:port");
        let host = CString::new(host).unwrap();
        // SAFETY: the cluster is valid; the host name is copied.
        unsafe {
            rdsys::rd_kafka_mock_broker_set_host_port(
                self.cluster,
                1,
                host.as_ptr(),
                port.parse().expect("a port"),
            )
        };
    }
}

impl Drop for OneBrokerCluster {
    fn drop(&mut self) {
        // SAFETY: created by `start`, destroyed once, before its client.
        unsafe { rdsys::rd_kafka_mock_cluster_destroy(self.cluster) };
        let _ = self.host.flush(Duration::from_secs(1));
    }
}

fn a_record(offset: i64) -> Record {
    Record::new(
        KafkaOffset(offset),
        None,
        Some(b"key"),
        Some(b"not a row"),
        Vec::new(),
        &mut BytesMut::new(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_producer_that_lost_every_broker_finds_the_cluster_again() {
    let cluster = OneBrokerCluster::start("dead");
    let properties = BTreeMap::from([
        ("bootstrap.servers".to_string(), cluster.bootstrap.clone()),
        // Metadata often, so the stale address reaches the client within a second.
        (
            "topic.metadata.refresh.interval.ms".to_string(),
            "200".to_string(),
        ),
        ("statistics.interval.ms".to_string(), "500".to_string()),
        // librdkafka's own re-bootstrap off: it did not bring a broker back in the fenced case
        // (docs/operations.md), and here it sometimes does (when its only broker goes down),
        // which would hide whether the watch did.
        ("metadata.recovery.strategy".to_string(), "none".to_string()),
    ]);
    let timeout = BROKERLESS_GRACE * 3;
    let dead_letters = DeadLetterProducer::new(&properties, "dead", timeout).expect("a producer");
    let bad = BadRecord {
        class: "test",
        reason: "not a row".into(),
    };
    dead_letters
        .send("source", 0, &a_record(0), &bad)
        .await
        .expect("the first dead letter, with the cluster known");

    tokio::task::block_in_place(|| cluster.strand_its_clients());

    let lost = Instant::now();
    dead_letters
        .send("source", 0, &a_record(1), &bad)
        .await
        .expect("a dead letter after the producer found the cluster again");
    let took = lost.elapsed();
    assert!(
        took >= BROKERLESS_GRACE / 2,
        "the producer had really lost its broker: the send took {took:?}"
    );
}

/// The properties of the tests' clients: Metadata often, so the stale address reaches them
/// within a second; statistics often; librdkafka's own re-bootstrap off (see the module).
fn stranded_properties(bootstrap: &str) -> BTreeMap<String, String> {
    [
        ("bootstrap.servers", bootstrap),
        ("topic.metadata.refresh.interval.ms", "200"),
        ("statistics.interval.ms", "500"),
        ("metadata.recovery.strategy", "none"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The first event of `events` that `pick` takes within `within`, others dropped.
fn first_event<T>(
    events: &mut mpsc::UnboundedReceiver<ConsumerEvent>,
    within: Duration,
    what: &str,
    mut pick: impl FnMut(ConsumerEvent) -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match events.try_recv() {
            Ok(event) => {
                if let Some(found) = pick(event) {
                    return found;
                }
            }
            Err(_) => {
                assert!(Instant::now() < deadline, "no {what} within {within:?}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The high watermark the watermark reader reports for `tp` (a `Loads` event) once it is
/// `high`.
fn reported_high(
    events: &mut mpsc::UnboundedReceiver<ConsumerEvent>,
    tp: &TopicPartition,
    high: i64,
    within: Duration,
) {
    first_event(events, within, "load report", |e| match e {
        ConsumerEvent::Loads(loads) => loads
            .into_iter()
            .find(|l| &l.tp == tp && l.high == NextOffset(high)),
        _ => None,
    });
}

#[test]
fn the_consumer_and_its_watermark_reader_that_lost_every_broker_find_the_cluster_again() {
    let cluster = OneBrokerCluster::start("in");
    cluster.produce("in", 5);
    let mut properties = stranded_properties(&cluster.bootstrap);
    for (k, v) in [
        ("group.id", "reconnect"),
        ("enable.auto.commit", "false"),
        ("enable.auto.offset.store", "false"),
        ("auto.offset.reset", "error"),
        // Longer than the grace: the member is still in the group when it finds it again.
        ("session.timeout.ms", "45000"),
    ] {
        properties.insert(k.to_string(), v.to_string());
    }
    let (handle, mut events) = consumer::spawn(ConsumerSettings {
        properties,
        topics: vec!["in".to_string()],
        excluded_topics: Vec::new(),
        handoff_deadline: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
        max_stash_records: 1,
        // Metrics on: the watermark reader exists only with them.
        metrics: Some(Arc::new(Metrics::new())),
        memory: None,
        read_headers: false,
        faults: Arc::default(),
    })
    .expect("the consumer thread");
    let tp = TopicPartition::new("in", 0);
    let within = Duration::from_secs(60);
    first_event(&mut events, within, "assignment", |e| match e {
        ConsumerEvent::Assigned(list) => list.iter().any(|(t, _)| t == &tp).then_some(()),
        _ => None,
    });
    let (sink, mut records) = mpsc::channel(100);
    assert!(handle.send(ConsumerCommand::Start {
        tp: tp.clone(),
        from: NextOffset(0),
        sink,
    }));
    reported_high(&mut events, &tp, 5, within);

    cluster.strand_its_clients();
    let lost = Instant::now();
    cluster.produce("in", 5);

    // The watermark reader reads the new high watermark again: it found the cluster itself
    // (the group consumer's own re-add does nothing for this other client).
    reported_high(&mut events, &tp, 10, within);
    let took = lost.elapsed();
    assert!(
        took >= BROKERLESS_GRACE / 2,
        "the watermark reader had really lost its broker: it read again after {took:?}"
    );
    // And the group consumer fetches the new records.
    let deadline = Instant::now() + within;
    let mut offsets = Vec::new();
    while offsets.last() != Some(&9) {
        match records.try_recv() {
            Ok(r) => offsets.push(r.offset.0),
            Err(_) => {
                assert!(Instant::now() < deadline, "received only {offsets:?}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    assert_eq!(offsets, (0..10).collect::<Vec<i64>>());
    handle.send(ConsumerCommand::Shutdown);
    handle.join();
}
