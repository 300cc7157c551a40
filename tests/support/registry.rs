//! A Schema Registry as Confluent's serializers left it (`tests/python/*_vectors.py` dump their
//! `mock://` registry): `/schemas/ids/{id}` and `/subjects/{subject}/versions/{version}`, served
//! over HTTP on loopback, and the test venv's interpreter that runs those generators.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::Value as Json;

/// Runs `tests/python/<script>` writing its JSON lines, and returns them parsed.
pub fn vectors(python: &std::path::Path, script: &str) -> Vec<Json> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vectors.jsonl");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let status = std::process::Command::new(python)
        .arg(&script)
        .arg(&file)
        .status()
        .unwrap();
    assert!(status.success(), "{} failed", script.display());
    std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Serves `dump` (`{"ids": {...}, "subjects": {...}}`) until the test process ends.
pub async fn serve_registry(dump: Json) -> SocketAddr {
    async fn by_id(State(d): State<Arc<Json>>, Path(id): Path<u32>) -> Response {
        match d["ids"].get(id.to_string()) {
            Some(e) => axum::Json(e.clone()).into_response(),
            None => (StatusCode::NOT_FOUND, r#"{"error_code":40403}"#).into_response(),
        }
    }
    async fn by_version(
        State(d): State<Arc<Json>>,
        Path((subject, version)): Path<(String, String)>,
    ) -> Response {
        let versions = d["subjects"].get(&subject);
        // `latest`: the highest version registered.
        let version = match (version.as_str(), versions.and_then(Json::as_object)) {
            ("latest", Some(all)) => all
                .keys()
                .filter_map(|v| v.parse::<u32>().ok())
                .max()
                .map_or(version, |v| v.to_string()),
            _ => version,
        };
        match versions.and_then(|s| s.get(&version)) {
            Some(e) => axum::Json(e.clone()).into_response(),
            None => (StatusCode::NOT_FOUND, r#"{"error_code":40401}"#).into_response(),
        }
    }
    let app = Router::new()
        .route("/schemas/ids/{id}", get(by_id))
        .route("/subjects/{subject}/versions/{version}", get(by_version))
        .with_state(Arc::new(dump));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}
