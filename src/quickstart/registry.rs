//! A minimal in-process Confluent Schema Registry: `GET /schemas/ids/{id}` for a fixed set of
//! schemas and `GET /subjects/{subject}/versions/latest` for a fixed set of subjects, which is
//! all the sink's registry client asks for (the subjects only for a CDC route that creates its
//! table and takes its primary key from the key schema).

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
    /// Subject → the id of its only (so latest) version.
    subjects: Arc<HashMap<String, u32>>,
    lookups: Arc<AtomicU64>,
}

/// A running registry on a loopback port.
pub struct LocalRegistry {
    pub addr: SocketAddr,
    lookups: Arc<AtomicU64>,
    stop: CancellationToken,
}

impl LocalRegistry {
    /// Serves `schemas` (id → Avro schema text) and `subjects` (name → schema id) on a free
    /// loopback port.
    pub async fn start(
        schemas: HashMap<u32, String>,
        subjects: HashMap<String, u32>,
    ) -> std::io::Result<LocalRegistry> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let lookups = Arc::new(AtomicU64::new(0));
        let app = axum::Router::new()
            .route("/schemas/ids/{id}", get(schema_by_id))
            .route(
                "/subjects/{subject}/versions/latest",
                get(latest_of_subject),
            )
            .with_state(Registry {
                schemas: Arc::new(schemas),
                subjects: Arc::new(subjects),
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

async fn latest_of_subject(State(r): State<Registry>, Path(subject): Path<String>) -> Response {
    r.lookups.fetch_add(1, Ordering::Relaxed);
    let found = r
        .subjects
        .get(&subject)
        .and_then(|id| Some((*id, r.schemas.get(id)?)));
    match found {
        Some((id, schema)) => Json(serde_json::json!({
            "subject": subject, "id": id, "version": 1, "schema": schema
        }))
        .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({ "error_code": 40401, "message": "Subject not found" })),
        )
            .into_response(),
    }
}
