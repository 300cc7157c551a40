//! The transforms applied to a derived table schema (`create_table`, `schema_update`): the
//! table gets the columns the transformed rows fill, so the plan compiled against it maps every
//! transform. A dropped field has no column; a renamed field's column has the new name; a field
//! masked to NULL keeps its column, NULLABLE; a masked value's and a set column's type is the
//! value's (text STRING, integer INT64, number FLOAT64, true/false BOOL; a header's by its
//! encoding), NULLABLE; a column `set … from:` a Kafka coordinate is the matching metadata
//! column's; a cast or converted field's column is of the type it writes, in the field's mode; a
//! flattened record's fields become top-level columns in its place, NULLABLE when the record may
//! be null. A transform that meets no field, or a column that meets another, is refused here
//! with the field path, as the plan compiler would refuse it.

use super::{CastType, FlattenRecord, HeaderEncoding, Literal, TimeTo, Transform};
use crate::compile::column_type;
use crate::error::DeriveError;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};

/// Applies `list` to the data columns `fields` derived from a writer schema (before the
/// metadata columns are appended).
pub(crate) fn apply(
    fields: &mut Vec<TableFieldSchema>,
    list: &[Transform],
) -> Result<(), DeriveError> {
    for t in list {
        let refuse = |reason: String| DeriveError::Unsupported {
            field: t.describe(),
            reason,
        };
        match t {
            Transform::Drop(d) => {
                let (parent, name) = record_of(fields, &d.field).map_err(refuse)?;
                let i = position(parent, name).ok_or_else(|| refuse(missing(&d.field)))?;
                parent.remove(i);
                if parent.is_empty() {
                    return Err(refuse(
                        "it is its record's last field: a RECORD column needs one (drop the record)".into(),
                    ));
                }
            }
            Transform::Rename(r) => {
                let (parent, name) = record_of(fields, &r.field).map_err(refuse)?;
                let i = position(parent, name).ok_or_else(|| refuse(missing(&r.field)))?;
                if let Some(j) = position(parent, &r.to).filter(|j| *j != i) {
                    return Err(refuse(format!(
                        "the record already has a field {}, which fills that column",
                        parent[j].name
                    )));
                }
                parent[i].name = r.to.clone();
            }
            Transform::Mask(m) => {
                let (parent, name) = record_of(fields, &m.field).map_err(refuse)?;
                let i = position(parent, name).ok_or_else(|| refuse(missing(&m.field)))?;
                match &m.value {
                    None if parent[i].mode() == Mode::Required => {
                        parent[i].mode = Some(Mode::Nullable)
                    }
                    None => {}
                    Some(v) => {
                        let name = parent[i].name.clone();
                        parent[i] = TableFieldSchema::new(name, literal_type(v), Mode::Nullable);
                    }
                }
            }
            // Its type is the key schema's field's, which a table derived from the value's
            // writer schema does not read: the column is the table's own (docs/mapping.md).
            Transform::Set(s) if s.key_field().is_some() => {}
            Transform::Set(s) => {
                let ty = match (&s.value, s.encoding) {
                    (Some(v), _) => literal_type(v),
                    (None, Some(e)) => header_type(e),
                    // `from`: a metadata column, appended with the others.
                    (None, None) => continue,
                };
                if let Some(existing) = fields
                    .iter()
                    .find(|f| f.name.eq_ignore_ascii_case(&s.column))
                {
                    return Err(refuse(format!(
                        "the writer schema has a field {} too, which fills that column: drop or rename the field",
                        existing.name
                    )));
                }
                fields.push(TableFieldSchema::new(s.column.clone(), ty, Mode::Nullable));
            }
            Transform::Cast(c) => scalar(fields, &c.field, cast_type(c.to)).map_err(refuse)?,
            Transform::Convert(c) => scalar(fields, &c.field, time_type(c.to)).map_err(refuse)?,
            Transform::Filter(_) => {}
            Transform::Flatten(f) => flatten(fields, f).map_err(refuse)?,
        }
    }
    Ok(())
}

