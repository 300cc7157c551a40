//! Transcoder throughput on a realistic ~1 KB record of 20 mixed fields, against the naive path
//! (apache-avro `Value` → prost-reflect `DynamicMessage` → bytes) in the same run.
//!
//! `cargo bench --bench transcode` runs criterion and then prints a per-core summary: records/s,
//! MB/s of Avro input, and the ratio to the naive path.

use std::hint::black_box;
use std::time::{Duration, Instant};

use apache_avro::Schema;
use apache_avro::types::Value;
use criterion::{Criterion, Throughput};
use kafka_bigquery_sink::bigquery::table_schema::TableSchema;
use kafka_bigquery_sink::transcode::{AvroSchema, Plan, PlanOptions, file_for};
use num_bigint::BigInt;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MessageDescriptor, Value as PValue};
use prost_types::FileDescriptorSet;

const SCHEMA: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
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

fn record(i: i64) -> Value {
    let s = |v: String| Value::String(v);
    let fields =
        vec![
        ("order_id", s(format!("ord-{i:012}-2f9c1e7a-4b8d-4c3e-9a6f"))),
        ("customer_id", Value::Long(1_000_000 + i * 7919)),
        ("customer_email", s(format!("customer.{i}@example-mail.com"))),
        ("created_at", Value::TimestampMicros(1_764_460_800_000_000 + i * 1_000)),
        ("status", s("PAID".into())),
        ("channel", Value::Union(1, Box::new(s("mobile-app".into())))),
        (
            "total",
            Value::Decimal(apache_avro::Decimal::from((129_990 + i).to_be_bytes().to_vec())),
        ),
        ("currency", s("EUR".into())),
        ("item_count", Value::Int(3)),
        ("weight_kg", Value::Double(2.75)),
        ("gift", Value::Boolean(i % 2 == 0)),
        ("coupon", Value::Union(0, Box::new(Value::Null))),
        (
            "notes",
            s("Please leave the parcel at the back door if nobody answers; the dog is friendly \
               but loud. Call ahead on weekdays between nine and five, ask for the reception \
               desk, and mention the order number so they can find the delivery slot quickly. \
               If the parcel does not fit the letterbox, the neighbours at number 221a accept \
               deliveries for us; otherwise please use the parcel locker at the corner shop \
               and send the pickup code by text message to the number on the order."
                .into()),
        ),
        (
            "user_agent",
            s("Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) \
               Chrome/131.0.0.0 Mobile Safari/537.36 ShopApp/5.12.3"
                .into()),
        ),
        ("session_id", s(format!("sess-{:032x}", i as u128 * 0x9e37_79b9_7f4a_7c15))),
        ("warehouse_id", Value::Long(42)),
        ("priority", Value::Int(2)),
        (
            "shipping",
            Value::Record(vec![
                ("street".into(), s("Hauptstraße 221b, Hinterhaus 3. OG".into())),
                ("city".into(), s("Berlin".into())),
                ("postcode".into(), s("10115".into())),
                ("country".into(), s("DE".into())),
                ("lat".into(), Value::Double(52.532)),
                ("lon".into(), Value::Double(13.384)),
            ]),
        ),
        (
            "line_ids",
            Value::Array((0..8).map(|k| Value::Long(900_000_000 + i * 10 + k)).collect()),
        ),
        (
            "tags",
            Value::Array(
                ["express", "fragile", "eu-vat", "repeat-customer", "newsletter"]
                    .iter()
                    .map(|t| s((*t).into()))
                    .collect(),
            ),
        ),
    ];
    Value::Record(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// The naive path, as the Flink connector does it: decode to a generic value tree, convert each
/// value into a dynamic message by field name, then serialize.
struct Naive<'a> {
    schema: &'a Schema,
    desc: MessageDescriptor,
}

impl Naive<'_> {
    fn transcode(&self, avro: &[u8]) -> Vec<u8> {
        let value = apache_avro::reader::datum::GenericDatumReader::builder(self.schema)
            .build()
            .unwrap()
            .read_value(&mut &avro[..])
            .unwrap();
        to_message(&value, &self.desc).encode_to_vec()
    }
}

fn to_message(v: &Value, desc: &MessageDescriptor) -> DynamicMessage {
    let mut m = DynamicMessage::new(desc.clone());
    let Value::Record(fields) = v else {
        panic!("record expected")
    };
    for (name, value) in fields {
        let Some(fd) = desc.get_field_by_name(name) else {
            continue;
        };
        if let Some(pv) = to_proto(value, &fd.kind()) {
            m.set_field(&fd, pv);
        }
    }
    m
}

fn to_proto(v: &Value, kind: &Kind) -> Option<PValue> {
    Some(match v {
        Value::Null => return None,
        Value::Union(_, inner) => return to_proto(inner, kind),
        Value::Boolean(b) => PValue::Bool(*b),
        Value::Int(i) => PValue::I64(*i as i64),
        Value::Long(i) | Value::TimestampMicros(i) => PValue::I64(*i),
        Value::Double(d) => PValue::F64(*d),
        Value::String(s) => PValue::String(s.clone()),
        Value::Decimal(d) => {
            let unscaled = BigInt::from(d.clone()) * BigInt::from(10_000_000u64);
            PValue::Bytes(unscaled.to_signed_bytes_le().into())
        }
        Value::Record(_) => PValue::Message(to_message(v, kind.as_message().unwrap())),
        Value::Array(items) => {
            PValue::List(items.iter().filter_map(|i| to_proto(i, kind)).collect())
        }
        other => panic!("not in the bench schema: {other:?}"),
    })
}

struct Setup {
    plan: Plan,
    avro: Vec<Vec<u8>>,
    schema: Schema,
    desc: MessageDescriptor,
}

