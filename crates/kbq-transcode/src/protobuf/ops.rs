//! The compiled form of a Protobuf plan: per message, a table from field number to the op that
//! reads that field's occurrences and writes the column's proto field. Built by `compile`, run by
//! `exec`.

use std::sync::Arc;

use crate::convert::DecimalTarget;
use crate::error::RecordError;
use crate::proto::Tag;
use crate::transforms::ValueOp;

#[derive(Debug, Clone)]
pub struct MessageOp {
    /// `None` for the row itself, which is not length-prefixed.
    pub tag: Option<Tag>,
    pub lookup: Lookup,
    pub fields: Box<[FieldOp]>,
    /// Fields with implicit presence (proto3 scalars, map keys and values): when the wire does
    /// not carry them their column gets the default value, written from these bytes.
    pub defaults: Box<[(u16, Box<[u8]>)]>,
    /// Implicit-presence fields whose default a transform cannot write (`""` cast to INT64):
    /// also in `required`, and absent is this error, the one the value sent would be.
    pub default_errors: Box<[(u16, RecordError)]>,
    /// Explicit-presence fields whose column is REQUIRED: absent is an error.
    pub required: Box<[u16]>,
    /// Members of each `oneof` that has a column: at most one may be present.
    pub oneofs: Box<[Box<[u16]>]>,
    /// A REQUIRED column without a source field: every record fails with it.
    pub missing_required: Option<Arc<str>>,
    /// `unknown_fields: error`: a field number the writer schema does not declare is an error.
    pub unknown_is_error: bool,
    /// The number of fields, each with a bit in the set of fields seen on the wire.
    pub tracked: usize,
    /// For the flat executor (`flat.rs`), when `tracked` is at most 64: the fields of `defaults`
    /// and of `required` as bit masks, and each field's default bytes by field index.
    pub implicit_mask: u64,
    pub required_mask: u64,
    pub default_of: Box<[Box<[u8]>]>,
    /// For the flat executor, when `tracked` is at most 64 and the lookup is dense: the step of
    /// a field occurrence by its key (`number << 3 | wire`, below [`KEYS`]); empty otherwise.
    pub keys: Box<[Key]>,
}

/// Keys of one and two bytes: the flat executor's table by key covers these.
pub const KEYS: usize = 1 << 14;

/// What the flat executor does with a field occurrence whose key is this entry's, decided at
/// compile time from the field's kind and the key's wire type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub act: Act,
    /// The field's index in [`MessageOp::fields`] (below 64).
    pub field: u8,
    /// A repeated field (a singular message may occur only once).
    pub repeated: bool,
}

impl Key {
    pub const GENERAL: Key = Key {
        act: Act::General,
        field: 0,
        repeated: false,
    };
}

/// The steps of [`Key`]. The `Copy*` ones are [`Fast`] fields whose row tag is the key itself
/// ([`FieldOp::same_key`]): checked and then copied with their neighbours as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// The general path (`exec.rs`'s steps): an unknown field, another wire type, a conversion.
    General,
    CopyStr,
    CopyBytes,
    CopyInt64,
    CopyInt32,
    CopyBool,
    CopyDouble,
    /// An enum number into a STRING column ([`FieldOp::enum_rows`]).
    Enum,
    Message,
    Timestamp,
    Date,
    Decimal,
    /// A declared field without a column, by its wire type.
    SkipVarint,
    SkipLen,
}

impl MessageOp {
    /// Fills in what the flat executor reads from `defaults` and `required`.
    pub fn with_masks(mut self) -> MessageOp {
        if self.tracked <= 64 {
            let mut default_of = vec![Box::default(); self.tracked];
            for (i, bytes) in self.defaults.iter() {
                self.implicit_mask |= 1 << i;
                default_of[*i as usize] = bytes.clone();
            }
            self.default_of = default_of.into_boxed_slice();
            for i in self.required.iter() {
                self.required_mask |= 1 << i;
            }
            if let Lookup::Dense(numbers) = &self.lookup {
                let n = (numbers.len() * 8).min(KEYS);
                let mut keys = vec![Key::GENERAL; n];
                for (key, slot) in keys.iter_mut().enumerate().skip(8) {
                    let (number, wire) = (key >> 3, (key & 7) as u8);
                    if let Some(i) = self.lookup.get(number as u64) {
                        *slot = Key::of(&self.fields[i], i as u8, wire);
                    }
                }
                self.keys = keys.into_boxed_slice();
            }
        }
        self
    }
}

