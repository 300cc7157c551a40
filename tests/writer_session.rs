//! The writer's AppendRows session against the emulator: offsets, acknowledgements in order, and
//! each failure the Storage Write API defines, injected through the emulator's fault control.
//! Every test checks the table afterwards: each row exactly once, none lost.

#[path = "support/emulator.rs"]
mod emulator_support;

use std::time::Duration;

use bytes::Bytes;
use emulator_support::{create_table, start};
use kafka_bigquery_sink::bigquery::auth::Auth;
use kafka_bigquery_sink::bigquery::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use kafka_bigquery_sink::bigquery::write_client::{StreamKind, WriteClient, WriteClientOptions};
use kafka_bigquery_sink::emulator::faults::{FaultAction, FaultRule, GrpcCode, Rpc};
use kafka_bigquery_sink::emulator::server::Emulator;
use kafka_bigquery_sink::emulator::store::TableRef;
use kafka_bigquery_sink::writer::append_session::{
    AppendSession, Batch, SessionError, SessionEvent, SessionLimits,
};
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto};

const TABLE: &str = "projects/p/datasets/d/tables/t";

fn table_ref() -> TableRef {
    TableRef::parse(TABLE).expect("table path")
}

fn descriptor() -> DescriptorProto {
    DescriptorProto {
        name: Some("Row".into()),
        field: vec![FieldDescriptorProto {
            name: Some("id".into()),
            number: Some(1),
            label: Some(Label::Optional as i32),
            r#type: Some(Type::Int64 as i32),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A proto2 row `{id}`; `None` leaves the REQUIRED column unset (a row error).
fn row(id: Option<u64>) -> Bytes {
    let mut out = Vec::new();
    if let Some(mut v) = id {
        out.push(0x08);
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
    }
    Bytes::from(out)
}

fn batch(ids: std::ops::Range<u64>) -> Batch<u64> {
    let mut b = Batch::default();
    for id in ids {
        b.push(row(Some(id)), id);
    }
    b
}

async fn setup() -> (Emulator, WriteClient, String) {
    let emulator = start().await;
    let schema = TableSchema {
        fields: vec![TableFieldSchema::new(
            "id",
            FieldType::Int64,
            Mode::Required,
        )],
    };
    create_table(&emulator.store, &table_ref(), schema);
    let options = WriteClientOptions {
        endpoint: format!("http://{}", emulator.addr),
        rpc_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
    };
    let client = WriteClient::new(&options, Auth::None).expect("client");
    let stream = client
        .create_write_stream(TABLE, StreamKind::Buffered)
        .await
        .expect("create stream")
        .name;
    (emulator, client, stream)
}

fn limits() -> SessionLimits {
    SessionLimits {
        response_timeout: Duration::from_secs(2),
        reconnect_backoff_min: Duration::from_millis(10),
        reconnect_backoff_max: Duration::from_millis(100),
        ..SessionLimits::default()
    }
}

/// Drives the session until nothing is in flight; returns the acknowledged (offset, ids) and the
/// rejected ids.
async fn settle(
    session: &mut AppendSession<u64>,
) -> Result<(Vec<(i64, Vec<u64>)>, Vec<u64>), SessionError> {
    let mut appended = Vec::new();
    let mut rejected = Vec::new();
    while let Some(event) = session.next_event().await? {
        match event {
            SessionEvent::Appended {
                first_offset, tags, ..
            } => appended.push((first_offset, tags)),
            SessionEvent::RowsRejected { rows, .. } => {
                rejected.extend(rows.into_iter().map(|(id, _, _)| id))
            }
        }
    }
    Ok((appended, rejected))
}

/// Flushes everything and returns the visible ids in order.
async fn visible_ids(
    emulator: &Emulator,
    client: &WriteClient,
    stream: &str,
    rows: i64,
) -> Vec<u64> {
    if rows > 0 {
        client.flush_rows(stream, rows - 1).await.expect("flush");
    }
    let page = emulator
        .store
        .read_visible_rows(&table_ref(), 0, 100_000)
        .expect("rows");
    let table = emulator.store.get_table(&table_ref()).expect("table");
    page.rows
        .iter()
        .map(|r| {
            let rendered = r.codec.render(&r.data, &table.schema);
            rendered["f"][0]["v"]
                .as_str()
                .expect("id")
                .parse()
                .expect("int")
        })
        .collect()
}

#[tokio::test]
async fn requests_are_acknowledged_in_order_at_their_first_row() {
    let (emulator, client, stream) = setup().await;
    let mut session = AppendSession::new(client.clone(), stream.clone(), descriptor(), 0, limits());
    session.submit(batch(0..3)).await.unwrap();
    session.submit(batch(3..4)).await.unwrap();
    session.submit(batch(4..9)).await.unwrap();
    let (appended, rejected) = settle(&mut session).await.unwrap();
    let offsets: Vec<i64> = appended.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, vec![0, 3, 4]);
    assert!(rejected.is_empty());
    assert_eq!(session.next_offset(), 9);
    assert_eq!(
        visible_ids(&emulator, &client, &stream, 9).await,
        (0..9).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_connection_dropped_after_the_append_is_resent_and_already_exists_counts_as_appended() {
    let (emulator, client, stream) = setup().await;
    // The second request is applied, then the connection drops before its response.
    emulator
        .faults
        .install(vec![FaultRule {
            rpc: Rpc::AppendRows,
            action: FaultAction::Drop { after: true },
            nth: Some(2),
            times: Some(1),
            probability: None,
            target: None,
        }])
        .unwrap();
    let mut session = AppendSession::new(client.clone(), stream.clone(), descriptor(), 0, limits());
    for i in 0..4u64 {
        session.submit(batch(i * 10..i * 10 + 10)).await.unwrap();
    }
    let (appended, _) = settle(&mut session).await.unwrap();
    assert_eq!(
        appended.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        vec![0, 10, 20, 30]
    );
    assert!(session.connections_opened >= 2, "the session reconnected");
    assert_eq!(
        visible_ids(&emulator, &client, &stream, 40).await,
        (0..40).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn an_in_stream_transient_error_resends_the_failed_request_and_everything_behind_it() {
    let (emulator, client, stream) = setup().await;
    emulator
        .faults
        .install(vec![FaultRule {
            rpc: Rpc::AppendRows,
            action: FaultAction::Fail {
                code: GrpcCode(tonic::Code::Unavailable),
                storage_code: None,
                message: Some("injected".into()),
                in_stream: true,
            },
            nth: Some(2),
            times: Some(1),
            probability: None,
            target: None,
        }])
        .unwrap();
    let mut session = AppendSession::new(client.clone(), stream.clone(), descriptor(), 0, limits());
    for i in 0..4u64 {
        session.submit(batch(i * 5..i * 5 + 5)).await.unwrap();
    }
    let (appended, _) = settle(&mut session).await.unwrap();
    let ids: Vec<u64> = appended.into_iter().flat_map(|(_, ids)| ids).collect();
    assert_eq!(ids, (0..20).collect::<Vec<_>>());
    assert_eq!(
        visible_ids(&emulator, &client, &stream, 20).await,
        (0..20).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn row_errors_take_out_only_the_bad_rows_and_renumber_the_rest() {
    let (emulator, client, stream) = setup().await;
    let mut session = AppendSession::new(client.clone(), stream.clone(), descriptor(), 0, limits());
    session.submit(batch(0..2)).await.unwrap();
    let mut with_bad = Batch::default();
    with_bad.push(row(Some(2)), 2);
    with_bad.push(row(None), 99);
    with_bad.push(row(Some(3)), 3);
    session.submit(with_bad).await.unwrap();
    session.submit(batch(4..6)).await.unwrap();
    let (appended, rejected) = settle(&mut session).await.unwrap();
    assert_eq!(rejected, vec![99]);
    assert_eq!(
        appended,
        vec![(0, vec![0, 1]), (2, vec![2, 3]), (4, vec![4, 5])],
        "the rows behind the rejected one moved up by one offset"
    );
    assert_eq!(
        visible_ids(&emulator, &client, &stream, 6).await,
        (0..6).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_request_whose_rows_are_all_rejected_disappears() {
    let (emulator, client, stream) = setup().await;
    let mut session = AppendSession::new(client.clone(), stream.clone(), descriptor(), 0, limits());
    let mut bad = Batch::default();
    bad.push(row(None), 100);
    session.submit(bad).await.unwrap();
    session.submit(batch(0..3)).await.unwrap();
    let mut emptied = false;
    let mut appended = Vec::new();
    while let Some(event) = session.next_event().await.unwrap() {
        match event {
            SessionEvent::RowsRejected {
                rows,
                request_emptied,
            } => {
                assert_eq!(rows.len(), 1);
                emptied = request_emptied;
            }
            SessionEvent::Appended {
                first_offset, tags, ..
            } => appended.push((first_offset, tags)),
        }
    }
    assert!(emptied);
    assert_eq!(appended, vec![(0, vec![0, 1, 2])]);
    assert_eq!(
        visible_ids(&emulator, &client, &stream, 3).await,
        vec![0, 1, 2]
    );
}

#[tokio::test]
async fn a_stream_finalized_behind_the_writer_makes_it_a_zombie() {
    let (emulator, client, stream) = setup().await;
    let mut session = AppendSession::new(client.clone(), stream.clone(), descriptor(), 0, limits());
    session.submit(batch(0..2)).await.unwrap();
    settle(&mut session).await.unwrap();
    emulator.store.finalize_now(&stream).unwrap();
    session.submit(batch(2..4)).await.unwrap();
    match settle(&mut session).await {
        Err(SessionError::Zombie { stream: s }) => assert_eq!(s, stream),
        other => panic!("expected a zombie, got {other:?}"),
    }
}

#[tokio::test]
async fn an_expired_stream_is_reported_lost() {
    let (emulator, client, stream) = setup().await;
    let mut session = AppendSession::new(client.clone(), stream.clone(), descriptor(), 0, limits());
    session.submit(batch(0..2)).await.unwrap();
    settle(&mut session).await.unwrap();
    emulator.store.expire_now(&stream).unwrap();
    let result = match session.submit(batch(2..4)).await {
        Err(e) => Err(e),
        Ok(()) => settle(&mut session).await.map(|_| ()),
    };
    match result {
        Err(SessionError::StreamLost { .. }) => {}
        other => panic!("expected a lost stream, got {other:?}"),
    }
}
