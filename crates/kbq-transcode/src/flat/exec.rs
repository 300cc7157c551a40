//! Runs a [`FlatPlan`] over one record's Avro bytes: one loop over the ops, the cursors of
//! `raw.rs`, every error on a cold path. Its rows and errors are the tree executor's
//! (`crate::exec`), byte for byte: the differential tests (`tests/transcode/differential.rs`)
//! and the fuzzers compare the two.

use std::mem::MaybeUninit;
use std::sync::Arc;

use super::raw::{Input, Key, Output};
use super::{FlatOp, FlatPlan, MAX_DEPTH};
use crate::convert::{
    DecimalTarget, MAX_DATE_DAYS, MAX_TIMESTAMP_MICROS, MIN_DATE_DAYS, MIN_TIMESTAMP_MICROS, Wide,
    date_days, timestamp_micros,
};
use crate::error::RecordError;
use crate::exec::{self as tree, KafkaMetadata, out_of_range, value_error};
use crate::ops::MetadataOps;
use crate::reader::AvroReader;

pub(crate) fn run_row(
    plan: &FlatPlan,
    metadata: &MetadataOps,
    avro: &[u8],
    meta: Option<&KafkaMetadata<'_>>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    // Proto rows are about as long as the Avro input: one reservation instead of regrowth.
    out.reserve(avro.len() + avro.len() / 4 + 64);
    let mut r = Input::new(avro);
    let bound = plan
        .room
        .and_then(|room| room.bound(avro.len()))
        .filter(|bound| out.capacity() - out.len() >= *bound);
    if let Some(bound) = bound {
        // SAFETY: the spare capacity holds the plan's bound on what this record writes
        // (`Room`, computed from the ops when the plan was lowered) and the stores' slack.
        run::<false>(plan, &mut r, &mut unsafe { Output::reserved(out, bound) })?;
    } else {
        run_checked(plan, &mut r, &mut Output::checked(out))?;
    }
    if r.remaining() != 0 {
        return Err(RecordError::TrailingBytes {
            trailing: r.remaining(),
        });
    }
    // The plan's bound covers the Avro value only: the metadata's writes check their room.
    super::metadata::write(metadata, meta, &mut Output::checked(out))
}

/// 10^k for the rescaling of decimals, k ≤ 38.
const POW10: [i128; 39] = {
    let mut p = [1i128; 39];
    let mut k = 1;
    while k < 39 {
        p[k] = p[k - 1] * 10;
        k += 1;
    }
    p
};

/// The loop with a capacity check per write, out of line: a record whose bound the buffer's
/// room does not hold (or a plan without a bound) is rare, and keeping the loop of the common
/// case alone in `run_row` leaves it the registers.
#[inline(never)]
fn run_checked(
    plan: &FlatPlan,
    r: &mut Input<'_>,
    w: &mut Output<'_, true>,
) -> Result<(), RecordError> {
    run(plan, r, w)
}

