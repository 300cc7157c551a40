//! Runs a compiled plan over Avro binary bytes, appending proto2 bytes to the caller's buffer.
//! No value tree, no allocation per field: each op reads its Avro value and writes its field.

use std::io::Write;
use std::sync::Arc;

use base64::Engine;
use kbq_core::offsets::KafkaOffset;

use super::convert::{
    DecimalTarget, MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS, Wide, date_days, datetime_packed,
    time_packed, timestamp_micros,
};
use super::error::RecordError;
use super::ops::{
    AvroRead, Conv, HeadersColumn, JsonOp, MetadataOps, OnNull, Op, RecordOp, Skip, ValueConv,
};
use super::proto::{Tag, close_len, open_len, put_len_delimited, put_varint};
use super::reader::AvroReader;
use super::transforms::Scalar;

/// Kafka metadata of one record, for the optional metadata columns.
#[derive(Debug, Clone, Copy, Default)]
pub struct KafkaMetadata<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: KafkaOffset,
    /// Milliseconds since the epoch, as Kafka carries it.
    pub timestamp_millis: Option<i64>,
    pub key: Option<&'a [u8]>,
    pub headers: &'a [KafkaHeader<'a>],
}

/// One Kafka header. Kafka does not make a key text: it is bytes here, and the headers column
/// (whose `key` is a STRING) refuses a record whose key is not UTF-8.
#[derive(Debug, Clone, Copy)]
pub struct KafkaHeader<'a> {
    pub key: &'a [u8],
    pub value: Option<&'a [u8]>,
}

pub fn run_row(
    root: &RecordOp,
    metadata: &MetadataOps,
    avro: &[u8],
    meta: Option<&KafkaMetadata<'_>>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    // Proto rows are about as long as the Avro input: one reservation instead of regrowth.
    out.reserve(avro.len() + avro.len() / 4 + 64);
    let mut r = AvroReader::new(avro);
    run_record(root, &mut r, out)?;
    if r.remaining() != 0 {
        return Err(RecordError::TrailingBytes {
            trailing: r.remaining(),
        });
    }
    write_metadata(metadata, meta, out)
}

fn run_record(
    rec: &RecordOp,
    r: &mut AvroReader<'_>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    if let Some(column) = &rec.missing_required {
        return Err(RecordError::MissingRequired {
            column: column.clone(),
        });
    }
    let at = rec.tag.map(|t| open_len(out, t));
    for op in rec.fields.iter() {
        step(op, r, out)?;
    }
    if let Some(at) = at {
        close_len(out, at);
    }
    Ok(())
}

/// One value: scalars inline, everything else through [`run`]. Most fields are scalars or
/// nullable scalars, and a call per field with `run`'s large frame was the main cost.
#[inline(always)]
fn step(op: &Op, r: &mut AvroReader<'_>, out: &mut Vec<u8>) -> Result<(), RecordError> {
    match op {
        Op::Scalar { tag, conv, column } => scalar(*tag, conv, column, r, out),
        Op::Union(branches) => match &branches[r.branch(branches.len())?] {
            Op::Scalar { tag, conv, column } => scalar(*tag, conv, column, r, out),
            Op::Null(OnNull::Nothing) => Ok(()),
            other => run(other, r, out),
        },
        other => run(other, r, out),
    }
}

#[inline(never)]
pub(super) fn run(op: &Op, r: &mut AvroReader<'_>, out: &mut Vec<u8>) -> Result<(), RecordError> {
    match op {
        Op::Scalar { tag, conv, column } => scalar(*tag, conv, column, r, out),
        Op::Union(branches) => {
            let i = r.branch(branches.len())?;
            run(&branches[i], r, out)
        }
        Op::Skip(s) => skip(s, r),
        Op::Null(on_null) => match on_null {
            OnNull::Nothing => Ok(()),
            OnNull::RequiredError(column) => Err(RecordError::NullRequired {
                column: column.clone(),
            }),
            OnNull::ElementError(column) => Err(RecordError::NullElement {
                column: column.clone(),
            }),
        },
        Op::Record(rec) => run_record(rec, r, out),
        Op::Array { item, min_item } => loop {
            let n = r.block(*min_item)?;
            if n == 0 {
                return Ok(());
            }
            for _ in 0..n {
                step(item, r, out)?;
            }
        },
        Op::MapEntries {
            entry,
            key,
            value,
            min_item,
        } => loop {
            let n = r.block(*min_item)?;
            if n == 0 {
                return Ok(());
            }
            for _ in 0..n {
                let at = open_len(out, *entry);
                put_len_delimited(out, *key, r.string()?);
                run(value, r, out)?;
                close_len(out, at);
            }
        },
        Op::Json { tag, json, column } => {
            let at = open_len(out, *tag);
            render(json, r, out, column)?;
            close_len(out, at);
            Ok(())
        }
    }
}

