//! Unit tests of the protocol, one scenario per test.

use super::*;
use crate::metadata::{MetadataError, MetadataVersion};
use crate::offsets::RowCount;

fn table() -> TableFingerprint {
    TableFingerprint(0x1234)
}

fn tp0() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn sid(s: &str) -> StreamId {
    StreamId::new(s).unwrap()
}

fn protocol() -> CheckpointProtocol {
    CheckpointProtocol::new(ProtocolConfig::new())
}

fn metadata(stream: Option<&str>, r: Option<i64>, f: i64) -> Vec<u8> {
    CommitMetadata::ExactlyOnce {
        table: table(),
        stream: stream.map(sid),
        flush_to: r.map(RowOffset),
        visible_through: NextOffset(f),
    }
    .encode(MetadataVersion::CURRENT)
    .into_bytes()
}

/// `tp0`'s table, carrying this group's marker.
fn routed() -> RoutedTable {
    RoutedTable {
        table: table(),
        marked: true,
    }
}

fn assigned(committed: Option<(i64, Vec<u8>)>, low: i64, high: i64) -> Event {
    Event::Assigned {
        tp: tp0(),
        table: routed(),
        assignment: Assignment {
            committed: committed.map(|(k, m)| CommittedRead {
                offset: NextOffset(k),
                metadata: m,
            }),
            low: NextOffset(low),
            high: NextOffset(high),
            origin: PartitionOrigin::Existing,
        },
        read_at: MarkerRequests::ALL,
    }
}

fn started_at(actions: &[Action]) -> Option<(Incarnation, i64)> {
    actions.iter().find_map(|a| match a {
        Action::StartIncarnation {
            incarnation, from, ..
        } => Some((*incarnation, from.0)),
        _ => None,
    })
}

fn failed(actions: &[Action]) -> Option<&FailReason> {
    actions.iter().find_map(|a| match a {
        Action::FailPartition { reason, .. } => Some(reason),
        _ => None,
    })
}

fn commit(actions: &[Action]) -> Option<(CommitId, Vec<CommitEntry>)> {
    actions.iter().find_map(|a| match a {
        Action::CommitOffsets { commit, entries } => Some((*commit, entries.clone())),
        _ => None,
    })
}

fn flushes(actions: &[Action]) -> Vec<(StreamId, RowOffset)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::FlushRows {
                stream, through, ..
            } => Some((stream.clone(), *through)),
            _ => None,
        })
        .collect()
}

fn finalized(actions: &[Action]) -> Vec<StreamId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::FinalizeStream { stream, .. } => Some(stream.clone()),
            _ => None,
        })
        .collect()
}

fn ok(commit: CommitId) -> Event {
    Event::CommitResult {
        commit,
        outcome: CommitOutcome::PerPartition(vec![(tp0(), Ok(()))]),
    }
}

fn ack(inc: Incarnation, stream: &str, rows: i64, next: i64) -> Event {
    Event::RowsAcknowledged {
        tp: tp0(),
        ack: Acknowledged::from_append_response(
            inc,
            sid(stream),
            RowCount(rows),
            NextOffset(next),
            rows as u64 * 10,
        ),
    }
}

fn flush_result(stream: &str, through: i64, outcome: FlushOutcome) -> Event {
    Event::FlushResult {
        tp: tp0(),
        stream: sid(stream),
        through: RowOffset(through),
        outcome,
    }
}

fn recovery_result(stream: &str, through: i64, outcome: FlushOutcome) -> Event {
    Event::RecoveryFlushResult {
        tp: tp0(),
        stream: sid(stream),
        through: RowOffset(through),
        outcome,
    }
}

/// A running partition at offset 10 with nothing in doubt; returns its incarnation.
fn running(p: &mut CheckpointProtocol) -> Incarnation {
    let a = p.handle(assigned(Some((10, metadata(None, None, 10))), 0, 100));
    started_at(&a).unwrap().0
}

