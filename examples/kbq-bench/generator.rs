//! The benchmark's records: the quickstart's generated orders (`src/quickstart/records.rs`, about
//! 1 KB of raw Avro each, 20 fields of mixed types with a nested record and arrays), so the
//! benchmark and the quickstart measure the same data. Record `seq` is always the same bytes.

use kafka_bigquery_sink::quickstart::records::OrderGenerator;

/// The writer schema (raw Avro, given to the sink as a fixed `.avsc`).
pub use kafka_bigquery_sink::quickstart::records::SCHEMA;

/// Fixed, so that runs are comparable.
const SEED: u64 = 0x6b62_715f_6265_6e63;

/// The record key: spreads like a real order id.
pub fn key(seq: u64) -> Vec<u8> {
    format!("order-{seq:010}").into_bytes()
}

/// Appends record `seq` to `out`. The end-to-end latency uses the Kafka timestamp (the sink's
/// `_kafka_timestamp` column), not a field of the record.
pub fn encode(seq: u64, out: &mut Vec<u8>) {
    OrderGenerator::new(SEED).encode(seq, out);
}
