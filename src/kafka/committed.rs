//! The blocking Kafka calls the checkpoint protocol's facts come from: the committed offset and
//! metadata of a partition, its watermarks, and the seek that sets where its records start.
//! Each answers per partition, and a partition whose answer carries an error gets that error,
//! never a default: an OffsetFetch error is not "no committed offset" (that would look like a
//! first start), a failed watermark read is not `(0, 0)` (that would fail a healthy partition as
//! "above the high watermark"), and a seek that did not happen must not let the partition resume
//! at its old position (the records in between would be skipped).

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Offset, TopicPartitionList};

use kbq_core::offsets::NextOffset;
use kbq_core::protocol::{CommittedRead, TopicPartition};

/// Faults a test injects into the calls of this file: each counter is the number of next calls
/// that fail. The code path is the production one; only the answer of librdkafka is replaced by
/// an error element (and, for a seek, the seek is not made, as when librdkafka refuses it).
#[derive(Debug, Default)]
pub struct ConsumerFaults {
    pub seek: AtomicU32,
    pub committed_read: AtomicU32,
    pub watermarks: AtomicU32,
}

impl ConsumerFaults {
    fn take(counter: &AtomicU32) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// Per partition: its committed offset and metadata (`None`: nothing committed), or why it
/// could not be read.
pub type CommittedReads = HashMap<TopicPartition, Result<Option<CommittedRead>, String>>;

/// Committed offset and raw metadata bytes per partition (`None`: nothing committed); any
/// partition whose read failed fails the whole call. The metadata is read as bytes: rdkafka's
/// `metadata()` panics on non-UTF-8, and metadata written by another client must fail closed
/// with its raw value, not crash the process.
pub fn read_committed<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    partitions: &[TopicPartition],
    timeout: Duration,
) -> Result<HashMap<TopicPartition, Option<CommittedRead>>, KafkaError> {
    let tpl = consumer.committed_offsets(tpl_of(partitions), timeout)?;
    committed_of(&tpl)
        .into_iter()
        .map(|(tp, read)| Ok((tp, read.map_err(KafkaError::OffsetFetch)?)))
        .collect()
}

/// [`read_committed`] answered per partition: one partition's error (a coordinator loading, an
/// authorization failure) does not hide the others' offsets.
pub fn read_committed_each<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    partitions: &[TopicPartition],
    timeout: Duration,
    faults: &ConsumerFaults,
) -> CommittedReads {
    let read = if ConsumerFaults::take(&faults.committed_read) {
        Err("injected committed-offset read fault".to_string())
    } else {
        consumer
            .committed_offsets(tpl_of(partitions), timeout)
            .map_err(|e| e.to_string())
    };
    match read {
        Ok(tpl) => committed_of(&tpl)
            .into_iter()
            .map(|(tp, r)| (tp, r.map_err(|code| format!("offset fetch: {code}"))))
            .collect(),
        Err(e) => partitions
            .iter()
            .map(|tp| (tp.clone(), Err(e.clone())))
            .collect(),
    }
}

/// The committed offsets of an OffsetFetch answer, checking each element's error.
fn committed_of(
    tpl: &TopicPartitionList,
) -> HashMap<TopicPartition, Result<Option<CommittedRead>, RDKafkaErrorCode>> {
    let mut out = HashMap::with_capacity(tpl.count());
    // SAFETY: `tpl` is a valid list borrowed for the whole loop; `cnt` elements are initialised
    // by librdkafka; `metadata` points to `metadata_size` bytes or is null.
    unsafe {
        let list = &*tpl.ptr();
        for i in 0..list.cnt as usize {
            let elem = &*list.elems.add(i);
            let topic = CStr::from_ptr(elem.topic).to_string_lossy().into_owned();
            let tp = TopicPartition::new(topic, elem.partition);
            let code = RDKafkaErrorCode::from(elem.err);
            let read = if code != RDKafkaErrorCode::NoError {
                Err(code)
            } else if elem.offset >= 0 {
                let metadata = if elem.metadata.is_null() || elem.metadata_size == 0 {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(elem.metadata as *const u8, elem.metadata_size)
                        .to_vec()
                };
                Ok(Some(CommittedRead {
                    offset: NextOffset(elem.offset),
                    metadata,
                }))
            } else {
                Ok(None)
            };
            out.insert(tp, read);
        }
    }
    out
}

