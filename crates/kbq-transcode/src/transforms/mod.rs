//! Transforms of a route (docs/mapping.md, "Transforms"): a list, applied in order, that the plan
//! compiler folds into the plan, so a record pays nothing for them at run time. Fields are
//! dropped, renamed or masked by choosing which column each field fills (`fields.rs`); a column
//! is set from a static value or a Kafka header by a value the plan writes beside the Kafka
//! metadata (`columns.rs`), or from a field of the Kafka key by a plan of the key's own schema
//! (`keys.rs`); records are filtered before they reach a plan (`filter.rs`). The
//! types are what the YAML says (the config deserializes them directly); [`check`] is the part
//! of `validate` that needs no schema.

mod absent;
mod cast;
mod columns;
mod derive;
mod fields;
mod filter;
mod keys;
mod predicate;
mod time_format;
mod timestamps;
mod values;

use serde::Deserialize;

pub use absent::{absent_fields, check_absent, has_field, without_absent};
pub(crate) use columns::{HeaderValue, SetOps, set_ops, write_set};
pub(crate) use derive::apply as apply_to_derived;
pub(crate) use fields::{FieldRules, Target};
pub use filter::{Filter, FilterMatch};
pub(crate) use keys::write_key;
pub use keys::{KeyPlan, KeySchema};
pub(crate) use predicate::ValueTest;
pub(crate) use values::{JsonKind, Scalar, Source, ValueOp};

use crate::metadata_columns::MetadataColumns;

/// One transform, as the YAML spells it: `- drop: {field: a.b}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transform {
    /// The field is not written: its column, if the table has one, is left NULL (or its
    /// default).
    Drop(DropField),
    /// The field fills the column `to` instead of the column of its own name.
    Rename(RenameField),
    /// The field's value is never written: its column holds NULL, or `value` in every row.
    Mask(MaskField),
    /// A column filled from outside the record's value: a static value, a Kafka header, or
    /// the record's topic, partition, offset, timestamp or key.
    Set(SetColumn),
    /// Records that match are committed like any other but written nowhere: neither a row nor
    /// a dead letter (counted in `kbq_records_filtered_total`).
    Filter(FilterRecords),
    /// The field's value written as another scalar type, where that is exact (`cast.rs`).
    Cast(CastField),
    /// A time in the field's value (an epoch count or text) written as another kind of time
    /// (`timestamps.rs`).
    Convert(ConvertField),
    /// A top-level record's fields fill top-level columns `parent{separator}child` (Kafka
    /// Connect's `Flatten`, one level).
    Flatten(FlattenRecord),
}

/// `flatten`: the top-level record `field` is written as its fields, each into the top-level
/// column `{field}{separator}{name}`; a null record leaves them all NULL. One level: a record
/// inside it stays a RECORD column (`address_geo`). Both keys are required: which record (a
/// schemaless JSON value has no schema to say which keys hold records) and how the names join.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlattenRecord {
    pub field: String,
    pub separator: String,
}

/// `convert`: a time, read as `from` says (a count since the epoch, or text in `format`), written
/// into the field's own column as `to` says, exactly; `zone` where an instant becomes a civil
/// time or back.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConvertField {
    pub field: String,
    pub from: TimeFrom,
    pub to: TimeTo,
    /// With `from: string` or `to: STRING`: the text's format (`time_format.rs`).
    #[serde(default)]
    pub format: Option<String>,
    /// With `to: INT64`: the count the column holds.
    #[serde(default)]
    pub unit: Option<EpochUnit>,
    /// Where an instant (an epoch count, TIMESTAMP, a format with `%z`) becomes a civil time
    /// (DATE, DATETIME, a format without `%z`) or back: the zone of the civil time.
    #[serde(default)]
    pub zone: Option<Zone>,
}

/// What `convert` reads: a count since 1970-01-01T00:00:00Z, or text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeFrom {
    EpochSeconds,
    EpochMillis,
    EpochMicros,
    EpochNanos,
    String,
}

/// What `convert` writes, spelled as BigQuery spells the column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TimeTo {
    Timestamp,
    Date,
    Datetime,
    String,
    Int64,
}

