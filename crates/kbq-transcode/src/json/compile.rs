//! Compiles a JSON plan for a table: every data column gets an op by its name and type; with a
//! registered JSON Schema, each property that has a column is checked against it once, here
//! (a `string` property into an INT64 column refuses the plan, an `integer` into TIMESTAMP needs
//! Connect's `Timestamp` title to know its unit), and `unknown_fields: error` refuses properties
//! without a column. Schemaless JSON is decided by the table alone.

use crate::field_path::FieldFilters;
use std::collections::HashMap;
use std::sync::Arc;

use prost_types::FieldDescriptorProto;
use prost_types::field_descriptor_proto::{Label, Type};

use super::keys::KeyTable;
use super::named;
use super::ops::{Conv, FieldOp, IntUnit, ObjectOp};
use super::scan::plain_key;
use super::schema::{JsonSchema, Kind, Node, Shape, ShapeError};
use crate::budget::Budget;
use crate::compile::{all_column_names, column_type, data_columns, metadata_names};
use crate::convert::DecimalTarget;
use crate::descriptor::{self, DescriptorBuilder, ProtoType};
use crate::metadata_columns::metadata_ops;
use crate::proto::{Tag, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT};
use crate::transforms::{FieldRules, Transform, ValueOp};
use crate::{Body, Plan, PlanError, PlanOptions, UnknownFields};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

const ROOT_MESSAGE: &str = "Row";

pub fn compile(
    schema: Option<&Arc<JsonSchema>>,
    validate: bool,
    table: &TableSchema,
    options: &PlanOptions,
) -> Result<Plan, PlanError> {
    let mut c = Compiler {
        schema: schema.map(|s| &**s),
        options,
        rules: FieldRules::new(&options.transforms),
        desc: DescriptorBuilder::new(all_column_names(table)),
        budget: Budget::json_schema(),
    };
    let columns = data_columns(table, options)?;
    let shape = match schema {
        Some(s) => Some(c.shape(s, s.root_node(), "")?),
        None => None,
    };
    let (root, mut protos) = c.object(&columns, shape.as_ref(), "", None, None)?;
    // Schemaless JSON has no fields to check the transforms against before a record comes.
    if schema.is_some() {
        c.rules.unapplied()?;
    }
    let filters = FieldFilters::compile(&options.transforms, |path| {
        super::field_path::resolve(schema.map(|s| &**s), path)
    })?;
    let metadata = metadata_ops(&mut c.desc, options, table, &mut protos)?;
    let root_desc = descriptor::message(ROOT_MESSAGE, protos);
    Ok(Plan {
        body: Body::Json {
            root,
            validate: schema.filter(|_| validate).cloned(),
        },
        metadata,
        filters,
        descriptor: c.desc.finish(root_desc),
    })
}

fn shape_error(path: &str, e: ShapeError) -> PlanError {
    match e {
        ShapeError::Bad(reason) => bad_schema(path, reason),
        ShapeError::TooComplex(e) => PlanError::TooComplex(e),
    }
}

fn bad_schema(path: &str, reason: String) -> PlanError {
    PlanError::Unsupported {
        column: if path.is_empty() {
            "(root)".into()
        } else {
            path.into()
        },
        reason,
    }
}

/// An object schema's properties by their lowercased name (columns match them case-blind), with
/// the name as written.
fn properties_by_lower<'a>(shape: Option<&Shape<'a>>) -> HashMap<String, (&'a str, Node<'a>)> {
    shape
        .map(|s| {
            s.properties
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), (*n, *v)))
                .collect()
        })
        .unwrap_or_default()
}

