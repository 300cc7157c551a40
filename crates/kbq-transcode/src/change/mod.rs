//! Change events (docs/cdc.md): where the row is inside a record and what the record does to its
//! key, for every input format. Bytes in, bytes out, like the rest of the transcoder.
//!
//! Three shapes, in Avro ([`avro`]), Protobuf ([`protobuf`]) and JSON ([`json`]):
//! * the Debezium envelope (`before`, `after`, `op`, `source`, …): `c`/`u`/`r` upsert `after`,
//!   `d` deletes `before`; `t`, `m` and unknown ops are not row changes;
//! * the unwrapped record of Debezium's `ExtractNewRecordState` (the row itself, with
//!   `__deleted` and, when added, `__op`);
//! * a plain record with a configured change-type field.
//!
//! A located row becomes a change with BigQuery's two pseudo-columns. Avro rows get them as two
//! strings appended to the row record ([`avro::row_schema`] declares them, so the ordinary plan
//! writes them); Protobuf and JSON rows are transcoded by the plan of the row's own schema, whose
//! descriptor [`with_change_fields`] extends by two string fields, and the two values follow the
//! plan's output as length-delimited fields (a protobuf message may carry its fields in any
//! order). No generic value tree either way.

mod avro;
mod json;
mod protobuf;
mod wire;

use std::ops::Range;

use prost_types::FieldDescriptorProto;
use prost_types::field_descriptor_proto::{Label, Type};

use crate::Plan;
use crate::error::RecordError;
use crate::proto::{Tag, WIRE_LEN, put_len_delimited};

pub use avro::{append_change, key_row_schema};
pub use json::{ConnectEnvelope, JsonShape, connect_schema};
pub use protobuf::ProtoShape;
pub use wire::renumber;

/// The pseudo-columns, as BigQuery spells them.
pub const CHANGE_TYPE: &str = "_CHANGE_TYPE";
pub const CHANGE_SEQUENCE_NUMBER: &str = "_CHANGE_SEQUENCE_NUMBER";

/// How a record carries its change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeFormat {
    Debezium,
    /// `ExtractNewRecordState` output: `__deleted` (string or boolean) and optional `__op`.
    Unwrapped,
    /// A plain record whose field `field` holds the change type.
    Plain {
        field: String,
    },
}

/// What a record does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Upsert,
    Delete,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Upsert => "UPSERT",
            ChangeKind::Delete => "DELETE",
        }
    }
}

/// A record that is not a row change, with a reason for the dead-letter topic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAChange {
    #[error("{0}")]
    Avro(#[from] RecordError),
    #[error("{0}")]
    Protobuf(RecordError),
    #[error("{0}")]
    Json(RecordError),
    #[error("operation {op:?} has no row-level equivalent in a cdc table")]
    Operation { op: String },
    #[error("the {side} row of a {op:?} event is null")]
    NoRow { op: String, side: &'static str },
    #[error("change type {value:?} is not an upsert or a delete")]
    ChangeType { value: String },
    #[error("sequence source {path} is null or negative")]
    NoSource { path: String },
    /// Schemaless JSON that does not fit the route's Kafka Connect envelope setting.
    #[error("{problem}")]
    ConnectEnvelope { problem: &'static str },
}

impl NotAChange {
    /// A bounded label for metrics.
    pub fn class(&self) -> &'static str {
        match self {
            NotAChange::Avro(_) => "malformed_avro",
            NotAChange::Protobuf(_) => "malformed_protobuf",
            NotAChange::Json(e) if e.class() == "schema_violation" => "schema_violation",
            NotAChange::Json(_) => "malformed_json",
            NotAChange::Operation { .. } => "cdc_operation",
            NotAChange::NoRow { .. } => "cdc_no_row",
            NotAChange::ChangeType { .. } => "cdc_change_type",
            NotAChange::NoSource { .. } => "cdc_no_sequence_source",
            NotAChange::ConnectEnvelope { .. } => "cdc_json_envelope",
        }
    }

    /// Whether the record could not be read at all (its dead-letter class is the format's).
    pub fn is_malformed(&self) -> bool {
        matches!(
            self,
            NotAChange::Avro(_) | NotAChange::Protobuf(_) | NotAChange::Json(_)
        )
    }
}

/// A located change: the row's bytes inside the body (`None`: the record carries no row, e.g. a
/// delete whose `before` is null; the key must come from elsewhere), and the kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub row: Option<Range<usize>>,
    pub kind: ChangeKind,
    /// The value of the configured sequence source, when there is one.
    pub source: Option<u64>,
}

