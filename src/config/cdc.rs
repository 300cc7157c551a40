//! `routes[].cdc`: change data capture into a table with a primary key (docs/cdc.md).

use serde::Deserialize;

use super::{Config, ConfigError, Delivery, HumanDuration, InputFormat, RouteConfig, defaults};
use kbq_core::protocol::MissingCheckpointPolicy;

/// A route's change data capture: records are upserts and deletes of the table's rows by primary
/// key, written to the `_default` stream with BigQuery's `_CHANGE_TYPE` and
/// `_CHANGE_SEQUENCE_NUMBER` pseudo-columns.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CdcConfig {
    /// `upsert` (changes insert or replace rows; deletes and tombstones are counted and
    /// ignored) or `upsert_delete` (deletes and tombstones remove rows).
    pub mode: CdcMode,
    /// `debezium` (default: the envelope with `before`, `after`, `op`), `unwrapped` (Debezium's
    /// `ExtractNewRecordState` output, with `__deleted` and `__op`) or `plain` (records with a
    /// change-type field, `change_type_field`).
    #[serde(default = "default_cdc_format")]
    pub format: CdcFormat,
    /// `plain` only: the field whose value (`upsert`/`insert`/`update`/`c`/`u`/`r` or
    /// `delete`/`d`, any case) says what the record does.
    #[serde(default)]
    pub change_type_field: Option<String>,
    /// The table's primary key (1 to 16 top-level columns of the row), declared by
    /// `create_table` and checked against an existing table at start. Unset: the fields of the
    /// Kafka key's record (its latest schema under `{topic}-key` in the registry).
    #[serde(default)]
    pub primary_key: Option<Vec<String>>,
    /// Without `primary_key`: the registry subject whose latest schema is the Kafka key's
    /// record, `{topic}` replaced by the topic. Unset: `{topic}-key` (Confluent's
    /// TopicNameStrategy); `dbserver1.inventory.customers.Key` under the RecordNameStrategy,
    /// `{topic}-dbserver1.inventory.customers.Key` under the TopicRecordNameStrategy.
    #[serde(default)]
    pub key_subject: Option<String>,
    /// `max_staleness` of a table `create_table` makes (e.g. `10m`); unset: none (every query
    /// merges pending changes at run time).
    #[serde(default)]
    pub max_staleness: Option<HumanDuration>,
    /// How `_CHANGE_SEQUENCE_NUMBER` is made: `epoch/source/offset` in hex.
    #[serde(default)]
    pub sequence: SequenceConfig,
    /// Schemaless JSON only: `true` when keys and values come from Kafka Connect's
    /// `JsonConverter` with `schemas.enable=true` (`{"schema": …, "payload": …}`; the payload
    /// is the record), `false` for plain JSON. Unset: plain JSON, and a record of exactly those
    /// two members is a bad record instead of a row without its payload.
    #[serde(default)]
    pub schemas_enable: Option<bool>,
}

impl CdcConfig {
    /// The configured primary key (empty when it comes from the Kafka key's schema).
    pub fn key(&self) -> &[String] {
        self.primary_key.as_deref().unwrap_or_default()
    }

