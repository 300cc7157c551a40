//! Derives a BigQuery table schema from a registered JSON Schema, for `create_table` and
//! `schema_update: add_columns`: the columns the JSON plan compiler (`compile.rs`) maps the
//! records back onto, by property name.
//!
//! A property's type picks the column (`docs/mapping.md`); a property the table cannot type
//! (no `type`, several types, a free-form object, an array of arrays) becomes a JSON column,
//! which takes any value. Modes: an array is REPEATED; a property in `required` whose type does
//! not allow `null` is REQUIRED; every other property NULLABLE. Columns come in the order of the
//! property names (the schema is read as a JSON object, whose key order is not kept).

use super::named;
use super::schema::{JsonSchema, Kind, Node, Shape, ShapeError};
use crate::budget::Budget;
use crate::derive::{MAX_RECORD_DEPTH, finish, named_column};
use crate::{DeriveError, DeriveOptions};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

pub fn table_schema_from_json(
    schema: &JsonSchema,
    options: &DeriveOptions,
) -> Result<TableSchema, DeriveError> {
    let mut d = Deriver {
        schema,
        steps: Budget::json_schema(),
        columns: Budget::derive(),
    };
    let shape = d.shape(schema.root_node(), "(root)")?;
    if shape.kind != Some(Kind::Object) || shape.properties.is_empty() {
        return Err(unsupported(
            "(root)",
            "the schema is not an object with properties: a table needs named columns".into(),
        ));
    }
    let fields = d.columns(&shape, "", 1)?;
    finish(fields, options)
}

fn unsupported(field: &str, reason: String) -> DeriveError {
    DeriveError::Unsupported {
        field: field.to_owned(),
        reason,
    }
}

struct Deriver<'s> {
    schema: &'s JsonSchema,
    /// The work the shapes may still do.
    steps: Budget,
    /// The columns the table may still get.
    columns: Budget,
}

