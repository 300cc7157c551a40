//! The route settings of the config as the plans and the table derivation take them: the
//! config deserializes the transcoder's own types, so only the registry's input is assembled here.

use std::sync::Arc;

use super::plans::RegistryInput;
use crate::config::{self, Config, defaults};
use crate::registry::SchemaKind;
use kbq_transcode::PlanOptions;

/// How the records of a route are written: unknown fields, the metadata columns and the
/// transforms.
pub(super) fn plan_options(route: &config::TopicRoute<'_>) -> PlanOptions {
    PlanOptions {
        unknown_fields: route.unknown_fields,
        metadata: route.metadata_columns.clone(),
        transforms: route.transforms.to_vec(),
    }
}

/// What a registry route reads: its pinned format (`None`: each schema id's registered type)
/// and the registry settings of the other formats.
pub(super) fn registry_input(
    config: &Config,
    format: Option<config::InputFormat>,
) -> RegistryInput {
    let sr = config.schema_registry.as_ref();
    RegistryInput {
        kind: match format {
            None => None,
            Some(config::InputFormat::Protobuf) => Some(SchemaKind::Protobuf),
            Some(config::InputFormat::JsonSchema) => Some(SchemaKind::Json),
            // Schemaless JSON is not read through the registry; Avro is.
            Some(config::InputFormat::Avro | config::InputFormat::Json) => Some(SchemaKind::Avro),
        },
        message_indexes: sr.map_or(defaults::SCHEMA_REGISTRY_PROTOBUF_MESSAGE_INDEXES, |sr| {
            sr.protobuf_message_indexes
        }),
        json_validate: sr.is_some_and(|sr| sr.json_validate),
        subject: Arc::from(sr.map_or(defaults::SCHEMA_REGISTRY_TABLE_SUBJECT, |sr| {
            sr.table_subject.as_str()
        })),
        table_topics: Arc::from(Vec::new()),
    }
}

/// The topics a route writes into one fixed table (its template without `{topic}`): the
/// route's `topics`, or the subscription's for the top-level settings; none for a template,
/// which gives each topic its own table. A pattern's topics are known only as they come.
pub(super) fn table_topics(config: &Config, route: &config::TopicRoute<'_>) -> Arc<[String]> {
    if route.table_template.contains('{') {
        return Arc::from(Vec::new());
    }
    let topics = match route.route {
        Some(i) => &config.routes[i].topics,
        None => &config.kafka.topics,
    };
    Arc::from(topics.clone())
}
