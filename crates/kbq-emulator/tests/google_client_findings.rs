//! What Google's own client integration tests (the Go client's `storage/managedwriter`,
//! scripts/test.d/go-managedwriter.sh, and Java's) expect of the Storage Write API and the emulator
//! once did differently, each stated as our own test over a real tonic client on loopback: column
//! defaults and missing-value interpretations, TIMESTAMP from `google.protobuf.Timestamp`,
//! GetWriteStream's RANGE element type (docs/emulator.md).

use std::net::SocketAddr;
use std::time::Duration;

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1 as bq;
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::big_query_write_client::BigQueryWriteClient;
use kbq_core::table_schema::{FieldType, Mode, RangeElementType, TableFieldSchema, TableSchema};
use kbq_emulator::server::{Emulator, EmulatorConfig};
use kbq_emulator::store::{Dataset, Table, TableRef};
use tonic::transport::Channel;

const DEFAULT_STREAM: &str = "projects/p/datasets/d/tables/t/streams/_default";

async fn emulator_with(schema: TableSchema) -> (Emulator, BigQueryWriteClient<Channel>) {
    let mut config = EmulatorConfig::local();
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let emulator = Emulator::start(config).await.expect("emulator starts");
    emulator
        .store
        .insert_dataset(Dataset::new("p", "d"))
        .expect("dataset");
    emulator
        .store
        .insert_table(Table::new(TableRef::new("p", "d", "t"), schema))
        .expect("table");
    let channel = Channel::from_shared(format!("http://{}", emulator.addr))
        .expect("uri")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
    (emulator, BigQueryWriteClient::new(channel))
}

// ---- GetWriteStream ----

#[tokio::test]
async fn get_write_stream_full_names_the_element_type_of_a_range_column() {
    let mut range = TableFieldSchema::new("span", FieldType::parse("RANGE"), Mode::Nullable);
    range.range_element_type = Some(RangeElementType {
        element_type: FieldType::Timestamp,
    });
    let (_emulator, mut client) = emulator_with(TableSchema {
        fields: vec![range],
    })
    .await;
    let stream = client
        .get_write_stream(bq::GetWriteStreamRequest {
            name: DEFAULT_STREAM.into(),
            view: bq::WriteStreamView::Full as i32,
        })
        .await
        .expect("GetWriteStream")
        .into_inner();
    let span = &stream.table_schema.expect("FULL has the schema").fields[0];
    assert_eq!(span.r#type, bq::table_field_schema::Type::Range as i32);
    assert_eq!(
        span.range_element_type.as_ref().map(|e| e.r#type),
        Some(bq::table_field_schema::Type::Timestamp as i32)
    );
}
