//! The side HTTP server: `/metrics` (OpenMetrics for a client that accepts it, else the
//! Prometheus text format), `/healthz` (the process and its event loop
//! are alive) and `/readyz` (joined the group, no partition failed closed, and checkpoints
//! succeed within their bound; a joined replica without partitions is ready). The coordinator
//! decides readiness; `docs/metrics.md` documents the probes for Kubernetes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use super::metrics::{Exposition, Metrics};
use crate::config::defaults;

/// Liveness and readiness, written by the daemon's loops, read by the probes.
pub struct Health {
    started: Instant,
    /// Milliseconds after `started` of the last event-loop heartbeat.
    last_beat_ms: AtomicU64,
    /// A heartbeat older than this makes `/healthz` fail.
    stale_after: Duration,
    /// `None` = ready; `Some(reason)` = not ready, and why.
    not_ready: Mutex<Option<String>>,
    /// Why the process is dead for good (a thread panicked, see `ops::panics`): `/healthz`
    /// fails from then on, however the event loop beats.
    dead: OnceLock<String>,
}

impl Health {
    pub fn new(stale_after: Duration) -> Health {
        Health {
            started: Instant::now(),
            last_beat_ms: AtomicU64::new(0),
            stale_after,
            not_ready: Mutex::new(Some("starting".into())),
            dead: OnceLock::new(),
        }
    }

    /// Makes `/healthz` fail from now on, with `reason` (the first reason stays).
    pub fn fail(&self, reason: String) {
        let _ = self.dead.set(reason);
    }

    /// Whether the process is alive: not dead for good, and its event loop beat recently.
    pub fn liveness(&self) -> Result<(), String> {
        if let Some(reason) = self.dead.get() {
            return Err(reason.clone());
        }
        if !self.alive() {
            return Err("event loop stalled".into());
        }
        Ok(())
    }

    /// Called by the event loop on every turn (cheap: one atomic store).
    pub fn beat(&self) {
        self.last_beat_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    pub fn alive(&self) -> bool {
        let last = Duration::from_millis(self.last_beat_ms.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last) <= self.stale_after
    }

    pub fn set_ready(&self) {
        *self.not_ready() = None;
    }

    pub fn set_not_ready(&self, reason: impl Into<String>) {
        *self.not_ready() = Some(reason.into());
    }

    /// The readiness lock. A panic while it was held cannot have left the reason half
    /// written (it is set whole), so a poisoned lock is taken as is.
    fn not_ready(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.not_ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn readiness(&self) -> Result<(), String> {
        match &*self.not_ready() {
            None => Ok(()),
            Some(reason) => Err(reason.clone()),
        }
    }
}

#[derive(Clone)]
struct OpsState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(OpsState { metrics, health })
}

async fn metrics_text(State(s): State<OpsState>, headers: HeaderMap) -> impl IntoResponse {
    let format = negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    (
        [(header::CONTENT_TYPE, format.content_type())],
        s.metrics.encode(format),
    )
}

/// OpenMetrics when the `Accept` header lists it with a non-zero weight (Prometheus asks for it
/// first), else the Prometheus text format, which every scraper and `promtool` read.
fn negotiate(accept: Option<&str>) -> Exposition {
    let accepts_openmetrics = accept.unwrap_or("").split(',').any(|range| {
        let mut params = range.split(';').map(str::trim);
        let media = params.next().unwrap_or("");
        media.eq_ignore_ascii_case("application/openmetrics-text")
            && !params.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            })
    });
    if accepts_openmetrics {
        Exposition::OpenMetrics
    } else {
        Exposition::Prometheus
    }
}