/// The one loop: `op` walks the ops, jumps set it; the array counts and the open messages'
/// length positions live in two fixed stacks ([`MAX_DEPTH`] bounds them at lowering).
///
/// The arms match `&FlatOp` patterns, so each reads its own fields: matching the op by value
/// (`match *op`) had every dispatch load every field of the op first.
#[inline(never)]
#[allow(clippy::match_ref_pats)]
fn run<const CHECKED: bool>(
    plan: &FlatPlan,
    r: &mut Input<'_>,
    w: &mut Output<'_, CHECKED>,
) -> Result<(), RecordError> {
    let ops = &plan.ops[..];
    // The op as a pointer, not an index: the fetch needs no shift and add.
    let mut op = ops.as_ptr();
    // SAFETY: every call passes a jump target of an op or of the branch table, each of
    // which `FlatPlan::lower` checked to be an index of `ops`.
    let at = |i: u32| unsafe { ops.as_ptr().add(i as usize) };
    // Not zeroed (that cost about forty instructions a record): a slot is written by the op
    // that opens its array or message before the op that closes it reads it.
    // Neither is bounds-checked: `FlatPlan::lower` checked that no op nests deeper than
    // [`MAX_DEPTH`]. `counts[arrays]` is the innermost array's (slot 0 is never used, so the
    // ops that read it need no `- 1`); `opens[..open]` the open messages'.
    let mut counts = [const { MaybeUninit::<usize>::uninit() }; MAX_DEPTH + 1];
    let mut arrays = 0usize;
    let mut opens = [const { MaybeUninit::<usize>::uninit() }; MAX_DEPTH];
    let mut open = 0usize;
    loop {
        debug_assert!(ops.as_ptr_range().contains(&op));
        // SAFETY: `op` points at an op of `ops`: it starts at the first, steps by one past
        // any op but the last (`End`, which returns), and jumps only to targets `at` makes.
        match unsafe { &*op } {
            &FlatOp::Long(tag) => w.tag_varint(tag, r.long()? as u64),
            &FlatOp::Int(tag) => w.tag_varint(tag, r.int()? as i64 as u64),
            &FlatOp::Str(key) => string(r, w, key)?,
            &FlatOp::NullOrStr(key, second) => {
                if (r.small_index(2, AvroReader::branch)? == 1) == second {
                    string(r, w, key)?;
                }
            }
            &FlatOp::Bytes(tag) => w.tag_bytes(tag, r.bytes()?),
            &FlatOp::Double(tag) => w.tag_f64(tag, r.double()?),
            &FlatOp::Float(tag) => {
                let b = r.fixed(4, "a float")?;
                w.tag_f64(tag, f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64);
            }
            &FlatOp::Bool(tag) => w.tag_u8(tag, r.boolean()? as u8),
            &FlatOp::TimestampMicros(tag, column) => {
                let v = r.long()?;
                if !(MIN_TIMESTAMP_MICROS..=MAX_TIMESTAMP_MICROS).contains(&v) {
                    return Err(out_of_range(
                        &plan.columns[column as usize],
                        timestamp_micros(Some(v)),
                    ));
                }
                w.tag_varint(tag, v as u64);
            }
            &FlatOp::TimestampMillis(tag, column) => {
                let v = r.long()?.checked_mul(1000);
                match v.filter(|v| (MIN_TIMESTAMP_MICROS..=MAX_TIMESTAMP_MICROS).contains(v)) {
                    Some(v) => w.tag_varint(tag, v as u64),
                    None => {
                        return Err(out_of_range(
                            &plan.columns[column as usize],
                            timestamp_micros(v),
                        ));
                    }
                }
            }
            &FlatOp::TimestampNanos(tag, column) => {
                let v = r.long()?.div_euclid(1000);
                if !(MIN_TIMESTAMP_MICROS..=MAX_TIMESTAMP_MICROS).contains(&v) {
                    return Err(out_of_range(
                        &plan.columns[column as usize],
                        timestamp_micros(Some(v)),
                    ));
                }
                w.tag_varint(tag, v as u64);
            }
            &FlatOp::Date(tag, column) => {
                let v = r.int()?;
                if !(MIN_DATE_DAYS..=MAX_DATE_DAYS).contains(&v) {
                    return Err(bad_date(&plan.columns[column as usize], v));
                }
                w.tag_varint(tag, v as i64 as u64);
            }
            &FlatOp::Enum { base, n } => {
                let i = r.small_index(n, AvroReader::enum_index)?;
                w.raw(&plan.symbols[base as usize + i]);
            }
            &FlatOp::Decimal {
                tag,
                scale,
                pow,
                big,
                column,
            } => {
                let b = r.bytes()?;
                let n = b.len();
                // One to eight bytes, as one word (the eight bytes that end where the value
                // ends), times at most 10^18: an `i64` times an `i64`, which `i128` always
                // holds, and NUMERIC's range too (below 2^63 · 10^9 at its scale).
                match r.word_before() {
                    Some(word) if n.wrapping_sub(1) < 8 && pow <= MAX_POW_I64 => {
                        let shift = 64 - 8 * n as u32;
                        let v = ((word << shift) as i64) >> shift;
                        w.tag_i128(tag, v as i128 * POW10[pow as usize] as i64 as i128);
                    }
                    _ => other_decimal(plan, w, tag, b, scale, pow, big, column)?,
                }
            }
            &FlatOp::Scalar(i) => {
                let (tag, conv, column) = &plan.scalars[i as usize];
                let out = w.vec();
                r.reference(|ar| tree::scalar(*tag, conv, column, ar, out))?;
            }
            &FlatOp::Subtree(i) => {
                let out = w.vec();
                r.reference(|ar| tree::run(&plan.subtrees[i as usize], ar, out))?;
            }
            &FlatOp::SkipLong => {
                r.long()?;
            }
            &FlatOp::SkipInt => {
                r.int()?;
            }
            &FlatOp::SkipBool => {
                r.boolean()?;
            }
            &FlatOp::SkipFixed(n) => {
                r.fixed(n as usize, "a fixed-size value")?;
            }
            &FlatOp::SkipBytes => {
                r.bytes()?;
            }
            &FlatOp::SkipEnum(n) => {
                r.small_index(n, AvroReader::enum_index)?;
            }
            &FlatOp::Open(tag) => {
                // SAFETY: fewer than `MAX_DEPTH` messages are open before an `Open` (checked
                // at lowering), so `open` is an index of `opens`.
                unsafe { opens.get_unchecked_mut(open) }.write(w.open(tag));
                open += 1;
            }
            &FlatOp::Close => {
                open -= 1;
                // SAFETY: the `Open` op of this message wrote the slot (the lowering pairs
                // them, and a union's branch or an array's item holds whole pairs).
                w.close(unsafe { opens.get_unchecked(open).assume_init() });
            }
            &FlatOp::Branch { n, table } => {
                let i = r.small_index(n, AvroReader::branch)?;
                op = at(plan.targets[table as usize + i]);
                continue;
            }
            &FlatOp::Jump(to) => {
                op = at(to);
                continue;
            }
            &FlatOp::ArrayBegin { min_item, end } => {
                let n = r.block(min_item)?;
                if n == 0 {
                    op = at(end);
                    continue;
                }
                arrays += 1;
                // SAFETY: fewer than `MAX_DEPTH` arrays are open before an `ArrayBegin`
                // (checked at lowering), so `arrays` is at most `MAX_DEPTH` now.
                unsafe { counts.get_unchecked_mut(arrays) }.write(n);
            }
            &FlatOp::CloseNext { min_item, body } => {
                open -= 1;
                // SAFETY: as for `Close`.
                w.close(unsafe { opens.get_unchecked(open).assume_init() });
                // SAFETY: as for `ArrayNext`.
                let left = unsafe { counts.get_unchecked_mut(arrays).assume_init_mut() };
                *left -= 1;
                if *left == 0 {
                    *left = r.block(min_item)?;
                }
                if *left != 0 {
                    op = at(body);
                    continue;
                }
                arrays -= 1;
            }
            &FlatOp::ArrayNext { min_item, body } => {
                // SAFETY: this array's `ArrayBegin` wrote the slot before its first item, and
                // its index is at most `MAX_DEPTH`.
                let left = unsafe { counts.get_unchecked_mut(arrays).assume_init_mut() };
                *left -= 1;
                if *left == 0 {
                    *left = r.block(min_item)?;
                }
                if *left != 0 {
                    op = at(body);
                    continue;
                }
                arrays -= 1;
            }
            &FlatOp::Fail(i) => return Err(plan.errors[i as usize].clone()),
            &FlatOp::End => return Ok(()),
        }
        // SAFETY: the op was not the last (see the fetch above).
        op = unsafe { op.add(1) };
    }
}

