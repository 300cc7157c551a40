//! Column default values (`defaultValueExpression`) as the Storage Write API applies them
//! (docs/emulator.md, "Column defaults"): a top-level column the writer schema omits gets its
//! default; a field the writer schema has but a row leaves unset gets it only when the request's
//! missing-value interpretation for that column is `DEFAULT_VALUE` (else NULL); a proto2
//! `default_value` of the descriptor comes first.
//!
//! A default is written into the stored row as one more field, numbered past the descriptor's
//! fields, so that a row's bytes and its codec still say everything about it (rendering, the row
//! log and a restart need nothing else). The expression is read once, when the codec is compiled;
//! functions (`CURRENT_TIMESTAMP()`, `GENERATE_UUID()`, …) are evaluated per append.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kbq_core::table_schema::{Mode, TableFieldSchema};
use prost::encoding::{WireType, encode_key, encode_varint};

use super::civil::{civil_from_days, format_date, format_time, parse_timestamp};
use super::validate::check_value;
use super::wire::{Reader, Wire};
use super::{ColumnKind, FieldPlan, MessagePlan, ProtoKind, RowCodec, SchemaError, ValueCheck};

/// How a request reads a field the writer schema has and a row leaves unset
/// (`AppendRowsRequest.MissingValueInterpretation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Interpretation {
    #[default]
    Null,
    Default,
}

/// The missing-value interpretations in force for one request: the per-column map of the request
/// and the connection's sticky default.
#[derive(Debug, Clone, Default)]
pub struct MissingValues {
    pub default: Interpretation,
    /// Lower-case top-level column name → interpretation.
    pub columns: HashMap<String, Interpretation>,
}

impl MissingValues {
    fn of(&self, column: &str) -> Interpretation {
        self.columns.get(column).copied().unwrap_or(self.default)
    }
}

/// A default expression, read once.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum DefaultValue {
    /// `NULL`: nothing to write.
    Null,
    /// A literal, in the wire form of the fill field.
    Literal(Vec<u8>),
    CurrentTimestamp,
    CurrentDate,
    CurrentDatetime,
    CurrentTime,
    GenerateUuid,
    Rand,
    /// An expression this emulator does not evaluate (STRUCT and ARRAY defaults,
    /// `ST_GEOGPOINT`, `SESSION_USER`, …): a row that needs it is refused, never given NULL.
    Unsupported(String),
}

/// One top-level column with a default.
#[derive(Debug, Clone)]
pub(super) struct ColumnDefault {
    /// Column name as the table spells it.
    name: String,
    value: DefaultValue,
    /// The writer schema's field for this column, if it has one (index into the root's fields).
    field: Option<usize>,
    /// Field number of the fill field in stored rows (`None`: no fill field, the value is
    /// unsupported).
    fill_number: Option<u32>,
    /// The proto kind of the fill field.
    fill_kind: ProtoKind,
    required: bool,
}

/// The fill field's proto kind for a column type: the plainest encoding the column accepts.
fn fill_kind(column: &ColumnKind) -> Option<ProtoKind> {
    Some(match column {
        ColumnKind::Int64 | ColumnKind::Timestamp => ProtoKind::Int64,
        ColumnKind::Float64 => ProtoKind::Double,
        ColumnKind::Bool => ProtoKind::Bool,
        ColumnKind::Bytes { .. } => ProtoKind::Bytes,
        ColumnKind::String { .. }
        | ColumnKind::Numeric(_)
        | ColumnKind::Date
        | ColumnKind::DateTime
        | ColumnKind::Time
        | ColumnKind::Json
        | ColumnKind::Geography => ProtoKind::String,
        ColumnKind::Record | ColumnKind::Other(_) => return None,
    })
}

