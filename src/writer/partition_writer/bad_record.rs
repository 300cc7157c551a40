//! Records that cannot become rows (docs/architecture.md, invariant 6): each is dead-lettered
//! with its reason and the topic's acknowledgement, skipped, or fails the partition, as the
//! policy says; then the acknowledged prefix passes it in offset order.

use crate::kafka::consumer::Record;
use crate::ops::metrics::ReasonLabel;
use kbq_core::bad_record::{BadRecord, BadRecordPolicy};
use kbq_core::offsets::NextOffset;

use super::{PartitionWriter, RunEnd, unless_stopped};

impl PartitionWriter {
    /// A record that cannot become a row, taken in offset order: dead-letter it (acknowledged)
    /// or apply the policy, then let the prefix pass it.
    pub(super) async fn bad(&mut self, record: Record, bad: BadRecord) -> Result<(), RunEnd> {
        let next = NextOffset::after(record.offset);
        self.dead_letter(record, bad).await?;
        self.record_handled_out_of_band(next);
        Ok(())
    }

    /// Dead-letters `record` (its produce acknowledged) or applies the policy, and counts it.
    /// No prefix bookkeeping: a row BigQuery rejected out of a request in flight is already
    /// covered by that request's `kafka_next`, which must not move: lowering it would make the
    /// checkpoint claim rows of the request's other records before they are visible.
    pub(super) async fn dead_letter(
        &mut self,
        record: Record,
        bad: BadRecord,
    ) -> Result<(), RunEnd> {
        match self.shared.settings.on_bad_record {
            BadRecordPolicy::Fail => {
                return Err(RunEnd::Failed(format!(
                    "bad record at offset {}: {}",
                    record.offset.0, bad.reason
                )));
            }
            BadRecordPolicy::Skip => {
                tracing::warn!(partition = %self.tp, offset = record.offset.0, reason = %bad.reason, "bad record skipped");
            }
            BadRecordPolicy::DeadLetter => {
                let producer = self
                    .shared
                    .dead_letter
                    .as_ref()
                    .expect("validated: dead_letter policy has a producer");
                let mut backoff = crate::backoff::DEAD_LETTER;
                loop {
                    let send = producer.send(&self.tp.topic, self.tp.partition, &record, &bad);
                    match unless_stopped(&mut self.stop, send).await? {
                        Ok(()) => break,
                        // The topic refused even the dead letter cut to its headers: a retry
                        // would be refused the same way without end, so the partition stops
                        // here, where an operator sees why (readiness false).
                        Err(e) if crate::kafka::dead_letter::is_permanent(&e) => {
                            return Err(RunEnd::Failed(format!(
                                "the dead-letter topic {} refused the record at offset {} for good: {e}",
                                producer.topic(),
                                record.offset.0
                            )));
                        }
                        Err(e) => {
                            // The DLQ must acknowledge before the record counts as handled;
                            // until it does, the partition waits (and still answers a stop).
                            tracing::warn!(partition = %self.tp, offset = record.offset.0, error = %e, "dead-letter produce failed, retrying");
                            unless_stopped(&mut self.stop, backoff.wait()).await?;
                        }
                    }
                }
                tracing::info!(partition = %self.tp, offset = record.offset.0, class = bad.class, reason = %bad.reason, "record dead-lettered");
            }
        }
        self.shared
            .metrics
            .dead_letter_records
            .get_or_create(&ReasonLabel { reason: bad.class })
            .inc();
        Ok(())
    }

    /// A record handled without a row: it joins the unit that decides when the prefix passes it.
    pub(super) fn record_handled_out_of_band(&mut self, next: NextOffset) {
        let covered = self.open.cover(next);
        if self.prefix.handled_without_row(next, covered) {
            self.report();
        }
    }
}
