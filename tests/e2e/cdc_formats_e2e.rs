//! Change data capture from Protobuf, JSON Schema and schemaless JSON topics end to end
//! (docs/cdc.md): a change stream whose keys and values Confluent's own `ProtobufSerializer` /
//! `JSONSerializer` wrote (`tests/python/cdc_producer.py`; plain `json.dumps` objects for
//! schemaless JSON, in Kafka Connect's `{"schema", "payload"}` envelope for `schemas_enable`),
//! with the registry as the serializers left it, through the real broker and the real daemon
//! into the emulator. Debezium's envelope in every format; the unwrapped and plain shapes in
//! Protobuf and JSON Schema. The table is created from the registered schema (the row's
//! columns: `after`'s for the envelope) with the primary key of the registered key schema
//! (schemaless JSON: an existing table, the configured key), and must end equal to the source's
//! state per key, across a SIGKILL.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kbq_core::table_schema::TableSchema;
use kbq_emulator::store::{Dataset, Table};
use serde_json::Value as Json;
use support::cdc::{Change, State, producer_script, state_from_json, wait_converged};
use support::daemon::Daemon;
use support::kafka::{producer, unique_name};
use support::python::python;
use support::registry::{Registry, hex};
use support::sink::{Fixture, SinkOptions};

const PARTITIONS: i32 = 3;

/// The stream the Python producer wrote: the registry, the states after each part, the
/// records of each part.
struct Stream {
    registry: Json,
    states: Vec<State>,
    parts: [Vec<Change>; 2],
}

fn generate(python: &Path, format: &str, shape: &str, topic: &str) -> Stream {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stream.jsonl");
    let script = producer_script();
    let status = std::process::Command::new(python)
        .arg(&script)
        .arg("parts")
        .arg(&file)
        .args([
            "--format",
            format,
            "--shape",
            shape,
            "--topic",
            topic,
            "--partitions",
        ])
        .arg(PARTITIONS.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "{} failed", script.display());
    let lines: Vec<Json> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let bytes = |v: &Json| v.as_str().map(hex);
    let part = |n: i64| -> Vec<Change> {
        lines[1..]
            .iter()
            .filter(|r| r["part"] == n)
            .map(|r| Change {
                partition: r["partition"].as_i64().unwrap() as i32,
                key: bytes(&r["key"]),
                value: bytes(&r["value"]),
            })
            .collect()
    };
    Stream {
        registry: lines[0]["registry"].clone(),
        states: lines[0]["states"]
            .as_array()
            .unwrap()
            .iter()
            .map(state_from_json)
            .collect(),
        parts: [part(1), part(2)],
    }
}

/// A CDC route of `format` with `route` (YAML lines at the route's indentation).
fn config(f: &Fixture, registry: &str, format: &str, route: &str) -> PathBuf {
    let route = format!("    format: {format}\n{route}");
    let group = unique_name("cdc-formats");
    support::cdc::config(f, &format!("http://{registry}"), &group, &route, "")
}

/// Where the change is in the records (docs/cdc.md), with what that means for the test: the
/// created table's columns and the text of the truncate's dead-letter reason.
#[derive(Clone, Copy)]
enum Shape {
    Debezium,
    /// `ExtractNewRecordState`: the row with `__op` and `__deleted`, which become columns.
    Unwrapped,
    /// The row with a change-type field `kind` (a column too).
    Plain,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Debezium => "debezium",
            Shape::Unwrapped => "unwrapped",
            Shape::Plain => "plain",
        }
    }

    fn columns(self) -> &'static [&'static str] {
        match self {
            Shape::Debezium => &["id", "name", "version"],
            Shape::Unwrapped => &["__deleted", "__op", "id", "name", "version"],
            Shape::Plain => &["id", "kind", "name", "version"],
        }
    }

    /// The truncate's reason names its operation or change type.
    fn truncate(self) -> &'static str {
        match self {
            Shape::Debezium | Shape::Unwrapped => "\"t\"",
            Shape::Plain => "\"TRUNCATE\"",
        }
    }
}

async fn converges_across_a_kill(format: &str, route: &str) {
    converges_in_shape(format, Shape::Debezium, route).await;
}

