//! `SELECT` over one table: `*`, columns and scalar expressions, or aggregates (`COUNT`,
//! `COUNT(DISTINCT …)`, `COUNTIF`, `SUM`, `MAX`, `MIN`, `APPROX_COUNT_DISTINCT`) over the whole
//! table; `WHERE`, `ORDER BY`, `LIMIT` / `OFFSET`. Every other clause is refused by name.

use std::cmp::Ordering;
use std::collections::HashSet;

use serde_json::{Value as Json, json};
use sqlparser::ast::{
    Expr, FunctionArgExpr, GroupByExpr, LimitClause, OrderByKind, OrderBySort, Query, Select,
    SelectItem, SetExpr, TableFactor, WildcardAdditionalOptions,
};

use super::expr::{E, Ty, eval, function_name, is_aggregate, plain_args, plan};
use super::value::{V, as_f64, distinct_key, order, read_cell, write_cell};
use super::{QueryOutput, table_ref, unsupported};
use crate::rest::RestError;
use crate::rows::RenderOptions;
use crate::store::Store;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

/// Rows read from the store per page while scanning.
const SCAN_PAGE_ROWS: usize = 10_000;

/// One output column of a row query.
enum Out {
    /// A column as stored (any type, records and arrays included).
    Column(usize),
    Expr(E),
}

enum Agg {
    /// `COUNT(*)` when `arg` is `None`.
    Count {
        arg: Option<E>,
        distinct: bool,
    },
    CountIf(E),
    Sum(E),
    Max(E),
    Min(E),
    /// A constant item beside the aggregates.
    Const(E),
}

enum Acc {
    Count(u64, Option<HashSet<String>>),
    SumInt(Option<i128>),
    SumFloat(Option<f64>),
    Best(Option<V>, bool),
    Const,
}

struct SortKey {
    /// Output column position, or an expression over the source row.
    by: Result<usize, E>,
    descending: bool,
    nulls_first: bool,
}

pub(super) fn run(store: &Store, project: &str, query: &Query) -> Result<QueryOutput, RestError> {
    check_query(query)?;
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Err(unsupported(
            "set operations, VALUES and parenthesised queries",
        ));
    };
    check_select(select)?;
    let relation = &select.from[0].relation;
    let TableFactor::Table {
        name, args: None, ..
    } = relation
    else {
        return Err(unsupported(&format!("the FROM item {relation}")));
    };
    let r = table_ref(name, project)?;
    let table = store.get_table(&r).ok_or_else(|| {
        RestError::NotFound(format!(
            "Not found: Table {} was not found in location US",
            r.legacy()
        ))
    })?;
    let columns = &table.schema.fields;
    let filter = match &select.selection {
        Some(w) => {
            let (e, t) = plan(w, columns)?;
            if !matches!(t, Ty::Null | Ty::Scalar(FieldType::Bool)) {
                return Err(RestError::InvalidQuery(format!(
                    "WHERE clause should return type BOOL, but returns {}",
                    t.name()
                )));
            }
            Some(e)
        }
        None => None,
    };
    let aggregate = select.projection.iter().any(|item| match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => is_aggregate(e),
        _ => false,
    });
    let scan = Scan {
        store,
        table: &r,
        schema: &table.schema,
        filter: filter.as_ref(),
    };
    if aggregate {
        if query.order_by.is_some() || query.limit_clause.is_some() {
            return Err(unsupported("ORDER BY or LIMIT on an aggregate query"));
        }
        run_aggregate(&scan, &select.projection)
    } else {
        run_rows(&scan, &select.projection, query)
    }
}

fn check_query(q: &Query) -> Result<(), RestError> {
    let refused = [
        (q.with.is_some(), "WITH"),
        (q.fetch.is_some(), "FETCH"),
        (!q.locks.is_empty(), "FOR UPDATE"),
        (q.for_clause.is_some(), "FOR"),
        (q.settings.is_some(), "SETTINGS"),
        (q.format_clause.is_some(), "FORMAT"),
        (!q.pipe_operators.is_empty(), "pipe syntax (|>)"),
    ];
    match refused.iter().find(|(present, _)| *present) {
        Some((_, what)) => Err(unsupported(what)),
        None => Ok(()),
    }
}

