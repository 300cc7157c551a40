//! The Avro writer schema as the transcoder needs it: an arena of nodes with named types resolved,
//! logical types validated, and the annotations BigQuery users put on Avro strings (`sqlType`,
//! the Flink connector's `Json`/`geography_wkt`, BigQuery's `datetime`) kept. apache-avro drops
//! attributes of primitive types when it parses, which is why this model is parsed from the JSON
//! text directly.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::connect_types::ConnectType;
use super::error::SchemaError;

/// Index of a node in [`AvroSchema::nodes`].
pub type NodeId = usize;

/// A parsed Avro schema. Named types appear once; references point at the same node, so a
/// recursive schema is a cycle in the arena.
#[derive(Debug, Clone, PartialEq)]
pub struct AvroSchema {
    pub nodes: Vec<Node>,
    pub root: NodeId,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: Kind,
    pub logical: Logical,
    /// The Connect or Debezium type `connect.name` names, when the name is one
    /// [`ConnectType`] knows: `Err` says why its `connect.parameters` do not fit it (a plan that
    /// writes the value refuses it with that reason). Unknown names (a record's own name, which
    /// `AvroData` repeats there) are `None`, and the value is read by its Avro type.
    pub connect: Option<Result<ConnectType, String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Record(Record),
    Enum { name: String, symbols: Vec<String> },
    Fixed { name: String, size: usize },
    Array(NodeId),
    Map(NodeId),
    Union(Vec<NodeId>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub name: String,
    pub doc: Option<String>,
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub doc: Option<String>,
    pub schema: NodeId,
}

/// Logical type of a node, already checked against its underlying type (an invalid logical type
/// is ignored, as the Avro specification says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logical {
    None,
    Date,
    TimeMillis,
    TimeMicros,
    TimestampMillis,
    TimestampMicros,
    TimestampNanos,
    LocalTimestampMillis,
    LocalTimestampMicros,
    LocalTimestampNanos,
    Decimal {
        precision: u32,
        scale: u32,
    },
    Uuid,
    /// `sqlType: JSON` or the Flink connector's `logicalType: Json` on a string.
    Json,
    /// `sqlType: GEOGRAPHY` or `logicalType: geography_wkt` on a string.
    Geography,
    /// BigQuery's `logicalType: datetime` on a string (a DATETIME literal).
    DateTimeString,
}

impl AvroSchema {
    pub fn parse(text: &str) -> Result<AvroSchema, SchemaError> {
        let json: Value = serde_json::from_str(text)
            .map_err(|e| SchemaError::Invalid(format!("schema is not json: {e}")))?;
        let mut parser = Parser::default();
        let root = parser.parse(&json, None, 0)?;
        Ok(AvroSchema {
            nodes: parser.nodes,
            root,
        })
    }

    /// The fixed writer schema of raw Avro input, from the `.avsc` file named in config.
    pub fn read_avsc(path: &std::path::Path) -> Result<AvroSchema, SchemaError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SchemaError::Invalid(format!("cannot read {}: {e}", path.display())))?;
        AvroSchema::parse(&text)
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// The record at the root, which is what a row is made of.
    pub fn root_record(&self) -> Result<&Record, SchemaError> {
        match &self.nodes[self.root].kind {
            Kind::Record(r) => Ok(r),
            other => Err(SchemaError::Invalid(format!(
                "the top-level schema must be a record, got {}",
                kind_name(other)
            ))),
        }
    }

    /// `Some(i)` when the node is a union with exactly one non-null branch `i` next to `null`.
    pub fn nullable_branch(&self, id: NodeId) -> Option<(usize, NodeId)> {
        let Kind::Union(branches) = &self.nodes[id].kind else {
            return None;
        };
        let non_null: Vec<(usize, NodeId)> = branches
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, b)| self.nodes[*b].kind != Kind::Null)
            .collect();
        (branches.len() == 2 && non_null.len() == 1).then(|| non_null[0])
    }
}

pub fn kind_name(kind: &Kind) -> &'static str {
    match kind {
        Kind::Null => "null",
        Kind::Boolean => "boolean",
        Kind::Int => "int",
        Kind::Long => "long",
        Kind::Float => "float",
        Kind::Double => "double",
        Kind::Bytes => "bytes",
        Kind::String => "string",
        Kind::Record(_) => "record",
        Kind::Enum { .. } => "enum",
        Kind::Fixed { .. } => "fixed",
        Kind::Array(_) => "array",
        Kind::Map(_) => "map",
        Kind::Union(_) => "union",
    }
}

/// Deep enough for any real schema; it stops a hostile registry from overflowing the stack.
const MAX_SCHEMA_DEPTH: usize = 64;

#[derive(Default)]
struct Parser {
    nodes: Vec<Node>,
    names: HashMap<String, NodeId>,
}

