//! The container image built from the `Dockerfile`, run with podman against the real broker and
//! the emulator: the container answers `/healthz` and `/readyz`, sinks the records of a topic into
//! the emulator's table, leaves cleanly on SIGTERM (`podman stop`), and its log is plain text (no
//! colour codes: the container's stderr is not a terminal).
//!
//! `scripts/image.sh` builds the image with buildah and runs this test with `--ignored`,
//! naming the image in `KBQ_IMAGE`; a plain `cargo test` lists it as ignored.

use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use apache_avro::Schema;
use apache_avro::types::Value as Avro;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use kbq_emulator::store::TableRef;
use kbq_transcode::frame_confluent;
use support::daemon::{free_port, http_get, wait_for};
use support::kafka::{
    KafkaBroker, create_topic_blocking, produce_to_partition, producer, unique_name,
};
use support::registry::Registry;

const SCHEMA: &str = r#"{"type":"record","name":"Event","namespace":"test","fields":[
  {"name":"id","type":"long"},{"name":"name","type":"string"}]}"#;
const PARTITIONS: i32 = 2;
const RECORDS: i64 = 500;

/// Words of an environment variable set by scripts/image.sh (empty when unset).
fn words(var: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// podman with the global options scripts/image.sh found to work here (`KBQ_PODMAN_ARGS`,
/// e.g. another OCI runtime).
fn podman(args: &[&str]) -> std::process::Output {
    Command::new("podman")
        .args(words("KBQ_PODMAN_ARGS"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("podman {args:?}: {e} (scripts/test.sh installs podman)"))
}

/// A container this test started, removed (by its name) when dropped.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "--force", "--time", "5", &self.0]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the image: scripts/image.sh builds it and runs this with --ignored"]
async fn the_image_serves_its_probes_and_sinks_a_topic_into_the_emulator() {
    let image = std::env::var("KBQ_IMAGE")
        .expect("KBQ_IMAGE names the image to run (scripts/image.sh sets it)");
    let emulator = kbq_emulator::testsuite::start().await;
    let bootstrap = KafkaBroker::shared();
    let topic = unique_name("image");
    create_topic_blocking(bootstrap, &topic, PARTITIONS);
    create_topic_blocking(bootstrap, &format!("{topic}-dlq"), 1);
    let table = topic.replace('-', "_");
    let table_ref = TableRef::parse(&format!("projects/p/datasets/d/tables/{table}")).expect("ref");
    kbq_emulator::testsuite::create_table(
        &emulator.store,
        &table_ref,
        TableSchema {
            fields: vec![
                TableFieldSchema::new("id", FieldType::Int64, Mode::Required),
                TableFieldSchema::new("name", FieldType::String, Mode::Required),
            ],
        },
    );
    let (registry, _registry) =
        Registry::serve(HashMap::from([(1, SCHEMA.to_string())]), None).await;

    // The config, readable by the image's non-root user (uid 65532).
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            r#"
kafka:
  bootstrap_servers: "{bootstrap}"
  group_id: "{topic}-group"
  topics: ["{topic}"]
  properties:
    statistics.interval.ms: "1000"
schema_registry:
  url: "http://{registry}"
bigquery:
  project: p
  dataset: d
  table: "{table}"
  endpoint: "http://{emulator}"
  credentials: none
dead_letter:
  topic: "{topic}-dlq"
checkpoint:
  interval: 1s
metrics:
  listen: "127.0.0.1:{port}"
log:
  format: text
shutdown_deadline: 20s
"#,
            emulator = emulator.addr
        ),
    )
    .expect("config");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).expect("chmod");

    let schema = Schema::parse_str(SCHEMA).expect("schema");
    let kafka = producer(bootstrap);
    for partition in 0..PARTITIONS {
        let values: Vec<Vec<u8>> = (0..RECORDS / PARTITIONS as i64)
            .map(|i| {
                let id = i * PARTITIONS as i64 + partition as i64;
                let record = Avro::Record(vec![
                    ("id".into(), Avro::Long(id)),
                    ("name".into(), Avro::String(format!("event-{id}"))),
                ]);
                #[allow(deprecated)]
                let avro = apache_avro::to_avro_datum(&schema, record).expect("avro");
                frame_confluent(1, &avro)
            })
            .collect();
        let refs: Vec<(&[u8], &[u8])> = values
            .iter()
            .map(|v| (b"k".as_slice(), v.as_slice()))
            .collect();
        produce_to_partition(&kafka, &topic, partition, &refs);
    }

    // Host networking: the broker, the registry and the emulator listen on loopback. The root
    // filesystem is read-only, as in deploy/ (readOnlyRootFilesystem), with /tmp in memory.
    let name = format!("kbq-image-test-{}", std::process::id());
    let mount = format!("{}:/etc/kafka-bigquery-sink:ro", dir.path().display());
    let run_args = words("KBQ_PODMAN_RUN_ARGS");
    let run_args: Vec<&str> = run_args.iter().map(String::as_str).collect();
    let started = podman(
        &[
            &["run"][..],
            &run_args,
            &[
                "--detach",
                "--name",
                &name,
                "--network",
                "host",
                "--read-only",
                "--tmpfs",
                "/tmp",
                "--volume",
                &mount,
                &image,
            ],
        ]
        .concat(),
    );
    assert!(
        started.status.success(),
        "podman run failed:\n{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let container = Container(name);
    let logs = || {
        let out = podman(&["logs", &container.0]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let user = podman(&["inspect", "--format", "{{.Config.User}}", &container.0]);
    assert_eq!(String::from_utf8_lossy(&user.stdout).trim(), "65532:65532");

    let healthz = wait_for(Duration::from_secs(60), || async {
        http_get(addr, "/healthz").await.filter(|(s, _)| *s == 200)
    })
    .await;
    assert!(healthz.is_some(), "/healthz of the container:\n{}", logs());
    let visible = || {
        emulator
            .store
            .read_visible_rows(&table_ref, 0, usize::MAX)
            .map(|page| page.rows.len() as i64)
            .unwrap_or(0)
    };
    let all = wait_for(Duration::from_secs(120), || async {
        (visible() == RECORDS).then_some(())
    })
    .await;
    assert!(
        all.is_some(),
        "{} of {RECORDS} rows visible:\n{}",
        visible(),
        logs()
    );
    let ready = wait_for(Duration::from_secs(30), || async {
        http_get(addr, "/readyz").await.filter(|(s, _)| *s == 200)
    })
    .await;
    assert!(ready.is_some(), "/readyz of the container:\n{}", logs());

    // SIGTERM (podman stop), within the shutdown deadline: exit status 0.
    let stopped = podman(&["stop", "--time", "40", &container.0]);
    assert!(stopped.status.success(), "podman stop: {stopped:?}");
    let status = podman(&["inspect", "--format", "{{.State.ExitCode}}", &container.0]);
    let log = logs();
    assert_eq!(
        String::from_utf8_lossy(&status.stdout).trim(),
        "0",
        "the container's exit status after SIGTERM:\n{log}"
    );
    assert!(log.contains("INFO"), "the container logged:\n{log}");
    assert!(
        !log.contains('\x1b'),
        "colour codes in the container's log:\n{log}"
    );
    assert_eq!(visible(), RECORDS, "exactly the produced rows");
}

/// The image's binary is the production build (`--no-default-features`): it has neither dev
/// subcommand, so the emulator and the quickstart cannot run in it.
#[test]
#[ignore = "needs the image: scripts/image.sh builds it and runs this with --ignored"]
fn the_images_binary_has_no_quickstart_and_no_emulator() {
    let image = std::env::var("KBQ_IMAGE")
        .expect("KBQ_IMAGE names the image to run (scripts/image.sh sets it)");
    let run_args = words("KBQ_PODMAN_RUN_ARGS");
    let run_args: Vec<&str> = run_args.iter().map(String::as_str).collect();
    let run = |args: &[&str]| podman(&[&["run", "--rm"][..], &run_args, &[&image], args].concat());
    let help = run(&["--help"]);
    assert!(help.status.success(), "--help: {help:?}");
    let help = String::from_utf8_lossy(&help.stdout);
    for tool in ["quickstart", "emulator"] {
        assert!(
            !help.lines().any(|l| l.trim_start().starts_with(tool)),
            "the image's --help lists {tool}:\n{help}"
        );
        let out = run(&[tool]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(&format!("unrecognized subcommand '{tool}'")),
            "the image's binary does not refuse {tool}: {out:?}"
        );
    }
}
