//! The emulator's tests, one binary: the Storage Write API over gRPC (`grpc.rs`), the REST calls
//! (`rest.rs`, `rest_datasets.rs`, the SQL of query jobs `rest_sql.rs`; what Google's Java client does to its requests,
//! `rest_transport.rs`; both over `rest_support.rs`), what Google's client integration tests expect of it
//! (`google_client_findings.rs`), and rows the transcoder wrote, appended and read back as BigQuery shows them
//! (`transcoded_rows.rs`); `require_token.rs` the bearer-token check; `child.rs` runs the `kbq-emulator` binary for the restart tests.

mod child;
mod google_client_findings;
mod grpc;
mod require_token;
mod rest;
mod rest_datasets;
mod rest_sql;
mod rest_support;
mod rest_transport;
mod transcoded_rows;
