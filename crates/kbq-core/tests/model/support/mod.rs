//! The harness both model tests run on: the replicas and their shell (`model.rs`), Kafka
//! (`kafka.rs`), BigQuery (`bigquery.rs`) and the seeds (`seeds.rs`).

pub mod bigquery;
pub mod kafka;
pub mod model;
pub mod seeds;
