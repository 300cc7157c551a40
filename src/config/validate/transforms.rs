//! `transforms` of `bigquery` and of each route (docs/mapping.md, "Transforms"): each entry well
//! formed (the transcoder's own check, without a schema), one column per Kafka coordinate beside
//! `metadata_columns`, and refused where the sink does not apply them yet (a CDC route). A table
//! the sink creates or evolves follows them (`kbq_transcode`'s `transforms/derive.rs`). The
//! checks against a writer schema and a table are the plan compiler's, with the same messages.

use crate::config::Config;
use kbq_transcode::MetadataColumns;
use kbq_transcode::transforms::{self, KeyFormat, Transform};

use super::Validator;

/// What a list of transforms meets in the route it applies to.
struct Applied<'a> {
    /// Where the list is written (`bigquery.transforms`, `routes[1].transforms`).
    list_path: String,
    /// Where the route is (`routes[1]`, `bigquery`), for refusals of the route's other settings.
    route_path: String,
    metadata: &'a MetadataColumns,
    cdc: bool,
    /// Whether `schema_registry` is configured (keys read through it need it).
    registry: bool,
}

impl Validator {
    pub(super) fn transforms(&mut self, c: &Config) {
        let b = &c.bigquery;
        self.transform_list(
            &b.transforms,
            &Applied {
                list_path: "bigquery.transforms".into(),
                route_path: "bigquery".into(),
                metadata: &b.metadata_columns,
                cdc: false,
                registry: c.schema_registry.is_some(),
            },
        );
        for (i, r) in c.routes.iter().enumerate() {
            let (list, list_path) = match &r.transforms {
                Some(list) => (list, format!("routes[{i}].transforms")),
                // An inherited list is checked again only for what this route changes.
                None => (&b.transforms, "bigquery.transforms".to_string()),
            };
            if list.is_empty() || (r.transforms.is_none() && !route_differs(c, i)) {
                continue;
            }
            self.transform_list(
                list,
                &Applied {
                    list_path,
                    route_path: format!("routes[{i}]"),
                    metadata: r.metadata_columns.as_ref().unwrap_or(&b.metadata_columns),
                    cdc: r.cdc.is_some(),
                    registry: c.schema_registry.is_some(),
                },
            );
        }
    }

    fn transform_list(&mut self, list: &[Transform], at: &Applied<'_>) {
        if let Err(e) = transforms::check(list) {
            self.err(
                format!("{}[{}].{}", at.list_path, e.index, e.key),
                e.message,
            );
            return;
        }
        if let Err(reason) = transforms::metadata_with(at.metadata, list) {
            let i = list.iter().position(is_kafka_set).unwrap_or(0);
            self.err(format!("{}[{i}].from", at.list_path), reason);
        }
        if !at.registry
            && let Some(i) = list.iter().position(reads_key_through_registry)
        {
            self.err(
                format!("{}[{i}].key_format", at.list_path),
                "schema_registry keys are read by their schema id: configure schema_registry, or read the key as json",
            );
        }
        let Some(i) = list.iter().position(|t| t.shapes_rows() || on_field(t)) else {
            return;
        };
        if at.cdc {
            self.err(
                format!("{}[{i}]", at.list_path),
                format!(
                    "{} is a CDC route: its rows are keyed changes, and only filter applies to them",
                    at.route_path
                ),
            );
        }
    }
}

/// A `filter` on a field's value, which the plan decides.
fn on_field(t: &Transform) -> bool {
    matches!(t, Transform::Filter(f) if f.on_field())
}

fn is_kafka_set(t: &Transform) -> bool {
    matches!(t, Transform::Set(s) if s.from.is_some() && s.key_field().is_none())
}

fn reads_key_through_registry(t: &Transform) -> bool {
    matches!(t, Transform::Set(s) if s.key_field().is_some() && s.key_format == Some(KeyFormat::SchemaRegistry))
}

/// Whether route `i` inherits `bigquery.transforms` into settings they may not meet: CDC, other
/// metadata columns.
fn route_differs(c: &Config, i: usize) -> bool {
    let r = &c.routes[i];
    r.cdc.is_some() || r.metadata_columns.is_some()
}
