//! A first deployment whose replica dies before its first checkpoint cycle (docs/operations.md,
//! "Missing checkpoints", case 3): the real binary, a real broker and the emulator. Two replicas
//! of one group start on a table without the group's marker; the one with a long
//! `checkpoint.interval` is killed once the other's commits marked the table. Under the default
//! `recovery.lost_offsets: fail` the survivor must take the dead replica's partitions and go on:
//! a first start's position is committed at once, not a cycle later (docs/architecture.md,
//! "First positions").

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use support::daemon::Daemon;
use support::kafka::unique_name;
use support::sink::{Fixture, Position, Tweaks, assert_exactly_once};

/// Polls `done` every 100 ms until it holds or `timeout` passes; whether it held.
fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    loop {
        if done() {
            return true;
        }
        if started.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn failed_partitions(d: &Daemon) -> Vec<serde_json::Value> {
    d.logged("partition failed closed")
}

/// `delivery` of both replicas: `exactly_once` or `at_least_once`.
async fn a_replica_killed_before_its_first_cycle(delivery: &'static str) {
    let f = Fixture::new(4).await;
    let group = unique_name("first-start");
    let tweaks = |interval, name| Tweaks {
        checkpoint_interval: interval,
        delivery: Some(delivery),
        name: Some(name),
        ..Tweaks::default()
    };
    let slow = f.config_with(&group, &tweaks("60s", "slow"));
    let fast = f.config_with(&group, &tweaks("200ms", "fast"));
    f.produce(400);

    // The slow replica owns every partition first: first starts, on a table without a marker.
    let mut slow = Daemon::start_named(&slow, "slow");
    assert!(
        wait_until(Duration::from_secs(60), || slow
            .logged("writer started")
            .len()
            >= 4),
        "the slow replica never started its four writers"
    );
    // The fast one joins: the group splits the partitions, and its first cycles mark the table
    // and commit its partitions.
    let mut fast = Daemon::start_named(&fast, "fast");
    assert!(
        wait_until(Duration::from_secs(90), || {
            !fast.logged("writer started").is_empty()
                && !slow.logged("partition handed off").is_empty()
                && !f.checkpoints(&group).is_empty()
        }),
        "the group never split the partitions between the replicas"
    );
    // Long enough for a commit's round trip, far below the slow replica's 60 s interval: only
    // a first position committed at once is durable by now.
    let committed_at_once = wait_until(Duration::from_secs(15), || {
        f.checkpoints(&group).len() == f.partitions as usize
    });
    slow.kill();

    // The survivor takes the dead replica's partitions after its session timeout (6 s).
    f.produce(400);
    let expected: BTreeSet<Position> = f.expected();
    let settled = wait_until(Duration::from_secs(120), || {
        !failed_partitions(&fast).is_empty() || expected.iter().all(|p| f.visible().contains_key(p))
    });
    assert!(
        failed_partitions(&fast).is_empty(),
        "the survivor failed the dead replica's partitions closed (their first position was \
         committed at once: {committed_at_once}): {:?}",
        failed_partitions(&fast)
    );
    assert!(settled, "the survivor did not write every record");
    assert!(fast.is_running(), "the survivor exited");
    assert_eq!(fast.metric("kbq_partitions_failed"), 0.0);
    assert_eq!(fast.metric("kbq_partitions_assigned"), 4.0);
    assert!(
        wait_until(Duration::from_secs(60), || fast.http_get("/readyz").0
            == 200),
        "the survivor is not ready: {:?}",
        fast.http_get("/readyz")
    );
    let visible = f.visible();
    if delivery == "exactly_once" {
        assert_exactly_once(&visible, &expected);
    } else {
        // At least once: the dead replica's acknowledged appends come again, nothing is lost.
        let seen: BTreeSet<Position> = visible.keys().copied().collect();
        let missing: Vec<_> = expected.difference(&seen).take(5).collect();
        let extra: Vec<_> = seen.difference(&expected).take(5).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "missing {missing:?}, unexpected {extra:?}"
        );
    }
    let status = fast.terminate();
    assert!(status.success(), "the survivor leaves cleanly: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn exactly_once_a_replica_killed_before_its_first_cycle_leaves_no_partition_failed() {
    a_replica_killed_before_its_first_cycle("exactly_once").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn at_least_once_a_replica_killed_before_its_first_cycle_leaves_no_partition_failed() {
    a_replica_killed_before_its_first_cycle("at_least_once").await;
}
