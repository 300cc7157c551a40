//! The pure core of kafka-bigquery-sink (docs/architecture.md): the vocabulary the rest of the
//! sink shares, typed offsets, the checkpoint metadata codec, the exactly-once protocol as a
//! state machine, BigQuery's table schema types and the list of BigQuery's behaviours the sink relies
//! on. Nothing here does I/O or needs an async
//! runtime; the crate's dependency list is what keeps it that way.

pub mod bad_record;
pub mod bigquery_facts;
pub mod ledger;
pub mod metadata;
pub mod model;
pub mod offsets;
pub mod protocol;
pub mod table_schema;
