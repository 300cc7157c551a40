//! The check of `quickstart --cdc`: the BigQuery table, as a query reads it (the emulator's
//! applied state, docs/cdc.md), against the source table, key by key and column by column.

use std::collections::BTreeMap;

use anyhow::anyhow;

use kbq_emulator::store::{Store, TableRef};

use super::cdc_source::{Row, State};

/// The columns compared (all of the table's).
pub(super) const COLUMNS: [&str; 4] = ["id", "name", "email", "version"];

/// The table against the source.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct KeyCheck {
    /// Rows of the source table.
    pub(super) source_rows: u64,
    /// Rows of the BigQuery table.
    pub(super) table_rows: u64,
    /// Keys whose row is equal in every column.
    pub(super) equal: u64,
    /// Keys of the source without a row in the table (a lost upsert, or a delete applied after
    /// a later re-insert).
    pub(super) missing: u64,
    /// Rows of keys the source does not have (a lost delete, or a deleted row brought back).
    pub(super) extra: u64,
    /// Rows with other values than the source's, e.g. an older version: a change applied out
    /// of order or lost.
    pub(super) differs: u64,
    /// Keys with more than one row (never, with a primary key).
    pub(super) duplicate_keys: u64,
    /// A few of the keys that are not equal, for the summary.
    pub(super) examples: Vec<String>,
}

impl KeyCheck {
    pub(super) fn equal_everywhere(&self) -> bool {
        self.missing == 0
            && self.extra == 0
            && self.differs == 0
            && self.duplicate_keys == 0
            && self.equal == self.source_rows
            && self.table_rows == self.source_rows
    }
}

/// Compares `table` (rows as read, `None` for one whose columns do not parse) with `source`.
pub(super) fn compare(
    source: &State,
    table: impl IntoIterator<Item = Option<(i64, Row)>>,
) -> KeyCheck {
    let mut check = KeyCheck {
        source_rows: source.len() as u64,
        ..KeyCheck::default()
    };
    let mut seen: BTreeMap<i64, Row> = BTreeMap::new();
    for row in table {
        check.table_rows += 1;
        let Some((id, row)) = row else {
            check.differs += 1;
            note(&mut check, "a row whose columns do not parse".into());
            continue;
        };
        if seen.insert(id, row).is_some() {
            check.duplicate_keys += 1;
            note(&mut check, format!("id {id}: more than one row"));
        }
    }
    for (id, want) in source {
        match seen.get(id) {
            None => {
                check.missing += 1;
                note(
                    &mut check,
                    format!("id {id}: missing (source has v{})", want.version),
                );
            }
            Some(got) if got == want => check.equal += 1,
            Some(got) => {
                check.differs += 1;
                note(
                    &mut check,
                    format!(
                        "id {id}: table has v{}, source v{}",
                        got.version, want.version
                    ),
                );
            }
        }
    }
    for (id, got) in &seen {
        if !source.contains_key(id) {
            check.extra += 1;
            note(
                &mut check,
                format!(
                    "id {id}: v{} in the table, deleted at the source",
                    got.version
                ),
            );
        }
    }
    check
}

fn note(check: &mut KeyCheck, example: String) {
    if check.examples.len() < 5 {
        check.examples.push(example);
    }
}

/// Reads the table as a query would and compares it with `source`.
pub(super) fn verify(store: &Store, table: &TableRef, source: &State) -> anyhow::Result<KeyCheck> {
    let schema = store
        .get_table(table)
        .ok_or_else(|| anyhow!("table {} does not exist", table.path()))?
        .schema;
    let index = |name: &str| {
        schema
            .fields
            .iter()
            .position(|f| f.name == name)
            .ok_or_else(|| anyhow!("the table has no column {name}"))
    };
    let [id, name, email, version] = COLUMNS.map(index);
    let (id, name, email, version) = (id?, name?, email?, version?);
    let page = store
        .read_visible_rows(table, 0, usize::MAX)
        .map_err(|e| anyhow!("cannot read the table: {e}"))?;
    let rows = page.rows.iter().map(|r| {
        let cells = r.codec.render(&r.data, &schema);
        let cell = |i: usize| cells["f"][i]["v"].as_str().map(str::to_string);
        Some((
            cell(id)?.parse().ok()?,
            Row {
                name: cell(name)?,
                email: cell(email)?,
                version: cell(version)?.parse().ok()?,
            },
        ))
    });
    Ok(compare(source, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(version: i64) -> Row {
        Row {
            name: format!("n{version}"),
            email: format!("e{version}"),
            version,
        }
    }

    #[test]
    fn compare_finds_lost_stale_resurrected_and_duplicated_rows() {
        let source: State = [(1, row(3)), (2, row(1)), (3, row(2)), (4, row(5))].into();
        let table = vec![
            Some((1, row(3))), // equal
            Some((3, row(1))), // an older version won
            Some((5, row(2))), // deleted at the source
            Some((4, row(5))), // equal, then twice
            Some((4, row(5))),
            None,
        ];
        let check = compare(&source, table);
        assert_eq!(check.source_rows, 4);
        assert_eq!(check.table_rows, 6);
        assert_eq!(check.equal, 2);
        assert_eq!(check.missing, 1, "id 2");
        assert_eq!(check.differs, 2, "id 3 and the unparsable row");
        assert_eq!(check.extra, 1, "id 5");
        assert_eq!(check.duplicate_keys, 1);
        assert!(!check.equal_everywhere());
        let exact = compare(&source, source.iter().map(|(k, v)| Some((*k, v.clone()))));
        assert!(exact.equal_everywhere(), "{exact:?}");
        // A row whose email alone differs is not equal.
        let mut other = row(3);
        other.email.push('x');
        let check = compare(&[(1, row(3))].into(), [Some((1, other))]);
        assert_eq!((check.equal, check.differs), (0, 1));
    }
}
