//! `writer.memory_limit` on the real daemon: with a budget far smaller than the backlog the
//! consumer waits for acknowledgements instead of reading ahead, every record still lands exactly
//! once, and once everything is acknowledged the budget is back at zero (no path keeps a charge).

use crate::support;

use std::time::{Duration, Instant};

use support::sink::{Daemon, Fixture, Tweaks};

const LIMIT: f64 = 256.0 * 1024.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_memory_limit_bounds_the_records_held_and_every_record_lands_exactly_once() {
    let f = Fixture::new(4).await;
    let tweaks = Tweaks {
        writer: vec![
            "  max_request_bytes: 64KiB".into(),
            "  max_inflight_bytes: 128KiB".into(),
            "  memory_limit: 256KiB".into(),
        ],
        ..Tweaks::default()
    };
    let config = f.config_with(&support::kafka::unique_name("budget"), &tweaks);
    f.produce(40_000);
    let daemon = Daemon::start(&config);
    let expected = f.expected();
    let started = Instant::now();
    let mut highest = 0.0f64;
    let mut polls = 0u32;
    while started.elapsed() < Duration::from_secs(120) {
        highest = highest.max(daemon.metric("kbq_memory_budget_used_bytes"));
        polls += 1;
        if polls.is_multiple_of(25) && f.visible_count() >= expected.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f.wait_exactly_once(Duration::from_secs(60));
    eprintln!("highest budget use seen: {highest} bytes of {LIMIT}");
    assert!(highest > 0.0, "the budget never counted a record");
    // The gate opens under the limit and lets one record through per poll; the writers' rows
    // then replace estimates of about their size (these small rows carry metadata columns that
    // make them somewhat larger). Slack of that order, not the backlog (about 40 times the limit).
    assert!(
        highest <= LIMIT * 1.5,
        "the daemon held {highest} bytes with a limit of {LIMIT}"
    );
    // Everything is acknowledged: every charge was given back.
    let released = Instant::now();
    let mut used = daemon.metric("kbq_memory_budget_used_bytes");
    while used != 0.0 && released.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
        used = daemon.metric("kbq_memory_budget_used_bytes");
    }
    assert_eq!(used, 0.0, "bytes still charged after every record landed");
}
