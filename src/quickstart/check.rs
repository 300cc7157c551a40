//! The append-only quickstart's check: every visible row's `(kafka_partition, kafka_offset)`
//! against what was produced, read from the emulator's table (and, while the run goes on, how
//! far each partition is visible, which paces the producer).

use anyhow::{anyhow, bail};

use kbq_core::table_schema::TableSchema;
use kbq_emulator::store::{Store, TableRef};

use super::orders::{OFFSET_COLUMN, PARTITION_COLUMN};

/// The table against the produced records.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Check {
    pub(super) distinct: u64,
    pub(super) duplicates: u64,
    pub(super) missing: u64,
    pub(super) unexpected: u64,
}

/// The partition and offset columns alone, and their positions: rendering only them keeps
/// reading a large table cheap.
fn offset_columns(store: &Store, table: &TableRef) -> anyhow::Result<(TableSchema, usize, usize)> {
    let schema = store
        .get_table(table)
        .ok_or_else(|| anyhow!("the table is gone"))?
        .schema;
    // Rendering only the two metadata columns keeps the check cheap for large tables.
    let columns = TableSchema {
        fields: schema
            .fields
            .iter()
            .filter(|f| f.name == PARTITION_COLUMN || f.name == OFFSET_COLUMN)
            .cloned()
            .collect(),
    };
    let index = |name: &str| columns.fields.iter().position(|f| f.name == name);
    let (Some(pi), Some(oi)) = (index(PARTITION_COLUMN), index(OFFSET_COLUMN)) else {
        bail!("the table lacks the {PARTITION_COLUMN}/{OFFSET_COLUMN} columns");
    };
    Ok((columns, pi, oi))
}

/// The (partition, offset) of a visible row.
fn row_position(
    row: &kbq_emulator::store::VisibleRow,
    columns: &TableSchema,
    pi: usize,
    oi: usize,
) -> Option<(i64, i64)> {
    let cells = row.codec.render(&row.data, columns);
    let cell = |i: usize| {
        cells["f"][i]["v"]
            .as_str()
            .and_then(|v| v.parse::<i64>().ok())
    };
    cell(pi).zip(cell(oi))
}

/// How far each partition is visible, read incrementally from the table's visibility log.
pub(super) struct Progress {
    columns: TableSchema,
    pi: usize,
    oi: usize,
    read: u64,
    pub(super) ends: Vec<u64>,
}

impl Progress {
    pub(super) fn new(
        store: &Store,
        table: &TableRef,
        partitions: i32,
    ) -> anyhow::Result<Progress> {
        let (columns, pi, oi) = offset_columns(store, table)?;
        Ok(Progress {
            columns,
            pi,
            oi,
            read: 0,
            ends: vec![0; partitions as usize],
        })
    }

    /// Reads the rows made visible since the last call; returns the visible row count.
    pub(super) fn update(&mut self, store: &Store, table: &TableRef) -> u64 {
        let Ok(page) = store.read_visible_rows(table, self.read, usize::MAX) else {
            return self.read;
        };
        for row in &page.rows {
            if let Some((p, o)) = row_position(row, &self.columns, self.pi, self.oi)
                && let Some(end) = usize::try_from(p).ok().and_then(|p| self.ends.get_mut(p))
            {
                *end = (*end).max(o as u64 + 1);
            }
        }
        self.read += page.rows.len() as u64;
        self.read
    }
}

/// Every visible row's (partition, offset) against the produced ranges `[0, ends[p])`.
pub(super) fn verify(
    store: &Store,
    table: &TableRef,
    ends: &[u64],
) -> anyhow::Result<(u64, Check)> {
    let (columns, pi, oi) = offset_columns(store, table)?;
    let page = store
        .read_visible_rows(table, 0, usize::MAX)
        .map_err(|e| anyhow!("cannot read the table: {e}"))?;
    let pairs = page
        .rows
        .iter()
        .map(|row| row_position(row, &columns, pi, oi));
    Ok((page.rows.len() as u64, tally(pairs, ends)))
}

/// Counts each (partition, offset) against the produced ranges `[0, ends[p])`; `None` is a row
/// without both values.
fn tally(pairs: impl Iterator<Item = Option<(i64, i64)>>, ends: &[u64]) -> Check {
    let mut seen: Vec<Vec<u8>> = ends.iter().map(|&n| vec![0u8; n as usize]).collect();
    let mut check = Check::default();
    for pair in pairs {
        let slot = pair
            .filter(|&(p, o)| p >= 0 && o >= 0)
            .and_then(|(p, o)| seen.get_mut(p as usize)?.get_mut(o as usize));
        match slot {
            Some(count) => {
                if *count > 0 {
                    check.duplicates += 1;
                } else {
                    check.distinct += 1;
                }
                *count = count.saturating_add(1);
            }
            None => check.unexpected += 1,
        }
    }
    check.missing = seen
        .iter()
        .map(|offsets| offsets.iter().filter(|&&c| c == 0).count() as u64)
        .sum();
    check
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_duplicates_gaps_and_strangers() {
        let rows = [
            Some((0, 0)),
            Some((0, 1)),
            Some((0, 1)),
            Some((1, 0)),
            Some((1, 5)),
            Some((2, 0)),
            None,
        ];
        let check = tally(rows.into_iter(), &[3, 2]);
        assert_eq!(
            check,
            Check {
                distinct: 3,
                duplicates: 1,
                missing: 2,
                unexpected: 3,
            }
        );
        let exact = tally([Some((0, 0)), Some((0, 1))].into_iter(), &[2]);
        assert_eq!(exact.duplicates + exact.missing + exact.unexpected, 0);
    }
}