pub(super) fn value_error(column: &Arc<str>, reason: String) -> RecordError {
    RecordError::Value {
        column: column.clone(),
        reason,
    }
}

#[inline]
pub(super) fn put_i64(out: &mut Vec<u8>, tag: Tag, v: i64) {
    tag.put(out);
    put_varint(out, v as u64);
}

#[inline]
pub(super) fn put_f64(out: &mut Vec<u8>, tag: Tag, v: f64) {
    tag.put(out);
    out.extend_from_slice(&v.to_le_bytes());
}

/// The conversions most columns use, kept small so they inline into the loops that call them;
/// the rest live in [`scalar_cold`].
#[inline(always)]
pub(super) fn scalar(
    tag: Tag,
    conv: &Conv,
    column: &Arc<str>,
    r: &mut AvroReader<'_>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    match conv {
        Conv::Long => put_i64(out, tag, r.long()?),
        Conv::Int => put_i64(out, tag, r.int()? as i64),
        Conv::Str | Conv::StrAsBytes | Conv::BytesAsStr => put_len_delimited(out, tag, r.string()?),
        Conv::Bytes => put_len_delimited(out, tag, r.bytes()?),
        Conv::Double => put_f64(out, tag, r.double()?),
        Conv::Bool => {
            let b = r.boolean()?;
            tag.put(out);
            out.push(b as u8);
        }
        Conv::TimestampMicros => {
            let v = r.long()?;
            if !(MIN_TIMESTAMP_MICROS..=MAX_TIMESTAMP_MICROS).contains(&v) {
                return Err(out_of_range(column, timestamp_micros(Some(v))));
            }
            put_i64(out, tag, v);
        }
        _ => scalar_cold(tag, conv, column, r, out)?,
    }
    Ok(())
}

#[cold]
#[inline(never)]
pub(super) fn out_of_range(column: &Arc<str>, res: Result<i64, String>) -> RecordError {
    value_error(column, res.err().unwrap_or_default())
}

