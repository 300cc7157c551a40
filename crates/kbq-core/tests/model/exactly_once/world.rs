//! The world of `exactly_once.rs` (the exactly-once protocol): its replicas, their
//! writers on BUFFERED streams, the requests in their outboxes, how the group moves partitions
//! (eager and cooperative rebalances, the revoke callback under the commit lock, lost sessions
//! and zombies) and the faults a history injects. What the protocol must keep on each step and
//! at the end is in the test file, which defines `World`; the models of Kafka and BigQuery are
//! `support/kafka.rs` and `support/bigquery.rs`.

use super::World;
use crate::support::bigquery::Append;
use crate::support::model::{Delivery, Model, PARTITIONS, REPLICAS, Shell, delivery};
use kbq_core::metadata::{CommitMetadata, TableFingerprint};
use kbq_core::offsets::{Acknowledged, Incarnation, NextOffset, RowCount, RowOffset, StreamId};
use kbq_core::protocol::{
    CheckpointProtocol, CommitEntry, CommitError, CommitId, CommitOutcome, Event, FlushOutcome,
    FlushPurpose, MarkerRequests, RoutedTable, TopicPartition,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Partition index `p` of the model is partition `p / 2` of topic `TOPICS[p % 2]`, each topic
/// routed to its own table.
pub const TOPICS: [&str; 2] = ["orders", "payments"];
pub const ROW_BYTES: u64 = 100;

pub fn tp(p: usize) -> TopicPartition {
    TopicPartition::new(TOPICS[p % TOPICS.len()], (p / TOPICS.len()) as i32)
}

/// The model's index of `tp`.
pub fn index(tp: &TopicPartition) -> usize {
    let topic = TOPICS
        .iter()
        .position(|t| *t == tp.topic)
        .expect("a topic of the model");
    tp.partition as usize * TOPICS.len() + topic
}

/// The table partition `p`'s topic is routed to.
pub fn table(p: usize) -> TableFingerprint {
    let name = TOPICS[p % TOPICS.len()];
    TableFingerprint::of_table_path(&format!("projects/p/datasets/d/tables/{name}"))
}

/// A request a replica sent, waiting in its outbox until a step delivers it.
#[derive(Debug)]
pub enum Request {
    Commit {
        commit: CommitId,
        entries: Vec<CommitEntry>,
    },
    Flush {
        tp: TopicPartition,
        stream: StreamId,
        through: RowOffset,
        purpose: FlushPurpose,
    },
    Finalize {
        p: usize,
        stream: StreamId,
    },
    Resolve {
        tp: TopicPartition,
    },
    Reread {
        tp: TopicPartition,
    },
    /// Writing the group's marker on a table (a label PATCH).
    Label {
        table: TableFingerprint,
    },
}

/// A partition writer: one incarnation, one BUFFERED stream created at its first row.
#[derive(Debug)]
pub struct Writer {
    pub incarnation: Incarnation,
    pub position: i64,
    pub stream: Option<String>,
    pub next_row: i64,
    /// A request sent whose answer has not come back: resent at the same row.
    pub unacked: Option<i64>,
    pub paused: bool,
    pub stopped: bool,
    pub bytes: u64,
}

/// A replica process: the protocol, the shell's inbox and outbox, its writers.
#[derive(Debug)]
pub struct Process {
    pub protocol: CheckpointProtocol,
    pub generation: u64,
    pub writers: BTreeMap<usize, Writer>,
    pub inbox: VecDeque<Event>,
    pub outbox: Vec<Request>,
    /// Partitions whose revocation began: how many handoff commits are still allowed.
    pub revoked: BTreeMap<usize, u32>,
    pub zombies: BTreeSet<usize>,
    /// Partitions this replica's protocol failed because their start lies below the log start
    /// (`recovery.on_out_of_range: fail`), with the Kafka offset where each one stopped: such a
    /// partition makes no progress until an operator acts, by design.
    pub out_of_range: BTreeMap<usize, i64>,
    pub late_stops: BTreeMap<usize, Event>,
    pub shutting_down: bool,
    pub finished: bool,
}

/// One step of a history.
#[derive(Debug, Clone)]
pub enum Op {
    Produce(usize, u8),
    Append(usize, usize, Delivery),
    Tick(usize),
    Deliver(usize, usize, Delivery),
    Crash(usize),
    Start(usize),
    Rebalance {
        eager: bool,
        rotate: usize,
        slow_drain: bool,
    },
    SessionLost(usize),
    Heartbeat(usize),
    CommitFailsFor(usize, u8),
    ExpireStream(usize, bool),
    FinalizeBehindOurBack(usize),
    OperatorReset(usize),
    /// The group stayed empty past `offsets.retention.minutes`: Kafka drops every committed
    /// offset and its metadata.
    OffsetsExpire,
    Retention(usize),
    Shutdown(usize),
    ShutdownDeadline(usize),
}

pub fn op() -> impl Strategy<Value = Op> {
    let r = 0..REPLICAS;
    let p = 0..PARTITIONS;
    prop_oneof![
        3 => (p.clone(), 1..4u8).prop_map(|(p, n)| Op::Produce(p, n)),
        12 => (r.clone(), p.clone(), delivery()).prop_map(|(r, p, d)| Op::Append(r, p, d)),
        6 => r.clone().prop_map(Op::Tick),
        12 => (r.clone(), 0..4usize, delivery()).prop_map(|(r, i, d)| Op::Deliver(r, i, d)),
        1 => r.clone().prop_map(Op::Crash),
        2 => r.clone().prop_map(Op::Start),
        2 => (any::<bool>(), 0..2usize, prop::bool::weighted(0.3))
            .prop_map(|(eager, rotate, slow_drain)| Op::Rebalance { eager, rotate, slow_drain }),
        1 => r.clone().prop_map(Op::SessionLost),
        2 => r.clone().prop_map(Op::Heartbeat),
        1 => (p.clone(), 1..5u8).prop_map(|(p, n)| Op::CommitFailsFor(p, n)),
        1 => (p.clone(), any::<bool>()).prop_map(|(p, w)| Op::ExpireStream(p, w)),
        1 => p.clone().prop_map(Op::FinalizeBehindOurBack),
        1 => p.clone().prop_map(Op::OperatorReset),
        1 => Just(Op::OffsetsExpire),
        1 => p.clone().prop_map(Op::Retention),
        1 => r.clone().prop_map(Op::Shutdown),
        1 => r.prop_map(Op::ShutdownDeadline),
    ]
}

impl Model for World {
    type Op = Op;

    fn start(&mut self, r: usize) {
        if self.procs[r].is_some() {
            return;
        }
        self.procs[r] = Some(Process {
            protocol: CheckpointProtocol::new(self.config.clone()),
            generation: 0,
            writers: BTreeMap::new(),
            inbox: VecDeque::new(),
            outbox: Vec::new(),
            revoked: BTreeMap::new(),
            zombies: BTreeSet::new(),
            out_of_range: BTreeMap::new(),
            late_stops: BTreeMap::new(),
            shutting_down: false,
            finished: false,
        });
        self.kafka.members.insert(r);
        self.rebalance(false, 0);
    }

    fn step(&mut self, op: &Op) {
        self.trace.push(format!("== {op:?}"));
        match *op {
            Op::Produce(p, n) => self.kafka.high[p] += i64::from(n),
            Op::Append(r, p, d) => self.append(r, p, d),
            Op::Tick(r) => self.post(r, Event::StartCycle),
            Op::Deliver(r, i, d) => self.deliver(r, i, d),
            Op::Crash(r) => self.crash(r),
            Op::Start(r) => self.start(r),
            Op::Rebalance {
                eager,
                rotate,
                slow_drain,
            } => {
                self.slow_drain = slow_drain;
                self.rebalance(eager, rotate);
                self.slow_drain = false;
            }
            Op::SessionLost(r) => self.session_lost(r),
            Op::Heartbeat(r) => self.heartbeat(r),
            Op::CommitFailsFor(p, n) => self.kafka.fail_next_commits[p] = u32::from(n),
            Op::ExpireStream(p, checkpointed) => {
                let target = if checkpointed {
                    match self.kafka.durable(p) {
                        Some((
                            _,
                            CommitMetadata::ExactlyOnce {
                                stream: Some(s), ..
                            },
                        )) => Some(s.to_string()),
                        _ => None,
                    }
                } else {
                    self.current_stream(p)
                };
                if let Some(id) = target
                    && self.bq.expire(&id)
                {
                    self.injected_loss.insert(id);
                }
            }
            Op::FinalizeBehindOurBack(p) => {
                if let Some(id) = self.current_stream(p)
                    && self.bq.finalize_behind_our_back(&id)
                {
                    self.injected_loss.insert(id);
                }
            }
            Op::OperatorReset(p) => {
                // kafka-consumer-groups --reset-offsets needs an inactive group.
                if self.procs.iter().all(Option::is_none)
                    && let Some((k, _)) = self.kafka.committed[p].clone()
                {
                    let visible = self.bq.visible(p);
                    for x in 0..k {
                        if !visible.contains_key(&x) {
                            self.may_be_missing.insert((p, x));
                        }
                    }
                    self.kafka.committed[p] = Some((k, String::new()));
                }
            }
            Op::OffsetsExpire => {
                // Only an empty group's offsets expire; a replica alive is in the group or
                // about to notice it is not.
                if self.procs.iter().all(Option::is_none) {
                    self.kafka.expire_offsets();
                }
            }
            Op::Retention(p) => {
                // Deletes up to what was committed and what no live reader still needs; in a
                // history whose retention overtakes readers (as time-based retention does with
                // a reader that lags), also the next record the most lagging reader needs, so its
                // next fetch is out of range.
                let mut upto = self.kafka.committed[p].as_ref().map_or(0, |(k, _)| *k);
                let mut lagging: Option<i64> = None;
                for proc in self.procs.iter().flatten() {
                    if let Some(w) = proc.writers.get(&p) {
                        let needs = w.unacked.unwrap_or(w.position);
                        upto = upto.min(needs);
                        lagging = Some(lagging.map_or(needs, |l| l.min(needs)));
                    }
                }
                if self.retention_overtakes
                    && let Some(needs) = lagging
                {
                    upto = upto.max((needs + 1).min(self.kafka.high[p]));
                }
                self.kafka.low[p] = self.kafka.low[p].max(upto);
            }
            Op::Shutdown(r) => {
                if let Some(proc) = self.procs[r].as_mut() {
                    proc.shutting_down = true;
                }
                self.post(r, Event::Shutdown);
            }
            Op::ShutdownDeadline(r) => {
                if self.procs[r].as_ref().is_some_and(|p| p.shutting_down) {
                    self.post(r, Event::ShutdownDeadline);
                }
            }
        }
    }

    /// No more faults: everyone up, one eager rebalance, then run until every partition rests
    /// at f == K at the end of its log; then stop both replicas with SIGTERM.
    fn quiesce(&mut self) {
        self.trace.push("== quiesce".into());
        self.kafka.fail_next_commits = [0; PARTITIONS];
        for r in 0..REPLICAS {
            self.heartbeat(r);
        }
        for r in 0..REPLICAS {
            self.start(r);
        }
        self.rebalance(true, 0);
        for _round in 0..200 {
            for r in 0..REPLICAS {
                self.start(r);
                self.heartbeat(r);
                self.drain(r);
                for p in 0..PARTITIONS {
                    for _ in 0..64 {
                        self.append(r, p, Delivery::Ok);
                    }
                }
                self.post(r, Event::StartCycle);
                self.drain(r);
            }
            if self.rested() {
                break;
            }
        }
        if !self.rested() {
            self.fail(format!(
                "no progress: partitions do not rest, committed={:?} high={:?}",
                self.kafka.committed, self.kafka.high
            ));
        }
        // What the oracle must know once the replicas are gone: where a partition stopped.
        for p in 0..PARTITIONS {
            self.stopped[p] = self.stopped_out_of_range(p);
            if self.stopped[p].is_some() {
                self.reached.insert("stopped out of range".into());
            }
        }
        for r in 0..REPLICAS {
            self.step(&Op::Shutdown(r));
            for _ in 0..20 {
                if self.procs[r].is_none() {
                    break;
                }
                self.drain(r);
                self.post(r, Event::StartCycle);
                self.drain(r);
            }
            if self.procs[r].is_some() {
                self.fail(format!("r{r} did not finish its shutdown"));
            }
        }
    }

    fn check(&mut self) {
        self.check_exactly_once();
    }
}

impl World {
    /// Where in replica `r`'s outbox the first request `is` picks waits (`r` is alive).
    pub fn pending(&self, r: usize, is: impl Fn(&Request) -> bool) -> Option<usize> {
        let proc = self.procs[r].as_ref().expect("alive");
        proc.outbox.iter().position(is)
    }

    pub fn crash(&mut self, r: usize) {
        if self.procs[r].take().is_some() {
            self.trace.push(format!("crash r{r}"));
            // The session times out; the group moves on without a revoke callback.
            if self.kafka.members.remove(&r) {
                self.rebalance(false, 0);
            }
        }
    }

    /// Takes request `i` of replica `r` out of its outbox and lets it take effect.
    pub fn deliver(&mut self, r: usize, i: usize, d: Delivery) {
        let Some(proc) = self.procs[r].as_mut() else {
            return;
        };
        if proc.outbox.is_empty() {
            return;
        }
        let req = proc.outbox.remove(i % proc.outbox.len());
        self.trace.push(format!("deliver r{r} {req:?} {d:?}"));
        let (applied, lost) = (d.applied(), d.failed());
        let event = match req {
            Request::Commit { commit, entries } => {
                // A commit that did not apply is read back (nothing landed: per-partition
                // errors); one whose answer was lost could not be read back either (Rejected).
                let outcome = if applied {
                    self.apply_commit(r, &entries)
                } else {
                    not_applied(&entries, "request timed out")
                };
                let outcome = if applied && lost {
                    CommitOutcome::Rejected("timeout; read-back failed".into())
                } else {
                    outcome
                };
                Event::CommitResult { commit, outcome }
            }
            Request::Flush {
                tp,
                stream,
                through,
                purpose,
            } => {
                let p = index(&tp);
                let outcome = if applied {
                    self.apply_flush(p, &stream, through)
                } else {
                    FlushOutcome::Transient("unavailable".into())
                };
                let outcome = if lost {
                    FlushOutcome::Transient("deadline exceeded".into())
                } else {
                    outcome
                };
                purpose.answer(tp, stream, through, outcome)
            }
            Request::Finalize { p, stream } => {
                let outcome = if applied {
                    self.apply_finalize(p, &stream)
                } else {
                    Err("unavailable".into())
                };
                let outcome = if lost {
                    Err("deadline exceeded".into())
                } else {
                    outcome
                };
                Event::FinalizeResult {
                    tp: tp(p),
                    stream,
                    outcome,
                }
            }
            Request::Reread { tp } => {
                // OffsetFetch needs no membership; a failed one is retried by the shell until
                // it answers, so every delivery answers.
                let assignment = self.kafka.assignment(index(&tp));
                Event::CheckpointReread { tp, assignment }
            }
            Request::Label { table } => {
                if applied {
                    self.bq.mark(&table);
                }
                let outcome = if lost {
                    Err("label write failed".into())
                } else {
                    Ok(())
                };
                Event::LabelResult { table, outcome }
            }
            Request::Resolve { tp } => {
                let outcome = if lost {
                    Err("query failed".into())
                } else {
                    Ok(self.bq.highest_visible(index(&tp)))
                };
                Event::ResolveResult { tp, outcome }
            }
        };
        self.post(r, event);
    }

    pub fn append(&mut self, r: usize, p: usize, d: Delivery) {
        let low = self.kafka.low[p];
        let high = self.kafka.high[p];
        let Some(proc) = self.procs[r].as_mut() else {
            return;
        };
        let Some(w) = proc.writers.get_mut(&p) else {
            return;
        };
        if w.stopped || w.paused || (w.unacked.is_none() && w.position >= high) {
            return;
        }
        if w.unacked.is_none() && w.position < low {
            // auto.offset.reset=error: the daemon decides.
            let event = Event::OffsetOutOfRange {
                tp: tp(p),
                incarnation: w.incarnation,
                position: NextOffset(w.position),
                low: NextOffset(low),
            };
            self.post(r, event);
            // Which way the policy took: past the deleted range, or the partition stopped.
            let after = self.procs[r].as_ref().and_then(|proc| proc.writers.get(&p));
            let kind = match after.map(|w| w.position) {
                None => "stopped",
                Some(x) if x >= low => "skipped",
                Some(_) => "ignored",
            };
            self.reached.insert(format!("OffsetOutOfRange:{kind}"));
            return;
        }
        // A resend carries the record it was built from, even if retention deleted it since.
        let record = w.unacked.unwrap_or(w.position);
        // CreateWriteStream, lazily at the first row of the incarnation.
        let stream = w
            .stream
            .get_or_insert_with(|| self.bq.create_stream(p))
            .clone();
        let row = w.next_row;
        let sid = StreamId::new(stream.clone()).expect("model ids are valid");
        match self.bq.append(&stream, row, record, d) {
            Append::StreamLost => {
                let tp = tp(p);
                return self.post(r, Event::StreamLost { tp, stream: sid });
            }
            Append::StreamFinalized => {
                let tp = tp(p);
                return self.post(r, Event::ZombieDetected { tp, stream: sid });
            }
            // ALREADY_EXISTS: success only because this incarnation sent this very request.
            Append::AlreadyExists(held) => assert!(w.unacked == Some(record) && held == record),
            Append::NotLanded => {
                w.unacked = Some(record);
                return;
            }
            Append::Landed if d.failed() => {
                w.unacked = Some(record);
                return;
            }
            Append::Landed => {}
            Append::Beyond(len) => {
                let why = format!("append to {stream} at row {row} beyond {len}");
                self.fail(why);
            }
        }
        w.unacked = None;
        w.next_row += 1;
        w.position = record + 1;
        w.bytes += ROW_BYTES;
        let ack = Acknowledged::from_append_response(
            w.incarnation,
            sid,
            RowCount(w.next_row),
            NextOffset(w.position),
            w.bytes,
        );
        self.post(r, Event::RowsAcknowledged { tp: tp(p), ack });
    }

    /// A rebalance: revoke (eager: everything; cooperative: what moves), wait for the handoffs,
    /// bump the generation, assign.
    pub fn rebalance(&mut self, eager: bool, rotate: usize) {
        // A member leaving inside a rebalance (its shutdown finished in a revoke callback)
        // triggers the next rebalance, after this one.
        if self.rebalancing {
            self.rebalance_again = true;
            return;
        }
        self.rebalancing = true;
        self.rebalance_once(eager, rotate);
        while std::mem::take(&mut self.rebalance_again) {
            self.rebalance_once(false, 0);
        }
        self.rebalancing = false;
    }

    pub fn rebalance_once(&mut self, eager: bool, rotate: usize) {
        let members: Vec<usize> = self.kafka.members.iter().copied().collect();
        let target: Vec<Option<usize>> = (0..PARTITIONS)
            .map(|p| (!members.is_empty()).then(|| members[(p + rotate) % members.len()]))
            .collect();
        self.trace
            .push(format!("rebalance eager={eager} target={target:?}"));
        for p in 0..PARTITIONS {
            let Some(owner) = self.kafka.owner[p] else {
                continue;
            };
            let moving = target[p] != Some(owner);
            if !self.kafka.members.contains(&owner) || !(eager || moving) {
                continue;
            }
            self.revoke(owner, p);
        }
        self.kafka.generation += 1;
        for &m in &members {
            if let Some(proc) = self.procs[m].as_mut() {
                proc.generation = self.kafka.generation;
            }
        }
        for p in 0..PARTITIONS {
            let before = self.kafka.owner[p];
            self.kafka.owner[p] = target[p];
            let Some(m) = target[p] else { continue };
            let kept = before == Some(m) && !eager && self.kafka.members.contains(&m);
            if !kept {
                self.assign(m, p);
            }
        }
    }

    pub fn assign(&mut self, r: usize, p: usize) {
        let assignment = self.kafka.assignment(p);
        if let Some(proc) = self.procs[r].as_mut() {
            proc.revoked.remove(&p);
            proc.zombies.remove(&p);
            proc.out_of_range.remove(&p);
        }
        self.post(
            r,
            Event::Assigned {
                tp: tp(p),
                table: RoutedTable {
                    table: table(p),
                    marked: self.bq.is_marked(&table(p)),
                },
                assignment,
                read_at: MarkerRequests::ALL,
            },
        );
    }

    /// The revoke callback of `r` for `p`: under the commit lock, one handoff commit at most.
    pub fn revoke(&mut self, r: usize, p: usize) {
        let Some(proc) = self.procs[r].as_mut() else {
            return;
        };
        let _ = proc;
        // L4: commits already handed to librdkafka complete before the member rejoins.
        self.deliver_commits(r);
        if self.procs[r].is_none() {
            return;
        }
        let proc = self.procs[r].as_mut().expect("alive");
        proc.revoked.insert(p, 1);
        self.post(
            r,
            Event::RevokeBegan {
                tp: tp(p),
                lost: false,
            },
        );
        if let Some(proc) = self.procs[r].as_mut()
            && let Some(stopped) = proc.late_stops.remove(&p)
        {
            // The writer's drain outlives the handoff deadline: every remaining step is
            // cancelled, and its late answer changes nothing.
            self.post(r, Event::HandoffDeadline { tp: tp(p) });
            self.post(r, stopped);
        }
        // The handoff commit runs inside the callback: deliver it now.
        self.deliver_commits(r);
    }

    pub fn deliver_commits(&mut self, r: usize) {
        // Each commit delivered may make the machine send another; a machine that always does
        // commits without end (seed 16002392437258046416 did, and ate the soak's memory).
        for delivered in 0.. {
            if delivered == 1_000 {
                self.trace.fail(format!(
                    "r{r} sent a commit after each of 1,000 commits delivered"
                ));
            }
            let Some(proc) = self.procs[r].as_mut() else {
                return;
            };
            let Some(i) = proc
                .outbox
                .iter()
                .position(|q| matches!(q, Request::Commit { .. }))
            else {
                return;
            };
            self.deliver(r, i, Delivery::Ok);
        }
    }

    pub fn session_lost(&mut self, r: usize) {
        if self.procs[r].is_some() && self.kafka.members.remove(&r) {
            self.trace.push(format!("session lost r{r}"));
            // The group reassigns without calling r: r is a zombie until it notices.
            self.rebalance(false, 0);
        }
    }

    pub fn heartbeat(&mut self, r: usize) {
        let Some(proc) = self.procs[r].as_ref() else {
            return;
        };
        if !self.kafka.members.contains(&r) {
            // The member learns it was fenced: everything it held is lost, then it rejoins.
            // Commits it handed over before complete first (L4), with its stale generation.
            self.deliver_commits(r);
            let Some(proc) = self.procs[r].as_ref() else {
                return;
            };
            let held: Vec<_> = proc.protocol.partitions().cloned().collect();
            for t in held {
                if let Some(proc) = self.procs[r].as_mut() {
                    proc.revoked.insert(index(&t), 0);
                }
                self.post(r, Event::RevokeBegan { tp: t, lost: true });
            }
            let Some(proc) = self.procs[r].as_mut() else {
                return;
            };
            proc.writers.clear();
            proc.out_of_range.clear();
            if !proc.shutting_down {
                self.kafka.members.insert(r);
                self.rebalance(false, 0);
            }
            return;
        }
        // A zombie partition: the group says whether we still own it.
        let zombies: Vec<_> = proc.zombies.iter().copied().collect();
        for p in zombies {
            if self.kafka.owner[p] == Some(r) {
                self.assign(r, p);
            } else if let Some(proc) = self.procs[r].as_mut() {
                proc.revoked.insert(p, 0);
                self.post(
                    r,
                    Event::RevokeBegan {
                        tp: tp(p),
                        lost: true,
                    },
                );
            }
        }
    }

    pub fn current_stream(&self, p: usize) -> Option<String> {
        let owner = self.kafka.owner[p]?;
        self.procs[owner].as_ref()?.writers.get(&p)?.stream.clone()
    }

    pub fn drain(&mut self, r: usize) {
        for _ in 0..1000 {
            match self.procs[r].as_ref() {
                Some(proc) if !proc.outbox.is_empty() => self.deliver(r, 0, Delivery::Ok),
                _ => return,
            }
        }
    }

    /// Every partition rests at f == K at the end of its log, or was stopped on purpose: its
    /// owner's protocol failed it because its start lies below the log start, which under
    /// `recovery.on_out_of_range: fail` holds until an operator acts (no progress is due from it;
    /// the oracle checks what it left behind).
    pub fn rested(&self) -> bool {
        (0..PARTITIONS).all(|p| {
            self.stopped_out_of_range(p).is_some()
                || match self.kafka.durable(p) {
                    Some((
                        k,
                        CommitMetadata::ExactlyOnce {
                            visible_through, ..
                        },
                    )) => k == self.kafka.high[p] && visible_through.0 == k,
                    _ => false,
                }
        })
    }

    /// Where partition `p` stopped, when the member the group assigned it to holds it failed
    /// for out-of-range.
    pub fn stopped_out_of_range(&self, p: usize) -> Option<i64> {
        let r = self.kafka.owner[p]?;
        if !self.kafka.members.contains(&r) {
            return None;
        }
        self.procs[r].as_ref()?.out_of_range.get(&p).copied()
    }
}

/// A commit that did not land, answered after a read-back that worked.
pub fn not_applied(entries: &[CommitEntry], why: &str) -> CommitOutcome {
    CommitOutcome::PerPartition(
        entries
            .iter()
            .map(|e| (e.tp.clone(), Err(CommitError::Request(why.into()))))
            .collect(),
    )
}
