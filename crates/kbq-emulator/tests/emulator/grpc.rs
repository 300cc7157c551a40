//! The emulator's Storage Write API, driven through a real tonic client over loopback. Each test
//! states one behaviour of BigQuery that the emulator must copy
//! (docs/architecture.md#bigquery-facts). Where the behaviour is a fact of the sink's one list
//! (`kbq_core::bigquery_facts`, which `conformance` checks against a real project), its
//! assertion names the fact instead of restating it.

use std::time::Duration;

use bytes::Bytes;
use crate::child::ChildEmulator;
use kbq_emulator::testsuite::{client, create_table, start_with};
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1 as bq;
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::big_query_write_client::BigQueryWriteClient;
use googleapis_tonic_google_rpc::google::rpc;
use kbq_core::bigquery_facts as facts;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use kbq_emulator::server::{Emulator, EmulatorConfig};
use kbq_emulator::status::{storage_error, storage_error_of};
use kbq_emulator::store::{TableRef, storage_code};
use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status};

type Client = BigQueryWriteClient<Channel>;

const TABLE: &str = "projects/p/datasets/d/tables/t";

fn table_ref() -> TableRef {
    TableRef::new("p", "d", "t")
}

/// `id INT64 REQUIRED, name STRING NULLABLE`.
fn schema() -> TableSchema {
    TableSchema {
        fields: vec![
            TableFieldSchema::new("id", FieldType::Int64, Mode::Required),
            TableFieldSchema::new("name", FieldType::String, Mode::Nullable),
        ],
    }
}

fn field(name: &str, number: i32, kind: Type) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        r#type: Some(kind as i32),
        label: Some(Label::Optional as i32),
        ..Default::default()
    }
}

fn descriptor(fields: Vec<FieldDescriptorProto>) -> DescriptorProto {
    DescriptorProto {
        name: Some("Row".into()),
        field: fields,
        ..Default::default()
    }
}

/// The writer schema matching `schema()`.
fn row_descriptor() -> DescriptorProto {
    descriptor(vec![
        field("id", 1, Type::Int64),
        field("name", 2, Type::String),
    ])
}

fn row(id: i64, name: Option<&str>) -> Bytes {
    let mut buf = Vec::new();
    prost::encoding::int64::encode(1, &id, &mut buf);
    if let Some(name) = name {
        prost::encoding::string::encode(2, &name.to_string(), &mut buf);
    }
    Bytes::from(buf)
}

fn rows(ids: std::ops::Range<i64>) -> Vec<Bytes> {
    ids.map(|i| row(i, Some("x"))).collect()
}

fn request(
    stream: &str,
    offset: Option<i64>,
    rows: Vec<Bytes>,
    writer: Option<DescriptorProto>,
) -> bq::AppendRowsRequest {
    bq::AppendRowsRequest {
        write_stream: stream.to_string(),
        offset,
        rows: Some(bq::append_rows_request::Rows::ProtoRows(
            bq::append_rows_request::ProtoData {
                writer_schema: writer.map(|d| bq::ProtoSchema {
                    proto_descriptor: Some(d),
                }),
                rows: Some(bq::ProtoRows {
                    serialized_rows: rows,
                }),
            },
        )),
        ..Default::default()
    }
}

/// First request of a connection: stream name and writer schema.
fn first(stream: &str, offset: Option<i64>, rows: Vec<Bytes>) -> bq::AppendRowsRequest {
    request(stream, offset, rows, Some(row_descriptor()))
}

/// Following requests: neither stream nor schema.
fn next(offset: Option<i64>, rows: Vec<Bytes>) -> bq::AppendRowsRequest {
    request("", offset, rows, None)
}

struct Conn {
    tx: mpsc::Sender<bq::AppendRowsRequest>,
    rx: tonic::Streaming<bq::AppendRowsResponse>,
}

impl Conn {
    async fn open(client: &mut Client, first: bq::AppendRowsRequest) -> Conn {
        Conn::open_with(client, tonic::Request::new, first).await
    }

    async fn open_with(
        client: &mut Client,
        wrap: impl FnOnce(
            ReceiverStream<bq::AppendRowsRequest>,
        ) -> tonic::Request<ReceiverStream<bq::AppendRowsRequest>>,
        first: bq::AppendRowsRequest,
    ) -> Conn {
        let (tx, rx) = mpsc::channel(1024);
        tx.send(first).await.unwrap();
        let rx = client
            .append_rows(wrap(ReceiverStream::new(rx)))
            .await
            .expect("the call opens")
            .into_inner();
        Conn { tx, rx }
    }

    async fn send(&self, req: bq::AppendRowsRequest) {
        self.tx.send(req).await.expect("call still open");
    }

    /// The next response, or the status that ended the call.
    async fn recv(&mut self) -> Result<bq::AppendRowsResponse, Status> {
        match tokio::time::timeout(Duration::from_secs(20), self.rx.message())
            .await
            .expect("an answer in time")
        {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(Status::ok("call ended")),
            Err(s) => Err(s),
        }
    }
}

/// The append offset of a successful response (panics on an error response).
fn offset_of(r: &bq::AppendRowsResponse) -> Option<i64> {
    match &r.response {
        Some(bq::append_rows_response::Response::AppendResult(a)) => a.offset,
        other => panic!("expected a result, got {other:?}"),
    }
}

fn error_of(r: &bq::AppendRowsResponse) -> rpc::Status {
    match &r.response {
        Some(bq::append_rows_response::Response::Error(e)) => e.clone(),
        other => panic!("expected an error, got {other:?}"),
    }
}

async fn setup() -> (Emulator, Client) {
    setup_with(EmulatorConfig::local()).await
}

async fn setup_with(config: EmulatorConfig) -> (Emulator, Client) {
    let emu = start_with(config).await;
    create_table(&emu.store, &table_ref(), schema());
    let c = client(emu.addr).await;
    (emu, c)
}

async fn create(c: &mut Client, kind: bq::write_stream::Type) -> String {
    c.create_write_stream(bq::CreateWriteStreamRequest {
        parent: TABLE.into(),
        write_stream: Some(bq::WriteStream {
            r#type: kind as i32,
            ..Default::default()
        }),
    })
    .await
    .expect("stream created")
    .into_inner()
    .name
}

fn visible_ids(emu: &Emulator) -> Vec<i64> {
    let table = emu.store.get_table(&table_ref()).unwrap();
    emu.store
        .read_visible_rows(&table_ref(), 0, usize::MAX)
        .unwrap()
        .rows
        .iter()
        .map(|r| {
            let rendered = r.codec.render(&r.data, &table.schema);
            let v = &rendered["f"][0]["v"];
            v.as_str()
                .and_then(|s| s.parse().ok())
                .or_else(|| v.as_i64())
                .expect("an id")
        })
        .collect()
}

