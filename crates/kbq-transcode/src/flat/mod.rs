//! The flat form of an Avro plan: the tree of [`Op`]s the compiler builds (`ops.rs`), lowered
//! into one array of small ops that one loop runs (`exec.rs` here) instead of a recursive walk:
//! a nested record becomes an open and a close op, an array a begin op and a next op that jumps
//! back, a union one op that jumps to its branch. Built once per plan, from the plan alone (no
//! code for any one schema).
//!
//! The conversions most columns use, maps, and skipped values of every kind have ops of their
//! own; every other conversion and the values rendered as JSON run through the tree executor's
//! code (`exec.rs` of the crate), which stays the reference the differential tests compare
//! against.

mod exec;
mod metadata;
mod raw;

use std::sync::Arc;

use crate::convert::DecimalTarget;
use crate::error::RecordError;
use crate::ops::{Conv, OnNull, Op, RecordOp, Skip};
use crate::proto::{Tag, put_len_delimited};
use raw::Key;

pub(crate) use exec::run_row;

/// The metadata and transforms' columns through the flat writer (`metadata.rs`), for the
/// executors of the other formats: the tree executor's `write_metadata` with its rows and
/// errors, each write checking its own room.
pub(crate) fn write_metadata(
    ops: &crate::ops::MetadataOps,
    meta: Option<&crate::exec::KafkaMetadata<'_>>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    metadata::write(ops, meta, &mut raw::Output::checked(out))
}

/// Nested records and arrays a flat plan may hold open at once; a deeper plan keeps the tree
/// executor (see [`FlatPlan::lower`]).
const MAX_DEPTH: usize = 32;

#[derive(Debug, Clone)]
pub(crate) struct FlatPlan {
    ops: Box<[FlatOp]>,
    /// Each union's branch targets, `Branch::table..Branch::table + n`.
    targets: Box<[u32]>,
    /// Column names of the ops' errors.
    columns: Box<[Arc<str>]>,
    /// Every enum symbol already encoded as its field: tag, length, text.
    symbols: Box<[Box<[u8]>]>,
    /// Scalars converted by the tree executor's code.
    scalars: Box<[(Tag, Conv, Arc<str>)]>,
    /// Whole ops run by the tree executor.
    subtrees: Box<[Op]>,
    /// The errors of `Fail` ops.
    errors: Box<[RecordError]>,
    /// A bound on the bytes a record writes, when the plan has one.
    room: Option<Room>,
}

/// What a record of `n` bytes can write at most: `n × (1 + per_byte) + constant`. Every op
/// that reads writes at most its input and a fixed excess (a varint of one byte becomes a tag
/// and up to ten bytes; a string's length prefix is never shorter than the row's); an op that
/// reads nothing (opening a message) runs once per run of the record, array item or union
/// around it. The ops outside arrays add their excess once (`constant`); those inside an array
/// once per item, and an item takes at least `min_item` bytes, so their excess divided by that
/// is a cost per input byte. A plan with an op the tree executor runs (its output has no such
/// bound) or with an array of items that may take no bytes has no bound: its records are
/// written with a capacity check per write.
#[derive(Debug, Clone, Copy)]
struct Room {
    per_byte: usize,
    constant: usize,
}

impl Room {
    fn bound(self, input: usize) -> Option<usize> {
        input
            .checked_mul(1 + self.per_byte)?
            .checked_add(self.constant)?
            .checked_add(raw::STORE_SLACK)
    }
}

