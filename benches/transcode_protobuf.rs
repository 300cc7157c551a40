//! The Protobuf plan against the Avro plan on equivalent records (the same ~1 KB order as
//! `benches/transcode.rs`, the same values, the same table), and against the naive Protobuf path
//! (prost-reflect `DynamicMessage` decode → a row `DynamicMessage` by field name → bytes), all in
//! one run.
//!
//! `cargo bench --bench transcode_protobuf` runs criterion and then prints a per-core summary:
//! records/s, MB/s of input and ns per input byte for each path, and the ratios.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use kafka_bigquery_sink::bigquery::table_schema::TableSchema;
use kafka_bigquery_sink::transcode::protobuf::{MessagePath, ProtoSchema};
use kafka_bigquery_sink::transcode::{AvroSchema, Plan, PlanOptions, file_for};
use num_bigint::BigInt;
use prost::Message;
use prost_reflect::{
    DescriptorPool, DynamicMessage, Kind, MessageDescriptor, ReflectMessage, Value as PValue,
};
use prost_types::FileDescriptorSet;

const PROTO: &str = r#"
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

const AVRO: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
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

const TABLE: &str = r#"{"fields":[
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

const NOTES: &str = "Please leave the parcel at the back door if nobody answers; the dog is friendly \
    but loud. Call ahead on weekdays between nine and five, ask for the reception desk, and \
    mention the order number so they can find the delivery slot quickly. If the parcel does not \
    fit the letterbox, the neighbours at number 221a accept deliveries for us; otherwise please \
    use the parcel locker at the corner shop and send the pickup code by text message to the \
    number on the order.";
const AGENT: &str = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like \
    Gecko) Chrome/131.0.0.0 Mobile Safari/537.36 ShopApp/5.12.3";
const TAGS: [&str; 5] = [
    "express",
    "fragile",
    "eu-vat",
    "repeat-customer",
    "newsletter",
];

/// One order's values, written both ways.
struct Values {
    i: i64,
}

impl Values {
    fn order_id(&self) -> String {
        format!("ord-{:012}-2f9c1e7a-4b8d-4c3e-9a6f", self.i)
    }
    fn session(&self) -> String {
        format!("sess-{:032x}", self.i as u128 * 0x9e37_79b9_7f4a_7c15)
    }
    fn created_micros(&self) -> i64 {
        1_764_460_800_000_000 + self.i * 1_000
    }
    fn cents(&self) -> i64 {
        129_990 + self.i
    }
}

fn proto_order(pool: &DescriptorPool, v: &Values) -> Vec<u8> {
    let m = |name: &str| DynamicMessage::new(pool.get_message_by_name(name).unwrap());
    let mut o = m("shop.Order");
    let s = |x: &str| PValue::String(x.to_owned());
    o.set_field_by_name("order_id", PValue::String(v.order_id()));
    o.set_field_by_name("customer_id", PValue::I64(1_000_000 + v.i * 7919));
    o.set_field_by_name(
        "customer_email",
        PValue::String(format!("customer.{}@example-mail.com", v.i)),
    );
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
    o.set_field_by_name("gift", PValue::Bool(v.i % 2 == 0));
    o.set_field_by_name("notes", s(NOTES));
    o.set_field_by_name("user_agent", s(AGENT));
    o.set_field_by_name("session_id", PValue::String(v.session()));
    o.set_field_by_name("warehouse_id", PValue::I64(42));
    o.set_field_by_name("priority", PValue::I32(2));
    let mut a = m("shop.Address");
    a.set_field_by_name("street", s("Hauptstraße 221b, Hinterhaus 3. OG"));
    a.set_field_by_name("city", s("Berlin"));
    a.set_field_by_name("postcode", s("10115"));
    a.set_field_by_name("country", s("DE"));
    a.set_field_by_name("lat", PValue::F64(52.532));
    a.set_field_by_name("lon", PValue::F64(13.384));
    o.set_field_by_name("shipping", PValue::Message(a));
    o.set_field_by_name(
        "line_ids",
        PValue::List(
            (0..8)
                .map(|k| PValue::I64(900_000_000 + v.i * 10 + k))
                .collect(),
        ),
    );
    o.set_field_by_name("tags", PValue::List(TAGS.iter().map(|t| s(t)).collect()));
    o.encode_to_vec()
}

