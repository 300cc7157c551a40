//! Google credential files (`bigquery.credentials: {file: PATH}` or `{env: VAR}`): where the file
//! is, and which of the types Google's auth libraries read from a file it holds. `validate` reads
//! the file through here (offline: the file is local), and so does the daemon before it hands the
//! JSON to google-cloud-auth, so both refuse the same files with the same words.

use std::path::PathBuf;

use crate::config::Credentials;

/// The `type` of a credential file, as Google's auth libraries name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialType {
    /// A service-account key (`gcloud iam service-accounts keys create`).
    ServiceAccount,
    /// A user's refresh token (`gcloud auth application-default login`).
    AuthorizedUser,
    /// Workload identity federation: a token from another identity provider (a file, a URL, AWS,
    /// an executable) exchanged at Google's security token service.
    ExternalAccount,
    /// Workforce identity federation: a user of another identity provider, logged in by gcloud.
    ExternalAccountAuthorizedUser,
    /// Another credential that impersonates a service account
    /// (`gcloud auth application-default login --impersonate-service-account`).
    ImpersonatedServiceAccount,
}

impl CredentialType {
    /// Every type, in the spelling of the file's `type` field.
    pub const ALL: [(&'static str, CredentialType); 5] = [
        ("service_account", CredentialType::ServiceAccount),
        ("authorized_user", CredentialType::AuthorizedUser),
        ("external_account", CredentialType::ExternalAccount),
        (
            "external_account_authorized_user",
            CredentialType::ExternalAccountAuthorizedUser,
        ),
        (
            "impersonated_service_account",
            CredentialType::ImpersonatedServiceAccount,
        ),
    ];

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("", |(name, _)| name)
    }
}

/// Why a credential file cannot be used. The message never carries the file's contents.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CredentialFileError {
    #[error("the environment variable {0} is not set (it names the credential file)")]
    EnvUnset(String),
    #[error("cannot read {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("{path} is not JSON: {reason}")]
    NotJson { path: String, reason: String },
    #[error("{path} has no string field `type`: it is not a Google credential file")]
    NoType { path: String },
    #[error("{path} has type `{found}`; the types read from a file are {known}")]
    UnknownType {
        path: String,
        found: String,
        known: String,
    },
}

/// A credential file read and recognized.
#[derive(Debug)]
pub struct CredentialFile {
    pub path: PathBuf,
    pub kind: CredentialType,
    pub json: serde_json::Value,
}

/// The file the credentials name, for the forms that name one (`file`, `env`, `key_file`).
pub fn path_of(credentials: &Credentials) -> Result<Option<PathBuf>, CredentialFileError> {
    match credentials {
        Credentials::File(path) | Credentials::KeyFile(path) => Ok(Some(path.clone())),
        Credentials::Env(var) => match std::env::var_os(var) {
            Some(value) if !value.is_empty() => Ok(Some(PathBuf::from(value))),
            _ => Err(CredentialFileError::EnvUnset(var.clone())),
        },
        Credentials::Adc | Credentials::None => Ok(None),
    }
}

/// Reads the file and recognizes its `type`.
pub fn read(path: PathBuf) -> Result<CredentialFile, CredentialFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read(&path).map_err(|e| CredentialFileError::Unreadable {
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    // serde_json's messages name a line and column, never the text around them.
    let json: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| CredentialFileError::NotJson {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
    let Some(found) = json.get("type").and_then(serde_json::Value::as_str) else {
        return Err(CredentialFileError::NoType { path: shown });
    };
    let Some(kind) = CredentialType::ALL
        .iter()
        .find(|(name, _)| *name == found)
        .map(|(_, t)| *t)
    else {
        return Err(CredentialFileError::UnknownType {
            path: shown,
            found: found.to_string(),
            known: CredentialType::ALL
                .iter()
                .map(|(name, _)| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    Ok(CredentialFile { path, kind, json })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn every_type_is_recognized_and_others_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (name, kind) in CredentialType::ALL {
            let path = write(&dir, name, &format!(r#"{{"type": "{name}"}}"#));
            assert_eq!(read(path).unwrap().kind, kind);
            assert_eq!(kind.name(), name);
        }
        let gdch = write(&dir, "gdch", r#"{"type": "gdch_service_account"}"#);
        let err = read(gdch).unwrap_err().to_string();
        assert!(err.contains("has type `gdch_service_account`"), "{err}");
        assert!(err.contains("`impersonated_service_account`"), "{err}");
        let untyped = write(&dir, "untyped", r#"{"client_email": "x"}"#);
        assert!(matches!(
            read(untyped),
            Err(CredentialFileError::NoType { .. })
        ));
    }

    #[test]
    fn a_file_that_is_not_json_is_refused_without_its_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "key.pem", "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n");
        let err = read(path).unwrap_err().to_string();
        assert!(err.contains("is not JSON"), "{err}");
        assert!(!err.contains("c2VjcmV0"), "{err}");
        let missing = read(dir.path().join("absent.json")).unwrap_err();
        assert!(matches!(missing, CredentialFileError::Unreadable { .. }));
    }
}