/// Per partition: `(low, high)` — the log start and the high watermark — or why they could not
/// be read.
pub type Watermarks = HashMap<TopicPartition, Result<(NextOffset, NextOffset), String>>;

/// The watermarks of every partition in two ListOffsets rounds (one request per leader each,
/// sent in parallel), not two sequential round trips per partition: an assignment of many
/// partitions on a slow leader must not hold the rebalance callback for minutes.
pub fn watermarks<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    partitions: &[TopicPartition],
    timeout: Duration,
    faults: &ConsumerFaults,
) -> Watermarks {
    if ConsumerFaults::take(&faults.watermarks) {
        return partitions
            .iter()
            .map(|tp| (tp.clone(), Err("injected watermark read fault".to_string())))
            .collect();
    }
    let low = list_offsets(consumer, partitions, Offset::Beginning, timeout);
    let high = list_offsets(consumer, partitions, Offset::End, timeout);
    partitions
        .iter()
        .map(|tp| {
            let pair = match (low.get(tp), high.get(tp)) {
                (Some(Ok(l)), Some(Ok(h))) => Ok((*l, *h)),
                (Some(Err(e)), _) | (_, Some(Err(e))) => Err(e.clone()),
                _ => Err("no watermark in the answer".to_string()),
            };
            (tp.clone(), pair)
        })
        .collect()
}

/// The high watermark of each partition (the last stable offset under `read_committed`).
pub fn high_watermarks<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    partitions: &[TopicPartition],
    timeout: Duration,
) -> HashMap<TopicPartition, Result<NextOffset, String>> {
    list_offsets(consumer, partitions, Offset::End, timeout)
}

/// One ListOffsets round for `at` (`Beginning`: the log start, `End`: the high watermark).
fn list_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    partitions: &[TopicPartition],
    at: Offset,
    timeout: Duration,
) -> HashMap<TopicPartition, Result<NextOffset, String>> {
    if partitions.is_empty() {
        return HashMap::new();
    }
    let mut query = TopicPartitionList::new();
    for tp in partitions {
        // A ListOffsets "timestamp" of -2 / -1 asks for the log start / the high watermark.
        if let Err(e) = query.add_partition_offset(&tp.topic, tp.partition, at) {
            tracing::error!(partition = %tp, error = %e, "bad watermark query");
        }
    }
    match consumer.offsets_for_times(query, timeout) {
        Ok(answer) => answer
            .elements()
            .iter()
            .map(|e| {
                let tp = TopicPartition::new(e.topic(), e.partition());
                let offset = match (e.error(), e.offset()) {
                    (Err(err), _) => Err(format!("list offsets: {err}")),
                    (Ok(()), Offset::Offset(o)) if o >= 0 => Ok(NextOffset(o)),
                    (Ok(()), other) => Err(format!("list offsets answered {other:?}")),
                };
                (tp, offset)
            })
            .collect(),
        Err(e) => partitions
            .iter()
            .map(|tp| (tp.clone(), Err(format!("list offsets: {e}"))))
            .collect(),
    }
}

