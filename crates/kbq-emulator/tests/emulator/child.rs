//! The emulator's own binary as a child process, for the tests that restart it (its journal
//! across a SIGKILL).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `kbq-emulator` binary as a child process; killed (by its pid) on drop.
pub struct ChildEmulator {
    child: Child,
    pub addr: SocketAddr,
}

impl ChildEmulator {
    /// Spawns `kbq-emulator --listen 127.0.0.1:0 <extra args>` and waits for its address line.
    pub fn spawn(extra: &[&str]) -> ChildEmulator {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kbq-emulator"))
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the emulator binary");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let started = Instant::now();
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("the emulator did not print its address");
            }
        };
        let addr = line
            .trim()
            .strip_prefix("emulator listening on ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| {
                let _ = child.kill();
                panic!("unexpected first line from the emulator: {line:?}")
            });
        eprintln!("emulator child up on {addr} after {:?}", started.elapsed());
        ChildEmulator { child, addr }
    }

    /// SIGKILL, as a crash would; waits for the process to be gone.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildEmulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
