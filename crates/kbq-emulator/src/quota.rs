//! Quota mode (opt-in): the Storage Write API's documented per-project, per-region limits, so
//! that a test can see what a sink does against them (docs/operations.md, "Capacity planning").
//! The whole emulator counts as one project in one region.
//!
//! | limit | BigQuery's figure | answer when exceeded |
//! |---|---|---|
//! | concurrent connections (open AppendRows calls) | 10,000 multi-region, 1,000 regional | the new call ends with `RESOURCE_EXHAUSTED` |
//! | CreateWriteStream | 10,000 per hour | the call fails with `RESOURCE_EXHAUSTED` |
//! | append throughput (request bytes) | 3 GB/s multi-region, 300 MB/s regional | the request fails in-stream with `RESOURCE_EXHAUSTED`; the call goes on |
//! | request size | 20 MiB (`--max-request-bytes`, enforced always) | `INVALID_ARGUMENT` in-stream |
//! | calls per HTTP/2 connection | 100 (the front end's `SETTINGS_MAX_CONCURRENT_STREAMS`) | the extra calls wait for a free stream |
//!
//! The CreateWriteStream and throughput messages are the real service's; the real text for the
//! connection limit is not on record, so that one follows the same shape under the quota's name.
//! Rates are token buckets: CreateWriteStream holds an hour's worth and refills continuously,
//! throughput holds one second's worth. Usage is counted whether quota mode is on or not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use tonic::Code;

use crate::status::BqError;

/// The limits quota mode enforces.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaSettings {
    /// Open AppendRows calls (`ConcurrentWriteConnectionsPerProjectRegion`).
    pub connections: u64,
    /// CreateWriteStream calls per hour.
    pub create_streams_per_hour: u64,
    /// Request bytes per second over all AppendRows calls (`AppendBytesThroughputPerProjectRegion`).
    pub append_bytes_per_second: u64,
    /// Concurrent HTTP/2 streams (calls) per client connection. Google's front end allows 100:
    /// a client that opens more calls on one connection sees the extra ones wait, not fail.
    pub streams_per_connection: u32,
    /// The location in the `user_id` of the messages (`us`, `europe-west1`).
    pub location: String,
}

impl QuotaSettings {
    /// The `US` and `EU` multi-regions.
    pub fn multi_region() -> QuotaSettings {
        QuotaSettings {
            connections: 10_000,
            create_streams_per_hour: 10_000,
            append_bytes_per_second: 3_000_000_000,
            streams_per_connection: 100,
            location: "us".into(),
        }
    }

    /// Any other region.
    pub fn regional() -> QuotaSettings {
        QuotaSettings {
            connections: 1_000,
            create_streams_per_hour: 10_000,
            append_bytes_per_second: 300_000_000,
            streams_per_connection: 100,
            location: "europe-west1".into(),
        }
    }
}

/// A token bucket on explicit instants (so that it is testable without a clock).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    capacity: f64,
    per_second: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// Full at `now`.
    pub fn new(capacity: f64, per_second: f64, now: Instant) -> TokenBucket {
        TokenBucket {
            capacity,
            per_second,
            tokens: capacity,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.capacity);
        self.at = self.at.max(now);
    }

    /// Takes `n` tokens if there are that many. A take larger than the whole bucket passes
    /// when the bucket is full and leaves it in debt, so that one large request is slowed, not
    /// refused for ever.
    pub fn try_take(&mut self, n: f64, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= n.min(self.capacity) {
            self.tokens -= n;
            true
        } else {
            false
        }
    }
}

/// What the emulator has seen, for tests and `GET /emulator/v1/quota`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QuotaUsage {
    /// Quota mode on.
    pub enforced: bool,
    pub connections_open: u64,
    pub connections_peak: u64,
    pub connections_opened: u64,
    pub create_write_stream_calls: u64,
    pub flush_rows_calls: u64,
    pub append_requests: u64,
    pub append_bytes: u64,
    /// Refusals, by quota.
    pub refused_connections: u64,
    pub refused_create_write_stream: u64,
    pub refused_throughput: u64,
}

/// The quotas and the usage counters of one emulator.
#[derive(Debug)]
pub struct Quotas {
    settings: Option<QuotaSettings>,
    create_streams: Mutex<TokenBucket>,
    throughput: Mutex<TokenBucket>,
    connections_open: AtomicU64,
    connections_peak: AtomicU64,
    connections_opened: AtomicU64,
    create_calls: AtomicU64,
    flush_calls: AtomicU64,
    append_requests: AtomicU64,
    append_bytes: AtomicU64,
    refused_connections: AtomicU64,
    refused_create: AtomicU64,
    refused_throughput: AtomicU64,
}

