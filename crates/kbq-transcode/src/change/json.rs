//! Change events in JSON (Confluent JSON Schema or schemaless JSON): the members of the record's
//! top-level object are found by one scan of its text; the row is the text of `after` (or
//! `before`), or the whole record, which the JSON plan of the row transcodes like any record.
//! With a registered schema, the record is validated against it first when the route asks for
//! that, and a created table's columns come from the schema of `after`. Schemaless JSON may come
//! in Kafka Connect's envelope (`{"schema": …, "payload": …}`, [`ConnectEnvelope`]): the same
//! scan then reads the members of `payload`, and the row is a range of the record's own bytes.

use std::ops::Range;
use std::sync::Arc;

use super::{
    ChangeFormat, ChangeKind, Located, NotAChange, debezium_kind, plain_kind, unwrapped_kind,
};
use crate::RecordError;
use crate::json::JsonSchema;
use crate::json::scan::{Scanner, Token, malformed};

/// Where the parts of a change are in records of one JSON Schema (or of schemaless JSON).
#[derive(Debug, Clone)]
pub struct JsonShape {
    format: ChangeFormat,
    /// The registered schema every record is checked against first.
    validate: Option<Arc<JsonSchema>>,
    source: Option<(String, Vec<String>)>,
    envelope: ConnectEnvelope,
}

/// Kafka Connect's `JsonConverter` with `schemas.enable=true` (its default, and Debezium's)
/// writes every key and value as an object of exactly two members, `schema` and `payload`; the
/// record is the payload. Configured per route, never guessed: a plain row may have those two
/// columns (docs/cdc.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConnectEnvelope {
    /// Plain JSON, taken as it is (registry formats; schemaless with `schemas_enable: false`).
    #[default]
    Off,
    /// Plain JSON, but a record of exactly the envelope's two members is refused: read as a
    /// row, it would lose its payload (schemaless JSON without `schemas_enable`).
    Guarded,
    /// Every record is the envelope; its `payload` is the record (`schemas_enable: true`).
    On,
}

/// Why a record does not fit the route's [`ConnectEnvelope`] setting.
pub(super) const NOT_AN_ENVELOPE: &str = "schemas_enable is on, but the record is not kafka connect's json envelope (an object of exactly the members schema and payload)";
pub(super) const AN_ENVELOPE: &str = "the record is kafka connect's json envelope (schema and payload, from JsonConverter with schemas.enable=true): set cdc.schemas_enable: true to read its payload, or false if these are the row's own two columns";
pub(super) const PAYLOAD_NOT_AN_OBJECT: &str =
    "the payload of kafka connect's json envelope is not an object or null";

impl ConnectEnvelope {
    /// Where the record is in `data` (a Kafka key or value): all of it, or the envelope's
    /// payload; `None` for a null payload.
    pub fn record(self, data: &[u8]) -> Result<Option<Range<usize>>, NotAChange> {
        if self == ConnectEnvelope::Off {
            return Ok(Some(0..data.len()));
        }
        let scanned = object(data, &[], false).map_err(NotAChange::Json)?;
        self.check(data, &scanned)
    }

    /// [`Self::record`] from one scan of the outer object.
    fn check(self, data: &[u8], scanned: &Scanned) -> Result<Option<Range<usize>>, NotAChange> {
        let envelope = scanned.count == 2 && scanned.schema && scanned.payload.is_some();
        let refused = |problem| Err(NotAChange::ConnectEnvelope { problem });
        match self {
            ConnectEnvelope::Off => Ok(Some(0..data.len())),
            ConnectEnvelope::Guarded if envelope => refused(AN_ENVELOPE),
            ConnectEnvelope::Guarded => Ok(Some(0..data.len())),
            ConnectEnvelope::On if !envelope => refused(NOT_AN_ENVELOPE),
            ConnectEnvelope::On => {
                let payload = scanned.payload.clone().expect("checked");
                match data[payload.start] {
                    b'{' => Ok(Some(payload)),
                    b'n' => Ok(None),
                    _ => refused(PAYLOAD_NOT_AN_OBJECT),
                }
            }
        }
    }
}

