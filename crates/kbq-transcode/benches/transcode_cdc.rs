//! What change data capture costs per format (docs/cdc.md): the benchmarks' ~1 KB order as the
//! `after` row of a Debezium envelope in Avro, Protobuf and schemaless JSON (and JSON in Kafka
//! Connect's `{"schema", "payload"}` envelope), through the whole change path of the writer —
//! locate the row, make the sequence number, transcode the row with the two pseudo-columns —
//! next to the plain plan of the same order, in one run.
//!
//! Two envelopes per format: a create (`c`, `before` null) and an update (`u`) that carries the
//! previous row in `before` as well (MySQL's default, PostgreSQL's with `REPLICA IDENTITY
//! FULL`), which the change path must step over.
//!
//! `cargo bench -p kbq-transcode --bench transcode_cdc` runs criterion and then prints a per-core
//! summary and, per format, the cost of a change as a multiple of the plain plan's per record,
//! and the share of the locate step alone.

mod common;

use std::hint::black_box;

use criterion::Criterion;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use kbq_transcode::change::{
    CHANGE_SEQUENCE_NUMBER, CHANGE_TYPE, ChangeColumns, ChangeFormat, ChangeKind, ChangeShape,
    ConnectEnvelope, JsonShape, ProtoShape, sequence_number, with_change_fields,
};
use kbq_transcode::protobuf::ProtoSchema;
use kbq_transcode::{AvroSchema, Plan, PlanOptions};
use prost_reflect::DynamicMessage;
use serde_json::{Value as Json, json};

/// The envelope's other parts: where the change comes from, as Debezium writes them.
const CONNECTOR: &str = "mysql";
const LSN: i64 = 987_654_321;
const TS_MS: i64 = 1_764_460_800_000;

/// The Avro envelope around the order record.
fn avro_envelope_schema() -> String {
    format!(
        r#"{{"type":"record","name":"Envelope","namespace":"shop.cdc","fields":[
  {{"name":"before","type":["null",{order}],"default":null}},
  {{"name":"after","type":["null","shop.Order"],"default":null}},
  {{"name":"source","type":{{"type":"record","name":"Source","fields":[
     {{"name":"connector","type":"string"}},{{"name":"lsn","type":"long"}}]}}}},
  {{"name":"op","type":"string"}},
  {{"name":"ts_ms","type":["null","long"],"default":null}}]}}"#,
        order = common::AVRO_SCHEMA
    )
}

/// The Protobuf envelope, after the order's messages (the order stays the file's first).
fn proto_envelope_schema() -> String {
    format!(
        "{}\nmessage Source {{ string connector = 1; int64 lsn = 2; }}
message Envelope {{
  Order before = 1; Order after = 2; Source source = 3; string op = 4; int64 ts_ms = 5;
}}\n",
        common::PROTO
    )
}

fn zigzag(out: &mut Vec<u8>, v: i64) {
    varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// An Avro envelope (binary, by the specification's rules) of `before` and `after` rows.
fn avro_envelope(op: &str, before: Option<&[u8]>, after: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * after.len() + 32);
    let string = |out: &mut Vec<u8>, s: &str| {
        zigzag(out, s.len() as i64);
        out.extend_from_slice(s.as_bytes());
    };
    match before {
        Some(row) => {
            zigzag(&mut out, 1);
            out.extend_from_slice(row);
        }
        None => zigzag(&mut out, 0),
    }
    zigzag(&mut out, 1);
    out.extend_from_slice(after);
    string(&mut out, CONNECTOR);
    zigzag(&mut out, LSN);
    string(&mut out, op);
    zigzag(&mut out, 1);
    zigzag(&mut out, TS_MS);
    out
}

