//! Operations: Prometheus metrics, health and readiness probes, logging.

pub mod http;
pub mod metrics;
