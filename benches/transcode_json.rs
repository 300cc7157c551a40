//! The JSON plan against the naive JSON path on the same ~1 KB order as `benches/transcode.rs`
//! (the same values and table): the naive path parses a `serde_json::Value`, builds the row as a
//! prost-reflect `DynamicMessage` by column name and encodes it. Schemaless (the table types the
//! values), in one run.
//!
//! `cargo bench --bench transcode_json` runs criterion and then prints a per-core summary:
//! records/s, MB/s of input and ns per input byte for each path, and the ratio.

use std::hint::black_box;
use std::time::{Duration, Instant};

use chrono::DateTime;
use criterion::{Criterion, Throughput};
use kafka_bigquery_sink::bigquery::table_schema::TableSchema;
use kafka_bigquery_sink::transcode::{Plan, PlanOptions, file_for};
use num_bigint::BigInt;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MessageDescriptor, Value as PValue};
use prost_types::FileDescriptorSet;
use serde_json::{Value as Json, json};

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

fn order(i: i64) -> Vec<u8> {
    let created = DateTime::from_timestamp_micros(1_764_460_800_000_000 + i * 1_000).unwrap();
    let cents = 129_990 + i;
    serde_json::to_vec(&json!({
        "order_id": format!("ord-{i:012}-2f9c1e7a-4b8d-4c3e-9a6f"),
        "customer_id": 1_000_000 + i * 7,
        "customer_email": format!("customer{i}@example.com"),
        "created_at": created.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        "status": "PAID",
        "channel": if i % 3 == 0 { Json::Null } else { json!("mobile-app") },
        "total": format!("{}.{:02}", cents / 100, cents % 100).parse::<serde_json::Number>().unwrap(),
        "currency": "EUR",
        "item_count": 3 + i % 5,
        "weight_kg": 1.25 + i as f64 / 1000.0,
        "gift": i % 2 == 0,
        "coupon": if i % 4 == 0 { json!("WINTER-10") } else { Json::Null },
        "notes": NOTES,
        "user_agent": AGENT,
        "session_id": format!("sess-{:032x}", i as u128 * 0x9e37_79b9_7f4a_7c15),
        "warehouse_id": 17 + i % 3,
        "priority": i % 4,
        "shipping": {"street": "Bahnhofstrasse 21", "city": "Zürich", "postcode": "8001",
                     "country": "CH", "lat": 47.3769, "lon": 8.5417},
        "line_ids": [i * 10, i * 10 + 1, i * 10 + 2],
        "tags": ["express", "fragile", "eu-vat", "repeat-customer", "newsletter"],
    }))
    .unwrap()
}

/// The naive path: a value tree, a `DynamicMessage` by column name, then bytes.
fn naive(input: &[u8], row: &MessageDescriptor) -> Vec<u8> {
    let v: Json = serde_json::from_slice(input).unwrap();
    to_message(&v, row).encode_to_vec()
}

fn to_message(v: &Json, desc: &MessageDescriptor) -> DynamicMessage {
    let mut m = DynamicMessage::new(desc.clone());
    for (k, x) in v.as_object().unwrap() {
        if x.is_null() {
            continue;
        }
        let Some(fd) = desc.get_field_by_name(k) else {
            continue;
        };
        let one = |x: &Json| match (fd.name(), fd.kind()) {
            ("created_at", _) => PValue::I64(
                DateTime::parse_from_rfc3339(x.as_str().unwrap())
                    .unwrap()
                    .timestamp_micros(),
            ),
            ("total", _) => {
                let text = x.to_string();
                let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
                let unscaled: BigInt = format!("{int}{frac:0<9}").parse().unwrap();
                PValue::Bytes(unscaled.to_signed_bytes_le().into())
            }
            (_, Kind::Message(sub)) => PValue::Message(to_message(x, &sub)),
            (_, Kind::Int64) => PValue::I64(x.as_i64().unwrap()),
            (_, Kind::Double) => PValue::F64(x.as_f64().unwrap()),
            (_, Kind::Bool) => PValue::Bool(x.as_bool().unwrap()),
            (_, Kind::String) => PValue::String(x.as_str().unwrap().to_owned()),
            (_, other) => panic!("not in the bench table: {other:?}"),
        };
        let value = match x {
            Json::Array(items) => PValue::List(items.iter().map(one).collect()),
            _ => one(x),
        };
        m.set_field(&fd, value);
    }
    m
}

struct Setup {
    plan: Plan,
    row: MessageDescriptor,
    inputs: Vec<Vec<u8>>,
}

fn setup() -> Setup {
    let table: TableSchema = serde_json::from_str(TABLE).unwrap();
    let plan = Plan::compile_json(None, false, &table, &PlanOptions::default()).unwrap();
    let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(plan.descriptor())],
    })
    .unwrap();
    let row = pool.get_message_by_name("Row").unwrap();
    let inputs = (0..1024).map(order).collect();
    Setup { plan, row, inputs }
}

/// Both paths must produce the same rows, or the comparison means nothing.
fn cross_check(s: &Setup) {
    for input in s.inputs.iter().take(64) {
        let mut out = Vec::new();
        let range = s.plan.transcode(input, None, &mut out).unwrap();
        let ours = DynamicMessage::decode(s.row.clone(), &out[range]).unwrap();
        let theirs = DynamicMessage::decode(s.row.clone(), &naive(input, &s.row)[..]).unwrap();
        assert_eq!(ours, theirs, "the plan and the naive path disagree");
    }
}

fn run(s: &Setup, out: &mut Vec<u8>, n: usize) {
    for (k, input) in s.inputs.iter().cycle().take(n).enumerate() {
        if k.is_multiple_of(512) {
            out.clear();
        }
        black_box(s.plan.transcode(black_box(input), None, out).unwrap());
    }
}

fn bench(c: &mut Criterion, s: &Setup) {
    let avg = s.inputs.iter().map(Vec::len).sum::<usize>() / s.inputs.len();
    let mut group = c.benchmark_group("json_to_proto_1kb_record");
    group.throughput(Throughput::Bytes(avg as u64));
    let mut out = Vec::with_capacity(1 << 20);
    group.bench_function("plan", |b| b.iter(|| run(s, &mut out, 1)));
    let mut j = 0usize;
    group.bench_function("naive_serde_json_value", |b| {
        b.iter(|| {
            let input = &s.inputs[j % s.inputs.len()];
            j += 1;
            black_box(naive(black_box(input), &s.row))
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
    let avg = s.inputs.iter().map(Vec::len).sum::<usize>() as f64 / s.inputs.len() as f64;
    let mut out = Vec::with_capacity(1 << 20);
    let batch = s.inputs.len();
    let plan = measure(&mut |n| run(s, &mut out, n), batch);
    let naive_rate = measure(
        &mut |n| {
            for p in s.inputs.iter().take(n) {
                black_box(naive(black_box(p), &s.row));
            }
        },
        batch,
    );
    println!();
    println!("record: 20 fields; {avg:.0} bytes of json on average");
    for (name, rate) in [("json plan", plan), ("json naive", naive_rate)] {
        println!(
            "{name:>10}: {rate:>10.0} records/s  {:>7.1} MB/s in  {:>7.1} ns/record  {:>5.3} ns/byte (on-cpu, one core)",
            rate * avg / 1e6,
            1e9 / rate,
            1e9 / rate / avg
        );
    }
    println!(
        "{:>10}: {:.1}x the naive json path",
        "json plan",
        plan / naive_rate
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
