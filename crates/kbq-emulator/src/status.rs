//! BigQuery's error answers: gRPC code, message (with the ` Entity: <name>` suffix where the
//! real service adds one) and a `google.cloud.bigquery.storage.v1.StorageError` carried in
//! `google.rpc.Status.details`, exactly where clients look for it (Java parses the message for
//! "expected offset N, received M" and strips everything from "Entity" on).

use bytes::Bytes;
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1 as bq;
use googleapis_tonic_google_rpc::google::rpc;
use prost::Message;
use tonic::Code;

use crate::store::{StoreError, StreamKind, storage_code};

const STORAGE_ERROR_TYPE: &str =
    "type.googleapis.com/google.cloud.bigquery.storage.v1.StorageError";

/// Metadata key that asks the server's drop layer to reset the HTTP/2 stream instead of sending
/// the status (fault injection "drop").
pub const DROP_MARKER: &str = "x-kbq-emulator-drop";

/// One BigQuery error, convertible to a call status or an in-stream `AppendRowsResponse.error`.
#[derive(Debug, Clone, PartialEq)]
pub struct BqError {
    pub code: Code,
    pub message: String,
    pub storage: Option<bq::StorageError>,
}

impl BqError {
    pub fn new(code: Code, message: impl Into<String>) -> BqError {
        BqError {
            code,
            message: message.into(),
            storage: None,
        }
    }

    /// Attaches a StorageError whose `error_message` is the message itself.
    pub fn with_storage(mut self, code: i32, entity: impl Into<String>) -> BqError {
        self.storage = Some(bq::StorageError {
            code,
            entity: entity.into(),
            error_message: self.message.clone(),
        });
        self
    }

    /// `google.rpc.Status` for `AppendRowsResponse.error`.
    pub fn to_rpc_status(&self) -> rpc::Status {
        rpc::Status {
            code: self.code as i32,
            message: self.message.clone(),
            details: self
                .storage
                .iter()
                .map(|e| prost_types::Any {
                    type_url: STORAGE_ERROR_TYPE.to_string(),
                    value: e.encode_to_vec(),
                })
                .collect(),
        }
    }

    /// A gRPC status carrying the `google.rpc.Status` (with details) in `grpc-status-details-bin`.
    pub fn to_status(&self) -> tonic::Status {
        if self.storage.is_none() {
            return tonic::Status::new(self.code, self.message.clone());
        }
        let details = Bytes::from(self.to_rpc_status().encode_to_vec());
        tonic::Status::with_details(self.code, self.message.clone(), details)
    }
}