/// Where the `schema` member of Kafka Connect's envelope is in `data` (a Kafka key or value):
/// the block a route's plans are found by (`None`: the schema is null or absent). The scan stops
/// at the block, which `JsonConverter` writes first; the rest of the record is checked when the
/// change is located.
pub fn connect_schema(data: &[u8]) -> Result<Option<Range<usize>>, NotAChange> {
    let mut s = Scanner::new(data);
    if s.peek().map_err(NotAChange::Json)? != Token::Object {
        return Err(NotAChange::ConnectEnvelope {
            problem: NOT_AN_ENVELOPE,
        });
    }
    s.open(b'{');
    let mut first = true;
    while let Some(key) = s.next_key(first).map_err(NotAChange::Json)? {
        first = false;
        let token = s.peek().map_err(NotAChange::Json)?;
        let start = s.pos;
        s.skip(1).map_err(NotAChange::Json)?;
        if *key == *b"schema" {
            return Ok((token != Token::Null).then_some(start..s.pos));
        }
    }
    Ok(None)
}

impl JsonShape {
    /// The shape of `schema`'s records (`None`: schemaless JSON, nothing checked up front) and
    /// the schema of their rows.
    pub fn new(
        schema: Option<&Arc<JsonSchema>>,
        validate: bool,
        format: &ChangeFormat,
        source: Option<&str>,
    ) -> Result<(JsonShape, Option<Arc<JsonSchema>>), String> {
        let shape = JsonShape {
            format: format.clone(),
            validate: schema.filter(|_| validate).cloned(),
            source: source.map(|p| (p.to_string(), p.split('.').map(str::to_string).collect())),
            envelope: ConnectEnvelope::Off,
        };
        let Some(schema) = schema else {
            return Ok((shape, None));
        };
        let root = schema.shape(schema.root_node())?;
        let property = |name: &str| root.properties.iter().find(|(n, _)| *n == name);
        let row = match format {
            ChangeFormat::Debezium => {
                for name in ["before", "after", "op"] {
                    if property(name).is_none() {
                        return Err(format!(
                            "the json schema is not a debezium envelope: it has no property {name}"
                        ));
                    }
                }
                let (_, after) = property("after").expect("checked");
                Arc::new(schema.sub_schema(*after))
            }
            ChangeFormat::Plain { field } => {
                if property(field).is_none() {
                    return Err(format!(
                        "the json schema has no change-type property {field}"
                    ));
                }
                schema.clone()
            }
            ChangeFormat::Unwrapped => schema.clone(),
        };
        if let Some(path) = source {
            check_source(schema, path)?;
        }
        Ok((shape, Some(row)))
    }

    /// The shape with records in (or guarded against) Kafka Connect's envelope.
    pub fn with_envelope(mut self, envelope: ConnectEnvelope) -> JsonShape {
        self.envelope = envelope;
        self
    }

    /// Locates the change in one record's JSON text.
    pub fn locate(&self, body: &[u8]) -> Result<Located, NotAChange> {
        if let Some(schema) = &self.validate {
            crate::json::check_record(Some(schema), body).map_err(NotAChange::Json)?;
        }
        let names: &[&str] = match &self.format {
            ChangeFormat::Debezium => &["op", "before", "after"],
            ChangeFormat::Unwrapped => &["__op", "__deleted"],
            ChangeFormat::Plain { field } => &[field.as_str()],
        };
        let descend = self.envelope == ConnectEnvelope::On;
        let scanned = object(body, names, descend).map_err(NotAChange::Json)?;
        let found = &scanned.found;
        let Some(record) = self.envelope.check(body, &scanned)? else {
            // A null payload is Connect's null value: a tombstone, deleting by the Kafka key.
            return Ok(Located {
                row: None,
                kind: ChangeKind::Delete,
                source: None,
            });
        };
        let source = match &self.source {
            None => None,
            Some((path, parts)) => {
                match source_value(&body[record.clone()], parts).map_err(NotAChange::Json)? {
                    Some(v) => Some(v),
                    None => return Err(NotAChange::NoSource { path: path.clone() }),
                }
            }
        };
        let text = |i: usize| value_text(body, found[i].as_ref());
        let whole = Some(record);
        let (row, kind) = match &self.format {
            ChangeFormat::Debezium => {
                let op = text(0).unwrap_or_default();
                let Some(kind) = debezium_kind(&op) else {
                    return Err(NotAChange::Operation { op });
                };
                let (side, at) = match kind {
                    ChangeKind::Upsert => ("after", 2),
                    ChangeKind::Delete => ("before", 1),
                };
                let row = found[at].clone().filter(|r| &body[r.clone()] != b"null");
                if row.is_none() && kind == ChangeKind::Upsert {
                    return Err(NotAChange::NoRow { op, side });
                }
                (row, kind)
            }
            ChangeFormat::Unwrapped => {
                let deleted = text(1).is_some_and(|v| v == "true");
                (whole, unwrapped_kind(deleted, text(0).as_deref())?)
            }
            ChangeFormat::Plain { .. } => (whole, plain_kind(&text(0).unwrap_or_default())?),
        };
        Ok(Located { row, kind, source })
    }
}

