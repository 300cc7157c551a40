//! JSON end to end, through the real broker and the emulator, checked value by value:
//!
//! * Confluent JSON Schema: records written by Confluent's own `JSONSerializer`
//!   (`tests/python/json_vectors.py`), the schema (with a `$ref` to another registered schema)
//!   served as the serializer registered it, read with `format: json_schema` and
//!   `json_validate: true`; records that break the schema (written with the serializer's
//!   validation off) or do not fit the table go to the dead-letter topic with their reason.
//! * Schemaless JSON (`json: {}`): the same records' JSON text without the framing, written by
//!   column name into the table.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use kbq_core::table_schema::TableSchema;
use kbq_emulator::rows::RenderOptions;
use serde_json::{Map, Value as Json, json};
use support::kafka::unique_name;
use support::python::python;
use support::registry::{Registry, hex, vectors};
use support::sink::{Daemon, Fixture, SinkOptions, Tweaks};

fn table(columns: &Json) -> TableSchema {
    let mut columns = columns.as_array().unwrap().clone();
    for (name, ty) in [
        ("kafka_topic", "STRING"),
        ("kafka_partition", "INTEGER"),
        ("kafka_offset", "INTEGER"),
    ] {
        columns.push(json!({"name": name, "type": ty}));
    }
    serde_json::from_value(json!({ "fields": columns })).unwrap()
}

/// The visible rows by Kafka offset, each column rendered as `tabledata.list` renders it with
/// `useInt64Timestamp`.
fn rows(f: &Fixture, table: &TableSchema) -> HashMap<i64, Map<String, Json>> {
    let stored = f.emulator.store.get_table(&f.table_ref()).unwrap();
    let page = f
        .emulator
        .store
        .read_visible_rows(&f.table_ref(), 0, usize::MAX)
        .unwrap();
    let options = RenderOptions {
        int64_timestamp: true,
    };
    page.rows
        .iter()
        .map(|row| {
            let r = row.codec.render_with(&row.data, &stored.schema, options);
            let cells: Map<String, Json> = table
                .fields
                .iter()
                .map(|c| c.name.clone())
                .zip(r["f"].as_array().unwrap().iter().map(|c| c["v"].clone()))
                .collect();
            (
                cells["kafka_offset"].as_str().unwrap().parse().unwrap(),
                cells,
            )
        })
        .collect()
}

fn assert_row(row: &Map<String, Json>, expected: &Json, what: &str) {
    for (name, value) in expected.as_object().unwrap() {
        assert_eq!(&row[name], value, "{what}: column {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn confluent_json_schema_records_land_exactly_once_and_value_exact() {
    let Some(python) = python() else {
        return;
    };
    let lines = vectors(&python, "json_vectors.py");
    let (registry, _) = Registry::serve_dump(lines[0]["registry"].clone()).await;
    let table = table(&lines[0]["columns"]);
    let (good, bad): (Vec<&Json>, Vec<&Json>) =
        lines[1..].iter().partition(|v| v.get("error").is_none());

    let f = Fixture::with(SinkOptions::partitions(1)).await;
    f.create_table(table.clone());
    let mut payloads: Vec<Vec<u8>> = good
        .iter()
        .chain(&bad)
        .map(|v| hex(v["payload_hex"].as_str().unwrap()))
        .collect();
    payloads.push(br#"{"id": 1}"#.to_vec()); // not framed
    let offsets = f.source.produce_raw(0, &payloads);
    f.source
        .expect(offsets[..good.len()].iter().map(|o| (0, *o)));

    let config = f.config_with(
        &unique_name("json-schema"),
        &Tweaks {
            registry_url: Some(format!("http://{registry}")),
            format: Some("json_schema"),
            json_validate: true,
            ..Tweaks::default()
        },
    );
    let mut d = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));

    let mut dead = f.dead_letters(bad.len() + 1);
    dead.sort();
    let got: Vec<(i64, &str)> = dead.iter().map(|(_, o, c, _)| (*o, c.as_str())).collect();
    let mut want: Vec<(i64, &str)> = bad
        .iter()
        .zip(&offsets[good.len()..])
        .map(|(v, o)| (*o, v["error"].as_str().unwrap()))
        .collect();
    want.push((*offsets.last().unwrap(), "bad_magic"));
    assert_eq!(got, want, "{dead:?}");

    let rows = rows(&f, &table);
    for (v, o) in good.iter().zip(&offsets) {
        assert_row(&rows[o], &v["expected"], v["name"].as_str().unwrap());
    }
    assert!(d.errors().is_empty(), "{:?}", d.errors());
    assert!(d.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn schemaless_json_records_land_by_column_name() {
    let Some(python) = python() else {
        return;
    };
    let lines = vectors(&python, "json_vectors.py");
    let table = table(&lines[0]["columns"]);
    let by_name: HashMap<&str, &Json> = lines[1..]
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    // The serializer's JSON text without the 5-byte framing.
    let text = |name: &str| hex(by_name[name]["payload_hex"].as_str().unwrap())[5..].to_vec();

    let f = Fixture::with(SinkOptions::partitions(1)).await;
    f.create_table(table.clone());
    let mut payloads = vec![text("every_type"), text("only_the_required_id")];
    let bad: [(&[u8], &str); 4] = [
        (b"[1, 2]", "malformed_json"),
        (br#"{"id": 1, "id": 2}"#, "malformed_json"),
        (br#"{"id": 1, "flag": "yes"}"#, "incompatible_schema"),
        (br#"{"id": 1.5}"#, "out_of_range"),
    ];
    payloads.extend(bad.iter().map(|(p, _)| p.to_vec()));
    let offsets = f.source.produce_raw(0, &payloads);
    f.source.expect(offsets[..2].iter().map(|o| (0, *o)));

    let config = f.config_with(
        &unique_name("json"),
        &Tweaks {
            schemaless_json: true,
            ..Tweaks::default()
        },
    );
    let mut d = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));

    let mut dead = f.dead_letters(bad.len());
    dead.sort();
    let got: Vec<(i64, &str)> = dead.iter().map(|(_, o, c, _)| (*o, c.as_str())).collect();
    let want: Vec<(i64, &str)> = bad
        .iter()
        .zip(&offsets[2..])
        .map(|((_, c), o)| (*o, *c))
        .collect();
    assert_eq!(got, want, "{dead:?}");

    let rows = rows(&f, &table);
    let mut every = by_name["every_type"]["expected"].clone();
    // Without a schema there is no Connect Timestamp title: an integer into TIMESTAMP is µs.
    let created: Json = serde_json::from_slice(&text("every_type")).unwrap();
    every["created_ms"] = json!(created["created_ms"].to_string());
    assert_row(&rows[&offsets[0]], &every, "every_type");
    assert_row(
        &rows[&offsets[1]],
        &by_name["only_the_required_id"]["expected"],
        "only_the_required_id",
    );
    assert!(d.errors().is_empty(), "{:?}", d.errors());
    assert!(d.terminate().success());
}
