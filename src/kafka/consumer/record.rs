//! A record as the consumer hands it to a writer: key and value copied out of librdkafka into
//! per-partition arena chunks, charged to the memory budget until dropped.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use rdkafka::Message;
use rdkafka::message::BorrowedMessage;

use crate::kafka::headers::{self, Header};
use crate::kafka::memory_budget::{Charge, PartitionBudget};
use kbq_core::offsets::KafkaOffset;

/// Bytes of the chunks records are copied into, per partition. A chunk lives until its last
/// record is acknowledged; a partition's records go in order, so beyond what the memory budget
/// counts, a partition holds about one chunk of slack.
pub(super) const ARENA_CHUNK: usize = 32 << 10;

/// One Kafka record, owned, as a writer needs it.
#[derive(Debug)]
pub struct Record {
    pub offset: KafkaOffset,
    /// Milliseconds since the epoch, if the record has a timestamp.
    pub timestamp_ms: Option<i64>,
    /// The value's bytes followed by the key's, a slice of a chunk shared with the records
    /// read next to it: one allocation per chunk of records, not two per record (the allocator
    /// was a large share of the sink's CPU, and records are freed on another thread).
    pub(super) data: Bytes,
    /// Length of the value inside `data`; `None` for a record without a value (a tombstone).
    pub(super) value_len: Option<u32>,
    pub(super) has_key: bool,
    /// Its headers as bytes: a key need not be text (see `kafka::headers`).
    pub headers: Vec<Header>,
    /// Its bytes in the process's memory budget, given back when the record is dropped.
    pub charge: Charge,
}

impl Record {
    pub fn new(
        offset: KafkaOffset,
        timestamp_ms: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: Vec<Header>,
        arena: &mut BytesMut,
    ) -> Record {
        let (k, v) = (key.unwrap_or_default(), value.unwrap_or_default());
        let need = k.len() + v.len();
        if arena.capacity() < need {
            *arena = BytesMut::with_capacity(need.max(ARENA_CHUNK));
        }
        arena.extend_from_slice(v);
        arena.extend_from_slice(k);
        Record {
            offset,
            timestamp_ms,
            data: arena.split().freeze(),
            // Kafka caps a record far below 4 GiB.
            value_len: value.map(|v| u32::try_from(v.len()).expect("kafka record under 4 GiB")),
            has_key: key.is_some(),
            headers,
            charge: Charge::default(),
        }
    }

    pub fn key(&self) -> Option<&[u8]> {
        let at = self.value_len.unwrap_or(0) as usize;
        self.has_key.then(|| &self.data[at..])
    }

    pub fn value(&self) -> Option<&[u8]> {
        self.value_len.map(|len| &self.data[..len as usize])
    }

    pub fn size(&self) -> usize {
        self.data.len()
    }

    /// The size of its encoded row before the row exists (about the Avro value's). A record is
    /// charged twice this when it is read — the row and the gRPC copy of the request that
    /// carries it — and the writer replaces the estimate with the row's real size. Charging it
    /// up front keeps records read before the gate closed from growing the total past the
    /// limit when they are transcoded and sent.
    pub fn row_estimate(&self) -> usize {
        self.value_len.unwrap_or(0) as usize
    }
}

/// Copies a message out of librdkafka's buffer, charged to `account`.
pub(super) fn record_of(
    message: &BorrowedMessage<'_>,
    account: Option<&Arc<PartitionBudget>>,
    read_headers: bool,
    arena: &mut BytesMut,
) -> Record {
    let headers = if read_headers {
        headers::read(message)
    } else {
        Vec::new()
    };
    // librdkafka's raw offset becomes typed here, once.
    let mut record = Record::new(
        KafkaOffset(message.offset()),
        message.timestamp().to_millis(),
        message.key(),
        message.payload(),
        headers,
        arena,
    );
    if let Some(account) = account {
        // Headers count as their bytes plus a small fixed cost each, the record as its key and
        // value plus the struct, and its future row and request copy as estimated.
        let headers: usize = (record.headers.iter())
            .map(|h| h.key.len() + h.value.as_ref().map_or(0, Bytes::len) + 64)
            .sum();
        let size =
            record.size() + 2 * record.row_estimate() + headers + std::mem::size_of::<Record>();
        record.charge = account.charge(size);
    }
    record
}
