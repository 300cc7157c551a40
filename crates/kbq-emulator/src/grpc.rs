//! The gRPC service `google.cloud.bigquery.storage.v1.BigQueryWrite` over the store.
//!
//! AppendRows is one task per call that handles requests strictly one after the other, so
//! responses leave in request order, one per request. A per-request problem (offsets, row
//! errors, a finalized stream, size, empty rows) is answered in `AppendRowsResponse.error` and the
//! call goes on; a problem with the connection itself (bad or unknown stream, schema mismatch,
//! no writer schema, idle timeout) ends the call with a status, as the real service does.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1 as bq;
use googleapis_tonic_google_rpc::google::rpc;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status};

use crate::cdc::{ChangeKind, ConnectionMode};
use crate::faults::{FaultAction, Faults, Rpc};
use crate::quota::{QuotaSettings, Quotas};
use crate::rows::{Interpretation, MissingValues, RowCodec};
use crate::status::{BqError, DROP_MARKER};
use crate::store::{
    CommitOutcome, RowBatch, Store, StoreError, StreamInfo, StreamKind, WriteStream,
};
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema, TableSchema};

mod cdc_rows;

include!(concat!(
    env!("OUT_DIR"),
    "/google.cloud.bigquery.storage.v1.BigQueryWrite.rs"
));

pub use big_query_write_server::{BigQueryWrite, BigQueryWriteServer};

/// Limits of the write service.
#[derive(Debug, Clone)]
pub struct WriteSettings {
    /// An AppendRows call with no request for this long ends with ABORTED.
    pub idle_timeout: Duration,
    /// Largest AppendRows request accepted (encoded size).
    pub max_request_bytes: usize,
    /// When set, only these top-level columns of each row are kept once the whole row is
    /// validated; the others read as unset. Benchmarks use it so that the emulator, which keeps
    /// every row in memory for its lifetime, does not spend the shared cores on fresh pages.
    pub keep_columns: Option<Arc<[String]>>,
    /// Quota mode: BigQuery's per-project limits (`quota.rs`); `None` enforces none.
    pub quota: Option<QuotaSettings>,
}

impl Default for WriteSettings {
    fn default() -> Self {
        WriteSettings {
            idle_timeout: Duration::from_secs(600),
            max_request_bytes: 20 * 1024 * 1024,
            keep_columns: None,
            quota: None,
        }
    }
}

/// The BigQueryWrite implementation.
#[derive(Debug, Clone)]
pub struct WriteService {
    store: Arc<Store>,
    faults: Arc<Faults>,
    quotas: Arc<Quotas>,
    settings: Arc<WriteSettings>,
}

impl WriteService {
    pub fn new(
        store: Arc<Store>,
        faults: Arc<Faults>,
        quotas: Arc<Quotas>,
        settings: WriteSettings,
    ) -> WriteService {
        WriteService {
            store,
            faults,
            quotas,
            settings: Arc::new(settings),
        }
    }

    /// The tonic server, with a decoding limit above the request-size limit so that oversized
    /// requests reach our own check (and its BigQuery message) instead of tonic's 4 MiB default.
    pub fn into_server(self) -> BigQueryWriteServer<WriteService> {
        let limit = self
            .settings
            .max_request_bytes
            .saturating_mul(2)
            .max(64 * 1024 * 1024);
        BigQueryWriteServer::new(self)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit)
    }

    /// Applies the fault rules of one call: delays, then a failure or drop. `Ok(true)` asks the
    /// caller to handle the call and then drop the answer.
    async fn faults_before(&self, rpc: Rpc, target: &str) -> Result<bool, Status> {
        let mut drop_after = false;
        for action in self.faults.check(rpc, target) {
            match action {
                FaultAction::Delay { ms } => tokio::time::sleep(Duration::from_millis(ms)).await,
                FaultAction::Fail {
                    code,
                    storage_code,
                    message,
                    ..
                } => return Err(injected(code.0, storage_code.map(|c| c.0), message, target)),
                FaultAction::Drop { after: false } => return Err(dropped()),
                FaultAction::Drop { after: true } => drop_after = true,
                // Refused at install for the write RPCs.
                FaultAction::Deny { .. } => {}
            }
        }
        Ok(drop_after)
    }

    /// One unary call under the fault rules: `handle` runs unless a rule fails or drops the
    /// call first, and a `drop after` rule drops its answer once it has taken effect (the
    /// client sees a reset for a call the store applied).
    async fn faulted<T>(
        &self,
        rpc: Rpc,
        target: &str,
        handle: impl FnOnce() -> Result<T, Status>,
    ) -> Result<T, Status> {
        let drop_after = self.faults_before(rpc, target).await?;
        let answer = handle()?;
        if drop_after {
            return Err(dropped());
        }
        Ok(answer)
    }
}

