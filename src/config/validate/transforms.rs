//! `transforms` of `bigquery` and of each route (docs/mapping.md, "Transforms"): each entry well
//! formed (the transcoder's own check, without a schema), one column per Kafka coordinate beside
//! `metadata_columns`, and refused where the sink does not apply them yet (a CDC route, a table
//! the sink creates or evolves). The checks against a writer schema and a table are the plan
//! compiler's, with the same messages.

use crate::config::{Config, SchemaUpdate};
use kbq_transcode::MetadataColumns;
use kbq_transcode::transforms::{self, Transform};

use super::Validator;

/// What a list of transforms meets in the route it applies to.
struct Applied<'a> {
    /// Where the list is written (`bigquery.transforms`, `routes[1].transforms`).
    list_path: String,
    /// Where the route is (`routes[1]`, `bigquery`), for refusals of the route's other settings.
    route_path: String,
    metadata: &'a MetadataColumns,
    create_table: bool,
    /// The route's `schema_update`: any level but `none` changes the table from the writer
    /// schema, which the transforms do not apply to.
    schema_update: SchemaUpdate,
    cdc: bool,
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
                create_table: b.create_table.is_some(),
                schema_update: b.schema_update,
                cdc: false,
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
                    create_table: r
                        .create_table
                        .as_ref()
                        .or(b.create_table.as_ref())
                        .is_some(),
                    schema_update: r.schema_update.unwrap_or(b.schema_update),
                    cdc: r.cdc.is_some(),
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
        let Some(i) = list.iter().position(Transform::shapes_rows) else {
            return;
        };
        let path = format!("{}[{i}]", at.list_path);
        if at.cdc {
            self.err(
                path,
                format!(
                    "{} is a CDC route: its rows are keyed changes, and only filter applies to them",
                    at.route_path
                ),
            );
        } else if at.create_table {
            self.err(
                path,
                format!(
                    "{}.create_table derives the table from the writer schema without the transforms: create the table with the transformed columns, then remove create_table",
                    at.route_path
                ),
            );
        } else if at.schema_update.adds_columns() {
            self.err(
                path,
                format!(
                    "{}.schema_update: {} would add the dropped, renamed and masked fields as columns of their own: set schema_update: none",
                    at.route_path,
                    at.schema_update.as_str()
                ),
            );
        }
    }
}

fn is_kafka_set(t: &Transform) -> bool {
    matches!(t, Transform::Set(s) if s.from.is_some())
}

/// Whether route `i` inherits `bigquery.transforms` into settings they may not meet: CDC, a
/// created or evolved table, other metadata columns.
fn route_differs(c: &Config, i: usize) -> bool {
    let r = &c.routes[i];
    r.cdc.is_some()
        || r.create_table.is_some()
        || r.schema_update.is_some()
        || r.metadata_columns.is_some()
}
