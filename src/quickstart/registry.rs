//! A minimal in-process Confluent Schema Registry: `GET /schemas/ids/{id}` for a fixed set of
//! schemas, which is all the sink's registry client asks for.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct Registry {
    schemas: Arc<HashMap<u32, String>>,
    lookups: Arc<AtomicU64>,
}

/// A running registry on a loopback port.
pub struct LocalRegistry {
    pub addr: SocketAddr,
    lookups: Arc<AtomicU64>,
    stop: CancellationToken,
}

impl LocalRegistry {
    /// Serves `schemas` (id → Avro schema text) on a free loopback port.
    pub async fn start(schemas: HashMap<u32, String>) -> std::io::Result<LocalRegistry> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let lookups = Arc::new(AtomicU64::new(0));
        let app = axum::Router::new()
            .route("/schemas/ids/{id}", get(schema_by_id))
            .with_state(Registry {
                schemas: Arc::new(schemas),
                lookups: lookups.clone(),
            });
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let serve = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await });
            if let Err(error) = serve.await {
                tracing::error!(%error, "quickstart schema registry failed");
            }
        });
        Ok(LocalRegistry {
            addr,
            lookups,
            stop,
        })
    }

    /// Requests answered so far (the sink caches by id, so this stays small).
    pub fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn schema_by_id(State(r): State<Registry>, Path(id): Path<u32>) -> Response {
    r.lookups.fetch_add(1, Ordering::Relaxed);
    match r.schemas.get(&id) {
        // The registry's own answer shape; `schemaType` is omitted for Avro, as Confluent does.
        Some(schema) => Json(serde_json::json!({ "schema": schema })).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({ "error_code": 40403, "message": "Schema not found" })),
        )
            .into_response(),
    }
}
