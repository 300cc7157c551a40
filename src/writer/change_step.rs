//! What a record of a CDC route becomes once its plan is found (docs/cdc.md), decided without
//! I/O: the writer applies it (`partition_writer/change.rs`), and `check`'s dry run counts it
//! the same way (`check/dry_run.rs`).

use kbq_core::bad_record::BadRecord;
use kbq_transcode::change::{ChangeKind, ChangeRow, NotAChange, sequence_number};

use super::change_source::{ChangePlan, ChangeRules, KeyPlan};

/// The class of every CDC bad record on the dead-letter topic; the reason is in the metric.
pub const DEAD_LETTER_CLASS: &str = "cdc_change";

/// What a change record's value makes.
pub enum ChangeStep {
    /// A delete under `upsert`: counted as ignored, no row.
    IgnoredDelete,
    /// A delete without a row: a DELETE of the record's Kafka key, with this sequence number.
    DeleteByKey(String),
    /// An UPSERT or DELETE row.
    Row(ChangeRow, ChangeKind),
}

/// The step of a change whose value `body` (after the plan's framing) was written at `offset`.
pub fn change_step(
    plan: &ChangePlan,
    rules: &ChangeRules,
    body: &[u8],
    offset: i64,
) -> Result<ChangeStep, NotAChange> {
    let located = plan.shape.locate(body)?;
    if located.kind == ChangeKind::Delete && !rules.deletes {
        return Ok(ChangeStep::IgnoredDelete);
    }
    let sequence = sequence_number(rules.epoch, located.source.unwrap_or(0), offset);
    let Some(row) = located.row else {
        return Ok(ChangeStep::DeleteByKey(sequence));
    };
    let change = plan.columns.row(&body[row], located.kind, &sequence);
    Ok(ChangeStep::Row(change, located.kind))
}

/// The sequence number of a tombstone written at `offset` (it has no source position).
pub fn tombstone_sequence(rules: &ChangeRules, offset: i64) -> String {
    sequence_number(rules.epoch, 0, offset)
}

/// The bad record of a value that is not a change: a malformed one keeps its format's class.
pub fn not_a_change(e: &NotAChange) -> BadRecord {
    let class = if e.is_malformed() {
        e.class()
    } else {
        DEAD_LETTER_CLASS
    };
    BadRecord {
        class,
        reason: e.to_string(),
    }
}

/// A delete that has neither a row nor a Kafka key to delete by.
pub fn no_key() -> BadRecord {
    BadRecord {
        class: DEAD_LETTER_CLASS,
        reason: "a delete with neither a row nor a kafka key".into(),
    }
}

/// The DELETE row of a Kafka key (`key`, after the key plan's framing) into `row`.
pub fn key_row(
    key_plan: &KeyPlan,
    key: &[u8],
    sequence: &str,
    row: &mut Vec<u8>,
) -> Result<(), BadRecord> {
    let bad = |why: String| BadRecord {
        class: DEAD_LETTER_CLASS,
        reason: format!("the kafka key: {why}"),
    };
    let body = match key_plan.envelope.record(key) {
        Ok(Some(range)) => &key[range],
        Ok(None) => {
            return Err(bad(
                "the payload of its kafka connect envelope is null".into()
            ));
        }
        Err(e) => return Err(bad(e.to_string())),
    };
    key_plan
        .columns
        .transcode(&key_plan.plan, body, ChangeKind::Delete, sequence, row)
        .map(|_| ())
        .map_err(|e| bad(e.to_string()))
}