#[inline(never)]
fn scalar_cold(
    tag: Tag,
    conv: &Conv,
    column: &Arc<str>,
    r: &mut AvroReader<'_>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let checked = |res: Result<i64, String>| res.map_err(|e| value_error(column, e));
    match conv {
        Conv::Float => put_f64(out, tag, r.float()? as f64),
        Conv::IntToDouble => put_f64(out, tag, r.int()? as f64),
        Conv::LongToDouble => put_f64(out, tag, r.long()? as f64),
        Conv::JsonStr => {
            let s = r.string()?;
            check_json(s).map_err(|e| value_error(column, e))?;
            put_len_delimited(out, tag, s);
        }
        Conv::Fixed(n) => put_len_delimited(out, tag, r.fixed(*n, "a fixed")?),
        Conv::Enum(symbols) => {
            let i = r.enum_index(symbols.len())?;
            put_len_delimited(out, tag, symbols[i].as_bytes());
        }
        Conv::UuidFixed => {
            let b = r.fixed(16, "a uuid")?;
            put_len_delimited(out, tag, &format_uuid(b));
        }
        Conv::Decimal {
            fixed,
            scale,
            target,
        } => {
            let bytes = match fixed {
                Some(n) => r.fixed(*n, "a decimal")?,
                None => r.bytes()?,
            };
            let w = Wide::from_be_twos(bytes).map_err(|e| value_error(column, e))?;
            put_decimal(out, tag, w, *scale, *target, column)?;
        }
        Conv::IntToNumeric(target) => {
            let w = Wide::from_i64(r.int()? as i64);
            put_decimal(out, tag, w, 0, *target, column)?;
        }
        Conv::LongToNumeric(target) => {
            let w = Wide::from_i64(r.long()?);
            put_decimal(out, tag, w, 0, *target, column)?;
        }
        Conv::TimestampMillis => {
            let v = r.long()?;
            put_i64(out, tag, checked(timestamp_micros(v.checked_mul(1000)))?);
        }
        Conv::Long
        | Conv::Int
        | Conv::Str
        | Conv::StrAsBytes
        | Conv::BytesAsStr
        | Conv::Bytes
        | Conv::Double
        | Conv::Bool
        | Conv::TimestampMicros => unreachable!("handled by scalar"),
        Conv::TimestampNanos => {
            let v = r.long()?;
            put_i64(
                out,
                tag,
                checked(timestamp_micros(Some(v.div_euclid(1000))))?,
            );
        }
        Conv::Date => {
            let d = date_days(r.int()?).map_err(|e| value_error(column, e))?;
            put_i64(out, tag, d as i64);
        }
        Conv::DateTimeMillis => {
            let v = r.long()?;
            put_i64(out, tag, checked(datetime_packed(v.checked_mul(1000)))?);
        }
        Conv::DateTimeMicros => {
            let v = r.long()?;
            put_i64(out, tag, checked(datetime_packed(Some(v)))?);
        }
        Conv::DateTimeNanos => {
            let v = r.long()?;
            put_i64(
                out,
                tag,
                checked(datetime_packed(Some(v.div_euclid(1000))))?,
            );
        }
        Conv::TimeMillis => {
            let v = r.int()? as i64;
            put_i64(out, tag, checked(time_packed(v * 1000))?);
        }
        Conv::TimeMicros => {
            let v = r.long()?;
            put_i64(out, tag, checked(time_packed(v))?);
        }
        Conv::Named(named) => super::named::run(named, tag, column, r, out)?,
        Conv::Value(v) => transformed(v, tag, column, r, out)?,
    }
    Ok(())
}

/// A value a transform rewrites (`transforms/values.rs`), read as the plan says.
fn transformed(
    v: &ValueConv,
    tag: Tag,
    column: &Arc<str>,
    r: &mut AvroReader<'_>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    v.op.write(read_scalar(v.read, r)?, tag, column, out)
}

/// A scalar Avro value, read as `read` says.
pub(crate) fn read_scalar<'a>(
    read: AvroRead,
    r: &mut AvroReader<'a>,
) -> Result<Scalar<'a>, RecordError> {
    Ok(match read {
        AvroRead::Str => Scalar::Str(r.string()?),
        AvroRead::Bytes => Scalar::Bytes(r.bytes()?),
        AvroRead::Fixed(n) => Scalar::Bytes(r.fixed(n, "a fixed")?),
        AvroRead::Int => Scalar::Int(r.int()? as i64),
        AvroRead::Long => Scalar::Int(r.long()?),
        AvroRead::Float => Scalar::F32(r.float()?),
        AvroRead::Double => Scalar::F64(r.double()?),
        AvroRead::Bool => Scalar::Bool(r.boolean()?),
        AvroRead::Decimal(None) => Scalar::Decimal(r.bytes()?),
        AvroRead::Decimal(Some(n)) => Scalar::Decimal(r.fixed(n, "a decimal")?),
    })
}

pub(super) fn put_decimal(
    out: &mut Vec<u8>,
    tag: Tag,
    mut w: Wide,
    scale: u32,
    target: DecimalTarget,
    column: &Arc<str>,
) -> Result<(), RecordError> {
    w.rescale(scale, target.scale())
        .map_err(|e| value_error(column, e))?;
    let at = open_len(out, tag);
    if let Err(e) = w.write_le(target, out) {
        return Err(value_error(column, e));
    }
    close_len(out, at);
    Ok(())
}

pub(super) fn check_json(s: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<serde::de::IgnoredAny>(s)
        .map(|_| ())
        .map_err(|e| format!("string is not valid json: {e}"))
}