/// Appends rows 0..n (records 10..10+n) and commits them; returns the flush request.
fn committed(p: &mut CheckpointProtocol, inc: Incarnation, n: i64) -> Vec<Action> {
    p.handle(ack(inc, "s1", n, 10 + n));
    let (id, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert_eq!(entries[0].offset, NextOffset(10 + n));
    p.handle(ok(id))
}

#[test]
fn a_first_start_uses_the_initial_position_and_a_lost_checkpoint_fails_closed() {
    let mut first = CheckpointProtocol::new(ProtocolConfig::new());
    let Event::Assigned { tp, assignment, .. } = assigned(None, 5, 50) else {
        unreachable!()
    };
    let unmarked = RoutedTable {
        table: table(),
        marked: false,
    };
    let a = first.handle(Event::Assigned {
        tp,
        table: unmarked,
        assignment,
        read_at: MarkerRequests::ALL,
    });
    assert_eq!(started_at(&a).unwrap().1, 5);
    assert!(a.contains(&Action::Count(Outcome::Started {
        tp: tp0(),
        case: StartCase::FirstStart,
        at: NextOffset(5)
    })));

    // The table says this group committed before: its offsets expired.
    let a = protocol().handle(assigned(None, 5, 50));
    assert_eq!(failed(&a), Some(&FailReason::CheckpointMissing));
    assert!(started_at(&a).is_none());
}

/// Two partitions of an unmarked table read without an offset at once; one starts, its marker
/// lands, then the other's route resolves. Its offset was read before the marker existed, so it
/// is a first start too, not a missing checkpoint.
fn siblings_read_before_the_marker(read_at_sibling: MarkerRequests) -> Vec<Action> {
    let mut p = protocol();
    let unmarked = RoutedTable {
        table: table(),
        marked: false,
    };
    let none = Assignment {
        committed: None,
        low: NextOffset(0),
        high: NextOffset(9),
        origin: PartitionOrigin::Existing,
    };
    // Both offsets were received before any marker was asked for.
    let read_at = p.marker_requests();
    let a = p.handle(Event::Assigned {
        tp: TopicPartition::new("later", 1),
        table: unmarked,
        assignment: none.clone(),
        read_at,
    });
    assert!(a.contains(&Action::LabelTable {
        table: table(),
        attempt: 0
    }));
    p.handle(Event::LabelResult {
        table: table(),
        outcome: Ok(()),
    });
    p.handle(Event::Assigned {
        tp: TopicPartition::new("later", 0),
        table: unmarked,
        assignment: none,
        read_at: read_at_sibling,
    })
}

#[test]
fn a_partition_read_before_a_sibling_marked_the_table_is_a_first_start() {
    let a = siblings_read_before_the_marker(MarkerRequests(0));
    assert!(failed(&a).is_none(), "{a:?}");
    assert!(a.contains(&Action::Count(Outcome::Started {
        tp: TopicPartition::new("later", 0),
        case: StartCase::FirstStart,
        at: NextOffset(0)
    })));
    // Read after the marker was asked for (it may have landed before the read): the
    // partition's absence of an offset is a missing checkpoint, as before.
    let a = siblings_read_before_the_marker(MarkerRequests(1));
    assert_eq!(failed(&a), Some(&FailReason::CheckpointMissing));
    let a = siblings_read_before_the_marker(MarkerRequests::ALL);
    assert_eq!(failed(&a), Some(&FailReason::CheckpointMissing));
}

#[test]
fn a_partition_added_at_runtime_starts_at_the_earliest_offset() {
    let a = protocol().handle(Event::Assigned {
        tp: tp0(),
        table: routed(),
        assignment: Assignment {
            committed: None,
            low: NextOffset(0),
            high: NextOffset(7),
            origin: PartitionOrigin::AddedAtRuntime,
        },
        read_at: MarkerRequests::ALL,
    });
    assert_eq!(started_at(&a).unwrap().1, 0);
}

#[test]
fn unreadable_or_foreign_checkpoints_fail_closed() {
    let raw = b"kbq;v=9;f=1".to_vec();
    let a = protocol().handle(assigned(Some((10, raw)), 0, 20));
    assert!(
        matches!(failed(&a), Some(FailReason::Metadata(MetadataError::UnknownVersion { raw, .. })) if raw == "kbq;v=9;f=1")
    );
    let other = CommitMetadata::AtLeastOnce {
        table: TableFingerprint(7),
    }
    .encode(MetadataVersion::CURRENT)
    .into_bytes();
    let a = protocol().handle(assigned(Some((10, other)), 0, 20));
    assert!(matches!(failed(&a), Some(FailReason::ForeignTable { .. })));
    let a = protocol().handle(assigned(Some((30, metadata(None, None, 30))), 0, 20));
    assert!(matches!(
        failed(&a),
        Some(FailReason::AboveHighWatermark { .. })
    ));
}

#[test]
fn an_operator_reset_starts_at_the_reset_offset() {
    let a = protocol().handle(assigned(Some((12, Vec::new())), 0, 20));
    assert_eq!(started_at(&a).unwrap().1, 12);
    assert!(a.iter().any(|x| matches!(
        x,
        Action::Count(Outcome::Started {
            case: StartCase::OperatorReset,
            ..
        })
    )));
}

#[test]
fn a_checkpoint_below_the_log_start_is_never_reset_silently() {
    let a = protocol().handle(assigned(Some((3, metadata(None, None, 3))), 8, 20));
    assert_eq!(
        failed(&a),
        Some(&FailReason::OutOfRange {
            from: NextOffset(3),
            low: NextOffset(8)
        })
    );
    let mut config = ProtocolConfig::new();
    config.on_out_of_range = OutOfRangePolicy::Earliest;
    let a =
        CheckpointProtocol::new(config).handle(assigned(Some((3, metadata(None, None, 3))), 8, 20));
    assert_eq!(started_at(&a).unwrap().1, 8);
    assert!(a.contains(&Action::Count(Outcome::RecordsLost {
        tp: tp0(),
        from: NextOffset(3),
        to: NextOffset(8)
    })));
}

#[test]
fn recovery_re_flushes_before_anything_is_appended() {
    let mut p = protocol();
    let a = p.handle(assigned(
        Some((20, metadata(Some("old"), Some(9), 10))),
        0,
        30,
    ));
    assert_eq!(flushes(&a), vec![(sid("old"), RowOffset(9))]);
    assert!(started_at(&a).is_none(), "no writer before the re-flush");
    // A transient error retries with backoff, never rewinds.
    let a = p.handle(recovery_result(
        "old",
        9,
        FlushOutcome::Transient("unavailable".into()),
    ));
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::FlushRows { attempt: 1, .. }))
    );
    let a = p.handle(recovery_result("old", 9, FlushOutcome::Flushed));
    assert_eq!(started_at(&a).unwrap().1, 20);
    // The old stream is finalized only after a commit that no longer needs it.
    assert!(finalized(&a).is_empty());
    let (id, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert_eq!(entries[0].offset, NextOffset(20));
    assert_eq!(
        CommitMetadata::parse(entries[0].metadata.as_bytes()).unwrap(),
        CommitMetadata::parse(&metadata(None, None, 20)).unwrap(),
        "an idle recovered partition rests at f == K"
    );
    assert_eq!(finalized(&p.handle(ok(id))), vec![sid("old")]);
}

#[test]
fn a_checkpoint_at_rest_needs_no_flush_even_if_its_stream_is_gone() {
    let a = protocol().handle(assigned(
        Some((20, metadata(Some("old"), Some(9), 20))),
        0,
        30,
    ));
    assert!(flushes(&a).is_empty());
    assert_eq!(started_at(&a).unwrap().1, 20);
}

#[test]
fn already_exists_on_re_flush_is_an_anomaly() {
    let mut p = protocol();
    p.handle(assigned(
        Some((20, metadata(Some("old"), Some(9), 10))),
        0,
        30,
    ));
    let a = p.handle(recovery_result("old", 9, FlushOutcome::AlreadyExists));
    assert!(matches!(failed(&a), Some(FailReason::Anomaly { .. })));
    let mut config = ProtocolConfig::new();
    config.on_anomaly = AnomalyPolicy::Continue;
    let mut p = CheckpointProtocol::new(config);
    p.handle(assigned(
        Some((20, metadata(Some("old"), Some(9), 10))),
        0,
        30,
    ));
    let a = p.handle(recovery_result("old", 9, FlushOutcome::AlreadyExists));
    assert_eq!(started_at(&a).unwrap().1, 20);
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Count(Outcome::Anomaly { .. })))
    );
}

fn unchanged_reread() -> Event {
    let Event::Assigned { tp, assignment, .. } =
        assigned(Some((20, metadata(Some("old"), Some(9), 10))), 0, 30)
    else {
        unreachable!()
    };
    Event::CheckpointReread { tp, assignment }
}

#[test]
fn a_stream_finalized_by_a_newer_owner_is_not_a_lost_stream() {
    // A zombie recovering a checkpoint that the new owner has superseded meanwhile: the
    // re-read shows the newer checkpoint, so there is nothing to rewind.
    let mut p = protocol();
    p.handle(assigned(
        Some((20, metadata(Some("old"), Some(9), 10))),
        0,
        30,
    ));
    p.handle(recovery_result("old", 9, FlushOutcome::StreamFinalized));
    let Event::Assigned { tp, assignment, .. } =
        assigned(Some((24, metadata(None, None, 24))), 0, 30)
    else {
        unreachable!()
    };
    let a = p.handle(Event::CheckpointReread { tp, assignment });
    assert_eq!(started_at(&a).unwrap().1, 24);
    assert!(
        !a.iter()
            .any(|x| matches!(x, Action::Count(Outcome::Rewound { .. })))
    );
    assert!(a.contains(&Action::Count(Outcome::CheckpointMoved { tp: tp0() })));
}

