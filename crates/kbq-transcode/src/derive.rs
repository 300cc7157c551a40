//! Derives a BigQuery table schema from an Avro writer schema, for `create_table` and
//! `schema_update: add_columns`. The result is what the plan compiler maps back onto without
//! loss. The Protobuf and JSON Schema derivations (`protobuf/derive.rs`, `json/derive.rs`) share
//! the metadata columns, the decimal rule and the depth limit kept here.

use serde::Deserialize;

use super::budget::Budget;
use super::connect_types::ConnectType;
use super::error::DeriveError;
use super::metadata_columns::MetadataColumns;
use super::schema::{AvroSchema, Kind, Logical, NodeId, kind_name};
use super::transforms::{self, Transform};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

/// How an Avro map becomes a column.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MapMode {
    /// REPEATED RECORD with a `key` STRING and a `value` column (`struct` in the YAML).
    #[default]
    #[serde(rename = "struct")]
    Repeated,
    /// A JSON column holding the map as an object.
    Json,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeriveOptions {
    pub map_mode: MapMode,
    pub metadata: MetadataColumns,
    /// The route's transforms: the table gets the columns the transformed rows fill
    /// (`transforms/derive.rs`).
    pub transforms: Vec<Transform>,
}

/// BigQuery allows 15 levels of nested RECORDs.
pub(crate) const MAX_RECORD_DEPTH: usize = 15;

pub fn table_schema_from_avro(
    schema: &AvroSchema,
    options: &DeriveOptions,
) -> Result<TableSchema, DeriveError> {
    let record = schema.root_record()?;
    let mut d = Deriver {
        schema,
        options,
        budget: Budget::derive(),
    };
    let mut fields = Vec::with_capacity(record.fields.len());
    for f in &record.fields {
        d.budget.node()?;
        let mut col = d.column(&f.name, f.schema, 1)?;
        col.description = f.doc.clone().or(col.description);
        fields.push(col);
    }
    finish(fields, options)
}

/// The derived data columns `fields` with the route's transforms applied, then the Kafka
/// metadata columns (those `set … from:` adds included): the table.
pub(crate) fn finish(
    mut fields: Vec<TableFieldSchema>,
    options: &DeriveOptions,
) -> Result<TableSchema, DeriveError> {
    transforms::apply_to_derived(&mut fields, &options.transforms)?;
    let metadata =
        transforms::metadata_with(&options.metadata, &options.transforms).map_err(|reason| {
            DeriveError::Unsupported {
                field: "set".into(),
                reason,
            }
        })?;
    append_metadata(&mut fields, &metadata);
    Ok(TableSchema { fields })
}

/// The Kafka metadata columns a derived table gets after its data columns.
fn append_metadata(fields: &mut Vec<TableFieldSchema>, m: &MetadataColumns) {
    let mut meta = |name: &Option<String>, ty: FieldType, mode: Mode| {
        if let Some(n) = name {
            fields.push(TableFieldSchema::new(n.clone(), ty, mode));
        }
    };
    meta(&m.topic, FieldType::String, Mode::Required);
    meta(&m.partition, FieldType::Int64, Mode::Required);
    meta(&m.offset, FieldType::Int64, Mode::Required);
    meta(&m.timestamp, FieldType::Timestamp, Mode::Nullable);
    meta(&m.key, FieldType::Bytes, Mode::Nullable);
    if let Some(n) = &m.headers {
        let mut h = TableFieldSchema::new(n.clone(), FieldType::Record, Mode::Repeated);
        h.fields = vec![
            TableFieldSchema::new("key", FieldType::String, Mode::Required),
            TableFieldSchema::new("value", FieldType::Bytes, Mode::Nullable),
        ];
        fields.push(h);
    }
}

