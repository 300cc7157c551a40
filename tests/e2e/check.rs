//! `kafka-bigquery-sink check -c`: against the real broker, the emulator and a fake registry, it
//! passes on a working setup and names each failure class with its fix, writing nothing: no
//! group offsets committed, no row appended, no table created, no record produced.

use crate::support;

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
    let out = Command::new(crate::support::daemon::binary())
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
    // A broker without an authorizer reports every operation as granted.
    assert!(
        line(
            &report,
            &format!("ok           dead-letter topic {} write:", f.dlq)
        )
        .contains("WRITE granted")
    );
    assert!(
        line(
            &report,
            &format!("ok           kafka group {group} commit:")
        )
        .contains("READ granted")
    );
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

/// The end offset of each partition of `topic` and the group's committed offsets of it, read
/// through the super user's listener: what `check` must leave as it found them.
fn positions(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Vec<(i64, Option<i64>)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = support::kafka::consumer_config(bootstrap, group)
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, std::time::Duration::from_secs(30))
        .expect("committed offsets");
    (0..partitions)
        .map(|p| {
            let (_, high) = consumer
                .fetch_watermarks(topic, p, std::time::Duration::from_secs(10))
                .expect("watermarks");
            let committed = committed
                .find_partition(topic, p)
                .and_then(|e| e.offset().to_raw())
                .filter(|o| *o >= 0);
            (high, committed)
        })
        .collect()
}

