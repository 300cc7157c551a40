//! The BigQuery REST v2 calls the daemon makes: datasets and tables get/insert/patch (table
//! creation and schema evolution), `tabledata.list` (verification) and one query shape (the
//! `resolve` recovery: the highest offset of a partition visible in the table).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::auth::Auth;
use crate::config::defaults;
use kbq_core::table_schema::TableSchema;

/// `projects/{project}/datasets/{dataset}/tables/{table}` in parts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableReference {
    pub project_id: String,
    pub dataset_id: String,
    pub table_id: String,
}

impl TableReference {
    pub fn new(project: &str, dataset: &str, table: &str) -> Self {
        TableReference {
            project_id: project.into(),
            dataset_id: dataset.into(),
            table_id: table.into(),
        }
    }

    /// The Storage Write API's name of the table.
    pub fn resource_name(&self) -> String {
        format!(
            "projects/{}/datasets/{}/tables/{}",
            self.project_id, self.dataset_id, self.table_id
        )
    }
}

/// `TimePartitioning` of the REST API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimePartitioning {
    /// DAY, HOUR, MONTH or YEAR.
    #[serde(rename = "type")]
    pub partition_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Milliseconds, as a JSON string like the REST API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_ms: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Clustering {
    pub fields: Vec<String>,
}

/// The parts of the REST `Table` resource the sink reads and writes; other keys are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Table {
    pub table_reference: TableReference,
    #[serde(default)]
    pub schema: TableSchema,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_partitioning: Option<TimePartitioning>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clustering: Option<Clustering>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_partition_filter: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The primary key of a CDC table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_constraints: Option<TableConstraints>,
    /// An SQL interval (`0-0 0 0:10:0`): how stale a query of a CDC table may read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_staleness: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
}

/// `tableConstraints` of the REST API (foreign keys are not read).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableConstraints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_key: Option<PrimaryKey>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PrimaryKey {
    pub columns: Vec<String>,
}

impl Table {
    /// The primary-key columns; empty without a primary key.
    pub fn primary_key(&self) -> &[String] {
        self.table_constraints
            .as_ref()
            .and_then(|c| c.primary_key.as_ref())
            .map_or(&[], |k| k.columns.as_slice())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RestError {
    /// BigQuery answered with an error document.
    #[error("bigquery {method} {path} failed with http {status} ({reason}): {message}")]
    Api {
        method: &'static str,
        path: String,
        status: u16,
        reason: String,
        message: String,
    },
    /// No answer (connection refused, timeout, broken body).
    #[error("bigquery {method} {path} failed: {source}")]
    Transport {
        method: &'static str,
        path: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("cannot get credentials for bigquery: {0}")]
    Auth(#[from] super::auth::AuthError),
    #[error("unexpected bigquery response to {path}: {reason}")]
    Decode { path: String, reason: String },
}

impl RestError {
    /// Worth retrying with backoff: no answer, 5xx, 429 and BigQuery's rate-limit reasons (table
    /// metadata updates are limited to a few per 10 s per table).
    pub fn is_retryable(&self) -> bool {
        match self {
            RestError::Transport { .. } => true,
            RestError::Api { status, reason, .. } => {
                *status >= 500
                    || *status == 429
                    || reason == "rateLimitExceeded"
                    || reason == "backendError"
            }
            RestError::Auth(_) | RestError::Decode { .. } => false,
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, RestError::Api { status: 404, .. })
    }

    pub fn is_already_exists(&self) -> bool {
        matches!(self, RestError::Api { status: 409, .. })
    }
}

/// A client for `…/bigquery/v2`.
#[derive(Clone, Debug)]
pub struct RestClient {
    http: reqwest::Client,
    /// e.g. `http://127.0.0.1:9060` (the emulator) or Google's endpoint; without `/bigquery/v2`.
    base: String,
    auth: Auth,
    /// Answers every call instead of HTTP (the deterministic simulation); `None` in the daemon.
    transport: Option<Arc<dyn RestTransport>>,
}

/// A boxed answer of the REST seam: the HTTP status and the JSON document.
pub type RestFuture<'a> = Pin<Box<dyn Future<Output = (u16, Value)> + Send + 'a>>;

/// The REST calls as a seam under [`RestClient`]: the daemon speaks HTTP, the deterministic
/// simulation answers in process (docs/simulation.md). The answer is decoded by the client as
/// an HTTP answer would be.
pub trait RestTransport: Send + Sync + std::fmt::Debug {
    fn call(&self, method: &'static str, path: String, body: Option<Value>) -> RestFuture<'_>;
}

impl RestClient {
    pub fn new(base: &str, auth: Auth, timeout: Duration) -> Result<RestClient, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(defaults::REST_CONNECT_TIMEOUT))
            .build()?;
        Ok(RestClient {
            http,
            base: base.trim_end_matches('/').to_string(),
            auth,
            transport: None,
        })
    }

    /// A client whose every call goes to `transport` instead of HTTP.
    pub fn with_transport(transport: Arc<dyn RestTransport>) -> RestClient {
        RestClient {
            http: reqwest::Client::new(),
            base: String::new(),
            auth: Auth::None,
            transport: Some(transport),
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: String,
        body: Option<&Value>,
    ) -> Result<Value, RestError> {
        let name: &'static str = match method {
            reqwest::Method::GET => "GET",
            reqwest::Method::POST => "POST",
            reqwest::Method::PATCH => "PATCH",
            reqwest::Method::PUT => "PUT",
            reqwest::Method::DELETE => "DELETE",
            _ => "REQUEST",
        };
        if let Some(t) = &self.transport {
            let (status, doc) = t.call(name, path.clone(), body.cloned()).await;
            return Self::answer(name, path, status, doc);
        }
        let url = format!("{}/bigquery/v2/{}", self.base, path);
        let mut request = self
            .http
            .request(method, &url)
            .headers(self.auth.headers().await?);
        if let Some(body) = body {
            request = request.json(body);
        }
        let transport = |source| RestError::Transport {
            method: name,
            path: path.clone(),
            source,
        };
        let response = request.send().await.map_err(transport)?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(transport)?;
        let doc: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| json!({ "raw": text }))
        };
        Self::answer(name, path, status, doc)
    }