fn avro_order(schema: &apache_avro::Schema, v: &Values) -> Vec<u8> {
    use apache_avro::types::Value;
    let s = |x: &str| Value::String(x.to_owned());
    let fields = vec![
        ("order_id", Value::String(v.order_id())),
        ("customer_id", Value::Long(1_000_000 + v.i * 7919)),
        (
            "customer_email",
            Value::String(format!("customer.{}@example-mail.com", v.i)),
        ),
        ("created_at", Value::TimestampMicros(v.created_micros())),
        ("status", s("PAID")),
        ("channel", Value::Union(1, Box::new(s("mobile-app")))),
        (
            "total",
            Value::Decimal(apache_avro::Decimal::from(v.cents().to_be_bytes().to_vec())),
        ),
        ("currency", s("EUR")),
        ("item_count", Value::Int(3)),
        ("weight_kg", Value::Double(2.75)),
        ("gift", Value::Boolean(v.i % 2 == 0)),
        ("coupon", Value::Union(0, Box::new(Value::Null))),
        ("notes", s(NOTES)),
        ("user_agent", s(AGENT)),
        ("session_id", Value::String(v.session())),
        ("warehouse_id", Value::Long(42)),
        ("priority", Value::Int(2)),
        (
            "shipping",
            Value::Record(vec![
                ("street".into(), s("Hauptstraße 221b, Hinterhaus 3. OG")),
                ("city".into(), s("Berlin")),
                ("postcode".into(), s("10115")),
                ("country".into(), s("DE")),
                ("lat".into(), Value::Double(52.532)),
                ("lon".into(), Value::Double(13.384)),
            ]),
        ),
        (
            "line_ids",
            Value::Array(
                (0..8)
                    .map(|k| Value::Long(900_000_000 + v.i * 10 + k))
                    .collect(),
            ),
        ),
        ("tags", Value::Array(TAGS.iter().map(|t| s(t)).collect())),
    ];
    let record = Value::Record(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
    apache_avro::writer::datum::GenericDatumWriter::builder(schema)
        .build()
        .unwrap()
        .write_value_to_vec(record)
        .unwrap()
}

/// The naive Protobuf path: decode into a dynamic message, copy each field into the row's
/// dynamic message by name (well-known types converted), encode.
struct Naive {
    writer: MessageDescriptor,
    row: MessageDescriptor,
}

impl Naive {
    fn transcode(&self, bytes: &[u8]) -> Vec<u8> {
        let m = DynamicMessage::decode(self.writer.clone(), bytes).unwrap();
        copy(&m, &self.row).encode_to_vec()
    }
}

fn copy(m: &DynamicMessage, row: &MessageDescriptor) -> DynamicMessage {
    let mut out = DynamicMessage::new(row.clone());
    for fd in m.descriptor().fields() {
        // Implicit-presence fields the wire left out still hold their default value.
        let implicit = !fd.supports_presence() && !fd.is_list() && !fd.is_map();
        if !m.has_field(&fd) && !implicit {
            continue;
        }
        let Some(target) = row.get_field_by_name(fd.name()) else {
            continue;
        };
        let v = m.get_field(&fd);
        let value = match (&*v, target.kind()) {
            (PValue::Message(inner), Kind::Message(sub)) => PValue::Message(copy(inner, &sub)),
            (PValue::Message(inner), _) => match inner.descriptor().full_name() {
                "google.protobuf.Timestamp" => {
                    let s = inner
                        .get_field_by_name("seconds")
                        .unwrap()
                        .as_i64()
                        .unwrap();
                    let n = inner.get_field_by_name("nanos").unwrap().as_i32().unwrap();
                    PValue::I64(s * 1_000_000 + n as i64 / 1000)
                }
                "google.type.Decimal" => {
                    let text = inner.get_field_by_name("value").unwrap();
                    let (int, frac) = text.as_str().unwrap().split_once('.').unwrap();
                    let unscaled: BigInt = format!("{int}{frac:0<9}").parse::<BigInt>().unwrap();
                    PValue::Bytes(unscaled.to_signed_bytes_le().into())
                }
                other => panic!("not in the bench schema: {other}"),
            },
            (PValue::I32(i), _) => PValue::I64(*i as i64),
            (other, _) => other.clone(),
        };
        out.set_field(&target, value);
    }
    out
}

struct Setup {
    proto_plan: Plan,
    avro_plan: Plan,
    proto: Vec<Vec<u8>>,
    avro: Vec<Vec<u8>>,
    naive: Naive,
}

fn setup() -> Setup {
    let table: TableSchema = serde_json::from_str(TABLE).unwrap();
    let schema = ProtoSchema::compile(PROTO, &[]).unwrap();
    let writer = schema.message(&MessagePath::FIRST).unwrap();
    let proto_plan = Plan::compile_protobuf(&writer, &table, &PlanOptions::default()).unwrap();
    let avro_plan = Plan::compile(
        &AvroSchema::parse(AVRO).unwrap(),
        &table,
        &PlanOptions::default(),
    )
    .unwrap();
    let apache = apache_avro::Schema::parse_str(AVRO).unwrap();
    let values: Vec<Values> = (0..1024).map(|i| Values { i }).collect();
    let proto = values
        .iter()
        .map(|v| proto_order(schema.pool(), v))
        .collect();
    let avro = values.iter().map(|v| avro_order(&apache, v)).collect();
    let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(proto_plan.descriptor())],
    })
    .unwrap();
    let naive = Naive {
        writer,
        row: pool.get_message_by_name("Row").unwrap(),
    };
    Setup {
        proto_plan,
        avro_plan,
        proto,
        avro,
        naive,
    }
}

