//! The two clients of the BigQuery service a process needs, built from the config: the Storage
//! Write API (appends, flushes, streams) and REST (tables, queries). The daemon and the tools
//! (`recover`) build them the same way.

use crate::bigquery::auth::Auth;
use crate::bigquery::rest_client::RestClient;
use crate::bigquery::write_client::{WriteClient, WriteClientOptions};
use crate::config::{Config, defaults};

/// The Storage Write API and REST clients for the configured endpoint and credentials.
pub(crate) fn clients(config: &Config) -> anyhow::Result<(WriteClient, RestClient)> {
    let auth = Auth::configured(&config.bigquery.credentials)?;
    let (grpc_endpoint, rest_endpoint) = match &config.bigquery.endpoint {
        Some(e) => (e.clone(), e.clone()),
        None => (
            defaults::GOOGLE_STORAGE_ENDPOINT.to_string(),
            defaults::GOOGLE_REST_ENDPOINT.to_string(),
        ),
    };
    let rest = RestClient::new(&rest_endpoint, auth.clone(), defaults::REST_TIMEOUT)?;
    let client = WriteClient::new(
        &WriteClientOptions {
            endpoint: grpc_endpoint,
            rpc_timeout: config.writer.response_timeout.0,
            connect_timeout: defaults::GRPC_CONNECT_TIMEOUT,
        },
        auth,
    )
    .map_err(anyhow::Error::from)?;
    Ok((client, rest))
}
