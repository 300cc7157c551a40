//! What the transcoder benchmarks share (`benches/transcode*.rs`): one ~1 KB order of 20 mixed
//! fields (strings, a timestamp, a decimal, a nested record, repeated fields), the same values in
//! every format, the one table they all write, and the per-core measurement, so that the formats'
//! figures compare like with like.

// Each benchmark uses a part of this module.
#![allow(dead_code)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use apache_avro::types::Value as Avro;
use chrono::DateTime;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use kbq_core::table_schema::TableSchema;
use kbq_transcode::protobuf::{MessagePath, ProtoSchema};
use kbq_transcode::{AvroSchema, Plan, PlanOptions, file_for};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, Value as PValue};
use prost_types::FileDescriptorSet;
use serde_json::{Value as Json, json};

/// The order as an Avro writer schema.
pub const AVRO_SCHEMA: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"order_id","type":"string"},
  {"name":"customer_id","type":"long"},
  {"name":"customer_email","type":"string"},
  {"name":"created_at","type":{"type":"long","logicalType":"timestamp-micros"}},
  {"name":"status","type":"string"},
  {"name":"channel","type":["null","string"]},
  {"name":"total","type":{"type":"bytes","logicalType":"decimal","precision":18,"scale":2}},
  {"name":"currency","type":"string"},
  {"name":"item_count","type":"int"},
  {"name":"weight_kg","type":"double"},
  {"name":"gift","type":"boolean"},
  {"name":"coupon","type":["null","string"]},
  {"name":"notes","type":"string"},
  {"name":"user_agent","type":"string"},
  {"name":"session_id","type":"string"},
  {"name":"warehouse_id","type":"long"},
  {"name":"priority","type":"int"},
  {"name":"shipping","type":{"type":"record","name":"Address","fields":[
     {"name":"street","type":"string"},{"name":"city","type":"string"},
     {"name":"postcode","type":"string"},{"name":"country","type":"string"},
     {"name":"lat","type":"double"},{"name":"lon","type":"double"}]}},
  {"name":"line_ids","type":{"type":"array","items":"long"}},
  {"name":"tags","type":{"type":"array","items":"string"}}
]}"#;

/// The table every format writes.
pub const TABLE: &str = r#"{"fields":[
  {"name":"order_id","type":"STRING","mode":"REQUIRED"},
  {"name":"customer_id","type":"INT64"},
  {"name":"customer_email","type":"STRING"},
  {"name":"created_at","type":"TIMESTAMP"},
  {"name":"status","type":"STRING"},
  {"name":"channel","type":"STRING"},
  {"name":"total","type":"NUMERIC"},
  {"name":"currency","type":"STRING"},
  {"name":"item_count","type":"INT64"},
  {"name":"weight_kg","type":"FLOAT64"},
  {"name":"gift","type":"BOOL"},
  {"name":"coupon","type":"STRING"},
  {"name":"notes","type":"STRING"},
  {"name":"user_agent","type":"STRING"},
  {"name":"session_id","type":"STRING"},
  {"name":"warehouse_id","type":"INT64"},
  {"name":"priority","type":"INT64"},
  {"name":"shipping","type":"RECORD","fields":[
     {"name":"street","type":"STRING"},{"name":"city","type":"STRING"},
     {"name":"postcode","type":"STRING"},{"name":"country","type":"STRING"},
     {"name":"lat","type":"FLOAT64"},{"name":"lon","type":"FLOAT64"}]},
  {"name":"line_ids","type":"INT64","mode":"REPEATED"},
  {"name":"tags","type":"STRING","mode":"REPEATED"}
]}"#;

pub const NOTES: &str = "Please leave the parcel at the back door if nobody answers; the dog is \
    friendly but loud. Call ahead on weekdays between nine and five, ask for the reception desk, \
    and mention the order number so they can find the delivery slot quickly. If the parcel does \
    not fit the letterbox, the neighbours at number 221a accept deliveries for us; otherwise \
    please use the parcel locker at the corner shop and send the pickup code by text message to \
    the number on the order.";
pub const AGENT: &str = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, \
    like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36 ShopApp/5.12.3";
