//! What Google's Java REST client does to its requests: gzip-encoded bodies and `POST` with
//! `X-HTTP-Method-Override`. Both must reach the resource as the plain request would.

use std::io::Write as _;

use crate::rest_support::{assert_error, read, start};
use reqwest::Method;
use serde_json::{Value, json};

fn gzip(value: &Value) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(value.to_string().as_bytes()).unwrap();
    e.finish().unwrap()
}

#[tokio::test]
async fn a_gzip_body_creates_a_dataset_and_a_table() {
    let emu = start().await;
    let resp = emu
        .request(Method::POST, "/datasets")
        .header("content-type", "application/json; charset=UTF-8")
        .header("content-encoding", "gzip")
        .body(gzip(&json!({"datasetReference": {"projectId": "p", "datasetId": "zipped"}, "location": "EU"})))
        .send()
        .await
        .unwrap();
    let (status, body) = read(resp).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["location"], "EU");
    let resp = emu
        .request(Method::POST, "/datasets/zipped/tables")
        .header("content-encoding", "GZIP")
        .body(gzip(&json!({
            "tableReference": {"projectId": "p", "datasetId": "zipped", "tableId": "t"},
            "schema": {"fields": [{"name": "a", "type": "INT64"}]},
        })))
        .send()
        .await
        .unwrap();
    let (status, body) = read(resp).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["schema"]["fields"][0]["name"], "a");
}

#[tokio::test]
async fn a_body_that_is_not_gzip_is_refused_with_400() {
    let emu = start().await;
    let resp = emu
        .request(Method::POST, "/datasets")
        .header("content-encoding", "gzip")
        .body(json!({"datasetReference": {"datasetId": "plain"}}).to_string())
        .send()
        .await
        .unwrap();
    let (status, body) = read(resp).await;
    assert_eq!(status, 400);
    assert_error(
        &body,
        400,
        "invalid",
        "Content-Encoding is gzip but the body is not valid gzip",
    );
    assert_eq!(emu.get("/datasets/plain").await.0, 404);

    let resp = emu
        .request(Method::POST, "/datasets")
        .header("content-encoding", "br")
        .body("x")
        .send()
        .await
        .unwrap();
    let (status, body) = read(resp).await;
    assert_eq!(status, 400);
    assert_error(&body, 400, "invalid", "Unsupported Content-Encoding \"br\"");
}

#[tokio::test]
async fn post_with_a_method_override_is_served_as_that_method() {
    let emu = start().await;
    emu.dataset("d").await;
    emu.table("d", "t", json!([{"name": "a", "type": "INT64"}]))
        .await;

    // PATCH, gzip-encoded too, as the Java client sends a schema update.
    let resp = emu
        .request(Method::POST, "/datasets/d/tables/t")
        .header("x-http-method-override", "PATCH")
        .header("content-encoding", "gzip")
        .body(gzip(&json!({"schema": {"fields": [
            {"name": "a", "type": "INT64"}, {"name": "b", "type": "STRING"}
        ]}, "description": "patched"})))
        .send()
        .await
        .unwrap();
    let (status, body) = read(resp).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["schema"]["fields"][1]["name"], "b");
    assert_eq!(body["description"], "patched");

    // PUT replaces: the description it leaves out is cleared.
    let resp = emu
        .request(Method::POST, "/datasets/d/tables/t")
        .header("x-http-method-override", "put")
        .body(json!({"schema": body["schema"]}).to_string())
        .send()
        .await
        .unwrap();
    let (status, body) = read(resp).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("description").is_none(), "{body}");

    // DELETE.
    let resp = emu
        .request(Method::POST, "/datasets/d/tables/t")
        .header("x-http-method-override", "DELETE")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(emu.get("/datasets/d/tables/t").await.0, 404);
}

#[tokio::test]
async fn an_override_the_emulator_does_not_serve_is_refused_not_ignored() {
    let emu = start().await;
    emu.dataset("d").await;
    emu.table("d", "t", json!([{"name": "a", "type": "INT64"}]))
        .await;
    let resp = emu
        .request(Method::POST, "/datasets/d/tables/t")
        .header("x-http-method-override", "TRACE")
        .send()
        .await
        .unwrap();
    let (status, body) = read(resp).await;
    assert_eq!(status, 400);
    assert_error(
        &body,
        400,
        "invalid",
        "Unsupported X-HTTP-Method-Override \"TRACE\"",
    );
    let resp = emu
        .request(Method::GET, "/datasets/d/tables/t")
        .header("x-http-method-override", "DELETE")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(emu.get("/datasets/d/tables/t").await.0, 200);
}
