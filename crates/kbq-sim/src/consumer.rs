//! Each process's consumer thread, played (`kafka/consumer.rs` needs librdkafka): its commands
//! and events as the real thread answers them, the assign and revoke callbacks at a poll, the
//! revoke callback serving commands until every partition is released or the handoff deadline
//! passes (with the `RevokeSeen` filter), commits only for owned partitions, a failed commit
//! read back and classified by `kafka::commit_error`, and the fetch that routes records.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::mpsc as std_mpsc;

use bytes::BytesMut;
use rand::Rng;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::driver::Sim;
use super::world::{Produced, lock};
use super::{HANDOFF_DEADLINE, TOPIC};
use kafka_bigquery_sink::kafka::consumer::{ConsumerCommand, ConsumerEvent, Record};
use kbq_core::offsets::{KafkaOffset, NextOffset};
use kbq_core::protocol::{
    Assignment, CommitEntry, CommitError, CommitId, CommitOutcome, CommittedRead, PartitionOrigin,
    TopicPartition,
};

pub(super) fn tp(p: usize) -> TopicPartition {
    TopicPartition::new(TOPIC, p as i32)
}

pub(super) struct Handoff {
    pub(super) waiting: BTreeSet<TopicPartition>,
    pub(super) revoking: BTreeSet<TopicPartition>,
    pub(super) seen: bool,
    pub(super) deadline: Instant,
    pub(super) lost: bool,
}

/// One process's consumer thread, played: its view of the group and its routes.
pub(super) struct Consumer {
    pub(super) member: u64,
    pub(super) commands: std_mpsc::Receiver<ConsumerCommand>,
    pub(super) events: mpsc::UnboundedSender<ConsumerEvent>,
    pub(super) generation: u64,
    pub(super) owned: BTreeSet<usize>,
    /// Callbacks librdkafka will run at the next poll.
    pub(super) callbacks: VecDeque<Callback>,
    pub(super) handoff: Option<Handoff>,
    pub(super) routes: BTreeMap<usize, (mpsc::Sender<Record>, i64)>,
    pub(super) paused: BTreeSet<usize>,
    /// Partitions whose fetch position fell below the log start and was reported
    /// (`OffsetOutOfRange`): librdkafka (`auto.offset.reset=error`) fetches nothing of them
    /// until a seek or a new start moves the position.
    pub(super) out_of_range: BTreeSet<usize>,
    pub(super) arena: BytesMut,
    pub(super) closed: bool,
    /// The group expelled this member while it was frozen; it learns it at its first
    /// heartbeat after it resumes (at this time).
    pub(super) expelled: Option<Option<Instant>>,
    /// Expelled and told so: it rejoins (as a new member) once its lost partitions' callback
    /// ran, as librdkafka rejoins only after the rebalance callback returned.
    pub(super) rejoin: bool,
}

impl Consumer {
    /// A consumer thread that just joined the group as `member`: nothing owned, nothing queued.
    pub(super) fn new(
        member: u64,
        commands: std_mpsc::Receiver<ConsumerCommand>,
        events: mpsc::UnboundedSender<ConsumerEvent>,
    ) -> Consumer {
        Consumer {
            member,
            commands,
            events,
            generation: 0,
            owned: BTreeSet::new(),
            callbacks: VecDeque::new(),
            handoff: None,
            routes: BTreeMap::new(),
            paused: BTreeSet::new(),
            out_of_range: BTreeSet::new(),
            arena: BytesMut::new(),
            closed: false,
            expelled: None,
            rejoin: false,
        }
    }
}

pub(super) enum Callback {
    Assign(Vec<usize>),
    Revoke(Vec<usize>, bool),
}

fn avro_long(v: i64, out: &mut Vec<u8>) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn avro_string(s: &str, out: &mut Vec<u8>) {
    avro_long(s.len() as i64, out);
    out.extend_from_slice(s.as_bytes());
}

