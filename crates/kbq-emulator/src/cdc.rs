//! Change data capture as BigQuery applies it (docs/cdc.md, "In the emulator"): the
//! pure rules, with no store or transport.
//!
//! * `_CHANGE_TYPE` is `UPSERT` or `DELETE`; unset (or `INSERT`) is a plain append.
//! * `_CHANGE_SEQUENCE_NUMBER` is 1–4 `/`-separated sections of 1–16 hex digits, compared section
//!   by section as unsigned numbers; the larger wins.
//! * Equal numbers: the later ingestion wins. Rows of one request share one ingestion time, so
//!   which of them wins is arbitrary in BigQuery; the emulator keeps the *first* of them, the
//!   answer a client relying on request order does not expect.
//! * A connection is in insert mode or upsert mode; mixing is refused.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::hash::Hash;

/// A parsed `_CHANGE_SEQUENCE_NUMBER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sequence(Vec<u64>);

impl Sequence {
    /// The documented format: `^[0-9A-Fa-f]{1,16}(/[0-9A-Fa-f]{1,16}){0,3}$`.
    pub fn parse(text: &str) -> Option<Sequence> {
        let sections: Vec<&str> = text.split('/').collect();
        if sections.len() > 4 {
            return None;
        }
        sections
            .iter()
            .map(|s| {
                if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                    None
                } else {
                    u64::from_str_radix(s, 16).ok()
                }
            })
            .collect::<Option<Vec<u64>>>()
            .map(Sequence)
    }
}

impl Ord for Sequence {
    /// Section by section; where one value is a prefix of the other (undocumented, callers should
    /// always send the same number of sections) the shorter one is the smaller.
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for Sequence {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What a row does to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Plain,
    Upsert,
    Delete,
}

impl ChangeKind {
    /// A `_CHANGE_TYPE` value; `None` for a value BigQuery does not accept.
    pub fn parse(value: Option<&[u8]>) -> Option<ChangeKind> {
        match value {
            None | Some(b"INSERT") => Some(ChangeKind::Plain),
            Some(b"UPSERT") => Some(ChangeKind::Upsert),
            Some(b"DELETE") => Some(ChangeKind::Delete),
            Some(_) => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ChangeKind::Plain => "INSERT",
            ChangeKind::Upsert => "UPSERT",
            ChangeKind::Delete => "DELETE",
        }
    }

    fn is_cdc(self) -> bool {
        self != ChangeKind::Plain
    }
}

/// The message BigQuery gives for a plain row on an upsert connection.
pub const NOT_A_CHANGE_TYPE: &str = "The given value is not a valid CHANGE_TYPE";

/// The mode of one AppendRows connection, decided by its first rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConnectionMode {
    #[default]
    Undecided,
    Insert,
    Upsert,
}

impl ConnectionMode {
    /// Admits the rows of one request, or names the first row that does not fit the connection's
    /// mode. A refused request leaves the mode as it was.
    pub fn admit(&mut self, kinds: &[ChangeKind]) -> Result<(), String> {
        let mut mode = *self;
        for kind in kinds {
            mode = match (mode, kind.is_cdc()) {
                (ConnectionMode::Undecided, false) => ConnectionMode::Insert,
                (ConnectionMode::Undecided, true) => ConnectionMode::Upsert,
                (ConnectionMode::Insert, true) => {
                    return Err(format!(
                        "{NOT_A_CHANGE_TYPE} in insert mode: {}",
                        kind.name()
                    ));
                }
                (ConnectionMode::Upsert, false) => return Err(NOT_A_CHANGE_TYPE.to_string()),
                (same, _) => same,
            };
        }
        *self = mode;
        Ok(())
    }
}

/// One visible row as the apply step sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change<K> {
    /// The primary-key values.
    pub key: K,
    pub kind: ChangeKind,
    pub sequence: Option<Sequence>,
    /// The request (ingestion) the row arrived in; later requests have larger numbers.
    pub request: u64,
}

