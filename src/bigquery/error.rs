//! Errors of the Storage Write API as the daemon sees them, classified where they are defined,
//! once. The classification — not string matching scattered through the writer and
//! the coordinator — decides what happens to offsets (docs/architecture.md#failure-policies).

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::{
    RowError, StorageError, storage_error::StorageErrorCode,
};
use prost::Message;
use tonic::Code;

const STORAGE_ERROR_TYPE_URL: &str =
    "type.googleapis.com/google.cloud.bigquery.storage.v1.StorageError";

/// What the caller must do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Reconnect (for AppendRows) and resend unacknowledged requests in order at the same
    /// offsets; for unary calls retry with backoff. UNAVAILABLE, ABORTED (incl. the 600 s idle
    /// close), INTERNAL, DEADLINE_EXCEEDED, CANCELLED, UNKNOWN.
    Transient,
    /// RESOURCE_EXHAUSTED: as `Transient`, with a longer backoff.
    Throttled,
    /// ALREADY_EXISTS on an append (OFFSET_ALREADY_EXISTS): success only for a resend of a request
    /// this incarnation sent on this stream (docs/architecture.md, invariant 5). On FlushRows it
    /// means the flush cursor is already past the offset.
    AlreadyExists,
    /// OUT_OF_RANGE: an append offset beyond the end (an earlier append failed) or a flush
    /// offset beyond the rows of the stream.
    OutOfRange,
    /// The stream was finalized. On one's own current stream: another incarnation superseded
    /// this writer, it is a zombie (invariant 5). On a recovery flush: the stream is gone.
    StreamFinalized,
    /// The stream (or its table) does not exist, e.g. after the idle TTL. Can be transient right
    /// after table creation, so callers retry a few times before acting on it.
    NotFound,
    /// The request failed because of some of its rows (`row_errors`, FIELDS_ERROR): nothing was
    /// appended; the named rows go to the dead-letter path and the rest is resent.
    RowErrors,
    /// The writer schema does not fit the table (extra fields, type mismatch): the connection is
    /// closed; the schema must change before anything can be appended.
    SchemaMismatch,
    /// PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION: an IAM change, a credential
    /// being rotated, a table in a state it leaves again (the Go client retries
    /// FAILED_PRECONDITION). Retried with a long backoff while readiness is false, never a
    /// permanent stop (docs/architecture.md#failure-policies).
    Denied,
    /// Malformed names or requests: retrying cannot help.
    Fatal,
}

/// An error returned by the Storage Write API, on a unary call, as a status ending an
/// AppendRows call, or in-stream in `AppendRowsResponse.error`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code:?}: {message}{}", storage.as_ref().map(|s| format!(" (storage error {})", s.code_name())).unwrap_or_default())]
pub struct WriteError {
    pub code: Code,
    pub message: String,
    pub storage: Option<StorageDetail>,
    pub row_errors: Vec<RowError>,
}

/// The `google.cloud.bigquery.storage.v1.StorageError` detail of an error, if it had one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageDetail {
    pub code: i32,
    pub entity: String,
    pub error_message: String,
}

impl StorageDetail {
    pub fn code(&self) -> Option<StorageErrorCode> {
        StorageErrorCode::try_from(self.code).ok()
    }

    /// The enum name, e.g. `STREAM_FINALIZED`; a bounded label value for metrics.
    pub fn code_name(&self) -> &'static str {
        self.code()
            .map(|c| c.as_str_name())
            .unwrap_or("STORAGE_ERROR_CODE_UNKNOWN")
    }
}

impl WriteError {
    /// From a gRPC status (unary call or the end of an AppendRows call).
    pub fn from_status(status: &tonic::Status) -> WriteError {
        WriteError {
            code: status.code(),
            message: status.message().to_string(),
            storage: storage_detail(status.details()),
            row_errors: Vec::new(),
        }
    }

    /// From an in-stream `AppendRowsResponse.error` and the response's `row_errors`.
    pub fn from_rpc_status(
        status: &googleapis_tonic_google_rpc::google::rpc::Status,
        row_errors: Vec<RowError>,
    ) -> WriteError {
        let storage = status
            .details
            .iter()
            .find(|any| any.type_url == STORAGE_ERROR_TYPE_URL)
            .and_then(|any| StorageError::decode(any.value.as_slice()).ok())
            .map(StorageDetail::from);
        WriteError {
            code: Code::from_i32(status.code),
            message: status.message.clone(),
            storage,
            row_errors,
        }
    }

    /// A connection that broke without a status (the transport went away).
    pub fn disconnected(what: impl Into<String>) -> WriteError {
        WriteError {
            code: Code::Unavailable,
            message: what.into(),
            storage: None,
            row_errors: Vec::new(),
        }
    }

    pub fn storage_code(&self) -> Option<StorageErrorCode> {
        self.storage.as_ref().and_then(StorageDetail::code)
    }

