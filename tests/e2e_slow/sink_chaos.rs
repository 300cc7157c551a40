//! Chaos against the real binary, a real broker and the emulator (docs/testing.md): replicas
//! joining and leaving (SIGTERM, SIGKILL) while a producer keeps producing, a broker restart,
//! BigQuery faults (UNAVAILABLE, dropped connections, slow answers, the idle close, streams
//! finalized or expired behind the daemon's back), the seed scenario of the Flink connector
//! replayed with processes, and poison records. After each: every good record visible exactly
//! once (checked through the Kafka metadata columns), or exactly the counted rewind window, and
//! no restart loop.
//!
//! Sizes are for CI (2 cores, a few minutes for the file); `KBQ_CHAOS_SCALE=N` multiplies the
//! record counts and rounds.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use apache_avro::Schema;
use apache_avro::types::Value;
use kbq_core::metadata::CommitMetadata;
use kbq_core::table_schema::TableSchema;
use kbq_emulator::faults::FaultRule;
use kbq_emulator::server::EmulatorConfig;
use kbq_emulator::store::StreamPhase;
use support::kafka::{KafkaBroker, unique_name};
use support::registry::Registry;
use support::sink::{
    BackgroundProducer, Daemon, Fixture, Position, SCHEMA, SinkOptions, Tweaks,
    assert_exactly_once, confluent, encode,
};

fn scale() -> i64 {
    std::env::var("KBQ_CHAOS_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n: &i64| n >= 1)
        .unwrap_or(1)
}

/// Polls `done` every 100 ms until it holds; panics with `what` after `timeout`.
fn wait_until(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until at least `by` more rows are visible than now: the pipeline moves.
fn progress(f: &Fixture, by: usize, what: &str) {
    let before = f.visible_count();
    let v = f.wait_visible(before + by, Duration::from_secs(120));
    let now = v.values().sum::<usize>();
    assert!(
        now >= before + by,
        "no progress {what}: {before} → {now} visible rows"
    );
}

/// A daemon that is still running, has no failed partition and did not loop: every restart of
/// a partition's incarnation (`writer started`) is accounted for by a bounded number per
/// assignment.
fn assert_healthy(d: &mut Daemon, max_incarnations: usize) {
    assert!(d.is_running(), "{} exited", d.name);
    assert_eq!(
        d.metric("kbq_partitions_failed"),
        0.0,
        "{} has failed partitions: {:?}",
        d.name,
        d.logged("failed")
    );
    let started = d.logged("writer started").len();
    assert!(
        started <= max_incarnations,
        "{} started {started} writer incarnations (restart loop?)",
        d.name
    );
}

/// `(partition, from, to)` of every rewind the daemon logged.
fn rewinds(d: &Daemon) -> Vec<(i64, i64, i64)> {
    d.logged("stream lost, rewinding")
        .iter()
        .map(|l| {
            let partition = l["partition"]
                .as_str()
                .and_then(|p| p.rsplit('/').next())
                .and_then(|p| p.parse().ok())
                .expect("partition field");
            (
                partition,
                l["from"].as_i64().expect("from"),
                l["to"].as_i64().expect("to"),
            )
        })
        .collect()
}

/// The end offset of each partition among the good records produced so far.
fn produced_ends(f: &Fixture) -> BTreeMap<i64, i64> {
    let mut ends = BTreeMap::new();
    for (p, o) in f.expected() {
        let e = ends.entry(p).or_insert(0);
        *e = (*e).max(o + 1);
    }
    ends
}

fn rules(json: &str) -> Vec<FaultRule> {
    serde_json::from_str(json).expect("fault rules")
}

// ---------------------------------------------------------------------------------------------
// 1. Replicas of one group come and go while the producer produces.

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn three_replicas_come_and_go_under_sigterm_and_sigkill_while_producing() {
    let s = scale();
    let f = Fixture::new(6).await;
    let group = unique_name("replicas");
    let config = f.config(&group);
    let producer = BackgroundProducer::start(f.source.clone(), 60 * s, Duration::from_millis(50));
    let mut a = Daemon::start_named(&config, "a");
    progress(&f, 500, "with replica a");
    let mut b = Daemon::start_named(&config, "b");
    progress(&f, 500, "after b joined");
    let mut c = Daemon::start_named(&config, "c");
    progress(&f, 500, "after c joined");
    for round in 0..s {
        b.kill();
        progress(&f, 500, "after b was killed");
        let status = a.terminate();
        assert!(status.success(), "a leaves cleanly on SIGTERM: {status:?}");
        progress(&f, 500, "after a left");
        a = Daemon::start_named(&config, &format!("a{round}"));
        progress(&f, 500, "after a rejoined");
        c.kill();
        progress(&f, 500, "after c was killed");
        b = Daemon::start_named(&config, &format!("b{round}"));
        c = Daemon::start_named(&config, &format!("c{round}"));
        progress(&f, 500, "with three replicas again");
    }
    producer.stop();
    f.wait_exactly_once(Duration::from_secs(120));
    for d in [&mut a, &mut b, &mut c] {
        assert_healthy(d, 200);
    }
    for d in [&mut a, &mut b, &mut c] {
        let status = d.terminate();
        assert!(status.success(), "{} leaves cleanly: {status:?}", d.name);
    }
    assert_exactly_once(&f.visible(), &f.expected());
    // The replicas did hand partitions to each other (a graceful revoke commits once).
    let handoffs: usize = [&a, &b, &c]
        .iter()
        .map(|d| d.logged("partition handed off").len())
        .sum();
    assert!(handoffs > 0, "no handoff happened");
    eprintln!(
        "replicas: {} records exactly once across {} kills and {} graceful stops",
        f.expected().len(),
        2 * s,
        s + 3
    );
}

// ---------------------------------------------------------------------------------------------
// 2. The broker restarts under the daemon.

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_broker_restart_in_the_middle_loses_and_duplicates_nothing() {
    let s = scale();
    let broker = KafkaBroker::start_private();
    let f = Fixture::with(SinkOptions {
        bootstrap: Some(broker.bootstrap().to_string()),
        ..SinkOptions::partitions(3)
    })
    .await;
    let config = f.config(&unique_name("broker-restart"));
    f.produce(20_000 * s);
    let mut d = Daemon::start(&config);
    progress(&f, 1, "before the broker restart");
    broker.restart(false);
    f.produce(5_000 * s);
    progress(&f, 1, "after a clean broker restart");
    broker.restart(true);
    f.produce(5_000 * s);
    f.wait_exactly_once(Duration::from_secs(180));
    assert_healthy(&mut d, 30);
    assert!(d.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
}

// ---------------------------------------------------------------------------------------------
// 3. BigQuery faults.

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn bigquery_faults_unavailable_drops_delays_and_idle_close_are_ridden_out() {
    let s = scale();
    let mut emulator = EmulatorConfig::local();
    // The idle close of AppendRows connections, at 2 s instead of 600 s: every pause between
    // the phases below closes each writer's connection.
    emulator.write.idle_timeout = Duration::from_secs(2);
    let f = Fixture::with(SinkOptions {
        emulator,
        ..SinkOptions::partitions(3)
    })
    .await;
    let config = f.config_with(
        &unique_name("faults"),
        &Tweaks {
            // Small requests (many appends), and a client timeout the delays below exceed.
            writer: vec![
                "  max_rows_per_request: 50".into(),
                "  response_timeout: 2s".into(),
            ],
            ..Tweaks::default()
        },
    );
    let mut d = Daemon::start(&config);
    let phases: [(&str, &str); 4] = [
        (
            "unavailable",
            r#"[{"rpc":"AppendRows","action":{"fail":{"code":"UNAVAILABLE"}},"probability":0.2,"times":20},
                {"rpc":"FlushRows","action":{"fail":{"code":"UNAVAILABLE"}},"probability":0.5,"times":10}]"#,
        ),
        (
            "in-stream errors",
            r#"[{"rpc":"AppendRows","action":{"fail":{"code":"UNAVAILABLE","in_stream":true}},"probability":0.2,"times":20},
                {"rpc":"AppendRows","action":{"fail":{"code":"INTERNAL","in_stream":true}},"probability":0.1,"times":5},
                {"rpc":"FlushRows","action":{"fail":{"code":"INTERNAL"}},"probability":0.5,"times":5}]"#,
        ),
        (
            "dropped connections",
            r#"[{"rpc":"AppendRows","action":{"drop":{"after":false}},"probability":0.1,"times":10},
                {"rpc":"AppendRows","action":{"drop":{"after":true}},"probability":0.1,"times":10},
                {"rpc":"FlushRows","action":{"drop":{"after":true}},"probability":0.3,"times":5},
                {"rpc":"FlushRows","action":{"drop":{"after":false}},"probability":0.3,"times":5}]"#,
        ),
        (
            // Answers later than the daemon's 2 s timeout: the request is applied, its answer
            // comes too late, the resend meets ALREADY_EXISTS (appends) or a done flush.
            "answers past the client timeout",
            r#"[{"rpc":"AppendRows","action":{"delay":{"ms":3000}},"probability":0.1,"times":5},
                {"rpc":"FlushRows","action":{"delay":{"ms":3000}},"probability":0.3,"times":3}]"#,
        ),
    ];
    // Stream creation fails too, for the writers' first streams (created lazily, at the first
    // records of the first phase).
    let create = f
        .emulator
        .faults
        .install(rules(
            r#"[{"rpc":"CreateWriteStream","action":{"fail":{"code":"UNAVAILABLE"}},"times":2}]"#,
        ))
        .expect("install");
    for round in 0..s {
        for (name, json) in phases {
            let producer =
                BackgroundProducer::start(f.source.clone(), 20 * s, Duration::from_millis(100));
            let ids = f
                .emulator
                .faults
                .install(rules(json))
                .expect("install faults");
            // Every rule must have acted at least once, or the phase proved nothing.
            wait_until(
                Duration::from_secs(90),
                &format!("every fault of phase {name} to fire"),
                || {
                    let list = f.emulator.faults.list();
                    ids.iter()
                        .all(|id| list.iter().any(|r| r.id == *id && r.fired > 0))
                },
            );
            for id in &ids {
                f.emulator.faults.remove(*id);
            }
            producer.stop();
            f.wait_exactly_once(Duration::from_secs(120));
            eprintln!(
                "round {round} phase {name}: {} rows exactly once",
                f.expected().len()
            );
            // Longer than the idle timeout: the next phase starts on closed connections.
            std::thread::sleep(Duration::from_secs(3));
        }
    }
    let create_fired = f.emulator.faults.list();
    assert!(
        create_fired
            .iter()
            .any(|r| r.id == create[0] && r.fired == 2),
        "stream creation failed twice: {create_fired:?}"
    );
    f.produce(100);
    f.wait_exactly_once(Duration::from_secs(60));
    assert!(
        d.metric("kbq_bigquery_errors_total") > 0.0,
        "the faults reached the daemon"
    );
    // tonic reports its own client timeout as CANCELLED ("Timeout expired").
    let timed_out = ["CANCELLED", "DEADLINE_EXCEEDED"]
        .iter()
        .map(|code| {
            d.metric_with(
                "kbq_bigquery_errors_total",
                &["rpc=\"FlushRows\"", &format!("code=\"{code}\"")],
            )
        })
        .sum::<f64>();
    assert!(
        timed_out > 0.0,
        "a flush answered after the client timeout is counted as timed out: {:?}",
        d.http_get("/metrics")
            .1
            .lines()
            .filter(|l| l.starts_with("kbq_bigquery_errors_total"))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        d.metric("kbq_rewound_records_total"),
        0.0,
        "nothing rewound"
    );
    assert_healthy(&mut d, 3 + 3 * 10 * s as usize);
    assert!(d.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
}

