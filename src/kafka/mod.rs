//! The consumer task, the rebalance bridge, the dead-letter producer, and how each of their
//! librdkafka clients finds the cluster again.

pub mod authorized;
pub mod commit_error;
pub mod committed;
pub mod consumer;
pub mod dead_letter;
pub mod headers;
pub mod memory_budget;
pub mod reconnect;
pub mod redact;
