//! What Google's own client integration tests (the Go client's `storage/managedwriter`,
//! scripts/test.d/go-managedwriter.sh, and Java's) expect of the Storage Write API and the emulator
//! once did differently, each stated as our own test over a real tonic client on loopback: column
//! defaults and missing-value interpretations, TIMESTAMP from `google.protobuf.Timestamp`,
//! GetWriteStream's RANGE element type (docs/emulator.md).

use bytes::Bytes;
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1 as bq;
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::big_query_write_client::BigQueryWriteClient;
use kbq_core::table_schema::{FieldType, Mode, RangeElementType, TableFieldSchema, TableSchema};
use kbq_emulator::server::Emulator;
use kbq_emulator::store::TableRef;
use kbq_emulator::testsuite::{client, create_table, start};
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto};
use serde_json::Value;
use tonic::transport::Channel;

const DEFAULT_STREAM: &str = "projects/p/datasets/d/tables/t/streams/_default";

async fn emulator_with(schema: TableSchema) -> (Emulator, BigQueryWriteClient<Channel>) {
    let emulator = start().await;
    create_table(&emulator.store, &TableRef::new("p", "d", "t"), schema);
    let client = client(emulator.addr).await;
    (emulator, client)
}

fn column(
    name: &str,
    field_type: FieldType,
    mode: Mode,
    default: Option<&str>,
) -> TableFieldSchema {
    TableFieldSchema {
        default_value_expression: default.map(str::to_string),
        ..TableFieldSchema::new(name, field_type, mode)
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

fn request(descriptor: Option<DescriptorProto>, rows: Vec<Bytes>) -> bq::AppendRowsRequest {
    bq::AppendRowsRequest {
        write_stream: DEFAULT_STREAM.into(),
        rows: Some(bq::append_rows_request::Rows::ProtoRows(
            bq::append_rows_request::ProtoData {
                writer_schema: descriptor.map(|d| bq::ProtoSchema {
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

/// Sends the requests on one AppendRows call and returns each answer (a response, or the status
/// that ended the call).
async fn append(
    client: &mut BigQueryWriteClient<Channel>,
    requests: Vec<bq::AppendRowsRequest>,
) -> Vec<Result<bq::AppendRowsResponse, tonic::Status>> {
    let (tx, rx) = tokio::sync::mpsc::channel(requests.len().max(1));
    let n = requests.len();
    let mut responses = match client
        .append_rows(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(status) => return vec![Err(status)],
    };
    let mut out = Vec::new();
    for req in requests {
        tx.send(req).await.expect("send");
        match responses.message().await {
            Ok(Some(resp)) => out.push(Ok(resp)),
            Ok(None) => break,
            Err(status) => {
                out.push(Err(status));
                break;
            }
        }
    }
    assert!(out.len() <= n);
    out
}

fn string_row(fields: &[(u32, &str)]) -> Bytes {
    let mut buf = Vec::new();
    for (number, value) in fields {
        prost::encoding::string::encode(*number, &value.to_string(), &mut buf);
    }
    Bytes::from(buf)
}

/// Every visible row as `tabledata.list` cells (`v` values) in column order.
fn table_rows(emulator: &Emulator) -> Vec<Vec<Value>> {
    let table = TableRef::new("p", "d", "t");
    let schema = emulator.store.get_table(&table).expect("table").schema;
    let rows = emulator
        .store
        .read_visible_rows(&table, 0, 1000)
        .expect("rows");
    rows.rows
        .iter()
        .map(|row| {
            row.codec.render(&row.data, &schema)["f"]
                .as_array()
                .expect("cells")
                .iter()
                .map(|cell| cell["v"].clone())
                .collect()
        })
        .collect()
}

fn ok(answer: &Result<bq::AppendRowsResponse, tonic::Status>) -> bool {
    matches!(answer, Ok(resp) if matches!(resp.response, Some(bq::append_rows_response::Response::AppendResult(_))))
}

// ---- Column defaults and missing-value interpretations ----

/// Go's `DefaultValueHandling` table: `id`, `strcol`, `strcol_withdef` ("defaultvalue"),
/// `intcol`, `intcol_withdef` (-99), `otherstr`, `otherstr_withdef` ("otherval").
fn defaults_schema() -> TableSchema {
    TableSchema {
        fields: vec![
            column("id", FieldType::String, Mode::Nullable, None),
            column("strcol", FieldType::String, Mode::Nullable, None),
            column(
                "strcol_withdef",
                FieldType::String,
                Mode::Nullable,
                Some("\"defaultvalue\""),
            ),
            column("intcol", FieldType::Int64, Mode::Nullable, None),
            column(
                "intcol_withdef",
                FieldType::Int64,
                Mode::Nullable,
                Some("-99"),
            ),
            column("otherstr", FieldType::String, Mode::Nullable, None),
            column(
                "otherstr_withdef",
                FieldType::String,
                Mode::Nullable,
                Some("'otherval'"),
            ),
        ],
    }
}

/// The writer schema of Go's `DefaultValuesPartialSchema`: the first five columns.
fn partial_descriptor() -> DescriptorProto {
    descriptor(vec![
        field("id", 1, Type::String),
        field("strcol", 2, Type::String),
        field("strcol_withdef", 3, Type::String),
        field("intcol", 4, Type::Int64),
        field("intcol_withdef", 5, Type::Int64),
    ])
}

#[tokio::test]
async fn columns_missing_from_the_writer_schema_get_their_default_and_unset_fields_follow_the_interpretation()
 {
    use bq::append_rows_request::MissingValueInterpretation as M;
    let (emulator, mut client) = emulator_with(defaults_schema()).await;
    let row = string_row(&[(1, "someval")]);
    let first = request(Some(partial_descriptor()), vec![row.clone()]);
    let mut second = request(None, vec![row.clone()]);
    second.default_missing_value_interpretation = M::DefaultValue as i32;
    // The default interpretation holds for later requests; the map overrides it per column.
    let mut third = request(None, vec![row]);
    third
        .missing_value_interpretations
        .insert("strcol_withdef".into(), M::NullValue as i32);
    let answers = append(&mut client, vec![first, second, third]).await;
    assert!(answers.iter().all(ok), "{answers:?}");
    let null = Value::Null;
    let s = |v: &str| Value::String(v.into());
    assert_eq!(
        table_rows(&emulator),
        vec![
            // No interpretation: NULL for the unset fields, the default for the omitted column.
            vec![
                s("someval"),
                null.clone(),
                null.clone(),
                null.clone(),
                null.clone(),
                null.clone(),
                s("otherval")
            ],
            // DEFAULT_VALUE: the unset fields with a default get it.
            vec![
                s("someval"),
                null.clone(),
                s("defaultvalue"),
                null.clone(),
                s("-99"),
                null.clone(),
                s("otherval")
            ],
            // {strcol_withdef: NULL_VALUE} over the sticky DEFAULT_VALUE.
            vec![
                s("someval"),
                null.clone(),
                null.clone(),
                null.clone(),
                s("-99"),
                null.clone(),
                s("otherval")
            ],
        ]
    );
}

#[tokio::test]
async fn a_required_column_with_a_default_is_filled_when_the_writer_schema_omits_it() {
    let schema = TableSchema {
        fields: vec![
            column("id", FieldType::String, Mode::Required, None),
            column(
                "loaded",
                FieldType::Timestamp,
                Mode::Required,
                Some("CURRENT_TIMESTAMP()"),
            ),
            column("origin", FieldType::String, Mode::Required, Some("'kafka'")),
        ],
    };
    let (emulator, mut client) = emulator_with(schema).await;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let answers = append(
        &mut client,
        vec![request(
            Some(descriptor(vec![field("id", 1, Type::String)])),
            vec![string_row(&[(1, "a")])],
        )],
    )
    .await;
    assert!(answers.iter().all(ok), "{answers:?}");
    let rows = table_rows(&emulator);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][0], Value::String("a".into()));
    assert_eq!(rows[0][2], Value::String("kafka".into()));
    // TIMESTAMP cells are floating-point seconds in tabledata.list's default format.
    let loaded: f64 = rows[0][1].as_str().expect("a timestamp").parse().unwrap();
    assert!(
        (loaded - before).abs() < 60.0,
        "{loaded} is not the append's time {before}"
    );
}

#[tokio::test]
async fn a_required_column_without_a_default_that_the_writer_schema_omits_is_refused() {
    let schema = TableSchema {
        fields: vec![
            column("id", FieldType::String, Mode::Nullable, None),
            column("must", FieldType::Int64, Mode::Required, None),
        ],
    };
    let (emulator, mut client) = emulator_with(schema).await;
    let answers = append(
        &mut client,
        vec![request(
            Some(descriptor(vec![field("id", 1, Type::String)])),
            vec![string_row(&[(1, "a")])],
        )],
    )
    .await;
    let status = answers[0].as_ref().expect_err("the call ends");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("'must'"), "{}", status.message());
    assert!(table_rows(&emulator).is_empty());
}

#[tokio::test]
async fn a_required_column_with_a_default_left_unset_under_null_value_is_a_row_error() {
    let schema = TableSchema {
        fields: vec![
            column("id", FieldType::String, Mode::Nullable, None),
            column("origin", FieldType::String, Mode::Required, Some("'kafka'")),
        ],
    };
    let (emulator, mut client) = emulator_with(schema).await;
    let writer = descriptor(vec![
        field("id", 1, Type::String),
        field("origin", 2, Type::String),
    ]);
    let rows = vec![string_row(&[(1, "a"), (2, "set")]), string_row(&[(1, "b")])];
    let answers = append(&mut client, vec![request(Some(writer), rows)]).await;
    let resp = answers[0].as_ref().expect("a response");
    assert_eq!(resp.row_errors.len(), 1, "{resp:?}");
    assert_eq!(resp.row_errors[0].index, 1);
    assert_eq!(
        resp.row_errors[0].message,
        "Missing required field: origin."
    );
    assert!(table_rows(&emulator).is_empty());
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

// ---- TIMESTAMP from google.protobuf.Timestamp ----

/// Java's `testRowErrors` table: `foo STRING(10)`, `bar TIMESTAMP`.
fn bad_rows_schema() -> TableSchema {
    let mut text = TableFieldSchema::new("foo", FieldType::String, Mode::Nullable);
    text.max_length = Some("10".into());
    TableSchema {
        fields: vec![
            text,
            TableFieldSchema::new("bar", FieldType::Timestamp, Mode::Nullable),
        ],
    }
}

/// `foo` and `bar` as a `google.protobuf.Timestamp`, nested under the name Google's clients
/// give it when they make a descriptor self-contained.
fn timestamp_descriptor(type_name: &str) -> DescriptorProto {
    let mut bar = field("bar", 2, Type::Message);
    bar.type_name = Some(type_name.into());
    DescriptorProto {
        nested_type: vec![DescriptorProto {
            name: Some(type_name.into()),
            field: vec![
                field("seconds", 1, Type::Int64),
                field("nanos", 2, Type::Int32),
            ],
            ..Default::default()
        }],
        ..descriptor(vec![field("foo", 1, Type::String), bar])
    }
}

fn timestamp_row(text: &str, seconds: i64, nanos: i32) -> Bytes {
    let mut stamp = Vec::new();
    prost::encoding::int64::encode(1, &seconds, &mut stamp);
    prost::encoding::int32::encode(2, &nanos, &mut stamp);
    let mut buf = Vec::new();
    prost::encoding::string::encode(1, &text.to_string(), &mut buf);
    prost::encoding::bytes::encode(2, &stamp, &mut buf);
    Bytes::from(buf)
}

#[tokio::test]
async fn a_timestamp_column_takes_google_protobuf_timestamp_and_bad_rows_are_named_by_index() {
    let (emulator, mut client) = emulator_with(bad_rows_schema()).await;
    let writer = timestamp_descriptor("google_protobuf_Timestamp");
    let bad = vec![
        timestamp_row("aaabbbcccddd", 1_663_821_424, 0),
        timestamp_row("bbb", i64::MIN, 0),
        timestamp_row("cccdddeeefffggg", 1_663_621_424, 0),
    ];
    let good = vec![
        timestamp_row("aaa", 1_664_821_424, 0),
        timestamp_row("bbb", 1_663_821_424, 0),
        timestamp_row("ccc", 1_664_801_424, 500_000),
    ];
    let answers = append(
        &mut client,
        vec![request(Some(writer), bad), request(None, good)],
    )
    .await;
    let refused = answers[0].as_ref().expect("the bad request is answered");
    let errors: Vec<(i64, i32, &str)> = refused
        .row_errors
        .iter()
        .map(|e| (e.index, e.code, e.message.as_str()))
        .collect();
    let fields = bq::row_error::RowErrorCode::FieldsError as i32;
    assert_eq!(
        errors,
        vec![
            (
                0,
                fields,
                "Field foo: STRING(10) has maximum length 10 but got a value with length 12 on field foo."
            ),
            (
                1,
                fields,
                "Timestamp field value is out of range: -9223372036854775808 on field bar."
            ),
            (
                2,
                fields,
                "Field foo: STRING(10) has maximum length 10 but got a value with length 15 on field foo."
            ),
        ]
    );
    assert!(ok(&answers[1]), "{answers:?}");
    let text = |micros: i64| Value::String(kbq_emulator::rows::timestamp_seconds_text(micros));
    assert_eq!(
        table_rows(&emulator),
        vec![
            vec![Value::String("aaa".into()), text(1_664_821_424_000_000)],
            vec![Value::String("bbb".into()), text(1_663_821_424_000_000)],
            vec![Value::String("ccc".into()), text(1_664_801_424_000_500)],
        ]
    );
}

#[tokio::test]
async fn a_message_of_another_name_is_no_timestamp() {
    let (_emulator, mut client) = emulator_with(bad_rows_schema()).await;
    let answers = append(
        &mut client,
        vec![request(
            Some(timestamp_descriptor("Stamp")),
            vec![timestamp_row("a", 1, 0)],
        )],
    )
    .await;
    let status = answers[0]
        .as_ref()
        .expect_err("the writer schema is refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("BigQuery field type TIMESTAMP"),
        "{}",
        status.message()
    );
}

/// Java's `testStreamWriterWithDefaultValue`: a TIMESTAMP column with `CURRENT_TIMESTAMP()` as
/// default, written from a string field; one row sets every field, one none, under DEFAULT_VALUE.
#[tokio::test]
async fn a_timestamp_column_takes_a_timestamp_literal_from_a_string_field() {
    use bq::append_rows_request::MissingValueInterpretation as M;
    let schema = TableSchema {
        fields: vec![
            column(
                "foo_with_default",
                FieldType::String,
                Mode::Nullable,
                Some("'default_value_for_test'"),
            ),
            column(
                "bar_without_default",
                FieldType::String,
                Mode::Nullable,
                None,
            ),
            column(
                "date_with_default_to_current",
                FieldType::Timestamp,
                Mode::Nullable,
                Some("CURRENT_TIMESTAMP()"),
            ),
        ],
    };
    let (emulator, mut client) = emulator_with(schema).await;
    let writer = descriptor(vec![
        field("foo_with_default", 1, Type::String),
        field("bar_without_default", 2, Type::String),
        field("date_with_default_to_current", 3, Type::String),
    ]);
    let mut req = request(
        Some(writer),
        vec![
            string_row(&[
                (1, "foo_value"),
                (2, "bar_value"),
                (3, "2022-02-02 01:02:03"),
            ]),
            string_row(&[]),
        ],
    );
    req.default_missing_value_interpretation = M::DefaultValue as i32;
    let answers = append(&mut client, vec![req]).await;
    assert!(answers.iter().all(ok), "{answers:?}");
    let rows = table_rows(&emulator);
    let text = |micros: i64| Value::String(kbq_emulator::rows::timestamp_seconds_text(micros));
    // 2022-02-02 01:02:03 UTC.
    assert_eq!(
        rows[0],
        vec![
            Value::String("foo_value".into()),
            Value::String("bar_value".into()),
            text(1_643_763_723_000_000),
        ]
    );
    assert_eq!(rows[1][0], Value::String("default_value_for_test".into()));
    assert_eq!(rows[1][1], Value::Null);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let filled: f64 = rows[1][2].as_str().expect("a timestamp").parse().unwrap();
    assert!((now - filled).abs() < 60.0, "{filled} is not now ({now})");
}

// ---- A missing table ----

/// Java's `testJsonStreamWriterWithDefaultSchemaNoTable`: GetWriteStream on the `_default` stream
/// of a table that does not exist fails with a text saying the table may not exist.
#[tokio::test]
async fn the_default_stream_of_a_missing_table_says_it_may_not_exist() {
    let (_emulator, mut client) = emulator_with(TableSchema { fields: vec![] }).await;
    let missing = "projects/p/datasets/d/tables/missing/_default";
    let status = client
        .get_write_stream(bq::GetWriteStreamRequest {
            name: missing.into(),
            view: bq::WriteStreamView::Full as i32,
        })
        .await
        .expect_err("no such table");
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert_eq!(
        status.message(),
        format!(
            "Requested entity was not found. Resource 'projects/p/datasets/d/tables/missing' (or it may not exist). Entity: {missing}"
        )
    );
}
