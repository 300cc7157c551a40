//! The columns a row takes from the record's Kafka metadata and from the route's transforms
//! (`set` and valued `mask`), written by the flat writer after the Avro value: the same fields,
//! in the same order, with the same errors as the tree executor's `write_metadata`, without a
//! `Vec` push per byte. A header column's value is found once per record and its text checked
//! as it is copied.

use super::raw::Output;
use crate::convert::{MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS, timestamp_micros};
use crate::error::RecordError;
use crate::exec::{self as tree, KafkaMetadata, value_error};
use crate::ops::{MetaColumn, MetadataOps};
use crate::transforms::HeaderValue;

#[inline(always)]
pub(super) fn write<const CHECKED: bool>(
    ops: &MetadataOps,
    meta: Option<&KafkaMetadata<'_>>,
    w: &mut Output<'_, CHECKED>,
) -> Result<(), RecordError> {
    let constants = ops.set.constants();
    if !constants.is_empty() {
        w.copy(constants);
    }
    let headers = meta.map_or(&[][..], |m| m.headers);
    for h in ops.set.headers() {
        match h.value(headers)? {
            HeaderValue::Null => {}
            HeaderValue::Text(v) => {
                if !w.tag_str(h.tag().into(), v) {
                    return Err(h.not_utf8());
                }
            }
            HeaderValue::Bytes(v) => w.tag_bytes(h.tag().into(), v),
            HeaderValue::Int(i) => w.tag_varint(h.tag().into(), i as u64),
        }
    }
    let Some(m) = meta else {
        return no_metadata(ops);
    };
    if let Some(c) = &ops.topic {
        w.tag_bytes(c.tag.into(), m.topic.as_bytes());
    }
    if let Some(c) = &ops.partition {
        w.tag_varint(c.tag.into(), m.partition as i64 as u64);
    }
    if let Some(c) = &ops.offset {
        w.tag_varint(c.tag.into(), m.offset.0 as u64);
    }
    if let Some(c) = &ops.timestamp {
        match m.timestamp_millis {
            Some(ms) if c.alternate => w.tag_varint(c.tag.into(), ms as u64),
            Some(ms) => match ms.checked_mul(1000) {
                Some(us) if (MIN_TIMESTAMP_MICROS..=MAX_TIMESTAMP_MICROS).contains(&us) => {
                    w.tag_varint(c.tag.into(), us as u64)
                }
                us => return Err(bad_timestamp(c, us)),
            },
            None if c.required => return Err(null_required(c)),
            None => {}
        }
    }
    if let Some(c) = &ops.key {
        match m.key {
            Some(k) => {
                // A STRING key column: checked as it is copied.
                let text = if c.alternate {
                    w.tag_str(c.tag.into(), k)
                } else {
                    w.tag_bytes(c.tag.into(), k);
                    true
                };
                if !text {
                    return Err(value_error(&c.column, "key is not valid utf-8".into()));
                }
            }
            None if c.required => return Err(null_required(c)),
            None => {}
        }
    }
    if let Some(h) = &ops.headers {
        tree::write_headers(h, m.headers, w.vec())?;
    }
    Ok(())
}

/// A record without metadata (a test's, a tool's): refused when a metadata column is REQUIRED.
#[cold]
#[inline(never)]
fn no_metadata(ops: &MetadataOps) -> Result<(), RecordError> {
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
    match required {
        Some(c) => Err(RecordError::MissingRequired {
            column: c.column.clone(),
        }),
        None => Ok(()),
    }
}

#[cold]
#[inline(never)]
fn bad_timestamp(c: &MetaColumn, micros: Option<i64>) -> RecordError {
    value_error(
        &c.column,
        timestamp_micros(micros).err().unwrap_or_default(),
    )
}

#[cold]
#[inline(never)]
fn null_required(c: &MetaColumn) -> RecordError {
    RecordError::NullRequired {
        column: c.column.clone(),
    }
}
