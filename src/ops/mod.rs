//! Operations: Prometheus metrics, health and readiness probes, logging.