/// Holds one connection of the quota; released when dropped (the AppendRows call ended).
#[derive(Debug)]
pub struct ConnectionPermit {
    quotas: Arc<Quotas>,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.quotas.connections_open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Quotas {
    /// `None`: count usage, enforce nothing.
    pub fn new(settings: Option<QuotaSettings>) -> Quotas {
        Quotas::starting_at(settings, Instant::now())
    }

    /// As [`Quotas::new`], with both buckets full at `now`.
    pub fn starting_at(settings: Option<QuotaSettings>, now: Instant) -> Quotas {
        let (per_hour, per_second) = settings.as_ref().map_or((0, 0), |s| {
            (s.create_streams_per_hour, s.append_bytes_per_second)
        });
        Quotas {
            create_streams: Mutex::new(TokenBucket::new(
                per_hour as f64,
                per_hour as f64 / 3600.0,
                now,
            )),
            throughput: Mutex::new(TokenBucket::new(per_second as f64, per_second as f64, now)),
            settings,
            connections_open: AtomicU64::new(0),
            connections_peak: AtomicU64::new(0),
            connections_opened: AtomicU64::new(0),
            create_calls: AtomicU64::new(0),
            flush_calls: AtomicU64::new(0),
            append_requests: AtomicU64::new(0),
            append_bytes: AtomicU64::new(0),
            refused_connections: AtomicU64::new(0),
            refused_create: AtomicU64::new(0),
            refused_throughput: AtomicU64::new(0),
        }
    }

    pub fn enforced(&self) -> bool {
        self.settings.is_some()
    }

    /// The message shape of BigQuery's quota errors.
    fn exhausted(&self, quota: &str, extra: &str, entity: &str) -> BqError {
        let location = self.settings.as_ref().map_or("us", |s| s.location.as_str());
        BqError::new(
            Code::ResourceExhausted,
            format!(
                "Exceeds '{quota}' quota, user_id: project_{location} (status: INSUFFICIENT_TOKENS), you can issue a raise quota request through Google Cloud Console. Be sure to include this full error message in the request description.{extra} Entity: {entity}"
            ),
        )
    }

    /// A new AppendRows call. The permit is the connection: hold it until the call ends.
    pub fn open_connection(self: &Arc<Self>, entity: &str) -> Result<ConnectionPermit, BqError> {
        let open = self.connections_open.fetch_add(1, Ordering::SeqCst) + 1;
        let permit = ConnectionPermit {
            quotas: self.clone(),
        };
        if let Some(s) = &self.settings
            && open > s.connections
        {
            self.refused_connections.fetch_add(1, Ordering::Relaxed);
            return Err(self.exhausted("Concurrent connections", "", entity));
        }
        self.connections_opened.fetch_add(1, Ordering::Relaxed);
        self.connections_peak.fetch_max(open, Ordering::Relaxed);
        Ok(permit)
    }

    /// One CreateWriteStream call at `now`.
    pub fn create_write_stream(&self, entity: &str, now: Instant) -> Result<(), BqError> {
        self.create_calls.fetch_add(1, Ordering::Relaxed);
        if self.settings.is_none() {
            return Ok(());
        }
        if self
            .create_streams
            .lock()
            .expect("quota lock")
            .try_take(1.0, now)
        {
            return Ok(());
        }
        self.refused_create.fetch_add(1, Ordering::Relaxed);
        Err(self.exhausted(
            "CreateWriteStream requests",
            " Before requesting an increase, please ensure your existing streams have enough utilization in terms of write traffic. For guidelines see https://cloud.google.com/bigquery/docs/write-api-best-practices#limit_the_rate_of_stream_creation.",
            entity,
        ))
    }

    /// One AppendRows request of `bytes` (its encoded size) at `now`.
    pub fn append(&self, bytes: usize, entity: &str, now: Instant) -> Result<(), BqError> {
        self.append_requests.fetch_add(1, Ordering::Relaxed);
        if self.settings.is_some()
            && !self
                .throughput
                .lock()
                .expect("quota lock")
                .try_take(bytes as f64, now)
        {
            self.refused_throughput.fetch_add(1, Ordering::Relaxed);
            // The real message has two spaces before "Entity" here.
            return Err(self.exhausted("AppendRows throughput", " ", entity));
        }
        self.append_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Changes the throughput quota from now on (a test's burst phase); nothing without quota
    /// mode.
    pub fn set_append_bytes_per_second(&self, per_second: u64) {
        if self.settings.is_some() {
            let per_second = per_second as f64;
            *self.throughput.lock().expect("quota lock") =
                TokenBucket::new(per_second, per_second, Instant::now());
        }
    }

    /// One FlushRows call (counted only).
    pub fn flush_rows(&self) {
        self.flush_calls.fetch_add(1, Ordering::Relaxed);
    }

    pub fn usage(&self) -> QuotaUsage {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        QuotaUsage {
            enforced: self.enforced(),
            connections_open: self.connections_open.load(Ordering::SeqCst),
            connections_peak: get(&self.connections_peak),
            connections_opened: get(&self.connections_opened),
            create_write_stream_calls: get(&self.create_calls),
            flush_rows_calls: get(&self.flush_calls),
            append_requests: get(&self.append_requests),
            append_bytes: get(&self.append_bytes),
            refused_connections: get(&self.refused_connections),
            refused_create_write_stream: get(&self.refused_create),
            refused_throughput: get(&self.refused_throughput),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn small() -> QuotaSettings {
        QuotaSettings {
            connections: 2,
            create_streams_per_hour: 3,
            append_bytes_per_second: 1000,
            streams_per_connection: 100,
            location: "us".into(),
        }
    }

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_capacity() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(2.0, 1.0, t0);
        assert!(b.try_take(1.0, t0));
        assert!(b.try_take(1.0, t0));
        assert!(!b.try_take(1.0, t0));
        assert!(!b.try_take(1.0, t0 + Duration::from_millis(999)));
        assert!(b.try_take(1.0, t0 + Duration::from_millis(1000)));
        // A long pause refills to the capacity, not beyond.
        let later = t0 + Duration::from_secs(100);
        assert!(b.try_take(1.0, later));
        assert!(b.try_take(1.0, later));
        assert!(!b.try_take(1.0, later));
    }

    #[test]
    fn a_take_above_the_capacity_passes_on_a_full_bucket_and_leaves_a_debt() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(100.0, 100.0, t0);
        assert!(
            b.try_take(250.0, t0),
            "a full bucket lets a large take pass"
        );
        // 150 in debt: a full second later there are -50, so even 1 waits.
        assert!(!b.try_take(1.0, t0 + Duration::from_secs(1)));
        assert!(b.try_take(1.0, t0 + Duration::from_millis(1510)));
    }

    #[test]
    fn connections_above_the_limit_are_refused_and_a_closed_one_frees_its_place() {
        let q = Arc::new(Quotas::new(Some(small())));
        let a = q.open_connection("s1").unwrap();
        let _b = q.open_connection("s2").unwrap();
        let e = q.open_connection("s3").unwrap_err();
        assert_eq!(e.code, Code::ResourceExhausted);
        assert!(
            e.message.starts_with(
                "Exceeds 'Concurrent connections' quota, user_id: project_us (status: INSUFFICIENT_TOKENS)"
            ),
            "{}",
            e.message
        );
        assert!(e.message.ends_with(" Entity: s3"), "{}", e.message);
        drop(a);
        let _c = q.open_connection("s3").unwrap();
        let u = q.usage();
        assert_eq!(
            (u.connections_open, u.connections_peak, u.connections_opened),
            (2, 2, 3)
        );
        assert_eq!(u.refused_connections, 1);
    }

    #[test]
    fn create_write_stream_holds_an_hour_of_calls_and_refills_one_per_share_of_the_hour() {
        let t0 = Instant::now();
        let q = Quotas::starting_at(Some(small()), t0);
        let table = "projects/p/datasets/d/tables/t";
        for _ in 0..3 {
            q.create_write_stream(table, t0).unwrap();
        }
        let e = q.create_write_stream(table, t0).unwrap_err();
        assert_eq!(e.code, Code::ResourceExhausted);
        assert!(e.message.starts_with("Exceeds 'CreateWriteStream requests' quota, user_id: project_us (status: INSUFFICIENT_TOKENS), you can issue a raise quota request"));
        assert!(e.message.contains(
            "#limit_the_rate_of_stream_creation. Entity: projects/p/datasets/d/tables/t"
        ));
        // 3 an hour: one more after 20 minutes.
        assert!(
            q.create_write_stream(table, t0 + Duration::from_secs(1199))
                .is_err()
        );
        assert!(
            q.create_write_stream(table, t0 + Duration::from_secs(1200))
                .is_ok()
        );
        let u = q.usage();
        assert_eq!(
            (u.create_write_stream_calls, u.refused_create_write_stream),
            (6, 2)
        );
    }

    #[test]
    fn throughput_refuses_requests_beyond_a_second_of_bytes_until_it_refills() {
        let t0 = Instant::now();
        let q = Quotas::starting_at(Some(small()), t0);
        q.append(600, "s", t0).unwrap();
        let e = q.append(600, "s", t0).unwrap_err();
        assert_eq!(e.code, Code::ResourceExhausted);
        assert!(e.message.starts_with("Exceeds 'AppendRows throughput' quota, user_id: project_us (status: INSUFFICIENT_TOKENS)"));
        assert!(
            e.message.ends_with("description.  Entity: s"),
            "{}",
            e.message
        );
        q.append(600, "s", t0 + Duration::from_millis(200)).unwrap();
        let u = q.usage();
        assert_eq!(
            (u.append_requests, u.append_bytes, u.refused_throughput),
            (3, 1200, 1)
        );
    }

    #[test]
    fn without_quota_mode_nothing_is_refused_but_usage_is_counted() {
        let q = Arc::new(Quotas::new(None));
        let t0 = Instant::now();
        let permits: Vec<_> = (0..50).map(|_| q.open_connection("s").unwrap()).collect();
        for _ in 0..50 {
            q.create_write_stream("t", t0).unwrap();
            q.append(10 << 20, "s", t0).unwrap();
        }
        q.flush_rows();
        let u = q.usage();
        assert!(!u.enforced);
        assert_eq!(u.connections_peak, 50);
        assert_eq!(u.create_write_stream_calls, 50);
        assert_eq!(u.flush_rows_calls, 1);
        drop(permits);
        assert_eq!(q.usage().connections_open, 0);
    }
}
