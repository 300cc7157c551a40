//! `kafka.topic_pattern` as librdkafka reads it, so that `validate` judges the pattern the way
//! the subscription will use it. The config owns it: the check needs the C library, not a Kafka
//! client, and validation does no I/O, so it depends on nothing in `kafka/`.
//!
//! librdkafka treats a subscribed name that starts with `^` as a regular expression. It compiles
//! it with the C library's `regcomp(REG_EXTENDED | REG_NOSUB)`, a POSIX extended regular
//! expression, and matches it with `regexec` against every topic name in the cluster metadata:
//! anchored at the start by the `^`, not at the end. That dialect differs from the `regex` crate
//! (`routes[].topic_pattern`): `\d`, `\s` and `(?i)` are not POSIX, and a pattern the crate
//! accepts can mean something else, or nothing, to librdkafka. So the same C library does the
//! compiling and matching here.
//!
//! With `group.protocol: consumer` (KIP-848) the broker evaluates the pattern instead (Java RE2/J
//! syntax, close to the `regex` crate); `validate` then also requires the `regex` crate to accept
//! it (see `docs/operations.md`).

use std::ffi::{CStr, CString};

/// A compiled subscription pattern. Compiling needs no I/O.
pub struct TopicPattern {
    // Boxed: the C library may keep pointers into the structure, so it must not move.
    compiled: Box<libc::regex_t>,
}

// SAFETY: a compiled `regex_t` is only read by `regexec`, which POSIX requires to be thread-safe
// on a shared pattern; it is freed once, on drop.
unsafe impl Send for TopicPattern {}
unsafe impl Sync for TopicPattern {}

impl TopicPattern {
    /// Compiles `subscription`, the string handed to librdkafka (with its leading `^`), as
    /// librdkafka does. `Err` carries the C library's reason.
    pub fn compile(subscription: &str) -> Result<TopicPattern, String> {
        let pattern = CString::new(subscription).map_err(|_| "contains a NUL byte".to_string())?;
        // SAFETY: an all-zero `regex_t` is the plain-data state `regcomp` expects to fill in.
        let mut compiled: Box<libc::regex_t> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `compiled` is valid and writable, `pattern` is NUL-terminated.
        let code = unsafe {
            libc::regcomp(
                compiled.as_mut(),
                pattern.as_ptr(),
                libc::REG_EXTENDED | libc::REG_NOSUB,
            )
        };
        if code == 0 {
            return Ok(TopicPattern { compiled });
        }
        let mut message = [0u8; 256];
        // SAFETY: `regerror` writes at most `message.len()` bytes, NUL-terminated; a failed
        // `regcomp` leaves nothing to free.
        unsafe {
            libc::regerror(
                code,
                compiled.as_ref(),
                message.as_mut_ptr().cast(),
                message.len(),
            );
        }
        let reason = CStr::from_bytes_until_nul(&message)
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("regcomp error {code}"));
        Err(reason)
    }

    /// Whether librdkafka's subscription would take `topic`.
    pub fn matches(&self, topic: &str) -> bool {
        let Ok(topic) = CString::new(topic) else {
            return false;
        };
        // SAFETY: the pattern compiled; with REG_NOSUB no match array is written.
        let code = unsafe {
            libc::regexec(
                self.compiled.as_ref(),
                topic.as_ptr(),
                0,
                std::ptr::null_mut(),
                0,
            )
        };
        code == 0
    }
}

impl Drop for TopicPattern {
    fn drop(&mut self) {
        // SAFETY: compiled successfully (a failed compile never builds a `TopicPattern`), freed
        // once.
        unsafe { libc::regfree(self.compiled.as_mut()) }
    }
}

/// Whether `topic` is one of Kafka's internal topics (`__consumer_offsets`,
/// `__transaction_state`, …): a name that starts with `__`. A `topic_pattern` (the
/// subscription's or a route's) never takes one: the sink's own commits feed
/// `__consumer_offsets`, and its records are nobody's rows.
pub fn is_internal_topic(topic: &str) -> bool {
    topic.starts_with("__")
}

/// The `topic.blacklist` entry that keeps every internal topic out of librdkafka's view of the
/// cluster when the subscription is a pattern.
pub const INTERNAL_TOPICS: &str = "^__.*";

/// The `topic.blacklist` entry that keeps `topic` out of librdkafka's view of the cluster: the
/// exact name, anchored at both ends (topic names hold letters, digits, `.`, `_` and `-`, of
/// which only `.` means something to a regular expression).
pub fn exact_name_pattern(topic: &str) -> String {
    format!("^{}$", topic.replace('.', "\\."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_topics_are_the_names_with_two_leading_underscores() {
        assert!(is_internal_topic("__consumer_offsets"));
        assert!(is_internal_topic("__transaction_state"));
        assert!(!is_internal_topic("_schemas"));
        assert!(!is_internal_topic("orders__eu"));
        let blacklist = TopicPattern::compile(INTERNAL_TOPICS).unwrap();
        assert!(blacklist.matches("__consumer_offsets"));
        assert!(!blacklist.matches("orders"));
        assert!(!blacklist.matches("_schemas"));
    }

    #[test]
    fn a_subscription_is_anchored_at_the_start_only() {
        let p = TopicPattern::compile("^orders").unwrap();
        assert!(p.matches("orders"));
        assert!(p.matches("orders-dlq"));
        assert!(!p.matches("eu-orders"));
    }

    #[test]
    fn posix_classes_work_and_perl_escapes_are_not_digits() {
        let p = TopicPattern::compile("^orders-[[:digit:]]+$").unwrap();
        assert!(p.matches("orders-12"));
        assert!(!p.matches("orders-x"));
        // `\d` is not POSIX: it never means "a digit" to librdkafka.
        let perl = TopicPattern::compile("^orders-\\d$");
        assert!(perl.is_err() || !perl.unwrap().matches("orders-1"));
    }

    #[test]
    fn an_unbalanced_pattern_is_refused_with_a_reason() {
        let err = TopicPattern::compile("^orders-(").err().expect("refused");
        assert!(!err.is_empty());
        assert!(TopicPattern::compile("^a\0b").is_err());
    }

    #[test]
    fn the_exact_name_pattern_matches_only_that_topic() {
        let p = TopicPattern::compile(&exact_name_pattern("orders.dlq")).unwrap();
        assert!(p.matches("orders.dlq"));
        assert!(!p.matches("ordersxdlq"));
        assert!(!p.matches("orders.dlq2"));
        assert!(!p.matches("x-orders.dlq"));
    }
}
