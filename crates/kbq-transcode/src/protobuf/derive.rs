//! Derives a BigQuery table schema from a Protobuf writer message, for `create_table` and
//! `schema_update: add_columns`: the columns the Protobuf plan compiler (`compile.rs`) maps the
//! message back onto, by field name.
//!
//! Modes: a repeated field or a map is REPEATED; a proto2 `required` field REQUIRED; every other
//! field NULLABLE — proto3 has no required fields and the registry lets a later version remove
//! any field, so a REQUIRED column would make the records of such a version unwritable.
//! Implicit-presence scalars still always write a value (their default when absent).

use prost_reflect::{Cardinality, FieldDescriptor, Kind, MapKey, MessageDescriptor, Value};

use crate::budget::Budget;
use crate::derive::{MAX_RECORD_DEPTH, decimal_column, finish};
use crate::{DeriveError, DeriveOptions};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

/// Confluent's field option carrying `connect.*` parameters and the decimal's precision/scale.
const FIELD_META: &str = "confluent.field_meta";

pub fn table_schema_from_protobuf(
    message: &MessageDescriptor,
    options: &DeriveOptions,
) -> Result<TableSchema, DeriveError> {
    let fields = columns(message, 1, &mut Budget::derive())?;
    finish(fields, options)
}

/// `budget`: the columns the table may still get (a message type is expanded at each use).
fn columns(
    message: &MessageDescriptor,
    depth: usize,
    budget: &mut Budget,
) -> Result<Vec<TableFieldSchema>, DeriveError> {
    if message.fields().len() == 0 {
        return Err(DeriveError::Unsupported {
            field: message.full_name().to_owned(),
            reason: "a message without fields has no RECORD column (BigQuery needs one field)"
                .into(),
        });
    }
    budget.nodes(message.fields().len())?;
    message
        .fields()
        .map(|fd| column(&fd, depth, budget))
        .collect()
}

fn column(
    fd: &FieldDescriptor,
    depth: usize,
    budget: &mut Budget,
) -> Result<TableFieldSchema, DeriveError> {
    let unsupported = |reason: String| DeriveError::Unsupported {
        field: fd.full_name().to_owned(),
        reason,
    };
    if fd.is_group() {
        return Err(unsupported("proto2 groups are not supported".into()));
    }
    let mode = if fd.is_list() || fd.is_map() {
        Mode::Repeated
    } else if fd.cardinality() == Cardinality::Required {
        Mode::Required
    } else {
        Mode::Nullable
    };
    let name = fd.name();
    let mut col = match fd.kind() {
        Kind::Message(m) if fd.is_map() => {
            // A map entry is a message {key, value}: the plan writes it as a REPEATED RECORD.
            record(name, &m, mode, depth, budget)?
        }
        Kind::Message(m) => match well_known(&m, fd) {
            Some(Ok(col)) => col_with_mode(col, name, mode),
            Some(Err(reason)) => return Err(unsupported(reason)),
            None => record(name, &m, mode, depth, budget)?,
        },
        Kind::Enum(_) | Kind::String => TableFieldSchema::new(name, FieldType::String, mode),
        Kind::Bytes => TableFieldSchema::new(name, FieldType::Bytes, mode),
        Kind::Bool => TableFieldSchema::new(name, FieldType::Bool, mode),
        Kind::Double | Kind::Float => TableFieldSchema::new(name, FieldType::Float64, mode),
        // uint64/fixed64 too: values above 2^63 − 1 are per-record errors (docs/mapping.md).
        Kind::Int32
        | Kind::Int64
        | Kind::Uint32
        | Kind::Uint64
        | Kind::Sint32
        | Kind::Sint64
        | Kind::Fixed32
        | Kind::Fixed64
        | Kind::Sfixed32
        | Kind::Sfixed64 => TableFieldSchema::new(name, FieldType::Int64, mode),
    };
    if col.description.is_none() {
        col.description = meta_param(fd, None);
    }
    Ok(col)
}

fn col_with_mode(mut col: TableFieldSchema, name: &str, mode: Mode) -> TableFieldSchema {
    col.name = name.to_owned();
    col.mode = Some(mode);
    col
}

