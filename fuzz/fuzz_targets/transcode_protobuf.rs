//! Fuzz target: arbitrary bytes as the body of a Protobuf record of the Protobuf fuzz case (a
//! message that exercises every op of a Protobuf plan,
//! `crates/kbq-transcode/tests/transcode/support/proto_case.rs`), checked as the Avro target
//! checks its records (`case.rs`'s `transcode_checked`): no input may panic, the executor must
//! agree with the reference, and an error must leave the batch buffer exactly as it was.
#![no_main]

use libfuzzer_sys::fuzz_target;

use std::sync::OnceLock;

use kbq_transcode::Plan;

#[allow(dead_code)]
#[path = "../../crates/kbq-transcode/tests/transcode/support/case.rs"]
mod case;
#[path = "../../crates/kbq-transcode/tests/transcode/support/proto_case.rs"]
mod proto_case;

fn plan() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| proto_case::plan(&proto_case::table()))
}

fuzz_target!(|data: &[u8]| {
    // The first byte stands for the rows already in the batch.
    let Some((&rows, rest)) = data.split_first() else {
        return;
    };
    let mut out = vec![rows];
    case::transcode_checked(plan(), rest, &mut out);
});
