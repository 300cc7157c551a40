//! The SQL the emulator answers through `jobs.query` / `jobs.insert`, parsed by the `sqlparser`
//! crate (its BigQuery dialect) and evaluated here over the table's visible rows: the recovery
//! query (`SELECT MAX(col) … WHERE a = 'x' AND …`), the table checks of Google's client
//! integration tests (`COUNT(1)`, `COUNT(DISTINCT c)`, `SUM(IF(c IS NULL, 1, 0))`, `COUNTIF(…)`),
//! `SELECT *` / columns with `WHERE`, `ORDER BY`, `LIMIT`, and the DDL
//! `ALTER TABLE … ADD PRIMARY KEY (…) NOT ENFORCED`. What it does not evaluate is refused with
//! BigQuery's 400 `invalidQuery` naming the construct, never answered approximately
//! (docs/emulator.md, "REST and SQL").

mod expr;
mod select;
mod value;

use serde_json::{Value as Json, json};
use sqlparser::ast::{
    AlterTableOperation, Expr, ObjectName, ObjectNamePart, Statement, TableConstraint,
};
use sqlparser::dialect::BigQueryDialect;
use sqlparser::parser::Parser;

use super::RestError;
use super::constraints::check_constraints;
use crate::rows::{RenderOptions, timestamp_seconds_text};
use crate::store::{Store, TableRef};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};

/// The 400 for SQL the emulator does not run, naming what it met.
pub(super) fn unsupported(what: &str) -> RestError {
    RestError::InvalidQuery(format!(
        "Unsupported in the emulator: {what}. It runs SELECT over one table (columns, *, scalar \
         expressions, COUNT/COUNTIF/SUM/MAX/MIN/APPROX_COUNT_DISTINCT, WHERE, ORDER BY, LIMIT) \
         and ALTER TABLE … ADD PRIMARY KEY (…) NOT ENFORCED"
    ))
}

/// A statement's result: its schema and rows (cells rendered with TIMESTAMP as integer
/// microseconds), or none for DDL.
#[derive(Debug, Clone)]
pub(super) struct QueryOutput {
    pub statement_type: &'static str,
    pub schema: Option<Vec<TableFieldSchema>>,
    pub rows: Vec<Json>,
}

impl QueryOutput {
    fn select(fields: Vec<TableFieldSchema>, rows: Vec<Json>) -> QueryOutput {
        QueryOutput {
            statement_type: "SELECT",
            schema: Some(fields),
            rows,
        }
    }

    pub(super) fn schema_json(&self) -> Option<Json> {
        self.schema.as_ref().map(|f| json!({ "fields": f }))
    }

    /// Rows `start..start + max`, TIMESTAMP cells as the caller asked for them.
    pub(super) fn rows_json(&self, start: usize, max: usize, options: RenderOptions) -> Vec<Json> {
        let fields = self.schema.as_deref().unwrap_or_default();
        self.rows
            .iter()
            .skip(start)
            .take(max)
            .map(|row| {
                let mut row = row.clone();
                if !options.int64_timestamp {
                    seconds_timestamps(&mut row, fields);
                }
                row
            })
            .collect()
    }
}

/// Rewrites a row's TIMESTAMP cells (at any depth) from integer microseconds to the float
/// seconds the REST API writes without `useInt64Timestamp`.
fn seconds_timestamps(row: &mut Json, fields: &[TableFieldSchema]) {
    let Some(cells) = row.get_mut("f").and_then(Json::as_array_mut) else {
        return;
    };
    for (cell, field) in cells.iter_mut().zip(fields) {
        let v = &mut cell["v"];
        if field.mode() == Mode::Repeated {
            if let Some(items) = v.as_array_mut() {
                for item in items {
                    seconds_value(&mut item["v"], field);
                }
            }
        } else {
            seconds_value(v, field);
        }
    }
}

fn seconds_value(v: &mut Json, field: &TableFieldSchema) {
    match field.field_type {
        FieldType::Timestamp => {
            if let Some(micros) = v.as_str().and_then(|s| s.parse::<i64>().ok()) {
                *v = Json::String(timestamp_seconds_text(micros));
            }
        }
        FieldType::Record => seconds_timestamps(v, &field.fields),
        _ => {}
    }
}

/// `p.d.t`, `d.t` (in the job's project), back-quoted as a whole or per part.
pub(super) fn table_ref(name: &ObjectName, default_project: &str) -> Result<TableRef, RestError> {
    let mut parts: Vec<String> = Vec::new();
    for part in &name.0 {
        match part {
            ObjectNamePart::Identifier(i) => parts.extend(i.value.split('.').map(str::to_string)),
            ObjectNamePart::Function(_) => {
                return Err(unsupported(&format!("the table name {name}")));
            }
        }
    }
    match parts.as_slice() {
        [p, d, t] => Ok(TableRef::new(p.as_str(), d.as_str(), t.as_str())),
        [d, t] => Ok(TableRef::new(default_project, d.as_str(), t.as_str())),
        _ => Err(RestError::InvalidQuery(format!(
            "Table \"{name}\" must be qualified with a dataset (e.g. dataset.table)"
        ))),
    }
}

