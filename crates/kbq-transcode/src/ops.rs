//! The compiled form of a plan: a tree of operations, one per Avro value, each knowing how to
//! read its value and which proto field (if any) to write. Built by `compile`, run by `exec`.

use std::sync::Arc;

use super::convert::DecimalTarget;
use super::named::NamedConv;
use super::proto::Tag;
use super::transforms::ValueOp;

#[derive(Debug, Clone)]
pub enum Op {
    /// An Avro value no column takes.
    Skip(Skip),
    /// The null branch of a union, or a field of type `null`.
    Null(OnNull),
    Scalar {
        tag: Tag,
        conv: Conv,
        column: Arc<str>,
    },
    Union(Box<[Op]>),
    /// Each item runs `item`, which writes one element of the repeated field.
    Array {
        item: Box<Op>,
        min_item: usize,
    },
    /// A map written as repeated `STRUCT<key, value>`.
    MapEntries {
        entry: Tag,
        key: Tag,
        value: Box<Op>,
        min_item: usize,
    },
    /// A nested record written as a length-delimited message.
    Record(Box<RecordOp>),
    /// Any Avro value rendered as JSON text into a string field.
    Json {
        tag: Tag,
        json: Box<JsonOp>,
        column: Arc<str>,
    },
}

#[derive(Debug, Clone)]
pub struct RecordOp {
    /// `None` for the row itself, which is not length-prefixed.
    pub tag: Option<Tag>,
    pub fields: Box<[Op]>,
    /// A REQUIRED column without a source in the writer schema: every record fails with it.
    pub missing_required: Option<Arc<str>>,
}

#[derive(Debug, Clone)]
pub enum OnNull {
    /// NULLABLE column (or an absent repeated value): write nothing.
    Nothing,
    RequiredError(Arc<str>),
    ElementError(Arc<str>),
}

/// How one scalar Avro value becomes one proto field value.
#[derive(Debug, Clone)]
pub enum Conv {
    Int,
    Long,
    IntToDouble,
    LongToDouble,
    Float,
    Double,
    Bool,
    Str,
    StrAsBytes,
    JsonStr,
    Bytes,
    BytesAsStr,
    Fixed(usize),
    Enum(Box<[Box<str>]>),
    UuidFixed,
    Decimal {
        fixed: Option<usize>,
        scale: u32,
        target: DecimalTarget,
    },
    IntToNumeric(DecimalTarget),
    LongToNumeric(DecimalTarget),
    TimestampMillis,
    TimestampMicros,
    TimestampNanos,
    Date,
    DateTimeMillis,
    DateTimeMicros,
    DateTimeNanos,
    TimeMillis,
    TimeMicros,
    /// A conversion only a Connect or Debezium named type needs (`named.rs`).
    Named(NamedConv),
    /// A value transform of the route (`transforms/values.rs`): the value read as `read`
    /// says, then rewritten.
    Value(Box<ValueConv>),
}

#[derive(Debug, Clone)]
pub struct ValueConv {
    pub read: AvroRead,
    pub op: Arc<ValueOp>,
}

/// How a value transform's Avro value is read.
#[derive(Debug, Clone, Copy)]
pub enum AvroRead {
    Str,
    Bytes,
    Fixed(usize),
    Int,
    Long,
    Float,
    Double,
    Bool,
    /// A decimal's bytes, or its fixed of this size.
    Decimal(Option<usize>),
}

/// Skipping an Avro value still validates its structure, so a skipped field cannot hide a
/// malformed record (string contents are not checked for UTF-8 when skipped).
#[derive(Debug, Clone)]
pub enum Skip {
    Nothing,
    Bool,
    Varint,
    Int,
    Fixed(usize),
    Bytes,
    Enum(usize),
    Array(Box<Skip>, usize),
    Map(Box<Skip>, usize),
    Record(Box<[Skip]>),
    Union(Box<[Skip]>),
}

/// Rendering of an Avro value as JSON.
#[derive(Debug, Clone)]
pub enum JsonOp {
    Null,
    Bool,
    Int,
    Long,
    Float,
    Double,
    /// Strings are JSON strings; a string annotated as JSON is embedded as is (validated).
    Str,
    RawJson,
    /// Bytes and fixed as base64 text.
    Bytes,
    Fixed(usize),
    Enum(Box<[Box<str>]>),
    UuidFixed,
    Decimal {
        fixed: Option<usize>,
        scale: u32,
    },
    Array(Box<JsonOp>, usize),
    Map(Box<JsonOp>, usize),
    Record(Box<[(Box<str>, JsonOp)]>),
    Union(Box<[JsonOp]>),
}

/// Tags of the optional Kafka metadata columns.
#[derive(Debug, Clone, Default)]
pub struct MetadataOps {
    pub topic: Option<MetaColumn>,
    pub partition: Option<MetaColumn>,
    pub offset: Option<MetaColumn>,
    pub timestamp: Option<MetaColumn>,
    pub key: Option<MetaColumn>,
    pub headers: Option<HeadersColumn>,
    /// The columns the route's transforms fill (a static value, a header).
    pub set: crate::transforms::SetOps,
}

#[derive(Debug, Clone)]
pub struct MetaColumn {
    pub tag: Tag,
    pub column: Arc<str>,
    pub required: bool,
    /// The column is STRING (key bytes must be UTF-8) or the timestamp column is INT64 (raw
    /// milliseconds) rather than TIMESTAMP.
    pub alternate: bool,
}

#[derive(Debug, Clone)]
pub struct HeadersColumn {
    pub tag: Tag,
    pub key: Tag,
    pub value: Tag,
    pub value_is_string: bool,
    pub column: Arc<str>,
}
