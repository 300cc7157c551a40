//! Routing end to end: several topics into several tables through the real binary, a real
//! Kafka broker and the emulator. Every record must be visible exactly once in the table its
//! topic is routed to — through a `{topic}` template (with the topic sanitised into a table id),
//! a route override with its own metadata columns, or a template of the route pattern's groups
//! and a route's own dataset — across a SIGKILL; a topic created while
//! the daemon runs under a pattern subscription gets its table created on assignment; and with a
//! Schema Registry a missing table is created from the latest schema of the topic's subject.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::kafka::unique_name;
use support::sink::{
    BackgroundProducer, Daemon, Fixture, KAFKA_COLUMNS, MetadataColumns, SCHEMA, SinkOptions,
    Tweaks,
};

/// The routed config's part every test shares: tables from the `{topic}` template, and topics
/// created while the daemon runs seen within a second.
fn routed(tweaks: Tweaks) -> Tweaks {
    Tweaks {
        bigquery_table: Some("{topic}"),
        kafka_properties: vec!["    topic.metadata.refresh.interval.ms: \"1000\"".into()],
        ..tweaks
    }
}

/// A fixture whose own topic is `topic`, with `partitions` partitions, routed to `table`.
async fn fixture(topic: &str, partitions: i32, table: &str) -> Fixture {
    Fixture::with(SinkOptions {
        topic: Some(topic.to_string()),
        table: Some(table.to_string()),
        ..SinkOptions::partitions(partitions)
    })
    .await
}