#[test]
fn a_lost_stream_follows_the_policy_and_other_errors_never_rewind() {
    // rewind (default): NOT_FOUND is retried first, then [f, K) is re-delivered, counted.
    let mut p = protocol();
    p.handle(assigned(
        Some((20, metadata(Some("old"), Some(9), 10))),
        0,
        30,
    ));
    for _ in 0..3 {
        let a = p.handle(recovery_result("old", 9, FlushOutcome::NotFound));
        assert!(!flushes(&a).is_empty(), "not found can be transient");
    }
    let a = p.handle(recovery_result("old", 9, FlushOutcome::NotFound));
    assert_eq!(a, vec![Action::ReadCommitted { tp: tp0() }]);
    let a = p.handle(unchanged_reread());
    assert_eq!(started_at(&a).unwrap().1, 10);
    assert!(a.contains(&Action::Count(Outcome::Rewound {
        tp: tp0(),
        stream: sid("old"),
        from: NextOffset(10),
        to: NextOffset(20)
    })));

    // resolve: continue after the highest visible offset.
    let mut config = ProtocolConfig::new();
    config.lost_stream = LostStreamPolicy::Resolve;
    let mut p = CheckpointProtocol::new(config.clone());
    p.handle(assigned(
        Some((20, metadata(Some("old"), Some(9), 10))),
        0,
        30,
    ));
    p.handle(recovery_result("old", 9, FlushOutcome::StreamFinalized));
    let a = p.handle(unchanged_reread());
    assert!(a.iter().any(|x| matches!(x, Action::ResolveVisible { .. })));
    let a = p.handle(Event::ResolveResult {
        tp: tp0(),
        outcome: Ok(Some(KafkaOffset(14))),
    });
    assert_eq!(started_at(&a).unwrap().1, 15);

    // fail
    config.lost_stream = LostStreamPolicy::Fail;
    let mut p = CheckpointProtocol::new(config);
    p.handle(assigned(
        Some((20, metadata(Some("old"), Some(9), 10))),
        0,
        30,
    ));
    p.handle(recovery_result("old", 9, FlushOutcome::StreamFinalized));
    let a = p.handle(unchanged_reread());
    assert!(matches!(failed(&a), Some(FailReason::LostStream { .. })));

    // credentials or corrupt metadata: fail closed, never rewind.
    let mut p = protocol();
    p.handle(assigned(
        Some((20, metadata(Some("old"), Some(9), 10))),
        0,
        30,
    ));
    let a = p.handle(recovery_result(
        "old",
        9,
        FlushOutcome::Fatal("permission denied".into()),
    ));
    assert!(matches!(failed(&a), Some(FailReason::FlushFatal(_))));
    assert!(started_at(&a).is_none());
}

/// `lost_offsets: resolve`: a partition without a committed offset in a marked
/// table continues after its highest visible row, or at the log start when none is visible
/// (a new topic routed to the table), and fails when the query keeps failing, even with
/// `resolve_fallback: rewind` (there is no `f` to rewind to).
#[test]
fn a_missing_checkpoint_resolves_where_the_table_says() {
    let mut config = ProtocolConfig::new();
    config.on_missing_checkpoint = MissingCheckpointPolicy::Resolve;
    config.resolve_attempts = 2;
    config.resolve_fallback = ResolveFallback::Rewind;
    let resolved =
        |outcome: Result<Option<KafkaOffset>, String>| Event::ResolveResult { tp: tp0(), outcome };

    // Rows up to offset 14 are visible: continue at 15, counted as a missing checkpoint.
    let mut p = CheckpointProtocol::new(config.clone());
    let a = p.handle(assigned(None, 5, 30));
    assert!(a.iter().any(|x| matches!(x, Action::ResolveVisible { .. })));
    assert!(started_at(&a).is_none(), "nothing starts before the answer");
    let a = p.handle(resolved(Ok(Some(KafkaOffset(14)))));
    assert_eq!(started_at(&a).unwrap().1, 15);
    assert!(a.iter().any(|x| matches!(
        x,
        Action::Count(Outcome::Started {
            case: StartCase::MissingCheckpoint,
            at: NextOffset(15),
            ..
        })
    )));

    // Nothing visible: everything Kafka still has, from the log start.
    let mut p = CheckpointProtocol::new(config.clone());
    p.handle(assigned(None, 5, 30));
    let a = p.handle(resolved(Ok(None)));
    assert_eq!(started_at(&a).unwrap().1, 5);

    // Visible rows end below the log start: records were lost, out_of_range decides.
    let mut p = CheckpointProtocol::new(config.clone());
    p.handle(assigned(None, 5, 30));
    let a = p.handle(resolved(Ok(Some(KafkaOffset(2)))));
    assert!(matches!(failed(&a), Some(FailReason::OutOfRange { .. })));

    // The query keeps failing: fail, never a guess.
    let mut p = CheckpointProtocol::new(config);
    p.handle(assigned(None, 5, 30));
    let a = p.handle(resolved(Err("query failed".into())));
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::ResolveVisible { attempt: 1, .. }))
    );
    let a = p.handle(resolved(Err("query failed".into())));
    assert!(matches!(failed(&a), Some(FailReason::ResolveFailed { .. })));
    assert!(started_at(&a).is_none());
}

#[test]
fn nothing_is_flushed_before_its_commit_succeeds() {
    let mut p = protocol();
    let inc = running(&mut p);
    p.handle(ack(inc, "s1", 3, 13));
    let a = p.handle(Event::StartCycle);
    assert!(flushes(&a).is_empty());
    let (id, _) = commit(&a).unwrap();
    // A whole-request error abandons the cycle: no flush, no finalize.
    let a = p.handle(Event::CommitResult {
        commit: id,
        outcome: CommitOutcome::Rejected("rebalance in progress".into()),
    });
    assert!(flushes(&a).is_empty() && finalized(&a).is_empty());
    let (id, _) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert_eq!(flushes(&p.handle(ok(id))), vec![(sid("s1"), RowOffset(2))]);
}

