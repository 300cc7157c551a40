//! One transcoding plan over the benchmarks' ~1 KB order (`benches/common/mod.rs`: the same
//! values, the same table) in a loop, for `perf record` and quick A/B runs of the plans without
//! building the daemon: `cargo run --release -p kbq-transcode --example plan_loop -- proto|json
//! [seconds]` prints the best half-second's on-CPU ns per input byte. The figures to compare
//! with the Avro plan and the naive paths are `cargo bench`'s (BENCHMARKS.md).
use std::hint::black_box;
use std::time::{Duration, Instant};

use kbq_transcode::protobuf::{MessagePath, ProtoSchema};
use kbq_transcode::{Plan, PlanOptions};
use prost::Message;
use prost_reflect::{DynamicMessage, Value as P};
use serde_json::json;

const PROTO: &str = r#"
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/type/decimal.proto";
message Order {
  string order_id = 1; int64 customer_id = 2; string customer_email = 3;
  google.protobuf.Timestamp created_at = 4; string status = 5; optional string channel = 6;
  google.type.Decimal total = 7; string currency = 8; int32 item_count = 9; double weight_kg = 10;
  bool gift = 11; optional string coupon = 12; string notes = 13; string user_agent = 14;
  string session_id = 15; int64 warehouse_id = 16; int32 priority = 17; Address shipping = 18;
  repeated int64 line_ids = 19; repeated string tags = 20;
}
message Address {
  string street = 1; string city = 2; string postcode = 3; string country = 4;
  double lat = 5; double lon = 6;
}
"#;
const NOTES: &str = "Please leave the parcel at the back door if nobody answers; the dog is \
    friendly but loud. Call ahead on weekdays between nine and five, ask for the reception desk, \
    and mention the order number so they can find the delivery slot quickly. If the parcel does \
    not fit the letterbox, the neighbours at number 221a accept deliveries for us; otherwise \
    please use the parcel locker at the corner shop and send the pickup code by text message to \
    the number on the order.";
const AGENT: &str = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, \
    like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36 ShopApp/5.12.3";
const TAGS: [&str; 5] = [
    "express",
    "fragile",
    "eu-vat",
    "repeat-customer",
    "newsletter",
];
const STREET: &str = "Hauptstraße 221b, Hinterhaus 3. OG";

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

fn table() -> kbq_core::table_schema::TableSchema {
    serde_json::from_str(TABLE).unwrap()
}

fn proto_order(schema: &ProtoSchema, i: i64) -> Vec<u8> {
    let pool = schema.pool();
    let m = |name: &str| DynamicMessage::new(pool.get_message_by_name(name).unwrap());
    let s = |x: &str| P::String(x.to_owned());
    let mut o = m("shop.Order");
    o.set_field_by_name(
        "order_id",
        P::String(format!("ord-{i:012}-2f9c1e7a-4b8d-4c3e-9a6f")),
    );
    o.set_field_by_name("customer_id", P::I64(1_000_000 + i * 7919));
    o.set_field_by_name(
        "customer_email",
        P::String(format!("customer.{i}@example-mail.com")),
    );
    let micros = 1_764_460_800_000_000 + i * 1_000;
    let mut ts = m("google.protobuf.Timestamp");
    ts.set_field_by_name("seconds", P::I64(micros / 1_000_000));
    ts.set_field_by_name("nanos", P::I32((micros % 1_000_000) as i32 * 1000));
    o.set_field_by_name("created_at", P::Message(ts));
    o.set_field_by_name("status", s("PAID"));
    o.set_field_by_name("channel", s("mobile-app"));
    let mut total = m("google.type.Decimal");
    let c = 129_990 + i;
    total.set_field_by_name("value", P::String(format!("{}.{:02}", c / 100, c % 100)));
    o.set_field_by_name("total", P::Message(total));
    o.set_field_by_name("currency", s("EUR"));
    o.set_field_by_name("item_count", P::I32(3));
    o.set_field_by_name("weight_kg", P::F64(2.75));
    o.set_field_by_name("gift", P::Bool(i % 2 == 0));
    o.set_field_by_name("notes", s(NOTES));
    o.set_field_by_name("user_agent", s(AGENT));
    o.set_field_by_name(
        "session_id",
        P::String(format!("sess-{:032x}", i as u128 * 0x9e37_79b9_7f4a_7c15)),
    );
    o.set_field_by_name("warehouse_id", P::I64(42));
    o.set_field_by_name("priority", P::I32(2));
    let mut a = m("shop.Address");
    a.set_field_by_name("street", s(STREET));
    a.set_field_by_name("city", s("Berlin"));
    a.set_field_by_name("postcode", s("10115"));
    a.set_field_by_name("country", s("DE"));
    a.set_field_by_name("lat", P::F64(52.532));
    a.set_field_by_name("lon", P::F64(13.384));
    o.set_field_by_name("shipping", P::Message(a));
    o.set_field_by_name(
        "line_ids",
        P::List((0..8).map(|k| P::I64(900_000_000 + i * 10 + k)).collect()),
    );
    o.set_field_by_name("tags", P::List(TAGS.iter().map(|t| s(t)).collect()));
    o.encode_to_vec()
}