/// The column of a field a cast or a convert rewrites: of the type it writes, in the field's
/// mode.
fn scalar(fields: &mut Vec<TableFieldSchema>, field: &str, ty: FieldType) -> Result<(), String> {
    let (parent, name) = record_of(fields, field)?;
    let i = position(parent, name).ok_or_else(|| missing(field))?;
    let col = &mut parent[i];
    if matches!(col.field_type, FieldType::Record) || col.mode() == Mode::Repeated {
        return Err(format!(
            "it derives a {} column: the transform writes one scalar value",
            column_type(col)
        ));
    }
    // A fresh column: the precision or length of the field's own type does not apply.
    *col = TableFieldSchema::new(col.name.clone(), ty, col.mode());
    Ok(())
}

/// Replaces the RECORD column of `f.field` with its fields, named `{field}{separator}{name}`,
/// NULLABLE when the record may be null.
fn flatten(fields: &mut Vec<TableFieldSchema>, f: &FlattenRecord) -> Result<(), String> {
    let i = position(fields, &f.field).ok_or_else(|| missing(&f.field))?;
    let parent = &fields[i];
    if parent.field_type != FieldType::Record || parent.mode() == Mode::Repeated {
        return Err(format!(
            "it derives a {} column: only a record (not one inside an array) has fields to flatten",
            column_type(parent)
        ));
    }
    let nullable = parent.mode() != Mode::Required;
    let mut children = Vec::with_capacity(parent.fields.len());
    for child in &parent.fields {
        let mut c = child.clone();
        c.name = format!("{}{}{}", parent.name, f.separator, child.name);
        if let Some(other) = (fields.iter().enumerate())
            .find(|(j, o)| *j != i && o.name.eq_ignore_ascii_case(&c.name))
        {
            return Err(format!(
                "its field {}.{} would fill column {}, which the field {} fills as well: drop or rename one",
                parent.name, child.name, c.name, other.1.name
            ));
        }
        if nullable && c.mode() == Mode::Required {
            c.mode = Some(Mode::Nullable);
        }
        children.push(c);
    }
    fields.splice(i..=i, children);
    Ok(())
}

/// The fields of the record holding `path`'s last name, and that name.
fn record_of<'f, 'p>(
    fields: &'f mut Vec<TableFieldSchema>,
    path: &'p str,
) -> Result<(&'f mut Vec<TableFieldSchema>, &'p str), String> {
    let mut names = path.split('.');
    let mut last = names.next().unwrap_or(path);
    let mut record = fields;
    let mut walked = String::new();
    for next in names {
        if !walked.is_empty() {
            walked.push('.');
        }
        walked.push_str(last);
        let i = position(record, last).ok_or_else(|| missing(&walked))?;
        let col = &mut record[i];
        if col.field_type != FieldType::Record {
            return Err(format!(
                "{walked} derives a {} column, not a record: its fields have no columns of their own",
                column_type(col)
            ));
        }
        record = &mut col.fields;
        last = next;
    }
    Ok((record, last))
}

fn position(fields: &[TableFieldSchema], name: &str) -> Option<usize> {
    fields
        .iter()
        .position(|f| f.name.eq_ignore_ascii_case(name))
}

fn missing(path: &str) -> String {
    format!("the writer schema has no field {path}")
}

/// A static value's column type: the YAML scalar's own.
fn literal_type(v: &Literal) -> FieldType {
    match v {
        Literal::Bool(_) => FieldType::Bool,
        Literal::Int(_) => FieldType::Int64,
        Literal::Float(_) => FieldType::Float64,
        Literal::Text(_) => FieldType::String,
    }
}

fn cast_type(t: CastType) -> FieldType {
    match t {
        CastType::Int64 => FieldType::Int64,
        CastType::Numeric => FieldType::Numeric,
        CastType::BigNumeric => FieldType::BigNumeric,
        CastType::Float64 => FieldType::Float64,
        CastType::String => FieldType::String,
        CastType::Bool => FieldType::Bool,
    }
}

fn time_type(t: TimeTo) -> FieldType {
    match t {
        TimeTo::Timestamp => FieldType::Timestamp,
        TimeTo::Date => FieldType::Date,
        TimeTo::Datetime => FieldType::DateTime,
        TimeTo::String => FieldType::String,
        TimeTo::Int64 => FieldType::Int64,
    }
}

fn header_type(e: HeaderEncoding) -> FieldType {
    match e {
        HeaderEncoding::String => FieldType::String,
        HeaderEncoding::Bytes => FieldType::Bytes,
        HeaderEncoding::Int64Be | HeaderEncoding::Int32Be => FieldType::Int64,
    }
}
