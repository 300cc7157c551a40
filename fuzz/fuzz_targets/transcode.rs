//! Fuzz target: arbitrary bytes as the Avro body of records of a schema that exercises every plan
//! op, plus arbitrary schema texts for the parser and compiler. No input may panic, and an error
//! must leave the batch buffer exactly as it was.
#![no_main]
#![allow(dead_code, unused_imports)]

use libfuzzer_sys::fuzz_target;

use std::sync::OnceLock;

use kbq_core::table_schema::TableSchema;
use kbq_transcode::{AvroSchema, KafkaHeader, KafkaMetadata, MetadataColumns, Plan, PlanOptions};

const SCHEMA: &str = r#"{"type":"record","name":"r","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":["null","string"]},
  {"name":"flag","type":"boolean"},
  {"name":"f","type":"float"},
  {"name":"ts","type":{"type":"long","logicalType":"timestamp-nanos"}},
  {"name":"dt","type":{"type":"long","logicalType":"local-timestamp-millis"}},
  {"name":"day","type":{"type":"int","logicalType":"date"}},
  {"name":"tod","type":{"type":"int","logicalType":"time-millis"}},
  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":20,"scale":4}},
  {"name":"big","type":{"type":"fixed","name":"B","size":20,"logicalType":"decimal","precision":40,"scale":2}},
  {"name":"uid","type":{"type":"fixed","name":"U","size":16,"logicalType":"uuid"}},
  {"name":"color","type":{"type":"enum","name":"C","symbols":["R","G","B"]}},
  {"name":"doc","type":{"type":"string","sqlType":"JSON"}},
  {"name":"tags","type":{"type":"array","items":"string"}},
  {"name":"attrs","type":{"type":"map","values":["null","long"]}},
  {"name":"blob","type":{"type":"map","values":{"type":"array","items":["null","double","C"]}}},
  {"name":"nested","type":{"type":"record","name":"n","fields":[
     {"name":"x","type":"int"},
     {"name":"items","type":["null",{"type":"array","items":{"type":"record","name":"i","fields":[{"name":"k","type":"string"}]}}]}]}},
  {"name":"ignored","type":{"type":"record","name":"g","fields":[
     {"name":"a","type":{"type":"array","items":["null","bytes"]}},
     {"name":"m","type":{"type":"map","values":"C"}}]}}
]}"#;

const TABLE: &str = r#"{"fields":[
  {"name":"id","type":"INT64","mode":"REQUIRED"},
  {"name":"name","type":"STRING","mode":"REQUIRED"},
  {"name":"flag","type":"BOOL"},
  {"name":"f","type":"FLOAT64"},
  {"name":"ts","type":"TIMESTAMP"},
  {"name":"dt","type":"DATETIME"},
  {"name":"day","type":"DATE"},
  {"name":"tod","type":"TIME"},
  {"name":"amount","type":"NUMERIC"},
  {"name":"big","type":"BIGNUMERIC"},
  {"name":"uid","type":"STRING"},
  {"name":"color","type":"STRING"},
  {"name":"doc","type":"JSON"},
  {"name":"tags","type":"STRING","mode":"REPEATED"},
  {"name":"attrs","type":"RECORD","mode":"REPEATED","fields":[{"name":"key","type":"STRING"},{"name":"value","type":"INT64"}]},
  {"name":"blob","type":"JSON"},
  {"name":"nested","type":"RECORD","fields":[{"name":"x","type":"INT64"},
     {"name":"items","type":"RECORD","mode":"REPEATED","fields":[{"name":"k","type":"STRING"}]}]},
  {"name":"_key","type":"STRING"},
  {"name":"_headers","type":"RECORD","mode":"REPEATED","fields":[{"name":"key","type":"STRING"},{"name":"value","type":"STRING"}]}
]}"#;

fn table() -> &'static TableSchema {
    static TABLE_SCHEMA: OnceLock<TableSchema> = OnceLock::new();
    TABLE_SCHEMA.get_or_init(|| serde_json::from_str(TABLE).expect("table schema"))
}

fn plan() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| {
        let options = PlanOptions {
            metadata: MetadataColumns {
                key: Some("_key".into()),
                headers: Some("_headers".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Plan::compile(
            &AvroSchema::parse(SCHEMA).expect("schema"),
            table(),
            &options,
        )
        .expect("plan")
    })
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the mode: most inputs are record bodies, some are schema texts.
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode < 16 {
        if let Ok(text) = std::str::from_utf8(rest)
            && let Ok(schema) = AvroSchema::parse(text)
        {
            let _ = Plan::compile(&schema, table(), &PlanOptions::default());
        }
        return;
    }
    let headers = [KafkaHeader {
        key: "h",
        value: Some(&rest[..rest.len().min(3)]),
    }];
    let meta = KafkaMetadata {
        key: Some(&rest[..rest.len().min(2)]),
        headers: &headers,
        ..Default::default()
    };
    let mut out = vec![mode];
    match plan().transcode(rest, Some(&meta), &mut out) {
        Ok(range) => assert_eq!(range.start, 1),
        Err(e) => {
            assert_eq!(out, [mode], "an error must leave the buffer as it was");
            assert!(!e.to_string().is_empty());
        }
    }
});