/// Runs the daemon with FlushRows failing until every partition's checkpoint covers all that was
/// produced while no flush succeeded (`f < K`), then kills it. Returns each partition's
/// checkpoint `(K, stream, f)`.
fn committed_but_never_flushed(
    f: &Fixture,
    group: &str,
    config: &std::path::Path,
) -> Vec<(i32, i64, String, i64)> {
    let mut d = Daemon::start(config);
    f.produce(3_000);
    f.wait_exactly_once(Duration::from_secs(120));
    f.emulator
        .faults
        .install(rules(
            r#"[{"rpc":"FlushRows","action":{"fail":{"code":"UNAVAILABLE"}}}]"#,
        ))
        .expect("install");
    f.produce(2_000);
    let ends = produced_ends(f);
    let mut found = Vec::new();
    wait_until(
        Duration::from_secs(120),
        "checkpoints covering the unflushed records",
        || {
            let cps = f.checkpoints(group);
            found.clear();
            for (p, (k, meta)) in cps {
                if let CommitMetadata::ExactlyOnce {
                    stream: Some(stream),
                    visible_through,
                    ..
                } = meta
                    && ends.get(&(p as i64)) == Some(&k)
                    && visible_through.0 < k
                {
                    found.push((p, k, stream.as_str().to_string(), visible_through.0));
                }
            }
            found.len() == f.partitions as usize
        },
    );
    d.kill();
    f.emulator.faults.clear();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn checkpointed_streams_finalized_or_expired_behind_a_crashed_daemon_are_rewound_and_counted()
{
    let f = Fixture::new(2).await;
    let group = unique_name("lost-rewind");
    let config = f.config_with(
        &group,
        &Tweaks {
            recovery: vec!["  lost_stream: rewind".into()],
            ..Tweaks::default()
        },
    );
    let checkpoints = committed_but_never_flushed(&f, &group, &config);
    let before = f.visible();
    let mut window = 0;
    for (p, k, stream, visible_through) in &checkpoints {
        let name = f.stream_name(stream);
        if *p == 0 {
            f.emulator.store.finalize_now(&name).expect("finalize");
        } else {
            f.emulator.store.expire_now(&name).expect("expire");
        }
        window += k - visible_through;
    }
    let mut d = Daemon::start(&config);
    f.produce(500);
    // The window was never flushed, so the rewind re-delivers only invisible rows: exact.
    f.wait_exactly_once(Duration::from_secs(120));
    let rewound = rewinds(&d);
    assert_eq!(rewound.len(), 2, "one rewind per lost stream: {rewound:?}");
    for (p, k, _, visible_through) in &checkpoints {
        assert!(
            rewound.contains(&(*p as i64, *visible_through, *k)),
            "partition {p} rewound [{visible_through}, {k}): {rewound:?}"
        );
    }
    assert_eq!(d.metric("kbq_rewound_records_total"), window as f64);
    assert!(before.len() < f.visible().len());
    assert_healthy(&mut d, 4);
    assert!(d.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_lost_checkpointed_stream_is_resolved_exactly_from_the_metadata_columns() {
    let f = Fixture::new(2).await;
    let group = unique_name("lost-resolve");
    let config = f.config_with(
        &group,
        &Tweaks {
            recovery: vec!["  lost_stream: resolve".into()],
            ..Tweaks::default()
        },
    );
    let checkpoints = committed_but_never_flushed(&f, &group, &config);
    for (p, _, stream, _) in &checkpoints {
        let name = f.stream_name(stream);
        if *p == 0 {
            f.emulator.store.expire_now(&name).expect("expire");
        } else {
            f.emulator.store.finalize_now(&name).expect("finalize");
        }
    }
    let mut d = Daemon::start(&config);
    f.produce(500);
    f.wait_exactly_once(Duration::from_secs(120));
    assert_eq!(d.metric("kbq_rewound_records_total"), 0.0);
    assert_eq!(
        d.logged("resolved from the table").len(),
        2,
        "both partitions resolved"
    );
    assert_healthy(&mut d, 4);
    assert!(d.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn streams_finalized_or_expired_under_a_running_daemon_cost_at_most_the_counted_window() {
    let f = Fixture::new(2).await;
    let group = unique_name("lost-live");
    let config = f.config_with(
        &group,
        &Tweaks {
            recovery: vec!["  lost_stream: rewind".into()],
            ..Tweaks::default()
        },
    );
    let mut d = Daemon::start(&config);
    let producer = BackgroundProducer::start(f.source.clone(), 20, Duration::from_millis(50));
    progress(&f, 500, "before the streams are taken away");
    // The stream of each partition's latest checkpoint (its current stream while it runs).
    let mut taken = BTreeSet::new();
    wait_until(
        Duration::from_secs(60),
        "checkpoints naming streams",
        || {
            let cps = f.checkpoints(&group);
            for (p, (_, meta)) in cps {
                if let CommitMetadata::ExactlyOnce {
                    stream: Some(s), ..
                } = meta
                    && !taken.iter().any(|(q, _)| *q == p)
                {
                    let name = f.stream_name(s.as_str());
                    if p == 0 {
                        f.emulator.store.finalize_now(&name).expect("finalize");
                    } else {
                        f.emulator.store.expire_now(&name).expect("expire");
                    }
                    taken.insert((p, s.as_str().to_string()));
                }
            }
            taken.len() == 2
        },
    );
    progress(&f, 500, "after the streams were taken away");
    producer.stop();
    let expected = f.expected();
    let windows = rewinds(&d);
    let v = f.wait_for(Duration::from_secs(120), |v| {
        expected.iter().all(|p| v.contains_key(p))
    });
    // Duplicates only inside a counted rewind window, and no more than its size.
    let mut dupes = 0usize;
    for ((p, o), n) in &v {
        if *n > 1 {
            assert!(
                windows
                    .iter()
                    .any(|(q, from, to)| q == p && from <= o && o < to),
                "duplicate ({p}, {o}) outside every rewind window {windows:?}"
            );
            dupes += n - 1;
        }
    }
    let counted: i64 = windows.iter().map(|(_, from, to)| to - from).sum();
    assert!(
        dupes as i64 <= counted,
        "{dupes} duplicates > {counted} counted"
    );
    assert_eq!(d.metric("kbq_rewound_records_total"), counted as f64);
    let seen: BTreeSet<Position> = v.keys().copied().collect();
    assert!(expected.is_subset(&seen), "records lost");
    assert!(seen.is_subset(&expected), "rows that were never produced");
    eprintln!("live lost streams: {dupes} duplicates within {counted} counted rewound records");
    assert_healthy(&mut d, 10);
    assert!(d.terminate().success());
}

/// A partition's live stream is finalized behind the running daemon while the writer
/// is idle, so the checkpoint cycle's FlushRows (not an append) is the first call to meet it.
/// The partition must ask the group whether it still owns it and recover, as a writer that meets
/// the finalized stream on an append does; it stopped for good before.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_live_stream_finalized_and_met_first_by_a_flush_is_recovered() {
    let f = Fixture::new(1).await;
    let group = unique_name("flush-finalized");
    let config = f.config(&group);
    let mut d = Daemon::start(&config);
    f.produce(200);
    f.wait_exactly_once(Duration::from_secs(60));
    // Commits land, flushes fail: the checkpoint names the live stream with rows in doubt.
    f.emulator
        .faults
        .install(rules(
            r#"[{"rpc":"FlushRows","action":{"fail":{"code":"UNAVAILABLE"}}}]"#,
        ))
        .expect("install");
    f.produce(100);
    let end = produced_ends(&f)[&0];
    let mut stream = String::new();
    wait_until(
        Duration::from_secs(60),
        "a checkpoint with a pending flush",
        || {
            if let Some((
                k,
                CommitMetadata::ExactlyOnce {
                    stream: Some(s),
                    visible_through,
                    ..
                },
            )) = f.checkpoints(&group).get(&0)
                && *k == end
                && visible_through.0 < end
            {
                stream = s.as_str().to_string();
                return true;
            }
            false
        },
    );
    // The writer is idle (nothing more produced): the next cycle's flush meets the finalized
    // stream first.
    f.emulator
        .store
        .finalize_now(&f.stream_name(&stream))
        .expect("finalize");
    f.emulator.faults.clear();
    wait_until(
        Duration::from_secs(30),
        "the flush to meet the finalized stream",
        || !d.logged("zombie writer stopped").is_empty(),
    );
    assert!(
        d.logged("own stream finalized by another owner").is_empty(),
        "an append met the finalized stream first: the test proved nothing"
    );
    f.produce(100);
    f.wait_exactly_once(Duration::from_secs(60));
    assert_healthy(&mut d, 3);
    assert!(d.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
}

/// The fenced replica of docs/design-changes.md (6), with processes: replica `a` is
/// frozen (SIGSTOP) past its session timeout in the middle of its recovery, `b` takes the
/// partition over, recovers, writes and rests at `f == K` on its own stream; then `a` resumes
/// (SIGCONT). Whatever `a` does before it learns that it was fenced, it must not finalize any
/// stream (none of its commits ever lands), and `b` must never find its live stream finalized.
///
/// The recovery FlushRows `a` sends before the freeze is held by the emulator until after `b`
/// finalized that stream, so `a` wakes up to STREAM_FINALIZED, and may re-read the checkpoint
/// (now `b`'s resting one, naming `b`'s live stream) and race its stale membership to a commit.
/// Whether it gets that far is librdkafka's timing: in the runs on this machine its session timer
/// fires as `a` wakes, and `a` releases the partition as lost before it acts on the answer. The
/// assertions hold either way; the re-read-and-commit race itself is covered without timing by
/// the simulation (docs/simulation.md) and the protocol's unit tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_replica_frozen_past_its_session_timeout_never_finalizes_the_new_owners_stream() {
    let f = Fixture::new(1).await;
    let group = unique_name("frozen");
    let config = f.config(&group);
    let checkpoints = committed_but_never_flushed(&f, &group, &config);
    let (_, _, s0, _) = checkpoints[0].clone();
    let s0 = f.stream_name(&s0);
    const HOLD_MS: u64 = 20_000;
    f.emulator
        .faults
        .install(rules(&format!(
            r#"[{{"rpc":"FlushRows","times":1,"action":{{"delay":{{"ms":{HOLD_MS}}}}}}}]"#
        )))
        .expect("install the hold");
    let mut a = Daemon::start_named(&config, "a");
    wait_until(Duration::from_secs(60), "a's recovery flush", || {
        f.emulator
            .faults
            .list()
            .iter()
            .map(|r| r.fired)
            .sum::<u64>()
            > 0
    });
    assert!(!a.logged("partition assigned").is_empty());
    // What a has done when it freezes: it owns the partition, its flush is not answered.
    assert_eq!(a.metric("kbq_partitions_assigned"), 1.0);
    assert_eq!(a.metric("kbq_flush_latency_seconds_count"), 0.0);
    a.freeze();
    let frozen_at = Instant::now();

    // b gets the partition once a's session (6 s) expired, flushes s0 itself, writes on its
    // own stream, finalizes s0 after its own commit landed, and rests at f == K.
    let mut b = Daemon::start_named(&config, "b");
    f.produce(500);
    f.wait_exactly_once(Duration::from_secs(120));
    let end = produced_ends(&f)[&0];
    let mut resting = None;
    wait_until(
        Duration::from_secs(60),
        "b at rest on its own stream",
        || {
            resting = match f.checkpoints(&group).remove(&0) {
                Some((
                    k,
                    CommitMetadata::ExactlyOnce {
                        stream: Some(s),
                        visible_through,
                        ..
                    },
                )) if k == end && visible_through.0 == end => Some(f.stream_name(s.as_str())),
                _ => None,
            }
            .filter(|s| *s != s0);
            resting.is_some()
        },
    );
    let resting = resting.expect("b's resting stream");
    let s0_phase = f.emulator.store.get_write_stream(&s0).expect("s0").phase;
    assert_ne!(s0_phase, StreamPhase::Active, "b finalized s0");
    assert!(
        frozen_at.elapsed() < Duration::from_millis(HOLD_MS),
        "b rested only after a's held flush was answered: the scenario did not happen"
    );
    // a's flush is answered (STREAM_FINALIZED) while a is still frozen; then a wakes up.
    std::thread::sleep(Duration::from_millis(HOLD_MS + 2_000).saturating_sub(frozen_at.elapsed()));
    a.resume();
    let resumed_at = Instant::now();
    // What a does between waking up and learning that it was fenced is what this test is about:
    // wait until that is over, not for a fixed time in which a may have done nothing. Over means
    // a took its held flush's answer (the FlushRows histogram counts it whatever the answer),
    // observed the rebalance that took the partition away (revoked or lost) and released the
    // partition (its handoff ended).
    wait_until(
        Duration::from_secs(60),
        "a to take its flush's answer, observe that it was fenced and release the partition",
        || {
            a.metric("kbq_flush_latency_seconds_count") >= 1.0
                && a.metric_with("kbq_rebalances_total", &[r#"kind="revoke""#])
                    + a.metric_with("kbq_rebalances_total", &[r#"kind="lost""#])
                    >= 1.0
                && a.metric("kbq_partitions_assigned") == 0.0
        },
    );
    let settled_after = resumed_at.elapsed();

    let live = f
        .emulator
        .store
        .get_write_stream(&resting)
        .expect("b's stream")
        .phase;
    let a_finalized = a.metric("kbq_streams_finalized_total");
    f.produce(500);
    f.wait_exactly_once(Duration::from_secs(120));
    eprintln!(
        "frozen replica: a re-read the checkpoint {} time(s), was fenced {} time(s), and was done {:?} after it resumed",
        a.logged("partition assigned").len(),
        a.logged("partition revoked").len(),
        settled_after,
    );
    assert_eq!(
        live,
        StreamPhase::Active,
        "b's live stream {resting} is still open after a resumed"
    );
    assert_eq!(a_finalized, 0.0, "the fenced replica finalized a stream");
    assert!(
        b.logged("own stream finalized by another owner").is_empty()
            && b.logged("zombie writer stopped").is_empty(),
        "b was made a zombie"
    );
    assert_healthy(&mut b, 10);
    assert!(a.terminate().success());
    assert!(b.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
}

// ---------------------------------------------------------------------------------------------
// 4. The seed scenario of the Flink connector, replayed with processes.

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn the_seed_scenario_replayed_every_committed_checkpoint_flushes_and_the_pipeline_continues()
{
    let f = Fixture::new(3).await;
    let group = unique_name("seed");
    let config = f.config(&group);
    // A checkpoint is committed; the next one is snapshotted (committed to Kafka) but its flush
    // never completes; the process dies.
    let checkpoints = committed_but_never_flushed(&f, &group, &config);
    // On restart the writers hit ALREADY_EXISTS on their first append, and the first flushes
    // fail once more.
    f.emulator
        .faults
        .install(rules(
            r#"[{"rpc":"AppendRows","action":{"fail":{"code":"ALREADY_EXISTS","in_stream":true}},"times":3},
                {"rpc":"FlushRows","action":{"fail":{"code":"UNAVAILABLE"}},"times":3}]"#,
        ))
        .expect("install");
    let mut d = Daemon::start(&config);
    f.produce(1_000);
    f.wait_exactly_once(Duration::from_secs(120));
    let fired: Vec<u64> = f.emulator.faults.list().iter().map(|r| r.fired).collect();
    assert_eq!(fired, vec![3, 3], "every injected fault acted");
    assert_eq!(
        d.logged("offsets conflict with ours").len(),
        3,
        "each writer moved to a new stream once"
    );
    // Every checkpoint left behind was flushed by the recovery: nothing was rewound.
    assert_eq!(d.metric("kbq_rewound_records_total"), 0.0);
    assert!(
        d.logged("committed checkpoint flushed").len() >= checkpoints.len(),
        "every committed checkpoint re-flushed"
    );
    // And the pipeline keeps going: more records, more checkpoints.
    let cycles = d.metric("kbq_checkpoints_total");
    f.produce(1_000);
    f.wait_exactly_once(Duration::from_secs(60));
    assert!(d.metric("kbq_checkpoints_total") > cycles);
    assert_healthy(&mut d, 12);
    assert!(d.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
}

// ---------------------------------------------------------------------------------------------
// 5. Poison records.

/// Writer schema 2: schema 1 plus a nullable date.
const SCHEMA_WITH_DAY: &str = r#"{
  "type": "record", "name": "Order", "namespace": "test",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "created", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "note", "type": ["null", "string"], "default": null},
    {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}], "default": null}
  ]
}"#;

#[allow(deprecated)]
fn encode_with_day(schema: &Schema, id: i64, day: i32) -> Vec<u8> {
    let value = Value::Record(vec![
        ("id".into(), Value::Long(id)),
        ("customer".into(), Value::String("c".into())),
        (
            "amount".into(),
            Value::Decimal(apache_avro::Decimal::from(1i64.to_be_bytes().to_vec())),
        ),
        (
            "created".into(),
            Value::TimestampMicros(1_700_000_000_000_000),
        ),
        ("note".into(), Value::Union(0, Box::new(Value::Null))),
        ("day".into(), Value::Union(1, Box::new(Value::Date(day)))),
    ]);
    apache_avro::to_avro_datum(schema, value).expect("encode avro")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn poison_records_go_to_the_dead_letter_topic_with_reasons_and_never_stall_a_partition() {
    let s = scale();
    // Schema ids 1 and 2; any other id is unknown (404).
    let (registry, _reg) = Registry::serve(
        [(1, SCHEMA.to_string()), (2, SCHEMA_WITH_DAY.to_string())].into(),
        None,
    )
    .await;
    let f = Fixture::with(SinkOptions {
        framing: Some(1),
        ..SinkOptions::partitions(2)
    })
    .await;
    // The table exists beforehand (registry input does not create it) with a short `customer`
    // column: BigQuery itself rejects longer values as row errors.
    let table_schema: TableSchema = serde_json::from_value(serde_json::json!({"fields": [
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "customer", "type": "STRING", "mode": "REQUIRED", "maxLength": "20"},
        {"name": "amount", "type": "NUMERIC", "mode": "REQUIRED", "precision": "12", "scale": "2"},
        {"name": "created", "type": "TIMESTAMP", "mode": "REQUIRED"},
        {"name": "note", "type": "STRING"},
        {"name": "day", "type": "DATE"},
        {"name": "kafka_topic", "type": "STRING"},
        {"name": "kafka_partition", "type": "INTEGER"},
        {"name": "kafka_offset", "type": "INTEGER"}
    ]}))
    .expect("table schema");
    f.create_table(table_schema);
    let config = f.config_with(
        &unique_name("poison"),
        &Tweaks {
            registry_url: Some(format!("http://{registry}")),
            ..Tweaks::default()
        },
    );
    let with_day = Schema::parse_str(SCHEMA_WITH_DAY).expect("schema 2");
    let mut d = Daemon::start(&config);
    // ~1 % bad records of five kinds, interleaved with good ones on both partitions.
    let kinds = [
        "bad_magic",
        "unknown_schema",
        "truncated",
        "date",
        "too_long",
    ];
    let mut bad: BTreeMap<Position, &str> = BTreeMap::new();
    for round in 0..(10 * s) {
        f.produce(100);
        let partition = (round % 2) as i32;
        let kind = kinds[(round % 5) as usize];
        let payload = match kind {
            "bad_magic" => {
                let mut p = confluent(1, &encode(&f.schema, round));
                p[0] = 7;
                p
            }
            "unknown_schema" => confluent(99, &encode(&f.schema, round)),
            "truncated" => {
                let body = encode(&f.schema, round);
                confluent(1, &body[..body.len() / 2])
            }
            // Year 29 000: outside BigQuery's DATE range.
            "date" => confluent(2, &encode_with_day(&with_day, round, 10_000_000)),
            _ => {
                let mut schema1 = encode(&f.schema, round);
                // Re-encode with a 30-character customer: valid Avro, rejected by the table.
                schema1.clear();
                let value = Value::Record(vec![
                    ("id".into(), Value::Long(round)),
                    ("customer".into(), Value::String("x".repeat(30))),
                    (
                        "amount".into(),
                        Value::Decimal(apache_avro::Decimal::from(1i64.to_be_bytes().to_vec())),
                    ),
                    (
                        "created".into(),
                        Value::TimestampMicros(1_700_000_000_000_000),
                    ),
                    ("note".into(), Value::Union(0, Box::new(Value::Null))),
                ]);
                #[allow(deprecated)]
                schema1.extend(apache_avro::to_avro_datum(&f.schema, value).expect("encode"));
                confluent(1, &schema1)
            }
        };
        let offsets = f.source.produce_raw(partition, &[payload]);
        bad.insert((partition as i64, offsets[0]), kind);
        // A good record with schema 2 (a date in range) right after each bad one.
        let good = confluent(2, &encode_with_day(&with_day, 1_000_000 + round, 19_000));
        let offsets = f.source.produce_raw(partition, &[good]);
        f.source.expect([(partition as i64, offsets[0])]);
    }
    f.produce(100);
    f.wait_exactly_once(Duration::from_secs(120));
    let dead = f.dead_letters(bad.len());
    let got: BTreeMap<Position, (String, String)> = dead
        .iter()
        .map(|(p, o, class, reason)| ((*p, *o), (class.clone(), reason.clone())))
        .collect();
    assert_eq!(
        got.keys().copied().collect::<BTreeSet<_>>(),
        bad.keys().copied().collect::<BTreeSet<_>>(),
        "every bad record dead-lettered, nothing else: {dead:?}"
    );
    for (pos, kind) in &bad {
        let (class, reason) = &got[pos];
        assert!(!reason.is_empty(), "{kind} at {pos:?} has a reason");
        let expected_class = match *kind {
            "bad_magic" => "bad_magic",
            "unknown_schema" => "unknown_schema",
            "truncated" => "malformed_avro",
            "date" => "out_of_range",
            _ => "row_rejected",
        };
        assert_eq!(class, expected_class, "{kind} at {pos:?}: {reason}");
    }
    assert_eq!(dead.len(), bad.len(), "no record dead-lettered twice");
    assert_healthy(&mut d, 4);
    assert!(d.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
}

/// `kafka.topic_pattern` is anchored only at the start, so the fixture's topic name as a
/// pattern also matches its dead-letter topic `{topic}-dlq`. The sink must never consume that
/// topic: one poison record is one dead letter, not a loop that dead-letters its own dead
/// letters without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_pattern_that_matches_the_dead_letter_topic_never_consumes_it() {
    let f = Fixture::new(2).await;
    let config = f.config_with(
        &unique_name("dlq-pattern"),
        &Tweaks {
            topic_pattern: Some(f.topic.clone()),
            ..Tweaks::default()
        },
    );
    f.produce(100);
    let mut poison = encode(&f.schema, 0);
    poison.truncate(3);
    let offsets = f.source.produce_raw(0, &[poison]);
    f.produce(100);
    let mut d = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));
    let dead = f.dead_letters(1);
    assert_eq!(
        dead.iter().map(|(p, o, _, _)| (*p, *o)).collect::<Vec<_>>(),
        vec![(0, offsets[0])],
        "one dead letter, for the poison record: {dead:?}"
    );
    // Twenty checkpoint intervals more: a consumed dead-letter topic would have fed the record
    // back many times by now.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        f.dead_letter_count(),
        1,
        "the dead-letter topic holds one record"
    );
    assert!(
        !d.logged("config warning").is_empty(),
        "the pattern matching the dead-letter topic is warned about at start"
    );
    assert_healthy(&mut d, 4);
    assert!(d.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
}

// ---------------------------------------------------------------------------------------------
// 6. A row BigQuery rejects in the middle of a request: its request's other rows keep the
//    checkpoint where it was.

/// The fixture's table with a `customer STRING(20)`: BigQuery itself rejects a longer value as a
/// row error, in the middle of an AppendRows request.
fn short_customer_table() -> TableSchema {
    serde_json::from_value(serde_json::json!({"fields": [
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "customer", "type": "STRING", "mode": "REQUIRED", "maxLength": "20"},
        {"name": "amount", "type": "NUMERIC", "mode": "REQUIRED", "precision": "12", "scale": "2"},
        {"name": "created", "type": "TIMESTAMP", "mode": "REQUIRED"},
        {"name": "note", "type": "STRING"},
        {"name": "kafka_topic", "type": "STRING"},
        {"name": "kafka_partition", "type": "INTEGER"},
        {"name": "kafka_offset", "type": "INTEGER"}
    ]}))
    .expect("table schema")
}

/// Raw Avro of the fixture's schema with a 30-character customer: valid Avro, refused by the
/// table.
#[allow(deprecated)]
fn too_long_customer(schema: &Schema, id: i64) -> Vec<u8> {
    let value = Value::Record(vec![
        ("id".into(), Value::Long(id)),
        ("customer".into(), Value::String("x".repeat(30))),
        (
            "amount".into(),
            Value::Decimal(apache_avro::Decimal::from(1i64.to_be_bytes().to_vec())),
        ),
        (
            "created".into(),
            Value::TimestampMicros(1_700_000_000_000_000),
        ),
        ("note".into(), Value::Union(0, Box::new(Value::Null))),
    ]);
    apache_avro::to_avro_datum(schema, value).expect("encode avro")
}

/// One partition holding 10 good records, one the table rejects (offset 10) and 10 good ones,
/// produced before any daemon runs so that they are one burst.
async fn good_bad_good() -> Fixture {
    let f = Fixture::new(1).await;
    f.create_table(short_customer_table());
    f.produce(10);
    let bad = f.source.produce_raw(0, &[too_long_customer(&f.schema, 10)]);
    assert_eq!(bad, vec![10]);
    f.produce(10);
    f
}

/// Waits until the one dead letter of [`good_bad_good`] is there.
fn assert_one_dead_letter(f: &Fixture) {
    let dead = f.dead_letters(1);
    assert_eq!(
        dead.iter()
            .map(|(p, o, class, _)| (*p, *o, class.as_str()))
            .collect::<Vec<_>>(),
        vec![(0, 10, "row_rejected")],
        "{dead:?}"
    );
}

/// The committed offset of partition 0 once it reaches `want`, or what it is after `timeout`.
fn committed_offset(f: &Fixture, group: &str, want: i64, timeout: Duration) -> Option<i64> {
    let started = Instant::now();
    loop {
        let k = f.checkpoints(group).get(&0).map(|(k, _)| *k);
        if k == Some(want) || started.elapsed() > timeout {
            return k;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_row_rejected_mid_request_keeps_the_checkpoint_at_the_request_end_and_a_restart_duplicates_nothing()
 {
    let f = good_bad_good().await;
    let group = unique_name("row-error");
    let config = f.config(&group);
    let mut d = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(60));
    assert_one_dead_letter(&f);
    // The rejected row lowered the request's Kafka offset to 11 before the fix: rows 11..20
    // visible, and re-delivered by the next owner.
    assert_eq!(
        committed_offset(&f, &group, 21, Duration::from_secs(20)),
        Some(21),
        "the durable checkpoint covers the whole request"
    );
    assert!(d.terminate().success());
    let mut d = Daemon::start(&config);
    f.produce(5);
    f.wait_exactly_once(Duration::from_secs(60));
    assert_healthy(&mut d, 2);
    assert!(d.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
    assert_eq!(committed_offset(&f, &group, 26, Duration::ZERO), Some(26));
}

/// At-least-once mode: the same row error, with several requests in flight on the
/// `_default` stream, followed by a clean SIGTERM and a restart. Nothing may be lost, and with
/// no crash nothing may be written twice: the requests appended behind the failed one are not
/// an offset conflict, and the committed offset is not lowered by the rejected row.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn at_least_once_a_row_rejected_mid_request_then_sigterm_and_restart_writes_nothing_twice() {
    let f = good_bad_good().await;
    let group = unique_name("alo-row-error");
    let config = f.config_with(
        &group,
        &Tweaks {
            delivery: Some("at_least_once"),
            // Several requests in flight: the rejected row's request is followed by others.
            writer: vec!["  max_rows_per_request: 5".into()],
            ..Tweaks::default()
        },
    );
    let mut d = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(60));
    assert_one_dead_letter(&f);
    assert_eq!(
        committed_offset(&f, &group, 21, Duration::from_secs(20)),
        Some(21),
        "the committed offset covers every appended record"
    );
    assert!(d.terminate().success());
    assert!(
        d.logged("offsets conflict with ours").is_empty(),
        "the _default stream has no offsets to conflict with"
    );
    let mut d = Daemon::start(&config);
    f.produce(5);
    f.wait_exactly_once(Duration::from_secs(60));
    assert_healthy(&mut d, 2);
    assert!(d.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
    assert_eq!(committed_offset(&f, &group, 26, Duration::ZERO), Some(26));
}

// ---------------------------------------------------------------------------------------------
// 6b. Stops and outages: a denied call is retried, never a permanent stop, and a stop is
//     answered during an outage.

/// A writer waiting for a schema the registry does not know yet (a 404 within the
/// grace) must still answer a stop, or the shutdown's final cycle waits for its deadline for
/// every partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_writer_waiting_for_its_schema_does_not_hold_up_the_shutdown() {
    let (registry, _reg) = Registry::serve([(1, SCHEMA.to_string())].into(), None).await;
    let f = Fixture::with(SinkOptions {
        framing: Some(1),
        ..SinkOptions::partitions(2)
    })
    .await;
    f.create_table(short_customer_table());
    let group = unique_name("stuck-schema");
    let config = f.config_with(
        &group,
        &Tweaks {
            registry_url: Some(format!("http://{registry}")),
            // An unknown id waits for this long before it is a bad record.
            not_found_grace: "1h",
            ..Tweaks::default()
        },
    );
    let mut d = Daemon::start(&config);
    f.produce(100);
    f.wait_exactly_once(Duration::from_secs(60));
    // Partition 0's writer now waits for schema 99; partition 1 goes on.
    f.source
        .produce_raw(0, &[confluent(99, &encode(&f.schema, 1_000))]);
    wait_until(Duration::from_secs(30), "the writer to wait", || {
        !d.logged("schema unavailable, waiting").is_empty()
    });
    let stopping = Instant::now();
    let status = d.terminate();
    let took = stopping.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        d.logged("shutdown deadline passed").is_empty(),
        "the shutdown waited for its deadline"
    );
    assert!(
        took < Duration::from_secs(10),
        "shutdown took {took:?} (deadline 20 s)"
    );
    assert!(
        !d.logged("final checkpoint done").is_empty(),
        "every partition got its final checkpoint"
    );
    assert_exactly_once(&f.visible(), &f.expected());
}

/// FlushRows failing transiently during the shutdown's final cycles is retried with
/// a backoff, not in a tight loop until the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_flush_failing_during_shutdown_is_retried_with_a_backoff() {
    let f = Fixture::new(1).await;
    let config = f.config_with(
        &unique_name("shutdown-flush"),
        &Tweaks {
            shutdown_deadline: "12s",
            ..Tweaks::default()
        },
    );
    let mut d = Daemon::start(&config);
    f.produce(100);
    f.wait_exactly_once(Duration::from_secs(60));
    let ids = f
        .emulator
        .faults
        .install(rules(
            r#"[{"rpc":"FlushRows","action":{"fail":{"code":"UNAVAILABLE"}}}]"#,
        ))
        .expect("install");
    f.produce(100);
    wait_until(Duration::from_secs(30), "a flush to fail", || {
        f.emulator
            .faults
            .list()
            .iter()
            .any(|r| r.id == ids[0] && r.fired > 0)
    });
    let before = f.emulator.faults.list()[0].fired;
    let status = d.terminate();
    let during = f.emulator.faults.list()[0].fired - before;
    eprintln!("{during} FlushRows calls during a 12 s shutdown");
    assert!(status.success(), "{status:?}");
    // 0.2 s, 0.4 s, … over 12 s is a handful; a tight loop makes hundreds.
    assert!(during <= 20, "{during} flushes during the shutdown");
}