    /// The subject of `topic`'s Kafka key schema (see `key_subject`).
    pub fn key_subject(&self, topic: &str) -> String {
        match &self.key_subject {
            Some(pattern) => pattern.replace(TOPIC_PLACEHOLDER, topic),
            None => format!("{topic}-key"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CdcMode {
    Upsert,
    UpsertDelete,
}

fn default_cdc_format() -> CdcFormat {
    defaults::CDC_FORMAT
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CdcFormat {
    Debezium,
    Unwrapped,
    Plain,
}

/// The sequence number of a change: three hex sections compared left to right.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SequenceConfig {
    /// The first section (default 0). Raise it when offsets start again or keys change
    /// partition (a recreated topic, more partitions): every later change then wins over every
    /// earlier one.
    pub epoch: u64,
    /// A dotted path to a long field of the record that orders changes at the source (e.g.
    /// `source.lsn` for PostgreSQL, `__lsn` unwrapped): the second section. Unset: 0.
    pub source_field: Option<String>,
}

impl Default for SequenceConfig {
    fn default() -> Self {
        SequenceConfig {
            epoch: defaults::CDC_SEQUENCE_EPOCH,
            source_field: None,
        }
    }
}

/// What `key_subject` replaces by the topic.
const TOPIC_PLACEHOLDER: &str = "{topic}";

/// BigQuery's limit on primary-key columns.
pub const MAX_KEY_COLUMNS: usize = 16;

/// The `cdc` sections of the config: `(field path, section, topics or pattern it takes)`.
fn sections(config: &Config) -> Vec<(usize, String, &CdcConfig, usize)> {
    config
        .routes
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let topics = if r.topic_pattern.is_some() {
                usize::MAX
            } else {
                r.topics.len()
            };
            r.cdc
                .as_ref()
                .map(|c| (i, format!("routes[{i}].cdc"), c, topics))
        })
        .collect()
}

/// Errors of the `cdc` sections, by field group in the order the fields are documented.
pub(super) fn validate(config: &Config, errors: &mut Vec<ConfigError>) {
    for (i, path, c, _) in sections(config) {
        let route = &config.routes[i];
        if config.delivery != Delivery::AtLeastOnce {
            errors.push(ConfigError::at(
                path.clone(),
                "needs `delivery: at_least_once`: BigQuery applies upserts and deletes only on the _default stream, and exactly_once writes BUFFERED streams. Replays stay harmless: a replayed change carries its old sequence number and loses to what is there",
            ));
        }
        let schemaless = route.format.or(config.top_format()) == Some(InputFormat::Json);
        validate_key(config, route, c, &path, schemaless, errors);
        validate_changes(c, &path, errors);
        validate_table(config, route, c, &path, schemaless, errors);
        // Every input format carries changes; its own rules are in `Validator::formats`.
    }
}

/// `primary_key` and `key_subject`: where the key columns come from, and what they are.
fn validate_key(
    config: &Config,
    route: &RouteConfig,
    c: &CdcConfig,
    path: &str,
    schemaless: bool,
    errors: &mut Vec<ConfigError>,
) {
    let mut err = |path: String, message: String| errors.push(ConfigError::at(path, message));
    // Without a key in the config it is read from the Kafka key's registered schema.
    let raw_avro = route.avro.is_some() || config.avro.is_some();
    // Kafka Connect's envelope carries the key's schema with each key.
    let envelope = schemaless && c.schemas_enable == Some(true);
    if c.primary_key.is_none()
        && !envelope
        && (raw_avro || schemaless || config.schema_registry.is_none())
    {
        err(
            format!("{path}.primary_key"),
            "is required when the kafka key's schema does not come from schema_registry or kafka connect's envelope (raw avro, or schemaless json without schemas_enable: true): list the key columns".into(),
        );
    }
    if let Some(subject) = &c.key_subject {
        if c.primary_key.is_some() {
            err(
                format!("{path}.key_subject"),
                "only applies without primary_key (the key columns are read from this subject's schema): remove one of them".into(),
            );
        }
        if subject.trim().is_empty() {
            err(format!("{path}.key_subject"), "must not be empty".into());
        } else if subject.replace(TOPIC_PLACEHOLDER, "").contains(['{', '}']) {
            err(
                format!("{path}.key_subject"),
                format!("`{subject}` has a placeholder other than {TOPIC_PLACEHOLDER}"),
            );
        }
    }
    let key = c.key();
    if c.primary_key.is_some() && (key.is_empty() || key.len() > MAX_KEY_COLUMNS) {
        err(
            format!("{path}.primary_key"),
            format!("needs 1 to {MAX_KEY_COLUMNS} columns, got {}", key.len()),
        );
    }
    for (k, column) in key.iter().enumerate() {
        if !super::validate::is_column_name(column) {
            err(
                format!("{path}.primary_key[{k}]"),
                format!("`{column}` is not a top-level column name"),
            );
        } else if key[..k]
            .iter()
            .any(|other| other.eq_ignore_ascii_case(column))
        {
            err(
                format!("{path}.primary_key[{k}]"),
                format!("`{column}` is listed twice"),
            );
        }
    }
}

/// `format`, `change_type_field` and `sequence`: how a record says what it changes, and in
/// which order.
fn validate_changes(c: &CdcConfig, path: &str, errors: &mut Vec<ConfigError>) {
    let mut err = |path: String, message: String| errors.push(ConfigError::at(path, message));
    match (c.format, &c.change_type_field) {
        (CdcFormat::Plain, None) => err(
            format!("{path}.change_type_field"),
            "is required with `format: plain`".into(),
        ),
        (CdcFormat::Plain, Some(f)) if f.trim().is_empty() => err(
            format!("{path}.change_type_field"),
            "must not be empty".into(),
        ),
        (CdcFormat::Debezium | CdcFormat::Unwrapped, Some(_)) => err(
            format!("{path}.change_type_field"),
            "only applies to `format: plain` (debezium records carry `op`, unwrapped ones `__deleted`/`__op`)".into(),
        ),
        _ => {}
    }
    if let Some(source) = &c.sequence.source_field
        && (source.is_empty() || source.split('.').any(str::is_empty))
    {
        err(
            format!("{path}.sequence.source_field"),
            format!("`{source}` is not a dotted field path such as source.lsn"),
        );
    }
}

/// The route's table and input around the section: no added columns, and `schemas_enable`
/// only where a Kafka Connect envelope can be.
fn validate_table(
    config: &Config,
    route: &RouteConfig,
    c: &CdcConfig,
    path: &str,
    schemaless: bool,
    errors: &mut Vec<ConfigError>,
) {
    let update = route.schema_update.unwrap_or(config.bigquery.schema_update);
    if update.adds_columns() {
        errors.push(ConfigError::at(
            path,
            format!(
                "cannot be combined with `schema_update: {}` (a cdc route writes the table's columns as they are; change them by hand)",
                update.as_str()
            ),
        ));
    }
    if c.schemas_enable.is_some() && !schemaless {
        errors.push(ConfigError::at(
            format!("{path}.schemas_enable"),
            "only applies to schemaless json input (format: json): records read through schema_registry or avro.schema_file have no kafka connect envelope",
        ));
    }
}

/// Configurations that cannot guarantee monotone sequence numbers per key, or that may replay
/// changes older than BigQuery's delete retention.
pub(super) fn warnings(config: &Config, out: &mut Vec<ConfigError>) {
    let cdc = sections(config);
    // Under at-least-once, `resolve` starts a partition without a checkpoint at the log start
    // (docs/operations.md, missing checkpoints), as `earliest` does: on a CDC table a replay of
    // changes more than two days after their deletes may bring deleted rows back (docs/cdc.md).
    let replays = matches!(
        config.recovery.lost_offsets,
        MissingCheckpointPolicy::Resolve | MissingCheckpointPolicy::Earliest
    );
    if replays && !cdc.is_empty() {
        out.push(ConfigError::at(
            "recovery.lost_offsets",
            "a cdc partition without a checkpoint is replayed from its log start, and a replay of changes more than two days old may bring deleted rows back (BigQuery keeps a delete for two days): `fail` stops the partition so that an operator can choose",
        ));
    }
    for (_, path, c, topics) in cdc {
        if c.sequence.source_field.is_none() && topics > 1 {
            out.push(ConfigError::at(
                format!("{path}.sequence"),
                "several topics feed this cdc table and the sequence numbers come from Kafka offsets, which are not comparable across topics: a key written through two topics may go back to an older row. Set sequence.source_field to a source position (e.g. source.lsn), or give each topic its own table",
            ));
        }
    }
}
