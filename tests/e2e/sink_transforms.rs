//! Transforms end to end (docs/mapping.md, "Transforms"): the real binary, a real Kafka broker
//! and the emulator. A route renames, drops and masks fields of the fixture's orders, fills a
//! column from a header and filters the records of a test environment and those of two customers (by the value of a field
//! the plan reads). Through a SIGKILL in the
//! middle, every other record is one row, exactly once, holding what the transforms say (a
//! column from a field of the record's JSON key, NULL for a record without a key); the
//! filtered records are committed (the group's offsets pass them) and counted, and are neither
//! rows nor dead letters. A table the sink creates, and the columns it adds or relaxes for a new
//! writer schema, follow the transforms (a flattened record's fields as top-level columns). A
//! second route masks a field with a keyed hash, its key read from a file, casts two fields (one
//! of whose values is no integer: a dead letter) and converts a count of seconds into text,
//! through a SIGKILL too. A transform of a field only v2 has leaves v1's records' column NULL,
//! through a SIGKILL between v1's records and v2's. Two topics, Protobuf and JSON Schema,
//! write the union of their transformed fields into one table (a record of each flattened), a
//! conflict refused naming both sources.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_bigquery_sink::kafka::headers;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{FutureProducer, FutureRecord};
use support::kafka::{producer_config, unique_name};
use support::registry::Registry;
use support::sink::{Daemon, Fixture, Position, Tweaks, encode};

const PARTITIONS: i32 = 2;

/// Every fifth order comes from the test environment and is filtered, and so do the last two
/// (one per partition).
fn test_environment(id: i64) -> bool {
    id % 5 == 4 || id >= 408
}

/// The orders of customers 3 and 50 are filtered by the value of their `customer` field.
fn filtered(id: i64) -> bool {
    test_environment(id) || [3, 50].contains(&(id % 97))
}

/// Every seventh order has no key (its `order_id` column, set from the key, is NULL).
fn keyless(id: i64) -> bool {
    id % 7 == 3
}

