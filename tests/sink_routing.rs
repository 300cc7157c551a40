//! Routing end to end: several topics into several tables through the real binary, a real
//! Kafka broker and the emulator. Every record must be visible exactly once in the table its
//! topic is routed to — through a `{topic}` template (with the topic sanitised into a table id)
//! or a route override with its own metadata columns — across a SIGKILL; a topic created while
//! the daemon runs under a pattern subscription gets its table created on assignment; and with a
//! Schema Registry a missing table is created from the latest schema of the topic's subject.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apache_avro::Schema;
use kafka_bigquery_sink::emulator::server::{Emulator, EmulatorConfig};
use kafka_bigquery_sink::emulator::store::TableRef;

use support::kafka::{KafkaBroker, create_topic_blocking, produce_to_partition, producer};
use support::sink::{Daemon, SCHEMA, confluent, encode};

/// (topic, partition, offset) of a row, as its metadata columns hold it.
type Row = (String, i64, i64);

/// A record's key and value.
type KeyValue = (Vec<u8>, Vec<u8>);

struct Setup {
    emulator: Emulator,
    bootstrap: String,
    dir: tempfile::TempDir,
    schema: Schema,
    /// Produced records per table.
    expected: Mutex<BTreeMap<String, BTreeSet<Row>>>,
    next_id: AtomicI64,
}

impl Setup {
    async fn new() -> Setup {
        let mut config = EmulatorConfig::local();
        config.listen = ([127, 0, 0, 1], 0).into();
        let emulator = Emulator::start(config).await.expect("emulator starts");
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("order.avsc"), SCHEMA).expect("write avsc");
        Setup {
            emulator,
            bootstrap: KafkaBroker::shared().to_string(),
            dir,
            schema: Schema::parse_str(SCHEMA).expect("schema"),
            expected: Mutex::new(BTreeMap::new()),
            next_id: AtomicI64::new(0),
        }
    }

    /// Produces `n` records round-robin over `partitions` partitions of `topic`, expected in
    /// `table`.
    fn produce(&self, topic: &str, partitions: i32, n: i64, table: &str) {
        self.produce_framed(topic, partitions, n, table, None);
    }

    /// `produce`, in the Confluent wire format with this schema id when `framing` is set.
    fn produce_framed(
        &self,
        topic: &str,
        partitions: i32,
        n: i64,
        table: &str,
        framing: Option<u32>,
    ) {
        let p = producer(&self.bootstrap);
        let mut per: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
        let first = self.next_id.fetch_add(n, Ordering::SeqCst);
        for id in first..first + n {
            per.entry((id % partitions as i64) as i32)
                .or_default()
                .push((id.to_string().into_bytes(), {
                    let body = encode(&self.schema, id);
                    match framing {
                        Some(schema_id) => confluent(schema_id, &body),
                        None => body,
                    }
                }));
        }
        for (partition, records) in per {
            let refs: Vec<(&[u8], &[u8])> = records
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            let offsets = produce_to_partition(&p, topic, partition, &refs);
            self.expected
                .lock()
                .expect("expected")
                .entry(table.to_string())
                .or_default()
                .extend(
                    offsets
                        .into_iter()
                        .map(|o| (topic.to_string(), partition as i64, o)),
                );
        }
    }

    fn table_ref(table: &str) -> TableRef {
        TableRef::parse(&format!("projects/p/datasets/d/tables/{table}")).expect("table ref")
    }

    /// The column names of `table`, or `None` while it does not exist.
    fn columns(&self, table: &str) -> Option<Vec<String>> {
        let t = self.emulator.store.get_table(&Self::table_ref(table))?;
        Some(t.schema.fields.iter().map(|f| f.name.clone()).collect())
    }

    /// Every visible row of `table` by its metadata columns `cols` (topic, partition, offset),
    /// with how often it appears.
    fn visible(&self, table: &str, cols: [&str; 3]) -> BTreeMap<Row, usize> {
        let mut out = BTreeMap::new();
        let Some(t) = self.emulator.store.get_table(&Self::table_ref(table)) else {
            return out;
        };
        let at = |name: &str| {
            t.schema
                .fields
                .iter()
                .position(|f| f.name == name)
                .unwrap_or_else(|| panic!("table {table} has no column {name}"))
        };
        let (ti, pi, oi) = (at(cols[0]), at(cols[1]), at(cols[2]));
        let page = self
            .emulator
            .store
            .read_visible_rows(&Self::table_ref(table), 0, usize::MAX)
            .expect("rows");
        for row in page.rows {
            let r = row.codec.render(&row.data, &t.schema);
            let text = |i: usize| r["f"][i]["v"].as_str().expect("value").to_string();
            let num = |i: usize| text(i).parse::<i64>().expect("int");
            *out.entry((text(ti), num(pi), num(oi))).or_insert(0) += 1;
        }
        out
    }

    /// Waits until every record expected in each table is visible there, then checks that each
    /// table holds exactly its records, once.
    fn wait_exactly_once(&self, tables: &[(&str, [&str; 3])], timeout: Duration) {
        let expected = self.expected.lock().expect("expected").clone();
        let started = Instant::now();
        loop {
            let done = tables.iter().all(|(table, cols)| {
                let v = self.visible(table, *cols);
                expected[*table].iter().all(|r| v.contains_key(r)) || v.values().any(|n| *n > 1)
            });
            if done || started.elapsed() > timeout {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        for (table, cols) in tables {
            let v = self.visible(table, *cols);
            let duplicates: Vec<_> = v.iter().filter(|(_, n)| **n > 1).take(5).collect();
            assert!(duplicates.is_empty(), "{table}: duplicates {duplicates:?}");
            let seen: BTreeSet<Row> = v.into_keys().collect();
            let expected = &expected[*table];
            let missing: Vec<_> = expected.difference(&seen).take(5).collect();
            let foreign: Vec<_> = seen.difference(expected).take(5).collect();
            assert!(
                missing.is_empty() && foreign.is_empty(),
                "{table}: {} of {} expected rows missing (e.g. {missing:?}); rows that belong elsewhere: {foreign:?}",
                expected.difference(&seen).count(),
                expected.len()
            );
        }
    }

    fn write_config(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, text).expect("write config");
        path
    }

    fn avsc(&self) -> String {
        self.dir.path().join("order.avsc").display().to_string()
    }
}

