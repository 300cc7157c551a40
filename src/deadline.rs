//! The wait for an optional deadline, as one arm of a `select!`: the coordinator's next timer
//! and a writer's batch deadline both may have none, and then the arm must never fire.

use tokio::time::Instant;

/// Sleeps until `deadline`; with no deadline, waits forever.
pub(crate) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