/// A Protobuf envelope (wire format) of `before` and `after` messages.
fn proto_envelope(op: &str, before: Option<&[u8]>, after: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * after.len() + 32);
    let len_field = |out: &mut Vec<u8>, number: u64, bytes: &[u8]| {
        varint(out, number << 3 | 2);
        varint(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    };
    if let Some(row) = before {
        len_field(&mut out, 1, row);
    }
    len_field(&mut out, 2, after);
    let mut source = Vec::new();
    len_field(&mut source, 1, CONNECTOR.as_bytes());
    varint(&mut source, 2 << 3);
    varint(&mut source, LSN as u64);
    len_field(&mut out, 3, &source);
    len_field(&mut out, 4, op.as_bytes());
    varint(&mut out, 5 << 3);
    varint(&mut out, TS_MS as u64);
    out
}

/// A schemaless JSON envelope of `before` and `after` objects.
fn json_envelope(op: &str, before: Option<&[u8]>, after: &[u8]) -> Vec<u8> {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    format!(
        r#"{{"before":{},"after":{},"source":{{"connector":"{CONNECTOR}","lsn":{LSN}}},"op":"{op}","ts_ms":{TS_MS}}}"#,
        before.map_or("null".into(), text),
        text(after)
    )
    .into_bytes()
}

/// The Connect schema JsonConverter writes beside the envelope (`schemas.enable=true`): the
/// order's fields as Connect types, twice (before, after), and the envelope's own.
fn connect_schema() -> Json {
    fn field(column: &TableFieldSchema) -> Json {
        let kind = match column.field_type {
            FieldType::String | FieldType::Timestamp => "string",
            FieldType::Int64 => "int64",
            FieldType::Float64 => "double",
            FieldType::Bool => "boolean",
            FieldType::Numeric => "bytes",
            _ => "struct",
        };
        let mut f = json!({"type": kind, "optional": true, "field": column.name});
        if !column.fields.is_empty() {
            f["fields"] = column.fields.iter().map(field).collect();
        }
        if column.mode() == Mode::Repeated {
            f = json!({"type": "array", "items": f, "optional": true, "field": column.name});
        }
        f
    }
    let row: Vec<Json> = common::table().fields.iter().map(field).collect();
    json!({"type": "struct", "name": "shop.cdc.Envelope", "optional": false, "fields": [
        {"type": "struct", "fields": row, "optional": true, "name": "shop.Order", "field": "before"},
        {"type": "struct", "fields": row, "optional": true, "name": "shop.Order", "field": "after"},
        {"type": "struct", "fields": [
            {"type": "string", "optional": false, "field": "connector"},
            {"type": "int64", "optional": false, "field": "lsn"}], "optional": false,
         "name": "io.debezium.connector.mysql.Source", "field": "source"},
        {"type": "string", "optional": false, "field": "op"},
        {"type": "int64", "optional": true, "field": "ts_ms"}]})
}