/// What one scan of an object found: the value ranges of the named members (the last of
/// duplicates), how many members it has, and whether they include an envelope's `schema` and
/// `payload` (the payload's value range).
#[derive(Debug, Default)]
struct Scanned {
    found: Vec<Option<Range<usize>>>,
    count: usize,
    schema: bool,
    payload: Option<Range<usize>>,
}

/// One scan of the object in `data` for the named members. With `descend`, the names are looked
/// up in the object that is the value of `payload` instead, in the same pass (ranges are offsets
/// in `data` either way).
fn object(data: &[u8], names: &[&str], descend: bool) -> Result<Scanned, RecordError> {
    let mut s = Scanner::new(data);
    if s.peek()? != Token::Object {
        return Err(malformed(s.pos, "an object"));
    }
    let mut found = vec![None; names.len()];
    let mut scanned = scan(&mut s, 1, names, &mut found, descend)?;
    s.end()?;
    scanned.found = found;
    Ok(scanned)
}

/// [`object`]'s scan of the object at `s` (on its `{`), `depth` deep.
fn scan(
    s: &mut Scanner<'_>,
    depth: usize,
    names: &[&str],
    found: &mut [Option<Range<usize>>],
    descend: bool,
) -> Result<Scanned, RecordError> {
    s.open(b'{');
    let mut out = Scanned::default();
    let mut first = true;
    while let Some(key) = s.next_key(first)? {
        first = false;
        out.count += 1;
        let token = s.peek()?;
        let start = s.pos;
        let key: &[u8] = &key;
        if descend && key == b"payload" && token == Token::Object {
            found.fill(None);
            scan(s, depth + 1, names, found, false)?;
        } else {
            s.skip(depth)?;
            if !descend && let Some(i) = names.iter().position(|n| n.as_bytes() == key) {
                found[i] = Some(start..s.pos);
            }
        }
        match key {
            b"schema" => out.schema = true,
            b"payload" => out.payload = Some(start..s.pos),
            _ => {}
        }
    }
    Ok(out)
}

/// A string member as text, a boolean as `true`/`false`; `None` for null, absent or another type.
fn value_text(body: &[u8], range: Option<&Range<usize>>) -> Option<String> {
    let mut s = Scanner::new(&body[range?.clone()]);
    match s.peek().ok()? {
        Token::String => s.text().ok().map(|t| t.into_owned()),
        Token::True | Token::False => s.boolean().ok().map(|b| b.to_string()),
        _ => None,
    }
}

/// The non-negative integer at a dotted path of nested objects; `None` if absent or not one.
fn source_value(body: &[u8], parts: &[String]) -> Result<Option<u64>, RecordError> {
    let mut data = body;
    for part in parts {
        let mut s = Scanner::new(data);
        if s.peek()? != Token::Object {
            return Ok(None);
        }
        let Some(range) = object(data, &[part.as_str()], false)?.found.pop().flatten() else {
            return Ok(None);
        };
        data = &data[range];
    }
    let mut s = Scanner::new(data);
    if s.peek()? != Token::Number {
        return Ok(None);
    }
    let n = s.number()?;
    if !n.integer {
        return Ok(None);
    }
    Ok(n.text().parse::<u64>().ok())
}

/// A configured source path names an integer property through objects of the schema.
fn check_source(schema: &JsonSchema, path: &str) -> Result<(), String> {
    let mut node = schema.root_node();
    for part in path.split('.') {
        let shape = schema.shape(node)?;
        let Some((_, next)) = shape.properties.iter().find(|(n, _)| *n == part) else {
            return Err(format!("sequence source {path}: no property {part}"));
        };
        node = *next;
    }
    match schema.shape(node)?.kind {
        Some(crate::json::SchemaKind::Integer) => Ok(()),
        _ => Err(format!("sequence source {path} is not an integer")),
    }
}
