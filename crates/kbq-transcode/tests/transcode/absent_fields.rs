//! A transform of a field only another version of the writer's subject has (docs/mapping.md,
//! "Transforms", "A field a later version adds"): v1 has only `id`; the route's transforms name
//! the fields v2 adds. v1's plan, compiled with the list [`transforms::without_absent`] gives,
//! writes NULL where they would write (a valued mask its value), in each registry format; a
//! REQUIRED column left empty refuses the plan naming the transform and the column.

use std::sync::Arc;

use kbq_core::table_schema::TableSchema;
use kbq_transcode::json::{JsonSchema, table_schema_from_json};
use kbq_transcode::protobuf::{ProtoSchema, table_schema_from_protobuf};
use kbq_transcode::transforms::{self, Transform};
use kbq_transcode::{
    AvroSchema, DeriveOptions, Plan, PlanError, PlanOptions, UnknownFields, table_schema_from_avro,
};
use serde_json::{Value as Json, json};

use crate::transforms::run;

/// The route's transforms, each on a field v1 lacks.
fn list() -> Vec<Transform> {
    serde_json::from_value(json!([
        {"cast": {"field": "qty", "to": "INT64"}},
        {"rename": {"field": "note", "to": "memo"}},
        {"mask": {"field": "card", "value": "****"}},
        {"mask": {"field": "ssn"}},
        {"flatten": {"field": "address", "separator": "_"}},
        {"drop": {"field": "internal"}},
        {"convert": {"field": "placed_ms", "from": "epoch_millis", "to": "TIMESTAMP"}}
    ]))
    .unwrap()
}

/// The table v2 derives under the transforms; `memo` in the mode the test asks.
fn table(memo: &str) -> TableSchema {
    serde_json::from_value(json!({"fields": [
        {"name": "id", "type": "INT64", "mode": "REQUIRED"},
        {"name": "qty", "type": "INT64"},
        {"name": "memo", "type": "STRING", "mode": memo},
        {"name": "card", "type": "STRING"},
        {"name": "ssn", "type": "STRING"},
        {"name": "address_street", "type": "STRING"},
        {"name": "placed_ms", "type": "TIMESTAMP"}]}))
    .unwrap()
}

/// v1 in each registry format, with the body of its record `{"id": 7}`.
enum V1 {
    Avro(AvroSchema),
    Protobuf(prost_reflect::MessageDescriptor),
    Json(Arc<JsonSchema>),
}

impl V1 {
    fn derive(&self, transforms: &[Transform]) -> TableSchema {
        let options = DeriveOptions {
            transforms: transforms.to_vec(),
            ..DeriveOptions::default()
        };
        match self {
            V1::Avro(s) => table_schema_from_avro(s, &options),
            V1::Protobuf(m) => table_schema_from_protobuf(m, &options),
            V1::Json(s) => table_schema_from_json(s, &options),
        }
        .unwrap()
    }

    fn compile(&self, table: &TableSchema, transforms: &[Transform]) -> Result<Plan, PlanError> {
        let options = PlanOptions {
            unknown_fields: UnknownFields::Error,
            transforms: transforms.to_vec(),
            ..PlanOptions::default()
        };
        match self {
            V1::Avro(s) => Plan::compile(s, table, &options),
            V1::Protobuf(m) => Plan::compile_protobuf(m, table, &options),
            V1::Json(s) => Plan::compile_json(Some(s), false, table, &options),
        }
    }
}

fn v1() -> Vec<(&'static str, V1, Vec<u8>)> {
    let avro = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}"#;
    let proto = "syntax = \"proto3\"; package t; message Order { int64 id = 1; }";
    let proto = ProtoSchema::compile(proto, &[]).unwrap();
    let json = json!({"type": "object", "properties": {"id": {"type": "integer"}}}).to_string();
    vec![
        ("avro", V1::Avro(AvroSchema::parse(avro).unwrap()), vec![14]),
        (
            "protobuf",
            V1::Protobuf(proto.pool().get_message_by_name("t.Order").unwrap()),
            vec![0x08, 7],
        ),
        (
            "json schema",
            V1::Json(Arc::new(JsonSchema::parse(&json, &[]).unwrap())),
            br#"{"id":7}"#.to_vec(),
        ),
    ]
}

#[test]
fn a_transform_of_a_field_the_writer_lacks_writes_null_in_every_registry_format() {
    let table = table("NULLABLE");
    let every = list();
    for (format, v1, body) in v1() {
        // The whole list: each transform meets no field, and the plan is refused.
        let e = v1
            .compile(&table, &every)
            .map(drop)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cast qty to INT64") && e.contains("no field qty"),
            "{format}: {e}"
        );
        let derived = v1.derive(&[]);
        let absent = transforms::absent_fields(&every, &derived);
        assert_eq!(
            absent,
            [
                "qty",
                "note",
                "card",
                "ssn",
                "address",
                "internal",
                "placed_ms"
            ],
            "{format}"
        );
        transforms::check_absent(&every, &absent, &table, &derived).unwrap();
        let own = transforms::without_absent(&every, &absent);
        // v1's table under its own list: the masked column, as v2's (create_table, schema_update).
        let names: Vec<String> = v1.derive(&own).fields.into_iter().map(|f| f.name).collect();
        assert_eq!(names, ["id", "card"], "{format}");
        let plan = v1
            .compile(&table, &own)
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        let row: Json = run(&plan, &body, &[]).unwrap_or_else(|e| panic!("{format}: {e}"));
        // A valued mask fills every row; the other columns get nothing from v1.
        assert_eq!(row, json!({"id": 7, "card": "****"}), "{format}");
    }
}

#[test]
fn a_required_column_a_writer_would_leave_empty_refuses_naming_the_transform_and_the_column() {
    let table = table("REQUIRED");
    let every = list();
    for (format, v1, _) in v1() {
        let derived = v1.derive(&[]);
        let absent = transforms::absent_fields(&every, &derived);
        let e = transforms::check_absent(&every, &absent, &table, &derived)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rename note to memo")
                && e.contains("column memo")
                && e.contains("REQUIRED"),
            "{format}: {e}"
        );
    }
}

#[test]
fn a_path_through_a_field_that_is_not_a_record_is_not_absent() {
    let derived: TableSchema = serde_json::from_value(json!({"fields": [
        {"name": "customer", "type": "JSON"},
        {"name": "address", "type": "RECORD", "fields": [{"name": "street", "type": "STRING"}]}]}))
    .unwrap();
    let list: Vec<Transform> = serde_json::from_value(json!([
        {"mask": {"field": "customer.email"}},
        {"drop": {"field": "address.city"}},
        {"drop": {"field": "Address.Street"}}
    ]))
    .unwrap();
    // customer is there, written whole: the compiler refuses a mask inside it, whatever other
    // versions say. address.city is absent; address.street is a field (names match in any case).
    assert_eq!(transforms::absent_fields(&list, &derived), ["address.city"]);
    assert!(transforms::has_field(&derived, "ADDRESS.street"));
    assert!(!transforms::has_field(&derived, "customer.email"));
}