impl From<&StoreError> for BqError {
    fn from(e: &StoreError) -> BqError {
        use StoreError as E;
        match e {
            E::InvalidStreamName { entity } => BqError::new(
                Code::InvalidArgument,
                format!("Invalid stream name. Entity: {entity}"),
            ),
            E::InvalidTableName { entity } => BqError::new(
                Code::InvalidArgument,
                format!("Invalid table name. Entity: {entity}"),
            ),
            E::DatasetNotFound { project, dataset } => BqError::new(
                Code::NotFound,
                format!("Not found: Dataset {project}:{dataset}"),
            ),
            E::DatasetExists { project, dataset } => BqError::new(
                Code::AlreadyExists,
                format!("Already Exists: Dataset {project}:{dataset}"),
            ),
            E::DatasetInUse { project, dataset } => BqError::new(
                Code::FailedPrecondition,
                format!("Dataset {project}:{dataset} is still in use"),
            ),
            // The real service masks a missing table as PERMISSION_DENIED, "Permission
            // 'TABLES_GET' denied on resource '<table>' (or it may not exist)" (TABLES_UPDATE_DATA
            // for CreateWriteStream), and clients test the text for "it may not exist" (Java's
            // testJsonStreamWriterWithDefaultSchemaNoTable). Without IAM the emulator answers
            // NOT_FOUND and keeps that clause (docs/emulator.md).
            E::TableNotFound { table, entity } => BqError::new(
                Code::NotFound,
                format!(
                    "Requested entity was not found. Resource '{}' (or it may not exist). Entity: {entity}",
                    table.path()
                ),
            )
            .with_storage(storage_code::TABLE_NOT_FOUND, entity),
            E::TableExists { table } => BqError::new(
                Code::AlreadyExists,
                format!("Already Exists: Table {}", table.legacy()),
            ),
            E::StreamNotFound { entity } => BqError::new(
                Code::NotFound,
                format!("Requested entity was not found. Entity: {entity}"),
            )
            .with_storage(storage_code::STREAM_NOT_FOUND, entity),
            E::InvalidStreamType { kind } => BqError::new(
                Code::InvalidArgument,
                format!(
                    "Invalid write stream type {kind}: must be COMMITTED, PENDING or BUFFERED"
                ),
            ),
            E::OffsetAlreadyExists {
                expected,
                received,
                entity,
            } => BqError::new(
                Code::AlreadyExists,
                format!(
                    "The offset is within stream, expected offset {expected}, received {received} Entity: {entity}"
                ),
            )
            .with_storage(storage_code::OFFSET_ALREADY_EXISTS, entity),
            E::OffsetOutOfRange {
                expected,
                received,
                entity,
            } => BqError::new(
                Code::OutOfRange,
                format!(
                    "The offset is beyond stream, expected offset {expected}, received {received} Entity: {entity}"
                ),
            )
            .with_storage(storage_code::OFFSET_OUT_OF_RANGE, entity),
            E::NegativeOffset { received, entity } => BqError::new(
                Code::InvalidArgument,
                format!("Offset must be non-negative, received {received} Entity: {entity}"),
            ),
            E::OffsetOnDefault { entity } => BqError::new(
                Code::InvalidArgument,
                format!("Offset is not supported on the _default stream. Entity: {entity}"),
            ),
            // Verified against the real service: no "Entity:" suffix, the stream follows a colon.
            E::StreamFinalized { entity } => BqError::new(
                Code::InvalidArgument,
                format!("Stream has been finalized and cannot be appended: {entity}"),
            )
            .with_storage(storage_code::STREAM_FINALIZED, entity),
            E::WrongStreamKind {
                operation,
                kind,
                entity,
            } => {
                let message = match (kind, *operation) {
                    (StreamKind::Default, "FlushRows") => format!(
                        "FlushRows is not supported on the _default stream, since it is not BUFFERED. Entity: {entity}"
                    ),
                    (StreamKind::Default, op) => {
                        format!("{op} is not supported on the _default stream. Entity: {entity}")
                    }
                    (kind, op) => format!(
                        "{op} requires a stream created in buffered mode, actual: {} Entity: {entity}",
                        kind.internal_name()
                    ),
                };
                BqError::new(Code::InvalidArgument, message)
                    .with_storage(storage_code::INVALID_STREAM_TYPE, entity)
            }
            E::FlushOffsetMissing { entity } => BqError::new(
                Code::InvalidArgument,
                format!("Offset must be specified for FlushRows. Entity: {entity}"),
            ),
            E::FlushBeyondEnd { offset, entity } => BqError::new(
                Code::OutOfRange,
                format!("Offset {offset} is beyond the end of the stream Entity: {entity}"),
            )
            .with_storage(storage_code::OFFSET_OUT_OF_RANGE, entity),
            E::FlushBelowCursor {
                offset,
                cursor,
                entity,
            } => BqError::new(
                Code::AlreadyExists,
                format!(
                    "Offset {offset} has already been flushed, the stream is flushed up to offset {cursor} Entity: {entity}"
                ),
            )
            .with_storage(storage_code::OFFSET_ALREADY_EXISTS, entity),
            E::NothingToCommit { entity } => BqError::new(
                Code::InvalidArgument,
                format!("write_streams must not be empty. Entity: {entity}"),
            ),
            E::Persist(detail) => BqError::new(
                Code::Internal,
                format!("emulator persistence failed: {detail}"),
            ),
        }
    }
}

impl From<StoreError> for BqError {
    fn from(e: StoreError) -> BqError {
        BqError::from(&e)
    }
}

/// Decodes the StorageError of a status, if it carries one (used by tests and clients).
pub fn storage_error(status: &tonic::Status) -> Option<bq::StorageError> {
    let rpc = rpc::Status::decode(status.details()).ok()?;
    storage_error_of(&rpc)
}

/// The StorageError inside a `google.rpc.Status`, if any.
pub fn storage_error_of(status: &rpc::Status) -> Option<bq::StorageError> {
    status
        .details
        .iter()
        .find(|a| a.type_url == STORAGE_ERROR_TYPE)
        .and_then(|a| bq::StorageError::decode(a.value.as_slice()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_details_carry_the_storage_error() {
        let e = BqError::from(StoreError::OffsetAlreadyExists {
            expected: 3,
            received: 1,
            entity: "projects/p/datasets/d/tables/t/streams/s".into(),
        });
        let status = e.to_status();
        assert_eq!(status.code(), Code::AlreadyExists);
        assert!(
            status
                .message()
                .starts_with("The offset is within stream, expected offset 3, received 1 Entity: ")
        );
        let se = storage_error(&status).unwrap();
        assert_eq!(se.code, storage_code::OFFSET_ALREADY_EXISTS);
        assert_eq!(se.entity, "projects/p/datasets/d/tables/t/streams/s");
    }
}
