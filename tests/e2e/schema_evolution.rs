//! Schema evolution end to end (`bigquery.schema_update: add_columns`): the real daemon reads
//! Confluent-framed records through an in-test Schema Registry; the writer schema changes
//! mid-stream to one with a new nullable field, and the daemon adds the column, reconnects with
//! the new writer schema and goes on without a restart or a lost record. Incompatible schemas
//! (a type change, a new required field) send their records to the dead-letter topic.

use crate::support;
use support::daemon as daemon_support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use apache_avro::Schema;
use apache_avro::types::Value;
use daemon_support::Daemon;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use kbq_transcode::frame_confluent;
use support::kafka::{produce_to_partition, producer, unique_name};
use support::registry::Registry;
use support::sink::{Fixture as SinkFixture, Tweaks};

const V1: &str = r#"{"type":"record","name":"User","namespace":"test","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"}]}"#;
/// V1 plus a nullable field: the compatible change.
const V2: &str = r#"{"type":"record","name":"User","namespace":"test","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"},
  {"name":"email","type":["null","string"],"default":null}]}"#;
/// `id` changed type.
const V3_TYPE_CHANGE: &str = r#"{"type":"record","name":"User","namespace":"test","fields":[
  {"name":"id","type":"string"},
  {"name":"name","type":"string"}]}"#;
/// A new field that can never be null.
const V4_NEW_REQUIRED: &str = r#"{"type":"record","name":"User","namespace":"test","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"},
  {"name":"tier","type":"int"}]}"#;
/// V1 plus a nullable record whose own fields are plain (never null) types: a compatible change,
/// but its subfields must become NULLABLE columns (BigQuery adds no REQUIRED field to a table).
const V5_NEW_NESTED: &str = r#"{"type":"record","name":"User","namespace":"test","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"},
  {"name":"address","type":["null",{"type":"record","name":"Address","fields":[
    {"name":"city","type":"string"},
    {"name":"zip","type":"int"}]}],"default":null}]}"#;

const PARTITIONS: i32 = 2;

#[allow(deprecated)]
fn encode(schema_id: u32, schema: &Schema, id: i64) -> Vec<u8> {
    let mut fields = vec![
        (
            "id".to_string(),
            if schema_id == 3 {
                Value::String(id.to_string())
            } else {
                Value::Long(id)
            },
        ),
        ("name".to_string(), Value::String(format!("user-{id}"))),
    ];
    match schema_id {
        2 => fields.push((
            "email".into(),
            Value::Union(
                1,
                Box::new(Value::String(format!("user-{id}@example.test"))),
            ),
        )),
        4 => fields.push(("tier".into(), Value::Int(1))),
        // every third record without an address
        5 => fields.push((
            "address".into(),
            if id % 3 == 0 {
                Value::Union(0, Box::new(Value::Null))
            } else {
                Value::Union(
                    1,
                    Box::new(Value::Record(vec![
                        ("city".into(), Value::String(format!("city-{id}"))),
                        ("zip".into(), Value::Int(id as i32)),
                    ])),
                )
            },
        )),
        _ => {}
    }
    let avro = apache_avro::to_avro_datum(schema, Value::Record(fields)).expect("encode avro");
    frame_confluent(schema_id, &avro)
}

/// The shared daemon fixture (`tests/support/sink.rs`: topic, dead-letter topic, emulator, config)
/// with this file's table and writer schemas.
struct Fixture {
    sink: SinkFixture,
    schemas: HashMap<u32, Schema>,
}

impl std::ops::Deref for Fixture {
    type Target = SinkFixture;

    fn deref(&self) -> &SinkFixture {
        &self.sink
    }
}

impl Fixture {
    async fn new() -> Fixture {
        let sink = SinkFixture::new(PARTITIONS).await;
        // Registry input does not create the table: it exists beforehand, with the v1 columns
        // and the fixture's metadata columns.
        sink.create_table(TableSchema {
            fields: vec![
                TableFieldSchema::new("id", FieldType::Int64, Mode::Required),
                TableFieldSchema::new("name", FieldType::String, Mode::Required),
                TableFieldSchema::new("kafka_topic", FieldType::String, Mode::Required),
                TableFieldSchema::new("kafka_partition", FieldType::Int64, Mode::Required),
                TableFieldSchema::new("kafka_offset", FieldType::Int64, Mode::Required),
            ],
        });
        let schemas = [
            (1, V1),
            (2, V2),
            (3, V3_TYPE_CHANGE),
            (4, V4_NEW_REQUIRED),
            (5, V5_NEW_NESTED),
        ]
        .into_iter()
        .map(|(id, text)| (id, Schema::parse_str(text).expect("schema")))
        .collect();
        Fixture { sink, schemas }
    }

