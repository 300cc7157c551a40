//! The tests' Confluent Schema Registry, served over HTTP on loopback: `GET /schemas/ids/{id}`,
//! `GET /subjects/{subject}/versions` (the version numbers) and
//! `GET /subjects/{subject}/versions/{version}` (a number or `latest`), optionally behind an
//! expected `Authorization` header, counting the requests it answers, in all and per path.
//!
//! It holds what a registry holds, in the shape `tests/python/*_vectors.py` dump their `mock://`
//! registry: `ids` (id → `{"schema", "schemaType"?, "references"?}`) and `subjects` (subject →
//! version → that entry with its `id`). A test either serves such a dump as the serializers left
//! it ([`Registry::serve_dump`], with [`vectors`] and [`hex`] to read what the scripts wrote), or
//! builds one from schema texts ([`Registry::serve`], [`Registry::register`],
//! [`Registry::subject`]).
//!
//! Apicurio Registry's serializers (its Kafka Connect `AvroConverter` with
//! `apicurio.registry.as-confluent`) register through Apicurio's own API and frame records as
//! Confluent does with the content id: [`Registry::router`] also takes their registration,
//! `POST /apis/registry/v2/groups/{group}/artifacts`, and serves the schema under that id at
//! Confluent's `/schemas/ids/{id}` (tests/e2e/debezium_pipeline.rs).
//!
//! The registry client's own tests make it misbehave: [`Registry::unavailable`] (503s),
//! [`Registry::not_yet`] (an id answered 404 until it "replicates"), [`Registry::delay`] (a slow
//! id), [`Registry::answer`] (an id's next answers replaced: a garbled 200, any status, a body
//! that never ends, a redirect); and [`Registry::router`] serves it over a listener of the
//! test's own (TLS).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value as Json, json};

pub struct Registry {
    /// `{"ids": {...}, "subjects": {...}}`, the shape of the Python dumps.
    data: Mutex<Json>,
    /// The expected `Authorization` header, if any: a request without it is answered 401.
    authorization: Option<String>,
    /// Requests received, answered or refused.
    pub requests: Mutex<usize>,
    /// Requests received per path (`/schemas/ids/{id}`, `/subjects/{subject}/versions/{version}`
    /// as asked, before `latest` is resolved), answered or refused.
    per_path: Mutex<HashMap<String, usize>>,
    faults: Mutex<Faults>,
}

/// How the registry misbehaves, as a test set it.
#[derive(Default)]
struct Faults {
    /// The next this many requests (past the `Authorization` check) are answered 503.
    unavailable: usize,
    /// Each id here is answered 404 the next this many times it is asked for.
    not_yet: HashMap<u32, usize>,
    /// Each id here is answered only after this long.
    delays: HashMap<u32, Duration>,
    /// Each id's next answers, in order, before it is answered as the registry holds it.
    answers: HashMap<u32, VecDeque<Answer>>,
}