/// Produces orders `ids` round-robin over the partitions, each with a `trace` header and, when
/// [`test_environment`], `env: test`, and a JSON key unless [`keyless`]; the positions of the
/// kept and of the [`filtered`] records, and each kept position's id.
fn produce(
    f: &Fixture,
    ids: std::ops::Range<i64>,
) -> (Vec<Position>, Vec<Position>, BTreeMap<Position, i64>) {
    let producer: FutureProducer = producer_config(&f.bootstrap).create().expect("producer");
    let (mut kept, mut dropped, mut by_position) = (Vec::new(), Vec::new(), BTreeMap::new());
    for id in ids {
        let partition = (id % PARTITIONS as i64) as i32;
        let mut hdrs = OwnedHeaders::new();
        headers::add(&mut hdrs, b"trace", Some(format!("t-{id}").as_bytes()));
        if test_environment(id) {
            headers::add(&mut hdrs, b"env", Some(b"test"));
        }
        let value = encode(&f.schema, id);
        // Schemaless JSON keys; some records have none.
        let key = format!(r#"{{"order_id":{id},"shop":"s-{}"}}"#, id % 3);
        let record = FutureRecord::to(&f.topic)
            .partition(partition)
            .payload(&value)
            .headers(hdrs);
        let record = match keyless(id) {
            true => record,
            false => record.key(key.as_bytes()),
        };
        let delivery = futures::executor::block_on(producer.send(record, Duration::from_secs(60)))
            .expect("record acknowledged");
        let position = (partition as i64, delivery.offset);
        if filtered(id) {
            dropped.push(position);
        } else {
            kept.push(position);
            by_position.insert(position, id);
        }
    }
    f.source.expect(kept.iter().copied());
    (kept, dropped, by_position)
}

/// Every visible row as (partition, offset) → its columns by name (`null` for NULL).
fn rows(f: &Fixture) -> BTreeMap<Position, BTreeMap<String, serde_json::Value>> {
    let store = &f.emulator.store;
    let table = store.get_table(&f.table_ref()).expect("the table");
    let page = store
        .read_visible_rows(&f.table_ref(), 0, usize::MAX)
        .expect("rows");
    let mut out = BTreeMap::new();
    for row in &page.rows {
        let r = row.codec.render(&row.data, &table.schema);
        let columns: BTreeMap<String, serde_json::Value> = (table.schema.fields.iter())
            .enumerate()
            .map(|(i, c)| (c.name.clone(), r["f"][i]["v"].clone()))
            .collect();
        let int = |name: &str| columns[name].as_str().unwrap().parse::<i64>().unwrap();
        let position = (int("kafka_partition"), int("kafka_offset"));
        assert!(
            out.insert(position, columns).is_none(),
            "{position:?} twice"
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_renames_drops_masks_sets_from_a_header_and_the_key_and_filters_exactly_once() {
    // Filtered by the customer's value alone: 3, 50, 100, 147, 197, 341, 391 (244 and 294 are
    // a test environment's too).
    assert_eq!(
        (0..410)
            .filter(|id| filtered(*id) && !test_environment(*id))
            .count(),
        7
    );
    let f = Fixture::new(PARTITIONS).await;
    let column = |name: &str, ty| TableFieldSchema::new(name, ty, Mode::Nullable);
    f.create_table_with_metadata(vec![
        TableFieldSchema::new("id", FieldType::Int64, Mode::Required),
        column("buyer", FieldType::String),
        column("customer", FieldType::String),
        column("amount", FieldType::Numeric),
        column("created", FieldType::Timestamp),
        column("note", FieldType::String),
        column("trace", FieldType::String),
        column("order_id", FieldType::Int64),
    ]);
    let tweaks = Tweaks {
        create_table: Some(false),
        routes: vec![
            format!("  - topics: [\"{}\"]", f.topic),
            "    transforms:".into(),
            "      - rename: {field: customer, to: buyer}".into(),
            "      - drop: {field: note}".into(),
            "      - mask: {field: amount}".into(),
            "      - set: {column: trace, header: trace, encoding: string}".into(),
            "      - set: {column: order_id, from: key, field: order_id, key_format: json}".into(),
            "      - filter: {header: env, equals: test}".into(),
            "      - filter: {field: customer, in: [customer-3, customer-50]}".into(),
        ],
        ..Tweaks::default()
    };
    let group = unique_name("transforms");
    let config = f.config_with(&group, &tweaks);

    let (kept, mut dropped, mut ids) = produce(&f, 0..400);
    let mut daemon = Daemon::start(&config);
    let seen = f.wait_visible(1, Duration::from_secs(60));
    assert!(!seen.is_empty(), "rows before the crash");
    daemon.kill();
    // The last record of each partition is a filtered one: the committed offsets show that
    // the filtered records are committed like the others.
    let (more_kept, more_dropped, more_ids) = produce(&f, 400..410);
    dropped.extend(more_dropped);
    ids.extend(more_ids);
    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));

    let rows = rows(&f);
    assert_eq!(rows.len(), kept.len() + more_kept.len());
    for (position, columns) in &rows {
        let id = ids[position];
        let text = |s: String| serde_json::Value::String(s);
        assert_eq!(columns["id"], text(id.to_string()), "{position:?}");
        assert_eq!(columns["buyer"], text(format!("customer-{}", id % 97)));
        assert_eq!(columns["trace"], text(format!("t-{id}")));
        match keyless(id) {
            true => assert!(columns["order_id"].is_null(), "{id}"),
            false => assert_eq!(columns["order_id"], text(id.to_string())),
        }
        for gone in ["customer", "amount", "note"] {
            assert!(
                columns[gone].is_null(),
                "{gone} of {id}: {:?}",
                columns[gone]
            );
        }
        assert!(!columns["created"].is_null());
    }
    for position in &dropped {
        assert!(
            !rows.contains_key(position),
            "filtered {position:?} is a row"
        );
    }
    // Committed through the end of each partition, the filtered tail included.
    let ends: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| {
            let last = (ids.keys().chain(&dropped))
                .filter(|(q, _)| *q == p as i64)
                .map(|(_, o)| *o)
                .max()
                .unwrap();
            (p, last + 1)
        })
        .collect();
    let started = Instant::now();
    loop {
        let committed: BTreeMap<i32, i64> = (f.checkpoints(&group).into_iter())
            .map(|(p, (k, _))| (p, k))
            .collect();
        if committed == ends {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "committed {committed:?}, want {ends:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Counted as filtered by the run that read them (the killed run's count went with it):
    // at least the filtered records produced after the crash, at most all of them.
    let counted = daemon.metric_with("kbq_records_filtered_total", &[&f.topic]);
    assert!(
        (2.0..=dropped.len() as f64).contains(&counted),
        "kbq_records_filtered_total {counted}, {} filtered",
        dropped.len()
    );
    assert_eq!(daemon.metric("kbq_dead_letter_records_total"), 0.0);
    assert!(daemon.terminate().success());
    assert_eq!(f.dead_letter_count(), 0);
}

/// The writer schemas of the created table's test: v2 adds a nullable field and makes
/// `customer` (renamed to `buyer`) optional. `address` is flattened.
const V1: &str = r#"{"type":"record","name":"User","namespace":"test","fields":[
  {"name":"id","type":"long"},
  {"name":"customer","type":"string"},
  {"name":"address","type":["null",{"type":"record","name":"Address","fields":[
     {"name":"street","type":"string"},{"name":"zip","type":"long"}]}],"default":null},
  {"name":"note","type":["null","string"],"default":null},
  {"name":"secret","type":"string"}]}"#;
const V2: &str = r#"{"type":"record","name":"User","namespace":"test","fields":[
  {"name":"id","type":"long"},
  {"name":"customer","type":["null","string"],"default":null},
  {"name":"address","type":["null",{"type":"record","name":"Address","fields":[
     {"name":"street","type":"string"},{"name":"zip","type":"long"}]}],"default":null},
  {"name":"note","type":["null","string"],"default":null},
  {"name":"secret","type":"string"},
  {"name":"city","type":["null","string"],"default":null}]}"#;