impl<'s> Deriver<'s> {
    fn shape(&mut self, node: Node<'s>, path: &str) -> Result<Shape<'s>, DeriveError> {
        self.schema
            .shape_within(node, &mut self.steps)
            .map_err(|e| match e {
                ShapeError::Bad(reason) => unsupported(path, reason),
                ShapeError::TooComplex(e) => DeriveError::TooComplex(e),
            })
    }

    fn columns(
        &mut self,
        object: &Shape<'s>,
        prefix: &str,
        depth: usize,
    ) -> Result<Vec<TableFieldSchema>, DeriveError> {
        let mut properties = object.properties.clone();
        properties.sort_by_key(|(name, _)| *name);
        properties.dedup_by_key(|(name, _)| *name);
        let mut out = Vec::with_capacity(properties.len());
        for (name, node) in properties {
            let path = format!("{prefix}{name}");
            if out
                .iter()
                .any(|c: &TableFieldSchema| c.name.eq_ignore_ascii_case(name))
            {
                return Err(unsupported(
                    &path,
                    "two properties differ only in case (column names do not)".into(),
                ));
            }
            self.columns.node()?;
            let shape = self.shape(node, &path)?;
            let required = object.required.contains(&name) && !shape.nullable;
            let mut col = self.column(name, &shape, &path, depth)?;
            if col.mode() != Mode::Repeated {
                col.mode = Some(if required {
                    Mode::Required
                } else {
                    Mode::Nullable
                });
            }
            col.description = shape.description.map(str::to_owned);
            out.push(col);
        }
        Ok(out)
    }

    fn column(
        &mut self,
        name: &str,
        shape: &Shape<'s>,
        path: &str,
        depth: usize,
    ) -> Result<TableFieldSchema, DeriveError> {
        use FieldType as F;
        let scalar = |ty: F| Ok(TableFieldSchema::new(name, ty, Mode::Nullable));
        if let Some(t) = named::named_type(shape).map_err(|r| unsupported(path, r))?
            && let Some(col) =
                named_column(name, t, Mode::Nullable).map_err(|r| unsupported(path, r))?
        {
            return Ok(col);
        }
        match shape.kind {
            Some(Kind::Boolean) => scalar(F::Bool),
            Some(Kind::Integer) => scalar(F::Int64),
            Some(Kind::Number) => scalar(F::Float64),
            Some(Kind::String) => scalar(match (shape.format, shape.encoding) {
                (Some("date-time"), _) => F::Timestamp,
                (Some("date"), _) => F::Date,
                (Some("time"), _) => F::Time,
                (_, Some("base64" | "bytes")) => F::Bytes,
                _ => F::String,
            }),
            Some(Kind::Object) if !shape.properties.is_empty() => {
                if depth >= MAX_RECORD_DEPTH {
                    return Err(unsupported(
                        path,
                        "objects nest deeper than BigQuery's 15 levels (or are recursive)".into(),
                    ));
                }
                let mut col = TableFieldSchema::new(name, F::Record, Mode::Nullable);
                col.fields = self.columns(shape, &format!("{path}."), depth + 1)?;
                Ok(col)
            }
            Some(Kind::Array) => {
                let items = match shape.items {
                    // A tuple (`items: [...]`) has no element type.
                    Some(items) if items.value.is_object() || items.value.is_boolean() => {
                        self.shape(items, path)?
                    }
                    _ => return scalar(F::Json),
                };
                if items.kind == Some(Kind::Array) {
                    // BigQuery has no arrays of arrays: the whole array is one JSON value.
                    return scalar(F::Json);
                }
                let mut col = self.column(name, &items, path, depth)?;
                if col.field_type == F::Json {
                    // Elements of any type: the whole array is one JSON value.
                    return Ok(col);
                }
                col.mode = Some(Mode::Repeated);
                Ok(col)
            }
            // No type, several types, only null, a free-form object: any JSON value.
            _ => scalar(F::Json),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derive(text: &str, refs: &[(&str, &str)]) -> Result<TableSchema, DeriveError> {
        let refs: Vec<(String, String)> = refs
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        let schema = JsonSchema::parse(text, &refs).unwrap();
        table_schema_from_json(&schema, &DeriveOptions::default())
    }

    fn summary(fields: &[TableFieldSchema]) -> Vec<(String, FieldType, Mode)> {
        fields
            .iter()
            .map(|f| (f.name.clone(), f.field_type.clone(), f.mode()))
            .collect()
    }

    #[test]
    fn property_types_formats_titles_and_required_pick_the_columns() {
        let t = derive(
            r##"{"type": "object", "required": ["id", "note"],
              "definitions": {"Line": {"type": "object", "required": ["sku"],
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}},
              "properties": {
                "id": {"type": "integer", "description": "the id"},
                "note": {"type": ["string", "null"]},
                "price": {"type": "number"},
                "flag": {"type": "boolean"},
                "placed_at": {"type": "string", "format": "date-time"},
                "ship_date": {"type": "string", "format": "date"},
                "at": {"type": "string", "format": "time"},
                "created_ms": {"type": "integer", "title": "org.apache.kafka.connect.data.Timestamp"},
                "day": {"type": "integer", "title": "org.apache.kafka.connect.data.Date"},
                "tod": {"type": "integer", "title": "org.apache.kafka.connect.data.Time"},
                "blob": {"type": "string", "contentEncoding": "base64"},
                "status": {"enum": ["NEW", "SHIPPED"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
                "total": {"$ref": "money.json"},
                "attrs": {"type": "object"},
                "anything": {},
                "either": {"type": ["string", "integer"]},
                "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
                "maybe": {"oneOf": [{"type": "null"}, {"type": "integer"}]}
              }}"##,
            &[(
                "money.json",
                r#"{"type": "object", "properties": {"units": {"type": "integer"}}}"#,
            )],
        )
        .unwrap();
        use FieldType as F;
        use Mode::{Nullable as N, Repeated as R, Required as Q};
        let want: Vec<(String, FieldType, Mode)> = [
            ("anything", F::Json, N),
            ("at", F::Time, N),
            ("attrs", F::Json, N),
            ("blob", F::Bytes, N),
            ("created_ms", F::Timestamp, N),
            ("day", F::Date, N),
            ("either", F::Json, N),
            ("flag", F::Bool, N),
            ("grid", F::Json, N),
            ("id", F::Int64, Q),
            ("lines", F::Record, R),
            ("maybe", F::Int64, N),
            ("note", F::String, N),
            ("placed_at", F::Timestamp, N),
            ("price", F::Float64, N),
            ("ship_date", F::Date, N),
            ("status", F::String, N),
            ("tags", F::String, R),
            ("tod", F::Time, N),
            ("total", F::Record, N),
        ]
        .into_iter()
        .map(|(n, t, m)| (n.to_string(), t, m))
        .collect();
        assert_eq!(summary(&t.fields), want);
        assert_eq!(t.fields[9].description.as_deref(), Some("the id"));
        assert_eq!(
            summary(&t.fields[10].fields),
            vec![("qty".into(), F::Int64, N), ("sku".into(), F::String, Q)]
        );
        assert_eq!(
            summary(&t.fields[19].fields),
            vec![("units".into(), F::Int64, N)]
        );
    }

    #[test]
    fn connect_decimals_become_numeric_or_bignumeric() {
        let t = derive(
            r#"{"type": "object", "properties": {
              "a": {"type": "number", "title": "org.apache.kafka.connect.data.Decimal",
                    "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"}},
              "b": {"type": "number", "title": "org.apache.kafka.connect.data.Decimal",
                    "connect.parameters": {"scale": "2"}}}}"#,
            &[],
        )
        .unwrap();
        assert_eq!(t.fields[0].field_type, FieldType::Numeric);
        assert_eq!(t.fields[0].scale.as_deref(), Some("2"));
        assert_eq!(t.fields[1].field_type, FieldType::BigNumeric);
    }

    #[test]
    fn a_local_reference_inside_a_referenced_document_points_into_that_document() {
        // `money.json` defines `Units` for its own property; the root has no `Units` (and a
        // `definitions/Units` of another type, to catch a lookup in the wrong document).
        let t = derive(
            r##"{"type": "object",
              "definitions": {"Units": {"type": "string"}},
              "properties": {"total": {"$ref": "money.json"}}}"##,
            &[(
                "money.json",
                r##"{"type": "object", "definitions": {"Units": {"type": "integer"}},
                  "properties": {"units": {"$ref": "#/definitions/Units"},
                    "parts": {"type": "array", "items": {"$ref": "#/definitions/Units"}}}}"##,
            )],
        )
        .unwrap();
        let total = &t.fields[0];
        assert_eq!(
            summary(&total.fields),
            vec![
                ("parts".to_string(), FieldType::Int64, Mode::Repeated),
                ("units".to_string(), FieldType::Int64, Mode::Nullable),
            ]
        );
    }

    #[test]
    fn a_root_without_properties_and_recursive_objects_are_refused() {
        assert!(derive(r#"{"type": "object"}"#, &[]).is_err());
        assert!(derive(r#"{"type": "array", "items": {}}"#, &[]).is_err());
        let e = derive(
            r##"{"type": "object", "definitions": {"N": {"type": "object",
              "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/definitions/N"}}}},
              "properties": {"head": {"$ref": "#/definitions/N"}}}"##,
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().contains("recursive"), "{e}");
    }
}
