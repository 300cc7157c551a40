//! The librdkafka properties of the consumer and the dead-letter producer: the user's, the
//! sink's defaults and the settings the sink forces.

use super::{Config, DeadLetterConfig, KafkaConfig, Properties, defaults};

/// The consumer properties the sink forces, with the reason given when a user sets them.
pub const FORCED_CONSUMER_PROPERTIES: &[(&str, &str, &str)] = &[
    (
        "enable.auto.commit",
        "false",
        "offsets are committed only with a checkpoint",
    ),
    (
        "enable.auto.offset.store",
        "false",
        "offsets are stored only with a checkpoint",
    ),
    (
        "isolation.level",
        "read_committed",
        "aborted transactional records must not reach the table",
    ),
    (
        "auto.offset.reset",
        "error",
        "the start position is decided by recovery.start_from, recovery.lost_offsets and recovery.new_partitions",
    ),
];

impl KafkaConfig {
    /// The effective librdkafka consumer properties: the user's passthrough, the defaults, the
    /// forced settings, bootstrap servers and group id.
    pub fn consumer_properties(&self) -> Properties {
        let mut props = self.properties.clone();
        if !self.is_kip848() {
            props
                .entry("partition.assignment.strategy".into())
                .or_insert_with(|| defaults::PARTITION_ASSIGNMENT_STRATEGY.into());
        }
        // The sink stops taking messages while writer.memory_limit is used up, so librdkafka's
        // queue runs full: keep it and the fetch responses (which stay allocated until their
        // last message is consumed) small, and let the fetcher resume soon after the queue
        // drains (librdkafka waits a whole second by default).
        for (key, value) in defaults::CONSUMER_PROPERTIES {
            // librdkafka refuses a fetch.max.bytes below message.max.bytes.
            if *key == "fetch.max.bytes" && props.contains_key("message.max.bytes") {
                continue;
            }
            props
                .entry((*key).into())
                .or_insert_with(|| (*value).into());
        }
        for (key, value, _) in FORCED_CONSUMER_PROPERTIES {
            props.insert((*key).into(), (*value).into());
        }
        props.insert("bootstrap.servers".into(), self.bootstrap_servers.clone());
        props.insert("group.id".into(), self.group_id.clone());
        props
    }
}

impl Config {
    /// Topics the sink never consumes, whatever the subscription matches: the dead-letter
    /// topic (consuming it would send each bad record back to itself without end).
    pub fn excluded_topics(&self) -> Vec<String> {
        self.dead_letter
            .as_ref()
            .and_then(|d| d.topic.clone())
            .into_iter()
            .collect()
    }

    /// The consumer properties of `run`: [`KafkaConfig::consumer_properties`], with the
    /// excluded topics (and, under a `topic_pattern`, every internal topic `__*`) added to
    /// librdkafka's `topic.blacklist` (after the user's entries), so that a `topic_pattern`
    /// never subscribes them. With KIP-848 the broker matches the
    /// pattern and may still assign them: the consumer leaves such partitions paused.
    pub fn consumer_properties(&self) -> Properties {
        let mut props = self.kafka.consumer_properties();
        let mut excluded: Vec<String> = self
            .excluded_topics()
            .iter()
            .map(String::as_str)
            .map(super::topic_pattern::exact_name_pattern)
            .collect();
        // A pattern never takes an internal topic (a listed one is the operator's choice).
        if self.kafka.topic_pattern.is_some() {
            excluded.push(super::topic_pattern::INTERNAL_TOPICS.to_string());
        }
        if !excluded.is_empty() {
            let list = props
                .get("topic.blacklist")
                .map(|user| user.trim())
                .filter(|user| !user.is_empty())
                .into_iter()
                .map(str::to_string)
                .chain(excluded)
                .collect::<Vec<_>>()
                .join(",");
            props.insert("topic.blacklist".into(), list);
        }
        props
    }
}

/// Consumer properties that describe the connection to the cluster, inherited by the
/// dead-letter producer.
pub(super) fn is_connection_property(key: &str) -> bool {
    key == "security.protocol"
        || key == "client.dns.lookup"
        || key.starts_with("sasl.")
        || key.starts_with("ssl.")
        || key.starts_with("ssl_")
}

impl DeadLetterConfig {
    /// The effective librdkafka producer properties: the connection settings of `kafka` unless
    /// set here, the user's properties, and the durability the sink needs.
    pub fn producer_properties(&self, kafka: &KafkaConfig) -> Properties {
        let mut props = Properties(
            kafka
                .properties
                .iter()
                .filter(|(k, _)| is_connection_property(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        );
        props.insert("bootstrap.servers".into(), kafka.bootstrap_servers.clone());
        props.extend(self.properties.0.clone());
        props.insert("acks".into(), "all".into());
        props
            .entry("enable.idempotence".into())
            .or_insert_with(|| "true".into());
        props
    }
}
