//! A Kafka Connect BigQuery sink connector config (WePay's, Confluent's and Aiven's fork share the
//! class `com.wepay.kafka.connect.bigquery.BigQuerySinkConnector` and its property names) turned
//! into this sink's config, with a report line for every property: mapped, changed in meaning,
//! dropped (no counterpart needed) or not translatable. Only what the connector config says is
//! used; what it leaves to the Connect worker (the brokers, often the converters) comes from the
//! command line, or stays a `${VAR}` the report names.

use std::collections::{BTreeMap, BTreeSet};

use super::draft::{Draft, Input, Scalar};
use super::report::{Outcome, Report};
use crate::config::sanitize_table_name;

/// What the connector config does not say and the worker does.
#[derive(Clone, Debug, Default)]
pub struct WorkerSettings {
    pub bootstrap_servers: Option<String>,
    /// The worker's `value.converter`, when the connector config has none.
    pub value_converter: Option<String>,
    /// The worker's `value.converter.schema.registry.url`, when the connector config has none.
    pub schema_registry_url: Option<String>,
}

/// Why no config can be written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MigrateError {
    #[error("not a connector config: {0}")]
    NotAConfig(String),
    #[error("{property}: {reason}")]
    Property { property: String, reason: String },
    #[error("{0}")]
    Missing(String),
}

fn refuse(property: &str, reason: impl Into<String>) -> MigrateError {
    MigrateError::Property {
        property: property.to_string(),
        reason: reason.into(),
    }
}

const PASSWORD_VAR: &str = "SCHEMA_REGISTRY_PASSWORD";
const BEARER_VAR: &str = "SCHEMA_REGISTRY_BEARER_TOKEN";
const SASL_PASSWORD_VAR: &str = "KAFKA_SASL_PASSWORD";
const BOOTSTRAP_VAR: &str = "KAFKA_BOOTSTRAP_SERVERS";

mod cdc;
mod connector;
mod consumer;
mod converters;
mod credentials;
mod delivery;
mod errors;
mod key_column;
mod schema;
mod smts;
mod tables;
mod topics;
mod value_filter;

/// The connector config's properties as text, from either shape users keep: the flat map
/// (`connect-standalone`, the `PUT /connectors/NAME/config` body) or `{"name", "config": {...}}`
/// (the `POST /connectors` body).
pub fn properties(json: &serde_json::Value) -> Result<BTreeMap<String, String>, MigrateError> {
    let object = json
        .as_object()
        .ok_or_else(|| MigrateError::NotAConfig("the file is not a JSON object".into()))?;
    let (outer_name, config) = match object.get("config") {
        Some(serde_json::Value::Object(config)) => (object.get("name"), config),
        _ => (None, object),
    };
    let mut out = BTreeMap::new();
    for (key, value) in config {
        let text = match value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => String::new(),
            serde_json::Value::Bool(_) | serde_json::Value::Number(_) => value.to_string(),
            _ => {
                return Err(refuse(
                    key,
                    "a Kafka Connect property is a string, number or boolean",
                ));
            }
        };
        out.insert(key.clone(), text);
    }
    if let Some(serde_json::Value::String(name)) = outer_name {
        out.entry("name".to_string())
            .or_insert_with(|| name.clone());
    }
    Ok(out)
}

/// The properties still to be reported, taken one by one.
struct Source {
    props: BTreeMap<String, String>,
    seen: BTreeSet<String>,
    report: Report,
}

impl Source {
    fn get(&self, key: &str) -> Option<&str> {
        self.props.get(key).map(|v| v.trim())
    }

    fn flag(&self, key: &str) -> Option<bool> {
        self.get(key).map(|v| v.eq_ignore_ascii_case("true"))
    }

    fn note(&mut self, key: &str, outcome: Outcome) {
        if self.props.contains_key(key) && self.seen.insert(key.to_string()) {
            self.report.push(key, outcome);
        }
    }

    /// A line for something the config leaves unsaid.
    fn remark(&mut self, what: &str, outcome: Outcome) {
        self.report.push(what, outcome);
    }

    fn keys_with_prefix(&self, prefix: &str) -> Vec<String> {
        self.props
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }
}

