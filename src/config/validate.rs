//! Validation: the rules between fields, checked without I/O; every violation is reported at
//! once with its field path.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::kafka::topic_pattern::TopicPattern;

use super::{
    CheckpointConfig, Config, ConfigError, CreateTableConfig, Credentials,
    FORCED_CONSUMER_PROPERTIES, InputFormat, KafkaConfig, LostOffsets, LostStream, MetadataColumns,
    OnBadRecord, SchemaUpdate, WriterConfig, cdc, limits, resolve_missing_columns,
    resolve_partition_filters,
};

/// The longest checkpoint metadata the daemon can write (the codec's own bound, so the two
/// cannot drift).
pub fn checkpoint_metadata_worst_case_len() -> usize {
    crate::checkpoint::metadata::worst_case_len()
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

/// The input settings one route (or the top level) is read with, and the fields that set them.
pub(super) struct Scope {
    pub(super) format_path: String,
    /// `None`: read through the registry, each schema id as its registered type.
    pub(super) format: Option<InputFormat>,
    pub(super) raw_avro: bool,
    pub(super) create_table: Option<String>,
    pub(super) add_columns: Option<String>,
}

impl Validator {
    pub(super) fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError::at(path, message));
    }

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

    pub(super) fn input(&mut self, c: &Config) {
        match (&c.schema_registry, &c.avro) {
            (None, None) if c.json.is_none() => self.err(
                "schema_registry",
                "set schema_registry (Confluent wire format), avro.schema_file (raw Avro) or json (schemaless JSON)",
            ),
            (Some(_), Some(_)) => self.err(
                "avro",
                "set either schema_registry or avro.schema_file, not both",
            ),
            (_, Some(_)) if c.json.is_some() => {
                self.err("json", "set either json or avro.schema_file, not both")
            }
            _ => {}
        }
        if let Some(sr) = &c.schema_registry {
            if !is_http_url(&sr.url) {
                self.err("schema_registry.url", "must be an http:// or https:// URL");
            }
            match (&sr.username, &sr.password) {
                (Some(_), None) => self.err(
                    "schema_registry.password",
                    "required with schema_registry.username",
                ),
                (None, Some(_)) => self.err(
                    "schema_registry.username",
                    "required with schema_registry.password",
                ),
                _ => {}
            }
            if sr.bearer_token.is_some() && (sr.username.is_some() || sr.password.is_some()) {
                self.err(
                    "schema_registry.bearer_token",
                    "use either basic auth (username/password) or a bearer token, not both",
                );
            }
            if sr.timeout.0.is_zero() {
                self.err("schema_registry.timeout", "must be above zero");
            }
            if sr.table_subject.trim().is_empty() {
                self.err("schema_registry.table_subject", "must not be empty");
            } else if sr.table_subject.replace("{topic}", "").contains(['{', '}']) {
                self.err(
                    "schema_registry.table_subject",
                    "the only placeholder is {topic}",
                );
            }
        }
        if let Some(avro) = &c.avro
            && avro.schema_file.as_os_str().is_empty()
        {
            self.err("avro.schema_file", "must not be empty");
        }
    }

    pub(super) fn bigquery(&mut self, c: &Config) {
        let b = &c.bigquery;
        if b.project.trim().is_empty() {
            self.err("bigquery.project", "must not be empty");
        }
        if b.dataset.is_empty()
            || !b
                .dataset
                .bytes()
                .all(|x| x.is_ascii_alphanumeric() || x == b'_')
        {
            self.err(
                "bigquery.dataset",
                "must be letters, digits and underscores",
            );
        }
        self.table_setting("bigquery.table", &b.table);
        if let Some(endpoint) = &b.endpoint
            && !is_http_url(endpoint)
        {
            self.err("bigquery.endpoint", "must be an http:// or https:// URL");
        }
        if b.credentials == Credentials::None && b.endpoint.is_none() {
            self.err(
                "bigquery.credentials",
                "none is only for an emulator: set bigquery.endpoint, or use adc or key_file",
            );
        }
        if let Credentials::KeyFile(p) = &b.credentials
            && p.as_os_str().is_empty()
        {
            self.err("bigquery.credentials.key_file", "must not be empty");
        }
        if let Some(ct) = &b.create_table {
            self.create_table("bigquery.create_table", ct);
        }
        self.metadata_columns("bigquery.metadata_columns", &b.metadata_columns);
    }

    /// `bigquery.table` or a route's `table`: a table id or a `{topic}` template.
    pub(super) fn table_setting(&mut self, path: &str, table: &str) {
        let without_placeholder = table.replace("{topic}", "");
        if table.trim().is_empty() {
            self.err(path, "must not be empty");
        } else if without_placeholder.contains(['{', '}']) {
            self.err(path, "the only placeholder is {topic}");
        } else if without_placeholder.contains(['.', '/']) {
            self.err(
                path,
                "a table id, not a path (set project and dataset separately)",
            );
        } else if without_placeholder.len() > limits::MAX_TABLE_ID_BYTES {
            self.err(
                path,
                format!("at most {} bytes", limits::MAX_TABLE_ID_BYTES),
            );
        }
    }

    pub(super) fn create_table(&mut self, path: &str, ct: &CreateTableConfig) {
        if ct.clustering.len() > limits::MAX_CLUSTERING_FIELDS {
            self.err(
                format!("{path}.clustering"),
                format!("at most {} columns", limits::MAX_CLUSTERING_FIELDS),
            );
        }
        for (i, col) in ct.clustering.iter().enumerate() {
            if !is_column_name(col) {
                self.err(
                    format!("{path}.clustering[{i}]"),
                    format!("`{col}` is not a column name"),
                );
            }
        }
        if ct.require_partition_filter && ct.time_partitioning.is_none() {
            self.err(
                format!("{path}.require_partition_filter"),
                format!("requires {path}.time_partitioning"),
            );
        }
        if let Some(tp) = &ct.time_partitioning {
            if let Some(field) = &tp.field
                && !is_column_name(field)
            {
                self.err(
                    format!("{path}.time_partitioning.field"),
                    format!("`{field}` is not a column name"),
                );
            }
            if tp.expiration.is_some_and(|e| e.0.is_zero()) {
                self.err(
                    format!("{path}.time_partitioning.expiration"),
                    "must be above zero (leave it out to keep partitions)",
                );
            }
        }
        for (key, value) in &ct.labels {
            if !is_label(key, true) {
                self.err(
                    format!("{path}.labels.{}", quoted_key(key)),
                    "a label key is lowercase letters, digits, `_` or `-`, starts with a letter, at most 63",
                );
            }
            if !is_label(value, false) {
                self.err(
                    format!("{path}.labels.{}", quoted_key(key)),
                    "a label value is lowercase letters, digits, `_` or `-`, at most 63",
                );
            }
        }
    }

    pub(super) fn metadata_columns(&mut self, path: &str, cols: &MetadataColumns) {
        let mut seen: BTreeMap<String, &str> = BTreeMap::new();
        for (field, col) in cols.named() {
            let field_path = format!("{path}.{field}");
            if !is_column_name(col) {
                self.err(&field_path, format!("`{col}` is not a column name"));
            } else if let Some(other) = seen.insert(col.to_ascii_lowercase(), field) {
                self.err(
                    &field_path,
                    format!("column `{col}` is also {path}.{other}"),
                );
            }
        }
    }

    pub(super) fn routes(&mut self, c: &Config) {
        for (i, r) in c.routes.iter().enumerate() {
            let path = format!("routes[{i}]");
            match (&r.topic_pattern, r.topics.is_empty()) {
                (None, true) => self.err(
                    format!("{path}.topics"),
                    "set topics or topic_pattern: which topics the route takes",
                ),
                (Some(_), false) => self.err(
                    format!("{path}.topic_pattern"),
                    "set either topics or topic_pattern, not both",
                ),
                (Some(p), true) => {
                    if let Err(e) = regex::Regex::new(&format!("^(?:{p})$")) {
                        self.err(
                            format!("{path}.topic_pattern"),
                            format!("not a regular expression: {e}"),
                        );
                    }
                }
                (None, false) => {}
            }
            for (j, topic) in r.topics.iter().enumerate() {
                if !is_kafka_topic_name(topic) {
                    self.err(
                        format!("{path}.topics[{j}]"),
                        format!("`{topic}` is not a valid topic name"),
                    );
                } else if c.kafka.topic_pattern.is_none() && !c.kafka.topics.contains(topic) {
                    self.err(
                        format!("{path}.topics[{j}]"),
                        format!("`{topic}` is not in kafka.topics"),
                    );
                }
            }
            if let Some(table) = &r.table {
                self.table_setting(&format!("{path}.table"), table);
            }
            if let Some(ct) = &r.create_table {
                self.create_table(&format!("{path}.create_table"), ct);
            }
            if let Some(cols) = &r.metadata_columns {
                self.metadata_columns(&format!("{path}.metadata_columns"), cols);
            }
            if let Some(avro) = &r.avro
                && avro.schema_file.as_os_str().is_empty()
            {
                self.err(format!("{path}.avro.schema_file"), "must not be empty");
            }
        }
        self.table_collisions(c);
    }

    /// Protobuf and JSON Schema are read through the registry, raw Avro from its schema file,
    /// schemaless JSON needs neither and has no schema to create or evolve a table from. A
    /// registry route without a format reads each schema id as its registered type. Each
    /// refusal names the field that asks for it (the route's own, else the top-level one it
    /// inherits).
    pub(super) fn formats(&mut self, c: &Config) {
        for s in format_scopes(c) {
            self.format_scope(c, s);
        }
    }

    /// What one scope's input format needs: a registry or a schema file, and no table
    /// creation or new columns for schemaless JSON.
    fn format_scope(&mut self, c: &Config, s: Scope) {
        let Some(format) = s.format else {
            // Each schema id's registered type: `top_format` is `None` only with a registry.
            return;
        };
        let name = format.as_str();
        match format {
            InputFormat::Avro => {
                if !s.raw_avro && c.schema_registry.is_none() && c.json.is_some() {
                    self.err(
                        &s.format_path,
                        "avro needs schema_registry or avro.schema_file",
                    );
                }
            }
            InputFormat::Protobuf | InputFormat::JsonSchema => {
                if s.raw_avro {
                    self.err(
                        &s.format_path,
                        format!(
                            "{name} records are read through schema_registry (raw input is avro only)"
                        ),
                    );
                } else if c.schema_registry.is_none() {
                    self.err(&s.format_path, format!("{name} needs schema_registry"));
                }
            }
            InputFormat::Json => {
                if s.raw_avro {
                    self.err(
                        &s.format_path,
                        "json is not read beside avro.schema_file (its schema would be ignored)",
                    );
                }
                if let Some(path) = s.create_table {
                    self.err(
                        &path,
                        format!(
                            "create_table is not supported for schemaless json ({}): there is no schema to create the table from; create the table first",
                            s.format_path
                        ),
                    );
                }
                if let Some(path) = s.add_columns {
                    self.err(
                        &path,
                        format!(
                            "add_columns is not supported for schemaless json ({}): there is no schema to add columns from",
                            s.format_path
                        ),
                    );
                }
            }
        }
    }

    /// One table is written with one set of settings: two listed topics that a `{topic}`
    /// template sanitises into the same id, or two routes naming the same fixed table, are
    /// refused. Several topics into one table is a fixed `table` in one route (or at the top).
    pub(super) fn table_collisions(&mut self, c: &Config) {
        let mut by_table: BTreeMap<String, (usize, &str, Option<usize>)> = BTreeMap::new();
        for (i, topic) in c.kafka.topics.iter().enumerate() {
            let route = c.route_for(topic);
            match by_table.get(&route.table) {
                None => {
                    by_table.insert(route.table.clone(), (i, topic, route.route));
                }
                Some((_, other, other_route)) if *other_route != route.route => {
                    let name = |r: &Option<usize>| {
                        r.map_or("bigquery".to_string(), |r| format!("routes[{r}]"))
                    };
                    self.err(
                        format!("kafka.topics[{i}]"),
                        format!(
                            "`{topic}` ({}) and `{other}` ({}) both write table `{}` with different settings: route them together",
                            route.path,
                            name(other_route),
                            route.table
                        ),
                    );
                }
                Some((_, other, _)) if route.table_template.contains("{topic}") => {
                    self.err(
                        format!("kafka.topics[{i}]"),
                        format!(
                            "`{topic}` and `{other}` both become table `{}` through the {{topic}} template ({}): to write them into one table on purpose, give them a fixed table in a route",
                            route.table, route.path
                        ),
                    );
                }
                Some(_) => {}
            }
        }
        // With a pattern subscription the topics are unknown here: compare the fixed tables.
        let mut fixed: BTreeMap<&str, String> = BTreeMap::new();
        if c.unrouted_topics().is_none_or(|t| !t.is_empty()) && !c.bigquery.table.contains('{') {
            fixed.insert(&c.bigquery.table, "bigquery.table".into());
        }
        for (i, r) in c.routes.iter().enumerate() {
            let table = r.table.as_deref().unwrap_or(&c.bigquery.table);
            if table.contains('{') {
                continue;
            }
            if let Some(other) = fixed.insert(table, format!("routes[{i}].table")) {
                self.err(
                    format!("routes[{i}].table"),
                    format!(
                        "table `{table}` is also written by {other}: list all its topics in one route"
                    ),
                );
            }
        }
    }

    pub(super) fn checkpoint(&mut self, cp: &CheckpointConfig) {
        if cp.interval.0 < Duration::from_millis(100) {
            self.err("checkpoint.interval", "must be at least 100ms");
        }
        if cp.barrier_timeout.0.is_zero() {
            self.err("checkpoint.barrier_timeout", "must be above zero");
        }
        if cp.commit_failure_isolation_threshold == 0 {
            self.err(
                "checkpoint.commit_failure_isolation_threshold",
                "must be at least 1",
            );
        }
        if cp.partition_stall_timeout.0 < Duration::from_secs(1)
            || cp.partition_stall_timeout.0 < cp.interval.0
        {
            self.err(
                "checkpoint.partition_stall_timeout",
                "must be at least 1s and at least checkpoint.interval",
            );
        }
        let needed = checkpoint_metadata_worst_case_len();
        if (cp.metadata_max_bytes as usize) < needed {
            self.err(
                "checkpoint.metadata_max_bytes",
                format!(
                    "{} is below the worst-case checkpoint metadata length {needed}",
                    cp.metadata_max_bytes
                ),
            );
        }
    }

    pub(super) fn writer(&mut self, w: &WriterConfig, cp: &CheckpointConfig) {
        if w.max_request_bytes > limits::MAX_REQUEST_BYTES {
            self.err(
                "writer.max_request_bytes",
                format!("must be at most {}", limits::MAX_REQUEST_BYTES),
            );
        }
        if w.max_request_bytes < limits::MIN_REQUEST_BYTES {
            self.err(
                "writer.max_request_bytes",
                format!("must be at least {}", limits::MIN_REQUEST_BYTES),
            );
        }
        if w.max_rows_per_request == 0 {
            self.err("writer.max_rows_per_request", "must be at least 1");
        }
        if w.max_inflight_requests == 0 {
            self.err("writer.max_inflight_requests", "must be at least 1");
        }
        if w.response_timeout.0 < Duration::from_millis(100) {
            self.err("writer.response_timeout", "must be at least 100ms");
        }
        if w.linger > cp.interval {
            self.err(
                "writer.linger",
                format!("must not exceed checkpoint.interval ({})", cp.interval),
            );
        }
        if w.max_inflight_bytes < w.max_request_bytes {
            self.err(
                "writer.max_inflight_bytes",
                format!(
                    "must be at least writer.max_request_bytes ({})",
                    w.max_request_bytes
                ),
            );
        }
        if w.max_uncommitted_bytes < w.max_inflight_bytes {
            self.err(
                "writer.max_uncommitted_bytes",
                format!(
                    "must be at least writer.max_inflight_bytes ({})",
                    w.max_inflight_bytes
                ),
            );
        }
        if w.memory_limit < w.max_inflight_bytes {
            self.err(
                "writer.memory_limit",
                format!(
                    "must be at least writer.max_inflight_bytes ({})",
                    w.max_inflight_bytes
                ),
            );
        }
    }

    pub(super) fn dead_letter(&mut self, c: &Config) {
        let topic = c.dead_letter.as_ref().and_then(|d| d.topic.as_deref());
        if c.on_bad_record == OnBadRecord::DeadLetter && topic.is_none() {
            self.err(
                "dead_letter.topic",
                "dead_letter.topic is required when on_bad_record is dead_letter (or choose on_bad_record: fail or skip)",
            );
        }
        let Some(dl) = &c.dead_letter else { return };
        if let Some(topic) = topic {
            if !is_kafka_topic_name(topic) {
                self.err(
                    "dead_letter.topic",
                    format!("`{topic}` is not a valid topic name"),
                );
            }
            if c.kafka.topics.iter().any(|t| t == topic) {
                self.err(
                    "dead_letter.topic",
                    "must not be one of kafka.topics (bad records would come back)",
                );
            }
        }
        if let Some(acks) = dl.properties.get("acks")
            && !matches!(acks.trim(), "all" | "-1")
        {
            self.err(
                format!("dead_letter.properties.{}", quoted_key("acks")),
                "forced to all by the sink (a dead-lettered record is durable before its checkpoint commits)",
            );
        }
    }

    pub(super) fn recovery(&mut self, c: &Config) {
        if c.recovery.resolve_attempts == Some(0) {
            self.err("recovery.resolve_attempts", "must be at least 1");
        }
        let resolving = [
            (
                c.recovery.lost_stream == Some(LostStream::Resolve),
                "recovery.lost_stream",
                "rewind or fail",
            ),
            (
                c.recovery.lost_offsets == LostOffsets::Resolve,
                "recovery.lost_offsets",
                "fail, earliest or latest",
            ),
        ];
        for (_, field, others) in resolving.into_iter().filter(|(on, ..)| *on) {
            for path in resolve_partition_filters(c) {
                self.err(
                    field,
                    format!(
                        "resolve queries by partition and offset, which a table created with \
                         {path} refuses: use {others}, or drop that setting"
                    ),
                );
            }
            for (path, missing) in resolve_missing_columns(c) {
                self.err(
                    field,
                    format!(
                        "resolve needs the metadata columns {}: set {path}.{}",
                        missing.join(", "),
                        missing.join(&format!(", {path}."))
                    ),
                );
            }
        }
    }

    pub(super) fn ops(&mut self, c: &Config) {
        if c.shutdown_deadline <= c.checkpoint.barrier_timeout {
            self.err(
                "shutdown_deadline",
                format!(
                    "must exceed checkpoint.barrier_timeout ({}): the final cycle needs a barrier, a commit and a flush",
                    c.checkpoint.barrier_timeout
                ),
            );
        }
        // A bare word is a valid filter for `tracing` (a target name), so `verbose` would
        // silently log nothing: a single directive without `=` must be a level.
        let level = c.log.level.trim();
        let bare = !level.contains(['=', ',', '[']);
        const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
        if bare && !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            self.err(
                "log.level",
                format!("`{level}` is not a level (trace, debug, info, warn, error, off) or a filter like info,kafka_bigquery_sink=debug"),
            );
        } else if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(level) {
            self.err("log.level", format!("not a level or filter: {e}"));
        }
    }
}