pub(super) fn avro_record(id: i64, part: i64, payload: &str) -> Vec<u8> {
    let mut out = Vec::new();
    avro_long(id, &mut out);
    avro_long(part, &mut out);
    avro_string(payload, &mut out);
    out
}

/// A produced record as the Kafka value and key the sink reads: the append-only route's
/// record, or (CDC mode) the Debezium envelope of `CDC_AVRO` keyed by `k`.
fn kafka_record(produced: &Produced, offset: i64, part: i64) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let Some((k, op)) = produced.change else {
        let value = (produced.payload.as_ref()).map(|s| avro_record(offset, part, s));
        return (value, None);
    };
    let mut key = Vec::new();
    avro_long(k, &mut key);
    let Some(payload) = &produced.payload else {
        return (None, Some(key));
    };
    let row = |out: &mut Vec<u8>| {
        avro_long(1, out);
        avro_long(k, out);
        out.extend(avro_record(offset, part, payload));
    };
    let mut value = Vec::new();
    match op {
        // `before` holds the deleted row.
        'd' => {
            row(&mut value);
            avro_long(0, &mut value);
        }
        't' => {
            avro_long(0, &mut value);
            avro_long(0, &mut value);
        }
        _ => {
            avro_long(0, &mut value);
            row(&mut value);
        }
    }
    avro_string(&op.to_string(), &mut value);
    (Some(value), Some(key))
}

impl Sim {
    fn assignment(&self, p: usize, fresh: bool) -> Result<Assignment, String> {
        let mut w = self.w();
        if fresh && w.chance(0.03) {
            return Err("simulated: offset fetch timed out".into());
        }
        let committed = w.committed[p].as_ref().map(|(k, m)| CommittedRead {
            offset: NextOffset(*k),
            metadata: m.clone().into_bytes(),
        });
        if committed.is_none() {
            w.read_without_offset[p] = w.read_without_offset[p].max(w.log_start[p]);
        }
        Ok(Assignment {
            committed,
            low: NextOffset(w.log_start[p]),
            high: NextOffset(w.logs[p].len() as i64),
            origin: PartitionOrigin::Existing,
        })
    }

    /// Process `r`'s consumer joins the group again, as a new member.
    pub(super) fn rejoin(&mut self, r: usize) {
        let member = self.join();
        let c = &mut self.procs[r].as_mut().expect("running").consumer;
        c.member = member;
        c.rejoin = false;
        self.trace(format!("r{r} rejoins as m{member}"));
        self.rebalance();
    }

    pub(super) fn consumer_step(&mut self, r: usize) {
        let now = Instant::now();
        let Some(proc) = self.procs[r].as_mut() else {
            return;
        };
        if proc.consumer.closed {
            return;
        }
        self.heartbeat(r, now);
        if !self.serve_commands(r) {
            return;
        }
        self.end_revoke_callback(r, now);
        let proc = self.procs[r].as_mut().expect("checked");
        if proc.consumer.handoff.is_some() {
            return;
        }
        // The next poll runs the callbacks librdkafka queued (not always at once).
        if !proc.consumer.callbacks.is_empty() && self.w().rng.random_bool(0.5) {
            self.run_callback(r, now);
            return;
        }
        self.fetch(r);
    }

    /// The member's heartbeat. A member the group expelled learns it at a heartbeat, a little
    /// after it resumed: until then it runs on its old assignment and generation.
    fn heartbeat(&mut self, r: usize, now: Instant) {
        let proc = self.procs[r].as_mut().expect("checked");
        let member = proc.consumer.member;
        if let Some(beat) = self.group.last_heartbeat.get_mut(&member) {
            *beat = now;
        }
        if let Some(Some(at)) = proc.consumer.expelled
            && proc.consumer.handoff.is_none()
            && now >= at
        {
            proc.consumer.expelled = None;
            let owned: Vec<usize> = proc.consumer.owned.iter().copied().collect();
            proc.consumer.callbacks.clear();
            if owned.is_empty() {
                self.rejoin(r);
            } else {
                proc.consumer
                    .callbacks
                    .push_back(Callback::Revoke(owned, true));
                proc.consumer.rejoin = true;
                self.trace(format!(
                    "r{r} learns it was expelled: its partitions are lost"
                ));
            }
        }
    }

