//! Change data capture end to end (docs/cdc.md): Debezium-shaped Avro through a real broker and
//! the real daemon into the emulator, whose table must end equal to the source's state per key.

use crate::support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use apache_avro::Schema;
use apache_avro::types::Value;
use kbq_core::table_schema::TableSchema;
use kbq_emulator::faults::FaultRule;
use kbq_emulator::store::{Dataset, Table, TableRef};
use rdkafka::producer::FutureProducer;
use support::cdc::{Change, State, producer_script, state_from_json, table_state, wait_converged};
use support::daemon::Daemon;
use support::kafka::{producer, unique_name};
use support::registry::Registry;
use support::sink::{Fixture, SinkOptions, confluent};

pub const ENVELOPE: &str = r#"{"type":"record","name":"Envelope","namespace":"db.inventory.customers","fields":[
  {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
    {"name":"id","type":"long"},
    {"name":"name","type":"string"},
    {"name":"version","type":"long"}]}],"default":null},
  {"name":"after","type":["null","Value"],"default":null},
  {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
    {"name":"connector","type":"string"},
    {"name":"lsn","type":["null","long"],"default":null}]}},
  {"name":"op","type":"string"},
  {"name":"ts_ms","type":["null","long"],"default":null}]}"#;

pub const KEY: &str = r#"{"type":"record","name":"Key","namespace":"db.inventory.customers","fields":[
  {"name":"id","type":"long"}]}"#;

const VALUE_ID: u32 = 11;
const KEY_ID: u32 = 12;

/// Writes Debezium change events for a source table and keeps its state.
struct Source {
    envelope: Schema,
    key: Schema,
    partitions: i32,
    state: State,
    versions: HashMap<i64, i64>,
    out: Vec<Change>,
}

impl Source {
    fn new(partitions: i32) -> Source {
        Source {
            envelope: Schema::parse_str(ENVELOPE).unwrap(),
            key: Schema::parse_str(KEY).unwrap(),
            partitions,
            state: State::new(),
            versions: HashMap::new(),
            out: Vec::new(),
        }
    }

    fn row(id: i64, version: i64) -> Value {
        Value::Record(vec![
            ("id".into(), Value::Long(id)),
            (
                "name".into(),
                Value::String(format!("customer-{id}-v{version}")),
            ),
            ("version".into(), Value::Long(version)),
        ])
    }

    fn event(&self, op: &str, before: Option<Value>, after: Option<Value>) -> Vec<u8> {
        let opt = |v: Option<Value>| match v {
            Some(v) => Value::Union(1, Box::new(v)),
            None => Value::Union(0, Box::new(Value::Null)),
        };
        let value = Value::Record(vec![
            ("before".into(), opt(before)),
            ("after".into(), opt(after)),
            (
                "source".into(),
                Value::Record(vec![
                    ("connector".into(), Value::String("postgresql".into())),
                    ("lsn".into(), Value::Union(0, Box::new(Value::Null))),
                ]),
            ),
            ("op".into(), Value::String(op.into())),
            ("ts_ms".into(), Value::Union(0, Box::new(Value::Null))),
        ]);
        confluent(VALUE_ID, &datum(&self.envelope, value))
    }

    fn key_of(&self, id: i64) -> Vec<u8> {
        confluent(
            KEY_ID,
            &datum(
                &self.key,
                Value::Record(vec![("id".into(), Value::Long(id))]),
            ),
        )
    }

    fn push(&mut self, id: i64, value: Option<Vec<u8>>) {
        self.out.push(Change {
            partition: (id % self.partitions as i64) as i32,
            key: Some(self.key_of(id)),
            value,
        });
    }

    /// A create (`c`), update (`u`) or snapshot read (`r`) of `id` at its next version.
    fn upsert(&mut self, id: i64, op: &str) {
        let version = self.versions.entry(id).or_insert(0);
        *version += 1;
        let version = *version;
        let before = self.state.get(&id).map(|_| Source::row(id, version - 1));
        let event = self.event(op, before, Some(Source::row(id, version)));
        self.push(id, Some(event));
        self.state
            .insert(id, (format!("customer-{id}-v{version}"), version));
    }

    /// A delete event and its tombstone, as Debezium writes them.
    fn delete(&mut self, id: i64) {
        let version = self.versions.get(&id).copied().unwrap_or(0);
        let event = self.event("d", Some(Source::row(id, version)), None);
        self.push(id, Some(event));
        self.push(id, None);
        self.state.remove(&id);
    }

