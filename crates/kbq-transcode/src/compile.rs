//! Compiles a (writer schema, table schema) pair into a [`Plan`]: the table is authoritative,
//! columns match Avro fields case-insensitively, and every decision that does not depend on a
//! record's bytes is taken here, once.

use std::collections::HashMap;
use std::sync::Arc;

use prost_types::FieldDescriptorProto;
use prost_types::field_descriptor_proto::{Label, Type};
use serde::Deserialize;

use super::budget::Budget;
use super::convert::DecimalTarget;
use super::descriptor::{self, DescriptorBuilder, ProtoType};
use super::error::PlanError;
use super::field_path::FieldFilters;
use super::flat::FlatPlan;
use super::metadata_columns::{MetadataColumns, metadata_ops};
use super::named;
use super::ops::{AvroRead, Conv, JsonOp, OnNull, Op, RecordOp, Skip, ValueConv};
use super::proto::{Tag, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT};
use super::schema::{AvroSchema, Kind, Logical, NodeId, Record, kind_name};
use super::transforms::{FieldRules, Source, Target, Transform, ValueOp};
use super::{Body, Plan};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

/// What to do with an Avro field the table has no column for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownFields {
    #[default]
    Ignore,
    Error,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanOptions {
    pub unknown_fields: UnknownFields,
    pub metadata: MetadataColumns,
    /// The route's transforms, in order (docs/mapping.md, "Transforms"); `filter` entries are
    /// the caller's, applied before a record reaches a plan.
    pub transforms: Vec<Transform>,
}

/// Name of the root message in the descriptor.
const ROOT_MESSAGE: &str = "Row";

pub fn compile(
    schema: &AvroSchema,
    table: &TableSchema,
    options: &PlanOptions,
) -> Result<Plan, PlanError> {
    let record = schema.root_record()?;
    let mut c = Compiler {
        schema,
        options,
        rules: FieldRules::new(&options.transforms),
        desc: DescriptorBuilder::new(all_column_names(table)),
        visiting: Vec::new(),
        budget: Budget::plan(),
        min_sizes: vec![MinSize::Unknown; schema.nodes.len()],
    };
    let data_columns = data_columns(table, options)?;
    c.visiting.push(schema.root);
    let (fields, mut protos, missing_required) = c.record_fields(record, &data_columns, "")?;
    c.rules.unapplied()?;
    let filters = FieldFilters::compile(&options.transforms, |path| {
        crate::field_path::avro(schema, path, &mut |id| c.skip(id))
    })?;
    let metadata = metadata_ops(&mut c.desc, options, table, &mut protos)?;
    let root = descriptor::message(ROOT_MESSAGE, protos);
    let tree = RecordOp {
        tag: None,
        fields,
        missing_required,
    };
    Ok(Plan {
        body: Body::Avro {
            flat: FlatPlan::lower(&tree),
            tree,
        },
        metadata,
        filters,
        descriptor: c.desc.finish(root),
    })
}

/// The filters on a field's value of `transforms` against the Avro writer schema alone, as
/// [`compile`] refuses them (a field the schema lacks, a literal its type cannot hold): what
/// `validate` can check offline with a route's fixed schema file, before any table is known.
pub fn check_field_filters(schema: &AvroSchema, transforms: &[Transform]) -> Result<(), PlanError> {
    let options = PlanOptions::default();
    let mut c = Compiler {
        schema,
        options: &options,
        rules: FieldRules::new(&[]),
        desc: DescriptorBuilder::new(Vec::new()),
        visiting: Vec::new(),
        budget: Budget::plan(),
        min_sizes: vec![MinSize::Unknown; schema.nodes.len()],
    };
    schema.root_record()?;
    FieldFilters::compile(transforms, |path| {
        crate::field_path::avro(schema, path, &mut |id| c.skip(id))
    })
    .map(drop)
}

/// Every column name at every depth, which nested type names must not collide with.
pub(super) fn all_column_names(table: &TableSchema) -> Vec<String> {
    let mut names = Vec::new();
    collect_names(&table.fields, &mut names);
    names
}

/// The top-level columns that take record data: all but the Kafka metadata columns and the
/// columns transforms fill.
pub(super) fn data_columns(
    table: &TableSchema,
    options: &PlanOptions,
) -> Result<Vec<TableFieldSchema>, PlanError> {
    let rules = FieldRules::new(&options.transforms);
    let meta_names = metadata_names(options)?;
    Ok(table
        .fields
        .iter()
        .filter(|f| {
            !meta_names.contains(&f.name.to_ascii_lowercase()) && !rules.is_set_column(&f.name)
        })
        .cloned()
        .collect())
}

/// The Kafka metadata columns' names (those `set … from:` adds included), lowercased.
pub(super) fn metadata_names(options: &PlanOptions) -> Result<Vec<String>, PlanError> {
    let m = &options.effective_metadata()?;
    Ok([
        &m.topic,
        &m.partition,
        &m.offset,
        &m.timestamp,
        &m.key,
        &m.headers,
    ]
    .into_iter()
    .flatten()
    .map(|n| n.to_ascii_lowercase())
    .collect())
}