    /// Commands, as the thread (or its revoke callback) serves them; false when one of them
    /// ended the process.
    fn serve_commands(&mut self, r: usize) -> bool {
        loop {
            let Some(proc) = self.procs[r].as_mut() else {
                return false;
            };
            let command = match proc.consumer.commands.try_recv() {
                Ok(c) => c,
                Err(_) => return true,
            };
            self.command(r, command);
        }
    }

    /// The revoke callback returns once every revoked partition was released, or at its
    /// deadline.
    fn end_revoke_callback(&mut self, r: usize, now: Instant) {
        let proc = self.procs[r].as_mut().expect("checked");
        if let Some(h) = &proc.consumer.handoff
            && (h.waiting.is_empty() || now >= h.deadline)
        {
            let h = proc.consumer.handoff.take().expect("checked");
            if !h.waiting.is_empty() {
                let _ = proc.consumer.events.send(ConsumerEvent::HandoffDeadline(
                    h.waiting.iter().cloned().collect(),
                ));
            }
            for t in &h.revoking {
                proc.consumer.owned.remove(&(t.partition as usize));
                proc.consumer.paused.remove(&(t.partition as usize));
            }
            let lost = h.lost;
            self.trace(format!(
                "r{r} revoke callback ends (lost {lost}, left {:?})",
                h.waiting
            ));
            let c = &self.procs[r].as_ref().expect("checked").consumer;
            let member = c.member;
            // The member rejoins once every revoke it was given ran: a partition moves only
            // after its owner let it go (cooperative rebalancing), unless the owner is expelled.
            let more = (c.callbacks.iter()).any(|cb| matches!(cb, Callback::Revoke(..)));
            if let Some((revoking, _)) = self.group.pending.as_mut()
                && !more
            {
                revoking.remove(&member);
            }
            if self.procs[r].as_ref().expect("checked").consumer.rejoin {
                self.rejoin(r);
            }
        }
    }

    /// The next queued callback, as a poll runs it.
    fn run_callback(&mut self, r: usize, now: Instant) {
        let callback = self.procs[r]
            .as_mut()
            .expect("checked")
            .consumer
            .callbacks
            .pop_front()
            .expect("checked");
        match callback {
            Callback::Assign(partitions) => {
                // A read that fails is the partition's own `Err` (owned but unknown), as the
                // consumer thread answers it.
                let out: Vec<_> = partitions
                    .iter()
                    .map(|&p| (tp(p), self.assignment(p, true)))
                    .collect();
                self.trace(format!("r{r} assign callback {partitions:?}"));
                let proc = self.procs[r].as_mut().expect("checked");
                proc.consumer.owned.extend(partitions.iter().copied());
                proc.consumer.paused.extend(partitions.iter().copied());
                let _ = proc.consumer.events.send(ConsumerEvent::Assigned(out));
            }
            Callback::Revoke(partitions, lost) => {
                self.trace(format!("r{r} revoke callback {partitions:?} lost {lost}"));
                let proc = self.procs[r].as_mut().expect("checked");
                let tps: Vec<TopicPartition> = partitions.iter().map(|&p| tp(p)).collect();
                for &p in &partitions {
                    proc.consumer.routes.remove(&p);
                    proc.consumer.out_of_range.remove(&p);
                }
                let _ = proc.consumer.events.send(ConsumerEvent::RevokeBegan {
                    partitions: tps.clone(),
                    lost,
                });
                proc.consumer.handoff = Some(Handoff {
                    waiting: tps.iter().cloned().collect(),
                    revoking: tps.into_iter().collect(),
                    seen: false,
                    deadline: now + HANDOFF_DEADLINE,
                    lost,
                });
            }
        }
    }

