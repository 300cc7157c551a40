//! Change events in Protobuf: the shape of a writer message's records (docs/cdc.md). Fields are
//! found by name in the registered message and read on the wire by number; the row is the bytes
//! of the `after` (or `before`) message field, or the whole message, which the plan of the row
//! message transcodes like any record.
//!
//! Proto3 leaves default values off the wire: an absent `op` is the empty string (a bad
//! operation), an absent `__op` is no `__op`, an absent `__deleted` is false, an absent
//! `before`/`after` is a null row. A message field written more than once is read from its last
//! occurrence (serializers write it once).

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

use super::wire::{self, WireField};
use super::{
    ChangeFormat, ChangeKind, Located, NotAChange, debezium_kind, plain_kind, unwrapped_kind,
};

/// A text-like field: the op, the change type, `__deleted`.
#[derive(Debug, Clone)]
struct TextField {
    number: u32,
    kind: Kind,
    /// A `google.protobuf.StringValue`/`BoolValue` wrapper (Confluent's converter with
    /// `wrapper.for.nullables`): the value is its field 1.
    wrapped: bool,
}

impl TextField {
    fn of(field: &FieldDescriptor, what: &str) -> Result<TextField, String> {
        let (kind, wrapped) = match field.kind() {
            Kind::Message(m) => match m.full_name() {
                "google.protobuf.StringValue" => (Kind::String, true),
                "google.protobuf.BoolValue" => (Kind::Bool, true),
                _ => (Kind::Message(m), false),
            },
            other => (other, false),
        };
        let ok = matches!(kind, Kind::String | Kind::Enum(_) | Kind::Bool);
        if !ok || field.is_list() || field.is_map() {
            return Err(format!(
                "field {} ({what}) is not a string, an enum or a bool",
                field.full_name()
            ));
        }
        Ok(TextField {
            number: field.number(),
            kind,
            wrapped,
        })
    }

    /// The value as text; an absent field is its default (`""`, the first enum value, false).
    fn read(&self, body: &[u8], fields: &[WireField]) -> String {
        if !self.wrapped {
            return self.read_at(body, wire::last(fields, self.number));
        }
        let inner = wire::last(fields, self.number)
            .filter(|f| f.wire == 2)
            .map(|f| &body[f.value.clone()]);
        match inner.map(|data| (data, wire::fields(data))) {
            Some((data, Ok(inner))) => self.read_at(data, wire::last(&inner, 1)),
            _ => self.read_at(body, None),
        }
    }

    fn read_at(&self, body: &[u8], found: Option<&WireField>) -> String {
        match (&self.kind, found) {
            (Kind::String, Some(f)) if f.wire == 2 => {
                String::from_utf8_lossy(&body[f.value.clone()]).into_owned()
            }
            (Kind::Enum(e), found) => {
                let n = found.map_or(0, |f| varint(body, f) as i32);
                e.get_value(n)
                    .map_or_else(|| n.to_string(), |v| v.name().to_string())
            }
            (Kind::Bool, found) => found.is_some_and(|f| varint(body, f) != 0).to_string(),
            _ => String::new(),
        }
    }
}

fn varint(body: &[u8], f: &WireField) -> u64 {
    if f.wire != 0 {
        return 0;
    }
    let mut pos = f.value.start;
    wire::read_varint(body, &mut pos).unwrap_or(0)
}

/// One step of the path to the sequence source: a field number, and at the leaf how to read it.
#[derive(Debug, Clone)]
struct SourceLeaf {
    /// Zigzag (`sint32`/`sint64`).
    zigzag: bool,
    /// Fixed width in bytes (`fixed64`: 8, `fixed32`: 4), 0 for a varint.
    fixed: usize,
    /// A wrapper message (`google.protobuf.Int64Value`): the value is its field 1.
    wrapped: bool,
    /// Absent means 0 (proto3 implicit presence), not "no position".
    implicit: bool,
}