    /// The result of an answer with `status` and body `doc`.
    fn answer(
        name: &'static str,
        path: String,
        status: u16,
        doc: Value,
    ) -> Result<Value, RestError> {
        if (200..300).contains(&status) {
            return Ok(doc);
        }
        let error = &doc["error"];
        Err(RestError::Api {
            method: name,
            path,
            status,
            reason: error["errors"][0]["reason"]
                .as_str()
                .unwrap_or("unknown")
                .to_string(),
            message: error["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| doc.to_string()),
        })
    }

    fn decode<T: serde::de::DeserializeOwned>(path: &str, doc: Value) -> Result<T, RestError> {
        serde_json::from_value(doc).map_err(|e| RestError::Decode {
            path: path.to_string(),
            reason: e.to_string(),
        })
    }

    fn table_path(t: &TableReference) -> String {
        format!(
            "projects/{}/datasets/{}/tables/{}",
            segment(&t.project_id),
            segment(&t.dataset_id),
            segment(&t.table_id)
        )
    }

    pub async fn get_table(&self, table: &TableReference) -> Result<Table, RestError> {
        let path = Self::table_path(table);
        let doc = self.call(reqwest::Method::GET, path.clone(), None).await?;
        Self::decode(&path, doc)
    }

    pub async fn insert_table(&self, table: &Table) -> Result<Table, RestError> {
        let r = &table.table_reference;
        let path = format!(
            "projects/{}/datasets/{}/tables",
            segment(&r.project_id),
            segment(&r.dataset_id)
        );
        let body = serde_json::to_value(table).expect("a table serialises");
        let doc = self
            .call(reqwest::Method::POST, path.clone(), Some(&body))
            .await?;
        Self::decode(&path, doc)
    }

    /// `tables.patch` with the new full schema (BigQuery only allows adding NULLABLE columns and
    /// relaxing REQUIRED to NULLABLE). With `etag`, the patch fails if the table changed since.
    pub async fn patch_table_schema(
        &self,
        table: &TableReference,
        schema: &TableSchema,
        etag: Option<&str>,
    ) -> Result<Table, RestError> {
        let path = Self::table_path(table);
        let mut body = json!({ "schema": schema });
        if let Some(etag) = etag {
            body["etag"] = json!(etag);
        }
        let doc = self
            .call(reqwest::Method::PATCH, path.clone(), Some(&body))
            .await?;
        Self::decode(&path, doc)
    }

    /// Sets one label on the table (other labels stay): the group's marker (docs/architecture.md,
    /// invariant 7).
    pub async fn set_table_label(
        &self,
        table: &TableReference,
        key: &str,
        value: &str,
    ) -> Result<(), RestError> {
        let path = Self::table_path(table);
        let body = json!({ "labels": { key: value } });
        self.call(reqwest::Method::PATCH, path, Some(&body))
            .await
            .map(|_| ())
    }

    /// `SELECT MAX(column) FROM table WHERE k = v AND …` through `jobs.query`: the highest
    /// visible value of an INT64 column under equality filters (the `resolve` recovery asks for
    /// the highest offset of one partition). `None` when no row matches.
    pub async fn query_max_int(
        &self,
        table: &TableReference,
        column: &str,
        filters: &[(&str, FilterValue<'_>)],
    ) -> Result<Option<i64>, RestError> {
        let mut sql = format!(
            "SELECT MAX(`{column}`) FROM `{}.{}.{}`",
            table.project_id, table.dataset_id, table.table_id
        );
        for (i, (name, value)) in filters.iter().enumerate() {
            sql.push_str(if i == 0 { " WHERE " } else { " AND " });
            match value {
                FilterValue::Int(v) => sql.push_str(&format!("`{name}` = {v}")),
                FilterValue::Str(v) => sql.push_str(&format!(
                    "`{name}` = '{}'",
                    v.replace('\\', "\\\\").replace('\'', "\\'")
                )),
            }
        }
        let path = format!("projects/{}/queries", segment(&table.project_id));
        let body = json!({ "query": sql, "useLegacySql": false, "timeoutMs": 60000 });
        let doc = self
            .call(reqwest::Method::POST, path.clone(), Some(&body))
            .await?;
        if doc["jobComplete"] == json!(false) {
            return Err(RestError::Decode {
                path,
                reason: "query did not complete within its timeout".into(),
            });
        }
        match &doc["rows"][0]["f"][0]["v"] {
            Value::Null => Ok(None),
            Value::String(v) => v.parse().map(Some).map_err(|_| RestError::Decode {
                path,
                reason: format!("not an integer: {v}"),
            }),
            other => Err(RestError::Decode {
                path,
                reason: format!("unexpected value {other}"),
            }),
        }
    }

    pub async fn delete_table(&self, table: &TableReference) -> Result<(), RestError> {
        self.call(reqwest::Method::DELETE, Self::table_path(table), None)
            .await
            .map(|_| ())
    }

    /// Creates the dataset if it does not exist yet.
    pub async fn ensure_dataset(
        &self,
        project: &str,
        dataset: &str,
        location: Option<&str>,
    ) -> Result<(), RestError> {
        let path = format!("projects/{project}/datasets");
        let mut body =
            json!({ "datasetReference": { "projectId": project, "datasetId": dataset } });
        if let Some(location) = location {
            body["location"] = json!(location);
        }
        match self.call(reqwest::Method::POST, path, Some(&body)).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_already_exists() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `datasets.get`: whether the dataset can be read.
    pub async fn get_dataset(&self, project: &str, dataset: &str) -> Result<(), RestError> {
        let path = format!(
            "projects/{}/datasets/{}",
            segment(project),
            segment(dataset)
        );
        self.call(reqwest::Method::GET, path, None)
            .await
            .map(|_| ())
    }

    /// `datasets.delete` with its tables (`deleteContents`): only for a dataset this process
    /// created (the `conformance` probe's scratch dataset).
    pub async fn delete_dataset(&self, project: &str, dataset: &str) -> Result<(), RestError> {
        let path = format!(
            "projects/{}/datasets/{}?deleteContents=true",
            segment(project),
            segment(dataset)
        );
        self.call(reqwest::Method::DELETE, path, None)
            .await
            .map(|_| ())
    }

    /// `tables.testIamPermissions`: which of `permissions` the caller holds on the table.
    pub async fn test_table_permissions(
        &self,
        table: &TableReference,
        permissions: &[&str],
    ) -> Result<Vec<String>, RestError> {
        let path = format!("{}:testIamPermissions", Self::table_path(table));
        let body = json!({ "permissions": permissions });
        let doc = self
            .call(reqwest::Method::POST, path.clone(), Some(&body))
            .await?;
        match &doc["permissions"] {
            // BigQuery leaves the list out when none is held.
            Value::Null => Ok(Vec::new()),
            Value::Array(held) => Ok(held
                .iter()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect()),
            other => Err(RestError::Decode {
                path,
                reason: format!("permissions is not a list: {other}"),
            }),
        }
    }

    /// `tabledata.list`: one page of rows in the REST shape (`{"f":[{"v":…}]}`), and the token of
    /// the next page.
    pub async fn list_rows(
        &self,
        table: &TableReference,
        page_token: Option<&str>,
        max_results: u32,
    ) -> Result<(Vec<Value>, Option<String>), RestError> {
        let mut path = format!("{}/data?maxResults={max_results}", Self::table_path(table));
        if let Some(token) = page_token {
            path.push_str("&pageToken=");
            path.push_str(&urlencode(token));
        }
        let mut doc = self.call(reqwest::Method::GET, path, None).await?;
        let rows = match doc["rows"].take() {
            Value::Array(rows) => rows,
            _ => Vec::new(),
        };
        Ok((rows, doc["pageToken"].as_str().map(str::to_string)))
    }
}

/// A literal in an equality filter of [`RestClient::query_max_int`].
#[derive(Debug, Clone, Copy)]
pub enum FilterValue<'a> {
    Int(i64),
    Str(&'a str),
}

fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One path segment with every byte but the unreserved ones (RFC 3986: letters, digits, `-`,
/// `.`, `_`, `~`) and `:` (a `domain:project` id) percent-escaped: a name is never read as a
/// path, a query or a fragment (`validate` refuses such names too; this holds whatever
/// reaches here).
fn segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    // `.` and `..` alone are still path steps.
    match out.as_str() {
        "." => "%2E".into(),
        ".." => "%2E%2E".into(),
        _ => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_resource_reads_the_rest_shape_and_ignores_other_keys() {
        let doc = json!({
            "kind": "bigquery#table",
            "tableReference": {"projectId": "p", "datasetId": "d", "tableId": "t"},
            "schema": {"fields": [{"name": "id", "type": "INTEGER", "mode": "REQUIRED"}]},
            "timePartitioning": {"type": "DAY", "field": "ts", "expirationMs": "86400000"},
            "clustering": {"fields": ["id"]},
            "numRows": "0",
            "etag": "abc"
        });
        let table: Table = serde_json::from_value(doc).unwrap();
        assert_eq!(
            table.table_reference.resource_name(),
            "projects/p/datasets/d/tables/t"
        );
        assert_eq!(
            table.time_partitioning.unwrap().expiration_ms.as_deref(),
            Some("86400000")
        );
        assert_eq!(table.etag.as_deref(), Some("abc"));
    }

    #[test]
    fn retryable_errors_are_server_side_or_rate_limits() {
        let api = |status, reason: &str| RestError::Api {
            method: "GET",
            path: "x".into(),
            status,
            reason: reason.into(),
            message: String::new(),
        };
        assert!(api(503, "backendError").is_retryable());
        assert!(api(403, "rateLimitExceeded").is_retryable());
        assert!(!api(400, "invalid").is_retryable());
        assert!(api(404, "notFound").is_not_found());
        assert_eq!(urlencode("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn names_are_escaped_into_one_path_segment_each() {
        let t = TableReference::new("example.com:my-proj", "d_1", "../../x?alt=media#f");
        assert_eq!(
            RestClient::table_path(&t),
            "projects/example.com:my-proj/datasets/d_1/tables/..%2F..%2Fx%3Falt%3Dmedia%23f"
        );
        assert_eq!(segment(".."), "%2E%2E");
        assert_eq!(segment("tabla con ñ"), "tabla%20con%20%C3%B1");
    }
}
