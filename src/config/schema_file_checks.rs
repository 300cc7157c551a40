//! What `validate` checks against a route's fixed Avro schema (`avro.schema_file`) when the
//! config is loaded (docs/configuration.md): its filters on a field's value, whose field and
//! literals need only the writer schema (the plan compiler's own check, with its messages). The
//! other transforms also need the table, which only `check` reads.

use std::path::Path;

use super::{Config, ConfigError};
use kbq_transcode::transforms::Transform;
use kbq_transcode::{AvroSchema, PlanError, check_field_filters};

impl Config {
    /// The filters on a field of each route with a fixed schema file, against that schema. A
    /// file that cannot be read or parsed is left to the daemon's start (which names it).
    pub fn check_filters_against_schema_files(&self) -> Result<(), Vec<ConfigError>> {
        let mut errors = Vec::new();
        let routes = std::iter::once(None).chain((0..self.routes.len()).map(Some));
        for at in routes {
            let route = self.route_at(at, "");
            let (Some(file), list) = (route.schema_file, route.transforms) else {
                continue;
            };
            if !list.iter().any(on_field) {
                continue;
            }
            let Some(schema) = read(file) else {
                continue;
            };
            for (i, t) in list.iter().enumerate().filter(|(_, t)| on_field(t)) {
                let one = std::slice::from_ref(t);
                if let Err(e) = check_field_filters(&schema, one) {
                    let reason = match e {
                        PlanError::Transform { reason, .. } => reason,
                        other => other.to_string(),
                    };
                    let list_path = match at {
                        Some(r) if self.routes[r].transforms.is_some() => {
                            format!("routes[{r}].transforms")
                        }
                        _ => "bigquery.transforms".into(),
                    };
                    errors.push(ConfigError::at(
                        format!("{list_path}[{i}].field"),
                        format!("{reason} ({})", file.display()),
                    ));
                }
            }
        }
        errors.dedup_by(|a, b| a.to_string() == b.to_string());
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

fn on_field(t: &Transform) -> bool {
    matches!(t, Transform::Filter(f) if f.on_field())
}

fn read(file: &Path) -> Option<AvroSchema> {
    let text = std::fs::read_to_string(file).ok()?;
    AvroSchema::parse(&text).ok()
}
