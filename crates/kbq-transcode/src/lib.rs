//! Avro, Protobuf and JSON → proto2 transcoding: bytes in, bytes out. Knows neither Kafka nor the gRPC
//! client.
//!
//! A [`Plan`] is compiled once per (writer schema, table schema) pair and then turns each
//! record's Avro binary (or Protobuf message) straight into the proto2 bytes of the plan's own
//! [`Plan::descriptor`], which goes into AppendRows' `writer_schema`. The mapping is in
//! `docs/mapping.md`.

mod budget;
pub mod change;
mod compile;
pub mod connect_types;
mod convert;
mod derive;
mod descriptor;
mod error;
mod exec;
mod field_path;
mod flat;
pub mod json;
mod metadata_columns;
mod named;
mod ops;
mod proto;
pub mod protobuf;
mod reader;
mod schema;
pub mod transforms;
mod utf8;
mod wire;

use std::ops::Range;

use prost_types::DescriptorProto;

pub use budget::{
    MAX_DERIVED_COLUMNS, MAX_JSON_SCHEMA_STEPS, MAX_PLAN_BYTES, MAX_PLAN_NODES, TooComplex,
};
pub use compile::{PlanOptions, UnknownFields, check_field_filters};
pub use convert::{MAX_DATE_DAYS, MAX_TIMESTAMP_MICROS, MIN_DATE_DAYS, MIN_TIMESTAMP_MICROS};
pub use derive::{DeriveOptions, MapMode, table_schema_from_avro};
pub use descriptor::file_for;
pub use error::{DeriveError, PlanError, RecordError, SchemaError};
pub use exec::{KafkaHeader, KafkaMetadata};
pub use metadata_columns::MetadataColumns;
pub use schema::{AvroSchema, Field, Kind, Logical, Node, NodeId, Record};
pub use wire::{WireFormat, frame_confluent, split_confluent};

/// A compiled transcoding plan for one (writer schema, table schema) pair.
#[derive(Debug, Clone)]
pub struct Plan {
    body: Body,
    metadata: ops::MetadataOps,
    /// The route's filters on a field's value (`field_path.rs`), asked before the row is
    /// written.
    filters: field_path::FieldFilters,
    descriptor: DescriptorProto,
}

/// What [`Plan::transcode_row`] made of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transcoded {
    /// Its row, this byte range of the buffer.
    Row(Range<usize>),
    /// A `filter` on a field's value drops it: it is committed like any other record, but is
    /// neither a row nor a dead letter (docs/architecture.md, invariant 6).
    Filtered,
}

/// What a plan reads.
#[derive(Debug, Clone)]
enum Body {
    /// The tree of ops the compiler builds and its flat form, which runs it (`flat/`); the tree
    /// runs a plan that has no flat form (nested deeper than the flat executor's stacks) and is
    /// the reference the differential tests compare the flat executor against.
    Avro {
        tree: ops::RecordOp,
        flat: Option<flat::FlatPlan>,
    },
    Protobuf(protobuf::MessageOp),
    Json {
        root: json::ObjectOp,
        /// The registered schema each record is validated against first, when asked.
        validate: Option<std::sync::Arc<json::JsonSchema>>,
    },
}

impl Plan {
    pub fn compile(
        writer: &AvroSchema,
        table: &kbq_core::table_schema::TableSchema,
        options: &PlanOptions,
    ) -> Result<Plan, PlanError> {
        compile::compile(writer, table, options)
    }

    /// The plan of a Protobuf writer message (`ProtoSchema::message`) for the table.
    pub fn compile_protobuf(
        message: &prost_reflect::MessageDescriptor,
        table: &kbq_core::table_schema::TableSchema,
        options: &PlanOptions,
    ) -> Result<Plan, PlanError> {
        protobuf::compile(message, table, options)
    }

    /// The plan of JSON records for the table: typed by the registered JSON Schema when there is
    /// one, by the table alone for schemaless JSON.
    /// With `validate`, every record is first checked against the schema.
    pub fn compile_json(
        schema: Option<&std::sync::Arc<json::JsonSchema>>,
        validate: bool,
        table: &kbq_core::table_schema::TableSchema,
        options: &PlanOptions,
    ) -> Result<Plan, PlanError> {
        json::compile(schema, validate, table, options)
    }