async fn flush(c: &mut Client, stream: &str, offset: i64) -> Result<i64, Status> {
    c.flush_rows(bq::FlushRowsRequest {
        write_stream: stream.into(),
        offset: Some(offset),
    })
    .await
    .map(|r| r.into_inner().offset)
}

async fn finalize(c: &mut Client, stream: &str) -> Result<i64, Status> {
    c.finalize_write_stream(bq::FinalizeWriteStreamRequest {
        name: stream.into(),
    })
    .await
    .map(|r| r.into_inner().row_count)
}

/// Appends `n` rows with ids `from..from+n` at `offset` on a fresh connection.
async fn append_ok(c: &mut Client, stream: &str, offset: i64, ids: std::ops::Range<i64>) {
    let mut conn = Conn::open(c, first(stream, Some(offset), rows(ids))).await;
    let r = conn.recv().await.unwrap();
    assert_eq!(offset_of(&r), Some(offset));
}

use bq::write_stream::Type as StreamType;

// ----- CreateWriteStream / GetWriteStream -----

#[tokio::test]
async fn create_write_stream_returns_the_full_view_with_an_opaque_server_assigned_id() {
    let (_emu, mut c) = setup().await;
    let a = c
        .create_write_stream(bq::CreateWriteStreamRequest {
            parent: TABLE.into(),
            write_stream: Some(bq::WriteStream {
                name: format!("{TABLE}/streams/mine"),
                r#type: StreamType::Pending as i32,
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let id = a.name.strip_prefix(&format!("{TABLE}/streams/")).unwrap();
    assert_ne!(id, "mine", "a client-supplied name is ignored");
    assert!(id.len() >= 20);
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    assert_eq!(a.r#type, StreamType::Pending as i32);
    assert_eq!(a.location, "us");
    assert!(a.create_time.is_some());
    assert!(
        a.commit_time.is_none(),
        "pending streams have no commit time yet"
    );
    let schema = a.table_schema.expect("full view includes the schema");
    assert_eq!(schema.fields[0].name, "id");
    assert_eq!(
        schema.fields[0].mode,
        bq::table_field_schema::Mode::Required as i32
    );
    let b = create(&mut c, StreamType::Committed).await;
    assert_ne!(a.name, b);
}

#[tokio::test]
async fn create_write_stream_on_a_missing_table_is_not_found() {
    let (_emu, mut c) = setup().await;
    let err = c
        .create_write_stream(bq::CreateWriteStreamRequest {
            parent: "projects/p/datasets/d/tables/nope".into(),
            write_stream: Some(bq::WriteStream {
                r#type: StreamType::Committed as i32,
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().starts_with("Requested entity was not found."));
    assert_eq!(
        storage_error(&err).unwrap().code,
        storage_code::TABLE_NOT_FOUND
    );
    let err = c
        .create_write_stream(bq::CreateWriteStreamRequest {
            parent: TABLE.into(),
            write_stream: Some(bq::WriteStream::default()),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "TYPE_UNSPECIFIED");
}

#[tokio::test]
async fn get_write_stream_basic_omits_the_schema_and_full_includes_it() {
    let (_emu, mut c) = setup().await;
    let name = create(&mut c, StreamType::Buffered).await;
    let get = |view: bq::WriteStreamView, name: String| {
        let mut c = c.clone();
        async move {
            c.get_write_stream(bq::GetWriteStreamRequest {
                name,
                view: view as i32,
            })
            .await
            .map(|r| r.into_inner())
        }
    };
    let basic = get(bq::WriteStreamView::Unspecified, name.clone())
        .await
        .unwrap();
    assert!(basic.table_schema.is_none());
    assert_eq!(basic.r#type, StreamType::Buffered as i32);
    assert_eq!(basic.name, name);
    let full = get(bq::WriteStreamView::Full, name.clone()).await.unwrap();
    assert_eq!(full.table_schema.unwrap().fields.len(), 2);
    for default in [
        format!("{TABLE}/_default"),
        format!("{TABLE}/streams/_default"),
    ] {
        let d = get(bq::WriteStreamView::Basic, default).await.unwrap();
        assert_eq!(d.r#type, StreamType::Committed as i32);
        assert_eq!(d.location, "us");
        assert!(d.create_time.is_none());
    }
    let missing = get(
        bq::WriteStreamView::Full,
        format!("{TABLE}/streams/unknown"),
    )
    .await
    .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    assert_eq!(
        storage_error(&missing).unwrap().code,
        storage_code::STREAM_NOT_FOUND
    );
}

// ----- AppendRows: offsets -----

#[tokio::test]
async fn the_response_offset_is_the_first_row_of_each_append() {
    let (_emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let mut conn = Conn::open(&mut c, first(&s, Some(0), rows(0..1))).await;
    conn.send(next(Some(1), rows(1..3))).await;
    conn.send(next(None, rows(3..4))).await;
    conn.send(next(Some(4), rows(4..5))).await;
    let mut offsets = Vec::new();
    for _ in 0..4 {
        offsets.push(offset_of(&conn.recv().await.unwrap()));
    }
    assert_eq!(
        offsets,
        vec![Some(0), Some(1), Some(3), Some(4)],
        "{}",
        facts::APPEND_FIRST_ROW_OFFSET
    );
}

#[tokio::test]
async fn a_stale_offset_is_already_exists_a_future_one_out_of_range_and_the_call_survives() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let mut conn = Conn::open(&mut c, first(&s, Some(0), rows(0..2))).await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(0));

    conn.send(next(Some(1), rows(10..11))).await;
    let e = error_of(&conn.recv().await.unwrap());
    assert_eq!(
        e.code,
        Code::AlreadyExists as i32,
        "{}",
        facts::APPEND_ALREADY_EXISTS
    );
    assert_eq!(
        e.message,
        format!("The offset is within stream, expected offset 2, received 1 Entity: {s}")
    );
    let se = storage_error_of(&e).unwrap();
    assert_eq!(se.code, storage_code::OFFSET_ALREADY_EXISTS);
    assert_eq!(se.entity, s);

    conn.send(next(Some(100), rows(10..11))).await;
    let e = error_of(&conn.recv().await.unwrap());
    assert_eq!(
        e.code,
        Code::OutOfRange as i32,
        "{}",
        facts::APPEND_OUT_OF_RANGE
    );
    assert!(
        e.message
            .starts_with("The offset is beyond stream, expected offset 2, received 100")
    );
    assert_eq!(
        storage_error_of(&e).unwrap().code,
        storage_code::OFFSET_OUT_OF_RANGE
    );

    conn.send(next(None, rows(2..3))).await;
    assert_eq!(
        offset_of(&conn.recv().await.unwrap()),
        Some(2),
        "{}",
        facts::APPEND_FAILED_APPENDS_NOTHING
    );
    assert_eq!(visible_ids(&emu), vec![0, 1, 2]);
}

#[tokio::test]
async fn absurd_offsets_are_answered_not_panicked_on() {
    let (_emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let mut conn = Conn::open(&mut c, first(&s, Some(i64::MIN), rows(0..1))).await;
    assert_eq!(
        error_of(&conn.recv().await.unwrap()).code,
        Code::InvalidArgument as i32
    );
    conn.send(next(Some(i64::MAX), rows(0..1))).await;
    assert_eq!(
        error_of(&conn.recv().await.unwrap()).code,
        Code::OutOfRange as i32
    );
    conn.send(next(Some(0), rows(0..1))).await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(0));
    for offset in [i64::MIN, -1, i64::MAX] {
        let b = create(&mut c, StreamType::Buffered).await;
        let err = flush(&mut c, &b, offset).await.unwrap_err();
        assert_ne!(err.code(), Code::Ok);
        assert_ne!(err.code(), Code::Unknown);
    }
}

#[tokio::test]
async fn the_default_stream_never_returns_an_offset_and_refuses_one() {
    let (emu, mut c) = setup().await;
    let spelled = format!("{TABLE}/_default");
    let mut conn = Conn::open(&mut c, first(&spelled, None, rows(0..2))).await;
    let r = conn.recv().await.unwrap();
    assert_eq!(offset_of(&r), None);
    assert_eq!(r.write_stream, spelled, "the caller's spelling is echoed");
    conn.send(next(Some(2), rows(2..3))).await;
    let e = error_of(&conn.recv().await.unwrap());
    assert_eq!(e.code, Code::InvalidArgument as i32);
    assert!(
        e.message.ends_with(&format!("Entity: {spelled}")),
        "{}",
        e.message
    );
    conn.send(next(None, rows(2..3))).await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), None);

    let other = format!("{TABLE}/streams/_default");
    let mut conn = Conn::open(&mut c, first(&other, None, rows(3..4))).await;
    let r = conn.recv().await.unwrap();
    assert_eq!(offset_of(&r), None);
    assert_eq!(r.write_stream, other);
    assert_eq!(visible_ids(&emu), vec![0, 1, 2, 3]);
}

#[tokio::test]
async fn responses_come_back_in_request_order_one_per_request() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let mut conn = Conn::open(&mut c, first(&s, Some(0), rows(0..3))).await;
    for i in 1..200 {
        conn.send(next(Some(i * 3), rows(i * 3..i * 3 + 3))).await;
    }
    drop(conn.tx);
    let mut offsets = Vec::new();
    while let Some(r) = conn.rx.message().await.unwrap() {
        offsets.push(offset_of(&r).unwrap());
    }
    assert_eq!(offsets, (0..200).map(|i| i * 3).collect::<Vec<_>>());
    assert_eq!(visible_ids(&emu).len(), 600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_connections_lose_and_duplicate_nothing() {
    let (emu, c) = setup().await;
    let mut tasks = Vec::new();
    for w in 0..8i64 {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            let base = w * 1000;
            if w % 2 == 0 {
                let s = format!("{TABLE}/_default");
                let mut conn = Conn::open(&mut c, first(&s, None, rows(base..base + 5))).await;
                for i in 1..40 {
                    conn.send(next(None, rows(base + i * 5..base + i * 5 + 5)))
                        .await;
                }
                for _ in 0..40 {
                    offset_of(&conn.recv().await.unwrap());
                }
            } else {
                let s = create(&mut c, StreamType::Buffered).await;
                let mut conn = Conn::open(&mut c, first(&s, Some(0), rows(base..base + 5))).await;
                conn.recv().await.unwrap();
                for i in 1..40 {
                    conn.send(next(Some(i * 5), rows(base + i * 5..base + i * 5 + 5)))
                        .await;
                    conn.recv().await.unwrap();
                    flush(&mut c, &s, i * 5 - 1).await.unwrap();
                }
                flush(&mut c, &s, 199).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut ids = visible_ids(&emu);
    ids.sort();
    let expected: Vec<i64> = (0..8).flat_map(|w| w * 1000..w * 1000 + 200).collect();
    assert_eq!(ids, expected);
}

#[tokio::test]
async fn the_routing_header_is_accepted_but_not_required() {
    let (_emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let header = format!("write_stream={}", s.replace('/', "%2F"));
    let mut conn = Conn::open_with(
        &mut c,
        |stream| {
            let mut r = tonic::Request::new(stream);
            r.metadata_mut()
                .insert("x-goog-request-params", header.parse().unwrap());
            r
        },
        first(&s, Some(0), rows(0..1)),
    )
    .await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(0));
    let mut req = tonic::Request::new(bq::GetWriteStreamRequest {
        name: s.clone(),
        view: 0,
    });
    req.metadata_mut()
        .insert("x-goog-request-params", "name=garbage".parse().unwrap());
    assert_eq!(c.get_write_stream(req).await.unwrap().into_inner().name, s);
}

// ----- AppendRows: errors that end the call -----

#[tokio::test]
async fn a_writer_schema_with_an_extra_field_ends_the_call_with_schema_mismatch() {
    let (_emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let writer = descriptor(vec![
        field("id", 1, Type::Int64),
        field("TestField", 2, Type::String),
    ]);
    let mut conn = Conn::open(&mut c, request(&s, Some(0), rows(0..1), Some(writer))).await;
    let status = conn.recv().await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().starts_with(
            "Input schema has more fields than BigQuery schema, extra fields: 'testfield'"
        ),
        "{}",
        status.message()
    );
    assert!(status.message().ends_with(&format!("Entity: {s}")));
    assert_eq!(
        storage_error(&status).unwrap().code,
        storage_code::SCHEMA_MISMATCH_EXTRA_FIELDS
    );
}

#[tokio::test]
async fn a_malformed_stream_name_ends_the_call_with_invalid_argument() {
    let (_emu, mut c) = setup().await;
    for bad in [
        "garbage".to_string(),
        format!("{TABLE}/streams/has space"),
        format!("{TABLE}/streams/a/b"),
        String::new(),
    ] {
        let mut conn = Conn::open(&mut c, first(&bad, None, rows(0..1))).await;
        let status = conn.recv().await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{bad:?}");
        if !bad.is_empty() {
            assert_eq!(
                status.message(),
                format!("Invalid stream name. Entity: {bad}")
            );
        }
    }
}

#[tokio::test]
async fn an_unknown_stream_or_table_ends_the_call_with_not_found() {
    let (_emu, mut c) = setup().await;
    let unknown = format!("{TABLE}/streams/Cig2ZDU3ODc0NC0wMDAw");
    let mut conn = Conn::open(&mut c, first(&unknown, None, rows(0..1))).await;
    let status = conn.recv().await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(
        status.message(),
        format!("Requested entity was not found. Entity: {unknown}")
    );
    let default = "projects/p/datasets/d/tables/missing/_default";
    let mut conn = Conn::open(&mut c, first(default, None, rows(0..1))).await;
    let status = conn.recv().await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert!(status.message().ends_with(default));
}

#[tokio::test]
async fn the_first_request_must_carry_a_writer_schema() {
    let (_emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let mut conn = Conn::open(&mut c, request(&s, None, rows(0..1), None)).await;
    assert_eq!(conn.recv().await.unwrap_err().code(), Code::InvalidArgument);
    let mut conn = Conn::open(&mut c, next(None, rows(0..1))).await;
    assert_eq!(
        conn.recv().await.unwrap_err().code(),
        Code::InvalidArgument,
        "no write_stream on the first request"
    );
}

// ----- AppendRows: errors answered in the stream -----

#[tokio::test]
async fn empty_rows_are_refused_in_the_stream() {
    let (_emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let mut conn = Conn::open(&mut c, first(&s, Some(0), Vec::new())).await;
    let e = error_of(&conn.recv().await.unwrap());
    assert_eq!(e.code, Code::InvalidArgument as i32);
    assert_eq!(e.message, "Rows must be specified.");
    let mut bare = next(None, Vec::new());
    bare.rows = None;
    conn.send(bare).await;
    assert_eq!(
        error_of(&conn.recv().await.unwrap()).message,
        "Rows must be specified."
    );
    conn.send(next(Some(0), rows(0..1))).await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(0));
}

#[tokio::test]
async fn a_request_over_the_size_limit_is_refused_with_its_size() {
    let mut config = EmulatorConfig::local();
    config.write.max_request_bytes = 4096;
    let (emu, mut c) = setup_with(config).await;
    let s = create(&mut c, StreamType::Committed).await;
    let big: Vec<Bytes> = (0..100).map(|i| row(i, Some(&"y".repeat(100)))).collect();
    let req = first(&s, Some(0), big);
    let size = req.encoded_len();
    let mut conn = Conn::open(&mut c, req).await;
    let e = error_of(&conn.recv().await.unwrap());
    assert_eq!(e.code, Code::InvalidArgument as i32);
    assert!(
        e.message
            .starts_with(&format!("AppendRows request too large: {size} limit 4096")),
        "{}: {}",
        facts::REQUEST_TOO_LARGE,
        e.message
    );
    // The refused request had no effect at all, its writer schema included.
    conn.send(request("", Some(0), rows(0..1), Some(row_descriptor())))
        .await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(0));
    assert_eq!(visible_ids(&emu), vec![0]);
}

#[tokio::test]
async fn an_append_larger_than_tonics_default_limit_is_accepted() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let payload = "z".repeat(1000);
    let big: Vec<Bytes> = (0..9000).map(|i| row(i, Some(&payload))).collect();
    let mut conn = Conn::open(&mut c, first(&s, Some(0), big)).await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(0));
    assert_eq!(visible_ids(&emu).len(), 9000);
}

#[tokio::test]
async fn appending_to_a_finalized_stream_is_stream_finalized() {
    let (_emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    append_ok(&mut c, &s, 0, 0..2).await;
    assert_eq!(finalize(&mut c, &s).await.unwrap(), 2);
    let mut conn = Conn::open(&mut c, first(&s, Some(2), rows(2..3))).await;
    let e = error_of(&conn.recv().await.unwrap());
    assert_eq!(e.code, Code::InvalidArgument as i32);
    assert_eq!(
        e.message,
        format!("Stream has been finalized and cannot be appended: {s}")
    );
    assert_eq!(
        storage_error_of(&e).unwrap().code,
        storage_code::STREAM_FINALIZED,
        "{}",
        facts::APPEND_AFTER_FINALIZE
    );
}

#[tokio::test]
async fn a_bad_row_or_an_unset_required_column_gives_row_errors_and_appends_nothing() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let mut no_id = Vec::new();
    prost::encoding::string::encode(2, &"no id".to_string(), &mut no_id);
    let garbage = Bytes::from_static(&[0xff, 0xff, 0xff]);
    let batch = vec![
        row(0, Some("ok")),
        garbage,
        Bytes::from(no_id),
        row(3, None),
    ];
    let mut conn = Conn::open(&mut c, first(&s, Some(0), batch)).await;
    let r = conn.recv().await.unwrap();
    let e = error_of(&r);
    assert_eq!(e.code, Code::InvalidArgument as i32);
    assert!(e.message.starts_with(
        "Errors found while processing rows. Please refer to the row_errors field for details."
    ));
    assert!(e.message.ends_with(&format!("Entity: {s}")));
    let indexes: Vec<i64> = r.row_errors.iter().map(|e| e.index).collect();
    assert_eq!(indexes, vec![1, 2], "{}", facts::APPEND_ROW_ERRORS);
    assert!(r.row_errors.iter().all(
        |e| e.code == bq::row_error::RowErrorCode::FieldsError as i32 && !e.message.is_empty()
    ));
    // Nothing was appended: offset 0 is still free and the table is empty.
    assert!(visible_ids(&emu).is_empty());
    conn.send(next(Some(0), rows(0..1))).await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(0));
}

#[tokio::test]
async fn keep_columns_validates_whole_rows_but_keeps_only_the_named_columns() {
    let mut config = EmulatorConfig::local();
    config.write.keep_columns = Some(vec!["ID".to_string()].into());
    let (emu, mut c) = setup_with(config).await;
    let s = create(&mut c, StreamType::Committed).await;
    let mut conn = Conn::open(&mut c, first(&s, Some(0), rows(0..3))).await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(0));
    // A column that is not kept is still checked: invalid UTF-8 fails the whole request.
    let mut bad_name = Vec::new();
    prost::encoding::int64::encode(1, &3, &mut bad_name);
    prost::encoding::bytes::encode(2, &vec![0xc3, 0x28], &mut bad_name);
    conn.send(next(
        Some(3),
        vec![row(3, Some("ok")), Bytes::from(bad_name)],
    ))
    .await;
    let r = conn.recv().await.unwrap();
    assert_eq!(error_of(&r).code, Code::InvalidArgument as i32);
    assert_eq!(
        r.row_errors.iter().map(|e| e.index).collect::<Vec<_>>(),
        vec![1]
    );
    conn.send(next(Some(3), rows(3..5))).await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(3));

    assert_eq!(visible_ids(&emu), vec![0, 1, 2, 3, 4]);
    let table = emu.store.get_table(&table_ref()).unwrap();
    let visible = emu
        .store
        .read_visible_rows(&table_ref(), 0, usize::MAX)
        .unwrap();
    for r in &visible.rows {
        // Only the id's tag and varint are kept; `name` reads as NULL.
        assert_eq!(r.data.len(), 2);
        let rendered = r.codec.render(&r.data, &table.schema);
        assert!(rendered["f"][1]["v"].is_null(), "{rendered}");
    }
}

/// The bench keeps only a few columns of a CDC table (BENCHMARKS.md): the pseudo-columns must
/// stay, or every change would read back as a plain row and nothing would be replaced.
#[tokio::test]
async fn keep_columns_keeps_the_cdc_pseudo_columns() {
    let mut config = EmulatorConfig::local();
    config.write.keep_columns = Some(vec!["id".to_string()].into());
    let emu = start_with(config).await;
    let mut table = kbq_emulator::store::Table::new(table_ref(), schema());
    table.table_constraints = Some(serde_json::json!({"primaryKey": {"columns": ["id"]}}));
    emu.store
        .insert_dataset(kbq_emulator::store::Dataset::new("p", "d"))
        .unwrap();
    emu.store.insert_table(table).unwrap();
    let mut c = client(emu.addr).await;
    let writer = descriptor(vec![
        field("id", 1, Type::Int64),
        field("name", 2, Type::String),
        field("_CHANGE_TYPE", 3, Type::String),
        field("_CHANGE_SEQUENCE_NUMBER", 4, Type::String),
    ]);
    let change = |id: i64, kind: &str, seq: &str| {
        let mut buf = row(id, Some("x")).to_vec();
        prost::encoding::string::encode(3, &kind.to_string(), &mut buf);
        prost::encoding::string::encode(4, &seq.to_string(), &mut buf);
        Bytes::from(buf)
    };
    // key 1 upserted twice and key 2 upserted then deleted: one row is left
    let batch = vec![
        change(1, "UPSERT", "1"),
        change(2, "UPSERT", "2"),
        change(1, "UPSERT", "3"),
        change(2, "DELETE", "4"),
    ];
    let mut conn = Conn::open(
        &mut c,
        request(&format!("{TABLE}/_default"), None, batch, Some(writer)),
    )
    .await;
    conn.recv().await.unwrap();
    assert_eq!(visible_ids(&emu), vec![1]);
    assert_eq!(emu.store.visible_row_count(&table_ref()).unwrap(), 1);
}

#[tokio::test]
async fn a_new_writer_schema_mid_connection_is_honoured() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let only_id = descriptor(vec![field("id", 1, Type::Int64)]);
    let mut conn = Conn::open(
        &mut c,
        request(&s, Some(0), vec![row(0, None)], Some(only_id)),
    )
    .await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(0));
    // Field 2 means `name` only under the new descriptor; under the old one it is an unknown
    // field that would not render as the name.
    conn.send(request(
        "",
        Some(1),
        vec![row(1, Some("named"))],
        Some(row_descriptor()),
    ))
    .await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(1));
    let table = emu.store.get_table(&table_ref()).unwrap();
    let visible = emu.store.read_visible_rows(&table_ref(), 1, 1).unwrap();
    let rendered = visible.rows[0]
        .codec
        .render(&visible.rows[0].data, &table.schema);
    assert_eq!(rendered["f"][1]["v"], "named");
    // An extra field in a later schema ends the call too.
    let extra = descriptor(vec![
        field("id", 1, Type::Int64),
        field("zzz", 3, Type::Int64),
    ]);
    conn.send(request("", Some(2), vec![row(2, None)], Some(extra)))
        .await;
    assert_eq!(conn.recv().await.unwrap_err().code(), Code::InvalidArgument);
}

#[tokio::test]
async fn updated_schema_is_reported_after_the_table_schema_changes() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let mut conn = Conn::open(&mut c, first(&s, Some(0), rows(0..1))).await;
    assert!(conn.recv().await.unwrap().updated_schema.is_none());
    emu.store
        .update_table(&table_ref(), |t| {
            t.schema.fields.push(TableFieldSchema::new(
                "extra",
                FieldType::Bool,
                Mode::Nullable,
            ));
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
    for offset in 1..3 {
        conn.send(next(Some(offset), rows(offset..offset + 1)))
            .await;
        let r = conn.recv().await.unwrap();
        assert_eq!(offset_of(&r), Some(offset));
        let updated = r
            .updated_schema
            .unwrap_or_else(|| panic!("{}", facts::SCHEMA_UPDATED_SCHEMA));
        assert_eq!(updated.fields.len(), 3);
        assert_eq!(updated.fields[2].name, "extra");
    }
    let mut fresh = Conn::open(&mut c, first(&s, Some(3), rows(3..4))).await;
    assert!(fresh.recv().await.unwrap().updated_schema.is_none());
}

/// BigQuery relaxes a REQUIRED column to NULLABLE through `tables.patch`; the Write API then
/// takes rows that leave it unset, on a connection opened before the change too (the codec is
/// the table's as it is now), and reports the NULLABLE mode in `updated_schema` and in
/// GetWriteStream(FULL).
#[tokio::test]
async fn a_relaxed_column_takes_unset_values_on_an_open_connection() {
    use bq::table_field_schema::Mode as ProtoMode;
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    let mut no_id = Vec::new();
    prost::encoding::string::encode(2, &"no id".to_string(), &mut no_id);
    let no_id = Bytes::from(no_id);
    let mut conn = Conn::open(&mut c, first(&s, Some(0), vec![no_id.clone()])).await;
    let r = conn.recv().await.unwrap();
    assert_eq!(error_of(&r).code, Code::InvalidArgument as i32);
    assert_eq!(r.row_errors.len(), 1, "id is REQUIRED: {r:?}");

    emu.store
        .update_table(&table_ref(), |t| {
            t.schema.fields[0].mode = Some(Mode::Nullable);
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
    conn.send(next(Some(0), vec![no_id, row(1, Some("one"))]))
        .await;
    let r = conn.recv().await.unwrap();
    assert_eq!(offset_of(&r), Some(0), "{r:?}");
    let updated = r.updated_schema.expect("updated_schema");
    assert_eq!(updated.fields[0].mode, ProtoMode::Nullable as i32);
    let full = c
        .get_write_stream(bq::GetWriteStreamRequest {
            name: format!("{TABLE}/_default"),
            view: bq::WriteStreamView::Full as i32,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        full.table_schema.unwrap().fields[0].mode,
        ProtoMode::Nullable as i32
    );
    let table = emu.store.get_table(&table_ref()).unwrap();
    let visible = emu.store.read_visible_rows(&table_ref(), 0, 2).unwrap();
    let ids: Vec<serde_json::Value> = visible
        .rows
        .iter()
        .map(|r| r.codec.render(&r.data, &table.schema)["f"][0]["v"].clone())
        .collect();
    assert_eq!(
        ids,
        vec![serde_json::Value::Null, serde_json::Value::from("1")]
    );
}

// ----- FlushRows / FinalizeWriteStream -----

#[tokio::test]
async fn flush_rows_makes_rows_visible_inclusively_and_only_forward() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Buffered).await;
    append_ok(&mut c, &s, 0, 0..5).await;
    assert!(
        visible_ids(&emu).is_empty(),
        "{}",
        facts::BUFFERED_INVISIBLE
    );
    assert_eq!(flush(&mut c, &s, 1).await.unwrap(), 1);
    assert_eq!(visible_ids(&emu), vec![0, 1], "{}", facts::FLUSH_INCLUSIVE);
    assert_eq!(
        flush(&mut c, &s, 1).await.unwrap(),
        1,
        "{}",
        facts::FLUSH_REPEATED
    );
    assert_eq!(visible_ids(&emu), vec![0, 1], "{}", facts::FLUSH_REPEATED);
    let below = flush(&mut c, &s, 0).await.unwrap_err();
    assert_eq!(
        below.code(),
        Code::AlreadyExists,
        "{}",
        facts::FLUSH_BELOW_CURSOR
    );
    let beyond = flush(&mut c, &s, 5).await.unwrap_err();
    assert_eq!(
        beyond.code(),
        Code::OutOfRange,
        "{}",
        facts::FLUSH_BEYOND_END
    );
    assert_eq!(
        beyond.message(),
        format!("Offset 5 is beyond the end of the stream Entity: {s}")
    );
    assert_eq!(flush(&mut c, &s, 4).await.unwrap(), 4);
    assert_eq!(visible_ids(&emu), vec![0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn flush_rows_on_a_finalized_stream_fails_for_flushed_and_unflushed_offsets_alike() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Buffered).await;
    append_ok(&mut c, &s, 0, 0..4).await;
    flush(&mut c, &s, 1).await.unwrap();
    assert_eq!(finalize(&mut c, &s).await.unwrap(), 4);
    for offset in [1, 3] {
        let err = flush(&mut c, &s, offset).await.unwrap_err();
        assert_eq!(
            err.code(),
            Code::InvalidArgument,
            "{}",
            facts::FLUSH_AFTER_FINALIZE
        );
        assert_eq!(
            err.message(),
            format!("Stream has been finalized and cannot be appended: {s}")
        );
    }
    assert_eq!(
        visible_ids(&emu),
        vec![0, 1],
        "{}",
        facts::FINALIZE_DOES_NOT_FLUSH
    );
}

#[tokio::test]
async fn flush_rows_is_only_for_buffered_streams() {
    let (_emu, mut c) = setup().await;
    for name in [
        format!("{TABLE}/_default"),
        create(&mut c, StreamType::Committed).await,
        create(&mut c, StreamType::Pending).await,
    ] {
        let err = flush(&mut c, &name, 0).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{name}");
        assert_eq!(
            storage_error(&err).unwrap().code,
            storage_code::INVALID_STREAM_TYPE
        );
    }
    let b = create(&mut c, StreamType::Buffered).await;
    let err = c
        .flush_rows(bq::FlushRowsRequest {
            write_stream: b,
            offset: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn finalize_returns_the_row_count_and_is_idempotent() {
    let (_emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Pending).await;
    append_ok(&mut c, &s, 0, 0..3).await;
    append_ok(&mut c, &s, 3, 3..5).await;
    assert_eq!(
        finalize(&mut c, &s).await.unwrap(),
        5,
        "{}",
        facts::FINALIZE_ROW_COUNT
    );
    assert_eq!(
        finalize(&mut c, &s).await.unwrap(),
        5,
        "{}",
        facts::FINALIZE_REPEATED
    );
    let err = finalize(&mut c, &format!("{TABLE}/_default"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = finalize(&mut c, &format!("{TABLE}/streams/nope"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

// ----- BatchCommitWriteStreams -----

async fn commit(c: &mut Client, names: &[&str]) -> bq::BatchCommitWriteStreamsResponse {
    c.batch_commit_write_streams(bq::BatchCommitWriteStreamsRequest {
        parent: TABLE.into(),
        write_streams: names.iter().map(|s| s.to_string()).collect(),
    })
    .await
    .unwrap()
    .into_inner()
}

#[tokio::test]
async fn pending_rows_appear_only_when_the_batch_commit_succeeds() {
    let (emu, mut c) = setup().await;
    let a = create(&mut c, StreamType::Pending).await;
    let b = create(&mut c, StreamType::Pending).await;
    append_ok(&mut c, &a, 0, 0..2).await;
    append_ok(&mut c, &b, 0, 10..11).await;
    finalize(&mut c, &a).await.unwrap();
    assert!(visible_ids(&emu).is_empty());

    // b is not finalized: nothing is committed, not even a.
    let r = commit(&mut c, &[&a, &b]).await;
    assert!(r.commit_time.is_none());
    assert_eq!(r.stream_errors.len(), 1);
    assert_eq!(r.stream_errors[0].code, storage_code::INVALID_STREAM_STATE);
    assert_eq!(r.stream_errors[0].entity, b);
    assert!(visible_ids(&emu).is_empty());

    finalize(&mut c, &b).await.unwrap();
    let r = commit(&mut c, &[&a, &b]).await;
    assert!(r.stream_errors.is_empty(), "{:?}", r.stream_errors);
    assert!(r.commit_time.is_some());
    let mut ids = visible_ids(&emu);
    ids.sort();
    assert_eq!(ids, vec![0, 1, 10]);
    let got = c
        .get_write_stream(bq::GetWriteStreamRequest {
            name: a.clone(),
            view: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.commit_time, r.commit_time);

    let again = commit(&mut c, &[&a]).await;
    assert!(again.commit_time.is_none());
    assert_eq!(
        again.stream_errors[0].code,
        storage_code::STREAM_ALREADY_COMMITTED
    );
    assert_eq!(visible_ids(&emu).len(), 3, "no duplicates");
}

#[tokio::test]
async fn batch_commit_reports_wrong_types_and_unknown_streams() {
    let (emu, mut c) = setup().await;
    let committed = create(&mut c, StreamType::Committed).await;
    let pending = create(&mut c, StreamType::Pending).await;
    append_ok(&mut c, &pending, 0, 0..1).await;
    finalize(&mut c, &pending).await.unwrap();
    let unknown = format!("{TABLE}/streams/doesnotexist");
    let r = commit(&mut c, &[&committed, &pending, &unknown]).await;
    assert!(r.commit_time.is_none());
    let by_entity = |e: &str| r.stream_errors.iter().find(|x| x.entity == e).unwrap();
    let wrong = by_entity(&committed);
    assert_eq!(wrong.code, storage_code::INVALID_STREAM_TYPE);
    assert_eq!(
        wrong.error_message,
        "Stream must be created in pending mode, actual: WRITE_OPTIMIZED"
    );
    assert_eq!(by_entity(&unknown).code, storage_code::STREAM_NOT_FOUND);
    assert!(r.stream_errors.iter().all(|e| e.entity != pending));
    assert!(visible_ids(&emu).is_empty(), "all or nothing");
}

// ----- lifecycle: idle close, TTL, table deletion -----

#[tokio::test]
async fn an_idle_append_call_is_closed_with_aborted() {
    let mut config = EmulatorConfig::local();
    config.write.idle_timeout = Duration::from_secs(1);
    let (_emu, mut c) = setup_with(config).await;
    let s = format!("{TABLE}/_default");
    let mut conn = Conn::open(&mut c, first(&s, None, rows(0..1))).await;
    conn.recv().await.unwrap();
    let status = conn.recv().await.unwrap_err();
    assert_eq!(status.code(), Code::Aborted);
    assert_eq!(
        status.message(),
        format!("Closing the stream because it has been inactive for 1 seconds. Entity: {s}")
    );
}

#[tokio::test]
async fn a_stream_idle_beyond_its_ttl_is_not_found() {
    let mut config = EmulatorConfig::local();
    config.store.committed_ttl = Duration::from_millis(300);
    let (_emu, mut c) = setup_with(config).await;
    let s = create(&mut c, StreamType::Committed).await;
    let b = create(&mut c, StreamType::Buffered).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let err = finalize(&mut c, &s).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(
        finalize(&mut c, &b).await.unwrap(),
        0,
        "buffered TTL is longer"
    );
}

#[tokio::test]
async fn streams_of_a_deleted_table_are_not_found() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    emu.store.delete_table(&table_ref()).unwrap();
    create_table(&emu.store, &table_ref(), schema());
    let err = finalize(&mut c, &s).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

// ----- fault injection -----

async fn admin(emu: &Emulator, method: &str, path: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(emu.addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    tcp.read_to_string(&mut out).await.unwrap();
    let code = out[9..12].parse().unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (code, body)
}

#[tokio::test]
async fn an_injected_failure_hits_exactly_the_nth_call() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Buffered).await;
    append_ok(&mut c, &s, 0, 0..3).await;
    let (code, body) = admin(
        &emu,
        "POST",
        "/emulator/v1/faults",
        r#"{"rpc":"FlushRows","action":{"fail":{"code":"UNAVAILABLE","storage_code":"STREAM_NOT_FOUND","message":"boom"}},"nth":2}"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(flush(&mut c, &s, 0).await.is_ok());
    let err = flush(&mut c, &s, 1).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "boom");
    assert_eq!(
        storage_error(&err).unwrap().code,
        storage_code::STREAM_NOT_FOUND
    );
    assert!(
        flush(&mut c, &s, 1).await.is_ok(),
        "only the 2nd call fails"
    );
    let (_, listed) = admin(&emu, "GET", "/emulator/v1/faults", "").await;
    assert!(listed.contains("\"fired\":1"), "{listed}");
    assert_eq!(
        admin(&emu, "DELETE", "/emulator/v1/faults", "").await.0,
        204
    );
    assert!(emu.faults.list().is_empty());
    let (bad, _) = admin(&emu, "POST", "/emulator/v1/faults", r#"{"rpc":"Nope"}"#).await;
    assert_eq!(bad, 400);
}

#[tokio::test]
async fn append_faults_can_fail_in_stream_end_the_call_or_delay() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    emu.faults
        .install(vec![serde_json::from_str(
            r#"{"rpc":"AppendRows","action":{"fail":{"code":"RESOURCE_EXHAUSTED","in_stream":true}},"nth":2}"#,
        )
        .unwrap()])
        .unwrap();
    let mut conn = Conn::open(&mut c, first(&s, Some(0), rows(0..1))).await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(0));
    conn.send(next(Some(1), rows(1..2))).await;
    assert_eq!(
        error_of(&conn.recv().await.unwrap()).code,
        Code::ResourceExhausted as i32
    );
    conn.send(next(Some(1), rows(1..2))).await;
    assert_eq!(
        offset_of(&conn.recv().await.unwrap()),
        Some(1),
        "the call survived"
    );

    emu.faults.clear();
    emu.faults
        .install(vec![
            serde_json::from_str(r#"{"rpc":"AppendRows","action":{"delay":{"ms":300}},"nth":1}"#)
                .unwrap(),
            serde_json::from_str(r#"{"rpc":"AppendRows","action":{"fail":{"code":14}},"nth":2}"#)
                .unwrap(),
        ])
        .unwrap();
    let started = std::time::Instant::now();
    conn.send(next(Some(2), rows(2..3))).await;
    assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(2));
    assert!(started.elapsed() >= Duration::from_millis(300));
    conn.send(next(Some(3), rows(3..4))).await;
    assert_eq!(conn.recv().await.unwrap_err().code(), Code::Unavailable);
    assert_eq!(visible_ids(&emu), vec![0, 1, 2]);
}

#[tokio::test]
async fn a_dropped_answer_after_the_append_keeps_the_rows_but_loses_the_response() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Committed).await;
    emu.faults
        .install(vec![
            serde_json::from_str(
                r#"{"rpc":"AppendRows","action":{"drop":{"after":true}},"nth":1}"#,
            )
            .unwrap(),
        ])
        .unwrap();
    let mut conn = Conn::open(&mut c, first(&s, Some(0), rows(0..2))).await;
    let status = conn.recv().await.unwrap_err();
    assert_ne!(status.code(), Code::Ok);
    assert!(
        !status.message().contains("fault injection"),
        "a drop carries no gRPC status from the server: {status:?}"
    );
    assert_eq!(visible_ids(&emu), vec![0, 1]);
    // The retry with the same offset learns the rows are there.
    let mut conn = Conn::open(&mut c, first(&s, Some(0), rows(0..2))).await;
    assert_eq!(
        error_of(&conn.recv().await.unwrap()).code,
        Code::AlreadyExists as i32
    );

    emu.faults
        .install(vec![
            serde_json::from_str(r#"{"rpc":"FinalizeWriteStream","action":{"drop":{}},"nth":1}"#)
                .unwrap(),
        ])
        .unwrap();
    let err = finalize(&mut c, &s).await.unwrap_err();
    assert!(!err.message().contains("fault injection"), "{err:?}");
    let mut conn = Conn::open(&mut c, first(&s, Some(2), rows(2..3))).await;
    assert_eq!(
        offset_of(&conn.recv().await.unwrap()),
        Some(2),
        "a dropped finalize did nothing"
    );
}

#[tokio::test]
async fn a_faults_file_given_at_start_is_in_force_from_the_first_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("faults.yaml");
    std::fs::write(
        &path,
        "- rpc: GetWriteStream\n  action:\n    fail:\n      code: PERMISSION_DENIED\n  times: 1\n",
    )
    .unwrap();
    let mut config = EmulatorConfig::local();
    config.faults_file = Some(path);
    let (_emu, mut c) = setup_with(config).await;
    let get = bq::GetWriteStreamRequest {
        name: format!("{TABLE}/_default"),
        view: 0,
    };
    let err = c.get_write_stream(get.clone()).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(c.get_write_stream(get).await.is_ok());
}

#[tokio::test]
async fn the_admin_endpoint_finalizes_or_expires_a_stream_now() {
    let (emu, mut c) = setup().await;
    let s = create(&mut c, StreamType::Buffered).await;
    append_ok(&mut c, &s, 0, 0..2).await;
    let (code, body) = admin(
        &emu,
        "POST",
        "/emulator/v1/streams/finalize",
        &format!(r#"{{"stream":"{s}"}}"#),
    )
    .await;
    assert_eq!((code, body.as_str()), (200, r#"{"row_count":2}"#));
    assert_eq!(
        flush(&mut c, &s, 0).await.unwrap_err().code(),
        Code::InvalidArgument
    );

    let t = create(&mut c, StreamType::Committed).await;
    let (code, _) = admin(
        &emu,
        "POST",
        "/emulator/v1/streams/expire",
        &format!(r#"{{"stream":"{t}"}}"#),
    )
    .await;
    assert_eq!(code, 204);
    assert_eq!(
        finalize(&mut c, &t).await.unwrap_err().code(),
        Code::NotFound
    );
    let (code, _) = admin(
        &emu,
        "POST",
        "/emulator/v1/streams/expire",
        r#"{"stream":"projects/p/datasets/d/tables/t/streams/nope"}"#,
    )
    .await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn malformed_names_get_bigquery_errors_on_every_rpc() {
    let (_emu, mut c) = setup().await;
    for name in [
        "",
        "x",
        "projects/p",
        "projects/p/datasets/d/tables/t/streams/../x",
    ] {
        let get = c
            .get_write_stream(bq::GetWriteStreamRequest {
                name: name.into(),
                view: 99,
            })
            .await
            .unwrap_err();
        assert_eq!(get.code(), Code::InvalidArgument, "{name:?}");
        assert_eq!(
            finalize(&mut c, name).await.unwrap_err().code(),
            Code::InvalidArgument
        );
        assert_eq!(
            flush(&mut c, name, 0).await.unwrap_err().code(),
            Code::InvalidArgument
        );
        let create = c
            .create_write_stream(bq::CreateWriteStreamRequest {
                parent: name.into(),
                write_stream: None,
            })
            .await
            .unwrap_err();
        assert_eq!(create.code(), Code::InvalidArgument);
        let commit = c
            .batch_commit_write_streams(bq::BatchCommitWriteStreamsRequest {
                parent: name.into(),
                write_streams: vec![name.into()],
            })
            .await
            .unwrap_err();
        assert_eq!(commit.code(), Code::InvalidArgument);
    }
}

// ----- persistence across a restart of the real binary -----

async fn wait_for_client(addr: std::net::SocketAddr) -> Client {
    client(addr).await
}

#[tokio::test]
async fn state_survives_a_killed_emulator_process() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap().to_string();
    // Seed the table through the store (the REST side lives elsewhere), then hand the directory
    // to the real binary.
    {
        let mut config = EmulatorConfig::local();
        config.data_dir = Some(dir.path().to_path_buf());
        let emu = start_with(config).await;
        create_table(&emu.store, &table_ref(), schema());
        emu.stop();
    }
    let (buffered, pending, committed);
    {
        let child = ChildEmulator::spawn(&["--data-dir", &data_dir]);
        let mut c = wait_for_client(child.addr).await;
        buffered = create(&mut c, StreamType::Buffered).await;
        pending = create(&mut c, StreamType::Pending).await;
        committed = create(&mut c, StreamType::Committed).await;
        append_ok(&mut c, &buffered, 0, 0..4).await;
        append_ok(&mut c, &buffered, 4, 4..6).await;
        flush(&mut c, &buffered, 2).await.unwrap();
        append_ok(&mut c, &pending, 0, 100..102).await;
        finalize(&mut c, &pending).await.unwrap();
        append_ok(&mut c, &committed, 0, 200..201).await;
        let mut conn = Conn::open(
            &mut c,
            first(&format!("{TABLE}/_default"), None, rows(300..301)),
        )
        .await;
        conn.recv().await.unwrap();
        child.kill();
    }
    {
        let child = ChildEmulator::spawn(&["--data-dir", &data_dir]);
        let mut c = wait_for_client(child.addr).await;
        // Flush cursor and row count survived.
        assert_eq!(flush(&mut c, &buffered, 2).await.unwrap(), 2);
        assert_eq!(
            flush(&mut c, &buffered, 1).await.unwrap_err().code(),
            Code::AlreadyExists
        );
        let mut conn = Conn::open(&mut c, first(&buffered, Some(6), rows(6..7))).await;
        assert_eq!(offset_of(&conn.recv().await.unwrap()), Some(6));
        // The finalized pending stream can still be committed.
        let r = commit(&mut c, &[&pending]).await;
        assert!(r.stream_errors.is_empty(), "{:?}", r.stream_errors);
        append_ok(&mut c, &committed, 1, 201..202).await;
        child.kill();
    }
    let mut config = EmulatorConfig::local();
    config.data_dir = Some(dir.path().to_path_buf());
    let emu = start_with(config).await;
    let mut ids = visible_ids(&emu);
    ids.sort();
    assert_eq!(ids, vec![0, 1, 2, 100, 101, 200, 201, 300]);
    let table = emu.store.get_table(&table_ref()).unwrap();
    assert_eq!(table.schema, schema());
}
