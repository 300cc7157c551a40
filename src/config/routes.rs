//! Routes: which table settings apply to a topic.

use std::path::Path;

use serde::Deserialize;

use super::{
    AvroConfig, CdcConfig, Config, CreateTableConfig, InputFormat, SchemaUpdate, limits, template,
};
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
    /// Table id, or a template of `{topic}` and, with `topic_pattern`, its capture groups by
    /// number (`{1}`) or name (`{entity}`); each value sanitised as the topic is.
    #[serde(default)]
    pub table: Option<String>,
    /// Dataset id, or a template as `table`, instead of `bigquery.dataset`.
    #[serde(default)]
    pub dataset: Option<String>,
    /// Google Cloud project id of the route's dataset, instead of `bigquery.project`.
    #[serde(default)]
    pub project: Option<String>,
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
    /// The project of the table: the route's, else `bigquery.project`.
    pub project: &'a str,
    /// The dataset id, its template filled for the topic.
    pub dataset: String,
    /// The table id, its template filled for the topic.
    pub table: String,
    /// The table setting as written (a template or a fixed id).
    pub table_template: &'a str,
    /// The table's name in metric labels and messages: the table id in the top-level dataset,
    /// `dataset.table` in another dataset of the top-level project, else
    /// `project.dataset.table`, so that two tables of one process never share a name.
    pub label: String,
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

/// The table id of `template` for `topic` (a template without capture groups): `{topic}`
/// replaced by the sanitised topic, at most 1024 bytes.
pub fn table_for_topic(template: &str, topic: &str) -> String {
    template::fill(template, topic, None, limits::MAX_TABLE_ID_BYTES)
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
        self.pattern().is_some_and(|re| re.is_match(topic))
    }

    /// `topic_pattern` compiled to match whole names; `None` without one, or when it does not
    /// compile. The wrapping group does not capture, so the pattern's groups keep their numbers.
    pub fn pattern(&self) -> Option<regex::Regex> {
        let p = self.topic_pattern.as_deref()?;
        regex::Regex::new(&format!("^(?:{p})$")).ok()
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
        let taken = self.routes.iter().position(|r| r.matches(topic));
        self.route_at(taken, topic)
    }

    /// The table settings `routes[i]` (`None`: the top-level ones) gives `topic`, whether or
    /// not it is the route that takes it.
    pub fn route_at(&self, route: Option<usize>, topic: &str) -> TopicRoute<'_> {
        let b = &self.bigquery;
        let top_schema = self.avro.as_ref().map(|a| a.schema_file.as_path());
        let top_format = self.top_format();
        let Some(i) = route else {
            let (dataset, table) = (b.dataset.clone(), table_for_topic(&b.table, topic));
            return TopicRoute {
                route: None,
                project: &b.project,
                label: self.table_label(&b.project, &dataset, &table),
                dataset,
                table,
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
            };
        };
        let r = &self.routes[i];
        let pattern = r.pattern();
        let groups = pattern.as_ref().and_then(|re| re.captures(topic));
        let template = r.table.as_deref().unwrap_or(&b.table);
        let table = template::fill(template, topic, groups.as_ref(), limits::MAX_TABLE_ID_BYTES);
        let dataset = r.dataset.as_deref().unwrap_or(&b.dataset);
        let dataset = template::fill(
            dataset,
            topic,
            groups.as_ref(),
            limits::MAX_DATASET_ID_BYTES,
        );
        let project = r.project.as_deref().unwrap_or(&b.project);
        TopicRoute {
            route: Some(i),
            project,
            label: self.table_label(project, &dataset, &table),
            dataset,
            table,
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

    /// The shortest name of a table that no other table of the config can have (`label`).
    fn table_label(&self, project: &str, dataset: &str, table: &str) -> String {
        let b = &self.bigquery;
        match (project == b.project, dataset == b.dataset) {
            (true, true) => table.to_string(),
            (true, false) => format!("{dataset}.{table}"),
            (false, _) => format!("{project}.{dataset}.{table}"),
        }
    }
}

impl TopicRoute<'_> {
    /// `project.dataset.table`, as BigQuery's SQL names a table.
    pub fn qualified_table(&self) -> String {
        format!("{}.{}.{}", self.project, self.dataset, self.table)
    }
}