#[test]
fn a_failed_flush_is_retried_every_cycle_and_an_idle_partition_rests_at_f_equals_k() {
    let mut p = protocol();
    let inc = running(&mut p);
    let a = committed(&mut p, inc, 3);
    assert_eq!(flushes(&a), vec![(sid("s1"), RowOffset(2))]);
    p.handle(flush_result(
        "s1",
        2,
        FlushOutcome::Transient("deadline".into()),
    ));
    // No new rows: the next cycle commits nothing and retries the flush.
    let a = p.handle(Event::StartCycle);
    assert!(commit(&a).is_none());
    assert_eq!(flushes(&a), vec![(sid("s1"), RowOffset(2))]);
    p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
    // One more commit carries f == K; then the partition rests.
    let (id, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert!(entries[0].metadata.ends_with(";f=13"));
    assert!(flushes(&p.handle(ok(id))).is_empty());
    assert_eq!(p.handle(Event::StartCycle), vec![]);
}

#[test]
fn a_gap_at_the_log_end_is_committed_over_once_nothing_before_it_is_in_flight() {
    // Retention deleted the rest of an idle partition (records 15..20, never appended): the log
    // start is its end, so no record follows the gap to be acknowledged. K must still reach
    // the log start, or the partition never rests and its lag never reaches 0; but not before
    // records 13 and 14, delivered before the gap, are acknowledged.
    let mut config = ProtocolConfig::new();
    config.on_out_of_range = OutOfRangePolicy::Earliest;
    let mut p = CheckpointProtocol::new(config);
    let inc = running(&mut p);
    let a = committed(&mut p, inc, 3);
    p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
    let a = [
        a,
        p.handle(Event::OffsetOutOfRange {
            tp: tp0(),
            incarnation: inc,
            position: NextOffset(15),
            low: NextOffset(20),
        }),
    ]
    .concat();
    assert!(a.contains(&Action::Seek {
        tp: tp0(),
        incarnation: inc,
        to: NextOffset(20)
    }));
    let (id, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert_eq!(entries[0].offset, NextOffset(13), "13 and 14 are in flight");
    p.handle(ok(id));
    p.handle(ack(inc, "s1", 5, 15));
    let (id, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert_eq!(entries[0].offset, NextOffset(20), "over the counted gap");
    assert_eq!(flushes(&p.handle(ok(id))), vec![(sid("s1"), RowOffset(4))]);
    p.handle(flush_result("s1", 4, FlushOutcome::Flushed));
    let (id, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert!(entries[0].metadata.ends_with(";f=20"), "{entries:?}");
    p.handle(ok(id));
    assert_eq!(
        p.handle(Event::StartCycle),
        vec![],
        "at rest at the log end"
    );
    // A record after the gap moves the prefix as any other.
    p.handle(ack(inc, "s1", 6, 21));
    let (_, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert_eq!(entries[0].offset, NextOffset(21));
}

#[test]
fn a_gap_reported_with_nothing_in_flight_is_committed_over_at_once() {
    let mut config = ProtocolConfig::new();
    config.on_out_of_range = OutOfRangePolicy::Earliest;
    let mut p = CheckpointProtocol::new(config);
    let inc = running(&mut p);
    p.handle(Event::OffsetOutOfRange {
        tp: tp0(),
        incarnation: inc,
        position: NextOffset(10),
        low: NextOffset(12),
    });
    let (_, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert_eq!(entries[0].offset, NextOffset(12));
    assert!(entries[0].metadata.ends_with(";f=12"), "nothing to flush");
}

#[test]
fn a_partition_whose_commit_keeps_failing_is_isolated() {
    let mut p = protocol();
    let inc = running(&mut p);
    p.handle(ack(inc, "s1", 3, 13));
    for n in 1..=5 {
        let (id, _) = commit(&p.handle(Event::StartCycle)).unwrap();
        let a = p.handle(Event::CommitResult {
            commit: id,
            outcome: CommitOutcome::PerPartition(vec![(
                tp0(),
                Err(CommitError::Partition("too large".into())),
            )]),
        });
        assert!(flushes(&a).is_empty());
        if n == 5 {
            assert_eq!(failed(&a), Some(&FailReason::Isolated { failures: 5 }));
            assert!(a.contains(&Action::StopWriter { tp: tp0() }));
        } else {
            assert!(failed(&a).is_none());
        }
    }
}

/// A cycle answered per partition with `error`.
fn refused(commit: CommitId, error: CommitError) -> Event {
    Event::CommitResult {
        commit,
        outcome: CommitOutcome::PerPartition(vec![(tp0(), Err(error))]),
    }
}

#[test]
fn whole_request_commit_errors_are_not_counted_and_the_pending_flush_is_retried() {
    let mut p = protocol();
    let inc = running(&mut p);
    let a = committed(&mut p, inc, 3);
    assert_eq!(flushes(&a), vec![(sid("s1"), RowOffset(2))]);
    p.handle(flush_result("s1", 2, FlushOutcome::Transient("x".into())));
    p.handle(ack(inc, "s1", 5, 15));
    // __consumer_offsets short of replicas for longer than five cycles.
    for _ in 0..8 {
        let a = p.handle(Event::StartCycle);
        let (id, _) = commit(&a).unwrap();
        let a = p.handle(refused(
            id,
            CommitError::Request("NOT_ENOUGH_REPLICAS".into()),
        ));
        assert!(failed(&a).is_none(), "a request error never isolates");
        assert!(a.contains(&Action::Count(Outcome::CycleAbandoned)));
        assert_eq!(
            flushes(&a),
            vec![(sid("s1"), RowOffset(2))],
            "the landed checkpoint's flush is still retried"
        );
        p.handle(flush_result("s1", 2, FlushOutcome::Transient("x".into())));
    }
    assert!(p.is_running(&tp0()));
}

#[test]
fn a_cursor_past_our_flush_after_a_commit_whose_answer_was_lost_is_no_anomaly() {
    let mut p = protocol();
    let inc = running(&mut p);
    // Checkpoint (s1, r=2) landed; its flush failed and stays pending.
    assert_eq!(
        committed(&mut p, inc, 3),
        vec![Action::FlushRows {
            tp: tp0(),
            stream: sid("s1"),
            through: RowOffset(2),
            purpose: FlushPurpose::Cycle,
            attempt: 0,
        }]
    );
    p.handle(flush_result("s1", 2, FlushOutcome::Transient("503".into())));
    // The next checkpoint (s1, r=4) is committed and its answer lost: it may have landed.
    p.handle(ack(inc, "s1", 5, 15));
    let (id, _) = commit(&p.handle(Event::StartCycle)).unwrap();
    p.handle(Event::CommitResult {
        commit: id,
        outcome: CommitOutcome::Rejected("timeout; read-back failed".into()),
    });
    // It did, the group moved on, and the next owner re-flushed it: our next commit is refused
    // (we are fenced), and our pending flush of r=2 finds the cursor past it.
    let (id, _) = commit(&p.handle(Event::StartCycle)).unwrap();
    let a = p.handle(refused(
        id,
        CommitError::Request("illegal generation".into()),
    ));
    assert_eq!(flushes(&a), vec![(sid("s1"), RowOffset(2))]);
    let a = p.handle(flush_result("s1", 2, FlushOutcome::AlreadyExists));
    assert!(
        !a.iter()
            .any(|x| matches!(x, Action::Count(Outcome::Anomaly { .. }))),
        "{a:?}"
    );
    assert!(failed(&a).is_none());

    // Without a commit in doubt, the same cursor is an anomaly.
    let mut p = protocol();
    let inc = running(&mut p);
    committed(&mut p, inc, 3);
    let a = p.handle(flush_result("s1", 2, FlushOutcome::AlreadyExists));
    assert!(a.contains(&Action::Count(Outcome::Anomaly {
        tp: tp0(),
        stream: sid("s1")
    })));
}

#[test]
fn an_isolated_partition_keeps_retrying_the_flush_of_its_last_landed_commit() {
    let mut p = protocol();
    let inc = running(&mut p);
    committed(&mut p, inc, 3);
    p.handle(flush_result("s1", 2, FlushOutcome::Transient("x".into())));
    p.handle(ack(inc, "s1", 5, 15));
    let mut last = Vec::new();
    for _ in 0..5 {
        let (id, _) = commit(&p.handle(Event::StartCycle)).unwrap();
        last = p.handle(refused(id, CommitError::Partition("too large".into())));
        p.handle(flush_result("s1", 2, FlushOutcome::Transient("x".into())));
    }
    assert_eq!(failed(&last), Some(&FailReason::Isolated { failures: 5 }));
    assert_eq!(flushes(&last), vec![(sid("s1"), RowOffset(2))]);
    // The partition commits nothing any more, but the checkpoint that landed is made
    // visible: every cycle retries its flush.
    let a = p.handle(Event::StartCycle);
    assert!(commit(&a).is_none());
    assert_eq!(flushes(&a), vec![(sid("s1"), RowOffset(2))]);
    let a = p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
    assert!(a.contains(&Action::Count(Outcome::Visible {
        tp: tp0(),
        through: NextOffset(13)
    })));
    assert!(flushes(&p.handle(Event::StartCycle)).is_empty());
}

#[test]
fn a_fenced_member_does_not_finalize_the_stream_of_a_checkpoint_it_only_read() {
    let mut a = protocol();
    // A reads B's resting checkpoint, which names B's current stream "sB".
    a.handle(assigned(
        Some((20, metadata(Some("sB"), Some(9), 20))),
        0,
        30,
    ));
    let (id, _) = commit(&a.handle(Event::StartCycle)).unwrap();
    let out = a.handle(refused(
        id,
        CommitError::Request("UNKNOWN_MEMBER_ID".into()),
    ));
    assert!(
        finalized(&out).is_empty(),
        "nothing is finalized before a commit of ours lands"
    );
    // Once a commit of ours lands, B's stream is no longer referenced: finalized.
    let (id, _) = commit(&a.handle(Event::StartCycle)).unwrap();
    assert_eq!(finalized(&a.handle(ok(id))), vec![sid("sB")]);
}

fn unmarked_assignment(committed: Option<(i64, Vec<u8>)>) -> Event {
    let Event::Assigned { tp, assignment, .. } = assigned(committed, 0, 30) else {
        unreachable!()
    };
    Event::Assigned {
        tp,
        table: RoutedTable {
            table: table(),
            marked: false,
        },
        assignment,
        read_at: MarkerRequests::ALL,
    }
}

fn labelled(outcome: Result<(), String>) -> Event {
    Event::LabelResult {
        table: table(),
        outcome,
    }
}

#[test]
fn a_recovery_re_flush_waits_until_the_table_carries_the_marker() {
    let mut p = protocol();
    let a = p.handle(unmarked_assignment(Some((
        20,
        metadata(Some("old"), Some(9), 10),
    ))));
    assert!(flushes(&a).is_empty(), "no row visible before the marker");
    assert!(a.contains(&Action::LabelTable {
        table: table(),
        attempt: 0
    }));
    // The label write fails: counted, retried with backoff, still nothing flushed.
    let a = p.handle(labelled(Err("403 tables.update".into())));
    assert!(flushes(&a).is_empty());
    assert!(a.contains(&Action::LabelTable {
        table: table(),
        attempt: 1
    }));
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Count(Outcome::LabelFailed { attempts: 1, .. })))
    );
    let a = p.handle(labelled(Ok(())));
    assert_eq!(flushes(&a), vec![(sid("old"), RowOffset(9))]);
    assert!(a.contains(&Action::Count(Outcome::Labelled { table: table() })));
    let a = p.handle(recovery_result("old", 9, FlushOutcome::Flushed));
    assert_eq!(started_at(&a).map(|s| s.1), Some(20));
}

fn label_writes(actions: &[Action]) -> Vec<&Action> {
    actions
        .iter()
        .filter(|x| matches!(x, Action::LabelTable { .. }))
        .collect()
}

#[test]
fn the_first_commit_of_a_table_waits_until_the_table_carries_the_marker() {
    let mut p = protocol();
    let a = p.handle(unmarked_assignment(None));
    let inc = started_at(&a).unwrap().0;
    // A first start asks for the marker at once: its position is to be committed at once.
    assert_eq!(
        label_writes(&a),
        vec![&Action::LabelTable {
            table: table(),
            attempt: 0
        }]
    );
    assert!(commit(&a).is_none(), "no commit before the marker");
    p.handle(ack(inc, "s1", 3, 3));
    // While it is being written, cycles neither commit nor write it again.
    let a = p.handle(Event::StartCycle);
    assert!(commit(&a).is_none(), "no commit before the marker");
    assert!(label_writes(&a).is_empty());
    let a = p.handle(Event::StartCycle);
    assert!(commit(&a).is_none());
    assert!(label_writes(&a).is_empty());
    // A failed write is retried; still no commit.
    let a = p.handle(labelled(Err("503".into())));
    assert!(commit(&a).is_none());
    // It landed: the waiting first position commits at once (not a cycle later), then flushes.
    let (id, entries) = commit(&p.handle(labelled(Ok(())))).unwrap();
    assert_eq!(entries[0].offset, NextOffset(3));
    assert_eq!(flushes(&p.handle(ok(id))), vec![(sid("s1"), RowOffset(2))]);
    // Marked once: later commits write no marker.
    p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
    let a = p.handle(Event::StartCycle);
    assert!(commit(&a).is_some());
    assert!(label_writes(&a).is_empty());
}

fn tp1() -> TopicPartition {
    TopicPartition::new("t", 1)
}

/// `tp` assigned without a committed offset: `origin` says whether it was added at runtime.
fn assigned_without_offset(tp: TopicPartition, marked: bool, origin: PartitionOrigin) -> Event {
    Event::Assigned {
        tp,
        table: RoutedTable {
            table: table(),
            marked,
        },
        assignment: Assignment {
            committed: None,
            low: NextOffset(4),
            high: NextOffset(9),
            origin,
        },
        read_at: MarkerRequests::ALL,
    }
}

#[test]
fn a_first_start_commits_its_position_as_soon_as_the_marker_landed_not_a_cycle_later() {
    let mut p = protocol();
    let a = p.handle(assigned_without_offset(
        tp0(),
        false,
        PartitionOrigin::Existing,
    ));
    assert_eq!(started_at(&a).map(|s| s.1), Some(4));
    assert!(commit(&a).is_none(), "no commit before the marker");
    // The marker landed: the position (nothing acknowledged yet) is committed right away,
    // without waiting for the checkpoint interval's `StartCycle`.
    let (id, entries) = commit(&p.handle(labelled(Ok(())))).unwrap();
    assert_eq!(
        (entries[0].tp.clone(), entries[0].offset),
        (tp0(), NextOffset(4))
    );
    assert!(
        p.cycle_in_flight(),
        "an ordinary cycle, one commit at a time"
    );
    let a = p.handle(ok(id));
    assert!(
        commit(&a).is_none(),
        "one early commit, then the regular cycles"
    );
    assert!(!p.cycle_in_flight());
    // Now the durable position is known: an idle partition rests.
    assert!(commit(&p.handle(Event::StartCycle)).is_none());
}

#[test]
fn a_partition_added_at_runtime_to_a_marked_table_commits_its_position_at_once() {
    let mut p = protocol();
    let a = p.handle(assigned_without_offset(
        tp0(),
        true,
        PartitionOrigin::AddedAtRuntime,
    ));
    assert!(a.contains(&Action::Count(Outcome::Started {
        tp: tp0(),
        case: StartCase::NewPartition,
        at: NextOffset(4)
    })));
    let (_, entries) = commit(&a).expect("committed in the assignment's own step");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].offset, NextOffset(4));
    assert!(label_writes(&a).is_empty(), "the table is marked");
}

#[test]
fn a_missing_checkpoint_started_by_its_policy_commits_its_position_at_once() {
    let config = ProtocolConfig {
        on_missing_checkpoint: MissingCheckpointPolicy::Latest,
        ..ProtocolConfig::new()
    };
    let mut p = CheckpointProtocol::new(config);
    let a = p.handle(assigned_without_offset(
        tp0(),
        true,
        PartitionOrigin::Existing,
    ));
    assert_eq!(started_at(&a).map(|s| s.1), Some(9));
    let (_, entries) = commit(&a).expect("committed at once");
    assert_eq!(entries[0].offset, NextOffset(9));
}

#[test]
fn a_first_position_waits_for_the_cycle_in_flight_and_goes_with_the_next_one() {
    let mut p = protocol();
    let inc = running(&mut p);
    p.handle(ack(inc, "s1", 3, 13));
    let (id, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert_eq!(entries.len(), 1);
    // tp1 starts while tp0's commit is in flight: never a second commit beside it.
    let a = p.handle(assigned_without_offset(
        tp1(),
        true,
        PartitionOrigin::AddedAtRuntime,
    ));
    assert!(started_at(&a).is_some());
    assert!(commit(&a).is_none(), "one commit in flight at a time");
    // tp0's commit answered: its flush goes out, and the cycle ends when the flush answers.
    assert_eq!(flushes(&p.handle(ok(id))), vec![(sid("s1"), RowOffset(2))]);
    let a = p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
    // That cycle is over: the next one starts at once, with tp1's first position.
    let (_, entries) = commit(&a).expect("the first position goes with the next cycle at once");
    let tp1_entry = entries
        .iter()
        .find(|e| e.tp == tp1())
        .expect("tp1 committed");
    assert_eq!(tp1_entry.offset, NextOffset(4));
}

#[test]
fn no_cycle_starts_between_the_partitions_of_one_revoke() {
    let mut p = protocol();
    let inc = running(&mut p);
    // tp0's commit landed and its flush is in flight: the cycle waits for it.
    assert_eq!(flushes(&committed(&mut p, inc, 3)).len(), 1);
    // tp1 starts meanwhile: its first position waits for that cycle.
    let a = p.handle(assigned_without_offset(
        tp1(),
        true,
        PartitionOrigin::AddedAtRuntime,
    ));
    assert!(commit(&a).is_none());
    // The session is lost: the callback reports tp0, then tp1. Revoking tp0 ends the cycle, but
    // no cycle starts before tp1's revoke is known: no commit for a partition being taken away.
    let a = p.handle(Event::RevokeBegan {
        tp: tp0(),
        lost: true,
    });
    assert!(commit(&a).is_none(), "{a:?}");
    assert!(!p.cycle_in_flight());
    // Its writer stops before the callback's next partition is reported: still no cycle.
    let a = p.handle(Event::WriterStopped { tp: tp0() });
    assert!(commit(&a).is_none(), "{a:?}");
    let a = p.handle(Event::RevokeBegan {
        tp: tp1(),
        lost: true,
    });
    assert!(commit(&a).is_none(), "{a:?}");
    assert!(commit(&p.handle(Event::WriterStopped { tp: tp1() })).is_none());
    assert!(commit(&p.handle(Event::StartCycle)).is_none());
}

#[test]
fn a_first_position_whose_commit_fails_is_retried_by_the_regular_cycles_only() {
    let mut p = protocol();
    let a = p.handle(assigned_without_offset(
        tp0(),
        true,
        PartitionOrigin::AddedAtRuntime,
    ));
    let (id, _) = commit(&a).unwrap();
    let a = p.handle(refused(
        id,
        CommitError::Request("coordinator moving".into()),
    ));
    assert!(commit(&a).is_none(), "no loop of early cycles");
    let a = p.handle(Event::StartCycle);
    let (_, entries) = commit(&a).expect("the regular cycle commits it again");
    assert_eq!(entries[0].offset, NextOffset(4));
}

#[test]
fn a_recovery_only_protocol_makes_no_commit_of_a_first_position() {
    let mut p = CheckpointProtocol::for_recovery(ProtocolConfig::new());
    let a = p.handle(assigned_without_offset(
        tp0(),
        true,
        PartitionOrigin::AddedAtRuntime,
    ));
    assert!(started_at(&a).is_some());
    assert!(commit(&a).is_none());
    let a = p.handle(assigned_without_offset(
        tp1(),
        false,
        PartitionOrigin::Existing,
    ));
    assert!(
        label_writes(&a).is_empty(),
        "the ledger asks for its own marker"
    );
}

#[test]
fn a_handoff_without_the_marker_commits_nothing() {
    let mut p = protocol();
    let a = p.handle(unmarked_assignment(None));
    let inc = started_at(&a).unwrap().0;
    p.handle(ack(inc, "s1", 3, 3));
    p.handle(Event::RevokeBegan {
        tp: tp0(),
        lost: false,
    });
    let a = p.handle(Event::WriterStopped { tp: tp0() });
    assert!(commit(&a).is_none());
    assert!(a.contains(&Action::Release { tp: tp0() }));
}

#[test]
fn a_zombie_before_the_first_acknowledgement_stops_and_asks_the_group() {
    let mut p = protocol();
    running(&mut p);
    let a = p.handle(Event::ZombieDetected {
        tp: tp0(),
        stream: sid("s1"),
    });
    assert!(a.contains(&Action::StopWriter { tp: tp0() }));
    assert!(a.contains(&Action::Count(Outcome::ZombieStopped { tp: tp0() })));
    assert!(p.is_zombie(&tp0()));
}

#[test]
fn the_handoff_commits_once_and_then_nothing() {
    let mut p = protocol();
    let inc = running(&mut p);
    committed(&mut p, inc, 3);
    p.handle(ack(inc, "s1", 5, 15));
    let a = p.handle(Event::RevokeBegan {
        tp: tp0(),
        lost: false,
    });
    assert_eq!(a, vec![Action::StopWriter { tp: tp0() }]);
    // Acks of the drained appends still count.
    p.handle(ack(inc, "s1", 6, 16));
    let a = p.handle(Event::WriterStopped { tp: tp0() });
    let (id, entries) = commit(&a).unwrap();
    assert_eq!(entries[0].offset, NextOffset(16));
    assert!(entries[0].metadata.contains(";s=s1;") && entries[0].metadata.contains(";r=5;"));
    let a = p.handle(ok(id));
    assert!(a.contains(&Action::Release { tp: tp0() }));
    assert!(flushes(&a).is_empty() && finalized(&a).is_empty());
    // The flush of the earlier cycle answers late: nothing follows from it.
    let a = p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
    assert!(flushes(&a).is_empty() && finalized(&a).is_empty() && commit(&a).is_none());
    assert_eq!(p.handle(Event::StartCycle), vec![]);
}

#[test]
fn a_lost_assignment_commits_nothing() {
    let mut p = protocol();
    let inc = running(&mut p);
    p.handle(ack(inc, "s1", 3, 13));
    let a = p.handle(Event::RevokeBegan {
        tp: tp0(),
        lost: true,
    });
    assert!(commit(&a).is_none());
    assert!(a.contains(&Action::Release { tp: tp0() }));
}

#[test]
fn a_zombie_stops_and_creates_nothing() {
    let mut p = protocol();
    let inc = running(&mut p);
    committed(&mut p, inc, 3);
    let a = p.handle(Event::ZombieDetected {
        tp: tp0(),
        stream: sid("s1"),
    });
    assert!(a.contains(&Action::StopWriter { tp: tp0() }));
    assert!(started_at(&a).is_none());
    p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
    assert_eq!(p.handle(Event::StartCycle), vec![]);
}

#[test]
fn the_uncommitted_tail_is_bounded() {
    let mut config = ProtocolConfig::new();
    config.max_uncommitted_bytes = 50;
    let mut p = CheckpointProtocol::new(config);
    let inc = running(&mut p);
    assert!(p.handle(ack(inc, "s1", 4, 14)).is_empty());
    assert!(
        p.handle(ack(inc, "s1", 5, 15))
            .contains(&Action::Pause { tp: tp0() })
    );
    let (id, _) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert!(p.handle(ok(id)).contains(&Action::Resume { tp: tp0() }));
}

#[test]
fn a_lost_stream_restarts_the_incarnation_keeping_the_known_f() {
    let mut p = protocol();
    let inc = running(&mut p);
    committed(&mut p, inc, 3);
    p.handle(flush_result("s1", 2, FlushOutcome::Flushed));
    p.handle(ack(inc, "s1", 5, 15));
    // The committed f is still 10, but this process saw the flush through 13 succeed.
    let a = p.handle(Event::StreamLost {
        tp: tp0(),
        stream: sid("s1"),
    });
    let (inc2, from) = started_at(&a).unwrap();
    assert_eq!(from, 13);
    assert_ne!(inc2, inc);
    assert!(
        !a.iter()
            .any(|x| matches!(x, Action::Count(Outcome::Rewound { .. })))
    );
    // A late ack of the old incarnation is not progress of the new one.
    p.handle(ack(inc, "s1", 6, 16));
    let (_, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert_eq!(entries[0].offset, NextOffset(13));
}

/// A writer that gives its stream up on an offset conflict reports it lost, but
/// the stream is alive. The committed rows in doubt are re-flushed and the partition goes on
/// at K, exactly; only a re-flush that finds the stream gone, confirmed by a re-read, reaches
/// the lost-stream policy (a rewind, counted).
#[test]
fn a_stream_given_up_with_rows_in_doubt_is_re_flushed_before_anything_is_rewound() {
    let mut p = protocol();
    let inc = running(&mut p);
    committed(&mut p, inc, 3);
    // The cycle's flush of (s1, 2) has not come back when the writer gives up on s1.
    let a = p.handle(Event::StreamLost {
        tp: tp0(),
        stream: sid("s1"),
    });
    assert!(
        started_at(&a).is_none(),
        "nothing restarts before the re-flush"
    );
    assert!(a.iter().any(|x| matches!(
        x,
        Action::FlushRows {
            purpose: FlushPurpose::Recovery,
            through: RowOffset(2),
            ..
        }
    )));
    let a = p.handle(recovery_result("s1", 2, FlushOutcome::Flushed));
    let (inc2, from) = started_at(&a).expect("restarted");
    assert_ne!(inc2, inc);
    assert_eq!(from, 13, "the committed K: [10, 13) is visible now");
    assert!(
        !a.iter()
            .any(|x| matches!(x, Action::Count(Outcome::Rewound { .. })))
    );

    // Gone for real: the re-flush finds it finalized, the re-read confirms the checkpoint,
    // and the policy (rewind by default) re-delivers from f, counted.
    let mut p = protocol();
    let inc = running(&mut p);
    committed(&mut p, inc, 3);
    p.handle(Event::StreamLost {
        tp: tp0(),
        stream: sid("s1"),
    });
    let a = p.handle(recovery_result("s1", 2, FlushOutcome::StreamFinalized));
    assert!(a.contains(&Action::ReadCommitted { tp: tp0() }));
    let a = p.handle(Event::CheckpointReread {
        tp: tp0(),
        assignment: Assignment {
            committed: Some(CommittedRead {
                offset: NextOffset(13),
                metadata: metadata(Some("s1"), Some(2), 10),
            }),
            low: NextOffset(0),
            high: NextOffset(100),
            origin: PartitionOrigin::Existing,
        },
    });
    assert_eq!(started_at(&a).expect("rewound").1, 10);
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Count(Outcome::Rewound { .. })))
    );
}

