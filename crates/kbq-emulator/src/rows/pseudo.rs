//! The CDC pseudo-columns of a writer schema: `_CHANGE_TYPE` and `_CHANGE_SEQUENCE_NUMBER` are
//! fields of the descriptor, never columns of the table (docs/cdc.md, "In the emulator").
//! The codec remembers their field numbers so that the write path can read a row's
//! change type and sequence number; validation and rendering skip them like unknown fields.

use super::wire::Wire;
use super::{ProtoKind, Reader, RowCodec, SchemaError};

pub const CHANGE_TYPE: &str = "_change_type";
pub const CHANGE_SEQUENCE_NUMBER: &str = "_change_sequence_number";

/// Field numbers of the pseudo-columns a writer schema declares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PseudoColumns {
    pub change_type: Option<u32>,
    pub sequence: Option<u32>,
}

impl PseudoColumns {
    /// Takes a top-level field that matches no column when it is a pseudo-column: `Ok(true)`.
    /// Both are STRING values; another proto type is the mismatch BigQuery reports for a column.
    pub(super) fn claim(
        &mut self,
        lower: &str,
        number: u32,
        proto: Option<ProtoKind>,
        where_: &str,
    ) -> Result<bool, SchemaError> {
        let slot = match lower {
            CHANGE_TYPE => &mut self.change_type,
            CHANGE_SEQUENCE_NUMBER => &mut self.sequence,
            _ => return Ok(false),
        };
        if !matches!(proto, Some(ProtoKind::String | ProtoKind::Bytes)) {
            return Err(SchemaError::TypeMismatch {
                path: where_.to_string(),
                proto_type: proto.map_or("group", ProtoKind::name).into(),
                column_type: "STRING".into(),
            });
        }
        *slot = Some(number);
        Ok(true)
    }

    pub fn any(&self) -> bool {
        self.change_type.is_some() || self.sequence.is_some()
    }

    /// The declared pseudo-columns by their lower-case names (as extra-field errors list them).
    pub fn names(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.change_type.is_some() {
            out.push(CHANGE_TYPE.to_string());
        }
        if self.sequence.is_some() {
            out.push(CHANGE_SEQUENCE_NUMBER.to_string());
        }
        out
    }
}

/// A row's pseudo-column values; `None` when unset. Proto semantics: the last occurrence wins.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PseudoValues<'r> {
    pub change_type: Option<&'r [u8]>,
    pub sequence: Option<&'r [u8]>,
}

impl RowCodec {
    pub fn pseudo_columns(&self) -> PseudoColumns {
        self.pseudo
    }

    /// The pseudo-column values of a row that passed validation.
    pub fn pseudo_values<'r>(&self, row: &'r [u8]) -> PseudoValues<'r> {
        let mut out = PseudoValues::default();
        if !self.pseudo.any() {
            return out;
        }
        let mut reader = Reader::new(row);
        while let Ok(Some((number, wire))) = reader.next() {
            let Wire::Len(bytes) = wire else { continue };
            if Some(number) == self.pseudo.change_type {
                out.change_type = Some(bytes);
            } else if Some(number) == self.pseudo.sequence {
                out.sequence = Some(bytes);
            }
        }
        out
    }

    /// Validation of a CDC DELETE row: only the key columns matter, so required top-level
    /// columns may be left unset.
    pub fn validate_delete(&self, row: &[u8]) -> Result<(), String> {
        self.validate_with(row, false)
    }
}
