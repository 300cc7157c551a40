//! Routes: which table settings apply to a topic.

use std::path::Path;

use serde::Deserialize;

use super::{AvroConfig, CdcConfig, Config, CreateTableConfig, InputFormat, SchemaUpdate, limits};
use kbq_transcode::transforms::Transform;
use kbq_transcode::{MapMode, MetadataColumns, UnknownFields};

/// One entry of `routes`: which topics, and the table settings that replace those of
/// `bigquery` for them. A setting left out is taken from `bigquery`; `metadata_columns`,
/// `create_table` and `transforms` replace the whole section when set.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Topics of this route. Exactly one of `topics` and `topic_pattern` is required.
    #[serde(default)]
    pub topics: Vec<String>,
    /// A regular expression (Rust `regex` syntax) that must match the whole topic name.
    #[serde(default)]
    pub topic_pattern: Option<String>,
    /// Table id or a `{topic}` template, as `bigquery.table`.
    #[serde(default)]
    pub table: Option<String>,
    #[serde(default)]
    pub metadata_columns: Option<MetadataColumns>,
    #[serde(default)]
    pub create_table: Option<CreateTableConfig>,
    #[serde(default)]
    pub schema_update: Option<SchemaUpdate>,
    #[serde(default)]
    pub unknown_fields: Option<UnknownFields>,
    #[serde(default)]
    pub map_mode: Option<MapMode>,
    /// Raw Avro with this fixed writer schema for the route's topics, instead of the top-level
    /// input (`schema_registry` or `avro`).
    #[serde(default)]
    pub avro: Option<AvroConfig>,
    /// The encoding of the route's records read through the registry, instead of
    /// `schema_registry.format`.
    #[serde(default)]
    pub format: Option<InputFormat>,
    /// Change data capture: the records are upserts and deletes by primary key (docs/cdc.md).
    #[serde(default)]
    pub cdc: Option<CdcConfig>,
    /// Transforms of the route's records, applied in order (docs/mapping.md, "Transforms");
    /// set, they replace those of `bigquery`.
    #[serde(default)]
    pub transforms: Option<Vec<Transform>>,
}

/// The table settings in force for one topic: its route's, or the top-level `bigquery` ones.
#[derive(Clone, Debug)]
pub struct TopicRoute<'a> {
    /// The index in `routes`, or `None` for the top-level settings.
    pub route: Option<usize>,
    /// The table id, with `{topic}` replaced by the sanitised topic.
    pub table: String,
    /// The table setting as written (a template or a fixed id).
    pub table_template: &'a str,
    pub metadata_columns: &'a MetadataColumns,
    pub create_table: Option<&'a CreateTableConfig>,
    pub schema_update: SchemaUpdate,
    pub unknown_fields: UnknownFields,
    pub map_mode: MapMode,
    /// The fixed writer schema, if the topic's records are raw Avro.
    pub schema_file: Option<&'a Path>,
    /// The encoding of the records; `None`: read through the registry, each schema id's
    /// registered type decides.
    pub format: Option<InputFormat>,
    /// Change data capture, when the route has it.
    pub cdc: Option<&'a CdcConfig>,
    /// The transforms in force, in order.
    pub transforms: &'a [Transform],
    /// The field path of the route, for messages: `routes[1]` or `bigquery`.
    pub path: String,
}

/// BigQuery table ids are letters, digits and `_` here (BigQuery accepts more, but Kafka topic
/// names only add `.` and `-`): every other character of the topic becomes `_`, and the id is
/// cut at 1024 bytes, BigQuery's limit. `orders.v1` → `orders_v1`, `eu-payments` →
/// `eu_payments`.
pub fn sanitize_table_name(topic: &str) -> String {
    topic
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The table id of `template` for `topic`: `{topic}` replaced by the sanitised topic, at most
/// 1024 bytes.
pub fn table_for_topic(template: &str, topic: &str) -> String {
    let mut id = template.replace("{topic}", &sanitize_table_name(topic));
    if id.len() > limits::MAX_TABLE_ID_BYTES {
        let mut end = limits::MAX_TABLE_ID_BYTES;
        while !id.is_char_boundary(end) {
            end -= 1;
        }
        id.truncate(end);
    }
    id
}

impl RouteConfig {
    /// Whether this route takes `topic`. A pattern that does not compile matches nothing
    /// (`validate` refuses it), and no pattern matches an internal topic (`__*`).
    pub fn matches(&self, topic: &str) -> bool {
        if self.topics.iter().any(|t| t == topic) {
            return true;
        }
        if super::topic_pattern::is_internal_topic(topic) {
            return false;
        }
        self.topic_pattern.as_deref().is_some_and(|p| {
            regex::Regex::new(&format!("^(?:{p})$")).is_ok_and(|re| re.is_match(topic))
        })
    }
}

impl Config {
    /// The input format of topics without a route that sets one: `json` with a top-level `json`
    /// section, else `schema_registry.format` (`None` when unset: each schema id's registered
    /// type decides), else Avro (raw, `avro.schema_file`).
    pub fn top_format(&self) -> Option<InputFormat> {
        if self.json.is_some() {
            return Some(InputFormat::Json);
        }
        match &self.schema_registry {
            Some(sr) => sr.format,
            None => Some(InputFormat::Avro),
        }
    }

    /// The table settings for `topic`: the first route that matches it, else `bigquery`.
    pub fn route_for(&self, topic: &str) -> TopicRoute<'_> {
        let b = &self.bigquery;
        let top_schema = self.avro.as_ref().map(|a| a.schema_file.as_path());
        let top_format = self.top_format();
        match self.routes.iter().position(|r| r.matches(topic)) {
            Some(i) => {
                let r = &self.routes[i];
                let template = r.table.as_deref().unwrap_or(&b.table);
                TopicRoute {
                    route: Some(i),
                    table: table_for_topic(template, topic),
                    table_template: template,
                    metadata_columns: r.metadata_columns.as_ref().unwrap_or(&b.metadata_columns),
                    create_table: r.create_table.as_ref().or(b.create_table.as_ref()),
                    schema_update: r.schema_update.unwrap_or(b.schema_update),
                    unknown_fields: r.unknown_fields.unwrap_or(b.unknown_fields),
                    map_mode: r.map_mode.unwrap_or(b.map_mode),
                    schema_file: r
                        .avro
                        .as_ref()
                        .map(|a| a.schema_file.as_path())
                        .or(top_schema),
                    format: r.format.or(top_format),
                    cdc: r.cdc.as_ref(),
                    transforms: r.transforms.as_deref().unwrap_or(&b.transforms),
                    path: format!("routes[{i}]"),
                }
            }
            None => TopicRoute {
                route: None,
                table: table_for_topic(&b.table, topic),
                table_template: &b.table,
                metadata_columns: &b.metadata_columns,
                create_table: b.create_table.as_ref(),
                schema_update: b.schema_update,
                unknown_fields: b.unknown_fields,
                map_mode: b.map_mode,
                schema_file: top_schema,
                format: top_format,
                cdc: None,
                transforms: &b.transforms,
                path: "bigquery".into(),
            },
        }
    }
}