/// One step. Jump targets are indexes into [`FlatPlan::ops`].
#[derive(Debug, Clone, Copy)]
enum FlatOp {
    Long(Key),
    Int(Key),
    /// A string, checked for UTF-8 (`Str`, `StrAsBytes` and `BytesAsStr` all are).
    Str(Key),
    /// A union of null and a string (one op for the branch op, its table and the string op):
    /// branch `1` is the string when the flag is set, else branch `0` is.
    NullOrStr(Key, bool),
    Bytes(Key),
    Double(Key),
    Float(Key),
    Bool(Key),
    TimestampMicros(Key, u32),
    /// A `timestamp-millis` times 1000, then as `TimestampMicros`.
    TimestampMillis(Key, u32),
    /// A `timestamp-nanos` divided by 1000 (rounded towards negative infinity), then as
    /// `TimestampMicros`.
    TimestampNanos(Key, u32),
    Date(Key, u32),
    /// Symbols `base..base + n` of [`FlatPlan::symbols`].
    Enum {
        base: u32,
        n: u32,
    },
    /// A `bytes` decimal into a column of scale `scale + pow`.
    Decimal {
        tag: Key,
        scale: u8,
        pow: u8,
        big: bool,
        column: u32,
    },
    /// [`FlatPlan::scalars`]`[i]` through the tree executor's conversion.
    Scalar(u32),
    /// [`FlatPlan::subtrees`]`[i]` through the tree executor.
    Subtree(u32),
    SkipLong,
    SkipInt,
    SkipBool,
    SkipFixed(u32),
    SkipBytes,
    SkipEnum(u32),
    Open(Key),
    Close,
    Branch {
        n: u32,
        table: u32,
    },
    Jump(u32),
    /// Reads a block count; an empty array continues at `end`.
    ArrayBegin {
        min_item: u32,
        end: u32,
    },
    /// One item done: the next one starts at `body`, or the next block is read.
    ArrayNext {
        min_item: u32,
        body: u32,
    },
    /// `Close` and `ArrayNext` in one op, for an item that is one message.
    CloseNext {
        min_item: u32,
        body: u32,
    },
    /// [`FlatPlan::errors`]`[i]`.
    Fail(u32),
    End,
}

// A jump finds its op by shifting the index: keep the ops at sixteen bytes.
const _: () = assert!(std::mem::size_of::<FlatOp>() == 16);

impl FlatPlan {
    /// The flat form of a row's plan, or `None` when the plan nests records and arrays deeper
    /// than [`MAX_DEPTH`] or is too large for 32-bit indexes: such a plan keeps the tree
    /// executor.
    pub(crate) fn lower(root: &RecordOp) -> Option<FlatPlan> {
        let mut l = Lowering {
            excess: vec![0],
            bounded: true,
            ..Lowering::default()
        };
        l.record(root, 0)?;
        l.ops.push(FlatOp::End);
        u32::try_from(l.ops.len()).ok()?;
        // The executor reads ops without bounds checks: every jump must land on an op.
        let len = l.ops.len() as u32;
        let jumps_land = l.ops.iter().all(|op| match *op {
            FlatOp::Jump(to) | FlatOp::ArrayBegin { end: to, .. } => to < len,
            FlatOp::ArrayNext { body, .. } | FlatOp::CloseNext { body, .. } => body < len,
            FlatOp::Branch { n, table } => (table as usize)
                .checked_add(n as usize)
                .is_some_and(|e| e <= l.targets.len()),
            _ => true,
        });
        assert!(
            jumps_land && l.targets.iter().all(|t| *t < len),
            "a flat plan jumps outside its ops"
        );
        // Nor are its stacks of open messages and arrays: none nests deeper than they hold.
        assert!(
            nesting(&l.ops).is_some_and(|deepest| deepest <= MAX_DEPTH),
            "a flat plan nests deeper than the executor's stacks"
        );
        let room = l.bounded.then_some(Room {
            per_byte: l.per_byte,
            constant: l.excess[0],
        });
        Some(FlatPlan {
            ops: l.ops.into(),
            targets: l.targets.into(),
            columns: l.columns.into(),
            symbols: l.symbols.into(),
            scalars: l.scalars.into(),
            subtrees: l.subtrees.into(),
            errors: l.errors.into(),
            room,
        })
    }
}

/// The most messages or arrays open at once in `ops`, or `None` when an op closes one that
/// is not open. The ops of a union's branches and of an array's item are whole pairs, so one
/// pass in order counts what any run holds open.
fn nesting(ops: &[FlatOp]) -> Option<usize> {
    let (mut opens, mut arrays, mut deepest) = (0usize, 0usize, 0usize);
    for op in ops {
        match op {
            FlatOp::Open(_) => opens += 1,
            FlatOp::Close => opens = opens.checked_sub(1)?,
            FlatOp::ArrayBegin { .. } => arrays += 1,
            FlatOp::ArrayNext { .. } => arrays = arrays.checked_sub(1)?,
            FlatOp::CloseNext { .. } => {
                opens = opens.checked_sub(1)?;
                arrays = arrays.checked_sub(1)?;
            }
            _ => {}
        }
        deepest = deepest.max(opens).max(arrays);
    }
    Some(deepest)
}

