//! The CDC checks of one AppendRows request (docs/cdc.md, "In the emulator"): which
//! writer schemas may carry the pseudo-columns, the values they may hold, and the connection's
//! insert/upsert mode.

use bytes::Bytes;
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1 as bq;
use tonic::{Code, Status};

use crate::cdc::{ChangeKind, ConnectionMode, Sequence};
use crate::rows::{RowCodec, SchemaError};
use crate::status::BqError;
use crate::store::WriteStream;

/// A writer schema with pseudo-columns needs a table with a primary key; without one BigQuery
/// sees them as fields the table does not have (SCHEMA_MISMATCH_EXTRA_FIELDS).
pub(super) fn check_writer_schema(
    codec: &RowCodec,
    stream: &WriteStream,
    entity: &str,
) -> Result<(), Status> {
    let pseudo = codec.pseudo_columns();
    if !pseudo.any() || !stream.primary_key().is_empty() {
        return Ok(());
    }
    let e = SchemaError::ExtraFields {
        fields: pseudo.names(),
    };
    let mut err = BqError::new(
        Code::InvalidArgument,
        format!("{} Entity: {entity}", e.message()),
    );
    if let Some(code) = e.storage_code() {
        err = err.with_storage(code, entity);
    }
    Err(err.to_status())
}

/// Validates every row (a DELETE needs only its key columns) and reads its change: the kinds of
/// the rows, or the row errors. The kinds are empty when the writer schema has no `_CHANGE_TYPE`
/// (every row is a plain insert).
pub(super) fn validate_rows(
    codec: &RowCodec,
    rows: &[Bytes],
    max_errors: usize,
) -> (Vec<ChangeKind>, Vec<bq::RowError>) {
    let mut kinds = Vec::new();
    let mut errors = Vec::new();
    let pseudo = codec.pseudo_columns().any();
    for (index, row) in rows.iter().enumerate() {
        let mut kind = ChangeKind::Plain;
        let mut problem = None;
        if pseudo {
            let values = codec.pseudo_values(row);
            match ChangeKind::parse(values.change_type) {
                Some(k) => kind = k,
                None => {
                    problem = Some(format!(
                        "The given value is not a valid CHANGE_TYPE: {} on field _CHANGE_TYPE.",
                        String::from_utf8_lossy(values.change_type.unwrap_or_default())
                    ))
                }
            }
            if let Some(s) = values.sequence
                && std::str::from_utf8(s)
                    .ok()
                    .and_then(Sequence::parse)
                    .is_none()
            {
                problem = Some(format!(
                    "Invalid _CHANGE_SEQUENCE_NUMBER value: {} on field _CHANGE_SEQUENCE_NUMBER.",
                    String::from_utf8_lossy(s)
                ));
            }
            kinds.push(kind);
        }
        let checked = match kind {
            ChangeKind::Delete => codec.validate_delete(row),
            _ => codec.validate(row),
        };
        if let Some(message) = problem.or(checked.err())
            && errors.len() < max_errors
        {
            errors.push(bq::RowError {
                index: index as i64,
                code: bq::row_error::RowErrorCode::FieldsError as i32,
                message,
            });
        }
    }
    (kinds, errors)
}

/// Admits a request's rows on the connection: UPSERT/DELETE only on `_default` of a table with
/// a primary key, and never mixed with plain rows on one connection.
pub(super) fn admit(
    mode: &mut ConnectionMode,
    stream: &WriteStream,
    kinds: &[ChangeKind],
    entity: &str,
) -> Result<(), BqError> {
    let kinds = if kinds.is_empty() {
        &[ChangeKind::Plain][..]
    } else {
        kinds
    };
    let result = if stream.is_default() {
        mode.admit(kinds)
    } else {
        // Explicit streams are insert streams whatever the connection did before.
        ConnectionMode::Insert.admit(kinds)
    };
    result.map_err(|message| {
        BqError::new(Code::InvalidArgument, format!("{message} Entity: {entity}"))
    })
}