pub const TAGS: [&str; 5] = [
    "express",
    "fragile",
    "eu-vat",
    "repeat-customer",
    "newsletter",
];
pub const STREET: &str = "Hauptstraße 221b, Hinterhaus 3. OG";
/// The inputs cycle over this many distinct records.
pub const RECORDS: i64 = 1024;

/// The values of order `i`, whatever the format.
pub struct Order {
    pub i: i64,
}

impl Order {
    pub fn order_id(&self) -> String {
        format!("ord-{:012}-2f9c1e7a-4b8d-4c3e-9a6f", self.i)
    }
    pub fn customer_id(&self) -> i64 {
        1_000_000 + self.i * 7919
    }
    pub fn email(&self) -> String {
        format!("customer.{}@example-mail.com", self.i)
    }
    pub fn session(&self) -> String {
        format!("sess-{:032x}", self.i as u128 * 0x9e37_79b9_7f4a_7c15)
    }
    pub fn created_micros(&self) -> i64 {
        1_764_460_800_000_000 + self.i * 1_000
    }
    pub fn cents(&self) -> i64 {
        129_990 + self.i
    }
    pub fn gift(&self) -> bool {
        self.i % 2 == 0
    }
    pub fn line_ids(&self) -> impl Iterator<Item = i64> + '_ {
        (0..8).map(|k| 900_000_000 + self.i * 10 + k)
    }

    /// The order as an apache-avro value of [`AVRO_SCHEMA`].
    pub fn avro(&self) -> Avro {
        let s = |x: &str| Avro::String(x.to_owned());
        let fields = vec![
            ("order_id", Avro::String(self.order_id())),
            ("customer_id", Avro::Long(self.customer_id())),
            ("customer_email", Avro::String(self.email())),
            ("created_at", Avro::TimestampMicros(self.created_micros())),
            ("status", s("PAID")),
            ("channel", Avro::Union(1, Box::new(s("mobile-app")))),
            (
                "total",
                Avro::Decimal(apache_avro::Decimal::from(
                    self.cents().to_be_bytes().to_vec(),
                )),
            ),
            ("currency", s("EUR")),
            ("item_count", Avro::Int(3)),
            ("weight_kg", Avro::Double(2.75)),
            ("gift", Avro::Boolean(self.gift())),
            ("coupon", Avro::Union(0, Box::new(Avro::Null))),
            ("notes", s(NOTES)),
            ("user_agent", s(AGENT)),
            ("session_id", Avro::String(self.session())),
            ("warehouse_id", Avro::Long(42)),
            ("priority", Avro::Int(2)),
            (
                "shipping",
                Avro::Record(vec![
                    ("street".into(), s(STREET)),
                    ("city".into(), s("Berlin")),
                    ("postcode".into(), s("10115")),
                    ("country".into(), s("DE")),
                    ("lat".into(), Avro::Double(52.532)),
                    ("lon".into(), Avro::Double(13.384)),
                ]),
            ),
            (
                "line_ids",
                Avro::Array(self.line_ids().map(Avro::Long).collect()),
            ),
            ("tags", Avro::Array(TAGS.iter().map(|t| s(t)).collect())),
        ];
        Avro::Record(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }
}

/// The first [`RECORDS`] orders in raw Avro.
pub fn avro_orders(schema: &apache_avro::Schema) -> Vec<Vec<u8>> {
    let writer = apache_avro::writer::datum::GenericDatumWriter::builder(schema)
        .build()
        .unwrap();
    (0..RECORDS)
        .map(|i| writer.write_value_to_vec(Order { i }.avro()).unwrap())
        .collect()
}

/// The order as a Protobuf writer message (`shop.Order`, the schema's first message).
pub const PROTO: &str = r#"
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/type/decimal.proto";
message Order {
  string order_id = 1;
  int64 customer_id = 2;
  string customer_email = 3;
  google.protobuf.Timestamp created_at = 4;
  string status = 5;
  optional string channel = 6;
  google.type.Decimal total = 7;
  string currency = 8;
  int32 item_count = 9;
  double weight_kg = 10;
  bool gift = 11;
  optional string coupon = 12;
  string notes = 13;
  string user_agent = 14;
  string session_id = 15;
  int64 warehouse_id = 16;
  int32 priority = 17;
  Address shipping = 18;
  repeated int64 line_ids = 19;
  repeated string tags = 20;
}
message Address {
  string street = 1; string city = 2; string postcode = 3; string country = 4;
  double lat = 5; double lon = 6;
}
"#;

