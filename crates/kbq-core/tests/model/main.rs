//! The two model tests of the pure core, one binary on one harness (`support/`): the
//! exactly-once protocol (`exactly_once.rs`, its world in `exactly_once/world.rs`) and the
//! at-least-once ledger (`ledger.rs`), each against the models of Kafka and BigQuery with a fault
//! injected at every step, on committed seeds (`scripts/model-soak.sh` draws fresh ones).

// The model indexes its per-partition arrays by partition number, like Kafka does.
#![allow(clippy::needless_range_loop)]

mod exactly_once;
mod ledger;
mod support;