/// The column of a `decimal(precision, scale)`: NUMERIC holds 29 integer and 9 fractional
/// digits, BIGNUMERIC 38 and 38; precision and scale are set on the column.
pub(crate) fn decimal_column(
    name: &str,
    precision: u32,
    scale: u32,
    mode: Mode,
) -> Result<TableFieldSchema, String> {
    let mut col = TableFieldSchema::new(name, decimal_type(precision, scale)?, mode);
    col.precision = Some(precision.to_string());
    col.scale = Some(scale.to_string());
    Ok(col)
}

/// The column of a value Kafka Connect or Debezium names ([`ConnectType::derived_column`]), for
/// every format that carries the names; a Decimal's by its precision and scale as an Avro
/// decimal, BIGNUMERIC when the producer does not say the precision. `None`: the value's own
/// shape decides (a geometry struct).
pub(crate) fn named_column(
    name: &str,
    t: ConnectType,
    mode: Mode,
) -> Result<Option<TableFieldSchema>, String> {
    Ok(match t {
        ConnectType::Decimal {
            scale,
            precision: Some(p),
        } => Some(decimal_column(name, p, scale, mode)?),
        ConnectType::Decimal {
            precision: None, ..
        } => Some(TableFieldSchema::new(name, FieldType::BigNumeric, mode)),
        t => t
            .derived_column()
            .map(|ty| TableFieldSchema::new(name, ty, mode)),
    })
}

fn decimal_type(precision: u32, scale: u32) -> Result<FieldType, String> {
    // NUMERIC holds 29 integer and 9 fractional digits; BIGNUMERIC 38 and 38.
    let integer_digits = precision.saturating_sub(scale);
    if scale <= 9 && integer_digits <= 29 {
        Ok(FieldType::Numeric)
    } else if scale <= 38 && integer_digits <= 38 {
        Ok(FieldType::BigNumeric)
    } else {
        Err(format!(
            "decimal({precision},{scale}) exceeds BIGNUMERIC's 38 integer and 38 fractional digits"
        ))
    }
}

struct Deriver<'a> {
    schema: &'a AvroSchema,
    options: &'a DeriveOptions,
    /// The columns the table may still get: a named type is expanded at each use.
    budget: Budget,
}

impl Deriver<'_> {
    fn column(
        &mut self,
        name: &str,
        id: NodeId,
        depth: usize,
    ) -> Result<TableFieldSchema, DeriveError> {
        let unsupported = |reason: String| DeriveError::Unsupported {
            field: name.to_owned(),
            reason,
        };
        let node = self.schema.node(id);
        // A type Connect's AvroData names has the column the name says, as in every format.
        if let Some(named) = &node.connect {
            let named = named.clone().map_err(&unsupported)?;
            if let Some(col) = named_column(name, named, Mode::Required).map_err(&unsupported)? {
                return Ok(col);
            }
        }
        match &node.kind {
            Kind::Union(branches) => {
                let Some((_, inner)) = self.schema.nullable_branch(id) else {
                    return Err(unsupported(format!(
                        "a union of {} branches has no BigQuery column type; only [\"null\", T] does",
                        branches.len()
                    )));
                };
                let mut col = self.column(name, inner, depth)?;
                if col.mode() == Mode::Required {
                    col.mode = Some(Mode::Nullable);
                }
                Ok(col)
            }
            Kind::Array(items) => {
                let item = self
                    .schema
                    .nullable_branch(*items)
                    .map_or(*items, |(_, i)| i);
                let mut col = self.column(name, item, depth)?;
                if col.mode() == Mode::Repeated {
                    return Err(unsupported(
                        "arrays of arrays have no BigQuery column type".into(),
                    ));
                }
                col.mode = Some(Mode::Repeated);
                Ok(col)
            }
            Kind::Map(values) => match self.options.map_mode {
                MapMode::Json => Ok(TableFieldSchema::new(name, FieldType::Json, Mode::Nullable)),
                MapMode::Repeated => {
                    let mut col = TableFieldSchema::new(name, FieldType::Record, Mode::Repeated);
                    if depth >= MAX_RECORD_DEPTH {
                        return Err(unsupported("nested deeper than 15 levels".into()));
                    }
                    self.budget.nodes(2)?;
                    col.fields = vec![
                        TableFieldSchema::new("key", FieldType::String, Mode::Required),
                        self.column("value", *values, depth + 1)?,
                    ];
                    Ok(col)
                }
            },
            Kind::Record(r) => {
                if depth > MAX_RECORD_DEPTH {
                    return Err(unsupported(
                        "records nest deeper than BigQuery's 15 levels (or are recursive)".into(),
                    ));
                }
                let mut col = TableFieldSchema::new(name, FieldType::Record, Mode::Required);
                col.description = r.doc.clone();
                for f in &r.fields {
                    self.budget.node()?;
                    let mut sub = self.column(&f.name, f.schema, depth + 1)?;
                    sub.description = f.doc.clone().or(sub.description);
                    col.fields.push(sub);
                }
                Ok(col)
            }
            Kind::Null => Err(unsupported(
                "a field of type null has no column type".into(),
            )),
            _ => {
                let (ty, precision_scale) =
                    scalar_type(&node.kind, node.logical).map_err(unsupported)?;
                let mut col = TableFieldSchema::new(name, ty, Mode::Required);
                if let Some((p, s)) = precision_scale {
                    col.precision = Some(p.to_string());
                    col.scale = Some(s.to_string());
                }
                Ok(col)
            }
        }
    }
}