async fn converges_in_shape(format: &str, shape: Shape, route: &str) {
    let Some(python) = python() else {
        return;
    };
    let f = Fixture::with(SinkOptions::partitions(PARTITIONS)).await;
    let mut stream = generate(&python, format, shape.name(), &f.topic);
    let mut bad_records = 1; // the truncate
    if format == "schemaless" {
        // A record in Kafka Connect's envelope on a route left as plain JSON: a bad record that
        // names the setting, never a row without its payload (key 999 is not in the source).
        stream.parts[0].push(Change {
            partition: 0,
            key: Some(br#"{"id": 999}"#.to_vec()),
            value: Some(
                br#"{"schema": {"type": "struct", "fields": [], "optional": false}, "payload": {"before": null, "after": {"id": 999, "name": "wrapped", "version": 1}, "op": "c"}}"#
                    .to_vec(),
            ),
        });
        bad_records += 1;
    }
    let (registry, _) = Registry::serve_dump(stream.registry.clone()).await;
    let route_format = match format {
        "json" => "json_schema",
        "schemaless" | "connect" => "json",
        other => other,
    };
    if format == "schemaless" {
        // Plain schemaless routes write into an existing table, which needs the primary key;
        // records in Kafka Connect's envelope carry their schema, and the route creates it.
        let store = &f.emulator.store;
        store
            .insert_dataset(Dataset::new("p", "d"))
            .expect("dataset");
        let schema: TableSchema = serde_json::from_value(serde_json::json!({"fields": [
            {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
            {"name": "name", "type": "STRING"},
            {"name": "version", "type": "INTEGER"}]}))
        .unwrap();
        let mut table = Table::new(f.table_ref(), schema);
        table.table_constraints = Some(serde_json::json!({"primaryKey": {"columns": ["id"]}}));
        store.insert_table(table).expect("table");
    }
    let config = config(&f, &registry.to_string(), route_format, route);
    let producer = producer(&f.bootstrap);

    support::cdc::produce(&producer, &f.topic, &stream.parts[0]);
    let name = format!("{format}-{}", shape.name());
    let mut daemon = Daemon::start_named(&config, &format!("{name}-first"));
    wait_converged(&f, &stream.states[0], Duration::from_secs(90));
    let table = f.emulator.store.get_table(&f.table_ref()).expect("created");
    assert_eq!(
        table.primary_key(),
        ["id"],
        "from the registered key schema"
    );
    let mut columns: Vec<&str> = table
        .schema
        .fields
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    columns.sort();
    assert_eq!(columns, shape.columns(), "the row's columns only");
    let letters = f.dead_letters(bad_records);
    assert_eq!(letters.len(), bad_records, "the truncate: {letters:?}");
    assert!(letters.iter().all(|l| l.2 == "cdc_change"), "{letters:?}");
    assert!(
        letters.iter().any(|l| l.3.contains(shape.truncate())),
        "{letters:?}"
    );
    if format == "schemaless" {
        assert!(
            letters
                .iter()
                .any(|l| l.3.contains("set cdc.schemas_enable: true")),
            "{letters:?}"
        );
    }
    assert!(daemon.metric_with("kbq_cdc_changes_total", &["change=\"delete\""]) > 0.0);

    // A crash, then more changes: what was appended after the last commit is sent again on
    // restart with its old sequence numbers, behind newer changes of the same keys.
    daemon.kill();
    support::cdc::produce(&producer, &f.topic, &stream.parts[1]);
    let mut daemon = Daemon::start_named(&config, &format!("{name}-after-the-kill"));
    wait_converged(&f, &stream.states[1], Duration::from_secs(90));
    assert_eq!(
        f.dead_letter_count(),
        bad_records as i64,
        "no new bad records"
    );
    assert!(daemon.errors().is_empty(), "{:?}", daemon.errors());
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_debezium_changes_from_confluents_serializer_converge_across_a_kill() {
    // Ordered by the source position, the offset breaking ties.
    let route = "    create_table: {}\n    cdc:\n      mode: upsert_delete\n      sequence: {source_field: source.lsn}";
    converges_across_a_kill("protobuf", route).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_debezium_changes_from_confluents_serializer_converge_across_a_kill() {
    // Ordered by the Kafka offset.
    let route =
        "    create_table: {}\n    cdc:\n      mode: upsert_delete\n      sequence: {epoch: 1}";
    converges_across_a_kill("json", route).await;
}

/// Schemaless JSON (plain objects, keys too) into an existing table with the configured key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemaless_json_debezium_changes_converge_across_a_kill() {
    let route = "    cdc:\n      mode: upsert_delete\n      primary_key: [id]";
    converges_across_a_kill("schemaless", route).await;
}

/// Schemaless JSON from Kafka Connect's `JsonConverter` with `schemas.enable=true`: keys and
/// values in the `{"schema", "payload"}` envelope, ordered by the `source.lsn` of the payload;
/// the table is created from the schema block of the topic's newest record, its primary key from
/// that record's key schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemaless_json_in_kafka_connects_envelope_converges_across_a_kill() {
    let route = "    create_table: {}\n    cdc:\n      mode: upsert_delete\n      schemas_enable: true\n      sequence: {source_field: source.lsn}";
    converges_across_a_kill("connect", route).await;
}

/// The unwrapped shape (Debezium's `ExtractNewRecordState` with `delete.handling.mode:
/// rewrite`): deletes are the before row with `__deleted: "true"`, then a tombstone; a delete
/// without a before row is its tombstone alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_unwrapped_changes_converge_across_a_kill() {
    let route =
        "    create_table: {}\n    cdc:\n      mode: upsert_delete\n      format: unwrapped";
    converges_in_shape("protobuf", Shape::Unwrapped, route).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_unwrapped_changes_converge_across_a_kill() {
    let route =
        "    create_table: {}\n    cdc:\n      mode: upsert_delete\n      format: unwrapped";
    converges_in_shape("json", Shape::Unwrapped, route).await;
}

/// Plain rows with a change-type field: a Protobuf enum (INSERT is its default, off the wire).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_plain_changes_converge_across_a_kill() {
    let route = "    create_table: {}\n    cdc:\n      mode: upsert_delete\n      format: plain\n      change_type_field: kind";
    converges_in_shape("protobuf", Shape::Plain, route).await;
}

/// Plain rows with a change-type field: a JSON Schema string enum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_plain_changes_converge_across_a_kill() {
    let route = "    create_table: {}\n    cdc:\n      mode: upsert_delete\n      format: plain\n      change_type_field: kind";
    converges_in_shape("json", Shape::Plain, route).await;
}
