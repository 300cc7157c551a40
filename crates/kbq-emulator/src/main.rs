//! `kbq-emulator`: the emulator alone, for anyone testing a Storage Write API writer; the same
//! flags as `kafka-bigquery-sink emulator` (docs/emulator.md).

use clap::Parser;
use kbq_emulator::cli::EmulatorArgs;

/// A local BigQuery: the Storage Write API over gRPC and the REST calls a writer needs.
#[derive(Parser)]
#[command(name = "kbq-emulator", version)]
struct Cli {
    #[command(flatten)]
    args: EmulatorArgs,
}

fn main() -> std::process::ExitCode {
    kbq_emulator::cli::run(Cli::parse().args)
}