fn injected(code: Code, storage: Option<i32>, message: Option<String>, target: &str) -> Status {
    let message = message.unwrap_or_else(|| format!("injected fault. Entity: {target}"));
    let mut e = BqError::new(code, message);
    if let Some(c) = storage {
        e = e.with_storage(c, target);
    }
    e.to_status()
}

/// A status that the server's drop layer turns into an HTTP/2 stream reset.
fn dropped() -> Status {
    let mut s = Status::unavailable("connection dropped by fault injection");
    s.metadata_mut()
        .insert(DROP_MARKER, "1".parse().expect("ascii"));
    s
}

/// The kept columns of validated rows, copied into one buffer per request so that the request's
/// own buffer is released once it is answered. The CDC pseudo-columns are always kept: a table's
/// applied state is derived from them when it is read (docs/cdc.md, "In the emulator").
fn project(codec: &RowCodec, rows: &[Bytes], columns: &[String]) -> Vec<Bytes> {
    let mut keep = codec.column_numbers(columns);
    let pseudo = codec.pseudo_columns();
    keep.extend(pseudo.change_type.into_iter().chain(pseudo.sequence));
    let mut buf = Vec::with_capacity(rows.len() * 32);
    let mut ends = Vec::with_capacity(rows.len());
    for row in rows {
        RowCodec::project_into(row, &keep, &mut buf);
        ends.push(buf.len());
    }
    let buf = Bytes::from(buf);
    let mut start = 0;
    ends.into_iter()
        .map(|end| {
            let row = buf.slice(start..end);
            start = end;
            row
        })
        .collect()
}

fn store_status(e: StoreError) -> Status {
    BqError::from(&e).to_status()
}

fn timestamp(us: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: us.div_euclid(1_000_000),
        nanos: (us.rem_euclid(1_000_000) * 1000) as i32,
    }
}

/// The REST table schema in the Storage API's proto shape.
pub fn proto_table_schema(schema: &TableSchema) -> bq::TableSchema {
    bq::TableSchema {
        fields: schema.fields.iter().map(proto_field).collect(),
    }
}

fn proto_field(f: &TableFieldSchema) -> bq::TableFieldSchema {
    use bq::table_field_schema::{FieldElementType, Mode as M};
    let mode = match f.mode() {
        Mode::Nullable => M::Nullable,
        Mode::Required => M::Required,
        Mode::Repeated => M::Repeated,
    };
    let int = |s: &Option<String>| s.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0);
    bq::TableFieldSchema {
        name: f.name.clone(),
        r#type: proto_type(&f.field_type) as i32,
        mode: mode as i32,
        fields: f.fields.iter().map(proto_field).collect(),
        description: f.description.clone().unwrap_or_default(),
        max_length: int(&f.max_length),
        precision: int(&f.precision),
        scale: int(&f.scale),
        default_value_expression: f.default_value_expression.clone().unwrap_or_default(),
        // Clients build a RANGE column's proto message from it (Go's adapt package refuses a
        // RANGE without it).
        range_element_type: f.range_element_type.as_ref().map(|r| FieldElementType {
            r#type: proto_type(&r.element_type) as i32,
        }),
        ..Default::default()
    }
}

fn proto_type(field_type: &FieldType) -> bq::table_field_schema::Type {
    use bq::table_field_schema::Type as T;
    match field_type {
        FieldType::String => T::String,
        FieldType::Bytes => T::Bytes,
        FieldType::Int64 => T::Int64,
        FieldType::Float64 => T::Double,
        FieldType::Bool => T::Bool,
        FieldType::Numeric => T::Numeric,
        FieldType::BigNumeric => T::Bignumeric,
        FieldType::Timestamp => T::Timestamp,
        FieldType::Date => T::Date,
        FieldType::Time => T::Time,
        FieldType::DateTime => T::Datetime,
        FieldType::Geography => T::Geography,
        FieldType::Json => T::Json,
        FieldType::Record => T::Struct,
        FieldType::Other(name) => match name.as_str() {
            "INTERVAL" => T::Interval,
            "RANGE" => T::Range,
            _ => T::Unspecified,
        },
    }
}

