//! A whole emulator on a loopback port and a raw HTTP client for the REST tests: requests are
//! built byte by byte, so a test can send what Google's clients send (gzip bodies, method
//! overrides) and read BigQuery's error JSON back.

// Not every helper has a caller yet in this binary's REST tests.
#![allow(dead_code)]

use std::sync::Arc;

use bytes::Bytes;
use kbq_core::table_schema::TableSchema;
use kbq_emulator::rows::RowCodec;
use kbq_emulator::server::{Emulator, EmulatorConfig};
use kbq_emulator::store::RowBatch;
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, Value as Pv};
use prost_types::{DescriptorProto, FileDescriptorProto};
use serde_json::{Value, json};

pub struct Rest {
    pub emulator: Emulator,
    pub base: String,
    pub http: reqwest::Client,
}

pub async fn start() -> Rest {
    let emulator = Emulator::start(EmulatorConfig::local()).await.unwrap();
    let base = format!("http://{}/bigquery/v2/projects/p", emulator.addr);
    Rest {
        emulator,
        base,
        http: reqwest::Client::new(),
    }
}

/// The status and the JSON body (`Null` when empty) of a response.
pub async fn read(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    (status, value)
}

impl Rest {
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{path}", self.base))
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.request(method, path);
        if let Some(body) = body {
            req = req
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        read(req.send().await.unwrap()).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::DELETE, path, None).await
    }

    pub async fn dataset(&self, id: &str) {
        let (status, body) = self
            .post(
                "/datasets",
                json!({"datasetReference": {"projectId": "p", "datasetId": id}}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }

    pub async fn table(&self, dataset: &str, id: &str, fields: Value) -> Value {
        let (status, body) = self
            .post(
                &format!("/datasets/{dataset}/tables"),
                json!({
                    "tableReference": {"projectId": "p", "datasetId": dataset, "tableId": id},
                    "schema": {"fields": fields},
                }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Runs `sql` through `jobs.query`.
    pub async fn query(&self, sql: &str) -> (u16, Value) {
        self.post(
            "/queries",
            json!({"query": sql, "useLegacySql": false, "formatOptions": {"useInt64Timestamp": true}}),
        )
        .await
    }

    /// Appends rows (each a list of field values by name) to the table's `_default` stream, as
    /// the gRPC service would after validating them.
    pub fn append(
        &self,
        dataset: &str,
        table: &str,
        descriptor: &DescriptorProto,
        rows: &[Vec<(&str, Pv)>],
    ) {
        let name = format!("projects/p/datasets/{dataset}/tables/{table}/_default");
        let store = &self.emulator.store;
        let stream = store.open_stream(&name).unwrap();
        let schema: TableSchema = store.get_table(stream.table()).unwrap().schema.clone();
        let codec = Arc::new(RowCodec::compile(descriptor, &schema).unwrap());
        let mut pool = DescriptorPool::new();
        pool.add_file_descriptor_proto(FileDescriptorProto {
            name: Some("BqMessage.proto".into()),
            syntax: Some("proto2".into()),
            message_type: vec![descriptor.clone()],
            ..Default::default()
        })
        .unwrap();
        let message = pool.get_message_by_name(descriptor.name()).unwrap();
        let mut encoded = Vec::new();
        for row in rows {
            let mut m = DynamicMessage::new(message.clone());
            for (field, value) in row {
                m.set_field_by_name(field, value.clone());
            }
            let bytes = m.encode_to_vec();
            codec.validate(&bytes).unwrap();
            encoded.push(Bytes::from(bytes));
        }
        let batch = RowBatch {
            rows: encoded,
            codec,
        };
        store.append(&stream, None, batch, &name).unwrap();
    }
}

/// Checks BigQuery's error JSON: code, reason, status and a part of the message.
pub fn assert_error(body: &Value, code: u16, reason: &str, message: &str) {
    assert_eq!(body["error"]["code"], code, "{body}");
    assert_eq!(body["error"]["errors"][0]["reason"], reason, "{body}");
    let got = body["error"]["message"].as_str().unwrap();
    assert!(got.contains(message), "{got} does not contain {message}");
    let status = match (code, reason) {
        (404, _) => "NOT_FOUND",
        (409, _) => "ALREADY_EXISTS",
        (400, "resourceInUse") | (412, _) => "FAILED_PRECONDITION",
        (400, _) => "INVALID_ARGUMENT",
        _ => "INTERNAL",
    };
    assert_eq!(body["error"]["status"], status, "{body}");
}