/// The customer of user `id`: under v2 a union, null for every third id.
fn customer(version: u32, id: i64) -> apache_avro::types::Value {
    use apache_avro::types::Value;
    let name = Value::String(format!("customer-{id}"));
    match (version, id % 3) {
        (1, _) => name,
        (_, 0) => Value::Union(0, Box::new(Value::Null)),
        _ => Value::Union(1, Box::new(name)),
    }
}

/// The address of user `id`: an even id has one, an odd id none (null).
fn address(id: i64) -> apache_avro::types::Value {
    use apache_avro::types::Value;
    match id % 2 {
        0 => Value::Union(
            1,
            Box::new(Value::Record(vec![
                ("street".into(), Value::String(format!("street-{id}"))),
                ("zip".into(), Value::Long(10_000 + id)),
            ])),
        ),
        _ => Value::Union(0, Box::new(Value::Null)),
    }
}

/// Produces users `ids` under writer schema `version` (1 or 2), round-robin over the
/// partitions, each with a `trace` header; each position's id.
#[allow(deprecated)] // as `support::sink::encode`
fn produce_users(f: &Fixture, version: u32, ids: std::ops::Range<i64>) -> BTreeMap<Position, i64> {
    use apache_avro::types::Value;
    let schema = apache_avro::Schema::parse_str(if version == 1 { V1 } else { V2 }).unwrap();
    let producer: FutureProducer = producer_config(&f.bootstrap).create().expect("producer");
    let mut by_position = BTreeMap::new();
    for id in ids {
        let partition = (id % PARTITIONS as i64) as i32;
        let mut fields = vec![
            ("id".to_string(), Value::Long(id)),
            ("customer".into(), customer(version, id)),
            ("address".into(), address(id)),
            (
                "note".into(),
                Value::Union(1, Box::new(Value::String("n".into()))),
            ),
            ("secret".into(), Value::String(format!("secret-{id}"))),
        ];
        if version == 2 {
            let city = Value::String(format!("city-{id}"));
            fields.push(("city".into(), Value::Union(1, Box::new(city))));
        }
        let body = apache_avro::to_avro_datum(&schema, Value::Record(fields)).expect("encode");
        let value = kbq_transcode::frame_confluent(version, &body);
        let mut hdrs = OwnedHeaders::new();
        headers::add(&mut hdrs, b"trace", Some(format!("t-{id}").as_bytes()));
        let record = FutureRecord::to(&f.topic)
            .partition(partition)
            .key(b"k")
            .payload(&value)
            .headers(hdrs);
        let delivery = futures::executor::block_on(producer.send(record, Duration::from_secs(60)))
            .expect("record acknowledged");
        by_position.insert((partition as i64, delivery.offset), id);
    }
    f.source.expect(by_position.keys().copied());
    by_position
}

