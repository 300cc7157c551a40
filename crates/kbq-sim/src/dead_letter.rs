//! Simulated dead-letter topic behind the `DeadLetterSink` seam of the real
//! `DeadLetterProducer`: a produce fails sometimes; a dead letter is kept with its reason.

use std::sync::Arc;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::world::{Gate, Shared, lock};
use kafka_bigquery_sink::kafka::consumer::Record;
use kafka_bigquery_sink::kafka::dead_letter::{DeadLetterSink, SinkFuture};
use kbq_core::bad_record::BadRecord;

pub(super) struct SimDlq {
    pub(super) world: Shared,
    pub(super) gate: Arc<Gate>,
}

impl DeadLetterSink for SimDlq {
    fn send<'a>(
        &'a self,
        _topic: &'a str,
        partition: i32,
        record: &'a Record,
        bad: &'a BadRecord,
    ) -> SinkFuture<'a> {
        Box::pin(async move {
            self.gate.pass().await;
            let fail = lock(&self.world).chance(0.05);
            if fail {
                return Err(KafkaError::MessageProduction(
                    RDKafkaErrorCode::RequestTimedOut,
                ));
            }
            {
                let mut w = lock(&self.world);
                w.trace(format!(
                    "dlq p{partition}@{} {}: {}",
                    record.offset.0, bad.class, bad.reason
                ));
                w.dead_letters
                    .entry((partition as usize, record.offset.0))
                    .or_default()
                    .push(format!("{}: {}", bad.class, bad.reason));
            }
            self.gate.pass().await;
            Ok(())
        })
    }
}
