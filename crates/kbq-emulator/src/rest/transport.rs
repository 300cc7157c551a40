//! What Google's REST clients do to a request before BigQuery routes it: a gzip-encoded body
//! (`Content-Encoding: gzip`, the Java client's default for request bodies) and
//! `POST` + `X-HTTP-Method-Override` (the Java client's way to send PATCH over a transport that
//! has no PATCH). Both are undone here, before routing, so every handler sees the plain JSON body
//! under the method the caller meant.

use std::io::Read as _;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, header};

use super::RestError;

/// The most bytes a request body may hold, compressed or once decompressed: the limit the
/// emulator's handlers already apply to a plain body (axum's default).
pub(super) const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// The header Google's clients send with `POST` to carry another method.
const METHOD_OVERRIDE: &str = "x-http-method-override";

/// Rewrites the request as the caller meant it: the overridden method, the decoded body.
pub(super) async fn decode(request: Request) -> Result<Request, RestError> {
    let (mut parts, body) = request.into_parts();
    if let Some(method) = override_method(&parts.method, &parts.headers)? {
        parts.method = method;
        parts.headers.remove(METHOD_OVERRIDE);
    }
    let Some(encoding) = parts.headers.get(header::CONTENT_ENCODING).cloned() else {
        return Ok(Request::from_parts(parts, body));
    };
    if !is_gzip(&encoding) {
        return Err(RestError::Invalid(format!(
            "Unsupported Content-Encoding {:?}: the request body may be identity or gzip",
            String::from_utf8_lossy(encoding.as_bytes())
        )));
    }
    let compressed = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| RestError::Invalid(format!("Cannot read the request body: {e}")))?;
    let plain = gunzip(&compressed)?;
    parts.headers.remove(header::CONTENT_ENCODING);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, plain.len().into());
    Ok(Request::from_parts(parts, Body::from(plain)))
}

fn is_gzip(encoding: &HeaderValue) -> bool {
    encoding
        .to_str()
        .is_ok_and(|v| v.trim().eq_ignore_ascii_case("gzip"))
}

/// The method a `POST` carries in `X-HTTP-Method-Override`. The emulator's resources answer
/// PATCH, PUT and DELETE through it; any other value is refused rather than ignored, so a request
/// is never served as a method its sender did not mean.
fn override_method(
    method: &Method,
    headers: &axum::http::HeaderMap,
) -> Result<Option<Method>, RestError> {
    let Some(value) = headers.get(METHOD_OVERRIDE) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .unwrap_or_default()
        .trim()
        .to_ascii_uppercase();
    if *method != Method::POST {
        return Err(RestError::Invalid(format!(
            "X-HTTP-Method-Override is honoured on POST only, not on {method}"
        )));
    }
    match text.as_str() {
        "PATCH" => Ok(Some(Method::PATCH)),
        "PUT" => Ok(Some(Method::PUT)),
        "DELETE" => Ok(Some(Method::DELETE)),
        "POST" => Ok(None),
        _ => Err(RestError::Invalid(format!(
            "Unsupported X-HTTP-Method-Override {text:?}: the emulator serves PATCH, PUT and DELETE through it"
        ))),
    }
}

/// Decompresses a gzip body, refusing one that is not gzip or that grows past the limit.
fn gunzip(compressed: &Bytes) -> Result<Bytes, RestError> {
    let mut plain = Vec::new();
    let mut decoder =
        flate2::read::MultiGzDecoder::new(compressed.as_ref()).take(MAX_BODY_BYTES as u64 + 1);
    decoder.read_to_end(&mut plain).map_err(|e| {
        RestError::Invalid(format!(
            "Invalid request body: Content-Encoding is gzip but the body is not valid gzip ({e})"
        ))
    })?;
    if plain.len() > MAX_BODY_BYTES {
        return Err(RestError::Invalid(format!(
            "Request body too large: more than {MAX_BODY_BYTES} bytes once decompressed"
        )));
    }
    Ok(Bytes::from(plain))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn gzip(data: &[u8]) -> Bytes {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        Bytes::from(e.finish().unwrap())
    }

    #[test]
    fn gzip_round_trips_and_garbage_is_refused() {
        assert_eq!(gunzip(&gzip(b"{\"a\":1}")).unwrap().as_ref(), b"{\"a\":1}");
        let err = gunzip(&Bytes::from_static(b"{\"a\":1}")).unwrap_err();
        assert!(err.to_string().contains("not valid gzip"), "{err}");
        let truncated = gzip(b"{\"a\":1}");
        assert!(gunzip(&truncated.slice(..truncated.len() - 4)).is_err());
    }

    #[test]
    fn a_bomb_stops_at_the_limit() {
        let bomb = gzip(&vec![b' '; MAX_BODY_BYTES + 10]);
        assert!(bomb.len() < MAX_BODY_BYTES / 100);
        let err = gunzip(&bomb).unwrap_err();
        assert!(err.to_string().contains("too large"), "{err}");
    }
}
