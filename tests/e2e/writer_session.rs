//! The writer's AppendRows session against the emulator: offsets, acknowledgements in order, and
//! each failure the Storage Write API defines, injected through the emulator's fault control.
//! Every test checks the table afterwards: each row exactly once, none lost.

use std::time::Duration;

use bytes::Bytes;
use kafka_bigquery_sink::bigquery::auth::Auth;
use kafka_bigquery_sink::bigquery::write_client::{StreamKind, WriteClient, WriteClientOptions};
use kafka_bigquery_sink::writer::append_session::{
    AppendSession, Batch, SessionError, SessionEvent, SessionLimits,
};
use kbq_core::offsets::{RowCount, RowOffset};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use kbq_emulator::faults::{FaultAction, FaultRule, GrpcCode, Rpc};
use kbq_emulator::server::Emulator;
use kbq_emulator::store::TableRef;
use kbq_emulator::testsuite::{create_table, start};
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

/// Table `t (id INT64 REQUIRED)`, the rows of these tests.
fn id_table() -> TableSchema {
    TableSchema {
        fields: vec![TableFieldSchema::new(
            "id",
            FieldType::Int64,
            Mode::Required,
        )],
    }
}

/// A write client of `emulator`.
fn client_of(emulator: &Emulator) -> WriteClient {
    let options = WriteClientOptions {
        endpoint: format!("http://{}", emulator.addr),
        rpc_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
    };
    WriteClient::new(&options, Auth::None).expect("client")
}

/// Every session test's start: a fresh emulator with table `t`, a client, and one BUFFERED
/// stream of `t`.
struct Fixture {
    emulator: Emulator,
    client: WriteClient,
    stream: String,
}

impl Fixture {
    async fn new() -> Self {
        let emulator = start().await;
        create_table(&emulator.store, &table_ref(), id_table());
        let client = client_of(&emulator);
        let stream = client
            .create_write_stream(TABLE, StreamKind::Buffered)
            .await
            .expect("create stream")
            .name;
        Fixture {
            emulator,
            client,
            stream,
        }
    }

    /// A session on the fixture's stream, from its first row.
    fn session(&self) -> AppendSession<u64> {
        AppendSession::new(
            self.client.clone(),
            self.stream.clone(),
            descriptor(),
            RowCount(0),
            limits(),
        )
    }

    fn inject(&self, rules: Vec<FaultRule>) {
        self.emulator.faults.install(rules).expect("fault rules");
    }

