//! The transcoding plans over the benchmarks' ~1 KB order (`benches/common/mod.rs`: the same
//! values, the same table) in a loop, for `perf record` and quick A/B runs of the plans:
//! `cargo run --release -p kbq-transcode --example plan_loop -- avro|proto|json|all [seconds]`
//! prints each plan's best half-second of on-CPU ns per input byte; `all` takes the three plans
//! in turn, round after round, and prints the Protobuf plan's speed per input byte as a ratio to
//! the Avro plan's (both measured in the same rounds). The naive paths are `cargo bench`'s
//! (BENCHMARKS.md). `orders`, `orders-proto` (and `-reference`, the reference executor) `N`
//! transcode exactly N of the end-to-end benchmark's records (`benches/common/orders.rs`), for
//! callgrind.
use std::hint::black_box;
use std::time::{Duration, Instant};

#[path = "../benches/common/mod.rs"]
mod common;
#[path = "../benches/common/orders.rs"]
mod orders;

use kbq_transcode::Plan;

struct Path {
    name: &'static str,
    plan: Plan,
    inputs: Vec<Vec<u8>>,
    mean: f64,
    best: f64,
}

impl Path {
    fn new(name: &'static str) -> Path {
        let (plan, inputs) = match name {
            "avro" => common::avro_setup(),
            "json" => common::json_setup(),
            _ => {
                let (plan, _, inputs) = common::proto_setup();
                (plan, inputs)
            }
        };
        Path {
            name,
            mean: common::mean_len(&inputs),
            plan,
            inputs,
            best: f64::MAX,
        }
    }

    /// One half-second round; keeps the best on-CPU ns per input byte.
    fn round(&mut self, out: &mut Vec<u8>) {
        let cpu = || common::thread_cpu_time().expect("/proc/thread-self/schedstat");
        let c0 = cpu();
        let mut n = 0usize;
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(500) {
            common::run_plan(&self.plan, &self.inputs, out, self.inputs.len());
            n += self.inputs.len();
        }
        let ns = (cpu() - c0).as_nanos() as f64 / n as f64 / self.mean;
        self.best = self.best.min(ns);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map(String::as_str).unwrap_or("proto");
    if let Some((proto, reference)) = match which {
        "orders" => Some((false, false)),
        "orders-reference" => Some((false, true)),
        "orders-proto" => Some((true, false)),
        "orders-proto-reference" => Some((true, true)),
        _ => None,
    } {
        let records: u64 = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(10_000);
        return orders_loop(proto, reference, records);
    }
    let secs: f64 = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(5.0);
    let names: &[&'static str] = match which {
        "avro" => &["avro"],
        "json" => &["json"],
        "proto" => &["proto"],
        "all" => &["proto", "avro", "json"],
        other => panic!("unknown plan {other}: avro, proto, json or all"),
    };
    let mut paths: Vec<Path> = names.iter().map(|n| Path::new(n)).collect();
    let mut out = Vec::with_capacity(1 << 20);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        for p in paths.iter_mut() {
            p.round(&mut out);
        }
    }
    for p in &paths {
        println!(
            "{}: {:.0} B/record, best {:.3} ns/B on-cpu",
            p.name, p.mean, p.best
        );
    }
    if let [proto, avro, ..] = &paths[..] {
        println!(
            "proto plan: {:.3}x the avro plan per input byte",
            avro.best / proto.best
        );
    }
    black_box(out);
}

/// Exactly `records` orders (in Avro, or in Protobuf with `proto`), the batch buffer cleared
/// every 512 rows as a sealed batch would be.
fn orders_loop(proto: bool, reference: bool, records: u64) {
    let (plan, inputs) = if proto {
        let orders = orders::ProtoOrders::new();
        (orders.plan, orders.proto)
    } else {
        let orders = orders::Orders::new();
        (orders.plan, orders.avro)
    };
    let mut out = Vec::with_capacity(1 << 20);
    for k in 0..records {
        if k.is_multiple_of(512) {
            out.clear();
        }
        let input = &inputs[(k % inputs.len() as u64) as usize];
        let meta = orders::meta(k);
        if reference {
            black_box(plan.transcode_reference(black_box(input), Some(&meta), &mut out)).unwrap();
        } else {
            black_box(plan.transcode(black_box(input), Some(&meta), &mut out)).unwrap();
        }
    }
    black_box(out);
}