fn json_order(i: i64) -> Vec<u8> {
    let c = 129_990 + i;
    serde_json::to_vec(&json!({
        "order_id": format!("ord-{i:012}-2f9c1e7a-4b8d-4c3e-9a6f"),
        "customer_id": 1_000_000 + i * 7919,
        "customer_email": format!("customer.{i}@example-mail.com"),
        // 1_764_460_800 s is 2025-11-30T00:00:00Z; order i is i ms later.
        "created_at": format!("2025-11-30T00:00:{:02}.{:06}Z", i / 1000, (i % 1000) * 1000),
        "status": "PAID", "channel": "mobile-app",
        "total": format!("{}.{:02}", c / 100, c % 100).parse::<serde_json::Number>().unwrap(),
        "currency": "EUR", "item_count": 3, "weight_kg": 2.75, "gift": i % 2 == 0,
        "coupon": null, "notes": NOTES, "user_agent": AGENT,
        "session_id": format!("sess-{:032x}", i as u128 * 0x9e37_79b9_7f4a_7c15),
        "warehouse_id": 42, "priority": 2,
        "shipping": {"street": STREET, "city": "Berlin", "postcode": "10115",
                     "country": "DE", "lat": 52.532, "lon": 13.384},
        "line_ids": (0..8).map(|k| 900_000_000 + i * 10 + k).collect::<Vec<_>>(),
        "tags": TAGS,
    }))
    .unwrap()
}

fn cpu() -> Duration {
    let t = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    Duration::from_nanos(t.split_whitespace().next().unwrap().parse().unwrap())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map(String::as_str).unwrap_or("proto");
    let secs: f64 = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(5.0);
    let table = table();
    let (plan, inputs) = if which == "proto" {
        let schema = ProtoSchema::compile(PROTO, &[]).unwrap();
        let writer = schema.message(&MessagePath::FIRST).unwrap();
        let plan = Plan::compile_protobuf(&writer, &table, &PlanOptions::default()).unwrap();
        (
            plan,
            (0..1024)
                .map(|i| proto_order(&schema, i))
                .collect::<Vec<_>>(),
        )
    } else {
        let plan = Plan::compile_json(None, false, &table, &PlanOptions::default()).unwrap();
        (plan, (0..1024).map(json_order).collect::<Vec<_>>())
    };
    let mean = inputs.iter().map(Vec::len).sum::<usize>() as f64 / inputs.len() as f64;
    let mut out = Vec::with_capacity(1 << 20);
    let mut best = f64::MAX;
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let c0 = cpu();
        let mut n = 0usize;
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(500) {
            for (k, input) in inputs.iter().enumerate() {
                if k.is_multiple_of(512) {
                    out.clear();
                }
                black_box(plan.transcode(black_box(input), None, &mut out).unwrap());
            }
            n += inputs.len();
        }
        let ns = (cpu() - c0).as_nanos() as f64 / n as f64 / mean;
        best = best.min(ns);
    }
    println!("{which}: {mean:.0} B/record, best {best:.3} ns/B on-cpu");
}