/// The config around `kafka_subscription` (the `topics:` or `topic_pattern:` line) and `routes`,
/// with raw Avro input.
fn config_text(setup: &Setup, group: &str, subscription: &str, dlq: &str, routes: &str) -> String {
    let input = format!("avro:\n  schema_file: \"{}\"\n", setup.avsc());
    config_with_input(setup, group, subscription, dlq, routes, &input)
}

fn config_with_input(
    setup: &Setup,
    group: &str,
    subscription: &str,
    dlq: &str,
    routes: &str,
    input: &str,
) -> String {
    format!(
        r#"
kafka:
  bootstrap_servers: "{bootstrap}"
  group_id: "{group}"
  {subscription}
  properties:
    session.timeout.ms: "6000"
    heartbeat.interval.ms: "500"
    topic.metadata.refresh.interval.ms: "1000"
{input}bigquery:
  project: p
  dataset: d
  table: "{{topic}}"
  endpoint: "http://{emulator}"
  credentials: none
  create_table: {{}}
  metadata_columns:
    topic: kafka_topic
    partition: kafka_partition
    offset: kafka_offset
{routes}dead_letter:
  topic: "{dlq}"
checkpoint:
  interval: 200ms
metrics:
  listen: "127.0.0.1:0"
log:
  format: json
shutdown_deadline: 20s
"#,
        bootstrap = setup.bootstrap,
        emulator = setup.emulator.addr,
    )
}

fn validate(config: &Path) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-bigquery-sink"))
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

/// A name unique to this run, made of what a topic and (after sanitising) a table accept.
fn unique(prefix: &str) -> String {
    support::kafka::unique_name(prefix)
}

