//! Where a measured process's CPU went, from `/proc` (BENCHMARKS.md, "Method" 4): user and
//! system time of the whole process, and per thread name the CPU time and the context switches
//! of its live threads. What a wakeup costs depends on the machine far more than what a loop
//! of arithmetic costs, so the switches say how much of a run's CPU is the machine's price for
//! handing work between threads.

use std::collections::BTreeMap;

use anyhow::anyhow;
use serde_json::{Value, json};

/// The process's CPU split, and its live threads grouped by name.
#[derive(Debug, Clone, Default)]
pub struct CpuDetail {
    pub user_s: f64,
    pub system_s: f64,
    /// By thread name (`comm`): threads, user s, system s, voluntary and involuntary switches.
    pub threads: BTreeMap<String, ThreadGroup>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadGroup {
    pub count: u32,
    pub user_s: f64,
    pub system_s: f64,
    pub voluntary: u64,
    pub involuntary: u64,
}

fn ticks_per_s() -> f64 {
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64
}

/// utime and stime (fields 14 and 15 of stat(5)) of a `stat` file, in seconds.
fn user_system(stat: &str) -> anyhow::Result<(f64, f64)> {
    // the command name is in parentheses and may hold spaces: fields count from the last `)`
    let rest = &stat[stat.rfind(')').ok_or_else(|| anyhow!("bad /proc stat"))? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let hz = ticks_per_s();
    Ok((
        f[11].parse::<u64>()? as f64 / hz,
        f[12].parse::<u64>()? as f64 / hz,
    ))
}

fn status_field(status: &str, name: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Reads `pid`'s split and its threads now. Threads that already exited count in the process's
/// user and system time but not in the per-thread table.
pub fn read(pid: u32) -> anyhow::Result<CpuDetail> {
    let (user_s, system_s) = user_system(&std::fs::read_to_string(format!("/proc/{pid}/stat"))?)?;
    let mut threads: BTreeMap<String, ThreadGroup> = BTreeMap::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let dir = entry?.path();
        // a thread may exit between the listing and the reads
        let (Ok(stat), Ok(status), Ok(comm)) = (
            std::fs::read_to_string(dir.join("stat")),
            std::fs::read_to_string(dir.join("status")),
            std::fs::read_to_string(dir.join("comm")),
        ) else {
            continue;
        };
        let (user, system) = user_system(&stat)?;
        let group = threads.entry(comm.trim().to_string()).or_default();
        group.count += 1;
        group.user_s += user;
        group.system_s += system;
        group.voluntary += status_field(&status, "voluntary_ctxt_switches:");
        group.involuntary += status_field(&status, "nonvoluntary_ctxt_switches:");
    }
    Ok(CpuDetail {
        user_s,
        system_s,
        threads,
    })
}

impl CpuDetail {
    pub fn switches(&self) -> u64 {
        self.threads
            .values()
            .map(|g| g.voluntary + g.involuntary)
            .sum()
    }

    pub fn to_json(&self) -> Value {
        json!({
            "user_seconds": self.user_s,
            "system_seconds": self.system_s,
            "context_switches_live_threads": self.switches(),
            "threads": self.threads.iter().map(|(name, g)| json!({
                "name": name,
                "count": g.count,
                "user_seconds": g.user_s,
                "system_seconds": g.system_s,
                "voluntary_switches": g.voluntary,
                "involuntary_switches": g.involuntary,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utime_and_stime_are_read_after_a_command_name_with_spaces() {
        let hz = ticks_per_s();
        let stat = "42 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 125 0 0";
        let (u, s) = user_system(stat).unwrap();
        assert!((u - 250.0 / hz).abs() < 1e-9 && (s - 125.0 / hz).abs() < 1e-9);
    }

    #[test]
    fn this_process_has_a_thread_and_its_switches_are_counted() {
        let detail = read(std::process::id()).unwrap();
        assert!(detail.threads.values().map(|g| g.count).sum::<u32>() >= 1);
        assert!(detail.user_s + detail.system_s >= 0.0);
    }
}