/// Where the parts of a change are in records of one writer schema, in any input format.
#[derive(Debug, Clone)]
pub enum ChangeShape {
    Avro(avro::AvroShape),
    Protobuf(ProtoShape),
    Json(JsonShape),
}

impl ChangeShape {
    /// The shape of an Avro writer schema's records, and the schema of their rows (with the
    /// pseudo-columns). `source` is a dotted path to a long field (e.g. `source.lsn`) whose value
    /// orders changes ahead of the Kafka offset.
    pub fn new(
        schema: &crate::AvroSchema,
        format: &ChangeFormat,
        source: Option<&str>,
    ) -> Result<(ChangeShape, crate::AvroSchema), String> {
        let (shape, row) = avro::AvroShape::new(schema, format, source)?;
        Ok((ChangeShape::Avro(shape), row))
    }

    /// Locates the change in one record body (after the framing).
    pub fn locate(&self, body: &[u8]) -> Result<Located, NotAChange> {
        match self {
            ChangeShape::Avro(s) => s.locate(body),
            ChangeShape::Protobuf(s) => s.locate(body),
            ChangeShape::Json(s) => s.locate(body),
        }
    }
}

/// How the rows of a change plan get their pseudo-column values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeColumns {
    /// Two Avro strings appended to the row's Avro bytes, which the plan reads as fields.
    Avro,
    /// Two length-delimited fields with these numbers after the plan's output.
    Fields { change_type: u32, sequence: u32 },
}

/// The input a plan transcodes for one change row, and the bytes that follow its output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeRow {
    pub input: Vec<u8>,
    pub suffix: Vec<u8>,
}

impl ChangeColumns {
    /// The change row of `row` (the row's bytes in the plan's input format).
    pub fn row(self, row: &[u8], kind: ChangeKind, sequence: &str) -> ChangeRow {
        match self {
            ChangeColumns::Avro => {
                let mut input = Vec::with_capacity(row.len() + sequence.len() + 16);
                input.extend_from_slice(row);
                append_change(&mut input, kind, sequence);
                ChangeRow {
                    input,
                    suffix: Vec::new(),
                }
            }
            ChangeColumns::Fields {
                change_type,
                sequence: number,
            } => {
                let mut suffix = Vec::with_capacity(sequence.len() + 16);
                put_len_delimited(
                    &mut suffix,
                    Tag::new(change_type, WIRE_LEN),
                    kind.as_str().as_bytes(),
                );
                put_len_delimited(&mut suffix, Tag::new(number, WIRE_LEN), sequence.as_bytes());
                ChangeRow {
                    input: row.to_vec(),
                    suffix,
                }
            }
        }
    }

    /// One finished row: `row` transcoded by `plan`, then the pseudo-columns (no Kafka
    /// metadata: a key-only DELETE row has none to carry).
    pub fn transcode(
        self,
        plan: &Plan,
        row: &[u8],
        kind: ChangeKind,
        sequence: &str,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        match self {
            ChangeColumns::Avro => {
                let change = self.row(row, kind, sequence);
                plan.transcode(&change.input, None, out)?;
            }
            // The row is transcoded where it is and the pseudo-columns written after it: the
            // bytes of `row` then `suffix`, without copying the row or building the suffix.
            ChangeColumns::Fields {
                change_type,
                sequence: number,
            } => {
                plan.transcode(row, None, out)?;
                put_len_delimited(
                    out,
                    Tag::new(change_type, WIRE_LEN),
                    kind.as_str().as_bytes(),
                );
                put_len_delimited(out, Tag::new(number, WIRE_LEN), sequence.as_bytes());
            }
        }
        Ok(())
    }
}

