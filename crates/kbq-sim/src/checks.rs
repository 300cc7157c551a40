//! The invariants, checked where an effect lands (a commit, a flush, a finalize) and at the
//! end of a seed: the model test's (crates/kbq-core/tests/model/exactly_once.rs), plus the two the shells can
//! break (the meaning of `K`; no finalize of a stream a checkpoint in doubt names).

use std::collections::BTreeMap;

use super::bigquery::short;
use super::driver::Sim;
use super::rest::{table_rows, visible_rows};
use super::world::{Fate, World};
use super::{MAX_PAYLOAD, PARTITIONS, TABLE, TOPIC};
use kafka_bigquery_sink::ops::metrics::TopicLabel;
use kbq_core::metadata::CommitMetadata;
use kbq_core::protocol::CommitEntry;

impl World {
    /// A commit of `entry` landed: check what it says against what BigQuery holds.
    pub(super) fn landed(&mut self, p: usize, entry: &CommitEntry) {
        let k = entry.offset.0;
        self.trace(format!("kafka landed p{p} K={k} {}", entry.metadata));
        if let Ok(CommitMetadata::ExactlyOnce {
            stream: Some(s),
            flush_to,
            visible_through,
            ..
        }) = CommitMetadata::parse(entry.metadata.as_bytes())
        {
            let name = format!("{TABLE}/streams/{s}");
            let r = flush_to.map_or(-1, |r| r.0);
            let max = self.committed_rows.entry(name.clone()).or_insert(-1);
            *max = (*max).max(r);
            let found = self.streams.get(&name).map(|st| {
                (
                    st.rows
                        .iter()
                        .take((r + 1) as usize)
                        .find(|x| **x >= k)
                        .copied(),
                    st.finalized_by_sink,
                )
            });
            match found {
                Some((above, finalized_by_sink)) => {
                    if let Some(x) = above {
                        self.violate(format!(
                            "the meaning of K: p{p} committed K={k} with rows through {r} of {s}, \
                             which hold record {x} (a restart re-delivers it although it is visible)"
                        ));
                    }
                    if finalized_by_sink && visible_through.0 < k {
                        self.violate(format!(
                            "p{p}'s checkpoint K={k} f={} names {s}, which the sink finalized \
                             (the restart-loop precondition)",
                            visible_through.0
                        ));
                    }
                }
                None if r >= 0 => {
                    self.violate(format!("p{p} committed rows of unknown stream {s}"));
                }
                None => {}
            }
        }
        if let Ok(CommitMetadata::AtLeastOnce { .. }) =
            CommitMetadata::parse(entry.metadata.as_bytes())
        {
            self.check_acknowledged(p, k);
        }
        self.committed[p] = Some((k, entry.metadata.clone()));
    }

    /// At least once: a landed commit of `K` says that every record below `K` is appended (or
    /// dead-lettered, or a CDC change the route ignores); a restart starts at `K`, so a record
    /// below it that is not would be lost.
    fn check_acknowledged(&mut self, p: usize, k: i64) {
        for x in 0..k {
            let fate = self.logs[p][x as usize].fate(self.mode);
            // A record retention deleted before it was handled is lost, not skipped: the
            // final check holds such records to what the sink counted lost.
            let done = x < self.log_start[p]
                || match fate {
                    Fate::Row => self.appended.contains_key(&(p, x)),
                    Fate::Bad => self.dead_letters.contains_key(&(p, x)),
                    Fate::Ignored => true,
                };
            if !done {
                self.violate(format!(
                    "at least once: p{p} committed K={k} but record {x} ({fate:?}) is neither \
                     appended nor dead-lettered (a restart from K loses it)"
                ));
                return;
            }
        }
    }

    /// At least once: rows of records `(partition, offset)` were appended to `_default` by
    /// replica `process`. Only good records become rows, and a record is appended again only
    /// as at-least-once allows it: the consumer delivered it again (a restart from an earlier
    /// offset), or an append of it was applied but its answer never reached the session (a
    /// resend after a broken call or a timeout).
    /// `number` is the process of replica `process` that sent them (it may have died since).
    pub(super) fn appended_default(
        &mut self,
        process: usize,
        number: usize,
        rows: &[(usize, i64)],
    ) {
        for &(p, x) in rows {
            let copies = self.appended.entry((p, x)).or_default();
            *copies += 1;
            let copies = *copies;
            if copies > 1 {
                self.count("duplicates");
            }
            let fate = self.logs[p][x as usize].fate(self.mode);
            if fate != Fate::Row {
                self.violate(format!("p{p}@{x} ({fate:?}) became a row"));
            }
            let ledger = self.ledgers.entry(number).or_default();
            let delivered = ledger.entry((p, x)).or_default();
            if delivered.unused > 0 {
                delivered.unused -= 1;
            } else if delivered.unanswered > 0 {
                delivered.unanswered -= 1;
            } else {
                self.violate(format!(
                    "at least once: r{process} (#{number}) appended p{p}@{x} again (copy {copies}) \
                     though every earlier append of it was answered and the consumer did not \
                     deliver it again"
                ));
            }
            (self.ledgers.get_mut(&number))
                .and_then(|l| l.get_mut(&(p, x)))
                .expect("just set")
                .unanswered += 1;
        }
    }