    /// Fetch: route records to the writers that run.
    fn fetch(&mut self, r: usize) {
        let world = self.world.clone();
        let mut w = lock(&world);
        let proc = self.procs[r].as_mut().expect("checked");
        let c = &mut proc.consumer;
        for (p, (sink, position)) in c.routes.iter_mut() {
            if c.paused.contains(p) || c.out_of_range.contains(p) {
                continue;
            }
            let low = w.log_start[*p];
            if *position < low {
                // Retention deleted the records at the fetch position: the consumer thread
                // reports it (kafka/consumer/seeks.rs) and the partition waits for the
                // coordinator's decision.
                c.out_of_range.insert(*p);
                w.count("out_of_range");
                w.trace(format!(
                    "r{r} fetch of p{p} at {position} below the log start {low}"
                ));
                let _ = c.events.send(ConsumerEvent::OffsetOutOfRange {
                    tp: tp(*p),
                    position: NextOffset(*position),
                    low: NextOffset(low),
                });
                continue;
            }
            for _ in 0..32 {
                let Some(produced) = w.logs[*p].get(*position as usize) else {
                    break;
                };
                let (value, key) = kafka_record(produced, *position, *p as i64);
                let record = Record::new(
                    KafkaOffset(*position),
                    None,
                    key.as_deref(),
                    value.as_deref(),
                    Vec::new(),
                    &mut c.arena,
                );
                match sink.try_send(record) {
                    Ok(()) => {
                        if w.mode.at_least_once() {
                            let number = w.running[r];
                            let ledger = w.ledgers.entry(number).or_default();
                            ledger.entry((*p, *position)).or_default().unused += 1;
                        }
                        *position += 1;
                    }
                    Err(_) => break,
                }
            }
        }
    }

    pub(super) fn command(&mut self, r: usize, command: ConsumerCommand) {
        let proc = self.procs[r].as_mut().expect("running");
        if let Some(h) = proc.consumer.handoff.as_mut() {
            match command {
                ConsumerCommand::RevokeSeen => {
                    h.seen = true;
                    return;
                }
                ConsumerCommand::Release { tp } => {
                    h.waiting.remove(&tp);
                    return;
                }
                ConsumerCommand::Commit { commit, entries } if !h.seen => {
                    let revoking = h.revoking.clone();
                    let (stale, keep): (Vec<_>, Vec<_>) =
                        entries.into_iter().partition(|e| revoking.contains(&e.tp));
                    let mut outcome = self.commit(r, commit, keep);
                    if let CommitOutcome::PerPartition(results) = &mut outcome {
                        results.extend(stale.into_iter().map(|e| {
                            (
                                e.tp,
                                Err(CommitError::Request(
                                    "partition revoked before the commit was made".into(),
                                )),
                            )
                        }));
                    }
                    let proc = self.procs[r].as_mut().expect("running");
                    let _ = proc
                        .consumer
                        .events
                        .send(ConsumerEvent::CommitDone { commit, outcome });
                    return;
                }
                other => return self.execute(r, other),
            }
        }
        self.execute(r, command)
    }

