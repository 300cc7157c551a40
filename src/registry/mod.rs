//! A Confluent Schema Registry client: `GET /schemas/ids/{id}` with a cache by id (ids are
//! immutable), one request per id however many records wait for it, basic or bearer auth, a
//! custom CA, timeouts and retries with backoff; and `GET /subjects/{subject}/versions/latest`
//! (not cached: "latest" changes) for creating a table from a subject's current schema.
//!
//! Errors are classified for the caller: a 404 or an unusable schema is a per-record error (the
//! record goes to the dead-letter queue), a registry that is down or slow is retryable (the
//! partition waits and tries again; it never skips records). A 404 is retryable too until the id
//! has been unknown for `not_found_grace`: a registry failover, or a schema registered in another
//! region that has not replicated yet, answers 404 for ids that will exist.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde::Deserialize;
use tokio::sync::OnceCell;

use crate::backoff::Backoff;
use crate::config::defaults;
use kbq_transcode::AvroSchema;

mod json;
mod protobuf;
mod references;

pub use protobuf::RegisteredProtobuf;

/// How to reach the registry. Secrets are redacted from `Debug`.
#[derive(Clone)]
pub struct RegistryConfig {
    /// Base URL, e.g. `https://registry.example:8081` (a path prefix is kept).
    pub url: String,
    pub basic_auth: Option<BasicAuth>,
    pub bearer_token: Option<String>,
    /// PEM certificates trusted in addition to the built-in roots.
    pub ca_pem: Option<Vec<u8>>,
    pub connect_timeout: Duration,
    /// Per-request timeout: a registry slower than this counts as down for that attempt.
    pub request_timeout: Duration,
    /// Attempts per lookup before the lookup reports the registry unavailable.
    pub max_attempts: usize,
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// How long an id may stay unknown (404) before it is `NotFound`; until then a 404 is
    /// `NotFoundYet`, which is retryable. Zero makes the first 404 final.
    pub not_found_grace: Duration,
    /// The longest answer read: a longer one is cut off, and the attempt counts as failed.
    pub max_response_bytes: usize,
}

#[derive(Clone)]
pub struct BasicAuth {
    pub username: String,
    pub password: String,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            url: String::new(),
            basic_auth: None,
            bearer_token: None,
            ca_pem: None,
            connect_timeout: defaults::SCHEMA_REGISTRY_CONNECT_TIMEOUT,
            request_timeout: defaults::SCHEMA_REGISTRY_TIMEOUT,
            max_attempts: defaults::SCHEMA_REGISTRY_RETRIES as usize,
            min_backoff: defaults::SCHEMA_REGISTRY_BACKOFF_MIN,
            max_backoff: defaults::SCHEMA_REGISTRY_BACKOFF_MAX,
            not_found_grace: defaults::SCHEMA_REGISTRY_NOT_FOUND_GRACE,
            max_response_bytes: defaults::SCHEMA_REGISTRY_MAX_RESPONSE_BYTES.0 as usize,
        }
    }
}

impl RegistryConfig {
    /// The client settings of the config's `schema_registry` section; reads `ca_file`.
    pub fn from_settings(sr: &crate::config::SchemaRegistryConfig) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let ca_pem = match &sr.ca_file {
            Some(path) => Some(
                std::fs::read(path)
                    .with_context(|| format!("schema_registry.ca_file {}", path.display()))?,
            ),
            None => None,
        };
        Ok(RegistryConfig {
            url: sr.url.clone(),
            basic_auth: sr.username.as_ref().map(|u| BasicAuth {
                username: u.clone(),
                password: sr
                    .password
                    .as_ref()
                    .map(|p| p.expose().to_string())
                    .unwrap_or_default(),
            }),
            bearer_token: sr.bearer_token.as_ref().map(|t| t.expose().to_string()),
            ca_pem,
            request_timeout: sr.timeout.0,
            max_attempts: sr.retries.max(1) as usize,
            not_found_grace: sr.not_found_grace.0,
            max_response_bytes: usize::try_from(sr.max_response_bytes.0).unwrap_or(usize::MAX),
            ..RegistryConfig::default()
        })
    }
}

