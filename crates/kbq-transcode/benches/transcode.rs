//! Transcoder throughput on a realistic ~1 KB record of 20 mixed fields (`benches/common`),
//! against the naive path (apache-avro `Value` → prost-reflect `DynamicMessage` → bytes) in the
//! same run; and on the end-to-end benchmark's own records (`orders`): the quickstart's generated
//! orders with the bench driver's seed, the table the sink creates for them and its three Kafka
//! metadata columns, so that this figure and `bench/instructions.sh`'s measure the same work.
//!
//! The same ~1 KB record through a plan with and without transforms (`common/transforms.rs`).
//!
//! `cargo bench --bench transcode` runs criterion and then prints a per-core summary: records/s,
//! MB/s of Avro input, and the ratio to the naive path.

mod common;
#[path = "common/orders.rs"]
mod orders;
#[path = "common/transforms.rs"]
mod transforms;

use std::hint::black_box;

use apache_avro::Schema;
use apache_avro::types::Value;
use criterion::Criterion;
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
    orders: orders::Orders,
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
        orders: orders::Orders::new(),
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
    s.orders.check();
}

fn bench(c: &mut Criterion, s: &Setup) {
    let naive = Naive {
        schema: &s.schema,
        desc: s.desc.clone(),
    };
    let mut group = common::group(c, "avro_to_proto_1kb_record", &s.avro);
    common::bench_plan(&mut group, "plan", &s.plan, &s.avro);
    common::bench_each(
        &mut group,
        "naive_value_dynamicmessage",
        &s.avro,
        |avro, _| {
            black_box(naive.transcode(avro));
        },
    );
    group.finish();
    let mut group = common::group(c, "avro_bench_orders", &s.orders.avro);
    let mut k = 0u64;
    common::bench_each(&mut group, "plan", &s.orders.avro, |avro, out| {
        black_box(s.orders.transcode(avro, k, out));
        k += 1;
    });
    group.finish();
    // The same order without and with a rename, a drop, a mask and a header column.
    let mut group = common::group(c, "avro_transforms", &s.avro);
    for mode in ["plain", "transforms"] {
        let plan = transforms::plan(mode);
        let meta = transforms::meta();
        common::bench_each(&mut group, mode, &s.avro, |avro, out| {
            black_box(plan.transcode(avro, Some(&meta), out).unwrap());
        });
    }
    group.finish();
}

/// Records/s and MB/s per core, measured directly so both paths print in the same units.
fn summary(s: &Setup) {
    let naive = Naive {
        schema: &s.schema,
        desc: s.desc.clone(),
    };
    let mean = common::mean_len(&s.avro);
    let rates = common::summarize(
        &format!("20 fields, {mean:.0} bytes of avro on average"),
        vec![
            common::plan_path("avro plan", &s.plan, &s.avro),
            common::path("avro naive", &s.avro, |avro, _| {
                black_box(naive.transcode(avro));
            }),
        ],
        s.avro.len(),
    );
    common::print_ratio(
        "avro plan",
        format_args!("{:.1}x the naive avro path", rates[0] / rates[1]),
    );
    let mut k = 0u64;
    common::summarize(
        &format!(
            "the end-to-end benchmark's orders, {:.0} bytes of avro on average, 3 metadata columns",
            common::mean_len(&s.orders.avro)
        ),
        vec![common::path("bench orders", &s.orders.avro, |avro, out| {
            black_box(s.orders.transcode(avro, k, out));
            k += 1;
        })],
        s.orders.avro.len(),
    );
}

fn main() {
    common::main(setup, cross_check, bench, summary);
}
