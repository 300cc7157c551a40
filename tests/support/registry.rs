//! The tests' Confluent Schema Registry, served over HTTP on loopback: `GET /schemas/ids/{id}`
//! and `GET /subjects/{subject}/versions/{version}` (a number or `latest`), optionally behind an
//! expected `Authorization` header, counting the requests it answers.
//!
//! It holds what a registry holds, in the shape `tests/python/*_vectors.py` dump their `mock://`
//! registry: `ids` (id → `{"schema", "schemaType"?, "references"?}`) and `subjects` (subject →
//! version → that entry with its `id`). A test either serves such a dump as the serializers left
//! it ([`Registry::serve_dump`], with [`vectors`] and [`hex`] to read what the scripts wrote), or
//! builds one from schema texts ([`Registry::serve`], [`Registry::register`],
//! [`Registry::subject`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value as Json, json};

pub struct Registry {
    /// `{"ids": {...}, "subjects": {...}}`, the shape of the Python dumps.
    data: Mutex<Json>,
    /// The expected `Authorization` header, if any: a request without it is answered 401.
    authorization: Option<String>,
    /// Requests received, answered or refused.
    pub requests: Mutex<usize>,
}

impl Registry {
    /// Serves each schema text of `schemas` under its id (no subjects until [`Registry::subject`]
    /// names some).
    pub async fn serve(
        schemas: HashMap<u32, String>,
        authorization: Option<String>,
    ) -> (SocketAddr, Arc<Registry>) {
        let ids: serde_json::Map<String, Json> = schemas
            .into_iter()
            .map(|(id, schema)| (id.to_string(), json!({ "schema": schema })))
            .collect();
        Registry::start(json!({ "ids": ids, "subjects": {} }), authorization).await
    }

    /// Serves `dump` (`{"ids": {...}, "subjects": {...}}`) as Confluent's serializers left it.
    pub async fn serve_dump(dump: Json) -> (SocketAddr, Arc<Registry>) {
        Registry::start(dump, None).await
    }

    /// The server runs until the test's runtime ends; it holds the registry too.
    async fn start(data: Json, authorization: Option<String>) -> (SocketAddr, Arc<Registry>) {
        let reg = Arc::new(Registry {
            data: Mutex::new(data),
            authorization,
            requests: Mutex::new(0),
        });
        let app = Router::new()
            .route("/schemas/ids/{id}", get(schema_by_id))
            .route(
                "/subjects/{subject}/versions/{version}",
                get(subject_version),
            )
            .with_state(reg.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the registry");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (addr, reg)
    }

    /// Serves `schema` as `id` from now on: a schema that reaches this registry late.
    pub fn register(&self, id: u32, schema: &str) {
        self.data.lock().unwrap()["ids"][id.to_string()] = json!({ "schema": schema });
    }

    /// Registers schema `id` (served already) as the next version of `subject`, its latest.
    pub fn subject(&self, subject: &str, id: u32) {
        let mut data = self.data.lock().unwrap();
        let mut entry = data["ids"]
            .get(id.to_string())
            .unwrap_or_else(|| panic!("schema {id} is not registered"))
            .clone();
        let versions = &mut data["subjects"][subject];
        let version = latest(versions).map_or(1, |v| v + 1);
        entry["subject"] = json!(subject);
        entry["version"] = json!(version);
        entry["id"] = json!(id);
        versions[version.to_string()] = entry;
    }

    /// Counts the request; the 401 answer if it lacks the expected `Authorization`.
    fn refuse(&self, headers: &HeaderMap) -> Option<Response> {
        *self.requests.lock().unwrap() += 1;
        let expected = self.authorization.as_deref()?;
        (headers.get("authorization").and_then(|h| h.to_str().ok()) != Some(expected)).then(|| {
            (
                StatusCode::UNAUTHORIZED,
                r#"{"error_code":401,"message":"Unauthorized"}"#,
            )
                .into_response()
        })
    }
}

/// The highest version of a subject's `{version: entry}` object.
fn latest(versions: &Json) -> Option<u32> {
    versions
        .as_object()?
        .keys()
        .filter_map(|v| v.parse().ok())
        .max()
}

async fn schema_by_id(
    State(reg): State<Arc<Registry>>,
    Path(id): Path<u32>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = reg.refuse(&headers) {
        return refused;
    }
    match reg.data.lock().unwrap()["ids"].get(id.to_string()) {
        Some(entry) => axum::Json(entry.clone()).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            r#"{"error_code":40403,"message":"Schema not found"}"#,
        )
            .into_response(),
    }
}

async fn subject_version(
    State(reg): State<Arc<Registry>>,
    Path((subject, version)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = reg.refuse(&headers) {
        return refused;
    }
    let data = reg.data.lock().unwrap();
    let versions = &data["subjects"][&subject];
    let version = match version.as_str() {
        "latest" => latest(versions).map_or(version, |v| v.to_string()),
        _ => version,
    };
    match versions.get(&version) {
        Some(entry) => axum::Json(entry.clone()).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            r#"{"error_code":40401,"message":"Subject not found"}"#,
        )
            .into_response(),
    }
}

/// Runs `tests/python/<script>` with `python`, writing its JSON lines (the first holds the
/// registry dump), and returns them parsed.
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

/// The bytes of a hex string, as the scripts write records.
pub fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
