//! The Schema Registry answers with the configured credentials and CA.

use super::Finding;
use crate::config::Config;
use crate::registry::{RegistryConfig, SchemaRegistry, SubjectError};

/// The registry answers with its credentials and CA: the subject of each topic is looked up
/// (a subject not found is an answer too).
pub(super) async fn check_registry<'a>(
    config: &Config,
    topics: impl Iterator<Item = &'a String>,
    findings: &mut Vec<Finding>,
) {
    let Some(sr) = &config.schema_registry else {
        return;
    };
    let fix = "check schema_registry.url, its credentials (username/password or bearer_token) \
               and ca_file";
    let registry = match RegistryConfig::from_settings(sr)
        .and_then(|c| SchemaRegistry::new(c).map_err(anyhow::Error::from))
    {
        Ok(r) => r,
        Err(e) => {
            findings.push(Finding::fail("schema registry", format!("{e:#}"), fix));
            return;
        }
    };
    let Some(topic) = topics.into_iter().next() else {
        return;
    };
    let subject = sr.table_subject.replace("{topic}", topic);
    match registry.latest(&subject).await {
        Ok(_) => findings.push(Finding::ok(
            "schema registry",
            format!("reachable; subject {subject} has a schema"),
        )),
        Err(SubjectError::NotFound { .. }) => findings.push(Finding::ok(
            "schema registry",
            format!("reachable (subject {subject} is not registered)"),
        )),
        Err(e) => findings.push(Finding::fail("schema registry", e.to_string(), fix)),
    }
}
