//! JSON input: Confluent JSON Schema (magic byte, schema id, JSON text) and schemaless JSON.
//! A plan compiled per (schema, table) — or per table for schemaless JSON — writes the record's
//! JSON text into the row's proto bytes in one pass, without a value tree. The mapping is in
//! `docs/mapping.md`.

mod compile;
pub mod connect_schema;
mod derive;
mod exec;
mod field_path;
mod keys;
mod named;
mod named_exec;
mod ops;
mod reference;
pub(crate) mod scan;
mod schema;
pub(crate) mod text;
mod validate;

pub use derive::table_schema_from_json;
pub use schema::JsonSchema;
pub(crate) use schema::Kind as SchemaKind;
pub use validate::validate;
pub(crate) use validate::{VALIDATE_STEPS_BASE, VALIDATE_STEPS_PER_BYTE};

pub(super) use validate::check_record;

pub(super) use compile::compile;
pub(super) use exec::run_row;
pub(crate) use field_path::FieldPath;
pub(super) use ops::ObjectOp;
pub(super) use reference::run_row as run_row_reference;
