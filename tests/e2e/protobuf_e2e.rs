//! Confluent Protobuf end to end: records written by Confluent's own `ProtobufSerializer`
//! (`tests/python/protobuf_vectors.py`), with the schema and its reference served by a registry
//! speaking the Confluent API exactly as the serializer registered them, consumed from the real
//! broker by the daemon with `format: protobuf`, land exactly once and value by value in the
//! emulator; the records that do not fit go to the dead-letter topic with a reason.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use kbq_core::table_schema::TableSchema;
use serde_json::{Value as Json, json};
use support::kafka::unique_name;
use support::python::python;
use support::registry::{Registry, hex, vectors};
use support::sink::{Daemon, Fixture, SinkOptions, Tweaks};

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn confluent_protobuf_records_land_exactly_once_and_value_exact() {
    let Some(python) = python() else {
        return;
    };
    let lines = vectors(&python, "protobuf_vectors.py");
    let vectors: HashMap<&str, &Json> = lines[1..]
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    let (registry, _) = Registry::serve_dump(lines[0]["registry"].clone()).await;

    let f = Fixture::with(SinkOptions::partitions(1)).await;
    let every = vectors["every_type"];
    let mut columns = every["table"].as_array().unwrap().clone();
    for (name, ty) in [
        ("kafka_topic", "STRING"),
        ("kafka_partition", "INTEGER"),
        ("kafka_offset", "INTEGER"),
    ] {
        columns.push(json!({"name": name, "type": ty}));
    }
    let table: TableSchema = serde_json::from_value(json!({ "fields": columns })).unwrap();
    f.create_table(table.clone());

    let good = [
        "every_type",
        "nothing_set_gives_proto3_defaults",
        "timestamp_before_the_epoch_and_a_zero_map_value",
    ];
    let bad = [
        "an_unnamed_enum_number_is_a_record_error",
        "a_fixed64_above_int64_is_a_record_error",
        "an_impossible_date_is_a_record_error",
    ];
    let payload = |name: &str| hex(vectors[name]["payload_hex"].as_str().unwrap());
    let mut payloads: Vec<Vec<u8>> = good.iter().map(|n| payload(n)).collect();
    payloads.extend(bad.iter().map(|n| payload(n)));
    // A record that is not Confluent-framed, and one whose message index names no message.
    payloads.push(b"{\"json\": true}".to_vec());
    let mut unknown_path = payload("every_type")[..5].to_vec();
    unknown_path.extend([0x02, 0x0a]);
    payloads.push(unknown_path);
    let offsets = f.source.produce_raw(0, &payloads);
    f.source
        .expect(offsets[..good.len()].iter().map(|o| (0, *o)));

    let config = f.config_with(
        &unique_name("protobuf"),
        &Tweaks {
            registry_url: Some(format!("http://{registry}")),
            format: Some("protobuf"),
            ..Tweaks::default()
        },
    );
    let mut d = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));

    let mut dead = f.dead_letters(bad.len() + 2);
    dead.sort();
    let classes: Vec<(i64, &str)> = dead.iter().map(|(_, o, c, _)| (*o, c.as_str())).collect();
    let o = &offsets[good.len()..];
    assert_eq!(
        classes,
        vec![
            (o[0], "out_of_range"),
            (o[1], "out_of_range"),
            (o[2], "out_of_range"),
            (o[3], "bad_magic"),
            (o[4], "unknown_schema"),
        ],
        "{dead:?}"
    );
    assert!(dead[0].3.contains("enum number 7"), "{}", dead[0].3);
    assert!(dead[1].3.contains("does not fit INT64"), "{}", dead[1].3);
    assert!(dead[2].3.contains("2023-02-29"), "{}", dead[2].3);
    assert!(dead[4].3.contains("[5]"), "{}", dead[4].3);

    // Value by value, as tabledata.list shows them.
    let stored = f.emulator.store.get_table(&f.table_ref()).unwrap();
    let page = f
        .emulator
        .store
        .read_visible_rows(&f.table_ref(), 0, usize::MAX)
        .unwrap();
    let names: Vec<&str> = table.fields.iter().map(|c| c.name.as_str()).collect();
    let rows: HashMap<i64, serde_json::Map<String, Json>> = page
        .rows
        .iter()
        .map(|row| {
            let r = row.codec.render(&row.data, &stored.schema);
            let cells: serde_json::Map<String, Json> = names
                .iter()
                .map(|n| n.to_string())
                .zip(r["f"].as_array().unwrap().iter().map(|c| c["v"].clone()))
                .collect();
            (
                cells["kafka_offset"].as_str().unwrap().parse().unwrap(),
                cells,
            )
        })
        .collect();
    let row = &rows[&offsets[0]];
    let want = json!({
        "id": "-9007199254740993",
        "customer": "Zoë \"Q\"",
        "status": "SHIPPED",
        "quantities": [{"v": "1"}, {"v": "-2"}, {"v": "300000"}],
        "tags": [{"v": "a"}, {"v": ""}, {"v": "ß"}],
        "counters": [{"v": {"f": [{"v": "only"}, {"v": "42"}]}}],
        "first_line": {"f": [{"v": "SKU-1"}, {"v": "3"}]},
        "lines": [{"v": {"f": [{"v": "x"}, {"v": "0"}]}}, {"v": {"f": [{"v": ""}, {"v": "0"}]}}],
        "maybe_count": "0",
        "note": "wrapped",
        "ship_date": "2024-02-29",
        "amount": "-12.345",
        "total": {"f": [{"v": "EUR"}, {"v": "12"}, {"v": "0"}]},
        "priority": "0",
        "email": null,
        "phone": "+41 00",
        "delta64": "-4611686018427387904",
        "fx64": "9223372036854775807",
        "sfx32": "-2147483648",
        "sfx64": "-9223372036854775808",
        "u32": "4294967295",
        "u64": "18446744073709551615",
        "flag": "true",
        "blob": "AP8=",
        "elapsed": "-3000500",
        "maybe_flag": "false",
        "price": "-0.0015",
        // The emulator stores JSON as BigQuery does, normalized (compact).
        "attributes": "{\"k\":[1,2]}",
        "far_field": "7",
        "kafka_topic": f.topic,
    });
    for (name, value) in want.as_object().unwrap() {
        assert_eq!(&row[name], value, "every_type column {name}");
    }
    let defaults = &rows[&offsets[1]];
    for (name, value) in [
        ("id", json!("0")),
        ("customer", json!("")),
        ("status", json!("STATUS_UNKNOWN")),
        ("flag", json!("false")),
        ("priority", Json::Null),
        ("maybe_count", Json::Null),
        ("placed_at", Json::Null),
        ("quantities", json!([])),
    ] {
        assert_eq!(defaults[name], value, "defaults column {name}");
    }
    let before_epoch = &rows[&offsets[2]];
    assert_eq!(before_epoch["email"], json!("a@b"));
    assert_eq!(
        before_epoch["counters"],
        json!([{"v": {"f": [{"v": "zero"}, {"v": "0"}]}}])
    );
    assert!(d.errors().is_empty(), "{:?}", d.errors());
    assert!(d.terminate().success());
}

