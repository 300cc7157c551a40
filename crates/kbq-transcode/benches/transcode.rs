//! Transcoder throughput on a realistic ~1 KB record of 20 mixed fields (`benches/common`),
//! against the naive path (apache-avro `Value` → prost-reflect `DynamicMessage` → bytes) in the
//! same run.
//!
//! `cargo bench --bench transcode` runs criterion and then prints a per-core summary: records/s,
//! MB/s of Avro input, and the ratio to the naive path.

mod common;

use std::hint::black_box;

use apache_avro::Schema;
use apache_avro::types::Value;
use criterion::{Criterion, Throughput};
use kbq_transcode::Plan;
use num_bigint::BigInt;
use prost::Message;
use prost_reflect::{DynamicMessage, Kind, MessageDescriptor, Value as PValue};

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
    let schema = Schema::parse_str(common::AVRO_SCHEMA).unwrap();
    let (plan, avro) = common::avro_setup();
    let desc = common::row_message(&plan);
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

/// Records/s and MB/s per core, measured directly so both paths print in the same units.
fn summary(s: &Setup) {
    let naive = Naive {
        schema: &s.schema,
        desc: s.desc.clone(),
    };
    let mean = common::mean_len(&s.avro);
    let batch = s.avro.len();
    let mut out = Vec::with_capacity(1 << 20);
    let rates = common::compare(
        &mut [
            &mut |n| common::run_plan(&s.plan, &s.avro, &mut out, n),
            &mut |n| {
                for avro in s.avro.iter().cycle().take(n) {
                    black_box(naive.transcode(black_box(avro)));
                }
            },
        ],
        batch,
    );
    let (ours, theirs) = (rates[0], rates[1]);
    println!();
    println!("record: 20 fields, {mean:.0} bytes of avro on average");
    common::print_rate("avro plan", ours, mean);
    common::print_rate("avro naive", theirs, mean);
    println!(
        "{:>16}: {:.1}x the naive avro path",
        "avro plan",
        ours / theirs
    );
}

fn main() {
    let s = setup();
    cross_check(&s);
    if !common::measuring() {
        return;
    }
    let mut c = common::criterion();
    bench(&mut c, &s);
    c.final_summary();
    summary(&s);
}
