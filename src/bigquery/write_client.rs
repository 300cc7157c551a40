//! The daemon's Storage Write API client: unary calls (CreateWriteStream, GetWriteStream,
//! FlushRows, FinalizeWriteStream, BatchCommitWriteStreams) and long-lived AppendRows
//! connections. It only speaks the protocol; what to do about an error is decided by the writer
//! and the checkpoint coordinator from [`WriteError::class`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::{
    AppendRowsRequest, AppendRowsResponse, BatchCommitWriteStreamsRequest,
    BatchCommitWriteStreamsResponse, CreateWriteStreamRequest, FinalizeWriteStreamRequest,
    FlushRowsRequest, GetWriteStreamRequest, TableSchema as ProtoTableSchema, WriteStream,
    WriteStreamView, append_rows_response, big_query_write_client::BigQueryWriteClient,
    write_stream,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use kbq_core::offsets::{RowCount, RowOffset};

use super::append_codec;
use super::auth::Auth;
use super::error::WriteError;
use crate::config::defaults;

/// Largest response we accept (responses are small; `updated_schema` is the biggest part).
const MAX_RESPONSE_BYTES: usize = 16 << 20;
/// Requests up to BigQuery's current 20 MB limit can be sent.
const MAX_REQUEST_BYTES: usize = 20 << 20;
/// AppendRows calls per HTTP/2 connection. Google's front end allows 100 concurrent streams on a
/// connection and holds back any call beyond them until another ends; an AppendRows call lasts
/// as long as its partition writes, so a replica with more partitions than that on one
/// connection left the rest waiting for ever (docs/operations.md, "Capacity planning"). 64 leaves
/// the first connection room for the short unary calls (FlushRows, CreateWriteStream) it carries.
const APPEND_CALLS_PER_CONNECTION: usize = 64;

/// The type of an explicitly created write stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Committed,
    Pending,
    Buffered,
}

