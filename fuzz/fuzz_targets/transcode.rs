//! Fuzz target: arbitrary bytes as the Avro body of records of the transcoder's fuzz case (a
//! schema that exercises every plan op, `crates/kbq-transcode/tests/transcode/support/case.rs`,
//! which the bounded stable fuzzer `crates/kbq-transcode/tests/transcode/fuzz.rs` runs too), plus
//! arbitrary schema texts for the parser and compiler. No input may panic, and an error must leave the batch buffer exactly as it was.
#![no_main]

use libfuzzer_sys::fuzz_target;

use std::sync::OnceLock;

use kbq_core::table_schema::TableSchema;
use kbq_transcode::Plan;

#[path = "../../crates/kbq-transcode/tests/transcode/support/case.rs"]
mod case;

fn table() -> &'static TableSchema {
    static TABLE: OnceLock<TableSchema> = OnceLock::new();
    TABLE.get_or_init(case::table)
}

fn plan() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| case::plan(table()))
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the mode: most inputs are record bodies, some are schema texts.
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode < 16 {
        if let Ok(text) = std::str::from_utf8(rest) {
            case::compile_any(text, table());
        }
        return;
    }
    // The mode byte stands for the rows already in the batch.
    let mut out = vec![mode];
    case::transcode_checked(plan(), rest, &mut out);
});