/// PERMISSION_DENIED on CreateWriteStream and UNAUTHENTICATED on AppendRows (an IAM
/// change, a credential being rotated) are waited out with a long backoff while readiness is
/// false, not a permanent stop of the partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn denied_stream_creation_and_appends_are_retried_while_not_ready() {
    let f = Fixture::new(1).await;
    // The writer's stream cannot be created twice, then its first appends are refused twice.
    f.emulator
        .faults
        .install(rules(
            r#"[{"rpc":"CreateWriteStream","action":{"fail":{"code":"PERMISSION_DENIED"}},"times":2},
                {"rpc":"AppendRows","action":{"fail":{"code":"UNAUTHENTICATED"}},"times":2}]"#,
        ))
        .expect("install");
    let mut d = Daemon::start(&f.config(&unique_name("denied")));
    f.produce(50);
    wait_until(
        Duration::from_secs(30),
        "readiness false while retrying",
        || {
            let (status, body) = d.http_get("/readyz");
            status == 503 && body.contains("permission, credential or precondition")
        },
    );
    assert_eq!(d.metric("kbq_partitions_retrying"), 1.0);
    f.wait_exactly_once(Duration::from_secs(90));
    let fired: Vec<u64> = f.emulator.faults.list().iter().map(|r| r.fired).collect();
    assert_eq!(fired, vec![2, 2], "every injected fault acted");
    wait_until(Duration::from_secs(30), "readiness again", || {
        d.http_get("/readyz").0 == 200
    });
    assert_eq!(d.metric("kbq_partitions_retrying"), 0.0);
    assert_healthy(&mut d, 3);
    assert!(d.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
}

