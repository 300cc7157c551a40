//! Fuzz target: arbitrary bytes as a schemaless JSON record into the table of the transcoder's
//! fuzz case (`crates/kbq-transcode/tests/transcode/support/case.rs`: a column of every type,
//! nested and repeated records, metadata columns), through the JSON executor and through its
//! reference (`Plan::transcode_reference`, `src/json/reference.rs`): the same row byte for byte,
//! or the same error, and an error leaves the batch buffer as it was.
#![no_main]

use libfuzzer_sys::fuzz_target;

use std::sync::OnceLock;

use kbq_transcode::{Plan, PlanOptions};

#[allow(dead_code)]
#[path = "../../crates/kbq-transcode/tests/transcode/support/case.rs"]
mod case;

fn plan() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| {
        Plan::compile_json(None, false, &case::table(), &PlanOptions::default())
            .expect("the case's table takes schemaless json")
    })
}

fuzz_target!(|data: &[u8]| {
    // The first byte stands for the rows already in the batch.
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let mut out = vec![first];
    let mut reference = out.clone();
    let got = plan().transcode(body, None, &mut out);
    let expected = plan().transcode_reference(body, None, &mut reference);
    assert_eq!(got, expected);
    assert_eq!(out, reference);
    if got.is_err() {
        assert_eq!(out, [first]);
    }
});