    fn config(&self, registry: std::net::SocketAddr, schema_update: &'static str) -> PathBuf {
        self.sink.config_with(
            &unique_name("evolve"),
            &Tweaks {
                registry_url: Some(format!("http://{registry}")),
                schema_update: Some(schema_update),
                ..Tweaks::default()
            },
        )
    }

    /// Produces records `ids` with writer schema `schema_id`, round-robin over the partitions;
    /// returns the (partition, offset) of each id.
    fn produce(&self, schema_id: u32, ids: std::ops::Range<i64>) -> BTreeMap<i64, (i64, i64)> {
        let p = producer(&self.bootstrap);
        let schema = &self.schemas[&schema_id];
        let mut per: BTreeMap<i32, Vec<(i64, Vec<u8>)>> = BTreeMap::new();
        for id in ids {
            per.entry((id % PARTITIONS as i64) as i32)
                .or_default()
                .push((id, encode(schema_id, schema, id)));
        }
        let mut out = BTreeMap::new();
        for (partition, records) in per {
            let refs: Vec<(&[u8], &[u8])> = records
                .iter()
                .map(|(_, v)| (b"k".as_slice(), v.as_slice()))
                .collect();
            let offsets = produce_to_partition(&p, &self.topic, partition, &refs);
            for ((id, _), offset) in records.iter().zip(offsets) {
                out.insert(*id, (partition as i64, offset));
            }
        }
        out
    }

    fn columns(&self) -> Vec<String> {
        self.emulator
            .store
            .get_table(&self.table_ref())
            .expect("table")
            .schema
            .fields
            .iter()
            .map(|f| f.name.clone())
            .collect()
    }

    /// Every visible row as column name → rendered value (strings; `null` as None).
    fn rows(&self) -> Vec<BTreeMap<String, Option<String>>> {
        let table = self
            .emulator
            .store
            .get_table(&self.table_ref())
            .expect("table");
        let page = self
            .emulator
            .store
            .read_visible_rows(&self.table_ref(), 0, usize::MAX)
            .expect("rows");
        page.rows
            .iter()
            .map(|row| {
                let r = row.codec.render(&row.data, &table.schema);
                table
                    .schema
                    .fields
                    .iter()
                    .enumerate()
                    .map(|(i, f)| (f.name.clone(), r["f"][i]["v"].as_str().map(str::to_string)))
                    .collect()
            })
            .collect()
    }

    /// Every visible row as the emulator renders it (`tabledata.list` shape), with the schema.
    fn raw_rows(&self) -> (TableSchema, Vec<serde_json::Value>) {
        let table = self
            .emulator
            .store
            .get_table(&self.table_ref())
            .expect("table");
        let page = self
            .emulator
            .store
            .read_visible_rows(&self.table_ref(), 0, usize::MAX)
            .expect("rows");
        let rows = page
            .rows
            .iter()
            .map(|row| row.codec.render(&row.data, &table.schema))
            .collect();
        (table.schema, rows)
    }