fn record(
    name: &str,
    message: &MessageDescriptor,
    mode: Mode,
    depth: usize,
    budget: &mut Budget,
) -> Result<TableFieldSchema, DeriveError> {
    if depth >= MAX_RECORD_DEPTH {
        return Err(DeriveError::Unsupported {
            field: message.full_name().to_owned(),
            reason: "messages nest deeper than BigQuery's 15 levels (or are recursive)".into(),
        });
    }
    let mut col = TableFieldSchema::new(name, FieldType::Record, mode);
    col.fields = columns(message, depth + 1, budget)?;
    Ok(col)
}

/// The column of a well-known message the plan writes as a scalar (`compile.rs` `special`);
/// `Some(Err)` for the ones it cannot write at all; `None` for an ordinary message (a RECORD).
fn well_known(
    m: &MessageDescriptor,
    fd: &FieldDescriptor,
) -> Option<Result<TableFieldSchema, String>> {
    let scalar = |ty: FieldType| Some(Ok(TableFieldSchema::new("", ty, Mode::Nullable)));
    match m.full_name() {
        "google.protobuf.Timestamp" => scalar(FieldType::Timestamp),
        "google.protobuf.Duration" => scalar(FieldType::Int64),
        "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => scalar(FieldType::Float64),
        "google.protobuf.Int64Value"
        | "google.protobuf.UInt64Value"
        | "google.protobuf.Int32Value"
        | "google.protobuf.UInt32Value" => scalar(FieldType::Int64),
        "google.protobuf.BoolValue" => scalar(FieldType::Bool),
        "google.protobuf.StringValue" => scalar(FieldType::String),
        "google.protobuf.BytesValue" => scalar(FieldType::Bytes),
        "google.type.Date" => scalar(FieldType::Date),
        "google.type.TimeOfDay" => scalar(FieldType::Time),
        "confluent.type.Decimal" => {
            // The precision and scale Confluent's serializers put in the field's meta; without
            // them the widest column, BIGNUMERIC at scale 38 (a value's own scale may vary).
            let param = |key| meta_param(fd, Some(key)).and_then(|v| v.parse::<u32>().ok());
            Some(match (param("precision"), param("scale")) {
                (Some(p), Some(s)) => decimal_column("", p, s, Mode::Nullable),
                _ => Ok(TableFieldSchema::new(
                    "",
                    FieldType::BigNumeric,
                    Mode::Nullable,
                )),
            })
        }
        "google.type.Decimal" => scalar(FieldType::BigNumeric),
        "google.protobuf.Struct" | "google.protobuf.Value" | "google.protobuf.ListValue" => {
            Some(Err(format!(
                "{} has no column type the sink writes yet",
                m.full_name()
            )))
        }
        _ => None,
    }
}