impl Key {
    fn of(field: &FieldOp, i: u8, wire: u8) -> Key {
        let copy = field.same_key != 0 && field.fast.tag().is_some_and(|(_, w)| w == wire);
        let (act, repeated) = match (&field.kind, wire) {
            _ if copy => match field.fast {
                Fast::Str(_) => (Act::CopyStr, true),
                Fast::Bytes(_) => (Act::CopyBytes, true),
                Fast::Int64(_) => (Act::CopyInt64, true),
                Fast::Int32(_) => (Act::CopyInt32, true),
                Fast::Bool(_) => (Act::CopyBool, true),
                Fast::Double(_) => (Act::CopyDouble, true),
                Fast::None => (Act::General, false),
            },
            (FieldKind::Scalar { .. }, 0) if !field.enum_rows.is_empty() => (Act::Enum, true),
            (FieldKind::Message { repeated, .. }, 2) => (Act::Message, *repeated),
            (
                FieldKind::Special {
                    special, repeated, ..
                },
                2,
            ) => match special {
                Special::Timestamp => (Act::Timestamp, *repeated),
                Special::Date => (Act::Date, *repeated),
                Special::ConfluentDecimal(_) => (Act::Decimal, *repeated),
                _ => (Act::General, false),
            },
            (FieldKind::Skip, 0) => (Act::SkipVarint, true),
            (FieldKind::Skip, 2) => (Act::SkipLen, true),
            _ => (Act::General, false),
        };
        Key {
            act,
            field: i,
            repeated,
        }
    }
}

/// Field number → index into [`MessageOp::fields`].
#[derive(Debug, Clone)]
pub enum Lookup {
    /// Indexed by number; [`NOT_DECLARED`] for numbers the writer schema does not have.
    Dense(Box<[u16]>),
    /// Sorted by number, for schemas with very large field numbers.
    Sparse(Box<[(u32, u16)]>),
}

pub const NOT_DECLARED: u16 = u16::MAX;

impl Lookup {
    #[inline]
    pub fn get(&self, number: u64) -> Option<usize> {
        match self {
            Lookup::Dense(t) => match t.get(number as usize) {
                Some(&i) if i != NOT_DECLARED => Some(i as usize),
                _ => None,
            },
            Lookup::Sparse(t) => t
                .binary_search_by_key(&number, |(n, _)| *n as u64)
                .ok()
                .map(|i| t[i].1 as usize),
        }
    }
}

#[derive(Debug, Clone)]
pub struct FieldOp {
    pub kind: FieldKind,
    /// The same field as one fused step when it is one of the common scalars, else `None`.
    pub fast: Fast,
    /// When the [`Fast`] step's row tag is the very key the writer puts on the wire (the same
    /// field number and wire type): the length of that key, else 0. Such a field's occurrence,
    /// once checked, is the row's bytes already and is copied as it is (`exec`'s runs).
    pub same_key: u8,
    /// Column path for messages.
    pub column: Arc<str>,
    /// An enum number into a STRING column: the row's bytes (tag, length, name) by number, for
    /// numbers 0 to [`ENUM_ROWS`] (empty for a number without a name); empty otherwise.
    pub enum_rows: Box<[Box<[u8]>]>,
}

/// The largest enum number [`FieldOp::enum_rows`] holds.
pub const ENUM_ROWS: i32 = 255;

impl FieldOp {
    /// The op of writer field `number`.
    pub fn new(kind: FieldKind, column: Arc<str>, number: u32) -> FieldOp {
        let fast = Fast::of(&kind);
        let same_key = match fast.tag() {
            Some((tag, wire)) if tag == Tag::new(number, wire as u32) => tag.encoded_len(),
            _ => 0,
        };
        let enum_rows = match &kind {
            FieldKind::Scalar {
                conv: Conv::EnumName(names),
                tag,
                ..
            } => {
                let top = names
                    .iter()
                    .map(|(n, _)| *n)
                    .filter(|n| (0..=ENUM_ROWS).contains(n));
                let mut rows = vec![Box::default(); top.max().map_or(0, |n| n as usize + 1)];
                for (n, name) in names.iter().filter(|(n, _)| (0..=ENUM_ROWS).contains(n)) {
                    let mut row = Vec::new();
                    crate::proto::put_len_delimited(&mut row, *tag, name.as_bytes());
                    rows[*n as usize] = row.into_boxed_slice();
                }
                rows.into_boxed_slice()
            }
            _ => Box::default(),
        };
        FieldOp {
            fast,
            same_key,
            kind,
            column,
            enum_rows,
        }
    }
}

/// The scalars most messages are made of, each read and written in one step: the general path
/// decides the wire type, the decoding and the conversion in three matches per field, which
/// cost more than the copying itself on a message of short fields. Each holds the row's tag
/// and applies when the field arrives with the variant's wire type (not packed).
#[derive(Debug, Clone, Copy)]
pub enum Fast {
    None,
    /// `string` into STRING (UTF-8 checked).
    Str(Tag),
    /// `bytes` into BYTES.
    Bytes(Tag),
    /// `int64` into INT64: the varint is copied as it is.
    Int64(Tag),
    /// `int32` or an enum's number into INT64: sign-extended from 32 bits.
    Int32(Tag),
    /// `bool` into BOOL.
    Bool(Tag),
    /// `double` into FLOAT64: the eight bytes are copied as they are.
    Double(Tag),
}