fn format_uuid(b: &[u8]) -> [u8; 36] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = [b'-'; 36];
    let mut j = 0;
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            j += 1;
        }
        s[j] = HEX[(byte >> 4) as usize];
        s[j + 1] = HEX[(byte & 0xf) as usize];
        j += 2;
    }
    s
}

pub(crate) fn skip(s: &Skip, r: &mut AvroReader<'_>) -> Result<(), RecordError> {
    match s {
        Skip::Nothing => {}
        Skip::Bool => {
            r.boolean()?;
        }
        Skip::Varint => {
            r.long()?;
        }
        Skip::Int => {
            r.int()?;
        }
        Skip::Fixed(n) => {
            r.fixed(*n, "a fixed-size value")?;
        }
        Skip::Bytes => {
            r.bytes()?;
        }
        Skip::Enum(n) => {
            r.enum_index(*n)?;
        }
        Skip::Array(item, min) => loop {
            let n = r.block(*min)?;
            if n == 0 {
                break;
            }
            for _ in 0..n {
                skip(item, r)?;
            }
        },
        Skip::Map(value, min) => loop {
            let n = r.block(*min)?;
            if n == 0 {
                break;
            }
            for _ in 0..n {
                r.bytes()?;
                skip(value, r)?;
            }
        },
        Skip::Record(fields) => {
            for f in fields.iter() {
                skip(f, r)?;
            }
        }
        Skip::Union(branches) => {
            let i = r.branch(branches.len())?;
            skip(&branches[i], r)?;
        }
    }
    Ok(())
}

fn render(
    op: &JsonOp,
    r: &mut AvroReader<'_>,
    out: &mut Vec<u8>,
    column: &Arc<str>,
) -> Result<(), RecordError> {
    // Writing to a Vec cannot fail.
    match op {
        JsonOp::Null => out.extend_from_slice(b"null"),
        JsonOp::Bool => out.extend_from_slice(if r.boolean()? { b"true" } else { b"false" }),
        JsonOp::Int => {
            let _ = write!(out, "{}", r.int()?);
        }
        JsonOp::Long => {
            let _ = write!(out, "{}", r.long()?);
        }
        JsonOp::Float => json_float(out, r.float()? as f64, true),
        JsonOp::Double => json_float(out, r.double()?, false),
        JsonOp::Str => json_string(out, r.string()?),
        JsonOp::RawJson => {
            let s = r.string()?;
            check_json(s).map_err(|e| value_error(column, e))?;
            out.extend_from_slice(s);
        }
        JsonOp::Bytes => json_base64(out, r.bytes()?),
        JsonOp::Fixed(n) => json_base64(out, r.fixed(*n, "a fixed")?),
        JsonOp::Enum(symbols) => {
            let i = r.enum_index(symbols.len())?;
            json_string(out, symbols[i].as_bytes());
        }
        JsonOp::UuidFixed => json_string(out, &format_uuid(r.fixed(16, "a uuid")?)),
        JsonOp::Decimal { fixed, scale } => {
            let bytes = match fixed {
                Some(n) => r.fixed(*n, "a decimal")?,
                None => r.bytes()?,
            };
            let w = Wide::from_be_twos(bytes).map_err(|e| value_error(column, e))?;
            json_string(out, w.to_decimal_string(*scale).as_bytes());
        }
        JsonOp::Array(item, min) => {
            out.push(b'[');
            let mut first = true;
            loop {
                let n = r.block(*min)?;
                if n == 0 {
                    break;
                }
                for _ in 0..n {
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    render(item, r, out, column)?;
                }
            }
            out.push(b']');
        }
        JsonOp::Map(value, min) => {
            out.push(b'{');
            let mut first = true;
            loop {
                let n = r.block(*min)?;
                if n == 0 {
                    break;
                }
                for _ in 0..n {
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    json_string(out, r.string()?);
                    out.push(b':');
                    render(value, r, out, column)?;
                }
            }
            out.push(b'}');
        }
        JsonOp::Record(fields) => {
            out.push(b'{');
            for (i, (name, f)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json_string(out, name.as_bytes());
                out.push(b':');
                render(f, r, out, column)?;
            }
            out.push(b'}');
        }
        JsonOp::Union(branches) => {
            let i = r.branch(branches.len())?;
            render(&branches[i], r, out, column)?;
        }
    }
    Ok(())
}