/// A `params` entry of the field's `(confluent.field_meta)` option, or its `doc` with `None`.
fn meta_param(fd: &FieldDescriptor, key: Option<&str>) -> Option<String> {
    let ext = fd.parent_pool().get_extension_by_name(FIELD_META)?;
    let options = fd.options();
    if !options.has_extension(&ext) {
        return None;
    }
    let meta = options.get_extension(&ext);
    let meta = meta.as_message()?;
    let found = match key {
        None => meta.get_field_by_name("doc")?.as_str()?.to_owned(),
        Some(key) => {
            let params = meta.get_field_by_name("params")?;
            match params.as_map()?.get(&MapKey::String(key.to_owned()))? {
                Value::String(s) => s.clone(),
                _ => return None,
            }
        }
    };
    (!found.is_empty()).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf::{MessagePath, ProtoSchema};

    fn derive(proto: &str) -> Result<TableSchema, DeriveError> {
        let schema = ProtoSchema::compile(proto, &[]).unwrap();
        let message = schema.message(&MessagePath::FIRST).unwrap();
        table_schema_from_protobuf(&message, &DeriveOptions::default())
    }

    fn summary(fields: &[TableFieldSchema]) -> Vec<(String, FieldType, Mode)> {
        fields
            .iter()
            .map(|f| (f.name.clone(), f.field_type.clone(), f.mode()))
            .collect()
    }

    #[test]
    fn scalars_messages_maps_and_well_known_types_get_their_columns() {
        let t = derive(
            r#"syntax = "proto3";
            package shop;
            import "google/protobuf/timestamp.proto";
            import "google/protobuf/wrappers.proto";
            import "google/protobuf/duration.proto";
            import "google/type/date.proto";
            import "google/type/timeofday.proto";
            import "confluent/meta.proto";
            import "confluent/type/decimal.proto";
            enum Status { UNKNOWN = 0; SHIPPED = 1; }
            message Order {
              int64 id = 1;
              uint64 big = 2;
              sint32 delta = 3;
              double price = 4;
              float ratio = 5;
              bool flag = 6;
              string name = 7 [(confluent.field_meta) = { doc: "the buyer" }];
              bytes blob = 8;
              Status status = 9;
              repeated string tags = 10;
              repeated Line lines = 11;
              Line first = 12;
              map<string, int64> counters = 13;
              google.protobuf.Timestamp placed_at = 14;
              google.protobuf.Int32Value maybe = 15;
              google.protobuf.Duration elapsed = 16;
              google.type.Date ship_date = 17;
              google.type.TimeOfDay at = 18;
              confluent.type.Decimal amount = 19 [(confluent.field_meta) = {
                params: [{key: "precision", value: "12"}, {key: "scale", value: "3"}] }];
              confluent.type.Decimal loose = 20;
              optional string opt = 21;
              repeated google.protobuf.Timestamp times = 22;
            }
            message Line { string sku = 1; int32 qty = 2; }
            "#,
        )
        .unwrap();
        use FieldType as F;
        use Mode::{Nullable as N, Repeated as R};
        let want: Vec<(String, FieldType, Mode)> = [
            ("id", F::Int64, N),
            ("big", F::Int64, N),
            ("delta", F::Int64, N),
            ("price", F::Float64, N),
            ("ratio", F::Float64, N),
            ("flag", F::Bool, N),
            ("name", F::String, N),
            ("blob", F::Bytes, N),
            ("status", F::String, N),
            ("tags", F::String, R),
            ("lines", F::Record, R),
            ("first", F::Record, N),
            ("counters", F::Record, R),
            ("placed_at", F::Timestamp, N),
            ("maybe", F::Int64, N),
            ("elapsed", F::Int64, N),
            ("ship_date", F::Date, N),
            ("at", F::Time, N),
            ("amount", F::Numeric, N),
            ("loose", F::BigNumeric, N),
            ("opt", F::String, N),
            ("times", F::Timestamp, R),
        ]
        .into_iter()
        .map(|(n, t, m)| (n.to_string(), t, m))
        .collect();
        assert_eq!(summary(&t.fields), want);
        assert_eq!(t.fields[6].description.as_deref(), Some("the buyer"));
        assert_eq!(
            summary(&t.fields[12].fields),
            vec![("key".into(), F::String, N), ("value".into(), F::Int64, N)]
        );
        assert_eq!(
            (
                t.fields[18].precision.as_deref(),
                t.fields[18].scale.as_deref()
            ),
            (Some("12"), Some("3"))
        );
    }

    #[test]
    fn proto2_required_is_required_and_recursion_struct_and_empty_messages_are_refused() {
        let t = derive(
            r#"syntax = "proto2";
            message R { required int64 id = 1; optional string s = 2; }"#,
        )
        .unwrap();
        assert_eq!(t.fields[0].mode(), Mode::Required);
        assert_eq!(t.fields[1].mode(), Mode::Nullable);
        let e = derive(r#"syntax = "proto3"; message Node { int64 v = 1; Node next = 2; }"#)
            .unwrap_err();
        assert!(e.to_string().contains("recursive"), "{e}");
        let e = derive(
            r#"syntax = "proto3"; import "google/protobuf/struct.proto";
            message M { google.protobuf.Struct s = 1; }"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("M.s"), "{e}");
        let e = derive(r#"syntax = "proto3"; message M { E e = 1; } message E {}"#).unwrap_err();
        assert!(e.to_string().contains("without fields"), "{e}");
    }
}