/// `plan` with the two pseudo-columns added to its root descriptor as string fields numbered
/// after its own (or the ones it has, when the table it was compiled for lists them).
pub fn with_change_fields(mut plan: Plan) -> (Plan, ChangeColumns) {
    let number = |name: &str, fields: &mut Vec<FieldDescriptorProto>| -> u32 {
        if let Some(f) = fields.iter().find(|f| f.name() == name) {
            return f.number() as u32;
        }
        let next = fields.iter().map(|f| f.number()).max().unwrap_or(0) + 1;
        fields.push(FieldDescriptorProto {
            name: Some(name.to_owned()),
            number: Some(next),
            label: Some(Label::Optional as i32),
            r#type: Some(Type::String as i32),
            ..Default::default()
        });
        next as u32
    };
    let fields = &mut plan.descriptor.field;
    let change_type = number(CHANGE_TYPE, fields);
    let sequence = number(CHANGE_SEQUENCE_NUMBER, fields);
    (
        plan,
        ChangeColumns::Fields {
            change_type,
            sequence,
        },
    )
}

/// `plan` with more root fields it never writes: each of `columns` that its descriptor lacks
/// (by name, any case) gets the same-named field of `from` (a plan of the whole table), renumbered
/// after the plan's own, with the nested message types it uses. A key-only DELETE row's writer
/// schema then declares every REQUIRED column, as BigQuery requires of any writer schema (only
/// nullable columns may be omitted), while the row leaves them unset, as a DELETE may
/// (docs/cdc.md). A column whose message type name is already taken in `plan` is left out.
pub fn with_unset_fields(
    mut plan: Plan,
    from: &prost_types::DescriptorProto,
    columns: &[&str],
) -> Plan {
    let descriptor = &mut plan.descriptor;
    let mut next = descriptor
        .field
        .iter()
        .map(|f| f.number())
        .max()
        .unwrap_or(0)
        + 1;
    for column in columns {
        if descriptor
            .field
            .iter()
            .any(|f| f.name().eq_ignore_ascii_case(column))
        {
            continue;
        }
        let Some(field) = from
            .field
            .iter()
            .find(|f| f.name().eq_ignore_ascii_case(column))
        else {
            continue;
        };
        let mut nested = Vec::new();
        if let Some(name) = field.type_name.as_deref() {
            let mut pending = vec![name.to_owned()];
            while let Some(name) = pending.pop() {
                let Some(message) = from.nested_type.iter().find(|m| m.name() == name) else {
                    continue;
                };
                if nested
                    .iter()
                    .any(|m: &prost_types::DescriptorProto| m.name() == name)
                {
                    continue;
                }
                pending.extend(message.field.iter().filter_map(|f| f.type_name.clone()));
                nested.push(message.clone());
            }
            let taken = nested
                .iter()
                .any(|m| descriptor.nested_type.iter().any(|d| d.name() == m.name()));
            if taken {
                continue;
            }
        }
        descriptor.field.push(FieldDescriptorProto {
            number: Some(next),
            label: Some(Label::Optional as i32),
            ..field.clone()
        });
        descriptor.nested_type.extend(nested);
        next += 1;
    }
    plan
}

