//! What both quickstart scenarios do the same way: start the in-process services, supervise the
//! sink child through one crash and a restart, and stop it cleanly. A scenario ([`Scenario`])
//! brings what differs: its records, when it crashes the sink, when it is done, what it checks.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

use kbq_emulator::server::{Emulator, EmulatorConfig};

use super::registry::LocalRegistry;
use super::sink::{Sink, free_loopback_port, scrape};

/// How often the supervisor looks at the world.
const TICK: Duration = Duration::from_millis(100);
/// How often a progress line is printed.
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// No progress for this long (while the scenario allows a stall): give up and check.
const STALL: Duration = Duration::from_secs(90);
/// How long the last sink gets to stop on SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(60);

/// What a scenario needs started: a topic with its dead-letter topic, a registry with its
/// schemas, and the sink's config for those services.
pub(super) struct Setup<'a> {
    pub(super) topic: &'a str,
    pub(super) dead_letter_topic: &'a str,
    pub(super) partitions: i32,
    /// `project.dataset.table`, for the banner.
    pub(super) table: String,
    pub(super) schemas: HashMap<u32, String>,
    pub(super) subjects: HashMap<String, u32>,
    /// The sink's YAML from (bootstrap servers, registry URL, emulator, metrics listener).
    pub(super) config: fn(&str, &str, SocketAddr, SocketAddr) -> String,
}

/// The services the sink talks to, all in this process on loopback ports, and its config.
pub(super) struct Services {
    /// Kept for its lifetime: dropping it stops the cluster.
    _kafka: MockCluster<'static, DefaultProducerContext>,
    pub(super) bootstrap: String,
    pub(super) emulator: Emulator,
    pub(super) registry: LocalRegistry,
    pub(super) metrics_url: String,
    pub(super) config_path: PathBuf,
}

impl Services {
    /// Starts Kafka, the emulator and the registry, writes the sink config and prints where
    /// each one is.
    pub(super) async fn start(setup: Setup<'_>, workdir: &Path) -> anyhow::Result<Services> {
        let kafka =
            MockCluster::new(1).map_err(|e| anyhow!("cannot start the mock kafka cluster: {e}"))?;
        for (topic, partitions) in [
            (setup.topic, setup.partitions),
            (setup.dead_letter_topic, 1),
        ] {
            kafka
                .create_topic(topic, partitions, 1)
                .map_err(|e| anyhow!("cannot create topic {topic}: {e}"))?;
        }
        let bootstrap = kafka.bootstrap_servers();
        let emulator = Emulator::start(EmulatorConfig::local())
            .await
            .context("cannot start the bigquery emulator")?;
        let registry = LocalRegistry::start(setup.schemas, setup.subjects)
            .await
            .context("cannot start the schema registry")?;
        let metrics_addr = free_loopback_port().context("cannot find a free port for /metrics")?;
        let metrics_url = format!("http://{metrics_addr}/metrics");
        let config_path = workdir.join("sink.yaml");
        let config = (setup.config)(&bootstrap, &registry.url(), emulator.addr, metrics_addr);
        std::fs::write(&config_path, config).context("cannot write the sink config")?;
        println!(
            "  kafka (librdkafka mock cluster)  {bootstrap}, topic {} with {} partitions",
            setup.topic, setup.partitions
        );
        println!(
            "  bigquery emulator                http://{}  table {}",
            emulator.addr, setup.table
        );
        println!("  schema registry                  {}", registry.url());
        println!("  sink metrics                     {metrics_url}");
        println!(
            "  sink config                      {}",
            config_path.display()
        );
        println!();
        Ok(Services {
            _kafka: kafka,
            bootstrap,
            emulator,
            registry,
            metrics_url,
            config_path,
        })
    }
}

