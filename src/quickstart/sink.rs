//! One incarnation of the sink as a child process of the quickstart (this binary's `run -c`),
//! so that it can be really killed, and what its `/metrics` endpoint reports.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

pub(super) fn free_loopback_port() -> std::io::Result<SocketAddr> {
    // The listener is dropped before the sink binds; the sink's listener sets SO_REUSEADDR, and
    // nothing else on this machine is likely to take the port within the next second.
    let listener = std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    listener.local_addr()
}

pub(super) async fn scrape(client: &reqwest::Client, url: &str) -> Option<String> {
    client.get(url).send().await.ok()?.text().await.ok()
}

/// The sum of a metric's samples in Prometheus text, over the series whose labels contain
/// `label` (all series without it).
pub(super) fn metric(text: &str, name: &str, label: Option<&str>) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let series_name = series.split('{').next()?;
            if series_name != name || label.is_some_and(|l| !series.contains(l)) {
                return None;
            }
            value.parse::<f64>().ok()
        })
        .sum()
}

/// One incarnation of the sink: this binary's `run -c` as a child process.
pub(super) struct Sink {
    child: Child,
    pub(super) pid: u32,
    pub(super) incarnation: u32,
    pub(super) log: PathBuf,
}

impl Sink {
    pub(super) fn spawn(
        exe: &Path,
        config: &Path,
        workdir: &Path,
        incarnation: u32,
    ) -> anyhow::Result<Sink> {
        let log = workdir.join(format!("sink-{incarnation}.log"));
        let out = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone().context("cannot share the log file")?;
        let child = Command::new(exe)
            .arg("run")
            .arg("-c")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .context("cannot start the sink")?;
        Ok(Sink {
            pid: child.id(),
            child,
            incarnation,
            log,
        })
    }

    pub(super) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL: a crash, with no final checkpoint.
    pub(super) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit; SIGKILL after `grace`.
    pub(super) fn terminate(&mut self, grace: Duration) -> Result<(), String> {
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet (so the
        // pid cannot have been reused).
        let sent = unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
        if sent != 0 {
            return Err(format!(
                "cannot send SIGTERM to pid {}: {}",
                self.pid,
                std::io::Error::last_os_error()
            ));
        }
        let until = Instant::now() + grace;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(format!(
                        "sink #{} exited with {status}; see {}",
                        self.incarnation,
                        self.log.display()
                    ));
                }
                Ok(None) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                _ => {
                    self.kill();
                    return Err(format!(
                        "sink #{} did not stop within {}s of SIGTERM; see {}",
                        self.incarnation,
                        grace.as_secs(),
                        self.log.display()
                    ));
                }
            }
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sums_the_series_that_carry_the_label() {
        let text = "# HELP kbq_checkpoints_total x\n\
                    kbq_checkpoints_total{outcome=\"committed\"} 7\n\
                    kbq_checkpoints_total{outcome=\"empty\"} 3\n\
                    kbq_rows_appended_total{table=\"orders\"} 1000\n\
                    kbq_rows_appended_total{table=\"other\"} 5\n\
                    # EOF\n";
        assert_eq!(
            metric(text, "kbq_checkpoints_total", Some("outcome=\"committed\"")),
            7.0
        );
        assert_eq!(metric(text, "kbq_rows_appended_total", None), 1005.0);
        assert_eq!(metric(text, "kbq_rows_flushed_total", None), 0.0);
    }
}
