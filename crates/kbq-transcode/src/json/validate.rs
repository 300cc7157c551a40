//! Optional validation of a record against its registered JSON Schema
//! (`schema_registry.json_validate`), before the plan writes it. It checks the keywords listed
//! in `docs/mapping.md` — the ones that decide the shape and range of values — and ignores the
//! rest; `format` is an annotation here, as in Confluent's serializers (a date that is not a date
//! is the plan's per-record error). It runs on a parsed value, so it costs a second pass and is
//! off by default.

use serde_json::Value;

use super::schema::JsonSchema;
use crate::RecordError;
use crate::budget::MAX_JSON_SCHEMA_STEPS;

/// Parses and validates a record when the plan asks for it (a schema to validate against).
pub fn check_record(schema: Option<&JsonSchema>, body: &[u8]) -> Result<(), RecordError> {
    let Some(schema) = schema else {
        return Ok(());
    };
    // A record that is not JSON is reported by the plan's own pass, with its byte offset.
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return Ok(());
    };
    let mut walk = Walk::new(record_steps(body.len()));
    let result = check(
        schema,
        schema.root(),
        schema.root(),
        &value,
        "",
        0,
        &mut walk,
    );
    if walk.tripped {
        return Err(RecordError::SchemaTooComplex {
            what: "validating the record against its json schema",
            limit: walk.limit,
        });
    }
    result.map_err(|reason| RecordError::JsonSchemaViolation { reason })
}

/// Why `value` does not match the schema's root, or `Ok`.
pub fn validate(schema: &JsonSchema, value: &Value) -> Result<(), String> {
    let mut walk = Walk::new(MAX_JSON_SCHEMA_STEPS);
    let result = check(
        schema,
        schema.root(),
        schema.root(),
        value,
        "",
        0,
        &mut walk,
    );
    match walk.tripped {
        true => Err(format!(
            "validation takes more than {} steps: the schema is too complex",
            walk.limit
        )),
        false => result,
    }
}

const MAX_DEPTH: usize = 128;

/// The schema nodes one record may be checked against: a fixed allowance and a share per byte.
/// A schema applies a few nodes to each value, and each value takes at least a byte; `allOf` of
/// `$ref`s can apply 2^depth nodes to one value, which this bounds.
pub const VALIDATE_STEPS_PER_BYTE: usize = 64;
pub const VALIDATE_STEPS_BASE: usize = 10_000;

fn record_steps(len: usize) -> usize {
    VALIDATE_STEPS_BASE.saturating_add(len.saturating_mul(VALIDATE_STEPS_PER_BYTE))
}

/// The steps one validation may still take. Once spent, every check fails and the caller
/// reports the budget, not the failure (a spent budget inside `anyOf` or `not` would otherwise
/// read as a branch that does not match).
struct Walk {
    limit: usize,
    left: usize,
    tripped: bool,
}

impl Walk {
    fn new(limit: usize) -> Walk {
        Walk {
            limit,
            left: limit,
            tripped: false,
        }
    }

    fn step(&mut self) -> Result<(), String> {
        match self.left.checked_sub(1) {
            Some(left) if !self.tripped => {
                self.left = left;
                Ok(())
            }
            _ => {
                self.tripped = true;
                Err("validation step budget spent".into())
            }
        }
    }
}

/// The value against one schema node: the keywords about the value itself (type, enum, const,
/// numeric range, string length and pattern), then those about its items or properties, then
/// the combinators, in that order (the first failure is the one reported).
fn check(
    s: &JsonSchema,
    doc: &Value,
    node: &Value,
    v: &Value,
    at: &str,
    depth: usize,
    walk: &mut Walk,
) -> Result<(), String> {
    walk.step()?;
    if depth > MAX_DEPTH {
        return Err(format!("{at}: schema nested too deep"));
    }
    let (doc, node) = s.resolve(doc, node).map_err(|e| format!("{at}: {e}"))?;
    let obj = match node {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return Err(format!("{}: no value is allowed", here(at))),
        Value::Object(o) => o,
        _ => return Ok(()),
    };
    check_type(obj, v, at)?;
    if let Some(n) = v.as_f64().filter(|_| v.is_number()) {
        check_range(obj, n, v, at)?;
    }
    if let Value::String(text) = v {
        check_string(obj, text, at)?;
    }
    if let Value::Array(items) = v {
        check_array(s, doc, obj, items, at, depth, walk)?;
    }
    if let Value::Object(fields) = v {
        check_object(s, doc, obj, fields, at, depth, walk)?;
    }
    check_combinators(s, doc, obj, v, at, depth, walk)
}

type Keywords = serde_json::Map<String, Value>;

fn fail(at: &str, what: String) -> Result<(), String> {
    Err(format!("{}: {what}", here(at)))
}

/// `type`, `enum`, `const`.
fn check_type(obj: &Keywords, v: &Value, at: &str) -> Result<(), String> {
    if let Some(t) = obj.get("type") {
        let allowed: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !allowed.is_empty() && !allowed.iter().any(|t| is_type(v, t)) {
            return fail(
                at,
                format!("{} is not of type {}", kind(v), allowed.join(" or ")),
            );
        }
    }
    if let Some(Value::Array(options)) = obj.get("enum")
        && !options.iter().any(|o| same(o, v))
    {
        return fail(at, format!("{v} is not one of the enum values"));
    }
    if let Some(c) = obj.get("const")
        && !same(c, v)
    {
        return fail(at, format!("{v} is not the constant {c}"));
    }
    Ok(())
}