/// The flush: a FlushRows that BigQuery denies (an IAM change) stays pending and is
/// retried every cycle, and while it is denied the partition counts in `kbq_partitions_retrying`
/// and readiness is false: committed rows that cannot become visible are not a healthy sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_denied_flush_is_retried_while_not_ready() {
    let f = Fixture::new(1).await;
    let ids = f
        .emulator
        .faults
        .install(rules(
            r#"[{"rpc":"FlushRows","action":{"fail":{"code":"PERMISSION_DENIED"}}}]"#,
        ))
        .expect("install");
    let mut d = Daemon::start(&f.config(&unique_name("denied-flush")));
    f.produce(50);
    wait_until(
        Duration::from_secs(30),
        "readiness false while the flush is denied",
        || {
            let (status, body) = d.http_get("/readyz");
            status == 503 && body.contains("permission, credential or precondition")
        },
    );
    assert_eq!(d.metric("kbq_partitions_retrying"), 1.0);
    assert!(f.visible().is_empty(), "nothing visible while denied");
    assert!(f.emulator.faults.remove(ids[0]));
    f.wait_exactly_once(Duration::from_secs(60));
    wait_until(Duration::from_secs(30), "readiness again", || {
        d.http_get("/readyz").0 == 200
    });
    assert_eq!(d.metric("kbq_partitions_retrying"), 0.0);
    assert!(d.terminate().success());
    assert_exactly_once(&f.visible(), &f.expected());
}