impl Parser {
    fn push(&mut self, kind: Kind, logical: Logical) -> NodeId {
        self.nodes.push(Node {
            kind,
            logical,
            connect: None,
        });
        self.nodes.len() - 1
    }

    /// Like [`Parser::push`], with the Connect type the schema object names.
    fn push_named(&mut self, kind: Kind, logical: Logical, obj: &Map<String, Value>) -> NodeId {
        let id = self.push(kind, logical);
        self.nodes[id].connect = connect_type(obj);
        id
    }

    fn parse(
        &mut self,
        json: &Value,
        namespace: Option<&str>,
        depth: usize,
    ) -> Result<NodeId, SchemaError> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(SchemaError::Invalid(format!(
                "schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
            )));
        }
        match json {
            Value::String(name) => self.named_or_primitive(name, namespace),
            Value::Array(branches) => {
                let mut ids = Vec::with_capacity(branches.len());
                for b in branches {
                    if b.is_array() {
                        return Err(SchemaError::Invalid(
                            "a union may not contain a union".into(),
                        ));
                    }
                    ids.push(self.parse(b, namespace, depth + 1)?);
                }
                Ok(self.push(Kind::Union(ids), Logical::None))
            }
            Value::Object(obj) => self.complex(obj, namespace, depth),
            other => Err(SchemaError::Invalid(format!(
                "a schema must be a string, array or object, got {other}"
            ))),
        }
    }

    fn named_or_primitive(
        &mut self,
        name: &str,
        namespace: Option<&str>,
    ) -> Result<NodeId, SchemaError> {
        if let Some(kind) = primitive(name) {
            return Ok(self.push(kind, Logical::None));
        }
        let full = full_name(name, namespace);
        self.names
            .get(&full)
            .or_else(|| self.names.get(name))
            .copied()
            .ok_or_else(|| SchemaError::Invalid(format!("unknown type name {name:?}")))
    }

    fn complex(
        &mut self,
        obj: &Map<String, Value>,
        namespace: Option<&str>,
        depth: usize,
    ) -> Result<NodeId, SchemaError> {
        let ty = match obj.get("type") {
            Some(Value::String(t)) => t.as_str(),
            // `{"type": {...}}` and `{"type": [...]}` wrap another schema.
            Some(inner @ (Value::Object(_) | Value::Array(_))) => {
                return self.parse(inner, namespace, depth + 1);
            }
            _ => {
                return Err(SchemaError::Invalid(
                    "schema object without a \"type\"".into(),
                ));
            }
        };
        let logical_name = obj.get("logicalType").and_then(Value::as_str);
        let sql_type = obj.get("sqlType").and_then(Value::as_str);
        match ty {
            "record" | "error" => self.record(obj, namespace, depth),
            "enum" => self.enum_type(obj, namespace),
            "fixed" => self.fixed_type(obj, namespace, logical_name),
            "array" => {
                let items = obj
                    .get("items")
                    .ok_or_else(|| SchemaError::Invalid("array without \"items\"".into()))?;
                let items = self.parse(items, namespace, depth + 1)?;
                Ok(self.push(Kind::Array(items), Logical::None))
            }
            "map" => {
                let values = obj
                    .get("values")
                    .ok_or_else(|| SchemaError::Invalid("map without \"values\"".into()))?;
                let values = self.parse(values, namespace, depth + 1)?;
                Ok(self.push(Kind::Map(values), Logical::None))
            }
            prim => {
                let kind = match primitive(prim) {
                    Some(k) => k,
                    // A named type may be referenced as `{"type": "Name"}`.
                    None => return self.named_or_primitive(prim, namespace),
                };
                let logical = primitive_logical(&kind, logical_name, sql_type, obj);
                Ok(self.push_named(kind, logical, obj))
            }
        }
    }

    /// A named enum and its symbols.
    fn enum_type(
        &mut self,
        obj: &Map<String, Value>,
        namespace: Option<&str>,
    ) -> Result<NodeId, SchemaError> {
        let (name, _) = self.declared_name(obj, namespace)?;
        let symbols = obj
            .get("symbols")
            .and_then(Value::as_array)
            .ok_or_else(|| SchemaError::Invalid(format!("enum {name} has no symbols")))?
            .iter()
            .map(|s| {
                s.as_str().map(str::to_owned).ok_or_else(|| {
                    SchemaError::Invalid(format!("enum {name} has a non-string symbol"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let id = self.push(
            Kind::Enum {
                name: name.clone(),
                symbols,
            },
            Logical::None,
        );
        self.names.insert(name, id);
        Ok(id)
    }

    /// A named fixed, with its logical type (a decimal, or a uuid of 16 bytes).
    fn fixed_type(
        &mut self,
        obj: &Map<String, Value>,
        namespace: Option<&str>,
        logical_name: Option<&str>,
    ) -> Result<NodeId, SchemaError> {
        let (name, _) = self.declared_name(obj, namespace)?;
        let size = obj
            .get("size")
            .and_then(Value::as_u64)
            .filter(|s| *s <= u32::MAX as u64)
            .ok_or_else(|| SchemaError::Invalid(format!("fixed {name} has no size")))?
            as usize;
        let logical = match logical_name {
            Some("decimal") => decimal(obj, Some(size)),
            Some("uuid") if size == 16 => Logical::Uuid,
            _ => Logical::None,
        };
        let id = self.push_named(
            Kind::Fixed {
                name: name.clone(),
                size,
            },
            logical,
            obj,
        );
        self.names.insert(name, id);
        Ok(id)
    }

    fn record(
        &mut self,
        obj: &Map<String, Value>,
        namespace: Option<&str>,
        depth: usize,
    ) -> Result<NodeId, SchemaError> {
        let (name, ns) = self.declared_name(obj, namespace)?;
        // Registered before the fields so that a recursive reference resolves to this node.
        let id = self.push_named(
            Kind::Record(Record {
                name: name.clone(),
                doc: None,
                fields: Vec::new(),
            }),
            Logical::None,
            obj,
        );
        self.names.insert(name.clone(), id);
        let fields_json = obj
            .get("fields")
            .and_then(Value::as_array)
            .ok_or_else(|| SchemaError::Invalid(format!("record {name} has no fields array")))?;
        let mut fields = Vec::with_capacity(fields_json.len());
        for f in fields_json {
            let fname = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| SchemaError::Invalid(format!("a field of {name} has no name")))?;
            let ftype = f
                .get("type")
                .ok_or_else(|| SchemaError::Invalid(format!("field {name}.{fname} has no type")))?;
            if fields.iter().any(|x: &Field| x.name == fname) {
                return Err(SchemaError::Invalid(format!(
                    "record {name} declares field {fname} twice"
                )));
            }
            let schema = self.parse(ftype, ns.as_deref(), depth + 1)?;
            fields.push(Field {
                name: fname.to_owned(),
                doc: f.get("doc").and_then(Value::as_str).map(str::to_owned),
                schema,
            });
        }
        self.nodes[id].kind = Kind::Record(Record {
            name,
            doc: obj.get("doc").and_then(Value::as_str).map(str::to_owned),
            fields,
        });
        Ok(id)
    }

    /// The full name of a named type and the namespace its children inherit.
    fn declared_name(
        &self,
        obj: &Map<String, Value>,
        namespace: Option<&str>,
    ) -> Result<(String, Option<String>), SchemaError> {
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| SchemaError::Invalid("named type without a \"name\"".into()))?;
        let ns = obj
            .get("namespace")
            .and_then(Value::as_str)
            .or(namespace)
            .filter(|s| !s.is_empty());
        let full = full_name(name, ns);
        if self.names.contains_key(&full) {
            return Err(SchemaError::Invalid(format!(
                "type {full} is defined twice"
            )));
        }
        let child_ns = full.rsplit_once('.').map(|(ns, _)| ns.to_owned());
        Ok((full, child_ns))
    }
}

/// The type `connect.name` names, with `connect.parameters` (a map of strings) as its
/// parameters: how `AvroData.fromConnectSchema` writes a named Connect schema on any Avro type
/// but a union (confluentinc/schema-registry,
/// `avro-data/src/main/java/io/confluent/connect/avro/AvroData.java`).
fn connect_type(obj: &Map<String, Value>) -> Option<Result<ConnectType, String>> {
    let name = obj.get("connect.name").and_then(Value::as_str)?;
    let parameters = obj.get("connect.parameters").and_then(Value::as_object);
    let parameter = |key: &str| parameters?.get(key)?.as_str();
    ConnectType::from_name(name, parameter).transpose()
}

fn full_name(name: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) if !name.contains('.') && !ns.is_empty() => format!("{ns}.{name}"),
        _ => name.to_owned(),
    }
}

fn primitive(name: &str) -> Option<Kind> {
    Some(match name {
        "null" => Kind::Null,
        "boolean" => Kind::Boolean,
        "int" => Kind::Int,
        "long" => Kind::Long,
        "float" => Kind::Float,
        "double" => Kind::Double,
        "bytes" => Kind::Bytes,
        "string" => Kind::String,
        _ => return None,
    })
}

fn primitive_logical(
    kind: &Kind,
    logical: Option<&str>,
    sql_type: Option<&str>,
    obj: &Map<String, Value>,
) -> Logical {
    match (kind, logical) {
        (Kind::Int, Some("date")) => Logical::Date,
        (Kind::Int, Some("time-millis")) => Logical::TimeMillis,
        (Kind::Long, Some("time-micros")) => Logical::TimeMicros,
        (Kind::Long, Some("timestamp-millis")) => Logical::TimestampMillis,
        (Kind::Long, Some("timestamp-micros")) => Logical::TimestampMicros,
        (Kind::Long, Some("timestamp-nanos")) => Logical::TimestampNanos,
        (Kind::Long, Some("local-timestamp-millis")) => Logical::LocalTimestampMillis,
        (Kind::Long, Some("local-timestamp-micros")) => Logical::LocalTimestampMicros,
        (Kind::Long, Some("local-timestamp-nanos")) => Logical::LocalTimestampNanos,
        (Kind::Bytes, Some("decimal")) => decimal(obj, None),
        (Kind::String, Some("uuid")) => Logical::Uuid,
        (Kind::String, Some("Json" | "json")) => Logical::Json,
        (Kind::String, Some("geography_wkt")) => Logical::Geography,
        (Kind::String, Some("datetime")) => Logical::DateTimeString,
        (Kind::String, _) => match sql_type.map(str::to_ascii_uppercase).as_deref() {
            Some("JSON") => Logical::Json,
            Some("GEOGRAPHY") => Logical::Geography,
            _ => Logical::None,
        },
        _ => Logical::None,
    }
}

/// A decimal annotation, or `None` when it breaks the specification's rules (then the
/// underlying bytes/fixed type applies).
fn decimal(obj: &Map<String, Value>, fixed_size: Option<usize>) -> Logical {
    let precision = obj.get("precision").and_then(Value::as_u64);
    let scale = obj.get("scale").and_then(Value::as_u64).unwrap_or(0);
    let Some(precision) = precision.filter(|p| *p >= 1 && *p <= 1000) else {
        return Logical::None;
    };
    if scale > precision {
        return Logical::None;
    }
    if let Some(size) = fixed_size {
        // A fixed of n bytes holds at most floor(log10(2^(8n-1) - 1)) digits.
        let max_digits = ((8.0 * size as f64 - 1.0) * std::f64::consts::LOG10_2).floor();
        if size == 0 || precision as f64 > max_digits {
            return Logical::None;
        }
    }
    Logical::Decimal {
        precision: precision as u32,
        scale: scale as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_type_and_connector_logical_names_are_kept_on_strings() {
        let s = AvroSchema::parse(
            r#"{"type":"record","name":"r","fields":[
              {"name":"a","type":{"type":"string","sqlType":"JSON"}},
              {"name":"b","type":{"type":"string","logicalType":"Json"}},
              {"name":"c","type":{"type":"string","sqlType":"GEOGRAPHY"}},
              {"name":"d","type":{"type":"string","logicalType":"geography_wkt"}},
              {"name":"e","type":{"type":"string","logicalType":"datetime"}},
              {"name":"f","type":{"type":"int","logicalType":"timestamp-millis"}}]}"#,
        )
        .unwrap();
        let r = s.root_record().unwrap();
        let logical: Vec<Logical> = r.fields.iter().map(|f| s.node(f.schema).logical).collect();
        assert_eq!(
            logical,
            vec![
                Logical::Json,
                Logical::Json,
                Logical::Geography,
                Logical::Geography,
                Logical::DateTimeString,
                // timestamp-millis on an int is invalid and ignored
                Logical::None
            ]
        );
    }

    #[test]
    fn named_types_resolve_within_namespaces_and_recursion_is_a_cycle() {
        let s = AvroSchema::parse(
            r#"{"type":"record","name":"Node","namespace":"a.b","fields":[
              {"name":"next","type":["null","Node"]},
              {"name":"h","type":{"type":"fixed","name":"H","size":4}},
              {"name":"h2","type":"a.b.H"}]}"#,
        )
        .unwrap();
        let r = s.root_record().unwrap();
        let Kind::Union(b) = &s.node(r.fields[0].schema).kind else {
            panic!()
        };
        assert_eq!(b[1], s.root);
        assert_eq!(r.fields[1].schema, r.fields[2].schema);
    }

    #[test]
    fn decimal_on_a_too_small_fixed_is_ignored() {
        let s = AvroSchema::parse(
            r#"{"type":"fixed","name":"f","size":2,"logicalType":"decimal","precision":5}"#,
        )
        .unwrap();
        assert_eq!(s.node(s.root).logical, Logical::None);
        let s = AvroSchema::parse(
            r#"{"type":"fixed","name":"f","size":2,"logicalType":"decimal","precision":4,"scale":2}"#,
        )
        .unwrap();
        assert_eq!(
            s.node(s.root).logical,
            Logical::Decimal {
                precision: 4,
                scale: 2
            }
        );
    }
}