    /// A truncate event: no row-level equivalent, so a bad record.
    fn truncate(&mut self) {
        let event = self.event("t", None, None);
        self.out.push(Change {
            partition: 0,
            key: None,
            value: Some(event),
        });
    }

    fn produce(&mut self, producer: &FutureProducer, topic: &str) {
        support::cdc::produce(producer, topic, &self.out);
        self.out.clear();
    }
}

fn datum(schema: &Schema, value: Value) -> Vec<u8> {
    apache_avro::writer::datum::GenericDatumWriter::builder(schema)
        .build()
        .unwrap()
        .write_value_to_vec(value)
        .unwrap()
}

/// The fixture's topic and emulator with a registry serving the envelope and key schemas.
async fn setup(partitions: i32) -> (Fixture, String) {
    let f = Fixture::with(SinkOptions::partitions(partitions)).await;
    let (addr, registry) = Registry::serve(
        HashMap::from([(VALUE_ID, ENVELOPE.to_string()), (KEY_ID, KEY.to_string())]),
        None,
    )
    .await;
    registry.subject(&format!("{}-value", f.topic), VALUE_ID);
    // The key schema under the RecordNameStrategy's subject only.
    registry.subject("db.inventory.customers.Key", KEY_ID);
    // The registry lives as long as the test's runtime.
    std::mem::forget(registry);
    (f, format!("http://{addr}"))
}

/// The route of these tests: a created table with a configured key and `max_staleness`.
const ROUTE: &str = "    create_table: {}
    cdc:
      mode: upsert_delete
      primary_key: [id]
      max_staleness: 10m";

fn config(f: &Fixture, registry: &str, group: &str) -> PathBuf {
    config_with(f, registry, group, "")
}

/// [`config`] with more lines under `writer:`.
fn config_with(f: &Fixture, registry: &str, group: &str, writer: &str) -> PathBuf {
    support::cdc::config(f, registry, group, ROUTE, writer)
}

/// The daemon with its logs in memory (shown if the test fails while it runs).
fn start(config: &Path, name: &str) -> Daemon {
    Daemon::start_named(config, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_changes_converge_to_the_source_state_across_a_kill() {
    const PARTITIONS: i32 = 3;
    let (f, registry) = setup(PARTITIONS).await;
    let config = config(&f, &registry, &unique_name("cdc"));
    let producer = producer(&f.bootstrap);
    let mut source = Source::new(PARTITIONS);
    // A snapshot, then several updates per key (many land in one request), deletes with their
    // tombstones, re-inserts of deleted keys, and a truncate.
    for id in 0..40 {
        source.upsert(id, "r");
    }
    for round in 0..5 {
        for id in 0..40 {
            if (id + round) % 3 != 0 {
                source.upsert(id, "u");
            }
        }
    }
    for id in (0..40).filter(|id| id % 5 == 0) {
        source.delete(id);
    }
    source.truncate();
    for id in (0..40).filter(|id| id % 10 == 0) {
        source.upsert(id, "c");
    }
    source.produce(&producer, &f.topic);

    let mut daemon = start(&config, "first");
    wait_converged(&f, &source.state, Duration::from_secs(60));
    let table = f.emulator.store.get_table(&f.table_ref()).expect("created");
    assert_eq!(table.primary_key(), ["id"]);
    assert_eq!(table.max_staleness.as_deref(), Some("0-0 0 0:10:0"));
    let schema: Vec<&str> = table
        .schema
        .fields
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        schema,
        ["id", "name", "version"],
        "the after row's columns only"
    );
    let letters = f.dead_letters(1);
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].2, "cdc_change");
    assert!(letters[0].3.contains("\"t\""), "{letters:?}");
    let dlq = f.dead_letter_count();

    // A crash: what was appended after the last commit is sent again on restart, with the
    // same sequence numbers, behind newer changes of the same keys.
    daemon.kill();
    for id in 0..40 {
        if id % 4 == 1 {
            source.delete(id);
        } else if id % 4 == 2 {
            source.upsert(id, "u");
        }
    }
    source.produce(&producer, &f.topic);
    let daemon = start(&config, "after-the-kill");
    wait_converged(&f, &source.state, Duration::from_secs(60));
    assert!(daemon.metric_with("kbq_cdc_changes_total", &["change=\"upsert\""]) > 0.0);
    assert!(daemon.metric_with("kbq_cdc_changes_total", &["change=\"delete\""]) > 0.0);
    assert_eq!(f.dead_letter_count(), dlq, "no new bad records");
}