    /// Invariant 1: a FlushRows only through a row that a landed commit names.
    pub(super) fn check_flush(&mut self, stream: &str, offset: i64) {
        let committed = self.committed_rows.get(stream).copied().unwrap_or(-1);
        if offset > committed {
            self.violate(format!(
                "invariant 1: flush of {} through {offset}, but landed commits name only {committed}",
                short(stream)
            ));
        }
    }

    /// Invariant 3: a FinalizeWriteStream never of a stream the partition's durable checkpoint
    /// needs (`f < K`).
    pub(super) fn check_finalize(&mut self, stream: &str, process: usize) {
        let s = stream.rsplit('/').next().unwrap_or_default().to_string();
        let partition = self.streams.get(stream).and_then(|s| s.partition);
        if let Some(p) = partition
            && let Some((
                k,
                CommitMetadata::ExactlyOnce {
                    stream: Some(named),
                    visible_through,
                    ..
                },
            )) = self.durable(p)
            && named.as_str() == s
            && visible_through.0 < k
        {
            self.violate(format!(
                "invariant 3: r{} finalizes {s} while p{p}'s durable checkpoint needs it (f={} < K={k})",
                process, visible_through.0
            ));
        }
    }
}

impl Sim {
    pub(super) fn rested(&self) -> bool {
        let w = self.w();
        (0..PARTITIONS).all(|p| match w.durable(p) {
            Some((
                k,
                CommitMetadata::ExactlyOnce {
                    visible_through, ..
                },
            )) => k == w.logs[p].len() as i64 && visible_through.0 == k,
            Some((k, CommitMetadata::AtLeastOnce { .. })) => k == w.logs[p].len() as i64,
            None => w.logs[p].is_empty(),
            _ => false,
        }) && self.group.pending.is_none()
    }

    pub(super) fn check_exactly_once(&self) -> Option<String> {
        let w = self.w();
        let mut seen: BTreeMap<(usize, i64), u64> = BTreeMap::new();
        for row in visible_rows(&w) {
            *seen.entry(row).or_default() += 1;
        }
        let rewound: u64 = self
            .all_metrics
            .iter()
            .map(|m| {
                m.rewound_records
                    .get_or_create(&TopicLabel {
                        topic: TOPIC.into(),
                    })
                    .get()
            })
            .sum();
        let lost = self.lost_counted();
        if rewound > 0 && w.injected_loss.is_empty() {
            return Some(format!(
                "{rewound} records rewound though no fault removed a stream"
            ));
        }
        let mut duplicates = 0;
        let mut missing = 0;
        for p in 0..PARTITIONS {
            for (x, value) in w.logs[p].iter().enumerate() {
                let x = x as i64;
                let n = seen.get(&(p, x)).copied().unwrap_or(0);
                let bad = value.payload.as_ref().is_none_or(|v| v.len() > MAX_PAYLOAD);
                let dead = w.dead_letters.get(&(p, x));
                if x < w.log_start[p] && n == 0 && dead.is_none() {
                    // Deleted by retention before the sink made it visible or dead-lettered
                    // it (a visible row or a dead letter stays): lost, and counted below,
                    // unless it was gone when the partition started without an offset.
                    missing += u64::from(x >= w.read_without_offset[p]);
                    continue;
                }
                if bad {
                    if n > 0 {
                        return Some(format!("bad record p{p}@{x} is visible"));
                    }
                    if dead.is_none_or(|d| d.iter().any(|r| r.is_empty())) {
                        return Some(format!(
                            "bad record p{p}@{x} was not dead-lettered with a reason"
                        ));
                    }
                } else {
                    if dead.is_some() {
                        return Some(format!("good record p{p}@{x} was dead-lettered: {dead:?}"));
                    }
                    if n == 0 {
                        return Some(format!("record p{p}@{x} is not visible: lost"));
                    }
                    duplicates += n - 1;
                    if n > 1 && rewound == 0 {
                        return Some(format!(
                            "record p{p}@{x} is visible {n} times and no rewind was counted"
                        ));
                    }
                }
            }
        }
        if duplicates > rewound {
            return Some(format!(
                "{duplicates} duplicates but only {rewound} records were rewound"
            ));
        }
        Self::check_lost(missing, lost)
    }

