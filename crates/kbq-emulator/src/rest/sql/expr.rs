//! Scalar expressions: the parsed SQL resolved against the table's columns and type-checked once
//! (so a query that BigQuery would refuse is refused even on an empty table), then evaluated
//! per row with SQL's three-valued logic.

use std::cmp::Ordering;

use sqlparser::ast::{
    BinaryOperator, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, UnaryOperator,
    Value as Literal,
};

use super::unsupported;
use super::value::{V, as_f64, compare};
use crate::rest::RestError;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};

/// The static type of an expression.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Ty {
    /// The NULL literal, which takes any type.
    Null,
    Scalar(FieldType),
    Array(FieldType),
}

impl Ty {
    pub(super) fn of_column(field: &TableFieldSchema) -> Ty {
        if field.mode() == Mode::Repeated {
            Ty::Array(field.field_type.clone())
        } else {
            Ty::Scalar(field.field_type.clone())
        }
    }

    pub(super) fn name(&self) -> String {
        match self {
            Ty::Null => "INT64".into(),
            Ty::Scalar(t) => sql_name(t).into(),
            Ty::Array(t) => format!("ARRAY<{}>", sql_name(t)),
        }
    }

    fn is_numeric(&self) -> bool {
        matches!(
            self,
            Ty::Scalar(
                FieldType::Int64 | FieldType::Float64 | FieldType::Numeric | FieldType::BigNumeric
            )
        )
    }
}