/// A count since 1970-01-01T00:00:00Z (`convert`'s `unit`, spelled as its `from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpochUnit {
    EpochSeconds,
    EpochMillis,
    EpochMicros,
    EpochNanos,
}

/// The zone of a civil time `convert` reads or writes: UTC only (a zone with daylight saving
/// would need its rules, and a fixed offset is written in the text's `%z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Zone {
    #[serde(rename = "UTC")]
    Utc,
}

impl TimeFrom {
    pub fn name(self) -> &'static str {
        match self {
            TimeFrom::EpochSeconds => "epoch_seconds",
            TimeFrom::EpochMillis => "epoch_millis",
            TimeFrom::EpochMicros => "epoch_micros",
            TimeFrom::EpochNanos => "epoch_nanos",
            TimeFrom::String => "string",
        }
    }

    /// The unit of an epoch count, `None` for text.
    pub fn unit(self) -> Option<EpochUnit> {
        match self {
            TimeFrom::EpochSeconds => Some(EpochUnit::EpochSeconds),
            TimeFrom::EpochMillis => Some(EpochUnit::EpochMillis),
            TimeFrom::EpochMicros => Some(EpochUnit::EpochMicros),
            TimeFrom::EpochNanos => Some(EpochUnit::EpochNanos),
            TimeFrom::String => None,
        }
    }
}

impl TimeTo {
    pub fn name(self) -> &'static str {
        match self {
            TimeTo::Timestamp => "TIMESTAMP",
            TimeTo::Date => "DATE",
            TimeTo::Datetime => "DATETIME",
            TimeTo::String => "STRING",
            TimeTo::Int64 => "INT64",
        }
    }
}

impl EpochUnit {
    pub fn name(self) -> &'static str {
        match self {
            EpochUnit::EpochSeconds => "epoch_seconds",
            EpochUnit::EpochMillis => "epoch_millis",
            EpochUnit::EpochMicros => "epoch_micros",
            EpochUnit::EpochNanos => "epoch_nanos",
        }
    }

    /// Nanoseconds in one of the unit.
    pub(crate) fn nanos(self) -> i128 {
        match self {
            EpochUnit::EpochSeconds => 1_000_000_000,
            EpochUnit::EpochMillis => 1_000_000,
            EpochUnit::EpochMicros => 1_000,
            EpochUnit::EpochNanos => 1,
        }
    }
}

/// `cast`: the field's value, of the scalar type its writer schema declares, written into its
/// own column as `to`; a cast whose types can lose digits is refused when the plan is compiled,
/// a value that cannot be written exactly is its record's error.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CastField {
    pub field: String,
    pub to: CastType,
}

/// The column types `cast` writes, spelled as BigQuery spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum CastType {
    Int64,
    Numeric,
    BigNumeric,
    Float64,
    String,
    Bool,
}

impl CastType {
    /// The YAML's (and BigQuery's) spelling.
    pub fn name(self) -> &'static str {
        match self {
            CastType::Int64 => "INT64",
            CastType::Numeric => "NUMERIC",
            CastType::BigNumeric => "BIGNUMERIC",
            CastType::Float64 => "FLOAT64",
            CastType::String => "STRING",
            CastType::Bool => "BOOL",
        }
    }
}

/// `drop`: a field path, its records' fields joined by `.` (`customer.email`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DropField {
    pub field: String,
}

/// `rename`: the field at `field` fills the column `to` of the same record.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameField {
    pub field: String,
    /// The new name, in the same record (a name, not a path).
    pub to: String,
}

/// `mask`: the field's value never reaches the table. Without `value` or `hash` its column is
/// NULL; with `value`, the column holds `value` in every row (top-level fields only); with
/// `hash`, the column holds the keyed hash of the value, written as `encoding` says.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaskField {
    pub field: String,
    #[serde(default)]
    pub value: Option<Literal>,
    /// A keyed hash of the value instead of the value: equal values stay equal (joins and
    /// counts still work), and without the key nobody can test a guess against the column.
    #[serde(default)]
    pub hash: Option<HashAlgorithm>,
    /// With `hash`: where the key is read, `{file: path}` or `{env: NAME}`; never the key itself.
    #[serde(default)]
    pub key: Option<HashKey>,
    /// With `hash`: how the digest is written (`hex` or `base64` into STRING, `bytes` into
    /// BYTES).
    #[serde(default)]
    pub encoding: Option<HashEncoding>,
}

