//! A Kafka Connect BigQuery sink connector config (WePay's, Confluent's and Aiven's fork share the
//! class `com.wepay.kafka.connect.bigquery.BigQuerySinkConnector` and its property names) turned
//! into this sink's config, with a report line for every property: mapped, changed in meaning,
//! dropped (no counterpart needed) or not translatable. Only what the connector config says is
//! used; what it leaves to the Connect worker (the brokers, often the converters) comes from the
//! command line, or stays a `${VAR}` the report names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::draft::{Cdc, CreateTable, Draft, Input, Route, Scalar};
use super::report::{Outcome, Report};
use crate::bigquery::credential_file;
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

/// Turns the connector config into this sink's config and the report.
pub fn migrate(
    props: BTreeMap<String, String>,
    worker: &WorkerSettings,
) -> Result<(Draft, Report), MigrateError> {
    let mut s = Source {
        props,
        seen: BTreeSet::new(),
        report: Report::default(),
    };

    // --- the connector itself -------------------------------------------------------------
    let class = s.get("connector.class").unwrap_or_default().to_string();
    if !class.ends_with("BigQuerySinkConnector") {
        return Err(refuse(
            "connector.class",
            format!(
                "`{class}` is not the BigQuery sink connector (com.wepay.kafka.connect.bigquery.BigQuerySinkConnector, also Confluent's and Aiven's class)"
            ),
        ));
    }
    s.note(
        "connector.class",
        Outcome::Mapped("the whole file is this sink's config".into()),
    );
    let name = s.get("name").map(str::to_string);
    let group_id = match (s.get("consumer.override.group.id"), &name) {
        (Some(g), _) => g.to_string(),
        (None, Some(n)) => format!("connect-{n}"),
        (None, None) => {
            return Err(MigrateError::Missing(
                "name: the connector has no name, so its consumer group (connect-NAME) is unknown"
                    .into(),
            ));
        }
    };
    let takeover = format!(
        "kafka.group_id \"{group_id}\": the connector's own consumer group, so the sink starts at the offsets the connector committed (an offset without checkpoint metadata is taken as an operator reset: the sink starts there and logs it). Stop the connector first: two consumers in one group would split the partitions. Records the connector wrote after its last offset commit are written once more at the switch; from then on exactly once"
    );
    if s.props.contains_key("consumer.override.group.id") {
        s.note("consumer.override.group.id", Outcome::Changed(takeover));
        s.note(
            "name",
            Outcome::Dropped("the group comes from consumer.override.group.id".into()),
        );
    } else {
        s.note("name", Outcome::Changed(takeover));
    }
    s.note(
        "tasks.max",
        Outcome::Dropped(
            "parallelism is the number of replicas in one consumer group; every partition has its own writer and stream".into(),
        ),
    );

    // --- subscription ----------------------------------------------------------------------
    let topics = s.get("topics").map(list).unwrap_or_default();
    let regex = s
        .get("topics.regex")
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    let topic_pattern = match (&regex, topics.is_empty()) {
        (Some(_), false) => {
            return Err(refuse(
                "topics.regex",
                "both topics and topics.regex are set; Kafka Connect refuses that too",
            ));
        }
        (None, true) => {
            return Err(MigrateError::Missing(
                "topics or topics.regex: the connector subscribes to nothing".into(),
            ));
        }
        (Some(r), true) => {
            // Java's Pattern.matches() takes the whole name; librdkafka anchors only the start.
            let posix = r.replace("\\d", "[0-9]");
            s.note(
                "topics.regex",
                Outcome::Changed(format!(
                    "kafka.topic_pattern \"^({posix})$\": librdkafka reads a POSIX extended regular expression, not java.util.regex; anchored at both ends as Java's matches() is{}; Java-only syntax (\\w, (?i), lookarounds) fails validate",
                    if posix != *r { ", \\d written as [0-9]" } else { "" }
                )),
            );
            Some(format!("^({posix})$"))
        }
        (None, false) => {
            s.note("topics", Outcome::Mapped("kafka.topics".into()));
            None
        }
    };

    // --- the destination -------------------------------------------------------------------
    let project = match s.get("project") {
        Some(p) if !p.is_empty() => scalar("project", p)?,
        _ => return Err(MigrateError::Missing("project: no BigQuery project".into())),
    };
    s.note("project", Outcome::Mapped("bigquery.project".into()));
    let dataset = if let Some(d) = s.get("defaultDataset").filter(|d| !d.is_empty()) {
        let d = scalar("defaultDataset", d)?;
        s.note("defaultDataset", Outcome::Mapped("bigquery.dataset".into()));
        d
    } else if let Some(datasets) = s.get("datasets").map(list) {
        // The old form: `<topic regex>=<dataset>` pairs.
        let names: BTreeSet<String> = datasets
            .iter()
            .filter_map(|pair| pair.split_once('=').map(|(_, d)| d.trim().to_string()))
            .collect();
        match names.len() {
            1 => {
                let d = names.into_iter().next().expect("one dataset");
                s.note(
                    "datasets",
                    Outcome::Changed(format!(
                        "bigquery.dataset \"{d}\": every topic goes to this one dataset (the regexes of the old form are not needed with one dataset)"
                    )),
                );
                Scalar::Text(d)
            }
            _ => {
                return Err(refuse(
                    "datasets",
                    "several datasets by topic regex: this sink writes one dataset per process (run one per dataset)",
                ));
            }
        }
    } else {
        return Err(MigrateError::Missing(
            "defaultDataset: no BigQuery dataset".into(),
        ));
    };

    let sanitize = s.flag("sanitizeTopics").unwrap_or(false);
    let mut routes: Vec<Route> = Vec::new();
    // The table each listed topic's record goes to, where the template would not give it.
    let mut explicit: BTreeMap<String, String> = BTreeMap::new();
    if let Some(map) = s
        .get("topic2TableMap")
        .filter(|m| !m.is_empty())
        .map(str::to_string)
    {
        for pair in list(&map) {
            let Some((topic, table)) = pair.split_once(':') else {
                return Err(refuse(
                    "topic2TableMap",
                    format!("`{pair}` is not topic:table"),
                ));
            };
            explicit.insert(topic.trim().to_string(), table.trim().to_string());
        }
        s.note(
            "topic2TableMap",
            Outcome::Mapped(format!(
                "routes: one per topic with its table ({} routes); topics not listed use bigquery.table",
                explicit.len()
            )),
        );
    }

    // RegexRouter renames the topic before the connector picks the table.
    let transforms = s.get("transforms").map(list).unwrap_or_default();
    let mut router: Option<(regex::Regex, String, String)> = None;
    // With topics.regex: a route whose capture groups name the table as the routed topic did,
    // and whether that is exact (a template starting with a group may start with a digit,
    // which the connector prefixed with `_`).
    let mut pattern_router: Option<(String, Route, bool)> = None;
    for t in &transforms {
        let class = s
            .get(&format!("transforms.{t}.type"))
            .unwrap_or_default()
            .to_string();
        if class.ends_with(".RegexRouter") {
            let pattern = s
                .get(&format!("transforms.{t}.regex"))
                .unwrap_or_default()
                .to_string();
            let replacement = s
                .get(&format!("transforms.{t}.replacement"))
                .unwrap_or_default()
                .to_string();
            let has_predicate = s.props.contains_key(&format!("transforms.{t}.predicate"));
            match regex::Regex::new(&format!("^(?:{pattern})$")) {
                Ok(re) if topic_pattern.is_none() && !has_predicate => {
                    router = Some((re, replacement, t.clone()))
                }
                Ok(re) if sanitize && !has_predicate => {
                    if let Some(table) = group_template(&replacement, re.captures_len() - 1) {
                        let exact = !table.starts_with('{');
                        let route = Route {
                            topics: Vec::new(),
                            topic_pattern: Some(pattern.clone()),
                            table: Some(table),
                            cdc: None,
                        };
                        pattern_router = Some((t.clone(), route, exact));
                    }
                }
                _ => {}
            }
        }
    }

    let mut sanitized_note = None;
    for topic in &topics {
        let routed = match &router {
            Some((re, replacement, _)) if re.is_match(topic) => {
                // Java's `$1` and Rust's `${1}` name groups alike once braced.
                let braced = braced_groups(replacement);
                re.replace(topic, braced.as_str()).into_owned()
            }
            _ => topic.clone(),
        };
        let connector = explicit
            .get(topic)
            .cloned()
            .unwrap_or_else(|| connector_table(&routed, sanitize));
        let template = sanitize_table_name(topic);
        if connector == template {
            continue;
        }
        if is_table_id(&connector) {
            explicit.insert(topic.clone(), connector);
        } else {
            // The connector would have failed on this table id; the template's is the nearest.
            sanitized_note = Some(format!(
                "topic {topic}: the connector's table `{connector}` is not a valid table id (it would have failed); here `{template}`"
            ));
        }
    }
    if topic_pattern.is_none() {
        for (topic, table) in &explicit {
            if topics.contains(topic) {
                routes.push(Route {
                    topics: vec![topic.clone()],
                    topic_pattern: None,
                    table: Some(table.clone()),
                    cdc: None,
                });
            }
        }
    } else {
        for (topic, table) in &explicit {
            routes.push(Route {
                topics: Vec::new(),
                topic_pattern: Some(regex::escape(topic)),
                table: Some(table.clone()),
                cdc: None,
            });
        }
        if let Some((_, route, _)) = &pattern_router {
            routes.push(route.clone());
        }
    }
    let sanitize_text = match (&topic_pattern, sanitize) {
        (None, true) => "bigquery.table \"{topic}\" (every character but letters, digits and `_` becomes `_`), with a route for any listed topic whose table differs (a name starting with a digit gets the connector's `_` prefix)".to_string(),
        (None, false) => "the topic is the table, as the connector does: bigquery.table \"{topic}\" where that is the same id, a route with the topic's own name elsewhere".to_string(),
        (Some(_), true) => "bigquery.table \"{topic}\": every character but letters, digits and `_` becomes `_`; unlike the connector, a topic starting with a digit gets no `_` prefix".to_string(),
        (Some(_), false) => "bigquery.table \"{topic}\" sanitizes every topic matched by the pattern (`.`, `-` become `_`); the connector used the raw name, so a matched topic with `-` writes another table here: add a route for it".to_string(),
    };
    let sanitize_outcome = match (&topic_pattern, &sanitized_note) {
        (None, None) => Outcome::Mapped(sanitize_text),
        (None, Some(note)) => Outcome::Changed(format!("{sanitize_text}; {note}")),
        (Some(_), _) => Outcome::Changed(sanitize_text),
    };
    if s.props.contains_key("sanitizeTopics") {
        s.note("sanitizeTopics", sanitize_outcome);
    } else {
        s.remark("sanitizeTopics (unset: false)", sanitize_outcome);
    }

    // --- tables ----------------------------------------------------------------------------
    let partition_type = s.get("timePartitioningType").map(str::to_ascii_uppercase);
    let create = s.flag("autoCreateTables");
    let changes = s.flag("upsertEnabled") == Some(true) || s.flag("deleteEnabled") == Some(true);
    let create_table = match create {
        Some(true) => {
            // The connector partitions a created table by day of arrival unless told NONE; a
            // table of upserts gets that only when asked for (BigQuery applies changes by key,
            // and arrival-time partitions would only split one row's history).
            let partitioned = match partition_type.as_deref() {
                Some("NONE") => false,
                Some(_) => true,
                None => !changes || s.get("timestampPartitionFieldName").is_some(),
            };
            let ct = CreateTable {
                partition_field: s
                    .get("timestampPartitionFieldName")
                    .filter(|f| !f.is_empty())
                    .map(str::to_string),
                partition_type: if partitioned {
                    Some(partition_type.clone().unwrap_or_else(|| "DAY".into()))
                } else {
                    None
                },
                partitioned,
                expiration_ms: s.get("partitionExpirationMs").and_then(|v| v.parse().ok()),
                clustering: s
                    .get("clusteringPartitionFieldNames")
                    .map(list)
                    .unwrap_or_default(),
            };
            s.note(
                "autoCreateTables",
                Outcome::Mapped(
                    "bigquery.create_table: a missing table is created from the input's schema (Avro, Protobuf, JSON Schema through the registry)".into(),
                ),
            );
            Some(ct)
        }
        Some(false) => {
            s.note(
                "autoCreateTables",
                Outcome::Mapped(
                    "no bigquery.create_table: a missing table stops the sink at start, naming it"
                        .into(),
                ),
            );
            None
        }
        None => {
            s.remark(
                "autoCreateTables (unset)",
                Outcome::Changed(
                    "the connector's default differs by version (true in Confluent's and Aiven's 2.x, false in WePay's 1.x); here no table is created: set bigquery.create_table to create them".into(),
                ),
            );
            None
        }
    };
    let table_settings = [
        (
            "timePartitioningType",
            "bigquery.create_table.time_partitioning.type (NONE: no time_partitioning)",
        ),
        (
            "timestampPartitionFieldName",
            "bigquery.create_table.time_partitioning.field",
        ),
        (
            "partitionExpirationMs",
            "bigquery.create_table.time_partitioning.expiration",
        ),
        (
            "clusteringPartitionFieldNames",
            "bigquery.create_table.clustering",
        ),
    ];
    for (key, place) in table_settings {
        let outcome = if create_table.is_some() {
            Outcome::Mapped(place.into())
        } else {
            Outcome::Dropped(format!(
                "only for created tables, and this config creates none ({place})"
            ))
        };
        s.note(key, outcome);
    }
    if let Some(ct) = &create_table
        && ct.clustering.len() > crate::config::limits::MAX_CLUSTERING_FIELDS
    {
        return Err(refuse(
            "clusteringPartitionFieldNames",
            "at most four clustering fields",
        ));
    }
    s.note(
        "bigQueryPartitionDecorator",
        Outcome::Dropped(
            "the Storage Write API writes a partitioned table by its partitioning column or by arrival time, without a `$YYYYMMDD` decorator".into(),
        ),
    );
    if s.flag("bigQueryMessageTimePartitioning") == Some(true) {
        s.note(
            "bigQueryMessageTimePartitioning",
            Outcome::NotTranslatable(
                "ingestion-time partitions chosen by the record's timestamp need the partition decorator, which the Storage Write API does not take; rows land in the partition of their arrival. To partition by the record's time, add bigquery.metadata_columns.timestamp and partition by that column".into(),
            ),
        );
    } else {
        s.note(
            "bigQueryMessageTimePartitioning",
            Outcome::Mapped("false: partitions by arrival time, as here".into()),
        );
    }

    // --- the input ---------------------------------------------------------------------------
    let converter = s
        .get("value.converter")
        .map(str::to_string)
        .or_else(|| worker.value_converter.clone());
    let Some(converter) = converter else {
        return Err(MigrateError::Missing(
            "value.converter: the connector config has none, so the Connect worker's applies; pass it with --value-converter (and --schema-registry-url for a registry converter)".into(),
        ));
    };
    let in_config = s.props.contains_key("value.converter");
    let registry_format = match converter.as_str() {
        "io.confluent.connect.avro.AvroConverter" => Some("avro"),
        "io.confluent.connect.protobuf.ProtobufConverter" => Some("protobuf"),
        "io.confluent.connect.json.JsonSchemaConverter" => Some("json_schema"),
        "org.apache.kafka.connect.json.JsonConverter" => None,
        other => {
            return Err(refuse(
                "value.converter",
                format!(
                    "`{other}`: this sink reads Confluent Avro, Protobuf or JSON Schema through a registry, or JSON; records of another converter have no counterpart"
                ),
            ));
        }
    };
    let upsert = s.flag("upsertEnabled") == Some(true);
    let delete = s.flag("deleteEnabled") == Some(true);
    let mut json_envelope = false;
    let input = match registry_format {
        Some(format) => {
            let url = s
                .get("value.converter.schema.registry.url")
                .map(str::to_string)
                .or_else(|| worker.schema_registry_url.clone())
                .ok_or_else(|| {
                    MigrateError::Missing(format!(
                        "value.converter.schema.registry.url: {converter} needs a registry; pass --schema-registry-url when the worker sets it"
                    ))
                })?;
            let urls = list(&url);
            let first = urls.first().cloned().unwrap_or_default();
            s.note(
                "value.converter.schema.registry.url",
                if urls.len() > 1 {
                    Outcome::Changed(format!(
                        "schema_registry.url \"{first}\": one URL here; the others ({}) are not tried",
                        urls[1..].join(", ")
                    ))
                } else {
                    Outcome::Mapped("schema_registry.url".into())
                },
            );
            let (username, password) = match (
                s.get("value.converter.basic.auth.credentials.source"),
                s.get("value.converter.basic.auth.user.info"),
            ) {
                (source, Some(info))
                    if source.is_none_or(|v| v.eq_ignore_ascii_case("USER_INFO")) =>
                {
                    let user = info.split_once(':').map_or(info, |(u, _)| u).to_string();
                    s.note(
                        "value.converter.basic.auth.user.info",
                        Outcome::Changed(format!(
                            "schema_registry.username; the password is read from the environment variable {PASSWORD_VAR}, never written into the YAML (or use schema_registry.password_file)"
                        )),
                    );
                    s.note(
                        "value.converter.basic.auth.credentials.source",
                        Outcome::Mapped("basic auth with username and password".into()),
                    );
                    (
                        Some(Scalar::Text(user)),
                        Some(Scalar::Env(PASSWORD_VAR.into())),
                    )
                }
                _ => (None, None),
            };
            let bearer = s
                .get("value.converter.bearer.auth.token")
                .map(|_| Scalar::Env(BEARER_VAR.into()));
            if bearer.is_some() {
                s.note(
                    "value.converter.bearer.auth.token",
                    Outcome::Changed(format!(
                        "schema_registry.bearer_token, read from the environment variable {BEARER_VAR} (or use schema_registry.bearer_token_file)"
                    )),
                );
                s.note(
                    "value.converter.bearer.auth.credentials.source",
                    Outcome::Mapped("bearer auth".into()),
                );
            }
            Input::Registry {
                url: scalar("value.converter.schema.registry.url", &first)?,
                username,
                password,
                bearer_token: bearer,
                format: Some(format),
            }
        }
        None => {
            // JsonConverter: schemas.enable defaults to true, the {"schema", "payload"} envelope.
            json_envelope = s.flag("value.converter.schemas.enable").unwrap_or(true);
            let outcome = if json_envelope && !(upsert || delete) {
                Outcome::NotTranslatable(
                    "Kafka Connect's {\"schema\", \"payload\"} envelope is read only by cdc routes here; this config reads plain JSON objects (json: {}), and an envelope record is a bad record. Produce with schemas.enable=false, or write the topic through a cdc route".into(),
                )
            } else if json_envelope {
                Outcome::Mapped(
                    "routes[].cdc.schemas_enable: true (the envelope's schema types the columns)"
                        .into(),
                )
            } else {
                Outcome::Mapped("json: {} (schemaless JSON typed by the table's columns)".into())
            };
            if s.props.contains_key("value.converter.schemas.enable") {
                s.note("value.converter.schemas.enable", outcome);
            } else {
                s.remark("value.converter.schemas.enable (unset: true)", outcome);
            }
            Input::Json
        }
    };
    let converter_text = format!(
        "{} records: {}",
        converter.rsplit('.').next().unwrap_or(&converter),
        match &input {
            Input::Registry {
                format: Some(f), ..
            } => {
                format!("schema_registry with format {f}, each record's schema by its id")
            }
            _ => "json: {}".to_string(),
        }
    );
    if in_config {
        s.note("value.converter", Outcome::Mapped(converter_text));
    } else {
        s.remark(
            "value.converter (from the worker)",
            Outcome::Mapped(converter_text),
        );
    }
    for key in s.keys_with_prefix("value.converter.") {
        let outcome = if key.contains("ssl.") {
            Outcome::NotTranslatable(
                "the registry's TLS settings are Java key stores; give schema_registry.ca_file a PEM bundle".into(),
            )
        } else if key.ends_with("subject.name.strategy") {
            Outcome::Changed(
                "records are read by their schema id whatever the subject; the strategy names only the subject create_table reads: schema_registry.table_subject (`{topic}-value` by default)".into(),
            )
        } else {
            Outcome::Dropped("a converter detail with no effect on reading by schema id".into())
        };
        s.note(&key, outcome);
    }
    let json_input = matches!(input, Input::Json);
    if json_input && create_table.is_some() && !json_envelope {
        return Err(refuse(
            "autoCreateTables",
            "schemaless JSON has no schema to create a table from (the connector refuses it too)",
        ));
    }
    for key in s.keys_with_prefix("key.converter") {
        s.note(
            &key,
            Outcome::Dropped(
                "the key is read only for a cdc route's key columns (through the registry subject {topic}-key) and the key column (raw bytes)".into(),
            ),
        );
    }
    for key in s.keys_with_prefix("header.converter") {
        s.note(
            &key,
            Outcome::Dropped(
                "headers are copied as bytes into the headers column when one is configured".into(),
            ),
        );
    }

    // --- schema changes ----------------------------------------------------------------------
    let add_columns =
        s.flag("allowNewBigQueryFields") == Some(true) || s.flag("autoUpdateSchemas") == Some(true);
    for key in ["allowNewBigQueryFields", "autoUpdateSchemas"] {
        let outcome = if add_columns && json_input {
            Outcome::NotTranslatable(
                "schemaless JSON has no schema to add columns from; new keys without a column are ignored (unknown_fields: ignore)".into(),
            )
        } else if add_columns {
            Outcome::Mapped(
                "bigquery.schema_update: add_columns: a new nullable field adds a NULLABLE column before its records are written; a new required field dead-letters its records (BigQuery adds no REQUIRED column)".into(),
            )
        } else {
            Outcome::Mapped("bigquery.schema_update: none, the default".into())
        };
        s.note(key, outcome);
    }
    let add_columns = add_columns && !json_input;
    for (key, what) in [
        (
            "allowBigQueryRequiredFieldRelaxation",
            "REQUIRED columns stay REQUIRED: a record without the field is a bad record (dead-letter topic with the reason)",
        ),
        (
            "allowSchemaUnionization",
            "the table keeps its own schema; a field without a column is ignored (unknown_fields: ignore) and a new field adds a column only with schema_update: add_columns",
        ),
    ] {
        let outcome = if s.flag(key) == Some(true) {
            Outcome::NotTranslatable(format!("no such schema change here yet: {what}"))
        } else {
            Outcome::Mapped("false: the behaviour here".into())
        };
        s.note(key, outcome);
    }
    for (key, why) in [
        (
            "allBQFieldsNullable",
            "created columns are REQUIRED where the schema's field is not nullable",
        ),
        (
            "sanitizeFieldNames",
            "field names are not rewritten: Avro and Protobuf names are valid column names already; a JSON key that is not one has no column (ignored)",
        ),
        (
            "convertDoubleSpecialValues",
            "not needed for the write itself: the Storage Write API stores NaN and ±Infinity in FLOAT64 as they are; the connector wrote Double.MAX_VALUE/MIN_VALUE instead, so the stored values differ",
        ),
        (
            "convertDebeziumTimestampToInteger",
            "Debezium timestamps are written as TIMESTAMP/DATETIME columns by their named types (docs/mapping.md)",
        ),
    ] {
        let outcome = if s.flag(key) == Some(true) {
            Outcome::NotTranslatable(why.into())
        } else {
            Outcome::Mapped("false: the behaviour here".into())
        };
        s.note(key, outcome);
    }

    // --- metadata columns ----------------------------------------------------------------------
    let mut metadata_columns: Vec<(&'static str, String)> = Vec::new();
    if let Some(key) = s
        .get("kafkaKeyFieldName")
        .filter(|k| !k.is_empty())
        .map(str::to_string)
    {
        metadata_columns.push(("key", key.clone()));
        s.note(
            "kafkaKeyFieldName",
            Outcome::Changed(format!(
                "bigquery.metadata_columns.key \"{key}\": a BYTES column with the key's raw bytes; the connector wrote a RECORD of the key's converted fields"
            )),
        );
    }
    if let Some(data) = s
        .get("kafkaDataFieldName")
        .filter(|k| !k.is_empty())
        .map(str::to_string)
    {
        for (field, suffix) in [
            ("topic", "topic"),
            ("partition", "partition"),
            ("offset", "offset"),
        ] {
            metadata_columns.push((field, format!("{data}_{suffix}")));
        }
        s.note(
            "kafkaDataFieldName",
            Outcome::Changed(format!(
                "bigquery.metadata_columns topic/partition/offset as columns {data}_topic, {data}_partition, {data}_offset; the connector wrote one RECORD `{data}` with those and insertTime (its processing time), which has no counterpart (metadata_columns.timestamp is the record's own timestamp)"
            )),
        );
    }

    // --- transforms ----------------------------------------------------------------------------
    // The chain's SMTs that have an exact counterpart become `bigquery.transforms`, in the
    // chain's order (docs/mapping.md#transforms). A field transform (drop, rename, mask, set)
    // cannot be had beside a created or evolved table or on a CDC route (validate refuses it).
    // As the cdc section below: CDC routes unless schemaless JSON lacks the envelope.
    let cdc_routes = (upsert || delete) && (!json_input || json_envelope);
    let shaping_blocked: Option<&str> = if create_table.is_some() {
        Some(
            "validate refuses field transforms beside bigquery.create_table (autoCreateTables), which derives the table from the writer schema without them: create the table with the transformed columns, drop autoCreateTables, then add the transform to bigquery.transforms",
        )
    } else if add_columns {
        Some(
            "validate refuses field transforms beside schema_update: add_columns (allowNewBigQueryFields/autoUpdateSchemas), which would add the dropped, renamed and masked fields back as columns",
        )
    } else if cdc_routes {
        Some(
            "the upserts go through a CDC route, whose rows are keyed changes: only filter applies there",
        )
    } else {
        None
    };
    let mut chain = Chain {
        transforms: Vec::new(),
        touched: BTreeMap::new(),
        routed_by: None,
        json_input,
    };
    for (_, column) in &metadata_columns {
        chain
            .touched
            .insert(column.to_ascii_lowercase(), "kafkaDataFieldName".into());
    }
    let mut unwrap = false;
    for t in &transforms {
        let class = s
            .get(&format!("transforms.{t}.type"))
            .unwrap_or_default()
            .to_string();
        let short = class
            .rsplit('.')
            .next()
            .unwrap_or(&class)
            .trim_end_matches("$Value")
            .trim_end_matches("$Key")
            .to_string();
        let keys = s.keys_with_prefix(&format!("transforms.{t}."));
        let predicate = s
            .get(&format!("transforms.{t}.predicate"))
            .filter(|p| !p.is_empty())
            .map(str::to_string);
        let outcome = if short == "ExtractNewRecordState" || short == "UnwrapFromEnvelope" {
            unwrap = true;
            if upsert || delete {
                Outcome::Changed(
                    "routes[].cdc format debezium: the sink reads the Debezium envelope itself (c, u, r upsert `after`; d deletes by `before`; tombstones delete by the key); the transform's drop/rewrite options have no counterpart".into(),
                )
            } else {
                Outcome::NotTranslatable(
                    "an append-only table of `after` rows: the sink reads a Debezium envelope only in a cdc route (upsert); without one the envelope's fields (before, after, op, …) are the columns. Unwrap upstream, or use upsertEnabled".into(),
                )
            }
        } else if short == "RegexRouter" {
            chain.routed_by = Some(t.clone());
            match &router {
                _ if pattern_router.as_ref().is_some_and(|(name, _, _)| name == t) => {
                    let (_, route, exact) = pattern_router.as_ref().expect("matched above");
                    let text = format!(
                        "routes: topic_pattern \"{}\" with table \"{}\": a matched topic's table is the routed name, each capture group sanitized as sanitizeTopics does (docs/configuration.md, capture groups); other topics keep bigquery.table",
                        route.topic_pattern.as_deref().unwrap_or_default(),
                        route.table.as_deref().unwrap_or_default()
                    );
                    if *exact {
                        Outcome::Mapped(text)
                    } else {
                        Outcome::Changed(format!(
                            "{text}; unlike the connector, a routed name starting with a digit gets no `_` prefix"
                        ))
                    }
                }
                Some((_, _, name)) if name == t => Outcome::Mapped(
                    "routes: each listed topic's table is the routed name (sanitized as sanitizeTopics says)".into(),
                ),
                _ => Outcome::NotTranslatable(
                    "topic renaming by regex is computed here for a listed topic only (not with topics.regex, a predicate or a pattern Rust's regex cannot read); tables follow bigquery.table".into(),
                ),
            }
        } else if short == "Filter" {
            filter_smt(&s, t, predicate.as_deref(), &mut chain)
        } else if let Some(p) = &predicate {
            Outcome::NotTranslatable(format!(
                "{short} applies only to the records predicate {p} matches; a transform here applies to every record of its route"
            ))
        } else if class.ends_with("$Key") {
            Outcome::NotTranslatable(format!(
                "{short} of the key: the key is written only as its raw bytes (metadata_columns.key) and read by a cdc route's key columns; no transform reads it"
            ))
        } else if short == "InsertField" {
            insert_field_smt(&s, t, shaping_blocked, &mut metadata_columns, &mut chain)
        } else if short == "ReplaceField" {
            replace_field_smt(&s, t, shaping_blocked, &mut chain)
        } else if short == "MaskField" {
            mask_field_smt(&s, t, shaping_blocked, &mut chain)
        } else if short == "RecordIsTombstone" {
            Outcome::NotTranslatable(
                "a predicate's class used as a transform: Kafka Connect refuses it".into(),
            )
        } else if matches!(
            short.as_str(),
            "TimestampConverter"
                | "Cast"
                | "Flatten"
                | "ExtractField"
                | "ValueToKey"
                | "HoistField"
                | "TimestampRouter"
                | "HeaderFrom"
                | "InsertHeader"
                | "DropHeaders"
                | "SetSchemaMetadata"
        ) {
            Outcome::NotTranslatable(format!(
                "{short}: no such transform here yet (docs/mapping.md#transforms has drop, rename, mask to NULL or a fixed value, set, filter); fields are written as the record has them (names matched to columns, docs/mapping.md)"
            ))
        } else if short.contains("Mask") || short.contains("Hash") || short.contains("HMAC") {
            Outcome::NotTranslatable(format!(
                "{short}: a keyed-hash (HMAC) mask is not implemented yet; mask here writes NULL or a fixed value"
            ))
        } else {
            Outcome::NotTranslatable(format!(
                "{short}: no transform of the record here yet; fields are written as the record has them (names matched to columns, docs/mapping.md)"
            ))
        };
        s.note(&format!("transforms.{t}.type"), outcome.clone());
        for key in keys {
            s.note(
                &key,
                Outcome::Dropped(format!("a setting of transforms.{t} (see its line)")),
            );
        }
    }
    if !transforms.is_empty() {
        s.note(
            "transforms",
            Outcome::Dropped(
                "the list of transforms, kept in its order in bigquery.transforms; each has its own line".into(),
            ),
        );
    }
    for key in s.keys_with_prefix("predicates") {
        s.note(
            &key,
            Outcome::Dropped("a predicate of a transform (see the transform's line)".into()),
        );
    }
    let smt_transforms = chain.transforms;
    // --- upserts and deletes -----------------------------------------------------------------
    let mut at_least_once = false;
    let cdc = if upsert || delete {
        if json_input && !json_envelope {
            for key in ["upsertEnabled", "deleteEnabled"] {
                s.note(
                    key,
                    Outcome::NotTranslatable(
                        "schemaless JSON has no key schema, and the connector config does not name the key columns: add a route with cdc and primary_key by hand".into(),
                    ),
                );
            }
            None
        } else {
            at_least_once = true;
            let mode = if delete { "upsert_delete" } else { "upsert" };
            let format = if unwrap { "debezium" } else { "unwrapped" };
            let how = format!(
                "routes[].cdc mode {mode}, format {format}: UPSERT{} rows keyed by the table's primary key (the Kafka key's fields), applied by BigQuery; delivery: at_least_once, which an upsert makes exact (a replayed record rewrites its own row). No intermediate tables and MERGE: changes apply within the table's max_staleness. An existing table needs a primary key (the sink refuses to start naming the ALTER TABLE that adds it)",
                if delete { " and DELETE" } else { "" }
            );
            s.note("upsertEnabled", Outcome::Changed(how.clone()));
            s.note("deleteEnabled", Outcome::Changed(how));
            for key in [
                "intermediateTableSuffix",
                "mergeIntervalMs",
                "mergeRecordsThreshold",
            ] {
                s.note(
                    key,
                    Outcome::Dropped(
                        "no intermediate tables: BigQuery applies the changes itself".into(),
                    ),
                );
            }
            Some(Cdc {
                mode,
                format,
                schemas_enable: json_envelope,
            })
        }
    } else {
        s.note(
            "upsertEnabled",
            Outcome::Mapped("false: rows are appended".into()),
        );
        s.note(
            "deleteEnabled",
            Outcome::Mapped("false: tombstones are not deletes".into()),
        );
        None
    };
    if let Some(c) = &cdc {
        for r in &mut routes {
            r.cdc = Some(c.clone());
        }
        // Every other topic: one more route, with the template's table.
        routes.push(Route {
            topics: if topic_pattern.is_none() {
                topics
                    .iter()
                    .filter(|t| !explicit.contains_key(*t))
                    .cloned()
                    .collect()
            } else {
                Vec::new()
            },
            topic_pattern: topic_pattern.as_ref().map(|_| ".*".to_string()),
            table: None,
            cdc: Some(c.clone()),
        });
        routes.retain(|r| !r.topics.is_empty() || r.topic_pattern.is_some());
    }

    // --- credentials ---------------------------------------------------------------------------
    let key_source = s
        .get("keySource")
        .map(str::to_ascii_uppercase)
        .unwrap_or_else(|| "FILE".into());
    let keyfile = s
        .get("keyfile")
        .filter(|k| !k.is_empty())
        .map(str::to_string);
    let credentials = match (key_source.as_str(), &keyfile) {
        ("APPLICATION_DEFAULT", _) | ("FILE", None) => {
            let text = "bigquery.credentials: adc (Application Default Credentials: GKE Workload Identity, GOOGLE_APPLICATION_CREDENTIALS, the metadata server)";
            s.note("keySource", Outcome::Mapped(text.into()));
            if keyfile.is_some() {
                s.note(
                    "keyfile",
                    Outcome::Dropped(
                        "not read with APPLICATION_DEFAULT, as in the connector".into(),
                    ),
                );
            }
            None
        }
        (_, Some(k)) if key_source == "JSON" || k.starts_with('{') => {
            let why = "the key is inline in the connector config; this sink reads credentials from a file (a mounted Secret): write it to one and set bigquery.credentials: {file: PATH} — or better, use no key (docs/operations.md#credentials). The YAML keeps adc until then; the key is not copied";
            s.note("keyfile", Outcome::NotTranslatable(why.into()));
            s.note("keySource", Outcome::NotTranslatable(why.into()));
            None
        }
        ("FILE", Some(path)) if path.starts_with("${") => {
            s.note(
                "keyfile",
                Outcome::NotTranslatable(
                    "a config provider reference to a key: mount the key as a file and set bigquery.credentials: {file: PATH}; the YAML keeps adc until then".into(),
                ),
            );
            s.note("keySource", Outcome::Mapped("FILE: a path".into()));
            None
        }
        ("FILE", Some(path)) => {
            let quoted = serde_json::to_string(path).expect("a string serializes");
            let readable = credential_file::read(Path::new(path).to_path_buf()).is_ok();
            s.note("keySource", Outcome::Mapped("FILE: a path".into()));
            if readable {
                s.note(
                    "keyfile",
                    Outcome::Mapped(format!(
                        "bigquery.credentials: {{file: {quoted}}} (any credential type; validate reads it). Prefer no key: docs/operations.md#credentials"
                    )),
                );
                Some(format!("{{file: {quoted}}}"))
            } else {
                s.note(
                    "keyfile",
                    Outcome::Changed(format!(
                        "bigquery.credentials: {{key_file: {quoted}}}: the path on the Connect worker, not readable here, so it is read when the sink starts and must hold a service-account key; for another type (or to have validate read it) use {{file: PATH}}. Prefer no key: docs/operations.md#credentials"
                    )),
                );
                Some(format!("{{key_file: {quoted}}}"))
            }
        }
        (other, _) => {
            return Err(refuse(
                "keySource",
                format!("`{other}`: the connector knows FILE, JSON and APPLICATION_DEFAULT"),
            ));
        }
    };

    // --- bad records -----------------------------------------------------------------------------
    let tolerance_all = s
        .get("errors.tolerance")
        .is_some_and(|t| t.eq_ignore_ascii_case("all"));
    let dlq = s
        .get("errors.deadletterqueue.topic.name")
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let on_bad_record = match (tolerance_all, &dlq) {
        (true, Some(_)) => "dead_letter",
        (true, None) => "skip",
        (false, _) => "fail",
    };
    let tolerance_text = match on_bad_record {
        "dead_letter" => {
            "on_bad_record: dead_letter: every bad record goes to the dead-letter topic with its reason, including rows BigQuery refuses (the connector's queue took only conversion and transform failures)"
        }
        "skip" => {
            "on_bad_record: skip: a bad record is dropped, logged and counted (kbq_bad_records… metrics), as errors.tolerance=all without a queue"
        }
        _ => {
            "on_bad_record: fail: the partition with the bad record stops (readiness turns false) while the others go on; the connector failed the whole task"
        }
    };
    let tolerance_outcome = if on_bad_record == "skip" {
        Outcome::Mapped(tolerance_text.into())
    } else {
        Outcome::Changed(tolerance_text.into())
    };
    if s.props.contains_key("errors.tolerance") {
        s.note("errors.tolerance", tolerance_outcome);
    } else {
        s.remark("errors.tolerance (unset: none)", tolerance_outcome);
    }
    if let Some(topic) = &dlq {
        s.note(
            "errors.deadletterqueue.topic.name",
            Outcome::Mapped(format!(
                "dead_letter.topic \"{topic}\"{}",
                if tolerance_all {
                    ""
                } else {
                    " (unused while on_bad_record is fail, as in the connector)"
                }
            )),
        );
    }
    s.note(
        "errors.deadletterqueue.context.headers.enable",
        Outcome::Dropped("dead letters always carry headers with the reason and the source topic, partition and offset".into()),
    );
    s.note(
        "errors.deadletterqueue.topic.replication.factor",
        Outcome::Dropped("the sink does not create the dead-letter topic: create it with this replication factor".into()),
    );
    for key in ["errors.retry.timeout", "errors.retry.delay.max.ms"] {
        s.note(
            key,
            Outcome::Dropped("Kafka and BigQuery errors are retried with backoff (src/backoff.rs) until they pass; a bad record is not retried but handled by on_bad_record".into()),
        );
    }
    for key in ["errors.log.enable", "errors.log.include.messages"] {
        s.note(
            key,
            Outcome::Dropped("bad records are logged (without their contents) and counted by reason in kbq_dead_letter_records_total".into()),
        );
    }

    // --- delivery and the connector's own machinery ----------------------------------------------
    let exactly = "delivery: exactly_once: at-least-once delivery (insertAll, or the Storage Write API's default stream) becomes exactly once: rows go to BUFFERED streams flushed only after Kafka committed their offsets";
    if !at_least_once {
        if s.props.contains_key("useStorageWriteApi") {
            s.note("useStorageWriteApi", Outcome::Changed(exactly.into()));
        } else {
            s.remark("delivery (insertAll)", Outcome::Changed(exactly.into()));
        }
    } else {
        s.note(
            "useStorageWriteApi",
            Outcome::Changed(
                "the Storage Write API always; at least once for upsert routes (above)".into(),
            ),
        );
    }
    for (key, outcome) in [
        ("enableBatchMode", Outcome::Changed("rows become visible every checkpoint.interval (5s) after their Kafka commit, not per batch commit".into())),
        ("commitInterval", Outcome::Changed("checkpoint.interval (default 5s) is the visibility latency; not copied, as the connector's 60 s minimum would only delay rows".into())),
        ("enableBatchLoad", Outcome::NotTranslatable("no batch loading through Cloud Storage: every topic streams through the Storage Write API".into())),
        ("gcsBucketName", Outcome::NotTranslatable("no batch loading through Cloud Storage".into())),
        ("gcsFolderName", Outcome::NotTranslatable("no batch loading through Cloud Storage".into())),
        ("batchLoadIntervalSec", Outcome::NotTranslatable("no batch loading through Cloud Storage".into())),
        ("autoCreateBucket", Outcome::NotTranslatable("no batch loading through Cloud Storage".into())),
        ("schemaRetriever", Outcome::Dropped("schemas come from the registry by the record's schema id".into())),
        ("avroDataCacheSize", Outcome::Dropped("compiled plans are cached per (schema, table) without a size setting".into())),
        ("queueSize", Outcome::Dropped("backpressure is writer.memory_limit (bytes held across the process)".into())),
        ("threadPoolSize", Outcome::Dropped("every partition has its own writer; requests in flight per stream: writer.max_inflight_requests".into())),
        ("bigQueryRetry", Outcome::Dropped("BigQuery errors are retried with backoff until they pass (src/backoff.rs)".into())),
        ("bigQueryRetryWait", Outcome::Dropped("BigQuery errors are retried with backoff until they pass (src/backoff.rs)".into())),
        ("max.retries", Outcome::Dropped("BigQuery errors are retried with backoff until they pass (src/backoff.rs)".into())),
        ("enableRetries", Outcome::Dropped("BigQuery errors are retried with backoff until they pass (src/backoff.rs)".into())),
        ("runtimeProvider", Outcome::Dropped("a user-agent detail".into())),
        ("config.action.reload", Outcome::Dropped("a config change is a rolling restart of the replicas".into())),
        ("intermediateTableSuffix", Outcome::Dropped("no intermediate tables".into())),
        ("mergeIntervalMs", Outcome::Dropped("no intermediate tables".into())),
        ("mergeRecordsThreshold", Outcome::Dropped("no intermediate tables".into())),
    ] {
        s.note(key, outcome);
    }

    // --- the consumer ------------------------------------------------------------------------------
    let mut kafka_properties = BTreeMap::new();
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

    // --- anything else ---------------------------------------------------------------------------
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

    let draft = Draft {
        bootstrap_servers: bootstrap,
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
        create_in_routes: json_input && create_table.is_some(),
        create_table,
        add_columns,
        metadata_columns,
        routes,
        transforms: smt_transforms,
        at_least_once,
        start_latest,
        on_bad_record,
        dead_letter_topic: dlq,
    };
    Ok((draft, s.report))
}

/// The transforms of the chain mapped so far, and the names they read or write.
struct Chain {
    /// YAML flow items of `bigquery.transforms`, in the chain's order.
    transforms: Vec<String>,
    /// Each field or column name (lowercase) an earlier transform names, and which one.
    touched: BTreeMap<String, String>,
    /// The RegexRouter earlier in the chain, if any: a later topic predicate sees its output.
    routed_by: Option<String>,
    /// Schemaless JSON: a field a transform names may never come, and nothing is refused.
    json_input: bool,
}

impl Chain {
    /// Why transform `t` cannot name `names` here: one is not a name the transforms take, or an
    /// earlier transform of the chain named it (Connect's next transform sees the previous one's
    /// output; here every transform names the writer's fields, one transform per field).
    fn conflict(&self, names: &[&str]) -> Option<String> {
        let mut seen = BTreeSet::new();
        for n in names {
            if !is_field_name(n) {
                return Some(format!(
                    "`{n}` is not a field name the transforms here take (ASCII letters, digits, `_`): a `.` in a Kafka Connect field name is part of the name, here it would be a path into a nested record"
                ));
            }
            let lower = n.to_ascii_lowercase();
            if let Some(other) = self.touched.get(&lower) {
                return Some(format!(
                    "field `{n}` is named by {other} earlier in the chain: in Kafka Connect each transform sees the previous one's output, here every transform names the writer's fields and a field takes one transform; write the combined effect by hand"
                ));
            }
            if !seen.insert(lower) {
                return Some(format!(
                    "field `{n}` is named twice by this transform; here a field takes one transform"
                ));
            }
        }
        None
    }

    fn touch(&mut self, names: &[&str], t: &str) {
        for n in names {
            self.touched
                .insert(n.to_ascii_lowercase(), format!("transforms.{t}"));
        }
    }

    /// What a field transform does with a field the writer schema lacks.
    fn missing_field_note(&self) -> &'static str {
        if self.json_input {
            ""
        } else {
            "; unlike Kafka Connect, which skips a name the record lacks, a writer schema without the field refuses the plan here (its records are dead letters naming the transform)"
        }
    }
}

