//! Protobuf schemas from the registry: the schema text and its references, fetched recursively
//! (a reference is a subject version, which may have references of its own), compiled once and
//! cached by id like the Avro schemas. Well-known imports are never registered by Confluent's
//! serializers; the compiler bundles them.

use std::sync::Arc;

use super::references::check_type;
use super::{RegistryError, SchemaRegistry, SchemaResponse};
use kbq_transcode::protobuf::ProtoSchema;

/// A Protobuf writer schema as registered, compiled.
#[derive(Debug)]
pub struct RegisteredProtobuf {
    pub id: u32,
    pub text: String,
    pub schema: ProtoSchema,
}

impl SchemaRegistry {
    /// The Protobuf schema with this id, with its references, from the cache or the registry.
    /// Errors are classified as for [`SchemaRegistry::schema`] (the same 404 grace applies).
    pub async fn protobuf_schema(&self, id: u32) -> Result<Arc<RegisteredProtobuf>, RegistryError> {
        self.cached(&self.protobuf_cache, id, || self.fetch_protobuf(id))
            .await
    }

    async fn fetch_protobuf(&self, id: u32) -> Result<Arc<RegisteredProtobuf>, RegistryError> {
        let raw = self.fetch_raw(id).await?;
        self.parse_protobuf(id, raw).await
    }

    /// The schema of a `GET /schemas/ids/{id}` answer, its references fetched and compiled.
    pub(super) async fn parse_protobuf(
        &self,
        id: u32,
        raw: SchemaResponse,
    ) -> Result<Arc<RegisteredProtobuf>, RegistryError> {
        check_type(id, &raw, "PROTOBUF")?;
        let references = self.referenced_texts(id, &raw).await?;
        let unusable = |reason: String| RegistryError::Unusable { id, reason };
        let schema =
            ProtoSchema::compile(&raw.schema, &references).map_err(|e| unusable(e.to_string()))?;
        Ok(Arc::new(RegisteredProtobuf {
            id,
            text: raw.schema,
            schema,
        }))
    }
}
