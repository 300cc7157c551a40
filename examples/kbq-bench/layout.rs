//! Where the benchmark's processes run (BENCHMARKS.md, "Method"): pinned, the measured process
//! (the sink or the raw consumer) alone on one core and the broker, the emulator and this driver
//! on the others; unpinned, every process on every core.
//!
//! Pinning goes through `taskset`: measured processes are started under `taskset -c`, and the
//! processes already running (broker, emulator, driver) are moved with `taskset -a -p`, every
//! thread of them (threads created later inherit their creator's mask).

use std::process::Command;

use anyhow::{Context, bail};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// The measured process on `measured`, everything else on `others`.
    Pinned { measured: usize, others: Vec<usize> },
    /// Every process may run on every online core.
    Unpinned { all: Vec<usize> },
}

/// The online cores, from the driver's own affinity at start (so that a benchmark started under
/// `taskset` stays inside its mask).
pub fn online_cores() -> anyhow::Result<Vec<usize>> {
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        bail!("sched_getaffinity: {}", std::io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

fn list(cores: &[usize]) -> String {
    cores
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

impl Layout {
    /// `pinned` or `unpinned` on these cores; the measured core defaults to the last one.
    pub fn parse(name: &str, cores: &[usize], measured: Option<usize>) -> anyhow::Result<Layout> {
        match name {
            "unpinned" => Ok(Layout::Unpinned {
                all: cores.to_vec(),
            }),
            "pinned" => {
                let measured = measured.or(cores.last().copied()).context("no core")?;
                if !cores.contains(&measured) {
                    bail!("core {measured} is not among the usable cores {cores:?}");
                }
                let others: Vec<usize> = cores.iter().copied().filter(|&c| c != measured).collect();
                if others.is_empty() {
                    bail!(
                        "the pinned layout needs at least two cores, this process may use {cores:?}"
                    );
                }
                Ok(Layout::Pinned { measured, others })
            }
            other => bail!("unknown layout {other} (pinned, unpinned)"),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Layout::Pinned { .. } => "pinned",
            Layout::Unpinned { .. } => "unpinned",
        }
    }

    /// The core the measured process runs on alone, if any.
    pub fn measured_core(&self) -> Option<usize> {
        match self {
            Layout::Pinned { measured, .. } => Some(*measured),
            Layout::Unpinned { .. } => None,
        }
    }

    /// The cores of the processes that are not measured.
    fn others(&self) -> &[usize] {
        match self {
            Layout::Pinned { others, .. } => others,
            Layout::Unpinned { all } => all,
        }
    }

    /// A command for a measured process: under `taskset -c CORE` when pinned.
    pub fn command(&self, program: &std::path::Path) -> Command {
        match self.measured_core() {
            Some(core) => {
                let mut c = Command::new("taskset");
                c.arg("-c").arg(core.to_string()).arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    /// Moves every thread of the running, unmeasured processes (the broker, the emulator, this
    /// driver) onto their cores.
    pub fn place(&self, pids: &[u32]) -> anyhow::Result<()> {
        let cores = list(self.others());
        for &pid in pids {
            let out = Command::new("taskset")
                .args(["-a", "-p", "-c", &cores, &pid.to_string()])
                .output()
                .context("cannot run taskset")?;
            if !out.status.success() {
                bail!(
                    "taskset -a -p -c {cores} {pid}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(())
    }
}

/// Busy and total time of one core so far, in clock ticks (`/proc/stat`).
#[derive(Debug, Clone, Copy, Default)]
pub struct CoreTicks {
    pub busy: u64,
    pub total: u64,
}

/// `/proc/stat`'s `cpuN` line: busy is everything but idle and iowait (steal counts as busy:
/// time the hypervisor gave to another guest is time this core did not run our process).
pub fn core_ticks(core: usize) -> anyhow::Result<CoreTicks> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    parse_core_ticks(&stat, core).with_context(|| format!("no cpu{core} line in /proc/stat"))
}

fn parse_core_ticks(stat: &str, core: usize) -> Option<CoreTicks> {
    let prefix = format!("cpu{core} ");
    let line = stat.lines().find(|l| l.starts_with(&prefix))?;
    let v: Vec<u64> = line[prefix.len()..]
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already inside user)
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some(CoreTicks {
        busy: total - idle,
        total,
    })
}

/// Watches the measured core over one run: how much of its time went to anything but the
/// measured process.
pub struct CoreWatch {
    core: usize,
    start: CoreTicks,
}

impl CoreWatch {
    pub fn start(layout: &Layout) -> Option<CoreWatch> {
        let core = layout.measured_core()?;
        Some(CoreWatch {
            core,
            start: core_ticks(core).ok()?,
        })
    }

    /// The share of the core's time since `start` not spent in the measured process, whose CPU
    /// time over the same span is `own_cpu_s` (percent, never below 0).
    pub fn others_pct(&self, own_cpu_s: f64) -> Option<f64> {
        let end = core_ticks(self.core).ok()?;
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let total = (end.total - self.start.total) as f64 / hz;
        let busy = (end.busy - self.start.busy) as f64 / hz;
        (total > 0.0).then(|| ((busy - own_cpu_s) / total * 100.0).max(0.0))
    }
}

/// The load averages and runnable count (`/proc/loadavg`).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_layout_keeps_one_core_for_the_measured_process() {
        let l = Layout::parse("pinned", &[0, 1], None).unwrap();
        assert_eq!(
            l,
            Layout::Pinned {
                measured: 1,
                others: vec![0]
            }
        );
        let l = Layout::parse("pinned", &[0, 1, 2, 3], Some(0)).unwrap();
        assert_eq!(
            l,
            Layout::Pinned {
                measured: 0,
                others: vec![1, 2, 3]
            }
        );
        assert!(Layout::parse("pinned", &[0], None).is_err());
        assert!(Layout::parse("pinned", &[0, 1], Some(5)).is_err());
        assert!(Layout::parse("sideways", &[0, 1], None).is_err());
    }

    #[test]
    fn core_ticks_count_steal_as_busy_and_iowait_as_idle() {
        let stat = "cpu  9 9 9 9 9 9 9 9 0 0\n\
                    cpu0 100 1 50 800 10 2 3 4 0 0\n\
                    cpu1 200 0 100 600 0 0 0 0 0 0\n";
        let t = parse_core_ticks(stat, 0).unwrap();
        assert_eq!(t.total, 970);
        assert_eq!(t.busy, 160);
        let t = parse_core_ticks(stat, 1).unwrap();
        assert_eq!((t.busy, t.total), (300, 900));
        assert!(parse_core_ticks(stat, 2).is_none());
    }
}
