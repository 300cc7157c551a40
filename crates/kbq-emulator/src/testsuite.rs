//! The emulator as a test fixture (the `testsuite` feature, for other crates' tests, as a
//! dev-dependency): in-process on a free loopback port, a Storage Write API client for it, and a
//! table made in its store. Tests reach it only through loopback. Not part of the emulator's
//! binary or of a build without the feature.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::big_query_write_client::BigQueryWriteClient;
use kbq_core::table_schema::TableSchema;
use tonic::transport::Channel;

use crate::server::{Emulator, EmulatorConfig};
use crate::store::{Dataset, Store, Table, TableRef};

/// Starts an in-memory emulator on a free loopback port.
pub async fn start() -> Emulator {
    start_with(EmulatorConfig::local()).await
}

/// Starts an emulator with a custom configuration (the listen address is forced to loopback:0).
pub async fn start_with(mut config: EmulatorConfig) -> Emulator {
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    Emulator::start(config).await.expect("emulator starts")
}

/// A Storage Write API client with message limits large enough for big appends.
pub async fn client(addr: SocketAddr) -> BigQueryWriteClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect to the emulator");
    BigQueryWriteClient::new(channel)
        .max_decoding_message_size(256 * 1024 * 1024)
        .max_encoding_message_size(256 * 1024 * 1024)
}

/// Creates dataset `project.dataset` (if missing) and a table with `schema`.
pub fn create_table(store: &Arc<Store>, table: &TableRef, schema: TableSchema) {
    if store.get_dataset(&table.project, &table.dataset).is_none() {
        store
            .insert_dataset(Dataset::new(&table.project, &table.dataset))
            .expect("dataset");
    }
    store
        .insert_table(Table::new(table.clone(), schema))
        .expect("table");
}