/// `create_table` and `schema_update: relax_columns` follow the transforms: the table the sink
/// creates from the registry's v1 has the renamed column under its new name, no dropped column,
/// the masked one NULLABLE and the set columns typed by their values; v2's new field is added
/// as a column, the renamed and dropped fields are not added back, and v2's optional `customer`
/// relaxes its column under the new name, `buyer`; the flattened record's fields are top-level
/// columns, NULL for a null record. Through a SIGKILL between the two, every record is one row,
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_and_evolved_table_follows_the_transforms_exactly_once() {
    let f = Fixture::new(PARTITIONS).await;
    let (registry_addr, registry) =
        Registry::serve([(1, V1.to_string()), (2, V2.to_string())].into(), None).await;
    registry.subject(&format!("{}-value", f.topic), 1);
    let tweaks = Tweaks {
        registry_url: Some(format!("http://{registry_addr}")),
        registry_tables: true,
        schema_update: Some("relax_columns"),
        routes: vec![
            format!("  - topics: [\"{}\"]", f.topic),
            "    transforms:".into(),
            "      - rename: {field: customer, to: buyer}".into(),
            "      - drop: {field: note}".into(),
            "      - mask: {field: secret}".into(),
            "      - set: {column: region, value: eu}".into(),
            "      - set: {column: trace, header: trace, encoding: string}".into(),
            "      - flatten: {field: address, separator: _}".into(),
        ],
        ..Tweaks::default()
    };
    let config = f.config_with(&unique_name("transforms-created"), &tweaks);

    let mut ids = produce_users(&f, 1, 0..200);
    let mut daemon = Daemon::start(&config);
    let seen = f.wait_visible(1, Duration::from_secs(60));
    assert!(!seen.is_empty(), "rows before the crash");
    daemon.kill();
    registry.subject(&format!("{}-value", f.topic), 2);
    ids.extend(produce_users(&f, 2, 200..300));
    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));

    let table = f
        .emulator
        .store
        .get_table(&f.table_ref())
        .expect("the table");
    let columns: BTreeMap<&str, (FieldType, Mode)> = (table.schema.fields.iter())
        .map(|c| (c.name.as_str(), (c.field_type.clone(), c.mode())))
        .collect();
    let want: BTreeMap<&str, (FieldType, Mode)> = [
        ("id", (FieldType::Int64, Mode::Required)),
        // Relaxed by v2 under its new name.
        ("buyer", (FieldType::String, Mode::Nullable)),
        ("secret", (FieldType::String, Mode::Nullable)),
        ("region", (FieldType::String, Mode::Nullable)),
        ("trace", (FieldType::String, Mode::Nullable)),
        ("kafka_topic", (FieldType::String, Mode::Required)),
        ("kafka_partition", (FieldType::Int64, Mode::Required)),
        ("kafka_offset", (FieldType::Int64, Mode::Required)),
        ("city", (FieldType::String, Mode::Nullable)),
        ("address_street", (FieldType::String, Mode::Nullable)),
        ("address_zip", (FieldType::Int64, Mode::Nullable)),
    ]
    .into();
    assert_eq!(columns, want);

    let rows = rows(&f);
    assert_eq!(rows.len(), ids.len());
    for (position, columns) in &rows {
        let id = ids[position];
        let text = |s: String| serde_json::Value::String(s);
        assert_eq!(columns["id"], text(id.to_string()), "{position:?}");
        let buyer = (id < 200 || id % 3 != 0).then(|| text(format!("customer-{id}")));
        assert_eq!(columns["buyer"], buyer.unwrap_or_default(), "buyer of {id}");
        assert_eq!(columns["region"], text("eu".into()));
        assert_eq!(columns["trace"], text(format!("t-{id}")));
        assert!(columns["secret"].is_null(), "secret of {id}");
        let city = (id >= 200).then(|| text(format!("city-{id}")));
        assert_eq!(columns["city"], city.unwrap_or_default(), "city of {id}");
        // Flattened: an even id's address fills its columns, an odd id's null one leaves
        // them NULL.
        let (street, zip) = match id % 2 {
            0 => (
                text(format!("street-{id}")),
                text((10_000 + id).to_string()),
            ),
            _ => (serde_json::Value::Null, serde_json::Value::Null),
        };
        assert_eq!(columns["address_street"], street, "address_street of {id}");
        assert_eq!(columns["address_zip"], zip, "address_zip of {id}");
    }
    assert_eq!(daemon.metric("kbq_dead_letter_records_total"), 0.0);
    assert!(daemon.terminate().success());
    assert_eq!(f.dead_letter_count(), 0);
}