// ---------------------------------------------------------------------------------------------
// 7. A replica dies inside its handoff.

/// The revoke callback's handoff waits for the writer's appends in flight before its one commit.
/// Slowing every AppendRows answer keeps replica `a` inside that wait when `b` joins; `a` is
/// killed there. Whatever `a` appended but did not commit must not become visible, and `b` must
/// re-deliver it exactly once from the last committed checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_replica_killed_during_its_handoff_loses_and_duplicates_nothing() {
    let f = Fixture::new(4).await;
    let config = f.config(&unique_name("handoff-kill"));
    f.produce(2_000);
    let mut a = Daemon::start_named(&config, "a");
    progress(&f, 500, "with replica a");
    f.emulator
        .faults
        .install(rules(
            r#"[{"rpc": "AppendRows", "action": {"delay": {"ms": 4000}}}]"#,
        ))
        .expect("install the delay");
    f.produce(4_000);
    // a's writers have appends in flight against the slow answers.
    wait_until(Duration::from_secs(60), "appends in flight at a", || {
        a.metric("kbq_inflight_requests") > 0.0
    });
    let mut b = Daemon::start_named(&config, "b");
    wait_until(Duration::from_secs(90), "a's handoff to begin", || {
        !a.logged("partition revoked: handing off").is_empty()
    });
    a.kill();
    assert!(
        a.logged("partition handed off").is_empty(),
        "a finished a handoff before it was killed: the kill did not land inside the handoff"
    );
    let fired: u64 = f.emulator.faults.list().iter().map(|r| r.fired).sum();
    assert!(fired > 0, "the AppendRows delay never fired");
    f.emulator.faults.clear();
    f.wait_exactly_once(Duration::from_secs(180));
    assert_healthy(&mut b, 50);
    let status = b.terminate();
    assert!(status.success(), "b leaves cleanly: {status:?}");
    assert_exactly_once(&f.visible(), &f.expected());
}

