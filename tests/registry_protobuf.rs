//! Protobuf schemas through the registry client against an in-test server speaking the
//! Confluent API: references resolved recursively through subject versions, the compiled schema
//! cached by id, and the error classes of a schema that cannot be used.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kafka_bigquery_sink::registry::{RegistryConfig, RegistryError, SchemaRegistry};
use kafka_bigquery_sink::transcode::protobuf::MessagePath;
use serde_json::json;
use tokio::net::TcpListener;

const ROOT: &str = r#"syntax = "proto3";
package shop;
import "common/money.proto";
import "google/protobuf/timestamp.proto";
message Order { common.Money total = 1; google.protobuf.Timestamp at = 2; }
"#;
const MONEY: &str = r#"syntax = "proto3";
package common;
import "common/currency.proto";
message Money { Currency currency = 1; int64 units = 2; }
"#;
const CURRENCY: &str = r#"syntax = "proto3";
package common;
message Currency { string code = 1; }
"#;

#[derive(Default)]
struct Server {
    requests: Mutex<HashMap<String, usize>>,
}

async fn by_id(State(s): State<Arc<Server>>, Path(id): Path<u32>) -> Response {
    *s.requests
        .lock()
        .unwrap()
        .entry(format!("id {id}"))
        .or_default() += 1;
    let reference =
        |name: &str, subject: &str| json!({"name": name, "subject": subject, "version": 3});
    match id {
        1 => axum::Json(json!({
            "schema": ROOT,
            "schemaType": "PROTOBUF",
            "references": [reference("common/money.proto", "money-subject")],
        }))
        .into_response(),
        2 => axum::Json(json!({
            "schema": ROOT,
            "schemaType": "PROTOBUF",
            "references": [reference("common/money.proto", "missing-subject")],
        }))
        .into_response(),
        3 => axum::Json(json!({"schema": "{\"type\":\"string\"}"})).into_response(),
        4 => axum::Json(
            json!({"schema": "syntax = \"proto3\"; message {", "schemaType": "PROTOBUF"}),
        )
        .into_response(),
        _ => (StatusCode::NOT_FOUND, r#"{"error_code":40403}"#).into_response(),
    }
}

async fn by_version(
    State(s): State<Arc<Server>>,
    Path((subject, version)): Path<(String, u32)>,
) -> Response {
    *s.requests
        .lock()
        .unwrap()
        .entry(format!("{subject} {version}"))
        .or_default() += 1;
    match (subject.as_str(), version) {
        ("money-subject", 3) => axum::Json(json!({
            "subject": subject, "version": 3, "id": 10, "schema": MONEY, "schemaType": "PROTOBUF",
            "references": [{"name": "common/currency.proto", "subject": "currency-subject", "version": 3}],
        }))
        .into_response(),
        ("currency-subject", 3) => axum::Json(json!({
            "subject": subject, "version": 3, "id": 11, "schema": CURRENCY, "schemaType": "PROTOBUF",
        }))
        .into_response(),
        _ => (StatusCode::NOT_FOUND, r#"{"error_code":40401}"#).into_response(),
    }
}

async fn start() -> (Arc<Server>, SchemaRegistry) {
    let server = Arc::new(Server::default());
    let app = Router::new()
        .route("/schemas/ids/{id}", get(by_id))
        .route("/subjects/{subject}/versions/{version}", get(by_version))
        .with_state(server.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let registry = SchemaRegistry::new(RegistryConfig {
        url: format!("http://{addr}"),
        max_attempts: 2,
        min_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
        not_found_grace: Duration::ZERO,
        ..RegistryConfig::default()
    })
    .unwrap();
    (server, registry)
}

#[tokio::test]
async fn references_resolve_recursively_and_the_schema_is_cached_by_id() {
    let (server, registry) = start().await;
    let first = registry.protobuf_schema(1).await.unwrap();
    let order = first.schema.message(&MessagePath::FIRST).unwrap();
    assert_eq!(order.full_name(), "shop.Order");
    let money = order.get_field_by_name("total").unwrap().kind();
    let currency = money
        .as_message()
        .unwrap()
        .get_field_by_name("currency")
        .unwrap()
        .kind();
    assert_eq!(
        currency.as_message().unwrap().full_name(),
        "common.Currency"
    );
    let again = registry.protobuf_schema(1).await.unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    let requests = server.requests.lock().unwrap().clone();
    assert_eq!(requests.get("id 1"), Some(&1));
    assert_eq!(requests.get("money-subject 3"), Some(&1));
    assert_eq!(requests.get("currency-subject 3"), Some(&1));
}

#[tokio::test]
async fn schemas_that_cannot_be_used_are_per_record_errors() {
    let (_server, registry) = start().await;
    for (id, needle) in [
        (2, "missing-subject"),
        (3, "not PROTOBUF"),
        (4, "protobuf schema"),
    ] {
        let err = registry.protobuf_schema(id).await.unwrap_err();
        assert!(
            matches!(err, RegistryError::Unusable { .. }) && err.to_string().contains(needle),
            "id {id}: {err}"
        );
        assert!(!err.is_retryable());
    }
    let err = registry.protobuf_schema(99).await.unwrap_err();
    assert!(matches!(err, RegistryError::NotFound { .. }), "{err}");
    // An Avro lookup of a Protobuf id names the type.
    let err = registry.schema(1).await.unwrap_err();
    assert!(err.to_string().contains("PROTOBUF is not AVRO"), "{err}");
}
