//! The emulator's command line, shared by its own binary (`kbq-emulator`) and the daemon's
//! `kafka-bigquery-sink emulator` subcommand.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// Flags of `emulator`.
#[derive(Debug, Clone, clap::Args)]
pub struct EmulatorArgs {
    /// Address for both gRPC (HTTP/2) and REST (HTTP/1.1); loopback by default.
    #[arg(long, default_value = "127.0.0.1:9060")]
    pub listen: SocketAddr,
    /// Keep state on disk here so that it survives a restart; in memory without it.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Close an AppendRows call after this many seconds without a request (ABORTED).
    #[arg(long, default_value_t = 600)]
    pub idle_timeout_secs: u64,
    /// Largest AppendRows request accepted, in bytes.
    #[arg(long, default_value_t = 20 * 1024 * 1024)]
    pub max_request_bytes: usize,
    /// Idle lifetime of a COMMITTED stream, in seconds (then NOT_FOUND).
    #[arg(long, default_value_t = 3 * 24 * 3600)]
    pub committed_stream_ttl_secs: u64,
    /// Idle lifetime of a BUFFERED stream, in seconds.
    #[arg(long, default_value_t = 7 * 24 * 3600)]
    pub buffered_stream_ttl_secs: u64,
    /// Idle lifetime of a PENDING stream, in seconds (undocumented by Google; BUFFERED's value).
    #[arg(long, default_value_t = 7 * 24 * 3600)]
    pub pending_stream_ttl_secs: u64,
    /// Fault rules (YAML or JSON) installed at start; see docs/emulator.md, "Fault injection".
    #[arg(long)]
    pub faults: Option<PathBuf>,
    /// Keep only these top-level columns (comma-separated) of each appended row; every row is
    /// still validated whole, and the other columns read as NULL. For benchmarks: the emulator
    /// otherwise holds every row's bytes in memory for its lifetime.
    #[arg(long, value_delimiter = ',', conflicts_with = "data_dir")]
    pub keep_columns: Option<Vec<String>>,
    /// Quota mode: enforce BigQuery's per-project limits of a multi-region (`US`, `EU`) or of a
    /// single region, answering RESOURCE_EXHAUSTED as BigQuery does. Off by default.
    #[arg(long, value_enum)]
    pub quota: Option<QuotaLocation>,
    /// Quota mode: concurrent AppendRows connections (instead of the location's figure).
    #[arg(long, requires = "quota")]
    pub quota_connections: Option<u64>,
    /// Quota mode: CreateWriteStream calls per hour.
    #[arg(long, requires = "quota")]
    pub quota_create_streams_per_hour: Option<u64>,
    /// Quota mode: AppendRows request bytes per second.
    #[arg(long, requires = "quota")]
    pub quota_append_bytes_per_second: Option<u64>,
    /// Quota mode: concurrent calls per HTTP/2 connection (Google's front end: 100).
    #[arg(long, requires = "quota")]
    pub quota_streams_per_connection: Option<u32>,
    /// Refuse every BigQuery call (gRPC and REST; not the `/emulator/v1` admin routes) that does
    /// not carry `Authorization: Bearer TOKEN`, with UNAUTHENTICATED as BigQuery does. Off by
    /// default: any credentials, and none, are accepted.
    #[arg(long, value_name = "TOKEN")]
    pub require_token: Option<String>,
}

/// Whose limits `--quota` enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QuotaLocation {
    MultiRegion,
    Regional,
}

impl EmulatorArgs {
    pub fn config(&self) -> crate::server::EmulatorConfig {
        use std::time::Duration;
        crate::server::EmulatorConfig {
            listen: self.listen,
            data_dir: self.data_dir.clone(),
            write: crate::grpc::WriteSettings {
                idle_timeout: Duration::from_secs(self.idle_timeout_secs),
                max_request_bytes: self.max_request_bytes,
                keep_columns: self.keep_columns.clone().map(Into::into),
                quota: self.quota_settings(),
            },
            store: crate::store::StoreConfig {
                committed_ttl: Duration::from_secs(self.committed_stream_ttl_secs),
                buffered_ttl: Duration::from_secs(self.buffered_stream_ttl_secs),
                pending_ttl: Duration::from_secs(self.pending_stream_ttl_secs),
            },
            faults_file: self.faults.clone(),
            require_token: self.require_token.clone(),
        }
    }
}

impl EmulatorArgs {
    fn quota_settings(&self) -> Option<crate::quota::QuotaSettings> {
        use crate::quota::QuotaSettings;
        let mut q = match self.quota? {
            QuotaLocation::MultiRegion => QuotaSettings::multi_region(),
            QuotaLocation::Regional => QuotaSettings::regional(),
        };
        q.connections = self.quota_connections.unwrap_or(q.connections);
        q.create_streams_per_hour = self
            .quota_create_streams_per_hour
            .unwrap_or(q.create_streams_per_hour);
        q.append_bytes_per_second = self
            .quota_append_bytes_per_second
            .unwrap_or(q.append_bytes_per_second);
        q.streams_per_connection = self
            .quota_streams_per_connection
            .unwrap_or(q.streams_per_connection);
        Some(q)
    }
}

/// Serve until SIGINT/SIGTERM. The address line is printed (and flushed) once the
/// port is bound, so scripts can wait for it.
pub fn run(args: EmulatorArgs) -> ExitCode {
    use std::io::Write;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
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
        let emulator = match crate::server::Emulator::start(args.config()).await {
            Ok(e) => e,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        };
        println!("emulator listening on {}", emulator.addr);
        let _ = std::io::stdout().flush();
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate => {}
        }
        emulator.stop();
        ExitCode::SUCCESS
    })
}
