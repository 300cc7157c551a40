//! The daemon's tests, one binary: a test binary per file linked the daemon with rdkafka, tonic
//! and axum once each (docs/developing.md has the figures). Each module is a former test file
//! under its old name, so `cargo test --test e2e sink_e2e::` runs what `--test sink_e2e` ran.
//! The chaos, random-kill and scale tests are the other binary, `e2e_slow`, so that these run
//! alone in minutes.
//!
//! The modules share `tests/support/` and one process: one Kafka broker per binary (or the run's,
//! `KBQ_KAFKA_BOOTSTRAP`), and the tracing subscriber `kafka_consumer` installs for its log test,
//! which then also receives the logs of the in-process tests beside it (that test selects its
//! own lines by topic and partition).

#[path = "../support/mod.rs"]
mod support;

mod architecture_doc;
mod cdc_change;
mod cdc_config;
mod cdc_formats;
mod cdc_formats_e2e;
mod check;
mod config_validate;
mod conformance;
mod credentials;
mod debezium_pipeline;
mod deploy_manifests;
mod documents;
mod formats_evolution;
mod hostile_record;
mod image;
mod json_e2e;
mod kafka_consumer;
mod kafka_reconnect;
mod kafka_smoke;
mod key_plans;
mod memory_budget;
mod metrics_spec;
mod migrate;
mod prometheus;
mod protobuf_e2e;
mod quickstart;
mod registry_grace;
mod registry_protobuf;
mod schema_changes;
mod schema_evolution;
mod schema_too_complex;
mod sink_at_least_once;
mod sink_cdc;
mod sink_e2e;
mod sink_first_start;
mod sink_routing;
mod sink_transforms;
mod transcode_registry;
mod writer_session;
