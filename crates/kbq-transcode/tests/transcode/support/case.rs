//! The transcoder's fuzz case: one Avro schema that exercises every plan op, its table, the
//! options, and the check every input must pass. Two fuzzers run it: the coverage-guided target
//! (`fuzz/fuzz_targets/transcode.rs`, cargo-fuzz on nightly, `scripts/test.d/fuzz.sh`) and the
//! bounded mutation fuzzer on stable (`fuzz.rs` beside this folder, in `cargo test`), so what the
//! test checks is what libFuzzer explores.
//!
//! The fuzz target includes this file with `#[path]` rather than import it from `kbq-transcode`
//! behind a feature: it is test data and a test oracle, not part of the transcoder's API; a feature would
//! put it in the product's crate and its feature set (cargo unifies features across a build)
//! for the sake of two test binaries; and the fuzz crate is a workspace of its own that shares
//! no dev-dependency with the package. The file needs only what both already depend on:
//! `kbq-transcode` and `kbq-core`.

use std::ops::Range;

use kbq_core::table_schema::TableSchema;
use kbq_transcode::{AvroSchema, KafkaHeader, KafkaMetadata, MetadataColumns, Plan, PlanOptions};

/// Nullable and required fields, every logical type the plan converts, enums, a JSON string,
/// arrays, maps into repeated records and into JSON (with a union of null, double and an enum in
/// the JSON value), nested and repeated records, and a record the table ignores.
pub const SCHEMA: &str = r#"{"type":"record","name":"r","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":["null","string"]},
  {"name":"flag","type":"boolean"},
  {"name":"ratio","type":["double","null"]},
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
  {"name":"name","type":"STRING"},
  {"name":"flag","type":"BOOL"},
  {"name":"ratio","type":"FLOAT64"},
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
  {"name":"_topic","type":"STRING"},{"name":"_key","type":"STRING"},
  {"name":"_headers","type":"RECORD","mode":"REPEATED","fields":[{"name":"key","type":"STRING"},{"name":"value","type":"STRING"}]}
]}"#;

/// The table the records are written to: the schema's columns and three metadata columns.
pub fn table() -> TableSchema {
    serde_json::from_str(TABLE).expect("the case's table schema")
}

/// The plan of [`SCHEMA`] into [`table`], filling the topic, key and headers columns.
pub fn plan(table: &TableSchema) -> Plan {
    let options = PlanOptions {
        metadata: MetadataColumns {
            topic: Some("_topic".into()),
            key: Some("_key".into()),
            headers: Some("_headers".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let schema = AvroSchema::parse(SCHEMA).expect("the case's schema");
    Plan::compile(&schema, table, &options).expect("the case's plan")
}

/// Transcodes `input` (an Avro body; its first bytes double as the Kafka key and a header) onto
/// the end of `out`. It must not panic; the flat executor and the tree executor (the reference)
/// must give the same result and bytes; an error must leave `out` exactly as it was and say
/// something; a success must start where `out` ended. The row's range, on success.
pub fn transcode_checked(plan: &Plan, input: &[u8], out: &mut Vec<u8>) -> Option<Range<usize>> {
    let headers = [KafkaHeader {
        key: b"h",
        value: Some(&input[..input.len().min(3)]),
    }];
    let meta = KafkaMetadata {
        topic: "t",
        key: Some(&input[..input.len().min(2)]),
        headers: &headers,
        ..Default::default()
    };
    let before = out.clone();
    // The flat executor must agree with the tree executor it replaced, on every input.
    let mut reference = out.clone();
    let expected = plan.transcode_reference(input, Some(&meta), &mut reference);
    let result = plan.transcode(input, Some(&meta), out);
    assert_eq!(result, expected, "the executors disagree");
    assert!(*out == reference, "the executors' rows differ");
    match result {
        Ok(range) => {
            assert_eq!(
                range.start,
                before.len(),
                "a row starts where the batch ended"
            );
            Some(range)
        }
        Err(e) => {
            assert_eq!(*out, before, "an error leaves the buffer as it was");
            assert!(!e.to_string().is_empty());
            None
        }
    }
}

/// Parses `text` as an Avro schema and, if it parses, compiles it into `table`: neither may panic.
pub fn compile_any(text: &str, table: &TableSchema) {
    if let Ok(schema) = AvroSchema::parse(text) {
        let _ = Plan::compile(&schema, table, &PlanOptions::default());
    }
}