impl StreamKind {
    fn proto(self) -> write_stream::Type {
        match self {
            StreamKind::Committed => write_stream::Type::Committed,
            StreamKind::Pending => write_stream::Type::Pending,
            StreamKind::Buffered => write_stream::Type::Buffered,
        }
    }
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct WriteClientOptions {
    /// `https://…` for Google (TLS with the webpki roots), `http://127.0.0.1:PORT` for the emulator.
    pub endpoint: String,
    /// Deadline of each unary call.
    pub rpc_timeout: Duration,
    pub connect_timeout: Duration,
}

/// A cheap-to-clone handle on the HTTP/2 connections to the service: the unary calls share the
/// first; AppendRows calls spread over as many as it takes to keep each under
/// [`APPEND_CALLS_PER_CONNECTION`].
#[derive(Clone, Debug)]
pub struct WriteClient {
    grpc: BigQueryWriteClient<Channel>,
    appends: Arc<AppendPool>,
    auth: Auth,
    rpc_timeout: Duration,
    /// The largest AppendRows request the client sends: [`MAX_REQUEST_BYTES`] but for the
    /// `conformance` probe, which sends one above BigQuery's limit to see it refused.
    max_request_bytes: usize,
    /// Replaces the gRPC channel for every call (the deterministic simulation); `None` in the
    /// daemon.
    transport: Option<Arc<dyn WriteTransport>>,
}

/// A boxed future of the transport seam.
pub type TransportFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, WriteError>> + Send + 'a>>;

/// The calls of the Storage Write API the sink makes, as a seam under [`WriteClient`]: the daemon
/// speaks gRPC, the deterministic simulation answers in process (see `docs/simulation.md`).
/// It stands where the wire does, so its offsets are the wire's raw integers; [`WriteClient`]
/// types them for both paths at once.
pub trait WriteTransport: Send + Sync + std::fmt::Debug {
    fn create_write_stream(
        &self,
        table: String,
        kind: StreamKind,
    ) -> TransportFuture<'_, WriteStream>;
    fn flush_rows(&self, stream: String, offset: i64) -> TransportFuture<'_, i64>;
    fn finalize_write_stream(&self, stream: String) -> TransportFuture<'_, i64>;
    /// Opens an AppendRows call with `first` already queued.
    fn open_append(
        &self,
        first: AppendRowsRequest,
    ) -> TransportFuture<'_, Box<dyn AppendTransport>>;
}

/// One AppendRows call of a [`WriteTransport`]: requests in, one reply per request, in order.
pub trait AppendTransport: Send + Sync {
    fn send(&self, request: AppendRowsRequest) -> TransportFuture<'_, ()>;
    fn next_reply(&mut self) -> TransportFuture<'_, AppendReply>;
}

impl WriteClient {
    /// Builds the channel lazily: the first call connects, and a broken connection is
    /// re-established by the channel on the next call.
    pub fn new(options: &WriteClientOptions, auth: Auth) -> Result<WriteClient, WriteError> {
        let invalid = |e: &dyn std::fmt::Display| {
            WriteError::from_status(&tonic::Status::invalid_argument(format!(
                "invalid bigquery endpoint {}: {e}",
                options.endpoint
            )))
        };
        let mut endpoint = Endpoint::from_shared(options.endpoint.clone())
            .map_err(|e| invalid(&e))?
            .connect_timeout(options.connect_timeout)
            .http2_keep_alive_interval(defaults::GRPC_KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(defaults::GRPC_KEEP_ALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        if options.endpoint.starts_with("https://") {
            endpoint = endpoint
                .tls_config(ClientTlsConfig::new().with_webpki_roots())
                .map_err(|e| invalid(&e))?;
        }
        let channel = endpoint.connect_lazy();
        let grpc = grpc_client(channel.clone());
        Ok(WriteClient {
            appends: Arc::new(AppendPool::new(endpoint, channel)),
            grpc,
            auth,
            rpc_timeout: options.rpc_timeout,
            max_request_bytes: MAX_REQUEST_BYTES,
            transport: None,
        })
    }

    /// A client whose every call goes to `transport` instead of a gRPC channel.
    pub fn with_transport(transport: Arc<dyn WriteTransport>) -> WriteClient {
        // The channel is never used: a lazy one connects only on a first call.
        let endpoint = Endpoint::from_static("http://127.0.0.1:1");
        let channel = endpoint.connect_lazy();
        let grpc = grpc_client(channel.clone());
        WriteClient {
            appends: Arc::new(AppendPool::new(endpoint, channel)),
            grpc,
            auth: Auth::None,
            // Unused: every call goes to the transport before a gRPC request is built.
            rpc_timeout: defaults::WRITER_RESPONSE_TIMEOUT,
            max_request_bytes: MAX_REQUEST_BYTES,
            transport: Some(transport),
        }
    }

    /// The same client sending AppendRows requests of up to `bytes`.
    pub fn with_request_limit(mut self, bytes: usize) -> WriteClient {
        self.max_request_bytes = bytes;
        self
    }

    /// Open AppendRows calls on each HTTP/2 connection of the client.
    pub fn append_calls_per_connection(&self) -> Vec<usize> {
        self.appends.calls()
    }

    /// Auth headers plus the routing header `x-goog-request-params: <key>=<value>` that Google's
    /// front end uses to find the region of the resource.
    async fn metadata(&self, routing_key: &str, resource: &str) -> Result<MetadataMap, WriteError> {
        // A failed token fetch (a metadata-server hiccup) is the client's own transient
        // failure, not the service refusing us: retried like one, never a
        // permanent stop (docs/architecture.md#failure-policies).
        let headers = self.auth.headers().await.map_err(|e| {
            WriteError::from_status(&tonic::Status::unavailable(format!(
                "cannot fetch an access token: {e}"
            )))
        })?;
        let mut metadata = MetadataMap::from_headers(headers);
        if let Ok(value) = MetadataValue::try_from(format!("{routing_key}={resource}")) {
            metadata.insert("x-goog-request-params", value);
        }
        Ok(metadata)
    }

    async fn unary<T>(
        &self,
        message: T,
        routing_key: &str,
        resource: &str,
    ) -> Result<tonic::Request<T>, WriteError> {
        let mut request = tonic::Request::new(message);
        *request.metadata_mut() = self.metadata(routing_key, resource).await?;
        request.set_timeout(self.rpc_timeout);
        Ok(request)
    }

    /// `table` is `projects/{p}/datasets/{d}/tables/{t}`.
    pub async fn create_write_stream(
        &self,
        table: &str,
        kind: StreamKind,
    ) -> Result<WriteStream, WriteError> {
        if let Some(t) = &self.transport {
            return t.create_write_stream(table.to_string(), kind).await;
        }
        let message = CreateWriteStreamRequest {
            parent: table.to_string(),
            write_stream: Some(WriteStream {
                r#type: kind.proto() as i32,
                ..Default::default()
            }),
        };
        let request = self.unary(message, "parent", table).await?;
        Ok(self
            .grpc
            .clone()
            .create_write_stream(request)
            .await?
            .into_inner())
    }

    pub async fn get_write_stream(
        &self,
        stream: &str,
        full: bool,
    ) -> Result<WriteStream, WriteError> {
        if self.transport.is_some() {
            return Err(not_in_transport("GetWriteStream"));
        }
        let view = if full {
            WriteStreamView::Full
        } else {
            WriteStreamView::Basic
        };
        let message = GetWriteStreamRequest {
            name: stream.to_string(),
            view: view as i32,
        };
        let request = self.unary(message, "name", stream).await?;
        Ok(self
            .grpc
            .clone()
            .get_write_stream(request)
            .await?
            .into_inner())
    }

    /// Makes the rows of a BUFFERED stream up to and including `through` visible; returns the
    /// flushed offset. The raw offsets of the wire (or of the transport) are typed here, once.
    pub async fn flush_rows(
        &self,
        stream: &str,
        through: RowOffset,
    ) -> Result<RowOffset, WriteError> {
        if let Some(t) = &self.transport {
            return t
                .flush_rows(stream.to_string(), through.0)
                .await
                .map(RowOffset);
        }
        let message = FlushRowsRequest {
            write_stream: stream.to_string(),
            offset: Some(through.0),
        };
        let request = self.unary(message, "write_stream", stream).await?;
        let flushed = self.grpc.clone().flush_rows(request).await?.into_inner();
        Ok(RowOffset(flushed.offset))
    }

    /// Returns the stream's row count.
    pub async fn finalize_write_stream(&self, stream: &str) -> Result<RowCount, WriteError> {
        if let Some(t) = &self.transport {
            return t
                .finalize_write_stream(stream.to_string())
                .await
                .map(RowCount);
        }
        let message = FinalizeWriteStreamRequest {
            name: stream.to_string(),
        };
        let request = self.unary(message, "name", stream).await?;
        let finalized = (self.grpc.clone().finalize_write_stream(request).await?).into_inner();
        Ok(RowCount(finalized.row_count))
    }

    pub async fn batch_commit_write_streams(
        &self,
        table: &str,
        streams: Vec<String>,
    ) -> Result<BatchCommitWriteStreamsResponse, WriteError> {
        if self.transport.is_some() {
            return Err(not_in_transport("BatchCommitWriteStreams"));
        }
        let message = BatchCommitWriteStreamsRequest {
            parent: table.to_string(),
            write_streams: streams,
        };
        let request = self.unary(message, "parent", table).await?;
        Ok(self
            .grpc
            .clone()
            .batch_commit_write_streams(request)
            .await?
            .into_inner())
    }

    /// Opens an AppendRows call with `first` (which must name the stream and carry the writer
    /// schema). The first request is queued *before* the call is awaited: the server sends no
    /// response headers until it has seen a message, so awaiting first would deadlock.
    /// `window` bounds requests queued but not yet taken by the transport.
    pub async fn open_append(
        &self,
        first: AppendRowsRequest,
        window: usize,
    ) -> Result<AppendConnection, WriteError> {
        let stream = first.write_stream.clone();
        if let Some(t) = &self.transport {
            let call = t.open_append(first).await?;
            return Ok(AppendConnection {
                call: Call::Custom(call),
                stream,
            });
        }
        let (tx, rx) = mpsc::channel(window.max(1));
        tx.try_send(first)
            .map_err(|_| WriteError::disconnected("cannot queue the first append request"))?;
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        *request.metadata_mut() = self.metadata("write_stream", &stream).await?;
        let (channel, slot) = self.appends.checkout();
        let responses =
            append_codec::append_rows(channel, request, self.max_request_bytes, MAX_RESPONSE_BYTES)
                .await?
                .into_inner();
        Ok(AppendConnection {
            call: Call::Grpc {
                requests: tx,
                responses,
                _slot: slot,
            },
            stream,
        })
    }
}

fn grpc_client(channel: Channel) -> BigQueryWriteClient<Channel> {
    BigQueryWriteClient::new(channel)
        .max_decoding_message_size(MAX_RESPONSE_BYTES)
        .max_encoding_message_size(MAX_REQUEST_BYTES)
}

/// The HTTP/2 connections that carry AppendRows calls, each with its count of open calls. Only
/// grows: an idle connection costs a keep-alive ping.
#[derive(Debug)]
struct AppendPool {
    endpoint: Endpoint,
    connections: std::sync::Mutex<Vec<PooledConnection>>,
}

#[derive(Debug, Clone)]
struct PooledConnection {
    channel: Channel,
    calls: Arc<AtomicUsize>,
}

/// One open call's place on its connection, given back when the call is dropped.
#[derive(Debug)]
struct CallSlot(Arc<AtomicUsize>);

impl Drop for CallSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl AppendPool {
    /// `first` is the connection of the unary calls; it takes appends too.
    fn new(endpoint: Endpoint, first: Channel) -> AppendPool {
        AppendPool {
            endpoint,
            connections: std::sync::Mutex::new(vec![PooledConnection {
                channel: first,
                calls: Arc::new(AtomicUsize::new(0)),
            }]),
        }
    }

    /// The first connection with room for one more call, a new one when none has.
    fn checkout(&self) -> (Channel, CallSlot) {
        let mut connections = self.connections.lock().expect("append pool lock");
        let index = match connections
            .iter()
            .position(|c| c.calls.load(Ordering::SeqCst) < APPEND_CALLS_PER_CONNECTION)
        {
            Some(i) => i,
            None => {
                connections.push(PooledConnection {
                    channel: self.endpoint.connect_lazy(),
                    calls: Arc::new(AtomicUsize::new(0)),
                });
                connections.len() - 1
            }
        };
        let c = &connections[index];
        c.calls.fetch_add(1, Ordering::SeqCst);
        (c.channel.clone(), CallSlot(c.calls.clone()))
    }

    /// Open calls per connection.
    fn calls(&self) -> Vec<usize> {
        let connections = self.connections.lock().expect("append pool lock");
        connections
            .iter()
            .map(|c| c.calls.load(Ordering::SeqCst))
            .collect()
    }
}

/// A call the [`WriteTransport`] seam does not carry (the sink's write path never makes it).
fn not_in_transport(call: &str) -> WriteError {
    WriteError::from_status(&tonic::Status::unimplemented(format!(
        "{call} is not part of the write transport seam"
    )))
}

/// One AppendRows bidi call. Responses come one per request, in request order.
pub struct AppendConnection {
    call: Call,
    stream: String,
}

// One per AppendRows connection: boxing the gRPC variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Call {
    Grpc {
        requests: mpsc::Sender<AppendRowsRequest>,
        responses: tonic::Streaming<AppendRowsResponse>,
        _slot: CallSlot,
    },
    Custom(Box<dyn AppendTransport>),
}

/// The answer to one append request.
#[derive(Debug)]
pub enum AppendReply {
    /// Appended. `offset` is the stream offset of the request's first row (absent on `_default`).
    Appended {
        offset: Option<RowOffset>,
        updated_schema: Option<ProtoTableSchema>,
    },
    /// The request failed and appended nothing; the connection stays usable.
    Failed(WriteError),
}

impl AppendConnection {
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// Queues a request. An error means the call is gone: reconnect and resend.
    pub async fn send(&self, request: AppendRowsRequest) -> Result<(), WriteError> {
        match &self.call {
            Call::Grpc { requests, .. } => requests
                .send(request)
                .await
                .map_err(|_| WriteError::disconnected("append connection closed")),
            Call::Custom(call) => call.send(request).await,
        }
    }

    /// The next response. `Err` means the whole call ended (with the server's status, or a
    /// broken transport): every unanswered request was lost and must be resent on a new call.
    pub async fn next_reply(&mut self) -> Result<AppendReply, WriteError> {
        let responses = match &mut self.call {
            Call::Grpc { responses, .. } => responses,
            Call::Custom(call) => return call.next_reply().await,
        };
        match responses.message().await {
            Ok(Some(response)) => Ok(reply(response)),
            Ok(None) => Err(WriteError::disconnected(
                "append connection ended by the server",
            )),
            Err(status) => Err(WriteError::from_status(&status)),
        }
    }
}

/// The reply one AppendRows response stands for (shared with the simulation's transport).
pub fn reply(response: AppendRowsResponse) -> AppendReply {
    match response.response {
        Some(append_rows_response::Response::Error(status)) => {
            AppendReply::Failed(WriteError::from_rpc_status(&status, response.row_errors))
        }
        Some(append_rows_response::Response::AppendResult(result)) => AppendReply::Appended {
            offset: result.offset.map(RowOffset),
            updated_schema: response.updated_schema,
        },
        None => AppendReply::Failed(WriteError::disconnected("append response without a result")),
    }
}
