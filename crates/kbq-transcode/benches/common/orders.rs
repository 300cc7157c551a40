//! The end-to-end benchmark's records for the transcoder benchmark: the quickstart's generated
//! orders (`src/quickstart/records.rs`, included by path: this crate does not depend on the
//! daemon) with the seed of the bench driver (`examples/kbq-bench/generator.rs`), written into
//! the table the sink creates from their schema (`create_table: {}`) with the three Kafka
//! metadata columns `bench/run.sh` configures.

// The bench, the differential test and `examples/plan_loop.rs` each use a part of this module.
#![allow(dead_code)]

use kbq_transcode::{
    AvroSchema, DeriveOptions, KafkaMetadata, MetadataColumns, Plan, PlanOptions,
    table_schema_from_avro,
};

// The daemon's module, whole: its unit tests compile here too when a bench is built as a test.
#[allow(dead_code, unused_imports)]
#[path = "../../../../src/quickstart/records.rs"]
mod records;

/// The orders' Avro schema.
pub const SCHEMA: &str = records::SCHEMA;

/// `examples/kbq-bench/generator.rs`'s `SEED`.
const DRIVER_SEED: u64 = 0x6b62_715f_6265_6e63;
/// The inputs cycle over this many records.
const RECORDS: u64 = 1024;

pub struct Orders {
    pub plan: Plan,
    pub avro: Vec<Vec<u8>>,
}

pub fn metadata() -> MetadataColumns {
    MetadataColumns {
        partition: Some("_kafka_partition".into()),
        offset: Some("_kafka_offset".into()),
        timestamp: Some("_kafka_timestamp".into()),
        ..Default::default()
    }
}

impl Orders {
    pub fn new() -> Orders {
        let schema = AvroSchema::parse(records::SCHEMA).unwrap();
        let derive = DeriveOptions {
            metadata: metadata(),
            ..Default::default()
        };
        let table = table_schema_from_avro(&schema, &derive).unwrap();
        let options = PlanOptions {
            metadata: metadata(),
            ..Default::default()
        };
        let plan = Plan::compile(&schema, &table, &options).unwrap();
        let generator = records::OrderGenerator::new(DRIVER_SEED);
        let avro = (0..RECORDS)
            .map(|n| {
                let mut out = Vec::new();
                generator.encode(n, &mut out);
                out
            })
            .collect();
        Orders { plan, avro }
    }

    /// Record `k` of a run with the metadata the sink gives it (partition, offset, timestamp).
    pub fn transcode(&self, avro: &[u8], k: u64, out: &mut Vec<u8>) -> std::ops::Range<usize> {
        self.plan.transcode(avro, Some(&meta(k)), out).unwrap()
    }

    /// Every record transcodes.
    pub fn check(&self) {
        let mut out = Vec::new();
        for (k, avro) in self.avro.iter().enumerate() {
            out.clear();
            self.transcode(avro, k as u64, &mut out);
        }
    }
}

/// The Kafka metadata of record `k` of a run: 16 partitions, as `bench/run.sh` makes them.
pub fn meta(k: u64) -> KafkaMetadata<'static> {
    KafkaMetadata {
        topic: "orders",
        partition: (k % 16) as i32,
        offset: kbq_core::offsets::KafkaOffset(k as i64),
        timestamp_millis: Some(1_765_000_000_000 + k as i64),
        ..Default::default()
    }
}