    /// Flushes the stream through `rows` rows (none: nothing to flush) and returns the visible
    /// ids of the table in order.
    async fn visible_ids(&self, rows: i64) -> Vec<u64> {
        if rows > 0 {
            self.client
                .flush_rows(&self.stream, RowOffset(rows - 1))
                .await
                .expect("flush");
        }
        let store = &self.emulator.store;
        let page = store
            .read_visible_rows(&table_ref(), 0, 100_000)
            .expect("rows");
        let table = store.get_table(&table_ref()).expect("table");
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
}

/// The `nth` AppendRows call is applied, then its connection drops before the answer.
fn dropped_answer(nth: u64) -> FaultRule {
    FaultRule {
        rpc: Rpc::AppendRows,
        action: FaultAction::Drop { after: true },
        nth: Some(nth),
        times: Some(1),
        probability: None,
        target: None,
    }
}

/// The `nth` AppendRows call fails inside the open stream with UNAVAILABLE.
fn unavailable_in_stream(nth: u64) -> FaultRule {
    FaultRule {
        rpc: Rpc::AppendRows,
        action: FaultAction::Fail {
            code: GrpcCode(tonic::Code::Unavailable),
            storage_code: None,
            message: Some("injected".into()),
            in_stream: true,
        },
        nth: Some(nth),
        times: Some(1),
        probability: None,
        target: None,
    }
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
) -> Result<(Vec<(RowOffset, Vec<u64>)>, Vec<u64>), SessionError> {
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

#[tokio::test]
async fn requests_are_acknowledged_in_order_at_their_first_row() {
    let f = Fixture::new().await;
    let mut session = f.session();
    session.submit(batch(0..3)).await.unwrap();
    session.submit(batch(3..4)).await.unwrap();
    session.submit(batch(4..9)).await.unwrap();
    let (appended, rejected) = settle(&mut session).await.unwrap();
    let offsets: Vec<RowOffset> = appended.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, vec![RowOffset(0), RowOffset(3), RowOffset(4)]);
    assert!(rejected.is_empty());
    assert_eq!(session.next_offset(), RowCount(9));
    assert_eq!(f.visible_ids(9).await, (0..9).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_connection_dropped_after_the_append_is_resent_and_already_exists_counts_as_appended() {
    let f = Fixture::new().await;
    // The second request is applied, then the connection drops before its response.
    f.inject(vec![dropped_answer(2)]);
    let mut session = f.session();
    for i in 0..4u64 {
        session.submit(batch(i * 10..i * 10 + 10)).await.unwrap();
    }
    let (appended, _) = settle(&mut session).await.unwrap();
    assert_eq!(
        appended.iter().map(|(o, _)| o.0).collect::<Vec<_>>(),
        vec![0, 10, 20, 30]
    );
    assert!(session.connections_opened >= 2, "the session reconnected");
    assert_eq!(f.visible_ids(40).await, (0..40).collect::<Vec<_>>());
}

/// The resend of a request whose first send was applied meets an in-stream transient
/// error, then ALREADY_EXISTS. The session must still know the request may have been applied:
/// `Appended`, not an offset conflict that would abandon a live stream.
#[tokio::test]
async fn a_resend_after_a_dropped_answer_stays_uncertain_through_an_in_stream_transient_error() {
    let f = Fixture::new().await;
    let mut session = f.session();
    session.submit(batch(0..10)).await.unwrap();
    settle(&mut session).await.unwrap();
    // One request in flight, so the calls count deterministically: its first send is applied
    // and its answer lost, its resend fails in-stream with UNAVAILABLE, the next resend meets
    // ALREADY_EXISTS.
    f.inject(vec![dropped_answer(1), unavailable_in_stream(2)]);
    session.submit(batch(10..20)).await.unwrap();
    let (appended, _) = settle(&mut session)
        .await
        .expect("appended, not a conflict");
    assert_eq!(
        appended,
        vec![(RowOffset(10), (10..20).collect::<Vec<_>>())]
    );
    let fired: Vec<u64> = f.emulator.faults.list().iter().map(|r| r.fired).collect();
    assert_eq!(fired, vec![1, 1], "both faults acted");
    session.submit(batch(20..30)).await.unwrap();
    let (appended, _) = settle(&mut session).await.unwrap();
    assert_eq!(
        appended,
        vec![(RowOffset(20), (20..30).collect::<Vec<_>>())]
    );
    assert_eq!(f.visible_ids(30).await, (0..30).collect::<Vec<_>>());
}

#[tokio::test]
async fn an_in_stream_transient_error_resends_the_failed_request_and_everything_behind_it() {
    let f = Fixture::new().await;
    f.inject(vec![unavailable_in_stream(2)]);
    let mut session = f.session();
    for i in 0..4u64 {
        session.submit(batch(i * 5..i * 5 + 5)).await.unwrap();
    }
    let (appended, _) = settle(&mut session).await.unwrap();
    let ids: Vec<u64> = appended.into_iter().flat_map(|(_, ids)| ids).collect();
    assert_eq!(ids, (0..20).collect::<Vec<_>>());
    assert_eq!(f.visible_ids(20).await, (0..20).collect::<Vec<_>>());
}

#[tokio::test]
async fn row_errors_take_out_only_the_bad_rows_and_renumber_the_rest() {
    let f = Fixture::new().await;
    let mut session = f.session();
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
        vec![
            (RowOffset(0), vec![0, 1]),
            (RowOffset(2), vec![2, 3]),
            (RowOffset(4), vec![4, 5])
        ],
        "the rows behind the rejected one moved up by one offset"
    );
    assert_eq!(f.visible_ids(6).await, (0..6).collect::<Vec<_>>());
}

/// At-least-once mode appends to `_default` without offsets, where the requests behind a failed
/// one are independent and may be appended. A row error must not read as an offset conflict
/// ("write stream offsets conflict with ours" on `_default`, then a restart from an old offset), and what was appended must not be sent again.
#[tokio::test]
async fn on_the_default_stream_a_row_error_keeps_the_requests_appended_behind_it() {
    let f = Fixture::new().await;
    let default = format!("{TABLE}/streams/_default");
    let mut session = AppendSession::new(
        f.client.clone(),
        default,
        descriptor(),
        RowCount(0),
        limits(),
    )
    .without_offsets();
    session.submit(batch(0..2)).await.unwrap();
    let mut with_bad = Batch::default();
    with_bad.push(row(Some(2)), 2);
    with_bad.push(row(None), 99);
    with_bad.push(row(Some(3)), 3);
    session.submit(with_bad).await.unwrap();
    session.submit(batch(4..6)).await.unwrap();
    session.submit(batch(6..8)).await.unwrap();
    let (appended, rejected) = settle(&mut session).await.expect("no offset conflict");
    assert_eq!(rejected, vec![99]);
    let tags: Vec<Vec<u64>> = appended.into_iter().map(|(_, tags)| tags).collect();
    assert_eq!(
        tags,
        vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]],
        "acknowledged in the order the requests were submitted"
    );
    let mut visible = f.visible_ids(0).await;
    visible.sort_unstable();
    assert_eq!(visible, (0..8).collect::<Vec<_>>(), "each row exactly once");
}