/// A file of two top-level messages, `[0]` and `[1]` in Confluent's message index.
const SHOP: &str = r#"syntax = "proto3";
package shop;
message Order { int64 id = 1; string customer = 2; }
message Refund { int64 refund_id = 1; string reason = 2; }
"#;

/// `shop.Refund` (index `[1]`) or `shop.Order` (`[0]`) after Confluent's header for schema id 1:
/// magic byte, big-endian id, then the index array as zig-zag varints (`[1]` is a count of 1 and
/// the index 1: `02 02`; `[0]` is the single byte `00`).
fn shop_record(message: &str, fields: &[(&str, prost_reflect::Value)]) -> Vec<u8> {
    use prost::Message;
    let schema = kbq_transcode::protobuf::ProtoSchema::compile(SHOP, &[]).unwrap();
    let descriptor = schema.pool().get_message_by_name(message).unwrap();
    let mut m = prost_reflect::DynamicMessage::new(descriptor);
    for (name, value) in fields {
        m.set_field_by_name(name, value.clone());
    }
    let mut out = vec![0, 0, 0, 0, 1];
    out.extend_from_slice(match message {
        "shop.Refund" => &[0x02, 0x02],
        _ => &[0x00],
    });
    out.extend(m.encode_to_vec());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn create_table_takes_the_named_message_and_a_message_with_no_column_is_dead_lettered() {
    use prost_reflect::Value as P;
    let f = Fixture::with(SinkOptions::partitions(1)).await;
    let entry = json!({"schema": SHOP, "schemaType": "PROTOBUF"});
    let mut version = entry.clone();
    version["subject"] = json!(format!("{}-value", f.topic));
    version["version"] = json!(1);
    version["id"] = json!(1);
    let (registry, _) = Registry::serve_dump(json!({
        "ids": {"1": entry},
        "subjects": {format!("{}-value", f.topic): {"1": version}},
    }))
    .await;

    let payloads = vec![
        shop_record(
            "shop.Refund",
            &[
                ("refund_id", P::I64(7)),
                ("reason", P::String("late".into())),
            ],
        ),
        // The file's first message: under `unknown_fields: ignore` (the default) none of its
        // fields has a column, so its row would hold nothing but the Kafka metadata.
        shop_record(
            "shop.Order",
            &[("id", P::I64(5)), ("customer", P::String("x".into()))],
        ),
        shop_record("shop.Refund", &[("refund_id", P::I64(-1))]),
    ];
    let offsets = f.source.produce_raw(0, &payloads);
    f.source.expect([(0, offsets[0]), (0, offsets[2])]);

    // Without a name the file's two messages leave the table undecided: the daemon refuses
    // to start rather than create it from the first.
    let tweaks = Tweaks {
        registry_url: Some(format!("http://{registry}")),
        format: Some("protobuf"),
        create_table: Some(true),
        ..Tweaks::default()
    };
    let mut unnamed = Daemon::start(&f.config_with(&unique_name("protobuf-unnamed"), &tweaks));
    let started = std::time::Instant::now();
    while unnamed.is_running() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!unnamed.is_running(), "the daemon kept running");
    let refused = unnamed.lines().into_iter().find(|l| {
        l.contains("2 top-level messages") && l.contains("create_table.protobuf_message")
    });
    assert!(refused.is_some(), "{:?}", unnamed.lines());
    assert!(f.table_columns(&f.table).is_none(), "a table was created");

    let config = f.config_with(&unique_name("protobuf-named"), &tweaks);
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("  create_table: {}\n"), "{text}");
    let text = text.replace(
        "  create_table: {}\n",
        "  create_table: {protobuf_message: shop.Refund}\n",
    );
    std::fs::write(&config, text).unwrap();
    let mut d = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));

    let dead = f.dead_letters(1);
    assert_eq!(dead.len(), 1, "{dead:?}");
    let (_, offset, class, reason) = &dead[0];
    assert_eq!(
        (*offset, class.as_str()),
        (offsets[1], "incompatible_schema")
    );
    assert!(
        reason.contains("no field of protobuf message shop.Order has a column"),
        "{reason}"
    );
    assert_eq!(
        f.table_columns(&f.table).unwrap(),
        [
            "refund_id",
            "reason",
            "kafka_topic",
            "kafka_partition",
            "kafka_offset"
        ]
    );
    let stored = f.emulator.store.get_table(&f.table_ref()).unwrap();
    let page = f
        .emulator
        .store
        .read_visible_rows(&f.table_ref(), 0, usize::MAX)
        .unwrap();
    let mut rows: Vec<Json> = page
        .rows
        .iter()
        .map(|row| {
            let r = row.codec.render(&row.data, &stored.schema);
            json!([r["f"][0]["v"], r["f"][1]["v"]])
        })
        .collect();
    rows.sort_by_key(|r| r.to_string());
    assert_eq!(rows, vec![json!(["-1", ""]), json!(["7", "late"])]);
    assert!(d.errors().is_empty(), "{:?}", d.errors());
    assert!(d.terminate().success());
}
