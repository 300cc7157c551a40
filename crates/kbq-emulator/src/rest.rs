//! The BigQuery REST v2 calls of the emulator, in the JSON shapes of the real API: datasets
//! insert/get/delete, tables insert/get/list/patch/update/delete/testIamPermissions,
//! `tabledata.list`, and the SQL of `sql.rs` through `jobs.insert` / `jobs.query` /
//! `jobs.getQueryResults` / `jobs.get`.
//!
//! Enough for Google's `google-cloud-bigquery` client pointed at the emulator with anonymous
//! credentials. Errors are BigQuery's error JSON (`{"error":{"code","message","errors":[{reason}],
//! "status"}}`) with its reasons: `notFound`, `duplicate`, `invalid`, `invalidQuery`.

mod constraints;
mod iam;
mod resources;
mod schema_change;
mod sql;
mod transport;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::faults::Faults;
use crate::rows::RenderOptions;
use crate::store::{Store, StoreError, TableRef};

/// A REST failure in BigQuery's error vocabulary.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RestError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Duplicate(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    InvalidQuery(String),
    #[error("{0}")]
    PreconditionFailed(String),
    #[error("{0}")]
    ResourceInUse(String),
    #[error("{0}")]
    Backend(String),
    #[error("{0}")]
    Denied(String),
    #[error("{0}")]
    Unavailable(String),
}

impl RestError {
    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        match self {
            RestError::NotFound(_) => (StatusCode::NOT_FOUND, "notFound", "NOT_FOUND"),
            RestError::Duplicate(_) => (StatusCode::CONFLICT, "duplicate", "ALREADY_EXISTS"),
            RestError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid", "INVALID_ARGUMENT"),
            RestError::InvalidQuery(_) => {
                (StatusCode::BAD_REQUEST, "invalidQuery", "INVALID_ARGUMENT")
            }
            RestError::PreconditionFailed(_) => (
                StatusCode::PRECONDITION_FAILED,
                "conditionNotMet",
                "FAILED_PRECONDITION",
            ),
            // BigQuery's code and reason for a dataset that still has tables; the `status` of
            // its JSON is not on record, FAILED_PRECONDITION is the gRPC code of a 400 refused
            // for the resource's state.
            RestError::ResourceInUse(_) => (
                StatusCode::BAD_REQUEST,
                "resourceInUse",
                "FAILED_PRECONDITION",
            ),
            RestError::Backend(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "backendError",
                "INTERNAL",
            ),
            RestError::Denied(_) => (StatusCode::FORBIDDEN, "accessDenied", "PERMISSION_DENIED"),
            RestError::Unavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "backendError",
                "UNAVAILABLE",
            ),
        }
    }

    /// The error JSON body of the REST API.
    pub fn body(&self) -> Value {
        let (code, reason, status) = self.parts();
        let message = self.to_string();
        json!({
            "error": {
                "code": code.as_u16(),
                "message": message,
                "errors": [{ "message": message, "domain": "global", "reason": reason }],
                "status": status,
            }
        })
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let (code, _, _) = self.parts();
        (code, axum::Json(self.body())).into_response()
    }
}

impl From<StoreError> for RestError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::DatasetNotFound { project, dataset } => {
                RestError::NotFound(format!("Not found: Dataset {project}:{dataset}"))
            }
            StoreError::DatasetExists { project, dataset } => {
                RestError::Duplicate(format!("Already Exists: Dataset {project}:{dataset}"))
            }
            StoreError::DatasetInUse { project, dataset } => {
                RestError::ResourceInUse(format!("Dataset {project}:{dataset} is still in use"))
            }
            StoreError::TableNotFound { table, .. } => {
                RestError::NotFound(format!("Not found: Table {}", table.legacy()))
            }
            StoreError::TableExists { table } => {
                RestError::Duplicate(format!("Already Exists: Table {}", table.legacy()))
            }
            StoreError::Persist(m) => RestError::Backend(m),
            other => RestError::Invalid(other.to_string()),
        }
    }
}

type RestResult = Result<Response, RestError>;

/// A finished query job: its request and its one-row result.
#[derive(Debug, Clone)]
struct QueryJob {
    project: String,
    job_id: String,
    location: String,
    query: String,
    created_ms: i64,
    result: sql::QueryOutput,
}

