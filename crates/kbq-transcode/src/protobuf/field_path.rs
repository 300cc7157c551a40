//! A filter's field in a Protobuf message (`field_path.rs` at the crate's root): each step a
//! singular message field, the last a singular scalar. The message's fields are scanned in wire
//! order, the fields of other numbers skipped, and the last value of the field wins, a
//! message field's occurrences merged, as a Protobuf parser reads them.

use prost_reflect::{Kind as PKind, MessageDescriptor};

use super::compile::{source_of, src_of};
use super::ops::Src;
use super::reader::{Reader, Val, WIRE_LEN};
use crate::error::RecordError;
use crate::field_path::{FieldRead, PRESENT};
use crate::transforms::{Scalar, Source, ValueTest};

#[derive(Debug, Clone)]
pub(crate) struct FieldPath {
    /// The field numbers of the messages on the way.
    steps: Box<[u64]>,
    leaf: u64,
    /// How the leaf is read; `None` for a value only `is_null` asks about (a message).
    src: Option<Src>,
    /// Absent, the leaf is its type's default (a field without presence) rather than null.
    defaulted: bool,
}

/// `path` in `message` (names match case-blind): the reader, the field's kind, whether it can
/// be null.
pub(crate) fn resolve(
    message: &MessageDescriptor,
    path: &str,
) -> Result<(FieldRead, Source, bool), String> {
    let names: Vec<&str> = path.split('.').collect();
    let mut message = message.clone();
    let mut steps = Vec::new();
    for (depth, name) in names.iter().enumerate() {
        let within = names[..=depth].join(".");
        let Some(fd) = (message.fields()).find(|f| f.name().eq_ignore_ascii_case(name)) else {
            return Err(format!("the writer message has no field {within}"));
        };
        if fd.is_list() || fd.is_map() {
            return Err(format!(
                "field {within} is repeated: a filter compares one value"
            ));
        }
        if depth + 1 < names.len() {
            let PKind::Message(inner) = fd.kind() else {
                return Err(format!(
                    "field {within} is not a message: {path} names nothing inside it"
                ));
            };
            steps.push(fd.number() as u64);
            message = inner;
            continue;
        }
        let source = source_of(&fd);
        let src = src_of(&fd.kind()).filter(|_| !matches!(source, Source::Other(_)));
        let defaulted = !fd.supports_presence();
        let nullable = !defaulted || !steps.is_empty();
        return Ok((
            FieldRead::Protobuf(FieldPath {
                steps: steps.into_boxed_slice(),
                leaf: fd.number() as u64,
                src,
                defaulted,
            }),
            source,
            nullable,
        ));
    }
    unreachable!("a path has at least one name")
}

/// What the scan found.
#[derive(Clone, Copy)]
enum Found<'a> {
    /// A message on the way is absent.
    Nothing,
    /// The messages on the way are there, the leaf is not.
    Absent,
    Value(Val<'a>),
    /// A value only `is_null` asks about.
    Present,
}

impl FieldPath {
    pub(crate) fn drops(&self, body: &[u8], test: &ValueTest) -> Result<bool, RecordError> {
        let mut found = Found::Nothing;
        self.scan(body, 0, 0, &mut found)?;
        let value = match found {
            Found::Nothing => None,
            Found::Absent if self.defaulted => self.src.map(default_of),
            Found::Absent => None,
            Found::Present => Some(PRESENT),
            Found::Value(v) => Some(self.scalar(v, test)?),
        };
        test.drops(value)
    }

    /// Scans the message `buf` (at `base` in the row's message), `depth` steps down.
    fn scan<'a>(
        &self,
        buf: &'a [u8],
        base: usize,
        depth: usize,
        found: &mut Found<'a>,
    ) -> Result<(), RecordError> {
        if depth == self.steps.len() && matches!(found, Found::Nothing) {
            *found = Found::Absent;
        }
        let mut r = Reader::new(buf, base);
        while !r.done() {
            let key_at = r.offset();
            let key = r.varint()?;
            let (number, wire) = (key >> 3, (key & 7) as u8);
            if depth < self.steps.len() && number == self.steps[depth] && wire == WIRE_LEN {
                let (inner, at) = r.len_delimited()?;
                self.scan(inner, at, depth + 1, found)?;
            } else if depth == self.steps.len() && number == self.leaf {
                *found = match self.src {
                    Some(src) if wire == src.wire() => Found::Value(r.value(src)?),
                    Some(_) => {
                        return Err(RecordError::ProtoWireType {
                            offset: key_at,
                            number,
                            wire,
                        });
                    }
                    None => {
                        r.skip(wire, number, key_at)?;
                        Found::Present
                    }
                };
            } else {
                r.skip(wire, number, key_at)?;
            }
        }
        Ok(())
    }

    fn scalar<'a>(&self, v: Val<'a>, test: &ValueTest) -> Result<Scalar<'a>, RecordError> {
        let src = self.src.expect("a value is read with its src");
        Ok(match (v, src) {
            (Val::I(i), Src::Bool) => Scalar::Bool(i != 0),
            (Val::I(i), _) => Scalar::Int(i),
            (Val::U(u), _) => Scalar::UInt(u),
            (Val::F32(f), _) => Scalar::F32(f),
            (Val::F64(f), _) => Scalar::F64(f),
            (Val::B(b), Src::String) if crate::utf8::valid(b) => Scalar::Str(b),
            (Val::B(_), Src::String) => {
                return Err(RecordError::Value {
                    column: test.field().clone(),
                    reason: "the filter's field is not valid UTF-8".into(),
                });
            }
            (Val::B(b), _) => Scalar::Bytes(b),
        })
    }
}

/// The value of an absent field without presence: its type's default.
fn default_of(src: Src) -> Scalar<'static> {
    match src {
        Src::String => Scalar::Str(b""),
        Src::Bytes => Scalar::Bytes(b""),
        Src::Bool => Scalar::Bool(false),
        Src::Float => Scalar::F32(0.0),
        Src::Double => Scalar::F64(0.0),
        Src::UInt64 | Src::Fixed64 => Scalar::UInt(0),
        _ => Scalar::Int(0),
    }
}