    /// Records the sink counted lost (`kbq_lost_records`, every process that ran).
    fn lost_counted(&self) -> u64 {
        (self.all_metrics.iter())
            .map(|m| {
                m.lost_records
                    .get_or_create(&TopicLabel {
                        topic: TOPIC.into(),
                    })
                    .get()
            })
            .sum()
    }

    /// Every record missing at the end (deleted by retention before it was handled) must be
    /// within what the sink counted lost: a record skipped without being counted is a loss.
    fn check_lost(missing: u64, lost: u64) -> Option<String> {
        (missing > lost).then(|| {
            format!(
                "{missing} records deleted by retention are missing but the sink counted only {lost} lost"
            )
        })
    }

    /// At least once, after settling: every good record is a row (at least once; each repeat
    /// was judged where it was appended), every bad one is dead-lettered with its reason and
    /// never a row, and the table holds exactly the rows appended.
    pub(super) fn check_at_least_once(&self) -> Option<String> {
        let lost = self.lost_counted();
        let w = self.w();
        let mut missing = 0;
        for p in 0..PARTITIONS {
            for (x, produced) in w.logs[p].iter().enumerate() {
                let x = x as i64;
                let n = w.appended.get(&(p, x)).copied().unwrap_or(0);
                let dead = w.dead_letters.get(&(p, x));
                let fate = produced.fate(w.mode);
                if x < w.log_start[p] && n == 0 && dead.is_none() && fate != Fate::Ignored {
                    // Deleted by retention before it was handled: lost, counted below, unless
                    // it was gone when the partition started without an offset.
                    missing += u64::from(x >= w.read_without_offset[p]);
                    continue;
                }
                match fate {
                    Fate::Row if n == 0 => {
                        return Some(format!("record p{p}@{x} was never appended: lost"));
                    }
                    Fate::Row | Fate::Ignored if dead.is_some() => {
                        return Some(format!("good record p{p}@{x} was dead-lettered: {dead:?}"));
                    }
                    Fate::Bad if dead.is_none_or(|d| d.iter().any(|r| r.is_empty())) => {
                        return Some(format!(
                            "bad record p{p}@{x} was not dead-lettered with a reason"
                        ));
                    }
                    Fate::Ignored | Fate::Bad if n > 0 => {
                        return Some(format!("p{p}@{x} should be no row but was appended"));
                    }
                    _ => {}
                }
            }
        }
        if w.mode == super::Mode::AtLeastOnce {
            let mut visible: BTreeMap<(usize, i64), u32> = BTreeMap::new();
            for row in visible_rows(&w) {
                *visible.entry(row).or_default() += 1;
            }
            if visible != w.appended {
                return Some("the table's rows are not the rows appended".into());
            }
        }
        Self::check_lost(missing, lost)
    }

    /// CDC, after settling: the table's applied state per key is the reference state computed
    /// from the produced changes (each key's last change in its partition's order that the route
    /// applies; a deleted key absent), with no extra or missing key.
    pub(super) fn check_cdc(&self) -> Option<String> {
        let w = self.w();
        let mut expected: BTreeMap<i64, (i64, usize, String)> = BTreeMap::new();
        for p in 0..PARTITIONS {
            for (x, produced) in w.logs[p].iter().enumerate() {
                let (Some((k, op)), Fate::Row) = (produced.change, produced.fate(w.mode)) else {
                    continue;
                };
                if op == 'd' {
                    expected.remove(&k);
                } else {
                    let payload = produced.payload.clone().expect("a row change");
                    expected.insert(k, (x as i64, p, payload));
                }
            }
        }
        let mut applied: BTreeMap<i64, (i64, usize, String)> = BTreeMap::new();
        for row in table_rows(&w) {
            let int = |c: &str| row[c].parse::<i64>().unwrap_or(-1);
            let k = int("k");
            let value = (int("id"), int("part") as usize, row["payload"].clone());
            if let Some(other) = applied.insert(k, value.clone()) {
                return Some(format!("key {k} has two rows: {other:?} and {value:?}"));
            }
        }
        for (k, want) in &expected {
            match applied.get(k) {
                None => {
                    return Some(format!(
                        "key {k} is missing: the reference holds p{}@{} {:?}",
                        want.1, want.0, want.2
                    ));
                }
                Some(got) if got != want => {
                    return Some(format!(
                        "key {k} holds p{}@{} {:?}, the reference p{}@{} {:?}",
                        got.1, got.0, got.2, want.1, want.0, want.2
                    ));
                }
                Some(_) => {}
            }
        }
        if let Some((k, got)) = applied.iter().find(|(k, _)| !expected.contains_key(k)) {
            return Some(format!(
                "key {k} is extra: it holds p{}@{} {:?}, the reference has no row",
                got.1, got.0, got.2
            ));
        }
        None
    }
}