fn check_select(s: &Select) -> Result<(), RestError> {
    let grouped = match &s.group_by {
        GroupByExpr::All(_) => true,
        GroupByExpr::Expressions(e, m) => !e.is_empty() || !m.is_empty(),
    };
    let refused = [
        (s.distinct.is_some(), "SELECT DISTINCT"),
        (s.top.is_some(), "TOP"),
        (s.select_modifiers.is_some(), "select modifiers"),
        (s.exclude.is_some(), "SELECT * EXCLUDE"),
        (s.into.is_some(), "SELECT INTO"),
        (s.from.is_empty(), "SELECT without FROM"),
        (s.from.len() > 1, "a comma join (several FROM items)"),
        (s.from.iter().any(|f| !f.joins.is_empty()), "JOIN"),
        (!s.lateral_views.is_empty(), "LATERAL VIEW"),
        (s.prewhere.is_some(), "PREWHERE"),
        (!s.connect_by.is_empty(), "CONNECT BY"),
        (grouped, "GROUP BY"),
        (
            !s.cluster_by.is_empty() || !s.distribute_by.is_empty() || !s.sort_by.is_empty(),
            "CLUSTER/DISTRIBUTE/SORT BY",
        ),
        (s.having.is_some(), "HAVING"),
        (!s.named_window.is_empty(), "WINDOW"),
        (s.qualify.is_some(), "QUALIFY"),
        (s.value_table_mode.is_some(), "SELECT AS STRUCT/VALUE"),
    ];
    match refused.iter().find(|(present, _)| *present) {
        Some((_, what)) => Err(unsupported(what)),
        None => Ok(()),
    }
}

/// The rows a query reads: the table's visible rows that pass `WHERE`.
struct Scan<'a> {
    store: &'a Store,
    table: &'a crate::store::TableRef,
    schema: &'a TableSchema,
    filter: Option<&'a E>,
}

impl Scan<'_> {
    /// Calls `each` with every matching row: its rendered cells (TIMESTAMP as integer
    /// microseconds) and its values.
    fn for_each(
        &self,
        mut each: impl FnMut(&Json, &[V]) -> Result<(), RestError>,
    ) -> Result<(), RestError> {
        let int64 = RenderOptions {
            int64_timestamp: true,
        };
        let total = self.store.visible_row_count(self.table)?;
        let mut start = 0u64;
        while start < total {
            let page = self
                .store
                .read_visible_rows(self.table, start, SCAN_PAGE_ROWS)?;
            if page.rows.is_empty() {
                break;
            }
            start += page.rows.len() as u64;
            for row in &page.rows {
                let rendered = row.codec.render_with(&row.data, self.schema, int64);
                let values: Vec<V> = self
                    .schema
                    .fields
                    .iter()
                    .enumerate()
                    .map(|(i, f)| read_cell(&rendered["f"][i]["v"], f))
                    .collect();
                if let Some(filter) = self.filter
                    && eval(filter, &values)? != V::Bool(true)
                {
                    continue;
                }
                each(&rendered, &values)?;
            }
        }
        Ok(())
    }
}

/// Output column names: the alias, a bare column's name, else `f0_`, `f1_`, … in order.
struct Names {
    anonymous: usize,
    seen: HashSet<String>,
}

impl Names {
    fn new() -> Names {
        Names {
            anonymous: 0,
            seen: HashSet::new(),
        }
    }

    fn name(&mut self, alias: Option<&str>, expr: &Expr) -> Result<String, RestError> {
        let name = match (alias, expr) {
            (Some(a), _) => a.to_string(),
            (None, Expr::Identifier(i)) => i.value.clone(),
            _ => {
                let n = format!("f{}_", self.anonymous);
                self.anonymous += 1;
                n
            }
        };
        if !self.seen.insert(name.to_ascii_lowercase()) {
            return Err(RestError::InvalidQuery(format!(
                "Duplicate column names in the result are not supported. Found duplicate(s): {name}"
            )));
        }
        Ok(name)
    }
}

