//! The per-record cost of transforms compiled into the plan (docs/mapping.md, "Transforms"),
//! counted in instructions rather than seconds: the benchmarks' Avro order
//! (`benches/common/mod.rs`) through its plan without transforms (`plain`) or with a rename
//! (`user_agent` → `agent`), a drop (`channel`), a mask with a fixed value (`coupon`) and a
//! column set from a header (`trace`, read as `string`), `transforms`
//! (`benches/common/transforms.rs`), or with a filter on a field's value that keeps every order
//! (`filter`). Each run transcodes `N` records, each with the same Kafka metadata (three
//! headers), through `Plan::transcode_row` as the writer does (the filters first), or with
//! `transcode` as the third argument through `Plan::transcode` alone, and exits:
//!
//! ```text
//! cargo build --release -p kbq-transcode --example transforms_cost
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/transforms_cost plain 20000 [transcode]
//! ```
//!
//! Two record counts per mode give the instructions per record without the set-up (BENCHMARKS.md,
//! "Transforms"). `key`: the plan without transforms but one column set from a field of each
//! record's schemaless JSON key (`set … from: key, field:`), its key plan run after the row.
use std::hint::black_box;

#[path = "../benches/common/mod.rs"]
mod common;
#[path = "../benches/common/transforms.rs"]
mod transforms;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("plain");
    let n: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(20_000);
    let row = args.get(3).map(String::as_str) != Some("transcode");
    let (plan, key) = match mode {
        "key" => key_plan(),
        _ => (transforms::plan(mode), None),
    };
    let key_body: &[u8] = br#"{"customer_id":4711,"region":"eu-west-1"}"#;
    let inputs = common::avro_orders(&apache_avro::Schema::parse_str(common::AVRO_SCHEMA).unwrap());
    let meta = transforms::meta();
    let mut out = Vec::with_capacity(1 << 20);
    for (k, input) in inputs.iter().cycle().take(n).enumerate() {
        if k.is_multiple_of(512) {
            out.clear();
        }
        // The same work around either call: the row's range, or a panic.
        let range = if row {
            match plan.transcode_row(black_box(input), Some(&meta), &mut out) {
                Ok(kbq_transcode::Transcoded::Row(range)) => Some(range),
                _ => None,
            }
        } else {
            plan.transcode(black_box(input), Some(&meta), &mut out).ok()
        };
        black_box(range.expect("a row"));
        if let Some(k) = &key {
            plan.transcode_key(Some((k, black_box(key_body))), &mut out)
                .unwrap();
        }
    }
    println!("{mode}: {n} records");
}

/// The benchmarks' order with one more column, `customer_ref` (INT64), set from the key's
/// `customer_id`, and the plan of its schemaless JSON keys.
fn key_plan() -> (
    kbq_transcode::Plan,
    Option<kbq_transcode::transforms::KeyPlan>,
) {
    use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};
    use kbq_transcode::transforms::{KeyPlan, KeySchema};
    let schema = kbq_transcode::AvroSchema::parse(common::AVRO_SCHEMA).unwrap();
    let mut table = common::table();
    table.fields.push(TableFieldSchema::new(
        "customer_ref",
        FieldType::Int64,
        Mode::Nullable,
    ));
    let options = kbq_transcode::PlanOptions {
        transforms: serde_json::from_str(
            r#"[{"set": {"column": "customer_ref", "from": "key", "field": "customer_id",
                         "key_format": "json"}}]"#,
        )
        .unwrap(),
        ..kbq_transcode::PlanOptions::default()
    };
    let plan = kbq_transcode::Plan::compile(&schema, &table, &options).unwrap();
    let key = KeyPlan::compile(KeySchema::Json(None), &table, &options).unwrap();
    (plan, Some(key))
}