impl fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryConfig")
            .field("url", &self.url)
            .field(
                "basic_auth_user",
                &self.basic_auth.as_ref().map(|b| &b.username),
            )
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .field("ca_pem", &self.ca_pem.as_ref().map(|p| p.len()))
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_attempts", &self.max_attempts)
            .field("not_found_grace", &self.not_found_grace)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "schema id {id} is not in the schema registry (still unknown after the {grace:?} grace)"
    )]
    NotFound { id: u32, grace: Duration },
    #[error(
        "schema id {id} is not in the schema registry yet (unknown for {unknown_for:?} of the {grace:?} grace)"
    )]
    NotFoundYet {
        id: u32,
        unknown_for: Duration,
        grace: Duration,
    },
    #[error("schema id {id} cannot be used: {reason}")]
    Unusable { id: u32, reason: String },
    #[error("schema registry refused the credentials for schema id {id} (http {status})")]
    Unauthorized { id: u32, status: u16 },
    #[error("schema registry unavailable for schema id {id} after {attempts} attempts: {reason}")]
    Unavailable {
        id: u32,
        attempts: usize,
        reason: String,
    },
    #[error("invalid schema registry configuration: {0}")]
    Config(String),
}

impl RegistryError {
    /// Retryable errors make the partition wait; the others fail only the record at hand.
    pub fn is_retryable(&self) -> bool {
        // Credentials can be fixed while the daemon runs (a rotated secret), so waiting is right.
        matches!(
            self,
            RegistryError::Unavailable { .. }
                | RegistryError::Unauthorized { .. }
                | RegistryError::NotFoundYet { .. }
        )
    }
}

/// Why the latest schema of a subject could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    #[error("subject {subject} is not in the schema registry")]
    NotFound { subject: String },
    #[error("the latest schema of subject {subject} cannot be used: {reason}")]
    Unusable { subject: String, reason: String },
    #[error("schema registry refused the credentials for subject {subject} (http {status})")]
    Unauthorized { subject: String, status: u16 },
    #[error(
        "schema registry unavailable for subject {subject} after {attempts} attempts: {reason}"
    )]
    Unavailable {
        subject: String,
        attempts: usize,
        reason: String,
    },
}

/// The three schema types of the registry (`schemaType`: absent or `AVRO`, `PROTOBUF`, `JSON`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaKind {
    Avro,
    Protobuf,
    Json,
}

impl SchemaKind {
    pub fn of(schema_type: Option<&str>) -> Result<SchemaKind, String> {
        match schema_type {
            None => Ok(SchemaKind::Avro),
            Some(t) if t.eq_ignore_ascii_case("AVRO") => Ok(SchemaKind::Avro),
            Some(t) if t.eq_ignore_ascii_case("PROTOBUF") => Ok(SchemaKind::Protobuf),
            Some(t) if t.eq_ignore_ascii_case("JSON") => Ok(SchemaKind::Json),
            Some(t) => Err(format!("schema type {t} is not one the sink reads")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SchemaKind::Avro => "avro",
            SchemaKind::Protobuf => "protobuf",
            SchemaKind::Json => "json_schema",
        }
    }

    /// The dead-letter class of a record that cannot be read in this format.
    pub fn malformed_class(self) -> &'static str {
        match self {
            SchemaKind::Avro => "malformed_avro",
            SchemaKind::Protobuf => "malformed_protobuf",
            SchemaKind::Json => "malformed_json",
        }
    }
}

/// A registered schema of any type, as cached.
#[derive(Debug, Clone)]
pub enum AnySchema {
    Avro(Arc<RegisteredSchema>),
    Protobuf(Arc<RegisteredProtobuf>),
    Json(Arc<kbq_transcode::json::JsonSchema>),
}