async fn healthz(State(s): State<OpsState>) -> impl IntoResponse {
    match s.health.liveness() {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

async fn readyz(State(s): State<OpsState>) -> impl IntoResponse {
    match s.health.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}

/// What one client may hold of the ops port: the port is reachable by whatever can reach the
/// pod, so a slow or idle client must not keep connections (and file descriptors) without end.
#[derive(Debug, Clone, Copy)]
pub struct OpsLimits {
    /// Connections served at once; more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// A request's headers must arrive within this (a half-sent request is closed after it).
    pub header_read_timeout: Duration,
    /// A connection is asked to close after this, whatever it does (an idle keep-alive one too);
    /// a scrape takes milliseconds and Prometheus reconnects.
    pub max_connection_age: Duration,
    /// What a connection asked to close still gets to finish its response.
    pub close_grace: Duration,
}

impl Default for OpsLimits {
    fn default() -> Self {
        OpsLimits {
            max_connections: defaults::OPS_MAX_CONNECTIONS,
            header_read_timeout: defaults::OPS_HEADER_READ_TIMEOUT,
            max_connection_age: defaults::OPS_MAX_CONNECTION_AGE,
            close_grace: defaults::OPS_CLOSE_GRACE,
        }
    }
}

/// Serves the ops routes until `shutdown` is cancelled; returns the bound address.
pub async fn serve(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    serve_with(
        listen,
        router(metrics, health),
        OpsLimits::default(),
        shutdown,
    )
    .await
}

/// Serves `app` with `limits`: its own accept loop, since `axum::serve` has neither timeouts
/// nor a connection cap.
pub async fn serve_with(
    listen: SocketAddr,
    app: Router,
    limits: OpsLimits,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(accept_loop(listener, app, limits, shutdown));
    Ok(addr)
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: OpsLimits,
    shutdown: CancellationToken,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;

    // HTTP/1 only (scrapers and probes speak it): the header timeout then runs from the
    // first byte a connection is expected to send, with no protocol sniffing before it.
    let mut builder = Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let builder = Arc::new(builder);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    loop {
        // A slot first: at the cap, new connections wait in the kernel's backlog rather than
        // each taking a file descriptor here.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = shutdown.cancelled() => return,
        };
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(error) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(%error, "ops port cannot accept a connection");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => return,
        };
        let builder = builder.clone();
        let service = TowerToHyperService::new(app.clone());
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let conn = builder.serve_connection(TokioIo::new(tcp), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = tokio::time::sleep(limits.max_connection_age) => {}
                _ = shutdown.cancelled() => {}
            }
            conn.as_mut().graceful_shutdown();
            // A client that does not read its response is dropped after the grace.
            let _ = tokio::time::timeout(limits.close_grace, conn).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_only_for_a_client_that_accepts_it() {
        // What Prometheus sends by default.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prometheus)), Exposition::OpenMetrics);
        assert_eq!(negotiate(None), Exposition::Prometheus);
        assert_eq!(negotiate(Some("*/*")), Exposition::Prometheus);
        assert_eq!(
            negotiate(Some("text/plain;version=0.0.4")),
            Exposition::Prometheus
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text; q=0, text/plain")),
            Exposition::Prometheus
        );
    }

    #[tokio::test]
    async fn probes_answer_from_health_state() {
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::new(Duration::from_secs(30)));
        let token = CancellationToken::new();
        let addr = serve(
            "127.0.0.1:0".parse().unwrap(),
            metrics,
            health.clone(),
            token.clone(),
        )
        .await
        .unwrap();
        let get = |path: &str| {
            let url = format!("http://{addr}{path}");
            async move {
                let r = reqwest::get(url).await.unwrap();
                (r.status().as_u16(), r.text().await.unwrap())
            }
        };
        health.beat();
        assert_eq!(get("/healthz").await.0, 200);
        let (code, body) = get("/readyz").await;
        assert_eq!((code, body.as_str()), (503, "not ready: starting\n"));
        health.set_ready();
        assert_eq!(get("/readyz").await.0, 200);
        let (code, body) = get("/metrics").await;
        assert_eq!(code, 200);
        assert!(body.contains("kbq_open_streams"));
        token.cancel();
    }

    /// More half-sent and idle connections than the cap: each is closed after the header
    /// timeout (the ones past the cap wait in the backlog, then get their turn), and `/metrics`
    /// answers afterwards. `axum::serve` kept every one open.
    #[tokio::test]
    async fn slow_and_idle_clients_are_closed_and_metrics_still_answers() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limits = OpsLimits::default();
        let token = CancellationToken::new();
        let addr = serve(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(Metrics::new()),
            Arc::new(Health::new(Duration::from_secs(30))),
            token.clone(),
        )
        .await
        .unwrap();
        let clients = limits.max_connections + 6;
        let mut conns = Vec::new();
        for i in 0..clients {
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            if i % 2 == 0 {
                tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    .await
                    .unwrap();
            }
            conns.push(tcp);
        }
        let start = Instant::now();
        // Two rounds of the header timeout (the cap's worth, then the rest), and slack.
        let deadline = 2 * limits.header_read_timeout + Duration::from_secs(5);
        for (i, tcp) in conns.iter_mut().enumerate() {
            let left = deadline.saturating_sub(start.elapsed());
            let mut buf = [0u8; 256];
            let closed = tokio::time::timeout(left, async {
                loop {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            })
            .await;
            assert!(
                closed.is_ok(),
                "connection {i} still open after {deadline:?}"
            );
        }
        let r = reqwest::get(format!("http://{addr}/metrics"))
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        token.cancel();
    }
}