#[derive(Default)]
struct Lowering {
    ops: Vec<FlatOp>,
    targets: Vec<u32>,
    columns: Vec<Arc<str>>,
    symbols: Vec<Box<[u8]>>,
    scalars: Vec<(Tag, Conv, Arc<str>)>,
    subtrees: Vec<Op>,
    errors: Vec<RecordError>,
    /// The excess of the ops lowered so far, per array around them (the outermost: the row).
    excess: Vec<usize>,
    /// The arrays' excess per input byte.
    per_byte: usize,
    /// No op without a bound on its output so far.
    bounded: bool,
}

/// The most a NUMERIC or BIGNUMERIC value takes: 16 or 32 bytes.
const NUMERIC_BYTES: usize = 16;
const BIGNUMERIC_BYTES: usize = 32;
/// The most a message's length can grow when it is closed: from one byte to ten.
const LENGTH_GROWTH: usize = 9;

fn index(len: usize) -> Option<u32> {
    u32::try_from(len).ok()
}

impl Lowering {
    fn pc(&self) -> Option<u32> {
        index(self.ops.len())
    }

    /// An op that writes at most `excess` bytes more than it reads.
    fn charge(&mut self, excess: usize) {
        let top = self.excess.last_mut().expect("the row's entry");
        *top = top.saturating_add(excess);
    }

    fn fail(&mut self, e: RecordError) -> Option<()> {
        let i = index(self.errors.len())?;
        self.errors.push(e);
        self.ops.push(FlatOp::Fail(i));
        Some(())
    }

    fn subtree(&mut self, op: &Op) -> Option<()> {
        let i = index(self.subtrees.len())?;
        self.subtrees.push(op.clone());
        self.ops.push(FlatOp::Subtree(i));
        self.bounded = false;
        Some(())
    }

    fn column(&mut self, c: &Arc<str>) -> Option<u32> {
        let i = index(self.columns.len())?;
        self.columns.push(c.clone());
        Some(i)
    }

    /// `depth`: records and arrays open around this one.
    fn record(&mut self, rec: &RecordOp, depth: usize) -> Option<()> {
        if depth >= MAX_DEPTH {
            return None;
        }
        if let Some(column) = &rec.missing_required {
            // The tree executor refuses such a record before reading any of it.
            return self.fail(RecordError::MissingRequired {
                column: column.clone(),
            });
        }
        if let Some(tag) = rec.tag {
            self.ops.push(FlatOp::Open(tag.into()));
            self.charge(tag.encoded_len() as usize + 1 + LENGTH_GROWTH);
        }
        for f in rec.fields.iter() {
            self.op(f, depth + 1)?;
        }
        if rec.tag.is_some() {
            self.ops.push(FlatOp::Close);
        }
        Some(())
    }

    fn op(&mut self, op: &Op, depth: usize) -> Option<()> {
        match op {
            Op::Scalar { tag, conv, column } => self.scalar(*tag, conv, column),
            Op::Skip(s) => {
                let flat = match s {
                    Skip::Nothing => return Some(()),
                    Skip::Bool => FlatOp::SkipBool,
                    Skip::Varint => FlatOp::SkipLong,
                    Skip::Int => FlatOp::SkipInt,
                    Skip::Fixed(n) => FlatOp::SkipFixed(index(*n)?),
                    Skip::Bytes => FlatOp::SkipBytes,
                    Skip::Enum(n) => FlatOp::SkipEnum(index(*n)?),
                    Skip::Array(..) | Skip::Map(..) | Skip::Record(_) | Skip::Union(_) => {
                        return self.skip(s, depth);
                    }
                };
                self.ops.push(flat);
                Some(())
            }
            Op::Null(OnNull::Nothing) => Some(()),
            Op::Null(OnNull::RequiredError(column)) => self.fail(RecordError::NullRequired {
                column: column.clone(),
            }),
            Op::Null(OnNull::ElementError(column)) => self.fail(RecordError::NullElement {
                column: column.clone(),
            }),
            Op::Union(branches) => self.union(branches, depth),
            Op::Array { item, min_item } => self.array(*min_item, depth, |l| l.op(item, depth + 1)),
            Op::Record(rec) => self.record(rec, depth),
            // An entry is a message of the key and the value, as the tree executor writes it.
            Op::MapEntries {
                entry,
                key,
                value,
                min_item,
            } => self.array(*min_item, depth, |l| {
                l.ops.push(FlatOp::Open((*entry).into()));
                l.charge(entry.encoded_len() as usize + 1 + LENGTH_GROWTH);
                l.ops.push(FlatOp::Str((*key).into()));
                l.charge(key.encoded_len() as usize);
                l.op(value, depth + 1)?;
                l.ops.push(FlatOp::Close);
                Some(())
            }),
            Op::Json { .. } => self.subtree(op),
        }
    }