    pub(super) fn execute(&mut self, r: usize, command: ConsumerCommand) {
        match command {
            ConsumerCommand::Start { tp, from, sink } => self.start_partition(r, tp, from, sink),
            ConsumerCommand::Seek { tp, to } => {
                self.trace(format!("r{r} seek {tp} to {}", to.0));
                let c = &mut self.procs[r].as_mut().expect("running").consumer;
                if let Some((_, position)) = c.routes.get_mut(&(tp.partition as usize)) {
                    *position = to.0;
                    c.out_of_range.remove(&(tp.partition as usize));
                }
            }
            ConsumerCommand::Stop { tp } => {
                let c = &mut self.procs[r].as_mut().expect("running").consumer;
                c.routes.remove(&(tp.partition as usize));
                c.out_of_range.remove(&(tp.partition as usize));
                c.paused.insert(tp.partition as usize);
            }
            ConsumerCommand::Pause { tp } => {
                self.w().count("pauses");
                let c = &mut self.procs[r].as_mut().expect("running").consumer;
                c.paused.insert(tp.partition as usize);
            }
            ConsumerCommand::Resume { tp } => {
                let c = &mut self.procs[r].as_mut().expect("running").consumer;
                c.paused.remove(&(tp.partition as usize));
            }
            ConsumerCommand::Commit { commit, entries } => self.commit_owned(r, commit, entries),
            ConsumerCommand::ReadAssignment { tp } => {
                // A partition revoked meanwhile: its revoke already told the coordinator.
                if self.procs[r]
                    .as_ref()
                    .expect("running")
                    .consumer
                    .owned
                    .contains(&(tp.partition as usize))
                {
                    let result = self.assignment(tp.partition as usize, true);
                    let c = &mut self.procs[r].as_mut().expect("running").consumer;
                    let _ = c.events.send(ConsumerEvent::AssignmentRead { tp, result });
                }
            }
            ConsumerCommand::ReadCommitted { tp } => {
                let event = match self.assignment(tp.partition as usize, true) {
                    Ok(assignment) => ConsumerEvent::Reread { tp, assignment },
                    Err(reason) => ConsumerEvent::RereadFailed { tp, reason },
                };
                let c = &mut self.procs[r].as_mut().expect("running").consumer;
                let _ = c.events.send(event);
            }
            ConsumerCommand::ConfirmOwnership { tp } => {
                // The member's own view: its assignment, not lost as far as it knows.
                let c = &self.procs[r].as_ref().expect("running").consumer;
                let owned = c.owned.contains(&(tp.partition as usize));
                if !owned {
                    return;
                }
                let event = match self.assignment(tp.partition as usize, true) {
                    Ok(assignment) => ConsumerEvent::OwnershipConfirmed { tp, assignment },
                    Err(reason) => ConsumerEvent::OwnershipUnknown { tp, reason },
                };
                let c = &mut self.procs[r].as_mut().expect("running").consumer;
                let _ = c.events.send(event);
            }
            ConsumerCommand::RevokeSeen | ConsumerCommand::Release { .. } => {}
            ConsumerCommand::Shutdown => {
                self.trace(format!("r{r} leaves the group"));
                let c = &mut self.procs[r].as_mut().expect("running").consumer;
                c.closed = true;
                let _ = c.events.send(ConsumerEvent::Closed);
            }
        }
    }

    /// `Start`: records of `tp` from `from` go to the writer's channel, unless the partition was
    /// revoked since the coordinator decided.
    fn start_partition(
        &mut self,
        r: usize,
        tp: TopicPartition,
        from: NextOffset,
        sink: mpsc::Sender<Record>,
    ) {
        let c = &mut self.procs[r].as_mut().expect("running").consumer;
        let p = tp.partition as usize;
        if !c.owned.contains(&p) {
            // Revoked since the coordinator decided: its records are the next owner's.
            self.trace(format!(
                "r{r} start {tp} from {} ignored: not owned",
                from.0
            ));
            return;
        }
        self.trace(format!("r{r} start {tp} from {}", from.0));
        let c = &mut self.procs[r].as_mut().expect("running").consumer;
        c.routes.insert(p, (sink, from.0));
        c.out_of_range.remove(&p);
        c.paused.remove(&p);
    }

