//! JSON Schemas from the registry: the schema text and the documents it references (by
//! reference name, fetched recursively through their subjects), parsed once and cached by id
//! like the Avro and Protobuf schemas.

use std::sync::Arc;

use super::references::check_type;
use super::{RegistryError, SchemaRegistry, SchemaResponse};
use kbq_transcode::json::JsonSchema;

impl SchemaRegistry {
    /// The JSON Schema with this id, with its references, from the cache or the registry.
    /// Errors are classified as for [`SchemaRegistry::schema`] (the same 404 grace applies).
    pub async fn json_schema(&self, id: u32) -> Result<Arc<JsonSchema>, RegistryError> {
        self.cached(&self.json_cache, id, || self.fetch_json(id))
            .await
    }

    async fn fetch_json(&self, id: u32) -> Result<Arc<JsonSchema>, RegistryError> {
        let raw = self.fetch_raw(id).await?;
        self.parse_json(id, raw).await
    }

    /// The schema of a `GET /schemas/ids/{id}` answer, with the documents it references.
    pub(super) async fn parse_json(
        &self,
        id: u32,
        raw: SchemaResponse,
    ) -> Result<Arc<JsonSchema>, RegistryError> {
        check_type(id, &raw, "JSON")?;
        let references = self.referenced_texts(id, &raw).await?;
        let unusable = |reason: String| RegistryError::Unusable { id, reason };
        JsonSchema::parse(&raw.schema, &references)
            .map(Arc::new)
            .map_err(unusable)
    }
}
