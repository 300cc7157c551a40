//! Change events in JSON (Confluent JSON Schema or schemaless JSON): the members of the record's
//! top-level object are found by one scan of its text; the row is the text of `after` (or
//! `before`), or the whole record, which the JSON plan of the row transcodes like any record.
//! With a registered schema, the record is validated against it first when the route asks for
//! that, and a created table's columns come from the schema of `after`.

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
        let found = members(body, names).map_err(NotAChange::Json)?;
        let source = match &self.source {
            None => None,
            Some((path, parts)) => match source_value(body, parts).map_err(NotAChange::Json)? {
                Some(v) => Some(v),
                None => return Err(NotAChange::NoSource { path: path.clone() }),
            },
        };
        let text = |i: usize| value_text(body, found[i].as_ref());
        let whole = Some(0..body.len());
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

/// The value ranges of the named members of the object in `data` (the last of duplicates).
fn members(data: &[u8], names: &[&str]) -> Result<Vec<Option<Range<usize>>>, RecordError> {
    let mut s = Scanner::new(data);
    if s.peek()? != Token::Object {
        return Err(malformed(s.pos, "an object"));
    }
    s.open(b'{');
    let mut found = vec![None; names.len()];
    let mut first = true;
    while let Some(key) = s.next_key(first)? {
        first = false;
        s.peek()?;
        let start = s.pos;
        s.skip(1)?;
        if let Some(i) = names.iter().position(|n| n.as_bytes() == &*key) {
            found[i] = Some(start..s.pos);
        }
    }
    s.end()?;
    Ok(found)
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
        let Some(range) = members(data, &[part.as_str()])?.pop().flatten() else {
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