/// An answer that replaces what the registry holds for an id, once.
#[derive(Clone, Debug)]
pub enum Answer {
    /// 200 with an HTML page, as a proxy's error page.
    Garbled,
    /// This status with a JSON error body.
    Status(u16),
    /// 200 whose body starts like a schema and never ends.
    Endless,
    /// 302 to this URL.
    Redirect(String),
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
        let reg = Registry::new(json!({ "ids": ids, "subjects": {} }), authorization);
        (reg.listen().await, reg)
    }

    /// Serves `dump` (`{"ids": {...}, "subjects": {...}}`) as Confluent's serializers left it.
    pub async fn serve_dump(dump: Json) -> (SocketAddr, Arc<Registry>) {
        let reg = Registry::new(dump, None);
        (reg.listen().await, reg)
    }

    /// A registry holding `dump` (`{"ids": {...}, "subjects": {...}}`), not served yet: see
    /// [`Registry::listen`] and [`Registry::router`].
    pub fn new(dump: Json, authorization: Option<String>) -> Arc<Registry> {
        Arc::new(Registry {
            data: Mutex::new(dump),
            authorization,
            requests: Mutex::new(0),
            per_path: Mutex::new(HashMap::new()),
            faults: Mutex::new(Faults::default()),
        })
    }

    /// Serves the registry over HTTP on loopback until the test's runtime ends.
    pub async fn listen(self: &Arc<Self>) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the registry");
        let addr = listener.local_addr().expect("addr");
        let app = self.router();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        addr
    }

    /// The registry's routes, for a test that serves them over a listener of its own.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/schemas/ids/{id}", get(schema_by_id))
            .route("/subjects/{subject}/versions", get(subject_versions))
            .route(
                "/subjects/{subject}/versions/{version}",
                get(subject_version),
            )
            .route(
                "/apis/registry/v2/groups/{group}/artifacts",
                post(apicurio_register),
            )
            .with_state(self.clone())
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

    /// Answers the next `n` requests 503, as a registry that is down (0: it is back).
    pub fn unavailable(&self, n: usize) {
        self.faults.lock().unwrap().unavailable = n;
    }

    /// Answers `id` 404 the next `n` times it is asked for, as a schema registered in another
    /// region that has not replicated here yet; it is found after that if the registry holds it.
    pub fn not_yet(&self, id: u32, n: usize) {
        self.faults.lock().unwrap().not_yet.insert(id, n);
    }

    /// Answers `id` only after `delay`, as a slow registry.
    pub fn delay(&self, id: u32, delay: Duration) {
        self.faults.lock().unwrap().delays.insert(id, delay);
    }

    /// Answers `id` with `answer` once, after the answers queued before it.
    pub fn answer(&self, id: u32, answer: Answer) {
        let mut faults = self.faults.lock().unwrap();
        faults.answers.entry(id).or_default().push_back(answer);
    }

    /// The requests received for schema `id`, answered or refused.
    pub fn id_requests(&self, id: u32) -> usize {
        self.path_requests(&format!("/schemas/ids/{id}"))
    }

    /// The requests received for `version` (as asked: a number or `latest`) of `subject`.
    pub fn version_requests(&self, subject: &str, version: &str) -> usize {
        self.path_requests(&format!("/subjects/{subject}/versions/{version}"))
    }

    fn path_requests(&self, path: &str) -> usize {
        self.per_path
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// Counts the request to `path`; the 401 answer if it lacks the expected `Authorization`,
    /// the 503 answer while the registry is [unavailable](Registry::unavailable).
    fn refuse(&self, path: String, headers: &HeaderMap) -> Option<Response> {
        *self.requests.lock().unwrap() += 1;
        *self.per_path.lock().unwrap().entry(path).or_default() += 1;
        if let Some(expected) = self.authorization.as_deref()
            && headers.get("authorization").and_then(|h| h.to_str().ok()) != Some(expected)
        {
            return Some(
                (
                    StatusCode::UNAUTHORIZED,
                    r#"{"error_code":401,"message":"Unauthorized"}"#,
                )
                    .into_response(),
            );
        }
        let mut faults = self.faults.lock().unwrap();
        if faults.unavailable == 0 {
            return None;
        }
        faults.unavailable -= 1;
        Some(StatusCode::SERVICE_UNAVAILABLE.into_response())
    }

    /// Whether `id` is still to be answered 404 ([`Registry::not_yet`]), counting this time.
    fn not_replicated(&self, id: u32) -> bool {
        let mut faults = self.faults.lock().unwrap();
        match faults.not_yet.get_mut(&id) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
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
    if let Some(refused) = reg.refuse(format!("/schemas/ids/{id}"), &headers) {
        return refused;
    }
    let delay = reg.faults.lock().unwrap().delays.get(&id).copied();
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let scripted = (reg.faults.lock().unwrap().answers.get_mut(&id)).and_then(|a| a.pop_front());
    if let Some(answer) = scripted {
        return scripted_answer(answer);
    }
    let entry = if reg.not_replicated(id) {
        None
    } else {
        reg.data.lock().unwrap()["ids"].get(id.to_string()).cloned()
    };
    match entry {
        Some(entry) => axum::Json(entry).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            r#"{"error_code":40403,"message":"Schema not found"}"#,
        )
            .into_response(),
    }
}

