//! A librdkafka client of the daemon that lost every broker it could reach finds the cluster
//! again (`kafka::reconnect`, docs/operations.md "Capacity planning"), shown with the
//! dead-letter producer against librdkafka's own mock cluster (in process, loopback only).
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
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kafka_bigquery_sink::kafka::consumer::Record;
use kafka_bigquery_sink::kafka::dead_letter::{BadRecord, DeadLetterProducer};
use kafka_bigquery_sink::kafka::reconnect::BROKERLESS_GRACE;
use kbq_core::offsets::KafkaOffset;
use rdkafka::ClientConfig;
use rdkafka::bindings as rdsys;
use rdkafka::producer::{BaseProducer, Producer};

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

    // The client's only broker moves to a dead address, then the broker's real address is
    // advertised again, where the client can no longer ask for it.
    cluster.advertise("127.0.0.1:1");
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.advertise(&cluster.bootstrap);

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
