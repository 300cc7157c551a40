//! Change events in Avro: the shape of a writer schema's records (docs/cdc.md).
//!
//! A row becomes a change by appending two Avro strings, `_CHANGE_TYPE` and
//! `_CHANGE_SEQUENCE_NUMBER`, to the row record: [`row_schema`] declares them as the record's
//! last fields, so the ordinary plan compiled from it writes BigQuery's pseudo-columns.

use std::ops::Range;

use super::{
    CHANGE_SEQUENCE_NUMBER, CHANGE_TYPE, ChangeFormat, ChangeKind, Located, NotAChange, plain_kind,
    unwrapped_kind,
};
use crate::error::RecordError;
use crate::reader::AvroReader;
use crate::schema::{AvroSchema, Field, Kind, Node, NodeId, Record};

/// Where the parts of a change are in records of one writer schema.
#[derive(Debug, Clone)]
pub struct AvroShape {
    schema: AvroSchema,
    format: ChangeFormat,
    /// Debezium: indexes of `before`, `after`, `op` among the root fields. Unwrapped: `__deleted`
    /// and `__op` (either may be absent). Plain: the change-type field in `op`.
    before: Option<usize>,
    after: Option<usize>,
    op: Option<usize>,
    deleted: Option<usize>,
    /// Field indexes from the root to a long/int sequence source.
    source: Option<(String, Vec<usize>)>,
}

fn root_record(schema: &AvroSchema) -> Result<&Record, String> {
    schema.root_record().map_err(|e| e.to_string())
}

fn field_index(record: &Record, name: &str) -> Option<usize> {
    record.fields.iter().position(|f| f.name == name)
}

/// The record node under a field: the record itself, or the record branch of `["null", R]`.
fn record_under(schema: &AvroSchema, node: NodeId) -> Option<NodeId> {
    let node = schema
        .nullable_branch(node)
        .map_or(node, |(_, branch)| branch);
    matches!(schema.node(node).kind, Kind::Record(_)).then_some(node)
}

impl AvroShape {
    /// The shape of `schema`'s records, and the schema of their rows (with the pseudo-columns).
    /// `source` is a dotted path to a long field (e.g. `source.lsn`) whose value orders changes
    /// ahead of the Kafka offset.
    pub fn new(
        schema: &AvroSchema,
        format: &ChangeFormat,
        source: Option<&str>,
    ) -> Result<(AvroShape, AvroSchema), String> {
        let root = root_record(schema)?;
        let mut shape = AvroShape {
            schema: schema.clone(),
            format: format.clone(),
            before: None,
            after: None,
            op: None,
            deleted: None,
            source: None,
        };
        let row_node = match format {
            ChangeFormat::Debezium => {
                let need = |name: &str| {
                    field_index(root, name).ok_or_else(|| {
                        format!(
                            "record {} is not a debezium envelope: it has no field {name}",
                            root.name
                        )
                    })
                };
                let (before, after, op) = (need("before")?, need("after")?, need("op")?);
                shape.before = Some(before);
                shape.after = Some(after);
                shape.op = Some(op);
                record_under(schema, root.fields[after].schema).ok_or_else(|| {
                    format!("field after of {} is not a (nullable) record", root.name)
                })?
            }
            ChangeFormat::Unwrapped => {
                shape.deleted = field_index(root, "__deleted");
                shape.op = field_index(root, "__op");
                schema.root
            }
            ChangeFormat::Plain { field } => {
                shape.op = Some(field_index(root, field).ok_or_else(|| {
                    format!("record {} has no change-type field {field}", root.name)
                })?);
                schema.root
            }
        };
        if let Some(path) = source {
            let mut indexes = Vec::new();
            let mut node = schema.root;
            for part in path.split('.') {
                let Some(record) = record_under(schema, node) else {
                    return Err(format!(
                        "sequence source {path}: {part} is not inside a record"
                    ));
                };
                let Kind::Record(r) = &schema.node(record).kind else {
                    unreachable!("record_under returns records")
                };
                let i = field_index(r, part)
                    .ok_or_else(|| format!("sequence source {path}: no field {part}"))?;
                indexes.push(i);
                node = r.fields[i].schema;
            }
            let leaf = schema.nullable_branch(node).map_or(node, |(_, b)| b);
            if !matches!(schema.node(leaf).kind, Kind::Long | Kind::Int) {
                return Err(format!("sequence source {path} is not a long or an int"));
            }
            shape.source = Some((path.to_string(), indexes));
        }
        Ok((shape, row_schema(schema, row_node)))
    }

