//! Protobuf schemas from the registry: the schema text and its references, fetched recursively
//! (a reference is a subject version, which may have references of its own), compiled once and
//! cached by id like the Avro schemas. Well-known imports are never registered by Confluent's
//! serializers; the compiler bundles them.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{RegistryError, SchemaRegistry, SchemaResponse};
use crate::transcode::protobuf::ProtoSchema;

/// Reference chains longer than this are refused (a cycle, or a registry answering nonsense).
const MAX_REFERENCES: usize = 256;

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
        let cell = {
            let mut cache = self
                .protobuf_cache
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            cache.entry(id).or_default().clone()
        };
        if let Some(s) = cell.get() {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(s.clone());
        }
        let result = cell
            .get_or_try_init(|| self.fetch_protobuf(id))
            .await
            .cloned();
        self.with_grace(id, result)
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
        let unusable = |reason: String| RegistryError::Unusable { id, reason };
        match raw.schema_type.as_deref() {
            Some(t) if t.eq_ignore_ascii_case("PROTOBUF") => {}
            other => {
                return Err(unusable(format!(
                    "schema type {} is not PROTOBUF",
                    other.unwrap_or("AVRO")
                )));
            }
        }
        // Breadth-first over the reference graph; each import name is fetched once.
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
        let schema =
            ProtoSchema::compile(&raw.schema, &references).map_err(|e| unusable(e.to_string()))?;
        Ok(Arc::new(RegisteredProtobuf {
            id,
            text: raw.schema,
            schema,
        }))
    }
}