fn write_stream_message(info: &StreamInfo, full: bool) -> bq::WriteStream {
    use bq::write_stream::{Type, WriteMode};
    let kind = match info.kind {
        StreamKind::Committed | StreamKind::Default => Type::Committed,
        StreamKind::Pending => Type::Pending,
        StreamKind::Buffered => Type::Buffered,
    };
    bq::WriteStream {
        name: info.name.clone(),
        r#type: kind as i32,
        create_time: info.create_time_us.map(timestamp),
        commit_time: info.commit_time_us.map(timestamp),
        table_schema: full.then(|| proto_table_schema(&info.table_schema)),
        write_mode: WriteMode::Insert as i32,
        location: info.location.clone(),
    }
}

/// The outcome of one AppendRows request.
#[derive(Debug)]
pub enum AppendOutcome {
    /// Answer and keep the call open (success or an in-stream error).
    Reply(Box<bq::AppendRowsResponse>),
    /// End the call with this status; the request had no effect.
    End(Status),
}

/// The writer schema last sent for one destination on a connection.
#[derive(Debug)]
struct WriterSchema {
    descriptor: prost_types::DescriptorProto,
    codec: Arc<RowCodec>,
    /// The table schema version the codec was compiled against.
    compiled_for: u64,
}

/// One AppendRows connection's state, independent of the transport (the benchmark drives it
/// directly). Tracks the current destination as the caller spelled it, the writer schema per
/// destination, and the table schema version seen when the connection first used each table.
#[derive(Debug)]
pub struct AppendSession {
    store: Arc<Store>,
    max_request_bytes: usize,
    destination: Option<(String, Arc<WriteStream>)>,
    schemas: HashMap<String, WriterSchema>,
    schema_seen: HashMap<String, u64>,
    keep_columns: Option<Arc<[String]>>,
    /// Insert or upsert (CDC) rows: a connection carries one kind only.
    mode: ConnectionMode,
    /// `default_missing_value_interpretation`, sticky: it holds until a request sets another.
    default_interpretation: Interpretation,
}

const ROW_ERRORS_MESSAGE: &str = "Errors found while processing rows. Please refer to the row_errors field for details. The list may not be complete because of the size limitations.";
/// Row errors reported per response; the real service truncates the list too.
const MAX_ROW_ERRORS: usize = 1000;

/// A request's rows as proto rows (none: empty); Arrow rows end the call.
fn proto_data(
    rows: Option<bq::append_rows_request::Rows>,
    entity: &str,
) -> Result<bq::append_rows_request::ProtoData, Status> {
    match rows {
        Some(bq::append_rows_request::Rows::ProtoRows(data)) => Ok(data),
        Some(bq::append_rows_request::Rows::ArrowRows(_)) => Err(BqError::new(
            Code::InvalidArgument,
            format!(
                "Arrow rows are not supported by this emulator; send proto_rows. Entity: {entity}"
            ),
        )
        .to_status()),
        None => Ok(bq::append_rows_request::ProtoData::default()),
    }
}

impl AppendSession {
    pub fn new(store: Arc<Store>, max_request_bytes: usize) -> AppendSession {
        AppendSession {
            store,
            max_request_bytes,
            destination: None,
            schemas: HashMap::new(),
            schema_seen: HashMap::new(),
            keep_columns: None,
            mode: ConnectionMode::default(),
            default_interpretation: Interpretation::Null,
        }
    }

    /// Keeps only these top-level columns of each validated row ([`WriteSettings::keep_columns`]).
    pub fn keep_columns(mut self, columns: Option<Arc<[String]>>) -> AppendSession {
        self.keep_columns = columns;
        self
    }

    /// The destination as the caller spelled it (for idle-close messages).
    pub fn entity(&self) -> String {
        self.destination
            .as_ref()
            .map(|(n, _)| n.clone())
            .unwrap_or_default()
    }