/// Without `primary_key` the table's key comes from the Kafka key's schema, here registered
/// under Confluent's RecordNameStrategy subject (the record's full name) named by `key_subject`
/// (no `{topic}-key` subject exists).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_key_comes_from_the_key_schema_under_another_subject() {
    let (f, registry) = setup(2).await;
    let config = config(&f, &registry, &unique_name("cdc-key-subject"));
    let text = std::fs::read_to_string(&config).unwrap();
    let keyed = text.replace(
        "      primary_key: [id]\n",
        "      key_subject: db.inventory.customers.Key\n",
    );
    assert_ne!(text, keyed);
    std::fs::write(&config, keyed).unwrap();
    let producer = producer(&f.bootstrap);
    let mut source = Source::new(2);
    for id in 0..10 {
        source.upsert(id, "c");
    }
    source.delete(3);
    source.upsert(4, "u");
    source.produce(&producer, &f.topic);
    let mut daemon = start(&config, "key-subject");
    wait_converged(&f, &source.state, Duration::from_secs(60));
    let table = f.emulator.store.get_table(&f.table_ref()).expect("created");
    assert_eq!(table.primary_key(), ["id"]);
    daemon.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_table_without_a_primary_key_is_refused_at_start() {
    let (f, registry) = setup(1).await;
    let schema: TableSchema = serde_json::from_str(
        r#"{"fields":[{"name":"id","type":"INTEGER"},{"name":"name","type":"STRING"},{"name":"version","type":"INTEGER"}]}"#,
    )
    .unwrap();
    let store = &f.emulator.store;
    store.insert_dataset(Dataset::new("p", "d")).unwrap();
    let reference = TableRef::new("p", "d", f.table.clone());
    store.insert_table(Table::new(reference, schema)).unwrap();
    let config = config(&f, &registry, &unique_name("cdc-no-key"));
    let mut daemon = start(&config, "no-key");
    let started = Instant::now();
    loop {
        let text = daemon.lines().join("\n");
        if text.contains("has no primary key") {
            assert!(
                text.contains(&format!("tables/{}", f.table)),
                "names the table"
            );
            assert!(
                text.contains("ADD PRIMARY KEY (id) NOT ENFORCED"),
                "says how"
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no refusal in {text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(table_state(&f).is_empty());
    daemon.kill();
}

use support::python::python;

/// The committed seed of the kill schedule and of the change stream.
const KILL_SEED: u64 = 0x6364_635f_6b69_6c6c;

/// The proof of docs/cdc.md's guarantee: a change stream written by an independent producer
/// (Python, fastavro, confluent-kafka, the Debezium envelope), consumed by two replicas that are
/// SIGKILLed and restarted on a seeded schedule while it is produced (rebalances and replays
/// included); the table must end equal to the producer's source table, key by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_independent_debezium_stream_converges_across_repeated_kills_and_rebalances() {
    converges_under_kills(
        SinkOptions::partitions(4),
        Vec::new(),
        "",
        &unique_name("cdc-kills"),
        300,
    )
    .await;
}

/// The committed seed of the fault schedule.
const FAULT_SEED: u64 = 0x6364_635f_6661_756c;

/// The same proof while the emulator injects every fault the `_default` stream can meet:
/// AppendRows calls ended with UNAVAILABLE, INTERNAL and RESOURCE_EXHAUSTED, the same errors
/// inside the stream (the call stays open), connections reset before and after the request is
/// applied (the second loses an applied request's answer, so the request is sent twice), answers
/// later than the client's timeout (applied, then sent again), and the server's idle close of
/// connections between bursts. Each rule fires on calls counted from the test's start, at a
/// seeded position (never by chance), and every rule must have fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_independent_debezium_stream_converges_across_kills_and_emulator_faults() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    let mut emulator = kbq_emulator::server::EmulatorConfig::local();
    emulator.write.idle_timeout = Duration::from_secs(2);
    let actions = [
        r#"{"fail":{"code":"UNAVAILABLE"}}"#,
        r#"{"fail":{"code":"INTERNAL"}}"#,
        r#"{"fail":{"code":"RESOURCE_EXHAUSTED"}}"#,
        r#"{"fail":{"code":"UNAVAILABLE","in_stream":true}}"#,
        r#"{"fail":{"code":"INTERNAL","in_stream":true}}"#,
        r#"{"fail":{"code":"ABORTED","in_stream":true}}"#,
        r#"{"drop":{"after":false}}"#,
        r#"{"drop":{"after":true}}"#,
        r#"{"delay":{"ms":2500}}"#,
    ];
    let mut rng = StdRng::seed_from_u64(FAULT_SEED);
    // Spread over the first 140 calls of at least 143 (below), so that late changes, the last
    // of their keys, meet faults too (a fault on a superseded change proves little).
    let rules: Vec<FaultRule> = actions
        .iter()
        .map(|action| {
            let json = format!(
                r#"{{"rpc":"AppendRows","action":{action},"nth":{},"times":{}}}"#,
                rng.random_range(2..140),
                rng.random_range(1..=2)
            );
            serde_json::from_str(&json).expect("a fault rule")
        })
        .collect();
    converges_under_kills(
        SinkOptions {
            emulator,
            ..SinkOptions::partitions(4)
        },
        rules,
        // At most 50 rows a request: the ~7,100 records need at least 143 AppendRows calls
        // whatever the timing, so every rule above meets its call. A timeout below the delay
        // fault: that answer comes too late and the request is sent again.
        "  max_rows_per_request: 50\n  response_timeout: 2s",
        &unique_name("cdc-faults"),
        // Many keys with few changes each: most changes are the last of their key, so a
        // change lost to a fault shows in the table (a lost change that a later one of its key
        // supersedes cannot).
        3000,
    )
    .await;
}

/// Runs cdc_producer.py against two replicas killed and restarted on the seeded schedule of
/// [`KILL_SEED`], with `faults` installed in the emulator first, and checks the table against
/// the producer's source state of `keys` keys, key by key (and that every fault fired).
async fn converges_under_kills(
    options: SinkOptions,
    faults: Vec<FaultRule>,
    writer: &str,
    group: &str,
    keys: u32,
) {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    let Some(python) = python() else {
        return;
    };
    let partitions = options.partitions;
    let script = producer_script();
    let printed = std::process::Command::new(&python)
        .arg(&script)
        .arg("--print-schemas")
        .output()
        .expect("python runs");
    assert!(printed.status.success(), "{printed:?}");
    let schemas: serde_json::Value = serde_json::from_slice(&printed.stdout).unwrap();
    let f = Fixture::with(options).await;
    let (addr, registry) = Registry::serve(
        HashMap::from([
            (21, schemas["value"].as_str().unwrap().to_string()),
            (22, schemas["key"].as_str().unwrap().to_string()),
        ]),
        None,
    )
    .await;
    registry.subject(&format!("{}-value", f.topic), 21);
    let config = config_with(&f, &format!("http://{addr}"), group, writer);
    let fault_ids = f.emulator.faults.install(faults).expect("install faults");
    let state_file = f.dir.path().join("source-state.json");
    let started = Instant::now();
    let mut producer = std::process::Command::new(&python)
        .arg(&script)
        .arg("live")
        .args(["--bootstrap", &f.bootstrap, "--topic", &f.topic])
        .args(["--partitions", &partitions.to_string()])
        .args(["--value-id", "21", "--key-id", "22"])
        .args([
            "--seed",
            &(KILL_SEED % 1000).to_string(),
            "--changes",
            "6000",
        ])
        .args(["--keys", &keys.to_string()])
        .arg("--state")
        .arg(&state_file)
        .spawn()
        .expect("the producer starts");

    let mut rng = StdRng::seed_from_u64(KILL_SEED);
    let mut replicas: [Option<Daemon>; 2] = [Some(start(&config, "r0")), None];
    let (mut kills, mut starts) = (0, 1);
    let mut producing = true;
    while producing || kills < 6 {
        std::thread::sleep(Duration::from_millis(rng.random_range(800..3_000)));
        let i = rng.random_range(0..replicas.len());
        match replicas[i].take() {
            Some(mut d) => {
                d.kill();
                kills += 1;
            }
            None => {
                replicas[i] = Some(start(&config, &format!("r{i}-{starts}")));
                starts += 1;
            }
        }
        if replicas.iter().all(Option::is_none) {
            replicas[0] = Some(start(&config, &format!("r0-{starts}")));
            starts += 1;
        }
        producing = producer.try_wait().expect("producer status").is_none();
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "the producer did not finish"
        );
    }
    assert!(producer.wait().unwrap().success(), "cdc_producer.py failed");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    let want: State = state_from_json(&written["state"]);
    assert!(want.len() > 50, "a source table worth the name");
    wait_converged(&f, &want, Duration::from_secs(120));
    let fired: Vec<(u64, u64)> = f
        .emulator
        .faults
        .list()
        .iter()
        .filter(|r| fault_ids.contains(&r.id))
        .map(|r| (r.matched, r.fired))
        .collect();
    eprintln!(
        "{} records, {} keys at the end, {kills} kills, {starts} starts, faults (matched, fired) {fired:?}, {:.1}s",
        written["records"],
        want.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        fired.iter().all(|(_, n)| *n > 0),
        "every fault fired: {fired:?}"
    );
    assert_eq!(f.dead_letter_count(), 0, "no bad records");
    drop(replicas);
    std::mem::forget(registry);
}

/// `kbq_cdc_changes_total` counts the changes written, not the records dead-lettered because
/// their row cannot be written: of an upsert and a delete that fit the table and an upsert whose
/// value does not (a string into INT64), one upsert and one delete are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_whose_row_cannot_be_written_is_not_counted_as_a_change() {
    let f = Fixture::with(SinkOptions::partitions(1)).await;
    let store = &f.emulator.store;
    store
        .insert_dataset(Dataset::new("p", "d"))
        .expect("dataset");
    let schema: TableSchema = serde_json::from_value(serde_json::json!({"fields": [
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "n", "type": "INTEGER"},
        {"name": "kafka_topic", "type": "STRING"},
        {"name": "kafka_partition", "type": "INTEGER"},
        {"name": "kafka_offset", "type": "INTEGER"}]}))
    .unwrap();
    let mut table = Table::new(f.table_ref(), schema);
    table.table_constraints = Some(serde_json::json!({"primaryKey": {"columns": ["id"]}}));
    store.insert_table(table).expect("table");
    let change = |key: &str, value: &str| Change {
        partition: 0,
        key: Some(key.as_bytes().to_vec()),
        value: Some(value.as_bytes().to_vec()),
    };
    let changes = [
        change(r#"{"id": 1}"#, r#"{"op": "c", "after": {"id": 1, "n": 5}}"#),
        change(
            r#"{"id": 2}"#,
            r#"{"op": "c", "after": {"id": 2, "n": "x"}}"#,
        ),
        change(r#"{"id": 3}"#, r#"{"op": "c", "after": {"id": 3, "n": 7}}"#),
        change(
            r#"{"id": 3}"#,
            r#"{"op": "d", "before": {"id": 3, "n": 7}}"#,
        ),
    ];
    support::cdc::produce(&producer(&f.bootstrap), &f.topic, &changes);
    let route = format!(
        "  - topics: [\"{}\"]\n    table: \"{}\"\n    cdc:\n      mode: upsert_delete\n      primary_key: [id]",
        f.topic, f.table
    );
    let config = f.config_with(
        &unique_name("cdc-count"),
        &support::sink::Tweaks {
            schemaless_json: true,
            delivery: Some("at_least_once"),
            routes: vec![route],
            ..Default::default()
        },
    );
    let mut daemon = Daemon::start(&config);
    let want: State = [(1, (String::new(), 5))].into_iter().collect();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) && daemon.is_running() {
        let rows = f
            .emulator
            .store
            .visible_row_count(&f.table_ref())
            .unwrap_or(0);
        if rows == want.len() as u64 && f.dead_letter_count() == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let letters = f.dead_letters(1);
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].1, 1, "the upsert of id 2: {letters:?}");
    let upserts = daemon.metric_with("kbq_cdc_changes_total", &["change=\"upsert\""]);
    let deletes = daemon.metric_with("kbq_cdc_changes_total", &["change=\"delete\""]);
    assert_eq!(
        (upserts, deletes),
        (2.0, 1.0),
        "ids 1 and 3 upserted, 3 deleted"
    );
    assert!(daemon.terminate().success());
}

