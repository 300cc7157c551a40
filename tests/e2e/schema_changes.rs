//! `schema_update: relax_columns` and `union` end to end, in every registry format (Avro,
//! Protobuf, JSON Schema), through the real broker, the real daemon and the emulator, with a
//! SIGKILL of the daemon after the change and a restart that finishes the topics: every record
//! once, with its own values.
//!
//! * Relaxation: the table's columns are REQUIRED as v1 of each format writes them; v2 makes
//!   `name` optional, drops `score`, and adds `address.zip` inside the existing RECORD column
//!   (a new field in a nested record). The daemon relaxes `name`, `score` to NULLABLE, adds the
//!   NULLABLE subfield, and writes v1 and v2 records side by side without a restart.
//! * Union: three topics, one per format, into one table; each adds its own fields (NULLABLE,
//!   though each is required in its own schema), and a later schema that gives a field of
//!   another topic a different type is refused at plan compilation, naming both sources.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use apache_avro::Schema;
use apache_avro::types::Value as Avro;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};
use kbq_emulator::rows::RenderOptions;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, Value as Proto};
use serde_json::{Value as Json, json};
use support::kafka::unique_name;
use support::registry::Registry;
use support::sink::{Daemon, Fixture, KAFKA_COLUMNS, SinkOptions, Source, Tweaks, confluent};

const PARTITIONS: i32 = 2;

const AVRO_V1: &str = r#"{"type":"record","name":"User","namespace":"t","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"},
  {"name":"score","type":"long"},
  {"name":"address","type":{"type":"record","name":"Address","fields":[
    {"name":"city","type":"string"}]}}]}"#;
const AVRO_V2: &str = r#"{"type":"record","name":"User","namespace":"t","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":["null","string"],"default":null},
  {"name":"address","type":{"type":"record","name":"Address","fields":[
    {"name":"city","type":"string"},
    {"name":"zip","type":["null","string"],"default":null}]}}]}"#;

/// proto2: its `required` fields derive REQUIRED columns (proto3 has none to relax).
const PROTO_V1: &str = r#"syntax = "proto2";
package t;
message User {
  message Address { required string city = 1; }
  required int64 id = 1;
  required string name = 2;
  required int64 score = 3;
  required Address address = 4;
}
"#;
const PROTO_V2: &str = r#"syntax = "proto2";
package t;
message User {
  message Address { required string city = 1; optional string zip = 2; }
  required int64 id = 1;
  optional string name = 2;
  required Address address = 4;
}
"#;

fn json_v1() -> Json {
    json!({"type": "object", "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "score": {"type": "integer"},
        "address": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}},
        "required": ["id", "name", "score", "address"]})
}

fn json_v2() -> Json {
    json!({"type": "object", "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "address": {"type": "object", "properties": {
            "city": {"type": "string"}, "zip": {"type": "string"}},
                    "required": ["city"]}},
        "required": ["id", "address"]})
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Format {
    Avro,
    Protobuf,
    JsonSchema,
}

/// The values record `id` carries in version 1 or 2 of the schema: v2 leaves `name` out for
/// odd ids, has no `score`, and sets `address.zip` for every third id.
struct User {
    id: i64,
    name: Option<String>,
    score: Option<i64>,
    city: String,
    zip: Option<String>,
}

impl User {
    fn of(version: u8, id: i64) -> User {
        User {
            id,
            name: (version == 1 || id % 2 == 0).then(|| format!("user-{id}")),
            score: (version == 1).then_some(id * 10),
            city: format!("city-{id}"),
            zip: (version == 2 && id % 3 == 0).then(|| format!("z{id}")),
        }
    }

    /// The row as `tabledata.list` renders it: column → value (RECORD as `{"f": [...]}`).
    fn expected(&self, with_zip_column: bool) -> BTreeMap<&'static str, Json> {
        let text = |v: &Option<String>| v.as_ref().map_or(Json::Null, |s| json!(s));
        let mut address = vec![json!({"v": self.city})];
        if with_zip_column {
            address.push(json!({"v": text(&self.zip)}));
        }
        BTreeMap::from([
            ("id", json!(self.id.to_string())),
            ("name", text(&self.name)),
            ("score", text(&self.score.map(|s| s.to_string()))),
            ("address", json!({"f": address})),
        ])
    }
}

