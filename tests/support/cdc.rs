//! The change data capture fixture of `tests/e2e/sink_cdc.rs` and `tests/e2e/cdc_formats_e2e.rs`
//! (docs/cdc.md): a CDC route's config, the source table's state as the change producers keep
//! it, the table's state as a query reads it, the wait until the two are equal, and the
//! independent producer `tests/python/cdc_producer.py`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rdkafka::producer::{FutureProducer, FutureRecord};

use super::sink::Fixture;

/// A source table's state: id → (name, version).
pub type State = BTreeMap<i64, (String, i64)>;

/// One Kafka record of a change stream: partition, key, value (`None`: a tombstone).
#[derive(Debug, Clone)]
pub struct Change {
    pub partition: i32,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// The independent change producer (`tests/python/cdc_producer.py`).
pub fn producer_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/cdc_producer.py")
}

/// A state as the producer writes it: `{"<id>": [name, version]}`.
pub fn state_from_json(state: &serde_json::Value) -> State {
    state
        .as_object()
        .expect("a state object")
        .iter()
        .map(|(id, v)| {
            let name = v[0].as_str().expect("a name").to_string();
            (
                id.parse().unwrap(),
                (name, v[1].as_i64().expect("a version")),
            )
        })
        .collect()
}

/// Produces `changes` in order (keys and tombstones as given) and waits for every
/// acknowledgement.
pub fn produce<'a>(
    producer: &FutureProducer,
    topic: &str,
    changes: impl IntoIterator<Item = &'a Change>,
) {
    let pending: Vec<_> = changes
        .into_iter()
        .map(|c| {
            let mut record: FutureRecord<'_, [u8], [u8]> =
                FutureRecord::to(topic).partition(c.partition);
            if let Some(k) = &c.key {
                record = record.key(k.as_slice());
            }
            if let Some(v) = &c.value {
                record = record.payload(v.as_slice());
            }
            producer
                .send_result(record)
                .map_err(|(e, _)| e)
                .expect("enqueue")
        })
        .collect();
    for f in pending {
        futures::executor::block_on(f)
            .expect("delivery")
            .map_err(|(e, _)| e)
            .expect("acknowledged");
    }
}

/// The config of one CDC route from the fixture's topic into its table, at-least-once, with
/// `route` (YAML lines at the route's indentation: `format`, `create_table`, `cdc`, …) and
/// `writer` (more lines under `writer:`).
pub fn config(f: &Fixture, registry_url: &str, group: &str, route: &str, writer: &str) -> PathBuf {
    let path = f.dir.path().join(format!("{group}.yaml"));
    let text = format!(
        r#"
kafka:
  bootstrap_servers: "{bootstrap}"
  group_id: "{group}"
  topics: ["{topic}"]
  properties:
    session.timeout.ms: "6000"
    heartbeat.interval.ms: "500"
schema_registry:
  url: "{registry_url}"
  retries: 2
bigquery:
  project: p
  dataset: d
  table: unused
  endpoint: "http://{emulator}"
  credentials: none
routes:
  - topics: ["{topic}"]
    table: "{table}"
{route}
dead_letter:
  topic: "{dlq}"
delivery: at_least_once
checkpoint:
  interval: 200ms
writer:
  linger: 20ms
{writer}
metrics:
  listen: "127.0.0.1:0"
log:
  format: json
shutdown_deadline: 20s
"#,
        bootstrap = f.bootstrap,
        topic = f.topic,
        table = f.table,
        emulator = f.emulator.addr,
        dlq = f.dlq,
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The table as a query reads it: id → (name, version) (empty while it does not exist).
pub fn table_state(f: &Fixture) -> State {
    let Some(schema) = f.emulator.store.get_table(&f.table_ref()).map(|t| t.schema) else {
        return State::new();
    };
    let Ok(page) = f
        .emulator
        .store
        .read_visible_rows(&f.table_ref(), 0, usize::MAX)
    else {
        return State::new();
    };
    let column = |name: &str| {
        schema
            .fields
            .iter()
            .position(|c| c.name == name)
            .expect("column")
    };
    let (id, name, version) = (column("id"), column("name"), column("version"));
    page.rows
        .iter()
        .map(|r| {
            let cells = r.codec.render(&r.data, &schema);
            let cell = |i: usize| cells["f"][i]["v"].as_str().unwrap_or_default().to_string();
            (
                cell(id).parse().unwrap(),
                (cell(name), cell(version).parse().unwrap()),
            )
        })
        .collect()
}

/// Waits until the table equals `want`; on timeout, names the keys that differ.
pub fn wait_converged(f: &Fixture, want: &State, timeout: Duration) {
    let started = Instant::now();
    loop {
        let got = table_state(f);
        if &got == want {
            return;
        }
        if started.elapsed() > timeout {
            let missing: Vec<_> = want
                .keys()
                .filter(|k| !got.contains_key(k))
                .take(5)
                .collect();
            let extra: Vec<_> = got
                .keys()
                .filter(|k| !want.contains_key(k))
                .take(5)
                .collect();
            let wrong: Vec<_> = want
                .iter()
                .filter(|(k, v)| got.get(k).is_some_and(|g| g != *v))
                .take(5)
                .collect();
            panic!(
                "table != source after {timeout:?}: {} rows, {} keys expected; missing {missing:?}, extra {extra:?}, wrong {wrong:?}",
                got.len(),
                want.len()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