/// The three paths must produce the same rows, or the comparison means nothing.
fn cross_check(s: &Setup) {
    let row = s.naive.row.clone();
    let decode = |plan: &Plan, input: &[u8]| {
        let mut out = Vec::new();
        let range = plan.transcode(input, None, &mut out).unwrap();
        DynamicMessage::decode(row.clone(), &out[range]).unwrap()
    };
    for (p, a) in s.proto.iter().zip(&s.avro).take(64) {
        let ours = decode(&s.proto_plan, p);
        assert_eq!(
            ours,
            decode(&s.avro_plan, a),
            "protobuf and avro plans disagree"
        );
        let naive = DynamicMessage::decode(row.clone(), &s.naive.transcode(p)[..]).unwrap();
        assert_eq!(ours, naive, "the plan and the naive path disagree");
    }
}

fn run(plan: &Plan, inputs: &[Vec<u8>], out: &mut Vec<u8>, n: usize) {
    for (k, input) in inputs.iter().cycle().take(n).enumerate() {
        if k.is_multiple_of(512) {
            out.clear();
        }
        black_box(plan.transcode(black_box(input), None, out).unwrap());
    }
}

fn bench(c: &mut Criterion, s: &Setup) {
    let avg = s.proto.iter().map(Vec::len).sum::<usize>() / s.proto.len();
    let mut group = c.benchmark_group("protobuf_to_proto_1kb_record");
    group.throughput(Throughput::Bytes(avg as u64));
    let mut out = Vec::with_capacity(1 << 20);
    let mut i = 0usize;
    group.bench_function("plan", |b| {
        b.iter(|| {
            if i.is_multiple_of(512) {
                out.clear();
            }
            let input = &s.proto[i % s.proto.len()];
            i += 1;
            black_box(
                s.proto_plan
                    .transcode(black_box(input), None, &mut out)
                    .unwrap(),
            )
        })
    });
    let mut j = 0usize;
    group.bench_function("naive_dynamicmessage", |b| {
        b.iter(|| {
            let input = &s.proto[j % s.proto.len()];
            j += 1;
            black_box(s.naive.transcode(black_box(input)))
        })
    });
    group.finish();
}

fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Records per second of on-CPU time (wall clock when the scheduler's figure is missing).
fn measure(f: &mut dyn FnMut(usize), batch: usize) -> f64 {
    f(batch);
    let mut n = 0usize;
    let start = Instant::now();
    let cpu_start = thread_cpu_time();
    while start.elapsed() < Duration::from_secs(3) {
        f(batch);
        n += batch;
    }
    let secs = cpu_start
        .zip(thread_cpu_time())
        .map(|(a, b)| (b - a).as_secs_f64())
        .unwrap_or_else(|| start.elapsed().as_secs_f64());
    n as f64 / secs
}

fn summary(s: &Setup) {
    let proto_avg = s.proto.iter().map(Vec::len).sum::<usize>() as f64 / s.proto.len() as f64;
    let avro_avg = s.avro.iter().map(Vec::len).sum::<usize>() as f64 / s.avro.len() as f64;
    let mut out = Vec::with_capacity(1 << 20);
    let batch = s.proto.len();
    let proto = measure(&mut |n| run(&s.proto_plan, &s.proto, &mut out, n), batch);
    let avro = measure(&mut |n| run(&s.avro_plan, &s.avro, &mut out, n), batch);
    let naive = measure(
        &mut |n| {
            for p in s.proto.iter().take(n) {
                black_box(s.naive.transcode(black_box(p)));
            }
        },
        batch,
    );
    println!();
    println!(
        "record: 20 fields; {proto_avg:.0} bytes of protobuf, {avro_avg:.0} bytes of avro on average"
    );
    for (name, rate, avg) in [
        ("protobuf plan", proto, proto_avg),
        ("avro plan", avro, avro_avg),
        ("protobuf naive", naive, proto_avg),
    ] {
        println!(
            "{name:>15}: {rate:>10.0} records/s  {:>7.1} MB/s in  {:>7.1} ns/record  {:>5.3} ns/byte (on-cpu, one core)",
            rate * avg / 1e6,
            1e9 / rate,
            1e9 / rate / avg
        );
    }
    println!(
        "{:>15}: {:.2}x the avro plan per record, {:.2}x per input byte",
        "protobuf plan",
        proto / avro,
        (proto * proto_avg) / (avro * avro_avg)
    );
    println!(
        "{:>15}: {:.1}x the naive protobuf path",
        "protobuf plan",
        proto / naive
    );
}

fn main() {
    let s = setup();
    cross_check(&s);
    // `cargo test --all-targets` runs this binary without `--bench`: the cross-check is the test.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    bench(&mut c, &s);
    c.final_summary();
    summary(&s);
}