impl Fast {
    /// The row's tag and the wire type the step reads.
    fn tag(self) -> Option<(Tag, u8)> {
        Some(match self {
            Fast::None => return None,
            Fast::Str(tag) | Fast::Bytes(tag) => (tag, 2),
            Fast::Int64(tag) | Fast::Int32(tag) | Fast::Bool(tag) => (tag, 0),
            Fast::Double(tag) => (tag, 1),
        })
    }

    fn of(kind: &FieldKind) -> Fast {
        let FieldKind::Scalar { src, conv, tag, .. } = kind else {
            return Fast::None;
        };
        match (src, conv) {
            (Src::String, Conv::Str) => Fast::Str(*tag),
            (Src::Bytes, Conv::Bytes) => Fast::Bytes(*tag),
            (Src::Int64, Conv::Int) => Fast::Int64(*tag),
            (Src::Int32, Conv::Int) | (Src::Enum, Conv::EnumNumber) => Fast::Int32(*tag),
            (Src::Bool, Conv::Bool) => Fast::Bool(*tag),
            (Src::Double, Conv::Double) => Fast::Double(*tag),
            _ => Fast::None,
        }
    }
}

#[derive(Debug, Clone)]
pub enum FieldKind {
    /// Declared in the writer schema, no column: skipped by its wire type.
    Skip,
    Scalar {
        src: Src,
        conv: Conv,
        tag: Tag,
        repeated: bool,
    },
    /// A nested message written as a RECORD (also map entries).
    Message { op: Box<MessageOp>, repeated: bool },
    /// A well-known message written as a scalar column.
    Special {
        special: Special,
        tag: Tag,
        repeated: bool,
    },
}

/// The declared Protobuf scalar type, which decides the wire type and how to decode it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Src {
    Int32,
    Int64,
    UInt32,
    UInt64,
    SInt32,
    SInt64,
    Fixed32,
    Fixed64,
    SFixed32,
    SFixed64,
    Float,
    Double,
    Bool,
    Enum,
    String,
    Bytes,
}

impl Src {
    /// The wire type of one unpacked value.
    pub fn wire(self) -> u8 {
        match self {
            Src::Fixed32 | Src::SFixed32 | Src::Float => 5,
            Src::Fixed64 | Src::SFixed64 | Src::Double => 1,
            Src::String | Src::Bytes => 2,
            _ => 0,
        }
    }

    pub fn packable(self) -> bool {
        !matches!(self, Src::String | Src::Bytes)
    }
}

/// How one decoded value becomes one proto field value of the row.
#[derive(Debug, Clone)]
pub enum Conv {
    /// A signed integer into INT64.
    Int,
    /// An unsigned 64-bit integer into INT64, checked against i64::MAX.
    UInt,
    IntToDouble,
    UIntToDouble,
    IntToNumeric(DecimalTarget),
    UIntToNumeric(DecimalTarget),
    Float,
    Double,
    Bool,
    /// Enum number → the value's name (sorted by number).
    EnumName(Box<[(i32, Box<str>)]>),
    /// Enum number into INT64.
    EnumNumber,
    Str,
    /// String validated as JSON text.
    JsonStr,
    StrAsBytes,
    Bytes,
    /// Bytes into a STRING column, UTF-8 checked.
    BytesAsStr,
    /// A value transform of the route (`transforms/values.rs`) of a string (UTF-8 checked
    /// first) or bytes field.
    Value {
        op: Arc<ValueOp>,
        text: bool,
    },
}

/// Well-known message types that become scalars.
#[derive(Debug, Clone)]
pub enum Special {
    /// `google.protobuf.Timestamp` → TIMESTAMP µs (sub-µs truncated toward −∞).
    Timestamp,
    /// `google.protobuf.Timestamp` → DATETIME, the UTC civil time.
    TimestampDateTime,
    /// `google.protobuf.Duration` → INT64 µs (sub-µs truncated toward zero).
    DurationMicros,
    /// `google.protobuf.*Value`: field 1 of `src`, with its default when absent.
    Wrapper { src: Src, conv: Conv },
    /// `google.type.Date` → DATE.
    Date,
    /// `google.type.TimeOfDay` → TIME.
    TimeOfDay,
    /// `confluent.type.Decimal` (big-endian unscaled bytes, `scale`) → NUMERIC / BIGNUMERIC.
    ConfluentDecimal(DecimalTarget),
    /// `google.type.Decimal` (decimal text) → NUMERIC / BIGNUMERIC.
    GoogleDecimal(DecimalTarget),
}
