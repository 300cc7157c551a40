//! Throughput of the emulator's append path on one core: one 8 MiB AppendRows request decoded
//! from its wire bytes, every row validated against the table schema, and stored in a COMMITTED
//! stream — everything a real AppendRows call does except the HTTP/2 transport. The aim is well
//! over 100 MB/s. Two row shapes: `synthetic` (~1 KB, 9 columns, most bytes in one
//! BYTES and one STRING value) and `orders`, the rows of the end-to-end benchmark (the
//! quickstart's order records through the sink's own transcoder: 20 fields with a nested
//! record, repeated records and strings, decimals — many small values per row).

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1 as bq;
use kafka_bigquery_sink::quickstart::records::{OrderGenerator, SCHEMA as ORDER_SCHEMA};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use kbq_emulator::grpc::{AppendOutcome, AppendSession};
use kbq_emulator::store::{Dataset, Store, StoreConfig, StreamKind, Table, TableRef};
use kbq_transcode::{AvroSchema, DeriveOptions, Plan, PlanOptions, table_schema_from_avro};
use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto};

const TARGET_BYTES: usize = 8 * 1024 * 1024;

fn columns() -> Vec<(&'static str, FieldType, Mode, Type)> {
    vec![
        ("id", FieldType::Int64, Mode::Required, Type::Int64),
        (
            "event_time",
            FieldType::Timestamp,
            Mode::Required,
            Type::Int64,
        ),
        ("customer", FieldType::String, Mode::Nullable, Type::String),
        ("score", FieldType::Float64, Mode::Nullable, Type::Double),
        ("active", FieldType::Bool, Mode::Nullable, Type::Bool),
        ("day", FieldType::Date, Mode::Nullable, Type::Int32),
        ("amount", FieldType::Numeric, Mode::Nullable, Type::Bytes),
        ("payload", FieldType::Bytes, Mode::Nullable, Type::Bytes),
        ("note", FieldType::String, Mode::Nullable, Type::String),
    ]
}

fn table_schema() -> TableSchema {
    TableSchema {
        fields: columns()
            .into_iter()
            .map(|(name, t, mode, _)| TableFieldSchema::new(name, t, mode))
            .collect(),
    }
}

fn descriptor() -> DescriptorProto {
    DescriptorProto {
        name: Some("Row".into()),
        field: columns()
            .into_iter()
            .enumerate()
            .map(|(i, (name, _, _, t))| FieldDescriptorProto {
                name: Some(name.into()),
                number: Some(i as i32 + 1),
                label: Some(Label::Optional as i32),
                r#type: Some(t as i32),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn row(i: i64) -> Bytes {
    use prost::encoding as enc;
    let mut out = Vec::with_capacity(1100);
    enc::int64::encode(1, &i, &mut out);
    enc::int64::encode(2, &(1_700_000_000_000_000 + i), &mut out);
    enc::string::encode(3, &format!("customer-{i:08}@example.invalid"), &mut out);
    enc::double::encode(4, &(i as f64 * 0.25), &mut out);
    enc::bool::encode(5, &(i % 2 == 0), &mut out);
    enc::int32::encode(6, &(19_000 + (i % 365) as i32), &mut out);
    enc::bytes::encode(
        7,
        &(i as i128 * 1_000_000_000).to_le_bytes().to_vec(),
        &mut out,
    );
    enc::bytes::encode(8, &vec![(i % 251) as u8; 600], &mut out);
    enc::string::encode(9, &"lorem ipsum dolor sit amet ".repeat(12), &mut out);
    Bytes::from(out)
}

/// One request's worth of rows: the table, the writer descriptor and the serialized rows.
struct Shape {
    table: TableSchema,
    descriptor: DescriptorProto,
    rows: Vec<Bytes>,
}

fn synthetic() -> Shape {
    let mut rows = Vec::new();
    let mut size = 0;
    while size < TARGET_BYTES {
        let r = row(rows.len() as i64);
        size += r.len() + 3;
        rows.push(r);
    }
    Shape {
        table: table_schema(),
        descriptor: descriptor(),
        rows,
    }
}

fn orders() -> Shape {
    let avro = AvroSchema::parse(ORDER_SCHEMA).unwrap();
    let table = table_schema_from_avro(&avro, &DeriveOptions::default()).unwrap();
    let plan = Plan::compile(&avro, &table, &PlanOptions::default()).unwrap();
    let generator = OrderGenerator::new(7);
    let (mut record, mut rows, mut size) = (Vec::new(), Vec::new(), 0);
    while size < TARGET_BYTES {
        record.clear();
        generator.encode(rows.len() as u64, &mut record);
        let mut out = Vec::new();
        plan.transcode(&record, None, &mut out).unwrap();
        size += out.len() + 3;
        rows.push(Bytes::from(out));
    }
    Shape {
        table,
        descriptor: plan.descriptor().clone(),
        rows,
    }
}

fn setup(schema: &TableSchema) -> (AppendSession, String) {
    let store = Store::new(StoreConfig::default());
    store.insert_dataset(Dataset::new("p", "d")).unwrap();
    let table = TableRef::new("p", "d", "t");
    store
        .insert_table(Table::new(table.clone(), schema.clone()))
        .unwrap();
    let stream = store
        .create_write_stream(&table.path(), StreamKind::Committed)
        .unwrap()
        .name;
    (AppendSession::new(store, 64 * 1024 * 1024), stream)
}

fn request_bytes(stream: &str, shape: &Shape) -> Bytes {
    let req = bq::AppendRowsRequest {
        write_stream: stream.to_string(),
        offset: Some(0),
        rows: Some(bq::append_rows_request::Rows::ProtoRows(
            bq::append_rows_request::ProtoData {
                writer_schema: Some(bq::ProtoSchema {
                    proto_descriptor: Some(shape.descriptor.clone()),
                }),
                rows: Some(bq::ProtoRows {
                    serialized_rows: shape.rows.clone(),
                }),
            },
        )),
        ..Default::default()
    };
    Bytes::from(req.encode_to_vec())
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("emulator_append");
    group.sample_size(20);
    for (name, shape) in [("synthetic", synthetic()), ("orders", orders())] {
        let (_, probe) = setup(&shape.table);
        let wire = request_bytes(&probe, &shape);
        let rows = shape.rows.len();
        group.throughput(Throughput::Bytes(wire.len() as u64));
        group.bench_function(
            format!("8MiB_{name}_{rows}_rows_decode_validate_store"),
            |b| {
                b.iter_batched(
                    || {
                        // Each iteration appends at offset 0 of a fresh stream, so the request bytes
                        // are the same but for the stream name.
                        let (session, stream) = setup(&shape.table);
                        let mut req = bq::AppendRowsRequest::decode(wire.clone()).unwrap();
                        req.write_stream = stream;
                        (session, Bytes::from(req.encode_to_vec()))
                    },
                    |(mut session, bytes)| {
                        let req = bq::AppendRowsRequest::decode(bytes).unwrap();
                        match session.handle(req) {
                            AppendOutcome::Reply(r) => {
                                assert!(matches!(
                                    r.response,
                                    Some(bq::append_rows_response::Response::AppendResult(_))
                                ));
                                (session, r)
                            }
                            AppendOutcome::End(status) => panic!("append refused: {status}"),
                        }
                    },
                    BatchSize::PerIteration,
                )
            },
        );
    }
    group.finish();
}

criterion_group!(benches, append);
criterion_main!(benches);
