//! The invariants, checked where an effect lands (a commit, a flush, a finalize) and at the
//! end of a seed: the model test's (tests/checkpoint_model.rs), plus the two the shells can
//! break (the meaning of `K`; no finalize of a stream a checkpoint in doubt names).

use std::collections::BTreeMap;

use super::bigquery::short;
use super::driver::Sim;
use super::rest::visible_rows;
use super::world::World;
use super::{MAX_PAYLOAD, PARTITIONS, TABLE, TOPIC};
use crate::checkpoint::metadata::CommitMetadata;
use crate::checkpoint::protocol::CommitEntry;
use crate::ops::metrics::TopicLabel;

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
        self.committed[p] = Some((k, entry.metadata.clone()));
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
        if rewound > 0 && w.injected_loss.is_empty() {
            return Some(format!(
                "{rewound} records rewound though no fault removed a stream"
            ));
        }
        let mut duplicates = 0;
        for p in 0..PARTITIONS {
            for (x, value) in w.logs[p].iter().enumerate() {
                let x = x as i64;
                let n = seen.get(&(p, x)).copied().unwrap_or(0);
                let bad = value.as_ref().is_none_or(|v| v.len() > MAX_PAYLOAD);
                let dead = w.dead_letters.get(&(p, x));
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
        None
    }
}