/// Moves `tp`'s fetch position to `to` and checks that it moved: the element's own error, then
/// the application position, which a seek resets (librdkafka reports `Invalid` until the next
/// record) and which still shows the old position if the seek did not happen.
pub fn seek<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    tp: &TopicPartition,
    to: NextOffset,
    timeout: Duration,
    faults: &ConsumerFaults,
) -> Result<(), String> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(to.0))
        .map_err(|e| format!("bad seek offset: {e}"))?;
    let answer: Vec<Result<(), String>> = if ConsumerFaults::take(&faults.seek) {
        vec![Err("injected seek fault".to_string())]
    } else {
        match consumer.seek_partitions(tpl, timeout) {
            Ok(result) => result
                .elements()
                .iter()
                .map(|e| match e.error() {
                    Err(err) if err.rdkafka_error_code() == Some(RDKafkaErrorCode::State) => {
                        restart(consumer, tp, to)
                    }
                    other => other.map_err(|err| err.to_string()),
                })
                .collect(),
            Err(e) => vec![Err(e.to_string())],
        }
    };
    if answer.is_empty() {
        return Err("seek answered no partition".into());
    }
    answer.into_iter().collect::<Result<Vec<()>, String>>()?;
    match position(consumer, tp) {
        Some(Offset::Invalid) => Ok(()),
        Some(Offset::Offset(at)) if at == to.0 => Ok(()),
        Some(other) => Err(format!("position is {other:?} after the seek to {to}")),
        None => Err("the partition is not in the assignment".into()),
    }
}

/// Assigns `tp` again at `to`, paused. librdkafka stops a partition's fetcher for good when it
/// meets an offset it may not reset (`auto.offset.reset` is `error`: a position below the log
/// start), and a seek then answers `__STATE`; only an assignment starts the fetcher again. The
/// partition stays in the group's assignment: this changes only where librdkafka fetches it,
/// as the rebalance callback's incremental assign does (docs/operations.md, "Records deleted
/// before they were written").
fn restart<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    tp: &TopicPartition,
    to: NextOffset,
) -> Result<(), String> {
    let one = tpl_of(std::slice::from_ref(tp));
    let mut at = TopicPartitionList::new();
    at.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(to.0))
        .map_err(|e| format!("bad seek offset: {e}"))?;
    consumer
        .incremental_unassign(&one)
        .map_err(|e| format!("fetcher stopped, unassign failed: {e}"))?;
    consumer
        .incremental_assign(&at)
        .map_err(|e| format!("fetcher stopped, assign again failed: {e}"))?;
    consumer
        .pause(&one)
        .map_err(|e| format!("fetcher restarted, pause failed: {e}"))
}

/// The application position of `tp` (the offset after the last record handed out, or
/// `Invalid` after an assignment or a seek); `None` when `tp` is not assigned.
pub fn position<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    tp: &TopicPartition,
) -> Option<Offset> {
    let all = consumer.position().ok()?;
    let elem = all.find_partition(&tp.topic, tp.partition)?;
    Some(elem.offset())
}

pub(crate) fn tpl_of(partitions: &[TopicPartition]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for tp in partitions {
        tpl.add_partition(&tp.topic, tp.partition);
    }
    tpl
}

#[cfg(test)]
mod tests {
    use super::*;

    use rdkafka::types::RDKafkaRespErr;

    fn answer(elements: &[(i32, i64, Option<&str>, RDKafkaRespErr)]) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for (partition, offset, metadata, _) in elements {
            let mut e = tpl.add_partition("t", *partition);
            e.set_offset(Offset::from_raw(*offset)).expect("offset");
            if let Some(m) = metadata {
                e.set_metadata(*m);
            }
        }
        // SAFETY: the list was built above with exactly these elements; only their error
        // field is written, as librdkafka writes it into an OffsetFetch answer.
        unsafe {
            let list = &mut *tpl.ptr();
            for (i, (_, _, _, code)) in elements.iter().enumerate() {
                (*list.elems.add(i)).err = *code;
            }
        }
        tpl
    }

    #[test]
    fn an_offset_fetch_error_of_one_partition_is_that_partitions_error_not_no_offset() {
        let tpl = answer(&[
            (0, 7, Some("m0"), RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR),
            (
                1,
                -1001,
                None,
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
            ),
            (2, -1001, None, RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR),
        ]);
        let read = committed_of(&tpl);
        let tp = |p| TopicPartition::new("t", p);
        assert_eq!(
            read[&tp(0)],
            Ok(Some(CommittedRead {
                offset: NextOffset(7),
                metadata: b"m0".to_vec()
            }))
        );
        assert_eq!(
            read[&tp(1)],
            Err(RDKafkaErrorCode::CoordinatorLoadInProgress)
        );
        assert_eq!(read[&tp(2)], Ok(None), "nothing committed is not an error");
    }
}