/// Where the parts of a change are in records of one writer message.
#[derive(Debug, Clone)]
pub struct ProtoShape {
    format: ChangeFormat,
    before: Option<u32>,
    after: Option<u32>,
    op: Option<TextField>,
    deleted: Option<TextField>,
    source: Option<(String, Vec<u32>, SourceLeaf)>,
}

impl ProtoShape {
    /// The shape of `message`'s records and the message of their rows.
    pub fn new(
        message: &MessageDescriptor,
        format: &ChangeFormat,
        source: Option<&str>,
    ) -> Result<(ProtoShape, MessageDescriptor), String> {
        let mut shape = ProtoShape {
            format: format.clone(),
            before: None,
            after: None,
            op: None,
            deleted: None,
            source: None,
        };
        let field = |name: &str| message.get_field_by_name(name);
        let row = match format {
            ChangeFormat::Debezium => {
                let need = |name: &str| {
                    field(name).ok_or_else(|| {
                        format!(
                            "message {} is not a debezium envelope: it has no field {name}",
                            message.full_name()
                        )
                    })
                };
                let (before, after, op) = (need("before")?, need("after")?, need("op")?);
                let row = row_message(&after)?;
                if row_message(&before)?.full_name() != row.full_name() {
                    return Err(format!(
                        "fields before and after of {} are different messages",
                        message.full_name()
                    ));
                }
                shape.before = Some(before.number());
                shape.after = Some(after.number());
                shape.op = Some(TextField::of(&op, "op")?);
                row
            }
            ChangeFormat::Unwrapped => {
                shape.deleted = field("__deleted")
                    .map(|f| TextField::of(&f, "__deleted"))
                    .transpose()?;
                shape.op = field("__op")
                    .map(|f| TextField::of(&f, "__op"))
                    .transpose()?;
                message.clone()
            }
            ChangeFormat::Plain { field: name } => {
                let f = field(name).ok_or_else(|| {
                    format!(
                        "message {} has no change-type field {name}",
                        message.full_name()
                    )
                })?;
                shape.op = Some(TextField::of(&f, "the change type")?);
                message.clone()
            }
        };
        if let Some(path) = source {
            let (numbers, leaf) = source_path(message, path)?;
            shape.source = Some((path.to_string(), numbers, leaf));
        }
        Ok((shape, row))
    }

    /// Locates the change in one message (after the framing and the message indexes).
    pub fn locate(&self, body: &[u8]) -> Result<Located, NotAChange> {
        let fields = wire::fields(body).map_err(NotAChange::Protobuf)?;
        let source = match &self.source {
            None => None,
            Some((path, numbers, leaf)) => match source_value(body, &fields, numbers, leaf)? {
                Some(v) => Some(v),
                None => return Err(NotAChange::NoSource { path: path.clone() }),
            },
        };
        let text = |f: &Option<TextField>| f.as_ref().map(|f| f.read(body, &fields));
        let whole = Some(0..body.len());
        let (row, kind) = match &self.format {
            ChangeFormat::Debezium => {
                let op = text(&self.op).unwrap_or_default();
                let Some(kind) = debezium_kind(&op) else {
                    return Err(NotAChange::Operation { op });
                };
                let (side, number) = match kind {
                    ChangeKind::Upsert => ("after", self.after),
                    ChangeKind::Delete => ("before", self.before),
                };
                let number = number.expect("debezium has before and after");
                let row = wire::last(&fields, number)
                    .filter(|f| f.wire == 2)
                    .map(|f| f.value.clone());
                if row.is_none() && kind == ChangeKind::Upsert {
                    return Err(NotAChange::NoRow { op, side });
                }
                (row, kind)
            }
            ChangeFormat::Unwrapped => {
                let deleted = text(&self.deleted).is_some_and(|v| v == "true");
                let op = text(&self.op).filter(|op| !op.is_empty());
                (whole, unwrapped_kind(deleted, op.as_deref())?)
            }
            ChangeFormat::Plain { .. } => (whole, plain_kind(&text(&self.op).unwrap_or_default())?),
        };
        Ok(Located { row, kind, source })
    }
}