/// Adds the defaults of `columns` (the table's top level) to the compiled root: a fill field per
/// scalar column with a default. A REQUIRED column the writer schema omits and that has no
/// default is refused: BigQuery could only write NULL there.
pub(super) fn plan_defaults(
    root: &mut MessagePlan,
    columns: &[TableFieldSchema],
) -> Result<Vec<ColumnDefault>, SchemaError> {
    let mut next_number = root.max_number() + 1;
    let mut defaults = Vec::new();
    let mut missing_required = Vec::new();
    for column in columns {
        let lower = column.name.to_lowercase();
        let field = root.by_column.get(&lower).copied();
        let Some(expression) = column.default_value_expression.as_deref() else {
            if field.is_none() && column.mode() == Mode::Required {
                missing_required.push(column.name.clone());
            }
            continue;
        };
        let kind = super::compile::column_kind(column);
        let scalar = column.mode() != Mode::Repeated;
        let fill = fill_kind(&kind).filter(|_| scalar);
        let value = match fill {
            Some(proto) => read_expression(expression, proto, &kind, &column.name),
            None => DefaultValue::Unsupported(expression.to_string()),
        };
        let fill_number = fill.map(|proto| {
            let number = next_number;
            next_number += 1;
            let index = root.fields.len();
            root.fields.push(FieldPlan {
                path: column.name.clone(),
                proto,
                repeated: false,
                check: ValueCheck::of(proto, &kind),
                column: kind.clone(),
                required_slot: None,
                enum_values: Vec::new(),
                message: None,
                default: None,
            });
            root.number(number, index);
            root.fills.insert(lower.clone(), index);
            number
        });
        defaults.push(ColumnDefault {
            name: column.name.clone(),
            value,
            field,
            fill_number,
            fill_kind: fill.unwrap_or(ProtoKind::String),
            required: column.mode() == Mode::Required,
        });
    }
    root.large_numbers.sort_unstable();
    if !missing_required.is_empty() {
        return Err(SchemaError::MissingRequired {
            columns: missing_required,
        });
    }
    Ok(defaults)
}

/// Reads a default expression for a fill field of kind `proto`: a literal (checked against the
/// column as a row value would be), `NULL`, or one of the functions BigQuery allows.
fn read_expression(text: &str, proto: ProtoKind, column: &ColumnKind, name: &str) -> DefaultValue {
    let trimmed = text.trim();
    let upper = trimmed.to_ascii_uppercase();
    let function = upper.strip_suffix("()").unwrap_or(&upper).trim_end();
    let value = match function {
        "NULL" => return DefaultValue::Null,
        "CURRENT_TIMESTAMP" if *column == ColumnKind::Timestamp => DefaultValue::CurrentTimestamp,
        "CURRENT_DATE" if *column == ColumnKind::Date => DefaultValue::CurrentDate,
        "CURRENT_DATETIME" if *column == ColumnKind::DateTime => DefaultValue::CurrentDatetime,
        "CURRENT_TIME" if *column == ColumnKind::Time => DefaultValue::CurrentTime,
        "GENERATE_UUID" if matches!(column, ColumnKind::String { .. }) => {
            DefaultValue::GenerateUuid
        }
        "RAND" if *column == ColumnKind::Float64 => DefaultValue::Rand,
        _ => match literal(trimmed, proto, column) {
            Some(bytes) => DefaultValue::Literal(bytes),
            None => return DefaultValue::Unsupported(text.to_string()),
        },
    };
    if let DefaultValue::Literal(bytes) = &value {
        // A literal the column would refuse as a row value is not written either.
        let plan = FieldPlan {
            path: name.to_string(),
            proto,
            repeated: false,
            check: ValueCheck::Full,
            column: column.clone(),
            required_slot: None,
            enum_values: Vec::new(),
            message: None,
            default: None,
        };
        if let Some(wire) = wire_of(proto, bytes)
            && check_value(&plan, wire).is_err()
        {
            return DefaultValue::Unsupported(text.to_string());
        }
    }
    value
}

/// The wire value of a fill field's encoded payload (the bytes after its key).
fn wire_of(proto: ProtoKind, payload: &[u8]) -> Option<Wire<'_>> {
    let mut reader = Reader::new(payload);
    match proto {
        ProtoKind::Double => Some(Wire::I64(u64::from_le_bytes(payload.try_into().ok()?))),
        ProtoKind::String | ProtoKind::Bytes => {
            let len = reader.varint().ok()? as usize;
            payload.get(reader.pos..reader.pos + len).map(Wire::Len)
        }
        _ => reader.varint().ok().map(Wire::Varint),
    }
}