/// The rows of the applied table, as indexes into `changes` (which are in ingestion order), in
/// ascending order.
///
/// Per key the winning change is the one with the largest (sequence number, request); an absent
/// number is below every present one (BigQuery calls mixing them unpredictable). A winning UPSERT
/// is the key's row; a winning DELETE leaves none. A plain row stays unless a winning change of
/// its key was ingested with it or after it.
pub fn apply<K: Hash + Eq>(changes: &[Change<K>]) -> Vec<usize> {
    let mut winners: HashMap<&K, usize> = HashMap::new();
    for (i, c) in changes.iter().enumerate() {
        if !c.kind.is_cdc() {
            continue;
        }
        let wins = match winners.get(&c.key) {
            None => true,
            Some(&w) => {
                let w = &changes[w];
                (&c.sequence, c.request) > (&w.sequence, w.request)
            }
        };
        if wins {
            winners.insert(&c.key, i);
        }
    }
    changes
        .iter()
        .enumerate()
        .filter(|(i, c)| match (c.kind, winners.get(&c.key)) {
            (ChangeKind::Plain, None) => true,
            (ChangeKind::Plain, Some(&w)) => changes[w].request < c.request,
            (ChangeKind::Upsert, Some(&w)) => w == *i,
            _ => false,
        })
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(s: &str) -> Sequence {
        Sequence::parse(s).unwrap_or_else(|| panic!("{s} parses"))
    }

    #[test]
    fn sequence_numbers_compare_section_by_section_as_the_docs_examples_say() {
        assert!(seq("7B") > seq("77"));
        assert!(seq("FFF/ABC") > seq("FFF/B"));
        assert!(seq("ABC") > seq("BA/FFFFFFFF"));
        assert!(seq("FFF/ABC") > seq("ABC"));
        assert_eq!(seq("00ff"), seq("FF"));
        assert!(seq("FFFFFFFFFFFFFFFF/0") > seq("FFFFFFFFFFFFFFFE/FFFFFFFFFFFFFFFF"));
        assert_eq!(
            seq("FFFFFFFFFFFFFFFF/FFFFFFFFFFFFFFFF/FFFFFFFFFFFFFFFF/FFFFFFFFFFFFFFFF").0,
            vec![u64::MAX; 4]
        );
    }

    #[test]
    fn malformed_sequence_numbers_are_refused() {
        for bad in [
            "",
            "/",
            "1/",
            "/1",
            "G",
            "0x10",
            "1 ",
            "11111111111111111",
            "1/2/3/4/5",
            "-1",
        ] {
            assert!(Sequence::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn change_types_are_upsert_delete_or_a_plain_insert() {
        assert_eq!(ChangeKind::parse(None), Some(ChangeKind::Plain));
        assert_eq!(ChangeKind::parse(Some(b"INSERT")), Some(ChangeKind::Plain));
        assert_eq!(ChangeKind::parse(Some(b"UPSERT")), Some(ChangeKind::Upsert));
        assert_eq!(ChangeKind::parse(Some(b"DELETE")), Some(ChangeKind::Delete));
        assert_eq!(ChangeKind::parse(Some(b"upsert")), None);
        assert_eq!(ChangeKind::parse(Some(b"UPDATE")), None);
    }

    #[test]
    fn a_connection_refuses_to_mix_insert_and_upsert_rows() {
        use ChangeKind::*;
        let mut m = ConnectionMode::default();
        m.admit(&[Upsert, Delete]).unwrap();
        assert_eq!(m.admit(&[Plain]).unwrap_err(), NOT_A_CHANGE_TYPE);
        assert_eq!(m, ConnectionMode::Upsert);
        let mut m = ConnectionMode::default();
        m.admit(&[Plain]).unwrap();
        assert_eq!(
            m.admit(&[Plain, Upsert]).unwrap_err(),
            "The given value is not a valid CHANGE_TYPE in insert mode: UPSERT"
        );
        let mut m = ConnectionMode::default();
        assert!(m.admit(&[Delete, Plain]).is_err());
        assert_eq!(
            m,
            ConnectionMode::Undecided,
            "a refused request decides nothing"
        );
    }

    fn change(key: u32, kind: ChangeKind, sequence: Option<&str>, request: u64) -> Change<u32> {
        Change {
            key,
            kind,
            sequence: sequence.map(seq),
            request,
        }
    }

    #[test]
    fn the_highest_sequence_wins_whatever_the_arrival_order() {
        use ChangeKind::*;
        let changes = [
            change(1, Upsert, Some("3"), 0),
            change(1, Upsert, Some("1"), 1), // a replay of an older change
            change(2, Upsert, Some("5"), 1),
            change(2, Delete, Some("6"), 2),
            change(2, Upsert, Some("4"), 3), // older than the delete: stays deleted
            change(3, Delete, Some("1"), 3),
            change(3, Upsert, Some("2"), 4), // re-insert after a delete
        ];
        assert_eq!(apply(&changes), vec![0, 6]);
    }

    #[test]
    fn equal_sequences_go_to_the_later_request_and_within_a_request_to_the_first_row() {
        use ChangeKind::*;
        let changes = [
            change(1, Upsert, Some("A"), 0),
            change(1, Upsert, Some("A"), 1),
            change(2, Upsert, Some("A"), 2),
            change(2, Upsert, Some("A"), 2),
            change(3, Upsert, None, 3),
            change(3, Upsert, None, 4),
        ];
        assert_eq!(apply(&changes), vec![1, 2, 5]);
    }

    #[test]
    fn a_number_beats_no_number_and_plain_rows_give_way_to_later_changes() {
        use ChangeKind::*;
        let changes = [
            change(1, Plain, None, 0),
            change(1, Plain, None, 0),
            change(1, Upsert, None, 1), // replaces both plain rows
            change(1, Upsert, Some("0"), 1),
            change(2, Delete, Some("9"), 2),
            change(2, Plain, None, 3), // ingested after the delete: stays
            change(4, Plain, None, 4),
        ];
        assert_eq!(apply(&changes), vec![3, 5, 6]);
    }
}