// ---------------------------------------------------------------------------------------------
// 8. Retention deletes records the daemon has not read yet.

/// Where both policies start: one partition read far behind its end while appends hang, then
/// retention (delete-records) removes every record below [`LOG_START`], records the daemon has not
/// read, and the appends come back, so the daemon reads on into the gap.
async fn a_lagging_reader_meets_deleted_records(
    name: &str,
    recovery: Vec<String>,
) -> (Fixture, Daemon) {
    let f = Fixture::new(1).await;
    // A small memory budget and prefetch: while appends hang, the daemon reads a few hundred
    // records and stops, far behind the end of the partition.
    let tweaks = Tweaks {
        writer: vec![
            "  max_request_bytes: 64KiB".into(),
            "  max_inflight_bytes: 64KiB".into(),
            "  memory_limit: 64KiB".into(),
        ],
        recovery,
        ..Tweaks::default()
    };
    let config = f.config_with(&unique_name(name), &tweaks);
    let text = std::fs::read_to_string(&config).expect("config").replace(
        "    heartbeat.interval.ms: \"500\"\n",
        "    heartbeat.interval.ms: \"500\"\n    queued.max.messages.kbytes: \"1\"\n    max.partition.fetch.bytes: \"1024\"\n",
    );
    std::fs::write(&config, text).expect("config");
    f.produce(100);
    let d = Daemon::start_named(&config, name);
    f.wait_exactly_once(Duration::from_secs(120));
    f.emulator
        .faults
        .install(rules(
            r#"[{"rpc": "AppendRows", "action": {"delay": {"ms": 10000}}}]"#,
        ))
        .expect("install the delay");
    f.produce(20_000);
    // The daemon's appends hang against the delay, so it stops reading far behind the end.
    wait_until(
        Duration::from_secs(60),
        "appends in flight against the delay",
        || d.metric("kbq_inflight_requests") > 0.0,
    );
    // Retention (delete-records) removes everything below 15,000: records the daemon has not
    // read. Then the appends come back and the daemon reads on, into the gap.
    let mut delete = rdkafka::TopicPartitionList::new();
    delete
        .add_partition_offset(&f.topic, 0, rdkafka::Offset::Offset(LOG_START))
        .expect("offset");
    let admin = support::kafka::admin_client(&f.bootstrap);
    admin
        .delete_records(&delete, &rdkafka::admin::AdminOptions::new())
        .await
        .expect("delete records");
    f.emulator.faults.clear();
    (f, d)
}

