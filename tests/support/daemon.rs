//! The real daemon binary (`kafka-bigquery-sink run -c config`) as a child process and small HTTP
//! helpers, for the tests that run the daemon end to end (their Schema Registry is
//! [`super::registry::Registry`]).
//! Processes are stopped by their pid only.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const DEFAULT_RUST_LOG: &str = "info,rdkafka=warn";

/// The daemon's binary: `$KBQ_BIN` when set, else the one cargo built beside these tests.
/// `scripts/test.sh` sets it to a copy of that build, so that the Dockerfile check and the
/// benchmark may build their own `target/debug/kafka-bigquery-sink` while the tests run.
pub fn binary() -> PathBuf {
    std::env::var_os("KBQ_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kafka-bigquery-sink")))
}

fn spawn(config: &Path, rust_log: &str, stderr: Stdio, env: &[(&str, &str)]) -> Child {
    Command::new(binary())
        .args(["run", "-c"])
        .arg(config)
        .env("RUST_LOG", rust_log)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn the daemon")
}

/// The real binary running `run -c config`, killed by its pid when dropped. Its stderr (the
/// logs) is kept in memory, or appended to a file the test reads itself.
pub struct Daemon {
    child: Child,
    pub name: String,
    logs: Logs,
    reader: Option<JoinHandle<()>>,
}

enum Logs {
    Memory(Arc<Mutex<Vec<String>>>),
    File(PathBuf),
}

impl Daemon {
    /// `RUST_LOG=info,rdkafka=warn`, logs in memory.
    pub fn start(config: &Path) -> Daemon {
        Daemon::start_named(config, "daemon")
    }

    /// As `start`, with a name for its log lines (several daemons in one test).
    pub fn start_named(config: &Path, name: &str) -> Daemon {
        Daemon::start_with_env(config, name, &[])
    }

    /// As `start_named`, with these variables added to the daemon's environment.
    pub fn start_with_env(config: &Path, name: &str, env: &[(&str, &str)]) -> Daemon {
        let mut child = spawn(config, DEFAULT_RUST_LOG, Stdio::piped(), env);
        let stderr = child.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let verbose = std::env::var_os("KBQ_TEST_DAEMON_LOGS").is_some();
        let label = name.to_string();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if verbose {
                    eprintln!("[{label}] {line}");
                }
                sink.lock().expect("log lines").push(line);
            }
        });
        Daemon {
            child,
            name: name.to_string(),
            logs: Logs::Memory(lines),
            reader: Some(reader),
        }
    }

    /// With `RUST_LOG=rust_log`, stderr appended to `log_file` (several daemons may share one).
    pub fn start_logging_to(config: &Path, rust_log: &str, log_file: &Path) -> Daemon {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_file)
            .expect("open the daemon log file");
        Daemon {
            child: spawn(config, rust_log, Stdio::from(log), &[]),
            name: log_file.display().to_string(),
            logs: Logs::File(log_file.to_path_buf()),
            reader: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    /// SIGKILL: a crash.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.join_reader();
    }

    /// SIGTERM and wait: the daemon must leave cleanly within its shutdown deadline.
    pub fn terminate(&mut self) -> ExitStatus {
        self.terminate_within(Duration::from_secs(60))
    }

    /// As `terminate`, failing the test if the process is still there after `limit`.
    pub fn terminate_within(&mut self, limit: Duration) -> ExitStatus {
        signal(self.child.id(), 15);
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                self.join_reader();
                return status;
            }
            if started.elapsed() > limit {
                let _ = self.child.kill();
                self.dump_logs(60);
                panic!("{} did not stop within {limit:?} of SIGTERM", self.name);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends SIGTERM without waiting.
    pub fn sigterm(&self) {
        signal(self.child.id(), 15);
    }

    /// SIGSTOP: the whole process freezes (librdkafka's heartbeats too), as under CPU
    /// throttling or a node pause.
    pub fn freeze(&self) {
        signal(self.child.id(), 19);
    }

    /// SIGCONT after [`Daemon::freeze`].
    pub fn resume(&self) {
        signal(self.child.id(), 18);
    }

    fn join_reader(&mut self) {
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }

    /// Every log line so far (of the file: of every daemon writing to it).
    pub fn lines(&self) -> Vec<String> {
        match &self.logs {
            Logs::Memory(lines) => lines.lock().expect("log lines").clone(),
            Logs::File(path) => std::fs::read_to_string(path)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect(),
        }
    }

    /// Every log line so far that parses as JSON.
    pub fn logs(&self) -> Vec<serde_json::Value> {
        self.lines()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Log records whose message contains `text`.
    pub fn logged(&self, text: &str) -> Vec<serde_json::Value> {
        self.logs()
            .into_iter()
            .filter(|l| l["message"].as_str().is_some_and(|m| m.contains(text)))
            .collect()
    }

    /// Log records of severity ERROR.
    pub fn errors(&self) -> Vec<serde_json::Value> {
        self.logs()
            .into_iter()
            .filter(|l| l["severity"] == "ERROR")
            .collect()
    }

    pub fn dump_logs(&self, last: usize) {
        let lines = self.lines();
        let from = lines.len().saturating_sub(last);
        eprintln!(
            "---- last {} log lines of {} ----",
            lines.len() - from,
            self.name
        );
        for l in &lines[from..] {
            eprintln!("[{}] {l}", self.name);
        }
    }

    /// The ops endpoint's address, from the daemon's start-up log.
    pub fn ops_addr(&self) -> SocketAddr {
        let started = Instant::now();
        loop {
            if let Some(addr) = self
                .logged("ops endpoints")
                .first()
                .and_then(|l| l["address"].as_str())
                .and_then(|a| a.parse().ok())
            {
                return addr;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{} never logged its ops address",
                self.name
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `GET path` on the ops endpoint: (status, body).
    pub fn http_get(&self, path: &str) -> (u16, String) {
        let addr = self.ops_addr();
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect ops");
        s.set_read_timeout(Some(Duration::from_secs(10))).ok();
        write!(
            s,
            "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .expect("send request");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("read response");
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    /// The sum over the series of metric `name` whose labels contain each of `labels`.
    pub fn metric_with(&self, name: &str, labels: &[&str]) -> f64 {
        let (_, body) = self.http_get("/metrics");
        metric_where(&body, name, labels)
    }

    /// The sum over every series of metric `name` (e.g. `kbq_rewound_records_total`).
    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = self.http_get("/metrics");
        metric_sum(&body, name)
    }
}

/// Sums the samples of `name` whose labels contain every fragment of `labels`.
pub fn metric_where(body: &str, name: &str, labels: &[&str]) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|f| l.contains(f)))
        .map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .map(|v| v.unwrap_or(0.0))
        .sum()
}

/// Sums every sample of `name` in a Prometheus text exposition.
pub fn metric_sum(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            if !(rest.starts_with('{') || rest.starts_with(' ')) {
                return None;
            }
            l.rsplit(' ').next()?.parse::<f64>().ok()
        })
        .sum()
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.join_reader();
        if std::thread::panicking() {
            self.dump_logs(80);
        }
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: signals a child this harness spawned, by its pid.
    unsafe {
        libc_kill(pid as i32, sig);
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
