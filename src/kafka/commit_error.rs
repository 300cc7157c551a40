//! Kafka commit errors, classified where they are read. librdkafka reports one error for a whole
//! OffsetCommit; the consumer reads the committed offsets back to learn what landed, and this
//! classification says what a partition that did not land may conclude: only an error of the
//! partition itself counts towards its isolation (docs/design-changes.md).

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use kbq_core::protocol::CommitError;

/// The class of a failed commit's error, for every partition it did not land for.
pub fn classify(error: &KafkaError) -> CommitError {
    classify_code(error.rdkafka_error_code(), error.to_string())
}

/// The class of error code `code` (`None`: not a broker or librdkafka error code).
pub fn classify_code(code: Option<RDKafkaErrorCode>, text: String) -> CommitError {
    match code {
        // The partition's own entry is refused, and will be again whatever the others do.
        Some(
            RDKafkaErrorCode::OffsetMetadataTooLarge
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::UnknownTopicOrPartition
            | RDKafkaErrorCode::UnknownTopic
            | RDKafkaErrorCode::UnknownPartition,
        ) => CommitError::Partition(text),
        // Everything else concerns the request or the group: the coordinator loading or moving,
        // NOT_ENOUGH_REPLICAS on __consumer_offsets, REBALANCE_IN_PROGRESS, a generation or
        // member error, a timeout.
        _ => CommitError::Request(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_errors_of_the_partition_itself_are_partition_errors() {
        for code in [
            RDKafkaErrorCode::OffsetMetadataTooLarge,
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::UnknownTopicOrPartition,
        ] {
            let e = KafkaError::ConsumerCommit(code);
            assert!(
                matches!(classify(&e), CommitError::Partition(_)),
                "{code:?}"
            );
        }
        for code in [
            RDKafkaErrorCode::NotEnoughReplicas,
            RDKafkaErrorCode::NotCoordinator,
            RDKafkaErrorCode::CoordinatorNotAvailable,
            RDKafkaErrorCode::CoordinatorLoadInProgress,
            RDKafkaErrorCode::RebalanceInProgress,
            RDKafkaErrorCode::IllegalGeneration,
            RDKafkaErrorCode::UnknownMemberId,
            RDKafkaErrorCode::RequestTimedOut,
            RDKafkaErrorCode::OperationTimedOut,
        ] {
            let e = KafkaError::ConsumerCommit(code);
            assert!(matches!(classify(&e), CommitError::Request(_)), "{code:?}");
        }
        assert!(matches!(
            classify(&KafkaError::Canceled),
            CommitError::Request(_)
        ));
    }
}
