//! What the Protobuf and JSON Schema lookups share: the check of a schema's registered type and
//! the documents it references, fetched recursively through their subjects (a reference is a
//! subject version, which may have references of its own).

use std::collections::HashMap;

use super::{RegistryError, SchemaRegistry, SchemaResponse};

use crate::config::defaults::SCHEMA_REGISTRY_MAX_REFERENCES;

/// `raw` is registered as `expected` (`PROTOBUF`, `JSON`; no type means Avro).
pub(super) fn check_type(
    id: u32,
    raw: &SchemaResponse,
    expected: &str,
) -> Result<(), RegistryError> {
    match raw.schema_type.as_deref() {
        Some(t) if t.eq_ignore_ascii_case(expected) => Ok(()),
        other => Err(RegistryError::Unusable {
            id,
            reason: format!("schema type {} is not {expected}", other.unwrap_or("AVRO")),
        }),
    }
}

impl SchemaRegistry {
    /// The text of every document schema `id` references, directly or through another
    /// reference, by reference name; each name is fetched once.
    pub(super) async fn referenced_texts(
        &self,
        id: u32,
        raw: &SchemaResponse,
    ) -> Result<Vec<(String, String)>, RegistryError> {
        let mut texts: HashMap<String, String> = HashMap::new();
        let mut pending = raw.references.clone();
        while let Some(reference) = pending.pop() {
            if texts.contains_key(&reference.name) {
                continue;
            }
            if texts.len() >= SCHEMA_REGISTRY_MAX_REFERENCES {
                return Err(RegistryError::Unusable {
                    id,
                    reason: format!("more than {SCHEMA_REGISTRY_MAX_REFERENCES} schema references"),
                });
            }
            let referenced = self
                .fetch_version(id, &reference.subject, reference.version)
                .await?;
            pending.extend(referenced.references);
            texts.insert(reference.name, referenced.schema);
        }
        Ok(texts.into_iter().collect())
    }
}
