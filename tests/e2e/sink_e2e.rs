//! The daemon end to end: the real binary (`run -c`) against a real Kafka broker and the
//! emulator. Each test checks the table afterwards through the Kafka metadata columns: every
//! (partition, offset) of a good record exactly once, nothing else. The crash, rebalance and
//! fault scenarios are in `sink_chaos.rs`.

use crate::support;

use std::collections::BTreeSet;
use std::io::Write;
use std::process::Command;
use std::time::Duration;

use support::sink::{Daemon, Fixture, assert_exactly_once, encode};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_lands_exactly_once_across_sigkill_restarts_and_a_graceful_stop() {
    let f = Fixture::new(3).await;
    // A small memory budget keeps each backlog in work over several checkpoints, so that the
    // kills land mid-drain: with the default budget three partitions drain it in one.
    let tweaks = support::sink::Tweaks {
        writer: vec![
            "  max_request_bytes: 64KiB".into(),
            "  max_inflight_bytes: 256KiB".into(),
            "  memory_limit: 1MiB".into(),
        ],
        ..Default::default()
    };
    let config = f.config_with(&support::kafka::unique_name("sink"), &tweaks);
    // Each phase kills the daemon while it is still working through the backlog: the threshold
    // is below what was produced, and the next phase needs progress past the previous one.
    let mut produced = 0usize;
    let mut crashes = 0;
    let mut seen = 0usize;
    for batch in [60_000i64, 30_000, 30_000] {
        f.produce(batch);
        produced += batch as usize;
        let mut daemon = Daemon::start(&config);
        // Kill at the first checkpoint that shows progress of this incarnation.
        let kill_at = seen + 1;
        let v = f.wait_visible(kill_at, Duration::from_secs(120));
        let visible = v.values().sum::<usize>();
        assert!(
            visible >= kill_at,
            "progress before the crash: {visible} < {kill_at}"
        );
        if visible < produced {
            crashes += 1;
        }
        daemon.kill();
        seen = f.visible_count();
    }
    eprintln!("{crashes} of 3 crashes hit the daemon mid-backlog");
    f.produce(5_000);
    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));
    let status = daemon.terminate();
    assert!(status.success(), "clean exit after SIGTERM: {status:?}");
    // Nothing more appears after the stop (no duplicate from a final cycle).
    assert_exactly_once(&f.visible(), &f.expected());
    assert!(
        crashes >= 1,
        "no crash happened while the daemon was working; the test proved nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_records_go_to_the_dead_letter_topic_and_the_partition_keeps_going() {
    let f = Fixture::new(1).await;
    let config = f.config(&support::kafka::unique_name("sink"));
    f.produce(100); // offsets 0..100
    let truncated = encode(&f.schema, 7)[..3].to_vec();
    f.source
        .produce_raw(0, &[truncated, Vec::new(), vec![0x02, 0x04]]); // offsets 100..103
    f.produce(100); // offsets 103..203
    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(60));
    let mut expected: BTreeSet<(i64, i64)> = (0..100).map(|o| (0, o)).collect();
    expected.extend((103..203).map(|o| (0, o)));
    assert_eq!(f.expected(), expected);
    let dlq = f.dead_letters(3);
    let offsets: BTreeSet<i64> = dlq.iter().map(|d| d.1).collect();
    assert_eq!(offsets, BTreeSet::from([100, 101, 102]), "{dlq:?}");
    assert!(
        dlq.iter().all(|d| !d.3.is_empty()),
        "every dead letter says why: {dlq:?}"
    );
    assert!(daemon.terminate().success());
}