/// A writer schema as registered.
#[derive(Debug)]
pub struct RegisteredSchema {
    pub id: u32,
    pub text: String,
    pub schema: AvroSchema,
}

/// Counters for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegistryStats {
    pub requests: u64,
    pub retries: u64,
    pub cache_hits: u64,
}

pub struct SchemaRegistry {
    http: reqwest::Client,
    base: String,
    config: RegistryConfig,
    cache: Mutex<HashMap<u32, Arc<OnceCell<Arc<RegisteredSchema>>>>>,
    /// Protobuf schemas by id, compiled with their references (`protobuf.rs`).
    protobuf_cache: Mutex<HashMap<u32, Arc<OnceCell<Arc<protobuf::RegisteredProtobuf>>>>>,
    /// JSON Schemas by id, with the documents they reference (`json.rs`).
    json_cache: Mutex<HashMap<u32, Arc<OnceCell<Arc<kbq_transcode::json::JsonSchema>>>>>,
    /// The registered type of each id read without a type given (`any_schema`): one fetch per
    /// id for the whole process, however many partitions ask at once.
    kinds: Mutex<HashMap<u32, Arc<OnceCell<SchemaKind>>>>,
    /// When each id still unknown was first answered 404 (by this process), for the grace.
    unknown_since: Mutex<HashMap<u32, Instant>>,
    requests: AtomicU64,
    retries: AtomicU64,
    cache_hits: AtomicU64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LatestResponse {
    id: u32,
    #[serde(flatten)]
    schema: SchemaResponse,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SchemaResponse {
    schema: String,
    #[serde(default)]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<SchemaReference>,
}

/// A schema reference: `name` is the import path, the text is subject `subject` at `version`.
#[derive(Debug, Clone, Deserialize)]
struct SchemaReference {
    name: String,
    subject: String,
    version: i64,
}

/// The outcome of one HTTP attempt, before retries.
enum Attempt {
    Retry(String),
    Final(RegistryError),
}

impl SchemaRegistry {
    pub fn new(config: RegistryConfig) -> Result<Self, RegistryError> {
        let base = config.url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(RegistryError::Config(format!(
                "url {:?} must start with http:// or https://",
                config.url
            )));
        }
        if config.max_attempts == 0 {
            return Err(RegistryError::Config(
                "max_attempts must be at least 1".into(),
            ));
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .redirect(redirect_policy());
        if let Some(pem) = &config.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| RegistryError::Config(format!("ca certificate: {e}")))?;
            if certs.is_empty() {
                return Err(RegistryError::Config(
                    "ca certificate: no certificate in the pem data".into(),
                ));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder
            .build()
            .map_err(|e| RegistryError::Config(format!("http client: {e}")))?;
        Ok(SchemaRegistry {
            http,
            base,
            config,
            cache: Mutex::new(HashMap::new()),
            protobuf_cache: Mutex::new(HashMap::new()),
            json_cache: Mutex::new(HashMap::new()),
            kinds: Mutex::new(HashMap::new()),
            unknown_since: Mutex::new(HashMap::new()),
            requests: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
        })
    }

    pub fn stats(&self) -> RegistryStats {
        RegistryStats {
            requests: self.requests.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
        }
    }

    /// The writer schema with this id, from the cache or the registry. Concurrent lookups of an
    /// id that is not cached share one request; a failed lookup is not cached.
    ///
    /// A 404 is `NotFoundYet` (retryable: the caller waits and asks again) until the id has been
    /// unknown for `not_found_grace` since its first 404, then `NotFound`. The clock starts
    /// again for an id once it was found, and with the process.
    pub async fn schema(&self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError> {
        self.cached(&self.cache, id, || self.fetch(id)).await
    }

    /// The schema with this id from `cache`, or fetched by `fetch` into it: concurrent lookups
    /// of an id not cached share one fetch, a failed one is not cached, and a 404 gets its grace.
    async fn cached<T, F, Fut>(
        &self,
        cache: &Mutex<HashMap<u32, Arc<OnceCell<Arc<T>>>>>,
        id: u32,
        fetch: F,
    ) -> Result<Arc<T>, RegistryError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Arc<T>, RegistryError>>,
    {
        let cell = self.cell(cache, id);
        if let Some(s) = cell.get() {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(s.clone());
        }
        let result = cell.get_or_try_init(fetch).await.cloned();
        self.with_grace(id, result)
    }

    /// Turns a 404 into `NotFoundYet` until the id has been unknown for `not_found_grace`, and
    /// restarts the clock of an id once it is found.
    fn with_grace<T>(&self, id: u32, result: Result<T, RegistryError>) -> Result<T, RegistryError> {
        let mut unknown = self.unknown_since.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Err(RegistryError::NotFound { id, grace }) => {
                let unknown_for = unknown.entry(id).or_insert_with(Instant::now).elapsed();
                if unknown_for < grace {
                    return Err(RegistryError::NotFoundYet {
                        id,
                        // Whole milliseconds: the value ends up in log lines.
                        unknown_for: Duration::from_millis(unknown_for.as_millis() as u64),
                        grace,
                    });
                }
                Err(RegistryError::NotFound { id, grace })
            }
            other => {
                if other.is_ok() {
                    unknown.remove(&id);
                }
                other
            }
        }
    }

    /// The latest registered schema of `subject` (e.g. `orders-value` under the
    /// TopicNameStrategy), retried like a lookup by id. Not cached.
    pub async fn latest(&self, subject: &str) -> Result<RegisteredSchema, SubjectError> {
        let parsed = self.latest_response(subject).await?;
        let unusable = |reason: String| SubjectError::Unusable {
            subject: subject.to_string(),
            reason,
        };
        if let Some(t) = parsed.schema.schema_type.as_deref()
            && !t.eq_ignore_ascii_case("AVRO")
        {
            return Err(unusable(format!("schema type {t} is not AVRO")));
        }
        if !parsed.schema.references.is_empty() {
            return Err(unusable("schema references are not supported".into()));
        }
        let schema =
            AvroSchema::parse(&parsed.schema.schema).map_err(|e| unusable(e.to_string()))?;
        Ok(RegisteredSchema {
            id: parsed.id,
            text: parsed.schema.schema,
            schema,
        })
    }

    async fn latest_response(&self, subject: &str) -> Result<LatestResponse, SubjectError> {
        self.subject_response(subject, "/versions/latest").await
    }

    /// The version numbers of `subject` (`GET /subjects/{subject}/versions`), retried like
    /// [`SchemaRegistry::latest`]. Not cached: asked once per writer schema whose plan needs it.
    pub async fn versions(&self, subject: &str) -> Result<Vec<u32>, SubjectError> {
        self.subject_response(subject, "/versions").await
    }

    /// The id and type of version `version` of `subject`, retried like
    /// [`SchemaRegistry::latest`].
    pub async fn version_id(
        &self,
        subject: &str,
        version: u32,
    ) -> Result<(u32, SchemaKind), SubjectError> {
        let answer: LatestResponse = self
            .subject_response(subject, &format!("/versions/{version}"))
            .await?;
        let kind = SchemaKind::of(answer.schema.schema_type.as_deref()).map_err(|reason| {
            SubjectError::Unusable {
                subject: subject.to_string(),
                reason,
            }
        })?;
        Ok((answer.id, kind))
    }

    /// `GET /subjects/{subject}{path}`, retried with backoff.
    async fn subject_response<T: serde::de::DeserializeOwned>(
        &self,
        subject: &str,
        path: &str,
    ) -> Result<T, SubjectError> {
        let mut backoff = self.backoff();
        let mut attempts = 0usize;
        loop {
            attempts += 1;
            match self.attempt_subject(subject, path).await {
                Ok(s) => return Ok(s),
                Err(Err(e)) => return Err(e),
                Err(Ok(())) if attempts < self.config.max_attempts => {
                    let after = backoff.next_delay();
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(subject, retry_in = ?after, "schema registry subject lookup failed, retrying");
                    tokio::time::sleep(after).await;
                }
                Err(Ok(())) => {
                    return Err(SubjectError::Unavailable {
                        subject: subject.to_string(),
                        attempts,
                        reason: "no answer".into(),
                    });
                }
            }
        }
    }

    /// One attempt; `Err(Ok(()))` is a retryable failure (logged), `Err(Err(e))` a final one.
    async fn attempt_subject<T: serde::de::DeserializeOwned>(
        &self,
        subject: &str,
        path: &str,
    ) -> Result<T, Result<(), SubjectError>> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let retry = |reason: String| {
            tracing::debug!(subject, %reason, "schema registry subject attempt failed");
            Err(Ok(()))
        };
        let final_err = |e: SubjectError| Err(Err(e));
        let req = self.get(format!(
            "{}/subjects/{}{path}",
            self.base,
            encode_path_segment(subject)
        ));
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return retry(describe_reqwest(&e)),
        };
        let status = resp.status();
        match status {
            s if s.is_success() => {}
            StatusCode::NOT_FOUND => {
                return final_err(SubjectError::NotFound {
                    subject: subject.to_string(),
                });
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                return final_err(SubjectError::Unauthorized {
                    subject: subject.to_string(),
                    status: status.as_u16(),
                });
            }
            // Any other answer (a 5xx, a 429, a 4xx a registry does not answer a good
            // request with) is the registry's or a proxy's trouble, not the subject's.
            s => return retry(format!("http {}", s.as_u16())),
        }
        let body = match read_body(resp, self.config.max_response_bytes).await {
            Ok(b) => b,
            Err(reason) => return retry(reason),
        };
        // A 200 whose body is not a schema version (an HTML page of a proxy, a body cut short)
        // is garbled, not an answer about the subject.
        match serde_json::from_slice(&body) {
            Ok(latest) => Ok(latest),
            Err(e) => retry(format!("the answer is not what {path} holds: {e}")),
        }
    }