/// The keyed hashes `mask` can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HashAlgorithm {
    /// HMAC (RFC 2104) with SHA-256: a 32-byte digest.
    HmacSha256,
}

/// How a digest is written into its column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HashEncoding {
    /// Lowercase hexadecimal text (64 characters for HMAC-SHA256), into STRING.
    Hex,
    /// Standard base64 with padding (44 characters), into STRING.
    Base64,
    /// The digest's bytes, into BYTES.
    Bytes,
}

/// Where a hash key is read from, as the YAML says it; the config reads it once, when it is
/// loaded (`HashKey::set`), so the transcoder never does I/O.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum KeySource {
    /// A file's bytes, without one trailing newline (as the sink's other secret files).
    File(std::path::PathBuf),
    /// The value of this environment variable.
    Env(String),
}

/// A hash key: where it comes from, and once read, its bytes (never printed).
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "KeySource")]
pub struct HashKey {
    pub source: KeySource,
    bytes: Option<std::sync::Arc<[u8]>>,
}

impl From<KeySource> for HashKey {
    fn from(source: KeySource) -> HashKey {
        HashKey {
            source,
            bytes: None,
        }
    }
}

impl HashKey {
    /// The key's bytes, read from its source.
    pub fn set(&mut self, bytes: Vec<u8>) {
        self.bytes = Some(bytes.into());
    }

    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        self.bytes.as_deref()
    }
}

impl std::fmt::Debug for HashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashKey")
            .field("source", &self.source)
            .field("read", &self.bytes.is_some())
            .finish()
    }
}

/// `set`: a top-level column filled from exactly one of `value`, `header` (with its
/// `encoding`) or `from`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetColumn {
    pub column: String,
    /// A static value, the same in every row.
    #[serde(default)]
    pub value: Option<Literal>,
    /// The name of a Kafka header; the last header of that name, as Kafka's
    /// `Headers.lastHeader` reads it.
    #[serde(default)]
    pub header: Option<String>,
    /// How the header's bytes are read: required with `header`, never guessed.
    #[serde(default)]
    pub encoding: Option<HeaderEncoding>,
    /// One of the record's Kafka coordinates: the same as `metadata_columns`.
    #[serde(default)]
    pub from: Option<KafkaField>,
    /// With `from: key`: a top-level field of the key, decoded as `key_format` says, instead
    /// of the key's bytes (`keys.rs`).
    #[serde(default)]
    pub field: Option<String>,
    /// With `field`: how the key's bytes are read; required, never guessed.
    #[serde(default)]
    pub key_format: Option<KeyFormat>,
}

impl SetColumn {
    /// The key's field this column is set from (`from: key` with `field`).
    pub fn key_field(&self) -> Option<&str> {
        match self.from {
            Some(KafkaField::Key) => self.field.as_deref(),
            _ => None,
        }
    }

    /// Whether the plan fills the column itself (a static value, a header, a key's field)
    /// rather than as a Kafka metadata column.
    pub(crate) fn fills_column(&self) -> bool {
        self.from.is_none() || self.key_field().is_some()
    }
}

/// How a Kafka key is read for `set … from: key, field:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyFormat {
    /// Confluent-framed: Avro, Protobuf or JSON Schema, as the key's schema id is registered.
    SchemaRegistry,
    /// Schemaless JSON: an object, its values typed by the column as schemaless JSON values.
    Json,
}

impl KeyFormat {
    /// The YAML's spelling.
    pub fn name(self) -> &'static str {
        match self {
            KeyFormat::SchemaRegistry => "schema_registry",
            KeyFormat::Json => "json",
        }
    }
}

/// A static value of `set` or `mask`, typed by the YAML scalar it is written as.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Literal {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

