//! The append-only quickstart's producer: generated orders ([`super::records`]) in Confluent
//! framing, round-robin over the partitions, on a thread of its own, paced by what is visible.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail};
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

use super::orders::{SCHEMA_ID, TOPIC};
use super::records::{OrderGenerator, confluent_frame};

/// How far production may run ahead of what is visible, per partition. librdkafka's mock
/// cluster keeps only the newest 5 MB of each partition (a fixed limit in its source) and drops
/// older records as if retention had deleted them; 3,000 records of at most ~1.3 KB stay below
/// it, so nothing the sink still needs is ever dropped.
pub(super) const PRODUCE_AHEAD: u64 = 3_000;

/// Counts acknowledged records and the end offset of each partition.
struct DeliveryCounter {
    delivered: Arc<AtomicU64>,
    failure: Arc<Mutex<Option<String>>>,
    ends: Arc<Mutex<Vec<u64>>>,
}

impl ClientContext for DeliveryCounter {}

impl ProducerContext for DeliveryCounter {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(message) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
                let mut ends = self.ends.lock().expect("ends lock");
                if let Some(end) = ends.get_mut(message.partition() as usize) {
                    *end = (*end).max(message.offset() as u64 + 1);
                }
            }
            Err((error, _)) => {
                self.failure
                    .lock()
                    .expect("failure lock")
                    .get_or_insert_with(|| error.to_string());
            }
        }
    }
}

/// What was produced: bytes of Avro and the end offset of every partition.
pub(super) struct Produced {
    pub(super) bytes: u64,
    pub(super) ends: Vec<u64>,
}

/// The producer thread: generated orders, round-robin over the partitions.
pub(super) struct Production {
    delivered: Arc<AtomicU64>,
    blocked: Arc<AtomicBool>,
    /// Records below this many may be produced.
    limit: Arc<AtomicU64>,
    window: Arc<Vec<AtomicU64>>,
    finished: Arc<AtomicBool>,
    failure: Arc<Mutex<Option<String>>>,
    thread: std::thread::JoinHandle<anyhow::Result<Produced>>,
}

impl Production {
    /// Produces the first `held_after` records at once and the rest as [`Self::release_up_to`]
    /// or [`Self::release`] allow.
    pub(super) fn start(
        bootstrap: String,
        records: u64,
        partitions: i32,
        held_after: u64,
    ) -> Production {
        let delivered = Arc::new(AtomicU64::new(0));
        let limit = Arc::new(AtomicU64::new(held_after));
        let blocked = Arc::new(AtomicBool::new(false));
        let window: Arc<Vec<AtomicU64>> = Arc::new(
            (0..partitions)
                .map(|_| AtomicU64::new(PRODUCE_AHEAD))
                .collect(),
        );
        let finished = Arc::new(AtomicBool::new(false));
        let failure = Arc::new(Mutex::new(None));
        let context = DeliveryCounter {
            delivered: delivered.clone(),
            failure: failure.clone(),
            ends: Arc::new(Mutex::new(vec![0; partitions as usize])),
        };
        let done = finished.clone();
        let failed = failure.clone();
        let gate = Gate {
            limit: limit.clone(),
            window: window.clone(),
            blocked: blocked.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("quickstart-producer".into())
            .spawn(move || {
                let result = produce(&bootstrap, records, partitions, gate, context);
                if let Err(error) = &result {
                    failed
                        .lock()
                        .expect("failure lock")
                        .get_or_insert_with(|| format!("{error:#}"));
                }
                done.store(true, Ordering::Release);
                result
            })
            .expect("spawn the producer thread");
        Production {
            delivered,
            blocked,
            limit,
            window,
            finished,
            failure,
            thread,
        }
    }

    /// Lets partition `p` be produced up to `PRODUCE_AHEAD` records past `visible_end`.
    pub(super) fn advance(&self, p: usize, visible_end: u64) {
        if let Some(w) = self.window.get(p) {
            w.fetch_max(visible_end + PRODUCE_AHEAD, Ordering::AcqRel);
        }
    }

    pub(super) fn advance_all(&self, visible_end: u64) {
        for p in 0..self.window.len() {
            self.advance(p, visible_end);
        }
    }

    /// Lets every record be produced (paced by the per-partition windows only).
    pub(super) fn release(&self) {
        self.limit.store(u64::MAX, Ordering::Release);
    }

    /// Lets the first `records` records be produced.
    pub(super) fn release_up_to(&self, records: u64) {
        self.limit.fetch_max(records, Ordering::AcqRel);
    }

    pub(super) fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Whether the producer has nothing to do until the sink makes progress (or is finished).
    pub(super) fn waiting(&self) -> bool {
        self.done() || self.blocked.load(Ordering::Acquire)
    }

    pub(super) fn done(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    pub(super) fn failure(&self) -> Option<String> {
        self.failure.lock().expect("failure lock").clone()
    }

    pub(super) fn join(self) -> anyhow::Result<Produced> {
        self.thread
            .join()
            .map_err(|_| anyhow!("the producer thread panicked"))?
    }
}

/// Where production waits: before record `limit` until the supervisor moves it, and on each
/// partition at the end offset in `window`.
struct Gate {
    limit: Arc<AtomicU64>,
    window: Arc<Vec<AtomicU64>>,
    /// Set while the producer waits.
    blocked: Arc<AtomicBool>,
}

fn produce(
    bootstrap: &str,
    records: u64,
    partitions: i32,
    gate: Gate,
    context: DeliveryCounter,
) -> anyhow::Result<Produced> {
    let ends = context.ends.clone();
    let producer: BaseProducer<DeliveryCounter> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.kbytes", "262144")
        .create_with_context(context)
        .map_err(|e| anyhow!("cannot create the producer: {e}"))?;
    let generator = OrderGenerator::new(2024);
    let (mut body, mut framed) = (Vec::with_capacity(2048), Vec::with_capacity(2048));
    let mut bytes = 0u64;
    for n in 0..records {
        if n >= gate.limit.load(Ordering::Acquire) {
            producer
                .flush(Duration::from_secs(120))
                .map_err(|e| anyhow!("cannot flush the producer: {e}"))?;
            gate.blocked.store(true, Ordering::Release);
            while n >= gate.limit.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(20));
            }
            gate.blocked.store(false, Ordering::Release);
        }
        let partition = (n % partitions as u64) as usize;
        let offset = n / partitions as u64;
        if offset >= gate.window[partition].load(Ordering::Acquire) {
            gate.blocked.store(true, Ordering::Release);
            while offset >= gate.window[partition].load(Ordering::Acquire) {
                producer.poll(Duration::from_millis(5));
            }
            gate.blocked.store(false, Ordering::Release);
        }
        body.clear();
        framed.clear();
        generator.encode(n, &mut body);
        confluent_frame(SCHEMA_ID, &body, &mut framed);
        bytes += framed.len() as u64;
        let key = n.to_string();
        let mut record = BaseRecord::to(TOPIC)
            .partition(partition as i32)
            .key(&key)
            .payload(&framed);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(5));
                }
                Err((e, _)) => bail!("cannot produce record {n}: {e}"),
            }
        }
        if n % 1024 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(|e| anyhow!("cannot flush the producer: {e}"))?;
    let ends = ends.lock().expect("ends lock").clone();
    let acknowledged: u64 = ends.iter().sum();
    if acknowledged != records {
        bail!("{acknowledged} of {records} records acknowledged by the mock cluster");
    }
    let _ = std::io::stdout().flush();
    Ok(Produced { bytes, ends })
}