/// A transform of a field only a later writer schema has (docs/mapping.md, "Transforms"): the
/// subject holds v1 and v2, v2 adds `city`, and the route renames `city` to `town`. v1's records are read first, through a plan that writes `town` NULL (v1 lacks
/// the field, v2 has it), then a SIGKILL, then v2's records fill `town`: every record one row,
/// exactly once, and no dead letter (before, v1's plan was refused and its records were dead
/// letters).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_of_a_field_a_later_version_adds_leaves_the_earlier_records_null_exactly_once()
{
    let f = Fixture::new(PARTITIONS).await;
    let (registry_addr, registry) =
        Registry::serve([(1, V1.to_string()), (2, V2.to_string())].into(), None).await;
    let subject = format!("{}-value", f.topic);
    registry.subject(&subject, 1);
    registry.subject(&subject, 2);
    let column = |name: &str| TableFieldSchema::new(name, FieldType::String, Mode::Nullable);
    f.create_table_with_metadata(vec![
        TableFieldSchema::new("id", FieldType::Int64, Mode::Required),
        column("customer"),
        column("town"),
    ]);
    let tweaks = Tweaks {
        registry_url: Some(format!("http://{registry_addr}")),
        create_table: Some(false),
        routes: vec![
            format!("  - topics: [\"{}\"]", f.topic),
            "    transforms:".into(),
            "      - rename: {field: city, to: town}".into(),
        ],
        ..Tweaks::default()
    };
    let config = f.config_with(&unique_name("transforms-later"), &tweaks);
    let mut ids = produce_users(&f, 1, 0..100);
    let mut daemon = Daemon::start(&config);
    let seen = f.wait_visible(1, Duration::from_secs(60));
    assert!(!seen.is_empty(), "rows before the crash");
    daemon.kill();
    ids.extend(produce_users(&f, 2, 100..160));
    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));
    let rows = rows(&f);
    assert_eq!(rows.len(), ids.len());
    for (position, columns) in &rows {
        let id = ids[position];
        let town = (id >= 100).then(|| serde_json::Value::String(format!("city-{id}")));
        assert_eq!(columns["town"], town.unwrap_or_default(), "town of {id}");
    }
    assert_eq!(daemon.metric("kbq_dead_letter_records_total"), 0.0);
    assert!(daemon.terminate().success());
    assert_eq!(f.dead_letter_count(), 0);
    // v1's plan (in each process that compiled it) read v2 to find `city`.
    assert!(registry.version_requests(&subject, "2") >= 1);
}

/// Two topics into one table under `schema_update: union`, one route and its transforms
/// (docs/configuration.md, "Schema changes"; docs/mapping.md, "Transforms"), orders in
/// Protobuf and refunds in JSON Schema: what enters the union is each transform's output, not
/// the writer's field. The orders' `amount` is text and the refunds' an integer, both cast to
/// INT64: one INT64 column, no conflict. The orders' `note` is renamed `remark`, the refunds'
/// `label` `tag`: each topic's schema lacks the other's field, which the other topic's subject
/// has, so its plan writes that column NULL. Both `address` records are flattened into
/// `address_street` and `address_zip` (NULL where there is none). A later refunds schema with a
/// `remark` of its own, an integer, conflicts with the STRING the orders' renamed `note` put
/// there: its record is a dead letter naming both sources. Through a SIGKILL, every other
/// record is one row, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_topics_with_transforms_write_the_union_of_the_transformed_fields_exactly_once() {
    use prost_reflect::{DynamicMessage, Value as Proto};
    const ORDERS: &str = r#"syntax = "proto3";
