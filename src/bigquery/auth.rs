//! Credentials for Google's APIs: Application Default Credentials (GKE Workload Identity, a key
//! file named by `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's file, the metadata server), an explicit
//! service-account key file, or none (the emulator).

use std::path::Path;

use google_cloud_auth::credentials::{self, CacheableResource};
use http::{Extensions, HeaderMap};

/// The scope the sink needs: it writes data and reads/patches table metadata.
const BIGQUERY_SCOPE: &str = "https://www.googleapis.com/auth/bigquery";

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot build google credentials: {0}")]
    Build(String),
    #[error("cannot read key file {path}: {reason}")]
    KeyFile { path: String, reason: String },
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