#[derive(Clone)]
struct RestState {
    store: Arc<Store>,
    jobs: Arc<Mutex<HashMap<(String, String), QueryJob>>>,
    faults: Arc<Faults>,
}

/// The REST routes over the emulator's store, behind the request decoding of Google's clients
/// (`transport.rs`): every request the other routers of the server do not take comes here.
pub fn router(store: Arc<Store>) -> Router {
    router_with_faults(store, Arc::new(Faults::new()))
}

/// [`router`] under fault rules (`TestIamPermissions`: faults.rs).
pub fn router_with_faults(store: Arc<Store>, faults: Arc<Faults>) -> Router {
    let routes = routes(store, faults);
    Router::new().fallback(move |request: Request| {
        let routes = routes.clone();
        async move {
            match transport::decode(request).await {
                Ok(request) => routes.oneshot(request).await.into_response(),
                Err(e) => e.into_response(),
            }
        }
    })
}

fn routes(store: Arc<Store>, faults: Arc<Faults>) -> Router {
    let state = RestState {
        store,
        jobs: Arc::default(),
        faults,
    };
    let base = "/bigquery/v2/projects/{project}";
    Router::new()
        .route(&format!("{base}/datasets"), post(insert_dataset))
        .route(
            &format!("{base}/datasets/{{dataset}}"),
            get(get_dataset).delete(delete_dataset),
        )
        .route(
            &format!("{base}/datasets/{{dataset}}/tables"),
            post(insert_table).get(list_tables),
        )
        .route(
            &format!("{base}/datasets/{{dataset}}/tables/{{table}}"),
            get(get_table)
                .patch(patch_table)
                .put(update_table)
                .delete(delete_table)
                .post(iam::table_post),
        )
        .route(
            &format!("{base}/datasets/{{dataset}}/tables/{{table}}/data"),
            get(list_table_data),
        )
        .route(&format!("{base}/jobs"), post(insert_job))
        .route(&format!("{base}/jobs/{{job}}"), get(get_job))
        .route(&format!("{base}/queries"), post(run_query))
        .route(&format!("{base}/queries/{{job}}"), get(get_query_results))
        .fallback(|| async {
            RestError::NotFound("Not found: the emulator does not serve this URL".into())
        })
        .with_state(state)
}

fn parse_body(body: &Bytes) -> Result<Value, RestError> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| RestError::Invalid(format!("Invalid JSON payload received. {e}")))?;
    if !value.is_object() {
        return Err(RestError::Invalid(
            "Invalid JSON payload received. Expected an object.".into(),
        ));
    }
    Ok(value)
}

