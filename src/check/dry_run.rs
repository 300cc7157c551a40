//! The dry run: a topic's newest records through the plans `run` compiles for its table, each
//! taking the path the writer would take (`writer/partition_writer.rs` for rows, the steps of
//! `writer/change_step.rs` for a CDC route's changes), counted as written, ignored
//! (a delete under `upsert`), held (its schema cannot be had now) or dead-lettered with its
//! class and an example reason. Nothing is appended or produced.

use std::collections::BTreeMap;

use super::Finding;
use super::dry_read::Sample;
use crate::tables::router::Route;
use crate::writer::change_source::ChangeSource;
use crate::writer::change_step::{self, ChangeStep};
use crate::writer::plan_source::PlanLookupError;
use kbq_core::bad_record::BadRecord;
use kbq_core::offsets::KafkaOffset;
use kbq_transcode::{KafkaHeader, KafkaMetadata, Plan, Transcoded};

/// What the records of one topic would become.
#[derive(Default)]
struct Tally {
    written: usize,
    /// Changes `run` counts and ignores, by what they are (`delete`, `tombstone`).
    ignored: BTreeMap<&'static str, usize>,
    /// Records a filter on a field's value would drop: committed, neither rows nor dead
    /// letters.
    filtered: usize,
    /// By dead-letter class: how many, and the first reason.
    dead: BTreeMap<&'static str, (usize, String)>,
    /// Records whose schema cannot be had now: how many, and the first reason.
    held: Option<(usize, String)>,
}

impl Tally {
    fn dead(&mut self, class: &'static str, reason: impl Into<String>) {
        self.dead.entry(class).or_insert((0, reason.into())).0 += 1;
    }

    fn bad(&mut self, bad: BadRecord) {
        self.dead(bad.class, bad.reason);
    }

    /// A lookup that failed: a bad record, or one `run` would hold its partition on.
    fn failed(&mut self, e: PlanLookupError) {
        match e {
            PlanLookupError::BadRecord(bad) => self.bad(bad),
            PlanLookupError::Unavailable(why) => self.held.get_or_insert((0, why)).0 += 1,
        }
    }

    fn findings(self, topic: &str, cdc: bool) -> Vec<Finding> {
        let item = format!("dry run {topic}");
        let mut findings = Vec::new();
        if let Some((n, why)) = self.held {
            findings.push(Finding::fail(
                format!("{item} schemas"),
                format!(
                    "{n} record(s) whose schema cannot be had now, which would hold their \
                     partition (an id still unknown after schema_registry.not_found_grace is \
                     dead-lettered as unknown_schema): {why}"
                ),
                "register the schema, or fix the producer's schema id",
            ));
        }
        let what = if cdc { "change(s)" } else { "record(s)" };
        let mut ignored = if self.ignored.is_empty() {
            String::new()
        } else {
            let each: Vec<String> = self
                .ignored
                .iter()
                .map(|(what, n)| format!("{n} {what}"))
                .collect();
            format!(
                "; ignored by the upsert mode, as run ignores them: {}",
                each.join(", ")
            )
        };
        if self.filtered > 0 {
            ignored += &format!("; {} filtered by a field's value", self.filtered);
        }
        if self.dead.is_empty() {
            findings.push(Finding::ok(
                item,
                format!(
                    "{} {what} transcode against the table; none would be dead-lettered{ignored}",
                    self.written
                ),
            ));
        } else {
            let why: Vec<String> = self
                .dead
                .iter()
                .map(|(class, (n, example))| format!("{n} {class} (e.g. {example})"))
                .collect();
            findings.push(Finding::fail(
                item,
                format!(
                    "{} {what} transcode, {} would be dead-lettered: {}{ignored}",
                    self.written,
                    self.dead.values().map(|(n, _)| n).sum::<usize>(),
                    why.join("; ")
                ),
                "fix the producer or the table (docs/mapping.md says what each class means)",
            ));
        }
        findings
    }
}

/// The dry run of `topic`'s records against its route.
pub(super) async fn dry_run(topic: &str, route: &Route, records: &[Sample]) -> Vec<Finding> {
    let mut tally = Tally::default();
    let mut out = Vec::new();
    for record in records {
        let headers = headers(record);
        let meta = KafkaMetadata {
            topic,
            partition: record.partition,
            offset: KafkaOffset(record.offset),
            timestamp_millis: record.timestamp_ms,
            key: record.key.as_deref(),
            headers: &headers,
        };
        out.clear();
        match &route.writer.cdc {
            Some(cdc) => change(cdc.as_ref(), record, &meta, &mut out, &mut tally).await,
            None => row(route, record, &meta, &mut out, &mut tally).await,
        }
    }
    tally.findings(topic, route.writer.cdc.is_some())
}

