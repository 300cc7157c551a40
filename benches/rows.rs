//! Row validation throughput of the emulator: one 8 MiB AppendRows worth of typical sink rows
//! (strings, integers, a timestamp, NUMERIC bytes, a nested record, a repeated field) validated by
//! `RowCodec::validate`. The aim is well over 100 MB/s on one core: the emulator must never be what
//! a benchmark measures.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kbq_core::table_schema::TableSchema;
use kbq_emulator::rows::RowCodec;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto};

fn field(name: &str, number: i32, t: Type, label: Label) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(label as i32),
        r#type: Some(t as i32),
        ..Default::default()
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, number: u32, wire: u8) {
    varint(out, (u64::from(number) << 3) | u64::from(wire));
}

fn len_field(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    key(out, number, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn row(i: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    len_field(&mut out, 1, b"orders-topic-with-a-long-name");
    key(&mut out, 2, 0);
    varint(&mut out, i % 64);
    key(&mut out, 3, 0);
    varint(&mut out, 1_000_000 + i);
    key(&mut out, 4, 0);
    varint(&mut out, 1_700_000_000_000_000 + i);
    len_field(
        &mut out,
        5,
        format!("customer-{i:08}@example.invalid, a free text payload").as_bytes(),
    );
    len_field(&mut out, 6, &(i as i128 * 1_000_000_000).to_le_bytes());
    let mut inner = Vec::new();
    len_field(&mut inner, 1, b"Zurich");
    key(&mut inner, 2, 0);
    varint(&mut inner, 8000 + i % 100);
    len_field(&mut out, 7, &inner);
    let mut packed = Vec::new();
    for v in 0..4 {
        varint(&mut packed, i + v);
    }
    len_field(&mut out, 8, &packed);
    out
}

fn bench(c: &mut Criterion) {
    let mut address = DescriptorProto {
        name: Some("Address".into()),
        field: vec![
            field("city", 1, Type::String, Label::Optional),
            field("zip", 2, Type::Int64, Label::Optional),
        ],
        ..Default::default()
    };
    address.name = Some("Address".into());
    let mut record = field("address", 7, Type::Message, Label::Optional);
    record.type_name = Some(".Row.Address".into());
    let descriptor = DescriptorProto {
        name: Some("Row".into()),
        field: vec![
            field("topic", 1, Type::String, Label::Optional),
            field("partition", 2, Type::Int32, Label::Optional),
            field("kafka_offset", 3, Type::Int64, Label::Optional),
            field("ts", 4, Type::Int64, Label::Optional),
            field("payload", 5, Type::String, Label::Optional),
            field("amount", 6, Type::Bytes, Label::Optional),
            record,
            field("scores", 8, Type::Int64, Label::Repeated),
        ],
        nested_type: vec![address],
        ..Default::default()
    };
    let schema: TableSchema = serde_json::from_value(serde_json::json!({"fields": [
        {"name": "topic", "type": "STRING", "mode": "REQUIRED"},
        {"name": "partition", "type": "INT64", "mode": "REQUIRED"},
        {"name": "kafka_offset", "type": "INT64", "mode": "REQUIRED"},
        {"name": "ts", "type": "TIMESTAMP"},
        {"name": "payload", "type": "STRING", "maxLength": "1000"},
        {"name": "amount", "type": "NUMERIC"},
        {"name": "address", "type": "RECORD", "fields": [
            {"name": "city", "type": "STRING"}, {"name": "zip", "type": "INT64"}]},
        {"name": "scores", "type": "INT64", "mode": "REPEATED"},
    ]}))
    .expect("schema");
    let codec = RowCodec::compile(&descriptor, &schema).expect("codec");
    let mut rows = Vec::new();
    let mut total = 0usize;
    let mut i = 0;
    while total < 8 << 20 {
        let r = row(i);
        total += r.len();
        rows.push(r);
        i += 1;
    }
    for r in &rows {
        codec.validate(r).expect("valid row");
    }
    let mut group = c.benchmark_group("rows");
    group.throughput(Throughput::Bytes(total as u64));
    group.bench_function("validate_8MiB_append", |b| {
        b.iter(|| {
            for r in &rows {
                codec.validate(r).expect("valid row");
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
