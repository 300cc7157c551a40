//! The Protobuf plan against the Avro plan on equivalent records (the same ~1 KB order as
//! `benches/transcode.rs`, the same values, the same table), and against the naive Protobuf path
//! (prost-reflect `DynamicMessage` decode → a row `DynamicMessage` by field name → bytes), all in
//! one run.
//!
//! `cargo bench --bench transcode_protobuf` runs criterion and then prints a per-core summary:
//! records/s, MB/s of input and ns per input byte for each path, and the ratios.

mod common;
#[path = "common/orders.rs"]
mod orders;

use std::hint::black_box;

use criterion::Criterion;
use kbq_transcode::Plan;
use num_bigint::BigInt;
use prost::Message;
use prost_reflect::{DynamicMessage, Kind, MessageDescriptor, ReflectMessage, Value as PValue};

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
    /// The end-to-end benchmark's orders in Protobuf (the records BENCHMARKS.md counts).
    orders: orders::ProtoOrders,
}

fn setup() -> Setup {
    let (proto_plan, writer, proto) = common::proto_setup();
    let (avro_plan, avro) = common::avro_setup();
    let naive = Naive {
        writer,
        row: common::row_message(&proto_plan),
    };
    Setup {
        proto_plan,
        avro_plan,
        proto,
        avro,
        naive,
        orders: orders::ProtoOrders::new(),
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

fn bench(c: &mut Criterion, s: &Setup) {
    let mut group = common::group(c, "protobuf_to_proto_1kb_record", &s.proto);
    common::bench_plan(&mut group, "plan", &s.proto_plan, &s.proto);
    common::bench_each(&mut group, "naive_dynamicmessage", &s.proto, |input, _| {
        black_box(s.naive.transcode(input));
    });
    group.finish();
    let mut group = common::group(c, "protobuf_bench_orders", &s.orders.proto);
    let mut k = 0u64;
    common::bench_each(&mut group, "plan", &s.orders.proto, |input, out| {
        black_box(s.orders.transcode(input, k, out));
        k += 1;
    });
    group.finish();
}

fn summary(s: &Setup) {
    let proto_avg = common::mean_len(&s.proto);
    let avro_avg = common::mean_len(&s.avro);
    let rates = common::summarize(
        &format!(
            "20 fields; {proto_avg:.0} bytes of protobuf, {avro_avg:.0} bytes of avro on average"
        ),
        vec![
            common::plan_path("protobuf plan", &s.proto_plan, &s.proto),
            common::plan_path("avro plan", &s.avro_plan, &s.avro),
            common::path("protobuf naive", &s.proto, |p, _| {
                black_box(s.naive.transcode(p));
            }),
        ],
        s.proto.len(),
    );
    let (proto, avro, naive) = (rates[0], rates[1], rates[2]);
    common::print_ratio(
        "protobuf plan",
        format_args!(
            "{:.2}x the avro plan per record, {:.2}x per input byte",
            proto / avro,
            (proto * proto_avg) / (avro * avro_avg)
        ),
    );
    common::print_ratio(
        "protobuf plan",
        format_args!("{:.1}x the naive protobuf path", proto / naive),
    );
    let mut k = 0u64;
    common::summarize(
        &format!(
            "the end-to-end benchmark's orders, {:.0} bytes of protobuf on average, 3 metadata columns",
            common::mean_len(&s.orders.proto)
        ),
        vec![common::path(
            "bench orders",
            &s.orders.proto,
            |input, out| {
                black_box(s.orders.transcode(input, k, out));
                k += 1;
            },
        )],
        s.orders.proto.len(),
    );
}

fn main() {
    common::main(setup, cross_check, bench, summary);
}
