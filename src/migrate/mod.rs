//! `migrate`: another tool's config turned into this sink's, with a report of every property
//! (docs/operations.md#coming-from-kafka-connect). One source today: Kafka Connect's BigQuery
//! sink connector (`kafka_connect.rs`). The YAML it writes is checked as `validate` would before
//! it is written, so a config this command prints always loads.

pub mod draft;
pub mod kafka_connect;
pub mod report;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::{Config, validate};
use kafka_connect::{MigrateError, WorkerSettings};

/// `migrate` and its sources.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    #[command(subcommand)]
    pub source: MigrateSource,
}

#[derive(Debug, clap::Subcommand)]
pub enum MigrateSource {
    /// A Kafka Connect BigQuery sink connector config (JSON, flat or `{"name", "config"}`):
    /// writes this sink's YAML and reports every property as mapped, changed in meaning,
    /// dropped (not needed) or not translatable.
    KafkaConnect(KafkaConnectArgs),
}

#[derive(Debug, clap::Args)]
pub struct KafkaConnectArgs {
    /// The connector config, as `GET /connectors/NAME` or `…/config` returns it.
    pub connector: PathBuf,
    /// Write the YAML here (the report goes to stdout); without it the YAML goes to stdout and
    /// the report to stderr.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// The brokers (a Connect worker setting, not in the connector config); without it the YAML
    /// reads them from `${KAFKA_BOOTSTRAP_SERVERS}`.
    #[arg(long)]
    pub bootstrap_servers: Option<String>,
    /// The worker's `value.converter`, when the connector config does not set its own.
    #[arg(long)]
    pub value_converter: Option<String>,
    /// The worker's `value.converter.schema.registry.url`, when the connector config does not
    /// set its own.
    #[arg(long)]
    pub schema_registry_url: Option<String>,
}

pub fn main(args: MigrateArgs) -> ExitCode {
    match args.source {
        MigrateSource::KafkaConnect(a) => kafka_connect_main(a),
    }
}

/// The YAML and the report for a connector config file.
pub fn kafka_connect_file(
    path: &Path,
    worker: &WorkerSettings,
) -> Result<(String, report::Report), MigrateError> {
    let text = std::fs::read(path)
        .map_err(|e| MigrateError::NotAConfig(format!("cannot read {}: {e}", path.display())))?;
    let json: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| MigrateError::NotAConfig(format!("{} is not JSON: {e}", path.display())))?;
    let props = kafka_connect::properties(&json)?;
    let name = props.get("name").cloned().unwrap_or_default();
    let (draft, report) = kafka_connect::migrate(props, worker)?;
    let file = path
        .file_name()
        .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
    let header = format!(
        "Written by `kafka-bigquery-sink migrate kafka-connect {file}` from the connector \"{name}\".\nWhat became of each property (docs/operations.md#coming-from-kafka-connect):\n\n{report}\n"
    );
    let yaml = draft.render(&header);
    self_check(&yaml)?;
    Ok((yaml, report))
}

/// The written YAML loads and validates, with every `${VAR}` it reads set to a stand-in value:
/// a failure here is this command's bug, reported instead of a config that would not load.
fn self_check(yaml: &str) -> Result<(), MigrateError> {
    let mut env: HashMap<String, String> = std::env::vars().collect();
    for var in referenced_variables(yaml) {
        let stand_in = if var.contains("URL") {
            "https://stand-in.invalid"
        } else if var.contains("BOOTSTRAP") {
            "stand-in.invalid:9092"
        } else if var.contains("PROJECT") {
            "stand-in"
        } else {
            "stand_in"
        };
        env.entry(var).or_insert_with(|| stand_in.to_string());
    }
    let errors: Vec<String> = match Config::from_yaml(yaml, env) {
        Err(errs) => errs.iter().map(ToString::to_string).collect(),
        Ok(config) => match validate(&config) {
            Ok(()) => Vec::new(),
            Err(errs) => errs.iter().map(ToString::to_string).collect(),
        },
    };
    if errors.is_empty() {
        Ok(())
    } else {
        Err(MigrateError::Missing(format!(
            "the config written would not validate (please report this):\n  {}",
            errors.join("\n  ")
        )))
    }
}

/// The `NAME` of every `${NAME}` in `text`.
pub fn referenced_variables(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        let name = &after[..end];
        if !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !out.iter().any(|v| v == name)
        {
            out.push(name.to_string());
        }
        rest = &after[end..];
    }
    out
}

fn kafka_connect_main(args: KafkaConnectArgs) -> ExitCode {
    let worker = WorkerSettings {
        bootstrap_servers: args.bootstrap_servers,
        value_converter: args.value_converter,
        schema_registry_url: args.schema_registry_url,
    };
    let (yaml, report) = match kafka_connect_file(&args.connector, &worker) {
        Ok(out) => out,
        Err(e) => {
            eprintln!("error: {}: {e}", args.connector.display());
            return ExitCode::FAILURE;
        }
    };
    match &args.output {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &yaml) {
                eprintln!("error: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            println!("{report}");
            println!("wrote {}", path.display());
        }
        None => {
            print!("{yaml}");
            eprintln!("{report}");
        }
    }
    ExitCode::SUCCESS
}