    /// An array's (or a map's) begin op, its item's ops from `item`, and its next op.
    fn array(
        &mut self,
        min_item: usize,
        depth: usize,
        item: impl FnOnce(&mut Self) -> Option<()>,
    ) -> Option<()> {
        if depth >= MAX_DEPTH {
            return None;
        }
        let min_item = index(min_item)?;
        let begin = self.ops.len();
        self.ops.push(FlatOp::ArrayBegin { min_item, end: 0 });
        let body = self.pc()?;
        self.excess.push(0);
        item(self)?;
        let excess = self.excess.pop().expect("pushed above");
        // An item that writes no more than it reads needs no per-item room, whatever its size
        // (a skipped array of nulls reads and writes nothing).
        if excess > 0 {
            match excess.checked_div(min_item as usize) {
                Some(_) => {
                    let cost = excess.div_ceil(min_item as usize);
                    self.per_byte = self.per_byte.saturating_add(cost);
                }
                None => self.bounded = false,
            }
        }
        if self.one_message(body as usize) {
            // The item's last op closes the message its first op opens: one op for both.
            *self.ops.last_mut().expect("the item's close") = FlatOp::CloseNext { min_item, body };
        } else {
            self.ops.push(FlatOp::ArrayNext { min_item, body });
        }
        let end = self.pc()?;
        self.ops[begin] = FlatOp::ArrayBegin { min_item, end };
        Some(())
    }

