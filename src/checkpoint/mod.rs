//! The two-phase checkpoint: the pure protocol state machine and the coordinator that drives it.
//!
//! `offsets`, `metadata` and `protocol` are pure (no I/O, no async, no Kafka or gRPC types): the
//! async shells translate librdkafka and BigQuery results into [`protocol::Event`]s and execute the
//! [`protocol::Action`]s. That is what lets `tests/checkpoint_model.rs` drive the protocol against
//! a model of Kafka and BigQuery with a fault injected at every step.

pub mod coordinator;
pub mod metadata;
pub mod offsets;
pub mod protocol;