fn result_field(name: String, ty: &Ty, column: Option<&TableFieldSchema>) -> TableFieldSchema {
    if let Some(c) = column {
        let mut f = c.clone();
        f.name = name;
        f.default_value_expression = None;
        if f.mode() == Mode::Required {
            f.mode = Some(Mode::Nullable);
        }
        return f;
    }
    match ty {
        Ty::Null => TableFieldSchema::new(name, FieldType::Int64, Mode::Nullable),
        Ty::Scalar(t) => TableFieldSchema::new(name, t.clone(), Mode::Nullable),
        Ty::Array(t) => TableFieldSchema::new(name, t.clone(), Mode::Repeated),
    }
}

fn item(item: &SelectItem) -> Result<(&Expr, Option<&str>), RestError> {
    match item {
        SelectItem::UnnamedExpr(e) => Ok((e, None)),
        SelectItem::ExprWithAlias { expr, alias } => Ok((expr, Some(alias.value.as_str()))),
        SelectItem::Wildcard(options) => Err(unsupported(&format!("*{options}"))),
        other => Err(unsupported(&format!("the select item {other}"))),
    }
}

fn run_rows(
    scan: &Scan<'_>,
    projection: &[SelectItem],
    query: &Query,
) -> Result<QueryOutput, RestError> {
    let columns = &scan.schema.fields;
    let mut names = Names::new();
    let mut outs = Vec::new();
    let mut fields = Vec::new();
    for it in projection {
        if let SelectItem::Wildcard(options) = it
            && *options == WildcardAdditionalOptions::default()
        {
            for (i, c) in columns.iter().enumerate() {
                let name = names.name(Some(&c.name), &Expr::Identifier(c.name.as_str().into()))?;
                fields.push(result_field(name, &Ty::of_column(c), Some(c)));
                outs.push(Out::Column(i));
            }
            continue;
        }
        let (expr, alias) = item(it)?;
        let (e, ty) = plan(expr, columns)?;
        let name = names.name(alias, expr)?;
        match e {
            E::Column(i) => {
                fields.push(result_field(name, &ty, Some(&columns[i])));
                outs.push(Out::Column(i));
            }
            e => {
                if matches!(ty, Ty::Scalar(FieldType::Record)) {
                    return Err(unsupported("a computed STRUCT"));
                }
                fields.push(result_field(name, &ty, None));
                outs.push(Out::Expr(e));
            }
        }
    }
    let keys = sort_keys(query, &fields, columns)?;
    let (limit, offset) = limit_offset(query)?;

    let mut rows: Vec<(Vec<V>, Json)> = Vec::new();
    scan.for_each(|rendered, values| {
        let mut cells = Vec::with_capacity(outs.len());
        let mut out_values = Vec::with_capacity(outs.len());
        for out in &outs {
            match out {
                Out::Column(i) => {
                    cells.push(json!({ "v": rendered["f"][*i]["v"].clone() }));
                    out_values.push(values[*i].clone());
                }
                Out::Expr(e) => {
                    let v = eval(e, values)?;
                    cells.push(json!({ "v": write_cell(&v) }));
                    out_values.push(v);
                }
            }
        }
        let mut sort_values = Vec::with_capacity(keys.len());
        for k in &keys {
            sort_values.push(match &k.by {
                Ok(i) => out_values[*i].clone(),
                Err(e) => eval(e, values)?,
            });
        }
        rows.push((sort_values, json!({ "f": cells })));
        Ok(())
    })?;
    if !keys.is_empty() {
        rows.sort_by(|(a, _), (b, _)| {
            for (k, (x, y)) in keys.iter().zip(a.iter().zip(b)) {
                let o = match (x == &V::Null, y == &V::Null) {
                    (true, true) => Ordering::Equal,
                    (true, false) => {
                        if k.nulls_first {
                            Ordering::Less
                        } else {
                            Ordering::Greater
                        }
                    }
                    (false, true) => {
                        if k.nulls_first {
                            Ordering::Greater
                        } else {
                            Ordering::Less
                        }
                    }
                    (false, false) => {
                        let o = order(x, y);
                        if k.descending { o.reverse() } else { o }
                    }
                };
                if o != Ordering::Equal {
                    return o;
                }
            }
            Ordering::Equal
        });
    }
    let rows = rows
        .into_iter()
        .skip(offset)
        .take(limit.unwrap_or(usize::MAX))
        .map(|(_, row)| row)
        .collect();
    Ok(QueryOutput::select(fields, rows))
}

