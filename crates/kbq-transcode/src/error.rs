//! Errors of the transcoder, one type per boundary: a schema that cannot be used ([`SchemaError`],
//! [`PlanError`]) stops the partition until the schema or table changes; a record that cannot be
//! transcoded ([`RecordError`]) is a per-record error the caller routes to the dead-letter queue.

use std::sync::Arc;

use crate::budget::TooComplex;

/// The writer schema itself is unusable (not valid Avro or Protobuf, or a shape we cannot read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("invalid avro schema: {0}")]
    Invalid(String),
    #[error("invalid protobuf schema: {0}")]
    InvalidProtobuf(String),
}

/// The writer schema cannot be mapped onto the table. Decided once per (schema, table) pair.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Schema(#[from] SchemaError),
    #[error("column {column}: avro {avro} cannot be written to a {column_type} column")]
    Incompatible {
        column: String,
        avro: String,
        column_type: String,
    },
    #[error("avro field {field} has no column in the table (unknown_fields: error)")]
    UnknownField { field: String },
    #[error("column {column}: {reason}")]
    Unsupported { column: String, reason: String },
    #[error("column name {column:?} is not a valid protobuf field name")]
    BadColumnName { column: String },
    #[error("kafka metadata column {column}: {reason}")]
    Metadata { column: String, reason: String },
    #[error("column {column}: protobuf {proto} cannot be written to a {column_type} column")]
    ProtoIncompatible {
        column: String,
        proto: String,
        column_type: String,
    },
    #[error("protobuf field {field} has no column in the table (unknown_fields: error)")]
    UnknownProtoField { field: String },
    /// Not one field of the message has a column although the table has data columns: its
    /// records would be rows of Kafka metadata alone, most likely another message than the
    /// table's (docs/mapping.md, "Which message a table holds").
    #[error(
        "no field of protobuf message {message} has a column in the table: its records would keep only the kafka metadata (is it the message the table was made for?)"
    )]
    NoProtoFieldWritten { message: String },
    #[error("column {column}: json {json} cannot be written to a {column_type} column")]
    JsonIncompatible {
        column: String,
        json: String,
        column_type: String,
    },
    #[error("json schema property {field} has no column in the table (unknown_fields: error)")]
    UnknownJsonProperty { field: String },
    /// A transform of the route cannot apply to this writer schema and table
    /// (docs/mapping.md, "Transforms").
    #[error("transform {transform}: {reason}")]
    Transform { transform: String, reason: String },
    /// The schema expands past a compiler's work budget (`budget.rs`).
    #[error(transparent)]
    TooComplex(#[from] TooComplex),
}

impl PlanError {
    /// The bounded class of the records a refused plan sends to the dead-letter topic.
    pub fn class(&self) -> &'static str {
        match self {
            PlanError::TooComplex(_) => "schema_too_complex",
            _ => "incompatible_schema",
        }
    }
}