const KAFKA_COLS: [&str; 3] = ["kafka_topic", "kafka_partition", "kafka_offset"];
const AUDIT_COLS: [&str; 3] = ["src_topic", "src_partition", "src_offset"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_topics_reach_their_routed_tables_exactly_once_across_a_sigkill() {
    let s = Arc::new(Setup::new().await);
    let id = unique("r");
    // `.` and `-` are valid in topic names, not in table ids: the template sanitises them.
    let orders = format!("orders.v1-{id}");
    let payments = format!("payments_{id}");
    let audit = format!("audit-{id}");
    let dlq = format!("dlq-{id}");
    let orders_table = orders.replace(['.', '-'], "_");
    let payments_table = payments.replace('-', "_");
    let audit_table = format!("audit_all_{}", id.replace('-', "_"));
    for topic in [&orders, &payments, &audit] {
        create_topic_blocking(&s.bootstrap, topic, 2);
    }
    create_topic_blocking(&s.bootstrap, &dlq, 1);
    // The audit topic goes to a fixed table with other metadata columns (and a timestamp).
    let routes = format!(
        r#"routes:
  - topics: ["{audit}"]
    table: "{audit_table}"
    metadata_columns:
      topic: src_topic
      partition: src_partition
      offset: src_offset
      timestamp: src_timestamp
"#
    );
    let config = s.write_config(
        "three",
        &config_text(
            &s,
            &unique("g"),
            &format!(r#"topics: ["{orders}", "{payments}", "{audit}"]"#),
            &dlq,
            &routes,
        ),
    );
    validate(&config);

    let topics = [
        (orders.clone(), orders_table.clone()),
        (payments.clone(), payments_table.clone()),
        (audit.clone(), audit_table.clone()),
    ];
    for (topic, table) in &topics {
        s.produce(topic, 2, 1_000, table);
    }
    // Records keep coming while the daemon runs, so the crash hits it with appended rows whose
    // checkpoint is not committed or flushed yet.
    let producing = Arc::new(AtomicBool::new(true));
    let background = {
        let (s, producing, topics) = (s.clone(), producing.clone(), topics.clone());
        std::thread::spawn(move || {
            while producing.load(Ordering::SeqCst) {
                for (topic, table) in &topics {
                    s.produce(topic, 2, 50, table);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let mut daemon = Daemon::start(&config);
    // Crash once the first checkpoint shows progress in every table, while there is more to do.
    let started = Instant::now();
    let first_progress = |p: [usize; 3]| p.iter().sum::<usize>();
    let first = loop {
        let progress = [
            s.visible(&orders_table, KAFKA_COLS).len(),
            s.visible(&payments_table, KAFKA_COLS).len(),
            s.visible(&audit_table, AUDIT_COLS).len(),
        ];
        if progress.iter().all(|n| *n > 0) {
            break first_progress(progress);
        }
        if started.elapsed() > Duration::from_secs(60) {
            daemon.dump_logs(60);
            panic!("no progress in every table after 60 s: {progress:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // A little more work first: another checkpoint has made rows visible since.
    let visible_now = || {
        s.visible(&orders_table, KAFKA_COLS).len()
            + s.visible(&payments_table, KAFKA_COLS).len()
            + s.visible(&audit_table, AUDIT_COLS).len()
    };
    while visible_now() <= first {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "no checkpoint after the first one within 90 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    producing.store(false, Ordering::SeqCst);
    background.join().expect("background producer");
    daemon.kill();
    let at_kill = s.visible(&orders_table, KAFKA_COLS).len()
        + s.visible(&payments_table, KAFKA_COLS).len()
        + s.visible(&audit_table, AUDIT_COLS).len();
    let produced: usize = s
        .expected
        .lock()
        .expect("expected")
        .values()
        .map(BTreeSet::len)
        .sum();
    eprintln!("{at_kill} of {produced} records visible when the daemon was killed");
    // The crash must hit the daemon mid-flight: records produced and not yet visible (appended
    // rows whose checkpoint had not committed or flushed, or records not yet appended).
    assert!(
        at_kill < produced,
        "the kill came after the daemon had caught up ({at_kill} of {produced} visible): not a mid-flight crash"
    );
    for (topic, table) in &topics {
        s.produce(topic, 2, 500, table);
    }

    let mut daemon = Daemon::start(&config);
    s.wait_exactly_once(
        &[
            (&orders_table, KAFKA_COLS),
            (&payments_table, KAFKA_COLS),
            (&audit_table, AUDIT_COLS),
        ],
        Duration::from_secs(90),
    );
    let status = daemon.terminate();
    assert!(status.success(), "clean exit after SIGTERM: {status:?}");

    // The route's own metadata columns, and only those, are in its table.
    let audit_cols = s.columns(&audit_table).expect("audit table");
    assert!(audit_cols.contains(&"src_timestamp".to_string()));
    assert!(!audit_cols.contains(&"kafka_offset".to_string()));
    let orders_cols = s.columns(&orders_table).expect("orders table");
    assert!(orders_cols.contains(&"kafka_offset".to_string()));
    assert!(!orders_cols.contains(&"src_offset".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_after_start_gets_its_table_when_its_partitions_are_assigned() {
    let s = Setup::new().await;
    let id = unique("p").replace('-', "_");
    let first = format!("pat_{id}.first");
    let later = format!("pat_{id}.later");
    let dlq = format!("dlq_{id}");
    let (first_table, later_table) = (first.replace('.', "_"), later.replace('.', "_"));
    create_topic_blocking(&s.bootstrap, &first, 2);
    create_topic_blocking(&s.bootstrap, &dlq, 1);
    let config = s.write_config(
        "pattern",
        &config_text(
            &s,
            &unique("g"),
            &format!(r#"topic_pattern: 'pat_{id}\..*'"#),
            &dlq,
            "",
        ),
    );
    validate(&config);

    s.produce(&first, 2, 500, &first_table);
    let mut daemon = Daemon::start(&config);
    s.wait_exactly_once(&[(&first_table, KAFKA_COLS)], Duration::from_secs(60));
    assert!(
        s.columns(&later_table).is_none(),
        "the later topic's table must not exist before its topic"
    );

    create_topic_blocking(&s.bootstrap, &later, 2);
    s.produce(&later, 2, 500, &later_table);
    s.produce(&first, 2, 200, &first_table);
    s.wait_exactly_once(
        &[(&first_table, KAFKA_COLS), (&later_table, KAFKA_COLS)],
        Duration::from_secs(90),
    );
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

/// Review finding #11: the group's marker is per table, so a topic that starts feeding a table
/// the group already committed to has partitions without offsets in a marked table, which looks
/// like expired offsets (a missing checkpoint, `fail` by default). With `lost_offsets: resolve`
/// the table says where each partition's visible rows end (nowhere yet), and the new topic is
/// written from its start, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_topic_routed_to_a_table_the_group_already_marked_is_written_from_its_start() {
    let s = Setup::new().await;
    let id = unique("m").replace('-', "_");
    let first = format!("mark_{id}.first");
    let later = format!("mark_{id}.later");
    let dlq = format!("dlq_{id}");
    let table = format!("shared_{id}");
    create_topic_blocking(&s.bootstrap, &first, 2);
    create_topic_blocking(&s.bootstrap, &dlq, 1);
    let routes = format!(
        "routes:\n  - topic_pattern: 'mark_{id}\\..*'\n    table: {table}\nrecovery:\n  lost_offsets: resolve\n"
    );
    let config = s.write_config(
        "marked",
        &config_text(
            &s,
            &unique("g"),
            &format!(r#"topic_pattern: 'mark_{id}\..*'"#),
            &dlq,
            &routes,
        ),
    );
    validate(&config);

    s.produce(&first, 2, 300, &table);
    let mut daemon = Daemon::start(&config);
    // The first topic's commits mark the table.
    s.wait_exactly_once(&[(&table, KAFKA_COLS)], Duration::from_secs(60));

    create_topic_blocking(&s.bootstrap, &later, 2);
    s.produce(&later, 2, 300, &table);
    s.produce(&first, 2, 100, &table);
    s.wait_exactly_once(&[(&table, KAFKA_COLS)], Duration::from_secs(90));
    let failed = daemon.logged("no committed offset although");
    assert!(failed.is_empty(), "{failed:?}");
    let status = daemon.terminate();
    assert!(status.success(), "clean exit after SIGTERM: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_table_is_created_from_the_latest_schema_of_the_topics_subject() {
    let s = Setup::new().await;
    let id = unique("sr");
    let topic = format!("events.{id}");
    let table = topic.replace(['.', '-'], "_");
    // A second topic into its own table, with records of the same schema id.
    let other = format!("more.{id}");
    let other_table = other.replace(['.', '-'], "_");
    let dlq = format!("dlq-{id}");
    create_topic_blocking(&s.bootstrap, &topic, 2);
    create_topic_blocking(&s.bootstrap, &other, 1);
    create_topic_blocking(&s.bootstrap, &dlq, 1);
    let (registry, served) =
        support::registry::Registry::serve([(1, SCHEMA.to_string())].into(), None).await;
    served.subject(&format!("{topic}-value"), 1);
    served.subject(&format!("{other}-value"), 1);
    let input = format!("schema_registry:\n  url: \"http://{registry}\"\n  retries: 2\n");
    let config = s.write_config(
        "registry",
        &config_with_input(
            &s,
            &unique("g"),
            &format!(r#"topics: ["{topic}", "{other}"]"#),
            &dlq,
            "",
            &input,
        ),
    );
    validate(&config);
    s.produce_framed(&topic, 2, 300, &table, Some(1));
    s.produce_framed(&other, 1, 100, &other_table, Some(1));
    let mut daemon = Daemon::start(&config);
    s.wait_exactly_once(
        &[(&table, KAFKA_COLS), (&other_table, KAFKA_COLS)],
        Duration::from_secs(60),
    );
    // Each table asked for its subject's latest schema; schema id 1 was fetched once for both
    // tables (one registry client and cache per process).
    assert_eq!(*served.requests.lock().unwrap(), 3);
    let columns = s.columns(&table).expect("the table was created");
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
    let s = Setup::new().await;
    let id = unique("missing");
    let good = format!("good-{id}");
    let missing = format!("missing-{id}");
    // No create_table anywhere, and the route's table does not exist: the start fails on it
    // (topics are routed in their listed order) before joining the group.
    let routes = format!("routes:\n  - topics: [\"{missing}\"]\n    table: absent\n");
    let text = config_text(
        &s,
        &unique("g"),
        &format!(r#"topics: ["{missing}", "{good}"]"#),
        &format!("dlq-{id}"),
        &routes,
    )
    .replace("  create_table: {}\n", "");
    let config = s.write_config("missing", &text);
    validate(&config);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-bigquery-sink"))
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