    /// The target name of a request, for fault rules.
    pub fn target_of(&self, req: &bq::AppendRowsRequest) -> String {
        if req.write_stream.is_empty() {
            self.entity()
        } else {
            req.write_stream.clone()
        }
    }

    /// Handles one request.
    pub fn handle(&mut self, req: bq::AppendRowsRequest) -> AppendOutcome {
        let size = req.encoded_len();
        // Destination first: an unknown or malformed stream ends the call whatever else is wrong.
        let (entity, stream) = match self.destination(&req.write_stream) {
            Ok(d) => d,
            Err(status) => return AppendOutcome::End(status),
        };
        let table_key = stream.table().path();
        let seen = *self
            .schema_seen
            .entry(table_key)
            .or_insert_with(|| stream.table_schema_version());
        let reply = |resp: Result<Option<i64>, BqError>, row_errors: Vec<bq::RowError>| {
            let current = stream.table_schema_version();
            let response = match resp {
                Ok(offset) => bq::append_rows_response::Response::AppendResult(
                    bq::append_rows_response::AppendResult { offset },
                ),
                Err(e) => bq::append_rows_response::Response::Error(e.to_rpc_status()),
            };
            AppendOutcome::Reply(Box::new(bq::AppendRowsResponse {
                updated_schema: (current != seen)
                    .then(|| proto_table_schema(&stream.table_schema())),
                row_errors,
                write_stream: entity.clone(),
                response: Some(response),
            }))
        };
        if size > self.max_request_bytes {
            let e = BqError::new(
                Code::InvalidArgument,
                format!(
                    "AppendRows request too large: {size} limit {} Entity: {entity}",
                    self.max_request_bytes
                ),
            );
            return reply(Err(e), Vec::new());
        }
        let missing = match self.missing_values(
            req.default_missing_value_interpretation,
            &req.missing_value_interpretations,
            &entity,
        ) {
            Ok(m) => m,
            Err(e) => return reply(Err(e), Vec::new()),
        };
        let data = match proto_data(req.rows, &entity) {
            Ok(data) => data,
            Err(status) => return AppendOutcome::End(status),
        };
        let codec = match self.codec(&entity, &stream, data.writer_schema) {
            Ok(c) => c,
            Err(status) => return AppendOutcome::End(status),
        };
        let rows = data.rows.map(|r| r.serialized_rows).unwrap_or_default();
        if rows.is_empty() {
            let e = BqError::new(Code::InvalidArgument, "Rows must be specified.");
            return reply(Err(e), Vec::new());
        }
        let (kinds, row_errors) = cdc_rows::validate_rows(&codec, &rows, MAX_ROW_ERRORS);
        if !row_errors.is_empty() {
            // Nothing of a request with a bad row is appended (storage.proto, RowError).
            let e = BqError::new(
                Code::InvalidArgument,
                format!("{ROW_ERRORS_MESSAGE} Entity: {entity}"),
            );
            return reply(Err(e), row_errors);
        }
        if let Err(e) = cdc_rows::admit(&mut self.mode, &stream, &kinds, &entity) {
            return reply(Err(e), Vec::new());
        }
        let rows = if codec.has_defaults() {
            let delete = |i: usize| kinds.get(i) == Some(&ChangeKind::Delete);
            match codec.fill(rows, &missing, delete) {
                Ok(rows) => rows,
                Err(errors) => {
                    let row_errors = errors
                        .into_iter()
                        .take(MAX_ROW_ERRORS)
                        .map(|(index, message)| bq::RowError {
                            index: index as i64,
                            code: bq::row_error::RowErrorCode::FieldsError as i32,
                            message,
                        })
                        .collect();
                    let e = BqError::new(
                        Code::InvalidArgument,
                        format!("{ROW_ERRORS_MESSAGE} Entity: {entity}"),
                    );
                    return reply(Err(e), row_errors);
                }
            }
        } else {
            rows
        };
        let rows = match &self.keep_columns {
            Some(columns) => project(&codec, &rows, columns),
            None => rows,
        };
        match self
            .store
            .append(&stream, req.offset, RowBatch { rows, codec }, &entity)
        {
            Ok(offset) => reply(Ok(offset), Vec::new()),
            Err(e @ (StoreError::StreamNotFound { .. } | StoreError::TableNotFound { .. })) => {
                self.destination = None;
                AppendOutcome::End(store_status(e))
            }
            Err(e) => reply(Err(BqError::from(&e)), Vec::new()),
        }
    }

