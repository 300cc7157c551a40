//! Schemas of a few KB whose named types expand exponentially: each compiler refuses them with
//! its budget's error, quickly and within a memory ceiling. Peak memory is measured by a
//! counting allocator that also refuses to allocate past a hard ceiling, so a compiler without a
//! budget aborts this binary instead of taking the machine's memory.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};
use kbq_transcode::json::{JsonSchema, table_schema_from_json};
use kbq_transcode::protobuf::{MessagePath, ProtoSchema, table_schema_from_protobuf};
use kbq_transcode::{
    AvroSchema, DeriveError, DeriveOptions, Plan, PlanError, PlanOptions, table_schema_from_avro,
};

/// Allocation beyond this fails (and aborts the process): the probes reached 4 GiB unbounded.
const HARD_CEILING: usize = 1 << 30;
/// What a refused compilation may have allocated at its peak, above what was live before it.
const PEAK_CEILING: usize = 256 << 20;
const TIME_CEILING: Duration = Duration::from_secs(20);

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        if live > HARD_CEILING {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        PEAK.fetch_max(live, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One probe at a time, so that the peak is the probe's own.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `f`, asserting it finishes within the time ceiling and allocates at most the peak
/// ceiling above what was live when it started.
fn bounded<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    let peak = PEAK.load(Ordering::Relaxed) - before;
    eprintln!("{what}: {took:?}, peak {} KiB", peak >> 10);
    assert!(took < TIME_CEILING, "{what} took {took:?}");
    assert!(peak < PEAK_CEILING, "{what} allocated {} MiB", peak >> 20);
    out
}

/// `levels` record types, each with 4 fields of the next one (4^16 leaves in 3 KB of text at
/// 16 levels), the last with a `leaf` field of `leaf_type`; the row has `id` and a field `bomb`
/// of the first.
fn avro_bomb(leaf_type: &str, levels: usize) -> AvroSchema {
    let mut ty = format!(
        r#"{{"type":"record","name":"T{levels}","fields":[{{"name":"leaf","type":{leaf_type}}}]}}"#
    );
    for level in (1..levels).rev() {
        let next = format!("T{}", level + 1);
        ty = format!(
            r#"{{"type":"record","name":"T{level}","fields":[{{"name":"a","type":{ty}}},{{"name":"b","type":"{next}"}},{{"name":"c","type":"{next}"}},{{"name":"d","type":"{next}"}}]}}"#
        );
    }
    let text = format!(
        r#"{{"type":"record","name":"Row","fields":[{{"name":"id","type":"long"}},{{"name":"bomb","type":{ty}}}]}}"#
    );
    assert!(text.len() < 4096, "{} bytes", text.len());
    AvroSchema::parse(&text).expect("a valid schema")
}

fn table(columns: &[(&str, FieldType)]) -> TableSchema {
    TableSchema {
        fields: columns
            .iter()
            .map(|(n, t)| TableFieldSchema::new(*n, t.clone(), Mode::Nullable))
            .collect(),
    }
}

fn too_complex(e: PlanError) {
    assert!(matches!(e, PlanError::TooComplex(_)), "{e}");
    assert_eq!(e.class(), "schema_too_complex");
    assert!(e.to_string().contains("schema too complex"), "{e}");
}

#[test]
fn an_avro_type_reused_by_name_is_refused_when_skipped() {
    let schema = avro_bomb(r#""string""#, 16);
    let table = table(&[("id", FieldType::Int64)]);
    let err = bounded("avro skip", || {
        Plan::compile(&schema, &table, &PlanOptions::default()).unwrap_err()
    });
    too_complex(err);
}

#[test]
fn an_avro_type_reused_by_name_is_refused_when_written_as_json() {
    let schema = avro_bomb(r#"{"type":"enum","name":"E","symbols":["A","B","C"]}"#, 16);
    let table = table(&[("id", FieldType::Int64), ("bomb", FieldType::Json)]);
    let err = bounded("avro json", || {
        Plan::compile(&schema, &table, &PlanOptions::default()).unwrap_err()
    });
    too_complex(err);
}

#[test]
fn an_avro_type_reused_by_name_is_refused_when_deriving_a_table() {
    // 12 levels: within BigQuery's 15 levels of nesting, which would stop a deeper one first.
    let schema = avro_bomb(r#""long""#, 12);
    let err = bounded("avro derive", || {
        table_schema_from_avro(&schema, &DeriveOptions::default()).unwrap_err()
    });
    assert!(matches!(err, DeriveError::TooComplex(_)), "{err}");
}

#[test]
fn an_avro_schema_of_ten_thousand_fields_still_compiles() {
    let fields: Vec<String> = (0..10_000)
        .map(|i| format!(r#"{{"name":"f{i}","type":["null","long"]}}"#))
        .collect();
    let text = format!(
        r#"{{"type":"record","name":"Row","fields":[{}]}}"#,
        fields.join(",")
    );
    let schema = AvroSchema::parse(&text).expect("a valid schema");
    let columns: Vec<(String, FieldType)> = (0..10_000)
        .map(|i| (format!("f{i}"), FieldType::Int64))
        .collect();
    let refs: Vec<(&str, FieldType)> = columns
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect();
    let table = table(&refs);
    bounded("avro wide", || {
        Plan::compile(&schema, &table, &PlanOptions::default()).expect("compiles")
    });
    bounded("avro wide derive", || {
        table_schema_from_avro(&schema, &DeriveOptions::default()).expect("derives")
    });
}

/// 40 levels of `allOf` of two references to the level below (3.4 KB of text).
fn json_bomb_definitions() -> String {
    let mut defs =
        vec![r#""L0":{"type":"object","properties":{"x":{"type":"string"}}}"#.to_string()];
    for level in 1..=40 {
        let below = level - 1;
        defs.push(format!(
            r##""L{level}":{{"allOf":[{{"$ref":"#/definitions/L{below}"}},{{"$ref":"#/definitions/L{below}"}}]}}"##
        ));
    }
    defs.join(",")
}

#[test]
fn json_schema_references_doubled_at_each_level_are_refused() {
    let text = format!(
        r##"{{"definitions":{{{}}},"allOf":[{{"$ref":"#/definitions/L40"}}]}}"##,
        json_bomb_definitions()
    );
    assert!(text.len() < 4096, "{} bytes", text.len());
    let schema = std::sync::Arc::new(JsonSchema::parse(&text, &[]).expect("json"));
    let table = table(&[("x", FieldType::String)]);
    let err = bounded("json compile", || {
        Plan::compile_json(Some(&schema), false, &table, &PlanOptions::default()).unwrap_err()
    });
    too_complex(err);
    let err = bounded("json derive", || {
        table_schema_from_json(&schema, &DeriveOptions::default()).unwrap_err()
    });
    assert!(matches!(err, DeriveError::TooComplex(_)), "{err}");
}

#[test]
fn a_record_validated_against_doubled_references_is_a_dead_letter_not_a_hang() {
    // The plan reads only `a`; validation walks `b` through the references.
    let text = format!(
        r##"{{"definitions":{{{}}},"type":"object","properties":{{"a":{{"type":"string"}},"b":{{"$ref":"#/definitions/L40"}}}}}}"##,
        json_bomb_definitions()
    );
    let schema = std::sync::Arc::new(JsonSchema::parse(&text, &[]).expect("json"));
    let table = table(&[("a", FieldType::String)]);
    let plan = Plan::compile_json(Some(&schema), true, &table, &PlanOptions::default())
        .expect("the columns' shapes are small");
    let err = bounded("json validate", || {
        plan.transcode(br#"{"a":"x","b":{"x":"y"}}"#, None, &mut Vec::new())
            .unwrap_err()
    });
    assert_eq!(err.class(), "schema_too_complex", "{err}");
}

#[test]
fn a_protobuf_message_reused_by_many_fields_is_refused_when_deriving_a_table() {
    // `Row` first: a record's message path [0] names the file's first message.
    let mut text = String::from(
        "syntax = \"proto3\";\nmessage Row { int64 id = 1; M1 bomb = 2; }\nmessage M12 { string leaf = 1; }\n",
    );
    // 12 levels (4^12 columns): within BigQuery's 15 levels of nesting.
    for level in (1..12).rev() {
        let next = level + 1;
        text.push_str(&format!(
            "message M{level} {{ M{next} a = 1; M{next} b = 2; M{next} c = 3; M{next} d = 4; }}\n"
        ));
    }
    let schema = ProtoSchema::compile(&text, &[]).expect("a valid schema");
    let message = schema.message(&MessagePath::FIRST).expect("Row");
    assert_eq!(message.name(), "Row");
    let err = bounded("protobuf derive", || {
        table_schema_from_protobuf(&message, &DeriveOptions::default()).unwrap_err()
    });
    assert!(matches!(err, DeriveError::TooComplex(_)), "{err}");
}

#[test]
fn a_protobuf_parse_error_does_not_call_itself_avro() {
    let err = ProtoSchema::compile("message {", &[]).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("invalid protobuf schema"), "{text}");
    assert!(!text.contains("avro"), "{text}");
}
