//! The daemon's side of BigQuery: table schemas (REST JSON shape), credentials, the Storage Write
//! API client and its error classification.

pub mod auth;
pub mod error;
pub mod rest_client;
pub mod table_schema;
pub mod write_client;
