//! BigQuery: each routed table, the sink's permissions on it, and the dry run against it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::Finding;
use super::dry_read::Sample;
use super::dry_run::dry_run;
use crate::bigquery::rest_client::{RestClient, TableReference};
use crate::config::{Config, SchemaUpdate};
use crate::ops::metrics::Metrics;
use crate::tables::router::Router;
use kbq_core::bigquery_facts::SINK_TABLE_PERMISSIONS;

/// BigQuery: each routed table exists (or `create_table` would create it), the principal holds
/// the permissions the sink uses, and the dry run's records transcode against the table with
/// the plans `run` would compile: against the table as it is, or, for a table `create_table`
/// would create, against the schema it would be created with (the router is built not to
/// create it). The table's schema is never patched: `schema_update` is off for the check.
pub(super) async fn check_bigquery(
    config: &Config,
    samples: &BTreeMap<String, Vec<Sample>>,
    findings: &mut Vec<Finding>,
) {
    let (client, rest) = match crate::bigquery::clients(config) {
        Ok(c) => c,
        Err(e) => {
            findings.push(Finding::fail(
                "bigquery",
                format!("{e:#}"),
                "check bigquery.credentials and bigquery.endpoint",
            ));
            return;
        }
    };
    let mut read_only = config.clone();
    read_only.bigquery.schema_update = SchemaUpdate::None;
    for route in &mut read_only.routes {
        route.schema_update = Some(SchemaUpdate::None);
    }
    let read_only = Arc::new(read_only);
    let router = Router::new(
        read_only.clone(),
        rest.clone(),
        client,
        Arc::new(Metrics::new()),
        crate::pipeline::group_label(&config.kafka.group_id),
    )
    .creating_nothing();
    let mut seen: HashMap<String, Found> = HashMap::new();
    for (topic, records) in samples {
        let settings = read_only.route_for(topic);
        let table = TableReference::new(settings.project, &settings.dataset, &settings.table);
        let item = format!("bigquery table {}", settings.label);
        let found = match seen.get(&table.resource_name()) {
            Some(found) => *found,
            None => {
                let found = check_table(
                    &rest,
                    &table,
                    settings.create_table.is_some(),
                    &item,
                    findings,
                )
                .await;
                seen.insert(table.resource_name(), found);
                found
            }
        };
        if found == Found::Unusable {
            continue;
        }
        let dry = format!("dry run {topic}");
        let route = match router.resolve(topic).await {
            Ok(r) => r,
            Err(e) => {
                findings.push(Finding::fail(
                    dry,
                    format!("{e:#}"),
                    "make the table's columns fit the input schema (docs/mapping.md)",
                ));
                continue;
            }
        };
        findings.extend(dry_run(topic, &route, records).await);
    }
}

/// What the dry run can use of a routed table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// It exists (its permissions are reported apart).
    Exists,
    /// It does not exist, and `create_table` would create it.
    WouldCreate,
    /// Missing without `create_table`, or unreadable.
    Unusable,
}

/// The table exists and the principal holds the sink's table permissions on it
/// ([`SINK_TABLE_PERMISSIONS`], kbq-core's list of BigQuery facts).
async fn check_table(
    rest: &RestClient,
    table: &TableReference,
    creatable: bool,
    item: &str,
    findings: &mut Vec<Finding>,
) -> Found {
    match rest.get_table(table).await {
        Ok(_) => {}
        Err(e) if e.is_not_found() && creatable => {
            findings.push(Finding::ok(
                item,
                "does not exist; run creates it (create_table; bigquery.tables.create on the \
                 dataset is not checked), and the dry run compiles against the schema it would \
                 have",
            ));
            return Found::WouldCreate;
        }
        Err(e) if e.is_not_found() => {
            findings.push(Finding::fail(
                item,
                format!("{} does not exist", table.resource_name()),
                "create the table, or set create_table on its route",
            ));
            return Found::Unusable;
        }
        Err(e) => {
            findings.push(Finding::fail(
                item,
                format!("cannot read it: {e}"),
                "check bigquery.credentials and grant roles/bigquery.dataEditor on the dataset",
            ));
            return Found::Unusable;
        }
    }
    match rest
        .test_table_permissions(table, &SINK_TABLE_PERMISSIONS)
        .await
    {
        Ok(granted) => {
            let missing: Vec<&str> = SINK_TABLE_PERMISSIONS
                .iter()
                .copied()
                .filter(|p| !granted.iter().any(|g| g == p))
                .collect();
            if missing.is_empty() {
                findings.push(Finding::ok(
                    item,
                    format!("exists; {} granted", SINK_TABLE_PERMISSIONS.join(", ")),
                ));
                Found::Exists
            } else {
                findings.push(Finding::fail(
                    item,
                    format!("the principal lacks {}", missing.join(", ")),
                    "grant roles/bigquery.dataEditor on the table or its dataset (it holds all \
                     four; bigquery.tables.update sets the group's marker label)",
                ));
                Found::Exists
            }
        }
        Err(e) => {
            findings.push(Finding::fail(
                item,
                format!("cannot test its permissions: {e}"),
                "check bigquery.credentials",
            ));
            Found::Exists
        }
    }
}
