//! `create_table` and `schema_update: add_columns` for Protobuf and JSON Schema, end to end:
//! three versions of a value schema registered by Confluent's own serializers
//! (`tests/python/evolution_vectors.py`); the daemon creates the missing table from the
//! subject's latest version (v1 when it starts), adds the NULLABLE columns of v2 when its first
//! record comes (the fields of a new RECORD column NULLABLE too, though JSON Schema requires
//! them), and sends v3's records, which the table cannot take, to the dead-letter topic with
//! their reason. Every good record lands exactly once, value by value.
//!
//! The Protobuf route sets no `format`: the registry's `schemaType` of each id decides.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};
use kbq_emulator::rows::RenderOptions;
use serde_json::{Map, Value as Json};
use support::kafka::unique_name;
use support::python::python;
use support::registry::{Registry, hex, vectors};
use support::sink::{Daemon, Fixture, SinkOptions, Tweaks};

async fn evolve(format: &str, pinned: Option<&'static str>) {
    let Some(python) = python() else {
        return;
    };
    let lines = vectors(&python, "evolution_vectors.py");
    let line = lines.iter().find(|l| l["format"] == format).unwrap();
    let f = Fixture::with(SinkOptions::partitions(1)).await;

    // The registry as the serializers left it, under this test's topic; its subject shows only
    // v1 when the daemon starts, so the table is created from v1 and v2 must add columns.
    let mut registry = line["registry"].clone();
    let mut versions = registry["subjects"]["users-value"].clone();
    versions.as_object_mut().unwrap().retain(|v, _| v == "1");
    registry["subjects"] = serde_json::json!({ format!("{}-value", f.topic): versions });
    let (registry, _) = Registry::serve_dump(registry).await;

    let records = line["records"].as_array().unwrap();
    let payloads: Vec<Vec<u8>> = records
        .iter()
        .map(|r| hex(r["payload_hex"].as_str().unwrap()))
        .collect();
    let offsets = f.source.produce_raw(0, &payloads);
    let good: Vec<(i64, &Json)> = offsets
        .iter()
        .zip(records)
        .filter(|(_, r)| r["version"] != 3)
        .map(|(o, r)| (*o, &r["expected"]))
        .collect();
    let bad: Vec<i64> = offsets
        .iter()
        .zip(records)
        .filter(|(_, r)| r["version"] == 3)
        .map(|(o, _)| *o)
        .collect();
    f.source.expect(good.iter().map(|(o, _)| (0, *o)));

    let config = f.config_with(
        &unique_name(&format!("evolve-{format}")),
        &Tweaks {
            registry_url: Some(format!("http://{registry}")),
            format: pinned,
            registry_tables: true,
            ..Tweaks::default()
        },
    );
    let mut d = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));

    let mut dead = f.dead_letters(bad.len());
    dead.sort();
    assert_eq!(
        dead.iter().map(|(_, o, _, _)| *o).collect::<Vec<_>>(),
        bad,
        "{dead:?}"
    );
    for (_, _, class, reason) in &dead {
        assert_eq!(class, "incompatible_schema", "{reason}");
    }
    let why = &dead[0].3;
    match format {
        "protobuf" => assert!(why.contains("column id") && why.contains("string"), "{why}"),
        _ => assert!(why.contains("tier") && why.contains("required"), "{why}"),
    }

    // The table: v1's columns as created, v2's added NULLABLE, down into the new RECORD.
    let stored = f.emulator.store.get_table(&f.table_ref()).unwrap();
    let columns = &stored.schema.fields;
    let column = |name: &str| -> &TableFieldSchema {
        columns
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no column {name}: {columns:?}"))
    };
    assert_eq!(column("id").field_type, FieldType::Int64);
    assert_eq!(column("created").field_type, FieldType::Timestamp);
    assert_eq!(column("email").mode(), Mode::Nullable);
    assert_eq!(column("tags").mode(), Mode::Repeated);
    let address = column("address");
    assert_eq!(
        (address.field_type.clone(), address.mode()),
        (FieldType::Record, Mode::Nullable)
    );
    for sub in &address.fields {
        assert_eq!(sub.mode(), Mode::Nullable, "address.{}", sub.name);
    }

    let rows = rows(&f);
    for (offset, expected) in good {
        let row = &rows[&offset];
        for (name, value) in expected.as_object().unwrap() {
            assert_eq!(&row[name], value, "offset {offset} column {name}");
        }
    }
    assert!(d.errors().is_empty(), "{:?}", d.errors());
    assert!(d.terminate().success());
}

/// The visible rows by Kafka offset, each column rendered as `tabledata.list` renders it with
/// `useInt64Timestamp`.
fn rows(f: &Fixture) -> HashMap<i64, Map<String, Json>> {
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
            let cells: Map<String, Json> = stored
                .schema
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

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn protobuf_creates_the_table_and_adds_the_columns_of_a_new_version() {
    evolve("protobuf", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn json_schema_creates_the_table_and_adds_the_columns_of_a_new_version() {
    evolve("json_schema", Some("json_schema")).await;
}
