//! Rendering: stored rows as the JSON cells of `tabledata.list`.

use base64::Engine as _;
use kbq_core::table_schema::{Mode, TableFieldSchema, TableSchema};
use serde_json::{Value, json};

use super::civil::{
    Date, Time, civil_from_days, decode_packed_datetime, decode_packed_time, format_date,
    format_time, parse_date, parse_datetime, parse_time, parse_timestamp,
};
use super::decimal::{UnscaledDecimal, format_decimal_text, format_scaled};
use super::validate::{MAX_DEPTH, ValueError, for_each_packed, timestamp_message_micros};
use super::wire::{Reader, Scalar, WIRE_LEN, Wire, scalar, wire_type_of};
use super::{
    ColumnKind, FieldPlan, MessagePlan, NumericSpec, ProtoKind, RowCodec, timestamp_seconds_text,
};

/// Output knobs of `tabledata.list` that change how cells are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// `formatOptions.useInt64Timestamp`: TIMESTAMP as integer microseconds (what Google's
    /// Python client asks for) instead of floating-point seconds.
    pub int64_timestamp: bool,
}

impl RowCodec {
    /// One `tabledata.list` row (`{"f":[{"v":…},…]}`) in the table's current column order, with
    /// the REST API's default formatting. A row that does not decode renders what it can;
    /// `validate` keeps such rows out of a table.
    pub fn render(&self, row: &[u8], table: &TableSchema) -> Value {
        self.render_with(row, table, RenderOptions::default())
    }

    /// [`RowCodec::render`] with explicit `formatOptions`.
    pub fn render_with(&self, row: &[u8], table: &TableSchema, options: RenderOptions) -> Value {
        render_message(Some(&self.root), &[row], &table.fields, options, 0)
    }
}

pub(super) fn null_cell() -> Value {
    json!({ "v": Value::Null })
}

/// Renders a message from its occurrences (proto merges repeated occurrences of a singular
/// message field, which is the same as decoding them one after another).
pub(super) fn render_message(
    plan: Option<&MessagePlan>,
    parts: &[&[u8]],
    columns: &[TableFieldSchema],
    options: RenderOptions,
    depth: u32,
) -> Value {
    let Some(plan) = plan.filter(|_| depth <= MAX_DEPTH) else {
        return json!({ "f": columns.iter().map(|_| null_cell()).collect::<Vec<_>>() });
    };
    let values = occurrences(plan, parts);
    let cells: Vec<Value> = columns
        .iter()
        .map(|column| {
            let lower = column.name.to_lowercase();
            // A default written into the row stands for the column (defaults.rs).
            let index = match plan.fills.get(&lower) {
                Some(&fill) if !values[fill].is_empty() => Some(fill),
                _ => plan.by_column.get(&lower).copied(),
            };
            let Some(index) = index else {
                return if column.mode() == Mode::Repeated {
                    json!({ "v": [] })
                } else {
                    null_cell()
                };
            };
            cell(&plan.fields[index], &values[index], column, options, depth)
        })
        .collect();
    json!({ "f": cells })
}

/// Each field's occurrences in the message's parts, by the plan's field index (packed
/// elements one by one; fields of the wrong wire type or unknown to the plan are left out).
fn occurrences<'a>(plan: &MessagePlan, parts: &[&'a [u8]]) -> Vec<Vec<Wire<'a>>> {
    let mut values: Vec<Vec<Wire<'a>>> = vec![Vec::new(); plan.fields.len()];
    for part in parts {
        let mut reader = Reader::new(part);
        while let Ok(Some((number, wire))) = reader.next() {
            let Some(index) = plan.field_index(number) else {
                continue;
            };
            let field = &plan.fields[index];
            let expected = field.proto.wire_type();
            let actual = wire_type_of(&wire);
            if actual == expected {
                values[index].push(wire);
            } else if actual == WIRE_LEN
                && let Wire::Len(packed) = wire
            {
                let _ = for_each_packed::<ValueError>(field.proto, packed, |w| {
                    values[index].push(w);
                    Ok(())
                });
            }
        }
    }
    values
}

