//! CreateWriteStream is quota-limited per project and region (about 10,000 an hour, and latency
//! climbs past 25 s above 40–50 calls a second: docs/architecture.md#bigquery-facts). A rebalance
//! storm across many partitions must not burn that quota, so stream creations pass a token bucket:
//! a burst for the partitions of one assignment, then a steady rate; and every creation, burst or
//! not, keeps a pace, so that a burst does not arrive as hundreds of calls at once. The defaults
//! and the argument for them: config::defaults, docs/operations.md "Capacity planning".

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::defaults;

pub struct StreamCreationLimiter {
    state: Mutex<Bucket>,
    burst: f64,
    per_second: f64,
    /// The shortest time between two creations (`None`: the burst goes at once).
    spacing: Option<Duration>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
    /// The earliest instant of the next creation under the pace.
    next: Option<Instant>,
}

impl StreamCreationLimiter {
    /// `burst` creations at once, then `per_second` on average.
    pub fn new(burst: u32, per_second: f64) -> Self {
        StreamCreationLimiter {
            state: Mutex::new(Bucket {
                tokens: f64::from(burst),
                at: Instant::now(),
                next: None,
            }),
            burst: f64::from(burst.max(1)),
            per_second: per_second.max(0.001),
            spacing: None,
        }
    }

    /// As [`StreamCreationLimiter::new`], and never more than `per_second` creations a second,
    /// within the burst too.
    pub fn paced(mut self, per_second: f64) -> Self {
        self.spacing = Some(Duration::from_secs_f64(1.0 / per_second.max(0.001)));
        self
    }

    /// The daemon's limiter: [`defaults::STREAM_CREATION_BURST`] at
    /// [`defaults::STREAM_CREATION_PACE`], then [`defaults::STREAM_CREATIONS_PER_SECOND`].
    pub fn for_a_replica() -> Self {
        StreamCreationLimiter::new(
            defaults::STREAM_CREATION_BURST,
            defaults::STREAM_CREATIONS_PER_SECOND,
        )
        .paced(defaults::STREAM_CREATION_PACE)
    }

    /// Waits until one creation may go ahead. Callers queue in order (the mutex is fair).
    pub async fn acquire(&self) {
        let mut bucket = self.state.lock().await;
        if let Some(next) = bucket.next {
            tokio::time::sleep_until(next).await;
        }
        let now = Instant::now();
        let refill = now.duration_since(bucket.at).as_secs_f64() * self.per_second;
        bucket.tokens = (bucket.tokens + refill).min(self.burst);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            let wait = Duration::from_secs_f64((1.0 - bucket.tokens) / self.per_second);
            tokio::time::sleep(wait).await;
            bucket.tokens = 1.0;
            bucket.at = Instant::now();
        }
        bucket.tokens -= 1.0;
        bucket.next = self.spacing.map(|s| Instant::now() + s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_passes_at_once_then_creations_follow_the_rate() {
        let limiter = StreamCreationLimiter::new(3, 2.0);
        let start = Instant::now();
        for _ in 0..3 {
            limiter.acquire().await;
        }
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "the burst waits for nothing"
        );
        limiter.acquire().await;
        limiter.acquire().await;
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(999) && waited <= Duration::from_millis(1001),
            "two more at 2/s take one second: {waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_paced_burst_is_spread_and_the_rate_follows_it() {
        let limiter = StreamCreationLimiter::new(4, 1.0).paced(10.0);
        let start = Instant::now();
        for _ in 0..4 {
            limiter.acquire().await;
        }
        let burst = start.elapsed();
        assert!(
            burst >= Duration::from_millis(299) && burst <= Duration::from_millis(301),
            "four creations at 10/s: the first at once, three 100 ms apart: {burst:?}"
        );
        limiter.acquire().await;
        let fifth = start.elapsed();
        // 0.3 s refilled 0.3 tokens; the fifth waits for the remaining 0.7 at 1/s.
        assert!(
            fifth >= Duration::from_millis(999) && fifth <= Duration::from_millis(1001),
            "after the burst the steady rate: {fifth:?}"
        );
    }

    /// The scale test's 400 partitions per replica (docs/operations.md): with the old defaults
    /// (a burst of 64, then 1 a second) the last of them waited 336 s for its stream and every
    /// partition past the 184th was reported stalled first.
    #[tokio::test(start_paused = true)]
    async fn a_replica_opens_the_streams_of_400_partitions_within_a_minute_at_its_pace() {
        let limiter = StreamCreationLimiter::for_a_replica();
        let start = Instant::now();
        let mut per_second = std::collections::BTreeMap::<u64, u32>::new();
        for _ in 0..400 {
            limiter.acquire().await;
            *per_second.entry(start.elapsed().as_secs()).or_default() += 1;
        }
        let took = start.elapsed();
        assert!(took <= Duration::from_secs(60), "400 streams took {took:?}");
        let most = per_second.values().max().copied().unwrap_or(0);
        assert!(
            f64::from(most) <= defaults::STREAM_CREATION_PACE,
            "never more than the pace in a second: {most}"
        );
    }
}