fn headers(record: &Sample) -> Vec<KafkaHeader<'_>> {
    record
        .headers
        .iter()
        .map(|(k, v)| KafkaHeader {
            key: k.as_bytes(),
            value: v.as_deref(),
        })
        .collect()
}

/// A record of an ordinary route: its writer schema's plan, then the row.
async fn row(
    route: &Route,
    record: &Sample,
    meta: &KafkaMetadata<'_>,
    out: &mut Vec<u8>,
    tally: &mut Tally,
) {
    let Some(value) = &record.value else {
        tally.dead("tombstone", "a record without a value");
        return;
    };
    let plans = &route.writer.plans;
    let found = match plans.cached_plan(value) {
        Some(found) => found.map_err(PlanLookupError::BadRecord),
        None => plans.plan_for(meta.topic, value).await,
    };
    let (plan, at) = match found {
        Ok(found) => found,
        Err(e) => return tally.failed(e),
    };
    if !plan.reads_key() {
        return transcode(&plan, &value[at..], meta, out, tally);
    }
    // Columns from the key's fields: the key's plan, as the writer finds it.
    let key = match (&route.writer.keys, meta.key) {
        (Some(keys), Some(key)) => match keys.key_plan(key).await {
            Ok((key_plan, key_at)) => Some((key_plan, &key[key_at..])),
            Err(e) => return tally.failed(e),
        },
        _ => None,
    };
    let result = plan
        .transcode_row(&value[at..], Some(meta), out)
        .and_then(|row| match row {
            Transcoded::Filtered => Ok(false),
            Transcoded::Row(_) => plan
                .transcode_key(key.as_ref().map(|(p, body)| (&**p, *body)), out)
                .map(|()| true),
        });
    match result {
        Ok(true) => tally.written += 1,
        Ok(false) => tally.filtered += 1,
        Err(e) => tally.dead(e.class(), e.to_string()),
    }
}

/// A change of a CDC route, through the writer's own steps (`writer/change_step.rs`): the
/// change plan, the step it makes (a row, a delete by the Kafka key, a delete the upsert mode
/// ignores), the row transcoded.
async fn change(
    cdc: &dyn ChangeSource,
    record: &Sample,
    meta: &KafkaMetadata<'_>,
    out: &mut Vec<u8>,
    tally: &mut Tally,
) {
    let rules = cdc.rules();
    let Some(value) = &record.value else {
        let sequence = change_step::tombstone_sequence(rules, record.offset);
        return delete_by_key(cdc, record, &sequence, tally, "tombstone").await;
    };
    let (plan, at) = match cdc.change_plan(value).await {
        Ok(found) => found,
        Err(e) => return tally.failed(e),
    };
    match change_step::change_step(&plan, rules, &value[at..], record.offset) {
        Err(e) => tally.bad(change_step::not_a_change(&e)),
        Ok(ChangeStep::IgnoredDelete) => *tally.ignored.entry("delete").or_default() += 1,
        Ok(ChangeStep::DeleteByKey(sequence)) => {
            delete_by_key(cdc, record, &sequence, tally, "delete").await
        }
        Ok(ChangeStep::Row(change, _)) => transcode(&plan.plan, &change.input, meta, out, tally),
    }
}

/// A DELETE row from the record's Kafka key (a tombstone, or a delete without a row); under
/// `upsert` it is ignored, as `what`.
async fn delete_by_key(
    cdc: &dyn ChangeSource,
    record: &Sample,
    sequence: &str,
    tally: &mut Tally,
    what: &'static str,
) {
    if !cdc.rules().deletes {
        *tally.ignored.entry(what).or_default() += 1;
        return;
    }
    let Some(key) = &record.key else {
        return tally.bad(change_step::no_key());
    };
    let (key_plan, at) = match cdc.delete_plan(key).await {
        Ok(found) => found,
        Err(e) => return tally.failed(e),
    };
    let mut row = Vec::new();
    match change_step::key_row(&key_plan, &key[at..], sequence, &mut row) {
        Ok(()) => tally.written += 1,
        Err(bad) => tally.bad(bad),
    }
}

fn transcode(
    plan: &Plan,
    body: &[u8],
    meta: &KafkaMetadata<'_>,
    out: &mut Vec<u8>,
    tally: &mut Tally,
) {
    match plan.transcode_row(body, Some(meta), out) {
        Ok(Transcoded::Row(_)) => tally.written += 1,
        Ok(Transcoded::Filtered) => tally.filtered += 1,
        Err(e) => tally.dead(e.class(), e.to_string()),
    }
}
