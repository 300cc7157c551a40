//! CreateWriteStream is quota-limited per project and region (about 10,000 an hour, and latency
//! climbs past 25 s above 40–50 calls a second: docs/architecture.md#bigquery-facts). A rebalance
//! storm across many partitions must not burn that quota, so stream creations pass a token bucket:
//! a burst for the partitions of one assignment, then a steady rate.

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

pub struct StreamCreationLimiter {
    state: Mutex<Bucket>,
    burst: f64,
    per_second: f64,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl StreamCreationLimiter {
    /// `burst` creations at once, then `per_second` on average.
    pub fn new(burst: u32, per_second: f64) -> Self {
        StreamCreationLimiter {
            state: Mutex::new(Bucket {
                tokens: f64::from(burst),
                at: Instant::now(),
            }),
            burst: f64::from(burst.max(1)),
            per_second: per_second.max(0.001),
        }
    }

    /// Waits until one creation may go ahead. Callers queue in order (the mutex is fair).
    pub async fn acquire(&self) {
        let mut bucket = self.state.lock().await;
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
}
