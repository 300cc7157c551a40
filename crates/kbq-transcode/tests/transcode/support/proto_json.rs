//! A transcoded row as JSON, for comparison with the values a Python oracle computed
//! (`vectors.rs`, `protobuf_vectors.rs`): scalars as JSON, bytes as `{"hex": …}`, messages as
//! objects of their set fields.

use prost_reflect::{DynamicMessage, ReflectMessage, Value as PValue};
use serde_json::{Map, Value as Json, json};

pub fn to_json(v: &PValue) -> Json {
    match v {
        PValue::Bool(b) => json!(b),
        PValue::I32(i) => json!(i),
        PValue::I64(i) => json!(i),
        PValue::U32(i) => json!(i),
        PValue::U64(i) => json!(i),
        PValue::F32(f) => json!(f),
        PValue::F64(f) => json!(f),
        PValue::String(s) => json!(s),
        PValue::Bytes(b) => {
            json!({"hex": b.iter().map(|x| format!("{x:02x}")).collect::<String>()})
        }
        PValue::List(l) => Json::Array(l.iter().map(to_json).collect()),
        PValue::Message(m) => message_json(m),
        other => panic!("unexpected proto value {other:?}"),
    }
}

pub fn message_json(m: &DynamicMessage) -> Json {
    let mut obj = Map::new();
    for fd in m.descriptor().fields() {
        if m.has_field(&fd) {
            obj.insert(fd.name().to_owned(), to_json(&m.get_field(&fd)));
        }
    }
    Json::Object(obj)
}

/// The bytes a hex string spells, as the oracles write payloads.
pub fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