/// The scopes whose input format is checked: the top level, then each route with what it
/// inherits from the top level.
fn format_scopes(c: &Config) -> Vec<Scope> {
    let top_path = if c.json.is_some() {
        "json"
    } else {
        "schema_registry.format"
    };
    let b = &c.bigquery;
    let mut scopes = vec![Scope {
        format_path: top_path.into(),
        format: c.top_format(),
        raw_avro: c.avro.is_some(),
        create_table: b
            .create_table
            .is_some()
            .then(|| "bigquery.create_table".into()),
        add_columns: (b.schema_update == SchemaUpdate::AddColumns)
            .then(|| "bigquery.schema_update".into()),
    }];
    for (i, r) in c.routes.iter().enumerate() {
        let create_table = match (&r.create_table, &b.create_table) {
            (Some(_), _) => Some(format!("routes[{i}].create_table")),
            (None, Some(_)) => Some("bigquery.create_table".into()),
            (None, None) => None,
        };
        let add_columns = match r.schema_update {
            Some(SchemaUpdate::AddColumns) => Some(format!("routes[{i}].schema_update")),
            Some(_) => None,
            None => (b.schema_update == SchemaUpdate::AddColumns)
                .then(|| "bigquery.schema_update".into()),
        };
        let format = r.format.or(c.top_format());
        scopes.push(Scope {
            format_path: match r.format {
                Some(_) => format!("routes[{i}].format"),
                None => top_path.into(),
            },
            format,
            // A route reads the top-level schema file unless it has its own (`route_for`).
            raw_avro: r.avro.is_some() || c.avro.is_some(),
            create_table,
            add_columns,
        });
        // A CDC route reads every format: Avro (raw or registry), Protobuf, JSON Schema and
        // schemaless JSON (docs/cdc.md); what each needs is checked in `cdc::validate`.
    }
    scopes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ByteSize, HumanDuration, Secret, defaults, table_for_topic, yaml_paths};

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
        // The refusal at the boundary is tests/config_validate.rs; the worst case itself is
        // checked by encoding it (kbq-core's metadata tests).
        let worst = checkpoint_metadata_worst_case_len();
        assert!(
            worst <= defaults::CHECKPOINT_METADATA_MAX_BYTES as usize,
            "{worst}"
        );
    }
}