/// A value that may be a Connect config-provider reference: `${env:VAR}` becomes `${VAR}`; any
/// other provider (`file`, `directory`, a vault) cannot be resolved here.
fn scalar(property: &str, value: &str) -> Result<Scalar, MigrateError> {
    if let Some(inner) = value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
        return match inner.strip_prefix("env:") {
            Some(var) if !var.is_empty() && !var.contains(':') => Ok(Scalar::Env(var.to_string())),
            _ => Err(refuse(
                property,
                format!(
                    "`{value}` is a Kafka Connect config provider reference; only `${{env:VAR}}` has a counterpart here (`${{VAR}}`): put the value in the config or an environment variable"
                ),
            )),
        };
    }
    if value.contains("${") {
        return Err(refuse(
            property,
            "a config provider reference inside a longer value cannot be resolved here",
        ));
    }
    Ok(Scalar::Text(value.to_string()))
}

fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The table the connector writes a topic to, by its own rule: the topic as is, or sanitized
/// (`[^a-zA-Z0-9_]` → `_`, a leading digit prefixed by `_`).
fn connector_table(topic: &str, sanitize: bool) -> String {
    if !sanitize {
        return topic.to_string();
    }
    let s = sanitize_table_name(topic);
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{s}")
    } else {
        s
    }
}

/// A table id `validate` accepts, for the names a topic can have (Kafka allows ASCII letters,
/// digits, `.`, `_` and `-`; a table id takes all but `.`).
fn is_table_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= crate::config::limits::MAX_TABLE_ID_BYTES
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Turns the connector config into this sink's config and the report: one section after the
/// other in the report's order, each noting its properties in `s` and handing on what the later
/// sections read.
pub fn migrate(
    props: BTreeMap<String, String>,
    worker: &WorkerSettings,
) -> Result<(Draft, Report), MigrateError> {
    let mut s = Source {
        props,
        seen: BTreeSet::new(),
        report: Report::default(),
    };
    let group_id = connector::group(&mut s)?;
    let (topics, topic_pattern) = connector::subscription(&mut s)?;
    let (project, dataset) = connector::destination(&mut s)?;
    let mut routing = topics::routing(&mut s, &topics, topic_pattern.as_deref())?;
    let create_table = tables::create_table(&mut s);
    tables::table_settings(&mut s, create_table.as_ref())?;
    let upsert = s.flag("upsertEnabled") == Some(true);
    let delete = s.flag("deleteEnabled") == Some(true);
    let creates = create_table.is_some();
    let (input, json_envelope) = converters::input(&mut s, worker, creates, upsert || delete)?;
    let json_input = matches!(input, Input::Json);
    let add_columns = schema::schema_changes(&mut s, json_input);
    // As the cdc section: CDC routes unless schemaless JSON lacks the envelope.
    let cdc_routes = (upsert || delete) && (!json_input || json_envelope);
    let key_cx = key_column::KeyContext {
        registry: matches!(input, Input::Registry { .. }),
        cdc: cdc_routes,
        creates,
    };
    let key_column = key_column::key_column(&s, &routing, &key_cx);
    let mut metadata_columns = schema::metadata_columns(&mut s, key_column.as_ref(), &key_cx);
    let cx = smts::Context {
        routing: &routing,
        changes: upsert || delete,
        shaping_blocked: smts::shaping_blocked(cdc_routes),
        key: &key_cx,
    };
    let (transforms, unwrap) = smts::transforms(&mut s, &cx, json_input, &mut metadata_columns);
    let (cdc, at_least_once) =
        cdc::changes(&mut s, upsert, delete, json_input, json_envelope, unwrap);
    if let Some(c) = &cdc {
        let pattern = topic_pattern.as_deref();
        cdc::routes(&mut routing.routes, c, &topics, pattern, &routing.explicit);
    }
    let credentials = credentials::credentials(&mut s)?;
    let (on_bad_record, dead_letter_topic) = errors::bad_records(&mut s);
    delivery::delivery(&mut s, at_least_once);
    let (bootstrap_servers, kafka_properties, start_latest) = consumer::consumer(&mut s, worker)?;
    note_rest(&mut s);
    let draft = Draft {
        bootstrap_servers,
        group_id,
        topics: if topic_pattern.is_none() {
            topics
        } else {
            Vec::new()
        },
        topic_pattern,
        kafka_properties,
        input,
        project,
        dataset,
        table: "{topic}".into(),
        credentials,
        create_in_routes: json_input && creates,
        create_table,
        add_columns,
        metadata_columns,
        routes: routing.routes,
        transforms,
        at_least_once,
        start_latest,
        on_bad_record,
        dead_letter_topic,
    };
    Ok((draft, s.report))
}