package t;
message Order { int64 id = 1; string amount = 2; string note = 3; Address address = 4; }
message Address { string street = 1; int64 zip = 2; }
"#;
    let refunds_schema = |remark: bool| {
        let mut properties = serde_json::json!({
            "id": {"type": "integer"}, "amount": {"type": "integer"}, "label": {"type": "string"},
            "address": {"type": "object", "properties": {
                "street": {"type": "string"}, "zip": {"type": "integer"}}}});
        if remark {
            properties["remark"] = serde_json::json!({"type": "integer"});
        }
        serde_json::json!({"type": "object", "properties": properties, "required": ["id"]})
            .to_string()
    };
    let f = Fixture::new(PARTITIONS).await;
    let orders_topic = f.topic.clone();
    let refunds_topic = unique_name("refunds");
    let refunds = f.add_topic(
        &refunds_topic,
        PARTITIONS,
        &f.table,
        support::sink::KAFKA_COLUMNS,
    );
    let (registry_addr, registry) = Registry::serve_dump(serde_json::json!({"ids": {
        "21": {"schema": ORDERS, "schemaType": "PROTOBUF"},
        "22": {"schema": refunds_schema(false), "schemaType": "JSON"},
        "23": {"schema": refunds_schema(true), "schemaType": "JSON"}},
        "subjects": {}}))
    .await;
    registry.subject(&format!("{orders_topic}-value"), 21);
    registry.subject(&format!("{refunds_topic}-value"), 22);
    registry.subject(&format!("{refunds_topic}-value"), 23);
    f.create_table_with_metadata(vec![TableFieldSchema::new(
        "id",
        FieldType::Int64,
        Mode::Required,
    )]);
    let pool = kbq_transcode::protobuf::ProtoSchema::compile(ORDERS, &[]).unwrap();
    let order = pool.pool().get_message_by_name("t.Order").unwrap();
    let address = pool.pool().get_message_by_name("t.Address").unwrap();
    // Orders have an address when their id is even, refunds when it is a multiple of 3.
    let encode = |schema_id: u32, id: i64| -> Vec<u8> {
        if schema_id == 21 {
            let mut m = DynamicMessage::new(order.clone());
            m.set_field_by_name("id", Proto::I64(id));
            m.set_field_by_name("amount", Proto::String((id * 10).to_string()));
            m.set_field_by_name("note", Proto::String(format!("note-{id}")));
            if id % 2 == 0 {
                let mut a = DynamicMessage::new(address.clone());
                a.set_field_by_name("street", Proto::String(format!("street-{id}")));
                a.set_field_by_name("zip", Proto::I64(10_000 + id));
                m.set_field_by_name("address", Proto::Message(a));
            }
            // The message index array [0]: the file's first message.
            let mut body = vec![0u8];
            body.extend(prost::Message::encode_to_vec(&m));
            return kbq_transcode::frame_confluent(21, &body);
        }
        let mut value =
            serde_json::json!({"id": id, "amount": -id, "label": format!("label-{id}")});
        if id % 3 == 0 {
            value["address"] =
                serde_json::json!({"street": format!("street-{id}"), "zip": 10_000 + id});
        }
        if schema_id == 23 {
            value["remark"] = serde_json::json!(7);
        }
        kbq_transcode::frame_confluent(schema_id, value.to_string().as_bytes())
    };
    // Orders' ids are below 1,000, refunds' from 1,000: a row's id says its record.
    let produce = |source: &support::sink::Source, schema_id: u32, ids: std::ops::Range<i64>| {
        for partition in 0..PARTITIONS {
            let payloads: Vec<Vec<u8>> = (ids.clone())
                .filter(|id| id % PARTITIONS as i64 == partition as i64)
                .map(|id| encode(schema_id, id))
                .collect();
            let offsets = source.produce_raw(partition, &payloads);
            if schema_id != 23 {
                source.expect(offsets.iter().map(|o| (partition as i64, *o)));
            }
        }
    };
    let config = f.config_with(
        &unique_name("transforms-union"),
        &Tweaks {
            registry_url: Some(format!("http://{registry_addr}")),
            create_table: Some(false),
            topics: vec![orders_topic.clone(), refunds_topic.clone()],
            routes: vec![
                format!("  - topics: [\"{orders_topic}\", \"{refunds_topic}\"]"),
                format!("    table: \"{}\"", f.table),
                "    schema_update: union".into(),
                "    transforms:".into(),
                "      - cast: {field: amount, to: INT64}".into(),
                "      - rename: {field: note, to: remark}".into(),
                "      - rename: {field: label, to: tag}".into(),
                "      - flatten: {field: address, separator: _}".into(),
            ],
            ..Tweaks::default()
        },
    );
    produce(&f.source, 21, 0..100);
    let mut daemon = Daemon::start(&config);
    // The orders' columns are in the table (the cast's INT64 amount) before any refund.
    assert!(!f.wait_visible(1, Duration::from_secs(60)).is_empty());
    produce(&refunds, 23, 1_000..1_001);
    let dead = f.dead_letters(1);
    produce(&refunds, 22, 1_001..1_200);
    produce(&f.source, 21, 100..200);
    daemon.kill();
    produce(&refunds, 22, 1_200..1_250);
    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once_in(&[&f.table], Duration::from_secs(120));

    assert_eq!(dead.len(), 1, "{dead:?}");
    let (_, _, class, reason) = &dead[0];
    assert_eq!(class, "incompatible_schema", "{reason}");
    assert!(
        reason.contains(&format!(
            "type conflict on field remark: INTEGER in json schema id 23 of topic {refunds_topic}, but STRING in message t.Order of schema id 21 of topic {orders_topic}"
        )),
        "{reason}"
    );
    let table = f.emulator.store.get_table(&f.table_ref()).unwrap();
    let columns: BTreeMap<&str, (FieldType, Mode)> = (table.schema.fields.iter())
        .map(|c| (c.name.as_str(), (c.field_type.clone(), c.mode())))
        .collect();
    let nullable = |t| (t, Mode::Nullable);
    let want: BTreeMap<&str, (FieldType, Mode)> = [
        // Relaxed: a proto3 field has no REQUIRED column (union relaxes as relax_columns).
        ("id", nullable(FieldType::Int64)),
        ("amount", nullable(FieldType::Int64)),
        ("remark", nullable(FieldType::String)),
        ("tag", nullable(FieldType::String)),
        ("address_street", nullable(FieldType::String)),
        ("address_zip", nullable(FieldType::Int64)),
        ("kafka_topic", (FieldType::String, Mode::Required)),
        ("kafka_partition", (FieldType::Int64, Mode::Required)),
        ("kafka_offset", (FieldType::Int64, Mode::Required)),
    ]
    .into();
    assert_eq!(columns, want);
    let page = (f.emulator.store)
        .read_visible_rows(&f.table_ref(), 0, usize::MAX)
        .expect("rows");
    let mut ids = std::collections::BTreeSet::new();
    for row in &page.rows {
        let r = row.codec.render(&row.data, &table.schema);
        let cell = |name: &str| {
            let i = (table.schema.fields.iter()).position(|c| c.name == name);
            r["f"][i.unwrap()]["v"].clone()
        };
        let text = |s: String| serde_json::Value::String(s);
        let id: i64 = cell("id").as_str().unwrap().parse().unwrap();
        assert!(ids.insert(id), "id {id} twice");
        let (amount, remark, tag) = match id {
            ..1_000 => (id * 10, Some(format!("note-{id}")), None),
            _ => (-id, None, Some(format!("label-{id}"))),
        };
        assert_eq!(cell("amount"), text(amount.to_string()), "amount of {id}");
        assert_eq!(cell("remark"), remark.map(text).unwrap_or_default(), "{id}");
        assert_eq!(cell("tag"), tag.map(text).unwrap_or_default(), "{id}");
        let addressed = if id < 1_000 { id % 2 == 0 } else { id % 3 == 0 };
        let (street, zip) = match addressed {
            true => (
                text(format!("street-{id}")),
                text((10_000 + id).to_string()),
            ),
            false => (serde_json::Value::Null, serde_json::Value::Null),
        };
        assert_eq!(cell("address_street"), street, "address_street of {id}");
        assert_eq!(cell("address_zip"), zip, "address_zip of {id}");
    }
    assert_eq!(ids.len(), 200 + 249);
    assert!(daemon.terminate().success());
}

