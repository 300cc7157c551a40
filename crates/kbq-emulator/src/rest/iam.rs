//! `tables.testIamPermissions`. The emulator has no identities: every caller holds every
//! BigQuery permission on an existing table, so the answer is the `bigquery.*` permissions asked
//! for, as BigQuery answers a caller who holds them all, less those a `deny` fault rule withholds
//! (faults.rs); a `fail` rule answers its code's REST error.

use axum::body::Bytes;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::{RestError, RestResult, RestState, ok, parse_body};
use crate::faults::{FaultAction, Rpc};
use crate::store::TableRef;

const SUFFIX: &str = ":testIamPermissions";

/// `POST …/tables/{table}:testIamPermissions`: the `{table}` segment carries the method.
pub(super) async fn table_post(
    State(state): State<RestState>,
    Path((project, dataset, table)): Path<(String, String, String)>,
    body: Bytes,
) -> RestResult {
    let Some(table) = table.strip_suffix(SUFFIX) else {
        return Err(RestError::NotFound(
            "Not found: the emulator does not serve this URL".into(),
        ));
    };
    let r = TableRef::new(project, dataset, table.to_string());
    if state.store.get_table(&r).is_none() {
        return Err(RestError::NotFound(format!(
            "Not found: Table {}",
            r.legacy()
        )));
    }
    let denied = apply_faults(&state, &r).await?;
    let body = parse_body(&body)?;
    let held: Vec<Value> = match &body["permissions"] {
        Value::Array(asked) => asked
            .iter()
            .filter(|p| {
                p.as_str()
                    .is_some_and(|p| p.starts_with("bigquery.") && !denied.iter().any(|d| d == p))
            })
            .cloned()
            .collect(),
        Value::Null => Vec::new(),
        _ => {
            return Err(RestError::Invalid(
                "Invalid JSON payload received. permissions must be a list.".into(),
            ));
        }
    };
    if held.is_empty() {
        // BigQuery leaves the field out when none is held.
        return ok(json!({}));
    }
    ok(json!({ "permissions": held }))
}

/// The fault rules on `TestIamPermissions` for this table: the permissions `deny` rules withhold,
/// or the REST error of a `fail` rule's code.
async fn apply_faults(state: &RestState, r: &TableRef) -> Result<Vec<String>, RestError> {
    let target = format!(
        "projects/{}/datasets/{}/tables/{}",
        r.project, r.dataset, r.table
    );
    let mut denied = Vec::new();
    for action in state.faults.check(Rpc::TestIamPermissions, &target) {
        match action {
            FaultAction::Deny { permissions } => denied.extend(permissions),
            FaultAction::Fail { code, message, .. } => {
                let message =
                    message.unwrap_or_else(|| format!("injected fault. Entity: {target}"));
                return Err(match code.0 {
                    tonic::Code::PermissionDenied => RestError::Denied(message),
                    tonic::Code::NotFound => RestError::NotFound(message),
                    tonic::Code::Unavailable => RestError::Unavailable(message),
                    tonic::Code::InvalidArgument => RestError::Invalid(message),
                    _ => RestError::Backend(message),
                });
            }
            FaultAction::Delay { ms } => {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await
            }
            // Refused at install for this method (faults.rs).
            FaultAction::Drop { .. } => {}
        }
    }
    Ok(denied)
}