    /// The dead-letter class of a record this plan cannot read at all: its format's
    /// `malformed_*` (docs/mapping.md, "Input framing and malformed records").
    pub fn malformed_class(&self) -> &'static str {
        match &self.body {
            Body::Avro { .. } => "malformed_avro",
            Body::Protobuf(_) => "malformed_protobuf",
            Body::Json { .. } => "malformed_json",
        }
    }

    /// The self-contained proto2 descriptor the rows are encoded with.
    pub fn descriptor(&self) -> &DescriptorProto {
        &self.descriptor
    }

    /// The plan's filters on a field's value first (a record one of them drops is
    /// [`Transcoded::Filtered`], nothing appended), then [`Plan::transcode`]. A record whose
    /// filtered field cannot be read is its error, as a value that cannot be written is.
    #[inline]
    pub fn transcode_row(
        &self,
        body: &[u8],
        meta: Option<&KafkaMetadata<'_>>,
        out: &mut Vec<u8>,
    ) -> Result<Transcoded, RecordError> {
        if !self.filters.is_empty() && self.filters.drop_record(body)? {
            return Ok(Transcoded::Filtered);
        }
        self.transcode(body, meta, out).map(Transcoded::Row)
    }

    /// Whether the plan has a filter on a field's value (then [`Plan::transcode_row`] must be
    /// asked: [`Plan::transcode`] writes the row whatever the filters say).
    pub fn filters_fields(&self) -> bool {
        !self.filters.is_empty()
    }

    /// Appends one row, encoded from `body` (the Avro binary or the Protobuf message, without
    /// framing), to `out` and returns its byte range, whatever the plan's field filters say
    /// ([`Plan::transcode_row`] asks them). On error `out` is left as it was, so a
    /// batch can be built in one buffer and a bad record simply skipped.
    pub fn transcode(
        &self,
        body: &[u8],
        meta: Option<&KafkaMetadata<'_>>,
        out: &mut Vec<u8>,
    ) -> Result<Range<usize>, RecordError> {
        self.transcode_with(body, meta, out, false)
    }

    /// Whether rows of this plan have columns set from fields of the Kafka key (`set … from:
    /// key, field:`), which [`Plan::transcode_key`] writes from the key's own plan.
    pub fn reads_key(&self) -> bool {
        !self.metadata.set.keys().is_empty()
    }

    /// Appends the columns set from the Kafka key's fields to the row just transcoded into
    /// `out`: `key` is the key's plan and its body (without framing), `None` for a record
    /// without a key (the columns NULL, a REQUIRED one the record's error). On error `out` is
    /// left as it was; the caller drops the row.
    pub fn transcode_key(
        &self,
        key: Option<(&transforms::KeyPlan, &[u8])>,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        transforms::write_key(self.metadata.set.keys(), key, out)
    }

    /// [`Plan::transcode`] through the reference executors: Avro's tree executor, which the flat
    /// executor is compared against (`tests/transcode/differential.rs`, the fuzzers), and JSON's
    /// `json/reference.rs` (`tests/transcode/json_differential.rs`). Not for production use.
    #[doc(hidden)]
    pub fn transcode_reference(
        &self,
        body: &[u8],
        meta: Option<&KafkaMetadata<'_>>,
        out: &mut Vec<u8>,
    ) -> Result<Range<usize>, RecordError> {
        self.transcode_with(body, meta, out, true)
    }

    fn transcode_with(
        &self,
        body: &[u8],
        meta: Option<&KafkaMetadata<'_>>,
        out: &mut Vec<u8>,
        reference: bool,
    ) -> Result<Range<usize>, RecordError> {
        let start = out.len();
        let result = match &self.body {
            Body::Avro {
                flat: Some(flat),
                tree: _,
            } if !reference => flat::run_row(flat, &self.metadata, body, meta, out),
            Body::Avro { tree, .. } => exec::run_row(tree, &self.metadata, body, meta, out),
            Body::Protobuf(root) => {
                out.reserve(body.len() + body.len() / 4 + 64);
                if reference {
                    protobuf::run_message_reference(root, body, 0, out)
                        .and_then(|()| exec::write_metadata(&self.metadata, meta, out))
                } else {
                    protobuf::run_message(root, body, 0, out)
                        .and_then(|()| flat::write_metadata(&self.metadata, meta, out))
                }
            }
            Body::Json { root, validate } => {
                out.reserve(body.len() + 64);
                let run = if reference {
                    json::run_row_reference
                } else {
                    json::run_row
                };
                json::check_record(validate.as_deref(), body)
                    .and_then(|()| run(root, body, out))
                    .and_then(|()| exec::write_metadata(&self.metadata, meta, out))
            }
        };
        match result {
            Ok(()) => Ok(start..out.len()),
            Err(e) => {
                out.truncate(start);
                Err(e)
            }
        }
    }
}
