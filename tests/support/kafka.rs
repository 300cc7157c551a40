//! A real Apache Kafka broker for the tests (docs/testing.md), started through `scripts/kafka.sh`.
//!
//! * `KafkaBroker::shared()`: the broker of the whole test run when the test script exported
//!   `KBQ_KAFKA_BOOTSTRAP`, else one private broker per test binary, started on first use.
//! * `KafkaBroker::start_private()`: a broker owned by one test, for tests that restart or kill
//!   it; stopped when the handle drops.
//! * `KafkaBroker::start_private_sasl()`: the same with a second listener, SASL_PLAINTEXT/PLAIN,
//!   and ACLs enforced (`scripts/kafka.sh start --sasl` says who may do what); `acls.rs` grants.
//!
//! Every broker started here is watched by a process of `kafka.sh` that stops it once this test
//! process has exited, whatever the exit: the statics of a test binary are never dropped, and a
//! panic that aborts or a SIGKILL skips every destructor.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};

/// The env var through which the test script hands one broker to every test binary.
pub const BOOTSTRAP_ENV: &str = "KBQ_KAFKA_BOOTSTRAP";

/// A broker started by this process through `scripts/kafka.sh`.
pub struct KafkaBroker {
    /// The broker's directory; removed on drop, after `Drop::drop` has stopped the broker.
    dir: tempfile::TempDir,
    bootstrap: String,
    /// The SASL_PLAINTEXT listener of a broker started with `--sasl`.
    sasl_bootstrap: Option<String>,
}

/// The users of a broker started with `--sasl` (scripts/kafka.sh), as `(name, password)`.
pub const SASL_ADMIN: (&str, &str) = ("admin", "admin-secret");
pub const SASL_SINK: (&str, &str) = ("sink", "sink-secret");

static SHARED: OnceLock<String> = OnceLock::new();

impl KafkaBroker {
    /// The bootstrap address of the broker shared by the tests of this run.
    pub fn shared() -> &'static str {
        SHARED.get_or_init(|| {
            if let Ok(addr) = std::env::var(BOOTSTRAP_ENV)
                && !addr.trim().is_empty()
            {
                return addr.trim().to_owned();
            }
            // Kept out of any TempDir guard: statics are not dropped, so the watchdog removes
            // the directory once the broker has stopped after this process.
            let dir = tempfile::Builder::new()
                .prefix("kbq-kafka-shared-")
                .tempdir()
                .expect("create a temp dir for the shared broker")
                .keep();
            let started = Instant::now();
            let bootstrap = try_run_script(&["start", path_str(&dir), "--remove-dir"], true)
                .unwrap_or_else(|e| {
                    // no watchdog was started, so nothing else would remove it
                    let _ = std::fs::remove_dir_all(&dir);
                    panic!("{e}")
                });
            eprintln!(
                "kafka broker for this test binary at {bootstrap} (started in {:.1}s)",
                started.elapsed().as_secs_f64()
            );
            bootstrap
        })
    }

    /// A broker owned by the caller: tests that restart or kill the broker must not share it.
    pub fn start_private() -> KafkaBroker {
        let dir = tempfile::Builder::new()
            .prefix("kbq-kafka-")
            .tempdir()
            .expect("create a temp dir for a broker");
        let bootstrap = run_script(&["start", path_str(dir.path())], true);
        KafkaBroker {
            dir,
            bootstrap,
            sasl_bootstrap: None,
        }
    }

    /// A broker owned by the caller whose second listener takes SASL_PLAINTEXT/PLAIN and whose
    /// authorizer enforces ACLs; [`bootstrap`](Self::bootstrap) stays a PLAINTEXT listener whose
    /// anonymous principal is a super user, for the test's own setup.
    pub fn start_private_sasl() -> KafkaBroker {
        let dir = tempfile::Builder::new()
            .prefix("kbq-kafka-sasl-")
            .tempdir()
            .expect("create a temp dir for a broker");
        let bootstrap = run_script(&["start", path_str(dir.path()), "--sasl"], true);
        let sasl = std::fs::read_to_string(dir.path().join("sasl_bootstrap"))
            .expect("kafka.sh --sasl writes sasl_bootstrap");
        KafkaBroker {
            dir,
            bootstrap,
            sasl_bootstrap: Some(sasl.trim().to_string()),
        }
    }

    /// The SASL_PLAINTEXT listener; panics for a broker started without `--sasl`.
    pub fn sasl_bootstrap(&self) -> &str {
        self.sasl_bootstrap
            .as_deref()
            .expect("a broker started with start_private_sasl")
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// The broker's directory (its log is `broker.log` in it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Stops the broker cleanly (SIGTERM, waits for the exit).
    pub fn stop(&self) {
        run_script(&["stop", path_str(self.dir.path())], false);
    }

    /// Kills the broker with SIGKILL: a crash.
    pub fn kill(&self) {
        run_script(&["stop", path_str(self.dir.path()), "--hard"], false);
    }

    /// Starts a stopped (or killed) broker again on the same ports with the same log dir.
    pub fn start_again(&self) {
        let addr = run_script(&["start", path_str(self.dir.path())], true);
        assert_eq!(addr, self.bootstrap, "a restarted broker keeps its address");
    }

    /// Stops and starts the broker on the same ports and log dir; `hard` kills it first.
    pub fn restart(&self, hard: bool) {
        let mut args = vec!["restart", path_str(self.dir.path())];
        if hard {
            args.push("--hard");
        }
        let addr = run_script(&args, false);
        assert_eq!(addr, self.bootstrap, "a restarted broker keeps its address");
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        // No panic in drop: a failed stop is left to the watchdog.
        let _ = Command::new("bash")
            .arg(script_path())
            .args(["stop", path_str(self.dir.path())])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status();
    }
}

fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka.sh")
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("temp dir paths are UTF-8")
}

/// Runs `kafka.sh` and returns its stdout (trimmed); panics if it fails.
fn run_script(args: &[&str], watch: bool) -> String {
    try_run_script(args, watch).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `kafka.sh` and returns its stdout (trimmed). `watch` adds `--parent <this pid>` so that
/// the broker cannot outlive this process.
fn try_run_script(args: &[&str], watch: bool) -> Result<String, String> {
    let pid = std::process::id().to_string();
    let mut cmd = Command::new("bash");
    cmd.arg(script_path()).args(args);
    if watch {
        cmd.args(["--parent", &pid]);
    }
    // stderr is inherited: the script's diagnostics (a failed fetch, the broker's last log lines)
    // are what a reader of a failed test needs.
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/kafka.sh (bash is required)");
    if !out.status.success() {
        return Err(format!(
            "scripts/kafka.sh {args:?} failed with {} (its messages are on stderr)",
            out.status
        ));
    }
    Ok(String::from_utf8(out.stdout)
        .expect("kafka.sh prints ASCII")
        .trim()
        .to_owned())
}

/// A name no other test (of this or a concurrent run against the same broker) uses.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!(
        "{prefix}-{}-{nanos:x}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn admin_client(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("create an admin client")
}

/// Creates a topic (replication factor 1) and waits until the broker reports it with all its
/// partitions led, so that a producer or consumer started right after finds them.
pub async fn create_topic(bootstrap: &str, name: &str, partitions: i32) {
    let admin = admin_client(bootstrap);
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .create_topics([&topic], &opts)
        .await
        .expect("create_topics request");
    for r in results {
        if let Err((topic, code)) = r {
            panic!("create topic {topic}: {code}");
        }
    }
    // A bound, not a pace: a single node on a loaded machine took more than 30 s to lead the
    // partitions of a topic created right after one of 1,200 (scripts/scale.sh).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let md = admin
            .inner()
            .fetch_metadata(Some(name), Duration::from_secs(5))
            .expect("fetch metadata of a new topic");
        let ready = md.topics().iter().any(|t| {
            t.name() == name
                && t.error().is_none()
                && t.partitions().len() == partitions as usize
                && t.partitions().iter().all(|p| p.leader() >= 0)
        });
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "topic {name} not ready after 120s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sets topic-level config `key` of `topic` to `value` (e.g. `max.message.bytes`).
pub fn set_topic_config(bootstrap: &str, topic: &str, key: &str, value: &str) {
    use rdkafka::admin::{AlterConfig, ResourceSpecifier};
    let admin = admin_client(bootstrap);
    let change = AlterConfig::new(ResourceSpecifier::Topic(topic)).set(key, value);
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = futures::executor::block_on(admin.alter_configs([&change], &opts))
        .expect("alter_configs request");
    for r in results {
        if let Err((resource, code)) = r {
            panic!("set {key}={value} on {resource:?}: {code}");
        }
    }
    // The broker applies a change after it answered: wait until it reports the new value, so
    // a client started next reads it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let described = futures::executor::block_on(
            admin.describe_configs([&ResourceSpecifier::Topic(topic)], &opts),
        )
        .expect("describe_configs request");
        let now = (described.into_iter().next())
            .and_then(|r| r.ok())
            .and_then(|c| c.get(key).and_then(|e| e.value.clone()));
        if now.as_deref() == Some(value) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key} of {topic} still {now:?} after 30s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `create_topic` for synchronous tests: the admin client's future is completed by
