//! Credentials for Google's APIs: Application Default Credentials (GKE Workload Identity, a key
//! file named by `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's file, the metadata server), a credential
//! file of any type Google's libraries read from a file, an explicit service-account key file, or
//! none (the emulator). Every token exchange (refresh tokens, the security token service,
//! impersonation) is google-cloud-auth's; this file only picks its builder by the file's `type`.

use std::path::Path;

use google_cloud_auth::credentials::{
    self, CacheableResource, external_account, external_account_authorized_user, impersonated,
    service_account, user_account,
};
use http::{Extensions, HeaderMap};

use crate::bigquery::credential_file::{self, CredentialFile, CredentialType};
use crate::config::Credentials;

/// The scope the sink needs: it writes data and reads/patches table metadata.
const BIGQUERY_SCOPE: &str = "https://www.googleapis.com/auth/bigquery";

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot build google credentials: {0}")]
    Build(String),
    #[error("cannot read key file {path}: {reason}")]
    KeyFile { path: String, reason: String },
    #[error("bigquery.credentials: {0}")]
    File(#[from] credential_file::CredentialFileError),
    #[error("cannot build google credentials from {path} (type {kind}): {reason}")]
    FromFile {
        path: String,
        kind: &'static str,
        reason: String,
    },
    #[error("cannot get an access token: {0}")]
    Token(String),
}

/// Produces the request headers (Authorization, quota project) for each call. Tokens are cached
/// and refreshed in the background by google-cloud-auth, so asking per call is cheap.
#[derive(Clone, Debug)]
pub enum Auth {
    /// No credentials: for the emulator on loopback.
    None,
    Google(credentials::Credentials),
}

impl Auth {
    /// The credentials `bigquery.credentials` configures.
    pub fn configured(credentials: &Credentials) -> Result<Auth, AuthError> {
        match credentials {
            Credentials::Adc => Auth::application_default(),
            Credentials::KeyFile(path) => Auth::service_account_key_file(path),
            Credentials::None => Ok(Auth::None),
            Credentials::File(_) | Credentials::Env(_) => {
                let path = credential_file::path_of(credentials)?
                    .expect("file and env name a credential file");
                Auth::from_file(credential_file::read(path)?)
            }
        }
    }

    /// Credentials of any type a file can hold, built by google-cloud-auth's builder of that
    /// type with the BigQuery scope. An impersonated account's source credentials get the
    /// library's default scope (cloud-platform), which `generateAccessToken` needs.
    pub fn from_file(file: CredentialFile) -> Result<Auth, AuthError> {
        let CredentialFile { path, kind, json } = file;
        let built = match kind {
            CredentialType::ServiceAccount => service_account::Builder::new(json)
                .with_access_specifier(service_account::AccessSpecifier::from_scopes([
                    BIGQUERY_SCOPE,
                ]))
                .build(),
            CredentialType::AuthorizedUser => user_account::Builder::new(json)
                .with_scopes([BIGQUERY_SCOPE])
                .build(),
            CredentialType::ExternalAccount => external_account::Builder::new(json)
                .with_scopes([BIGQUERY_SCOPE])
                .build(),
            // Its scopes were fixed when gcloud logged the user in; the library takes none.
            CredentialType::ExternalAccountAuthorizedUser => {
                external_account_authorized_user::Builder::new(json).build()
            }
            CredentialType::ImpersonatedServiceAccount => impersonated::Builder::new(json)
                .with_scopes([BIGQUERY_SCOPE])
                .build(),
        };
        built.map(Auth::Google).map_err(|e| AuthError::FromFile {
            path: path.display().to_string(),
            kind: kind.name(),
            reason: e.to_string(),
        })
    }

    pub fn application_default() -> Result<Auth, AuthError> {
        credentials::Builder::default()
            .with_scopes([BIGQUERY_SCOPE])
            .build()
            .map(Auth::Google)
            .map_err(|e| AuthError::Build(e.to_string()))
    }

    pub fn service_account_key_file(path: &Path) -> Result<Auth, AuthError> {
        let key_error = |reason: String| AuthError::KeyFile {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| key_error(e.to_string()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| key_error(e.to_string()))?;
        credentials::service_account::Builder::new(json)
            .with_access_specifier(credentials::service_account::AccessSpecifier::from_scopes(
                [BIGQUERY_SCOPE],
            ))
            .build()
            .map(Auth::Google)
            .map_err(|e| AuthError::Build(e.to_string()))
    }

    pub async fn headers(&self) -> Result<HeaderMap, AuthError> {
        match self {
            Auth::None => Ok(HeaderMap::new()),
            Auth::Google(creds) => match creds.headers(Extensions::new()).await {
                Ok(CacheableResource::New { data, .. }) => Ok(data),
                // Only returned when the caller passes an entity tag, which we never do.
                Ok(CacheableResource::NotModified) => Ok(HeaderMap::new()),
                Err(e) => Err(AuthError::Token(e.to_string())),
            },
        }
    }
}