/// A SQL literal as the payload of a fill field of kind `proto`.
fn literal(text: &str, proto: ProtoKind, column: &ColumnKind) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match proto {
        ProtoKind::Int64 if *column == ColumnKind::Timestamp => {
            let quoted = typed_string(text, "TIMESTAMP")?;
            encode_varint(parse_timestamp(quoted.as_bytes())? as u64, &mut out);
        }
        ProtoKind::Int64 => encode_varint(text.parse::<i64>().ok()? as u64, &mut out),
        ProtoKind::Double => {
            let v: f64 = text.parse().ok()?;
            out.extend_from_slice(&v.to_bits().to_le_bytes());
        }
        ProtoKind::Bool => match text.to_ascii_uppercase().as_str() {
            "TRUE" => encode_varint(1, &mut out),
            "FALSE" => encode_varint(0, &mut out),
            _ => return None,
        },
        ProtoKind::String => {
            let value = match column {
                ColumnKind::Numeric(n) => {
                    let prefix = if n.big { "BIGNUMERIC" } else { "NUMERIC" };
                    typed_string(text, prefix).or_else(|| {
                        text.bytes()
                            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
                            .then(|| text.to_string())
                    })?
                }
                ColumnKind::Date => typed_string(text, "DATE")?,
                ColumnKind::DateTime => typed_string(text, "DATETIME")?,
                ColumnKind::Time => typed_string(text, "TIME")?,
                ColumnKind::Json => typed_string(text, "JSON")?,
                _ => string_literal(text)?,
            };
            encode_varint(value.len() as u64, &mut out);
            out.extend_from_slice(value.as_bytes());
        }
        _ => return None,
    }
    Some(out)
}

/// `TYPE 'text'` or a plain string literal (BigQuery coerces a string literal to the column's
/// type).
fn typed_string(text: &str, type_name: &str) -> Option<String> {
    let rest = match text.get(..type_name.len()) {
        Some(head) if head.eq_ignore_ascii_case(type_name) => text[type_name.len()..].trim_start(),
        _ => text,
    };
    string_literal(rest)
}

/// A quoted string literal (`'…'` or `"…"`, backslash escapes).
fn string_literal(text: &str) -> Option<String> {
    let quote = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let inner = text.strip_prefix(quote)?.strip_suffix(quote)?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == quote {
            return None;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            '0' => '\0',
            other @ ('\\' | '\'' | '"' | '`' | '?') => other,
            _ => return None,
        });
    }
    Some(out)
}

fn missing_required(column: &str) -> String {
    format!("Missing required field: {column}.")
}

/// Per-row problems of a fill: (row index, message).
pub type FillErrors = Vec<(usize, String)>;

impl RowCodec {
    /// Whether any column of the table has a default: only then do rows need [`RowCodec::fill`].
    pub fn has_defaults(&self) -> bool {
        !self.defaults.is_empty()
    }

