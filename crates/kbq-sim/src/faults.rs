//! The seeded fault schedule, per step of the driver: processes killed (SIGKILL), frozen past
//! their session timeout (SIGSTOP) and resumed, stopped (SIGTERM) and restarted from the
//! durable state; streams expiring; and the records produced (some too long for their column,
//! some tombstones: row errors in the middle of a request and bad records).

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::bigquery::short;
use super::driver::Sim;
use super::world::{FROZEN, Produced, RUNNING, World, lock};
use super::{KEYS_PER_PARTITION, MAX_PAYLOAD, Mode, PARTITIONS, REPLICAS, SESSION_TIMEOUT};

impl Sim {
    pub(super) fn faults_step(&mut self) {
        let now = Instant::now();
        self.restart_and_resume(now);
        let (faults, roll, r) = {
            let mut w = self.w();
            (
                w.faults,
                w.rng.random::<f64>(),
                w.rng.random_range(0..REPLICAS),
            )
        };
        if !faults {
            return;
        }
        // Per 10 ms step: a crash every ~25 s, a freeze every ~25 s, a SIGTERM every ~50 s, a
        // stream expiry every ~50 s, a produced record every ~30 ms.
        if roll < 0.0004 {
            if self.procs[r].is_some() {
                self.w().count("sigkills");
            }
            self.crash(r);
        } else if roll < 0.0008 {
            self.freeze(r, now);
        } else if roll < 0.001 {
            self.sigterm(r);
        } else if roll < 0.0012 {
            self.expire_a_stream();
        }
    }

    /// Processes due to restart start; frozen ones due to resume resume (an expelled one
    /// learns it at a heartbeat a little later).
    fn restart_and_resume(&mut self, now: Instant) {
        for r in 0..REPLICAS {
            if self.procs[r].is_none() && self.restart_at[r].is_some_and(|t| now >= t) {
                self.restart_at[r] = None;
                self.start(r);
            }
            if let Some(proc) = self.procs[r].as_mut()
                && proc.frozen_until.is_some_and(|t| now >= t)
            {
                proc.frozen_until = None;
                proc.gate.set(RUNNING);
                if proc.consumer.expelled.is_some() {
                    let heartbeat =
                        Duration::from_millis(lock(&self.world).rng.random_range(100..3_000));
                    proc.consumer.expelled = Some(Some(now + heartbeat));
                }
                self.trace(format!("process r{r} resumes (SIGCONT)"));
            }
        }
    }

    /// SIGSTOP: a running process freezes for up to three session timeouts.
    fn freeze(&mut self, r: usize, now: Instant) {
        if let Some(proc) = self.procs[r].as_mut()
            && proc.frozen_until.is_none()
        {
            let secs = self
                .world
                .lock()
                .expect("world")
                .rng
                .random_range(1..(3 * SESSION_TIMEOUT.as_secs()));
            let proc = self.procs[r].as_mut().expect("checked");
            proc.frozen_until = Some(now + Duration::from_secs(secs));
            proc.gate.set(FROZEN);
            lock(&self.world).count("sigstops");
            self.trace(format!("process r{r} frozen for {secs} s (SIGSTOP)"));
        }
    }

    /// SIGTERM: a running process that is not stopping yet begins its clean stop.
    fn sigterm(&mut self, r: usize) {
        if let Some(proc) = self.procs[r].as_mut()
            && proc.shutdown_at.is_none()
            && proc.frozen_until.is_none()
        {
            if let Some(c) = proc.coordinator.as_mut() {
                proc.shutdown_at = Some(c.step_shutdown());
            }
            self.w().count("sigterms");
            self.trace(format!("process r{r} gets SIGTERM"));
        }
    }

