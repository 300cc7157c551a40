//! The Protobuf plan against the Avro plan on equivalent records (the same ~1 KB order as
//! `benches/transcode.rs`, the same values, the same table), and against the naive Protobuf path
//! (prost-reflect `DynamicMessage` decode → a row `DynamicMessage` by field name → bytes), all in
//! one run.
//!
//! `cargo bench --bench transcode_protobuf` runs criterion and then prints a per-core summary:
//! records/s, MB/s of input and ns per input byte for each path, and the ratios.

mod common;

use std::hint::black_box;

use common::Order;
use criterion::{Criterion, Throughput};
use kafka_bigquery_sink::transcode::protobuf::{MessagePath, ProtoSchema};
use kafka_bigquery_sink::transcode::{AvroSchema, Plan, PlanOptions};
use num_bigint::BigInt;
use prost::Message;
use prost_reflect::{
    DescriptorPool, DynamicMessage, Kind, MessageDescriptor, ReflectMessage, Value as PValue,
};

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

fn proto_order(pool: &DescriptorPool, v: &Order) -> Vec<u8> {
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
    o.set_field_by_name("notes", s(common::NOTES));
    o.set_field_by_name("user_agent", s(common::AGENT));
    o.set_field_by_name("session_id", PValue::String(v.session()));
    o.set_field_by_name("warehouse_id", PValue::I64(42));
    o.set_field_by_name("priority", PValue::I32(2));
    let mut a = m("shop.Address");
    a.set_field_by_name("street", s(common::STREET));
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
    o.set_field_by_name(
        "tags",
        PValue::List(common::TAGS.iter().map(|t| s(t)).collect()),
    );
    o.encode_to_vec()
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
    let table = common::table();
    let schema = ProtoSchema::compile(PROTO, &[]).unwrap();
    let writer = schema.message(&MessagePath::FIRST).unwrap();
    let proto_plan = Plan::compile_protobuf(&writer, &table, &PlanOptions::default()).unwrap();
    let avro_plan = Plan::compile(
        &AvroSchema::parse(common::AVRO_SCHEMA).unwrap(),
        &table,
        &PlanOptions::default(),
    )
    .unwrap();
    let proto = (0..common::RECORDS)
        .map(|i| proto_order(schema.pool(), &Order { i }))
        .collect();
    let avro = common::avro_orders(&apache_avro::Schema::parse_str(common::AVRO_SCHEMA).unwrap());
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

fn summary(s: &Setup) {
    let proto_avg = common::mean_len(&s.proto);
    let avro_avg = common::mean_len(&s.avro);
    let (mut out1, mut out2) = (Vec::with_capacity(1 << 20), Vec::with_capacity(1 << 20));
    let rates = common::compare(
        &mut [
            &mut |n| common::run_plan(&s.proto_plan, &s.proto, &mut out1, n),
            &mut |n| common::run_plan(&s.avro_plan, &s.avro, &mut out2, n),
            &mut |n| {
                for p in s.proto.iter().cycle().take(n) {
                    black_box(s.naive.transcode(black_box(p)));
                }
            },
        ],
        s.proto.len(),
    );
    let (proto, avro, naive) = (rates[0], rates[1], rates[2]);
    println!();
    println!(
        "record: 20 fields; {proto_avg:.0} bytes of protobuf, {avro_avg:.0} bytes of avro on average"
    );
    common::print_rate("protobuf plan", proto, proto_avg);
    common::print_rate("avro plan", avro, avro_avg);
    common::print_rate("protobuf naive", naive, proto_avg);
    println!(
        "{:>16}: {:.2}x the avro plan per record, {:.2}x per input byte",
        "protobuf plan",
        proto / avro,
        (proto * proto_avg) / (avro * avro_avg)
    );
    println!(
        "{:>16}: {:.1}x the naive protobuf path",
        "protobuf plan",
        proto / naive
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