#[test]
fn a_stream_lost_before_its_first_acknowledged_row_restarts_where_the_incarnation_began() {
    let mut p = protocol();
    let inc = running(&mut p);
    // The writer's first append on its new stream failed for good (e.g. ALREADY_EXISTS on a
    // request sent once): no row of it was ever acknowledged.
    let a = p.handle(Event::StreamLost {
        tp: tp0(),
        stream: sid("s1"),
    });
    let (inc2, from) = started_at(&a).expect("a new incarnation, not a stall");
    assert_ne!(inc2, inc);
    assert_eq!(from, 10);
    assert!(
        !a.iter()
            .any(|x| matches!(x, Action::Count(Outcome::Rewound { .. })))
    );
    p.handle(ack(inc2, "s2", 2, 12));
    let (_, entries) = commit(&p.handle(Event::StartCycle)).unwrap();
    assert_eq!(entries[0].offset, NextOffset(12));
}

#[test]
fn sigterm_runs_the_final_cycle_and_finalizes() {
    let mut p = protocol();
    let inc = running(&mut p);
    p.handle(ack(inc, "s1", 3, 13));
    let a = p.handle(Event::Shutdown);
    assert_eq!(a, vec![Action::StopWriter { tp: tp0() }]);
    let (id, _) = commit(&p.handle(Event::WriterStopped { tp: tp0() })).unwrap();
    let a = p.handle(ok(id));
    assert_eq!(flushes(&a), vec![(sid("s1"), RowOffset(2))]);
    let (id, entries) = commit(&p.handle(flush_result("s1", 2, FlushOutcome::Flushed))).unwrap();
    assert!(entries[0].metadata.ends_with(";f=13"));
    let a = p.handle(ok(id));
    assert_eq!(finalized(&a), vec![sid("s1")]);
    assert_eq!(a.last(), Some(&Action::ShutdownComplete));
}

