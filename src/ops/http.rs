//! The side HTTP server: `/metrics` (Prometheus text), `/healthz` (the process and its event loop
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
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;

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

async fn metrics_text(State(s): State<OpsState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.metrics.encode(),
    )
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

/// Serves the ops routes until `shutdown` is cancelled; returns the bound address.
pub async fn serve(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let app = router(metrics, health);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
    });
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
