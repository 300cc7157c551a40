//! Unit tests of the at-least-once ledger, one scenario per test.

use super::*;
use crate::metadata::MetadataVersion;
use crate::model::{CommittedRead, PartitionOrigin};
use crate::offsets::{Acknowledged, RowCount, RowOffset};

fn table() -> TableFingerprint {
    TableFingerprint(0x1234)
}

fn tp0() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn sid(s: &str) -> StreamId {
    StreamId::new(s).unwrap()
}

fn ledger() -> AtLeastOnceLedger {
    AtLeastOnceLedger::new(ProtocolConfig::new())
}

fn assigned(committed: Option<(i64, String)>, marked: bool, low: i64, high: i64) -> Event {
    Event::Assigned {
        tp: tp0(),
        table: RoutedTable {
            table: table(),
            marked,
        },
        assignment: Assignment {
            committed: committed.map(|(k, m)| CommittedRead {
                offset: NextOffset(k),
                metadata: m.into_bytes(),
            }),
            low: NextOffset(low),
            high: NextOffset(high),
            origin: PartitionOrigin::Existing,
        },
        read_at: MarkerRequests::ALL,
    }
}

fn alo() -> String {
    CommitMetadata::AtLeastOnce { table: table() }.encode(MetadataVersion::CURRENT)
}

fn started(actions: &[Action]) -> Option<(Incarnation, i64)> {
    actions.iter().find_map(|a| match a {
        Action::StartIncarnation {
            incarnation, from, ..
        } => Some((*incarnation, from.0)),
        _ => None,
    })
}

fn commit(actions: &[Action]) -> Option<(CommitId, Vec<(i64, String)>)> {
    actions.iter().find_map(|a| match a {
        Action::CommitOffsets { commit, entries } => Some((
            *commit,
            entries
                .iter()
                .map(|e| (e.offset.0, e.metadata.clone()))
                .collect(),
        )),
        _ => None,
    })
}

fn ack(inc: Incarnation, next: i64) -> Event {
    Event::RowsAcknowledged {
        tp: tp0(),
        ack: Acknowledged::from_append_response(
            inc,
            sid("_default"),
            RowCount(1),
            NextOffset(next),
            10,
        ),
    }
}

fn ok(commit: CommitId) -> Event {
    Event::CommitResult {
        commit,
        outcome: CommitOutcome::PerPartition(vec![(tp0(), Ok(()))]),
    }
}

fn has(actions: &[Action], wanted: &Action) -> bool {
    actions.iter().any(|a| a == wanted)
}

/// A running partition of a marked table, started from an at-least-once commit at `k`.
fn running_at(k: i64) -> (AtLeastOnceLedger, Incarnation) {
    running_with(ProtocolConfig::new(), k)
}

fn running_with(config: ProtocolConfig, k: i64) -> (AtLeastOnceLedger, Incarnation) {
    let mut l = AtLeastOnceLedger::new(config);
    let out = l.handle(assigned(Some((k, alo())), true, 0, 100));
    let (inc, from) = started(&out).expect("an at-least-once commit starts at once");
    assert_eq!(from, k);
    (l, inc)
}

#[test]
fn a_cycle_commits_the_acknowledged_prefix_with_the_at_least_once_metadata() {
    let (mut l, inc) = running_at(5);
    l.handle(ack(inc, 9));
    let (c, entries) = commit(&l.handle(Event::StartCycle)).expect("a commit");
    assert_eq!(entries, vec![(9, alo())]);
    assert!(l.cycle_in_flight());
    // One cycle at a time.
    assert!(commit(&l.handle(Event::StartCycle)).is_none());
    l.handle(ok(c));
    assert!(!l.cycle_in_flight());
    // Nothing new: nothing committed.
    assert!(commit(&l.handle(Event::StartCycle)).is_none());
}