/// JSON has no NaN or infinities; they become the strings BigQuery's own JSON functions use.
fn json_float(out: &mut Vec<u8>, v: f64, single: bool) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 {
            b"\"Infinity\""
        } else {
            b"\"-Infinity\""
        });
    } else if single {
        let _ = write!(out, "{}", v as f32);
    } else {
        let _ = write!(out, "{v}");
    }
}

fn json_base64(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'"');
    out.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(b)
            .as_bytes(),
    );
    out.push(b'"');
}

/// `s` is valid UTF-8 (checked by the reader); only the JSON escapes are added.
fn json_string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &c in s {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f => {
                let _ = write!(out, "\\u{c:04x}");
            }
            _ => out.push(c),
        }
    }
    out.push(b'"');
}

pub(super) fn write_metadata(
    ops: &MetadataOps,
    meta: Option<&KafkaMetadata<'_>>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    crate::transforms::write_set(&ops.set, meta.map_or(&[][..], |m| m.headers), out)?;
    let Some(m) = meta else {
        let required = [
            &ops.topic,
            &ops.partition,
            &ops.offset,
            &ops.timestamp,
            &ops.key,
        ]
        .into_iter()
        .flatten()
        .find(|c| c.required);
        return match required {
            Some(c) => Err(RecordError::MissingRequired {
                column: c.column.clone(),
            }),
            None => Ok(()),
        };
    };
    if let Some(c) = &ops.topic {
        put_len_delimited(out, c.tag, m.topic.as_bytes());
    }
    if let Some(c) = &ops.partition {
        put_i64(out, c.tag, m.partition as i64);
    }
    if let Some(c) = &ops.offset {
        put_i64(out, c.tag, m.offset.0);
    }
    if let Some(c) = &ops.timestamp {
        match m.timestamp_millis {
            Some(ms) if c.alternate => put_i64(out, c.tag, ms),
            Some(ms) => {
                let micros = timestamp_micros(ms.checked_mul(1000))
                    .map_err(|e| value_error(&c.column, e))?;
                put_i64(out, c.tag, micros);
            }
            None if c.required => {
                return Err(RecordError::NullRequired {
                    column: c.column.clone(),
                });
            }
            None => {}
        }
    }
    if let Some(c) = &ops.key {
        match m.key {
            Some(k) => {
                if c.alternate && std::str::from_utf8(k).is_err() {
                    return Err(value_error(&c.column, "key is not valid utf-8".into()));
                }
                put_len_delimited(out, c.tag, k);
            }
            None if c.required => {
                return Err(RecordError::NullRequired {
                    column: c.column.clone(),
                });
            }
            None => {}
        }
    }
    if let Some(h) = &ops.headers {
        write_headers(h, m.headers, out)?;
    }
    Ok(())
}

/// The headers column: every header as a `STRUCT<key, value>`.
pub(super) fn write_headers(
    h: &HeadersColumn,
    headers: &[KafkaHeader<'_>],
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    for header in headers {
        // The column's `key` is a STRING: a key that is not text has no exact value there,
        // so the record is refused (dead-lettered with its headers intact), never written
        // with a key changed.
        let Ok(key) = std::str::from_utf8(header.key) else {
            return Err(value_error(
                &h.column,
                format!(
                    "header key {} is not valid utf-8",
                    String::from_utf8_lossy(header.key).escape_debug()
                ),
            ));
        };
        let at = open_len(out, h.tag);
        put_len_delimited(out, h.key, key.as_bytes());
        if let Some(v) = header.value {
            if h.value_is_string && std::str::from_utf8(v).is_err() {
                return Err(value_error(
                    &h.column,
                    format!("header {key:?} is not valid utf-8"),
                ));
            }
            put_len_delimited(out, h.value, v);
        }
        close_len(out, at);
    }
    Ok(())
}