/// How a header's value bytes are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeaderEncoding {
    /// UTF-8 text (checked), into a STRING column.
    String,
    /// The bytes as they are, into a BYTES column.
    Bytes,
    /// Eight bytes, big-endian two's complement (Kafka's `LongSerializer`), into INT64.
    Int64Be,
    /// Four bytes, big-endian two's complement (Kafka's `IntegerSerializer`), into INT64.
    Int32Be,
}

/// The Kafka coordinates `set` can take, each one case of `metadata_columns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KafkaField {
    Topic,
    Partition,
    Offset,
    Timestamp,
    Key,
}

impl KafkaField {
    /// The YAML's spelling.
    pub fn name(self) -> &'static str {
        match self {
            KafkaField::Topic => "topic",
            KafkaField::Partition => "partition",
            KafkaField::Offset => "offset",
            KafkaField::Timestamp => "timestamp",
            KafkaField::Key => "key",
        }
    }
}

/// `filter`: drops the records that match every condition given (with `negate`, the records
/// that do not). The conditions on what Kafka says of a record (`tombstone`, `header`,
/// `topic_pattern`) are asked before any plan; a condition on a field's value (`field` with
/// `equals`, `in` or `is_null`) is compiled into the plan, its literals checked against the
/// field's type, and takes no other condition.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterRecords {
    /// Records without a value.
    #[serde(default)]
    pub tombstone: bool,
    /// Records that carry a header of this name.
    #[serde(default)]
    pub header: Option<String>,
    /// With `header`: whose last header of that name is exactly this text's UTF-8 bytes. With
    /// `field`: whose field holds this value, compared as the field's type.
    #[serde(default)]
    pub equals: Option<Literal>,
    /// Records of topics this regular expression matches as a whole.
    #[serde(default)]
    pub topic_pattern: Option<String>,
    /// A field path of the record's value (`status`, `order.state`).
    #[serde(default)]
    pub field: Option<String>,
    /// With `field`: whose field holds one of these values.
    #[serde(default, rename = "in")]
    pub one_of: Option<Vec<Literal>>,
    /// With `field`: whose field is null or absent (`true`), or holds a value (`false`).
    #[serde(default)]
    pub is_null: Option<bool>,
    #[serde(default)]
    pub negate: bool,
}

impl FilterRecords {
    /// Whether the filter reads a field of the record's value (so the plan decides it).
    pub fn on_field(&self) -> bool {
        self.field.is_some()
    }
}

/// A transform refused before any schema is known: `index` in the list, the key of the entry
/// (`field`, `to`, …) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformError {
    pub index: usize,
    pub key: &'static str,
    pub message: String,
}

impl Transform {
    /// The field path a field transform applies to.
    pub(crate) fn field(&self) -> Option<&str> {
        match self {
            Transform::Drop(d) => Some(&d.field),
            Transform::Rename(r) => Some(&r.field),
            Transform::Mask(m) => Some(&m.field),
            Transform::Cast(c) => Some(&c.field),
            Transform::Convert(c) => Some(&c.field),
            Transform::Flatten(f) => Some(&f.field),
            Transform::Set(_) | Transform::Filter(_) => None,
        }
    }

    /// How a plan error names the transform: `mask customer.ssn`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Transform::Drop(d) => format!("drop {}", d.field),
            Transform::Rename(r) => format!("rename {} to {}", r.field, r.to),
            Transform::Mask(m) if m.hash.is_some() => format!("mask {} with a hash", m.field),
            Transform::Mask(m) => format!("mask {}", m.field),
            Transform::Set(s) => match s.key_field() {
                Some(f) => format!("set {} from the key's field {f}", s.column),
                None => format!("set {}", s.column),
            },
            Transform::Filter(f) => match &f.field {
                Some(field) => format!("filter {field}"),
                None => "filter".into(),
            },
            Transform::Cast(c) => format!("cast {} to {}", c.field, c.to.name()),
            Transform::Convert(c) => {
                format!(
                    "convert {} from {} to {}",
                    c.field,
                    c.from.name(),
                    c.to.name()
                )
            }
            Transform::Flatten(f) => format!("flatten {}", f.field),
        }
    }

    /// Whether the transform rewrites its field's value into the field's own column (rather
    /// than choosing the column or removing the value).
    pub(crate) fn converts(&self) -> bool {
        matches!(self, Transform::Mask(m) if m.hash.is_some())
            || matches!(self, Transform::Cast(_) | Transform::Convert(_))
    }

    /// Whether the transform changes what a row holds (everything but `filter`).
    pub fn shapes_rows(&self) -> bool {
        !matches!(self, Transform::Filter(_))
    }
}