    /// Whether the ops from `body` to the last are one message: an `Open` whose `Close` is the
    /// last op (a union's branches inside it hold whole pairs, so counting finds the pairs).
    fn one_message(&self, body: usize) -> bool {
        let item = &self.ops[body..];
        if !matches!(item.first(), Some(FlatOp::Open(_))) {
            return false;
        }
        let mut depth = 0usize;
        for (i, op) in item.iter().enumerate() {
            match op {
                FlatOp::Open(_) => depth += 1,
                FlatOp::Close => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1 == item.len();
                    }
                }
                _ => {}
            }
        }
        false
    }

    /// A skipped value: the ops of its kind that write nothing; a skipped union a branch op, a
    /// skipped array or map the array ops around its item (a map's key is skipped as bytes: the
    /// tree executor does not check a skipped string's UTF-8 either).
    fn skip(&mut self, s: &Skip, depth: usize) -> Option<()> {
        let flat = match s {
            Skip::Nothing => return Some(()),
            Skip::Bool => FlatOp::SkipBool,
            Skip::Varint => FlatOp::SkipLong,
            Skip::Int => FlatOp::SkipInt,
            Skip::Fixed(n) => FlatOp::SkipFixed(index(*n)?),
            Skip::Bytes => FlatOp::SkipBytes,
            Skip::Enum(n) => FlatOp::SkipEnum(index(*n)?),
            Skip::Array(item, min_item) => {
                return self.array(*min_item, depth, |l| l.skip(item, depth + 1));
            }
            Skip::Map(value, min_item) => {
                return self.array(*min_item, depth, |l| {
                    l.ops.push(FlatOp::SkipBytes);
                    l.skip(value, depth + 1)
                });
            }
            Skip::Record(fields) => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                for f in fields.iter() {
                    self.skip(f, depth + 1)?;
                }
                return Some(());
            }
            Skip::Union(branches) => {
                return self.branches(branches.len(), |l, i| l.skip(&branches[i], depth));
            }
        };
        self.ops.push(flat);
        Some(())
    }

    /// A branch op and its table, then each branch's ops followed by a jump to the end; a
    /// branch without ops (a null that writes nothing) jumps straight to the end.
    fn union(&mut self, branches: &[Op], depth: usize) -> Option<()> {
        let at = self.ops.len();
        let table = self.targets.len();
        self.branches(branches.len(), |l, i| l.op(&branches[i], depth))?;
        // A null and a string: the branch op, the string op and no jump (`branches` jumps over
        // the string when it comes first, and a null's branch jumps to the end).
        if let [FlatOp::Branch { n: 2, .. }, ops @ ..] = &self.ops[at..] {
            let string = match ops {
                [FlatOp::Str(key)] => Some((*key, self.targets[table] != at as u32 + 1)),
                [FlatOp::Str(key), FlatOp::Jump(_)] => Some((*key, false)),
                _ => None,
            };
            if let Some((key, second)) = string {
                self.ops.truncate(at);
                self.targets.truncate(table);
                self.ops.push(FlatOp::NullOrStr(key, second));
            }
        }
        Some(())
    }

    /// A union of `n` branches whose ops `branch` lowers.
    fn branches(
        &mut self,
        n: usize,
        mut branch: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        let table = index(self.targets.len())?;
        self.ops.push(FlatOp::Branch {
            n: index(n)?,
            table,
        });
        // The whole table first: a branch's own unions take their tables after it.
        self.targets.resize(table as usize + n, 0);
        let mut jumps = Vec::new();
        let mut empty = Vec::new();
        for i in 0..n {
            let start = self.pc()?;
            self.targets[table as usize + i] = start;
            branch(self, i)?;
            if self.pc()? == start {
                empty.push(table as usize + i);
            } else if i + 1 < n {
                jumps.push(self.ops.len());
                self.ops.push(FlatOp::Jump(0));
            }
        }
        let end = self.pc()?;
        for j in jumps {
            self.ops[j] = FlatOp::Jump(end);
        }
        for e in empty {
            self.targets[e] = end;
        }
        Some(())
    }

    fn scalar(&mut self, tag: Tag, conv: &Conv, column: &Arc<str>) -> Option<()> {
        let t = tag.encoded_len() as usize;
        // What each op writes beyond what it reads (`Room`): a varint of one byte becomes up to
        // ten, a float of four a double of eight, a decimal of one byte up to its column's size.
        let (flat, excess) = match conv {
            Conv::Long => (FlatOp::Long(tag.into()), t + 9),
            Conv::Int => (FlatOp::Int(tag.into()), t + 9),
            Conv::Str | Conv::StrAsBytes | Conv::BytesAsStr => (FlatOp::Str(tag.into()), t),
            Conv::Bytes => (FlatOp::Bytes(tag.into()), t),
            Conv::Double => (FlatOp::Double(tag.into()), t),
            Conv::Float => (FlatOp::Float(tag.into()), t + 4),
            Conv::Bool => (FlatOp::Bool(tag.into()), t),
            Conv::TimestampMicros => (
                FlatOp::TimestampMicros(tag.into(), self.column(column)?),
                t + 9,
            ),
            Conv::TimestampMillis => (
                FlatOp::TimestampMillis(tag.into(), self.column(column)?),
                t + 9,
            ),
            Conv::TimestampNanos => (
                FlatOp::TimestampNanos(tag.into(), self.column(column)?),
                t + 9,
            ),
            Conv::Date => (FlatOp::Date(tag.into(), self.column(column)?), t + 9),
            Conv::Enum(symbols) => {
                let base = index(self.symbols.len())?;
                let mut longest = 0;
                for s in symbols.iter() {
                    let mut field = Vec::new();
                    put_len_delimited(&mut field, tag, s.as_bytes());
                    longest = longest.max(field.len());
                    self.symbols.push(field.into());
                }
                let n = index(symbols.len())?;
                (FlatOp::Enum { base, n }, longest.saturating_sub(1))
            }
            Conv::Decimal {
                fixed: None,
                scale,
                target,
            } if *scale <= target.scale() => {
                let big = *target == DecimalTarget::BigNumeric;
                let most = if big { BIGNUMERIC_BYTES } else { NUMERIC_BYTES };
                let op = FlatOp::Decimal {
                    tag: tag.into(),
                    scale: *scale as u8,
                    pow: (target.scale() - scale) as u8,
                    big,
                    column: self.column(column)?,
                };
                (op, t + most)
            }
            _ => {
                let i = index(self.scalars.len())?;
                self.scalars.push((tag, conv.clone(), column.clone()));
                self.bounded = false;
                (FlatOp::Scalar(i), 0)
            }
        };
        self.charge(excess);
        self.ops.push(flat);
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AvroSchema, DeriveOptions, Plan, PlanOptions, table_schema_from_avro};

    fn flat(schema: &str) -> FlatPlan {
        let schema = AvroSchema::parse(schema).unwrap();
        let table = table_schema_from_avro(&schema, &DeriveOptions::default()).unwrap();
        let plan = Plan::compile(&schema, &table, &PlanOptions::default()).unwrap();
        match plan.body {
            crate::Body::Avro { flat: Some(f), .. } => f,
            _ => panic!("no flat plan"),
        }
    }

    /// Records, maps and arrays nested up to and past the limits, written into columns (the
    /// table's fifteen levels end first) and skipped (no table limit: the flat plan's ends):
    /// every plan that lowers fits the executor's stacks (`lower` asserts it), the deeper ones
    /// keep the tree executor.
    #[test]
    fn plans_nested_to_the_limit_fit_the_stacks() {
        let skipped: kbq_core::table_schema::TableSchema =
            serde_json::from_str(r#"{"fields":[{"name":"x","type":"INT64"}]}"#).unwrap();
        let (mut written, mut lowered) = (0, 0);
        for k in 1..=40 {
            let mut ty = r#""long""#.to_string();
            for i in 0..k {
                ty = match i % 3 {
                    0 => format!(r#"{{"type":"map","values":{ty}}}"#),
                    1 => format!(
                        r#"{{"type":"record","name":"r{i}","fields":[{{"name":"f","type":{ty}}}]}}"#
                    ),
                    _ => format!(r#"{{"type":"array","items":{ty}}}"#),
                };
            }
            let schema = format!(
                r#"{{"type":"record","name":"top","fields":[{{"name":"x","type":"long"}},{{"name":"f","type":{ty}}}]}}"#
            );
            let schema = AvroSchema::parse(&schema).unwrap();
            let derived = table_schema_from_avro(&schema, &DeriveOptions::default());
            if derived.is_ok() {
                written = k;
            }
            for table in derived.iter().chain([&skipped]) {
                let plan = Plan::compile(&schema, table, &PlanOptions::default()).unwrap();
                let crate::Body::Avro { flat, .. } = plan.body else {
                    panic!("not an Avro plan")
                };
                if let Some(f) = flat {
                    assert!(nesting(&f.ops).unwrap() <= MAX_DEPTH, "{k}");
                    lowered = lowered.max(k);
                }
            }
        }
        // Both limits were reached: the table's, and the flat plan's for skipped values.
        assert!((10..40).contains(&written), "{written}");
        assert!((written..40).contains(&lowered), "{lowered}");
    }

    #[test]
    fn timestamps_in_milliseconds_and_nanoseconds_are_flat_ops() {
        let f = flat(
            r#"{"type":"record","name":"t","fields":[
              {"name":"ms","type":{"type":"long","logicalType":"timestamp-millis"}},
              {"name":"ns","type":{"type":"long","logicalType":"timestamp-nanos"}}]}"#,
        );
        assert!(matches!(
            f.ops[..],
            [
                FlatOp::TimestampMillis(..),
                FlatOp::TimestampNanos(..),
                FlatOp::End
            ]
        ));
        assert!(f.scalars.is_empty() && f.room.is_some());
    }

    #[test]
    fn a_nullable_string_and_an_item_message_are_one_op_each() {
        let f = flat(
            r#"{"type":"record","name":"f","fields":[
              {"name":"a","type":["null","string"]},
              {"name":"b","type":["string","null"]},
              {"name":"c","type":["null","long"]},
              {"name":"items","type":{"type":"array","items":{"type":"record","name":"i",
                "fields":[{"name":"s","type":"string"}]}}},
              {"name":"tags","type":{"type":"array","items":"string"}}]}"#,
        );
        let kinds: Vec<String> = f
            .ops
            .iter()
            .map(|op| {
                format!("{op:?}")
                    .split(['(', ' '])
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "NullOrStr",
                "NullOrStr",
                "Branch",
                "Long",
                "ArrayBegin",
                "Open",
                "Str",
                "CloseNext",
                "ArrayBegin",
                "Str",
                "ArrayNext",
                "End"
            ],
        );
        assert!(matches!(f.ops[0], FlatOp::NullOrStr(_, true)));
        assert!(matches!(f.ops[1], FlatOp::NullOrStr(_, false)));
        assert!(matches!(f.ops[7], FlatOp::CloseNext { body: 5, .. }));
        // The fused unions leave no branch table behind: the long's is the only one.
        assert_eq!(f.targets.len(), 2);
    }
}