    /// Writes each row's defaults into it: the columns the writer schema omits, and the fields a
    /// row leaves unset whose interpretation is `DEFAULT_VALUE`. A REQUIRED column left unset
    /// without a default to give it, or whose default this emulator cannot evaluate, is a row
    /// error. Rows are already validated; rows for which `skip` holds (CDC deletes, which carry
    /// only their key) are kept as they are.
    pub fn fill(
        &self,
        rows: Vec<Bytes>,
        missing: &MissingValues,
        skip: impl Fn(usize) -> bool,
    ) -> Result<Vec<Bytes>, FillErrors> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0);
        let numbers: Vec<Option<u32>> = self
            .defaults
            .iter()
            .map(|d| d.field.map(|i| self.root.number_of(i)))
            .collect();
        let mut errors = FillErrors::new();
        let mut out = Vec::with_capacity(rows.len());
        for (index, row) in rows.into_iter().enumerate() {
            if skip(index) {
                out.push(row);
                continue;
            }
            let set = top_level_numbers(&row);
            let mut extra = Vec::new();
            for (default, number) in self.defaults.iter().zip(&numbers) {
                let needed = match (default.field, number) {
                    (Some(field), Some(number)) => {
                        !set.contains(number)
                            && self.root.fields[field].default.is_none()
                            && missing.of(&default.name.to_lowercase()) == Interpretation::Default
                    }
                    _ => true,
                };
                if !needed {
                    // A REQUIRED column the row leaves unset under NULL_VALUE: NULL cannot go there.
                    let unset = number.is_some_and(|n| !set.contains(&n));
                    let proto_default = default
                        .field
                        .is_some_and(|f| self.root.fields[f].default.is_some());
                    if default.required && unset && !proto_default {
                        errors.push((index, missing_required(&default.name)));
                    }
                    continue;
                }
                match (&default.value, default.fill_number) {
                    (DefaultValue::Null, _) => {
                        if default.required {
                            errors.push((index, missing_required(&default.name)));
                        }
                    }
                    (DefaultValue::Unsupported(text), _) => errors.push((
                        index,
                        format!(
                            "The emulator does not evaluate the default value expression {text} of column {}.",
                            default.name
                        ),
                    )),
                    (value, Some(number)) => {
                        encode_key(number, wire_type(default.fill_kind), &mut extra);
                        evaluate(value, now, &mut extra);
                    }
                    // Without a fill field the value was read as unsupported.
                    (_, None) => {}
                }
            }
            if extra.is_empty() {
                out.push(row);
            } else {
                let mut filled = Vec::with_capacity(row.len() + extra.len());
                filled.extend_from_slice(&row);
                filled.extend_from_slice(&extra);
                out.push(Bytes::from(filled));
            }
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(errors)
        }
    }
}

fn wire_type(proto: ProtoKind) -> WireType {
    match proto {
        ProtoKind::Double => WireType::SixtyFourBit,
        ProtoKind::String | ProtoKind::Bytes => WireType::LengthDelimited,
        _ => WireType::Varint,
    }
}

/// Appends the payload of one default's value, evaluated now.
fn evaluate(value: &DefaultValue, now_us: i64, out: &mut Vec<u8>) {
    let text = |s: String, out: &mut Vec<u8>| {
        encode_varint(s.len() as u64, out);
        out.extend_from_slice(s.as_bytes());
    };
    let days = now_us.div_euclid(86_400_000_000);
    let micros_of_day = now_us.rem_euclid(86_400_000_000);
    let (year, month, day) = civil_from_days(days);
    let date = super::civil::valid_date(year, month, day);
    let time = super::civil::Time::from_micros_of_day(micros_of_day);
    match value {
        DefaultValue::Literal(bytes) => out.extend_from_slice(bytes),
        DefaultValue::CurrentTimestamp => encode_varint(now_us as u64, out),
        DefaultValue::CurrentDate => text(date.map(format_date).unwrap_or_default(), out),
        DefaultValue::CurrentDatetime => text(
            format!(
                "{}T{}",
                date.map(format_date).unwrap_or_default(),
                format_time(time)
            ),
            out,
        ),
        DefaultValue::CurrentTime => text(format_time(time), out),
        DefaultValue::GenerateUuid => {
            let bits: u128 = rand::random();
            // Version 4, RFC 4122 variant.
            let bits = (bits & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
            let hex = format!("{bits:032x}");
            text(
                format!(
                    "{}-{}-{}-{}-{}",
                    &hex[0..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..32]
                ),
                out,
            );
        }
        DefaultValue::Rand => {
            let v: f64 = rand::random();
            out.extend_from_slice(&v.to_bits().to_le_bytes());
        }
        DefaultValue::Null | DefaultValue::Unsupported(_) => {}
    }
}

/// The field numbers a row sets at its top level (unparseable rows were refused before).
fn top_level_numbers(row: &[u8]) -> Vec<u32> {
    let mut reader = Reader::new(row);
    let mut numbers = Vec::new();
    while let Ok(Some((number, _))) = reader.next() {
        numbers.push(number);
    }
    numbers
}
