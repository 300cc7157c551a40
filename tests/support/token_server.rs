//! A local stand-in for Google's token endpoints, on loopback, for the credential-file tests: the
//! OAuth refresh of an authorized user, the security token service of workload and workforce
//! identity federation, IAM's `generateAccessToken` for impersonation, and a URL that serves an
//! external account's subject token. Each answers only the request the credential files written
//! by [`TokenServer::files`] make, with a token of its own, so a bearer token the emulator accepts
//! (`require_token`) proves the whole chain ran: the refresh or exchange, then the impersonation.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use serde_json::{Value, json};

/// What the authorized user's refresh answers.
pub const USER_TOKEN: &str = "kbq-test-user-access-token";
/// What the workforce (external authorized user) refresh answers.
pub const WORKFORCE_TOKEN: &str = "kbq-test-workforce-access-token";
/// What the security token service answers for the subject token.
pub const STS_TOKEN: &str = "kbq-test-federated-access-token";
/// What `generateAccessToken` answers for the impersonated account.
pub const IMPERSONATED_TOKEN: &str = "kbq-test-impersonated-access-token";
/// The identity provider's token an external account presents.
pub const SUBJECT_TOKEN: &str = "kbq-test-oidc-subject-token";
/// The impersonated service account.
pub const TARGET_ACCOUNT: &str = "sink@kbq-test.iam.gserviceaccount.com";
const AUDIENCE: &str = "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool/providers/provider";
const WORKFORCE_AUDIENCE: &str =
    "//iam.googleapis.com/locations/global/workforcePools/pool/providers/provider";
const CLIENT_ID: &str = "kbq-test-client";
const CLIENT_SECRET: &str = "kbq-test-secret";
const REFRESH_TOKEN: &str = "kbq-test-refresh-token";
/// The header the URL-sourced subject token needs (as a cloud's metadata server would).
const SUBJECT_HEADER: (&str, &str) = ("x-kbq-test", "subject");

/// Every request the server answered, by endpoint, with the bearer or subject it presented.
#[derive(Default)]
struct Seen {
    calls: Mutex<Vec<(&'static str, String)>>,
    /// Bearer tokens this server accepts at `generateAccessToken`: the ones it issued, and a
    /// service account's self-signed token, whose claims are checked instead.
    service_account_email: Mutex<Option<String>>,
}

pub struct TokenServer {
    pub addr: SocketAddr,
    seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The credential files of every type, pointing at the server.
pub struct Files {
    pub authorized_user: PathBuf,
    pub workforce_user: PathBuf,
    /// Workload identity federation, subject token from a file, the federated token used as is.
    pub external_file: PathBuf,
    /// Workload identity federation, subject token from a URL, then impersonation.
    pub external_url_impersonated: PathBuf,
    /// An authorized user impersonating [`TARGET_ACCOUNT`].
    pub impersonated: PathBuf,
}

impl TokenServer {
    pub async fn start() -> TokenServer {
        let seen = Arc::new(Seen::default());
        let app = Router::new()
            .route("/oauth2/token", post(user_refresh))
            .route("/workforce/token", post(workforce_refresh))
            .route("/sts/token", post(exchange))
            .route("/subject", get(subject))
            .route(
                "/iam/v1/projects/-/serviceAccounts/{call}",
                post(generate_access_token),
            )
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the token server");
        let addr = listener.local_addr().expect("token server address");
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("token server");
        });
        TokenServer { addr, seen, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The endpoints called so far, in order.
    pub fn calls(&self) -> Vec<&'static str> {
        let calls = self.seen.calls.lock().expect("calls");
        calls.iter().map(|(endpoint, _)| *endpoint).collect()
    }

    /// Accept this service account's self-signed token at `generateAccessToken`.
    pub fn accept_service_account(&self, email: &str) {
        *self.seen.service_account_email.lock().expect("email") = Some(email.to_string());
    }

