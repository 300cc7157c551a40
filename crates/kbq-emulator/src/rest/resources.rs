//! The REST `Dataset` and `Table` resources: parsing request bodies into the store's types and
//! writing them back in the JSON shape of the real API (int64 fields as strings, legacy type
//! names, `kind`, `id`, `selfLink`).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::RestError;
use super::constraints::{check_constraints, check_max_staleness};
use super::schema_change::{check_evolution, check_schema};
use crate::store::{Dataset, Table, TableRef};
use kbq_core::table_schema::{FieldType, TableSchema};

fn string_field(body: &Value, key: &str) -> Result<Option<String>, RestError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(RestError::Invalid(format!(
            "Invalid value for {key}: {other} is not a valid value"
        ))),
    }
}

fn labels(body: &Value) -> Result<Option<BTreeMap<String, Option<String>>>, RestError> {
    match body.get("labels") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), Some(s.clone()))),
                Value::Null => Ok((k.clone(), None)),
                other => Err(RestError::Invalid(format!(
                    "Invalid value for labels: {other} is not a valid value"
                ))),
            })
            .collect::<Result<_, _>>()
            .map(Some),
        Some(other) => Err(RestError::Invalid(format!(
            "Invalid value for labels: {other} is not a valid value"
        ))),
    }
}

fn set_labels(target: &mut BTreeMap<String, String>, given: BTreeMap<String, Option<String>>) {
    for (k, v) in given {
        match v {
            Some(v) => {
                target.insert(k, v);
            }
            None => {
                target.remove(&k);
            }
        }
    }
}

/// Checks that the body's reference (when it has one) names the resource of the URL.
fn check_reference(
    body: &Value,
    reference_key: &str,
    expected: &[(&str, &str)],
) -> Result<(), RestError> {
    let Some(reference) = body.get(reference_key) else {
        return Ok(());
    };
    for (key, want) in expected {
        if let Some(got) = reference.get(*key).and_then(Value::as_str)
            && !got.is_empty()
            && got != *want
        {
            return Err(RestError::Invalid(format!(
                "Invalid {reference_key}: {key} {got} does not match {want} in the request URL"
            )));
        }
    }
    Ok(())
}

/// A dataset id: letters, digits and underscores, at most 1024 characters.
fn valid_dataset_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 1024 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A table id: Unicode letters, marks, numbers, connectors, dashes and spaces; no `.`, `/` or
/// `$` (the partition decorator is not part of a table's name).
fn valid_table_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 1024
        && id
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == ' ')
}

pub(super) fn dataset_from_json(project: &str, body: &Value) -> Result<Dataset, RestError> {
    let id = body
        .pointer("/datasetReference/datasetId")
        .and_then(Value::as_str)
        .ok_or_else(|| RestError::Invalid("Required parameter is missing: datasetId".into()))?;
    check_reference(body, "datasetReference", &[("projectId", project)])?;
    if !valid_dataset_id(id) {
        return Err(RestError::Invalid(format!(
            "Invalid dataset ID \"{id}\". Dataset IDs must be alphanumeric (plus underscores) and must be at most 1024 characters long."
        )));
    }
    let mut dataset = Dataset::new(project, id);
    if let Some(location) = string_field(body, "location")? {
        dataset.location = location;
    }
    dataset.description = string_field(body, "description")?;
    dataset.friendly_name = string_field(body, "friendlyName")?;
    if let Some(given) = labels(body)? {
        set_labels(&mut dataset.labels, given);
    }
    Ok(dataset)
}

pub(super) fn dataset_json(d: &Dataset) -> Value {
    let mut out = json!({
        "kind": "bigquery#dataset",
        "etag": d.etag,
        "id": format!("{}:{}", d.project, d.dataset_id),
        "selfLink": format!("/bigquery/v2/projects/{}/datasets/{}", d.project, d.dataset_id),
        "datasetReference": { "projectId": d.project, "datasetId": d.dataset_id },
        "location": d.location,
        "creationTime": d.creation_time.to_string(),
        "lastModifiedTime": d.last_modified_time.to_string(),
        "type": "DEFAULT",
    });
    let obj = out.as_object_mut().expect("object");
    if !d.labels.is_empty() {
        obj.insert("labels".into(), json!(d.labels));
    }
    if let Some(v) = &d.description {
        obj.insert("description".into(), json!(v));
    }
    if let Some(v) = &d.friendly_name {
        obj.insert("friendlyName".into(), json!(v));
    }
    out
}

fn schema_field(body: &Value) -> Result<Option<TableSchema>, RestError> {
    match body.get("schema") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let mut v = v.clone();
            if let Some(fields) = v.get_mut("fields") {
                normalise_fields(fields);
            }
            serde_json::from_value(v)
                .map(Some)
                .map_err(|e| RestError::Invalid(format!("Invalid value for schema: {e}")))
        }
    }
}