/// The writer schemas of one format and how to frame a record in each.
struct Schemas {
    format: Format,
    avro: HashMap<u32, Schema>,
    proto: HashMap<u32, DescriptorPool>,
}

impl Schemas {
    /// Registers v1 and v2 of `format` as `base + 1` and `base + 2` in `dump`.
    fn register(format: Format, base: u32, dump: &mut Json, dir: &Path) -> Schemas {
        let mut schemas = Schemas {
            format,
            avro: HashMap::new(),
            proto: HashMap::new(),
        };
        for version in [1, 2] {
            let id = base + version;
            let entry = match format {
                Format::Avro => {
                    let text = if version == 1 { AVRO_V1 } else { AVRO_V2 };
                    schemas
                        .avro
                        .insert(id, Schema::parse_str(text).expect("avro schema"));
                    json!({"schema": text})
                }
                Format::Protobuf => {
                    let text = if version == 1 { PROTO_V1 } else { PROTO_V2 };
                    schemas.proto.insert(id, proto_pool(dir, id, text));
                    json!({"schema": text, "schemaType": "PROTOBUF"})
                }
                Format::JsonSchema => {
                    let schema = if version == 1 { json_v1() } else { json_v2() };
                    json!({"schema": schema.to_string(), "schemaType": "JSON"})
                }
            };
            dump["ids"][id.to_string()] = entry;
        }
        schemas
    }

    /// The Confluent-framed record of `user` in writer schema `id`.
    #[allow(deprecated)]
    fn encode(&self, id: u32, user: &User) -> Vec<u8> {
        match self.format {
            Format::Avro => {
                let schema = &self.avro[&id];
                let v2 = user.score.is_none();
                let mut address = vec![("city".to_string(), Avro::String(user.city.clone()))];
                let mut fields = vec![("id".to_string(), Avro::Long(user.id))];
                let optional = |v: &Option<String>| match v {
                    Some(s) => Avro::Union(1, Box::new(Avro::String(s.clone()))),
                    None => Avro::Union(0, Box::new(Avro::Null)),
                };
                if v2 {
                    fields.push(("name".into(), optional(&user.name)));
                    address.push(("zip".into(), optional(&user.zip)));
                } else {
                    fields.push(("name".into(), Avro::String(user.name.clone().unwrap())));
                    fields.push(("score".into(), Avro::Long(user.score.unwrap())));
                }
                fields.push(("address".into(), Avro::Record(address)));
                let body =
                    apache_avro::to_avro_datum(schema, Avro::Record(fields)).expect("encode avro");
                confluent(id, &body)
            }
            Format::Protobuf => {
                let pool = &self.proto[&id];
                let user_desc = pool.get_message_by_name("t.User").expect("t.User");
                let address_desc = pool
                    .get_message_by_name("t.User.Address")
                    .expect("t.User.Address");
                let mut address = DynamicMessage::new(address_desc);
                address.set_field_by_name("city", Proto::String(user.city.clone()));
                if let Some(zip) = &user.zip {
                    address.set_field_by_name("zip", Proto::String(zip.clone()));
                }
                let mut m = DynamicMessage::new(user_desc);
                m.set_field_by_name("id", Proto::I64(user.id));
                if let Some(name) = &user.name {
                    m.set_field_by_name("name", Proto::String(name.clone()));
                }
                if let Some(score) = user.score {
                    m.set_field_by_name("score", Proto::I64(score));
                }
                m.set_field_by_name("address", Proto::Message(address));
                // The message-index array of the first message: one zero byte.
                let mut body = vec![0u8];
                body.extend(m.encode_to_vec());
                confluent(id, &body)
            }
            Format::JsonSchema => {
                let mut address = json!({"city": user.city});
                if let Some(zip) = &user.zip {
                    address["zip"] = json!(zip);
                }
                let mut value = json!({"id": user.id, "address": address});
                if let Some(name) = &user.name {
                    value["name"] = json!(name);
                }
                if let Some(score) = user.score {
                    value["score"] = json!(score);
                }
                confluent(id, value.to_string().as_bytes())
            }
        }
    }
}

/// A descriptor pool of one `.proto` text, compiled as the registry client compiles it.
fn proto_pool(dir: &Path, id: u32, text: &str) -> DescriptorPool {
    let name = format!("user_{id}.proto");
    std::fs::write(dir.join(&name), text).expect("write proto");
    let set = protox::compile([name.as_str()], [dir]).expect("compile proto");
    DescriptorPool::from_file_descriptor_set(set).expect("descriptor pool")
}

