//! The JSON plan against the naive JSON path on the same ~1 KB order as `benches/transcode.rs`
//! (the same values and table): the naive path parses a `serde_json::Value`, builds the row as a
//! prost-reflect `DynamicMessage` by column name and encodes it. Schemaless (the table types the
//! values), in one run.
//!
//! `cargo bench --bench transcode_json` runs criterion and then prints a per-core summary:
//! records/s, MB/s of input and ns per input byte for each path, and the ratio.

mod common;
#[path = "common/orders.rs"]
mod orders;
#[path = "common/orders_json.rs"]
mod orders_json;

use std::hint::black_box;

use chrono::DateTime;
use criterion::Criterion;
use kbq_transcode::Plan;
use num_bigint::BigInt;
use prost::Message;
use prost_reflect::{DynamicMessage, Kind, MessageDescriptor, Value as PValue};
use serde_json::Value as Json;

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
    /// The end-to-end benchmark's orders in JSON (the records BENCHMARKS.md counts).
    orders: orders_json::JsonOrders,
}

fn setup() -> Setup {
    let (plan, inputs) = common::json_setup();
    let row = common::row_message(&plan);
    Setup {
        plan,
        row,
        inputs,
        orders: orders_json::JsonOrders::new(),
    }
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

fn bench(c: &mut Criterion, s: &Setup) {
    let mut group = common::group(c, "json_to_proto_1kb_record", &s.inputs);
    common::bench_plan(&mut group, "plan", &s.plan, &s.inputs);
    common::bench_each(
        &mut group,
        "naive_serde_json_value",
        &s.inputs,
        |input, _| {
            black_box(naive(input, &s.row));
        },
    );
    group.finish();
    let mut group = common::group(c, "json_bench_orders", &s.orders.json);
    let mut k = 0u64;
    common::bench_each(&mut group, "plan", &s.orders.json, |input, out| {
        let meta = orders::meta(k);
        black_box(s.orders.plan.transcode(input, Some(&meta), out).unwrap());
        k += 1;
    });
    group.finish();
}

fn summary(s: &Setup) {
    let mean = common::mean_len(&s.inputs);
    let rates = common::summarize(
        &format!("20 fields; {mean:.0} bytes of json on average"),
        vec![
            common::plan_path("json plan", &s.plan, &s.inputs),
            common::path("json naive", &s.inputs, |p, _| {
                black_box(naive(p, &s.row));
            }),
        ],
        s.inputs.len(),
    );
    common::print_ratio(
        "json plan",
        format_args!("{:.1}x the naive json path", rates[0] / rates[1]),
    );
    let mut k = 0u64;
    common::summarize(
        &format!(
            "the end-to-end benchmark's orders, {:.0} bytes of json on average, 3 metadata columns",
            common::mean_len(&s.orders.json)
        ),
        vec![common::path(
            "bench orders",
            &s.orders.json,
            |input, out| {
                let meta = orders::meta(k);
                black_box(s.orders.plan.transcode(input, Some(&meta), out).unwrap());
                k += 1;
            },
        )],
        s.orders.json.len(),
    );
}

fn main() {
    common::main(setup, cross_check, bench, summary);
}