/// The REST API takes its int64 fields as JSON strings or numbers (Google's Python client sends
/// `precision` as a number); the shared schema type keeps them as strings. A `null` list of
/// subfields means none.
fn normalise_fields(fields: &mut Value) {
    let Some(list) = fields.as_array_mut() else {
        return;
    };
    for field in list {
        let Some(obj) = field.as_object_mut() else {
            continue;
        };
        for key in ["maxLength", "precision", "scale"] {
            if let Some(n @ Value::Number(_)) = obj.get(key) {
                let text = n.to_string();
                obj.insert(key.into(), Value::String(text));
            }
        }
        match obj.get_mut("fields") {
            Some(Value::Null) => {
                obj.remove("fields");
            }
            Some(sub) => normalise_fields(sub),
            None => {}
        }
    }
}

/// `timePartitioning`: a known type and, when a column is named, a top-level DATE, DATETIME or
/// TIMESTAMP column.
fn check_partitioning(tp: &Value, schema: &TableSchema) -> Result<(), RestError> {
    let Some(obj) = tp.as_object() else {
        return Err(RestError::Invalid(format!(
            "Invalid value for timePartitioning: {tp} is not a valid value"
        )));
    };
    let kind = obj.get("type").and_then(Value::as_str).unwrap_or("DAY");
    if !matches!(kind, "DAY" | "HOUR" | "MONTH" | "YEAR") {
        return Err(RestError::Invalid(format!(
            "Invalid value for type: {kind} is not a valid value"
        )));
    }
    if let Some(field) = obj.get("field").and_then(Value::as_str) {
        let column = schema
            .fields
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(field))
            .ok_or_else(|| {
                RestError::Invalid(format!(
                    "The field specified for partitioning cannot be found in the schema: {field}"
                ))
            })?;
        if !matches!(
            column.field_type,
            FieldType::Date | FieldType::DateTime | FieldType::Timestamp
        ) {
            return Err(RestError::Invalid(format!(
                "The field specified for time partitioning can only be of type TIMESTAMP, DATE or DATETIME. The type found is: {}.",
                column.field_type.as_str()
            )));
        }
    }
    Ok(())
}

fn check_clustering(clustering: &Value, schema: &TableSchema) -> Result<(), RestError> {
    let fields = clustering
        .get("fields")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            RestError::Invalid(format!(
                "Invalid value for clustering: {clustering} is not a valid value"
            ))
        })?;
    if fields.len() > 4 {
        return Err(RestError::Invalid(format!(
            "Too many clustering fields: {}, only 4 are allowed.",
            fields.len()
        )));
    }
    for field in fields {
        let name = field.as_str().unwrap_or_default();
        if !schema
            .fields
            .iter()
            .any(|c| c.name.eq_ignore_ascii_case(name))
        {
            return Err(RestError::Invalid(format!(
                "The field specified for clustering cannot be found in the schema. Invalid field: {name}."
            )));
        }
    }
    Ok(())
}

pub(super) fn table_from_json(
    project: &str,
    dataset: &str,
    body: &Value,
) -> Result<Table, RestError> {
    let id = body
        .pointer("/tableReference/tableId")
        .and_then(Value::as_str)
        .ok_or_else(|| RestError::Invalid("Required parameter is missing: tableId".into()))?;
    check_reference(
        body,
        "tableReference",
        &[("projectId", project), ("datasetId", dataset)],
    )?;
    if !valid_table_id(id) {
        return Err(RestError::Invalid(format!("Invalid table ID \"{id}\".")));
    }
    let schema = schema_field(body)?.unwrap_or_default();
    check_schema(&schema)?;
    let mut table = Table::new(TableRef::new(project, dataset, id), schema);
    apply_options(&mut table, body, true)?;
    Ok(table)
}

/// The optional table fields of a body. With `replace`, a field the body leaves out is cleared.
fn apply_options(table: &mut Table, body: &Value, replace: bool) -> Result<(), RestError> {
    let present = |key: &str| body.get(key).is_some();
    if replace || present("description") {
        table.description = string_field(body, "description")?;
    }
    if replace || present("friendlyName") {
        table.friendly_name = string_field(body, "friendlyName")?;
    }
    if replace {
        table.labels.clear();
    }
    if let Some(given) = labels(body)? {
        set_labels(&mut table.labels, given);
    }
    if replace || present("requirePartitionFilter") {
        table.require_partition_filter = match body.get("requirePartitionFilter") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                return Err(RestError::Invalid(format!(
                    "Invalid value for requirePartitionFilter: {other} is not a valid value"
                )));
            }
        };
    }
    if replace || present("timePartitioning") {
        let next = body
            .get("timePartitioning")
            .filter(|v| !v.is_null())
            .cloned();
        if let Some(tp) = &next {
            check_partitioning(tp, &table.schema)?;
        }
        check_partitioning_change(table.time_partitioning.as_ref(), next.as_ref(), table)?;
        table.time_partitioning = next;
    }
    if replace || present("clustering") {
        let next = body.get("clustering").filter(|v| !v.is_null()).cloned();
        if let Some(c) = &next {
            check_clustering(c, &table.schema)?;
        }
        table.clustering = next;
    }
    if replace || present("tableConstraints") {
        let next = body
            .get("tableConstraints")
            .filter(|v| !v.is_null())
            .cloned();
        if let Some(c) = &next {
            check_constraints(c, &table.schema)?;
        }
        table.table_constraints = next;
    }
    if replace || present("maxStaleness") {
        table.max_staleness = string_field(body, "maxStaleness")?;
        if let Some(v) = &table.max_staleness {
            check_max_staleness(v)?;
        }
    }
    Ok(())
}