/// Under `unknown_fields: error`, a property no column takes refuses the plan (the first by
/// name, so the error is the same every time).
fn refuse_unknown_properties(
    columns: &[TableFieldSchema],
    properties: &HashMap<String, (&str, Node<'_>)>,
    removed: &[&str],
    prefix: &str,
    rules: &FieldRules<'_>,
    flat: Option<(&str, usize)>,
) -> Result<(), PlanError> {
    let names: Vec<String> = (columns.iter())
        .filter_map(|c| match flat {
            Some((names, _)) => Some(&c.name[names.len()..]),
            None => rules.source_key(prefix, &c.name),
        })
        .chain(removed.iter().copied())
        .map(str::to_ascii_lowercase)
        .collect();
    let mut unknown: Vec<&str> = properties
        .iter()
        .filter(|(lower, _)| !names.contains(lower))
        .map(|(_, (n, _))| *n)
        .collect();
    unknown.sort();
    match unknown.first() {
        Some(n) => Err(PlanError::UnknownJsonProperty {
            field: format!("{prefix}{n}"),
        }),
        None => Ok(()),
    }
}

struct Compiler<'a> {
    schema: Option<&'a JsonSchema>,
    options: &'a PlanOptions,
    /// Which key each column takes, as the route's transforms say.
    rules: FieldRules<'a>,
    desc: DescriptorBuilder,
    /// The work every shape of this compilation may still do.
    budget: Budget,
}

