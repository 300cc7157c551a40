//! The operator's side: the metrics endpoint and the logs.

use std::net::SocketAddr;

use serde::Deserialize;

use super::defaults;

/// The Prometheus endpoint (`/metrics`, `/healthz`, `/readyz`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Listen address (default `0.0.0.0:9464`).
    pub listen: SocketAddr,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: defaults::METRICS_LISTEN
                .parse()
                .expect("the default listen address parses"),
        }
    }
}

/// Logging.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` (default, for humans) or `json` (for GKE / Cloud Logging).
    pub format: LogFormat,
    /// A `tracing` filter: a level or directives like `info,kafka_bigquery_sink::writer=debug`.
    /// Set, it wins over `RUST_LOG`; unset, `RUST_LOG` applies, else `info`.
    pub level: Option<String>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: defaults::LOG_FORMAT,
            level: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}