fn ok(value: Value) -> RestResult {
    Ok((StatusCode::OK, axum::Json(value)).into_response())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

// ----- datasets -----

async fn insert_dataset(
    State(state): State<RestState>,
    Path(project): Path<String>,
    body: Bytes,
) -> RestResult {
    let body = parse_body(&body)?;
    let dataset = resources::dataset_from_json(&project, &body)?;
    let dataset = state.store.insert_dataset(dataset)?;
    ok(resources::dataset_json(&dataset))
}

async fn get_dataset(
    State(state): State<RestState>,
    Path((project, dataset)): Path<(String, String)>,
) -> RestResult {
    let found = state
        .store
        .get_dataset(&project, &dataset)
        .ok_or_else(|| RestError::NotFound(format!("Not found: Dataset {project}:{dataset}")))?;
    ok(resources::dataset_json(&found))
}

/// `datasets.delete`: refused while the dataset has tables, unless `deleteContents=true`.
async fn delete_dataset(
    State(state): State<RestState>,
    Path((project, dataset)): Path<(String, String)>,
    Query(params): Query<HashMap<String, String>>,
) -> RestResult {
    state
        .store
        .delete_dataset(&project, &dataset, param_bool(&params, "deleteContents"))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- tables -----

/// A table lives where its dataset lives.
fn location(state: &RestState, r: &TableRef) -> String {
    state
        .store
        .get_dataset(&r.project, &r.dataset)
        .map(|d| d.location)
        .unwrap_or_else(|| "US".into())
}

async fn insert_table(
    State(state): State<RestState>,
    Path((project, dataset)): Path<(String, String)>,
    body: Bytes,
) -> RestResult {
    let body = parse_body(&body)?;
    let table = resources::table_from_json(&project, &dataset, &body)?;
    let table = state.store.insert_table(table)?;
    ok(resources::table_json(
        &table,
        0,
        &location(&state, &table.reference),
    ))
}

async fn get_table(
    State(state): State<RestState>,
    Path((project, dataset, table)): Path<(String, String, String)>,
) -> RestResult {
    let r = TableRef::new(project, dataset, table);
    let found = state
        .store
        .get_table(&r)
        .ok_or_else(|| RestError::NotFound(format!("Not found: Table {}", r.legacy())))?;
    let rows = state.store.visible_row_count(&r).unwrap_or(0);
    ok(resources::table_json(&found, rows, &location(&state, &r)))
}

async fn list_tables(
    State(state): State<RestState>,
    Path((project, dataset)): Path<(String, String)>,
) -> RestResult {
    if state.store.get_dataset(&project, &dataset).is_none() {
        return Err(RestError::NotFound(format!(
            "Not found: Dataset {project}:{dataset}"
        )));
    }
    let tables: Vec<Value> = state
        .store
        .list_tables(&project, &dataset)
        .iter()
        .map(|t| resources::table_list_entry(t, &location(&state, &t.reference)))
        .collect();
    let mut out = json!({ "kind": "bigquery#tableList", "totalItems": tables.len() });
    if !tables.is_empty() {
        out["tables"] = Value::Array(tables);
    }
    ok(out)
}

async fn patch_table(
    State(state): State<RestState>,
    Path((project, dataset, table)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> RestResult {
    let r = TableRef::new(project, dataset, table);
    change_table(state, r, if_match(&headers), body, false)
}

async fn update_table(
    State(state): State<RestState>,
    Path((project, dataset, table)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> RestResult {
    let r = TableRef::new(project, dataset, table);
    change_table(state, r, if_match(&headers), body, true)
}

/// The `If-Match` etag Google's clients send with updates, unquoted.
fn if_match(headers: &HeaderMap) -> Option<String> {
    headers
        .get(axum::http::header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty() && v != "*")
}

/// PATCH changes the fields present in the body; PUT (`replace`) replaces the resource, so the
/// optional fields it leaves out are cleared. The schema may only grow, as in BigQuery. With
/// `If-Match`, the change applies only to the version the caller read, so two writers that race
/// on a schema update cannot silently undo each other.
fn change_table(
    state: RestState,
    r: TableRef,
    etag: Option<String>,
    body: Bytes,
    replace: bool,
) -> RestResult {
    let body = parse_body(&body)?;
    let updated = state.store.update_table(&r, |table| {
        if let Some(etag) = &etag
            && *etag != table.etag
        {
            return Err(RestError::PreconditionFailed(
                "Precondition check failed.".into(),
            ));
        }
        resources::apply_table_change(table, &body, replace)
    })??;
    let rows = state.store.visible_row_count(&r).unwrap_or(0);
    ok(resources::table_json(&updated, rows, &location(&state, &r)))
}

async fn delete_table(
    State(state): State<RestState>,
    Path((project, dataset, table)): Path<(String, String, String)>,
) -> RestResult {
    state
        .store
        .delete_table(&TableRef::new(project, dataset, table))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- tabledata.list -----

/// The most rows one page returns when the caller does not ask for fewer.
const DEFAULT_PAGE_ROWS: usize = 100_000;

fn param_u64(params: &HashMap<String, String>, name: &str) -> Result<Option<u64>, RestError> {
    match params.get(name) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| {
            RestError::Invalid(format!(
                "Invalid value for {name}: {v} is not a valid value"
            ))
        }),
    }
}

fn param_bool(params: &HashMap<String, String>, name: &str) -> bool {
    params
        .get(name)
        .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// `startIndex`, `pageToken` (ours: the next row index) and `maxResults` of a page request.
fn page_window(params: &HashMap<String, String>) -> Result<(u64, usize), RestError> {
    let start = match params.get("pageToken").filter(|t| !t.is_empty()) {
        Some(token) => token
            .parse::<u64>()
            .map_err(|_| RestError::Invalid(format!("Invalid page token: {token}")))?,
        None => param_u64(params, "startIndex")?.unwrap_or(0),
    };
    let max = param_u64(params, "maxResults")?
        .map(|m| m.min(DEFAULT_PAGE_ROWS as u64) as usize)
        .unwrap_or(DEFAULT_PAGE_ROWS);
    Ok((start, max))
}

async fn list_table_data(
    State(state): State<RestState>,
    Path((project, dataset, table)): Path<(String, String, String)>,
    Query(params): Query<HashMap<String, String>>,
) -> RestResult {
    let r = TableRef::new(project, dataset, table);
    let meta = state
        .store
        .get_table(&r)
        .ok_or_else(|| RestError::NotFound(format!("Not found: Table {}", r.legacy())))?;
    let schema = match params.get("selectedFields").filter(|s| !s.is_empty()) {
        Some(selected) => resources::select_fields(&meta.schema, selected)?,
        None => meta.schema.clone(),
    };
    let options = RenderOptions {
        int64_timestamp: param_bool(&params, "formatOptions.useInt64Timestamp"),
    };
    let (start, max) = page_window(&params)?;
    let page = state.store.read_visible_rows(&r, start, max)?;
    let rows: Vec<Value> = page
        .rows
        .iter()
        .map(|row| row.codec.render_with(&row.data, &schema, options))
        .collect();
    let next = start + rows.len() as u64;
    let mut out = json!({
        "kind": "bigquery#tableDataList",
        "etag": meta.etag,
        "totalRows": page.total.to_string(),
    });
    if next < page.total && !rows.is_empty() {
        out["pageToken"] = Value::String(next.to_string());
    }
    if !rows.is_empty() {
        out["rows"] = Value::Array(rows);
    }
    ok(out)
}

// ----- query jobs -----

fn run_sql(
    state: &RestState,
    project: &str,
    sql: &str,
    use_legacy_sql: bool,
) -> Result<sql::QueryOutput, RestError> {
    if use_legacy_sql {
        return Err(RestError::InvalidQuery(
            "unsupported query in the emulator: legacy SQL (set useLegacySql to false)".into(),
        ));
    }
    sql::run(&state.store, project, sql)
}

/// `useLegacySql` defaults to true in the REST API; Google's clients always send false.
fn legacy_sql(config: &Value) -> bool {
    config
        .get("useLegacySql")
        .and_then(Value::as_bool)
        .unwrap_or(true)
}

fn location_of(value: &Value) -> String {
    value
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("US")
        .to_string()
}

fn new_job_id() -> String {
    let bytes: [u8; 16] = rand::random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("job_{hex}")
}

fn remember(state: &RestState, job: QueryJob) {
    state
        .jobs
        .lock()
        .expect("jobs lock")
        .insert((job.project.clone(), job.job_id.clone()), job);
}

fn find_job(state: &RestState, project: &str, job_id: &str) -> Result<QueryJob, RestError> {
    state
        .jobs
        .lock()
        .expect("jobs lock")
        .get(&(project.to_string(), job_id.to_string()))
        .cloned()
        .ok_or_else(|| RestError::NotFound(format!("Not found: Job {project}:{job_id}")))
}

async fn insert_job(
    State(state): State<RestState>,
    Path(project): Path<String>,
    body: Bytes,
) -> RestResult {
    let body = parse_body(&body)?;
    let config = body.pointer("/configuration/query").ok_or_else(|| {
        RestError::Invalid("unsupported job in the emulator: only query jobs run".into())
    })?;
    let sql = config.get("query").and_then(Value::as_str).unwrap_or("");
    let reference = body.get("jobReference").cloned().unwrap_or(Value::Null);
    let job_id = reference
        .get("jobId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(new_job_id);
    if state
        .jobs
        .lock()
        .expect("jobs lock")
        .contains_key(&(project.clone(), job_id.clone()))
    {
        return Err(RestError::Duplicate(format!(
            "Already Exists: Job {project}:{job_id}"
        )));
    }
    let result = run_sql(&state, &project, sql, legacy_sql(config))?;
    let job = QueryJob {
        project: project.clone(),
        job_id,
        location: location_of(&reference["location"]),
        query: sql.to_string(),
        created_ms: now_ms(),
        result,
    };
    remember(&state, job.clone());
    ok(job_json(&job))
}

async fn get_job(
    State(state): State<RestState>,
    Path((project, job_id)): Path<(String, String)>,
) -> RestResult {
    ok(job_json(&find_job(&state, &project, &job_id)?))
}

fn job_reference(job: &QueryJob) -> Value {
    json!({ "projectId": job.project, "jobId": job.job_id, "location": job.location })
}

fn job_json(job: &QueryJob) -> Value {
    let created = job.created_ms.to_string();
    json!({
        "kind": "bigquery#job",
        "etag": format!("\"{}\"", job.job_id),
        "id": format!("{}:{}.{}", job.project, job.location, job.job_id),
        "selfLink": format!(
            "/bigquery/v2/projects/{}/jobs/{}?location={}",
            job.project, job.job_id, job.location
        ),
        "jobReference": job_reference(job),
        "configuration": {
            "jobType": "QUERY",
            "query": { "query": job.query, "useLegacySql": false, "priority": "INTERACTIVE" },
        },
        "status": { "state": "DONE" },
        "statistics": {
            "creationTime": created,
            "startTime": created,
            "endTime": created,
            "totalBytesProcessed": "0",
            "query": {
                "totalBytesProcessed": "0",
                "statementType": job.result.statement_type,
                "cacheHit": false,
            },
        },
        "user_email": "emulator@localhost",
    })
}

/// A page of a job's result: rows `start..start + max`, with a `pageToken` when more follow.
fn query_results_json(
    job: &QueryJob,
    options: RenderOptions,
    kind: &str,
    (start, max): (u64, usize),
) -> Value {
    let total = job.result.rows.len();
    let start = (start.min(total as u64)) as usize;
    let rows = job.result.rows_json(start, max, options);
    let next = start + rows.len();
    let mut out = json!({
        "kind": kind,
        "etag": format!("\"{}\"", job.job_id),
        "jobReference": job_reference(job),
        "totalRows": total.to_string(),
        "totalBytesProcessed": "0",
        "jobComplete": true,
        "cacheHit": false,
    });
    if let Some(schema) = job.result.schema_json() {
        out["schema"] = schema;
    }
    if !rows.is_empty() {
        out["rows"] = Value::Array(rows);
    }
    if next < total && next > start {
        out["pageToken"] = Value::String(next.to_string());
    }
    out
}

async fn run_query(
    State(state): State<RestState>,
    Path(project): Path<String>,
    body: Bytes,
) -> RestResult {
    let body = parse_body(&body)?;
    let sql = body.get("query").and_then(Value::as_str).unwrap_or("");
    let result = run_sql(&state, &project, sql, legacy_sql(&body))?;
    let options = RenderOptions {
        int64_timestamp: body
            .pointer("/formatOptions/useInt64Timestamp")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    };
    let job = QueryJob {
        project: project.clone(),
        job_id: new_job_id(),
        location: location_of(&body["location"]),
        query: sql.to_string(),
        created_ms: now_ms(),
        result,
    };
    remember(&state, job.clone());
    let max = body
        .get("maxResults")
        .and_then(|m| {
            m.as_u64()
                .or_else(|| m.as_str().and_then(|s| s.parse().ok()))
        })
        .map_or(DEFAULT_PAGE_ROWS, |m| (m as usize).min(DEFAULT_PAGE_ROWS));
    ok(query_results_json(
        &job,
        options,
        "bigquery#queryResponse",
        (0, max),
    ))
}

async fn get_query_results(
    State(state): State<RestState>,
    Path((project, job_id)): Path<(String, String)>,
    Query(params): Query<HashMap<String, String>>,
) -> RestResult {
    let job = find_job(&state, &project, &job_id)?;
    let options = RenderOptions {
        int64_timestamp: param_bool(&params, "formatOptions.useInt64Timestamp"),
    };
    ok(query_results_json(
        &job,
        options,
        "bigquery#getQueryResultsResponse",
        page_window(&params)?,
    ))
}