/// A name `drop`, `rename`, `mask` and `set` take for a top-level field or column.
fn is_field_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// `ReplaceField$Value`: `exclude` (`blacklist`) → drop, `renames` → rename; `include`
/// (`whitelist`) drops every other field, which only the writer schema lists.
fn replace_field_smt(s: &Source, t: &str, blocked: Option<&str>, chain: &mut Chain) -> Outcome {
    let get = |k: &str| {
        s.get(&format!("transforms.{t}.{k}"))
            .map(list)
            .unwrap_or_default()
    };
    let exclude = [get("exclude"), get("blacklist")].concat();
    let include = [get("include"), get("whitelist")].concat();
    if !include.is_empty() {
        return Outcome::NotTranslatable(format!(
            "include keeps only {}: that is a drop of every other field, and the other fields are in the writer schema, which this command does not read; write a drop for each into bigquery.transforms by hand (a field without a column is skipped anyway under unknown_fields: ignore)",
            include.join(", ")
        ));
    }
    let mut renames = Vec::new();
    for pair in get("renames") {
        let Some((from, to)) = pair.split_once(':') else {
            return Outcome::NotTranslatable(format!("renames: `{pair}` is not old:new"));
        };
        renames.push((from.trim().to_string(), to.trim().to_string()));
    }
    if exclude.is_empty() && renames.is_empty() {
        return Outcome::Dropped(
            "no field excluded or renamed: the transform changes nothing".into(),
        );
    }
    if let Some(why) = blocked {
        return Outcome::NotTranslatable(why.into());
    }
    let names: Vec<&str> = exclude
        .iter()
        .map(String::as_str)
        .chain(renames.iter().flat_map(|(a, b)| [a.as_str(), b.as_str()]))
        .collect();
    if let Some(why) = chain.conflict(&names) {
        return Outcome::NotTranslatable(why);
    }
    let mut done = Vec::new();
    for f in &exclude {
        chain
            .transforms
            .push(format!("drop: {{field: {}}}", quote(f)));
        done.push(format!("drop {f}"));
    }
    for (from, to) in &renames {
        chain.transforms.push(format!(
            "rename: {{field: {}, to: {}}}",
            quote(from),
            quote(to)
        ));
        done.push(format!("rename {from} to {to}"));
    }
    chain.touch(&names, t);
    let text = format!(
        "bigquery.transforms {}: a dropped field's column gets nothing from the record (NULL), a renamed field fills the column of its new name{}",
        done.join(", "),
        chain.missing_field_note()
    );
    if chain.json_input {
        Outcome::Mapped(text)
    } else {
        Outcome::Changed(text)
    }
}

