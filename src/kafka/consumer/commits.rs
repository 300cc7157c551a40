//! Kafka commits with the read-back that classifies every partition's outcome.

use std::collections::HashMap;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka::committed::read_committed;
use kbq_core::offsets::NextOffset;
use kbq_core::protocol::{CommitEntry, CommitError, CommitId, CommitOutcome, TopicPartition};

use super::Shared;
use super::commands::ConsumerSettings;
use super::rebalance::SinkContext;

impl Shared {
    /// Commits the entries `refuse` has no reason against; the others are answered with the
    /// reason as their error, never sent.
    pub(super) fn commit_only(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        commit: CommitId,
        entries: Vec<CommitEntry>,
        refuse: impl Fn(&TopicPartition) -> Option<&'static str>,
    ) -> CommitOutcome {
        let mut refused = Vec::new();
        let mut keep = Vec::with_capacity(entries.len());
        for e in entries {
            match refuse(&e.tp) {
                Some(reason) => {
                    tracing::warn!(commit = commit.0, partition = %e.tp, offset = e.offset.0, reason, "commit refused for a partition");
                    refused.push((e.tp, Err(CommitError::Request(reason.to_string()))));
                }
                None => keep.push(e),
            }
        }
        let mut outcome = self.commit(consumer, settings, commit, keep);
        if let CommitOutcome::PerPartition(results) = &mut outcome {
            results.extend(refused);
        }
        outcome
    }

    /// One synchronous commit of offsets + metadata. The broker answers per partition but
    /// librdkafka reports one error for the list, so on an error the committed offsets are read
    /// back: a partition whose durable offset and metadata equal what we sent is committed,
    /// whatever the call said.
    pub(super) fn commit(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        commit: CommitId,
        entries: Vec<CommitEntry>,
    ) -> CommitOutcome {
        if entries.is_empty() {
            return CommitOutcome::PerPartition(Vec::new());
        }
        let mut tpl = TopicPartitionList::new();
        for e in &entries {
            let mut elem = tpl.add_partition(&e.tp.topic, e.tp.partition);
            if let Err(err) = elem.set_offset(Offset::Offset(e.offset.0)) {
                tracing::error!(partition = %e.tp, error = %err, "bad commit offset");
            }
            elem.set_metadata(e.metadata.as_str());
        }
        let result = consumer.commit(&tpl, CommitMode::Sync);
        drop(tpl);
        let offsets: HashMap<TopicPartition, NextOffset> =
            entries.iter().map(|e| (e.tp.clone(), e.offset)).collect();
        let outcome = Self::commit_outcome(consumer, settings, commit, entries, result);
        if let CommitOutcome::PerPartition(results) = &outcome {
            for (tp, result) in results {
                match result {
                    Ok(()) => {
                        if let Some(offset) = offsets.get(tp) {
                            self.lag.set(tp, *offset);
                        }
                    }
                    Err(reason) => {
                        tracing::warn!(commit = commit.0, partition = %tp, offset = offsets.get(tp).map(|o| o.0), reason = %reason, "kafka commit failed for partition");
                    }
                }
            }
        }
        outcome
    }

    pub(super) fn commit_outcome(
        consumer: &BaseConsumer<SinkContext>,
        settings: &ConsumerSettings,
        commit: CommitId,
        entries: Vec<CommitEntry>,
        result: Result<(), KafkaError>,
    ) -> CommitOutcome {
        match result {
            Ok(()) => {
                CommitOutcome::PerPartition(entries.into_iter().map(|e| (e.tp, Ok(()))).collect())
            }
            Err(error) => {
                let partitions: Vec<TopicPartition> =
                    entries.iter().map(|e| e.tp.clone()).collect();
                match read_committed(consumer, &partitions, settings.request_timeout) {
                    Ok(now) => CommitOutcome::PerPartition(
                        entries
                            .into_iter()
                            .map(|e| {
                                let durable = now.get(&e.tp).cloned().flatten();
                                let landed = durable.is_some_and(|d| {
                                    d.offset == e.offset && d.metadata == e.metadata.as_bytes()
                                });
                                let result = if landed {
                                    Ok(())
                                } else {
                                    Err(super::super::commit_error::classify(&error))
                                };
                                (e.tp, result)
                            })
                            .collect(),
                    ),
                    Err(read_error) => {
                        tracing::warn!(commit = commit.0, reason = %error, read_back = %read_error, "kafka commit failed and could not be read back");
                        CommitOutcome::Rejected(format!("{error}; read-back failed: {read_error}"))
                    }
                }
            }
        }
    }
}