/// Produces `ids` with writer schema `schema_id` round-robin over the partitions; the source
/// expects them.
fn produce(
    source: &Source,
    schemas: &Schemas,
    schema_id: u32,
    version: u8,
    ids: std::ops::Range<i64>,
) {
    for partition in 0..PARTITIONS {
        let payloads: Vec<Vec<u8>> = ids
            .clone()
            .filter(|id| id % PARTITIONS as i64 == partition as i64)
            .map(|id| schemas.encode(schema_id, &User::of(version, id)))
            .collect();
        let offsets = source.produce_raw(partition, &payloads);
        source.expect(offsets.into_iter().map(|o| (partition as i64, o)));
    }
}

/// Every visible row of the fixture's table by (topic, partition, offset), each column
/// rendered as `tabledata.list` renders it.
fn rows(f: &Fixture) -> BTreeMap<(String, i64, i64), BTreeMap<String, Json>> {
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
            let cells: BTreeMap<String, Json> = stored
                .schema
                .fields
                .iter()
                .map(|c| c.name.clone())
                .zip(r["f"].as_array().unwrap().iter().map(|c| c["v"].clone()))
                .collect();
            let int = |c: &str| cells[c].as_str().unwrap().parse::<i64>().unwrap();
            let key = (
                cells["kafka_topic"].as_str().unwrap().to_string(),
                int("kafka_partition"),
                int("kafka_offset"),
            );
            (key, cells)
        })
        .collect()
}

fn column<'a>(fields: &'a [TableFieldSchema], name: &str) -> &'a TableFieldSchema {
    fields
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no column {name}: {fields:?}"))
}