/// Against a broker that enforces ACLs (SASL/PLAIN, Kafka's StandardAuthorizer), `check` reads
/// what the principal may do from the brokers' authorized operations, without committing or
/// producing: READ on the group (commit), READ on each routed topic, WRITE on the dead-letter
/// topic. With all of them it passes; without each, it fails naming the resource and the ACL to
/// grant. A group that does not exist yet is described too (the broker reports it `Dead`, with
/// the operations the principal will have on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reads_the_principals_kafka_permissions_from_the_brokers_writing_nothing() {
    use support::acls::{Acl, DESCRIBE, On, READ, WRITE, grant};
    use support::kafka::{KafkaBroker, SASL_SINK, commit_outside_group, create_topic_blocking};

    let broker = KafkaBroker::start_private_sasl();
    let admin = broker.bootstrap();
    let f = Fixture::with(SinkOptions {
        bootstrap: Some(admin.to_string()),
        ..SinkOptions::partitions(2)
    })
    .await;
    f.create_table(table_schema());
    f.produce(10);
    let group = unique_name("acl");
    let fresh = unique_name("acl-fresh");
    let describe_only = unique_name("acl-describe-only");
    let no_acl = unique_name("acl-none");
    let unreadable = unique_name("acl-unreadable");
    let read_only_dlq = unique_name("acl-dlq-read-only");
    create_topic_blocking(admin, &unreadable, 1);
    create_topic_blocking(admin, &read_only_dlq, 1);
    let user = format!("User:{}", SASL_SINK.0);
    let acl = |on, operation| Acl {
        principal: &user,
        on,
        operation,
        allow: true,
    };
    grant(
        admin,
        &[
            acl(On::Group(&group), READ),
            acl(On::Group(&fresh), READ),
            acl(On::Group(&describe_only), DESCRIBE),
            acl(On::Topic(&f.topic), READ),
            acl(On::Topic(&unreadable), DESCRIBE),
            acl(On::Topic(&f.dlq), WRITE),
            acl(On::Topic(&read_only_dlq), DESCRIBE),
        ],
    );
    // A checkpoint and a dead letter that must still be where they are after every check. The
    // dead letter comes from the sink user's idempotent producer, as the sink's would: WRITE on
    // the topic is all it needs (no IDEMPOTENT_WRITE on the cluster, docs/operations.md).
    commit_outside_group(admin, &group, &f.topic, 0, 4, None).expect("commit");
    let sink_producer: rdkafka::producer::FutureProducer =
        support::kafka::producer_config(broker.sasl_bootstrap())
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", "PLAIN")
            .set("sasl.username", SASL_SINK.0)
            .set("sasl.password", SASL_SINK.1)
            .create()
            .expect("the sink user's producer");
    let started = std::time::Instant::now();
    while let Err(e) = sink_producer
        .send(
            rdkafka::producer::FutureRecord::<[u8], [u8]>::to(&f.dlq)
                .partition(0)
                .payload(b"a dead letter"),
            std::time::Duration::from_secs(30),
        )
        .await
    {
        // The ACLs reach the broker's authorizer a moment after CreateAcls answers.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the sink user cannot produce to {}: {e:?}",
            f.dlq
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let before = [
        positions(admin, &group, &f.topic, 2),
        positions(admin, &describe_only, &f.topic, 2),
        positions(admin, &group, &f.dlq, 1),
        positions(admin, &group, &read_only_dlq, 1),
    ];

    // The sink's config as the sink user on the SASL listener, with one resource swapped.
    let base = f.config_with(
        &group,
        &Tweaks {
            kafka_properties: vec![
                "    security.protocol: SASL_PLAINTEXT".into(),
                "    sasl.mechanism: PLAIN".into(),
                format!("    sasl.username: {}", SASL_SINK.0),
                format!("    sasl.password: {}", SASL_SINK.1),
            ],
            ..Tweaks::default()
        },
    );
    let text = std::fs::read_to_string(&base)
        .expect("config")
        .replace(&f.bootstrap, broker.sasl_bootstrap());
    let variant = |name: &str, from: &str, to: &str| {
        let path = f.dir.path().join(format!("acl-{name}.yaml"));
        std::fs::write(&path, text.replace(from, to)).expect("write config");
        path
    };
    let granted = f.dir.path().join("acl-granted.yaml");
    std::fs::write(&granted, &text).expect("write config");

    // Every permission granted: exit 0. The ACLs reach the broker's authorizer through its
    // metadata log, a moment after CreateAcls answers.
    let started = std::time::Instant::now();
    let (code, report) = loop {
        let (code, report) = check(&granted);
        if code == 0 || started.elapsed() > std::time::Duration::from_secs(20) {
            break (code, report);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert_eq!(code, 0, "{report}");
    assert!(
        line(
            &report,
            &format!("ok           kafka group {group} commit:")
        )
        .contains("READ granted"),
        "{report}"
    );
    assert!(
        line(
            &report,
            &format!("ok           dead-letter topic {} write:", f.dlq)
        )
        .contains("WRITE granted")
    );
    assert!(
        line(
            &report,
            &format!("ok           kafka topic {} read:", f.topic)
        )
        .contains("10 of its newest records read")
    );
    line(&report, &format!("ok           dry run {}:", f.topic));

    // A group that does not exist yet: described, its future permissions reported.
    let (code, report) = check(&variant(
        "fresh",
        &format!("group_id: \"{group}\""),
        &format!("group_id: \"{fresh}\""),
    ));
    assert_eq!(code, 0, "{report}");
    let fresh_line = line(
        &report,
        &format!("ok           kafka group {fresh} commit:"),
    );
    assert!(fresh_line.contains("the group is Dead"), "{fresh_line}");

    // The group: DESCRIBE only, so its offsets are readable but no commit would land.
    let (code, report) = check(&variant(
        "group",
        &format!("group_id: \"{group}\""),
        &format!("group_id: \"{describe_only}\""),
    ));
    assert_eq!(code, 1, "{report}");
    let failed = line(
        &report,
        &format!("FAIL         kafka group {describe_only} commit:"),
    );
    assert!(
        failed.contains("may describe the group but not commit"),
        "{failed}"
    );
    assert!(
        report.contains(&format!("fix: grant READ on group {describe_only}")),
        "{report}"
    );
    line(
        &report,
        &format!("ok           kafka group {describe_only}:"),
    );
    // A group without any ACL: neither its offsets nor its description are the principal's.
    let (code, report) = check(&variant(
        "no-group",
        &format!("group_id: \"{group}\""),
        &format!("group_id: \"{no_acl}\""),
    ));
    assert_eq!(code, 1, "{report}");
    let failed = line(
        &report,
        &format!("FAIL         kafka group {no_acl} commit:"),
    );
    assert!(failed.contains("may not describe the group"), "{failed}");
    line(&report, &format!("FAIL         kafka group {no_acl}:"));

    // A routed topic the principal may describe but not read.
    let (code, report) = check(&variant(
        "topic",
        &format!("topics: [\"{}\"]", f.topic),
        &format!("topics: [\"{unreadable}\"]"),
    ));
    assert_eq!(code, 1, "{report}");
    let failed = line(
        &report,
        &format!("FAIL         kafka topic {unreadable} read:"),
    );
    assert!(failed.contains("READ is not granted"), "{failed}");
    assert!(
        report.contains(&format!("fix: grant READ on topic {unreadable}")),
        "{report}"
    );

    // A dead-letter topic the principal may describe but not write.
    let (code, report) = check(&variant(
        "dlq",
        &format!("topic: \"{}\"", f.dlq),
        &format!("topic: \"{read_only_dlq}\""),
    ));
    assert_eq!(code, 1, "{report}");
    let failed = line(
        &report,
        &format!("FAIL         dead-letter topic {read_only_dlq} write:"),
    );
    assert!(failed.contains("WRITE is not granted"), "{failed}");
    assert!(
        report.contains(&format!("fix: grant WRITE on topic {read_only_dlq}")),
        "{report}"
    );

    // Nothing moved: the committed offsets and the dead-letter topics' end offsets.
    let after = [
        positions(admin, &group, &f.topic, 2),
        positions(admin, &describe_only, &f.topic, 2),
        positions(admin, &group, &f.dlq, 1),
        positions(admin, &group, &read_only_dlq, 1),
    ];
    assert_eq!(before, after);
    assert_eq!(before[0][0].1, Some(4), "{before:?}");
    assert_eq!(before[2][0].0, 1, "{before:?}");
    assert_eq!(f.visible_count(), 0);
}

/// A table that does not exist yet but `create_table` would create: the dry run compiles
/// against the schema it would be created with (derived from the route's Avro schema, with its
/// metadata columns) and counts what would be dead-lettered, and the table is not created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dry_run_of_a_table_create_table_would_create_runs_against_its_schema_creating_nothing()
{
    let f = Fixture::new(1).await;
    f.produce(10);
    // An Avro body cut short after its first field: it cannot be read.
    f.source.produce_raw(0, &[b"\x02".to_vec()]);
    let config = f.config(&unique_name("check-create"));
    let (code, report) = check(&config);
    assert_eq!(code, 1, "{report}");
    assert!(
        line(
            &report,
            &format!("ok           bigquery table {}:", f.table)
        )
        .contains("run creates it"),
        "{report}"
    );
    let dry = line(&report, &format!("FAIL         dry run {}:", f.topic));
    assert!(
        dry.contains("10 record(s) transcode, 1 would be dead-lettered"),
        "{dry}"
    );
    assert!(
        f.emulator.store.get_table(&f.table_ref()).is_none(),
        "check created the table"
    );
}

/// A CDC route's records go through the writer's change path in the dry run: upserts and a
/// delete with its row, a tombstone deleted by its Kafka key, a change whose row does not fit
/// the table (a string into INT64) counted as dead-lettered; under `upsert` the delete and the
/// tombstone are counted as ignored, as `run` ignores them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dry_run_of_a_cdc_route_takes_the_change_path_of_the_writer() {
    use kbq_emulator::store::{Dataset, Table};
    use support::cdc::Change;
    let f = Fixture::new(1).await;
    let store = &f.emulator.store;
    store
        .insert_dataset(Dataset::new("p", "d"))
        .expect("dataset");
    let schema: TableSchema = serde_json::from_value(json!({"fields": [
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "n", "type": "INTEGER"},
        {"name": "kafka_topic", "type": "STRING"},
        {"name": "kafka_partition", "type": "INTEGER"},
        {"name": "kafka_offset", "type": "INTEGER"}]}))
    .expect("schema");
    let mut table = Table::new(f.table_ref(), schema);
    table.table_constraints = Some(json!({"primaryKey": {"columns": ["id"]}}));
    store.insert_table(table).expect("table");
    let change = |key: &str, value: Option<&str>| Change {
        partition: 0,
        key: Some(key.as_bytes().to_vec()),
        value: value.map(|v| v.as_bytes().to_vec()),
    };
    let changes = [
        change(
            r#"{"id": 1}"#,
            Some(r#"{"op": "c", "after": {"id": 1, "n": 5}}"#),
        ),
        change(
            r#"{"id": 2}"#,
            Some(r#"{"op": "c", "after": {"id": 2, "n": "x"}}"#),
        ),
        change(
            r#"{"id": 3}"#,
            Some(r#"{"op": "c", "after": {"id": 3, "n": 7}}"#),
        ),
        change(
            r#"{"id": 3}"#,
            Some(r#"{"op": "d", "before": {"id": 3, "n": 7}}"#),
        ),
        change(r#"{"id": 3}"#, None),
    ];
    support::cdc::produce(&support::kafka::producer(&f.bootstrap), &f.topic, &changes);
    let config = |mode: &str| {
        f.config_with(
            &unique_name("check-cdc"),
            &Tweaks {
                schemaless_json: true,
                delivery: Some("at_least_once"),
                name: Some(if mode == "upsert" { "upsert" } else { "delete" }),
                routes: vec![format!(
                    "  - topics: [\"{}\"]\n    table: \"{}\"\n    cdc:\n      mode: {mode}\n      primary_key: [id]",
                    f.topic, f.table
                )],
                ..Tweaks::default()
            },
        )
    };

    let (code, report) = check(&config("upsert_delete"));
    assert_eq!(code, 1, "{report}");
    let dry = line(&report, &format!("FAIL         dry run {}:", f.topic));
    assert!(
        dry.contains("4 change(s) transcode, 1 would be dead-lettered"),
        "{dry}"
    );
    assert!(!dry.contains("ignored"), "{dry}");

    let (code, report) = check(&config("upsert"));
    assert_eq!(code, 1, "{report}");
    let dry = line(&report, &format!("FAIL         dry run {}:", f.topic));
    assert!(
        dry.contains("2 change(s) transcode, 1 would be dead-lettered")
            && dry
                .contains("ignored by the upsert mode, as run ignores them: 1 delete, 1 tombstone"),
        "{dry}"
    );
    assert_eq!(store.visible_row_count(&f.table_ref()).unwrap_or(0), 0);
}