/// Every property no section reported.
fn note_rest(s: &mut Source) {
    let rest: Vec<String> = s
        .props
        .keys()
        .filter(|k| !s.seen.contains(*k))
        .cloned()
        .collect();
    for key in rest {
        let outcome = if key.starts_with("producer.override.") || key.starts_with("admin.override.")
        {
            Outcome::Dropped("the sink runs no Connect producer or admin client; the dead-letter producer inherits kafka.properties".into())
        } else {
            Outcome::NotTranslatable(
                "not a property of the BigQuery sink connector or of Kafka Connect that this tool knows".into(),
            )
        };
        s.note(&key, outcome);
    }
}

/// A route's table template for a RegexRouter `replacement` under `topics.regex`: `$n` becomes
/// `{n}`; `None` unless every other character is one a table id keeps as it is (so the
/// template's sanitizing changes only the groups, as the connector's changes the whole name)
/// and every group exists.
fn group_template(replacement: &str, groups: usize) -> Option<String> {
    let mut out = String::new();
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' {
            let mut n = String::new();
            while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                n.push(d);
                chars.next();
            }
            let i: usize = n.parse().ok()?;
            if i == 0 || i > groups {
                return None;
            }
            out.push_str(&format!("{{{i}}}"));
        } else if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else {
            return None;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// `${n}` for every `$n` of a Java replacement string, so Rust's regex reads the group number.
fn braced_groups(replacement: &str) -> String {
    let mut out = String::new();
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push_str("${");
            while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                out.push(d);
                chars.next();
            }
            out.push('}');
        } else {
            out.push(c);
        }
    }
    out
}

/// The `username="…"` of a JAAS line.
fn jaas_username(jaas: &str) -> Option<String> {
    let start = jaas.find("username=")? + "username=".len();
    let rest = jaas[start..].trim_start();
    let quoted = rest.strip_prefix('"')?;
    Some(quoted[..quoted.find('"')?].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_group_references_are_braced_for_rust() {
        assert_eq!(braced_groups("$1"), "${1}");
        assert_eq!(braced_groups("tbl_$12_x$"), "tbl_${12}_x$");
        assert_eq!(braced_groups("plain"), "plain");
    }

    #[test]
    fn a_replacement_of_groups_and_id_characters_is_a_route_template() {
        assert_eq!(
            group_template("events_$1", 1).as_deref(),
            Some("events_{1}")
        );
        assert_eq!(group_template("$2$1", 2).as_deref(), Some("{2}{1}"));
        assert_eq!(group_template("$2", 1), None);
        assert_eq!(group_template("$0", 1), None);
        assert_eq!(group_template("a.$1", 1), None);
        assert_eq!(group_template("${name}", 1), None);
    }

    #[test]
    fn a_jaas_line_gives_its_username_only() {
        let jaas = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="svc-bq" password="p@ss";"#;
        assert_eq!(jaas_username(jaas).as_deref(), Some("svc-bq"));
        assert_eq!(jaas_username("no user here"), None);
    }

    #[test]
    fn only_env_config_providers_have_a_counterpart() {
        assert_eq!(
            scalar("p", "${env:GCP_PROJECT}").unwrap(),
            Scalar::Env("GCP_PROJECT".into())
        );
        assert!(scalar("p", "${file:/x.properties:key}").is_err());
        assert!(scalar("p", "prefix-${env:X}").is_err());
        assert_eq!(scalar("p", "plain").unwrap(), Scalar::Text("plain".into()));
    }

    #[test]
    fn the_connectors_table_rule_prefixes_a_leading_digit_when_sanitizing() {
        assert_eq!(connector_table("2024.audit", true), "_2024_audit");
        assert_eq!(connector_table("shop-orders", false), "shop-orders");
        assert!(is_table_id("shop-orders"));
        assert!(!is_table_id("web.clicks"));
    }
}
