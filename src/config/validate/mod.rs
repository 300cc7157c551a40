//! Validation: the rules between fields, checked without I/O; every violation is reported at
//! once with its field path.

mod delivery;
mod input;
mod kafka;
mod tables;
mod transforms;

use crate::config::topic_pattern::TopicPattern;

use super::{Config, ConfigError, cdc};

/// The longest checkpoint metadata the daemon can write (the codec's own bound, so the two
/// cannot drift).
pub fn checkpoint_metadata_worst_case_len() -> usize {
    kbq_core::metadata::worst_case_len()
}

/// Settings that are valid but probably not what was meant; `validate` prints them and `run`
/// logs them at start. Each names its field, like an error.
pub fn warnings(config: &Config) -> Vec<ConfigError> {
    let mut out = Vec::new();
    let subscription = config.kafka.subscription().concat();
    let pattern = config
        .kafka
        .topic_pattern
        .as_ref()
        .and_then(|_| TopicPattern::compile(&subscription).ok());
    if let Some(pattern) = pattern {
        for topic in config.excluded_topics() {
            if pattern.matches(&topic) {
                out.push(ConfigError::at(
                    "kafka.topic_pattern",
                    format!(
                        "matches the dead-letter topic `{topic}` (dead_letter.topic): the sink never consumes it (it is excluded from the subscription), but a pattern that does not match it says so plainly, e.g. one ending in `$`"
                    ),
                ));
            }
        }
    }
    let mut sections = vec![("kafka.properties", &config.kafka.properties)];
    if let Some(dl) = &config.dead_letter {
        sections.push(("dead_letter.properties", &dl.properties));
    }
    for (path, properties) in sections {
        kafka::certificate_warnings(path, properties, &mut out);
    }
    delivery::warnings(config, &mut out);
    cdc::warnings(config, &mut out);
    out
}

/// Checks a parsed config without any I/O; returns every problem found.
pub fn validate(config: &Config) -> Result<(), Vec<ConfigError>> {
    let mut v = Validator::default();
    v.kafka(&config.kafka);
    v.input(config);
    v.bigquery(config);
    v.routes(config);
    v.transforms(config);
    v.formats(config);
    v.checkpoint(&config.checkpoint);
    v.writer(&config.writer, &config.checkpoint);
    v.dead_letter(config);
    v.recovery(config);
    v.ops(config);
    cdc::validate(config, &mut v.errors);
    if v.errors.is_empty() {
        Ok(())
    } else {
        Err(v.errors)
    }
}

#[derive(Default)]
pub(super) struct Validator {
    pub(super) errors: Vec<ConfigError>,
}

pub(super) fn quoted_key(key: &str) -> String {
    format!("\"{key}\"")
}

pub(super) fn is_kafka_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

pub(super) fn is_column_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= 300
}

/// BigQuery label rules: lowercase letters (international ones too), digits, `_` and `-`, at
/// most 63 characters; a key is not empty and starts with a letter.
pub(super) fn is_label(s: &str, key: bool) -> bool {
    let letter = |c: char| c.is_alphabetic() && !c.is_uppercase();
    let chars_ok = s
        .chars()
        .all(|c| letter(c) || c.is_ascii_digit() || c == '_' || c == '-');
    let first_ok = !key || s.chars().next().is_some_and(letter);
    chars_ok && first_ok && s.chars().count() <= 63
}

pub(super) fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
}

impl Validator {
    pub(super) fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError::at(path, message));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::config::load::yaml_paths;
    use crate::config::{ByteSize, HumanDuration, Secret, defaults, limits, table_for_topic};

    #[test]
    fn durations_take_units_and_sums() {
        assert_eq!(
            HumanDuration::parse("250ms").unwrap().0,
            Duration::from_millis(250)
        );
        assert_eq!(
            HumanDuration::parse("5s").unwrap().0,
            Duration::from_secs(5)
        );
        assert_eq!(
            HumanDuration::parse("1m30s").unwrap().0,
            Duration::from_secs(90)
        );
        assert_eq!(
            HumanDuration::parse("7d").unwrap().0,
            Duration::from_secs(7 * 86_400)
        );
        for bad in ["", "5", "5 s", "s", "5sec", "-1s", "1.5s"] {
            assert!(HumanDuration::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(ByteSize::parse("8MiB").unwrap().0, 8 << 20);
        assert_eq!(ByteSize::parse("512 KiB").unwrap().0, 512 << 10);
        assert_eq!(ByteSize::parse("10MB").unwrap().0, 10_000_000);
        assert_eq!(ByteSize::parse("4096").unwrap().0, 4096);
        assert_eq!(ByteSize(20 << 20).to_string(), "20MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000B");
        for bad in ["", "MiB", "8 XB", "-1"] {
            assert!(ByteSize::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn secrets_do_not_print() {
        assert_eq!(format!("{:?}", Secret::new("hunter2")), "<redacted>");
    }

    #[test]
    fn paths_name_keys_sequence_items_and_dotted_keys() {
        let text =
            "a:\n  b: 1\n  list:\n    - x\n    - y: 2\n  props:\n    enable.auto.commit: true\n";
        let path = |line, col| yaml_paths::path_at(text, line, col);
        assert_eq!(path(2, 3), ("a.b".into(), Some("a".into())));
        assert_eq!(path(4, 7), ("a.list[0]".into(), None));
        assert_eq!(path(5, 7), ("a.list[1].y".into(), Some("a.list[1]".into())));
        assert_eq!(path(5, 10), ("a.list[1].y".into(), None));
        assert_eq!(
            path(7, 5),
            (
                "a.props.\"enable.auto.commit\"".into(),
                Some("a.props".into())
            )
        );
    }

    #[test]
    fn topics_become_table_ids_of_letters_digits_and_underscores_at_most_1024_bytes() {
        assert_eq!(
            table_for_topic("{topic}", "shop.orders-v2"),
            "shop_orders_v2"
        );
        assert_eq!(table_for_topic("raw_{topic}_t", "a.b"), "raw_a_b_t");
        assert_eq!(table_for_topic("fixed", "a.b"), "fixed");
        let long = "x".repeat(249);
        let id = table_for_topic(&format!("{}{{topic}}", "p".repeat(900)), &long);
        assert_eq!(id.len(), limits::MAX_TABLE_ID_BYTES);
        assert!(id.starts_with(&"p".repeat(900)));
    }

    #[test]
    fn the_default_metadata_limit_holds_the_worst_case_checkpoint() {
        // The refusal at the boundary is tests/e2e/config_validate.rs; the worst case itself is
        // checked by encoding it (kbq-core's metadata tests).
        let worst = checkpoint_metadata_worst_case_len();
        assert!(
            worst <= defaults::CHECKPOINT_METADATA_MAX_BYTES as usize,
            "{worst}"
        );
    }
}
