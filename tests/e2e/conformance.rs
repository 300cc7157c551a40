//! `kafka-bigquery-sink conformance` against the emulator: every fact of the one list
//! (`kbq_core::bigquery_facts`) holds there, and an emulator broken by a fault rule fails the
//! command with the fact named. The binary runs against an in-process emulator; each run takes
//! under a second once the binary is built.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use kbq_core::bigquery_facts as facts;
use kbq_emulator::faults::{FaultAction, FaultRule, GrpcCode, Rpc};
use kbq_emulator::store::Dataset;

/// What one run printed and how it exited.
struct Run {
    success: bool,
    stdout: String,
    /// The result column by fact name.
    results: BTreeMap<String, (String, String)>,
}

/// Runs the binary's `conformance` against the emulator at `addr`.
async fn conformance(addr: SocketAddr, extra: &[&str]) -> Run {
    let mut args: Vec<String> = vec![
        "conformance".into(),
        "--project".into(),
        "p".into(),
        "--endpoint".into(),
        format!("http://{addr}"),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(crate::support::daemon::binary())
            .args(&args)
            .output()
            .expect("the binary runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let results = stdout
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            (cells.len() == 5).then(|| {
                (
                    cells[0].to_string(),
                    (cells[3].to_string(), cells[4].to_string()),
                )
            })
        })
        .collect();
    Run {
        success: output.status.success(),
        stdout,
        results,
    }
}

/// A dataset a run names, so that only its scratch tables come and go.
fn named_dataset(emu: &kbq_emulator::server::Emulator) {
    emu.store
        .insert_dataset(Dataset::new("p", "named"))
        .expect("dataset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fact_the_sink_relies_on_holds_on_the_emulator() {
    let emu = kbq_emulator::testsuite::start().await;
    let run = conformance(emu.addr, &[]).await;
    for fact in facts::ALL {
        let (observed, result) = run
            .results
            .get(fact.name)
            .unwrap_or_else(|| panic!("{} is not in the table:\n{}", fact.name, run.stdout));
        assert_eq!(
            result, "pass",
            "{fact}\nobserved: {observed}\n{}",
            run.stdout
        );
    }
    assert!(run.success, "{}", run.stdout);
    // The scratch dataset it made is gone with its tables.
    let cleanup = &run.results[facts::CLEANUP.name].0;
    let scratch = cleanup.rsplit(' ').next().unwrap();
    assert!(scratch.starts_with("kbq_conformance_"), "{cleanup}");
    assert!(emu.store.get_dataset("p", scratch).is_none(), "{cleanup}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emulator_that_denies_finalize_fails_the_command_and_names_the_facts() {
    let emu = kbq_emulator::testsuite::start().await;
    named_dataset(&emu);
    emu.faults
        .install(vec![FaultRule {
            rpc: Rpc::FinalizeWriteStream,
            action: FaultAction::Fail {
                code: GrpcCode(tonic::Code::PermissionDenied),
                storage_code: None,
                message: Some("denied by the test".into()),
                in_stream: false,
            },
            nth: None,
            times: None,
            probability: None,
            target: None,
        }])
        .unwrap();
    let run = conformance(emu.addr, &["--dataset", "named"]).await;
    assert!(
        !run.success,
        "a failed fact exits non-zero:\n{}",
        run.stdout
    );
    for fact in [facts::FINALIZE_ROW_COUNT, facts::FINALIZE_REPEATED] {
        let (observed, result) = &run.results[fact.name];
        assert_eq!(result, "FAIL", "{}", run.stdout);
        assert!(observed.contains("denied by the test"), "{observed}");
    }
    // The facts before it still hold, and the summary names what failed.
    assert_eq!(run.results[facts::FLUSH_INCLUSIVE.name].1, "pass");
    let summary = run.stdout.lines().last().unwrap();
    assert!(
        summary.contains(facts::FINALIZE_ROW_COUNT.name),
        "{summary}"
    );
    assert!(
        emu.store.list_tables("p", "named").is_empty(),
        "the scratch tables are deleted after a failure too"
    );
    assert!(
        emu.store.get_dataset("p", "named").is_some(),
        "a named dataset stays"
    );
}
