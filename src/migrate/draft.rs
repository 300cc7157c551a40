//! The config a migration writes, as the few settings it can fill, rendered as commented YAML.
//! Strings are written as JSON strings (valid YAML double-quoted scalars); a value read from the
//! environment is written unquoted as `${VAR}`, the only place the loader substitutes it.

use std::collections::BTreeMap;
use std::fmt::Write;

/// A scalar of the YAML: quoted text, or a `${VAR}` reference left for the loader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scalar {
    Text(String),
    Env(String),
}

impl Scalar {
    fn yaml(&self) -> String {
        match self {
            Scalar::Text(t) => quote(t),
            Scalar::Env(var) => format!("${{{var}}}"),
        }
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// The input section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Registry {
        url: Scalar,
        username: Option<Scalar>,
        password: Option<Scalar>,
        bearer_token: Option<Scalar>,
        format: Option<&'static str>,
    },
    /// Schemaless JSON.
    Json,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateTable {
    pub partition_field: Option<String>,
    /// `DAY`, `HOUR`, `MONTH`, `YEAR`; `None` with `partitioned` false.
    pub partition_type: Option<String>,
    pub partitioned: bool,
    pub expiration_ms: Option<u64>,
    pub clustering: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cdc {
    pub mode: &'static str,
    pub format: &'static str,
    /// Schemaless JSON in Kafka Connect's `{"schema", "payload"}` envelope.
    pub schemas_enable: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Listed topics, or a pattern (Rust regex, whole name).
    pub topics: Vec<String>,
    pub topic_pattern: Option<String>,
    pub table: Option<String>,
    pub cdc: Option<Cdc>,
}

/// The settings a migration fills; everything else keeps its default.
#[derive(Clone, Debug)]
pub struct Draft {
    pub bootstrap_servers: Scalar,
    pub group_id: String,
    pub topics: Vec<String>,
    pub topic_pattern: Option<String>,
    pub kafka_properties: BTreeMap<String, Scalar>,
    pub input: Input,
    pub project: Scalar,
    pub dataset: Scalar,
    pub table: String,
    /// YAML flow text of `bigquery.credentials`; `None` keeps `adc`.
    pub credentials: Option<String>,
    pub create_table: Option<CreateTable>,
    /// `create_table` under every route instead of `bigquery` (schemaless JSON allows it only
    /// in a route that reads Kafka Connect's envelope).
    pub create_in_routes: bool,
    pub add_columns: bool,
    pub metadata_columns: Vec<(&'static str, String)>,
    pub routes: Vec<Route>,
    /// YAML flow items of `bigquery.transforms` (`drop: {field: "a"}`), in order.
    pub transforms: Vec<String>,
    pub at_least_once: bool,
    /// `recovery.start_from: latest`.
    pub start_latest: bool,
    pub on_bad_record: &'static str,
    pub dead_letter_topic: Option<String>,
}

impl Draft {
    /// The YAML, after `header` (each line a comment).
    pub fn render(&self, header: &str) -> String {
        let mut y = String::new();
        for line in header.lines() {
            let _ = writeln!(y, "# {line}");
        }
        let _ = writeln!(y, "kafka:");
        let _ = writeln!(y, "  bootstrap_servers: {}", self.bootstrap_servers.yaml());
        let _ = writeln!(y, "  group_id: {}", quote(&self.group_id));
        match &self.topic_pattern {
            Some(p) => {
                let _ = writeln!(y, "  topic_pattern: {}", quote(p));
            }
            None => {
                let topics: Vec<String> = self.topics.iter().map(|t| quote(t)).collect();
                let _ = writeln!(y, "  topics: [{}]", topics.join(", "));
            }
        }
        if !self.kafka_properties.is_empty() {
            let _ = writeln!(y, "  properties:");
            for (k, v) in &self.kafka_properties {
                let _ = writeln!(y, "    {}: {}", quote(k), v.yaml());
            }
        }
        match &self.input {
            Input::Registry {
                url,
                username,
                password,
                bearer_token,
                format,
            } => {
                let _ = writeln!(y, "schema_registry:");
                let _ = writeln!(y, "  url: {}", url.yaml());
                for (name, value) in [
                    ("username", username),
                    ("password", password),
                    ("bearer_token", bearer_token),
                ] {
                    if let Some(v) = value {
                        let _ = writeln!(y, "  {name}: {}", v.yaml());
                    }
                }
                if let Some(f) = format {
                    let _ = writeln!(y, "  format: {f}");
                }
            }
            Input::Json => {
                let _ = writeln!(y, "json: {{}}");
            }
        }
        let _ = writeln!(y, "bigquery:");
        let _ = writeln!(y, "  project: {}", self.project.yaml());
        let _ = writeln!(y, "  dataset: {}", self.dataset.yaml());
        let _ = writeln!(y, "  table: {}", quote(&self.table));
        if let Some(c) = &self.credentials {
            let _ = writeln!(y, "  credentials: {c}");
        }
        if let Some(ct) = self
            .create_table
            .as_ref()
            .filter(|_| !self.create_in_routes)
        {
            create_table(&mut y, "  ", ct);
        }
        if self.add_columns {
            let _ = writeln!(y, "  schema_update: add_columns");
        }
        if !self.metadata_columns.is_empty() {
            let _ = writeln!(y, "  metadata_columns:");
            for (field, column) in &self.metadata_columns {
                let _ = writeln!(y, "    {field}: {}", quote(column));
            }
        }
        if !self.transforms.is_empty() {
            let _ = writeln!(y, "  transforms:");
            for t in &self.transforms {
                let _ = writeln!(y, "    - {t}");
            }
        }
        if !self.routes.is_empty() {
            let _ = writeln!(y, "routes:");
            for r in &self.routes {
                let mut first = true;
                let mut item = |y: &mut String, text: String| {
                    let lead = if first { "  - " } else { "    " };
                    first = false;
                    let _ = writeln!(y, "{lead}{text}");
                };
                if !r.topics.is_empty() {
                    let topics: Vec<String> = r.topics.iter().map(|t| quote(t)).collect();
                    item(&mut y, format!("topics: [{}]", topics.join(", ")));
                }
                if let Some(p) = &r.topic_pattern {
                    item(&mut y, format!("topic_pattern: {}", quote(p)));
                }
                if let Some(t) = &r.table {
                    item(&mut y, format!("table: {}", quote(t)));
                }
                if let Some(ct) = self.create_table.as_ref().filter(|_| self.create_in_routes) {
                    let mut block = String::new();
                    create_table(&mut block, "    ", ct);
                    item(&mut y, block.trim_start().trim_end().to_string());
                }
                if let Some(c) = &r.cdc {
                    let envelope = if c.schemas_enable {
                        ", schemas_enable: true"
                    } else {
                        ""
                    };
                    item(
                        &mut y,
                        format!("cdc: {{mode: {}, format: {}{envelope}}}", c.mode, c.format),
                    );
                }
            }
        }
        if self.at_least_once {
            let _ = writeln!(y, "delivery: at_least_once");
        }
        if self.start_latest {
            let _ = writeln!(y, "recovery:");
            let _ = writeln!(y, "  start_from: latest");
        }
        let _ = writeln!(y, "on_bad_record: {}", self.on_bad_record);
        if let Some(t) = &self.dead_letter_topic {
            let _ = writeln!(y, "dead_letter:");
            let _ = writeln!(y, "  topic: {}", quote(t));
        }
        y
    }
}

/// `create_table` at `indent`.
fn create_table(y: &mut String, indent: &str, ct: &CreateTable) {
    if !ct.partitioned && ct.clustering.is_empty() {
        // an empty mapping still means "create"
        let _ = writeln!(y, "{indent}create_table: {{}}");
        return;
    }
    let _ = writeln!(y, "{indent}create_table:");
    if ct.partitioned {
        let _ = writeln!(y, "{indent}  time_partitioning:");
        if let Some(f) = &ct.partition_field {
            let _ = writeln!(y, "{indent}    field: {}", quote(f));
        }
        if let Some(t) = &ct.partition_type {
            let _ = writeln!(y, "{indent}    type: {t}");
        }
        if let Some(ms) = ct.expiration_ms {
            let _ = writeln!(y, "{indent}    expiration: {ms}ms");
        }
    }
    if !ct.clustering.is_empty() {
        let cols: Vec<String> = ct.clustering.iter().map(|c| quote(c)).collect();
        let _ = writeln!(y, "{indent}  clustering: [{}]", cols.join(", "));
    }
}
