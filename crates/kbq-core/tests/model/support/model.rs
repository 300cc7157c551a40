//! The harness the two model tests share: `exactly_once.rs` drives the exactly-once
//! protocol, `ledger.rs` the at-least-once ledger, each against the models of Kafka
//! (`kafka.rs`) and BigQuery (`bigquery.rs`). Both machines are events in, actions
//! out; this file holds what serving them has in common: the replicas and the group's size, the
//! faults a request can meet, the shell's inbox, the schedule of a run, and the trace a failure
//! prints.

use kbq_core::ledger::AtLeastOnceLedger;
use kbq_core::protocol::{Action, CheckpointProtocol, Event};
use proptest::prelude::*;
use std::collections::VecDeque;

/// Two partitions, two replicas: enough for a partition to move while the other stays.
pub const PARTITIONS: usize = 2;
pub const REPLICAS: usize = 2;

/// What becomes of a request on its way: it lands and is answered, it lands and its answer is
/// lost, or it does not land and an error comes back.
#[derive(Debug, Clone, Copy)]
pub enum Delivery {
    Ok,
    /// The effect happened, the answer was lost.
    AnswerLost,
    /// The request never took effect and an error came back.
    NotApplied,
}

impl Delivery {
    /// The request took effect.
    pub fn applied(self) -> bool {
        !matches!(self, Delivery::NotApplied)
    }

    /// No success came back: the sender sees an error whether or not the request took effect.
    pub fn failed(self) -> bool {
        !matches!(self, Delivery::Ok)
    }
}

/// Most requests succeed; a lost answer and a request that did not land are equally likely.
pub fn delivery() -> impl Strategy<Value = Delivery> {
    prop_oneof![
        6 => Just(Delivery::Ok),
        1 => Just(Delivery::AnswerLost),
        1 => Just(Delivery::NotApplied),
    ]
}

/// Every step of a run, in order; a broken invariant panics with the last of them.
#[derive(Debug, Default)]
pub struct Trace(pub Vec<String>);

impl Trace {
    pub fn push(&mut self, line: String) {
        self.0.push(line);
    }

    /// Fails the run: the reason, then the steps that led to it.
    #[track_caller]
    pub fn fail(&self, why: String) -> ! {
        let tail: Vec<_> = self.0.iter().rev().take(400).rev().cloned().collect();
        panic!("{why}\n--- last steps ---\n{}", tail.join("\n"));
    }
}

/// A machine under test: the exactly-once protocol or the at-least-once ledger.
pub trait Machine {
    fn handle(&mut self, event: Event) -> Vec<Action>;
}

impl Machine for CheckpointProtocol {
    fn handle(&mut self, event: Event) -> Vec<Action> {
        CheckpointProtocol::handle(self, event)
    }
}

impl Machine for AtLeastOnceLedger {
    fn handle(&mut self, event: Event) -> Vec<Action> {
        AtLeastOnceLedger::handle(self, event)
    }
}

/// The coordinator shell as the models run it: one inbox per replica, its events handled in
/// order, never re-entrantly (an action that answers at once queues its event behind the rest).
pub trait Shell {
    type Machine: Machine;

    /// The machine and the inbox of replica `r`, if it is alive.
    fn replica(&mut self, r: usize) -> Option<(&mut Self::Machine, &mut VecDeque<Event>)>;
    fn trace(&mut self) -> &mut Trace;
    /// Serves one action of replica `r`'s machine.
    fn act(&mut self, r: usize, action: Action);
    /// Replica `r` finished its shutdown: it leaves the group cleanly.
    fn finished(&self, r: usize) -> bool;
    fn leave(&mut self, r: usize);

    /// Puts `event` in replica `r`'s inbox and handles everything queued there.
    fn post(&mut self, r: usize, event: Event) {
        if let Some((_, inbox)) = self.replica(r) {
            inbox.push_back(event);
        }
        self.pump(r);
    }

    fn pump(&mut self, r: usize) {
        loop {
            let Some((machine, inbox)) = self.replica(r) else {
                return;
            };
            let Some(event) = inbox.pop_front() else {
                break;
            };
            let line = format!("r{r} <- {event:?}");
            let actions = machine.handle(event);
            self.trace().push(line);
            for action in actions {
                self.act(r, action);
            }
        }
        if self.finished(r) {
            self.leave(r);
        }
    }
}

/// A model: the replicas, Kafka, BigQuery and the faults a history injects.
pub trait Model {
    type Op: std::fmt::Debug;

    fn start(&mut self, r: usize);
    fn step(&mut self, op: &Self::Op);
    /// No more faults: run until every record is written.
    fn quiesce(&mut self);
    /// The oracle: a broken property panics.
    fn check(&mut self);
}

/// The schedule of every run: both replicas start, the history's steps run, the faults stop,
/// and the oracle judges the end.
pub fn run<W: Model>(mut world: W, ops: &[W::Op]) -> W {
    for r in 0..REPLICAS {
        world.start(r);
    }
    for op in ops {
        world.step(op);
    }
    world.quiesce();
    world.check();
    world
}