    /// Locates the change in one record body.
    pub fn locate(&self, body: &[u8]) -> Result<Located, NotAChange> {
        let spans = field_spans(&self.schema, self.schema.root, body)?;
        let text = |i: usize| -> Result<Option<String>, NotAChange> {
            Ok(scalar_text(
                &self.schema,
                self.root_field(i),
                &body[spans[i].clone()],
            )?)
        };
        let source = match &self.source {
            None => None,
            Some((path, indexes)) => {
                let value = self.source_value(body, &spans, indexes)?;
                match value {
                    Some(v) if v >= 0 => Some(v as u64),
                    _ => return Err(NotAChange::NoSource { path: path.clone() }),
                }
            }
        };
        let whole = Some(0..body.len());
        let (row, kind) = match &self.format {
            ChangeFormat::Debezium => {
                let op = text(self.op.expect("debezium has op"))?.unwrap_or_default();
                let (side, index, kind) = match op.as_str() {
                    "c" | "u" | "r" => ("after", self.after, ChangeKind::Upsert),
                    "d" => ("before", self.before, ChangeKind::Delete),
                    _ => return Err(NotAChange::Operation { op }),
                };
                let index = index.expect("debezium has before and after");
                let row = self.nullable_record(body, &spans[index], index)?;
                if row.is_none() && kind == ChangeKind::Upsert {
                    return Err(NotAChange::NoRow { op, side });
                }
                (row, kind)
            }
            ChangeFormat::Unwrapped => {
                let deleted = match self.deleted {
                    Some(i) => text(i)?.is_some_and(|v| v == "true"),
                    None => false,
                };
                let op = match self.op {
                    Some(i) => text(i)?,
                    None => None,
                };
                let kind = unwrapped_kind(deleted, op.as_deref())?;
                (whole, kind)
            }
            ChangeFormat::Plain { .. } => {
                let value = text(self.op.expect("plain has a field"))?.unwrap_or_default();
                (whole, plain_kind(&value)?)
            }
        };
        Ok(Located { row, kind, source })
    }

    fn root_field(&self, i: usize) -> NodeId {
        let Kind::Record(r) = &self.schema.node(self.schema.root).kind else {
            unreachable!("checked at construction")
        };
        r.fields[i].schema
    }

    /// The record inside a `["null", R]` (or plain `R`) field: its byte range in `body`.
    fn nullable_record(
        &self,
        body: &[u8],
        span: &Range<usize>,
        index: usize,
    ) -> Result<Option<Range<usize>>, NotAChange> {
        let node = self.root_field(index);
        let Some((branch, _)) = self.schema.nullable_branch(node) else {
            return Ok(Some(span.clone()));
        };
        let mut r = AvroReader::new(&body[span.clone()]);
        let taken = r.branch(2)?;
        if taken != branch {
            return Ok(None);
        }
        let header = span.len() - r.remaining();
        Ok(Some(span.start + header..span.end))
    }

    fn source_value(
        &self,
        body: &[u8],
        spans: &[Range<usize>],
        indexes: &[usize],
    ) -> Result<Option<i64>, NotAChange> {
        let mut node = self.schema.root;
        let mut bytes = body;
        let mut current = spans.to_vec();
        for (depth, &i) in indexes.iter().enumerate() {
            let Kind::Record(r) = &self.schema.node(node).kind else {
                return Ok(None);
            };
            let field_node = r.fields[i].schema;
            let mut data = &bytes[current[i].clone()];
            let mut inner = field_node;
            if let Some((branch, b)) = self.schema.nullable_branch(field_node) {
                let mut reader = AvroReader::new(data);
                if reader.branch(2)? != branch {
                    return Ok(None);
                }
                data = &data[data.len() - reader.remaining()..];
                inner = b;
            }
            if depth + 1 == indexes.len() {
                let mut reader = AvroReader::new(data);
                return Ok(Some(reader.long()?));
            }
            current = field_spans(&self.schema, inner, data)?;
            bytes = data;
            node = inner;
        }
        Ok(None)
    }
}

/// The row record `node` of `schema` as the root of a schema of its own, with the two
/// pseudo-columns appended as string fields.
fn row_schema(schema: &AvroSchema, node: NodeId) -> AvroSchema {
    let mut out = AvroSchema {
        nodes: schema.nodes.clone(),
        root: node,
    };
    let string = out.nodes.len();
    out.nodes.push(Node {
        kind: Kind::String,
        logical: crate::schema::Logical::None,
        connect: None,
    });
    // A copy of the row record, so that the envelope's own node (which `before` may share)
    // keeps its shape for `locate`.
    let mut record = out.nodes[node].clone();
    if let Kind::Record(r) = &mut record.kind {
        for name in [CHANGE_TYPE, CHANGE_SEQUENCE_NUMBER] {
            r.fields.push(Field {
                name: name.to_string(),
                doc: None,
                schema: string,
            });
        }
    }
    out.root = out.nodes.len();
    out.nodes.push(record);
    out
}

/// The schema of a key record as a row with the pseudo-columns: the row of a DELETE by key.
pub fn key_row_schema(schema: &AvroSchema) -> AvroSchema {
    row_schema(schema, schema.root)
}

