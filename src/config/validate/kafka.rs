//! The `kafka` section: servers, the subscription (topics or a pattern), librdkafka properties.

use crate::config::topic_pattern::TopicPattern;
use crate::config::{FORCED_CONSUMER_PROPERTIES, KafkaConfig};

use super::{Validator, is_kafka_topic_name, quoted_key};

impl Validator {
    pub(super) fn kafka(&mut self, k: &KafkaConfig) {
        if k.bootstrap_servers.trim().is_empty() {
            self.err("kafka.bootstrap_servers", "must not be empty");
        }
        for server in k
            .bootstrap_servers
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let port_ok = server.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
            });
            if !port_ok {
                self.err(
                    "kafka.bootstrap_servers",
                    format!("`{server}` is not host:port"),
                );
            }
        }
        if k.group_id.trim().is_empty() {
            self.err("kafka.group_id", "must not be empty");
        }
        self.kafka_subscription(k);
        self.kafka_topics(k);
        self.kafka_properties(k);
    }

    /// `kafka.topics` or `kafka.topic_pattern`, one of them, and a pattern both librdkafka and
    /// (under `group.protocol=consumer`) the broker accept.
    fn kafka_subscription(&mut self, k: &KafkaConfig) {
        match (&k.topic_pattern, k.topics.is_empty()) {
            (None, true) => self.err("kafka.topics", "set kafka.topics or kafka.topic_pattern"),
            (Some(_), false) => self.err(
                "kafka.topic_pattern",
                "set either kafka.topics or kafka.topic_pattern, not both",
            ),
            (Some(p), true) if p.trim().is_empty() => {
                self.err("kafka.topic_pattern", "must not be empty")
            }
            (Some(_), true) => {
                let subscription = k.subscription().concat();
                if let Err(e) = TopicPattern::compile(&subscription) {
                    self.err(
                        "kafka.topic_pattern",
                        format!(
                            "not a regular expression librdkafka accepts (POSIX extended): {e}"
                        ),
                    );
                } else if k.is_kip848()
                    && let Err(e) = regex::Regex::new(&subscription)
                {
                    // The broker matches the pattern with RE2/J under group.protocol=consumer.
                    self.err(
                        "kafka.topic_pattern",
                        format!("not a regular expression the broker accepts with group.protocol=consumer: {e}"),
                    );
                }
            }
            _ => {}
        }
    }

    /// Each listed topic is a valid name, listed once.
    fn kafka_topics(&mut self, k: &KafkaConfig) {
        let mut seen = std::collections::BTreeSet::new();
        for (i, topic) in k.topics.iter().enumerate() {
            if !is_kafka_topic_name(topic) {
                self.err(
                    format!("kafka.topics[{i}]"),
                    format!("`{topic}` is not a valid topic name (letters, digits, `.`, `_`, `-`; at most 249)"),
                );
            } else if !seen.insert(topic) {
                self.err(
                    format!("kafka.topics[{i}]"),
                    format!("`{topic}` is listed twice"),
                );
            }
        }
    }

    /// librdkafka properties that the sink forces or that have a field of their own.
    fn kafka_properties(&mut self, k: &KafkaConfig) {
        for (key, value, why) in FORCED_CONSUMER_PROPERTIES {
            if let Some(set) = k.properties.get(*key)
                && !set.trim().eq_ignore_ascii_case(value)
            {
                self.err(
                    format!("kafka.properties.{}", quoted_key(key)),
                    format!("forced to {value} by the sink ({why})"),
                );
            }
        }
        for (key, field) in [
            ("bootstrap.servers", "bootstrap_servers"),
            ("group.id", "group_id"),
        ] {
            if k.properties.contains_key(key) {
                self.err(
                    format!("kafka.properties.{}", quoted_key(key)),
                    format!("set kafka.{field} instead"),
                );
            }
        }
        if k.is_kip848() && k.properties.contains_key("partition.assignment.strategy") {
            self.err(
                format!(
                    "kafka.properties.{}",
                    quoted_key("partition.assignment.strategy")
                ),
                "not used with group.protocol=consumer (the broker assigns partitions)",
            );
        }
    }
}