/// ORDER BY items: an output column's name or position, else an expression over the table.
/// NULLs sort first ascending and last descending, as in BigQuery, unless NULLS FIRST/LAST.
fn sort_keys(
    query: &Query,
    fields: &[TableFieldSchema],
    columns: &[TableFieldSchema],
) -> Result<Vec<SortKey>, RestError> {
    let Some(order_by) = &query.order_by else {
        return Ok(Vec::new());
    };
    if order_by.interpolate.is_some() {
        return Err(unsupported("ORDER BY … INTERPOLATE"));
    }
    let OrderByKind::Expressions(items) = &order_by.kind else {
        return Err(unsupported("ORDER BY ALL"));
    };
    let mut keys = Vec::with_capacity(items.len());
    for item in items {
        if item.with_fill.is_some() {
            return Err(unsupported("ORDER BY … WITH FILL"));
        }
        let descending = match item.options.sort {
            None | Some(OrderBySort::Asc) => false,
            Some(OrderBySort::Desc) => true,
            Some(_) => return Err(unsupported("ORDER BY … USING")),
        };
        let by = match &item.expr {
            Expr::Identifier(i) if fields.iter().any(|f| f.name.eq_ignore_ascii_case(&i.value)) => {
                Ok(fields
                    .iter()
                    .position(|f| f.name.eq_ignore_ascii_case(&i.value))
                    .unwrap())
            }
            Expr::Value(v) if matches!(v.value, sqlparser::ast::Value::Number(..)) => {
                let n: usize = v.value.to_string().parse().unwrap_or(0);
                if n == 0 || n > fields.len() {
                    return Err(RestError::InvalidQuery(format!(
                        "ORDER BY is out of SELECT column number range: {n}"
                    )));
                }
                Ok(n - 1)
            }
            other => {
                let (e, t) = plan(other, columns)?;
                if !matches!(t, Ty::Null | Ty::Scalar(_)) || t == Ty::Scalar(FieldType::Record) {
                    return Err(RestError::InvalidQuery(format!(
                        "ORDER BY does not support expressions of type {}",
                        t.name()
                    )));
                }
                Err(e)
            }
        };
        if let Ok(i) = by
            && (fields[i].mode() == Mode::Repeated || fields[i].field_type == FieldType::Record)
        {
            return Err(RestError::InvalidQuery(format!(
                "ORDER BY does not support expressions of type {}",
                Ty::of_column(&fields[i]).name()
            )));
        }
        keys.push(SortKey {
            by,
            descending,
            nulls_first: item.options.nulls_first.unwrap_or(!descending),
        });
    }
    Ok(keys)
}

fn count_literal(e: &Expr, what: &str) -> Result<usize, RestError> {
    match e {
        Expr::Value(v) => match &v.value {
            sqlparser::ast::Value::Number(n, _) => n.parse().map_err(|_| {
                RestError::InvalidQuery(format!(
                    "{what} expects a non-negative integer literal, got {n}"
                ))
            }),
            other => Err(RestError::InvalidQuery(format!(
                "{what} expects an integer literal, got {other}"
            ))),
        },
        other => Err(unsupported(&format!("{what} {other}"))),
    }
}

fn limit_offset(query: &Query) -> Result<(Option<usize>, usize), RestError> {
    match &query.limit_clause {
        None => Ok((None, 0)),
        Some(LimitClause::LimitOffset {
            limit,
            offset,
            limit_by,
        }) => {
            if !limit_by.is_empty() {
                return Err(unsupported("LIMIT … BY"));
            }
            let limit = limit
                .as_ref()
                .map(|l| count_literal(l, "LIMIT"))
                .transpose()?;
            let offset = offset
                .as_ref()
                .map(|o| count_literal(&o.value, "OFFSET"))
                .transpose()?
                .unwrap_or(0);
            Ok((limit, offset))
        }
        Some(LimitClause::OffsetCommaLimit { .. }) => Err(unsupported("LIMIT offset, count")),
    }
}