fn validate(config: &Path) {
    let out = std::process::Command::new(crate::support::daemon::binary())
        .args(["validate", "-c"])
        .arg(config)
        .output()
        .expect("run validate");
    assert!(
        out.status.success(),
        "validate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const AUDIT_COLS: MetadataColumns = MetadataColumns {
    topic: "src_topic",
    partition: "src_partition",
    offset: "src_offset",
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_topics_reach_their_routed_tables_exactly_once_across_a_sigkill() {
    let id = unique_name("r");
    // `.` and `-` are valid in topic names, not in table ids: the template sanitises them.
    let orders = format!("orders.v1-{id}");
    let f = fixture(&orders, 2, &orders.replace(['.', '-'], "_")).await;
    let orders = f.source.clone();
    let payments_topic = format!("payments_{id}");
    let payments = f.add_topic(
        &payments_topic,
        2,
        &payments_topic.replace('-', "_"),
        KAFKA_COLUMNS,
    );
    // The audit topic goes to a fixed table with other metadata columns (and a timestamp).
    let audit_table = format!("audit_all_{}", id.replace('-', "_"));
    let audit = f.add_topic(&format!("audit-{id}"), 2, &audit_table, AUDIT_COLS);
    let sources = [orders, payments, audit];
    let tables: Vec<&str> = sources.iter().map(|s| s.table()).collect();
    let config = f.config_with(
        &unique_name("g"),
        &routed(Tweaks {
            topics: sources.iter().map(|s| s.topic().to_string()).collect(),
            routes: vec![
                format!("  - topics: [\"{}\"]", sources[2].topic()),
                format!("    table: \"{audit_table}\""),
                "    metadata_columns:".into(),
                "      topic: src_topic".into(),
                "      partition: src_partition".into(),
                "      offset: src_offset".into(),
                "      timestamp: src_timestamp".into(),
            ],
            ..Tweaks::default()
        }),
    );
    validate(&config);

    for source in &sources {
        source.produce(1_000);
    }
    // Records keep coming while the daemon runs and when it is killed, so the crash hits it with
    // appended rows whose checkpoint is not committed or flushed yet.
    let producer = BackgroundProducer::over(sources.to_vec(), 50, Duration::from_millis(20));
    let mut daemon = Daemon::start(&config);
    let visible = || -> Vec<usize> { tables.iter().map(|t| f.visible_rows(t).len()).collect() };
    // Crash once the first checkpoint shows progress in every table, while there is more to do.
    let started = Instant::now();
    let first: usize = loop {
        let progress = visible();
        if progress.iter().all(|n| *n > 0) {
            break progress.iter().sum();
        }
        if started.elapsed() > Duration::from_secs(60) {
            daemon.dump_logs(60);
            panic!("no progress in every table after 60 s: {progress:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // A little more work first: another checkpoint has made rows visible since.
    while visible().iter().sum::<usize>() <= first {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "no checkpoint after the first one within 90 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The kill must land on rows in flight: appended to the tables' streams, not yet flushed.
    let appended_not_visible = || -> i64 { tables.iter().map(|t| f.appended_not_visible(t)).sum() };
    while appended_not_visible() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no rows appended and not yet visible within 120 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    daemon.kill();
    producer.stop();
    // The daemon is dead: what its streams hold past their flush cursors now is what the crash
    // caught appended and not yet visible.
    let caught = appended_not_visible();
    let at_kill: usize = visible().iter().sum();
    let produced: usize = tables.iter().map(|t| f.expected_rows(t).len()).sum();
    eprintln!(
        "{at_kill} of {produced} records visible when the daemon was killed, {caught} rows appended and not yet visible"
    );
    assert!(
        caught > 0,
        "the kill caught no rows appended and not yet visible ({at_kill} of {produced} visible): not a mid-flight crash"
    );
    // Records produced and not yet visible (appended rows whose checkpoint had not committed or
    // flushed, or records not yet appended).
    assert!(
        at_kill < produced,
        "the kill came after the daemon had caught up ({at_kill} of {produced} visible): not a mid-flight crash"
    );
    for source in &sources {
        source.produce(500);
    }

    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once_in(&tables, Duration::from_secs(90));
    let status = daemon.terminate();
    assert!(status.success(), "clean exit after SIGTERM: {status:?}");

    // The route's own metadata columns, and only those, are in its table.
    let audit_cols = f.table_columns(&audit_table).expect("audit table");
    assert!(audit_cols.contains(&"src_timestamp".to_string()));
    assert!(!audit_cols.contains(&"kafka_offset".to_string()));
    let orders_cols = f.table_columns(tables[0]).expect("orders table");
    assert!(orders_cols.contains(&"kafka_offset".to_string()));
    assert!(!orders_cols.contains(&"src_offset".to_string()));
}

/// Table names from the pattern's capture groups, and a route into a second dataset: the
/// `prod.<entity>.v1` topics lose their prefix and version (`orders`, `refunds`), the refunds
/// go to dataset `finance`, and a legacy topic writes table `orders` of `finance`, the same
/// table id as the first one in another dataset. Across a SIGKILL mid-flight each record is
/// visible once in its own table, so the two `orders` tables share no checkpoint, stream or
/// marker; `check` shows where each topic goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pattern_groups_name_the_tables_and_a_route_writes_another_dataset_exactly_once() {
    let run = unique_name("x").replace('-', "_");
    let orders_topic = format!("{run}.prod.orders.v1");
    let f = fixture(&orders_topic, 2, "orders").await;
    let orders = f.source.clone();
    let refunds = f.add_topic(
        &format!("{run}.prod.refunds.v1"),
        2,
        "finance.refunds",
        KAFKA_COLUMNS,
    );
    let legacy = f.add_topic(
        &format!("{run}.legacy.orders"),
        2,
        "finance.orders",
        KAFKA_COLUMNS,
    );
    let sources = [orders, refunds, legacy];
    let tables: Vec<&str> = sources.iter().map(|s| s.table()).collect();
    let config = f.config_with(
        &unique_name("g"),
        &routed(Tweaks {
            topics: sources.iter().map(|s| s.topic().to_string()).collect(),
            routes: vec![
                format!("  - topics: [\"{}\"]", sources[2].topic()),
                "    dataset: finance".into(),
                "    table: orders".into(),
                format!("  - topic_pattern: '{run}\\.prod\\.(refunds)\\.v\\d+'"),
                "    dataset: finance".into(),
                "    table: '{1}'".into(),
                format!("  - topic_pattern: '{run}\\.prod\\.(?P<entity>[a-z]+)\\.v\\d+'"),
                "    table: '{entity}'".into(),
            ],
            ..Tweaks::default()
        }),
    );
    validate(&config);

    for source in &sources {
        source.produce(600);
    }
    let producer = BackgroundProducer::over(sources.to_vec(), 30, Duration::from_millis(20));
    let mut daemon = Daemon::start(&config);
    let started = Instant::now();
    while !tables.iter().all(|t| !f.visible_rows(t).is_empty()) {
        if started.elapsed() > Duration::from_secs(60) {
            daemon.dump_logs(60);
            panic!("no rows visible in every table after 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The kill lands on rows appended to the tables' streams and not yet flushed.
    let appended_not_visible = || -> i64 { tables.iter().map(|t| f.appended_not_visible(t)).sum() };
    while appended_not_visible() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "no rows appended and not yet visible within 90 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    daemon.kill();
    producer.stop();
    assert!(appended_not_visible() > 0, "not a mid-flight crash");
    for source in &sources {
        source.produce(300);
    }

    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once_in(&tables, Duration::from_secs(90));
    let status = daemon.terminate();
    assert!(status.success(), "clean exit after SIGTERM: {status:?}");
    assert!(
        f.table_columns("orders").is_some() && f.table_columns("finance.orders").is_some(),
        "one table id in two datasets"
    );

    let out = std::process::Command::new(crate::support::daemon::binary())
        .args(["check", "--records", "1", "-c"])
        .arg(&config)
        .output()
        .expect("run check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (source, table, route) in [
        (&sources[0], "p.d.orders", "routes[2]"),
        (&sources[1], "p.finance.refunds", "routes[1]"),
        (&sources[2], "p.finance.orders", "routes[0]"),
    ] {
        let line = format!("route {}: writes {table} ({route})", source.topic());
        assert!(stdout.contains(&line), "{line:?} in:\n{stdout}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_after_start_gets_its_table_when_its_partitions_are_assigned() {
    let id = unique_name("p").replace('-', "_");
    let first = format!("pat_{id}.first");
    let later = format!("pat_{id}.later");
    let (first_table, later_table) = (first.replace('.', "_"), later.replace('.', "_"));
    let f = fixture(&first, 2, &first_table).await;
    let config = f.config_with(
        &unique_name("g"),
        &routed(Tweaks {
            topic_pattern: Some(format!("pat_{id}\\..*")),
            ..Tweaks::default()
        }),
    );
    validate(&config);

    f.produce(500);
    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once_in(&[&first_table], Duration::from_secs(60));
    assert!(
        f.table_columns(&later_table).is_none(),
        "the later topic's table must not exist before its topic"
    );

    let later = f.add_topic(&later, 2, &later_table, KAFKA_COLUMNS);
    later.produce(500);
    f.produce(200);
    f.wait_exactly_once_in(&[&first_table, &later_table], Duration::from_secs(90));
    let created = daemon.logged("table created");
    assert!(
        created.iter().any(|l| l["table"]
            .as_str()
            .is_some_and(|t| t.ends_with(&later_table))),
        "the daemon created the later table: {created:?}"
    );
    let status = daemon.terminate();
    assert!(status.success(), "clean exit after SIGTERM: {status:?}");
}

/// The group's marker is per table, so a topic that starts feeding a table
/// the group already committed to has partitions without offsets in a marked table, which looks
/// like expired offsets (a missing checkpoint, `fail` by default). With `lost_offsets: resolve`
/// the table says where each partition's visible rows end (nowhere yet), and the new topic is
/// written from its start, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_topic_routed_to_a_table_the_group_already_marked_is_written_from_its_start() {
    let id = unique_name("m").replace('-', "_");
    let first = format!("mark_{id}.first");
    let later = format!("mark_{id}.later");
    let table = format!("shared_{id}");
    let f = fixture(&first, 2, &table).await;
    let config = f.config_with(
        &unique_name("g"),
        &routed(Tweaks {
            topic_pattern: Some(format!("mark_{id}\\..*")),
            routes: vec![
                format!("  - topic_pattern: 'mark_{id}\\..*'"),
                format!("    table: {table}"),
            ],
            recovery: vec!["  lost_offsets: resolve".into()],
            ..Tweaks::default()
        }),
    );
    validate(&config);

    f.produce(300);
    let mut daemon = Daemon::start(&config);
    // The first topic's commits mark the table.
    f.wait_exactly_once_in(&[&table], Duration::from_secs(60));

    let later = f.add_topic(&later, 2, &table, KAFKA_COLUMNS);
    later.produce(300);
    f.produce(100);
    f.wait_exactly_once_in(&[&table], Duration::from_secs(90));
    let failed = daemon.logged("no committed offset although");
    assert!(failed.is_empty(), "{failed:?}");
    let status = daemon.terminate();
    assert!(status.success(), "clean exit after SIGTERM: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_table_is_created_from_the_latest_schema_of_the_topics_subject() {
    let id = unique_name("sr");
    let topic = format!("events.{id}");
    let table = topic.replace(['.', '-'], "_");
    let f = Fixture::with(SinkOptions {
        topic: Some(topic.clone()),
        table: Some(table.clone()),
        framing: Some(1),
        ..SinkOptions::partitions(2)
    })
    .await;
    // A second topic into its own table, with records of the same schema id.
    let other = format!("more.{id}");
    let other = f.add_topic(&other, 1, &other.replace(['.', '-'], "_"), KAFKA_COLUMNS);
    let (registry, served) =
        support::registry::Registry::serve([(1, SCHEMA.to_string())].into(), None).await;
    served.subject(&format!("{topic}-value"), 1);
    served.subject(&format!("{}-value", other.topic()), 1);
    let config = f.config_with(
        &unique_name("g"),
        &routed(Tweaks {
            registry_url: Some(format!("http://{registry}")),
            create_table: Some(true),
            topics: vec![topic.clone(), other.topic().to_string()],
            ..Tweaks::default()
        }),
    );
    validate(&config);
    f.produce(300);
    other.produce(100);
    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once_in(&[&table, other.table()], Duration::from_secs(60));
    // Each table asked for its subject's latest schema; schema id 1 was fetched once for both
    // tables (one registry client and cache per process).
    assert_eq!(*served.requests.lock().unwrap(), 3);
    let columns = f.table_columns(&table).expect("the table was created");
    for column in [
        "id",
        "customer",
        "amount",
        "created",
        "note",
        "kafka_offset",
    ] {
        assert!(
            columns.iter().any(|c| c == column),
            "{column} in {columns:?}"
        );
    }
    assert!(
        !daemon.logged("from the subject's latest schema").is_empty(),
        "the table came from the registry"
    );
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_topic_whose_table_cannot_be_written_stops_the_start_with_its_name() {
    let f = Fixture::new(1).await;
    let id = unique_name("missing");
    let good = format!("good-{id}");
    let missing = format!("missing-{id}");
    // No create_table anywhere, and the route's table does not exist: the start fails on it
    // (topics are routed in their listed order) before joining the group. Neither topic exists.
    let config = f.config_with(
        &unique_name("g"),
        &routed(Tweaks {
            topics: vec![missing.clone(), good],
            routes: vec![
                format!("  - topics: [\"{missing}\"]"),
                "    table: absent".into(),
            ],
            create_table: Some(false),
            ..Tweaks::default()
        }),
    );
    validate(&config);
    let out = std::process::Command::new(crate::support::daemon::binary())
        .args(["run", "-c"])
        .arg(&config)
        .output()
        .expect("run the daemon");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the start must fail: {stderr}");
    assert!(
        stderr.contains(&missing) && stderr.contains("absent") && stderr.contains("does not exist"),
        "the error names the topic and its table: {stderr}"
    );
}
