//! The end-to-end benchmark's orders (`orders.rs`) in JSON, as a JSON producer writes the same
//! values: the schema's field order, the enum's symbol, timestamps and dates as RFC 3339 text,
//! decimals as numbers with their scale's digits; transcoded by the schemaless JSON plan of the
//! table `create_table` derives from the Avro schema, with the three `_kafka_*` columns.

// The example and the tests each use a part of this module.
#![allow(dead_code)]

use apache_avro::types::Value;
use chrono::DateTime;
use kbq_transcode::{AvroSchema, DeriveOptions, Plan, PlanOptions, table_schema_from_avro};

use super::orders::{Orders, metadata};

pub struct JsonOrders {
    pub plan: Plan,
    pub json: Vec<Vec<u8>>,
}

impl JsonOrders {
    pub fn new() -> JsonOrders {
        let orders = Orders::new();
        let schema_text = super::orders::SCHEMA;
        let derive = DeriveOptions {
            metadata: metadata(),
            ..Default::default()
        };
        let table =
            table_schema_from_avro(&AvroSchema::parse(schema_text).unwrap(), &derive).unwrap();
        let options = PlanOptions {
            metadata: metadata(),
            ..Default::default()
        };
        let plan = Plan::compile_json(None, false, &table, &options).unwrap();
        let schema = apache_avro::Schema::parse_str(schema_text).unwrap();
        let json = orders.avro.iter().map(|a| json_of(&schema, a)).collect();
        JsonOrders { plan, json }
    }
}

// The reader replacement needs more ceremony than a bench fixture deserves.
#[allow(deprecated)]
fn json_of(schema: &apache_avro::Schema, avro: &[u8]) -> Vec<u8> {
    let mut reader = avro;
    let value = apache_avro::from_avro_datum(schema, &mut reader, None).unwrap();
    let mut out = String::new();
    write(&value, &mut out);
    out.into_bytes()
}

fn write(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Long(i) => out.push_str(&i.to_string()),
        Value::Double(d) => out.push_str(&serde_json::to_string(d).unwrap()),
        Value::String(s) | Value::Enum(_, s) => out.push_str(&serde_json::to_string(s).unwrap()),
        Value::Uuid(u) => out.push_str(&format!("\"{u}\"")),
        Value::TimestampMicros(us) => {
            let t = DateTime::from_timestamp_micros(*us).unwrap();
            out.push_str(&format!("\"{}\"", t.format("%Y-%m-%dT%H:%M:%S%.6fZ")));
        }
        Value::Date(days) => {
            let t = DateTime::from_timestamp(*days as i64 * 86_400, 0).unwrap();
            out.push_str(&format!("\"{}\"", t.format("%Y-%m-%d")));
        }
        Value::Decimal(d) => {
            // Scale 2, as both of the schema's decimals are.
            let bytes = Vec::<u8>::try_from(d).unwrap();
            let sign = if bytes[0] & 0x80 != 0 { -1i64 } else { 0 };
            let cents = bytes.iter().fold(sign, |v, b| (v << 8) | *b as i64);
            let minus = if cents < 0 { "-" } else { "" };
            let c = cents.unsigned_abs();
            out.push_str(&format!("{minus}{}.{:02}", c / 100, c % 100));
        }
        Value::Union(_, inner) => write(inner, out),
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(x, out);
            }
            out.push(']');
        }
        Value::Record(fields) => {
            out.push('{');
            for (i, (k, x)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push(':');
                write(x, out);
            }
            out.push('}');
        }
        other => panic!("not in the orders' schema: {other:?}"),
    }
}
