//! The daemon's side of BigQuery: table schemas (REST JSON shape), credentials, the Storage Write
//! API client and its error classification.

mod append_codec;
pub mod auth;
mod clients;
pub mod error;
pub mod rest_client;
pub mod write_client;

/// The REST table schema types live in `kbq-core`: the transcoder and the emulator share them.
pub use kbq_core::table_schema;

pub(crate) use clients::clients;
