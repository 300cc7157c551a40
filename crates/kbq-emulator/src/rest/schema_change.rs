//! Table schema rules of the REST API: what a new schema may contain, and how an existing one may
//! change (columns are added as NULLABLE or REPEATED, REQUIRED may relax to NULLABLE; nothing is
//! removed, retyped or tightened).

use std::collections::HashSet;

use super::RestError;
use crate::store::TableRef;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

/// BigQuery nests RECORD columns at most 15 levels deep.
const MAX_DEPTH: usize = 15;

const RESERVED_PREFIXES: [&str; 6] = [
    "_partition",
    "_table_",
    "_file_",
    "_row_timestamp",
    "__root__",
    "_colidentifier",
];

pub(super) fn check_schema(schema: &TableSchema) -> Result<(), RestError> {
    check_fields(&schema.fields, "", 1)
}

fn check_fields(fields: &[TableFieldSchema], prefix: &str, depth: usize) -> Result<(), RestError> {
    if depth > MAX_DEPTH {
        return Err(RestError::Invalid(format!(
            "Field {prefix} has too many levels of nesting: at most {MAX_DEPTH} are allowed."
        )));
    }
    let mut seen: HashSet<String> = HashSet::new();
    let mut first_spelling: Vec<(String, &str)> = Vec::new();
    for field in fields {
        let name = field.name.as_str();
        let path = format!("{prefix}{name}");
        if name.is_empty() || name.chars().count() > 300 || name.chars().any(char::is_control) {
            return Err(RestError::Invalid(format!(
                "Invalid field name \"{name}\". Fields must contain at most 300 characters and no control characters."
            )));
        }
        let lower = name.to_lowercase();
        if depth == 1 && RESERVED_PREFIXES.iter().any(|p| lower.starts_with(p)) {
            return Err(RestError::Invalid(format!(
                "Invalid field name \"{name}\". Field names are not allowed to start with the (case-insensitive) prefixes _PARTITION, _TABLE_, _FILE_, _ROW_TIMESTAMP, __ROOT__ and _COLIDENTIFIER"
            )));
        }
        if !seen.insert(lower.clone()) {
            let other = first_spelling
                .iter()
                .find(|(l, _)| *l == lower)
                .map(|(_, n)| *n)
                .unwrap_or(name);
            return Err(RestError::Invalid(format!(
                "Duplicate(Case Insensitive) field names: {other} and {name}. Table: {}",
                prefix.trim_end_matches('.')
            )));
        }
        first_spelling.push((lower, name));
        match &field.field_type {
            FieldType::Record => {
                if field.fields.is_empty() {
                    return Err(RestError::Invalid(format!(
                        "Field {path} is type RECORD but has no schema"
                    )));
                }
                check_fields(&field.fields, &format!("{path}."), depth + 1)?;
            }
            FieldType::Other(kind) if !matches!(kind.as_str(), "RANGE" | "INTERVAL") => {
                return Err(RestError::Invalid(format!(
                    "Invalid value for type: {kind} is not a valid value"
                )));
            }
            other => {
                if !field.fields.is_empty() {
                    return Err(RestError::Invalid(format!(
                        "Field {path} is type {} but has subfields",
                        other.as_str()
                    )));
                }
            }
        }
    }
    Ok(())
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Nullable => "NULLABLE",
        Mode::Required => "REQUIRED",
        Mode::Repeated => "REPEATED",
    }
}

pub(super) fn check_evolution(
    old: &TableSchema,
    new: &TableSchema,
    table: &TableRef,
) -> Result<(), RestError> {
    let mismatch = |detail: String| {
        RestError::Invalid(format!(
            "Provided Schema does not match Table {}. {detail}",
            table.legacy()
        ))
    };
    evolve(&old.fields, &new.fields, "", &mismatch)
}

fn evolve(
    old: &[TableFieldSchema],
    new: &[TableFieldSchema],
    prefix: &str,
    mismatch: &dyn Fn(String) -> RestError,
) -> Result<(), RestError> {
    for before in old {
        let path = format!("{prefix}{}", before.name);
        let Some(after) = new
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(&before.name))
        else {
            return Err(mismatch(format!("Field {path} is missing in new schema")));
        };
        if before.field_type != after.field_type {
            return Err(mismatch(format!(
                "Field {path} has changed type from {} to {}",
                before.field_type.as_str(),
                after.field_type.as_str()
            )));
        }
        let relaxed = before.mode() == Mode::Required && after.mode() == Mode::Nullable;
        if before.mode() != after.mode() && !relaxed {
            return Err(mismatch(format!(
                "Field {path} has changed mode from {} to {}",
                mode_name(before.mode()),
                mode_name(after.mode())
            )));
        }
        if before.field_type == FieldType::Record {
            evolve(&before.fields, &after.fields, &format!("{path}."), mismatch)?;
        }
    }
    for after in new {
        let added = !old.iter().any(|c| c.name.eq_ignore_ascii_case(&after.name));
        if added && after.mode() == Mode::Required {
            return Err(mismatch(format!(
                "Cannot add required fields to an existing schema. (field: {prefix}{})",
                after.name
            )));
        }
        if added && after.field_type == FieldType::Record {
            // A new RECORD brings its own subfields; none of them may be REQUIRED either.
            evolve(
                &[],
                &after.fields,
                &format!("{prefix}{}.", after.name),
                mismatch,
            )?;
        }
    }
    Ok(())
}
