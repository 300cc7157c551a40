//! The service account: `keySource` and `keyfile` become `bigquery.credentials` (or none:
//! Application Default Credentials); an inline key is never copied.

use std::path::Path;

use super::{MigrateError, Source, refuse};
use crate::bigquery::credential_file;
use crate::migrate::report::Outcome;

/// `bigquery.credentials` as a YAML flow value; `None`: adc.
pub(super) fn credentials(s: &mut Source) -> Result<Option<String>, MigrateError> {
    let key_source = s
        .get("keySource")
        .map(str::to_ascii_uppercase)
        .unwrap_or_else(|| "FILE".into());
    let keyfile = s
        .get("keyfile")
        .filter(|k| !k.is_empty())
        .map(str::to_string);
    let credentials = match (key_source.as_str(), &keyfile) {
        ("APPLICATION_DEFAULT", _) | ("FILE", None) => {
            let text = "bigquery.credentials: adc (Application Default Credentials: GKE Workload Identity, GOOGLE_APPLICATION_CREDENTIALS, the metadata server)";
            s.note("keySource", Outcome::Mapped(text.into()));
            if keyfile.is_some() {
                s.note(
                    "keyfile",
                    Outcome::Dropped(
                        "not read with APPLICATION_DEFAULT, as in the connector".into(),
                    ),
                );
            }
            None
        }
        (_, Some(k)) if key_source == "JSON" || k.starts_with('{') => {
            let why = "the key is inline in the connector config; this sink reads credentials from a file (a mounted Secret): write it to one and set bigquery.credentials: {file: PATH} — or better, use no key (docs/operations.md#credentials). The YAML keeps adc until then; the key is not copied";
            s.note("keyfile", Outcome::NotTranslatable(why.into()));
            s.note("keySource", Outcome::NotTranslatable(why.into()));
            None
        }
        ("FILE", Some(path)) if path.starts_with("${") => {
            s.note(
                "keyfile",
                Outcome::NotTranslatable(
                    "a config provider reference to a key: mount the key as a file and set bigquery.credentials: {file: PATH}; the YAML keeps adc until then".into(),
                ),
            );
            s.note("keySource", Outcome::Mapped("FILE: a path".into()));
            None
        }
        ("FILE", Some(path)) => {
            let quoted = serde_json::to_string(path).expect("a string serializes");
            let readable = credential_file::read(Path::new(path).to_path_buf()).is_ok();
            s.note("keySource", Outcome::Mapped("FILE: a path".into()));
            if readable {
                s.note(
                    "keyfile",
                    Outcome::Mapped(format!(
                        "bigquery.credentials: {{file: {quoted}}} (any credential type; validate reads it). Prefer no key: docs/operations.md#credentials"
                    )),
                );
                Some(format!("{{file: {quoted}}}"))
            } else {
                s.note(
                    "keyfile",
                    Outcome::Changed(format!(
                        "bigquery.credentials: {{key_file: {quoted}}}: the path on the Connect worker, not readable here, so it is read when the sink starts and must hold a service-account key; for another type (or to have validate read it) use {{file: PATH}}. Prefer no key: docs/operations.md#credentials"
                    )),
                );
                Some(format!("{{key_file: {quoted}}}"))
            }
        }
        (other, _) => {
            return Err(refuse(
                "keySource",
                format!("`{other}`: the connector knows FILE, JSON and APPLICATION_DEFAULT"),
            ));
        }
    };
    Ok(credentials)
}
