//! A registered JSON Schema, read for what a plan needs: the type of each property (with
//! `$ref`s followed, `oneOf`/`anyOf` of null and one type read as that type, `allOf` merged), its
//! `format`, and the Connect logical type its `title` names. References to other registered
//! schemas are looked up by their reference name.

use std::collections::HashMap;

use serde_json::Value;

use crate::budget::{Budget, TooComplex};
use crate::transforms::Source;

/// `$ref` chains longer than this are refused (a cycle).
const MAX_REF_HOPS: usize = 64;

#[derive(Debug)]
pub struct JsonSchema {
    root: Value,
    /// Referenced documents by reference name.
    references: HashMap<String, Value>,
}

/// Why a shape could not be read: the schema is wrong, or merging it would take more work than
/// the budget allows (`allOf` of `$ref`s doubles the work at each level, whatever the depth).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeError {
    Bad(String),
    TooComplex(TooComplex),
}

impl From<String> for ShapeError {
    fn from(reason: String) -> ShapeError {
        ShapeError::Bad(reason)
    }
}

impl From<TooComplex> for ShapeError {
    fn from(e: TooComplex) -> ShapeError {
        ShapeError::TooComplex(e)
    }
}

impl From<ShapeError> for String {
    fn from(e: ShapeError) -> String {
        match e {
            ShapeError::Bad(reason) => reason,
            ShapeError::TooComplex(e) => e.to_string(),
        }
    }
}

/// What a plan reads from one schema node.
#[derive(Debug, Clone, Default)]
pub struct Shape<'s> {
    /// JSON types the node allows besides null (`None` = any: no `type`, `{}` or a union).
    pub kind: Option<Kind>,
    pub format: Option<&'s str>,
    /// The Connect logical type in `title` (`org.apache.kafka.connect.data.Timestamp`, ...).
    pub title: Option<&'s str>,
    /// `properties` of an object, merged over `allOf`, each with the document it sits in.
    pub properties: Vec<(&'s str, Node<'s>)>,
    /// `items` of an array, with the document it sits in.
    pub items: Option<Node<'s>>,
    /// `required` of an object, merged over `allOf`.
    pub required: Vec<&'s str>,
    /// `null` is one of the allowed types (`type: [T, "null"]`, a `null` branch of `oneOf`).
    pub nullable: bool,
    pub description: Option<&'s str>,
    /// `contentEncoding` (`base64` for bytes) or Connect's `connect.type` (`bytes`).
    pub encoding: Option<&'s str>,
    /// Connect's `connect.parameters`: a Decimal's `scale` and `connect.decimal.precision`.
    pub connect_scale: Option<u32>,
    pub connect_precision: Option<u32>,
    /// Connect's `connect.parameters` as written (`crate::connect_types` reads them by name).
    pub connect_parameters: Option<&'s serde_json::Map<String, Value>>,
}

/// A schema node and the document it was found in: a `#/…` reference inside a referenced
/// document points into that document, not into the root.
#[derive(Debug, Clone, Copy)]
pub struct Node<'s> {
    pub doc: &'s Value,
    pub value: &'s Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Boolean,
    Integer,
    Number,
    String,
    Object,
    Array,
    Null,
}

impl Kind {
    /// What a value transform (a cast, a conversion, a filter's comparison) reads from a
    /// property of this type; `None`, a property without a schema or a type: any value, checked
    /// when it comes.
    pub(crate) fn value_source(kind: Option<Kind>) -> Source {
        match kind {
            None => Source::Any,
            Some(Kind::String) => Source::Str,
            Some(Kind::Integer) => Source::Int64("integer"),
            Some(Kind::Number) => Source::Number,
            Some(Kind::Boolean) => Source::Bool,
            Some(k) => Source::Other(k.name()),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Boolean => "boolean",
            Kind::Integer => "integer",
            Kind::Number => "number",
            Kind::String => "string",
            Kind::Object => "object",
            Kind::Array => "array",
            Kind::Null => "null",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "boolean" => Kind::Boolean,
            "integer" => Kind::Integer,
            "number" => Kind::Number,
            "string" => Kind::String,
            "object" => Kind::Object,
            "array" => Kind::Array,
            "null" => Kind::Null,
            _ => return None,
        })
    }
}