fn setup() -> Setup {
    let schema = Schema::parse_str(SCHEMA).unwrap();
    let writer = apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
        .build()
        .unwrap();
    let avro: Vec<Vec<u8>> = (0..1024)
        .map(|i| writer.write_value_to_vec(record(i)).unwrap())
        .collect();
    let table: TableSchema = serde_json::from_str(TABLE).unwrap();
    let plan = Plan::compile(
        &AvroSchema::parse(SCHEMA).unwrap(),
        &table,
        &PlanOptions::default(),
    )
    .unwrap();
    let pool = DescriptorPool::from_file_descriptor_set(FileDescriptorSet {
        file: vec![file_for(plan.descriptor())],
    })
    .unwrap();
    let desc = pool.get_message_by_name("Row").unwrap();
    Setup {
        plan,
        avro,
        schema,
        desc,
    }
}

/// Both paths must produce the same rows, or the comparison means nothing.
fn cross_check(s: &Setup) {
    let naive = Naive {
        schema: &s.schema,
        desc: s.desc.clone(),
    };
    for avro in s.avro.iter().take(64) {
        let mut out = Vec::new();
        let range = s.plan.transcode(avro, None, &mut out).unwrap();
        let ours = DynamicMessage::decode(s.desc.clone(), &out[range]).unwrap();
        let theirs = DynamicMessage::decode(s.desc.clone(), &naive.transcode(avro)[..]).unwrap();
        assert_eq!(ours, theirs, "the two paths disagree");
    }
}

/// Rows go into one reused batch buffer, cleared every 512 rows as a sealed batch would be.
fn run_ours(s: &Setup, out: &mut Vec<u8>, n: usize) {
    for (k, avro) in s.avro.iter().cycle().take(n).enumerate() {
        if k.is_multiple_of(512) {
            out.clear();
        }
        black_box(s.plan.transcode(black_box(avro), None, out).unwrap());
    }
}

fn bench(c: &mut Criterion, s: &Setup) {
    let naive = Naive {
        schema: &s.schema,
        desc: s.desc.clone(),
    };
    let avg = s.avro.iter().map(Vec::len).sum::<usize>() / s.avro.len();
    let mut group = c.benchmark_group("avro_to_proto_1kb_record");
    group.throughput(Throughput::Bytes(avg as u64));
    let mut out = Vec::with_capacity(1 << 20);
    let mut i = 0usize;
    group.bench_function("plan", |b| {
        b.iter(|| {
            if i.is_multiple_of(512) {
                out.clear();
            }
            let avro = &s.avro[i % s.avro.len()];
            i += 1;
            black_box(s.plan.transcode(black_box(avro), None, &mut out).unwrap())
        })
    });
    let mut j = 0usize;
    group.bench_function("naive_value_dynamicmessage", |b| {
        b.iter(|| {
            let avro = &s.avro[j % s.avro.len()];
            j += 1;
            black_box(naive.transcode(black_box(avro)))
        })
    });
    group.finish();
}

/// Time this thread spent on a CPU, from the scheduler (Linux): on a machine shared with other
/// jobs, wall-clock time counts the waits for a core, on-CPU time does not.
fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

struct Rate {
    wall: f64,
    cpu: Option<f64>,
}

/// Records/s and MB/s per core, measured directly so both paths print in the same units.
fn summary(s: &Setup) {
    let naive = Naive {
        schema: &s.schema,
        desc: s.desc.clone(),
    };
    let bytes_per_cycle: usize = s.avro.iter().map(Vec::len).sum();
    let avg = bytes_per_cycle as f64 / s.avro.len() as f64;
    let measure = |f: &mut dyn FnMut(usize)| {
        f(s.avro.len()); // warm up
        let mut n = 0usize;
        let start = Instant::now();
        let cpu_start = thread_cpu_time();
        while start.elapsed() < Duration::from_secs(3) {
            f(s.avro.len());
            n += s.avro.len();
        }
        let wall = start.elapsed().as_secs_f64();
        let cpu = cpu_start
            .zip(thread_cpu_time())
            .map(|(a, b)| (b - a).as_secs_f64());
        Rate {
            wall: n as f64 / wall,
            cpu: cpu.map(|c| n as f64 / c),
        }
    };
    let mut out = Vec::with_capacity(1 << 20);
    let ours = measure(&mut |n| run_ours(s, &mut out, n));
    let theirs = measure(&mut |n| {
        for avro in s.avro.iter().take(n) {
            black_box(naive.transcode(black_box(avro)));
        }
    });
    println!();
    println!("record: 20 fields, {avg:.0} bytes of avro on average");
    let line = |name: &str, clock: &str, rate: f64| {
        println!(
            "{name:>18} ({clock:>8}): {rate:>10.0} records/s  {:>7.1} MB/s avro in  {:>8.1} ns/record",
            rate * avg / 1e6,
            1e9 / rate
        );
    };
    for (name, r) in [("plan transcoder", &ours), ("naive value path", &theirs)] {
        line(name, "wall", r.wall);
        if let Some(cpu) = r.cpu {
            line(name, "on-cpu", cpu);
        }
    }
    println!(
        "{:>18}: {:.1}x (wall clock)",
        "ratio",
        ours.wall / theirs.wall
    );
    if let (Some(a), Some(b)) = (ours.cpu, theirs.cpu) {
        println!("{:>18}: {:.1}x (on-cpu time, one core)", "ratio", a / b);
    }
}

fn main() {
    let s = setup();
    cross_check(&s);
    // `cargo test --all-targets` runs this binary without `--bench` and with libtest's flags,
    // which criterion rejects: there the cross-check above is the test, measuring is for
    // `cargo bench`.
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
