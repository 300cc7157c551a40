//! `check -c config.yaml`: the config against the real services, before the first `run`
//! (docs/operations.md, `check`). Read-only: it joins no group, commits nothing, produces
//! nothing, creates and patches no table and writes no row. Each item prints `ok`, or `FAIL`
//! with what is wrong and how to fix it; the exit code is 0 only when no item fails.
//!
//! One job per file: `kafka.rs` (the brokers, the topics, the group and the dead-letter topic,
//! with the principal's permissions as the brokers report them), `dry_read.rs` (the newest
//! records of each partition), `registry.rs`, `bigquery.rs` (each table and its permissions)
//! and `dry_run.rs` (the records through the plans `run` would compile). What it cannot see
//! without writing is said as such (`not checked`).

mod bigquery;
mod dry_read;
mod dry_run;
mod kafka;
mod registry;

use rdkafka::error::KafkaError;

use crate::config::Config;

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub item: String,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok(String),
    /// What the check could not verify without writing, and why.
    NotChecked(String),
    Fail {
        what: String,
        fix: String,
    },
}

impl Finding {
    fn ok(item: impl Into<String>, detail: impl Into<String>) -> Self {
        Finding {
            item: item.into(),
            outcome: Outcome::Ok(detail.into()),
        }
    }
    fn not_checked(item: impl Into<String>, why: impl Into<String>) -> Self {
        Finding {
            item: item.into(),
            outcome: Outcome::NotChecked(why.into()),
        }
    }
    fn fail(item: impl Into<String>, what: impl Into<String>, fix: impl Into<String>) -> Self {
        Finding {
            item: item.into(),
            outcome: Outcome::Fail {
                what: what.into(),
                fix: fix.into(),
            },
        }
    }
    pub fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Fail { .. })
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.outcome {
            Outcome::Ok(detail) => write!(f, "ok           {}: {detail}", self.item),
            Outcome::NotChecked(why) => write!(f, "not checked  {}: {why}", self.item),
            Outcome::Fail { what, fix } => {
                write!(
                    f,
                    "FAIL         {}: {what}\n             fix: {fix}",
                    self.item
                )
            }
        }
    }
}

/// Runs every check; `records` is the dry run's newest records per partition.
pub fn run(config: &Config, records: i64) -> Vec<Finding> {
    let mut findings = Vec::new();
    let samples = kafka::check_kafka(config, records, &mut findings);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            findings.push(Finding::fail(
                "check",
                format!("cannot start the async runtime: {e}"),
                "none: a local resource limit",
            ));
            return findings;
        }
    };
    runtime.block_on(async {
        registry::check_registry(config, samples.keys(), &mut findings).await;
        bigquery::check_bigquery(config, &samples, &mut findings).await;
    });
    findings
}

fn redact(e: &KafkaError) -> String {
    format!("{:#}", crate::kafka::redact::redacted(e.clone()))
}