/// A string field, checked for UTF-8 as it is copied.
#[inline(always)]
fn string<const CHECKED: bool>(
    r: &mut Input<'_>,
    w: &mut Output<'_, CHECKED>,
    key: Key,
) -> Result<(), RecordError> {
    let s = r.bytes()?;
    if !w.tag_str(key, s) {
        return Err(RecordError::InvalidUtf8 {
            offset: r.position() - s.len(),
        });
    }
    Ok(())
}

/// A big-endian two's-complement number of at most eight bytes.
fn small_decimal(b: &[u8]) -> Option<i128> {
    let n = b.len();
    if n > 8 {
        return None;
    }
    // Empty bytes are zero, as the tree executor reads them.
    let mut v = 0u64;
    for &x in b {
        v = v << 8 | x as u64;
    }
    let shift = 64 - 8 * n as u32;
    Some((v.checked_shl(shift).map_or(0, |v| v as i64 >> shift)) as i128)
}

/// The largest power of ten an `i64` holds.
const MAX_POW_I64: u8 = 18;

/// A decimal the one-word path does not take: empty, longer than eight bytes, within the
/// record's first eight bytes, or rescaled by more than 10^18.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn other_decimal<const CHECKED: bool>(
    plan: &FlatPlan,
    w: &mut Output<'_, CHECKED>,
    key: Key,
    bytes: &[u8],
    scale: u8,
    pow: u8,
    big: bool,
    column: u32,
) -> Result<(), RecordError> {
    match small_decimal(bytes).and_then(|v| v.checked_mul(POW10[pow as usize])) {
        Some(v) => {
            w.tag_i128(key, v);
            Ok(())
        }
        None => wide_decimal(plan, w, key, bytes, scale, pow, big, column),
    }
}

/// Every decimal the fast paths do not take, as the tree executor converts it.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn wide_decimal<const CHECKED: bool>(
    plan: &FlatPlan,
    w: &mut Output<'_, CHECKED>,
    key: Key,
    bytes: &[u8],
    scale: u8,
    pow: u8,
    big: bool,
    column: u32,
) -> Result<(), RecordError> {
    let column = &plan.columns[column as usize];
    let target = if big {
        DecimalTarget::BigNumeric
    } else {
        DecimalTarget::Numeric
    };
    debug_assert_eq!(scale as u32 + pow as u32, target.scale());
    let v = Wide::from_be_twos(bytes).map_err(|e| value_error(column, e))?;
    tree::put_decimal(w.vec(), key.tag(), v, scale as u32, target, column)
}

#[cold]
#[inline(never)]
fn bad_date(column: &Arc<str>, days: i32) -> RecordError {
    value_error(column, date_days(days).err().unwrap_or_default())
}