    /// Writes one credential file of each type into `dir`.
    pub fn files(&self, dir: &Path) -> Files {
        let write = |name: &str, json: Value| {
            let path = dir.join(name);
            std::fs::write(&path, serde_json::to_vec_pretty(&json).expect("json"))
                .expect("write credential file");
            path
        };
        let subject_file = dir.join("oidc-token");
        std::fs::write(&subject_file, SUBJECT_TOKEN).expect("write subject token");
        let user = self.authorized_user();
        Files {
            authorized_user: write("authorized-user.json", user.clone()),
            workforce_user: write(
                "workforce-user.json",
                json!({
                    "type": "external_account_authorized_user",
                    "audience": WORKFORCE_AUDIENCE,
                    "client_id": CLIENT_ID,
                    "client_secret": CLIENT_SECRET,
                    "refresh_token": REFRESH_TOKEN,
                    "token_url": self.url("/workforce/token"),
                    "token_info_url": self.url("/workforce/introspect"),
                }),
            ),
            external_file: write(
                "external-file.json",
                json!({
                    "type": "external_account",
                    "audience": AUDIENCE,
                    "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
                    "token_url": self.url("/sts/token"),
                    "credential_source": {"file": subject_file.display().to_string()},
                }),
            ),
            external_url_impersonated: write(
                "external-url.json",
                json!({
                    "type": "external_account",
                    "audience": AUDIENCE,
                    "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
                    "token_url": self.url("/sts/token"),
                    "service_account_impersonation_url": self.impersonation_url(),
                    "credential_source": {
                        "url": self.url("/subject"),
                        "headers": {SUBJECT_HEADER.0: SUBJECT_HEADER.1},
                        "format": {"type": "json", "subject_token_field_name": "id_token"},
                    },
                }),
            ),
            impersonated: write("impersonated.json", self.impersonating(user)),
        }
    }

    pub fn authorized_user(&self) -> Value {
        json!({
            "type": "authorized_user",
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "refresh_token": REFRESH_TOKEN,
            "token_uri": self.url("/oauth2/token"),
        })
    }

    /// An `impersonated_service_account` file whose source credentials are `source`.
    pub fn impersonating(&self, source: Value) -> Value {
        json!({
            "type": "impersonated_service_account",
            "service_account_impersonation_url": self.impersonation_url(),
            "delegates": [],
            "source_credentials": source,
        })
    }

    fn impersonation_url(&self) -> String {
        self.url(&format!(
            "/iam/v1/projects/-/serviceAccounts/{TARGET_ACCOUNT}:generateAccessToken"
        ))
    }
}

fn refuse(why: String) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({"error": "invalid_grant", "error_description": why})),
    )
        .into_response()
}

