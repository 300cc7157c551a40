//! kafka-bigquery-sink: records from Kafka (Avro, Protobuf, JSON) into BigQuery through the
//! Storage Write API, exactly once. docs/architecture.md (#crates, #module-map) draws the layout and the rules
//! between modules (the checkpoint protocol is pure, the emulator is reached only from the CLI, and only in a build with the `dev-tools` feature).

pub mod backoff;
pub mod bigquery;
pub mod check;
pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod conformance;
mod deadline;
pub mod inspect;
pub mod kafka;
pub mod migrate;
pub mod ops;
pub mod pipeline;
#[cfg(feature = "dev-tools")]
pub mod quickstart;
pub mod recover;
pub mod registry;
pub mod tables;
pub mod writer;