impl JsonSchema {
    /// The schema text and its references as `(reference name, schema text)`.
    pub fn parse(text: &str, references: &[(String, String)]) -> Result<JsonSchema, String> {
        let root: Value =
            serde_json::from_str(text).map_err(|e| format!("schema is not json: {e}"))?;
        let mut refs = HashMap::new();
        for (name, text) in references {
            let v: Value = serde_json::from_str(text)
                .map_err(|e| format!("referenced schema {name} is not json: {e}"))?;
            refs.insert(name.clone(), v);
        }
        if !(root.is_object() || root.is_boolean()) {
            return Err("a json schema is an object or a boolean".into());
        }
        Ok(JsonSchema {
            root,
            references: refs,
        })
    }

    pub fn root(&self) -> &Value {
        &self.root
    }

    /// The root node, in the root document.
    pub fn root_node(&self) -> Node<'_> {
        Node {
            doc: &self.root,
            value: &self.root,
        }
    }

    /// Follows `$ref`s from `node` (found in `doc`) to the node that holds the definition.
    pub fn resolve<'s>(
        &'s self,
        mut doc: &'s Value,
        mut node: &'s Value,
    ) -> Result<(&'s Value, &'s Value), String> {
        for _ in 0..MAX_REF_HOPS {
            let Some(r) = node.get("$ref").and_then(Value::as_str) else {
                return Ok((doc, node));
            };
            let (name, pointer) = r.split_once('#').unwrap_or((r, ""));
            if !name.is_empty() {
                doc = self
                    .references
                    .get(name)
                    .ok_or_else(|| format!("$ref {r:?}: no reference named {name:?}"))?;
            }
            node = if pointer.is_empty() {
                doc
            } else {
                doc.pointer(&unescape_pointer(pointer))
                    .ok_or_else(|| format!("$ref {r:?} points at nothing"))?
            };
        }
        Err(format!("more than {MAX_REF_HOPS} $ref hops (a cycle?)"))
    }

    /// The schema of the values at `node` (an envelope's `after`) as a schema of its own: the
    /// node under `allOf` at the root of a copy of the document it sits in, so that its `#/…`
    /// references still point into that document's definitions; this schema's references kept.
    pub fn sub_schema(&self, node: Node<'_>) -> JsonSchema {
        let mut root = match node.doc {
            Value::Object(o) => o.clone(),
            _ => serde_json::Map::new(),
        };
        root.retain(|key, _| matches!(key.as_str(), "definitions" | "$defs" | "$schema" | "$id"));
        root.insert("allOf".into(), Value::Array(vec![node.value.clone()]));
        JsonSchema {
            root: Value::Object(root),
            references: self.references.clone(),
        }
    }

    /// The shape of a node (references followed, unions of null and one type unwrapped), with
    /// a budget of its own: for the few shapes read outside a compilation.
    pub fn shape<'s>(&'s self, node: Node<'s>) -> Result<Shape<'s>, ShapeError> {
        self.shape_within(node, &mut Budget::json_schema())
    }

    /// The shape of a node, its work charged to the compilation's `budget`.
    pub(crate) fn shape_within<'s>(
        &'s self,
        node: Node<'s>,
        budget: &mut Budget,
    ) -> Result<Shape<'s>, ShapeError> {
        let mut shape = Shape::default();
        self.merge(node.doc, node.value, &mut shape, 0, budget)?;
        Ok(shape)
    }

    fn merge<'s>(
        &'s self,
        doc: &'s Value,
        node: &'s Value,
        shape: &mut Shape<'s>,
        depth: usize,
        budget: &mut Budget,
    ) -> Result<(), ShapeError> {
        if depth > MAX_REF_HOPS {
            return Err(ShapeError::Bad("allOf/oneOf nested too deep".into()));
        }
        budget.node()?;
        let (doc, node) = self.resolve(doc, node)?;
        let Some(obj) = node.as_object() else {
            return Ok(()); // `true`: anything
        };
        merge_type(obj, shape);
        merge_annotations(obj, shape);
        if let Some(Value::Array(required)) = obj.get("required") {
            budget.nodes(required.len())?;
            shape
                .required
                .extend(required.iter().filter_map(Value::as_str));
        }
        merge_enum_const(obj, shape);
        if let Some(Value::Object(props)) = obj.get("properties") {
            budget.nodes(props.len())?;
            for (name, v) in props {
                shape
                    .properties
                    .push((name.as_str(), Node { doc, value: v }));
            }
            shape.kind.get_or_insert(Kind::Object);
        }
        if let Some(items) = obj.get("items") {
            shape.items = Some(Node { doc, value: items });
            shape.kind.get_or_insert(Kind::Array);
        }
        if let Some(Value::Array(all)) = obj.get("allOf") {
            for s in all {
                self.merge(doc, s, shape, depth + 1, budget)?;
            }
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(Value::Array(branches)) = obj.get(key) {
                let non_null: Vec<&Value> = branches
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) != Some("null"))
                    .collect();
                shape.nullable |= non_null.len() < branches.len();
                if let [only] = non_null[..] {
                    self.merge(doc, only, shape, depth + 1, budget)?;
                }
            }
        }
        Ok(())
    }
}