    /// The retry schedule of one lookup (`max_attempts` in all): the process's one backoff
    /// helper, doubling from `min_backoff` up to `max_backoff`, jittered.
    fn backoff(&self) -> Backoff {
        Backoff::new(self.config.min_backoff, self.config.max_backoff)
    }

    async fn fetch(&self, id: u32) -> Result<Arc<RegisteredSchema>, RegistryError> {
        let raw = self.fetch_raw(id).await?;
        parse_avro(id, raw)
    }

    /// The schema with this id whatever its type (`kind`, or the registry's `schemaType` when
    /// `None`), from the cache of its type or the registry; one request for an id not cached.
    pub async fn any_schema(
        &self,
        id: u32,
        kind: Option<SchemaKind>,
    ) -> Result<AnySchema, RegistryError> {
        match kind {
            Some(SchemaKind::Avro) => return self.schema(id).await.map(AnySchema::Avro),
            Some(SchemaKind::Protobuf) => {
                return self.protobuf_schema(id).await.map(AnySchema::Protobuf);
            }
            Some(SchemaKind::Json) => return self.json_schema(id).await.map(AnySchema::Json),
            None => {}
        }
        fn cached<T>(cache: &Mutex<HashMap<u32, Arc<OnceCell<T>>>>, id: u32) -> bool {
            let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            cache.get(&id).is_some_and(|c| c.initialized())
        }
        let kind = if cached(&self.cache, id) {
            SchemaKind::Avro
        } else if cached(&self.protobuf_cache, id) {
            SchemaKind::Protobuf
        } else if cached(&self.json_cache, id) {
            SchemaKind::Json
        } else {
            // One fetch per id: the writers of every partition that meet the id first wait on
            // this cell, and the schema lands in the cache of its type, where they find it.
            let cell = self.cell(&self.kinds, id);
            let kind = cell.get_or_try_init(|| self.fetch_and_parse(id)).await;
            *self.with_grace(id, kind)?
        };
        Box::pin(self.any_schema(id, Some(kind))).await
    }

