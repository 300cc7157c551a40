//! End to end: Avro records transcoded by a plan, appended over gRPC to the emulator's
//! `_default` stream with the plan's descriptor, and read back over REST (`tabledata.list`) as
//! the typed values BigQuery shows for them.

use std::time::Duration;

use apache_avro::types::Value;
use apache_avro::{Decimal, Schema};
use bytes::Bytes;
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1 as bq;
use kbq_core::table_schema::TableSchema;
use kbq_emulator::store::TableRef;
use kbq_emulator::testsuite::{client, create_table, start};
use kbq_transcode::{AvroSchema, KafkaMetadata, MetadataColumns, Plan, PlanOptions};
use serde_json::{Value as Json, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const SCHEMA: &str = r#"{"type":"record","name":"r","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":["null","string"]},
  {"name":"score","type":"double"},
  {"name":"ok","type":"boolean"},
  {"name":"raw","type":"bytes"},
  {"name":"ts_ms","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"ts_ns","type":{"type":"long","logicalType":"timestamp-nanos"}},
  {"name":"local","type":{"type":"long","logicalType":"local-timestamp-millis"}},
  {"name":"day","type":{"type":"int","logicalType":"date"}},
  {"name":"tod","type":{"type":"long","logicalType":"time-micros"}},
  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
  {"name":"big","type":{"type":"fixed","name":"B","size":16,"logicalType":"decimal","precision":30,"scale":20}},
  {"name":"uid","type":{"type":"fixed","name":"U","size":16,"logicalType":"uuid"}},
  {"name":"color","type":{"type":"enum","name":"C","symbols":["RED","GREEN"]}},
  {"name":"doc","type":{"type":"string","sqlType":"JSON"}},
  {"name":"place","type":{"type":"string","logicalType":"geography_wkt"}},
  {"name":"addr","type":{"type":"record","name":"A","fields":[{"name":"city","type":"string"}]}},
  {"name":"tags","type":{"type":"array","items":"string"}},
  {"name":"attrs","type":{"type":"map","values":"long"}}
]}"#;

const TABLE: &str = r#"{"fields":[
  {"name":"id","type":"INT64","mode":"REQUIRED"},
  {"name":"name","type":"STRING"},
  {"name":"score","type":"FLOAT64"},
  {"name":"ok","type":"BOOL"},
  {"name":"raw","type":"BYTES"},
  {"name":"ts_ms","type":"TIMESTAMP"},
  {"name":"ts_ns","type":"TIMESTAMP"},
  {"name":"local","type":"DATETIME"},
  {"name":"day","type":"DATE"},
  {"name":"tod","type":"TIME"},
  {"name":"amount","type":"NUMERIC"},
  {"name":"big","type":"BIGNUMERIC"},
  {"name":"uid","type":"STRING"},
  {"name":"color","type":"STRING"},
  {"name":"doc","type":"JSON"},
  {"name":"place","type":"GEOGRAPHY"},
  {"name":"addr","type":"RECORD","fields":[{"name":"city","type":"STRING"}]},
  {"name":"tags","type":"STRING","mode":"REPEATED"},
  {"name":"attrs","type":"RECORD","mode":"REPEATED","fields":[
     {"name":"key","type":"STRING"},{"name":"value","type":"INT64"}]},
  {"name":"note","type":"STRING"},
  {"name":"_topic","type":"STRING"},
  {"name":"_offset","type":"INT64"}
]}"#;