/// The message of a singular message field (the row of an envelope).
fn row_message(field: &FieldDescriptor) -> Result<MessageDescriptor, String> {
    match field.kind() {
        Kind::Message(m) if !field.is_list() && !field.is_map() => Ok(m),
        _ => Err(format!("field {} is not a message", field.full_name())),
    }
}

/// The field numbers from the root to the sequence source, and how to read the leaf.
fn source_path(message: &MessageDescriptor, path: &str) -> Result<(Vec<u32>, SourceLeaf), String> {
    let mut numbers = Vec::new();
    let mut current = message.clone();
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let field = current
            .get_field_by_name(part)
            .ok_or_else(|| format!("sequence source {path}: no field {part}"))?;
        if field.is_list() || field.is_map() {
            return Err(format!("sequence source {path}: {part} is repeated"));
        }
        numbers.push(field.number());
        let kind = field.kind();
        if i + 1 < parts.len() {
            let Kind::Message(m) = kind else {
                return Err(format!("sequence source {path}: {part} is not a message"));
            };
            current = m;
            continue;
        }
        let implicit = !field.supports_presence();
        let leaf = |zigzag, fixed, wrapped| SourceLeaf {
            zigzag,
            fixed,
            wrapped,
            implicit,
        };
        return match kind {
            Kind::Int64 | Kind::Uint64 | Kind::Int32 | Kind::Uint32 => {
                Ok((numbers, leaf(false, 0, false)))
            }
            Kind::Sint64 | Kind::Sint32 => Ok((numbers, leaf(true, 0, false))),
            Kind::Fixed64 | Kind::Sfixed64 => Ok((numbers, leaf(false, 8, false))),
            Kind::Fixed32 | Kind::Sfixed32 => Ok((numbers, leaf(false, 4, false))),
            Kind::Message(m)
                if matches!(
                    m.full_name(),
                    "google.protobuf.Int64Value"
                        | "google.protobuf.UInt64Value"
                        | "google.protobuf.Int32Value"
                        | "google.protobuf.UInt32Value"
                ) =>
            {
                Ok((numbers, leaf(false, 0, true)))
            }
            _ => Err(format!("sequence source {path} is not an integer")),
        };
    }
    Err(format!("sequence source {path} is empty"))
}

/// The source position of one record; `None` when it is absent or negative.
fn source_value(
    body: &[u8],
    fields: &[WireField],
    numbers: &[u32],
    leaf: &SourceLeaf,
) -> Result<Option<u64>, NotAChange> {
    let (last, path) = numbers.split_last().expect("a path has a field");
    let mut data = body;
    let mut level = fields.to_vec();
    for &n in path {
        let Some(f) = wire::last(&level, n).filter(|f| f.wire == 2) else {
            return Ok(None);
        };
        data = &data[f.value.clone()];
        level = wire::fields(data).map_err(NotAChange::Protobuf)?;
    }
    let mut found = wire::last(&level, *last).cloned();
    if leaf.wrapped {
        let Some(f) = found.filter(|f| f.wire == 2) else {
            return Ok(None);
        };
        data = &data[f.value.clone()];
        level = wire::fields(data).map_err(NotAChange::Protobuf)?;
        // An empty wrapper holds the default value.
        found = wire::last(&level, 1).cloned();
        if found.is_none() {
            return Ok(Some(0));
        }
    }
    let Some(f) = found else {
        return Ok(leaf.implicit.then_some(0));
    };
    let bytes = &data[f.value.clone()];
    let raw = match (leaf.fixed, f.wire) {
        (8, 1) => u64::from_le_bytes(bytes.try_into().expect("8 bytes")),
        (4, 5) => u64::from(u32::from_le_bytes(bytes.try_into().expect("4 bytes"))),
        (0, 0) => varint(data, &f),
        _ => {
            return Err(NotAChange::Protobuf(crate::RecordError::ProtoWireType {
                offset: f.value.start,
                number: (*last).into(),
                wire: f.wire,
            }));
        }
    };
    let signed = if leaf.zigzag {
        ((raw >> 1) as i64) ^ -((raw & 1) as i64)
    } else {
        raw as i64
    };
    Ok((signed >= 0).then_some(signed as u64))
}