    /// `Commit`: only what this member owns (invariant 4) reaches the broker; an entry of a
    /// partition revoked meanwhile is refused as the consumer thread refuses it.
    fn commit_owned(&mut self, r: usize, commit: CommitId, entries: Vec<CommitEntry>) {
        // Only what this member owns (invariant 4): a commit built before a revoke
        // whose callback already returned must not reach the broker.
        let owned = self.procs[r]
            .as_ref()
            .expect("running")
            .consumer
            .owned
            .clone();
        let (keep, refused): (Vec<_>, Vec<_>) = entries
            .into_iter()
            .partition(|e| owned.contains(&(e.tp.partition as usize)));
        let mut outcome = self.commit(r, commit, keep);
        if let CommitOutcome::PerPartition(results) = &mut outcome {
            results.extend(refused.into_iter().map(|e| {
                let why = "partition no longer owned by this member";
                (e.tp, Err(CommitError::Request(why.into())))
            }));
        }
        let c = &mut self.procs[r].as_mut().expect("running").consumer;
        let _ = c.events.send(ConsumerEvent::CommitDone { commit, outcome });
    }

    /// One synchronous commit as the consumer thread makes it: librdkafka reports one error
    /// for the whole request; the committed offsets are then read back and a partition whose
    /// durable checkpoint equals what was sent counts as landed, the others get the error's
    /// class (`kafka::commit_error::classify`).
    pub(super) fn commit(
        &mut self,
        r: usize,
        commit: CommitId,
        entries: Vec<CommitEntry>,
    ) -> CommitOutcome {
        if entries.is_empty() {
            return CommitOutcome::PerPartition(Vec::new());
        }
        let c = &self.procs[r].as_ref().expect("running").consumer;
        let generation_ok = self.group.members.contains(&c.member)
            && c.generation == self.group.generation
            && c.expelled.is_none();
        if !generation_ok {
            // librdkafka's OffsetCommit handler answers a generation or member error by
            // treating the assignment as lost and rejoining (the lost callback at the next
            // poll, then a new JoinGroup), as its heartbeat handler does: an expelled member
            // learns it from this answer, not only at its next heartbeat. It ignores the answer
            // while a rebalance of its own is under way (a callback queued or running).
            let c = &mut self.procs[r].as_mut().expect("running").consumer;
            let rebalancing = c.handoff.is_some() || !c.callbacks.is_empty();
            if let Some(Some(at)) = c.expelled.as_mut()
                && !rebalancing
            {
                *at = (*at).min(Instant::now());
            }
        }
        let mut w = self.w();
        let roll: f64 = if w.faults { w.rng.random() } else { 1.0 };
        let mut error: Option<RDKafkaErrorCode> = None;
        if !generation_ok {
            error = Some(RDKafkaErrorCode::IllegalGeneration);
        } else if roll < 0.03 {
            error = Some(RDKafkaErrorCode::CoordinatorNotAvailable);
        } else {
            for e in &entries {
                let p = e.tp.partition as usize;
                if w.chance(0.02) {
                    error = Some(RDKafkaErrorCode::OffsetMetadataTooLarge);
                    w.trace(format!(
                        "kafka commit p{p} by r{r} refused for the partition"
                    ));
                    continue;
                }
                w.landed(p, e);
            }
            if roll < 0.06 {
                error = Some(RDKafkaErrorCode::RequestTimedOut);
            }
        }
        let Some(code) = error else {
            return CommitOutcome::PerPartition(
                entries.into_iter().map(|e| (e.tp, Ok(()))).collect(),
            );
        };
        let error = KafkaError::ConsumerCommit(code);
        w.trace(format!("kafka commit {} by r{r}: {error}", commit.0));
        if w.chance(0.2) {
            return CommitOutcome::Rejected(format!("{error}; read-back failed: simulated"));
        }
        CommitOutcome::PerPartition(
            entries
                .into_iter()
                .map(|e| {
                    let p = e.tp.partition as usize;
                    let landed = w.committed[p]
                        .as_ref()
                        .is_some_and(|(k, m)| *k == e.offset.0 && *m == e.metadata);
                    let result = if landed {
                        Ok(())
                    } else {
                        Err(kafka_bigquery_sink::kafka::commit_error::classify(&error))
                    };
                    (e.tp, result)
                })
                .collect(),
        )
    }
}
