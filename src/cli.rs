//! The command line: one binary, one subcommand per job (DESIGN §1).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "kafka-bigquery-sink",
    version,
    about = "Kafka (Avro) → BigQuery Storage Write API, exactly once"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the sink daemon.
    Run {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Run a local BigQuery Storage Write API + REST emulator.
    Emulator(EmulatorArgs),
    /// The main job on embedded defaults: in-process Kafka, the emulator, generated data, a crash
    /// and recovery, and a verified exactly-once summary.
    Quickstart,
    /// Parse and validate a config file without any I/O.
    Validate {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Print per-partition checkpoint state, read from Kafka without joining the group.
    Inspect {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Flush and finalize what checkpoints of unsubscribed topics still reference.
    Recover {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
}

/// Flags of `emulator`.
#[derive(Debug, Clone, clap::Args)]
pub struct EmulatorArgs {
    /// Address for both gRPC (HTTP/2) and REST (HTTP/1.1); loopback by default.
    #[arg(long, default_value = "127.0.0.1:9060")]
    pub listen: SocketAddr,
    /// Keep state on disk here so that it survives a restart; in memory without it.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Emulator(_args) => not_yet("emulator"),
        Command::Run { .. } => not_yet("run"),
        Command::Quickstart => not_yet("quickstart"),
        Command::Validate { config } => validate(&config),
        Command::Inspect { .. } => not_yet("inspect"),
        Command::Recover { .. } => not_yet("recover"),
    }
}

/// `validate -c`: parse and check the config without I/O beyond reading the file; every error
/// names its field.
fn validate(path: &std::path::Path) -> ExitCode {
    match crate::config::Config::load(path) {
        Ok(_) => {
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

fn not_yet(what: &str) -> ExitCode {
    eprintln!("error: `{what}` is not yet implemented");
    ExitCode::from(2)
}
