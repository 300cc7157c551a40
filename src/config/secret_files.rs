//! Secrets read from files (`*_file`, `property_files`): a Kubernetes Secret mounted as files
//! keeps them out of the environment, which `/proc`, crash reports and child processes can see.
//! Read once by `Config::load`, before validation; each file's value replaces its field, so the
//! rest of the sink sees one source. Errors name the field and the file, never the contents.
//! The keys of `mask … hash` transforms are read here too, from a file or an environment
//! variable, so that the transcoder never does I/O.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Config, ConfigError, Properties, Secret, validate::quoted_key};
use kbq_transcode::transforms::{KeySource, MaskField, Transform};

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
        read_hash_keys(
            "bigquery.transforms",
            &mut self.bigquery.transforms,
            &mut errors,
        );
        for (i, r) in self.routes.iter_mut().enumerate() {
            if let Some(list) = &mut r.transforms {
                read_hash_keys(&format!("routes[{i}].transforms"), list, &mut errors);
            }
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

/// Reads the key of each `mask … hash` of `list` (at `path`) from its file or variable.
fn read_hash_keys(path: &str, list: &mut [Transform], errors: &mut Vec<ConfigError>) {
    for (i, t) in list.iter_mut().enumerate() {
        let Transform::Mask(MaskField { key: Some(key), .. }) = t else {
            continue;
        };
        let at = format!("{path}[{i}].key");
        let bytes = match &key.source {
            KeySource::File(file) => std::fs::read(file)
                .map(|mut b| {
                    // As `read`: one trailing newline is the editor's, not the key's.
                    if b.ends_with(b"\n") {
                        b.pop();
                        if b.ends_with(b"\r") {
                            b.pop();
                        }
                    }
                    b
                })
                .map_err(|e| format!("cannot read {}: {e}", file.display())),
            KeySource::Env(name) => std::env::var_os(name)
                .map(|v| v.into_encoded_bytes())
                .ok_or_else(|| format!("the environment variable {name} is not set")),
        };
        match bytes {
            Ok(b) if b.is_empty() => errors.push(ConfigError::at(at, "the key is empty")),
            Ok(b) => key.set(b),
            Err(message) => errors.push(ConfigError::at(at, message)),
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