#[test]
fn each_partition_checkpoints_against_the_table_of_its_route() {
    // Two topics routed to two tables: each commit carries its own table's fingerprint, a
    // checkpoint of table A found for a partition now routed to table B is foreign, and a
    // partition commits once its own table is marked.
    let (a_table, b_table) = (TableFingerprint(0xa), TableFingerprint(0xb));
    let (a_tp, b_tp) = (TopicPartition::new("a", 0), TopicPartition::new("b", 0));
    let mut p = CheckpointProtocol::new(ProtocolConfig::new());
    let mut labelled = Vec::new();
    let mut start = |p: &mut CheckpointProtocol, tp: &TopicPartition, table| {
        let a = p.handle(Event::Assigned {
            tp: tp.clone(),
            table: RoutedTable {
                table,
                marked: false,
            },
            assignment: Assignment {
                committed: None,
                low: NextOffset(0),
                high: NextOffset(5),
                origin: PartitionOrigin::Existing,
            },
            read_at: MarkerRequests::ALL,
        });
        // A first start asks for its table's marker at once.
        labelled.extend(a.iter().filter_map(|x| match x {
            Action::LabelTable { table, .. } => Some(*table),
            _ => None,
        }));
        started_at(&a).expect("a first start").0
    };
    let inc_a = start(&mut p, &a_tp, a_table);
    start(&mut p, &b_tp, b_table);
    assert_eq!(labelled, vec![a_table, b_table]);
    p.handle(Event::RowsAcknowledged {
        tp: a_tp.clone(),
        ack: Acknowledged::from_append_response(inc_a, sid("sa"), RowCount(2), NextOffset(2), 20),
    });
    // Neither table is marked: the cycle commits nothing (and writes no marker again).
    let a = p.handle(Event::StartCycle);
    assert!(commit(&a).is_none());
    assert!(!a.iter().any(|x| matches!(x, Action::LabelTable { .. })));
    // Table A is marked first: only its partition commits (its first position, at once).
    let landed = |table| Event::LabelResult {
        table,
        outcome: Ok(()),
    };
    let (id, entries) = commit(&p.handle(landed(a_table))).unwrap();
    assert_eq!(
        entries.iter().map(|e| &e.tp).collect::<Vec<_>>(),
        vec![&a_tp]
    );
    p.handle(landed(b_table));
    p.handle(Event::CommitResult {
        commit: id,
        outcome: CommitOutcome::PerPartition(vec![(a_tp.clone(), Ok(()))]),
    });
    // That cycle ends with its flush; B's first position waited for it and goes at once.
    let a = p.handle(Event::FlushResult {
        tp: a_tp.clone(),
        stream: sid("sa"),
        through: RowOffset(1),
        outcome: FlushOutcome::Flushed,
    });
    let (_, entries) = commit(&a).unwrap();
    assert_eq!(entries.len(), 2);
    for e in &entries {
        let expected = if e.tp == a_tp { a_table } else { b_table };
        let parsed = CommitMetadata::parse(e.metadata.as_bytes()).unwrap();
        assert!(
            matches!(parsed, CommitMetadata::ExactlyOnce { table, .. } if table == expected),
            "{}: {}",
            e.tp,
            e.metadata
        );
    }

    // The same checkpoint of table A read for a partition routed to table B.
    let found = CommitMetadata::ExactlyOnce {
        table: a_table,
        stream: Some(sid("sa")),
        flush_to: Some(RowOffset(1)),
        visible_through: NextOffset(0),
    }
    .encode(MetadataVersion::CURRENT)
    .into_bytes();
    let a = CheckpointProtocol::new(ProtocolConfig::new()).handle(Event::Assigned {
        tp: a_tp,
        table: RoutedTable {
            table: b_table,
            marked: true,
        },
        assignment: Assignment {
            committed: Some(CommittedRead {
                offset: NextOffset(2),
                metadata: found,
            }),
            low: NextOffset(0),
            high: NextOffset(5),
            origin: PartitionOrigin::Existing,
        },
        read_at: MarkerRequests::ALL,
    });
    assert_eq!(
        failed(&a),
        Some(&FailReason::ForeignTable { found: a_table })
    );
    assert!(flushes(&a).is_empty());
}