fn connect(schema: &Json, envelope: &[u8]) -> Vec<u8> {
    let mut out = format!(r#"{{"schema":{schema},"payload":"#).into_bytes();
    out.extend_from_slice(envelope);
    out.push(b'}');
    out
}

/// One format's change path: its shape, the row plan with the pseudo-columns, and the inputs.
struct Changes {
    name: &'static str,
    shape: ChangeShape,
    plan: Plan,
    columns: ChangeColumns,
    /// `c` envelopes (no `before`), `u` envelopes (both rows).
    creates: Vec<Vec<u8>>,
    updates: Vec<Vec<u8>>,
}

impl Changes {
    /// The writer's change path for one record at `offset`.
    fn write(&self, body: &[u8], offset: i64, out: &mut Vec<u8>) {
        let located = self.shape.locate(body).unwrap();
        let sequence = sequence_number(0, located.source.unwrap_or(0), offset);
        let row = &body[located.row.unwrap()];
        self.columns
            .transcode(&self.plan, row, located.kind, &sequence, out)
            .unwrap();
    }
}

/// One format: the plain plan and its orders, and the change path of the same orders.
struct Format {
    plain: Plan,
    orders: Vec<Vec<u8>>,
    changes: Vec<Changes>,
}

struct Setup {
    formats: Vec<Format>,
}

/// Envelopes of every order: `c` ones, and `u` ones whose `before` is the previous order.
fn envelopes(
    orders: &[Vec<u8>],
    envelope: impl Fn(&str, Option<&[u8]>, &[u8]) -> Vec<u8>,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let previous = |k: usize| orders[(k + orders.len() - 1) % orders.len()].as_slice();
    let creates = orders.iter().map(|o| envelope("c", None, o)).collect();
    let updates = orders
        .iter()
        .enumerate()
        .map(|(k, o)| envelope("u", Some(previous(k)), o))
        .collect();
    (creates, updates)
}

/// The table with the pseudo-columns, which an Avro change plan compiles against.
fn table_with_pseudo_columns() -> TableSchema {
    let mut table = common::table();
    for name in [CHANGE_TYPE, CHANGE_SEQUENCE_NUMBER] {
        table.fields.push(TableFieldSchema::new(
            name,
            FieldType::String,
            Mode::Nullable,
        ));
    }
    table
}

fn setup() -> Setup {
    let options = PlanOptions::default();
    let debezium = ChangeFormat::Debezium;

    let (avro_plain, avro_orders) = common::avro_setup();
    let envelope = AvroSchema::parse(&avro_envelope_schema()).unwrap();
    let (shape, row) = ChangeShape::new(&envelope, &debezium, None).unwrap();
    let plan = Plan::compile(&row, &table_with_pseudo_columns(), &options).unwrap();
    let (creates, updates) = envelopes(&avro_orders, avro_envelope);
    let avro = Format {
        plain: avro_plain,
        orders: avro_orders,
        changes: vec![Changes {
            name: "avro",
            shape,
            plan,
            columns: ChangeColumns::Avro,
            creates,
            updates,
        }],
    };

    let (proto_plain, _, proto_orders) = common::proto_setup();
    let schema = ProtoSchema::compile(&proto_envelope_schema(), &[]).unwrap();
    let message = schema.pool().get_message_by_name("shop.Envelope").unwrap();
    let (shape, row) = ProtoShape::new(&message, &debezium, None).unwrap();
    let (plan, columns) =
        with_change_fields(Plan::compile_protobuf(&row, &common::table(), &options).unwrap());
    let (creates, updates) = envelopes(&proto_orders, proto_envelope);
    let protobuf = Format {
        plain: proto_plain,
        orders: proto_orders,
        changes: vec![Changes {
            name: "protobuf",
            shape: ChangeShape::Protobuf(shape),
            plan,
            columns,
            creates,
            updates,
        }],
    };

    let (json_plain, json_orders) = common::json_setup();
    let json_change = |name, envelope: ConnectEnvelope, wrap: &dyn Fn(Vec<u8>) -> Vec<u8>| {
        let (shape, _) = JsonShape::new(None, false, &debezium, None).unwrap();
        let (plan, columns) = with_change_fields(
            Plan::compile_json(None, false, &common::table(), &options).unwrap(),
        );
        let (creates, updates) = envelopes(&json_orders, |op, before, after| {
            wrap(json_envelope(op, before, after))
        });
        Changes {
            name,
            shape: ChangeShape::Json(shape.with_envelope(envelope)),
            plan,
            columns,
            creates,
            updates,
        }
    };
    let schema = connect_schema();
    let changes = vec![
        json_change("json", ConnectEnvelope::Guarded, &|e| e),
        json_change("json connect", ConnectEnvelope::On, &|e| {
            connect(&schema, &e)
        }),
    ];
    let json = Format {
        plain: json_plain,
        orders: json_orders,
        changes,
    };
    Setup {
        formats: vec![avro, protobuf, json],
    }
}

/// Every change row must be the plain plan's row plus the two pseudo-columns, or the comparison
/// means nothing.
fn cross_check(s: &Setup) {
    for format in &s.formats {
        for changes in &format.changes {
            let row = common::row_message(&changes.plan);
            let decode = |bytes: &[u8]| DynamicMessage::decode(row.clone(), bytes).unwrap();
            let inputs = changes.creates.iter().zip(&changes.updates);
            for (k, (order, (create, update))) in format.orders.iter().zip(inputs).enumerate() {
                let mut plain = Vec::new();
                format.plain.transcode(order, None, &mut plain).unwrap();
                for body in [create, update] {
                    let mut out = Vec::new();
                    changes.write(body, 0x2a, &mut out);
                    let mut change = decode(&out);
                    let text = |m: &DynamicMessage, name| {
                        m.get_field_by_name(name)
                            .unwrap()
                            .as_str()
                            .unwrap()
                            .to_owned()
                    };
                    assert_eq!(text(&change, CHANGE_TYPE), ChangeKind::Upsert.as_str());
                    assert_eq!(text(&change, CHANGE_SEQUENCE_NUMBER), "0/0/2A");
                    change.clear_field_by_name(CHANGE_TYPE);
                    change.clear_field_by_name(CHANGE_SEQUENCE_NUMBER);
                    assert_eq!(change, decode(&plain), "{} order {k}", changes.name);
                }
                if k == 64 {
                    break;
                }
            }
        }
    }
}

fn bench(c: &mut Criterion, s: &Setup) {
    for format in &s.formats {
        let first = &format.changes[0];
        let mut group = common::group(c, &format!("cdc_{}", first.name), &format.orders);
        common::bench_plan(&mut group, "plain_plan", &format.plain, &format.orders);
        for changes in &format.changes {
            let name = changes.name.replace(' ', "_");
            for (op, inputs) in [("c", &changes.creates), ("u", &changes.updates)] {
                let mut offset = 0;
                common::bench_each(&mut group, &format!("{name}_{op}"), inputs, |body, out| {
                    offset += 1;
                    changes.write(body, offset, black_box(out));
                });
            }
        }
        group.finish();
    }
}

fn summary(s: &Setup) {
    let mut paths = Vec::new();
    let mut layout = Vec::new();
    for format in &s.formats {
        for changes in &format.changes {
            let name = changes.name;
            layout.push((name, paths.len()));
            paths.push(common::plan_path(
                format!("{name} plain"),
                &format.plain,
                &format.orders,
            ));
            for (op, inputs) in [("c", &changes.creates), ("u", &changes.updates)] {
                let mut offset = 0;
                paths.push(common::path(
                    format!("{name} {op}"),
                    inputs,
                    move |body, out| {
                        offset += 1;
                        changes.write(body, offset, black_box(out));
                    },
                ));
            }
            // The locate step alone: where the change path's time goes beside the plan.
            for (op, inputs) in [("c", &changes.creates), ("u", &changes.updates)] {
                paths.push(common::path(
                    format!("{name} locate {op}"),
                    inputs,
                    |body, _| {
                        black_box(changes.shape.locate(body).unwrap());
                    },
                ));
            }
        }
    }
    let rates = common::summarize(
        "the 20-field order as `after` of a Debezium envelope (c: before null; u: before the previous order)",
        paths,
        common::RECORDS as usize,
    );
    for (name, at) in layout {
        let (plain, create, update) = (rates[at], rates[at + 1], rates[at + 2]);
        let (locate_c, locate_u) = (rates[at + 3], rates[at + 4]);
        common::print_ratio(
            name,
            format_args!(
                "a change costs {:.2}x the plain plan per record (c), {:.2}x (u); locating it is {:.0} % of the change (c), {:.0} % (u)",
                plain / create,
                plain / update,
                100.0 * create / locate_c,
                100.0 * update / locate_u
            ),
        );
    }
}

fn main() {
    common::main(setup, cross_check, bench, summary);
}