/// Parses and runs one statement.
pub(super) fn run(store: &Store, project: &str, sql: &str) -> Result<QueryOutput, RestError> {
    let statements = match Parser::parse_sql(&BigQueryDialect {}, sql) {
        Ok(s) => s,
        // A project id with dashes, unquoted (`ALTER TABLE my-project.d.t …`, as Google's Go
        // client writes a table's StandardSQLID), is a valid BigQuery table path that the
        // parser's ALTER TABLE does not take; its table-clause name parser does.
        Err(e) => vec![
            alter_table_dashed(sql)
                .map_err(|_| RestError::InvalidQuery(format!("Syntax error: {e}")))?,
        ],
    };
    let statement = match statements.as_slice() {
        [one] => one,
        [] => {
            return Err(RestError::InvalidQuery(
                "Syntax error: the query is empty".into(),
            ));
        }
        _ => return Err(unsupported("a script of several statements")),
    };
    match statement {
        Statement::Query(query) => select::run(store, project, query),
        Statement::AlterTable(alter) => {
            let [
                AlterTableOperation::AddConstraint {
                    constraint,
                    not_valid: false,
                },
            ] = alter.operations.as_slice()
            else {
                return Err(unsupported(&format!("{statement}")));
            };
            if alter.table_type.is_some()
                || alter.on_cluster.is_some()
                || alter.location.is_some()
                || alter.only
            {
                return Err(unsupported(&format!("{statement}")));
            }
            let r = table_ref(&alter.name, project)?;
            add_primary_key(store, &r, constraint, alter.if_exists)
        }
        other => {
            let text = other.to_string();
            let keyword: String = text
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ");
            Err(unsupported(&format!("the statement {keyword} …")))
        }
    }
}

/// `ALTER TABLE [IF EXISTS] name operation [;]`, the name read as a FROM clause reads it.
fn alter_table_dashed(sql: &str) -> Result<Statement, sqlparser::parser::ParserError> {
    use sqlparser::keywords::Keyword;
    use sqlparser::tokenizer::Token;
    let mut p = Parser::new(&BigQueryDialect {}).try_with_sql(sql)?;
    p.expect_keywords(&[Keyword::ALTER, Keyword::TABLE])?;
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = p.parse_object_name(true)?;
    let operation = p.parse_alter_table_operation()?;
    let _ = p.consume_token(&Token::SemiColon);
    p.expect_token(&Token::EOF)?;
    Ok(Statement::AlterTable(sqlparser::ast::AlterTable {
        name,
        if_exists,
        only: false,
        operations: vec![operation],
        location: None,
        on_cluster: None,
        table_type: None,
        end_token: sqlparser::ast::helpers::attached_token::AttachedToken::empty(),
    }))
}

/// `ALTER TABLE t ADD PRIMARY KEY (a, …) NOT ENFORCED`: the table's `tableConstraints.primaryKey`,
/// checked as `tables.patch` checks it. BigQuery has unenforced keys only.
fn add_primary_key(
    store: &Store,
    r: &TableRef,
    constraint: &TableConstraint,
    if_exists: bool,
) -> Result<QueryOutput, RestError> {
    let TableConstraint::PrimaryKey(pk) = constraint else {
        return Err(unsupported(&format!("ADD {constraint}")));
    };
    if pk.name.is_some()
        || pk.index_name.is_some()
        || pk.index_type.is_some()
        || !pk.include.is_empty()
        || !pk.index_options.is_empty()
    {
        return Err(unsupported(&format!("ADD {constraint}")));
    }
    let enforced = pk.characteristics.as_ref().and_then(|c| c.enforced);
    if enforced != Some(false) {
        return Err(RestError::InvalidQuery(
            "PRIMARY KEY must be NOT ENFORCED: BigQuery does not enforce primary keys".into(),
        ));
    }
    let mut names = Vec::with_capacity(pk.columns.len());
    for c in &pk.columns {
        match &c.column.expr {
            Expr::Identifier(i) if c.operator_class.is_none() => names.push(i.value.clone()),
            other => return Err(unsupported(&format!("the key part {other}"))),
        }
    }
    let ddl = QueryOutput {
        statement_type: "ALTER_TABLE",
        schema: None,
        rows: Vec::new(),
    };
    let changed = store.update_table(r, |table| {
        let mut constraints = table.table_constraints.clone().unwrap_or_else(|| json!({}));
        if constraints.get("primaryKey").is_some_and(|p| !p.is_null()) {
            return Err(RestError::InvalidQuery(format!(
                "Table {} already has a primary key",
                r.legacy()
            )));
        }
        constraints["primaryKey"] = json!({ "columns": names });
        check_constraints(&constraints, &table.schema)
            .map_err(|e| RestError::InvalidQuery(e.to_string()))?;
        table.table_constraints = Some(constraints);
        Ok(())
    });
    match changed {
        Ok(Ok(_)) => Ok(ddl),
        Ok(Err(e)) => Err(e),
        Err(crate::store::StoreError::TableNotFound { .. }) if if_exists => Ok(ddl),
        Err(crate::store::StoreError::TableNotFound { .. }) => Err(RestError::NotFound(format!(
            "Not found: Table {} was not found in location US",
            r.legacy()
        ))),
        Err(e) => Err(e.into()),
    }
}