/// `MaskField$Value`: with `replacement`, a mask to that value; without, Connect writes the
/// type's empty value (0, false, "", the epoch), which a mask without a schema cannot name.
fn mask_field_smt(s: &Source, t: &str, blocked: Option<&str>, chain: &mut Chain) -> Outcome {
    let fields = s
        .get(&format!("transforms.{t}.fields"))
        .map(list)
        .unwrap_or_default();
    let replacement = s
        .get(&format!("transforms.{t}.replacement"))
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    if fields.is_empty() {
        return Outcome::Dropped("no field to mask: the transform changes nothing".into());
    }
    if let Some(why) = blocked {
        return Outcome::NotTranslatable(format!(
            "{why}. Until then the table receives {} unmasked",
            fields.join(", ")
        ));
    }
    let names: Vec<&str> = fields.iter().map(String::as_str).collect();
    if let Some(why) = chain.conflict(&names) {
        return Outcome::NotTranslatable(format!(
            "{why}. Until then the table receives {} unmasked",
            fields.join(", ")
        ));
    }
    for f in &fields {
        chain.transforms.push(match &replacement {
            Some(r) => format!("mask: {{field: {}, value: {}}}", quote(f), quote(r)),
            None => format!("mask: {{field: {}}}", quote(f)),
        });
    }
    chain.touch(&names, t);
    let list = fields.join(", ");
    let note = chain.missing_field_note();
    match &replacement {
        None => Outcome::Changed(format!(
            "bigquery.transforms mask {list}: the column holds NULL where Kafka Connect wrote the field type's empty value (0, false, \"\", the epoch), not null; a REQUIRED column refuses the plan. For a string field, `value: \"\"` is Connect's value exactly{note}"
        )),
        Some(r) if r.parse::<f64>().is_ok() => Outcome::Changed(format!(
            "bigquery.transforms mask {list} with value \"{r}\" written as text: Connect converted the replacement to the field's type, so for a string field this is exact, and for a numeric field write the number unquoted (value: {r}): the plan refuses text into INT64 or FLOAT64 rather than parse it{note}"
        )),
        Some(r) => {
            let text = format!(
                "bigquery.transforms mask {list} with value \"{r}\": Connect takes a replacement that is not a number only for a string field, and here the text fills the STRING column in every row{note}"
            );
            if chain.json_input {
                Outcome::Mapped(text)
            } else {
                Outcome::Changed(text)
            }
        }
    }
}

