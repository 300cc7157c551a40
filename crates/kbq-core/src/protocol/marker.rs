//! The group's marker on each table, and the one rule both machines keep with it: **commits wait
//! for the marker** (docs/architecture.md, invariant 7). A table carries the marker once this
//! group may have committed offsets for it; until then no commit of its partitions is made, so
//! expired offsets can never pass for a first start. The exactly-once protocol and the
//! at-least-once ledger each hold one `Markers`: what differs between them is only what waited
//! for a marker (re-flushes, cycle commits, the final commit), which each releases itself when
//! [`Markers::on_result`] says the marker landed.

use std::collections::{BTreeMap, BTreeSet};

use super::{Action, Outcome};
use crate::metadata::TableFingerprint;

#[derive(Debug, Default)]
pub struct Markers {
    /// Tables known to carry the marker (read at assignment, or written by us).
    marked: BTreeSet<TableFingerprint>,
    /// Tables whose marker is being written: how many attempts failed so far.
    writing: BTreeMap<TableFingerprint, u32>,
    /// How many markers were asked for so far.
    requests: MarkerRequests,
    /// Tables whose marker this machine asked for without having read it on the table: the
    /// number of requests made before it. The marker cannot have landed before its request.
    asked: BTreeMap<TableFingerprint, MarkerRequests>,
}

/// How many table markers a machine had asked for at some point: the shell notes it when it
/// receives a partition's committed offset, so that a marker asked for from then on is known to
/// have landed after that read (docs/architecture.md, "Start cases").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct MarkerRequests(pub u64);

impl MarkerRequests {
    /// No ordering known: every marker this machine wrote may have landed before the read.
    pub const ALL: MarkerRequests = MarkerRequests(u64::MAX);
}

impl Markers {
    /// Whether `table` carries the marker.
    pub fn contains(&self, table: &TableFingerprint) -> bool {
        self.marked.contains(table)
    }

    /// Whether `table` carried the marker when a partition's committed offset was read, as far
    /// as this machine knows: a marker it asked for at or after `read` landed after the read, so
    /// the absence of an offset read then is a first start (commits wait for the marker, and
    /// markers are never removed). A marker read on the table counts for every read.
    pub fn marked_at(&self, table: &TableFingerprint, read: MarkerRequests) -> bool {
        self.marked.contains(table) && self.asked.get(table).is_none_or(|asked| *asked < read)
    }

    /// How many markers were asked for so far.
    pub fn requests(&self) -> MarkerRequests {
        self.requests
    }

    /// `table` carries the marker already (the assignment read its label).
    pub fn insert(&mut self, table: TableFingerprint) {
        self.marked.insert(table);
        self.asked.remove(&table);
    }

    /// Asks for the marker on `table` unless it is there or being written; true if it is there.
    pub fn request(&mut self, table: TableFingerprint, out: &mut Vec<Action>) -> bool {
        if self.marked.contains(&table) {
            return true;
        }
        if let std::collections::btree_map::Entry::Vacant(writing) = self.writing.entry(table) {
            writing.insert(0);
            self.asked.entry(table).or_insert(self.requests);
            self.requests.0 += 1;
            out.push(Action::LabelTable { table, attempt: 0 });
        }
        false
    }

    /// Commits wait for the marker: of `candidates` (a commit entry and its partition's table),
    /// those whose table carries the marker, in their order; the marker of every other table
    /// is asked for, once per table. `all` is whether no candidate had to wait.
    pub fn admit<T>(
        &mut self,
        candidates: impl IntoIterator<Item = (T, TableFingerprint)>,
        out: &mut Vec<Action>,
    ) -> Admitted<T> {
        let mut ready = Vec::new();
        let mut unmarked = BTreeSet::new();
        for (candidate, table) in candidates {
            if self.marked.contains(&table) {
                ready.push(candidate);
            } else {
                unmarked.insert(table);
            }
        }
        let all = unmarked.is_empty();
        for table in unmarked {
            self.request(table, out);
        }
        Admitted { ready, all }
    }

    /// The answer to a marker write. A failure is counted and the write retried (with the
    /// shell's backoff) until it lands: meanwhile the table's partitions commit nothing, which
    /// the count and readiness make visible. True if the marker landed now: the caller releases
    /// what waited for it.
    pub fn on_result(
        &mut self,
        table: TableFingerprint,
        outcome: Result<(), String>,
        out: &mut Vec<Action>,
    ) -> bool {
        let Some(failures) = self.writing.remove(&table) else {
            return false;
        };
        if let Err(error) = outcome {
            let attempts = failures + 1;
            self.writing.insert(table, attempts);
            out.push(Action::Count(Outcome::LabelFailed {
                table,
                attempts,
                error,
            }));
            out.push(Action::LabelTable {
                table,
                attempt: attempts,
            });
            return false;
        }
        self.marked.insert(table);
        out.push(Action::Count(Outcome::Labelled { table }));
        true
    }
}

/// What [`Markers::admit`] let through.
#[derive(Debug)]
pub struct Admitted<T> {
    pub ready: Vec<T>,
    /// No candidate waits for a marker.
    pub all: bool,
}