impl<'a> Compiler<'a> {
    fn shape(
        &mut self,
        schema: &'a JsonSchema,
        node: Node<'a>,
        path: &str,
    ) -> Result<Shape<'a>, PlanError> {
        schema
            .shape_within(node, &mut self.budget)
            .map_err(|e| shape_error(path, e))
    }

    fn object(
        &mut self,
        columns: &[TableFieldSchema],
        shape: Option<&Shape<'a>>,
        prefix: &str,
        tag: Option<Tag>,
        flat: Option<(&str, usize)>,
    ) -> Result<(ObjectOp, Vec<FieldDescriptorProto>), PlanError> {
        if let Some(k) = shape.and_then(|s| s.kind).filter(|k| *k != Kind::Object) {
            return Err(PlanError::JsonIncompatible {
                column: if prefix.is_empty() {
                    "(root)".into()
                } else {
                    prefix.trim_end_matches('.').into()
                },
                json: k.name().into(),
                column_type: "RECORD".into(),
            });
        }
        let properties = properties_by_lower(shape);
        if let Some(shape) = shape {
            (self.rules).check_record(prefix, shape.properties.iter().map(|(n, _)| *n))?;
            // Each property asks where it goes, as a field of the other formats does: one that
            // would fill a column a transform sets refuses the plan.
            for (name, _) in shape.properties.iter() {
                self.rules.target(prefix, name)?;
            }
        }
        let mut removed = self.rules.removed_keys(prefix, |key| {
            shape.is_none() || properties.contains_key(&key.to_ascii_lowercase())
        });
        let mut fields = Vec::new();
        let mut protos = Vec::new();
        let mut by_lower = HashMap::new();
        // Columns a flattened object fills (`flatten`), lowercased: the row's loop leaves them.
        let mut taken: Vec<String> = Vec::new();
        if prefix.is_empty() {
            let row = (&mut fields, &mut protos, &mut by_lower);
            self.flatten_row(columns, &properties, row, &mut removed, &mut taken)?;
        }
        if self.options.unknown_fields == UnknownFields::Error {
            refuse_unknown_properties(columns, &properties, &removed, prefix, &self.rules, flat)?;
        }
        for column in columns {
            if taken.contains(&column.name.to_ascii_lowercase()) {
                continue;
            }
            let (path, key): (Arc<str>, _) = match flat {
                Some((names, _)) => (
                    column.name.as_str().into(),
                    Some(Box::<str>::from(&column.name[names.len()..])),
                ),
                None => (
                    format!("{prefix}{}", column.name).into(),
                    (self.rules.source_key(prefix, &column.name)).map(Box::<str>::from),
                ),
            };
            let Some(key) = key else {
                if column.mode() == Mode::Required && column.default_value_expression.is_none() {
                    return Err(PlanError::Transform {
                        transform: format!("of field {path}"),
                        reason: "its REQUIRED column would have no value".into(),
                    });
                }
                continue;
            };
            let lower = key.to_ascii_lowercase();
            if by_lower.contains_key(lower.as_str()) {
                return Err(PlanError::Unsupported {
                    column: path.to_string(),
                    reason: "two columns differ only in case".into(),
                });
            }
            by_lower.insert(lower.clone().into_boxed_str(), fields.len() as u16);
            let property = match (self.schema, properties.get(&lower)) {
                (Some(s), Some((_, node))) => Some(self.shape(s, *node, &path)?),
                _ => None,
            };
            let number = (flat.map_or(0, |(_, base)| base) + protos.len()) as i32 + 1;
            let conversion = self.rules.conversion(prefix, &key);
            let (mut field, proto) = self.field(column, property, path, number, conversion)?;
            field.key = key;
            fields.push(field);
            protos.extend(proto);
        }
        // A removed key is read and skipped, also under `unknown_fields: error`.
        for key in removed {
            let lower = key.to_ascii_lowercase();
            if by_lower.contains_key(lower.as_str()) {
                continue;
            }
            by_lower.insert(lower.into_boxed_str(), fields.len() as u16);
            fields.push(FieldOp {
                key: key.into(),
                column: format!("{prefix}{key}").into(),
                tag: Tag::new(1, WIRE_VARINT),
                conv: Conv::Skip,
                repeated: false,
                required: false,
            });
        }
        Ok((
            ObjectOp {
                tag,
                keys: KeyTable::new(fields.iter().map(|f| f.key.as_bytes())),
                by_lower,
                unknown_is_error: self.options.unknown_fields == UnknownFields::Error,
                plain_keys: fields.iter().all(|f| plain_key(f.key.as_bytes())),
                required: (fields.iter().enumerate())
                    .filter(|(_, f)| f.required)
                    .map(|(i, _)| i as u16)
                    .collect(),
                fields: fields.into_boxed_slice(),
            },
            protos,
        ))
    }

    /// Every `flatten` of the row: a field each (its key in `by_lower`, and in `removed` so that
    /// `unknown_fields: error` knows it), the proto fields of its columns appended to the row's.
    fn flatten_row(
        &mut self,
        columns: &[TableFieldSchema],
        properties: &HashMap<String, (&'a str, Node<'a>)>,
        (fields, protos, by_lower): (
            &mut Vec<FieldOp>,
            &mut Vec<FieldDescriptorProto>,
            &mut HashMap<Box<str>, u16>,
        ),
        removed: &mut Vec<&'a str>,
        taken: &mut Vec<String>,
    ) -> Result<(), PlanError> {
        let flattens: Vec<(&'a str, &'a str)> = self.rules.flattens().collect();
        for (parent, separator) in flattens {
            let base = protos.len();
            let field =
                self.flattened(columns, properties, parent, separator, base, protos, taken)?;
            by_lower.insert(
                parent.to_ascii_lowercase().into_boxed_str(),
                fields.len() as u16,
            );
            fields.push(field);
            removed.push(parent);
        }
        Ok(())
    }

    /// The object `parent` of the row flattened (`flatten`): a field of the row whose object
    /// is written inline, into the row's columns `{parent}{separator}{key}` (numbered after the
    /// row's `base` fields so far, their proto fields appended to `protos`, their names to
    /// `taken`). With a schema, the columns of the object's properties; without one, every
    /// column whose name begins with `{parent}{separator}`. A null or absent object leaves them
    /// NULL (a REQUIRED one refuses the record).
    #[allow(clippy::too_many_arguments)]
    fn flattened(
        &mut self,
        columns: &[TableFieldSchema],
        properties: &HashMap<String, (&'a str, Node<'a>)>,
        parent: &str,
        separator: &str,
        base: usize,
        protos: &mut Vec<FieldDescriptorProto>,
        taken: &mut Vec<String>,
    ) -> Result<FieldOp, PlanError> {
        let names = format!("{parent}{separator}");
        let lower_names = names.to_ascii_lowercase();
        let reserved = metadata_names(self.options)?;
        let shape = match (self.schema, properties.get(&parent.to_ascii_lowercase())) {
            (Some(s), Some((_, node))) => Some(self.shape(s, *node, parent)?),
            _ => None,
        };
        if let Some(k) = shape
            .as_ref()
            .and_then(|s| s.kind)
            .filter(|k| *k != Kind::Object)
        {
            return Err(PlanError::Transform {
                transform: format!("flatten {parent}"),
                reason: format!(
                    "the property is {}: only an object has fields to flatten (an object inside an array has no columns of its own)",
                    k.name()
                ),
            });
        }
        let subset: Vec<TableFieldSchema> = match &shape {
            Some(shape) => {
                let siblings: Vec<&str> = properties.values().map(|(n, _)| *n).collect();
                let mut subset = Vec::new();
                for (child, _) in shape.properties.iter() {
                    let column =
                        (self.rules).flat_column(parent, separator, child, &siblings, &reserved)?;
                    if let Some(c) = columns
                        .iter()
                        .find(|c| c.name.eq_ignore_ascii_case(&column))
                    {
                        subset.push(c.clone());
                    }
                }
                subset
            }
            None if self.schema.is_some() => Vec::new(),
            None => (columns.iter())
                .filter(|c| c.name.to_ascii_lowercase().starts_with(&lower_names))
                .cloned()
                .collect(),
        };
        taken.extend(subset.iter().map(|c| c.name.to_ascii_lowercase()));
        let (op, child_protos) = self.object(
            &subset,
            shape.as_ref(),
            &format!("{parent}."),
            None,
            Some((&names, base)),
        )?;
        protos.extend(child_protos);
        let required = subset
            .iter()
            .find(|c| c.mode() == Mode::Required && c.default_value_expression.is_none());
        Ok(FieldOp {
            key: parent.into(),
            column: required.map_or(parent, |c| &c.name).into(),
            tag: Tag::new(1, WIRE_LEN),
            conv: Conv::Record(Box::new(op)),
            repeated: false,
            required: required.is_some(),
        })
    }

    /// One column's field: how a property is written into it, and its field in the row's
    /// descriptor (none for a column of a type the sink does not write: it is skipped).
    fn field(
        &mut self,
        column: &TableFieldSchema,
        property: Option<Shape<'a>>,
        path: Arc<str>,
        number: i32,
        conversion: Option<&Transform>,
    ) -> Result<(FieldOp, Option<FieldDescriptorProto>), PlanError> {
        if matches!(column.field_type, FieldType::Other(_)) {
            let skip = FieldOp {
                key: column.name.clone().into_boxed_str(),
                column: path,
                tag: Tag::new(1, WIRE_VARINT),
                conv: Conv::Skip,
                repeated: false,
                required: false,
            };
            return Ok((skip, None));
        }
        if !descriptor::is_proto_identifier(&column.name) {
            return Err(PlanError::BadColumnName {
                column: column.name.clone(),
            });
        }
        let repeated = column.mode() == Mode::Repeated;
        let element = match (&property, repeated) {
            (Some(p), true) => {
                if p.kind.is_some_and(|k| k != Kind::Array) {
                    return Err(incompatible(&path, p, column));
                }
                match (self.schema, p.items) {
                    (Some(s), Some(items)) => Some(self.shape(s, items, &path)?),
                    _ => None,
                }
            }
            (p, _) => p.clone(),
        };
        let (conv, ty) = match conversion {
            Some(t) => {
                // Without a schema, or a type, a value that is not a string is the record's
                // error when it comes.
                let source = Kind::value_source(property.as_ref().and_then(|p| p.kind));
                let op = ValueOp::compile(t, source, column)?;
                let ty = op.proto_type().0;
                (Conv::Value(op), ProtoType::scalar(ty))
            }
            None => self.column(column, element.as_ref(), &path, number)?,
        };
        let wire = match ty.ty {
            Type::Double => WIRE_FIXED64,
            Type::String | Type::Bytes | Type::Message => WIRE_LEN,
            _ => WIRE_VARINT,
        };
        let label = if repeated {
            Label::Repeated
        } else {
            Label::Optional
        };
        let proto = descriptor::field(&column.name, number, label, &ty);
        let field = FieldOp {
            key: column.name.clone().into_boxed_str(),
            column: path,
            tag: Tag::new(number as u32, wire),
            conv,
            repeated,
            required: column.mode() == Mode::Required && column.default_value_expression.is_none(),
        };
        Ok((field, Some(proto)))
    }

    /// The conversion of one column (one element of a REPEATED column), checked against the
    /// property's schema when there is one.
    fn column(
        &mut self,
        column: &TableFieldSchema,
        shape: Option<&Shape<'a>>,
        path: &Arc<str>,
        number: i32,
    ) -> Result<(Conv, ProtoType), PlanError> {
        use FieldType as F;
        // A value Kafka Connect or Debezium names is converted by its name (`named.rs`).
        if let Some(s) = shape
            && let Some(t) = named::connect_type(s, path)?
            && let Some((conv, ty)) = named::conversion(t, s, column, path)?
        {
            return Ok((conv, ProtoType::scalar(ty)));
        }
        let kind = shape.and_then(|s| s.kind);
        let schemaless = self.schema.is_none();
        let fits = |allowed: &[Kind]| kind.is_none_or(|k| allowed.contains(&k));
        let refuse = || match shape {
            Some(s) => incompatible(path, s, column),
            None => PlanError::Unsupported {
                column: path.to_string(),
                reason: "no conversion".into(),
            },
        };
        // The unit of an integer into a time column: a Connect or Debezium name gives it (above);
        // without a schema the table decides (µs for TIMESTAMP, days for DATE), as BigQuery's
        // own JSON loading does for TIMESTAMP.
        let unit = |schemaless_unit: IntUnit| {
            if kind == Some(Kind::Integer) {
                Err(PlanError::Unsupported {
                    column: path.to_string(),
                    reason: format!(
                        "an integer has no unit for a {} column without a title that names one ({})",
                        column.field_type.as_str(),
                        match column.field_type {
                            F::Date => "org.apache.kafka.connect.data.Date, io.debezium.time.Date",
                            F::Time =>
                                "org.apache.kafka.connect.data.Time, io.debezium.time.Time, MicroTime, NanoTime",
                            _ =>
                                "org.apache.kafka.connect.data.Timestamp, io.debezium.time.Timestamp, MicroTimestamp, NanoTimestamp",
                        }
                    ),
                })
            } else if schemaless {
                Ok(schemaless_unit)
            } else {
                Ok(IntUnit::None)
            }
        };
        let scalar = |conv: Conv, ty: Type| Ok((conv, ProtoType::scalar(ty)));
        match &column.field_type {
            F::Int64 if fits(&[Kind::Integer]) => scalar(Conv::Int, Type::Int64),
            F::Float64 if fits(&[Kind::Integer, Kind::Number]) => scalar(Conv::Float, Type::Double),
            F::Numeric | F::BigNumeric if fits(&[Kind::Integer, Kind::Number, Kind::String]) => {
                let target = if column.field_type == F::Numeric {
                    DecimalTarget::Numeric
                } else {
                    DecimalTarget::BigNumeric
                };
                scalar(Conv::Decimal(target), Type::Bytes)
            }
            F::Bool if fits(&[Kind::Boolean]) => scalar(Conv::Bool, Type::Bool),
            F::String | F::Geography if fits(&[Kind::String]) => scalar(Conv::Str, Type::String),
            F::Bytes if fits(&[Kind::String]) => scalar(Conv::Bytes, Type::Bytes),
            F::Json => scalar(Conv::Json, Type::String),
            F::Timestamp if fits(&[Kind::String, Kind::Integer]) => {
                scalar(Conv::Timestamp(unit(IntUnit::Micros)?), Type::Int64)
            }
            F::Date if fits(&[Kind::String, Kind::Integer]) => {
                scalar(Conv::Date(unit(IntUnit::Days)?), Type::Int32)
            }
            F::Time if fits(&[Kind::String, Kind::Integer]) => {
                scalar(unit(IntUnit::None).map(|_| Conv::Time)?, Type::Int64)
            }
            F::DateTime if fits(&[Kind::String]) => scalar(Conv::DateTime, Type::Int64),
            F::Record if fits(&[Kind::Object]) => {
                let name = self.desc.reserve_name(path);
                let tag = Tag::new(number as u32, WIRE_LEN);
                let (op, protos) =
                    self.object(&column.fields, shape, &format!("{path}."), Some(tag), None)?;
                self.desc.add(descriptor::message(&name, protos));
                Ok((
                    Conv::Record(Box::new(op)),
                    ProtoType {
                        ty: Type::Message,
                        message: Some(name),
                    },
                ))
            }
            _ => Err(refuse()),
        }
    }
}

fn incompatible(path: &str, shape: &Shape<'_>, column: &TableFieldSchema) -> PlanError {
    let mut json = shape.kind.map_or("any", Kind::name).to_string();
    if let Some(f) = shape.format {
        json.push_str(&format!(" (format {f})"));
    }
    if let Some(t) = shape.title {
        json.push_str(&format!(" (title {t})"));
    }
    PlanError::JsonIncompatible {
        column: path.to_string(),
        json,
        column_type: column_type(column),
    }
}
