//! The emulator's tests, one binary: the Storage Write API over gRPC (`grpc.rs`), the REST calls
//! (`rest.rs`), and rows the transcoder wrote, appended and read back as BigQuery shows them
//! (`transcoded_rows.rs`); `child.rs` runs the `kbq-emulator` binary for the restart tests.

mod child;
mod grpc;
mod rest;
mod transcoded_rows;