#[test]
fn a_first_start_commits_only_after_the_marker_landed() {
    let mut l = ledger();
    let out = l.handle(assigned(None, false, 3, 10));
    let (inc, from) = started(&out).expect("a first start begins at the log start");
    assert_eq!(from, 3);
    // Its position is to be committed at once: the marker is asked for at once.
    assert!(has(
        &out,
        &Action::LabelTable {
            table: table(),
            attempt: 0
        }
    ));
    assert!(commit(&out).is_none(), "no commit on an unmarked table");
    l.handle(ack(inc, 7));
    let out = l.handle(Event::StartCycle);
    assert!(commit(&out).is_none(), "no commit on an unmarked table");
    assert!(
        !out.iter().any(|a| matches!(a, Action::LabelTable { .. })),
        "written once"
    );
    let out = l.handle(Event::LabelResult {
        table: table(),
        outcome: Err("denied".into()),
    });
    assert!(has(
        &out,
        &Action::LabelTable {
            table: table(),
            attempt: 1
        }
    ));
    assert!(commit(&out).is_none());
    let out = l.handle(Event::LabelResult {
        table: table(),
        outcome: Ok(()),
    });
    let (_, entries) = commit(&out).expect("the held-back commit goes once the marker landed");
    assert_eq!(entries, vec![(7, alo())]);
}

#[test]
fn a_first_start_on_a_marked_table_commits_its_position_at_once_not_a_cycle_later() {
    // A partition added at runtime to a table the group writes (or any start without an
    // offset once the marker is known): the position is committed in the assignment's own step.
    let mut l = ledger();
    let out = l.handle(Event::Assigned {
        tp: tp0(),
        table: RoutedTable {
            table: table(),
            marked: true,
        },
        assignment: Assignment {
            committed: None,
            low: NextOffset(2),
            high: NextOffset(10),
            origin: PartitionOrigin::AddedAtRuntime,
        },
        read_at: MarkerRequests::ALL,
    });
    assert_eq!(started(&out).map(|s| s.1), Some(2));
    let (c, entries) = commit(&out).expect("committed at once");
    assert_eq!(entries, vec![(2, alo())]);
    assert!(
        l.cycle_in_flight(),
        "an ordinary cycle, one commit at a time"
    );
    // A whole-request error: the regular cycles commit it again, no loop of early cycles.
    let out = l.handle(Event::CommitResult {
        commit: c,
        outcome: CommitOutcome::Rejected("coordinator moved".into()),
    });
    assert!(commit(&out).is_none());
    let (c, entries) = commit(&l.handle(Event::StartCycle)).expect("the regular cycle");
    assert_eq!(entries, vec![(2, alo())]);
    assert!(commit(&l.handle(ok(c))).is_none());
}

#[test]
fn a_first_position_waits_for_the_cycle_in_flight() {
    let (mut l, inc) = running_at(0);
    l.handle(ack(inc, 3));
    let (c, _) = commit(&l.handle(Event::StartCycle)).unwrap();
    let tp1 = TopicPartition::new("t", 1);
    let out = l.handle(Event::Assigned {
        tp: tp1.clone(),
        table: RoutedTable {
            table: table(),
            marked: true,
        },
        assignment: Assignment {
            committed: None,
            low: NextOffset(0),
            high: NextOffset(4),
            origin: PartitionOrigin::AddedAtRuntime,
        },
        read_at: MarkerRequests::ALL,
    });
    assert!(started(&out).is_some());
    assert!(commit(&out).is_none(), "one commit in flight at a time");
    let out = l.handle(ok(c));
    let Some(Action::CommitOffsets { entries, .. }) = out
        .iter()
        .find(|a| matches!(a, Action::CommitOffsets { .. }))
    else {
        panic!("the first position goes as soon as the cycle in flight ended: {out:?}");
    };
    assert_eq!(
        entries
            .iter()
            .map(|e| (e.tp.clone(), e.offset))
            .collect::<Vec<_>>(),
        vec![(tp1, NextOffset(0))]
    );
}

#[test]
fn a_partition_without_an_offset_under_a_marker_this_process_wrote_is_a_missing_checkpoint() {
    // The route was read before the marker existed (`marked: false`); the ledger wrote it since.
    let mut l = ledger();
    l.handle(assigned(None, false, 0, 10));
    l.handle(Event::LabelResult {
        table: table(),
        outcome: Ok(()),
    });
    let tp1 = TopicPartition::new("t", 1);
    let out = l.handle(Event::Assigned {
        tp: tp1.clone(),
        table: RoutedTable {
            table: table(),
            marked: false,
        },
        assignment: Assignment {
            committed: None,
            low: NextOffset(0),
            high: NextOffset(10),
            origin: PartitionOrigin::Existing,
        },
        read_at: MarkerRequests::ALL,
    });
    assert!(started(&out).is_none(), "never a first start: {out:?}");
    assert!(has(
        &out,
        &Action::FailPartition {
            tp: tp1,
            reason: FailReason::CheckpointMissing
        }
    ));
}