fn plan_aggregate(expr: &Expr, columns: &[TableFieldSchema]) -> Result<(Agg, Ty), RestError> {
    let Expr::Function(f) = expr else {
        unreachable!("only called on aggregates")
    };
    let name = function_name(f);
    let (args, distinct) = plain_args(f)?;
    let int = Ty::Scalar(FieldType::Int64);
    let one = |what: &str| -> Result<(E, Ty), RestError> {
        match args.as_slice() {
            [FunctionArgExpr::Expr(e)] => {
                if is_aggregate(e) {
                    return Err(RestError::InvalidQuery(
                        "Aggregations of aggregations are not allowed".into(),
                    ));
                }
                plan(e, columns)
            }
            _ => Err(RestError::InvalidQuery(format!(
                "Number of arguments does not match for aggregate function {what}"
            ))),
        }
    };
    let comparable = |t: &Ty, what: &str| match t {
        Ty::Scalar(FieldType::Record | FieldType::Json | FieldType::Geography) | Ty::Array(_) => {
            Err(RestError::InvalidQuery(format!(
                "{what} is not defined for arguments of type {}",
                t.name()
            )))
        }
        _ => Ok(()),
    };
    if distinct && !matches!(name.as_str(), "COUNT") {
        return Err(unsupported(&format!("{name}(DISTINCT …)")));
    }
    Ok(match name.as_str() {
        "COUNT" if matches!(args.as_slice(), [FunctionArgExpr::Wildcard]) && !distinct => (
            Agg::Count {
                arg: None,
                distinct: false,
            },
            int,
        ),
        "COUNT" | "APPROX_COUNT_DISTINCT" => {
            let (e, t) = one(&name)?;
            let distinct = distinct || name == "APPROX_COUNT_DISTINCT";
            if distinct {
                comparable(&t, &format!("{name}(DISTINCT)"))?;
            }
            (
                Agg::Count {
                    arg: Some(e),
                    distinct,
                },
                int,
            )
        }
        "COUNTIF" => {
            let (e, t) = one(&name)?;
            if !matches!(t, Ty::Null | Ty::Scalar(FieldType::Bool)) {
                return Err(RestError::InvalidQuery(format!(
                    "No matching signature for aggregate function COUNTIF for argument types: {}",
                    t.name()
                )));
            }
            (Agg::CountIf(e), int)
        }
        "SUM" => {
            let (e, t) = one(&name)?;
            match t {
                Ty::Null | Ty::Scalar(FieldType::Int64) => (Agg::Sum(e), int),
                Ty::Scalar(FieldType::Float64) => (Agg::Sum(e), t),
                Ty::Scalar(FieldType::Numeric | FieldType::BigNumeric) => {
                    return Err(unsupported("SUM of NUMERIC"));
                }
                other => {
                    return Err(RestError::InvalidQuery(format!(
                        "No matching signature for aggregate function SUM for argument types: {}",
                        other.name()
                    )));
                }
            }
        }
        "MAX" | "MIN" => {
            let (e, t) = one(&name)?;
            comparable(&t, &name)?;
            let t = if t == Ty::Null { int } else { t };
            (
                if name == "MAX" {
                    Agg::Max(e)
                } else {
                    Agg::Min(e)
                },
                t,
            )
        }
        other => return Err(unsupported(&format!("the aggregate function {other}"))),
    })
}