/// The log start after the deletion; 20,100 records were produced.
const LOG_START: i64 = 15_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn records_deleted_past_a_lagging_position_fail_the_partition_closed_with_the_reason() {
    let (_f, mut d) = a_lagging_reader_meets_deleted_records("out-of-range", Vec::new()).await;
    wait_until(
        Duration::from_secs(120),
        "the partition to fail closed",
        || !d.logged("partition failed closed").is_empty(),
    );
    let failed = &d.logged("partition failed closed")[0];
    let reason = failed["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("below the log start 15000"),
        "the reason names the log start: {failed}"
    );
    let (status, body) = d.http_get("/readyz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("below the log start"), "{body}");
    assert_eq!(d.metric("kbq_partitions_failed"), 1.0);
    let status = d.terminate();
    assert!(status.success(), "a clean exit: {status:?}");
}

/// `recovery.on_out_of_range: earliest`: the partition continues at the log start. What the
/// daemon had read is visible exactly once, a prefix of the partition; every retained record is
/// visible exactly once; the skipped records, and only they, are counted as lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn under_earliest_records_deleted_past_a_lagging_position_are_skipped_and_counted() {
    let recovery = vec!["  on_out_of_range: earliest".to_string()];
    let (f, mut d) =
        a_lagging_reader_meets_deleted_records("out-of-range-earliest", recovery).await;
    let produced = 20_100;
    wait_until(
        Duration::from_secs(180),
        "every retained record visible",
        || {
            let retained = f.visible().keys().filter(|(_, o)| *o >= LOG_START).count();
            retained as i64 == produced - LOG_START
        },
    );
    let visible = f.visible();
    assert!(
        visible.values().all(|&n| n == 1),
        "a record written twice: {:?}",
        visible
            .iter()
            .filter(|(_, n)| **n > 1)
            .take(5)
            .collect::<Vec<_>>()
    );
    let read: Vec<i64> = (visible.keys().map(|(_, o)| *o))
        .filter(|o| *o < LOG_START)
        .collect();
    let p = read.len() as i64;
    assert_eq!(
        read,
        (0..p).collect::<Vec<_>>(),
        "what was read is a prefix"
    );
    assert!(
        p < LOG_START,
        "the daemon read everything before the deletion"
    );
    wait_until(Duration::from_secs(30), "the lost records counted", || {
        d.metric("kbq_lost_records_total") > 0.0
    });
    assert_eq!(d.metric("kbq_lost_records_total"), (LOG_START - p) as f64);
    assert_eq!(d.metric("kbq_partitions_failed"), 0.0);
    assert_eq!(
        d.logged("records deleted by retention before they were visible")
            .len(),
        1
    );
    let status = d.terminate();
    assert!(status.success(), "a clean exit: {status:?}");
}