#[test]
fn a_partition_read_before_the_marker_this_process_wrote_is_a_first_start() {
    // Both offsets were received before the marker was asked for; the second partition's
    // route resolved after the first partition's start wrote the marker.
    let mut l = ledger();
    let read_at = l.marker_requests();
    let Event::Assigned { tp, assignment, .. } = assigned(None, false, 0, 10) else {
        unreachable!()
    };
    let unmarked = RoutedTable {
        table: table(),
        marked: false,
    };
    l.handle(Event::Assigned {
        tp,
        table: unmarked,
        assignment: assignment.clone(),
        read_at,
    });
    l.handle(Event::LabelResult {
        table: table(),
        outcome: Ok(()),
    });
    let tp1 = TopicPartition::new("t", 1);
    let out = l.handle(Event::Assigned {
        tp: tp1.clone(),
        table: unmarked,
        assignment,
        read_at,
    });
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::FailPartition { .. })),
        "{out:?}"
    );
    assert!(has(
        &out,
        &Action::Count(Outcome::Started {
            tp: tp1,
            case: crate::protocol::StartCase::FirstStart,
            at: NextOffset(0)
        })
    ));
}

#[test]
fn a_stale_writer_cannot_move_the_prefix_and_a_lost_stream_restarts_from_it() {
    let (mut l, inc) = running_at(0);
    l.handle(ack(inc, 4));
    let out = l.handle(Event::StreamLost {
        tp: tp0(),
        stream: sid("_default"),
    });
    let (next, from) = started(&out).expect("restarted");
    assert_eq!(from, 4);
    assert_ne!(next, inc);
    // The old writer's late acknowledgement is not the new one's.
    l.handle(ack(inc, 50));
    assert_eq!(l.acknowledged(&tp0()), Some(NextOffset(4)));
    l.handle(ack(next, 6));
    assert_eq!(l.acknowledged(&tp0()), Some(NextOffset(6)));
}

#[test]
fn a_revoke_drains_then_commits_once_then_releases() {
    let (mut l, inc) = running_at(0);
    l.handle(ack(inc, 3));
    let out = l.handle(Event::RevokeBegan {
        tp: tp0(),
        lost: false,
    });
    assert!(has(&out, &Action::StopWriter { tp: tp0() }));
    assert!(commit(&out).is_none(), "nothing before the drain");
    // Acknowledgements of the drain still count.
    l.handle(ack(inc, 5));
    let out = l.handle(Event::WriterStopped { tp: tp0() });
    let (c, entries) = commit(&out).expect("the handoff commit");
    assert_eq!(entries, vec![(5, alo())]);
    assert!(commit(&l.handle(Event::StartCycle)).is_none());
    let out = l.handle(ok(c));
    assert!(has(&out, &Action::Release { tp: tp0() }));
    assert_eq!(l.partitions().count(), 0);
}

#[test]
fn a_lost_assignment_commits_nothing() {
    let (mut l, inc) = running_at(0);
    l.handle(ack(inc, 3));
    let out = l.handle(Event::RevokeBegan {
        tp: tp0(),
        lost: true,
    });
    assert!(has(&out, &Action::Release { tp: tp0() }));
    assert!(commit(&out).is_none());
    assert!(commit(&l.handle(Event::WriterStopped { tp: tp0() })).is_none());
}

#[test]
fn shutdown_commits_every_final_prefix_once_then_leaves() {
    let (mut l, inc) = running_at(2);
    l.handle(ack(inc, 8));
    let out = l.handle(Event::Shutdown);
    assert!(has(&out, &Action::StopWriter { tp: tp0() }));
    assert!(
        commit(&l.handle(Event::StartCycle)).is_none(),
        "no cycle in shutdown"
    );
    let out = l.handle(Event::WriterStopped { tp: tp0() });
    let (c, entries) = commit(&out).expect("the final commit");
    assert_eq!(entries, vec![(8, alo())]);
    let out = l.handle(ok(c));
    assert!(has(&out, &Action::ShutdownComplete));
    assert!(l.handle(Event::StartCycle).is_empty(), "done");
}