    /// The missing-value interpretations of this request: its per-column map over the
    /// connection's default, which the request may change for itself and every later one.
    fn missing_values(
        &mut self,
        default: i32,
        columns: &HashMap<String, i32>,
        entity: &str,
    ) -> Result<MissingValues, BqError> {
        use bq::append_rows_request::MissingValueInterpretation as M;
        let read = |value: i32, what: &str| match M::try_from(value) {
            Ok(M::NullValue) => Ok(Interpretation::Null),
            Ok(M::DefaultValue) => Ok(Interpretation::Default),
            // "Requests with this value will be rejected" (storage.proto).
            _ => Err(BqError::new(
                Code::InvalidArgument,
                format!(
                    "Invalid missing value interpretation {value} for {what}. Entity: {entity}"
                ),
            )),
        };
        if default != M::Unspecified as i32 {
            self.default_interpretation = read(default, "default_missing_value_interpretation")?;
        }
        let mut missing = MissingValues {
            default: self.default_interpretation,
            columns: HashMap::with_capacity(columns.len()),
        };
        for (column, &value) in columns {
            let interpretation = read(value, &format!("column {column}"))?;
            missing
                .columns
                .insert(column.to_lowercase(), interpretation);
        }
        Ok(missing)
    }

    fn destination(&mut self, requested: &str) -> Result<(String, Arc<WriteStream>), Status> {
        if requested.is_empty() {
            return self.destination.clone().ok_or_else(|| {
                BqError::new(
                    Code::InvalidArgument,
                    "The first request on a connection must set write_stream. Entity: ",
                )
                .to_status()
            });
        }
        if let Some((name, stream)) = &self.destination
            && name == requested
        {
            return Ok((name.clone(), stream.clone()));
        }
        let stream = self.store.open_stream(requested).map_err(store_status)?;
        self.destination = Some((requested.to_string(), stream.clone()));
        Ok((requested.to_string(), stream))
    }

    /// The codec for this request: the newly sent writer schema, else the last one sent for this
    /// destination, recompiled when the table schema changed since it was compiled.
    fn codec(
        &mut self,
        entity: &str,
        stream: &WriteStream,
        writer_schema: Option<bq::ProtoSchema>,
    ) -> Result<Arc<RowCodec>, Status> {
        let key = stream.name.clone();
        let version = stream.table_schema_version();
        let descriptor = writer_schema.and_then(|s| s.proto_descriptor);
        if let Some(existing) = self.schemas.get(&key) {
            let same = descriptor
                .as_ref()
                .is_none_or(|d| *d == existing.descriptor);
            if same && existing.compiled_for == version {
                return Ok(existing.codec.clone());
            }
        }
        let descriptor = match descriptor {
            Some(d) => d,
            None => match self.schemas.get(&key) {
                Some(existing) => existing.descriptor.clone(),
                None => {
                    return Err(BqError::new(
                        Code::InvalidArgument,
                        format!(
                            "The first request for a stream on a connection must carry writer_schema. Entity: {entity}"
                        ),
                    )
                    .to_status());
                }
            },
        };
        let table = stream.table_schema();
        let codec = RowCodec::compile(&descriptor, &table).map_err(|e| {
            let mut err = BqError::new(
                Code::InvalidArgument,
                format!("{} Entity: {entity}", e.message()),
            );
            if let Some(code) = e.storage_code() {
                err = err.with_storage(code, entity);
            }
            err.to_status()
        })?;
        cdc_rows::check_writer_schema(&codec, stream, entity)?;
        let codec = Arc::new(codec);
        self.schemas.insert(
            key,
            WriterSchema {
                descriptor,
                codec: codec.clone(),
                compiled_for: version,
            },
        );
        Ok(codec)
    }
}

/// What one AppendRows request gets: a response on the call, or the call's end.
enum Answer {
    Reply(bq::AppendRowsResponse),
    End(Status),
}