    /// One live stream of the sink (not finalized by it) expires in BigQuery.
    fn expire_a_stream(&mut self) {
        let mut w = self.w();
        let live: Vec<String> = w
            .streams
            .iter()
            .filter(|(n, s)| !s.finalized_by_sink && !w.injected_loss.contains(*n))
            .map(|(n, _)| n.clone())
            .collect();
        if !live.is_empty() {
            let pick = live[w.rng.random_range(0..live.len())].clone();
            let name = w.store_name(&pick);
            let _ = w.store.expire_now(&name);
            w.injected_loss.insert(pick.clone());
            w.count("expiries");
            w.trace(format!("bq {} expires (injected)", short(&pick)));
        }
    }

    pub(super) fn produce(&mut self) {
        let mut w = self.w();
        if !w.faults || !w.rng.random_bool(0.3) {
            return;
        }
        let p = w.rng.random_range(0..PARTITIONS);
        let record = match w.mode {
            Mode::Cdc { .. } => change(&mut w, p),
            _ => {
                let payload = match w.rng.random_range(0..100) {
                    0..3 => Some("x".repeat(MAX_PAYLOAD + 4)),
                    3..4 => None,
                    _ => Some(format!("v{}", w.logs[p].len() % 1000)),
                };
                Produced {
                    payload,
                    change: None,
                    at: w.now(),
                }
            }
        };
        w.logs[p].push(record);
    }

    /// Kafka's retention (with [`crate::Params::retention`]): a record is deleted once it is
    /// older than `retention.ms`, read or not, and the log start moves past it. Not a fault: it
    /// goes on after the faults end. Draws nothing from the generator.
    pub(super) fn retain(&mut self) {
        let mut w = self.w();
        let Some(retention) = w.retention else {
            return;
        };
        let now = w.now();
        for p in 0..PARTITIONS {
            let start = w.log_start[p];
            let mut low = start;
            while (w.logs[p].get(low as usize)).is_some_and(|r| r.at + retention <= now) {
                low += 1;
            }
            if low > start {
                w.log_start[p] = low;
            }
        }
    }
}

/// The next change of partition `p`'s keys, as Debezium writes them: a key's changes stay in
/// its partition (`k % PARTITIONS == p`); inserts of absent keys (`c`, now and then a snapshot
/// read `r`), updates and deletes of present ones, re-inserts of deleted keys, a tombstone after
/// some deletes, and often the same key again at once, so that one request holds several changes
/// of a key. Bad records: a payload too long for its column (a row error at BigQuery), a
/// truncate (`t`) and an unknown operation.
fn change(w: &mut World, p: usize) -> Produced {
    let offset = w.logs[p].len();
    let previous = w.logs[p].iter().rev().find_map(|r| r.change);
    if let Some((k, 'd')) = previous
        && w.logs[p].last().is_some_and(|r| r.payload.is_some())
        && w.rng.random_bool(0.5)
    {
        return Produced {
            payload: None,
            change: Some((k, 'd')),
            at: w.now(),
        };
    }
    let k = match previous {
        Some((k, _)) if w.rng.random_bool(0.35) => k,
        _ => p as i64 + PARTITIONS as i64 * w.rng.random_range(0..KEYS_PER_PARTITION),
    };
    let live = w.source.contains(&k);
    let roll = w.rng.random_range(0..100);
    let op = match roll {
        0..2 => 't',
        2..3 => 'x',
        _ if !live && roll < 10 => 'r',
        _ if !live => 'c',
        _ if roll < 30 => 'd',
        _ => 'u',
    };
    let payload = if matches!(op, 'c' | 'r' | 'u') && w.rng.random_bool(0.03) {
        "x".repeat(MAX_PAYLOAD + 4)
    } else {
        format!("v{}", offset % 1000)
    };
    // The source database's state: a change that BigQuery refuses (too long) still happened
    // at the source; the reference state is what the sink can apply.
    match op {
        'c' | 'r' | 'u' => {
            w.source.insert(k);
        }
        'd' => {
            w.source.remove(&k);
        }
        _ => {}
    }
    Produced {
        payload: Some(payload),
        change: Some((k, op)),
        at: w.now(),
    }
}
