//! `quickstart`: the main job on embedded defaults, in one command and with nothing installed.
//!
//! This process hosts everything the sink talks to — librdkafka's in-process mock Kafka cluster,
//! the BigQuery emulator and a small Schema Registry — all on loopback ports. It produces
//! generated orders ([`records`]) in Confluent framing while the sink runs as a *child process*
//! of the same binary (`run -c`), kills that child with SIGKILL part-way (a real crash: no final
//! checkpoint, appended rows left unflushed), starts a new one, waits until every record is
//! visible, stops the sink cleanly and then checks the table through the Kafka metadata columns:
//! every (partition, offset) exactly once. A child process rather than an in-process pipeline,
//! because only a killed process proves that nothing the crashed incarnation held in memory is
//! needed for exactly-once.
//!
//! Two modes, one room each: the default ([`orders`]: append-only orders, exactly once, checked
//! per Kafka offset) and `--cdc` ([`cdc`]: a Debezium change stream into a CDC table, checked
//! key by key against the source's state). Both are scenarios of one runner ([`runner`]), which
//! starts the services, supervises the sink through the crash and stops it.

mod cdc;
mod cdc_check;
mod cdc_source;
mod check;
mod orders;
mod production;
pub mod records;
pub mod registry;
mod runner;
mod sink;

use std::fs::File;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Mutex;

/// Flags of `quickstart`.
#[derive(Debug, Clone, clap::Args)]
pub struct QuickstartArgs {
    /// Records to produce.
    #[arg(long, default_value_t = 300_000)]
    pub records: u64,
    /// Partitions of the topic (one write stream each).
    #[arg(long, default_value_t = 8)]
    pub partitions: i32,
    /// Give up when the records are not all visible after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// Keep the working directory (sink config and logs) even when the run succeeds.
    #[arg(long)]
    pub keep: bool,
    /// Change data capture instead: a Debezium change stream into a CDC table, checked key by
    /// key against the source's state (docs/cdc.md).
    #[arg(long, conflicts_with = "records")]
    pub cdc: bool,
    /// With `--cdc`: change events to produce (tombstones not counted).
    #[arg(long, default_value_t = 40_000, requires = "cdc")]
    pub changes: u64,
    /// With `--cdc`: rows of the source table the changes touch.
    #[arg(long, default_value_t = 2_000, requires = "cdc")]
    pub keys: u64,
}

/// What a run saw, printed as its summary.
trait Report {
    fn print(&self);
    /// Whether the check passed and the last sink stopped cleanly.
    fn verified(&self) -> bool;
}

/// Runs the quickstart; exit code 0 only when exactly-once is verified.
pub fn main(args: QuickstartArgs) -> ExitCode {
    if args.records == 0 || args.partitions < 1 || args.changes == 0 || args.keys == 0 {
        eprintln!("error: --records, --partitions, --changes and --keys must be at least 1");
        return ExitCode::from(2);
    }
    let workdir = std::env::temp_dir().join(format!("kbq-quickstart-{}", std::process::id()));
    if let Err(error) = std::fs::create_dir_all(&workdir) {
        eprintln!("error: cannot create {}: {error}", workdir.display());
        return ExitCode::FAILURE;
    }
    init_logging(&workdir);
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
    let result: anyhow::Result<Box<dyn Report>> = runtime.block_on(async {
        if args.cdc {
            Ok(Box::new(cdc::run(&args, &workdir).await?) as Box<dyn Report>)
        } else {
            Ok(Box::new(orders::run(&args, &workdir).await?) as Box<dyn Report>)
        }
    });
    let ok = match &result {
        Ok(outcome) => {
            outcome.print();
            outcome.verified()
        }
        Err(error) => {
            println!("quickstart: FAILED: {error:#}");
            false
        }
    };
    if ok && !args.keep {
        let _ = std::fs::remove_dir_all(&workdir);
    } else {
        println!(
            "  sink config and logs kept in {} (sink-1.log, sink-2.log, quickstart.log)",
            workdir.display()
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// This process's own logs (emulator, mock cluster) go to a file: the terminal shows progress.
fn init_logging(workdir: &Path) {
    let Ok(file) = File::create(workdir.join("quickstart.log")) else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(false)
        .with_writer(Mutex::new(file))
        .try_init();
}
