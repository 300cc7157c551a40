//! A CDC route's records (docs/cdc.md): each becomes an UPSERT or DELETE row on the `_default`
//! stream with a sequence number from its offset, or is counted and ignored, or is a bad record.
//!
//! Why a replay is harmless: every row carries `epoch/source/offset`, distinct per record, so
//! the rows of one request never tie for a key, and a change re-sent after a crash carries the
//! number it had, which loses to any later change of its key already applied.

use std::sync::Arc;

use crate::kafka::consumer::Record;
use crate::ops::metrics::{ChangeBadLabels, ChangeLabels};
use crate::writer::change_source::ChangeSource;
use crate::writer::change_step::{self, ChangeStep};
use kbq_core::bad_record::BadRecord;
use kbq_transcode::Plan;
use kbq_transcode::change::{ChangeKind, NotAChange, renumber};

use super::{NextOffset, PartitionWriter, RowBody, RunEnd};

impl PartitionWriter {
    pub(super) async fn take_change(
        &mut self,
        record: Record,
        cdc: &dyn ChangeSource,
        next: NextOffset,
    ) -> Result<(), RunEnd> {
        let Some(value) = record.value() else {
            // A tombstone: the key's row goes (Debezium sends one after each delete event).
            let sequence = change_step::tombstone_sequence(cdc.rules(), record.offset.0);
            return self.delete_by_key(record, cdc, next, sequence).await;
        };
        let found = self.lookup_plan(|| cdc.change_plan(value)).await?;
        let (plan, at) = match found {
            Ok(found) => found,
            Err(bad) => return self.bad(record, bad).await,
        };
        let step = change_step::change_step(&plan, cdc.rules(), &value[at..], record.offset.0);
        match step {
            Err(e) => self.not_a_change(record, e).await,
            Ok(ChangeStep::IgnoredDelete) => self.ignored(next, "delete"),
            Ok(ChangeStep::DeleteByKey(sequence)) => {
                self.delete_by_key(record, cdc, next, sequence).await
            }
            Ok(ChangeStep::Row(change, kind)) => {
                self.use_plan(plan.plan.clone()).await?;
                self.append_change(record, RowBody::Change(change), kind)
                    .await
            }
        }
    }

    /// A DELETE of the key in the record's Kafka key (through the registry in its own format, or
    /// schemaless JSON beside schemaless values). The row is
    /// written in the writer's current descriptor when its key columns are in it, so that a
    /// tombstone does not switch the connection's writer schema.
    async fn delete_by_key(
        &mut self,
        record: Record,
        cdc: &dyn ChangeSource,
        next: NextOffset,
        sequence: String,
    ) -> Result<(), RunEnd> {
        if !cdc.rules().deletes {
            return self.ignored(next, "tombstone");
        }
        let Some(key) = record.key() else {
            return self
                .cdc_bad(record, "cdc_no_key", change_step::no_key())
                .await;
        };
        let found = self.lookup_plan(|| cdc.delete_plan(key)).await?;
        let (key_plan, at) = match found {
            Ok(found) => found,
            Err(bad) => return self.cdc_bad(record, "cdc_no_key", bad).await,
        };
        let mut row = Vec::new();
        if let Err(bad) = change_step::key_row(&key_plan, &key[at..], &sequence, &mut row) {
            return self.cdc_bad(record, "cdc_no_key", bad).await;
        }
        let current: Option<Arc<Plan>> = self.plan.clone();
        let mut renumbered = Vec::with_capacity(row.len());
        let fits = current.is_some_and(|p| {
            renumber(
                &row,
                key_plan.plan.descriptor(),
                p.descriptor(),
                &mut renumbered,
            )
            .is_some()
        });
        if fits {
            row = renumbered;
        } else {
            self.use_plan(key_plan.plan.clone()).await?;
        }
        self.append_change(record, RowBody::Proto(row), ChangeKind::Delete)
            .await
    }

    /// Appends a change's row and counts it once it is in the batch: a row that cannot be
    /// written is a dead letter, not a change.
    async fn append_change(
        &mut self,
        record: Record,
        row: RowBody,
        kind: ChangeKind,
    ) -> Result<(), RunEnd> {
        if self.append_row(record, row).await? {
            self.count_change(kind);
        }
        Ok(())
    }

    async fn not_a_change(&mut self, record: Record, e: NotAChange) -> Result<(), RunEnd> {
        self.cdc_bad(record, e.class(), change_step::not_a_change(&e))
            .await
    }

    async fn cdc_bad(
        &mut self,
        record: Record,
        reason: &'static str,
        bad: BadRecord,
    ) -> Result<(), RunEnd> {
        self.shared
            .metrics
            .cdc_bad_records
            .get_or_create(&ChangeBadLabels {
                table: self.route.table_label.clone(),
                reason,
            })
            .inc();
        self.bad(record, bad).await
    }

    /// A change the route's mode does not apply (a delete under `upsert`): counted, no row.
    fn ignored(&mut self, next: NextOffset, what: &'static str) -> Result<(), RunEnd> {
        tracing::debug!(partition = %self.tp, offset = next.0 - 1, what, "change ignored by the upsert mode");
        self.count("ignored");
        self.record_handled_out_of_band(next);
        Ok(())
    }

    fn count_change(&self, kind: ChangeKind) {
        self.count(match kind {
            ChangeKind::Upsert => "upsert",
            ChangeKind::Delete => "delete",
        });
    }

    fn count(&self, change: &'static str) {
        self.shared
            .metrics
            .cdc_changes
            .get_or_create(&ChangeLabels {
                table: self.route.table_label.clone(),
                change,
            })
            .inc();
    }
}
