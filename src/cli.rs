//! The command line: one binary, one subcommand per job (docs/architecture.md#module-map). The
//! dev tools, `quickstart` and `emulator`, exist only with the `dev-tools` feature (the default;
//! the image is built without it).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "kafka-bigquery-sink",
    version,
    about = "Kafka → BigQuery Storage Write API, exactly once"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the sink daemon.
    Run {
        /// The YAML config file (docs/configuration.md; `${VAR}` is read from the environment).
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Run a local BigQuery Storage Write API + REST emulator (docs/emulator.md).
    #[cfg(feature = "dev-tools")]
    Emulator(kbq_emulator::cli::EmulatorArgs),
    /// The main job on embedded defaults: in-process Kafka, the emulator, generated data, a crash
    /// and recovery, and a verified exactly-once summary.
    #[cfg(feature = "dev-tools")]
    Quickstart(crate::quickstart::QuickstartArgs),
    /// Parse and validate a config file without any I/O.
    Validate {
        /// The YAML config file (docs/configuration.md; `${VAR}` is read from the environment).
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Check the config against the real services, read-only: Kafka (brokers, topics, group,
    /// dead-letter topic), the registry, BigQuery (tables, permissions), and a dry run of the
    /// newest records of each partition. Exits 0 only when every item passes.
    Check {
        /// The YAML config file (docs/configuration.md; `${VAR}` is read from the environment).
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
        /// Records of each partition the dry run reads (newest first).
        #[arg(long, default_value_t = 100)]
        records: i64,
    },
    /// Check every BigQuery behaviour the sink relies on against a project (or the emulator)
    /// with scratch tables, and print a table of them; exits 1 if any fails.
    Conformance(crate::conformance::ConformanceArgs),
    /// Turn another tool's config into this sink's YAML, with a report of every property:
    /// `migrate kafka-connect CONNECTOR.json` (docs/operations.md#coming-from-kafka-connect).
    Migrate(crate::migrate::MigrateArgs),
    /// Print per-partition checkpoint state, read from Kafka without joining the group.
    Inspect {
        /// The YAML config file (docs/configuration.md; `${VAR}` is read from the environment).
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Flush and finalize what checkpoints of unsubscribed topics still reference, then record
    /// them at rest (f = K). Run it with the group's consumers stopped.
    Recover {
        /// The YAML config file (docs/configuration.md; `${VAR}` is read from the environment).
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
        /// Every topic the group has checkpoints for, subscribed or not.
        #[arg(long, conflicts_with = "topic")]
        all: bool,
        /// Only this topic (repeatable), subscribed or not.
        #[arg(long)]
        topic: Vec<String>,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        #[cfg(feature = "dev-tools")]
        Command::Emulator(args) => kbq_emulator::cli::run(args),
        Command::Run { config } => run(&config),
        #[cfg(feature = "dev-tools")]
        Command::Quickstart(args) => crate::quickstart::main(args),
        Command::Validate { config } => validate(&config),
        Command::Check { config, records } => check(&config, records),
        Command::Conformance(args) => crate::conformance::main(args),
        Command::Migrate(args) => crate::migrate::main(args),
        Command::Inspect { config, json } => inspect(&config, json),
        Command::Recover { config, all, topic } => {
            let selection = if all {
                crate::recover::Selection::All
            } else if !topic.is_empty() {
                crate::recover::Selection::Topics(topic)
            } else {
                crate::recover::Selection::Unsubscribed
            };
            recover(&config, selection)
        }
    }
}

/// `validate -c`: parse and check the config without I/O beyond reading the file; every error
/// names its field.
fn validate(path: &std::path::Path) -> ExitCode {
    match crate::config::Config::load(path) {
        Ok(config) => {
            for warning in crate::config::warnings(&config) {
                eprintln!("warning: {warning}");
            }
            println!("config ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let errors = e.errors();
            eprintln!("{}: {} error(s)", path.display(), errors.len());
            for line in errors {
                eprintln!("  {line}");
            }
            ExitCode::from(1)
        }
    }
}

/// Loads a config for a one-shot command, printing its errors.
fn load_config(path: &std::path::Path) -> Option<crate::config::Config> {
    match crate::config::Config::load(path) {
        Ok(c) => Some(c),
        Err(e) => {
            let errors = e.errors();
            eprintln!("{}: {} error(s)", path.display(), errors.len());
            for line in errors {
                eprintln!("  {line}");
            }
            None
        }
    }
}

/// `check -c`: every item with ok, not checked, or FAIL and its fix; exits 0 only when none
/// fails.
fn check(path: &std::path::Path, records: i64) -> ExitCode {
    let Some(config) = load_config(path) else {
        return ExitCode::from(1);
    };
    let findings = crate::check::run(&config, records);
    for finding in &findings {
        println!("{finding}");
    }
    let failed = findings.iter().filter(|f| f.failed()).count();
    if failed == 0 {
        println!("check ok: {} item(s)", findings.len());
        ExitCode::SUCCESS
    } else {
        println!("check failed: {failed} of {} item(s)", findings.len());
        ExitCode::from(1)
    }
}

/// `inspect -c`: per-partition checkpoint state, read without joining the group.
fn inspect(path: &std::path::Path, json: bool) -> ExitCode {
    let Some(config) = load_config(path) else {
        return ExitCode::from(1);
    };
    match crate::inspect::run(&config, json) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `recover -c`: exits 0 when every selected checkpoint is at rest afterwards, 1 otherwise.
fn recover(path: &std::path::Path, selection: crate::recover::Selection) -> ExitCode {
    let Some(config) = load_config(path) else {
        return ExitCode::from(1);
    };
    match crate::recover::run(&config, selection) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `run -c`: the daemon. Exits 0 after a clean shutdown (SIGTERM/SIGINT), 1 on a config error
/// or a fatal failure.
fn run(path: &std::path::Path) -> ExitCode {
    let config = match crate::config::Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            let errors = e.errors();
            eprintln!("{}: {} error(s)", path.display(), errors.len());
            for line in errors {
                eprintln!("  {line}");
            }
            return ExitCode::from(1);
        }
    };
    crate::ops::logging::init(&config.log);
    for warning in crate::config::warnings(&config) {
        tracing::warn!(field = %warning.path, warning = %warning.message, "config warning");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let shutdown = tokio_util::sync::CancellationToken::new();
        let signal = shutdown.clone();
        tokio::spawn(async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot install the SIGTERM handler");
                        return;
                    }
                };
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM"),
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT"),
            }
            signal.cancel();
        });
        match crate::pipeline::run(config, shutdown).await {
            Ok(()) => {
                tracing::info!("stopped cleanly");
                ExitCode::SUCCESS
            }
            Err(error) => {
                tracing::error!(error = format!("{error:#}"), "sink failed");
                eprintln!("error: {error:#}");
                ExitCode::FAILURE
            }
        }
    })
}