#[test]
fn a_shutdown_before_the_first_cycle_writes_the_marker_then_commits() {
    // A SIGTERM before any cycle asked for the marker: the clean stop must still leave the
    // acknowledged prefix committed (tests/e2e/sink_at_least_once.rs found it uncommitted).
    let mut l = ledger();
    let out = l.handle(assigned(None, false, 0, 10));
    let (inc, _) = started(&out).expect("a first start");
    assert!(has(
        &out,
        &Action::LabelTable {
            table: table(),
            attempt: 0
        }
    ));
    l.handle(ack(inc, 6));
    l.handle(Event::Shutdown);
    let out = l.handle(Event::WriterStopped { tp: tp0() });
    assert!(commit(&out).is_none(), "no commit before the marker");
    assert!(
        !has(&out, &Action::ShutdownComplete),
        "waits for the marker"
    );
    let out = l.handle(Event::LabelResult {
        table: table(),
        outcome: Ok(()),
    });
    let (c, entries) = commit(&out).expect("the final commit once the marker landed");
    assert_eq!(entries, vec![(6, alo())]);
    assert!(has(&l.handle(ok(c)), &Action::ShutdownComplete));
}

#[test]
fn shutdown_with_nothing_new_leaves_without_a_commit() {
    let (mut l, _) = running_at(2);
    l.handle(Event::Shutdown);
    let out = l.handle(Event::WriterStopped { tp: tp0() });
    assert!(commit(&out).is_none());
    assert!(has(&out, &Action::ShutdownComplete));
}

#[test]
fn a_rejected_commit_abandons_the_cycle_and_the_next_one_retries() {
    let (mut l, inc) = running_at(0);
    l.handle(ack(inc, 3));
    let (c, _) = commit(&l.handle(Event::StartCycle)).unwrap();
    let out = l.handle(Event::CommitResult {
        commit: c,
        outcome: CommitOutcome::Rejected("coordinator moved".into()),
    });
    assert!(has(&out, &Action::Count(Outcome::CycleAbandoned)));
    let (_, entries) = commit(&l.handle(Event::StartCycle)).expect("retried");
    assert_eq!(entries, vec![(3, alo())]);
}

#[test]
fn an_exactly_once_checkpoint_is_replaced_then_its_stream_finalized() {
    let mut l = ledger();
    let eo = CommitMetadata::ExactlyOnce {
        table: table(),
        stream: Some(sid("s1")),
        flush_to: Some(RowOffset(9)),
        visible_through: NextOffset(10),
    }
    .encode(MetadataVersion::CURRENT);
    // f == K: nothing to re-flush, the partition starts at K.
    let out = l.handle(assigned(Some((10, eo)), true, 0, 20));
    let (_, from) = started(&out).expect("started");
    assert_eq!(from, 10);
    // No new record, yet the exactly-once checkpoint is replaced by ours.
    let (c, entries) = commit(&l.handle(Event::StartCycle)).expect("a commit");
    assert_eq!(entries, vec![(10, alo())]);
    let out = l.handle(ok(c));
    assert!(has(
        &out,
        &Action::FinalizeStream {
            tp: tp0(),
            stream: sid("s1")
        }
    ));
}

#[test]
fn an_unflushed_exactly_once_checkpoint_is_reflushed_before_appending() {
    let mut l = ledger();
    let eo = CommitMetadata::ExactlyOnce {
        table: table(),
        stream: Some(sid("s1")),
        flush_to: Some(RowOffset(4)),
        visible_through: NextOffset(5),
    }
    .encode(MetadataVersion::CURRENT);
    let out = l.handle(assigned(Some((10, eo)), true, 0, 20));
    assert!(started(&out).is_none(), "the re-flush comes first");
    let flush = out
        .iter()
        .find_map(|a| match a {
            Action::FlushRows {
                stream, through, ..
            } => Some((stream.clone(), *through)),
            _ => None,
        })
        .expect("a recovery flush");
    let out = l.handle(Event::RecoveryFlushResult {
        tp: tp0(),
        stream: flush.0,
        through: flush.1,
        outcome: crate::protocol::FlushOutcome::Flushed,
    });
    assert_eq!(started(&out).map(|s| s.1), Some(10));
}

