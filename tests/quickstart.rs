//! `kafka-bigquery-sink quickstart` on a small size: it needs nothing but the binary (its Kafka,
//! emulator and registry run in-process), crashes its sink child and must still print a verified
//! exactly-once summary and exit 0.

use std::process::Command;

#[test]
fn quickstart_verifies_exactly_once_across_a_crash_and_exits_zero() {
    let output = Command::new(env!("CARGO_BIN_EXE_kafka-bigquery-sink"))
        .args([
            "quickstart",
            "--records",
            "12000",
            "--partitions",
            "3",
            "--timeout-secs",
            "300",
        ])
        .output()
        .expect("run the quickstart");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        output.status.success(),
        "exit status {}\n{context}",
        output.status
    );
    assert!(
        stdout.contains(
            "quickstart: exactly-once verified: records=12000 rows_visible=12000 duplicates=0 missing=0"
        ),
        "{context}"
    );
    assert!(
        stdout.contains("crash: SIGKILL to sink #1"),
        "the sink was not crashed\n{context}"
    );
    assert!(
        stdout.contains("sink #2 stopped on SIGTERM"),
        "the restarted sink did not stop cleanly\n{context}"
    );
}

#[test]
fn quickstart_rejects_zero_records() {
    let output = Command::new(env!("CARGO_BIN_EXE_kafka-bigquery-sink"))
        .args(["quickstart", "--records", "0"])
        .output()
        .expect("run the quickstart");
    assert!(!output.status.success());
}