/// One column's cell from its field's occurrences: a repeated field's items, a nested
/// message (its occurrences merged), or a scalar's last occurrence (or its default).
fn cell(
    field: &FieldPlan,
    occurrences: &[Wire<'_>],
    column: &TableFieldSchema,
    options: RenderOptions,
    depth: u32,
) -> Value {
    if field.proto == ProtoKind::Message
        && field.message.is_none()
        && field.column == ColumnKind::Timestamp
        && !field.repeated
    {
        // google.protobuf.Timestamp; occurrences of a singular message merge, field by field.
        let merged: Vec<u8> = occurrences
            .iter()
            .filter_map(|w| match w {
                Wire::Len(b) => Some(*b),
                _ => None,
            })
            .flatten()
            .copied()
            .collect();
        if occurrences.is_empty() {
            return null_cell();
        }
        return match timestamp_message_micros(&merged) {
            Ok(micros) if options.int64_timestamp => json!({ "v": micros.to_string() }),
            Ok(micros) => json!({ "v": timestamp_seconds_text(micros) }),
            Err(_) => null_cell(),
        };
    }
    if field.proto == ProtoKind::Message && field.message.is_none() {
        // A message in a column of a type this emulator does not model (RANGE).
        return null_cell();
    }
    if field.repeated {
        let items: Vec<Value> = if field.proto == ProtoKind::Message {
            occurrences
                .iter()
                .map(|w| match w {
                    Wire::Len(b) => json!({
                        "v": render_message(field.message.as_deref(), &[b], &column.fields, options, depth + 1)
                    }),
                    _ => null_cell(),
                })
                .collect()
        } else {
            occurrences
                .iter()
                .map(|w| json!({ "v": render_scalar(field, *w, options) }))
                .collect()
        };
        return json!({ "v": items });
    }
    if field.proto == ProtoKind::Message {
        if occurrences.is_empty() {
            return null_cell();
        }
        let parts: Vec<&[u8]> = occurrences
            .iter()
            .filter_map(|w| match w {
                Wire::Len(b) => Some(*b),
                _ => None,
            })
            .collect();
        return json!({
            "v": render_message(field.message.as_deref(), &parts, &column.fields, options, depth + 1)
        });
    }
    match occurrences.last() {
        Some(w) => json!({ "v": render_scalar(field, *w, options) }),
        None => match &field.default {
            Some(default) => json!({ "v": render_scalar(field, default.as_wire(), options) }),
            None => null_cell(),
        },
    }
}

pub(super) fn render_scalar(field: &FieldPlan, wire: Wire<'_>, options: RenderOptions) -> Value {
    let value = scalar(field.proto, wire);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let s: Option<String> = match &field.column {
        ColumnKind::Int64 => match value {
            Scalar::Signed(v) => Some(v.to_string()),
            Scalar::Unsigned(v) => Some(v.to_string()),
            Scalar::Enum(v) => Some(v.to_string()),
            Scalar::Bool(b) => Some(u8::from(b).to_string()),
            _ => None,
        },
        ColumnKind::Float64 => match value {
            Scalar::Float(f) => Some(format_float(f)),
            _ => None,
        },
        ColumnKind::Bool => Some(
            match value {
                Scalar::Bool(b) => b,
                Scalar::Signed(v) => v != 0,
                Scalar::Unsigned(v) => v != 0,
                _ => false,
            }
            .to_string(),
        ),
        ColumnKind::String { .. } => match value {
            Scalar::Text(b) => Some(text(b)),
            Scalar::Enum(v) => field.enum_name(v).map(str::to_string),
            _ => None,
        },
        ColumnKind::Bytes { .. } => match value {
            Scalar::Text(b) => Some(base64::engine::general_purpose::STANDARD.encode(b)),
            _ => None,
        },
        ColumnKind::Numeric(spec) => render_numeric(field.proto, spec, value),
        ColumnKind::Date => match value {
            Scalar::Signed(days) => {
                let (year, month, day) = civil_from_days(days);
                Some(format_date(Date { year, month, day }))
            }
            Scalar::Text(b) => parse_date(b).map(format_date),
            _ => None,
        },
        ColumnKind::Timestamp => {
            let micros = match value {
                Scalar::Signed(v) => Some(v),
                Scalar::Unsigned(v) => i64::try_from(v).ok(),
                Scalar::Text(b) => parse_timestamp(b),
                _ => None,
            };
            micros.map(|v| {
                if options.int64_timestamp {
                    v.to_string()
                } else {
                    timestamp_seconds_text(v)
                }
            })
        }
        ColumnKind::DateTime => match value {
            Scalar::Signed(p) => decode_packed_datetime(p).map(format_datetime),
            Scalar::Text(b) => parse_datetime(b).map(format_datetime),
            _ => None,
        },
        ColumnKind::Time => match value {
            Scalar::Signed(p) => decode_packed_time(p).map(format_time),
            Scalar::Text(b) => parse_time(b).map(format_time),
            _ => None,
        },
        // BigQuery stores JSON parsed and returns it re-serialised without insignificant spaces.
        ColumnKind::Json => match value {
            Scalar::Text(b) => serde_json::from_slice::<Value>(b)
                .map(|v| v.to_string())
                .ok()
                .or_else(|| Some(text(b))),
            _ => None,
        },
        ColumnKind::Geography => match value {
            Scalar::Text(b) => Some(text(b)),
            _ => None,
        },
        ColumnKind::Record => None,
        ColumnKind::Other(_) => match value {
            Scalar::Text(b) if field.proto == ProtoKind::String => Some(text(b)),
            Scalar::Signed(v) => Some(v.to_string()),
            Scalar::Unsigned(v) => Some(v.to_string()),
            _ => None,
        },
    };
    s.map_or(Value::Null, Value::String)
}

pub(super) fn format_datetime((date, time): (Date, Time)) -> String {
    format!("{}T{}", format_date(date), format_time(time))
}

/// FLOAT64 as the REST API writes it: the shortest round-trip text, with the special values
/// spelled as Python's `float()` and Java's `Double.parseDouble` accept them.
pub fn format_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{f:?}")
    }
}

pub(super) fn render_numeric(
    proto: ProtoKind,
    spec: &NumericSpec,
    value: Scalar<'_>,
) -> Option<String> {
    let max_scale = spec.scale as usize;
    match value {
        Scalar::Signed(v) => Some(v.to_string()),
        Scalar::Unsigned(v) => Some(v.to_string()),
        Scalar::Bool(b) => Some(u8::from(b).to_string()),
        Scalar::Enum(v) => Some(v.to_string()),
        Scalar::Float(f) => format_decimal_text(&format!("{f:e}"), max_scale),
        Scalar::Text(b) if proto == ProtoKind::Bytes => {
            let d = UnscaledDecimal::from_le_twos_complement(b);
            Some(format_scaled(
                d.negative,
                d.digits(),
                spec.wire_scale as usize,
                max_scale,
            ))
        }
        Scalar::Text(b) => format_decimal_text(std::str::from_utf8(b).ok()?, max_scale),
    }
}
