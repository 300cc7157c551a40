//! The one query the emulator answers, the shape the daemon's recovery sends: the highest value of
//! a column under equality filters,
//! `SELECT MAX(col) [AS alias] FROM \`p.d.t\` [WHERE a = 'x' AND b = 3 …]`.
//! Anything else is refused rather than guessed at.

use std::cmp::Ordering;

use base64::Engine as _;
use serde_json::{Value, json};

use super::RestError;
use crate::rows::{RenderOptions, timestamp_seconds_text};
use crate::store::{Store, TableRef};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

/// Why a query text is not the supported shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QueryError(String);

fn unsupported(what: impl Into<String>) -> QueryError {
    QueryError(what.into())
}

/// A literal on the right of `=`.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    String(String),
    Integer(i64),
    Float(f64),
    Bool(bool),
}

/// `SELECT MAX(column) FROM table WHERE filters…`.
#[derive(Debug, Clone, PartialEq)]
pub struct MaxQuery {
    pub column: String,
    pub alias: Option<String>,
    pub table: TableRef,
    pub filters: Vec<(String, Literal)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Str(String),
    Number(String),
    Punct(char),
}

fn tokenize(sql: &str) -> Result<Vec<Token>, QueryError> {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '`' {
            let end = chars[i + 1..]
                .iter()
                .position(|&x| x == '`')
                .ok_or_else(|| unsupported("unterminated quoted identifier"))?;
            out.push(Token::Quoted(chars[i + 1..i + 1 + end].iter().collect()));
            i += end + 2;
        } else if c == '\'' || c == '"' {
            let mut s = String::new();
            i += 1;
            loop {
                let ch = *chars
                    .get(i)
                    .ok_or_else(|| unsupported("unterminated string literal"))?;
                i += 1;
                if ch == c {
                    break;
                }
                if ch == '\\' {
                    let esc = *chars
                        .get(i)
                        .ok_or_else(|| unsupported("unterminated string literal"))?;
                    i += 1;
                    s.push(match esc {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        '0' => '\0',
                        other => other,
                    });
                } else {
                    s.push(ch);
                }
            }
            out.push(Token::Str(s));
        } else if c.is_ascii_digit()
            || (c == '-' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let start = i;
            i += 1;
            while i < chars.len()
                && (chars[i].is_ascii_digit() || matches!(chars[i], '.' | 'e' | 'E'))
            {
                i += 1;
            }
            out.push(Token::Number(chars[start..i].iter().collect()));
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Word(chars[start..i].iter().collect()));
        } else if matches!(c, '(' | ')' | '=' | '.' | ';' | '*' | ',') {
            out.push(Token::Punct(c));
            i += 1;
        } else {
            return Err(unsupported(format!("unexpected character {c:?}")));
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn keyword(&mut self, word: &str) -> bool {
        match self.peek() {
            Some(Token::Word(w)) if w.eq_ignore_ascii_case(word) => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }

    fn expect_keyword(&mut self, word: &str) -> Result<(), QueryError> {
        if self.keyword(word) {
            Ok(())
        } else {
            Err(unsupported(format!("expected {word}")))
        }
    }

    fn punct(&mut self, c: char) -> bool {
        if self.peek() == Some(&Token::Punct(c)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_punct(&mut self, c: char) -> Result<(), QueryError> {
        if self.punct(c) {
            Ok(())
        } else {
            Err(unsupported(format!("expected {c:?}")))
        }
    }

    /// A column name: bare or back-quoted, not a keyword of this grammar.
    fn identifier(&mut self) -> Result<String, QueryError> {
        match self.tokens.get(self.pos).cloned() {
            Some(Token::Quoted(s)) if !s.contains('.') => {
                self.pos += 1;
                Ok(s)
            }
            Some(Token::Word(w))
                if !["select", "from", "where", "and", "or", "as", "max"]
                    .iter()
                    .any(|k| w.eq_ignore_ascii_case(k)) =>
            {
                self.pos += 1;
                Ok(w)
            }
            _ => Err(unsupported("expected a column name")),
        }
    }

    /// `p.d.t`, `d.t`, back-quoted as a whole or per part.
    fn table(&mut self, default_project: &str) -> Result<TableRef, QueryError> {
        let mut parts: Vec<String> = Vec::new();
        loop {
            match self.tokens.get(self.pos).cloned() {
                Some(Token::Quoted(s)) => parts.extend(s.split('.').map(str::to_string)),
                Some(Token::Word(w)) => parts.push(w),
                _ => return Err(unsupported("expected a table name")),
            }
            self.pos += 1;
            if !self.punct('.') {
                break;
            }
        }
        match parts.as_slice() {
            [p, d, t] => Ok(TableRef::new(p.as_str(), d.as_str(), t.as_str())),
            [d, t] => Ok(TableRef::new(default_project, d.as_str(), t.as_str())),
            _ => Err(unsupported(
                "expected a table name of the form project.dataset.table",
            )),
        }
    }

    fn literal(&mut self) -> Result<Literal, QueryError> {
        let token = self
            .tokens
            .get(self.pos)
            .cloned()
            .ok_or_else(|| unsupported("expected a literal"))?;
        self.pos += 1;
        match token {
            Token::Str(s) => Ok(Literal::String(s)),
            Token::Number(n) => {
                if let Ok(i) = n.parse::<i64>() {
                    Ok(Literal::Integer(i))
                } else {
                    n.parse::<f64>()
                        .map(Literal::Float)
                        .map_err(|_| unsupported(format!("bad number {n}")))
                }
            }
            Token::Word(w) if w.eq_ignore_ascii_case("true") => Ok(Literal::Bool(true)),
            Token::Word(w) if w.eq_ignore_ascii_case("false") => Ok(Literal::Bool(false)),
            _ => Err(unsupported("expected a literal")),
        }
    }
}

impl MaxQuery {
    /// Parses the supported shape; `default_project` completes a `dataset.table` name.
    pub fn parse(sql: &str, default_project: &str) -> Result<MaxQuery, QueryError> {
        let mut p = Parser {
            tokens: tokenize(sql)?,
            pos: 0,
        };
        p.expect_keyword("select")?;
        p.expect_keyword("max")?;
        p.expect_punct('(')?;
        let column = p.identifier()?;
        p.expect_punct(')')?;
        let alias = if p.keyword("as") {
            Some(p.identifier()?)
        } else {
            None
        };
        p.expect_keyword("from")?;
        let table = p.table(default_project)?;
        let mut filters = Vec::new();
        if p.keyword("where") {
            loop {
                let name = p.identifier()?;
                p.expect_punct('=')?;
                filters.push((name, p.literal()?));
                if !p.keyword("and") {
                    break;
                }
            }
        }
        p.punct(';');
        if p.pos != p.tokens.len() {
            return Err(unsupported(
                "only SELECT MAX(column) FROM `project.dataset.table` WHERE column = literal AND … is supported",
            ));
        }
        Ok(MaxQuery {
            column,
            alias,
            table,
            filters,
        })
    }

    /// Scans the table's visible rows.
    pub(super) fn run(&self, store: &Store) -> Result<MaxResult, RestError> {
        let table = store.get_table(&self.table).ok_or_else(|| {
            RestError::NotFound(format!(
                "Not found: Table {} was not found in location US",
                self.table.legacy()
            ))
        })?;
        let (target, filters) = self.columns(&table.schema)?;
        let best = self.max(store, &target, &filters)?;
        Ok(MaxResult {
            name: self.alias.clone().unwrap_or_else(|| "f0_".into()),
            field_type: target.field_type,
            value: best,
        })
    }

    /// The column MAX reads and the filters' columns, each checked for the operation as
    /// BigQuery checks it.
    fn columns(
        &self,
        schema: &TableSchema,
    ) -> Result<(TableFieldSchema, Vec<(TableFieldSchema, Literal)>), RestError> {
        let find = |name: &str| -> Result<TableFieldSchema, RestError> {
            schema
                .fields
                .iter()
                .find(|c| c.name.eq_ignore_ascii_case(name))
                .cloned()
                .ok_or_else(|| {
                    RestError::InvalidQuery(format!("Unrecognized name: {name} at [1:1]"))
                })
        };
        let target = find(&self.column)?;
        if target.mode() == Mode::Repeated
            || matches!(
                target.field_type,
                FieldType::Record | FieldType::Geography | FieldType::Json | FieldType::Other(_)
            )
        {
            return Err(RestError::InvalidQuery(format!(
                "MAX is not defined for arguments of type {}",
                target.field_type.as_str()
            )));
        }
        let mut filters = Vec::with_capacity(self.filters.len());
        for (name, literal) in &self.filters {
            let column = find(name)?;
            if column.mode() == Mode::Repeated || column.field_type == FieldType::Record {
                return Err(RestError::InvalidQuery(format!(
                    "No matching signature for operator = for argument types: {}",
                    column.field_type.as_str()
                )));
            }
            filters.push((column, literal.clone()));
        }
        Ok((target, filters))
    }

    /// The greatest value of `target` among the visible rows that match every filter, page by
    /// page.
    fn max(
        &self,
        store: &Store,
        target: &TableFieldSchema,
        filters: &[(TableFieldSchema, Literal)],
    ) -> Result<Option<String>, RestError> {
        // Render only the columns the query reads: the target first, then the filters.
        let mut projection = TableSchema {
            fields: vec![target.clone()],
        };
        projection
            .fields
            .extend(filters.iter().map(|(c, _)| c.clone()));
        let int64 = RenderOptions {
            int64_timestamp: true,
        };
        let total = store.visible_row_count(&self.table)?;
        let mut best: Option<String> = None;
        let mut start = 0u64;
        while start < total {
            let page = store.read_visible_rows(&self.table, start, 10_000)?;
            if page.rows.is_empty() {
                break;
            }
            start += page.rows.len() as u64;
            for row in &page.rows {
                let rendered = row.codec.render_with(&row.data, &projection, int64);
                let cell = |i: usize| rendered["f"][i]["v"].as_str().map(str::to_string);
                let matches = filters.iter().enumerate().all(|(i, (column, literal))| {
                    cell(i + 1).is_some_and(|v| equals(&column.field_type, &v, literal))
                });
                if !matches {
                    continue;
                }
                if let Some(v) = cell(0)
                    && best
                        .as_deref()
                        .is_none_or(|b| compare(&target.field_type, &v, b) == Ordering::Greater)
                {
                    best = Some(v);
                }
            }
        }
        Ok(best)
    }
}

/// `cell = literal` with BigQuery's coercions for the types the recovery query uses.
fn equals(field_type: &FieldType, cell: &str, literal: &Literal) -> bool {
    match literal {
        Literal::String(s) => match field_type {
            FieldType::Bytes => base64::engine::general_purpose::STANDARD
                .decode(cell)
                .is_ok_and(|b| b == s.as_bytes()),
            _ => cell == s,
        },
        Literal::Integer(i) => match field_type {
            FieldType::Int64 => cell.parse::<i64>().is_ok_and(|v| v == *i),
            FieldType::Float64 => cell.parse::<f64>().is_ok_and(|v| v == *i as f64),
            FieldType::Numeric | FieldType::BigNumeric => {
                compare_decimal(cell, &i.to_string()) == Ordering::Equal
            }
            _ => false,
        },
        Literal::Float(f) => cell.parse::<f64>().is_ok_and(|v| v == *f),
        Literal::Bool(b) => {
            field_type == &FieldType::Bool && cell == if *b { "true" } else { "false" }
        }
    }
}

/// Orders two rendered cells of one column type.
fn compare(field_type: &FieldType, a: &str, b: &str) -> Ordering {
    match field_type {
        FieldType::Int64 | FieldType::Timestamp => match (a.parse::<i64>(), b.parse::<i64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            _ => a.cmp(b),
        },
        FieldType::Float64 => {
            let parse = |s: &str| match s {
                "Infinity" => f64::INFINITY,
                "-Infinity" => f64::NEG_INFINITY,
                // BigQuery orders NaN below every other value.
                "NaN" => f64::NEG_INFINITY,
                other => other.parse().unwrap_or(f64::NEG_INFINITY),
            };
            parse(a).total_cmp(&parse(b))
        }
        FieldType::Numeric | FieldType::BigNumeric => compare_decimal(a, b),
        FieldType::Bytes => {
            let decode = |s: &str| {
                base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .unwrap_or_default()
            };
            decode(a).cmp(&decode(b))
        }
        // DATE, DATETIME and TIME render with fixed-width fields; BOOL as false < true; STRING.
        _ => a.cmp(b),
    }
}

/// Compares two plain decimal strings (`-12.5`, `3`).
fn compare_decimal(a: &str, b: &str) -> Ordering {
    let split = |s: &str| {
        let (neg, digits) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
        let int = int.trim_start_matches('0').to_string();
        let frac = frac.trim_end_matches('0').to_string();
        let zero = int.is_empty() && frac.is_empty();
        (neg && !zero, int, frac)
    };
    let (an, ai, af) = split(a);
    let (bn, bi, bf) = split(b);
    let magnitude = ai
        .len()
        .cmp(&bi.len())
        .then_with(|| ai.cmp(&bi))
        .then_with(|| af.cmp(&bf));
    match (an, bn) {
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
        (false, false) => magnitude,
        (true, true) => magnitude.reverse(),
    }
}

/// The one-row, one-column result of a [`MaxQuery`].
#[derive(Debug, Clone, PartialEq)]
pub struct MaxResult {
    pub name: String,
    pub field_type: FieldType,
    /// Rendered with TIMESTAMP as integer microseconds; `None` when no row matched.
    pub value: Option<String>,
}

impl MaxResult {
    pub(super) fn schema_json(&self) -> Value {
        json!({ "fields": [TableFieldSchema::new(self.name.clone(), self.field_type.clone(), Mode::Nullable)] })
    }

    pub(super) fn row_json(&self, options: RenderOptions) -> Value {
        let value = match (&self.value, &self.field_type) {
            (None, _) => Value::Null,
            (Some(v), FieldType::Timestamp) if !options.int64_timestamp => v
                .parse::<i64>()
                .map(|micros| Value::String(timestamp_seconds_text(micros)))
                .unwrap_or(Value::Null),
            (Some(v), _) => Value::String(v.clone()),
        };
        json!({ "f": [{ "v": value }] })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_recovery_query_shape() {
        let q = MaxQuery::parse(
            "SELECT MAX(kafka_offset) FROM `proj.ds.events` WHERE topic = 'orders' AND partition = 3",
            "other",
        )
        .unwrap();
        assert_eq!(q.column, "kafka_offset");
        assert_eq!(q.table, TableRef::new("proj", "ds", "events"));
        assert_eq!(
            q.filters,
            vec![
                ("topic".into(), Literal::String("orders".into())),
                ("partition".into(), Literal::Integer(3)),
            ]
        );
    }

    #[test]
    fn accepts_quoted_parts_default_project_alias_negative_numbers_and_no_filter() {
        let q = MaxQuery::parse(
            "select max(`off`) as m from `ds`.`t` where `p` = -1 and s = \"it\\'s\";",
            "dflt",
        )
        .unwrap();
        assert_eq!(q.alias.as_deref(), Some("m"));
        assert_eq!(q.table, TableRef::new("dflt", "ds", "t"));
        assert_eq!(q.filters[0].1, Literal::Integer(-1));
        assert_eq!(q.filters[1].1, Literal::String("it's".into()));
        let q = MaxQuery::parse("SELECT MAX(x) FROM `p.d.t`", "p").unwrap();
        assert!(q.filters.is_empty());
    }

    #[test]
    fn refuses_every_other_query() {
        for sql in [
            "SELECT * FROM `p.d.t`",
            "SELECT MIN(x) FROM `p.d.t`",
            "SELECT MAX(x) FROM `p.d.t` WHERE a = 1 OR b = 2",
            "SELECT MAX(x) FROM `p.d.t` WHERE a > 1",
            "SELECT MAX(x) FROM `p.d.t` GROUP BY a",
            "SELECT MAX(x), MAX(y) FROM `p.d.t`",
            "DELETE FROM `p.d.t` WHERE true",
            "SELECT MAX(x) FROM `t`",
            "",
        ] {
            assert!(MaxQuery::parse(sql, "p").is_err(), "{sql}");
        }
    }

    #[test]
    fn decimals_compare_by_value() {
        assert_eq!(compare_decimal("10", "9.99"), Ordering::Greater);
        assert_eq!(compare_decimal("-10", "-9.99"), Ordering::Less);
        assert_eq!(compare_decimal("0.5", "0.50"), Ordering::Equal);
        assert_eq!(compare_decimal("-0", "0"), Ordering::Equal);
        assert_eq!(compare_decimal("-1", "0.1"), Ordering::Less);
    }

    #[test]
    fn integers_and_timestamps_compare_numerically_not_as_text() {
        assert_eq!(compare(&FieldType::Int64, "10", "9"), Ordering::Greater);
        assert_eq!(
            compare(&FieldType::Timestamp, "-5", "-40"),
            Ordering::Greater
        );
        assert_eq!(
            compare(&FieldType::Float64, "NaN", "-1e300"),
            Ordering::Less
        );
    }
}
