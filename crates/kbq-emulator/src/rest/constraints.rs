//! The CDC-related table options of the REST `Table` resource: `tableConstraints.primaryKey`
//! and `maxStaleness` (docs/cdc.md, "In the emulator").

use serde_json::Value;

use super::RestError;
use kbq_core::table_schema::{FieldType, Mode, TableSchema};

/// At most this many primary-key columns.
const MAX_KEY_COLUMNS: usize = 16;

/// Checks `tableConstraints` against the schema: a primary key of 1–16 distinct top-level,
/// non-repeated columns of the types a key may have.
pub(super) fn check_constraints(
    constraints: &Value,
    schema: &TableSchema,
) -> Result<(), RestError> {
    let invalid = |why: String| RestError::Invalid(format!("Invalid table constraints: {why}"));
    let Some(pk) = constraints.get("primaryKey").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let columns = pk
        .get("columns")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("primaryKey.columns must be a list of column names".into()))?;
    if columns.is_empty() {
        return Err(invalid("a primary key needs at least one column".into()));
    }
    if columns.len() > MAX_KEY_COLUMNS {
        return Err(invalid(format!(
            "a primary key has at most {MAX_KEY_COLUMNS} columns, got {}",
            columns.len()
        )));
    }
    let mut seen: Vec<String> = Vec::new();
    for column in columns {
        let name = column
            .as_str()
            .ok_or_else(|| invalid(format!("{column} is not a column name")))?;
        let field = schema
            .fields
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| invalid(format!("primary key column {name} is not in the schema")))?;
        if seen.iter().any(|s| s.eq_ignore_ascii_case(name)) {
            return Err(invalid(format!(
                "primary key column {name} is listed twice"
            )));
        }
        seen.push(name.to_string());
        let allowed = matches!(
            field.field_type,
            FieldType::BigNumeric
                | FieldType::Bool
                | FieldType::Date
                | FieldType::DateTime
                | FieldType::Int64
                | FieldType::Numeric
                | FieldType::String
                | FieldType::Timestamp
        );
        if !allowed || field.mode() == Mode::Repeated {
            return Err(invalid(format!(
                "primary key column {name} has type {}{}; a key column is one of BIGNUMERIC, BOOLEAN, DATE, DATETIME, INT64, NUMERIC, STRING, TIMESTAMP",
                if field.mode() == Mode::Repeated {
                    "REPEATED "
                } else {
                    ""
                },
                field.field_type.as_str()
            )));
        }
    }
    Ok(())
}

/// Checks `maxStaleness`: an SQL interval in the canonical `Y-M D H:M:S[.F]` form.
pub(super) fn check_max_staleness(value: &str) -> Result<(), RestError> {
    let parts: Vec<&str> = value.split(' ').collect();
    let number = |s: &str| {
        let s = s.strip_prefix('-').unwrap_or(s);
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
    };
    let ok = match parts.as_slice() {
        [ym, d, hms] => {
            let ym: Vec<&str> = ym.split('-').filter(|s| !s.is_empty()).collect();
            let hms: Vec<&str> = hms.split(':').collect();
            ym.len() == 2
                && ym.iter().all(|s| number(s))
                && number(d)
                && hms.len() == 3
                && number(hms[0])
                && number(hms[1])
                && hms[2]
                    .split_once('.')
                    .map_or(number(hms[2]), |(s, f)| number(s) && number(f))
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(RestError::Invalid(format!(
            "Invalid value for maxStaleness: {value} is not a valid interval (expected Y-M D H:M:S, e.g. 0-0 0 0:10:0)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_intervals_are_accepted_and_others_refused() {
        for ok in ["0-0 0 0:10:0", "0-0 0 0:0:30.5", "1-2 3 4:5:6"] {
            check_max_staleness(ok).unwrap();
        }
        for bad in ["", "600", "INTERVAL 10 MINUTE", "0-0 0 0:10", "a-0 0 0:0:0"] {
            assert!(check_max_staleness(bad).is_err(), "{bad}");
        }
    }
}
