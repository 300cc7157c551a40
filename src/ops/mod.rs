//! Operations: Prometheus metrics, health and readiness probes, logging.

pub mod http;
pub mod logging;
pub mod metrics;
pub mod panics;