/// Appends the pseudo-column values to a row's Avro bytes (the fields [`row_schema`] declared).
pub fn append_change(out: &mut Vec<u8>, kind: ChangeKind, sequence: &str) {
    for text in [kind.as_str(), sequence] {
        put_long(out, text.len() as i64);
        out.extend_from_slice(text.as_bytes());
    }
}

fn put_long(out: &mut Vec<u8>, v: i64) {
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

/// The byte range of every field of the record `node` in `body`.
fn field_spans(
    schema: &AvroSchema,
    node: NodeId,
    body: &[u8],
) -> Result<Vec<Range<usize>>, RecordError> {
    let Kind::Record(r) = &schema.node(node).kind else {
        return Ok(Vec::new());
    };
    let mut reader = AvroReader::new(body);
    let mut spans = Vec::with_capacity(r.fields.len());
    let mut steps = Steps::for_body(body.len());
    for f in &r.fields {
        let start = body.len() - reader.remaining();
        skip(schema, f.schema, &mut reader, 0, &mut steps)?;
        spans.push(start..body.len() - reader.remaining());
    }
    Ok(spans)
}

/// A string, enum symbol or boolean value (through a nullable union) as text; `None` for null.
fn scalar_text(
    schema: &AvroSchema,
    node: NodeId,
    bytes: &[u8],
) -> Result<Option<String>, RecordError> {
    let mut reader = AvroReader::new(bytes);
    let mut node = node;
    if let Kind::Union(branches) = &schema.node(node).kind {
        let b = reader.branch(branches.len())?;
        node = branches[b];
    }
    Ok(match &schema.node(node).kind {
        Kind::Null => None,
        Kind::String => Some(String::from_utf8_lossy(reader.string()?).into_owned()),
        Kind::Boolean => Some(reader.boolean()?.to_string()),
        Kind::Enum { symbols, .. } => Some(symbols[reader.enum_index(symbols.len())?].clone()),
        _ => None,
    })
}

const MAX_DEPTH: u32 = 64;

/// The values one record's envelope may skip. Most values take a byte or more, but null and
/// records of nulls take none, so a named type used many times could make one record of a few
/// bytes cost 4^16 skips; the allowance is the one JSON Schema validation has per record.
struct Steps {
    limit: usize,
    left: usize,
}

impl Steps {
    fn for_body(len: usize) -> Steps {
        let limit = crate::json::VALIDATE_STEPS_BASE
            .saturating_add(len.saturating_mul(crate::json::VALIDATE_STEPS_PER_BYTE));
        Steps { limit, left: limit }
    }

    fn step(&mut self) -> Result<(), RecordError> {
        self.left = self
            .left
            .checked_sub(1)
            .ok_or(RecordError::SchemaTooComplex {
                what: "reading the change envelope",
                limit: self.limit,
            })?;
        Ok(())
    }
}

/// Skips one value of `node`.
fn skip(
    schema: &AvroSchema,
    node: NodeId,
    r: &mut AvroReader<'_>,
    depth: u32,
    steps: &mut Steps,
) -> Result<(), RecordError> {
    steps.step()?;
    if depth > MAX_DEPTH {
        return Err(RecordError::Truncated {
            offset: 0,
            what: "a value nested too deeply",
        });
    }
    match &schema.node(node).kind {
        Kind::Null => {}
        Kind::Boolean => {
            r.boolean()?;
        }
        Kind::Int | Kind::Long => {
            r.long()?;
        }
        Kind::Float => {
            r.float()?;
        }
        Kind::Double => {
            r.double()?;
        }
        Kind::Bytes | Kind::String => {
            r.bytes()?;
        }
        Kind::Fixed { size, .. } => {
            r.fixed(*size, "a fixed")?;
        }
        Kind::Enum { symbols, .. } => {
            r.enum_index(symbols.len())?;
        }
        Kind::Record(rec) => {
            for f in &rec.fields {
                skip(schema, f.schema, r, depth + 1, steps)?;
            }
        }
        Kind::Union(branches) => {
            let b = r.branch(branches.len())?;
            skip(schema, branches[b], r, depth + 1, steps)?;
        }
        Kind::Array(item) | Kind::Map(item) => {
            let is_map = matches!(schema.node(node).kind, Kind::Map(_));
            loop {
                // Maps have a key per item; only null items take no bytes at all.
                let zero_size = !is_map && matches!(schema.node(*item).kind, Kind::Null);
                let n = r.block(if zero_size { 0 } else { 1 })?;
                if n == 0 {
                    break;
                }
                for _ in 0..n {
                    if is_map {
                        r.string()?;
                    }
                    skip(schema, *item, r, depth + 1, steps)?;
                }
            }
        }
    }
    Ok(())
}
