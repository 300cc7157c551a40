//! The JSON plans in a loop, for instruction counts (BENCHMARKS.md, "The JSON executor"):
//! `cargo run --release -p kbq-transcode --example json_loop -- orders|orders-reference|cdc|cdc-reference N`
//! transcodes exactly `N` records, each through [`one`] (`--toggle-collect='*json_loop*one*'`):
//! `orders`, the end-to-end benchmark's orders in JSON (`benches/common/orders.rs`, the Avro
//! records written as a JSON producer writes them: the schema's order, timestamps and dates as
//! RFC 3339 text, decimals as numbers) into the table `create_table` derives, with the three
//! `_kafka_*` columns; `cdc`, a Debezium JSON change event (`u`, both rows, the benchmarks' order
//! as in `benches/transcode_cdc.rs`) located and written with the two pseudo-columns.
//! `*-reference` runs the same records through the reference executor.
use std::hint::black_box;

#[path = "../benches/common/mod.rs"]
mod common;
#[path = "../benches/common/orders.rs"]
mod orders;
#[path = "../benches/common/orders_json.rs"]
mod orders_json;

use kbq_transcode::change::{
    ChangeColumns, ChangeFormat, ChangeShape, ConnectEnvelope, JsonShape, sequence_number,
    with_change_fields,
};
use kbq_transcode::{KafkaMetadata, Plan, PlanOptions};

struct Job {
    plan: Plan,
    inputs: Vec<Vec<u8>>,
    cdc: Option<(ChangeShape, ChangeColumns)>,
}

/// One record; not inlined, so that callgrind can count it alone.
#[inline(never)]
fn one(job: &Job, body: &[u8], meta: &KafkaMetadata<'_>, reference: bool, out: &mut Vec<u8>) {
    let run = |plan: &Plan, body: &[u8], out: &mut Vec<u8>| {
        if reference {
            plan.transcode_reference(body, Some(meta), out)
        } else {
            plan.transcode(body, Some(meta), out)
        }
    };
    match &job.cdc {
        None => {
            run(&job.plan, body, out).unwrap();
        }
        Some((shape, columns)) => {
            let located = shape.locate(body).unwrap();
            let sequence = sequence_number(0, located.source.unwrap_or(0), meta.offset.0);
            let row = &body[located.row.unwrap()];
            if reference {
                let change = columns.row(row, located.kind, &sequence);
                job.plan
                    .transcode_reference(&change.input, None, out)
                    .unwrap();
                out.extend_from_slice(&change.suffix);
            } else {
                columns
                    .transcode(&job.plan, row, located.kind, &sequence, out)
                    .unwrap();
            }
        }
    }
}

fn orders_job() -> Job {
    let o = orders_json::JsonOrders::new();
    Job {
        plan: o.plan,
        inputs: o.json,
        cdc: None,
    }
}

fn cdc_job() -> Job {
    let (_, json_orders) = common::json_setup();
    let (shape, _) = JsonShape::new(None, false, &ChangeFormat::Debezium, None).unwrap();
    let (plan, columns) = with_change_fields(
        Plan::compile_json(None, false, &common::table(), &PlanOptions::default()).unwrap(),
    );
    let n = json_orders.len();
    let inputs = (0..n)
        .map(|k| {
            let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
            format!(
                r#"{{"before":{},"after":{},"source":{{"connector":"mysql","lsn":987654321}},"op":"u","ts_ms":1764460800000}}"#,
                text(&json_orders[(k + n - 1) % n]),
                text(&json_orders[k])
            )
            .into_bytes()
        })
        .collect();
    Job {
        plan,
        inputs,
        cdc: Some((
            ChangeShape::Json(shape.with_envelope(ConnectEnvelope::Guarded)),
            columns,
        )),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map(String::as_str).unwrap_or("orders");
    let records: u64 = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(10_000);
    let reference = which.ends_with("-reference");
    let job = match which.trim_end_matches("-reference") {
        "orders" => orders_job(),
        "cdc" => cdc_job(),
        other => panic!("unknown loop {other}: orders, cdc (or either with -reference)"),
    };
    let mean = common::mean_len(&job.inputs);
    eprintln!(
        "{which}: {} inputs, {mean:.0} bytes on average",
        job.inputs.len()
    );
    if std::env::var_os("JSON_LOOP_DUMP").is_some() {
        println!("{}", String::from_utf8_lossy(&job.inputs[0]));
    }
    let mut out = Vec::with_capacity(1 << 20);
    for k in 0..records {
        if k.is_multiple_of(512) {
            out.clear();
        }
        let body = &job.inputs[(k % job.inputs.len() as u64) as usize];
        let meta = orders::meta(k);
        one(&job, black_box(body), &meta, reference, &mut out);
    }
    black_box(out);
}