/// `minimum`, `maximum` (with draft 4's boolean `exclusive…`), and the numeric
/// `exclusiveMinimum`, `exclusiveMaximum` of later drafts.
fn check_range(obj: &Keywords, n: f64, v: &Value, at: &str) -> Result<(), String> {
    let bound = |k: &str| obj.get(k).and_then(Value::as_f64);
    let excl = |k: &str| obj.get(k).and_then(Value::as_bool).unwrap_or(false);
    if let Some(m) = bound("minimum")
        && (n < m || (n == m && excl("exclusiveMinimum")))
    {
        return fail(at, format!("{v} is below the minimum {m}"));
    }
    if let Some(m) = bound("maximum")
        && (n > m || (n == m && excl("exclusiveMaximum")))
    {
        return fail(at, format!("{v} is above the maximum {m}"));
    }
    if let Some(m) = bound("exclusiveMinimum")
        && n <= m
    {
        return fail(at, format!("{v} is not above {m}"));
    }
    if let Some(m) = bound("exclusiveMaximum")
        && n >= m
    {
        return fail(at, format!("{v} is not below {m}"));
    }
    Ok(())
}

/// `minLength`, `maxLength` (in characters), `pattern`.
fn check_string(obj: &Keywords, text: &str, at: &str) -> Result<(), String> {
    let len = text.chars().count() as u64;
    if let Some(m) = obj.get("minLength").and_then(Value::as_u64)
        && len < m
    {
        return fail(at, format!("string is shorter than {m} characters"));
    }
    if let Some(m) = obj.get("maxLength").and_then(Value::as_u64)
        && len > m
    {
        return fail(at, format!("string is longer than {m} characters"));
    }
    if let Some(p) = obj.get("pattern").and_then(Value::as_str) {
        let re = regex::Regex::new(p).map_err(|e| format!("{}: pattern {p:?}: {e}", here(at)))?;
        if !re.is_match(text) {
            return fail(at, format!("{text:?} does not match the pattern {p:?}"));
        }
    }
    Ok(())
}

/// `minItems`, `maxItems`, then each item against `items`.
fn check_array(
    s: &JsonSchema,
    doc: &Value,
    obj: &Keywords,
    items: &[Value],
    at: &str,
    depth: usize,
    walk: &mut Walk,
) -> Result<(), String> {
    if let Some(m) = obj.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < m
    {
        return fail(at, format!("fewer than {m} items"));
    }
    if let Some(m) = obj.get("maxItems").and_then(Value::as_u64)
        && (items.len() as u64) > m
    {
        return fail(at, format!("more than {m} items"));
    }
    if let Some(item) = obj.get("items").filter(|i| i.is_object() || i.is_boolean()) {
        for (i, x) in items.iter().enumerate() {
            check(s, doc, item, x, &format!("{at}[{i}]"), depth + 1, walk)?;
        }
    }
    Ok(())
}

/// `required`, then each property against its `properties` entry or `additionalProperties`.
fn check_object(
    s: &JsonSchema,
    doc: &Value,
    obj: &Keywords,
    fields: &Keywords,
    at: &str,
    depth: usize,
    walk: &mut Walk,
) -> Result<(), String> {
    let props = obj.get("properties").and_then(Value::as_object);
    if let Some(Value::Array(required)) = obj.get("required") {
        for r in required.iter().filter_map(Value::as_str) {
            if !fields.contains_key(r) {
                return fail(at, format!("required property {r} is missing"));
            }
        }
    }
    for (k, x) in fields {
        let path = if at.is_empty() {
            k.clone()
        } else {
            format!("{at}.{k}")
        };
        match (
            props.and_then(|p| p.get(k)),
            obj.get("additionalProperties"),
        ) {
            (Some(p), _) => check(s, doc, p, x, &path, depth + 1, walk)?,
            (None, Some(extra)) => check(s, doc, extra, x, &path, depth + 1, walk)?,
            (None, None) => {}
        }
    }
    Ok(())
}

/// `allOf`, `anyOf`, `oneOf`, `not`.
fn check_combinators(
    s: &JsonSchema,
    doc: &Value,
    obj: &Keywords,
    v: &Value,
    at: &str,
    depth: usize,
    walk: &mut Walk,
) -> Result<(), String> {
    if let Some(Value::Array(all)) = obj.get("allOf") {
        for b in all {
            check(s, doc, b, v, at, depth + 1, walk)?;
        }
    }
    if let Some(Value::Array(any)) = obj.get("anyOf")
        && !any
            .iter()
            .any(|b| check(s, doc, b, v, at, depth + 1, walk).is_ok())
    {
        return fail(at, "matches none of anyOf".into());
    }
    if let Some(Value::Array(one)) = obj.get("oneOf") {
        let n = one
            .iter()
            .filter(|b| check(s, doc, b, v, at, depth + 1, walk).is_ok())
            .count();
        if n != 1 {
            return fail(
                at,
                format!("matches {n} branches of oneOf, not exactly one"),
            );
        }
    }
    if let Some(not) = obj.get("not")
        && check(s, doc, not, v, at, depth + 1, walk).is_ok()
    {
        return fail(at, "matches the schema under not".into());
    }
    Ok(())
}

fn here(at: &str) -> &str {
    if at.is_empty() { "(root)" } else { at }
}

fn is_type(v: &Value, t: &str) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        // 1.0 is an integer for JSON Schema (draft 6 and later).
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => true,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// JSON equality, numbers by value (1 and 1.0 are the same).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| same(a, b)))
        }
        _ => a == b,
    }
}