/// The injected faults that apply to one AppendRows request.
#[derive(Default)]
struct AppendFaults {
    /// Answer the request with this error, in the stream.
    in_stream: Option<BqError>,
    /// End the call with this status instead of answering.
    end: Option<Status>,
    /// Apply the request, then drop the call.
    drop_after: bool,
}

impl WriteService {
    /// The answer to one request of an AppendRows call: an injected fault, a quota refusal,
    /// or what the session makes of it.
    async fn answer(&self, session: &mut AppendSession, req: bq::AppendRowsRequest) -> Answer {
        let target = session.target_of(&req);
        let faults = self.append_faults(&target).await;
        if let Some(status) = faults.end {
            return Answer::End(status);
        }
        if let Some(e) = faults.in_stream {
            return Answer::Reply(error_response(target, e.to_rpc_status()));
        }
        let size = req.encoded_len();
        if size <= self.settings.max_request_bytes
            && let Err(e) = self.quotas.append(size, &target, Instant::now())
        {
            return Answer::Reply(error_response(target, e.to_rpc_status()));
        }
        let outcome = session.handle(req);
        if faults.drop_after {
            return Answer::End(dropped());
        }
        match outcome {
            AppendOutcome::Reply(response) => Answer::Reply(*response),
            AppendOutcome::End(status) => Answer::End(status),
        }
    }

    /// Runs the injected delays for a request to `target` and collects the faults that apply.
    async fn append_faults(&self, target: &str) -> AppendFaults {
        let mut faults = AppendFaults::default();
        for action in self.faults.check(Rpc::AppendRows, target) {
            match action {
                FaultAction::Delay { ms } => tokio::time::sleep(Duration::from_millis(ms)).await,
                FaultAction::Fail {
                    code,
                    storage_code,
                    message,
                    in_stream,
                } => {
                    let message =
                        message.unwrap_or_else(|| format!("injected fault. Entity: {target}"));
                    let mut e = BqError::new(code.0, message);
                    if let Some(c) = storage_code {
                        e = e.with_storage(c.0, target);
                    }
                    if in_stream {
                        faults.in_stream = Some(e);
                    } else {
                        faults.end = Some(e.to_status());
                    }
                    break;
                }
                FaultAction::Drop { after: false } => {
                    faults.end = Some(dropped());
                    break;
                }
                FaultAction::Drop { after: true } => faults.drop_after = true,
                FaultAction::Deny { .. } => {}
            }
        }
        faults
    }
}