fn scripted_answer(answer: Answer) -> Response {
    match answer {
        Answer::Garbled => (
            StatusCode::OK,
            [("content-type", "text/html")],
            "<html><body><h1>502 Bad Gateway</h1></body></html>",
        )
            .into_response(),
        Answer::Status(code) => (
            StatusCode::from_u16(code).expect("a status code"),
            r#"{"error_code":42201,"message":"scripted"}"#,
        )
            .into_response(),
        Answer::Endless => {
            // 64 KiB chunks without end: the stream stops only when the client goes away.
            let start = futures::stream::once(async {
                Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"{\"schema\": \""))
            });
            let chunk = bytes::Bytes::from(vec![b'a'; 64 * 1024]);
            let rest = futures::stream::repeat_with(move || Ok(chunk.clone()));
            let body = axum::body::Body::from_stream(futures::StreamExt::chain(start, rest));
            (StatusCode::OK, [("content-type", "application/json")], body).into_response()
        }
        Answer::Redirect(to) => (StatusCode::FOUND, [("location", to)]).into_response(),
    }
}

async fn subject_versions(
    State(reg): State<Arc<Registry>>,
    Path(subject): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = reg.refuse(format!("/subjects/{subject}/versions"), &headers) {
        return refused;
    }
    let data = reg.data.lock().unwrap();
    let Some(versions) = data["subjects"][&subject].as_object() else {
        return (
            StatusCode::NOT_FOUND,
            r#"{"error_code":40401,"message":"Subject not found"}"#,
        )
            .into_response();
    };
    let mut numbers: Vec<u32> = versions.keys().filter_map(|v| v.parse().ok()).collect();
    numbers.sort_unstable();
    axum::Json(numbers).into_response()
}

async fn subject_version(
    State(reg): State<Arc<Registry>>,
    Path((subject, version)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/subjects/{subject}/versions/{version}");
    if let Some(refused) = reg.refuse(path, &headers) {
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

/// Apicurio's registration (`ifExists=RETURN_OR_UPDATE`): the artifact `X-Registry-ArtifactId`
/// gets the posted schema as its latest version, under the id of the same text if one is
/// registered already (Apicurio's content id), else a new one; the answer is the artifact's
/// metadata, whose `contentId` the serializer writes into each record's Confluent header.
async fn apicurio_register(
    State(reg): State<Arc<Registry>>,
    Path(group): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let path = format!("/apis/registry/v2/groups/{group}/artifacts");
    if let Some(refused) = reg.refuse(path, &headers) {
        return refused;
    }
    let Some(artifact) = headers
        .get("x-registry-artifactid")
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
    else {
        return (StatusCode::BAD_REQUEST, "X-Registry-ArtifactId is missing").into_response();
    };
    let id = {
        let data = reg.data.lock().unwrap();
        let ids = data["ids"].as_object().cloned().unwrap_or_default();
        let same = ids
            .iter()
            .find(|(_, e)| e["schema"].as_str() == Some(body.as_str()))
            .and_then(|(id, _)| id.parse::<u32>().ok());
        same.unwrap_or_else(|| ids.keys().filter_map(|i| i.parse().ok()).max().unwrap_or(0) + 1)
    };
    reg.register(id, &body);
    reg.subject(&artifact, id);
    let version = latest(&reg.data.lock().unwrap()["subjects"][&artifact]).unwrap_or(1);
    axum::Json(json!({
        "groupId": group, "id": artifact, "version": version.to_string(), "type": "AVRO",
        "globalId": id, "contentId": id, "state": "ENABLED",
        "createdOn": "2026-01-01T00:00:00Z", "modifiedOn": "2026-01-01T00:00:00Z",
    }))
    .into_response()
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