    /// The classification that decides what happens next. The StorageError detail wins over
    /// the gRPC code where it is more specific (STREAM_FINALIZED comes as INVALID_ARGUMENT).
    pub fn class(&self) -> ErrorClass {
        match self.storage_code() {
            Some(StorageErrorCode::StreamFinalized) => return ErrorClass::StreamFinalized,
            Some(StorageErrorCode::OffsetAlreadyExists) => return ErrorClass::AlreadyExists,
            Some(StorageErrorCode::OffsetOutOfRange) => return ErrorClass::OutOfRange,
            Some(StorageErrorCode::StreamNotFound | StorageErrorCode::TableNotFound) => {
                return ErrorClass::NotFound;
            }
            Some(StorageErrorCode::SchemaMismatchExtraFields) => return ErrorClass::SchemaMismatch,
            Some(StorageErrorCode::KmsServiceError) => return ErrorClass::Transient,
            _ => {}
        }
        if !self.row_errors.is_empty() {
            return ErrorClass::RowErrors;
        }
        match self.code {
            Code::Unavailable
            | Code::Aborted
            | Code::Internal
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Unknown => ErrorClass::Transient,
            Code::ResourceExhausted => ErrorClass::Throttled,
            Code::AlreadyExists => ErrorClass::AlreadyExists,
            Code::OutOfRange => ErrorClass::OutOfRange,
            Code::NotFound => ErrorClass::NotFound,
            // The verified text of the real service: FlushRows on a finalized BUFFERED stream
            // answers INVALID_ARGUMENT without a typed detail (reference, facts at the top).
            Code::InvalidArgument if self.message.contains("Stream has been finalized") => {
                ErrorClass::StreamFinalized
            }
            Code::InvalidArgument if self.message.contains("proto field mismatched") => {
                ErrorClass::SchemaMismatch
            }
            Code::PermissionDenied | Code::Unauthenticated | Code::FailedPrecondition => {
                ErrorClass::Denied
            }
            _ => ErrorClass::Fatal,
        }
    }

    /// A bounded label value for metrics: the gRPC code name.
    pub fn code_name(&self) -> &'static str {
        code_name(self.code)
    }
}

impl From<StorageError> for StorageDetail {
    fn from(e: StorageError) -> Self {
        StorageDetail {
            code: e.code,
            entity: e.entity,
            error_message: e.error_message,
        }
    }
}

impl From<tonic::Status> for WriteError {
    fn from(status: tonic::Status) -> Self {
        WriteError::from_status(&status)
    }
}

/// `google.rpc.Status` bytes (the `grpc-status-details-bin` trailer) → its StorageError detail.
fn storage_detail(details: &[u8]) -> Option<StorageDetail> {
    if details.is_empty() {
        return None;
    }
    let status = googleapis_tonic_google_rpc::google::rpc::Status::decode(details).ok()?;
    status
        .details
        .iter()
        .find(|any| any.type_url == STORAGE_ERROR_TYPE_URL)
        .and_then(|any| StorageError::decode(any.value.as_slice()).ok())
        .map(StorageDetail::from)
}

/// Upper-case gRPC code names as Google documents them (bounded metric label values).
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_with_storage(code: Code, msg: &str, storage: StorageErrorCode) -> tonic::Status {
        let detail = StorageError {
            code: storage as i32,
            entity: "projects/p/datasets/d/tables/t/streams/s".into(),
            error_message: msg.into(),
        };
        let rpc = googleapis_tonic_google_rpc::google::rpc::Status {
            code: code as i32,
            message: msg.into(),
            details: vec![prost_types::Any {
                type_url: STORAGE_ERROR_TYPE_URL.into(),
                value: detail.encode_to_vec(),
            }],
        };
        tonic::Status::with_details(code, msg, rpc.encode_to_vec().into())
    }

    #[test]
    fn storage_error_detail_decides_over_the_grpc_code() {
        let s = status_with_storage(
            Code::InvalidArgument,
            "Stream has been finalized and cannot be appended: s",
            StorageErrorCode::StreamFinalized,
        );
        let e = WriteError::from_status(&s);
        assert_eq!(e.class(), ErrorClass::StreamFinalized);
        assert_eq!(e.storage.as_ref().unwrap().code_name(), "STREAM_FINALIZED");
        let s = status_with_storage(
            Code::AlreadyExists,
            "The offset is within stream",
            StorageErrorCode::OffsetAlreadyExists,
        );
        assert_eq!(
            WriteError::from_status(&s).class(),
            ErrorClass::AlreadyExists
        );
    }

    #[test]
    fn flush_on_a_finalized_stream_without_detail_is_stream_finalized() {
        let s =
            tonic::Status::invalid_argument("Stream has been finalized and cannot be appended: x");
        assert_eq!(
            WriteError::from_status(&s).class(),
            ErrorClass::StreamFinalized
        );
        let s = tonic::Status::invalid_argument("Invalid stream name. Entity: x");
        assert_eq!(WriteError::from_status(&s).class(), ErrorClass::Fatal);
    }

    #[test]
    fn transport_codes_are_transient_and_quota_is_throttled() {
        for code in [
            Code::Unavailable,
            Code::Aborted,
            Code::Internal,
            Code::DeadlineExceeded,
        ] {
            assert_eq!(
                WriteError::from_status(&tonic::Status::new(code, "x")).class(),
                ErrorClass::Transient
            );
        }
        let q = tonic::Status::resource_exhausted("Exceeds 'AppendRows throughput' quota");
        assert_eq!(WriteError::from_status(&q).class(), ErrorClass::Throttled);
    }

    #[test]
    fn permission_credential_and_precondition_errors_are_denied_not_fatal() {
        for code in [
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::FailedPrecondition,
        ] {
            assert_eq!(
                WriteError::from_status(&tonic::Status::new(code, "x")).class(),
                ErrorClass::Denied
            );
        }
    }

    #[test]
    fn row_errors_in_a_response_classify_as_row_errors() {
        let rpc = googleapis_tonic_google_rpc::google::rpc::Status {
            code: Code::InvalidArgument as i32,
            message: "Errors found while processing rows.".into(),
            details: vec![],
        };
        let rows = vec![RowError {
            index: 3,
            code: 1,
            message: "bad".into(),
        }];
        assert_eq!(
            WriteError::from_rpc_status(&rpc, rows).class(),
            ErrorClass::RowErrors
        );
    }
}