#[tokio::test]
async fn a_request_whose_rows_are_all_rejected_disappears() {
    let f = Fixture::new().await;
    let mut session = f.session();
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
    assert_eq!(appended, vec![(RowOffset(0), vec![0, 1, 2])]);
    assert_eq!(f.visible_ids(3).await, vec![0, 1, 2]);
}

#[tokio::test]
async fn a_stream_finalized_behind_the_writer_makes_it_a_zombie() {
    let f = Fixture::new().await;
    let mut session = f.session();
    session.submit(batch(0..2)).await.unwrap();
    settle(&mut session).await.unwrap();
    f.emulator.store.finalize_now(&f.stream).unwrap();
    session.submit(batch(2..4)).await.unwrap();
    match settle(&mut session).await {
        Err(SessionError::Zombie { stream: s }) => assert_eq!(s, f.stream),
        other => panic!("expected a zombie, got {other:?}"),
    }
}

#[tokio::test]
async fn an_expired_stream_is_reported_lost() {
    let f = Fixture::new().await;
    let mut session = f.session();
    session.submit(batch(0..2)).await.unwrap();
    settle(&mut session).await.unwrap();
    f.emulator.store.expire_now(&f.stream).unwrap();
    let result = match session.submit(batch(2..4)).await {
        Err(e) => Err(e),
        Ok(()) => settle(&mut session).await.map(|_| ()),
    };
    match result {
        Err(SessionError::StreamLost { .. }) => {}
        other => panic!("expected a lost stream, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The partition writer on top of the session.

const ORDER_AVSC: &str = r#"{"type":"record","name":"Order","fields":[
  {"name":"id","type":"long"},{"name":"customer","type":"string"}]}"#;

/// Avro binary of `{id, customer}` (zig-zag varints, length-prefixed string).
fn order(id: i64, customer: &str) -> Vec<u8> {
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    let mut out = Vec::new();
    varint(((id << 1) ^ (id >> 63)) as u64, &mut out);
    let len = customer.len() as i64;
    varint(((len << 1) ^ (len >> 63)) as u64, &mut out);
    out.extend_from_slice(customer.as_bytes());
    out
}

/// A partition writer on table `orders (id INT64, customer STRING(20))` of a fresh emulator,
/// skipping bad records. Returns what the test drives it with.
async fn order_writer(
    from: i64,
) -> (
    Emulator,
    tokio::sync::mpsc::Sender<kafka_bigquery_sink::kafka::consumer::Record>,
    tokio::sync::mpsc::UnboundedReceiver<
        kafka_bigquery_sink::writer::partition_writer::WriterEvent,
    >,
    kafka_bigquery_sink::writer::partition_writer::WriterHandle,
) {
    use kafka_bigquery_sink::ops::metrics::Metrics;
    use kafka_bigquery_sink::tables::plans::FixedPlan;
    use kafka_bigquery_sink::writer::partition_writer::{self as pw, WriterSettings, WriterShared};
    use kafka_bigquery_sink::writer::plan_source::WriterRoute;
    use kafka_bigquery_sink::writer::stream_quota::StreamCreationLimiter;
    use kbq_core::bad_record::BadRecordPolicy;
    use kbq_core::model::TopicPartition;
    use kbq_core::offsets::{Incarnation, NextOffset};
    use kbq_transcode::{AvroSchema, PlanOptions};
    use std::sync::Arc;

    let emulator = start().await;
    let table = "projects/p/datasets/d/tables/orders";
    let schema: TableSchema = serde_json::from_value(serde_json::json!({"fields": [
        {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "customer", "type": "STRING", "mode": "REQUIRED", "maxLength": "20"}
    ]}))
    .expect("table schema");
    create_table(
        &emulator.store,
        &TableRef::parse(table).expect("table path"),
        schema.clone(),
    );
    let client = client_of(&emulator);
    let plan = FixedPlan::new(
        &AvroSchema::parse(ORDER_AVSC).expect("avsc"),
        &schema,
        &PlanOptions::default(),
    )
    .expect("plan");
    let shared = Arc::new(WriterShared {
        client,
        dead_letter: None,
        metrics: Arc::new(Metrics::new()),
        stream_creation: Arc::new(StreamCreationLimiter::new(64, 1.0)),
        settings: WriterSettings {
            max_request_bytes: 8 << 20,
            max_rows_per_request: 50_000,
            linger: Duration::from_millis(50),
            session: limits(),
            on_bad_record: BadRecordPolicy::Skip,
            lookup_backoff: Duration::from_millis(100),
            default_stream: false,
        },
    });
    let route = Arc::new(WriterRoute {
        table: table.into(),
        table_label: "orders".into(),
        plans: Arc::new(plan),
        cdc: None,
        filter: kbq_transcode::transforms::Filter::default(),
        keys: None,
    });
    let (records_tx, records_rx) = tokio::sync::mpsc::channel(1024);
    let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
    let handle = pw::spawn(
        shared,
        route,
        TopicPartition::new("orders", 0),
        Incarnation(1),
        NextOffset(from),
        records_rx,
        events_tx,
    );
    (emulator, records_tx, events_rx, handle)
}

fn kafka_record(offset: i64, value: &[u8]) -> kafka_bigquery_sink::kafka::consumer::Record {
    let mut arena = bytes::BytesMut::new();
    kafka_bigquery_sink::kafka::consumer::Record::new(
        kbq_core::offsets::KafkaOffset(offset),
        None,
        None,
        Some(value),
        Vec::new(),
        &mut arena,
    )
}

/// A row BigQuery rejects in the middle of a request is dead-lettered (skipped here)
/// and must not lower the request's Kafka offset: the acknowledgement of the request covers
/// every record of it, 21, not 11.
#[tokio::test]
async fn a_row_rejected_mid_request_does_not_lower_the_acknowledged_offset() {
    use kafka_bigquery_sink::writer::partition_writer::WriterEvent;
    let (_emulator, records, mut events, mut handle) = order_writer(0).await;
    // One burst, one request: 10 good, one too long for STRING(20), 10 good.
    let burst: Vec<_> = (0..21)
        .map(|o| {
            let customer = if o == 10 { "x".repeat(30) } else { "c".into() };
            kafka_record(o, &order(o, &customer))
        })
        .collect();
    for r in burst {
        records.send(r).await.expect("writer alive");
    }
    let mut last = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while last.as_ref().is_none_or(|(rows, _)| *rows < 20) {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("the writer acknowledges the 20 good rows")
            .expect("events");
        match event {
            WriterEvent::Acknowledged { ack, .. } => last = Some((ack.rows().0, ack.next().0)),
            other => panic!("unexpected {other:?}"),
        }
    }
    // Idle for a while: no later acknowledgement may move it (back).
    handle.stop(Duration::from_secs(5));
    while let Some(event) = events.recv().await {
        match event {
            WriterEvent::Acknowledged { ack, .. } => last = Some((ack.rows().0, ack.next().0)),
            WriterEvent::Stopped { .. } => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        last,
        Some((20, 21)),
        "(rows, next) of the last acknowledgement"
    );
}

/// The writer's guard: a record below the position the writer starts from means the
/// consumer did not seek where the checkpoint says; the writer fails closed instead of appending
/// rows the checkpoint already covers.
#[tokio::test]
async fn a_writer_refuses_a_first_record_below_its_start_offset() {
    use kafka_bigquery_sink::writer::partition_writer::WriterEvent;
    let (_emulator, records, mut events, _handle) = order_writer(5).await;
    records
        .send(kafka_record(3, &order(3, "c")))
        .await
        .expect("writer alive");
    let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
        .await
        .expect("the writer answers")
        .expect("events");
    match event {
        WriterEvent::Failed { reason, .. } => {
            assert!(
                reason.contains("offset 3") && reason.contains("5"),
                "{reason}"
            )
        }
        other => panic!("expected a failed writer, got {other:?}"),
    }
}

/// Google's front end allows 100 concurrent calls per HTTP/2 connection and holds back the
/// others. One AppendRows call per partition on one connection left every partition beyond the
/// hundredth waiting for ever (found by tests/e2e_slow/sink_scale.rs): the client spreads its calls over
/// several connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_append_calls_than_one_connection_carries_are_all_answered() {
    use kbq_emulator::quota::QuotaSettings;
    use kbq_emulator::server::EmulatorConfig;
    const SESSIONS: usize = 150;
    let mut config = EmulatorConfig::local();
    config.write.quota = Some(QuotaSettings::multi_region());
    let emulator = kbq_emulator::testsuite::start_with(config).await;
    create_table(&emulator.store, &table_ref(), id_table());
    let client = client_of(&emulator);
    let mut sessions = Vec::new();
    let all = async {
        for i in 0..SESSIONS as u64 {
            let stream = client
                .create_write_stream(TABLE, StreamKind::Buffered)
                .await
                .expect("create stream")
                .name;
            let mut session =
                AppendSession::new(client.clone(), stream, descriptor(), RowCount(0), limits());
            session.submit(batch(i..i + 1)).await.expect("submit");
            let (appended, _) = settle(&mut session).await.expect("appended");
            assert_eq!(appended, vec![(RowOffset(0), vec![i])]);
            // Kept open, as a partition's writer keeps its call.
            sessions.push(session);
        }
    };
    let outcome = tokio::time::timeout(Duration::from_secs(60), all).await;
    assert!(
        outcome.is_ok(),
        "only {} of {SESSIONS} calls were answered; open calls per connection: {:?}",
        sessions.len(),
        client.append_calls_per_connection()
    );
    let per_connection = client.append_calls_per_connection();
    assert_eq!(per_connection.iter().sum::<usize>(), SESSIONS);
    assert!(
        per_connection.iter().all(|&n| n <= 100),
        "{per_connection:?}"
    );
    assert_eq!(emulator.quotas.usage().connections_open, SESSIONS as u64);
}