/// How a scalar Avro value is read for a transform, and what kind of scalar it is.
pub(crate) fn avro_read(schema: &AvroSchema, id: NodeId) -> (AvroRead, Source) {
    let node = schema.node(id);
    match (&node.kind, node.logical) {
        (Kind::String, _) => (AvroRead::Str, Source::Str),
        (Kind::Bytes, Logical::None) => (AvroRead::Bytes, Source::Bytes),
        (Kind::Fixed { size, .. }, Logical::None) => (AvroRead::Fixed(*size), Source::Bytes),
        (Kind::Bytes, Logical::Decimal { scale, .. }) => {
            (AvroRead::Decimal(None), Source::Decimal { scale })
        }
        (Kind::Fixed { size, .. }, Logical::Decimal { scale, .. }) => {
            (AvroRead::Decimal(Some(*size)), Source::Decimal { scale })
        }
        (Kind::Bytes | Kind::Fixed { .. }, _) => {
            (AvroRead::Bytes, Source::Other("bytes of a logical type"))
        }
        // A logical type says what the number is (a date, a time): not a plain number.
        (Kind::Int | Kind::Long, l) if l != Logical::None => {
            (AvroRead::Bytes, Source::Other("a number of a logical type"))
        }
        (Kind::Int, _) => (AvroRead::Int, Source::Int32("int")),
        (Kind::Long, _) => (AvroRead::Long, Source::Int64("long")),
        (Kind::Float, _) => (AvroRead::Float, Source::Float32("float")),
        (Kind::Double, _) => (AvroRead::Double, Source::Float64("double")),
        (Kind::Boolean, _) => (AvroRead::Bool, Source::Bool),
        (kind, _) => (AvroRead::Bytes, Source::Other(kind_name(kind))),
    }
}

fn collect_names(fields: &[TableFieldSchema], out: &mut Vec<String>) {
    for f in fields {
        out.push(f.name.clone());
        collect_names(&f.fields, out);
    }
}

struct Compiler<'a> {
    schema: &'a AvroSchema,
    options: &'a PlanOptions,
    /// Which column each field fills, as the route's transforms say.
    rules: FieldRules<'a>,
    desc: DescriptorBuilder,
    /// Records being compiled, to refuse recursive schemas instead of looping.
    visiting: Vec<NodeId>,
    /// What the plan may still build: a named type is expanded at each use, so the plan of a
    /// small schema can be exponentially large.
    budget: Budget,
    /// `min_size` of each node, computed once: its recursion through named types would
    /// otherwise be exponential too.
    min_sizes: Vec<MinSize>,
}

#[derive(Debug, Clone, Copy)]
enum MinSize {
    Unknown,
    /// Being computed: a recursive use counts 0 bytes, which keeps the result a lower bound.
    Visiting,
    Known(usize),
}

type Fields = (Box<[Op]>, Vec<FieldDescriptorProto>, Option<Arc<str>>);