pub fn proto_order(pool: &DescriptorPool, v: &Order) -> Vec<u8> {
    let m = |name: &str| DynamicMessage::new(pool.get_message_by_name(name).unwrap());
    let mut o = m("shop.Order");
    let s = |x: &str| PValue::String(x.to_owned());
    o.set_field_by_name("order_id", PValue::String(v.order_id()));
    o.set_field_by_name("customer_id", PValue::I64(v.customer_id()));
    o.set_field_by_name("customer_email", PValue::String(v.email()));
    let mut ts = m("google.protobuf.Timestamp");
    ts.set_field_by_name("seconds", PValue::I64(v.created_micros() / 1_000_000));
    ts.set_field_by_name(
        "nanos",
        PValue::I32((v.created_micros() % 1_000_000) as i32 * 1000),
    );
    o.set_field_by_name("created_at", PValue::Message(ts));
    o.set_field_by_name("status", s("PAID"));
    o.set_field_by_name("channel", s("mobile-app"));
    let mut total = m("google.type.Decimal");
    let c = v.cents();
    total.set_field_by_name(
        "value",
        PValue::String(format!("{}.{:02}", c / 100, c % 100)),
    );
    o.set_field_by_name("total", PValue::Message(total));
    o.set_field_by_name("currency", s("EUR"));
    o.set_field_by_name("item_count", PValue::I32(3));
    o.set_field_by_name("weight_kg", PValue::F64(2.75));
    o.set_field_by_name("gift", PValue::Bool(v.gift()));
    o.set_field_by_name("notes", s(NOTES));
    o.set_field_by_name("user_agent", s(AGENT));
    o.set_field_by_name("session_id", PValue::String(v.session()));
    o.set_field_by_name("warehouse_id", PValue::I64(42));
    o.set_field_by_name("priority", PValue::I32(2));
    let mut a = m("shop.Address");
    a.set_field_by_name("street", s(STREET));
    a.set_field_by_name("city", s("Berlin"));
    a.set_field_by_name("postcode", s("10115"));
    a.set_field_by_name("country", s("DE"));
    a.set_field_by_name("lat", PValue::F64(52.532));
    a.set_field_by_name("lon", PValue::F64(13.384));
    o.set_field_by_name("shipping", PValue::Message(a));
    o.set_field_by_name(
        "line_ids",
        PValue::List(v.line_ids().map(PValue::I64).collect()),
    );
    o.set_field_by_name("tags", PValue::List(TAGS.iter().map(|t| s(t)).collect()));
    o.encode_to_vec()
}

/// The order in JSON: the values of the Avro and Protobuf benchmarks' record.
pub fn json_order(v: &Order) -> Vec<u8> {
    let created = DateTime::from_timestamp_micros(v.created_micros()).unwrap();
    let cents = v.cents();
    serde_json::to_vec(&json!({
        "order_id": v.order_id(),
        "customer_id": v.customer_id(),
        "customer_email": v.email(),
        "created_at": created.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        "status": "PAID",
        "channel": "mobile-app",
        "total": format!("{}.{:02}", cents / 100, cents % 100).parse::<serde_json::Number>().unwrap(),
        "currency": "EUR",
        "item_count": 3,
        "weight_kg": 2.75,
        "gift": v.gift(),
        "coupon": Json::Null,
        "notes": NOTES,
        "user_agent": AGENT,
        "session_id": v.session(),
        "warehouse_id": 42,
        "priority": 2,
        "shipping": {"street": STREET, "city": "Berlin", "postcode": "10115",
                     "country": "DE", "lat": 52.532, "lon": 13.384},
        "line_ids": v.line_ids().collect::<Vec<_>>(),
        "tags": TAGS,
    }))
    .unwrap()
}

