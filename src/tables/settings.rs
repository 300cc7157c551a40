//! The route settings of the config as the domain types the plans and the table derivation
//! take: one place for these conversions.

use super::plans::RegistryInput;
use crate::config::{self, Config};
use crate::registry::SchemaKind;
use crate::transcode::protobuf::MessageIndexEncoding;
use crate::transcode::{MapMode, MetadataColumns, PlanOptions, UnknownFields};

/// How the records of a route are written: unknown fields and the metadata columns.
pub(super) fn plan_options(route: &config::TopicRoute<'_>) -> PlanOptions {
    PlanOptions {
        unknown_fields: match route.unknown_fields {
            config::UnknownFields::Ignore => UnknownFields::Ignore,
            config::UnknownFields::Error => UnknownFields::Error,
        },
        metadata: metadata_columns(route.metadata_columns),
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
        message_indexes: match sr.map(|sr| sr.protobuf_message_indexes).unwrap_or_default() {
            config::ProtobufMessageIndexes::Zigzag => MessageIndexEncoding::Zigzag,
            config::ProtobufMessageIndexes::Unsigned => MessageIndexEncoding::Unsigned,
            config::ProtobufMessageIndexes::None => MessageIndexEncoding::None,
        },
        json_validate: sr.is_some_and(|sr| sr.json_validate),
    }
}

pub(super) fn map_mode(mode: config::MapMode) -> MapMode {
    match mode {
        config::MapMode::Struct => MapMode::Repeated,
        config::MapMode::Json => MapMode::Json,
    }
}

pub(super) fn metadata_columns(c: &config::MetadataColumns) -> MetadataColumns {
    MetadataColumns {
        topic: c.topic.clone(),
        partition: c.partition.clone(),
        offset: c.offset.clone(),
        timestamp: c.timestamp.clone(),
        key: c.key.clone(),
        headers: c.headers.clone(),
    }
}