    async fn wait_rows(&self, at_least: usize, timeout: Duration) -> usize {
        let started = Instant::now();
        loop {
            let n = self.rows().len();
            if n >= at_least || started.elapsed() > timeout {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_nullable_field_mid_stream_adds_a_column_without_restart_or_loss() {
    let f = Fixture::new().await;
    let texts = [(1, V1), (2, V2), (3, V3_TYPE_CHANGE), (4, V4_NEW_REQUIRED)]
        .into_iter()
        .map(|(id, t)| (id, t.to_string()))
        .collect();
    let (registry, _reg) = Registry::serve(texts, None).await;
    let config = f.config(registry, "add_columns");
    let log = f.dir.path().join("daemon.log");

    let mut positions = f.produce(1, 0..1_000);
    let mut daemon = Daemon::start_logging_to(&config, "info,rdkafka=warn", &log);
    let seen = f.wait_rows(1_000, Duration::from_secs(120)).await;
    assert_eq!(seen, 1_000, "v1 records before the schema change");
    assert!(!f.columns().contains(&"email".to_string()));

    // Mid-stream: the new schema, the two incompatible ones, then the old schema again (old
    // producers keep writing after the change).
    positions.extend(f.produce(2, 1_000..2_000));
    let bad_type = f.produce(3, 5_000..5_001);
    let bad_required = f.produce(4, 5_002..5_003);
    positions.extend(f.produce(1, 2_000..2_500));

    let seen = f.wait_rows(2_500, Duration::from_secs(120)).await;
    assert!(daemon.is_running(), "the daemon never restarted");
    let rows = f.rows();
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(seen, 2_500, "every good record visible; log:\n{log_text}");

    // Exactly once, by source position.
    let mut by_position: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    for row in &rows {
        let num = |c: &str| row[c].as_deref().expect(c).parse::<i64>().expect("int");
        *by_position
            .entry((num("kafka_partition"), num("kafka_offset")))
            .or_default() += 1;
    }
    let expected: BTreeSet<(i64, i64)> = positions.values().copied().collect();
    let got: BTreeSet<(i64, i64)> = by_position.keys().copied().collect();
    assert_eq!(got, expected, "every good record, nothing else");
    assert!(by_position.values().all(|n| *n == 1), "no duplicates");

    // The new column, filled for v2 records only.
    let columns = f.columns();
    assert!(columns.contains(&"email".to_string()), "{columns:?}");
    assert!(
        !columns.iter().any(|c| c == "tier"),
        "no column for the incompatible schema"
    );
    let table = f.emulator.store.get_table(&f.table_ref()).expect("table");
    let email = table
        .schema
        .fields
        .iter()
        .find(|c| c.name == "email")
        .expect("email column");
    assert_eq!(email.mode(), Mode::Nullable);
    for row in &rows {
        let id: i64 = row["id"].as_deref().expect("id").parse().expect("int");
        let want = (1_000..2_000)
            .contains(&id)
            .then(|| format!("user-{id}@example.test"));
        assert_eq!(row["email"], want, "email of id {id}");
    }

    // The incompatible records are dead letters that say why.
    let dlq: Vec<(i64, String)> = (f.dead_letters(2).into_iter())
        .map(|(_, offset, _, reason)| (offset, reason))
        .collect();
    let reason_of = |positions: &BTreeMap<i64, (i64, i64)>| {
        let (_, offset) = positions.values().next().copied().expect("one record");
        dlq.iter()
            .find(|(o, _)| *o == offset)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("dead letter at offset {offset}: {dlq:?}"))
    };
    let type_reason = reason_of(&bad_type);
    assert!(
        type_reason.contains("id") && type_reason.contains("INTEGER"),
        "{type_reason}"
    );
    let required_reason = reason_of(&bad_required);
    assert!(
        required_reason.contains("tier") && required_reason.contains("required"),
        "{required_reason}"
    );
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_an_operator_adds_is_written_once_appends_report_the_new_table_schema() {
    use kafka_bigquery_sink::bigquery::auth::Auth;
    use kafka_bigquery_sink::bigquery::rest_client::{RestClient, TableReference};

    let f = Fixture::new().await;
    let texts = HashMap::from([(2, V2.to_string())]);
    let (registry, _reg) = Registry::serve(texts, None).await;
    // Without add_columns the daemon never changes the table: `email` has no column and is
    // ignored until someone adds one.
    let config = f.config(registry, "none");
    let log = f.dir.path().join("daemon.log");
    let mut positions = f.produce(2, 0..500);
    let mut daemon = Daemon::start_logging_to(&config, "info,rdkafka=warn", &log);
    assert_eq!(f.wait_rows(500, Duration::from_secs(120)).await, 500);
    assert!(!f.columns().contains(&"email".to_string()));

    let rest = RestClient::new(
        &format!("http://{}", f.emulator.addr),
        Auth::None,
        Duration::from_secs(10),
    )
    .expect("rest client");
    let table_ref = TableReference::new("p", "d", &f.table);
    let mut table = rest.get_table(&table_ref).await.expect("get table");
    table.schema.fields.push(TableFieldSchema::new(
        "email",
        FieldType::String,
        Mode::Nullable,
    ));
    rest.patch_table_schema(&table_ref, &table.schema, None)
        .await
        .expect("patch the table");

    // The next appends carry updated_schema; the daemon re-reads the table, recompiles the plan
    // and reconnects with a descriptor that has the column.
    let mut next = 500;
    let started = Instant::now();
    let filled = loop {
        positions.extend(f.produce(2, next..next + 100));
        next += 100;
        let total = positions.len();
        assert_eq!(f.wait_rows(total, Duration::from_secs(60)).await, total);
        let rows = f.rows();
        if rows
            .iter()
            .any(|r| r.get("email").is_some_and(Option::is_some))
        {
            break rows;
        }
        if started.elapsed() > Duration::from_secs(60) {
            panic!("the new column was never written");
        }
    };
    assert!(daemon.is_running(), "the daemon never restarted");

    let mut by_partition: BTreeMap<i64, BTreeMap<i64, (i64, Option<String>)>> = BTreeMap::new();
    for row in &filled {
        let num = |c: &str| row[c].as_deref().expect(c).parse::<i64>().expect("int");
        let previous = by_partition
            .entry(num("kafka_partition"))
            .or_default()
            .insert(num("kafka_offset"), (num("id"), row["email"].clone()));
        assert!(previous.is_none(), "no duplicates");
    }
    let got: BTreeSet<(i64, i64)> = by_partition
        .iter()
        .flat_map(|(p, rows)| rows.keys().map(move |o| (*p, *o)))
        .collect();
    let expected: BTreeSet<(i64, i64)> = positions.values().copied().collect();
    assert_eq!(got, expected, "every record exactly once");
    for rows in by_partition.values() {
        let mut seen_filled = false;
        for (id, email) in rows.values() {
            if *id < 500 {
                assert_eq!(*email, None, "written before the column existed");
            }
            match email {
                Some(e) => {
                    assert_eq!(*e, format!("user-{id}@example.test"));
                    seen_filled = true;
                }
                None => assert!(
                    !seen_filled,
                    "once a partition writes the column it keeps doing so"
                ),
            }
        }
    }
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_nullable_record_of_plain_fields_adds_a_column_with_nullable_subfields() {
    let f = Fixture::new().await;
    let texts = HashMap::from([(1, V1.to_string()), (5, V5_NEW_NESTED.to_string())]);
    let (registry, _reg) = Registry::serve(texts, None).await;
    let config = f.config(registry, "add_columns");
    let log = f.dir.path().join("daemon.log");

    let mut positions = f.produce(1, 0..200);
    let mut daemon = Daemon::start_logging_to(&config, "info,rdkafka=warn", &log);
    assert_eq!(f.wait_rows(200, Duration::from_secs(120)).await, 200);
    positions.extend(f.produce(5, 200..500));
    let seen = f.wait_rows(500, Duration::from_secs(120)).await;
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        seen, 500,
        "every v2 record visible, none dead-lettered; log:\n{log_text}"
    );
    assert!(daemon.is_running(), "the daemon never restarted");

    // The column and every field under it are NULLABLE: BigQuery refuses a new REQUIRED one.
    let (schema, rows) = f.raw_rows();
    let address = schema
        .fields
        .iter()
        .find(|c| c.name == "address")
        .expect("address column");
    assert_eq!(address.field_type, FieldType::Record);
    assert_eq!(address.mode(), Mode::Nullable);
    let sub: Vec<(&str, FieldType, Mode)> = address
        .fields
        .iter()
        .map(|c| (c.name.as_str(), c.field_type.clone(), c.mode()))
        .collect();
    assert_eq!(
        sub,
        vec![
            ("city", FieldType::String, Mode::Nullable),
            ("zip", FieldType::Int64, Mode::Nullable),
        ]
    );

    // Value by value: v1 rows and v2 rows without an address have a NULL column; the others
    // carry the record's values.
    let column = |name: &str| {
        schema
            .fields
            .iter()
            .position(|c| c.name == name)
            .unwrap_or_else(|| panic!("column {name}"))
    };
    let (id_at, address_at) = (column("id"), column("address"));
    let (partition_at, offset_at) = (column("kafka_partition"), column("kafka_offset"));
    let mut by_id: BTreeMap<i64, serde_json::Value> = BTreeMap::new();
    let mut got_positions = BTreeSet::new();
    for row in &rows {
        let int = |at: usize| -> i64 {
            row["f"][at]["v"]
                .as_str()
                .expect("int column")
                .parse()
                .expect("int")
        };
        assert!(
            got_positions.insert((int(partition_at), int(offset_at))),
            "no duplicates"
        );
        let previous = by_id.insert(int(id_at), row["f"][address_at]["v"].clone());
        assert!(previous.is_none(), "one row per id");
    }
    let expected: BTreeSet<(i64, i64)> = positions.values().copied().collect();
    assert_eq!(got_positions, expected, "every record exactly once");
    for (id, address) in &by_id {
        if *id < 200 || id % 3 == 0 {
            assert!(address.is_null(), "id {id}: address {address}");
        } else {
            assert_eq!(
                address["f"][0]["v"].as_str(),
                Some(format!("city-{id}").as_str()),
                "id {id}: {address}"
            );
            assert_eq!(
                address["f"][1]["v"].as_str(),
                Some(id.to_string().as_str()),
                "id {id}: {address}"
            );
        }
    }
    assert_eq!(f.dead_letter_count(), 0, "no dead letters");
    assert!(daemon.terminate().success());
}