/// The Avro plan and the first [`RECORDS`] orders in raw Avro.
pub fn avro_setup() -> (Plan, Vec<Vec<u8>>) {
    let plan = Plan::compile(
        &AvroSchema::parse(AVRO_SCHEMA).unwrap(),
        &table(),
        &PlanOptions::default(),
    )
    .unwrap();
    let inputs = avro_orders(&apache_avro::Schema::parse_str(AVRO_SCHEMA).unwrap());
    (plan, inputs)
}

/// The Protobuf plan, its writer message and the first [`RECORDS`] orders in Protobuf.
pub fn proto_setup() -> (Plan, MessageDescriptor, Vec<Vec<u8>>) {
    let schema = ProtoSchema::compile(PROTO, &[]).unwrap();
    let writer = schema.message(&MessagePath::FIRST).unwrap();
    let plan = Plan::compile_protobuf(&writer, &table(), &PlanOptions::default()).unwrap();
    let inputs = (0..RECORDS)
        .map(|i| proto_order(schema.pool(), &Order { i }))
        .collect();
    (plan, writer, inputs)
}

/// The schemaless JSON plan and the first [`RECORDS`] orders in JSON.
pub fn json_setup() -> (Plan, Vec<Vec<u8>>) {
    let plan = Plan::compile_json(None, false, &table(), &PlanOptions::default()).unwrap();
    let inputs = (0..RECORDS).map(|i| json_order(&Order { i })).collect();
    (plan, inputs)
}

pub fn table() -> TableSchema {
    serde_json::from_str(TABLE).unwrap()
}

/// The row message a plan writes, for decoding its output and building the naive paths' rows.
pub fn row_message(plan: &Plan) -> MessageDescriptor {
    DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(plan.descriptor())],
    })
    .unwrap()
    .get_message_by_name("Row")
    .unwrap()
}

pub fn mean_len(inputs: &[Vec<u8>]) -> f64 {
    inputs.iter().map(Vec::len).sum::<usize>() as f64 / inputs.len() as f64
}

/// `n` records through a plan, into one reused batch buffer cleared every 512 rows as a sealed
/// batch would be.
pub fn run_plan(plan: &Plan, inputs: &[Vec<u8>], out: &mut Vec<u8>, n: usize) {
    for (k, input) in inputs.iter().cycle().take(n).enumerate() {
        if k.is_multiple_of(512) {
            out.clear();
        }
        black_box(plan.transcode(black_box(input), None, out).unwrap());
    }
}

/// Time this thread spent on a CPU, from the scheduler (Linux): on a machine shared with other
/// jobs, wall-clock time counts the waits for a core, on-CPU time does not.
pub fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Records per second of on-CPU time over 1 s of calls to `f(batch)` (wall clock when the
/// scheduler's figure is missing).
pub fn measure(f: &mut dyn FnMut(usize), batch: usize) -> f64 {
    f(batch); // warm up
    let mut n = 0usize;
    let start = Instant::now();
    let cpu_start = thread_cpu_time();
    while start.elapsed() < Duration::from_secs(1) {
        f(batch);
        n += batch;
    }
    let secs = cpu_start
        .zip(thread_cpu_time())
        .map(|(a, b)| (b - a).as_secs_f64())
        .unwrap_or_else(|| start.elapsed().as_secs_f64());
    n as f64 / secs
}

/// The paths measured in turn, five rounds, each path's best round: on a shared machine a
/// neighbour slows a round (caches, frequency) but never speeds one up, and taking the paths in
/// turn exposes them to the same neighbours, so their ratio is the figure to trust.
pub fn compare(paths: &mut [&mut dyn FnMut(usize)], batch: usize) -> Vec<f64> {
    let mut best = vec![0f64; paths.len()];
    for _ in 0..5 {
        for (k, f) in paths.iter_mut().enumerate() {
            best[k] = best[k].max(measure(*f, batch));
        }
    }
    best
}

/// One line of a summary: a path's per-core rate at `mean` input bytes per record.
pub fn print_rate(name: &str, rate: f64, mean: f64) {
    println!(
        "{name:>16}: {rate:>10.0} records/s  {:>7.1} MB/s in  {:>7.1} ns/record  {:>5.3} ns/byte (on-cpu, one core)",
        rate * mean / 1e6,
        1e9 / rate,
        1e9 / rate / mean
    );
}

/// `cargo test --all-targets` runs a bench binary without `--bench` and with libtest's flags,
/// which criterion rejects: there each bench's cross-check is the test, measuring is for
/// `cargo bench`.
pub fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

pub fn criterion() -> Criterion {
    Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

/// A bench binary's run: the cross-check always (it is the test `cargo test --all-targets`
/// runs), then, under `cargo bench`, criterion's groups and the per-core summary.
pub fn main<S>(
    setup: impl FnOnce() -> S,
    cross_check: impl FnOnce(&S),
    bench: impl FnOnce(&mut Criterion, &S),
    summary: impl FnOnce(&S),
) {
    let s = setup();
    cross_check(&s);
    if !measuring() {
        return;
    }
    let mut c = criterion();
    bench(&mut c, &s);
    c.final_summary();
    summary(&s);
}

/// A criterion group whose throughput is the mean input size of `inputs`.
pub fn group<'c>(
    c: &'c mut Criterion,
    name: &str,
    inputs: &[Vec<u8>],
) -> BenchmarkGroup<'c, WallTime> {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes(mean_len(inputs) as u64));
    group
}

