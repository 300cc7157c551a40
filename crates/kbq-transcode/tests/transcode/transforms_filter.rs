//! `filter` on a field's value (docs/mapping.md, "Transforms"): the plan drops a record whose
//! field holds one of the literals (or is null), in every input format, compared as the field's
//! type; a literal the type cannot hold, or a field the writer schema lacks, refuses the plan
//! naming the field; a field that cannot be read is the record's error. A record the filter
//! keeps is transcoded as before (Avro through the flat and the tree executor).

use kbq_transcode::protobuf::ProtoSchema;
use kbq_transcode::transforms::{self, Transform};
use kbq_transcode::{
    AvroSchema, KafkaMetadata, Plan, PlanError, PlanOptions, RecordError, Transcoded, UnknownFields,
};
use prost_reflect::{DynamicMessage, Value as PValue};
use serde_json::{Value as Json, json};

use crate::support::differential::Both;
use crate::transforms::{AVRO, PROTO, RECORD, formats_with, list, run};

/// What the plan makes of `body`: `None` when a filter drops it, else its row, which both
/// executors agree on.
fn outcome(plan: &Plan, body: &[u8]) -> Result<Option<Json>, RecordError> {
    let mut out = Vec::new();
    match plan.transcode_row(body, Some(&KafkaMetadata::default()), &mut out)? {
        Transcoded::Filtered => {
            assert!(out.is_empty(), "a filtered record appends nothing");
            Ok(None)
        }
        Transcoded::Row(range) => {
            let mut again = Vec::new();
            let both = plan.transcode_both(body, None, &mut again).unwrap();
            assert_eq!(
                out[range], again[both],
                "transcode_row writes the row transcode does"
            );
            run(plan, body, &[]).map(Some)
        }
    }
}

/// The fixture's record with `note` null (absent in Protobuf) and `email` empty (absent in
/// Protobuf: a proto3 field without presence reads as its default).
fn bodies_without_note() -> Vec<Vec<u8>> {
    use apache_avro::types::Value as A;
    let schema = apache_avro::Schema::parse_str(AVRO).unwrap();
    let s = |x: &str| A::String(x.into());
    let avro = apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
        .build()
        .unwrap()
        .write_value_to_vec(A::Record(vec![
            ("id".into(), A::Long(7)),
            ("email".into(), s("")),
            ("note".into(), A::Union(0, Box::new(A::Null))),
            ("ssn".into(), s("123")),
            ("card".into(), s("4111")),
            (
                "customer".into(),
                A::Record(vec![("name".into(), s("Ann")), ("secret".into(), s("s"))]),
            ),
        ]))
        .unwrap();
    let proto = ProtoSchema::compile(PROTO, &[]).unwrap();
    let mut c = DynamicMessage::new(proto.pool().get_message_by_name("t.Customer").unwrap());
    c.set_field_by_name("name", PValue::String("Ann".into()));
    let mut m = DynamicMessage::new(proto.pool().get_message_by_name("t.Order").unwrap());
    m.set_field_by_name("id", PValue::I64(7));
    m.set_field_by_name("customer", PValue::Message(c));
    let json = br#"{"id":7,"email":"","note":null,"ssn":"123","card":"4111","customer":{"name":"Ann","secret":"s"}}"#;
    vec![
        avro,
        prost::Message::encode_to_vec(&m),
        json.to_vec(),
        json.to_vec(),
    ]
}

#[test]
fn a_filter_on_a_fields_value_drops_the_records_whose_field_matches_in_every_format() {
    // (filter, dropped: the fixture's record, the record without note and email)
    let cases = [
        (json!({"field": "email", "equals": "a@x"}), true, false),
        (json!({"field": "email", "equals": "b@x"}), false, false),
        (json!({"field": "EMAIL", "in": ["b@x", "a@x"]}), true, false),
        (json!({"field": "email", "equals": ""}), false, true),
        (json!({"field": "id", "equals": 7}), true, true),
        (json!({"field": "id", "in": [1, 2]}), false, false),
        (
            json!({"field": "customer.name", "equals": "Ann"}),
            true,
            true,
        ),
        (json!({"field": "note", "is_null": true}), false, true),
        (json!({"field": "note", "is_null": false}), true, false),
        (json!({"field": "note", "equals": "n"}), true, false),
        // `negate`: only the records whose note is "n" are kept; a null note is not "n".
        (
            json!({"field": "note", "equals": "n", "negate": true}),
            false,
            true,
        ),
    ];
    let without_note = bodies_without_note();
    for (filter, drops_record, drops_without_note) in cases {
        let t = list(json!([{ "filter": filter }]));
        transforms::check(&t).unwrap();
        for ((format, plan, body), other) in formats_with(&t, UnknownFields::Ignore)
            .into_iter()
            .zip(&without_note)
        {
            let plan = plan.unwrap_or_else(|e| panic!("{format} {filter}: {e}"));
            assert!(plan.filters_fields());
            for (body, drops) in [(&body, drops_record), (other, drops_without_note)] {
                let got = outcome(&plan, body).unwrap_or_else(|e| panic!("{format}: {e}"));
                assert_eq!(got.is_none(), drops, "{format} {filter} {body:?}");
            }
        }
    }
    // A kept record's row is what the plan without the filter writes.
    let t = list(json!([{"filter": {"field": "id", "equals": 8}}]));
    for (format, plan, body) in formats_with(&t, UnknownFields::Ignore) {
        let plain = &formats_with(&[], UnknownFields::Ignore)
            .into_iter()
            .find(|(f, _, _)| *f == format)
            .unwrap()
            .1;
        let want = run(plain.as_ref().unwrap(), &body, &[]).unwrap();
        assert_eq!(
            outcome(&plan.unwrap(), &body).unwrap(),
            Some(want),
            "{format}"
        );
    }
}