impl Compiler<'_> {
    fn record_fields(
        &mut self,
        record: &Record,
        columns: &[TableFieldSchema],
        prefix: &str,
    ) -> Result<Fields, PlanError> {
        // The columns are indexed again at each use of a record type.
        self.budget.nodes(columns.len())?;
        let by_name: HashMap<String, &TableFieldSchema> = columns
            .iter()
            .map(|c| (c.name.to_ascii_lowercase(), c))
            .collect();
        let mut ops = Vec::with_capacity(record.fields.len());
        let mut protos = Vec::new();
        let mut matched: Vec<String> = Vec::new();
        self.rules
            .check_record(prefix, record.fields.iter().map(|f| f.name.as_str()))?;
        for field in &record.fields {
            let lower = match self.rules.target(prefix, &field.name)? {
                Target::Column(name) => name.to_ascii_lowercase(),
                Target::Dropped => {
                    ops.push(Op::Skip(self.skip(field.schema)?));
                    continue;
                }
                Target::Flatten(separator) => {
                    let separator = separator.to_owned();
                    let siblings: Vec<&str> = record.fields.iter().map(|f| &*f.name).collect();
                    let op = self.flattened(
                        &field.name,
                        field.schema,
                        &separator,
                        &siblings,
                        &by_name,
                        &mut protos,
                        &mut matched,
                    )?;
                    ops.push(op);
                    continue;
                }
            };
            let column = by_name.get(&lower).copied();
            let Some(column) = column.filter(|c| !matches!(c.field_type, FieldType::Other(_)))
            else {
                if column.is_none() && self.options.unknown_fields == UnknownFields::Error {
                    return Err(PlanError::UnknownField {
                        field: format!("{prefix}{}", field.name),
                    });
                }
                // Columns of types we do not write (RANGE, INTERVAL) are left alone.
                ops.push(Op::Skip(self.skip(field.schema)?));
                continue;
            };
            if matched.contains(&lower) {
                return Err(PlanError::Unsupported {
                    column: format!("{prefix}{}", column.name),
                    reason: "two avro fields differ only in case and match this column".into(),
                });
            }
            matched.push(lower);
            if !descriptor::is_proto_identifier(&column.name) {
                return Err(PlanError::BadColumnName {
                    column: column.name.clone(),
                });
            }
            let path: Arc<str> = format!("{prefix}{}", column.name).into();
            let conversion = self.rules.conversion(prefix, &field.name);
            ops.push(self.field(field.schema, column, &path, conversion, &mut protos)?);
        }
        let missing_required = columns
            .iter()
            .find(|c| {
                c.mode() == Mode::Required
                    && c.default_value_expression.is_none()
                    && !matches!(c.field_type, FieldType::Other(_))
                    && !matched.contains(&c.name.to_ascii_lowercase())
            })
            .map(|c| Arc::from(format!("{prefix}{}", c.name)));
        Ok((ops.into_boxed_slice(), protos, missing_required))
    }

    /// The op of one field written to `column` (rewritten by `conversion` if a transform
    /// does), its proto field appended to `protos`.
    fn field(
        &mut self,
        id: NodeId,
        column: &TableFieldSchema,
        path: &Arc<str>,
        conversion: Option<&Transform>,
        protos: &mut Vec<FieldDescriptorProto>,
    ) -> Result<Op, PlanError> {
        let number = protos.len() as i32 + 1;
        let written = match conversion {
            Some(t) => self.converted(id, t, column, path, number)?,
            None => self.value(id, column, path, number, false)?,
        };
        Ok(match written {
            Some((op, ty)) => {
                let label = if column.mode() == Mode::Repeated {
                    Label::Repeated
                } else {
                    Label::Optional
                };
                protos.push(descriptor::field(&column.name, number, label, &ty));
                op
            }
            // A field that is always null needs no proto field, but its bytes (a union index)
            // must still be read.
            None => self.always_null(id, column, path)?,
        })
    }

    /// The top-level record `name` flattened (`transforms`, `flatten`): its fields written
    /// inline into the row's columns `{name}{separator}{field}`, their proto fields appended to
    /// the row's `protos` and their columns to `matched`. A null record writes none of them (a
    /// REQUIRED one refuses the record).
    #[allow(clippy::too_many_arguments)]
    fn flattened(
        &mut self,
        name: &str,
        id: NodeId,
        separator: &str,
        siblings: &[&str],
        by_name: &HashMap<String, &TableFieldSchema>,
        protos: &mut Vec<FieldDescriptorProto>,
        matched: &mut Vec<String>,
    ) -> Result<Op, PlanError> {
        let schema = self.schema;
        let (record_id, branches) = flat_record(schema, id, name)?;
        let Kind::Record(record) = &schema.node(record_id).kind else {
            unreachable!("flat_record finds a record");
        };
        if self.visiting.contains(&record_id) {
            return Err(PlanError::Unsupported {
                column: name.to_owned(),
                reason: "recursive avro records cannot be written to BigQuery".into(),
            });
        }
        self.visiting.push(record_id);
        let reserved = metadata_names(self.options)?;
        let mut fields = Vec::with_capacity(record.fields.len());
        let mut required: Option<Arc<str>> = None;
        for field in &record.fields {
            let column =
                (self.rules).flat_column(name, separator, &field.name, siblings, &reserved)?;
            let lower = column.to_ascii_lowercase();
            let Some(column) = (by_name.get(&lower).copied())
                .filter(|c| !matches!(c.field_type, FieldType::Other(_)))
            else {
                if !by_name.contains_key(&lower)
                    && self.options.unknown_fields == UnknownFields::Error
                {
                    return Err(PlanError::UnknownField {
                        field: format!("{name}.{}", field.name),
                    });
                }
                fields.push(Op::Skip(self.skip(field.schema)?));
                continue;
            };
            if matched.contains(&lower) {
                return Err(PlanError::Unsupported {
                    column: column.name.clone(),
                    reason: format!(
                        "two fields fill this column (one of them {name}.{})",
                        field.name
                    ),
                });
            }
            matched.push(lower);
            if !descriptor::is_proto_identifier(&column.name) {
                return Err(PlanError::BadColumnName {
                    column: column.name.clone(),
                });
            }
            let path: Arc<str> = column.name.as_str().into();
            if required.is_none()
                && column.mode() == Mode::Required
                && column.default_value_expression.is_none()
            {
                required = Some(path.clone());
            }
            fields.push(self.field(field.schema, column, &path, None, protos)?);
        }
        self.visiting.pop();
        let op = Op::Record(Box::new(RecordOp {
            tag: None,
            fields: fields.into_boxed_slice(),
            missing_required: None,
        }));
        Ok(match branches {
            Some(branches) => with_null(schema, branches, op, required),
            None => op,
        })
    }

    fn always_null(
        &mut self,
        id: NodeId,
        column: &TableFieldSchema,
        path: &Arc<str>,
    ) -> Result<Op, PlanError> {
        Ok(match self.on_null(column, path, false) {
            OnNull::Nothing => Op::Skip(self.skip(id)?),
            required => Op::Null(required),
        })
    }

    fn on_null(&self, column: &TableFieldSchema, path: &Arc<str>, element: bool) -> OnNull {
        if element {
            OnNull::ElementError(path.clone())
        } else if column.mode() == Mode::Required {
            OnNull::RequiredError(path.clone())
        } else {
            OnNull::Nothing
        }
    }

    /// The op for one Avro value written to `column`, and the proto type of the field, or `None`
    /// when the value can only ever be null.
    fn value(
        &mut self,
        id: NodeId,
        column: &TableFieldSchema,
        path: &Arc<str>,
        number: i32,
        element: bool,
    ) -> Result<Option<(Op, ProtoType)>, PlanError> {
        self.budget.node()?;
        let node = self.schema.node(id);
        let incompatible = || PlanError::Incompatible {
            column: path.to_string(),
            avro: describe(self.schema, id),
            column_type: column_type(column),
        };
        let repeated = column.mode() == Mode::Repeated;
        // A type Connect's AvroData names decides the conversion before the Avro type does.
        if !repeated || element {
            match named::conv(self.schema, id, column, path)? {
                Some(named::Named::Conv(conv)) => return Ok(Some(scalar_op(conv, path, number))),
                Some(named::Named::Field(index)) => {
                    return self.one_field(id, index, column, path, number, element);
                }
                None => {}
            }
        }
        match &node.kind {
            Kind::Null => Ok(None),
            Kind::Union(branches) => self.union(branches, column, path, number, element),
            Kind::Array(items) if repeated && !element => {
                let Some((item, ty)) = self.value(*items, column, path, number, true)? else {
                    return Err(incompatible());
                };
                let min_item = self.min_size(*items);
                Ok(Some((
                    Op::Array {
                        item: Box::new(item),
                        min_item,
                    },
                    ty,
                )))
            }
            Kind::Map(values) if repeated && !element && column.field_type == FieldType::Record => {
                self.map_entries(*values, column, path, number).map(Some)
            }
            _ if repeated && !element => Err(incompatible()),
            Kind::Array(_) | Kind::Map(_) | Kind::Record(_)
                if matches!(column.field_type, FieldType::Json | FieldType::String) =>
            {
                self.json_text(id, path, number).map(Some)
            }
            Kind::Record(record) if column.field_type == FieldType::Record => {
                self.record(id, record, column, path, number).map(Some)
            }
            Kind::Array(_) | Kind::Map(_) | Kind::Record(_) => Err(incompatible()),
            _ if column.field_type == FieldType::Json && node.kind != Kind::String => {
                self.json_text(id, path, number).map(Some)
            }
            _ => {
                let conv = scalar_conv(self.schema, id, column).ok_or_else(incompatible)?;
                if let Conv::Enum(symbols) = &conv {
                    self.charge_symbols(symbols)?;
                }
                Ok(Some(scalar_op(conv, path, number)))
            }
        }
    }

    /// A value a transform rewrites (`transforms/values.rs`): a scalar, or a union of scalars
    /// and null; `None` when the value can only be null.
    fn converted(
        &mut self,
        id: NodeId,
        t: &Transform,
        column: &TableFieldSchema,
        path: &Arc<str>,
        number: i32,
    ) -> Result<Option<(Op, ProtoType)>, PlanError> {
        self.budget.node()?;
        let node = self.schema.node(id);
        let (read, source) = match (&node.kind, node.logical) {
            (Kind::Null, _) => return Ok(None),
            (Kind::Union(branches), _) => {
                let mut ops = Vec::with_capacity(branches.len());
                let mut ty = None;
                for &b in branches {
                    match self.converted(b, t, column, path, number)? {
                        None => ops.push(Op::Null(self.on_null(column, path, false))),
                        Some((op, proto)) => {
                            ty = Some(proto);
                            ops.push(op);
                        }
                    }
                }
                return Ok(ty.map(|ty| (Op::Union(ops.into_boxed_slice()), ty)));
            }
            _ => avro_read(self.schema, id),
        };
        let op = ValueOp::compile(t, source, column)?;
        Ok(Some(scalar_op(
            Conv::Value(Box::new(ValueConv { read, op })),
            path,
            number,
        )))
    }

    /// One field of a record written as the column's value, the record's other fields read and
    /// skipped: the fields run inline, without a nested message of their own.
    fn one_field(
        &mut self,
        id: NodeId,
        index: usize,
        column: &TableFieldSchema,
        path: &Arc<str>,
        number: i32,
        element: bool,
    ) -> Result<Option<(Op, ProtoType)>, PlanError> {
        let schema = self.schema;
        let Kind::Record(record) = &schema.node(id).kind else {
            unreachable!("named::conv names a field of records only");
        };
        let mut fields = Vec::with_capacity(record.fields.len());
        let mut ty = None;
        for (i, f) in record.fields.iter().enumerate() {
            if i != index {
                fields.push(Op::Skip(self.skip(f.schema)?));
                continue;
            }
            match self.value(f.schema, column, path, number, element)? {
                Some((op, t)) => {
                    fields.push(op);
                    ty = Some(t);
                }
                None => fields.push(self.always_null(f.schema, column, path)?),
            }
        }
        let op = Op::Record(Box::new(RecordOp {
            tag: None,
            fields: fields.into_boxed_slice(),
            missing_required: None,
        }));
        Ok(ty.map(|t| (op, t)))
    }

    /// A union: one op per branch (a null branch becomes the column's null handling), all of
    /// one proto type; `None` when every branch is null.
    fn union(
        &mut self,
        branches: &[NodeId],
        column: &TableFieldSchema,
        path: &Arc<str>,
        number: i32,
        element: bool,
    ) -> Result<Option<(Op, ProtoType)>, PlanError> {
        let mut ops = Vec::with_capacity(branches.len());
        let mut ty: Option<ProtoType> = None;
        for &b in branches {
            match self.value(b, column, path, number, element)? {
                None => ops.push(Op::Null(self.on_null(column, path, element))),
                Some((op, t)) => {
                    if ty.as_ref().is_some_and(|prev| *prev != t) {
                        return Err(PlanError::Unsupported {
                            column: path.to_string(),
                            reason: "union branches map to different proto types".into(),
                        });
                    }
                    ty = Some(t);
                    ops.push(op);
                }
            }
        }
        Ok(ty.map(|t| (Op::Union(ops.into_boxed_slice()), t)))
    }

    /// A record into a RECORD column: a nested message of its own in the row's descriptor.
    fn record(
        &mut self,
        id: NodeId,
        record: &Record,
        column: &TableFieldSchema,
        path: &Arc<str>,
        number: i32,
    ) -> Result<(Op, ProtoType), PlanError> {
        if self.visiting.contains(&id) {
            return Err(PlanError::Unsupported {
                column: path.to_string(),
                reason: "recursive avro records cannot be written to BigQuery".into(),
            });
        }
        self.visiting.push(id);
        let name = self.desc.reserve_name(path);
        let prefix = format!("{path}.");
        let (fields, protos, missing_required) =
            self.record_fields(record, &column.fields, &prefix)?;
        self.visiting.pop();
        self.desc.add(descriptor::message(&name, protos));
        Ok((
            Op::Record(Box::new(RecordOp {
                tag: Some(Tag::new(number as u32, WIRE_LEN)),
                fields,
                missing_required,
            })),
            ProtoType {
                ty: Type::Message,
                message: Some(name),
            },
        ))
    }

    /// A value written as JSON text into a JSON or STRING column.
    fn json_text(
        &mut self,
        id: NodeId,
        path: &Arc<str>,
        number: i32,
    ) -> Result<(Op, ProtoType), PlanError> {
        let json = self.json(id)?;
        Ok((
            Op::Json {
                tag: Tag::new(number as u32, WIRE_LEN),
                json: Box::new(json),
                column: path.clone(),
            },
            ProtoType::scalar(Type::String),
        ))
    }

    fn map_entries(
        &mut self,
        values: NodeId,
        column: &TableFieldSchema,
        path: &Arc<str>,
        number: i32,
    ) -> Result<(Op, ProtoType), PlanError> {
        let sub = |n: &str| {
            column
                .fields
                .iter()
                .find(|f| f.name.eq_ignore_ascii_case(n))
                .ok_or_else(|| PlanError::Unsupported {
                    column: path.to_string(),
                    reason: format!("a map needs a RECORD column with a {n:?} subfield"),
                })
        };
        let key_col = sub("key")?;
        let value_col = sub("value")?;
        if !matches!(key_col.field_type, FieldType::String) || key_col.mode() == Mode::Repeated {
            return Err(PlanError::Unsupported {
                column: path.to_string(),
                reason: "the key subfield of a map column must be a STRING".into(),
            });
        }
        let value_path: Arc<str> = format!("{path}.{}", value_col.name).into();
        let value = self.value(values, value_col, &value_path, 2, false)?;
        let name = self.desc.reserve_name(path);
        let mut protos = vec![descriptor::field(
            &key_col.name,
            1,
            Label::Optional,
            &ProtoType::scalar(Type::String),
        )];
        let value_op = match value {
            Some((op, ty)) => {
                let label = if value_col.mode() == Mode::Repeated {
                    Label::Repeated
                } else {
                    Label::Optional
                };
                protos.push(descriptor::field(&value_col.name, 2, label, &ty));
                op
            }
            None => self.always_null(values, value_col, &value_path)?,
        };
        self.desc.add(descriptor::message(&name, protos));
        let min_item = 1 + self.min_size(values);
        Ok((
            Op::MapEntries {
                entry: Tag::new(number as u32, WIRE_LEN),
                key: Tag::new(1, WIRE_LEN),
                value: Box::new(value_op),
                min_item,
            },
            ProtoType {
                ty: Type::Message,
                message: Some(name),
            },
        ))
    }

    pub(crate) fn skip(&mut self, id: NodeId) -> Result<Skip, PlanError> {
        self.budget.node()?;
        let node = self.schema.node(id);
        Ok(match &node.kind {
            Kind::Null => Skip::Nothing,
            Kind::Boolean => Skip::Bool,
            Kind::Int => Skip::Int,
            Kind::Long => Skip::Varint,
            Kind::Float => Skip::Fixed(4),
            Kind::Double => Skip::Fixed(8),
            Kind::Bytes | Kind::String => Skip::Bytes,
            Kind::Fixed { size, .. } => Skip::Fixed(*size),
            Kind::Enum { symbols, .. } => Skip::Enum(symbols.len()),
            Kind::Array(items) => Skip::Array(Box::new(self.skip(*items)?), self.min_size(*items)),
            Kind::Map(values) => {
                Skip::Map(Box::new(self.skip(*values)?), 1 + self.min_size(*values))
            }
            Kind::Union(b) => Skip::Union(
                b.iter()
                    .map(|b| self.skip(*b))
                    .collect::<Result<Vec<_>, _>>()?
                    .into_boxed_slice(),
            ),
            Kind::Record(r) => {
                self.enter(id, &r.name)?;
                let fields = r
                    .fields
                    .iter()
                    .map(|f| self.skip(f.schema))
                    .collect::<Result<Vec<_>, _>>()?;
                self.visiting.pop();
                Skip::Record(fields.into_boxed_slice())
            }
        })
    }

    fn json(&mut self, id: NodeId) -> Result<JsonOp, PlanError> {
        self.budget.node()?;
        let node = self.schema.node(id);
        Ok(match (&node.kind, node.logical) {
            (Kind::Null, _) => JsonOp::Null,
            (Kind::Boolean, _) => JsonOp::Bool,
            (Kind::Int, _) => JsonOp::Int,
            (Kind::Long, _) => JsonOp::Long,
            (Kind::Float, _) => JsonOp::Float,
            (Kind::Double, _) => JsonOp::Double,
            (Kind::String, Logical::Json) => JsonOp::RawJson,
            (Kind::String, _) => JsonOp::Str,
            (Kind::Bytes, Logical::Decimal { scale, .. }) => JsonOp::Decimal { fixed: None, scale },
            (Kind::Bytes, _) => JsonOp::Bytes,
            (Kind::Fixed { size, .. }, Logical::Decimal { scale, .. }) => JsonOp::Decimal {
                fixed: Some(*size),
                scale,
            },
            (Kind::Fixed { .. }, Logical::Uuid) => JsonOp::UuidFixed,
            (Kind::Fixed { size, .. }, _) => JsonOp::Fixed(*size),
            (Kind::Enum { symbols, .. }, _) => {
                let symbols = boxed_symbols(symbols);
                self.charge_symbols(&symbols)?;
                JsonOp::Enum(symbols)
            }
            (Kind::Array(items), _) => {
                JsonOp::Array(Box::new(self.json(*items)?), self.min_size(*items))
            }
            (Kind::Map(values), _) => {
                JsonOp::Map(Box::new(self.json(*values)?), 1 + self.min_size(*values))
            }
            (Kind::Union(b), _) => JsonOp::Union(
                b.iter()
                    .map(|b| self.json(*b))
                    .collect::<Result<Vec<_>, _>>()?
                    .into_boxed_slice(),
            ),
            (Kind::Record(r), _) => {
                self.enter(id, &r.name)?;
                let fields = r
                    .fields
                    .iter()
                    .map(|f| {
                        self.budget.bytes(f.name.len())?;
                        Ok((f.name.clone().into_boxed_str(), self.json(f.schema)?))
                    })
                    .collect::<Result<Vec<_>, PlanError>>()?;
                self.visiting.pop();
                JsonOp::Record(fields.into_boxed_slice())
            }
        })
    }

    fn enter(&mut self, id: NodeId, name: &str) -> Result<(), PlanError> {
        if self.visiting.contains(&id) {
            return Err(PlanError::Unsupported {
                column: name.to_owned(),
                reason: "recursive avro records are not supported".into(),
            });
        }
        self.visiting.push(id);
        Ok(())
    }

    /// An enum's symbols are copied into the plan at each use of the enum.
    fn charge_symbols(&mut self, symbols: &[Box<str>]) -> Result<(), PlanError> {
        self.budget.nodes(symbols.len())?;
        let bytes = symbols.iter().map(|s| s.len()).sum();
        Ok(self.budget.bytes(bytes)?)
    }

    /// The fewest bytes one value of this schema occupies (a lower bound); bounds array/map
    /// counts. Each node is computed once.
    fn min_size(&mut self, id: NodeId) -> usize {
        match self.min_sizes[id] {
            MinSize::Known(n) => return n,
            MinSize::Visiting => return 0,
            MinSize::Unknown => {}
        }
        self.min_sizes[id] = MinSize::Visiting;
        // Capped so that the callers' `1 + size` cannot overflow.
        let n = self.min_size_of(id).min(usize::MAX / 2);
        self.min_sizes[id] = MinSize::Known(n);
        n
    }

    fn min_size_of(&mut self, id: NodeId) -> usize {
        let schema = self.schema;
        match &schema.node(id).kind {
            Kind::Null => 0,
            Kind::Boolean | Kind::Int | Kind::Long | Kind::Bytes | Kind::String => 1,
            Kind::Enum { .. } | Kind::Array(_) | Kind::Map(_) => 1,
            Kind::Float => 4,
            Kind::Double => 8,
            Kind::Fixed { size, .. } => *size,
            Kind::Union(b) => 1 + b.iter().map(|b| self.min_size(*b)).min().unwrap_or(0),
            Kind::Record(r) => r
                .fields
                .iter()
                .map(|f| self.min_size(f.schema))
                .fold(0, usize::saturating_add),
        }
    }
}

