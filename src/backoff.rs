//! The one retry schedule of the process: a delay that doubles per attempt from a minimum up to
//! a maximum, with ±25 % jitter so that many partitions retrying after one outage do not
//! stampede. Every retry loop takes its delays from here; the schedules themselves are the
//! constants below (one place for them, like the config defaults).
//!
//! The Schema Registry client uses it too, with its own configured minimum and maximum (a
//! bounded number of attempts inside one lookup). A helper of our own rather than a retry crate:
//! the loops differ in what ends them (an attempt count, a deadline, a stop signal, a
//! cancellation) and in what they count and log per retry, which a loop states more plainly than
//! a combinator chain; and the deterministic simulation must draw the jitter from its seed.

use std::time::Duration;

/// The wait before retry number `attempt` of the shells' recovery I/O (the coordinator's flush,
/// resolve and read retries; the consumer thread's seeks): 0, 0.2 s, 0.4 s, … doubling up to
/// 30 s.
pub fn delay(attempt: u32) -> Duration {
    RECOVERY.delay(attempt)
}

/// A Kafka read the consumer thread could not answer (a committed offset, watermarks, the
/// group's answer on who owns a partition): asked again after this pause, never read as
/// "no offset".
pub const KAFKA_READ_RETRY: Duration = Duration::from_secs(1);

/// A retry schedule and how far along it a loop is.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    attempt: u32,
}

/// A dead-letter produce that failed: the partition waits for the topic (invariant 6).
pub const DEAD_LETTER: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
/// CreateWriteStream refused transiently (quota, unavailable, a table just created).
pub const CREATE_STREAM: Backoff =
    Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
/// An error that only an operator or time can cure (permission denied, credentials, failed
/// precondition): retried slowly while readiness is false (docs/architecture.md#failure-policies).
pub const DENIED: Backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
/// A tool's request to the consumer group's coordinator (`inspect`'s and `check`'s read of the
/// committed offsets, `check`'s DescribeGroups) while the coordinator is moving or loading
/// (NotCoordinator, CoordinatorLoadInProgress, CoordinatorNotAvailable after a broker start or a
/// failover): 0.1 s, 0.2 s, … 1 s, for [`GROUP_COORDINATOR_ATTEMPTS`] attempts (about 16 s).
pub const GROUP_COORDINATOR: Backoff =
    Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
/// Attempts of a [`GROUP_COORDINATOR`] request before the tool reports the last answer.
pub const GROUP_COORDINATOR_ATTEMPTS: u32 = 20;
/// A write stream whose offsets conflict with the writer's is abandoned for a new one after this
/// pause, which bounds the rate of new streams should every new one conflict too.
pub const STREAM_CONFLICT: Duration = Duration::from_secs(1);
/// A table read that failed transiently while a route is resolved (a table just created).
pub const TABLE_READ: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
/// The protocol's recovery I/O (re-flush, resolve) and the flushes of a shutdown's final
/// cycles: 0.2 s, 0.4 s, … 30 s by attempt number.
pub const RECOVERY: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));

impl Backoff {
    pub const fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max,
            attempt: 0,
        }
    }

    /// The delay before retry number `attempt` (1 for the first retry), without jitter:
    /// `min · 2^(attempt-1)`, at most `max`; none before the first attempt (0).
    pub fn delay(&self, attempt: u32) -> Duration {
        if attempt == 0 {
            return Duration::ZERO;
        }
        self.min
            .saturating_mul(1u32 << (attempt - 1).min(20))
            .min(self.max)
    }

    /// The jittered delay before the next retry; counts the attempt.
    pub fn next_delay(&mut self) -> Duration {
        self.attempt = self.attempt.saturating_add(1);
        jitter(self.delay(self.attempt))
    }

    /// Sleeps [`next_delay`](Self::next_delay).
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// Retries so far.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// The loop succeeded: the next failure starts the schedule again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// ±25 %.
pub fn jitter(d: Duration) -> Duration {
    let factor = 0.75 + unit_random() * 0.5;
    d.mul_f64(factor)
}

#[cfg(not(feature = "testing"))]
fn unit_random() -> f64 {
    rand::random::<f64>()
}

/// With the `testing` feature, the deterministic simulation (`crates/kbq-sim`,
/// docs/simulation.md) draws the jitter from its own seeded generator, so that a seed replays
/// identically; a thread that set none draws as the daemon does.
#[cfg(feature = "testing")]
fn unit_random() -> f64 {
    SEEDED_JITTER
        .with(|j| j.borrow_mut().as_mut().map(rand::Rng::random::<f64>))
        .unwrap_or_else(rand::random::<f64>)
}

#[cfg(feature = "testing")]
thread_local! {
    /// The simulation's jitter generator on its thread (`testing` only).
    pub static SEEDED_JITTER: std::cell::RefCell<Option<rand::rngs::StdRng>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_try_waits_nothing_and_retries_double_up_to_thirty_seconds() {
        let ms: Vec<u128> = (0..12).map(|a| delay(a).as_millis()).collect();
        assert_eq!(
            ms,
            [
                0, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000
            ]
        );
    }

    #[test]
    fn delays_double_from_the_minimum_up_to_the_maximum() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let d: Vec<u64> = (0..7).map(|a| b.delay(a).as_millis() as u64).collect();
        assert_eq!(d, vec![0, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn next_delay_is_jittered_around_the_schedule_and_reset_starts_over() {
        let mut b = DEAD_LETTER;
        for attempt in 1..=10 {
            let d = b.next_delay();
            let nominal = b.delay(attempt);
            assert!(
                d >= nominal.mul_f64(0.75) && d <= nominal.mul_f64(1.25),
                "{d:?}"
            );
        }
        assert_eq!(b.attempts(), 10);
        b.reset();
        assert_eq!(b.attempts(), 0);
        assert!(b.next_delay() <= Duration::from_millis(125));
    }
}