    /// Fetches `id` and parses it into the cache of its registered type; returns that type.
    async fn fetch_and_parse(&self, id: u32) -> Result<SchemaKind, RegistryError> {
        let raw = self.fetch_raw(id).await?;
        let kind = SchemaKind::of(raw.schema_type.as_deref())
            .map_err(|reason| RegistryError::Unusable { id, reason })?;
        match kind {
            SchemaKind::Avro => self
                .cell(&self.cache, id)
                .get_or_try_init(|| async { parse_avro(id, raw) })
                .await
                .map(drop),
            SchemaKind::Protobuf => self
                .cell(&self.protobuf_cache, id)
                .get_or_try_init(|| self.parse_protobuf(id, raw))
                .await
                .map(drop),
            SchemaKind::Json => self
                .cell(&self.json_cache, id)
                .get_or_try_init(|| self.parse_json(id, raw))
                .await
                .map(drop),
        }?;
        Ok(kind)
    }

    fn cell<T>(&self, cache: &Mutex<HashMap<u32, Arc<OnceCell<T>>>>, id: u32) -> Arc<OnceCell<T>> {
        let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.entry(id).or_default().clone()
    }

    /// The id and type of the latest registered schema of `subject`, retried like
    /// [`SchemaRegistry::latest`]; the schema itself is then read by id ([`Self::any_schema`]).
    pub async fn latest_id(&self, subject: &str) -> Result<(u32, SchemaKind), SubjectError> {
        let latest = self.latest_response(subject).await?;
        let kind = SchemaKind::of(latest.schema.schema_type.as_deref()).map_err(|reason| {
            SubjectError::Unusable {
                subject: subject.to_string(),
                reason,
            }
        })?;
        Ok((latest.id, kind))
    }

