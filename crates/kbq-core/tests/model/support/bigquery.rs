//! The model tests' BigQuery (`model.rs`), one table per topic: BUFFERED streams
//! with explicit-offset appends, a flush cursor, finalize and expiry, for the exactly-once
//! protocol; the `_default` stream, whose appends are visible as they land and carry no offset,
//! for the at-least-once ledger; and the group's marker, a label per table. The rules are
//! docs/architecture.md#bigquery-facts; there is no API that tells where a flush cursor is.

// Each model test uses its own part of this file.
#![allow(dead_code)]

use super::model::{Delivery, PARTITIONS};
use kbq_core::metadata::TableFingerprint;
use kbq_core::offsets::{KafkaOffset, RowOffset};
use kbq_core::protocol::FlushOutcome;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamState {
    Open,
    Finalized,
    /// Expired (TTL) or deleted: every call answers NOT_FOUND.
    Gone,
}

/// A BUFFERED stream of partition `partition`: the records its rows hold, in row order.
#[derive(Debug)]
pub struct Stream {
    pub partition: usize,
    pub rows: Vec<i64>,
    pub cursor: Option<i64>,
    pub state: StreamState,
}

/// What an append at an explicit row offset came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Append {
    /// The stream expired (NOT_FOUND).
    StreamLost,
    /// The stream was finalized: whoever appends is a zombie.
    StreamFinalized,
    /// ALREADY_EXISTS: the row holds this record.
    AlreadyExists(i64),
    /// The row landed (its answer may still be lost).
    Landed,
    /// The request did not land.
    NotLanded,
    /// OUT_OF_RANGE: the stream has only this many rows.
    Beyond(i64),
}

#[derive(Debug, Default)]
pub struct BigQuery {
    pub streams: BTreeMap<String, Stream>,
    pub created: u64,
    /// Per partition: how often each record landed on the `_default` stream.
    pub default_stream: [BTreeMap<i64, u32>; PARTITIONS],
    /// Tables carrying the group's marker.
    pub marked: BTreeSet<u64>,
}

impl BigQuery {
    /// How often each record of partition `p` is visible: flushed rows of its BUFFERED streams
    /// and what landed on `_default`.
    pub fn visible(&self, p: usize) -> BTreeMap<i64, u32> {
        let mut out = self.default_stream[p].clone();
        for s in self.streams.values().filter(|s| s.partition == p) {
            if let Some(c) = s.cursor {
                for &x in &s.rows[..=(c as usize)] {
                    *out.entry(x).or_default() += 1;
                }
            }
        }
        out
    }

    /// The highest record of `p` visible (what the resolve query of the table answers).
    pub fn highest_visible(&self, p: usize) -> Option<KafkaOffset> {
        self.visible(p).keys().next_back().map(|x| KafkaOffset(*x))
    }

    pub fn is_marked(&self, table: &TableFingerprint) -> bool {
        self.marked.contains(&table.0)
    }

    pub fn mark(&mut self, table: &TableFingerprint) {
        self.marked.insert(table.0);
    }

    // ---- BUFFERED streams

    /// CreateWriteStream for partition `p`: the new stream's id.
    pub fn create_stream(&mut self, p: usize) -> String {
        self.created += 1;
        let id = format!("s{}", self.created);
        self.streams.insert(
            id.clone(),
            Stream {
                partition: p,
                rows: Vec::new(),
                cursor: None,
                state: StreamState::Open,
            },
        );
        id
    }

    /// AppendRows of `record` at row `row` of `stream`.
    pub fn append(&mut self, stream: &str, row: i64, record: i64, d: Delivery) -> Append {
        let s = self.streams.get_mut(stream).expect("a stream of the model");
        match s.state {
            StreamState::Gone => return Append::StreamLost,
            StreamState::Finalized => return Append::StreamFinalized,
            StreamState::Open => {}
        }
        let len = s.rows.len() as i64;
        if row < len {
            Append::AlreadyExists(s.rows[row as usize])
        } else if row > len {
            Append::Beyond(len)
        } else if !d.applied() {
            Append::NotLanded
        } else {
            s.rows.push(record);
            Append::Landed
        }
    }

    /// The stream a FlushRows can move, or the refusal it gets first (NOT_FOUND, finalized).
    pub fn flushable(&self, stream: &str) -> Result<&Stream, FlushOutcome> {
        match self.streams.get(stream).map(|s| (s, s.state)) {
            None | Some((_, StreamState::Gone)) => Err(FlushOutcome::NotFound),
            Some((_, StreamState::Finalized)) => Err(FlushOutcome::StreamFinalized),
            Some((s, StreamState::Open)) => Ok(s),
        }
    }

    /// FlushRows through `through` of a flushable stream: the same offset again is a success,
    /// one below the cursor ALREADY_EXISTS.
    pub fn flush(&mut self, stream: &str, through: RowOffset) -> FlushOutcome {
        let s = self.streams.get_mut(stream).expect("flushable");
        if s.cursor.is_some_and(|c| c > through.0) {
            return FlushOutcome::AlreadyExists;
        }
        s.cursor = Some(through.0);
        FlushOutcome::Flushed
    }

    pub fn finalize(&mut self, stream: &str) -> Result<(), String> {
        match self.streams.get_mut(stream) {
            Some(s) if s.state != StreamState::Gone => {
                s.state = StreamState::Finalized;
                Ok(())
            }
            _ => Err("not found".into()),
        }
    }

    /// A fault: `stream` expires (TTL). Whether there was such a stream.
    pub fn expire(&mut self, stream: &str) -> bool {
        let Some(s) = self.streams.get_mut(stream) else {
            return false;
        };
        s.state = StreamState::Gone;
        true
    }

    /// A fault: someone else finalizes `stream`. Whether it was open.
    pub fn finalize_behind_our_back(&mut self, stream: &str) -> bool {
        match self.streams.get_mut(stream) {
            Some(s) if s.state == StreamState::Open => {
                s.state = StreamState::Finalized;
                true
            }
            _ => false,
        }
    }

    // ---- the `_default` stream

    /// Records `a..b` of `p` land on `_default`, visible at once.
    pub fn land(&mut self, p: usize, a: i64, b: i64) {
        for x in a..b {
            *self.default_stream[p].entry(x).or_default() += 1;
        }
    }
}