/// An in-stream error answer: the request appended nothing, the call stays open.
fn error_response(target: String, status: rpc::Status) -> bq::AppendRowsResponse {
    bq::AppendRowsResponse {
        write_stream: target,
        response: Some(bq::append_rows_response::Response::Error(status)),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl BigQueryWrite for WriteService {
    async fn create_write_stream(
        &self,
        request: Request<bq::CreateWriteStreamRequest>,
    ) -> Result<Response<bq::WriteStream>, Status> {
        let req = request.into_inner();
        let info = self
            .faulted(Rpc::CreateWriteStream, &req.parent, || {
                self.quotas
                    .create_write_stream(&req.parent, Instant::now())
                    .map_err(|e| e.to_status())?;
                use bq::write_stream::Type;
                let requested = req.write_stream.as_ref().map(|w| w.r#type).unwrap_or(0);
                let kind = match Type::try_from(requested) {
                    Ok(Type::Committed) => StreamKind::Committed,
                    Ok(Type::Pending) => StreamKind::Pending,
                    Ok(Type::Buffered) => StreamKind::Buffered,
                    _ => {
                        return Err(store_status(StoreError::InvalidStreamType {
                            kind: requested,
                        }));
                    }
                };
                self.store
                    .create_write_stream(&req.parent, kind)
                    .map_err(store_status)
            })
            .await?;
        Ok(Response::new(write_stream_message(&info, true)))
    }

    type AppendRowsStream = ReceiverStream<Result<bq::AppendRowsResponse, Status>>;

    async fn append_rows(
        &self,
        request: Request<tonic::Streaming<bq::AppendRowsRequest>>,
    ) -> Result<Response<Self::AppendRowsStream>, Status> {
        // `x-goog-request-params` is not needed for routing (that is by `write_stream`); it
        // names the stream in a refusal before the first request is read.
        let routed = request
            .metadata()
            .get_all("x-goog-request-params")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| v.strip_prefix("write_stream="))
            .unwrap_or_default()
            .to_string();
        let permit = self
            .quotas
            .open_connection(&routed)
            .map_err(|e| e.to_status())?;
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(64);
        let service = self.clone();
        tokio::spawn(async move {
            // The connection counts against the quota until this task ends.
            let _permit = permit;
            let mut session =
                AppendSession::new(service.store.clone(), service.settings.max_request_bytes)
                    .keep_columns(service.settings.keep_columns.clone());
            let idle = service.settings.idle_timeout;
            loop {
                let next = match tokio::time::timeout(idle, inbound.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let status = Status::aborted(format!(
                            "Closing the stream because it has been inactive for {} seconds. Entity: {}",
                            idle.as_secs(),
                            session.entity()
                        ));
                        let _ = tx.send(Err(status)).await;
                        break;
                    }
                };
                let req = match next {
                    Some(Ok(req)) => req,
                    // Half-close by the client: every answer is already sent.
                    None => break,
                    // A request tonic could not decode (e.g. above the decoding limit): the call
                    // ends with tonic's status rather than silently with OK.
                    Some(Err(status)) => {
                        let _ = tx.send(Err(status)).await;
                        break;
                    }
                };
                match service.answer(&mut session, req).await {
                    Answer::Reply(response) => {
                        if tx.send(Ok(response)).await.is_err() {
                            break;
                        }
                    }
                    Answer::End(status) => {
                        let _ = tx.send(Err(status)).await;
                        break;
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_write_stream(
        &self,
        request: Request<bq::GetWriteStreamRequest>,
    ) -> Result<Response<bq::WriteStream>, Status> {
        let req = request.into_inner();
        let info = self
            .faulted(Rpc::GetWriteStream, &req.name, || {
                self.store.get_write_stream(&req.name).map_err(store_status)
            })
            .await?;
        let full = req.view == bq::WriteStreamView::Full as i32;
        Ok(Response::new(write_stream_message(&info, full)))
    }

    async fn finalize_write_stream(
        &self,
        request: Request<bq::FinalizeWriteStreamRequest>,
    ) -> Result<Response<bq::FinalizeWriteStreamResponse>, Status> {
        let req = request.into_inner();
        let row_count = self
            .faulted(Rpc::FinalizeWriteStream, &req.name, || {
                self.store
                    .finalize_write_stream(&req.name)
                    .map_err(store_status)
            })
            .await?;
        Ok(Response::new(bq::FinalizeWriteStreamResponse { row_count }))
    }

    async fn batch_commit_write_streams(
        &self,
        request: Request<bq::BatchCommitWriteStreamsRequest>,
    ) -> Result<Response<bq::BatchCommitWriteStreamsResponse>, Status> {
        let req = request.into_inner();
        let outcome = self
            .faulted(Rpc::BatchCommitWriteStreams, &req.parent, || {
                self.store
                    .batch_commit(&req.parent, &req.write_streams)
                    .map_err(store_status)
            })
            .await?;
        let response = match outcome {
            CommitOutcome::Committed { commit_time_us } => bq::BatchCommitWriteStreamsResponse {
                commit_time: Some(timestamp(commit_time_us)),
                stream_errors: Vec::new(),
            },
            CommitOutcome::Failed(failures) => bq::BatchCommitWriteStreamsResponse {
                commit_time: None,
                stream_errors: failures
                    .into_iter()
                    .map(|f| bq::StorageError {
                        code: f.code,
                        entity: f.entity,
                        error_message: f.message,
                    })
                    .collect(),
            },
        };
        Ok(Response::new(response))
    }

    async fn flush_rows(
        &self,
        request: Request<bq::FlushRowsRequest>,
    ) -> Result<Response<bq::FlushRowsResponse>, Status> {
        let req = request.into_inner();
        let offset = self
            .faulted(Rpc::FlushRows, &req.write_stream, || {
                self.quotas.flush_rows();
                self.store
                    .flush_rows(&req.write_stream, req.offset)
                    .map_err(store_status)
            })
            .await?;
        Ok(Response::new(bq::FlushRowsResponse { offset }))
    }
}