    /// `GET /schemas/ids/{id}` with retries, whatever the schema type.
    async fn fetch_raw(&self, id: u32) -> Result<SchemaResponse, RegistryError> {
        self.get_with_retries(format!("{}/schemas/ids/{id}", self.base), id)
            .await
    }

    /// `GET /subjects/{subject}/versions/{version}` (a reference of schema `id`) with retries.
    /// A reference that is not there makes schema `id` unusable.
    async fn fetch_version(
        &self,
        id: u32,
        subject: &str,
        version: i64,
    ) -> Result<SchemaResponse, RegistryError> {
        let url = format!(
            "{}/subjects/{}/versions/{version}",
            self.base,
            encode_path_segment(subject)
        );
        match self.get_with_retries(url, id).await {
            Err(RegistryError::NotFound { .. }) => Err(RegistryError::Unusable {
                id,
                reason: format!("reference {subject} version {version} is not in the registry"),
            }),
            other => other,
        }
    }

    async fn get_with_retries<T: serde::de::DeserializeOwned>(
        &self,
        url: String,
        id: u32,
    ) -> Result<T, RegistryError> {
        let mut backoff = self.backoff();
        let mut attempts = 0usize;
        loop {
            attempts += 1;
            match self.attempt(&url, id).await {
                Ok(s) => return Ok(s),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Retry(reason)) if attempts < self.config.max_attempts => {
                    let after = backoff.next_delay();
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(schema_id = id, %reason, retry_in = ?after, "schema registry lookup failed, retrying");
                    tokio::time::sleep(after).await;
                }
                Err(Attempt::Retry(reason)) => {
                    return Err(RegistryError::Unavailable {
                        id,
                        attempts,
                        reason,
                    });
                }
            }
        }
    }

    /// A GET to the registry with its media type and the configured credentials.
    fn get(&self, url: String) -> reqwest::RequestBuilder {
        let mut req = self.http.get(url).header(
            reqwest::header::ACCEPT,
            "application/vnd.schemaregistry.v1+json, application/json",
        );
        if let Some(b) = &self.config.basic_auth {
            req = req.basic_auth(&b.username, Some(&b.password));
        }
        if let Some(t) = &self.config.bearer_token {
            req = req.bearer_auth(t);
        }
        req
    }

    async fn attempt<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        id: u32,
    ) -> Result<T, Attempt> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let req = self.get(url.to_owned());
        let resp = req
            .send()
            .await
            .map_err(|e| Attempt::Retry(describe_reqwest(&e)))?;
        let status = resp.status();
        match status {
            s if s.is_success() => {}
            StatusCode::NOT_FOUND => {
                return Err(Attempt::Final(RegistryError::NotFound {
                    id,
                    grace: self.config.not_found_grace,
                }));
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                return Err(Attempt::Final(RegistryError::Unauthorized {
                    id,
                    status: status.as_u16(),
                }));
            }
            // Any other answer (a 5xx, a 429, a 4xx a registry does not answer a good
            // request with) is the registry's or a proxy's trouble: retried as an outage, and
            // never cached as what the id is.
            s => return Err(Attempt::Retry(format!("http {}", s.as_u16()))),
        }
        let body = read_body(resp, self.config.max_response_bytes)
            .await
            .map_err(Attempt::Retry)?;
        // A 200 whose body is not a schema (an HTML page of a proxy, a body cut short) is
        // garbled, not an answer about the id: retried as an outage.
        serde_json::from_slice(&body)
            .map_err(|e| Attempt::Retry(format!("the answer is not a schema: {e}")))
    }
}

