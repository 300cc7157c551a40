//! Where rows go: the `bigquery` section, tables created or evolved, metadata columns, routes,
//! and routes that would write one table with different settings.

use std::collections::BTreeMap;

use crate::bigquery::credential_file;
use crate::config::bigquery::named_columns;
use crate::config::template::{self, Placeholder};
use crate::config::{Config, CreateTableConfig, Credentials, limits};
use kbq_transcode::MetadataColumns;

use super::{Validator, is_column_name, is_http_url, is_kafka_topic_name, is_label, quoted_key};

/// Where the groups of a template come from.
pub(super) enum Groups<'a> {
    /// A scope without a pattern: `bigquery`, or the path of a route that lists topics.
    None(&'a str),
    /// The route's compiled `topic_pattern`.
    Pattern(&'a regex::Regex),
    /// A `topic_pattern` that does not compile (refused at its own field).
    Unknown,
}

impl Validator {
    pub(super) fn bigquery(&mut self, c: &Config) {
        let b = &c.bigquery;
        self.project_setting("bigquery.project", &b.project);
        self.dataset_setting("bigquery.dataset", &b.dataset, &Groups::None("bigquery"));
        self.table_setting("bigquery.table", &b.table, &Groups::None("bigquery"));
        if let Some(endpoint) = &b.endpoint
            && !is_http_url(endpoint)
        {
            self.err("bigquery.endpoint", "must be an http:// or https:// URL");
        }
        if let Some(endpoint) = &b.endpoint
            && endpoint.starts_with("http://")
            && b.credentials != Credentials::None
            && !b.local_emulator
        {
            self.err(
                "bigquery.endpoint",
                "an http:// endpoint would carry the credentials' bearer token in the clear: use https://, credentials: none for an emulator, or set bigquery.local_emulator: true",
            );
        }
        if b.credentials == Credentials::None && b.endpoint.is_none() {
            self.err(
                "bigquery.credentials",
                "none is only for an emulator: set bigquery.endpoint, or use adc, file or env",
            );
        }
        self.credentials(&b.credentials);
        if let Some(ct) = &b.create_table {
            self.create_table("bigquery.create_table", ct);
        }
        self.metadata_columns("bigquery.metadata_columns", &b.metadata_columns);
    }

    /// A credential file named by `file` or `env` is read here (offline: it is local), so a
    /// missing file, one that is not JSON or one of a type Google's libraries do not read from a
    /// file fails `validate`, not the first start. `key_file` keeps its old rule (not empty; the
    /// file is read at start), so configs that name a key mounted only in production still pass.
    fn credentials(&mut self, credentials: &Credentials) {
        let field = match credentials {
            Credentials::File(p) if p.as_os_str().is_empty() => {
                return self.err("bigquery.credentials.file", "must not be empty");
            }
            Credentials::KeyFile(p) => {
                if p.as_os_str().is_empty() {
                    self.err("bigquery.credentials.key_file", "must not be empty");
                }
                return;
            }
            Credentials::Env(var) if var.is_empty() || var.contains(['=', '\0']) => {
                return self.err(
                    "bigquery.credentials.env",
                    "must be the name of an environment variable",
                );
            }
            Credentials::File(_) => "bigquery.credentials.file",
            Credentials::Env(_) => "bigquery.credentials.env",
            Credentials::Adc | Credentials::None => return,
        };
        let read = credential_file::path_of(credentials)
            .and_then(|path| credential_file::read(path.expect("file and env name a file")));
        if let Err(e) = read {
            self.err(field, e.to_string());
        }
    }

    /// `bigquery.project` or a route's `project`: a fixed project id.
    fn project_setting(&mut self, path: &str, project: &str) {
        if project.trim().is_empty() {
            self.err(path, "must not be empty");
        } else if project.contains(['{', '}']) {
            self.err(
                path,
                "a project id, not a template (placeholders are for table and dataset)",
            );
        } else if !is_project_id(project) {
            self.err(
                path,
                format!(
                    "`{project}` is not a project id: lowercase letters, digits and hyphens, at most {}, optionally after `domain:`",
                    limits::MAX_PROJECT_ID_CHARS
                ),
            );
        }
    }

    /// `bigquery.dataset` or a route's `dataset`: a dataset id or a template.
    fn dataset_setting(&mut self, path: &str, dataset: &str, groups: &Groups<'_>) {
        if !self.placeholders(path, dataset, groups) {
            return;
        }
        let fixed = template::fixed_text(dataset);
        let templated = fixed.len() != dataset.len();
        if (fixed.is_empty() && !templated)
            || !fixed
                .bytes()
                .all(|x| x.is_ascii_alphanumeric() || x == b'_')
        {
            self.err(path, "must be letters, digits and underscores");
        } else if fixed.len() > limits::MAX_DATASET_ID_BYTES {
            self.err(
                path,
                format!("at most {} bytes", limits::MAX_DATASET_ID_BYTES),
            );
        }
    }

    /// `bigquery.table` or a route's `table`: a table id or a template.
    pub(super) fn table_setting(&mut self, path: &str, table: &str, groups: &Groups<'_>) {
        if table.trim().is_empty() {
            self.err(path, "must not be empty");
            return;
        }
        if !self.placeholders(path, table, groups) {
            return;
        }
        let fixed = template::fixed_text(table);
        if fixed.contains(['.', '/']) {
            self.err(
                path,
                "a table id, not a path (set project and dataset separately)",
            );
        } else if let Some(c) = fixed.chars().find(|c| !is_table_id_char(*c)) {
            self.err(
                path,
                format!(
                    "{c:?} cannot be in a table id (letters, marks, digits, `_`, `-` and spaces)"
                ),
            );
        } else if fixed.len() > limits::MAX_TABLE_ID_BYTES {
            self.err(
                path,
                format!("at most {} bytes", limits::MAX_TABLE_ID_BYTES),
            );
        }
    }

    /// The placeholders of a template: well formed, and each group one the route's pattern
    /// has. `false` when one is not.
    fn placeholders(&mut self, path: &str, value: &str, groups: &Groups<'_>) -> bool {
        let placeholders = match template::placeholders(value) {
            Ok(p) => p,
            Err(e) => {
                self.err(path, e);
                return false;
            }
        };
        for p in placeholders.iter().filter(|p| p.is_group()) {
            let name = match p {
                Placeholder::Group(i) => i.to_string(),
                Placeholder::Named(n) => n.to_string(),
                Placeholder::Topic => unreachable!("filtered"),
            };
            let problem = match groups {
                Groups::None(scope) if *scope == "bigquery" => format!(
                    "`{{{name}}}` is a group of a route's topic_pattern: the bigquery section has none (only {{topic}})"
                ),
                Groups::None(scope) => format!(
                    "`{{{name}}}` is a group of a topic_pattern, but {scope} lists topics: use {{topic}}, or a topic_pattern with that group"
                ),
                Groups::Pattern(re) => {
                    let known = match p {
                        Placeholder::Group(i) => *i < re.captures_len(),
                        _ => re.capture_names().flatten().any(|n| n == name),
                    };
                    if known {
                        continue;
                    }
                    let names: Vec<String> = re
                        .capture_names()
                        .enumerate()
                        .skip(1)
                        .map(|(i, n)| {
                            n.map_or(format!("{{{i}}}"), |n| format!("{{{i}}} or {{{n}}}"))
                        })
                        .collect();
                    format!(
                        "`{{{name}}}` is not a group of the route's topic_pattern (it has {})",
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    )
                }
                // The pattern's own error is reported at its field.
                Groups::Unknown => continue,
            };
            self.err(path, problem);
            return false;
        }
        true
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
        if let Some(name) = &ct.protobuf_message
            && !name.split('.').all(is_column_name)
        {
            self.err(
                format!("{path}.protobuf_message"),
                format!("`{name}` is not the full name of a protobuf message (`package.Message`)"),
            );
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
        for (field, col) in named_columns(cols) {
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
            let pattern = r.pattern();
            let groups = match (&pattern, &r.topic_pattern) {
                (Some(re), _) => Groups::Pattern(re),
                (None, Some(_)) => Groups::Unknown,
                (None, None) => Groups::None(&path),
            };
            if let Some(re) = &pattern
                && re.capture_names().flatten().any(|n| n == "topic")
            {
                self.err(
                    format!("{path}.topic_pattern"),
                    "a group named `topic` cannot be named in a template ({topic} is the whole topic): rename it",
                );
            }
            if let Some(table) = &r.table {
                self.table_setting(&format!("{path}.table"), table, &groups);
            }
            if let Some(dataset) = &r.dataset {
                self.dataset_setting(&format!("{path}.dataset"), dataset, &groups);
            }
            if let Some(project) = &r.project {
                self.project_setting(&format!("{path}.project"), project);
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
        self.shadowed_topics(c);
    }

    /// One table is written with one set of settings: two listed topics that a `{topic}`
    /// template sanitises into the same id, or two routes naming the same fixed table (in one
    /// dataset of one project), are refused. Several topics into one table is a fixed `table`
    /// (or a template of the pattern's groups) in one route, or at the top.
    pub(super) fn table_collisions(&mut self, c: &Config) {
        let mut by_table: BTreeMap<String, (usize, &str, Option<usize>)> = BTreeMap::new();
        for (i, topic) in c.kafka.topics.iter().enumerate() {
            let route = c.route_for(topic);
            let table = route.qualified_table();
            match by_table.get(&table) {
                None => {
                    by_table.insert(table, (i, topic, route.route));
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
                            route.label
                        ),
                    );
                }
                Some((_, other, _)) if route.table_template.contains("{topic}") => {
                    self.err(
                        format!("kafka.topics[{i}]"),
                        format!(
                            "`{topic}` and `{other}` both become table `{}` through the {{topic}} template ({}): to write them into one table on purpose, give them a fixed table in a route",
                            route.label, route.path
                        ),
                    );
                }
                Some(_) => {}
            }
        }
        // With a pattern subscription the topics are unknown here: compare the fixed tables.
        let b = &c.bigquery;
        let mut fixed: BTreeMap<(&str, &str, &str), String> = BTreeMap::new();
        if c.unrouted_topics().is_none_or(|t| !t.is_empty()) && !b.table.contains('{') {
            fixed.insert((&b.project, &b.dataset, &b.table), "bigquery.table".into());
        }
        for (i, r) in c.routes.iter().enumerate() {
            let table = r.table.as_deref().unwrap_or(&b.table);
            let dataset = r.dataset.as_deref().unwrap_or(&b.dataset);
            let project = r.project.as_deref().unwrap_or(&b.project);
            if table.contains('{') || dataset.contains('{') {
                continue;
            }
            if let Some(other) =
                fixed.insert((project, dataset, table), format!("routes[{i}].table"))
            {
                let name = if (project, dataset) == (b.project.as_str(), b.dataset.as_str()) {
                    table.to_string()
                } else {
                    format!("{project}.{dataset}.{table}")
                };
                self.err(
                    format!("routes[{i}].table"),
                    format!(
                        "table `{name}` is also written by {other}: list all its topics in one route"
                    ),
                );
            }
        }
    }

    /// A topic is written to one table: a topic that a route lists, but an earlier route also
    /// takes into another table, would never reach the route that lists it. A later pattern
    /// that overlaps an earlier route is not refused: that is how a catch-all route follows the
    /// specific ones (the first matching route decides, as documented).
    pub(super) fn shadowed_topics(&mut self, c: &Config) {
        for (j, r) in c.routes.iter().enumerate() {
            for (k, topic) in r.topics.iter().enumerate() {
                let Some(first) = (0..j).find(|&i| c.routes[i].matches(topic)) else {
                    continue;
                };
                let taken = c.route_at(Some(first), topic).qualified_table();
                let listed = c.route_at(Some(j), topic).qualified_table();
                if listed != taken {
                    self.err(
                        format!("routes[{j}].topics[{k}]"),
                        format!(
                            "`{topic}` is taken by routes[{first}] first, which writes it to `{taken}`; this route would write it to `{listed}`: take it out of one of them, or put the route meant first"
                        ),
                    );
                }
            }
        }
    }
}

/// A Google Cloud project id: lowercase letters, digits and hyphens, starting with a letter,
/// optionally after a `domain:` (`example.com:my-project`).
fn is_project_id(project: &str) -> bool {
    let (domain, id) = match project.rsplit_once(':') {
        Some((domain, id)) => (Some(domain), id),
        None => (None, project),
    };
    let domain_ok = domain.is_none_or(|d| {
        !d.is_empty()
            && d.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'))
    });
    domain_ok
        && id.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && id.len() <= limits::MAX_PROJECT_ID_CHARS
}

/// A character BigQuery takes in a table id: Unicode letters, marks and numbers, connector and
/// dash punctuation, spaces. ASCII is checked exactly (letters, digits, `_`, `-`, space); beyond
/// ASCII only control characters and line separators are refused, the rest left to BigQuery
/// (the standard library cannot sort characters into Unicode categories).
fn is_table_id_char(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ' ')
    } else {
        !c.is_control() && !matches!(c, '\u{2028}' | '\u{2029}')
    }
}