/// A partition whose first record is a tombstone: the connection opens with the key-only DELETE
/// row's writer schema, which must still declare the table's REQUIRED columns (`name` and
/// `version`, from the Avro row's non-null fields), or the call is refused as a whole
/// (`INVALID_ARGUMENT`, no field for the REQUIRED columns) and the partition stops. A restart
/// at the offset of a tombstone meets the same case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_first_on_a_partition_opens_the_connection_with_the_required_columns() {
    let (f, registry) = setup(1).await;
    let config = config(&f, &registry, &unique_name("cdc-tombstone-first"));
    let producer = producer(&f.bootstrap);
    let mut source = Source::new(1);
    source.push(7, None);
    for id in 0..5 {
        source.upsert(id, "c");
    }
    source.delete(2);
    source.produce(&producer, &f.topic);
    let daemon = start(&config, "tombstone-first");
    let started = Instant::now();
    while table_state(&f) != source.state && started.elapsed() < Duration::from_secs(30) {
        let lines = daemon.lines().join("\n");
        assert!(!lines.contains("writer failed"), "{lines}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(table_state(&f), source.state);
    assert_eq!(
        daemon.metric_with("kbq_cdc_changes_total", &["change=\"delete\""]),
        3.0,
        "the tombstone of 7, and the delete of 2 and its tombstone"
    );
}

/// The same when a REQUIRED column is a RECORD (the row's non-null `address`): the key-only
/// row's writer schema declares it with its nested message type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_first_declares_a_required_record_column_with_its_type() {
    let envelope = ENVELOPE.replace(
        r#"{"name":"version","type":"long"}]}"#,
        r#"{"name":"version","type":"long"},
    {"name":"address","type":{"type":"record","name":"Address","fields":[
      {"name":"city","type":"string"}]}}]}"#,
    );
    assert_ne!(envelope, ENVELOPE);
    let f = Fixture::with(SinkOptions::partitions(1)).await;
    let (addr, registry) = Registry::serve(
        HashMap::from([(VALUE_ID, envelope.clone()), (KEY_ID, KEY.to_string())]),
        None,
    )
    .await;
    registry.subject(&format!("{}-value", f.topic), VALUE_ID);
    std::mem::forget(registry);
    let config = config(
        &f,
        &format!("http://{addr}"),
        &unique_name("cdc-tombstone-record"),
    );
    let schema = Schema::parse_str(&envelope).unwrap();
    let source = Source::new(1);
    let row = Value::Record(vec![
        ("id".into(), Value::Long(1)),
        ("name".into(), Value::String("customer-1-v1".into())),
        ("version".into(), Value::Long(1)),
        (
            "address".into(),
            Value::Record(vec![("city".into(), Value::String("x".into()))]),
        ),
    ]);
    let event = Value::Record(vec![
        ("before".into(), Value::Union(0, Box::new(Value::Null))),
        ("after".into(), Value::Union(1, Box::new(row))),
        (
            "source".into(),
            Value::Record(vec![
                ("connector".into(), Value::String("postgresql".into())),
                ("lsn".into(), Value::Union(0, Box::new(Value::Null))),
            ]),
        ),
        ("op".into(), Value::String("c".into())),
        ("ts_ms".into(), Value::Union(0, Box::new(Value::Null))),
    ]);
    let changes = [
        Change {
            partition: 0,
            key: Some(source.key_of(9)),
            value: None,
        },
        Change {
            partition: 0,
            key: Some(source.key_of(1)),
            value: Some(confluent(VALUE_ID, &datum(&schema, event))),
        },
    ];
    support::cdc::produce(&producer(&f.bootstrap), &f.topic, &changes);
    let daemon = start(&config, "tombstone-record");
    let want: State = [(1, ("customer-1-v1".to_string(), 1))]
        .into_iter()
        .collect();
    let started = Instant::now();
    while table_state(&f) != want && started.elapsed() < Duration::from_secs(30) {
        let lines = daemon.lines().join("\n");
        assert!(!lines.contains("writer failed"), "{lines}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(table_state(&f), want);
    let table = f.emulator.store.get_table(&f.table_ref()).expect("created");
    let address = table.schema.fields.iter().find(|c| c.name == "address");
    assert_eq!(
        address.map(|c| (c.field_type.clone(), c.mode())),
        Some((
            kbq_core::table_schema::FieldType::Record,
            kbq_core::table_schema::Mode::Required
        )),
        "{table:?}"
    );
}