fn boxed_symbols(symbols: &[String]) -> Box<[Box<str>]> {
    symbols
        .iter()
        .map(|s| s.clone().into_boxed_str())
        .collect::<Vec<_>>()
        .into_boxed_slice()
}

/// The conversion of a scalar Avro value into a column of the given type, if BigQuery can take
/// it. Integers with a time logical type may still go to an INT64 column as raw numbers.
fn scalar_conv(schema: &AvroSchema, id: NodeId, column: &TableFieldSchema) -> Option<Conv> {
    let node = schema.node(id);
    let target = match column.field_type {
        FieldType::Numeric => Some(DecimalTarget::Numeric),
        FieldType::BigNumeric => Some(DecimalTarget::BigNumeric),
        _ => None,
    };
    use FieldType as F;
    use Kind as K;
    use Logical as L;
    Some(match (&column.field_type, &node.kind, node.logical) {
        (F::Int64, K::Int, _) => Conv::Int,
        (F::Int64, K::Long, _) => Conv::Long,
        (F::Float64, K::Int, _) => Conv::IntToDouble,
        (F::Float64, K::Long, _) => Conv::LongToDouble,
        (F::Float64, K::Float, _) => Conv::Float,
        (F::Float64, K::Double, _) => Conv::Double,
        (F::Bool, K::Boolean, _) => Conv::Bool,
        (F::String, K::String, _) => Conv::Str,
        (F::String, K::Bytes, L::None) => Conv::BytesAsStr,
        (F::String, K::Enum { symbols, .. }, _) => Conv::Enum(boxed_symbols(symbols)),
        (F::String, K::Fixed { .. }, L::Uuid) => Conv::UuidFixed,
        (F::Json, K::String, _) => Conv::JsonStr,
        (F::Geography, K::String, _) => Conv::Str,
        (F::Bytes, K::Bytes, _) => Conv::Bytes,
        (F::Bytes, K::Fixed { size, .. }, _) => Conv::Fixed(*size),
        (F::Bytes, K::String, _) => Conv::StrAsBytes,
        (F::Numeric | F::BigNumeric, K::Bytes, L::Decimal { scale, .. }) => Conv::Decimal {
            fixed: None,
            scale,
            target: target?,
        },
        (F::Numeric | F::BigNumeric, K::Fixed { size, .. }, L::Decimal { scale, .. }) => {
            Conv::Decimal {
                fixed: Some(*size),
                scale,
                target: target?,
            }
        }
        (F::Numeric | F::BigNumeric, K::Int, L::None) => Conv::IntToNumeric(target?),
        (F::Numeric | F::BigNumeric, K::Long, L::None) => Conv::LongToNumeric(target?),
        (F::Numeric | F::BigNumeric, K::String, _) => Conv::Str,
        (F::Timestamp, K::Long, L::TimestampMillis) => Conv::TimestampMillis,
        (F::Timestamp, K::Long, L::TimestampMicros) => Conv::TimestampMicros,
        (F::Timestamp, K::Long, L::TimestampNanos) => Conv::TimestampNanos,
        (F::Date, K::Int, L::Date) => Conv::Date,
        (F::Date, K::String, _) => Conv::Str,
        (F::DateTime, K::Long, L::LocalTimestampMillis | L::TimestampMillis) => {
            Conv::DateTimeMillis
        }
        (F::DateTime, K::Long, L::LocalTimestampMicros | L::TimestampMicros) => {
            Conv::DateTimeMicros
        }
        (F::DateTime, K::Long, L::LocalTimestampNanos | L::TimestampNanos) => Conv::DateTimeNanos,
        (F::DateTime, K::String, _) => Conv::Str,
        (F::Time, K::Int, L::TimeMillis) => Conv::TimeMillis,
        (F::Time, K::Long, L::TimeMicros) => Conv::TimeMicros,
        (F::Time, K::String, _) => Conv::Str,
        _ => return None,
    })
}