/// An `application/x-www-form-urlencoded` body.
fn form(body: &[u8]) -> HashMap<String, String> {
    let decode = |s: &str| {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                    out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                    i += 2;
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

fn bearer(headers: &HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string()
}

/// The authorized user's refresh: a JSON body.
async fn user_refresh(State(seen): State<Arc<Seen>>, Json(body): Json<Value>) -> Response {
    if body["grant_type"] != "refresh_token"
        || body["client_id"] != CLIENT_ID
        || body["client_secret"] != CLIENT_SECRET
        || body["refresh_token"] != REFRESH_TOKEN
    {
        return refuse(format!("unexpected refresh {body}"));
    }
    seen.calls
        .lock()
        .expect("calls")
        .push(("oauth2/token", String::new()));
    Json(json!({"access_token": USER_TOKEN, "token_type": "Bearer", "expires_in": 3600}))
        .into_response()
}

/// The workforce user's refresh: a form, the client in a basic authorization header.
async fn workforce_refresh(
    State(seen): State<Arc<Seen>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = form(&body);
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("{CLIENT_ID}:{CLIENT_SECRET}"));
    let authorized = headers
        .get("authorization")
        .is_some_and(|v| v.as_bytes() == format!("Basic {basic}").as_bytes());
    if !authorized
        || form.get("grant_type").map(String::as_str) != Some("refresh_token")
        || form.get("refresh_token").map(String::as_str) != Some(REFRESH_TOKEN)
    {
        return refuse(format!("unexpected workforce refresh {form:?}"));
    }
    seen.calls
        .lock()
        .expect("calls")
        .push(("workforce/token", String::new()));
    Json(json!({"access_token": WORKFORCE_TOKEN, "token_type": "Bearer", "expires_in": 3600}))
        .into_response()
}

/// The security token service: the subject token for a federated access token.
async fn exchange(State(seen): State<Arc<Seen>>, body: Bytes) -> Response {
    let form = form(&body);
    let field = |name: &str| form.get(name).map(String::as_str);
    if field("grant_type") != Some("urn:ietf:params:oauth:grant-type:token-exchange")
        || field("subject_token") != Some(SUBJECT_TOKEN)
        || field("audience") != Some(AUDIENCE)
    {
        return refuse(format!("unexpected exchange {form:?}"));
    }
    seen.calls
        .lock()
        .expect("calls")
        .push(("sts/token", SUBJECT_TOKEN.to_string()));
    Json(json!({
        "access_token": STS_TOKEN,
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "token_type": "Bearer",
        "expires_in": 3600,
    }))
    .into_response()
}

/// The URL-sourced subject token, as JSON, only with the header the file names.
async fn subject(State(seen): State<Arc<Seen>>, headers: HeaderMap) -> Response {
    if headers.get(SUBJECT_HEADER.0).and_then(|v| v.to_str().ok()) != Some(SUBJECT_HEADER.1) {
        return (StatusCode::FORBIDDEN, "missing header").into_response();
    }
    seen.calls
        .lock()
        .expect("calls")
        .push(("subject", String::new()));
    Json(json!({"id_token": SUBJECT_TOKEN})).into_response()
}

/// IAM's `generateAccessToken`: the caller must present a token this server issued, or the
/// self-signed token of the service account it was told to accept.
async fn generate_access_token(
    State(seen): State<Arc<Seen>>,
    UrlPath(call): UrlPath<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if call != format!("{TARGET_ACCOUNT}:generateAccessToken") {
        return (StatusCode::NOT_FOUND, format!("no such call {call}")).into_response();
    }
    let presented = bearer(&headers);
    let issued_here = [USER_TOKEN, STS_TOKEN, WORKFORCE_TOKEN].contains(&presented.as_str());
    let service_account = seen
        .service_account_email
        .lock()
        .expect("email")
        .clone()
        .is_some_and(|email| self_signed_by(&presented, &email));
    if !issued_here && !service_account {
        return refuse(format!("generateAccessToken with bearer {presented:?}"));
    }
    let scopes = body["scope"].as_array().cloned().unwrap_or_default();
    if !scopes
        .iter()
        .any(|s| s == "https://www.googleapis.com/auth/bigquery")
    {
        return (StatusCode::BAD_REQUEST, format!("scopes {scopes:?}")).into_response();
    }
    seen.calls
        .lock()
        .expect("calls")
        .push(("generateAccessToken", presented));
    Json(json!({"accessToken": IMPERSONATED_TOKEN, "expireTime": "2099-01-01T00:00:00Z"}))
        .into_response()
}

/// The claims of a service account's self-signed token name it as issuer and subject. The
/// signature is the library's business; what this server checks is who it claims to be.
pub fn self_signed_by(token: &str, email: &str) -> bool {
    jwt_claims(token).is_some_and(|c| c["iss"] == email && c["sub"] == email)
}

/// The claims of a JWT (unverified).
pub fn jwt_claims(token: &str) -> Option<Value> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A service-account key file for `email` with a fresh RSA key, made by the `openssl` command.
pub fn service_account_key(dir: &Path, email: &str) -> PathBuf {
    let pem = dir.join("sa-key.pem");
    let status = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&pem)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run openssl");
    assert!(status.success(), "openssl genpkey");
    let key = std::fs::read_to_string(&pem).expect("read key");
    let path = dir.join("service-account.json");
    let json = json!({
        "type": "service_account",
        "project_id": "kbq-test",
        "private_key_id": "kbq-test-key-id",
        "private_key": key,
        "client_email": email,
        "client_id": "1",
        "token_uri": "http://127.0.0.1:9/token",
    });
    std::fs::write(&path, serde_json::to_vec_pretty(&json).expect("json")).expect("write key");
    path
}
