//! A local BigQuery: the Storage Write API over gRPC and the REST calls the daemon and users need.
//! Reached only from `main` and `quickstart`; it shares nothing with the daemon but Google's wire
//! types. What it serves: docs/emulator.md; the BigQuery behaviour the sink relies on:
//! docs/architecture.md#bigquery-facts.

pub mod bearer;
pub mod cdc;
pub mod cli;
pub mod faults;
pub mod grpc;
pub mod persist;
pub mod quota;
pub mod rest;
pub mod rows;
pub mod server;
pub mod status;
pub mod store;
#[cfg(feature = "testsuite")]
pub mod testsuite;