#[test]
fn a_failed_recovery_commits_nothing_and_is_released_on_revoke() {
    let mut l = ledger();
    let out = l.handle(assigned(Some((10, "garbage".into())), true, 0, 20));
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::FailPartition { .. }))
    );
    assert!(commit(&l.handle(Event::StartCycle)).is_none());
    let out = l.handle(Event::RevokeBegan {
        tp: tp0(),
        lost: false,
    });
    assert!(has(&out, &Action::Release { tp: tp0() }));
}

#[test]
fn an_out_of_range_fetch_fails_the_partition_but_keeps_its_prefix_committed() {
    let (mut l, inc) = running_at(0);
    l.handle(ack(inc, 3));
    let out = l.handle(Event::OffsetOutOfRange {
        tp: tp0(),
        incarnation: inc,
        position: NextOffset(3),
        low: NextOffset(7),
    });
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::FailPartition { .. }))
    );
    let (_, entries) = commit(&l.handle(Event::StartCycle)).expect("the prefix is committed");
    assert_eq!(entries, vec![(3, alo())]);
}

#[test]
fn an_out_of_range_fetch_under_earliest_counts_the_gap_and_continues_at_the_log_start() {
    let mut config = ProtocolConfig::new();
    config.on_out_of_range = OutOfRangePolicy::Earliest;
    let (mut l, inc) = running_with(config, 0);
    l.handle(ack(inc, 3));
    let out = l.handle(Event::OffsetOutOfRange {
        tp: tp0(),
        incarnation: inc,
        position: NextOffset(3),
        low: NextOffset(7),
    });
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::FailPartition { .. })),
        "{out:?}"
    );
    assert!(has(
        &out,
        &Action::Count(Outcome::RecordsLost {
            tp: tp0(),
            from: NextOffset(3),
            to: NextOffset(7),
        })
    ));
    assert!(has(
        &out,
        &Action::Seek {
            tp: tp0(),
            incarnation: inc,
            to: NextOffset(7),
        }
    ));
    l.handle(ack(inc, 9));
    let (_, entries) = commit(&l.handle(Event::StartCycle)).expect("a commit past the gap");
    assert_eq!(entries, vec![(9, alo())]);
}

#[test]
fn a_gap_with_no_record_after_it_is_committed_over_once_nothing_before_it_is_in_flight() {
    // Retention deleted the rest of an idle partition: the log start is its end, and no record
    // will ever be acknowledged after the gap. The commit still passes it, but only once the
    // records delivered before it (3..5, in flight when it was reported) are acknowledged.
    let mut config = ProtocolConfig::new();
    config.on_out_of_range = OutOfRangePolicy::Earliest;
    let (mut l, inc) = running_with(config, 0);
    l.handle(ack(inc, 3));
    l.handle(Event::OffsetOutOfRange {
        tp: tp0(),
        incarnation: inc,
        position: NextOffset(5),
        low: NextOffset(9),
    });
    let (id, entries) = commit(&l.handle(Event::StartCycle)).expect("the prefix is committed");
    assert_eq!(entries, vec![(3, alo())], "records 3 and 4 are in flight");
    l.handle(Event::CommitResult {
        commit: id,
        outcome: CommitOutcome::PerPartition(vec![(tp0(), Ok(()))]),
    });
    l.handle(ack(inc, 5));
    let (_, entries) = commit(&l.handle(Event::StartCycle)).expect("a commit over the gap");
    assert_eq!(entries, vec![(9, alo())]);
}

#[test]
fn a_missing_checkpoint_under_resolve_starts_at_the_log_start() {
    // The table's highest visible offset is no safe start: rows on `_default` are not a prefix
    // of the partition (a refused request below a later one's rows), so a missing checkpoint is
    // replayed from the log start instead of resolved.
    let mut config = ProtocolConfig::new();
    config.on_missing_checkpoint = MissingCheckpointPolicy::Resolve;
    let mut l = AtLeastOnceLedger::new(config);
    let out = l.handle(assigned(None, true, 5, 100));
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::ResolveVisible { .. })),
        "{out:?}"
    );
    assert_eq!(started(&out).map(|(_, from)| from), Some(5), "{out:?}");
}