/// `InsertField$Value`: the record's coordinates become metadata columns, `static.field` with
/// `static.value` a `set` of that text.
fn insert_field_smt(
    s: &Source,
    t: &str,
    blocked: Option<&str>,
    metadata_columns: &mut Vec<(&'static str, String)>,
    chain: &mut Chain,
) -> Outcome {
    let mut mapped = Vec::new();
    for field in ["topic", "partition", "offset", "timestamp"] {
        if let Some(name) = s.get(&format!("transforms.{t}.{field}.field")) {
            let name = name.trim_end_matches(['!', '?']).to_string();
            if !metadata_columns.iter().any(|(f, _)| *f == field) {
                metadata_columns.push((field, name.clone()));
                chain.touch(&[name.as_str()], t);
                mapped.push(format!("{field} \"{name}\""));
            }
        }
    }
    let static_part: Option<Result<String, String>> = s
        .get(&format!("transforms.{t}.static.field"))
        .filter(|f| !f.is_empty())
        .map(|field| {
            let column = field.trim_end_matches(['!', '?']).to_string();
            let Some(value) = s.get(&format!("transforms.{t}.static.value")) else {
                return Err(
                    "static.field without static.value inserts a null field; set needs a value"
                        .to_string(),
                );
            };
            if let Some(why) = blocked {
                return Err(why.to_string());
            }
            if let Some(why) = chain.conflict(&[column.as_str()]) {
                return Err(why);
            }
            chain.transforms.push(format!(
                "set: {{column: {}, value: {}}}",
                quote(&column),
                quote(value)
            ));
            chain.touch(&[column.as_str()], t);
            Ok(format!(
                "bigquery.transforms set {column} to \"{value}\": the text in every row, into a STRING column as Connect's optional string field"
            ))
        });
    let metadata = (!mapped.is_empty()).then(|| {
        format!(
            "bigquery.metadata_columns {}: INT64 partition and offset, TIMESTAMP timestamp columns, filled from the record as InsertField does",
            mapped.join(", ")
        )
    });
    match (metadata, static_part) {
        (None, None) => Outcome::NotTranslatable("no field this sink can insert".into()),
        (None, Some(Ok(text))) => Outcome::Mapped(text),
        (None, Some(Err(why))) => Outcome::NotTranslatable(format!("static.field: {why}")),
        (Some(m), None) => Outcome::Changed(m),
        (Some(m), Some(Ok(text))) => Outcome::Changed(format!("{m}; {text}")),
        (Some(m), Some(Err(why))) => {
            Outcome::Changed(format!("{m}; static.field not translatable: {why}"))
        }
    }
}

/// `Filter` with its predicate: `RecordIsTombstone`, `HasHeaderKey`, `TopicNameMatches`, and
/// `negate`.
fn filter_smt(s: &Source, t: &str, predicate: Option<&str>, chain: &mut Chain) -> Outcome {
    let Some(p) = predicate else {
        return Outcome::NotTranslatable(
            "a Filter without a predicate drops every record; a filter here needs a condition"
                .into(),
        );
    };
    let class = s
        .get(&format!("predicates.{p}.type"))
        .unwrap_or_default()
        .to_string();
    let negate = s.flag(&format!("transforms.{t}.negate")) == Some(true);
    let (condition, what) = match class.rsplit('.').next().unwrap_or_default() {
        "RecordIsTombstone" => ("tombstone: true".to_string(), "tombstones".to_string()),
        "HasHeaderKey" => {
            let Some(name) = s
                .get(&format!("predicates.{p}.name"))
                .filter(|n| !n.is_empty())
            else {
                return Outcome::NotTranslatable(format!("predicate {p} names no header"));
            };
            (
                format!("header: {}", quote(name)),
                format!("records with a header {name}"),
            )
        }
        "TopicNameMatches" => {
            let pattern = s
                .get(&format!("predicates.{p}.pattern"))
                .unwrap_or_default()
                .to_string();
            if let Some(router) = &chain.routed_by {
                return Outcome::NotTranslatable(format!(
                    "the predicate matches the topic as transforms.{router} renamed it; a filter here reads the record's own topic"
                ));
            }
            if regex::Regex::new(&format!("^(?:{pattern})$")).is_err() {
                return Outcome::NotTranslatable(format!(
                    "pattern `{pattern}` is java.util.regex syntax Rust's regex does not read"
                ));
            }
            (
                format!("topic_pattern: {}", quote(&pattern)),
                format!("records of topics `{pattern}` matches as a whole (Java's matches())"),
            )
        }
        other => {
            return Outcome::NotTranslatable(format!(
                "predicate {p} of class `{other}`: a filter here tests tombstones, a header, or the topic"
            ));
        }
    };
    chain.transforms.push(format!(
        "filter: {{{condition}{}}}",
        if negate { ", negate: true" } else { "" }
    ));
    Outcome::Mapped(format!(
        "bigquery.transforms filter {{{condition}{}}}: {}{what} are dropped as Connect's Filter drops them (their offsets committed, counted in kbq_records_filtered_total)",
        if negate { ", negate: true" } else { "" },
        if negate { "all records but " } else { "" }
    ))
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