/// librdkafka's own thread, so no async runtime is needed.
pub fn create_topic_blocking(bootstrap: &str, name: &str, partitions: i32) {
    futures::executor::block_on(create_topic(bootstrap, name, partitions));
}

pub fn producer_config(bootstrap: &str) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        // A bound, not a pace: a fresh single node on a loaded machine took more than 30 s to
        // acknowledge one record to each of 1,200 partitions sent together (scripts/scale.sh).
        .set("message.timeout.ms", "120000");
    cfg
}

pub fn producer(bootstrap: &str) -> FutureProducer {
    producer_config(bootstrap)
        .create()
        .expect("create a producer")
}

/// Produces `records` (key, value) to one partition, in order, and waits until every one is
/// acknowledged; returns their offsets. Usable from sync code (the producer's own thread
/// completes the futures) and from async code.
pub fn produce_to_partition(
    producer: &FutureProducer,
    topic: &str,
    partition: i32,
    records: &[(&[u8], &[u8])],
) -> Vec<i64> {
    let sent = send_to_partition(producer, topic, partition, records);
    delivered(sent, partition)
}

/// Enqueues `records` to one partition, in order, without waiting: several partitions' records
/// go out together, and [`delivered`] waits for them afterwards.
pub fn send_to_partition(
    producer: &FutureProducer,
    topic: &str,
    partition: i32,
    records: &[(&[u8], &[u8])],
) -> Vec<rdkafka::producer::DeliveryFuture> {
    records
        .iter()
        .map(|(key, value)| {
            let rec = FutureRecord::to(topic)
                .partition(partition)
                .key(*key)
                .payload(*value);
            producer
                .send_result(rec)
                .map_err(|(e, _)| e)
                .expect("enqueue a record")
        })
        .collect()
}

/// Waits until every record [`send_to_partition`] enqueued to `partition` is acknowledged;
/// returns their offsets.
pub fn delivered(sent: Vec<rdkafka::producer::DeliveryFuture>, partition: i32) -> Vec<i64> {
    sent.into_iter()
        .map(|f| {
            let delivery = futures::executor::block_on(f)
                .expect("delivery result")
                .map_err(|(e, _)| e)
                .expect("record acknowledged by the broker");
            assert_eq!(delivery.partition, partition);
            delivery.offset
        })
        .collect()
}

/// `consumer_config` for the KIP-848 group protocol (`group.protocol=consumer`): the broker
/// assigns partitions and owns the session timeouts, so the classic-only settings go.
pub fn consumer_config_kip848(bootstrap: &str, group_id: &str) -> ClientConfig {
    let mut cfg = consumer_config(bootstrap, group_id);
    cfg.remove("partition.assignment.strategy")
        .remove("session.timeout.ms")
        .remove("heartbeat.interval.ms")
        .set("group.protocol", "consumer");
    cfg
}

/// A consumer config with the settings the sink forces (docs/configuration.md, `kafka.properties`) and timeouts
/// short enough for tests: a member that leaves or dies is noticed in seconds.
pub fn consumer_config(bootstrap: &str, group_id: &str) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("group.id", group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "error")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .set("enable.partition.eof", "false");
    cfg
}

/// Commits `offset` (with `metadata`, if any) for `topic`/`partition` to `group` from outside the
/// group, as `recover` and an operator's tools do. Answers of a coordinator that is still loading
/// or moving (a fresh broker's `__consumer_offsets`) are retried for up to 60 s; any other
/// refusal is returned, e.g. the broker's refusal while the group has members.
pub fn commit_outside_group(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
    metadata: Option<&str>,
) -> rdkafka::error::KafkaResult<()> {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::types::RDKafkaErrorCode::{
        CoordinatorLoadInProgress, CoordinatorNotAvailable, NotCoordinator,
    };
    use rdkafka::{Offset, TopicPartitionList};
    let c: BaseConsumer = consumer_config(bootstrap, group)
        .create()
        .expect("a consumer");
    let mut tpl = TopicPartitionList::new();
    {
        let mut elem = tpl.add_partition(topic, partition);
        elem.set_offset(Offset::Offset(offset)).expect("offset");
        if let Some(m) = metadata {
            elem.set_metadata(m);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match c.commit(&tpl, CommitMode::Sync) {
            Err(e)
                if matches!(
                    e.rdkafka_error_code(),
                    Some(CoordinatorLoadInProgress | CoordinatorNotAvailable | NotCoordinator)
                ) && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            result => return result,
        }
    }
}