/// `f` over `inputs` in turn as one criterion function, the output buffer cleared every 512
/// records as in [`run_plan`].
pub fn bench_each(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    inputs: &[Vec<u8>],
    mut f: impl FnMut(&[u8], &mut Vec<u8>),
) {
    let mut out = Vec::with_capacity(1 << 20);
    let mut i = 0usize;
    group.bench_function(name, |b| {
        b.iter(|| {
            if i.is_multiple_of(512) {
                out.clear();
            }
            f(black_box(&inputs[i % inputs.len()]), &mut out);
            i += 1;
        })
    });
}

/// A plan over `inputs` as one criterion function.
pub fn bench_plan(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    plan: &Plan,
    inputs: &[Vec<u8>],
) {
    bench_each(group, name, inputs, |input, out| {
        black_box(plan.transcode(input, None, out).unwrap());
    });
}

/// One path of a summary: its name, the mean size of its inputs, and `n` records through it.
pub struct Path<'a> {
    pub name: String,
    pub mean: f64,
    pub run: Box<dyn FnMut(usize) + 'a>,
}

/// `f` over `inputs` in turn, `n` records, as a [`Path`] (the output cleared every 512 records).
pub fn path<'a>(
    name: impl Into<String>,
    inputs: &'a [Vec<u8>],
    mut f: impl FnMut(&[u8], &mut Vec<u8>) + 'a,
) -> Path<'a> {
    let mut out = Vec::with_capacity(1 << 20);
    Path {
        name: name.into(),
        mean: mean_len(inputs),
        run: Box::new(move |n| {
            for (k, input) in inputs.iter().cycle().take(n).enumerate() {
                if k.is_multiple_of(512) {
                    out.clear();
                }
                f(black_box(input), &mut out);
            }
        }),
    }
}

/// A plan over `inputs` as a [`Path`].
pub fn plan_path<'a>(name: impl Into<String>, plan: &'a Plan, inputs: &'a [Vec<u8>]) -> Path<'a> {
    path(name, inputs, move |input, out| {
        black_box(plan.transcode(input, None, out).unwrap());
    })
}

/// The per-core summary: `paths` measured in turn ([`compare`]), a line on the `record`, one
/// line per path; their rates in order, for the ratios.
pub fn summarize(record: &str, mut paths: Vec<Path<'_>>, batch: usize) -> Vec<f64> {
    let rates = {
        let mut runs: Vec<&mut dyn FnMut(usize)> =
            paths.iter_mut().map(|p| &mut *p.run as _).collect();
        compare(&mut runs, batch)
    };
    println!();
    println!("record: {record}");
    for (p, rate) in paths.iter().zip(&rates) {
        print_rate(&p.name, *rate, p.mean);
    }
    rates
}

/// One ratio line of a summary.
pub fn print_ratio(name: &str, text: std::fmt::Arguments<'_>) {
    println!("{name:>16}: {text}");
}
