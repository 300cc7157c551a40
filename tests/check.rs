//! `kafka-bigquery-sink check -c`: against the real broker, the emulator and a fake registry, it
//! passes on a working setup and names each failure class with its fix, writing nothing: no
//! group offsets committed, no row appended, no table created, no record produced.

mod support;

use std::path::Path;
use std::process::Command;

use kbq_core::table_schema::TableSchema;
use serde_json::json;
use support::kafka::unique_name;
use support::registry::Registry;
use support::sink::{Fixture, SCHEMA, SinkOptions, Tweaks};

const REGISTERED: u32 = 1;

fn table_schema() -> TableSchema {
    serde_json::from_value(json!({"fields": [
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "customer", "type": "STRING", "mode": "REQUIRED"},
        {"name": "amount", "type": "NUMERIC", "mode": "REQUIRED", "precision": "12", "scale": "2"},
        {"name": "created", "type": "TIMESTAMP", "mode": "REQUIRED"},
        {"name": "note", "type": "STRING"},
        {"name": "kafka_topic", "type": "STRING"},
        {"name": "kafka_partition", "type": "INTEGER"},
        {"name": "kafka_offset", "type": "INTEGER"}
    ]}))
    .expect("table schema")
}

/// Runs `check -c config`: its exit code and its report.
fn check(config: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kafka-bigquery-sink"))
        .args(["check", "-c"])
        .arg(config)
        .args(["--records", "20"])
        .output()
        .expect("run check");
    let report =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), report)
}

fn line<'a>(report: &'a str, start: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{report}"))
}

async fn install_fault(emulator: std::net::SocketAddr, rule: serde_json::Value) {
    let answer = reqwest::Client::new()
        .post(format!("http://{emulator}/emulator/v1/faults"))
        .json(&json!([rule]))
        .send()
        .await
        .expect("install the fault");
    assert!(answer.status().is_success(), "{:?}", answer.text().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_on_a_working_setup_and_names_each_failure_with_its_fix_writing_nothing() {
    let (registry, reg) = Registry::serve([(REGISTERED, SCHEMA.to_string())].into(), None).await;
    let f = Fixture::with(SinkOptions {
        framing: Some(REGISTERED),
        ..SinkOptions::partitions(2)
    })
    .await;
    f.create_table(table_schema());
    f.produce(30);
    let group = unique_name("check");
    let tweaks = Tweaks {
        registry_url: Some(format!("http://{registry}")),
        ..Tweaks::default()
    };
    let config = f.config_with(&group, &tweaks);

    // A working setup: every item ok, the 30 records transcode, exit 0.
    let (code, report) = check(&config);
    assert_eq!(code, 0, "{report}");
    assert!(line(&report, "ok           kafka:").contains("reachable"));
    assert!(
        line(&report, &format!("ok           kafka topic {}:", f.topic)).contains("2 partition")
    );
    assert!(line(&report, &format!("ok           kafka group {group}:")).contains("0 of 2"));
    line(
        &report,
        &format!("ok           dead-letter topic {}:", f.dlq),
    );
    line(&report, "not checked  dead-letter topic");
    line(&report, "ok           schema registry:");
    assert!(
        line(
            &report,
            &format!("ok           bigquery table {}:", f.table)
        )
        .contains("bigquery.tables.update")
    );
    assert!(
        line(&report, &format!("ok           dry run {}:", f.topic))
            .contains("30 record(s) transcode"),
        "{report}"
    );

    // A record whose schema id the registry does not know: it would hold its partition.
    f.source
        .produce_raw(0, &[support::sink::confluent(77, b"\x02")]);
    let (code, report) = check(&config);
    assert_eq!(code, 1, "{report}");
    let dry = line(
        &report,
        &format!("FAIL         dry run {} schemas:", f.topic),
    );
    assert!(
        dry.contains("1 record(s) whose schema cannot be had") && dry.contains("schema id 77"),
        "{dry}"
    );
    // A record that is not in the Confluent framing: would be dead-lettered as bad_magic.
    f.source.produce_raw(1, &[b"not avro".to_vec()]);
    let (code, report) = check(&config);
    assert_eq!(code, 1, "{report}");
    let dry = line(&report, &format!("FAIL         dry run {}:", f.topic));
    assert!(
        dry.contains("1 would be dead-lettered") && dry.contains("bad_magic"),
        "{dry}"
    );

    // The principal without bigquery.tables.update (the marker label), through the emulator's
    // fault hook on tables.testIamPermissions.
    install_fault(
        f.emulator.addr,
        json!({"rpc": "TestIamPermissions", "action": {"deny": {"permissions": ["bigquery.tables.update"]}}}),
    )
    .await;
    let (code, report) = check(&config);
    assert_eq!(code, 1, "{report}");
    let table = line(
        &report,
        &format!("FAIL         bigquery table {}:", f.table),
    );
    assert!(table.contains("lacks bigquery.tables.update"), "{table}");
    assert!(
        report.contains("fix: grant roles/bigquery.dataEditor"),
        "{report}"
    );

    // A registry that refuses: unavailable for every request.
    reg.unavailable(1_000);
    let (code, report) = check(&config);
    assert_eq!(code, 1, "{report}");
    line(&report, "FAIL         schema registry:");
    reg.unavailable(0);

    // Topics that do not exist, and no broker at all.
    let missing = f.config_with(
        &group,
        &Tweaks {
            topics: vec!["no-such-topic".into()],
            registry_url: Some(format!("http://{registry}")),
            ..Tweaks::default()
        },
    );
    let (code, report) = check(&missing);
    assert_eq!(code, 1, "{report}");
    assert!(line(&report, "FAIL         kafka topic no-such-topic:").contains("does not exist"));
    let text = std::fs::read_to_string(&config).expect("config");
    let unreachable = f.dir.path().join("unreachable.yaml");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    std::fs::write(
        &unreachable,
        text.replace(&f.bootstrap, &format!("127.0.0.1:{port}")),
    )
    .expect("write");
    let (code, report) = check(&unreachable);
    assert_eq!(code, 1, "{report}");
    assert!(line(&report, "FAIL         kafka:").contains("cannot read the cluster's metadata"));

    // Nothing was written: no committed offsets for the group, no rows, no dead letters.
    let committed = kafka_bigquery_sink::inspect::read_group(
        &kafka_bigquery_sink::inspect::group_reader(
            &kafka_bigquery_sink::config::Config::load(&config).expect("config"),
        )
        .expect("reader"),
        std::slice::from_ref(&f.topic),
    )
    .expect("group");
    assert!(
        committed.iter().all(|p| p.committed.is_none()),
        "{committed:?}"
    );
    assert_eq!(f.visible_count(), 0);
}
