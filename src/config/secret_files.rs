//! Secrets read from files (`*_file`, `property_files`): a Kubernetes Secret mounted as files
//! keeps them out of the environment, which `/proc`, crash reports and child processes can see.
//! Read once by `Config::load`, before validation; each file's value replaces its field, so the
//! rest of the sink sees one source. Errors name the field and the file, never the contents.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Config, ConfigError, Properties, Secret, validate::quoted_key};

impl Config {
    /// Reads every secret file into its field; every problem is reported at once.
    pub fn read_secret_files(&mut self) -> Result<(), Vec<ConfigError>> {
        let mut errors = Vec::new();
        if let Some(sr) = &mut self.schema_registry {
            read_secret(
                "schema_registry.password",
                &mut sr.password,
                sr.password_file.take(),
                &mut errors,
            );
            read_secret(
                "schema_registry.bearer_token",
                &mut sr.bearer_token,
                sr.bearer_token_file.take(),
                &mut errors,
            );
        }
        read_properties(
            "kafka",
            &mut self.kafka.properties,
            std::mem::take(&mut self.kafka.property_files),
            &mut errors,
        );
        if let Some(dl) = &mut self.dead_letter {
            read_properties(
                "dead_letter",
                &mut dl.properties,
                std::mem::take(&mut dl.property_files),
                &mut errors,
            );
        }
        match errors.is_empty() {
            true => Ok(()),
            false => Err(errors),
        }
    }
}

fn read_secret(
    field: &str,
    value: &mut Option<Secret>,
    file: Option<PathBuf>,
    errors: &mut Vec<ConfigError>,
) {
    let Some(file) = file else { return };
    let path = format!("{field}_file");
    if value.is_some() {
        errors.push(ConfigError::at(
            path,
            format!("set either {field} or {field}_file, not both"),
        ));
        return;
    }
    match read(&file) {
        Ok(text) => *value = Some(Secret::new(text)),
        Err(message) => errors.push(ConfigError::at(path, message)),
    }
}

fn read_properties(
    section: &str,
    properties: &mut Properties,
    files: BTreeMap<String, PathBuf>,
    errors: &mut Vec<ConfigError>,
) {
    for (key, file) in files {
        let path = format!("{section}.property_files.{}", quoted_key(&key));
        if properties.contains_key(&key) {
            errors.push(ConfigError::at(
                path,
                format!("also set in {section}.properties: set it in one place"),
            ));
            continue;
        }
        match read(&file) {
            Ok(text) => {
                properties.insert(key, text);
            }
            Err(message) => errors.push(ConfigError::at(path, message)),
        }
    }
}

/// The file's text without one trailing newline (as `kubectl create secret --from-file` and
/// editors leave it).
fn read(file: &Path) -> Result<String, String> {
    let mut text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}