/// Partitioning is fixed at creation: only its expiration may change afterwards.
fn check_partitioning_change(
    before: Option<&Value>,
    after: Option<&Value>,
    table: &Table,
) -> Result<(), RestError> {
    if table.creation_time == 0 {
        return Ok(());
    }
    let spec = |v: Option<&Value>| {
        v.map(|v| {
            (
                v.get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("DAY")
                    .to_string(),
                v.get("field").and_then(Value::as_str).map(str::to_string),
            )
        })
    };
    match (spec(before), spec(after)) {
        (None, Some(_)) => Err(RestError::Invalid(
            "Cannot convert non-partitioned table to partitioned table.".into(),
        )),
        (Some(_), None) => Err(RestError::Invalid(
            "Cannot convert partitioned table to non-partitioned table.".into(),
        )),
        (Some(a), Some(b)) if a != b => Err(RestError::Invalid(format!(
            "Cannot change partitioning spec for table {}.",
            table.reference.legacy()
        ))),
        _ => Ok(()),
    }
}

/// Applies a PATCH (or, with `replace`, a PUT) body to a table.
pub(super) fn apply_table_change(
    table: &mut Table,
    body: &Value,
    replace: bool,
) -> Result<(), RestError> {
    check_reference(
        body,
        "tableReference",
        &[
            ("projectId", table.reference.project.as_str()),
            ("datasetId", table.reference.dataset.as_str()),
            ("tableId", table.reference.table.as_str()),
        ],
    )?;
    if let Some(schema) = schema_field(body)? {
        check_schema(&schema)?;
        check_evolution(&table.schema, &schema, &table.reference)?;
        table.schema = schema;
    }
    apply_options(table, body, replace)
}

pub(super) fn table_json(t: &Table, num_rows: u64, location: &str) -> Value {
    let r = &t.reference;
    let mut out = json!({
        "kind": "bigquery#table",
        "etag": t.etag,
        "id": r.legacy(),
        "selfLink": format!(
            "/bigquery/v2/projects/{}/datasets/{}/tables/{}",
            r.project, r.dataset, r.table
        ),
        "tableReference": { "projectId": r.project, "datasetId": r.dataset, "tableId": r.table },
        "schema": t.schema,
        "numRows": num_rows.to_string(),
        "creationTime": t.creation_time.to_string(),
        "lastModifiedTime": t.last_modified_time.to_string(),
        "type": "TABLE",
        "location": location,
    });
    let obj: &mut Map<String, Value> = out.as_object_mut().expect("object");
    if let Some(v) = &t.time_partitioning {
        obj.insert("timePartitioning".into(), v.clone());
    }
    if let Some(v) = &t.clustering {
        obj.insert("clustering".into(), v.clone());
    }
    if let Some(v) = &t.table_constraints {
        obj.insert("tableConstraints".into(), v.clone());
    }
    if let Some(v) = &t.max_staleness {
        obj.insert("maxStaleness".into(), json!(v));
    }
    if let Some(v) = t.require_partition_filter {
        obj.insert("requirePartitionFilter".into(), json!(v));
    }
    if let Some(v) = &t.description {
        obj.insert("description".into(), json!(v));
    }
    if let Some(v) = &t.friendly_name {
        obj.insert("friendlyName".into(), json!(v));
    }
    if !t.labels.is_empty() {
        obj.insert("labels".into(), json!(t.labels));
    }
    out
}

/// An entry of `tables.list` (no schema, as in the real API).
pub(super) fn table_list_entry(t: &Table, location: &str) -> Value {
    let mut entry = table_json(t, 0, location);
    let obj = entry.as_object_mut().expect("object");
    for key in [
        "schema",
        "numRows",
        "etag",
        "selfLink",
        "lastModifiedTime",
        "description",
    ] {
        obj.remove(key);
    }
    entry
}

/// The columns named by `selectedFields` (top-level names), in the order asked for: Google's
/// Python client pairs the returned cells with its `selected_fields` list position by position.
pub(super) fn select_fields(
    schema: &TableSchema,
    selected: &str,
) -> Result<TableSchema, RestError> {
    let mut fields: Vec<kbq_core::table_schema::TableFieldSchema> = Vec::new();
    for name in selected.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let column = schema
            .fields
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| RestError::Invalid(format!("Invalid field selection {name}")))?;
        if !fields.iter().any(|f| f.name == column.name) {
            fields.push(column.clone());
        }
    }
    Ok(TableSchema { fields })
}
