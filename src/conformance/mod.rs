//! `conformance`: checks, against a target (Google's BigQuery, or the emulator), every behaviour
//! of BigQuery the sink relies on (docs/architecture.md#bigquery-facts, the recovery table,
//! docs/operations.md#before-the-first-deployment-conformance). The list of behaviours is
//! `kbq_core::bigquery_facts`; the probes that observe them are `streams.rs` (one BUFFERED stream through its
//! life) and `tables.rs` (schema changes, defaults, CDC, the marker, permissions). It creates its
//! scratch tables (and a scratch dataset unless one is named), deletes them whatever happened,
//! and prints one table; any failed fact exits 1.
//!
//! It goes through the sink's own clients (`bigquery/`), so what it observes is what the daemon
//! would see.

mod probe;
pub mod report;
mod rows;
mod streams;
mod tables;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::bigquery::auth::Auth;
use crate::bigquery::rest_client::RestClient;
use crate::bigquery::write_client::{WriteClient, WriteClientOptions};
use crate::config::defaults;

pub use report::Report;

/// Flags of `conformance`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConformanceArgs {
    /// The project whose BigQuery is checked (the scratch tables are made there).
    #[arg(long)]
    pub project: String,
    /// An existing dataset for the scratch tables; without it a scratch dataset is created and
    /// deleted.
    #[arg(long)]
    pub dataset: Option<String>,
    /// The scratch dataset's location (e.g. `EU`); BigQuery's default without it.
    #[arg(long)]
    pub location: Option<String>,
    /// A service-account key file; Application Default Credentials without it.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// One endpoint for gRPC and REST instead of Google's (the emulator:
    /// `http://127.0.0.1:9060`); an `http://` endpoint is called without credentials.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// How long to wait for a column added by `tables.patch` to reach the Write API, in seconds.
    #[arg(long, default_value_t = defaults::CONFORMANCE_SCHEMA_WAIT.as_secs())]
    pub schema_wait_secs: u64,
}

/// Where the probe runs.
#[derive(Debug, Clone)]
pub struct Target {
    pub project: String,
    pub dataset: Option<String>,
    pub location: Option<String>,
    pub schema_wait: Duration,
}

/// `conformance`: exits 0 when every fact holds, 1 otherwise.
pub fn main(args: ConformanceArgs) -> ExitCode {
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
    let clients = runtime.block_on(async { clients(&args) });
    let (write, rest) = match clients {
        Ok(c) => c,
        Err(error) => {
            eprintln!("error: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    let target = Target {
        project: args.project,
        dataset: args.dataset,
        location: args.location,
        schema_wait: Duration::from_secs(args.schema_wait_secs),
    };
    let report = runtime.block_on(run(&write, &rest, &target));
    print!("{}", report.table());
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Runs every probe against `target` and cleans up; Ctrl-C stops the probes and cleans up too.
pub async fn run(write: &WriteClient, rest: &RestClient, target: &Target) -> Report {
    let mut probe = probe::Probe::new(write, rest, target);
    let interrupted = tokio::select! {
        () = probe.run_all() => false,
        _ = tokio::signal::ctrl_c() => true,
    };
    if interrupted {
        eprintln!("interrupted: cleaning up");
    }
    probe.clean_up().await;
    probe.into_report()
}

/// The sink's two clients for the flags' endpoint and credentials. The write client may send a
/// request above BigQuery's limit, so that the limit itself can be observed.
fn clients(args: &ConformanceArgs) -> anyhow::Result<(WriteClient, RestClient)> {
    let auth = match (&args.key_file, &args.endpoint) {
        (Some(path), _) => Auth::service_account_key_file(path)?,
        (None, Some(endpoint)) if endpoint.starts_with("http://") => Auth::None,
        (None, _) => Auth::application_default()?,
    };
    let (grpc_endpoint, rest_endpoint) = match &args.endpoint {
        Some(e) => (e.clone(), e.clone()),
        None => (
            defaults::GOOGLE_STORAGE_ENDPOINT.to_string(),
            defaults::GOOGLE_REST_ENDPOINT.to_string(),
        ),
    };
    let rest = RestClient::new(&rest_endpoint, auth.clone(), defaults::REST_TIMEOUT)?;
    let write = WriteClient::new(
        &WriteClientOptions {
            endpoint: grpc_endpoint,
            rpc_timeout: defaults::CONFORMANCE_ANSWER_TIMEOUT,
            connect_timeout: defaults::GRPC_CONNECT_TIMEOUT,
        },
        auth,
    )?
    .with_request_limit(rows::OVERSIZED_REQUEST_BYTES + (1 << 20));
    Ok((write, rest))
}

#[cfg(test)]
mod tests {
    use kbq_core::bigquery_facts::ALL;

    #[test]
    fn operations_md_lists_every_fact_as_it_is_here() {
        let doc = include_str!("../../docs/operations.md");
        for f in ALL {
            let row = format!(
                "| `{}` | {} | {} | {} |",
                f.name,
                f.expected,
                f.basis.as_str(),
                f.backs
            );
            assert!(doc.contains(&row), "docs/operations.md lacks {row}");
        }
    }
}