#[test]
fn a_plan_without_a_field_filter_has_none_to_ask() {
    let t = list(json!([{"filter": {"tombstone": true}}, {"drop": {"field": "note"}}]));
    for (format, plan, _) in formats_with(&t, UnknownFields::Ignore) {
        assert!(!plan.unwrap().filters_fields(), "{format}");
    }
}

fn refused(t: Json) -> Vec<(&'static str, String)> {
    formats_with(&list(t), UnknownFields::Ignore)
        .into_iter()
        .map(|(format, plan, _)| match plan {
            Err(e) => {
                assert_eq!(e.class(), "incompatible_schema");
                (format, e.to_string())
            }
            Ok(_) => (format, "compiled".into()),
        })
        .collect()
}

#[test]
fn a_literal_of_another_type_or_a_field_the_schema_lacks_refuses_the_plan_naming_the_field() {
    let text_on_integer = refused(json!([{"filter": {"field": "id", "equals": "7"}}]));
    assert_eq!(
        text_on_integer,
        [
            ("avro", "transform filter id: \"7\" is text, and field id is long: a literal is compared as its own type, never converted".into()),
            ("protobuf", "transform filter id: \"7\" is text, and field id is int64: a literal is compared as its own type, never converted".into()),
            ("json schema", "transform filter id: \"7\" is text, and field id is integer: a literal is compared as its own type, never converted".into()),
            // Schemaless: the value's own token decides, record by record.
            ("schemaless json", "compiled".into()),
        ]
    );
    let missing = refused(json!([{"filter": {"field": "customer.phone", "equals": "x"}}]));
    assert_eq!(
        missing,
        [
            (
                "avro",
                "transform filter customer.phone: the writer schema has no field customer.phone"
                    .into()
            ),
            (
                "protobuf",
                "transform filter customer.phone: the writer message has no field customer.phone"
                    .into()
            ),
            (
                "json schema",
                "transform filter customer.phone: the JSON Schema has no property customer.phone"
                    .into()
            ),
            ("schemaless json", "compiled".into()),
        ]
    );
    let through_a_string = refused(json!([{"filter": {"field": "email.x", "is_null": true}}]));
    assert_eq!(
        through_a_string[0].1,
        "transform filter email.x: field email is not a record: email.x names nothing inside it"
    );
    // Proto3 `email` has no presence: absent, it reads as "", never null.
    assert_eq!(
        refused(json!([{"filter": {"field": "email", "is_null": true}}]))[1].1,
        "transform filter email: field email is never null (it is not an Avro union with null, nor a Protobuf field with presence, which reads as its default when absent): is_null would never hold"
    );
    // A fraction compared to a JSON number's decimal text would be a guess.
    assert_eq!(
        refused(json!([{"filter": {"field": "id", "equals": 7.5}}]))[3].1,
        "transform filter id: 7.5 is a number with a fraction, and field id is of any JSON type: its decimal text and the float would be compared by a guess; compare a float or double field, or an integer"
    );
}

