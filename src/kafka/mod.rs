//! The consumer task, the rebalance bridge and the dead-letter producer.

pub mod commit_error;
pub mod committed;
pub mod consumer;
pub mod dead_letter;
pub mod memory_budget;