type Scalar = (FieldType, Option<(u32, u32)>);

fn scalar_type(kind: &Kind, logical: Logical) -> Result<Scalar, String> {
    Ok(match (kind, logical) {
        (_, Logical::Date) => (FieldType::Date, None),
        (_, Logical::TimeMillis | Logical::TimeMicros) => (FieldType::Time, None),
        (_, Logical::TimestampMillis | Logical::TimestampMicros | Logical::TimestampNanos) => {
            (FieldType::Timestamp, None)
        }
        (
            _,
            Logical::LocalTimestampMillis
            | Logical::LocalTimestampMicros
            | Logical::LocalTimestampNanos
            | Logical::DateTimeString,
        ) => (FieldType::DateTime, None),
        (_, Logical::Decimal { precision, scale }) => {
            (decimal_type(precision, scale)?, Some((precision, scale)))
        }
        (_, Logical::Uuid) => (FieldType::String, None),
        (_, Logical::Json) => (FieldType::Json, None),
        (_, Logical::Geography) => (FieldType::Geography, None),
        (Kind::Boolean, _) => (FieldType::Bool, None),
        (Kind::Int | Kind::Long, _) => (FieldType::Int64, None),
        (Kind::Float | Kind::Double, _) => (FieldType::Float64, None),
        (Kind::String | Kind::Enum { .. }, _) => (FieldType::String, None),
        (Kind::Bytes | Kind::Fixed { .. }, _) => (FieldType::Bytes, None),
        (other, _) => return Err(format!("avro {} has no column type", kind_name(other))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derive(avsc: &str, map_mode: MapMode) -> Result<TableSchema, DeriveError> {
        table_schema_from_avro(
            &AvroSchema::parse(avsc).unwrap(),
            &DeriveOptions {
                map_mode,
                ..Default::default()
            },
        )
    }

    #[test]
    fn modes_follow_unions_and_arrays_and_docs_become_descriptions() {
        let t = derive(
            r#"{"type":"record","name":"r","fields":[
              {"name":"a","type":"long","doc":"the a"},
              {"name":"b","type":["null","string"]},
              {"name":"c","type":["string","null"]},
              {"name":"d","type":{"type":"array","items":"int"}},
              {"name":"e","type":["null",{"type":"array","items":"int"}]},
              {"name":"f","type":{"type":"record","name":"n","doc":"nested","fields":[{"name":"x","type":"double"}]}}]}"#,
            MapMode::Repeated,
        )
        .unwrap();
        let modes: Vec<Mode> = t.fields.iter().map(|f| f.mode()).collect();
        assert_eq!(
            modes,
            vec![
                Mode::Required,
                Mode::Nullable,
                Mode::Nullable,
                Mode::Repeated,
                Mode::Repeated,
                Mode::Required
            ]
        );
        assert_eq!(t.fields[0].description.as_deref(), Some("the a"));
        assert_eq!(t.fields[5].description.as_deref(), Some("nested"));
        assert_eq!(t.fields[5].fields[0].field_type, FieldType::Float64);
    }

    #[test]
    fn decimals_choose_numeric_or_bignumeric_by_precision_and_scale() {
        let col = |p: u32, s: u32| {
            derive(
                &format!(
                    r#"{{"type":"record","name":"r","fields":[{{"name":"d","type":
                    {{"type":"bytes","logicalType":"decimal","precision":{p},"scale":{s}}}}}]}}"#
                ),
                MapMode::Repeated,
            )
            .map(|t| t.fields[0].field_type.clone())
        };
        assert_eq!(col(38, 9).unwrap(), FieldType::Numeric);
        assert_eq!(col(10, 10).unwrap(), FieldType::BigNumeric);
        assert_eq!(col(39, 9).unwrap(), FieldType::BigNumeric);
        assert_eq!(col(76, 38).unwrap(), FieldType::BigNumeric);
        assert!(col(77, 38).is_err());
    }

    #[test]
    fn maps_become_key_value_records_or_json() {
        let avsc = r#"{"type":"record","name":"r","fields":[
            {"name":"m","type":{"type":"map","values":"long"}}]}"#;
        let t = derive(avsc, MapMode::Repeated).unwrap();
        assert_eq!(t.fields[0].mode(), Mode::Repeated);
        assert_eq!(t.fields[0].fields[0].name, "key");
        assert_eq!(t.fields[0].fields[1].field_type, FieldType::Int64);
        let t = derive(avsc, MapMode::Json).unwrap();
        assert_eq!(t.fields[0].field_type, FieldType::Json);
    }

    #[test]
    fn logical_types_pick_their_column_types() {
        let t = derive(
            r#"{"type":"record","name":"r","fields":[
              {"name":"a","type":{"type":"int","logicalType":"date"}},
              {"name":"b","type":{"type":"long","logicalType":"timestamp-nanos"}},
              {"name":"c","type":{"type":"long","logicalType":"local-timestamp-millis"}},
              {"name":"d","type":{"type":"int","logicalType":"time-millis"}},
              {"name":"e","type":{"type":"string","sqlType":"JSON"}},
              {"name":"f","type":{"type":"string","logicalType":"geography_wkt"}},
              {"name":"g","type":{"type":"string","logicalType":"uuid"}},
              {"name":"h","type":{"type":"enum","name":"E","symbols":["A"]}}]}"#,
            MapMode::Repeated,
        )
        .unwrap();
        let types: Vec<FieldType> = t.fields.iter().map(|f| f.field_type.clone()).collect();
        assert_eq!(
            types,
            vec![
                FieldType::Date,
                FieldType::Timestamp,
                FieldType::DateTime,
                FieldType::Time,
                FieldType::Json,
                FieldType::Geography,
                FieldType::String,
                FieldType::String
            ]
        );
    }

    #[test]
    fn recursive_and_multi_type_unions_are_refused() {
        assert!(
            derive(
                r#"{"type":"record","name":"n","fields":[{"name":"next","type":["null","n"]}]}"#,
                MapMode::Repeated
            )
            .is_err()
        );
        assert!(
            derive(
                r#"{"type":"record","name":"r","fields":[{"name":"u","type":["int","string"]}]}"#,
                MapMode::Repeated
            )
            .is_err()
        );
    }
}
