//! The two-phase checkpoint: the pure protocol state machine and the coordinator that drives it.
//!
//! `offsets`, `metadata` and `protocol` live in the `kbq-core` crate, whose dependencies keep them
//! pure (no I/O, no async, no Kafka or gRPC types), and are imported from there. The async shells translate librdkafka and BigQuery results into [`protocol::Event`]s and execute the
//! [`protocol::Action`]s. That is what lets `crates/kbq-core/tests/model/exactly_once.rs` drive the protocol against
//! a model of Kafka and BigQuery with a fault injected at every step.
//!
//! What a shell owes the protocol:
//! * every event is handled under the commit lock, the one the revoke callback takes, so that a
//!   [`protocol::Action::CommitOffsets`] is either handed to librdkafka before a revoke begins or
//!   never built;
//! * every request it was asked to send is answered by exactly one event (an error or a timeout
//!   is an answer), and answers name what they answer (commit id, stream and row);
//! * the revoke callback returns only after [`protocol::Action::Release`] for each revoked
//!   partition, or after sending [`protocol::Event::HandoffDeadline`];
//! * the writer reports every acknowledgement with [`protocol::Event::RowsAcknowledged`], in
//!   order, tagged with the incarnation it was started for.

pub mod coordinator;
pub mod denied;
pub mod machine;
pub mod stall;
