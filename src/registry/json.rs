//! JSON Schemas from the registry: the schema text and the documents it references (by
//! reference name, fetched recursively through their subjects), parsed once and cached by id
//! like the Avro and Protobuf schemas.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{RegistryError, SchemaRegistry, SchemaResponse};
use crate::transcode::json::JsonSchema;

/// Reference graphs larger than this are refused (a cycle, or a registry answering nonsense).
const MAX_REFERENCES: usize = 256;

impl SchemaRegistry {
    /// The JSON Schema with this id, with its references, from the cache or the registry.
    /// Errors are classified as for [`SchemaRegistry::schema`] (the same 404 grace applies).
    pub async fn json_schema(&self, id: u32) -> Result<Arc<JsonSchema>, RegistryError> {
        let cell = {
            let mut cache = self.json_cache.lock().unwrap_or_else(|e| e.into_inner());
            cache.entry(id).or_default().clone()
        };
        if let Some(s) = cell.get() {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(s.clone());
        }
        let result = cell.get_or_try_init(|| self.fetch_json(id)).await.cloned();
        self.with_grace(id, result)
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
        let unusable = |reason: String| RegistryError::Unusable { id, reason };
        match raw.schema_type.as_deref() {
            Some(t) if t.eq_ignore_ascii_case("JSON") => {}
            other => {
                return Err(unusable(format!(
                    "schema type {} is not JSON",
                    other.unwrap_or("AVRO")
                )));
            }
        }
        let mut texts: HashMap<String, String> = HashMap::new();
        let mut pending = raw.references.clone();
        while let Some(reference) = pending.pop() {
            if texts.contains_key(&reference.name) {
                continue;
            }
            if texts.len() >= MAX_REFERENCES {
                return Err(unusable(format!(
                    "more than {MAX_REFERENCES} schema references"
                )));
            }
            let referenced = self
                .fetch_version(id, &reference.subject, reference.version)
                .await?;
            pending.extend(referenced.references);
            texts.insert(reference.name, referenced.schema);
        }
        let references: Vec<(String, String)> = texts.into_iter().collect();
        JsonSchema::parse(&raw.schema, &references)
            .map(Arc::new)
            .map_err(unusable)
    }
}
