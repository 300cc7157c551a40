//! `kafka-bigquery-sink quickstart` on a small size: it needs nothing but the binary (its Kafka,
//! emulator and registry run in-process), crashes its sink child while it holds rows appended and
//! not yet visible, and must still print a verified exactly-once summary and exit 0.

use std::process::Command;

#[test]
fn quickstart_verifies_exactly_once_across_a_crash_and_exits_zero() {
    let output = Command::new(crate::support::daemon::binary())
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
    // The demo's point: the SIGKILL caught rows appended and not yet visible (the rows sink #1
    // had appended less those the table shows after the kill), and exactly-once held anyway.
    let crash = stdout
        .lines()
        .find(|l| l.contains("crash: SIGKILL to sink #1"))
        .unwrap_or_else(|| panic!("the sink was not crashed\n{context}"));
    let in_flight: u64 = crash
        .split(" appended but not yet visible")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no in-flight count in {crash:?}\n{context}"));
    assert!(
        in_flight > 0,
        "the crash caught no rows appended and not yet visible: {crash}\n{context}"
    );
    assert!(
        stdout.contains("sink #2 stopped on SIGTERM"),
        "the restarted sink did not stop cleanly\n{context}"
    );
}

/// `quickstart --cdc`: a Debezium change log (updates, deletes with tombstones, re-inserts)
/// through a CDC route with a SIGKILL in the middle. The quickstart compares the table with its
/// source key by key and column by column (`version` counts each key's changes), so a lost
/// change or one applied out of order leaves a missing, extra or differing row and fails here.
#[test]
fn quickstart_cdc_converges_to_the_source_table_across_a_crash() {
    let output = Command::new(crate::support::daemon::binary())
        .args(["quickstart", "--cdc", "--changes", "6000", "--keys", "400"])
        .args(["--partitions", "3", "--timeout-secs", "120"])
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
    let verdict = stdout
        .lines()
        .find(|l| l.starts_with("quickstart: cdc verified, the table equals the source:"))
        .unwrap_or_else(|| panic!("no verdict\n{context}"));
    assert!(
        verdict.contains("missing=0 extra=0 differs=0"),
        "{verdict}\n{context}"
    );
    // The seeded log leaves a source table of this many rows; all of them compared.
    let rows: u64 = verdict
        .split("source_rows=")
        .nth(1)
        .and_then(|v| v.split(' ').next())
        .and_then(|v| v.parse().ok())
        .expect("source_rows");
    assert!(rows > 200, "{verdict}");
    assert!(
        verdict.contains(&format!("table_rows={rows} equal={rows}")),
        "{verdict}"
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
    let output = Command::new(crate::support::daemon::binary())
        .args(["quickstart", "--records", "0"])
        .output()
        .expect("run the quickstart");
    assert!(!output.status.success());
}
