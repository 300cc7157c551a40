//! One listener for everything: gRPC BigQueryWrite (HTTP/2 without TLS) and the HTTP routes
//! (BigQuery REST, admin/fault control) on the same port. axum's server detects
//! HTTP/1.1 or HTTP/2 per connection, so both kinds of client share `--listen`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use bytes::Bytes;
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::faults::{FaultRule, Faults};
use crate::grpc::{BigQueryWriteServer, WriteService, WriteSettings};
use crate::persist::{self, PersistError};
use crate::quota::Quotas;
use crate::status::{BqError, DROP_MARKER};
use crate::store::{Store, StoreConfig};

/// Everything `emulator` can be told on its command line.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    pub listen: SocketAddr,
    pub data_dir: Option<PathBuf>,
    pub write: WriteSettings,
    pub store: StoreConfig,
    pub faults_file: Option<PathBuf>,
    /// Every BigQuery call must carry `Authorization: Bearer` this token (`--require-token`).
    pub require_token: Option<String>,
}

impl EmulatorConfig {
    /// In memory on a free loopback port, default limits.
    pub fn local() -> EmulatorConfig {
        EmulatorConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: None,
            write: WriteSettings::default(),
            store: StoreConfig::default(),
            faults_file: None,
            require_token: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Persist(#[from] PersistError),
    #[error(transparent)]
    Faults(#[from] crate::faults::FaultError),
}

/// A running emulator. Dropping it stops accepting connections.
#[derive(Debug)]
pub struct Emulator {
    pub addr: SocketAddr,
    pub store: Arc<Store>,
    pub faults: Arc<Faults>,
    /// Quota mode's limits and the usage counters (also `GET /emulator/v1/quota`).
    pub quotas: Arc<Quotas>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Emulator {
    /// Opens the store (replaying `--data-dir`), binds and starts serving.
    pub async fn start(config: EmulatorConfig) -> Result<Emulator, ServerError> {
        let store = match &config.data_dir {
            Some(dir) => persist::open_store(config.store.clone(), dir)?,
            None => Store::new(config.store.clone()),
        };
        let faults = Arc::new(Faults::new());
        if let Some(path) = &config.faults_file {
            faults.load_file(path)?;
        }
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?;
        let quotas = Arc::new(Quotas::new(config.write.quota.clone()));
        let app = router(
            store.clone(),
            faults.clone(),
            quotas.clone(),
            config.write.clone(),
        );
        let app = match &config.require_token {
            Some(token) => app.layer(axum::middleware::from_fn_with_state(
                crate::bearer::RequiredToken(token.as_str().into()),
                crate::bearer::check,
            )),
            None => app,
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let max_streams = config
            .write
            .quota
            .as_ref()
            .map(|q| q.streams_per_connection);
        let task = tokio::spawn(serve(listener, app, max_streams, stopped));
        Ok(Emulator {
            addr,
            store,
            faults,
            quotas,
            stop: Some(stop),
            task,
        })
    }

    /// Stops accepting connections and drops the server task (open calls are cut).
    pub fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

/// HTTP/2 receive windows advertised to clients. With hyper's 1 MiB defaults a connection that
/// carries many AppendRows streams (the sink's one channel, a stream per partition) stalls on its
/// connection window every megabyte, and both sides spend their time in wake-ups and context
/// switches (in the profile of `bench/run.sh`, scheduling and epoll fell from ~7 % to ~2 % of the
/// emulator's CPU). The frame size stays at 16 KiB: with 1 MiB frames h2's read buffer becomes a
/// large allocation that the allocator hands back and the kernel faults in again on every read
/// (12 % of the emulator's CPU in that profile).
const H2_STREAM_WINDOW: u32 = 16 << 20;
const H2_CONNECTION_WINDOW: u32 = 64 << 20;

/// Accepts connections until `stopped` fires (or this task is dropped), then asks every open
/// connection to shut down gracefully, as `axum::serve` with graceful shutdown does.
/// `max_streams` overrides hyper's limit of concurrent calls per connection (quota mode).
async fn serve(
    listener: TcpListener,
    app: axum::Router,
    max_streams: Option<u32>,
    mut stopped: oneshot::Receiver<()>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;

    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http2()
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW);
    if let Some(n) = max_streams {
        builder.http2().max_concurrent_streams(n);
    }
    let builder = Arc::new(builder);
    // Dropped with this task: every connection task then starts its graceful shutdown.
    let (_closing, closing) = tokio::sync::watch::channel(());
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(error) => {
                    use std::io::ErrorKind as K;
                    if !matches!(
                        error.kind(),
                        K::ConnectionRefused | K::ConnectionAborted | K::ConnectionReset
                    ) {
                        // Out of file descriptors and the like: wait instead of spinning.
                        tracing::warn!(%error, "emulator cannot accept a connection");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                    continue;
                }
            },
            _ = &mut stopped => break,
        };
        // Small requests (flush, finalize) must not wait for Nagle.
        let _ = tcp.set_nodelay(true);
        let builder = builder.clone();
        let service = TowerToHyperService::new(app.clone());
        let mut closing = closing.clone();
        tokio::spawn(async move {
            let conn = builder.serve_connection(TokioIo::new(tcp), service);
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(error) = result {
                        tracing::trace!(%error, "emulator connection ended");
                    }
                    return;
                }
                _ = closing.changed() => conn.as_mut().graceful_shutdown(),
            }
            if let Err(error) = conn.await {
                tracing::trace!(%error, "emulator connection ended");
            }
        });
    }
}

/// The whole HTTP surface: gRPC, the BigQuery REST API and the admin routes.
pub fn router(
    store: Arc<Store>,
    faults: Arc<Faults>,
    quotas: Arc<Quotas>,
    write: WriteSettings,
) -> axum::Router {
    use tonic::server::NamedService;
    // Routed by hand rather than through `tonic::service::Routes`, whose catch-all fallback
    // cannot be merged with the REST router's own.
    let grpc = axum::Router::new().route_service(
        &format!("/{}/{{*method}}", BigQueryWriteServer::<WriteService>::NAME),
        WriteService::new(store.clone(), faults.clone(), quotas.clone(), write).into_server(),
    );
    grpc.merge(crate::rest::router_with_faults(
        store.clone(),
        faults.clone(),
    ))
    .merge(admin_router(store, faults, quotas))
    .layer(axum::middleware::map_response(reset_marked))
}

#[derive(Clone)]
struct AdminState {
    store: Arc<Store>,
    faults: Arc<Faults>,
    quotas: Arc<Quotas>,
}

/// The fault-injection control (see `faults.rs` for the rules).
pub fn admin_router(store: Arc<Store>, faults: Arc<Faults>, quotas: Arc<Quotas>) -> axum::Router {
    axum::Router::new()
        .route("/emulator/v1/health", get(|| async { "ok" }))
        .route(
            "/emulator/v1/faults",
            get(list_faults).post(add_faults).delete(clear_faults),
        )
        .route("/emulator/v1/faults/{id}", delete(remove_fault))
        .route("/emulator/v1/quota", get(quota_usage))
        .route("/emulator/v1/streams/finalize", post(finalize_stream))
        .route("/emulator/v1/streams/expire", post(expire_stream))
        .with_state(AdminState {
            store,
            faults,
            quotas,
        })
}

fn json_error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

async fn quota_usage(State(s): State<AdminState>) -> Response {
    Json(s.quotas.usage()).into_response()
}

async fn list_faults(State(s): State<AdminState>) -> Response {
    Json(s.faults.list()).into_response()
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    Many(Vec<FaultRule>),
    One(Box<FaultRule>),
}

async fn add_faults(State(s): State<AdminState>, body: Bytes) -> Response {
    let rules = match serde_json::from_slice::<OneOrMany>(&body) {
        Ok(OneOrMany::Many(r)) => r,
        Ok(OneOrMany::One(r)) => vec![*r],
        Err(e) => {
            // Re-parse as one rule for a precise message (untagged enums hide the cause).
            let detail = serde_json::from_slice::<FaultRule>(&body)
                .err()
                .map_or(e.to_string(), |e| e.to_string());
            return json_error(
                StatusCode::BAD_REQUEST,
                format!("invalid fault rule: {detail}"),
            );
        }
    };
    match s.faults.install(rules) {
        Ok(ids) => Json(serde_json::json!({ "ids": ids })).into_response(),
        Err(e) => json_error(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

async fn clear_faults(State(s): State<AdminState>) -> Response {
    s.faults.clear();
    StatusCode::NO_CONTENT.into_response()
}

async fn remove_fault(State(s): State<AdminState>, Path(id): Path<u64>) -> Response {
    if s.faults.remove(id) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        json_error(StatusCode::NOT_FOUND, format!("no fault rule {id}"))
    }
}

#[derive(Deserialize)]
struct StreamRef {
    stream: String,
}

fn store_error_response(e: crate::store::StoreError) -> Response {
    let e = BqError::from(&e);
    let status = match e.code {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    };
    json_error(status, e.message)
}

async fn finalize_stream(State(s): State<AdminState>, Json(r): Json<StreamRef>) -> Response {
    match s.store.finalize_now(&r.stream) {
        Ok(row_count) => Json(serde_json::json!({ "row_count": row_count })).into_response(),
        Err(e) => store_error_response(e),
    }
}

async fn expire_stream(State(s): State<AdminState>, Json(r): Json<StreamRef>) -> Response {
    match s.store.expire_now(&r.stream) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => store_error_response(e),
    }
}

/// Fault "drop": a response or trailer marked with [`DROP_MARKER`] becomes an HTTP/2 stream
/// reset, so the client sees a broken call with no gRPC status, as after a network failure.
async fn reset_marked(response: Response) -> Response {
    if response.headers().contains_key(DROP_MARKER) {
        let mut reset = Response::new(Body::new(ResetBody {
            inner: Body::empty(),
            reset_now: true,
        }));
        reset.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/grpc"),
        );
        return reset;
    }
    let is_grpc = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    if !is_grpc {
        return response;
    }
    response.map(|inner| {
        Body::new(ResetBody {
            inner,
            reset_now: false,
        })
    })
}

struct ResetBody {
    inner: Body,
    reset_now: bool,
}

impl http_body::Body for ResetBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        if self.reset_now {
            return Poll::Ready(Some(Err(axum::Error::new("fault injection: drop"))));
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame)))
                if frame
                    .trailers_ref()
                    .is_some_and(|t| t.contains_key(DROP_MARKER)) =>
            {
                Poll::Ready(Some(Err(axum::Error::new("fault injection: drop"))))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.reset_now && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