fn run_aggregate(scan: &Scan<'_>, projection: &[SelectItem]) -> Result<QueryOutput, RestError> {
    let columns = &scan.schema.fields;
    let mut names = Names::new();
    let mut aggs = Vec::new();
    let mut fields = Vec::new();
    for it in projection {
        if matches!(it, SelectItem::Wildcard(_)) {
            return Err(RestError::InvalidQuery(
                "SELECT * is not allowed beside aggregate functions without GROUP BY".into(),
            ));
        }
        let (expr, alias) = item(it)?;
        let (agg, ty) = if is_aggregate(expr) {
            plan_aggregate(expr, columns)?
        } else {
            let (e, ty) = plan(expr, columns)?;
            if let Some(c) = first_column(&e) {
                return Err(RestError::InvalidQuery(format!(
                    "SELECT list expression references column {} which is neither grouped nor aggregated",
                    columns[c].name
                )));
            }
            (Agg::Const(e), ty)
        };
        let name = names.name(alias, expr)?;
        fields.push(result_field(name, &ty, None));
        aggs.push(agg);
    }
    let mut accs: Vec<Acc> = aggs
        .iter()
        .zip(&fields)
        .map(|(a, f)| match a {
            Agg::Count { distinct, .. } => Acc::Count(0, distinct.then(HashSet::new)),
            Agg::CountIf(_) => Acc::Count(0, None),
            Agg::Sum(_) if f.field_type == FieldType::Float64 => Acc::SumFloat(None),
            Agg::Sum(_) => Acc::SumInt(None),
            Agg::Max(_) | Agg::Min(_) => Acc::Best(None, false),
            Agg::Const(_) => Acc::Const,
        })
        .collect();
    scan.for_each(|_, values| {
        for (agg, acc) in aggs.iter().zip(accs.iter_mut()) {
            accumulate(agg, acc, values)?;
        }
        Ok(())
    })?;
    let mut cells = Vec::with_capacity(aggs.len());
    for (agg, acc) in aggs.iter().zip(accs) {
        let v = match acc {
            Acc::Count(n, None) => V::Int(n as i64),
            Acc::Count(_, Some(set)) => V::Int(set.len() as i64),
            Acc::SumInt(None) | Acc::SumFloat(None) | Acc::Best(None, _) => V::Null,
            Acc::SumInt(Some(s)) => V::Int(
                i64::try_from(s)
                    .map_err(|_| RestError::InvalidQuery(format!("int64 overflow: SUM is {s}")))?,
            ),
            Acc::SumFloat(Some(s)) => V::Float(s),
            // MAX and MIN of a set that holds a NaN are NaN.
            Acc::Best(Some(_), true) => V::Float(f64::NAN),
            Acc::Best(Some(v), false) => v,
            Acc::Const => match agg {
                Agg::Const(e) => eval(e, &[])?,
                _ => V::Null,
            },
        };
        cells.push(json!({ "v": write_cell(&v) }));
    }
    Ok(QueryOutput::select(fields, vec![json!({ "f": cells })]))
}

fn first_column(e: &E) -> Option<usize> {
    match e {
        E::Column(i) => Some(*i),
        E::Lit(_) => None,
        E::IsNull(a, _) | E::Not(a) | E::Neg(a) | E::Call(_, a) => first_column(a),
        E::And(a, b) | E::Or(a, b) | E::Cmp(_, a, b) | E::Arith(_, a, b) => {
            first_column(a).or_else(|| first_column(b))
        }
        E::If(a, b, c) => first_column(a)
            .or_else(|| first_column(b))
            .or_else(|| first_column(c)),
    }
}

fn accumulate(agg: &Agg, acc: &mut Acc, values: &[V]) -> Result<(), RestError> {
    match (agg, acc) {
        (Agg::Count { arg: None, .. }, Acc::Count(n, _)) => *n += 1,
        (Agg::Count { arg: Some(e), .. }, Acc::Count(n, set)) => {
            let v = eval(e, values)?;
            if v != V::Null {
                match set {
                    Some(set) => {
                        set.insert(distinct_key(&v));
                    }
                    None => *n += 1,
                }
            }
        }
        (Agg::CountIf(e), Acc::Count(n, _)) if eval(e, values)? == V::Bool(true) => *n += 1,
        (Agg::Sum(e), Acc::SumInt(sum)) => {
            if let V::Int(i) = eval(e, values)? {
                *sum = Some(sum.unwrap_or(0) + i128::from(i));
            }
        }
        (Agg::Sum(e), Acc::SumFloat(sum)) => {
            let v = eval(e, values)?;
            if v != V::Null {
                *sum = Some(sum.unwrap_or(0.0) + as_f64(&v));
            }
        }
        (Agg::Max(e) | Agg::Min(e), Acc::Best(best, nan)) => {
            let v = eval(e, values)?;
            match &v {
                V::Null => {}
                V::Float(f) if f.is_nan() => {
                    *nan = true;
                    best.get_or_insert(v);
                }
                _ => {
                    let want = if matches!(agg, Agg::Max(_)) {
                        Ordering::Greater
                    } else {
                        Ordering::Less
                    };
                    if best.as_ref().is_none_or(|b| order(&v, b) == want) {
                        *best = Some(v);
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}