/// A column or field name a transform may name: a proto identifier, as every column the sink
/// writes (docs/mapping.md, "Resolution against the table").
fn is_name(s: &str) -> bool {
    crate::descriptor::is_proto_identifier(s)
}

/// Checks `list` without a schema: each entry well formed, one transform per field, no path
/// through a field another transform removes or renames, one source per column. The plan
/// compiler checks the rest against the writer schema and the table.
pub fn check(list: &[Transform]) -> Result<(), TransformError> {
    let err = |index, key, message: String| {
        Err(TransformError {
            index,
            key,
            message,
        })
    };
    let mut fields: Vec<(usize, String)> = Vec::new();
    let mut columns: Vec<(usize, String)> = Vec::new();
    let mut kafka: Vec<(usize, KafkaField)> = Vec::new();
    let mut key_fields: Vec<(usize, String, KeyFormat)> = Vec::new();
    for (i, t) in list.iter().enumerate() {
        if let Some(path) = t.field() {
            if path.split('.').any(|s| !is_name(s)) {
                return err(
                    i,
                    "field",
                    format!(
                        "`{path}` is not a field path (names of letters, digits and `_`, joined by `.`)"
                    ),
                );
            }
            let lower = path.to_ascii_lowercase();
            for (j, other) in &fields {
                if *other == lower {
                    return err(
                        i,
                        "field",
                        format!("transforms[{j}] already transforms field {path}"),
                    );
                }
                let (outer, inner) = if lower.len() < other.len() {
                    (&lower, other)
                } else {
                    (other, &lower)
                };
                if inner.starts_with(&format!("{outer}.")) {
                    return err(
                        i,
                        "field",
                        format!(
                            "field {path} and the field of transforms[{j}] are one inside the other: a record that is dropped, renamed or masked takes its fields with it"
                        ),
                    );
                }
            }
            fields.push((i, lower));
        }
        match t {
            Transform::Rename(r) if !is_name(&r.to) => {
                return err(
                    i,
                    "to",
                    format!(
                        "`{}` is not a column name (letters, digits and `_`; a name, not a path: the field stays in its record)",
                        r.to
                    ),
                );
            }
            Transform::Flatten(f) => {
                if let Err((key, message)) = check_flatten(f) {
                    return err(i, key, message);
                }
            }
            Transform::Mask(m) if m.value.is_some() && m.field.contains('.') => {
                return err(
                    i,
                    "value",
                    format!(
                        "a masked value is written to top-level columns only: mask {} to NULL (no `value`), or mask its top-level record",
                        m.field
                    ),
                );
            }
            Transform::Mask(m) if m.hash.is_some() || m.key.is_some() || m.encoding.is_some() => {
                if let Err((key, message)) = check_hash(m) {
                    return err(i, key, message);
                }
            }
            Transform::Convert(c) => {
                if let Err((key, message)) = timestamps::check(c) {
                    return err(i, key, message);
                }
            }
            Transform::Set(s) => {
                if !is_name(&s.column) {
                    return err(
                        i,
                        "column",
                        format!("`{}` is not a top-level column name", s.column),
                    );
                }
                let sources = [s.value.is_some(), s.header.is_some(), s.from.is_some()];
                if sources.iter().filter(|x| **x).count() != 1 {
                    return err(
                        i,
                        "column",
                        "needs exactly one of `value`, `header` and `from`".into(),
                    );
                }
                match (&s.header, s.encoding) {
                    (Some(_), None) => {
                        return err(
                            i,
                            "encoding",
                            "a header's bytes have no type of their own: say how to read them (string, bytes, int64_be, int32_be)".into(),
                        );
                    }
                    (None, Some(_)) => {
                        return err(i, "encoding", "only with `header`".into());
                    }
                    _ => {}
                }
                if let Err((key, message)) = check_key_field(s, i, &mut key_fields) {
                    return err(i, key, message);
                }
                if let Some(f) = s.from.filter(|_| s.key_field().is_none()) {
                    if let Some((j, _)) = kafka.iter().find(|(_, k)| *k == f) {
                        return err(
                            i,
                            "from",
                            format!(
                                "transforms[{j}] already sets a column from the {}",
                                f.name()
                            ),
                        );
                    }
                    kafka.push((i, f));
                }
                let lower = s.column.to_ascii_lowercase();
                if let Some((j, _)) = columns.iter().find(|(_, c)| *c == lower) {
                    return err(
                        i,
                        "column",
                        format!("transforms[{j}] already sets column {}", s.column),
                    );
                }
                columns.push((i, lower));
            }
            Transform::Filter(f) => {
                if let Err((key, message)) = check_filter(f) {
                    return err(i, key, message);
                }
            }
            _ => {}
        }
    }
    // A masked top-level field with a value sets its own column: it must not meet a `set`.
    for (i, t) in list.iter().enumerate() {
        if let Transform::Mask(m) = t
            && m.value.is_some()
            && let Some((j, _)) = columns
                .iter()
                .find(|(_, c)| *c == m.field.to_ascii_lowercase())
        {
            return err(
                i,
                "field",
                format!("transforms[{j}] sets column {} too", m.field),
            );
        }
    }
    Ok(())
}