#[test]
fn a_number_the_fields_type_cannot_hold_refuses_the_plan() {
    let table = serde_json::from_value(json!({"fields": [{"name": "n", "type": "INT64"},
        {"name": "f", "type": "FLOAT64"}]}))
    .unwrap();
    let avro = AvroSchema::parse(
        r#"{"type":"record","name":"R","fields":[{"name":"n","type":"int"},{"name":"f","type":"float"},{"name":"b","type":"bytes"}]}"#,
    )
    .unwrap();
    let proto = ProtoSchema::compile(
        "syntax = \"proto3\"; package p; message R { uint32 n = 1; float f = 2; bytes b = 3; }",
        &[],
    )
    .unwrap();
    let message = proto.pool().get_message_by_name("p.R").unwrap();
    let compile = |filter: Json| -> [Result<Plan, PlanError>; 2] {
        let options = PlanOptions {
            transforms: list(json!([{ "filter": filter }])),
            ..PlanOptions::default()
        };
        [
            Plan::compile(&avro, &table, &options),
            Plan::compile_protobuf(&message, &table, &options),
        ]
    };
    let errors = |filter: Json| -> Vec<String> {
        compile(filter)
            .into_iter()
            .map(|p| {
                p.map(|_| "compiled".to_string())
                    .unwrap_or_else(|e| e.to_string())
            })
            .collect()
    };
    assert_eq!(
        errors(json!({"field": "n", "equals": 3_000_000_000i64})),
        [
            "transform filter n: 3000000000 does not fit field n, which is int",
            "compiled",
        ]
    );
    assert_eq!(
        errors(json!({"field": "n", "in": [1, -1]})),
        [
            "compiled",
            "transform filter n: -1 does not fit field n, which is uint32",
        ]
    );
    // 0.1 is no float32; 0.5 and 16777216 (2^24) are, 16777217 is not.
    assert_eq!(
        errors(json!({"field": "f", "equals": 0.1}))[0],
        "transform filter f: 0.1 does not fit field f, which is float"
    );
    assert_eq!(
        errors(json!({"field": "f", "in": [0.5, 16777216]})),
        ["compiled", "compiled"]
    );
    assert_eq!(
        errors(json!({"field": "f", "equals": 16_777_217}))[1],
        "transform filter f: 16777217 does not fit field f, which is float"
    );
    assert_eq!(
        errors(json!({"field": "b", "equals": "x"}))[0],
        "transform filter b: field b is bytes: a filter compares text, integers, floats and booleans; on bytes it takes is_null only"
    );
    assert_eq!(
        errors(json!({"field": "b", "is_null": false})),
        [
            "transform filter b: field b is never null (it is not an Avro union with null, nor a Protobuf field with presence, which reads as its default when absent): is_null would always hold",
            "transform filter b: field b is never null (it is not an Avro union with null, nor a Protobuf field with presence, which reads as its default when absent): is_null would always hold",
        ]
    );
}

#[test]
fn a_field_the_filter_cannot_read_is_the_records_error() {
    let t = list(json!([{"filter": {"field": "id", "equals": 7}}]));
    let formats = formats_with(&t, UnknownFields::Ignore);
    let plan = |i: usize| formats[i].1.as_ref().unwrap();
    // JSON Schema says integer, the record holds text.
    let e = outcome(plan(2), br#"{"id":"7"}"#).unwrap_err();
    assert_eq!(
        e.to_string(),
        "column id: the filter's field is a string, and its schema says integer"
    );
    // Schemaless: text is not the integer 7, and 7.0 is.
    assert!(outcome(plan(3), br#"{"id":"7"}"#).unwrap().is_some());
    assert_eq!(outcome(plan(3), br#"{"id":7.0}"#).unwrap(), None);
    // Avro data that ends before the field.
    assert!(matches!(
        outcome(plan(0), &[]).unwrap_err(),
        RecordError::Truncated { .. }
    ));
    // Protobuf text that is not UTF-8.
    let t = list(json!([{"filter": {"field": "email", "equals": "a"}}]));
    let proto = &formats_with(&t, UnknownFields::Ignore)[1].1;
    let not_utf8 = [0x12, 0x01, 0xff];
    assert_eq!(
        outcome(proto.as_ref().unwrap(), &not_utf8)
            .unwrap_err()
            .to_string(),
        "column email: the filter's field is not valid UTF-8"
    );
    let _ = RECORD;
}

#[test]
fn a_field_filter_is_checked_without_a_schema() {
    let refused = |v: Json| {
        let e = transforms::check(&list(v)).unwrap_err();
        (e.key, e.message)
    };
    assert_eq!(
        refused(json!([{"filter": {"field": "status"}}])),
        (
            "field",
            "needs exactly one of `equals`, `in` and `is_null`".into()
        )
    );
    assert_eq!(
        refused(json!([{"filter": {"field": "status", "equals": "x", "is_null": true}}])).0,
        "field"
    );
    assert_eq!(
        refused(json!([{"filter": {"field": "status", "equals": "x", "header": "h"}}])),
        ("field", "a field's value is read by the plan, after the conditions on tombstones, headers and topics: a filter on a field takes no other condition".into())
    );
    assert_eq!(
        refused(json!([{"filter": {"field": "status", "in": []}}])),
        ("in", "an empty list matches no record".into())
    );
    assert_eq!(
        refused(json!([{"filter": {"field": "a..b", "is_null": true}}])).0,
        "field"
    );
    assert_eq!(
        refused(json!([{"filter": {"tombstone": true, "in": ["x"]}}])),
        ("in", "only with `field`".into())
    );
    assert_eq!(
        refused(json!([{"filter": {"header": "h", "equals": 5}}])),
        (
            "equals",
            "a header's value is compared as text: write it quoted".into()
        )
    );
    let t: Vec<Transform> = list(json!([{"filter": {"field": "a", "is_null": true}}]));
    assert!(
        transforms::Filter::new(&t).is_empty(),
        "the plan asks it, not the route"
    );
}