fn record() -> Value {
    let fields = vec![
        ("id", Value::Long(-7)),
        ("name", Value::Union(0, Box::new(Value::Null))),
        ("score", Value::Double(1.5)),
        ("ok", Value::Boolean(false)),
        ("raw", Value::Bytes(vec![0, 1, 254, 255])),
        // 2026-08-31T12:30:00Z and one nanosecond before the epoch
        ("ts_ms", Value::TimestampMillis(1_788_179_400_000)),
        ("ts_ns", Value::TimestampNanos(-1)),
        // 2026-08-31T12:30:00 local, on a minute boundary
        ("local", Value::LocalTimestampMillis(1_788_179_400_000)),
        ("day", Value::Date(-719_162)),
        (
            "tod",
            Value::TimeMicros((13 * 3600 + 5 * 60) * 1_000_000 + 7),
        ),
        (
            "amount",
            Value::Decimal(Decimal::from((-12_345i64).to_be_bytes().to_vec())),
        ),
        (
            "big",
            Value::Decimal(Decimal::from(
                (-123_456_789_012_345_678_901_234_567i128)
                    .to_be_bytes()
                    .to_vec(),
            )),
        ),
        (
            "uid",
            Value::Uuid(apache_avro::Uuid::from_u128(
                0x0123_4567_89ab_cdef_0123_4567_89ab_cdef,
            )),
        ),
        ("color", Value::Enum(1, "GREEN".into())),
        ("doc", Value::String("[1,{\"a\":null}]".into())),
        ("place", Value::String("POINT(1 2)".into())),
        (
            "addr",
            Value::Record(vec![("city".into(), Value::String("Zürich".into()))]),
        ),
        (
            "tags",
            Value::Array(vec![Value::String("a".into()), Value::String("b".into())]),
        ),
        (
            "attrs",
            Value::Map([("k".to_string(), Value::Long(3))].into_iter().collect()),
        ),
    ];
    Value::Record(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

#[tokio::test]
async fn transcoded_rows_read_back_from_the_emulator_as_typed_values() {
    let emu = start().await;
    let table: TableSchema = serde_json::from_str(TABLE).unwrap();
    create_table(&emu.store, &TableRef::new("p", "d", "t"), table.clone());

    let options = PlanOptions {
        metadata: MetadataColumns {
            topic: Some("_topic".into()),
            offset: Some("_offset".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let plan = Plan::compile(&AvroSchema::parse(SCHEMA).unwrap(), &table, &options).unwrap();
    let apache = Schema::parse_str(SCHEMA).unwrap();
    let avro = apache_avro::writer::datum::GenericDatumWriter::builder(&apache)
        .build()
        .unwrap()
        .write_value_to_vec(record())
        .unwrap();
    let meta = KafkaMetadata {
        topic: "orders",
        offset: kbq_core::offsets::KafkaOffset(41),
        ..Default::default()
    };
    let mut batch = Vec::new();
    let range = plan.transcode(&avro, Some(&meta), &mut batch).unwrap();

    let mut c = client(emu.addr).await;
    let (tx, rx) = mpsc::channel(4);
    tx.send(bq::AppendRowsRequest {
        write_stream: "projects/p/datasets/d/tables/t/_default".into(),
        rows: Some(bq::append_rows_request::Rows::ProtoRows(
            bq::append_rows_request::ProtoData {
                writer_schema: Some(bq::ProtoSchema {
                    proto_descriptor: Some(plan.descriptor().clone()),
                }),
                rows: Some(bq::ProtoRows {
                    serialized_rows: vec![Bytes::copy_from_slice(&batch[range])],
                }),
            },
        )),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut responses = c
        .append_rows(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let response = tokio::time::timeout(Duration::from_secs(10), responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            response.response,
            Some(bq::append_rows_response::Response::AppendResult(_))
        ),
        "{response:?}"
    );
    drop(tx);

    let page: Json = reqwest::get(format!(
        "http://{}/bigquery/v2/projects/p/datasets/d/tables/t/data?formatOptions.useInt64Timestamp=true",
        emu.addr
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let cells: Vec<Json> = page["rows"][0]["f"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows: {page}"))
        .iter()
        .map(|c| c["v"].clone())
        .collect();
    let names: Vec<&str> = table.fields.iter().map(|f| f.name.as_str()).collect();
    let row: serde_json::Map<String, Json> =
        names.iter().map(|n| n.to_string()).zip(cells).collect();
    let expected = json!({
        "id": "-7",
        "name": null,
        "score": "1.5",
        "ok": "false",
        "raw": "AAH+/w==",
        "ts_ms": "1788179400000000",
        "ts_ns": "-1",
        "local": "2026-08-31T12:30:00",
        "day": "0001-01-01",
        "tod": "13:05:00.000007",
        "amount": "-123.45",
        "big": "-1234567.89012345678901234567",
        "uid": "01234567-89ab-cdef-0123-456789abcdef",
        "color": "GREEN",
        "doc": "[1,{\"a\":null}]",
        "place": "POINT(1 2)",
        "addr": {"f": [{"v": "Zürich"}]},
        "tags": [{"v": "a"}, {"v": "b"}],
        "attrs": [{"v": {"f": [{"v": "k"}, {"v": "3"}]}}],
        "note": null,
        "_topic": "orders",
        "_offset": "41",
    });
    for (name, want) in expected.as_object().unwrap() {
        assert_eq!(&row[name], want, "column {name}");
    }
}
