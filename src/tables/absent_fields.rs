//! A transform of a field the writer schema lacks but another version of the topic's subject
//! has (docs/mapping.md, "Transforms"): v1 records on a topic whose v2 adds `note`, under a
//! route that masks `note`. v1's plan applies the transform as to an absent field
//! (`kbq_transcode::transforms::without_absent`); a field no version of the subject has is a
//! misspelt one, and its transform still refuses the plan. The subject is the one
//! `create_table` reads (`schema_registry.table_subject`, `{topic}-value` by default), and
//! those of the other topics a route writes into one fixed table (the union of several topics:
//! one route, one list of transforms, each topic's fields absent from the others' schemas);
//! every version is read once per writer schema that lacks a field, and the schemas by id are
//! cached as any writer schema.

use kbq_core::table_schema::TableSchema;
use kbq_transcode::DeriveOptions;
use kbq_transcode::protobuf::MessagePath;
use kbq_transcode::transforms;

use super::plans::{RegistryPlans, WriterSchema, writer_schema};
use crate::registry::{AnySchema, SubjectError};
use crate::writer::plan_source::PlanLookupError;

/// The transform fields a writer schema lacks that a version of its subject has, and the
/// writer's table derived without transforms (what `check_absent` compares with the table).
pub(super) struct Absent {
    pub fields: Vec<String>,
    pub derived: TableSchema,
}

impl RegistryPlans {
    /// The transform fields `writer` lacks that some version of `topic`'s subject has, or of
    /// the subject of another topic written into the same fixed table; `None`
    /// when it lacks none, or only fields no version has (the plan compiler refuses those,
    /// naming the transform). `Err` when the registry does not answer: try again.
    pub(super) async fn absent_fields(
        &self,
        topic: &str,
        writer: &WriterSchema,
    ) -> Result<Option<Absent>, PlanLookupError> {
        let list = &self.options.transforms;
        if list.is_empty() {
            return Ok(None);
        }
        let derive = DeriveOptions {
            map_mode: self
                .evolution
                .as_ref()
                .map(|e| e.derive.map_mode)
                .unwrap_or_default(),
            ..DeriveOptions::default()
        };
        // A schema without a table shape of its own: the plan compiler decides.
        let Ok(derived) = writer.derive(&derive) else {
            return Ok(None);
        };
        let mut fields = transforms::absent_fields(list, &derived);
        if fields.is_empty() {
            return Ok(None);
        }
        let mut subjects = vec![self.input.subject.replace("{topic}", topic)];
        for other in self.input.table_topics.iter() {
            let subject = self.input.subject.replace("{topic}", other);
            if !subjects.contains(&subject) {
                subjects.push(subject);
            }
        }
        let mut found = vec![false; fields.len()];
        for subject in &subjects {
            self.search(subject, writer, &derive, &fields, &mut found)
                .await?;
        }
        let mut keep = found.into_iter();
        fields.retain(|_| keep.next().unwrap_or(false));
        Ok((!fields.is_empty()).then_some(Absent { fields, derived }))
    }

    /// Marks in `found` each of `fields` that a version of `subject` has; a subject the
    /// registry does not hold has none.
    async fn search(
        &self,
        subject: &str,
        writer: &WriterSchema,
        derive: &DeriveOptions,
        fields: &[String],
        found: &mut [bool],
    ) -> Result<(), PlanLookupError> {
        let unavailable = |e: &dyn std::fmt::Display| {
            PlanLookupError::Unavailable(format!(
                "the versions of subject {subject}, for fields {fields:?} the writer schema lacks: {e}"
            ))
        };
        let versions = match self.registry.versions(subject).await {
            Ok(v) => v,
            Err(e @ SubjectError::Unavailable { .. }) => return Err(unavailable(&e)),
            Err(_) => return Ok(()),
        };
        for version in versions {
            let (id, kind) = match self.registry.version_id(subject, version).await {
                Ok(v) => v,
                Err(e @ SubjectError::Unavailable { .. }) => return Err(unavailable(&e)),
                Err(_) => continue,
            };
            let schema = match self.registry.any_schema(id, Some(kind)).await {
                Ok(s) => s,
                Err(e) if e.is_retryable() => return Err(unavailable(&e)),
                Err(_) => continue,
            };
            // Protobuf: the writer's message in that version's file, else (another topic's
            // subject) each of its top-level messages.
            let others: Vec<WriterSchema> = match &schema {
                AnySchema::Protobuf(r) => {
                    let pool = r.schema.pool();
                    let same = match writer {
                        WriterSchema::Protobuf(m) => pool.get_message_by_name(m.full_name()),
                        _ => None,
                    };
                    match same {
                        Some(m) => vec![WriterSchema::Protobuf(m)],
                        None => (r.schema.message_names().iter())
                            .filter_map(|n| pool.get_message_by_name(n))
                            .map(WriterSchema::Protobuf)
                            .collect(),
                    }
                }
                _ => writer_schema(&schema, id, &MessagePath::FIRST)
                    .into_iter()
                    .collect(),
            };
            for other in others {
                let Ok(table) = other.derive(derive) else {
                    continue;
                };
                for (f, found) in fields.iter().zip(found.iter_mut()) {
                    *found |= transforms::has_field(&table, f);
                }
            }
        }
        Ok(())
    }
}