fn scalar_op(conv: Conv, path: &Arc<str>, number: i32) -> (Op, ProtoType) {
    let (wire, ty) = proto_of(&conv);
    (
        Op::Scalar {
            tag: Tag::new(number as u32, wire),
            conv,
            column: path.clone(),
        },
        ProtoType::scalar(ty),
    )
}

fn proto_of(conv: &Conv) -> (u32, Type) {
    match conv {
        Conv::Int
        | Conv::Long
        | Conv::TimestampMillis
        | Conv::TimestampMicros
        | Conv::TimestampNanos
        | Conv::DateTimeMillis
        | Conv::DateTimeMicros
        | Conv::DateTimeNanos
        | Conv::TimeMillis
        | Conv::TimeMicros => (WIRE_VARINT, Type::Int64),
        Conv::Date => (WIRE_VARINT, Type::Int32),
        Conv::Bool => (WIRE_VARINT, Type::Bool),
        Conv::IntToDouble | Conv::LongToDouble | Conv::Float | Conv::Double => {
            (WIRE_FIXED64, Type::Double)
        }
        Conv::Str | Conv::JsonStr | Conv::BytesAsStr | Conv::Enum(_) | Conv::UuidFixed => {
            (WIRE_LEN, Type::String)
        }
        Conv::StrAsBytes
        | Conv::Bytes
        | Conv::Fixed(_)
        | Conv::Decimal { .. }
        | Conv::IntToNumeric(_)
        | Conv::LongToNumeric(_) => (WIRE_LEN, Type::Bytes),
        Conv::Named(named) => named.proto(),
        Conv::Value(v) => {
            let (ty, wire) = v.op.proto_type();
            (wire, ty)
        }
    }
}