/// Waits until at least `n` rows of the fixture's table are visible.
fn wait_rows(f: &Fixture, n: usize, timeout: Duration) -> usize {
    let started = Instant::now();
    loop {
        let seen = f.visible_rows(&f.table).values().sum::<usize>();
        if seen >= n || started.elapsed() > timeout {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills the daemon once the table has `visible` rows, checking that records were still
/// in flight (produced, not all visible) when it died.
fn kill_in_the_middle(f: &Fixture, d: &mut Daemon, visible: usize, produced: usize) {
    let seen = wait_rows(f, visible, Duration::from_secs(60));
    d.kill();
    assert!(
        (visible..produced).contains(&seen),
        "killed with {seen} of {produced} rows visible: not in the middle"
    );
}

async fn relax(format: Format) {
    let f = Fixture::with(SinkOptions::partitions(PARTITIONS)).await;
    let mut dump = json!({"ids": {}, "subjects": {}});
    let schemas = Schemas::register(format, 0, &mut dump, f.dir.path());
    let (registry, _reg) = Registry::serve_dump(dump).await;
    // The table v1 writes: every field REQUIRED, a REQUIRED RECORD with a REQUIRED subfield.
    let mut address = TableFieldSchema::new("address", FieldType::Record, Mode::Required);
    address.fields = vec![TableFieldSchema::new(
        "city",
        FieldType::String,
        Mode::Required,
    )];
    f.create_table_with_metadata(vec![
        TableFieldSchema::new("id", FieldType::Int64, Mode::Required),
        TableFieldSchema::new("name", FieldType::String, Mode::Required),
        TableFieldSchema::new("score", FieldType::Int64, Mode::Required),
        address,
    ]);
    let config = f.config_with(
        &unique_name("relax"),
        &Tweaks {
            registry_url: Some(format!("http://{registry}")),
            schema_update: Some("relax_columns"),
            ..Tweaks::default()
        },
    );
    let source = &f.source;
    produce(source, &schemas, 1, 1, 0..200);
    let mut d = Daemon::start(&config);
    assert_eq!(wait_rows(&f, 200, Duration::from_secs(60)), 200, "v1 rows");

    // v2 mid-stream, and v1 producers still writing; killed once the change is through.
    produce(source, &schemas, 2, 2, 200..2_200);
    produce(source, &schemas, 1, 1, 2_200..2_400);
    kill_in_the_middle(&f, &mut d, 400, 2_400);
    produce(source, &schemas, 2, 2, 2_400..2_600);
    let mut d = Daemon::start(&config);
    f.wait_exactly_once(Duration::from_secs(90));

    let stored = f.emulator.store.get_table(&f.table_ref()).unwrap();
    let fields = &stored.schema.fields;
    let modes: Vec<(&str, Mode)> = ["id", "name", "score", "address", "kafka_offset"]
        .iter()
        .map(|n| (*n, column(fields, n).mode()))
        .collect();
    assert_eq!(
        modes,
        vec![
            ("id", Mode::Required),
            ("name", Mode::Nullable),
            ("score", Mode::Nullable),
            ("address", Mode::Required),
            ("kafka_offset", Mode::Required),
        ]
    );
    let sub: Vec<(&str, Mode)> = column(fields, "address")
        .fields
        .iter()
        .map(|c| (c.name.as_str(), c.mode()))
        .collect();
    assert_eq!(sub, vec![("city", Mode::Required), ("zip", Mode::Nullable)]);

    // Value by value: every row holds its record's values (NULL where v2 has none).
    let rows = rows(&f);
    assert_eq!(rows.len(), 2_600);
    for cells in rows.values() {
        let id: i64 = cells["id"].as_str().unwrap().parse().unwrap();
        let version = if (200..2_200).contains(&id) || id >= 2_400 {
            2
        } else {
            1
        };
        for (name, want) in User::of(version, id).expected(true) {
            assert_eq!(cells[name], want, "{format:?} id {id} column {name}");
        }
    }
    assert_eq!(f.dead_letter_count(), 0, "no dead letters");
    assert!(d.errors().is_empty(), "{:?}", d.errors());
    assert!(d.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn avro_relaxes_required_columns_and_adds_a_nested_field_live_through_a_kill() {
    relax(Format::Avro).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn protobuf_relaxes_required_columns_and_adds_a_nested_field_live_through_a_kill() {
    relax(Format::Protobuf).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn json_schema_relaxes_required_columns_and_adds_a_nested_field_live_through_a_kill() {
    relax(Format::JsonSchema).await;
}

const UNION_AVRO: &str = r#"{"type":"record","name":"Order","namespace":"t","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"}]}"#;
const UNION_PROTO: &str = r#"syntax = "proto2";
package t;
message Signup { required int64 id = 1; required string email = 2; }
"#;

/// Three topics, one per format, into one table with `schema_update: union`; a fourth schema
/// on the JSON Schema topic retypes the Avro topic's `name`.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn three_topics_in_three_formats_write_the_union_of_their_fields_through_a_kill() {
    let f = Fixture::with(SinkOptions::partitions(PARTITIONS)).await;
    let avro_topic = f.topic.clone();
    let proto_topic = unique_name("signups");
    let json_topic = unique_name("tiers");
    let avro = f.source.clone();
    let proto = f.add_topic(&proto_topic, PARTITIONS, &f.table, KAFKA_COLUMNS);
    let json_src = f.add_topic(&json_topic, PARTITIONS, &f.table, KAFKA_COLUMNS);
    let tier_schema = json!({"type": "object", "properties": {
        "id": {"type": "integer"}, "tier": {"type": "integer"}}, "required": ["id", "tier"]});
    let retyped = json!({"type": "object", "properties": {
        "id": {"type": "integer"}, "name": {"type": "integer"}}, "required": ["id"]});
    let dump = json!({"ids": {
        "11": {"schema": UNION_AVRO},
        "12": {"schema": UNION_PROTO, "schemaType": "PROTOBUF"},
        "13": {"schema": tier_schema.to_string(), "schemaType": "JSON"},
        "14": {"schema": retyped.to_string(), "schemaType": "JSON"}},
        "subjects": {}});
    let (registry, _reg) = Registry::serve_dump(dump).await;
    let order = Schema::parse_str(UNION_AVRO).unwrap();
    let signup = proto_pool(f.dir.path(), 12, UNION_PROTO)
        .get_message_by_name("t.Signup")
        .unwrap();
    // Each record as its topic's format writes it, id by id.
    #[allow(deprecated)]
    let encode = |topic: usize, id: i64| -> Vec<u8> {
        match topic {
            0 => {
                let value = Avro::Record(vec![
                    ("id".into(), Avro::Long(id)),
                    ("name".into(), Avro::String(format!("user-{id}"))),
                ]);
                confluent(11, &apache_avro::to_avro_datum(&order, value).unwrap())
            }
            1 => {
                let mut m = DynamicMessage::new(signup.clone());
                m.set_field_by_name("id", Proto::I64(id));
                m.set_field_by_name("email", Proto::String(format!("e{id}@example.test")));
                let mut body = vec![0u8];
                body.extend(m.encode_to_vec());
                confluent(12, &body)
            }
            _ => confluent(13, json!({"id": id, "tier": id % 5}).to_string().as_bytes()),
        }
    };
    let sources = [avro.clone(), proto.clone(), json_src.clone()];
    let produce_all = |ids: std::ops::Range<i64>| {
        for (t, source) in sources.iter().enumerate() {
            for partition in 0..PARTITIONS {
                let payloads: Vec<Vec<u8>> = ids
                    .clone()
                    .filter(|id| id % PARTITIONS as i64 == partition as i64)
                    .map(|id| encode(t, id))
                    .collect();
                let offsets = source.produce_raw(partition, &payloads);
                source.expect(offsets.into_iter().map(|o| (partition as i64, o)));
            }
        }
    };
    f.create_table_with_metadata(vec![TableFieldSchema::new(
        "id",
        FieldType::Int64,
        Mode::Required,
    )]);
    let config = f.config_with(
        &unique_name("union"),
        &Tweaks {
            registry_url: Some(format!("http://{registry}")),
            topics: vec![avro_topic.clone(), proto_topic.clone(), json_topic.clone()],
            routes: vec![
                format!("  - topics: [\"{avro_topic}\", \"{proto_topic}\", \"{json_topic}\"]"),
                format!("    table: \"{}\"", f.table),
                "    schema_update: union".into(),
            ],
            ..Tweaks::default()
        },
    );

    produce_all(0..100);
    let mut d = Daemon::start(&config);
    assert_eq!(
        wait_rows(&f, 300, Duration::from_secs(60)),
        300,
        "first rows"
    );
    // The retyping schema, once every topic's schema is in the table.
    let retyped_at = json_src.produce_raw(
        0,
        &[confluent(
            14,
            json!({"id": 0, "name": 7}).to_string().as_bytes(),
        )],
    )[0];
    let dead = f.dead_letters(1);
    produce_all(100..1_100);
    kill_in_the_middle(&f, &mut d, 600, 3_300);
    produce_all(1_100..1_200);
    let mut d = Daemon::start(&config);
    f.wait_exactly_once_in(&[&f.table], Duration::from_secs(90));

    // The refusal names both sources: the field, both types, both topics and schemas.
    assert_eq!(dead.len(), 1, "{dead:?}");
    let (partition, offset, class, reason) = &dead[0];
    assert_eq!((*partition, *offset), (0, retyped_at), "{reason}");
    assert_eq!(class, "incompatible_schema", "{reason}");
    assert!(
        reason.contains(&format!(
            "type conflict on field name: INTEGER in json schema id 14 of topic {json_topic}, but STRING in writer schema 11 of topic {avro_topic}"
        )),
        "{reason}"
    );

    // The table is the union: every field NULLABLE but the one all three require.
    let stored = f.emulator.store.get_table(&f.table_ref()).unwrap();
    let fields = &stored.schema.fields;
    let shape: Vec<(&str, FieldType, Mode)> = ["id", "name", "email", "tier"]
        .iter()
        .map(|n| {
            let c = column(fields, n);
            (*n, c.field_type.clone(), c.mode())
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            ("id", FieldType::Int64, Mode::Required),
            ("name", FieldType::String, Mode::Nullable),
            ("email", FieldType::String, Mode::Nullable),
            ("tier", FieldType::Int64, Mode::Nullable),
        ]
    );
    let rows = rows(&f);
    assert_eq!(rows.len(), 3_600);
    for ((topic, _, _), cells) in &rows {
        let id: i64 = cells["id"].as_str().unwrap().parse().unwrap();
        let text = |c: &str| cells[c].as_str().map(str::to_string);
        let want = if *topic == avro_topic {
            (Some(format!("user-{id}")), None, None)
        } else if *topic == proto_topic {
            (None, Some(format!("e{id}@example.test")), None)
        } else {
            (None, None, Some((id % 5).to_string()))
        };
        assert_eq!(
            (text("name"), text("email"), text("tier")),
            want,
            "{topic} id {id}"
        );
    }
    assert!(d.terminate().success());
}