/// `_CHANGE_SEQUENCE_NUMBER`: three hex sections, always, so that values compare section by
/// section: the configured epoch, the source position (0 without one), the Kafka offset.
pub fn sequence_number(epoch: u64, source: u64, offset: i64) -> String {
    // Written digit by digit into one buffer rather than through `format!`, which costs about
    // a thousand instructions a change (BENCHMARKS.md, "The JSON executor").
    let mut text = String::with_capacity(3 * 16 + 2);
    for (k, v) in [epoch, source, offset.max(0) as u64]
        .into_iter()
        .enumerate()
    {
        if k > 0 {
            text.push('/');
        }
        let digits = (64 - (v | 1).leading_zeros()).div_ceil(4);
        for d in (0..digits).rev() {
            text.push(char::from(
                b"0123456789ABCDEF"[(v >> (4 * d)) as usize & 15],
            ));
        }
    }
    text
}

/// The change an operation code makes: Debezium's `op`, or `__op` of an unwrapped record.
fn debezium_kind(op: &str) -> Option<ChangeKind> {
    match op {
        "c" | "u" | "r" => Some(ChangeKind::Upsert),
        "d" => Some(ChangeKind::Delete),
        _ => None,
    }
}

/// The change a plain record's change-type value names (any case).
fn plain_kind(value: &str) -> Result<ChangeKind, NotAChange> {
    match value.to_ascii_lowercase().as_str() {
        "upsert" | "insert" | "update" | "c" | "u" | "r" => Ok(ChangeKind::Upsert),
        "delete" | "d" => Ok(ChangeKind::Delete),
        _ => Err(NotAChange::ChangeType {
            value: value.to_string(),
        }),
    }
}

/// The change of an unwrapped record from `__deleted` (`"true"`, or a true boolean) and `__op`.
fn unwrapped_kind(deleted: bool, op: Option<&str>) -> Result<ChangeKind, NotAChange> {
    match op {
        _ if deleted => Ok(ChangeKind::Delete),
        None => Ok(ChangeKind::Upsert),
        Some(op) => debezium_kind(op).ok_or_else(|| NotAChange::Operation { op: op.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_number_is_three_upper_case_hex_sections() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(31);
        let edges = [
            0,
            1,
            9,
            10,
            15,
            16,
            255,
            256,
            u64::MAX >> 4,
            u64::MAX - 1,
            u64::MAX,
        ];
        let mut values: Vec<u64> = edges.to_vec();
        values.extend((0..200).map(|_| rng.random::<u64>() >> rng.random_range(0..64)));
        for &a in &values {
            for &b in &values[..20] {
                for offset in [-5i64, 0, 1, 0x1f, i64::MAX, b as i64, a as i64] {
                    assert_eq!(
                        sequence_number(a, b, offset),
                        format!("{a:X}/{b:X}/{:X}", offset.max(0))
                    );
                }
            }
        }
    }

    #[test]
    fn a_json_change_row_is_the_rows_output_then_the_two_pseudo_columns() {
        let table: kbq_core::table_schema::TableSchema = serde_json::from_str(
            r#"{"fields":[{"name":"id","type":"INT64","mode":"REQUIRED"},{"name":"name","type":"STRING"}]}"#,
        )
        .unwrap();
        let plan = Plan::compile_json(None, false, &table, &crate::PlanOptions::default()).unwrap();
        let (plan, columns) = with_change_fields(plan);
        let rows: [&[u8]; 4] = [
            br#"{"id":7,"name":"x"}"#,
            br#"{"name":"y","id":-1}"#,
            br#"{"name":"y"}"#,
            br#"{"id":"#,
        ];
        for row in rows {
            for kind in [ChangeKind::Upsert, ChangeKind::Delete] {
                // The definition: the plan over the change row's input, then its suffix.
                let change = columns.row(row, kind, "1/2/3");
                let mut want = b"before".to_vec();
                let want_result = plan.transcode(&change.input, None, &mut want).map(|_| {
                    want.extend_from_slice(&change.suffix);
                });
                let mut got = b"before".to_vec();
                let got_result = columns.transcode(&plan, row, kind, "1/2/3", &mut got);
                assert_eq!(got_result, want_result);
                assert_eq!(got, want, "{:?}", String::from_utf8_lossy(row));
            }
        }
    }
}
