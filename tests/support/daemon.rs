//! The real daemon binary as a child process, an in-test Schema Registry and small HTTP helpers,
//! for tests that run `kafka-bigquery-sink run` end to end. Included with `#[path]`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The daemon, killed by its pid when dropped.
pub struct Daemon {
    child: Child,
}

impl Daemon {
    /// Starts `run -c config` with `RUST_LOG=rust_log`; stderr (the logs) goes to `log_file`.
    pub fn start(config: &Path, rust_log: &str, log_file: &Path) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_file)
            .expect("open the daemon log file");
        let child = Command::new(env!("CARGO_BIN_EXE_kafka-bigquery-sink"))
            .args(["run", "-c"])
            .arg(config)
            .env("RUST_LOG", rust_log)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn the daemon");
        Daemon { child }
    }

    /// Whether the process is still running (it never restarted or exited).
    pub fn running(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait: the daemon must leave cleanly within its shutdown deadline.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id() as i32;
        // SAFETY: signals the child we spawned, by its pid.
        unsafe {
            libc_kill(pid, 15);
        }
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            if started.elapsed() > Duration::from_secs(40) {
                let _ = self.child.kill();
                panic!("daemon did not stop within 40 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// A free loopback port (bound and released: the daemon binds it right after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A Confluent Schema Registry serving `GET /schemas/ids/{id}` from a fixed map, optionally
/// behind basic auth.
pub struct Registry {
    schemas: HashMap<u32, String>,
    /// The expected `Authorization` header, if any.
    authorization: Option<String>,
    pub requests: Mutex<usize>,
}

impl Registry {
    pub async fn serve(
        schemas: HashMap<u32, String>,
        authorization: Option<String>,
    ) -> (SocketAddr, Arc<Registry>) {
        let reg = Arc::new(Registry {
            schemas,
            authorization,
            requests: Mutex::new(0),
        });
        let app = Router::new()
            .route("/schemas/ids/{id}", get(schema_by_id))
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
}

async fn schema_by_id(
    State(reg): State<Arc<Registry>>,
    UrlPath(id): UrlPath<u32>,
    headers: HeaderMap,
) -> Response {
    *reg.requests.lock().unwrap() += 1;
    if let Some(auth) = &reg.authorization
        && headers.get("authorization").and_then(|h| h.to_str().ok()) != Some(auth.as_str())
    {
        return (
            StatusCode::UNAUTHORIZED,
            r#"{"error_code":401,"message":"Unauthorized"}"#,
        )
            .into_response();
    }
    match reg.schemas.get(&id) {
        Some(schema) => format!(
            r#"{{"schema":{}}}"#,
            serde_json::to_string(schema).expect("json")
        )
        .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            r#"{"error_code":40403,"message":"Schema not found"}"#,
        )
            .into_response(),
    }
}

/// GET `http://addr{path}`: (status, body), or `None` while nothing listens.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let response = reqwest::Client::new()
        .get(format!("http://{addr}{path}"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

/// Polls `check` every 200 ms until it returns `Some` or `timeout` passes.
pub async fn wait_for<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if started.elapsed() > timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
