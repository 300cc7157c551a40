//! The simulated group coordinator (the broker's side of the consumer group): members joining
//! as new ids, generations, cooperative revokes before the partitions move, session timeouts
//! expelling a frozen or dead member.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::consumer::Callback;
use super::driver::Sim;
use super::world::lock;
use super::{PARTITIONS, REPLICAS, SESSION_TIMEOUT};

/// The broker's side of the consumer group. Members are numbered per join (a restarted or
/// expelled process joins again as a new member; its old id lingers until its session ends).
pub(super) struct Group {
    pub(super) generation: u64,
    pub(super) members: BTreeSet<u64>,
    pub(super) next_member: u64,
    pub(super) owner: [Option<u64>; PARTITIONS],
    pub(super) last_heartbeat: BTreeMap<u64, Instant>,
    /// A rebalance waiting for these members' revokes to end.
    pub(super) pending: Option<(BTreeSet<u64>, [Option<u64>; PARTITIONS])>,
}

impl Sim {
    /// A new member id in the group.
    pub(super) fn join(&mut self) -> u64 {
        self.group.next_member += 1;
        let member = self.group.next_member;
        self.group.members.insert(member);
        self.group.last_heartbeat.insert(member, Instant::now());
        member
    }

    /// The running process of `member`, if any.
    pub(super) fn process_of(&self, member: u64) -> Option<usize> {
        (0..REPLICAS).find(|&r| {
            self.procs[r]
                .as_ref()
                .is_some_and(|p| p.consumer.member == member)
        })
    }

    /// A member left or joined: plan a new assignment; members that lose partitions revoke them
    /// first (cooperative), then the others get them.
    pub(super) fn rebalance(&mut self) {
        let members: Vec<u64> = self.group.members.iter().copied().collect();
        let mut target = [None; PARTITIONS];
        if !members.is_empty() {
            let mut w = lock(&self.world);
            let rotate = w.rng.random_range(0..members.len());
            for (p, slot) in target.iter_mut().enumerate() {
                let sticky = self.group.owner[p].filter(|o| members.contains(o));
                *slot = match sticky {
                    Some(o) if w.rng.random_bool(0.6) => Some(o),
                    _ => Some(members[(p + rotate) % members.len()]),
                };
            }
        }
        // Revokes still running from an earlier plan keep the rebalance waiting too.
        let mut revoking = self
            .group
            .pending
            .take()
            .map(|(r, _)| r)
            .unwrap_or_default();
        for m in members {
            let losing: Vec<usize> = (0..PARTITIONS)
                .filter(|&p| self.group.owner[p] == Some(m) && target[p] != Some(m))
                .collect();
            if losing.is_empty() {
                continue;
            }
            for &p in &losing {
                self.group.owner[p] = None;
            }
            if let Some(r) = self.process_of(m) {
                let proc = self.procs[r].as_mut().expect("running");
                proc.consumer
                    .callbacks
                    .push_back(Callback::Revoke(losing, false));
                revoking.insert(m);
            }
        }
        self.trace(format!(
            "group plans {target:?}, waiting for revokes of {revoking:?}"
        ));
        self.group.pending = Some((revoking, target));
    }

    /// Completes the pending rebalance once no member is revoking.
    pub(super) fn complete_rebalance(&mut self) {
        let Some((revoking, target)) = &self.group.pending else {
            return;
        };
        if !revoking.is_empty() {
            return;
        }
        let target = *target;
        self.group.pending = None;
        self.group.generation += 1;
        let generation = self.group.generation;
        for m in self.group.members.clone() {
            let gaining: Vec<usize> = (0..PARTITIONS)
                .filter(|&p| target[p] == Some(m) && self.group.owner[p] != Some(m))
                .collect();
            if let Some(r) = self.process_of(m) {
                let proc = self.procs[r].as_mut().expect("running");
                proc.consumer.generation = generation;
                if !gaining.is_empty() {
                    proc.consumer.callbacks.push_back(Callback::Assign(gaining));
                }
            }
        }
        for (owner, planned) in self.group.owner.iter_mut().zip(target) {
            if planned.is_some_and(|m| self.group.members.contains(&m)) {
                *owner = planned;
            }
        }
        self.trace(format!(
            "group generation {generation}: {:?}",
            self.group.owner
        ));
    }

    pub(super) fn expel_partitions(&mut self, member: u64) {
        for p in 0..PARTITIONS {
            if self.group.owner[p] == Some(member) {
                self.group.owner[p] = None;
            }
        }
        if let Some((revoking, _)) = self.group.pending.as_mut() {
            revoking.remove(&member);
        }
        self.rebalance();
    }

    pub(super) fn group_step(&mut self) {
        let now = Instant::now();
        for m in self.group.members.clone() {
            if now - self.group.last_heartbeat[&m] > SESSION_TIMEOUT {
                self.trace(format!("group expels m{m}: session timeout"));
                self.group.members.remove(&m);
                self.group.last_heartbeat.remove(&m);
                if let Some(r) = self.process_of(m) {
                    // A frozen member learns it at its first heartbeat after it resumes
                    // (`faults_step` sets that time). A running one (resumed in this very step,
                    // before its first heartbeat) learns it at its next heartbeat: the broker
                    // answers UNKNOWN_MEMBER_ID and librdkafka rejoins by itself
                    // (docs/simulation.md, "The group as librdkafka sees it").
                    let frozen = self.procs[r].as_ref().expect("running").frozen_until;
                    let learns = match frozen {
                        Some(_) => None,
                        None => {
                            let beat = self.w().rng.random_range(100..3_000);
                            Some(now + Duration::from_millis(beat))
                        }
                    };
                    self.procs[r].as_mut().expect("running").consumer.expelled = Some(learns);
                }
                self.expel_partitions(m);
            }
        }
        self.complete_rebalance();
        // A partition with no owner while members exist (a revoke ended after the plan).
        if self.group.pending.is_none()
            && !self.group.members.is_empty()
            && self.group.owner.iter().any(Option::is_none)
        {
            self.rebalance();
        }
    }
}
