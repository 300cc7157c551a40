//! The `kafka` section: servers, the subscription (topics or a pattern), librdkafka properties.

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaConfRes;

use crate::config::topic_pattern::TopicPattern;
use crate::config::{FORCED_CONSUMER_PROPERTIES, KafkaConfig, Properties};

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
        self.librdkafka_properties("kafka.properties", &k.properties);
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

    /// Each property is one librdkafka knows, with a value it takes: each is set on a native
    /// configuration of its own (no client, no I/O), as the client would set it at start. A
    /// misspelt name fails here, naming the key; a secret's value is never shown.
    pub(super) fn librdkafka_properties(&mut self, path: &str, properties: &Properties) {
        for (key, value) in properties.iter() {
            let mut one = ClientConfig::new();
            one.set(key, value);
            let Err(KafkaError::ClientConfig(result, desc, ..)) = one.create_native_config() else {
                continue;
            };
            let message = match result {
                RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN => {
                    "not a librdkafka property (misspelt?)".to_string()
                }
                _ if Properties::is_secret(key) => {
                    "librdkafka refuses the value (not shown: it is a secret)".to_string()
                }
                _ => format!("librdkafka refuses the value: {desc}"),
            };
            self.err(format!("{path}.{}", quoted_key(key)), message);
        }
    }
}

/// Turned-off certificate checks: valid, but anyone on the path can then pose as the broker and
/// read the records and the SASL credentials.
pub(super) fn certificate_warnings(
    path: &str,
    properties: &Properties,
    out: &mut Vec<crate::config::ConfigError>,
) {
    let off = |key: &str, values: &[&str]| {
        properties
            .get(key)
            .is_some_and(|v| values.iter().any(|off| v.trim().eq_ignore_ascii_case(off)))
    };
    if off("enable.ssl.certificate.verification", &["false", "0"]) {
        out.push(crate::config::ConfigError::at(
            format!("{path}.{}", quoted_key("enable.ssl.certificate.verification")),
            "the brokers' certificates are not verified: anyone on the network path can pose as a broker and read the records and credentials",
        ));
    }
    if off("ssl.endpoint.identification.algorithm", &["none"]) {
        out.push(crate::config::ConfigError::at(
            format!("{path}.{}", quoted_key("ssl.endpoint.identification.algorithm")),
            "the brokers' host names are not checked against their certificates: any certificate from a trusted CA passes",
        ));
    }
}
