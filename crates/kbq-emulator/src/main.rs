//! `kbq-emulator`: the emulator crate's own entry point for its developers, so that its tests
//! (a restart on the journal) and the Go client tests run the emulator without building the
//! daemon. Users run `kafka-bigquery-sink emulator`, the documented command; both parse the same
//! flags (`kbq_emulator::cli`, docs/emulator.md).

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
