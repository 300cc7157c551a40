//! The per-record cost of transforms compiled into the plan (docs/mapping.md, "Transforms"),
//! counted in instructions rather than seconds: the benchmarks' Avro order
//! (`benches/common/mod.rs`) through its plan without transforms (`plain`) or with a rename
//! (`user_agent` → `agent`), a drop (`channel`), a mask with a fixed value (`coupon`) and a
//! column set from a header (`trace`, read as `string`), `transforms`
//! (`benches/common/transforms.rs`). Each run transcodes `N` records, each with the same Kafka
//! metadata (three headers), and exits:
//!
//! ```text
//! cargo build --release -p kbq-transcode --example transforms_cost
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/transforms_cost plain 20000
//! ```
//!
//! Two record counts per mode give the instructions per record without the set-up (BENCHMARKS.md,
//! "Transforms").
use std::hint::black_box;

#[path = "../benches/common/mod.rs"]
mod common;
#[path = "../benches/common/transforms.rs"]
mod transforms;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("plain");
    let n: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(20_000);
    let plan = transforms::plan(mode);
    let inputs = common::avro_orders(&apache_avro::Schema::parse_str(common::AVRO_SCHEMA).unwrap());
    let meta = transforms::meta();
    let mut out = Vec::with_capacity(1 << 20);
    for (k, input) in inputs.iter().cycle().take(n).enumerate() {
        if k.is_multiple_of(512) {
            out.clear();
        }
        black_box(
            plan.transcode(black_box(input), Some(&meta), &mut out)
                .unwrap(),
        );
    }
    println!("{mode}: {n} records");
}
