//! Upserts and deletes: `upsertEnabled`/`deleteEnabled` become cdc routes, at least once,
//! which an upsert makes exact.

use std::collections::BTreeMap;

use super::Source;
use crate::migrate::draft::{Cdc, Route};
use crate::migrate::report::Outcome;

/// The cdc of every route, if the connector applied changes, and whether delivery is at least
/// once. `unwrap`: the chain unwraps a Debezium envelope.
pub(super) fn changes(
    s: &mut Source,
    upsert: bool,
    delete: bool,
    json_input: bool,
    json_envelope: bool,
    unwrap: bool,
) -> (Option<Cdc>, bool) {
    let mut at_least_once = false;
    let cdc = if upsert || delete {
        if json_input && !json_envelope {
            for key in ["upsertEnabled", "deleteEnabled"] {
                s.note(
                    key,
                    Outcome::NotTranslatable(
                        "schemaless JSON has no key schema, and the connector config does not name the key columns: add a route with cdc and primary_key by hand".into(),
                    ),
                );
            }
            None
        } else {
            at_least_once = true;
            let mode = if delete { "upsert_delete" } else { "upsert" };
            let format = if unwrap { "debezium" } else { "unwrapped" };
            let how = format!(
                "routes[].cdc mode {mode}, format {format}: UPSERT{} rows keyed by the table's primary key (the Kafka key's fields), applied by BigQuery; delivery: at_least_once, which an upsert makes exact (a replayed record rewrites its own row). No intermediate tables and MERGE: changes apply within the table's max_staleness. An existing table needs a primary key (the sink refuses to start naming the ALTER TABLE that adds it)",
                if delete { " and DELETE" } else { "" }
            );
            s.note("upsertEnabled", Outcome::Changed(how.clone()));
            s.note("deleteEnabled", Outcome::Changed(how));
            for key in [
                "intermediateTableSuffix",
                "mergeIntervalMs",
                "mergeRecordsThreshold",
            ] {
                s.note(
                    key,
                    Outcome::Dropped(
                        "no intermediate tables: BigQuery applies the changes itself".into(),
                    ),
                );
            }
            Some(Cdc {
                mode,
                format,
                schemas_enable: json_envelope,
            })
        }
    } else {
        s.note(
            "upsertEnabled",
            Outcome::Mapped("false: rows are appended".into()),
        );
        s.note(
            "deleteEnabled",
            Outcome::Mapped("false: tombstones are not deletes".into()),
        );
        None
    };
    (cdc, at_least_once)
}

/// Every route gets the cdc, and every other topic one more route with the template's table.
pub(super) fn routes(
    routes: &mut Vec<Route>,
    c: &Cdc,
    topics: &[String],
    topic_pattern: Option<&str>,
    explicit: &BTreeMap<String, String>,
) {
    for r in routes.iter_mut() {
        r.cdc = Some(c.clone());
    }
    // Every other topic: one more route, with the template's table.
    routes.push(Route {
        topics: if topic_pattern.is_none() {
            topics
                .iter()
                .filter(|t| !explicit.contains_key(*t))
                .cloned()
                .collect()
        } else {
            Vec::new()
        },
        topic_pattern: topic_pattern.map(|_| ".*".to_string()),
        table: None,
        cdc: Some(c.clone()),
    });
    routes.retain(|r| !r.topics.is_empty() || r.topic_pattern.is_some());
}
