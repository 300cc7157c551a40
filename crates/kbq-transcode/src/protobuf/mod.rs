//! Confluent Protobuf input: the message-index framing, registered `.proto` schemas compiled into
//! descriptors, and plans that rewrite a message's wire bytes into the row's wire bytes directly —
//! fields matched to columns by name and renumbered, no decoded message in between. The mapping
//! is in `docs/mapping.md`.

mod compile;
mod derive;
mod exec;
mod field;
mod field_path;
mod flat;
mod framing;
mod ops;
mod reader;
mod scalar;
mod schema;
mod special;

pub use derive::table_schema_from_protobuf;
pub use framing::{MessageIndexEncoding, MessagePath, frame_protobuf, split_message_indexes};
pub use schema::ProtoSchema;

pub(super) use compile::compile;
pub(super) use exec::run_message as run_message_reference;
pub(crate) use field_path::FieldPath;
pub(super) use flat::run_message;
pub(super) use ops::MessageOp;