/// Deriving a table schema from an Avro schema failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeriveError {
    #[error(transparent)]
    Schema(#[from] SchemaError),
    #[error("field {field}: {reason}")]
    Unsupported { field: String, reason: String },
    #[error(transparent)]
    TooComplex(#[from] TooComplex),
}

/// Why one record could not be transcoded. Never retryable: the same bytes fail the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("payload of {len} bytes is shorter than the 5-byte confluent header")]
    ShortHeader { len: usize },
    #[error("magic byte {found:#04x} is not the confluent wire format's 0x00")]
    BadMagic { found: u8 },
    #[error("avro data ends early at byte {offset} while reading {what}")]
    Truncated { offset: usize, what: &'static str },
    #[error("avro varint at byte {offset} is malformed or overflows 64 bits")]
    BadVarint { offset: usize },
    #[error("avro int at byte {offset} is out of the 32-bit range: {value}")]
    IntOutOfRange { offset: usize, value: i64 },
    #[error("negative length {len} at byte {offset}")]
    NegativeLength { offset: usize, len: i64 },
    #[error("length {len} at byte {offset} exceeds the {remaining} bytes left")]
    LengthTooLarge {
        offset: usize,
        len: i64,
        remaining: usize,
    },
    #[error("array or map at byte {offset} claims {count} items, more than the data can hold")]
    AbsurdCount { offset: usize, count: i64 },
    #[error("string at byte {offset} is not valid utf-8")]
    InvalidUtf8 { offset: usize },
    #[error("boolean byte {value:#04x} at byte {offset} is neither 0 nor 1")]
    BadBoolean { offset: usize, value: u8 },
    #[error("union branch {index} at byte {offset} does not exist (the union has {branches})")]
    BadUnionBranch {
        offset: usize,
        index: i64,
        branches: usize,
    },
    #[error("enum index {index} at byte {offset} does not exist (the enum has {symbols} symbols)")]
    BadEnumIndex {
        offset: usize,
        index: i64,
        symbols: usize,
    },
    #[error("{trailing} trailing bytes after the avro record")]
    TrailingBytes { trailing: usize },
    #[error("column {column} is REQUIRED but the record has no value for it")]
    MissingRequired { column: Arc<str> },
    #[error("column {column} is REQUIRED but the value is null")]
    NullRequired { column: Arc<str> },
    #[error("column {column} is REPEATED and cannot hold a null element")]
    NullElement { column: Arc<str> },
    #[error("column {column}: {reason}")]
    Value { column: Arc<str>, reason: String },
    #[error("protobuf message index array: {reason}")]
    BadMessageIndexes { reason: String },
    #[error("protobuf data ends early at byte {offset} while reading {what}")]
    ProtoTruncated { offset: usize, what: &'static str },
    #[error("protobuf varint at byte {offset} is malformed or overflows 64 bits")]
    ProtoBadVarint { offset: usize },
    #[error(
        "protobuf field number {number} at byte {offset} has wire type {wire}, which is invalid or does not match its declared type"
    )]
    ProtoWireType {
        offset: usize,
        number: u64,
        wire: u8,
    },
    #[error(
        "protobuf field number {number} at byte {offset} is not in the writer schema (unknown_fields: error)"
    )]
    ProtoUnknownField { offset: usize, number: u64 },
    #[error("protobuf field {field} occurs more than once: {reason}")]
    ProtoRepeatedField {
        field: Arc<str>,
        reason: &'static str,
    },
    #[error("protobuf groups nest deeper than {max} levels at byte {offset}")]
    ProtoTooDeep { offset: usize, max: usize },
    #[error("json at byte {offset}: expected {what}")]
    MalformedJson { offset: usize, what: &'static str },
    #[error("column {column}: json {found} cannot be written to a {column_type} column")]
    JsonType {
        column: Arc<str>,
        found: &'static str,
        column_type: &'static str,
    },
    #[error("key {key} occurs twice in one json object")]
    JsonDuplicateKey { key: Arc<str> },
    #[error("key {key} has no column in the table (unknown_fields: error)")]
    JsonUnknownKey { key: String },
    #[error("the record does not match its json schema: {reason}")]
    JsonSchemaViolation { reason: String },
    /// Reading the record through its schema would take more steps than the schema's work
    /// budget allows (a schema whose types expand exponentially; `budget.rs`).
    #[error("{what} takes more than {limit} steps: the schema is too complex")]
    SchemaTooComplex { what: &'static str, limit: usize },
    /// The Kafka key, read for the columns `set … from: key, field:` fills, is not what its
    /// schema says: its class is the key's error's.
    #[error("column {columns} from the kafka key: {source}")]
    KafkaKey {
        columns: Arc<str>,
        source: Box<RecordError>,
    },
}

impl RecordError {
    /// The bounded class of the error, as the dead-letter header and metric label carry it.
    pub fn class(&self) -> &'static str {
        match self {
            RecordError::ShortHeader { .. } | RecordError::BadMagic { .. } => "bad_magic",
            RecordError::Value { .. } => "out_of_range",
            RecordError::MissingRequired { .. }
            | RecordError::NullRequired { .. }
            | RecordError::NullElement { .. } => "incompatible_schema",
            RecordError::BadMessageIndexes { .. }
            | RecordError::ProtoTruncated { .. }
            | RecordError::ProtoBadVarint { .. }
            | RecordError::ProtoWireType { .. }
            | RecordError::ProtoUnknownField { .. }
            | RecordError::ProtoRepeatedField { .. }
            | RecordError::ProtoTooDeep { .. } => "malformed_protobuf",
            RecordError::MalformedJson { .. } | RecordError::JsonDuplicateKey { .. } => {
                "malformed_json"
            }
            RecordError::JsonType { .. } | RecordError::JsonUnknownKey { .. } => {
                "incompatible_schema"
            }
            RecordError::JsonSchemaViolation { .. } => "schema_violation",
            RecordError::SchemaTooComplex { .. } => "schema_too_complex",
            RecordError::KafkaKey { source, .. } => source.class(),
            _ => "malformed_avro",
        }
    }
}
