//! Kafka Connect's schema as `JsonConverter` writes it in its envelope (`{"schema": …,
//! "payload": …}`, `schemas.enable=true`), read into the JSON Schema model the JSON plan
//! compiler and `create_table` already read: one compiler for both. The translation is the one
//! Confluent's JSON Schema converter makes (its `title` is the Connect name, `connect.type` and
//! `connect.parameters` beside it), so a name means the same in either.
//!
//! A Connect schema: `type` (`int8`…`int64`, `float32`/`float64`, `boolean`, `string`, `bytes`,
//! `array` with `items`, `map` with `keys`/`values`, `struct` with `fields`, each field's name in
//! `field`), `optional`, `name`, `version`, `doc`, `parameters` (strings), `default`.

use serde_json::{Map, Value, json};

use super::JsonSchema;

/// Structs nested deeper than this are refused (BigQuery nests 15 levels; the envelope's
/// `after` and a RECORD column add a few).
const MAX_DEPTH: usize = 32;

/// The record schema of an envelope's `schema` block (its text), as a JSON Schema.
pub fn parse(text: &[u8]) -> Result<JsonSchema, String> {
    let connect: Value = serde_json::from_slice(text)
        .map_err(|e| format!("the kafka connect schema is not json: {e}"))?;
    let translated = translate(&connect, 0)?;
    JsonSchema::parse(&translated.to_string(), &[])
}

/// One Connect schema as a JSON Schema node.
fn translate(connect: &Value, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "the kafka connect schema nests deeper than {MAX_DEPTH}"
        ));
    }
    let Some(obj) = connect.as_object() else {
        return Err(format!(
            "a kafka connect schema is an object, not {connect}"
        ));
    };
    let ty = obj
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| "a kafka connect schema has no type".to_string())?;
    let mut out = Map::new();
    let json_type = match ty {
        "int8" | "int16" | "int32" | "int64" => "integer",
        // JsonConverter's names for FLOAT32 and FLOAT64 (Kafka's `JsonSchema.FLOAT_TYPE_NAME`,
        // `DOUBLE_TYPE_NAME`), as Debezium's records carry them for `real` and `double precision`
        "float" | "double" => "number",
        "boolean" => "boolean",
        "string" => "string",
        "bytes" => {
            out.insert("connect.type".into(), json!("bytes"));
            "string"
        }
        "array" => {
            let items = obj
                .get("items")
                .ok_or_else(|| "a kafka connect array has no items".to_string())?;
            out.insert("items".into(), translate(items, depth + 1)?);
            "array"
        }
        "map" => {
            // JsonConverter writes a map with string keys as an object, any other as an array
            // of [key, value] pairs: a map is any JSON value (a JSON column).
            out.insert("connect.type".into(), json!("map"));
            ""
        }
        "struct" => {
            let fields = obj
                .get("fields")
                .and_then(Value::as_array)
                .ok_or_else(|| "a kafka connect struct has no fields".to_string())?;
            let mut properties = Map::new();
            let mut required = Vec::new();
            for f in fields {
                let name = f
                    .get("field")
                    .and_then(Value::as_str)
                    .ok_or_else(|| "a kafka connect struct field has no name".to_string())?;
                if properties.contains_key(name) {
                    return Err(format!("the kafka connect struct has two fields {name}"));
                }
                let translated =
                    translate(f, depth + 1).map_err(|e| format!("field {name}: {e}"))?;
                if !optional(f) {
                    required.push(json!(name));
                }
                properties.insert(name.to_owned(), translated);
            }
            out.insert("properties".into(), Value::Object(properties));
            out.insert("required".into(), Value::Array(required));
            "object"
        }
        other => return Err(format!("kafka connect type {other:?} is not one")),
    };
    if !json_type.is_empty() {
        out.insert(
            "type".into(),
            if optional(connect) {
                json!([json_type, "null"])
            } else {
                json!(json_type)
            },
        );
    }
    if let Some(name) = obj.get("name").and_then(Value::as_str) {
        out.insert("title".into(), json!(name));
    }
    if let Some(doc) = obj.get("doc").and_then(Value::as_str) {
        out.insert("description".into(), json!(doc));
    }
    if let Some(params @ Value::Object(_)) = obj.get("parameters") {
        out.insert("connect.parameters".into(), params.clone());
    }
    Ok(Value::Object(out))
}

fn optional(connect: &Value) -> bool {
    connect.get("optional").and_then(Value::as_bool) == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_debezium_value_schema_reads_as_a_json_schema() {
        let text = r#"{"type":"struct","name":"db.public.t.Envelope","version":2,"optional":false,
          "fields":[
            {"type":"struct","optional":true,"name":"db.public.t.Value","field":"after","fields":[
              {"type":"int32","optional":false,"field":"id"},
              {"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"ts"},
              {"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,
               "parameters":{"scale":"3","connect.decimal.precision":"12"},"field":"amount"},
              {"type":"array","optional":true,"items":{"type":"string","optional":true},"field":"tags"},
              {"type":"map","optional":true,"keys":{"type":"string"},"values":{"type":"int32"},"field":"m"}]},
            {"type":"string","optional":false,"field":"op"}]}"#;
        let schema = parse(text.as_bytes()).unwrap();
        let root = schema.root();
        assert_eq!(root["required"], json!(["op"]));
        let after = &root["properties"]["after"];
        assert_eq!(after["type"], json!(["object", "null"]));
        assert_eq!(after["required"], json!(["id"]));
        let p = &after["properties"];
        assert_eq!(p["id"], json!({"type": "integer"}));
        assert_eq!(
            p["ts"],
            json!({"type": ["integer", "null"], "title": "io.debezium.time.Timestamp"})
        );
        assert_eq!(p["amount"]["connect.type"], json!("bytes"));
        assert_eq!(p["amount"]["connect.parameters"]["scale"], json!("3"));
        assert_eq!(p["tags"]["items"], json!({"type": ["string", "null"]}));
        assert_eq!(p["m"], json!({"connect.type": "map"}));
        let floats = parse(
            br#"{"type":"struct","fields":[{"type":"float","optional":true,"field":"r"},
              {"type":"double","optional":false,"field":"d"}]}"#,
        )
        .unwrap();
        let p = &floats.root()["properties"];
        assert_eq!(p["r"], json!({"type": ["number", "null"]}));
        assert_eq!(p["d"], json!({"type": "number"}));
        let e = parse(br#"{"type":"struct","fields":[{"type":"uint8","field":"x"}]}"#);
        assert!(e.unwrap_err().contains("field x: kafka connect type"));
    }
}
