//! `schema_registry.not_found_grace` end to end: a record whose schema id the registry answers
//! 404 for holds its partition while the id is unknown for less than the grace. A schema that
//! reaches the registry within the grace (registered in another region, replicated late) gets its
//! record written; an id still unknown after the grace sends its record to the dead-letter topic
//! with a reason naming the id. Neither loses or duplicates the good records around them.

use crate::support;

use std::time::{Duration, Instant};

use kbq_core::table_schema::TableSchema;
use support::kafka::unique_name;
use support::registry::Registry;
use support::sink::{Daemon, Fixture, SCHEMA, SinkOptions, Tweaks, confluent, encode};

const REGISTERED: u32 = 1;
const LATE: u32 = 7;
const NEVER: u32 = 99;

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_late_schema_within_the_grace_is_written_and_one_never_registered_is_dead_lettered() {
    let (registry, reg) = Registry::serve([(REGISTERED, SCHEMA.to_string())].into(), None).await;
    let f = Fixture::with(SinkOptions {
        framing: Some(REGISTERED),
        ..SinkOptions::partitions(2)
    })
    .await;
    let table_schema: TableSchema = serde_json::from_value(serde_json::json!({"fields": [
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "customer", "type": "STRING", "mode": "REQUIRED"},
        {"name": "amount", "type": "NUMERIC", "mode": "REQUIRED", "precision": "12", "scale": "2"},
        {"name": "created", "type": "TIMESTAMP", "mode": "REQUIRED"},
        {"name": "note", "type": "STRING"},
        {"name": "kafka_topic", "type": "STRING"},
        {"name": "kafka_partition", "type": "INTEGER"},
        {"name": "kafka_offset", "type": "INTEGER"}
    ]}))
    .expect("table schema");
    f.create_table(table_schema);
    // Long enough that registering the late schema right after its first 404 is well inside it;
    // the never-registered id costs its partition this long.
    let config = f.config_with(
        &unique_name("grace"),
        &Tweaks {
            registry_url: Some(format!("http://{registry}")),
            not_found_grace: "20s",
            ..Tweaks::default()
        },
    );

    f.produce(100);
    let late = f
        .source
        .produce_raw(0, &[confluent(LATE, &encode(&f.schema, 1_000_000))]);
    f.source.expect([(0, late[0])]);
    let never = f
        .source
        .produce_raw(1, &[confluent(NEVER, &encode(&f.schema, 1_000_001))]);
    f.produce(100);

    let mut d = Daemon::start(&config);
    // The late id's first 404 makes its partition wait (and log why); then it "replicates".
    let waiting_since = Instant::now();
    loop {
        let waiting = d.logged("schema unavailable").iter().any(|l| {
            l["reason"]
                .as_str()
                .is_some_and(|r| r.contains(&format!("schema id {LATE} ")))
        });
        if waiting {
            break;
        }
        assert!(
            waiting_since.elapsed() < Duration::from_secs(120),
            "the daemon never waited for schema id {LATE}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    reg.register(LATE, SCHEMA);

    f.wait_exactly_once(Duration::from_secs(120));
    let dead = f.dead_letters(1);
    assert_eq!(dead.len(), 1, "only the never-registered record: {dead:?}");
    let (partition, offset, class, reason) = &dead[0];
    assert_eq!((*partition, *offset), (1, never[0]), "{dead:?}");
    assert_eq!(class, "unknown_schema");
    assert!(
        reason.contains(&format!("schema id {NEVER} ")),
        "the reason names the id: {reason}"
    );
    assert!(d.errors().is_empty(), "{:?}", d.errors());
    assert!(d.terminate().success());
}
