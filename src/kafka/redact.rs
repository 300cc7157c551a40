//! librdkafka's configuration errors carry the value they refused, and rust-rdkafka prints it
//! (`Client config error: No such configuration property: "sasl.pasword" sasl.pasword <value>`):
//! a misspelt or refused secret would reach the log. Every client the sink creates passes its
//! error through [`redacted`] first. `validate` refuses such properties before `run`
//! (`config/validate/kafka.rs`); this covers a config that skipped it.

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaConfRes;

use crate::config::Properties;

const HIDDEN: &str = "<redacted>";

/// `e` with the value of a refused property hidden when it may be a secret: always for a
/// property librdkafka does not know (a misspelt key says nothing of its value), else by
/// [`Properties::is_secret`].
pub fn redacted(e: KafkaError) -> KafkaError {
    match e {
        KafkaError::ClientConfig(result, desc, key, value)
            if result == RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN || Properties::is_secret(&key) =>
        {
            let desc = if value.is_empty() {
                desc
            } else {
                desc.replace(&value, HIDDEN)
            };
            KafkaError::ClientConfig(result, desc, key, HIDDEN.to_string())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::ClientConfig;
    use rdkafka::consumer::BaseConsumer;

    fn create(key: &str, value: &str) -> String {
        let mut c = ClientConfig::new();
        c.set(key, value);
        match c.create::<BaseConsumer>() {
            Ok(_) => panic!("{key} was accepted"),
            Err(e) => redacted(e).to_string(),
        }
    }

    #[test]
    fn a_misspelt_or_refused_secret_never_appears_in_the_error() {
        let message = create("sasl.pasword", "hunter2-secret");
        assert!(message.contains("sasl.pasword"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
        // A refused value of a secret key, as librdkafka words it.
        let refused = KafkaError::ClientConfig(
            RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value \"hunter2\" for configuration property \"sasl.password\"".into(),
            "sasl.password".into(),
            "hunter2".into(),
        );
        let message = redacted(refused).to_string();
        assert!(message.contains("sasl.password"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
        // A value that is no secret is still shown: it says what was wrong.
        let message = create("enable.auto.commit", "maybe");
        assert!(message.contains("maybe"), "{message}");
    }
}
