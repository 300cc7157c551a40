//! A transform of a field that the writer schema lacks but another version of its subject has
//! (docs/mapping.md, "Transforms"): v1 without `note`, v2 adding it, a route masking `note`. The
//! plan of v1 applies the transform as to an absent field: the column it would fill gets
//! nothing from v1's records (NULL), a valued `mask` still writes its value in every row, and
//! a REQUIRED column that would stay empty refuses the plan naming the transform and the
//! column. A field no version has is not absent but misspelt: the caller leaves its transform
//! in the list, where the plan compiler refuses it. Which versions exist is the caller's to ask
//! (the daemon reads the registry's subject); these functions only need the tables.

use super::{SetColumn, Transform};
use crate::error::PlanError;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

/// The fields of `list`'s field transforms that the writer schema lacks: a name missing from
/// its record in `derived`, the table schema derived from the writer schema without
/// transforms. A path through a column that is not a record is not absent: the field is
/// there, written whole, and the plan compiler refuses a transform inside it.
pub fn absent_fields(list: &[Transform], derived: &TableSchema) -> Vec<String> {
    (list.iter())
        .filter_map(Transform::field)
        .filter(|f| matches!(lookup(&derived.fields, f), Lookup::Absent))
        .map(str::to_string)
        .collect()
}

/// Whether the table `derived` from a writer schema has the field `path` as a column of its
/// own (every record on the way a RECORD column).
pub fn has_field(derived: &TableSchema, path: &str) -> bool {
    matches!(lookup(&derived.fields, path), Lookup::Found)
}

/// The list a writer schema lacking the fields `absent` is compiled (and its table derived)
/// with: each transform of an absent field left out, as the field is, except a valued `mask`,
/// which becomes the `set` of its column to its value (it fills every row whatever the field
/// holds).
pub fn without_absent(list: &[Transform], absent: &[String]) -> Vec<Transform> {
    (list.iter())
        .filter_map(|t| match t {
            Transform::Mask(m) if is_absent(absent, &m.field) => m.value.as_ref().map(|value| {
                Transform::Set(SetColumn {
                    column: m.field.clone(),
                    value: Some(value.clone()),
                    header: None,
                    encoding: None,
                    from: None,
                    field: None,
                    key_format: None,
                })
            }),
            t if t.field().is_some_and(|f| is_absent(absent, f)) => None,
            t => Some(t.clone()),
        })
        .collect()
}

/// Refuses a transform of an absent field whose column in `table` is REQUIRED where the
/// writer schema (`derived`, without transforms) leaves it empty: the first column along the
/// path the writer lacks, the renamed column, or a flattened record's columns. Its records
/// would each be an error; the plan is refused instead, naming both.
pub fn check_absent(
    list: &[Transform],
    absent: &[String],
    table: &TableSchema,
    derived: &TableSchema,
) -> Result<(), PlanError> {
    for t in list {
        let Some(field) = t.field().filter(|f| is_absent(absent, f)) else {
            continue;
        };
        let required = match t {
            // Nothing is written where a dropped field was; a valued mask fills every row.
            Transform::Drop(_) => None,
            Transform::Mask(m) if m.value.is_some() => None,
            Transform::Flatten(f) => {
                let prefix = format!("{}{}", f.field, f.separator).to_ascii_lowercase();
                (table.fields.iter())
                    .find(|c| {
                        c.mode() == Mode::Required
                            && c.name.to_ascii_lowercase().starts_with(&prefix)
                            && !(derived.fields.iter())
                                .any(|d| d.name.eq_ignore_ascii_case(&c.name))
                    })
                    .map(|c| c.name.clone())
            }
            Transform::Rename(r) => {
                first_empty(&table.fields, &derived.fields, field, Some(&r.to), "")
            }
            _ => first_empty(&table.fields, &derived.fields, field, None, ""),
        };
        if let Some(column) = required {
            return Err(PlanError::Transform {
                transform: t.describe(),
                reason: format!(
                    "the writer schema has no field {field} (another version of its subject has it), so column {column} would be empty in every row, and it is REQUIRED"
                ),
            });
        }
    }
    Ok(())
}

/// The path of the first column along `path` (its last name `to` when renamed) that the
/// writer lacks, when that column is REQUIRED in `table`.
fn first_empty(
    table: &[TableFieldSchema],
    derived: &[TableFieldSchema],
    path: &str,
    to: Option<&str>,
    prefix: &str,
) -> Option<String> {
    let (name, rest) = match path.split_once('.') {
        Some((name, rest)) => (name, Some(rest)),
        None => (path, None),
    };
    let column_name = match rest {
        None => to.unwrap_or(name),
        Some(_) => name,
    };
    let column = table
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(column_name))?;
    let here = format!("{prefix}{}", column.name);
    let Some(field) = derived.iter().find(|c| c.name.eq_ignore_ascii_case(name)) else {
        return (column.mode() == Mode::Required).then_some(here);
    };
    let rest = rest?;
    if field.field_type != FieldType::Record || column.field_type != FieldType::Record {
        return None;
    }
    first_empty(&column.fields, &field.fields, rest, to, &format!("{here}."))
}

fn is_absent(absent: &[String], field: &str) -> bool {
    absent.iter().any(|a| a.eq_ignore_ascii_case(field))
}

enum Lookup {
    Found,
    Absent,
    /// A name on the way is a column that is not a record.
    Inside,
}

fn lookup(fields: &[TableFieldSchema], path: &str) -> Lookup {
    let mut record = fields;
    let mut names = path.split('.').peekable();
    while let Some(name) = names.next() {
        let Some(column) = record.iter().find(|c| c.name.eq_ignore_ascii_case(name)) else {
            return Lookup::Absent;
        };
        if names.peek().is_none() {
            break;
        }
        if column.field_type != FieldType::Record {
            return Lookup::Inside;
        }
        record = &column.fields;
    }
    Lookup::Found
}
