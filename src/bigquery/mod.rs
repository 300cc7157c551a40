//! The daemon's side of BigQuery: table schemas (REST JSON shape), credentials, the Storage Write
//! API client and its error classification.

mod append_codec;
pub mod auth;
mod clients;
pub mod credential_file;
pub mod error;
pub mod rest_client;
pub mod write_client;

pub(crate) use clients::clients;