pub(super) fn column_type(c: &TableFieldSchema) -> String {
    match c.mode() {
        Mode::Repeated => format!("REPEATED {}", c.field_type.as_str()),
        _ => c.field_type.as_str().to_owned(),
    }
}

/// The union of a flattened record and null: the record's `op`, or for null no column at all
/// (a REQUIRED one, `required`, refuses the record).
fn with_null(schema: &AvroSchema, branches: &[NodeId], op: Op, required: Option<Arc<str>>) -> Op {
    let mut op = Some(op);
    let ops = (branches.iter())
        .map(|b| match schema.node(*b).kind {
            Kind::Null => Op::Null(match &required {
                Some(column) => OnNull::RequiredError(column.clone()),
                None => OnNull::Nothing,
            }),
            _ => op.take().expect("one record branch"),
        })
        .collect::<Vec<_>>();
    Op::Union(ops.into_boxed_slice())
}

/// The record a flattened field `name` holds, and the union's branches when it is a union of
/// the record and null.
fn flat_record<'s>(
    schema: &'s AvroSchema,
    id: NodeId,
    name: &str,
) -> Result<(NodeId, Option<&'s [NodeId]>), PlanError> {
    let not_record = |what: &str| PlanError::Transform {
        transform: format!("flatten {name}"),
        reason: format!(
            "the field is {what}: only a record, or a union of a record and null, has fields to flatten (a record inside an array has no columns of its own)"
        ),
    };
    match &schema.node(id).kind {
        Kind::Record(_) => Ok((id, None)),
        Kind::Union(b) => {
            let records: Vec<NodeId> = (b.iter().copied())
                .filter(|b| matches!(schema.node(*b).kind, Kind::Record(_)))
                .collect();
            let nulls = (b.iter())
                .filter(|b| schema.node(**b).kind == Kind::Null)
                .count();
            if records.len() != 1 || records.len() + nulls != b.len() {
                return Err(not_record("a union of other types"));
            }
            Ok((records[0], Some(b)))
        }
        other => Err(not_record(&format!(
            "{} {}",
            article(other),
            kind_name(other)
        ))),
    }
}

fn article(kind: &Kind) -> &'static str {
    match kind {
        Kind::Array(_) | Kind::Enum { .. } | Kind::Int => "an",
        _ => "a",
    }
}

/// A short human description of an Avro type for error messages.
fn describe(schema: &AvroSchema, id: NodeId) -> String {
    let node = schema.node(id);
    let base = kind_name(&node.kind);
    match node.logical {
        Logical::None => base.to_owned(),
        Logical::Decimal { precision, scale } => format!("{base} decimal({precision},{scale})"),
        other => format!("{base} {other:?}"),
    }
}