/// A `set … from: key, field:`: `field` only from the key, a top-level name, read in a declared
/// `key_format` (the same in every such entry, since one key is read once); `key_format` only
/// with `field`. `seen`: the earlier entries' index, lowercased field and format.
fn check_key_field(
    s: &SetColumn,
    i: usize,
    seen: &mut Vec<(usize, String, KeyFormat)>,
) -> Result<(), (&'static str, String)> {
    let Some(field) = &s.field else {
        if s.key_format.is_some() {
            return Err(("key_format", "only with `field`".into()));
        }
        return Ok(());
    };
    if s.from != Some(KafkaField::Key) {
        return Err((
            "field",
            "only with `from: key`: the field is read from the kafka key".into(),
        ));
    }
    if !is_name(field) {
        return Err((
            "field",
            format!(
                "`{field}` is not a top-level field name of the key (letters, digits and `_`; a nested path is not supported)"
            ),
        ));
    }
    let Some(format) = s.key_format else {
        return Err((
            "key_format",
            "the key's bytes have no format of their own: say how to read them (schema_registry: confluent-framed avro, protobuf or json schema; json: schemaless json)".into(),
        ));
    };
    let lower = field.to_ascii_lowercase();
    for (j, other, other_format) in seen.iter() {
        if *other == lower {
            return Err((
                "field",
                format!("transforms[{j}] already sets a column from the key's field {field}"),
            ));
        }
        if *other_format != format {
            return Err((
                "key_format",
                format!(
                    "transforms[{j}] reads the key as {}: one key has one format",
                    other_format.name()
                ),
            ));
        }
    }
    seen.push((i, lower, format));
    Ok(())
}