/// A tombstone on a route that is not CDC is a record its format cannot read: its dead letter's
/// class names that format (`malformed_json` on a JSON route, not `malformed_avro`), so that an
/// alert points at the right producers; with the format left to each schema id and no record
/// read yet, no id names one: `bad_magic`, the framing is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_is_dead_lettered_with_its_formats_class() {
    use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};
    use support::registry::Registry;
    use support::sink::Tweaks;

    let (registry, _held) = Registry::serve(Default::default(), None).await;
    let url = format!("http://{registry}");
    let cases: [(&str, Tweaks, &str); 5] = [
        ("avro", Tweaks::default(), "malformed_avro"),
        (
            "json",
            Tweaks {
                schemaless_json: true,
                ..Tweaks::default()
            },
            "malformed_json",
        ),
        (
            "protobuf",
            Tweaks {
                registry_url: Some(url.clone()),
                format: Some("protobuf"),
                ..Tweaks::default()
            },
            "malformed_protobuf",
        ),
        (
            "json_schema",
            Tweaks {
                registry_url: Some(url.clone()),
                format: Some("json_schema"),
                ..Tweaks::default()
            },
            "malformed_json",
        ),
        (
            "format_unset",
            Tweaks {
                registry_url: Some(url.clone()),
                ..Tweaks::default()
            },
            "bad_magic",
        ),
    ];
    for (name, tweaks, class) in cases {
        let f = Fixture::new(1).await;
        if tweaks.schemaless_json || tweaks.registry_url.is_some() {
            f.create_table_with_metadata(vec![TableFieldSchema::new(
                "id",
                FieldType::Int64,
                Mode::Nullable,
            )]);
        }
        let tombstone = support::cdc::Change {
            partition: 0,
            key: Some(b"k".to_vec()),
            value: None,
        };
        let producer = support::kafka::producer(&f.bootstrap);
        support::cdc::produce(&producer, &f.topic, [&tombstone]);
        let config = f.config_with(&support::kafka::unique_name(name), &tweaks);
        let mut daemon = Daemon::start(&config);
        let dead = f.dead_letters(1);
        assert_eq!(dead.len(), 1, "{name}: {dead:?}");
        assert_eq!(dead[0].2, class, "{name}: {dead:?}");
        assert!(dead[0].3.contains("tombstone"), "{name}: {dead:?}");
        assert!(daemon.terminate().success(), "{name}");
    }
}

/// `/readyz` follows the group's assignment at once: once the daemon has committed its first
/// checkpoint it says ready, not "not a member of the consumer group yet" until librdkafka's
/// next statistics report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_assignment_at_once() {
    let f = Fixture::new(1).await;
    let group = support::kafka::unique_name("ready");
    // Statistics once a minute: readiness that waited for a report could not come within the
    // window below, however slow the machine.
    let config = f.config_with(
        &group,
        &support::sink::Tweaks {
            kafka_properties: vec!["    statistics.interval.ms: \"60000\"".into()],
            ..support::sink::Tweaks::default()
        },
    );
    f.produce(10);
    let daemon = Daemon::start(&config);
    let started = std::time::Instant::now();
    while !f.try_checkpoints(&group).is_ok_and(|c| !c.is_empty()) {
        assert!(started.elapsed() < Duration::from_secs(60), "no checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
    let committed = started.elapsed();
    let mut last = daemon.http_get("/readyz");
    let asked = std::time::Instant::now();
    while last.0 != 200 && asked.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        last = daemon.http_get("/readyz");
    }
    assert_eq!(
        last.0, 200,
        "not ready 10 s after the first checkpoint ({committed:?} after start): {}",
        last.1
    );
}

#[test]
fn validate_accepts_the_test_config_shape() {
    // The configs above go through `validate` inside `run`; this keeps a syntax slip in the
    // template from surfacing only as a daemon that never starts.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let f = rt.block_on(Fixture::new(1));
    let tweaks = support::sink::Tweaks {
        recovery: vec!["  lost_stream: rewind".into()],
        writer: vec!["  max_rows_per_request: 100".into()],
        ..Default::default()
    };
    for config in [
        f.config("validate-only"),
        f.config_with("validate-tweaks", &tweaks),
    ] {
        let out = Command::new(crate::support::daemon::binary())
            .args(["validate", "-c"])
            .arg(&config)
            .output()
            .expect("run validate");
        let _ = std::io::stderr().write_all(&out.stderr);
        assert!(out.status.success(), "validate failed");
    }
}