/// The GoogleSQL name of a column type (the REST schema's legacy names differ).
fn sql_name(t: &FieldType) -> &str {
    match t {
        FieldType::Int64 => "INT64",
        FieldType::Float64 => "FLOAT64",
        FieldType::Bool => "BOOL",
        FieldType::Record => "STRUCT",
        other => other.as_str(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Scalar {
    Abs,
    Sign,
    IsInf,
    IsNan,
    ArrayLength,
}

/// A planned scalar expression.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum E {
    Column(usize),
    Lit(V),
    IsNull(Box<E>, bool),
    Not(Box<E>),
    And(Box<E>, Box<E>),
    Or(Box<E>, Box<E>),
    Cmp(Cmp, Box<E>, Box<E>),
    Arith(Arith, Box<E>, Box<E>),
    Neg(Box<E>),
    If(Box<E>, Box<E>, Box<E>),
    Call(Scalar, Box<E>),
}

/// The aggregate functions the emulator computes, by name.
pub(super) const AGGREGATES: &[&str] = &[
    "COUNT",
    "COUNTIF",
    "SUM",
    "MAX",
    "MIN",
    "APPROX_COUNT_DISTINCT",
];

pub(super) fn function_name(f: &Function) -> String {
    f.name.to_string().to_ascii_uppercase()
}

pub(super) fn is_aggregate(expr: &Expr) -> bool {
    matches!(expr, Expr::Function(f) if AGGREGATES.contains(&function_name(f).as_str()))
}

/// The plain arguments of a call, refusing the clauses the emulator does not evaluate.
pub(super) fn plain_args(f: &Function) -> Result<(Vec<&FunctionArgExpr>, bool), RestError> {
    let name = function_name(f);
    if f.over.is_some() {
        return Err(unsupported(&format!("{name}(…) OVER (window functions)")));
    }
    if f.filter.is_some() || !f.within_group.is_empty() || f.null_treatment.is_some() {
        return Err(unsupported(&format!(
            "{name}(…) with FILTER, WITHIN GROUP or IGNORE/RESPECT NULLS"
        )));
    }
    if !matches!(f.parameters, FunctionArguments::None) {
        return Err(unsupported(&format!("{name} with parameters")));
    }
    match &f.args {
        FunctionArguments::None => Ok((Vec::new(), false)),
        FunctionArguments::Subquery(_) => Err(unsupported(&format!("{name}(subquery)"))),
        FunctionArguments::List(list) => {
            if !list.clauses.is_empty() {
                return Err(unsupported(&format!(
                    "{name}(…) with ORDER BY, LIMIT or HAVING inside"
                )));
            }
            let distinct = matches!(
                list.duplicate_treatment,
                Some(sqlparser::ast::DuplicateTreatment::Distinct)
            );
            let mut out = Vec::with_capacity(list.args.len());
            for arg in &list.args {
                match arg {
                    FunctionArg::Unnamed(a) => out.push(a),
                    _ => return Err(unsupported(&format!("named arguments to {name}"))),
                }
            }
            Ok((out, distinct))
        }
    }
}

fn no_signature(what: &str, types: &[&Ty]) -> RestError {
    let names: Vec<String> = types.iter().map(|t| t.name()).collect();
    RestError::InvalidQuery(format!(
        "No matching signature for {what} for argument types: {}",
        names.join(", ")
    ))
}

/// Resolves and type-checks a scalar expression against the table's columns.
pub(super) fn plan(expr: &Expr, columns: &[TableFieldSchema]) -> Result<(E, Ty), RestError> {
    match expr {
        Expr::Identifier(ident) => {
            let i = columns
                .iter()
                .position(|c| c.name.eq_ignore_ascii_case(&ident.value))
                .ok_or_else(|| {
                    RestError::InvalidQuery(format!("Unrecognized name: {}", ident.value))
                })?;
            Ok((E::Column(i), Ty::of_column(&columns[i])))
        }
        Expr::CompoundIdentifier(parts) => Err(unsupported(&format!(
            "the qualified name {} (field access or a table-qualified column)",
            parts
                .iter()
                .map(|p| p.value.as_str())
                .collect::<Vec<_>>()
                .join(".")
        ))),
        Expr::Nested(inner) => plan(inner, columns),
        Expr::Value(v) => literal(&v.value),
        Expr::IsNull(inner) | Expr::IsNotNull(inner) => {
            let (e, _) = plan(inner, columns)?;
            Ok((
                E::IsNull(Box::new(e), matches!(expr, Expr::IsNotNull(_))),
                Ty::Scalar(FieldType::Bool),
            ))
        }
        Expr::UnaryOp { op, expr: inner } => {
            let (e, t) = plan(inner, columns)?;
            match op {
                UnaryOperator::Not => {
                    boolean(&t, "operator NOT")?;
                    Ok((E::Not(Box::new(e)), Ty::Scalar(FieldType::Bool)))
                }
                UnaryOperator::Minus => {
                    // A negative number literal is a literal, so it may be i64::MIN.
                    if let E::Lit(v) = &e
                        && let Some(neg) = negate_literal(v)
                    {
                        return Ok((E::Lit(neg), t));
                    }
                    match &t {
                        Ty::Null | Ty::Scalar(FieldType::Int64 | FieldType::Float64) => {
                            Ok((E::Neg(Box::new(e)), t))
                        }
                        other => Err(no_signature("operator -", &[other])),
                    }
                }
                UnaryOperator::Plus if t.is_numeric() => Ok((e, t)),
                other => Err(unsupported(&format!("the unary operator {other}"))),
            }
        }
        Expr::BinaryOp { left, op, right } => {
            let (l, lt) = plan(left, columns)?;
            let (r, rt) = plan(right, columns)?;
            binary(op, l, lt, r, rt)
        }
        Expr::Function(f) => function(f, columns),
        other => Err(unsupported(&describe(other))),
    }
}

/// A short name for an expression the emulator does not evaluate.
fn describe(expr: &Expr) -> String {
    let text = expr.to_string();
    let short: String = text.chars().take(60).collect();
    if short.len() < text.len() {
        format!("the expression {short}…")
    } else {
        format!("the expression {short}")
    }
}

fn negate_literal(v: &V) -> Option<V> {
    match v {
        V::Int(i) => i.checked_neg().map(V::Int),
        V::Float(f) => Some(V::Float(-f)),
        _ => None,
    }
}

fn literal(v: &Literal) -> Result<(E, Ty), RestError> {
    Ok(match v {
        Literal::Number(text, _) => {
            if let Ok(i) = text.parse::<i64>() {
                (E::Lit(V::Int(i)), Ty::Scalar(FieldType::Int64))
            } else if text.bytes().all(|b| b.is_ascii_digit()) {
                // BigQuery reads an integer literal beyond INT64 as an error, not a FLOAT64.
                return Err(RestError::InvalidQuery(format!(
                    "Invalid integer literal: {text}"
                )));
            } else {
                let f: f64 = text.parse().map_err(|_| {
                    RestError::InvalidQuery(format!("Invalid floating point literal: {text}"))
                })?;
                (E::Lit(V::Float(f)), Ty::Scalar(FieldType::Float64))
            }
        }
        Literal::SingleQuotedString(s)
        | Literal::DoubleQuotedString(s)
        | Literal::TripleSingleQuotedString(s)
        | Literal::TripleDoubleQuotedString(s)
        | Literal::SingleQuotedRawStringLiteral(s)
        | Literal::DoubleQuotedRawStringLiteral(s) => {
            (E::Lit(V::Str(s.clone())), Ty::Scalar(FieldType::String))
        }
        Literal::SingleQuotedByteStringLiteral(s) | Literal::DoubleQuotedByteStringLiteral(s) => (
            E::Lit(V::Bytes(s.as_bytes().to_vec())),
            Ty::Scalar(FieldType::Bytes),
        ),
        Literal::Boolean(b) => (E::Lit(V::Bool(*b)), Ty::Scalar(FieldType::Bool)),
        Literal::Null => (E::Lit(V::Null), Ty::Null),
        other => return Err(unsupported(&format!("the literal {other}"))),
    })
}

fn boolean(t: &Ty, what: &str) -> Result<(), RestError> {
    match t {
        Ty::Null | Ty::Scalar(FieldType::Bool) => Ok(()),
        other => Err(no_signature(what, &[other])),
    }
}

/// Whether `=`, `<` … are defined between the two types, as BigQuery types them; a string
/// literal that BigQuery would coerce to a date or time type is refused, not compared as text.
fn comparable(op: &str, a: &Ty, b: &Ty) -> Result<(), RestError> {
    use FieldType as F;
    let (x, y) = match (a, b) {
        (Ty::Null, _) | (_, Ty::Null) => return Ok(()),
        (Ty::Scalar(x), Ty::Scalar(y)) => (x, y),
        _ => return Err(no_signature(&format!("operator {op}"), &[a, b])),
    };
    let numeric = |t: &F| matches!(t, F::Int64 | F::Float64 | F::Numeric | F::BigNumeric);
    let ordered = |t: &F| {
        matches!(
            t,
            F::String | F::Bytes | F::Bool | F::Timestamp | F::Date | F::Time | F::DateTime
        )
    };
    if (numeric(x) && numeric(y)) || (x == y && ordered(x)) {
        return Ok(());
    }
    let temporal = |t: &F| matches!(t, F::Timestamp | F::Date | F::Time | F::DateTime);
    if (*x == F::String && temporal(y)) || (*y == F::String && temporal(x)) {
        return Err(unsupported(&format!(
            "comparing a STRING with a {} (BigQuery coerces a string literal; the emulator does not)",
            if temporal(x) {
                sql_name(x)
            } else {
                sql_name(y)
            }
        )));
    }
    Err(no_signature(&format!("operator {op}"), &[a, b]))
}

fn binary(op: &BinaryOperator, l: E, lt: Ty, r: E, rt: Ty) -> Result<(E, Ty), RestError> {
    let b = |e| Box::new(e);
    let cmp = |c: Cmp, name: &str| -> Result<(E, Ty), RestError> {
        comparable(name, &lt, &rt)?;
        Ok((
            E::Cmp(c, b(l.clone()), b(r.clone())),
            Ty::Scalar(FieldType::Bool),
        ))
    };
    match op {
        BinaryOperator::Eq => cmp(Cmp::Eq, "="),
        BinaryOperator::NotEq => cmp(Cmp::Ne, "!="),
        BinaryOperator::Lt => cmp(Cmp::Lt, "<"),
        BinaryOperator::LtEq => cmp(Cmp::Le, "<="),
        BinaryOperator::Gt => cmp(Cmp::Gt, ">"),
        BinaryOperator::GtEq => cmp(Cmp::Ge, ">="),
        BinaryOperator::And | BinaryOperator::Or => {
            let name = if *op == BinaryOperator::And {
                "operator AND"
            } else {
                "operator OR"
            };
            boolean(&lt, name)?;
            boolean(&rt, name)?;
            let e = if *op == BinaryOperator::And {
                E::And(b(l), b(r))
            } else {
                E::Or(b(l), b(r))
            };
            Ok((e, Ty::Scalar(FieldType::Bool)))
        }
        BinaryOperator::Plus
        | BinaryOperator::Minus
        | BinaryOperator::Multiply
        | BinaryOperator::Divide => {
            let (a, sym) = match op {
                BinaryOperator::Plus => (Arith::Add, "+"),
                BinaryOperator::Minus => (Arith::Sub, "-"),
                BinaryOperator::Multiply => (Arith::Mul, "*"),
                _ => (Arith::Div, "/"),
            };
            let int_or_float = |t: &Ty| {
                matches!(
                    t,
                    Ty::Null | Ty::Scalar(FieldType::Int64 | FieldType::Float64)
                )
            };
            if !int_or_float(&lt) || !int_or_float(&rt) {
                if lt.is_numeric() && rt.is_numeric() {
                    return Err(unsupported(&format!("NUMERIC arithmetic (operator {sym})")));
                }
                return Err(no_signature(&format!("operator {sym}"), &[&lt, &rt]));
            }
            let float = a == Arith::Div
                || lt == Ty::Scalar(FieldType::Float64)
                || rt == Ty::Scalar(FieldType::Float64);
            let t = Ty::Scalar(if float {
                FieldType::Float64
            } else {
                FieldType::Int64
            });
            Ok((E::Arith(a, b(l), b(r)), t))
        }
        other => Err(unsupported(&format!("the operator {other}"))),
    }
}

/// The common type of IF's two branches.
fn supertype(a: &Ty, b: &Ty) -> Option<Ty> {
    match (a, b) {
        (Ty::Null, t) | (t, Ty::Null) => Some(t.clone()),
        (x, y) if x == y => Some(x.clone()),
        (Ty::Scalar(FieldType::Int64), Ty::Scalar(FieldType::Float64))
        | (Ty::Scalar(FieldType::Float64), Ty::Scalar(FieldType::Int64)) => {
            Some(Ty::Scalar(FieldType::Float64))
        }
        _ => None,
    }
}

fn function(f: &Function, columns: &[TableFieldSchema]) -> Result<(E, Ty), RestError> {
    let name = function_name(f);
    if AGGREGATES.contains(&name.as_str()) {
        return Err(unsupported(&format!(
            "{name} inside another expression or clause (an aggregate is served only as a whole SELECT item)"
        )));
    }
    let (args, distinct) = plain_args(f)?;
    if distinct {
        return Err(unsupported(&format!("{name}(DISTINCT …)")));
    }
    let mut planned = Vec::with_capacity(args.len());
    for arg in &args {
        match arg {
            FunctionArgExpr::Expr(e) => planned.push(plan(e, columns)?),
            _ => return Err(unsupported(&format!("{name}(*)"))),
        }
    }
    let arity = |n: usize| {
        if planned.len() == n {
            Ok(())
        } else {
            Err(RestError::InvalidQuery(format!(
                "Number of arguments does not match for function {name}. Supported signature takes {n} argument(s), got {}",
                planned.len()
            )))
        }
    };
    let types: Vec<Ty> = planned.iter().map(|(_, t)| t.clone()).collect();
    let type_refs: Vec<&Ty> = types.iter().collect();
    match name.as_str() {
        "IF" => {
            arity(3)?;
            boolean(&types[0], "function IF")?;
            let t = supertype(&types[1], &types[2])
                .ok_or_else(|| no_signature("function IF", &type_refs))?;
            let mut it = planned.into_iter().map(|(e, _)| Box::new(e));
            let (c, a, b) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
            Ok((E::If(c, a, b), t))
        }
        "ABS" | "SIGN" | "IS_INF" | "IS_NAN" => {
            arity(1)?;
            let ok = matches!(
                types[0],
                Ty::Null | Ty::Scalar(FieldType::Int64 | FieldType::Float64)
            );
            if !ok {
                if types[0].is_numeric() {
                    return Err(unsupported(&format!("{name} of NUMERIC")));
                }
                return Err(no_signature(&format!("function {name}"), &type_refs));
            }
            let (s, t) = match name.as_str() {
                "ABS" => (Scalar::Abs, types[0].clone()),
                "SIGN" => (Scalar::Sign, types[0].clone()),
                "IS_INF" => (Scalar::IsInf, Ty::Scalar(FieldType::Bool)),
                _ => (Scalar::IsNan, Ty::Scalar(FieldType::Bool)),
            };
            let (e, _) = planned.into_iter().next().unwrap();
            Ok((E::Call(s, Box::new(e)), t))
        }
        "ARRAY_LENGTH" => {
            arity(1)?;
            if !matches!(types[0], Ty::Null | Ty::Array(_)) {
                return Err(no_signature("function ARRAY_LENGTH", &type_refs));
            }
            let (e, _) = planned.into_iter().next().unwrap();
            Ok((
                E::Call(Scalar::ArrayLength, Box::new(e)),
                Ty::Scalar(FieldType::Int64),
            ))
        }
        _ => Err(unsupported(&format!("the function {name}"))),
    }
}

fn overflow(what: &str) -> RestError {
    RestError::InvalidQuery(format!("int64 overflow: {what}"))
}

fn truth(v: &V) -> Option<bool> {
    match v {
        V::Bool(b) => Some(*b),
        _ => None,
    }
}

/// Evaluates a planned expression over one row's values (indexed as the table's columns).
pub(super) fn eval(e: &E, row: &[V]) -> Result<V, RestError> {
    Ok(match e {
        E::Column(i) => row[*i].clone(),
        E::Lit(v) => v.clone(),
        E::IsNull(inner, negated) => V::Bool((eval(inner, row)? == V::Null) != *negated),
        E::Not(inner) => match truth(&eval(inner, row)?) {
            Some(b) => V::Bool(!b),
            None => V::Null,
        },
        E::And(a, b) => match (truth(&eval(a, row)?), truth(&eval(b, row)?)) {
            (Some(false), _) | (_, Some(false)) => V::Bool(false),
            (Some(true), Some(true)) => V::Bool(true),
            _ => V::Null,
        },
        E::Or(a, b) => match (truth(&eval(a, row)?), truth(&eval(b, row)?)) {
            (Some(true), _) | (_, Some(true)) => V::Bool(true),
            (Some(false), Some(false)) => V::Bool(false),
            _ => V::Null,
        },
        E::Cmp(op, a, b) => {
            let (x, y) = (eval(a, row)?, eval(b, row)?);
            if x == V::Null || y == V::Null {
                return Ok(V::Null);
            }
            // An unordered pair (a NaN) is unequal and neither less nor greater.
            let o = compare(&x, &y);
            V::Bool(match op {
                Cmp::Eq => o == Some(Ordering::Equal),
                Cmp::Ne => o != Some(Ordering::Equal),
                Cmp::Lt => o == Some(Ordering::Less),
                Cmp::Le => matches!(o, Some(Ordering::Less | Ordering::Equal)),
                Cmp::Gt => o == Some(Ordering::Greater),
                Cmp::Ge => matches!(o, Some(Ordering::Greater | Ordering::Equal)),
            })
        }
        E::Arith(op, a, b) => arith(*op, eval(a, row)?, eval(b, row)?)?,
        E::Neg(inner) => match eval(inner, row)? {
            V::Int(i) => V::Int(
                i.checked_neg()
                    .ok_or_else(|| overflow(&format!("-({i})")))?,
            ),
            V::Float(f) => V::Float(-f),
            _ => V::Null,
        },
        E::If(c, a, b) => {
            if truth(&eval(c, row)?) == Some(true) {
                eval(a, row)?
            } else {
                eval(b, row)?
            }
        }
        E::Call(s, inner) => call(*s, eval(inner, row)?)?,
    })
}

fn arith(op: Arith, x: V, y: V) -> Result<V, RestError> {
    if x == V::Null || y == V::Null {
        return Ok(V::Null);
    }
    if let (V::Int(a), V::Int(b), true) = (&x, &y, op != Arith::Div) {
        let (r, sym) = match op {
            Arith::Add => (a.checked_add(*b), "+"),
            Arith::Sub => (a.checked_sub(*b), "-"),
            _ => (a.checked_mul(*b), "*"),
        };
        return r
            .map(V::Int)
            .ok_or_else(|| overflow(&format!("{a} {sym} {b}")));
    }
    let (a, b) = (as_f64(&x), as_f64(&y));
    let r = match op {
        Arith::Add => a + b,
        Arith::Sub => a - b,
        Arith::Mul => a * b,
        Arith::Div => {
            if b == 0.0 {
                return Err(RestError::InvalidQuery(format!(
                    "division by zero: {} / {}",
                    crate::rows::format_float(a),
                    crate::rows::format_float(b)
                )));
            }
            a / b
        }
    };
    if r.is_infinite() && a.is_finite() && b.is_finite() {
        return Err(RestError::InvalidQuery("Floating point overflow".into()));
    }
    Ok(V::Float(r))
}

fn call(s: Scalar, v: V) -> Result<V, RestError> {
    Ok(match (s, v) {
        (_, V::Null) => V::Null,
        (Scalar::Abs, V::Int(i)) => V::Int(
            i.checked_abs()
                .ok_or_else(|| overflow(&format!("ABS({i})")))?,
        ),
        (Scalar::Abs, V::Float(f)) => V::Float(f.abs()),
        (Scalar::Sign, V::Int(i)) => V::Int(i.signum()),
        (Scalar::Sign, V::Float(f)) => V::Float(if f.is_nan() || f == 0.0 {
            f
        } else {
            f.signum()
        }),
        (Scalar::IsInf, v) => V::Bool(as_f64(&v).is_infinite()),
        (Scalar::IsNan, v) => V::Bool(as_f64(&v).is_nan()),
        (Scalar::ArrayLength, V::Array(items)) => V::Int(items.len() as i64),
        _ => V::Null,
    })
}