/// A `filter`: at least one condition; a field's condition alone, with exactly one of
/// `equals`, `in` and `is_null`. The key of the entry and why.
fn check_filter(f: &FilterRecords) -> Result<(), (&'static str, String)> {
    let kafka = f.tombstone || f.header.is_some() || f.topic_pattern.is_some();
    if let Some(path) = &f.field {
        if path.split('.').any(|s| !is_name(s)) {
            return Err((
                "field",
                format!(
                    "`{path}` is not a field path (names of letters, digits and `_`, joined by `.`)"
                ),
            ));
        }
        if kafka {
            return Err((
                "field",
                "a field's value is read by the plan, after the conditions on tombstones, headers and topics: a filter on a field takes no other condition".into(),
            ));
        }
        let given = [f.equals.is_some(), f.one_of.is_some(), f.is_null.is_some()];
        if given.iter().filter(|x| **x).count() != 1 {
            return Err((
                "field",
                "needs exactly one of `equals`, `in` and `is_null`".into(),
            ));
        }
        if f.one_of.as_ref().is_some_and(Vec::is_empty) {
            return Err(("in", "an empty list matches no record".into()));
        }
        return Ok(());
    }
    if !kafka {
        return Err((
            "filter",
            "needs a condition: tombstone, header, topic_pattern or field".into(),
        ));
    }
    for (given, key) in [(f.one_of.is_some(), "in"), (f.is_null.is_some(), "is_null")] {
        if given {
            return Err((key, "only with `field`".into()));
        }
    }
    match &f.equals {
        Some(_) if f.header.is_none() => {
            return Err(("equals", "only with `header` or `field`".into()));
        }
        Some(Literal::Text(_)) | None => {}
        Some(_) => {
            return Err((
                "equals",
                "a header's value is compared as text: write it quoted".into(),
            ));
        }
    }
    if let Some(p) = &f.topic_pattern
        && let Err(e) = regex::Regex::new(&format!("^(?:{p})$"))
    {
        return Err(("topic_pattern", format!("not a regular expression: {e}")));
    }
    Ok(())
}

/// A `flatten`: a top-level name, and a separator that joins column names into a column name.
fn check_flatten(f: &FlattenRecord) -> Result<(), (&'static str, String)> {
    if f.field.contains('.') {
        return Err((
            "field",
            format!(
                "flatten writes top-level columns: `{}` is not a top-level record",
                f.field
            ),
        ));
    }
    let joins = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    if f.separator.is_empty() || !f.separator.bytes().all(joins) {
        return Err((
            "separator",
            format!(
                "{:?} cannot join column names: letters, digits and `_` only (a column name holds no other)",
                f.separator
            ),
        ));
    }
    Ok(())
}

/// A `mask` with a hash: its key and encoding, and no `value`; `key` and `encoding` only with
/// `hash`. The key of the entry and why.
fn check_hash(m: &MaskField) -> Result<(), (&'static str, String)> {
    if m.hash.is_none() {
        let key = if m.key.is_some() { "key" } else { "encoding" };
        return Err((key, "only with `hash`".into()));
    }
    if m.value.is_some() {
        return Err(("value", "a mask writes `value` or `hash`, not both".into()));
    }
    let Some(key) = &m.key else {
        return Err((
            "key",
            "a keyed hash needs its key: {file: path} or {env: NAME} (never the key itself)".into(),
        ));
    };
    if m.encoding.is_none() {
        return Err((
            "encoding",
            "say how the digest is written: hex or base64 (into STRING), bytes (into BYTES)".into(),
        ));
    }
    if key.bytes().is_some_and(<[u8]>::is_empty) {
        return Err(("key", "the key is empty".into()));
    }
    Ok(())
}

/// `metadata` with the columns `set … from:` adds (each the same as the matching
/// `metadata_columns` entry); a coordinate set twice to two columns is refused.
pub fn metadata_with(
    metadata: &MetadataColumns,
    list: &[Transform],
) -> Result<MetadataColumns, String> {
    let mut m = metadata.clone();
    for t in list {
        let Transform::Set(SetColumn {
            column,
            from: Some(from),
            field: None,
            ..
        }) = t
        else {
            continue;
        };
        let (slot, key) = match from {
            KafkaField::Topic => (&mut m.topic, "topic"),
            KafkaField::Partition => (&mut m.partition, "partition"),
            KafkaField::Offset => (&mut m.offset, "offset"),
            KafkaField::Timestamp => (&mut m.timestamp, "timestamp"),
            KafkaField::Key => (&mut m.key, "key"),
        };
        match slot {
            Some(existing) if !existing.eq_ignore_ascii_case(column) => {
                return Err(format!(
                    "the {key} already goes to column {existing} (metadata_columns.{key})"
                ));
            }
            _ => *slot = Some(column.clone()),
        }
    }
    Ok(m)
}
