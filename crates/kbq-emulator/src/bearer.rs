//! `--require-token`: every BigQuery call (gRPC and REST) must carry `Authorization: Bearer
//! TOKEN`, or it is refused as BigQuery refuses it: UNAUTHENTICATED on gRPC, 401 with the REST
//! error body and a `WWW-Authenticate` challenge. The admin routes (`/emulator/v1/...`) stay open.
//! Off by default: the emulator accepts any credentials, and none. With it, a test proves that
//! a client's credentials reached the service (the sink's credential files, through a local token
//! endpoint that issued exactly this token).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

const MISSING: &str = "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.";
const INVALID: &str = "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.";

/// The token every call must carry.
#[derive(Clone, Debug)]
pub struct RequiredToken(pub Arc<str>);

/// The middleware: passes a call with the token, answers any other as BigQuery does.
pub async fn check(
    State(required): State<RequiredToken>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path().starts_with("/emulator/") {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let refusal = match presented {
        None => MISSING,
        Some(value) => match value.strip_prefix("Bearer ") {
            Some(token) if token == &*required.0 => return next.run(request).await,
            _ => INVALID,
        },
    };
    let grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    if grpc {
        return tonic::Status::unauthenticated(refusal).into_http::<Body>();
    }
    let reason = if presented.is_none() {
        "required"
    } else {
        "authError"
    };
    let body = serde_json::json!({
        "error": {
            "code": 401,
            "message": refusal,
            "errors": [{
                "message": refusal,
                "domain": "global",
                "reason": reason,
                "location": "Authorization",
                "locationType": "header",
            }],
            "status": "UNAUTHENTICATED",
        }
    });
    let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"https://accounts.google.com/\""),
    );
    response
}
