//! The one retry schedule of the daemon's shells: the coordinator's flush, resolve and read
//! retries sleep it on the async runtime, the consumer thread waits it out between seeks.

use std::time::Duration;

/// The wait before retry number `attempt`: 0, 0.2 s, 0.4 s, … doubling up to 30 s.
pub fn delay(attempt: u32) -> Duration {
    if attempt == 0 {
        return Duration::ZERO;
    }
    Duration::from_millis(100u64.saturating_mul(1 << attempt.min(9))).min(Duration::from_secs(30))
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
}
