//! What a panic does to the process: it is logged with its cause and makes `/healthz` fail for
//! good, so Kubernetes restarts the pod. A thread that owns a partition's progress (the consumer
//! thread, a writer task, the coordinator) and panicked leaves its partitions where they are:
//! a process that went on answering `/healthz` would hold them without end, and a restart
//! resumes them from their last checkpoint, which is the exactly-once path anyway.

use std::sync::Arc;

use super::http::Health;

/// Installs the process's panic hook: the default report (stderr, backtrace) as before, then
/// an error log line with the thread, the place and the cause, and `health` turns dead. The
/// daemon installs it once, at start.
pub fn install(health: Arc<Health>) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("unnamed").to_string();
        let cause = cause(info.payload());
        let place = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(
            thread,
            place,
            cause,
            "thread panicked: the process is no longer live and will be restarted"
        );
        health.fail(format!("thread {thread} panicked at {place}: {cause}"));
    }));
}

/// The message of a panic payload (a `&str` or a `String`, as `panic!` makes them).
pub fn cause(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_panic_in_any_thread_fails_liveness_for_good_with_its_cause() {
        let health = Arc::new(Health::new(Duration::from_secs(30)));
        health.beat();
        assert!(health.liveness().is_ok());
        install(health.clone());
        let thread = std::thread::Builder::new()
            .name("partition-owner".into())
            .spawn(|| panic!("boom at offset 7"))
            .unwrap();
        assert!(thread.join().is_err());
        health.beat();
        let reason = health.liveness().unwrap_err();
        assert!(reason.contains("partition-owner"), "{reason}");
        assert!(reason.contains("boom at offset 7"), "{reason}");
    }
}
