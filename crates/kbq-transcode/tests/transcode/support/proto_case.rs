//! The Protobuf fuzz case: one message that exercises every op of a Protobuf plan (each scalar
//! type and its conversions, enums as names and numbers, packed and unpacked repeated fields,
//! nested and repeated messages, maps, a oneof, every well-known type the plan reads as a
//! value, a field number past the dense lookup, a REQUIRED column) and its table. The
//! coverage-guided target `fuzz/fuzz_targets/transcode_protobuf.rs` runs it with `case.rs`'s
//! check (the executor against the reference, the batch left as it was on an error); it
//! includes this file by path for the reasons `case.rs` gives.

use kbq_core::table_schema::TableSchema;
use kbq_transcode::protobuf::{MessagePath, ProtoSchema};
use kbq_transcode::{MetadataColumns, Plan, PlanOptions};

pub const SCHEMA: &str = r#"
syntax = "proto3";
package p;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/duration.proto";
import "google/type/date.proto";
import "google/type/timeofday.proto";
import "google/type/decimal.proto";
import "confluent/type/decimal.proto";
enum Color { RED = 0; GREEN = 1; BLUE = 5; FAR = 1000; }
message Inner { string s = 1; sint64 n = 2; repeated double ds = 3; Color c = 4; }
message Rec {
  int32 i32 = 1; int64 i64 = 2; uint32 u32 = 3; uint64 u64 = 4; sint32 s32 = 5; sint64 s64 = 6;
  fixed32 f32 = 7; fixed64 f64 = 8; sfixed32 sf32 = 9; sfixed64 sf64 = 10; float fl = 11;
  double db = 12; bool b = 13; string s = 14; bytes by = 15; Color c = 16;
  optional int64 opt = 17;
  repeated int32 ri = 18; repeated string rs = 19; repeated Color rc = 20;
  Inner inner = 21; repeated Inner inners = 22;
  map<string, Inner> mi = 23; map<int32, string> ms = 24;
  oneof choice { string cs = 25; int64 ci = 26; }
  google.protobuf.Timestamp ts = 27; google.protobuf.DoubleValue wd = 28;
  google.protobuf.Duration dur = 29; google.type.Decimal dec = 30;
  google.type.Date day = 31; google.type.TimeOfDay tod = 32;
  confluent.type.Decimal cd = 33; repeated confluent.type.Decimal cds = 34;
  confluent.type.Decimal bcd = 35; Color cn = 36; string js = 37; uint64 un = 38;
  Inner req = 39; google.protobuf.Timestamp dt = 40;
  int64 big_tag = 100000;
}
"#;

const TABLE: &str = r#"{"fields":[
  {"name":"i32","type":"INTEGER"},{"name":"i64","type":"INTEGER"},{"name":"u32","type":"INTEGER"},
  {"name":"u64","type":"NUMERIC"},{"name":"s32","type":"INTEGER"},{"name":"s64","type":"INTEGER"},
  {"name":"f32","type":"INTEGER"},{"name":"f64","type":"BIGNUMERIC"},{"name":"sf32","type":"INTEGER"},
  {"name":"sf64","type":"INTEGER"},{"name":"fl","type":"FLOAT"},{"name":"db","type":"FLOAT"},
  {"name":"b","type":"BOOLEAN"},{"name":"s","type":"STRING"},{"name":"by","type":"BYTES"},
  {"name":"c","type":"STRING"},{"name":"opt","type":"INTEGER"},
  {"name":"ri","type":"INTEGER","mode":"REPEATED"},{"name":"rs","type":"STRING","mode":"REPEATED"},
  {"name":"rc","type":"STRING","mode":"REPEATED"},
  {"name":"inner","type":"RECORD","fields":[{"name":"s","type":"STRING"},
    {"name":"n","type":"INTEGER"},{"name":"ds","type":"FLOAT","mode":"REPEATED"},
    {"name":"c","type":"STRING"}]},
  {"name":"inners","type":"RECORD","mode":"REPEATED","fields":[{"name":"s","type":"STRING"},
    {"name":"n","type":"INTEGER"},{"name":"ds","type":"FLOAT","mode":"REPEATED"}]},
  {"name":"mi","type":"RECORD","mode":"REPEATED","fields":[{"name":"key","type":"STRING"},
    {"name":"value","type":"RECORD","fields":[{"name":"s","type":"STRING"}]}]},
  {"name":"ms","type":"RECORD","mode":"REPEATED","fields":[{"name":"key","type":"INTEGER"},
    {"name":"value","type":"STRING"}]},
  {"name":"cs","type":"STRING"},{"name":"ci","type":"INTEGER"},
  {"name":"ts","type":"TIMESTAMP"},{"name":"wd","type":"FLOAT"},{"name":"dur","type":"INTEGER"},
  {"name":"dec","type":"NUMERIC"},{"name":"day","type":"DATE"},{"name":"tod","type":"TIME"},
  {"name":"cd","type":"NUMERIC"},{"name":"cds","type":"BIGNUMERIC","mode":"REPEATED"},
  {"name":"bcd","type":"BIGNUMERIC"},{"name":"cn","type":"INTEGER"},{"name":"js","type":"JSON"},
  {"name":"un","type":"INTEGER"},
  {"name":"req","type":"RECORD","mode":"REQUIRED","fields":[{"name":"n","type":"INTEGER"}]},
  {"name":"dt","type":"DATETIME"},{"name":"big_tag","type":"INTEGER"},
  {"name":"_topic","type":"STRING"},{"name":"_key","type":"BYTES"},
  {"name":"_headers","type":"RECORD","mode":"REPEATED","fields":[
    {"name":"key","type":"STRING"},{"name":"value","type":"BYTES"}]}
]}"#;

pub fn table() -> TableSchema {
    serde_json::from_str(TABLE).expect("the protobuf case's table schema")
}

/// The plan of `p.Rec` into [`table`], filling the topic, key and headers columns.
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
    let schema = ProtoSchema::compile(SCHEMA, &[]).expect("the protobuf case's schema");
    let message = schema
        .message(&MessagePath::new(&[1]).expect("a message path"))
        .expect("p.Rec");
    Plan::compile_protobuf(&message, table, &options).expect("the protobuf case's plan")
}