/// An Avro schema as registered (no references: Avro references are not supported yet).
fn parse_avro(id: u32, raw: SchemaResponse) -> Result<Arc<RegisteredSchema>, RegistryError> {
    let unusable = |reason: String| RegistryError::Unusable { id, reason };
    if let Some(t) = raw.schema_type.as_deref()
        && !t.eq_ignore_ascii_case("AVRO")
    {
        return Err(unusable(format!("schema type {t} is not AVRO")));
    }
    if !raw.references.is_empty() {
        return Err(unusable("schema references are not supported".into()));
    }
    let schema = AvroSchema::parse(&raw.schema).map_err(|e| unusable(e.to_string()))?;
    Ok(Arc::new(RegisteredSchema {
        id,
        text: raw.schema,
        schema,
    }))
}

/// Reads an answer's body, at most `max` bytes: a longer one (announced or streamed) is cut off
/// as soon as it passes the limit, so a body that never ends costs `max` bytes and no more.
async fn read_body(mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let too_long =
        || format!("the answer is longer than schema_registry.max_response_bytes ({max} bytes)");
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(too_long());
    }
    let mut body = Vec::with_capacity(resp.content_length().unwrap_or(0) as usize);
    while let Some(chunk) = resp.chunk().await.map_err(|e| describe_reqwest(&e))? {
        if body.len() + chunk.len() > max {
            return Err(too_long());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Redirects as reqwest follows them (at most 10), except from `https` to anything else: the
/// answer, and whatever a later request carries, would cross the network in the clear.
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let from_https = attempt.previous().iter().any(|u| u.scheme() == "https");
        if from_https && attempt.url().scheme() != "https" {
            let to = attempt.url().scheme().to_string();
            attempt.error(format!("refused a redirect from https to {to}"))
        } else if attempt.previous().len() > 10 {
            attempt.error("more than 10 redirects")
        } else {
            attempt.follow()
        }
    })
}

/// Percent-encodes everything but RFC 3986's unreserved characters (subject names may hold `/`,
/// `:` or spaces under custom naming strategies).
fn encode_path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// reqwest's Display omits the cause ("error sending request"); the chain says what happened.
fn describe_reqwest(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else {
        "request"
    };
    let mut s = format!("{kind}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}