// ---------------------------------------------------------------------------------------------
// 9. Start-up.

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_sigterm_while_the_table_read_is_retried_at_start_up_stops_the_daemon_promptly() {
    let f = Fixture::new(1).await;
    let config = f.config(&unique_name("startup-sigterm"));
    // The BigQuery endpoint points at a port nobody listens on: the start-up table read fails
    // and is retried (for about a minute) before the daemon would give up.
    let nowhere = format!("127.0.0.1:{}", support::daemon::free_port());
    let text = std::fs::read_to_string(&config)
        .expect("config")
        .replace(&f.emulator.addr.to_string(), &nowhere);
    std::fs::write(&config, text).expect("config");
    let mut d = Daemon::start_named(&config, "startup");
    d.ops_addr();
    // Well inside the retries of the table read.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        d.is_running(),
        "the daemon gave up on the table read already"
    );
    let signalled = Instant::now();
    // Kubernetes kills a pod 30 s after SIGTERM; the daemon must be gone long before.
    let status = d.terminate_within(Duration::from_secs(5));
    assert!(status.success(), "a clean exit: {status:?}");
    assert!(
        !d.logged("shutdown requested during start-up").is_empty(),
        "the daemon says why it left"
    );
    eprintln!("stopped {:?} after SIGTERM", signalled.elapsed());
}
