//! The consumer: the brokers (from the command line, the connector or `${VAR}`) and the
//! `consumer.override.*` properties, mapped to librdkafka's where they have a counterpart.

use std::collections::BTreeMap;

use super::{
    BOOTSTRAP_VAR, MigrateError, SASL_PASSWORD_VAR, Source, WorkerSettings, jaas_username, scalar,
};
use crate::migrate::draft::Scalar;
use crate::migrate::report::Outcome;

/// The brokers, `kafka.properties`, and whether a group without offsets starts at the latest.
pub(super) fn consumer(
    s: &mut Source,
    worker: &WorkerSettings,
) -> Result<(Scalar, BTreeMap<String, Scalar>, bool), MigrateError> {
    let mut kafka_properties = BTreeMap::new();
    let bootstrap = bootstrap(s, worker)?;
    let start_latest = overrides(s, &mut kafka_properties)?;
    Ok((bootstrap, kafka_properties, start_latest))
}

fn bootstrap(s: &mut Source, worker: &WorkerSettings) -> Result<Scalar, MigrateError> {
    let bootstrap = match (
        worker.bootstrap_servers.clone(),
        s.get("consumer.override.bootstrap.servers")
            .map(str::to_string),
    ) {
        (Some(b), _) => {
            s.note(
                "consumer.override.bootstrap.servers",
                Outcome::Dropped("--bootstrap-servers given on the command line".into()),
            );
            Scalar::Text(b)
        }
        (None, Some(b)) => {
            s.note(
                "consumer.override.bootstrap.servers",
                Outcome::Mapped("kafka.bootstrap_servers".into()),
            );
            scalar("consumer.override.bootstrap.servers", &b)?
        }
        (None, None) => {
            s.remark(
                "bootstrap.servers (the worker's)",
                Outcome::Changed(format!(
                    "kafka.bootstrap_servers is read from the environment variable {BOOTSTRAP_VAR} (the connector config does not name the brokers; or pass --bootstrap-servers)"
                )),
            );
            Scalar::Env(BOOTSTRAP_VAR.into())
        }
    };
    Ok(bootstrap)
}

/// The `consumer.override.*` properties not yet reported; returns whether the consumer starts
/// at the latest offsets.
fn overrides(
    s: &mut Source,
    kafka_properties: &mut BTreeMap<String, Scalar>,
) -> Result<bool, MigrateError> {
    let mut start_latest = false;
    for key in s.keys_with_prefix("consumer.override.") {
        if s.seen.contains(&key) {
            continue;
        }
        let property = key.trim_start_matches("consumer.override.").to_string();
        let value = s.get(&key).unwrap_or_default().to_string();
        let outcome = match property.as_str() {
            "security.protocol" | "session.timeout.ms" | "heartbeat.interval.ms"
            | "max.partition.fetch.bytes" | "fetch.max.bytes" | "fetch.min.bytes"
            | "client.id" | "client.rack" | "request.timeout.ms" | "reconnect.backoff.ms"
            | "reconnect.backoff.max.ms" | "retry.backoff.ms" | "group.instance.id" => {
                kafka_properties.insert(property.clone(), scalar(&key, &value)?);
                Outcome::Mapped(format!("kafka.properties.{property} (the same name in librdkafka)"))
            }
            "sasl.mechanism" => {
                kafka_properties.insert("sasl.mechanisms".into(), Scalar::Text(value.clone()));
                Outcome::Mapped("kafka.properties.sasl.mechanisms".into())
            }
            "sasl.jaas.config" => match jaas_username(&value) {
                Some(user) if value.contains("PlainLoginModule") || value.contains("ScramLoginModule") => {
                    kafka_properties.insert("sasl.username".into(), Scalar::Text(user));
                    kafka_properties.insert("sasl.password".into(), Scalar::Env(SASL_PASSWORD_VAR.into()));
                    Outcome::Changed(format!(
                        "kafka.properties.sasl.username; the password is read from the environment variable {SASL_PASSWORD_VAR} (or kafka.property_files), never written into the YAML"
                    ))
                }
                _ => Outcome::NotTranslatable(
                    "a JAAS login module other than PLAIN or SCRAM: set librdkafka's sasl.* properties (OAUTHBEARER: sasl.oauthbearer.*) by hand".into(),
                ),
            },
            "ssl.endpoint.identification.algorithm" => {
                let v = if value.is_empty() { "none" } else { "https" };
                kafka_properties.insert(property.clone(), Scalar::Text(v.into()));
                Outcome::Mapped(format!("kafka.properties.{property}: {v}"))
            }
            "auto.offset.reset" => {
                start_latest = value.eq_ignore_ascii_case("latest");
                Outcome::Changed(format!(
                    "recovery.start_from: {} for a group without offsets; librdkafka's auto.offset.reset is forced to error, so an out-of-range position is recovery.on_out_of_range's decision, never silent",
                    if start_latest { "latest" } else { "earliest" }
                ))
            }
            "isolation.level" => Outcome::Dropped("always read_committed".into()),
            "enable.auto.commit" => Outcome::Dropped("never: offsets are committed with the checkpoint".into()),
            "max.poll.records" | "max.poll.interval.ms" | "partition.assignment.strategy" => {
                Outcome::Dropped("a Java consumer setting without a counterpart in the sink's poll loop (partition.assignment.strategy is cooperative-sticky)".into())
            }
            p if p.starts_with("ssl.truststore") || p.starts_with("ssl.keystore") || p == "ssl.key.password" => {
                Outcome::NotTranslatable(
                    "Java key stores: librdkafka takes PEM files (ssl.ca.location, ssl.certificate.location, ssl.key.location)".into(),
                )
            }
            _ => Outcome::NotTranslatable(
                "a Java client property: set its librdkafka counterpart under kafka.properties if there is one (validate checks the names)".into(),
            ),
        };
        s.note(&key, outcome);
    }
    Ok(start_latest)
}
