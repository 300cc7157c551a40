//! The transcoder's tests, one binary (a binary per file would link the crate once each): the
//! mapping's golden rows per format, property tests against independent oracles, vectors from
//! fastavro and Confluent's serializers, Kafka Connect's and Debezium's named types, and the
//! bounded fuzzers. `compile_budget.rs` stays a binary of its own: it counts every allocation
//! through its global allocator, which other tests running beside it would inflate.

mod absent_fields;
mod connect_avro;
mod connect_types;
mod conversions;
mod differential;
mod flatten;
mod fuzz;
mod golden;
mod json;
mod json_differential;
mod json_props;
mod key_fields;
mod props;
mod protobuf;
mod protobuf_vectors;
mod support;
mod transforms;
mod transforms_filter;
mod vectors;
