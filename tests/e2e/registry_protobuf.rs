//! Protobuf schemas through the registry client against the tests' registry
//! (`tests/support/registry.rs`): references resolved recursively through subject versions, the
//! compiled schema cached by id, and the error classes of a schema that cannot be used.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use kafka_bigquery_sink::registry::{RegistryConfig, RegistryError, SchemaRegistry};
use kbq_transcode::protobuf::MessagePath;
use serde_json::{Value as Json, json};
use support::registry::Registry;

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

/// Ids 1 and 2 reference `money-subject` and `missing-subject` version 3 (the first holds
/// `MONEY`, which references `currency-subject` version 3); 3 is Avro and 4 does not parse.
fn dump() -> Json {
    let reference =
        |name: &str, subject: &str| json!({"name": name, "subject": subject, "version": 3});
    json!({
        "ids": {
            "1": {
                "schema": ROOT,
                "schemaType": "PROTOBUF",
                "references": [reference("common/money.proto", "money-subject")],
            },
            "2": {
                "schema": ROOT,
                "schemaType": "PROTOBUF",
                "references": [reference("common/money.proto", "missing-subject")],
            },
            "3": {"schema": "{\"type\":\"string\"}"},
            "4": {"schema": "syntax = \"proto3\"; message {", "schemaType": "PROTOBUF"},
        },
        "subjects": {
            "money-subject": {"3": {
                "subject": "money-subject", "version": 3, "id": 10, "schema": MONEY,
                "schemaType": "PROTOBUF",
                "references": [reference("common/currency.proto", "currency-subject")],
            }},
            "currency-subject": {"3": {
                "subject": "currency-subject", "version": 3, "id": 11, "schema": CURRENCY,
                "schemaType": "PROTOBUF",
            }},
        },
    })
}

async fn start() -> (Arc<Registry>, SchemaRegistry) {
    let (addr, server) = Registry::serve_dump(dump()).await;
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
    assert_eq!(server.id_requests(1), 1);
    assert_eq!(server.version_requests("money-subject", "3"), 1);
    assert_eq!(server.version_requests("currency-subject", "3"), 1);
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