/// What differs between the scenarios, as hooks the supervisor calls once per tick in this
/// order: [`produce`](Self::produce), [`observe`](Self::observe), [`status`](Self::status) (once
/// a second), [`crash_due`](Self::crash_due) (until the crash), [`done`](Self::done) (after it).
pub(super) trait Scenario {
    /// Puts the next records into Kafka (or checks on the producer doing it); an error ends the
    /// run.
    fn produce(&mut self) -> anyhow::Result<()>;
    /// Takes in the sink's metrics (`None` when the scrape failed) and the world's state;
    /// returns the progress figure the stall watch follows.
    fn observe(&mut self, metrics: Option<&str>) -> anyhow::Result<u64>;
    /// The progress line's middle part; `since` is the time since the last one.
    fn status(&mut self, progress: u64, since: Duration) -> String;
    /// Whether sink #1 is to be killed now.
    fn crash_due(&mut self, progress: u64) -> bool;
    /// Sink #1 (`pid`) was killed: record the crash; returns what is printed about it.
    fn crashed(&mut self, pid: u32, progress: u64) -> anyhow::Result<String>;
    /// Sink #2 started: its metrics start from zero.
    fn restarted(&mut self);
    /// Whether the run is complete (asked only after the crash).
    fn done(&self, progress: u64) -> bool;
    /// Whether a run without progress may be given up now (the producer is not the one behind).
    fn may_stall(&self) -> bool {
        true
    }
    /// Why the run was given up.
    fn stall_reason(&self, progress: u64, stalled_for: Duration) -> String;
}

/// How the supervised run ended.
pub(super) struct Supervised {
    /// `Some` when the run was given up, with why.
    pub(super) stalled: Option<String>,
    /// From the first sink's start to the end of the run.
    pub(super) elapsed: Duration,
    /// The sink's metrics just before the clean stop (`None` when the scrape failed).
    pub(super) last_metrics: Option<String>,
    pub(super) clean_stop: Result<(), String>,
}

/// Runs sink #1, kills it when the scenario says so, runs sink #2 until the scenario is done
/// (or nothing moves any more), then stops it with SIGTERM.
pub(super) async fn supervise(
    scenario: &mut impl Scenario,
    services: &Services,
    workdir: &Path,
    started: Instant,
    timeout: Duration,
) -> anyhow::Result<Supervised> {
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let scraper = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .context("http client")?;
    let sink_started = Instant::now();
    let mut sink = Sink::spawn(&exe, &services.config_path, workdir, 1)?;
    let mut crashed = false;
    let mut last_status = Instant::now();
    let mut last_change = (Instant::now(), 0u64);
    let stalled = loop {
        tokio::time::sleep(TICK).await;
        if let Err(e) = scenario.produce() {
            sink.kill();
            return Err(e);
        }
        if let Some(status) = sink.exited() {
            bail!(
                "sink #{} exited early ({status}); see {}",
                sink.incarnation,
                sink.log.display()
            );
        }
        let metrics = scrape(&scraper, &services.metrics_url).await;
        let progress = scenario.observe(metrics.as_deref())?;
        if last_status.elapsed() >= STATUS_EVERY {
            let line = scenario.status(progress, last_status.elapsed());
            let at = started.elapsed().as_secs_f64();
            println!(
                "  {at:>6.1}s  {line}  sink #{} pid {}",
                sink.incarnation, sink.pid
            );
            last_status = Instant::now();
        }
        if !crashed && scenario.crash_due(progress) {
            let pid = sink.pid;
            sink.kill();
            println!("  {}", scenario.crashed(pid, progress)?);
            crashed = true;
            sink = Sink::spawn(&exe, &services.config_path, workdir, 2)?;
            scenario.restarted();
            continue;
        }
        if crashed && scenario.done(progress) {
            break None;
        }
        // Stop waiting when nothing moves any more (or the deadline passes) and let the check
        // say what never arrived.
        if progress != last_change.1 {
            last_change = (Instant::now(), progress);
        }
        let stalled_for = last_change.0.elapsed();
        if sink_started.elapsed() > timeout || (stalled_for > STALL && scenario.may_stall()) {
            break Some(scenario.stall_reason(progress, stalled_for));
        }
    };
    let elapsed = sink_started.elapsed();
    // One more scrape for the final figures, then a clean stop: SIGTERM runs the final cycle.
    let last_metrics = scrape(&scraper, &services.metrics_url).await;
    let clean_stop = sink.terminate(STOP_GRACE);
    Ok(Supervised {
        stalled,
        elapsed,
        last_metrics,
        clean_stop,
    })
}