/// A keyed hash, two casts and a time conversion: the decimal `amount` into a STRING column as
/// its text, the nullable `note` into INT64, whose text `n` (every third order) is no integer
/// (those records are dead letters naming the column), and the `id`, read as seconds since the
/// epoch, written as text in a format. Every other record is a row, exactly once through a
/// SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_masked_with_a_keyed_hash_and_cast_and_converted_fields_hold_their_values_exactly_once()
 {
    use hmac::{KeyInit, Mac};
    let f = Fixture::new(PARTITIONS).await;
    let column = |name: &str, ty| TableFieldSchema::new(name, ty, Mode::Nullable);
    f.create_table_with_metadata(vec![
        TableFieldSchema::new("id", FieldType::String, Mode::Required),
        column("customer", FieldType::String),
        column("amount", FieldType::String),
        column("created", FieldType::Timestamp),
        column("note", FieldType::Int64),
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    let key_file = dir.path().join("hash-key");
    // A trailing newline, as editors and `kubectl create secret --from-file` leave it, is not
    // part of the key.
    std::fs::write(&key_file, "pepper-4711\n").expect("key file");
    let tweaks = Tweaks {
        create_table: Some(false),
        routes: vec![
            format!("  - topics: [\"{}\"]", f.topic),
            "    transforms:".into(),
            format!(
                "      - mask: {{field: customer, hash: hmac_sha256, key: {{file: {}}}, encoding: hex}}",
                key_file.display()
            ),
            "      - cast: {field: amount, to: STRING}".into(),
            "      - cast: {field: note, to: INT64}".into(),
            "      - convert: {field: id, from: epoch_seconds, to: STRING, format: \"%Y-%m-%dT%H:%M:%S%z\"}".into(),
        ],
        ..Tweaks::default()
    };
    let group = unique_name("hash");
    let config = f.config_with(&group, &tweaks);
    // The fixture's note is `n` for every third id, else null.
    let bad = |id: i64| id % 3 == 0;
    let (kept, ids, dead) = produce_plain(&f, 0..300, bad);
    let mut daemon = Daemon::start(&config);
    let seen = f.wait_visible(1, Duration::from_secs(60));
    assert!(!seen.is_empty(), "rows before the crash");
    daemon.kill();
    let mut daemon = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(120));
    let rows = rows(&f);
    assert_eq!(rows.len(), kept.len());
    for (position, columns) in &rows {
        let id = ids[position];
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"pepper-4711").expect("key");
        mac.update(format!("customer-{}", id % 97).as_bytes());
        let digest: String = (mac.finalize().into_bytes().iter())
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            columns["customer"],
            serde_json::Value::String(digest),
            "{id}"
        );
        // The fixture's amount: `id * 7 % 100000` hundredths.
        let cents = id * 7 % 100_000;
        let text = format!("{}.{:02}", cents / 100, cents % 100);
        assert_eq!(columns["amount"], serde_json::Value::String(text), "{id}");
        assert!(columns["note"].is_null(), "{id}");
        let at = format!("1970-01-01T00:{:02}:{:02}+0000", id / 60, id % 60);
        assert_eq!(columns["id"], serde_json::Value::String(at), "{id}");
    }
    // Every bad record is a dead letter (a record dead-lettered before the kill may be again
    // after it), and nothing else.
    let letters = f.dead_letters(dead.len());
    let positions: std::collections::BTreeSet<Position> =
        letters.iter().map(|(p, o, _, _)| (*p, *o)).collect();
    assert_eq!(positions, dead.iter().copied().collect());
    for (_, _, class, reason) in &letters {
        assert_eq!(class, "out_of_range");
        assert_eq!(
            reason,
            "column note: \"n\" is not an integer of INT64's range"
        );
    }
    assert!(daemon.terminate().success());
}

/// Produces orders `ids` round-robin over the partitions, without headers: the positions of
/// the records expected as rows (not `bad`), each such position's id, and the positions of the
/// `bad` ones.
fn produce_plain(
    f: &Fixture,
    ids: std::ops::Range<i64>,
    bad: impl Fn(i64) -> bool,
) -> (Vec<Position>, BTreeMap<Position, i64>, Vec<Position>) {
    let producer: FutureProducer = producer_config(&f.bootstrap).create().expect("producer");
    let (mut kept, mut by_position, mut dead) = (Vec::new(), BTreeMap::new(), Vec::new());
    for id in ids {
        let partition = (id % PARTITIONS as i64) as i32;
        let value = encode(&f.schema, id);
        let key = id.to_string();
        let record = FutureRecord::to(&f.topic)
            .partition(partition)
            .key(key.as_bytes())
            .payload(&value);
        let delivery = futures::executor::block_on(producer.send(record, Duration::from_secs(60)))
            .expect("record acknowledged");
        let position = (partition as i64, delivery.offset);
        if bad(id) {
            dead.push(position);
        } else {
            kept.push(position);
            by_position.insert(position, id);
        }
    }
    f.source.expect(kept.iter().copied());
    (kept, by_position, dead)
}
