//! The applied state of a CDC table: what a query reads once every change is applied (the
//! emulator behaves as if `max_staleness` were 0, every read merges at run time).
//!
//! Computed from the visible log on read, so that the persisted row logs need nothing new: a
//! restarted emulator replays the log and derives the same state. Cached until the log grows or
//! the primary key changes.

use std::sync::Arc;

use crate::cdc::{self, Change, ChangeKind, Sequence};
use kbq_core::table_schema::TableSchema;

use super::{Table, VisibleLog, VisibleRow};

/// The last applied state, with what it was computed from.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    computed: Option<(u64, Vec<String>, Arc<Vec<VisibleRow>>)>,
}

impl VisibleLog {
    /// The rows of the applied state, in the order their winning change became visible.
    pub(crate) fn applied_rows(&mut self, table: &Table) -> Arc<Vec<VisibleRow>> {
        let key_columns = table.primary_key();
        if let Some((total, key, rows)) = &self.applied.computed
            && *total == self.total
            && *key == key_columns
        {
            return rows.clone();
        }
        let key_schema = TableSchema {
            fields: key_columns
                .iter()
                .filter_map(|name| {
                    table
                        .schema
                        .fields
                        .iter()
                        .find(|c| c.name.eq_ignore_ascii_case(name))
                        .cloned()
                })
                .collect(),
        };
        let mut rows = Vec::with_capacity(self.total as usize);
        let mut changes = Vec::with_capacity(self.total as usize);
        for (request, (_, batch, range)) in self.chunks.iter().enumerate() {
            for data in &batch.rows[range.clone()] {
                let values = batch.codec.pseudo_values(data);
                // Rows were checked on append; a value that no longer parses counts as absent.
                let kind = ChangeKind::parse(values.change_type).unwrap_or(ChangeKind::Plain);
                let sequence = values
                    .sequence
                    .and_then(|s| std::str::from_utf8(s).ok())
                    .and_then(Sequence::parse);
                let key = batch.codec.render(data, &key_schema).to_string();
                changes.push(Change {
                    key,
                    kind,
                    sequence,
                    request: request as u64,
                });
                rows.push(VisibleRow {
                    data: data.clone(),
                    codec: batch.codec.clone(),
                });
            }
        }
        let live: Vec<VisibleRow> = cdc::apply(&changes)
            .into_iter()
            .map(|i| rows[i].clone())
            .collect();
        let live = Arc::new(live);
        self.applied.computed = Some((self.total, key_columns, live.clone()));
        live
    }
}