/// `type`: a single non-null type is the shape's kind; `null` among them makes it nullable.
fn merge_type<'s>(obj: &'s serde_json::Map<String, Value>, shape: &mut Shape<'s>) {
    if let Some(t) = obj.get("type") {
        let kinds: Vec<Kind> = match t {
            Value::String(s) => Kind::parse(s).into_iter().collect(),
            Value::Array(a) => a
                .iter()
                .filter_map(|s| s.as_str().and_then(Kind::parse))
                .collect(),
            _ => Vec::new(),
        };
        shape.nullable |= kinds.contains(&Kind::Null);
        let non_null: Vec<Kind> = kinds.into_iter().filter(|k| *k != Kind::Null).collect();
        if let [k] = non_null[..] {
            shape.kind = Some(k);
        }
    }
}

/// What names and annotates the value: `format`, `title`, `description`, the content encoding,
/// Kafka Connect's type and decimal parameters.
fn merge_annotations<'s>(obj: &'s serde_json::Map<String, Value>, shape: &mut Shape<'s>) {
    if let Some(f) = obj.get("format").and_then(Value::as_str) {
        shape.format = Some(f);
    }
    if let Some(t) = obj.get("title").and_then(Value::as_str) {
        shape.title = Some(t);
    }
    if let Some(d) = obj.get("description").and_then(Value::as_str) {
        shape.description = Some(d);
    }
    if let Some(e) = obj
        .get("contentEncoding")
        .or_else(|| obj.get("connect.type"))
        .and_then(Value::as_str)
    {
        shape.encoding = Some(e);
    }
    if let Some(Value::Object(params)) = obj.get("connect.parameters") {
        shape.connect_parameters = Some(params);
        let number = |key: &str| {
            params.get(key).and_then(|v| {
                v.as_str()
                    .and_then(|s| s.parse().ok())
                    .or(v.as_u64().map(|n| n as u32))
            })
        };
        shape.connect_scale = number("scale").or(shape.connect_scale);
        shape.connect_precision = number("connect.decimal.precision").or(shape.connect_precision);
    }
}

/// `enum` and `const`: a null among the values makes the shape nullable.
fn merge_enum_const<'s>(obj: &'s serde_json::Map<String, Value>, shape: &mut Shape<'s>) {
    let values = match (obj.get("enum"), obj.get("const")) {
        (Some(Value::Array(values)), _) => Some(values.iter().collect::<Vec<_>>()),
        (_, Some(value)) => Some(vec![value]),
        _ => None,
    };
    if let Some(values) = values {
        // Without `type`, an `enum`/`const` whose values are all of one JSON type is that
        // type (Confluent's converter reads a string enum as STRING).
        shape.nullable |= values.iter().any(|v| v.is_null());
        let mut kinds = values.iter().filter(|v| !v.is_null()).map(|v| kind_of(v));
        if let Some(first) = kinds.next()
            && kinds.all(|k| k == first)
            && !obj.contains_key("type")
        {
            shape.kind.get_or_insert(first);
        }
    }
}

/// The JSON type of a value (an integral number is `integer`).
fn kind_of(v: &Value) -> Kind {
    match v {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Boolean,
        Value::Number(n) if n.is_i64() || n.is_u64() => Kind::Integer,
        Value::Number(_) => Kind::Number,
        Value::String(_) => Kind::String,
        Value::Array(_) => Kind::Array,
        Value::Object(_) => Kind::Object,
    }
}

fn unescape_pointer(p: &str) -> String {
    // A fragment is percent-encoded in a URI; `#/definitions/a%20b` → `/definitions/a b`.
    let b = p.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = p
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
