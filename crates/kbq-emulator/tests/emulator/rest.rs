//! The emulator's REST API over real HTTP: resource shapes, errors in BigQuery's JSON, schema
//! evolution rules, `tabledata.list` paging and the recovery query.

use std::sync::Arc;

use bytes::Bytes;
use kbq_core::table_schema::TableSchema;
use kbq_emulator::rest;
use kbq_emulator::rows::RowCodec;
use kbq_emulator::store::{RowBatch, Store, StoreConfig};
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, Value as Pv};
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto};
use serde_json::{Value, json};

use crate::rest_support::assert_error;

struct Emulator {
    base: String,
    store: Arc<Store>,
    http: reqwest::Client,
}

async fn start() -> Emulator {
    let store = Store::new(StoreConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = rest::router(store.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Emulator {
        base: format!("http://{addr}/bigquery/v2/projects/p"),
        store,
        http: reqwest::Client::new(),
    }
}

impl Emulator {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
        };
        (status, value)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::PATCH, path, Some(body)).await
    }

    async fn dataset(&self, id: &str) {
        let (status, _) = self
            .post(
                "/datasets",
                json!({"datasetReference": {"projectId": "p", "datasetId": id}}),
            )
            .await;
        assert_eq!(status, 200);
    }

    async fn table(&self, dataset: &str, id: &str, fields: Value) -> Value {
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

    /// Appends rows to the table's `_default` stream, as the gRPC service would.
    fn append(&self, table: &str, descriptor: &DescriptorProto, rows: Vec<Vec<u8>>) {
        let name = format!("projects/p/datasets/d/tables/{table}/_default");
        let stream = self.store.open_stream(&name).unwrap();
        let schema: TableSchema = self.store.get_table(stream.table()).unwrap().schema.clone();
        let codec = Arc::new(RowCodec::compile(descriptor, &schema).unwrap());
        for row in &rows {
            codec.validate(row).unwrap();
        }
        let batch = RowBatch {
            rows: rows.into_iter().map(Bytes::from).collect(),
            codec,
        };
        self.store.append(&stream, None, batch, &name).unwrap();
    }
}

fn field(name: &str, number: i32, t: Type) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(Label::Optional as i32),
        r#type: Some(t as i32),
        ..Default::default()
    }
}

fn events_descriptor() -> DescriptorProto {
    DescriptorProto {
        name: Some("Event".into()),
        field: vec![
            field("topic", 1, Type::String),
            field("partition", 2, Type::Int64),
            field("kafka_offset", 3, Type::Int64),
            field("ts", 4, Type::Int64),
        ],
        ..Default::default()
    }
}

fn event(descriptor: &DescriptorProto, topic: &str, partition: i64, offset: i64) -> Vec<u8> {
    let mut pool = DescriptorPool::new();
    pool.add_file_descriptor_proto(FileDescriptorProto {
        name: Some("BqMessage.proto".into()),
        syntax: Some("proto2".into()),
        message_type: vec![descriptor.clone()],
        ..Default::default()
    })
    .unwrap();
    let mut m = DynamicMessage::new(pool.get_message_by_name(descriptor.name()).unwrap());
    m.set_field_by_name("topic", Pv::String(topic.into()));
    m.set_field_by_name("partition", Pv::I64(partition));
    m.set_field_by_name("kafka_offset", Pv::I64(offset));
    m.set_field_by_name("ts", Pv::I64(1_700_000_000_000_000 + offset));
    m.encode_to_vec()
}

fn events_fields() -> Value {
    json!([
        {"name": "topic", "type": "STRING", "mode": "REQUIRED"},
        {"name": "partition", "type": "INT64"},
        {"name": "kafka_offset", "type": "INTEGER"},
        {"name": "ts", "type": "TIMESTAMP"},
    ])
}

#[tokio::test]
async fn datasets_are_created_read_back_and_refused_twice() {
    let emu = start().await;
    let (status, body) = emu
        .post(
            "/datasets",
            json!({"datasetReference": {"projectId": "p", "datasetId": "d"}, "location": "EU",
                   "labels": {"team": "x"}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["kind"], "bigquery#dataset");
    assert_eq!(body["id"], "p:d");
    assert_eq!(body["location"], "EU");
    assert!(body["creationTime"].is_string());
    let (status, got) = emu.get("/datasets/d").await;
    assert_eq!(status, 200);
    assert_eq!(
        got["datasetReference"],
        json!({"projectId": "p", "datasetId": "d"})
    );
    assert_eq!(got["labels"], json!({"team": "x"}));
    let (status, body) = emu
        .post("/datasets", json!({"datasetReference": {"datasetId": "d"}}))
        .await;
    assert_eq!(status, 409);
    assert_error(&body, 409, "duplicate", "Already Exists: Dataset p:d");
    let (status, body) = emu.get("/datasets/nope").await;
    assert_eq!(status, 404);
    assert_error(&body, 404, "notFound", "Not found: Dataset p:nope");
}

#[tokio::test]
async fn tables_keep_partitioning_clustering_and_metadata() {
    let emu = start().await;
    emu.dataset("d").await;
    let (status, body) = emu
        .post(
            "/datasets/d/tables",
            json!({
                "tableReference": {"projectId": "p", "datasetId": "d", "tableId": "t"},
                "schema": {"fields": events_fields()},
                "timePartitioning": {"type": "DAY", "field": "ts"},
                "clustering": {"fields": ["topic", "partition"]},
                "requirePartitionFilter": true,
                "description": "events",
                "labels": {"env": "test"},
            }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, t) = emu.get("/datasets/d/tables/t").await;
    assert_eq!(status, 200);
    assert_eq!(t["kind"], "bigquery#table");
    assert_eq!(t["id"], "p:d.t");
    assert_eq!(
        t["tableReference"],
        json!({"projectId": "p", "datasetId": "d", "tableId": "t"})
    );
    assert_eq!(t["timePartitioning"], json!({"type": "DAY", "field": "ts"}));
    assert_eq!(t["clustering"], json!({"fields": ["topic", "partition"]}));
    assert_eq!(t["requirePartitionFilter"], true);
    assert_eq!(t["description"], "events");
    assert_eq!(t["labels"], json!({"env": "test"}));
    assert_eq!(t["numRows"], "0");
    assert_eq!(t["location"], "US");
    // Legacy type names come back, as from the real API.
    assert_eq!(t["schema"]["fields"][1]["type"], "INTEGER");
    assert_eq!(t["schema"]["fields"][0]["mode"], "REQUIRED");

    let (status, body) = emu
        .post(
            "/datasets/d/tables",
            json!({"tableReference": {"tableId": "t"}, "schema": {"fields": events_fields()}}),
        )
        .await;
    assert_eq!(status, 409);
    assert_error(&body, 409, "duplicate", "Already Exists: Table p:d.t");

    let (status, body) = emu
        .post(
            "/datasets/missing/tables",
            json!({"tableReference": {"tableId": "t"}}),
        )
        .await;
    assert_eq!(status, 404);
    assert_error(&body, 404, "notFound", "Not found: Dataset p:missing");

    let (status, list) = emu.get("/datasets/d/tables").await;
    assert_eq!(status, 200);
    assert_eq!(list["tables"][0]["tableReference"]["tableId"], "t");
}

#[tokio::test]
async fn bad_schemas_and_bodies_are_invalid() {
    let emu = start().await;
    emu.dataset("d").await;
    let cases = [
        (
            json!([{"name": "a", "type": "INT64"}, {"name": "A", "type": "STRING"}]),
            "Duplicate(Case Insensitive) field names: a and A",
        ),
        (
            json!([{"name": "r", "type": "RECORD"}]),
            "Field r is type RECORD but has no schema",
        ),
        (
            json!([{"name": "_PARTITIONTIME", "type": "TIMESTAMP"}]),
            "Invalid field name \"_PARTITIONTIME\"",
        ),
        (
            json!([{"name": "x", "type": "FOO"}]),
            "Invalid value for type: FOO",
        ),
    ];
    for (fields, message) in cases {
        let (status, body) = emu
            .post(
                "/datasets/d/tables",
                json!({"tableReference": {"tableId": "t"}, "schema": {"fields": fields}}),
            )
            .await;
        assert_eq!(status, 400, "{body}");
        assert_error(&body, 400, "invalid", message);
    }
    let (status, body) = emu
        .post(
            "/datasets/d/tables",
            json!({"tableReference": {"tableId": "t"}, "schema": {"fields": events_fields()},
                   "timePartitioning": {"type": "DAY", "field": "topic"}}),
        )
        .await;
    assert_eq!(status, 400);
    assert_error(
        &body,
        400,
        "invalid",
        "can only be of type TIMESTAMP, DATE or DATETIME",
    );
    let resp = emu
        .http
        .post(format!("{}/datasets", emu.base))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_error(&body, 400, "invalid", "Invalid JSON payload received.");
}

#[tokio::test]
async fn patch_adds_nullable_columns_and_refuses_every_other_schema_change() {
    let emu = start().await;
    emu.dataset("d").await;
    let created = emu.table("d", "t", events_fields()).await;
    let mut fields = events_fields();
    fields
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "note", "type": "STRING", "mode": "NULLABLE"}));
    let (status, body) = emu
        .patch(
            "/datasets/d/tables/t",
            json!({"schema": {"fields": fields.clone()}, "description": "now with notes"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["schema"]["fields"][4]["name"], "note");
    assert_eq!(body["description"], "now with notes");
    assert_ne!(body["etag"], created["etag"]);

    let refused = [
        (
            json!([{"name": "topic", "type": "STRING", "mode": "REQUIRED"}]),
            "Field partition is missing in new schema",
        ),
        (
            {
                let mut f = fields.clone();
                f[1]["type"] = json!("STRING");
                f
            },
            "Field partition has changed type from INTEGER to STRING",
        ),
        (
            {
                let mut f = fields.clone();
                f.as_array_mut()
                    .unwrap()
                    .push(json!({"name": "must", "type": "INT64", "mode": "REQUIRED"}));
                f
            },
            "Cannot add required fields to an existing schema. (field: must)",
        ),
        (
            {
                let mut f = fields.clone();
                f[1]["mode"] = json!("REQUIRED");
                f
            },
            "Field partition has changed mode from NULLABLE to REQUIRED",
        ),
    ];
    for (schema, message) in refused {
        let (status, body) = emu
            .patch(
                "/datasets/d/tables/t",
                json!({"schema": {"fields": schema}}),
            )
            .await;
        assert_eq!(status, 400, "{body}");
        assert_error(
            &body,
            400,
            "invalid",
            "Provided Schema does not match Table p:d.t.",
        );
        assert_error(&body, 400, "invalid", message);
    }
    // The refused changes left the table as it was.
    let (_, t) = emu.get("/datasets/d/tables/t").await;
    assert_eq!(t["schema"]["fields"].as_array().unwrap().len(), 5);

    // REQUIRED relaxes to NULLABLE (and may not go back).
    let mut relaxed = fields.clone();
    relaxed[0]["mode"] = json!("NULLABLE");
    let (status, body) = emu
        .patch(
            "/datasets/d/tables/t",
            json!({"schema": {"fields": relaxed.clone()}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["schema"]["fields"][0]["mode"], "NULLABLE");
    let mut tightened = relaxed.clone();
    tightened[0]["mode"] = json!("REQUIRED");
    let (status, body) = emu
        .patch(
            "/datasets/d/tables/t",
            json!({"schema": {"fields": tightened}}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_error(
        &body,
        400,
        "invalid",
        "Field topic has changed mode from NULLABLE to REQUIRED",
    );

    // PUT replaces the resource: what it leaves out is cleared.
    let (status, body) = emu
        .call(
            reqwest::Method::PUT,
            "/datasets/d/tables/t",
            Some(json!({"tableReference": {"tableId": "t"}, "schema": {"fields": relaxed}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("description").is_none());

    let (status, body) = emu
        .patch("/datasets/d/tables/nope", json!({"description": "x"}))
        .await;
    assert_eq!(status, 404);
    assert_error(&body, 404, "notFound", "Not found: Table p:d.nope");
}

#[tokio::test]
async fn deleted_tables_are_gone() {
    let emu = start().await;
    emu.dataset("d").await;
    emu.table("d", "t", events_fields()).await;
    let (status, _) = emu
        .call(reqwest::Method::DELETE, "/datasets/d/tables/t", None)
        .await;
    assert_eq!(status, 204);
    let (status, body) = emu.get("/datasets/d/tables/t").await;
    assert_eq!(status, 404);
    assert_error(&body, 404, "notFound", "Not found: Table p:d.t");
    let (status, _) = emu
        .call(reqwest::Method::DELETE, "/datasets/d/tables/t", None)
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn tabledata_list_pages_visible_rows_in_the_rest_shape() {
    let emu = start().await;
    emu.dataset("d").await;
    emu.table("d", "t", events_fields()).await;
    let d = events_descriptor();
    emu.append("t", &d, (0..5).map(|i| event(&d, "orders", 0, i)).collect());

    let (status, page) = emu.get("/datasets/d/tables/t/data?maxResults=2").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["kind"], "bigquery#tableDataList");
    assert_eq!(page["totalRows"], "5");
    assert_eq!(page["rows"].as_array().unwrap().len(), 2);
    assert_eq!(
        page["rows"][0],
        json!({"f": [{"v": "orders"}, {"v": "0"}, {"v": "0"}, {"v": "1.7E9"}]})
    );
    let token = page["pageToken"].as_str().unwrap().to_string();
    let (_, next) = emu
        .get(&format!(
            "/datasets/d/tables/t/data?maxResults=10&pageToken={token}"
        ))
        .await;
    assert_eq!(next["rows"].as_array().unwrap().len(), 3);
    assert!(next.get("pageToken").is_none());
    assert_eq!(next["rows"][0]["f"][2]["v"], "2");

    let (_, from) = emu
        .get("/datasets/d/tables/t/data?startIndex=4&formatOptions.useInt64Timestamp=true")
        .await;
    assert_eq!(from["rows"][0]["f"][3]["v"], "1700000000000004");

    // Cells come in the order of selectedFields, as Google's Python client reads them.
    let (_, selected) = emu
        .get("/datasets/d/tables/t/data?maxResults=1&selectedFields=kafka_offset,topic")
        .await;
    assert_eq!(
        selected["rows"][0],
        json!({"f": [{"v": "0"}, {"v": "orders"}]})
    );

    // A column added later reads as NULL for the rows written before it.
    let mut fields = events_fields();
    fields
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "note", "type": "STRING"}));
    let (status, _) = emu
        .patch(
            "/datasets/d/tables/t",
            json!({"schema": {"fields": fields}}),
        )
        .await;
    assert_eq!(status, 200);
    let (_, page) = emu.get("/datasets/d/tables/t/data?maxResults=1").await;
    assert_eq!(page["rows"][0]["f"][4], json!({"v": null}));
    let (_, t) = emu.get("/datasets/d/tables/t").await;
    assert_eq!(t["numRows"], "5");

    let (status, body) = emu.get("/datasets/d/tables/nope/data").await;
    assert_eq!(status, 404);
    assert_error(&body, 404, "notFound", "Not found: Table p:d.nope");
}

#[tokio::test]
async fn recovery_query_returns_the_highest_value_under_equality_filters() {
    let emu = start().await;
    emu.dataset("d").await;
    emu.table("d", "t", events_fields()).await;
    let d = events_descriptor();
    let mut rows = Vec::new();
    for (topic, partition, offset) in [
        ("orders", 0, 9),
        ("orders", 0, 10),
        ("orders", 1, 99),
        ("users", 0, 500),
        ("orders", 0, 7),
    ] {
        rows.push(event(&d, topic, partition, offset));
    }
    emu.append("t", &d, rows);

    let sql = "SELECT MAX(kafka_offset) FROM `p.d.t` WHERE topic = 'orders' AND partition = 0";
    let (status, body) = emu
        .post(
            "/queries",
            json!({"query": sql, "useLegacySql": false, "formatOptions": {"useInt64Timestamp": true}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["kind"], "bigquery#queryResponse");
    assert_eq!(body["jobComplete"], true);
    assert_eq!(body["totalRows"], "1");
    assert_eq!(body["schema"]["fields"][0]["name"], "f0_");
    assert_eq!(body["schema"]["fields"][0]["type"], "INTEGER");
    assert_eq!(body["rows"], json!([{"f": [{"v": "10"}]}]));

    // jobs.insert + getQueryResults + jobs.get, as the Python client's query() does.
    let (status, job) = emu
        .post(
            "/jobs",
            json!({
                "jobReference": {"projectId": "p", "jobId": "j1", "location": "US"},
                "configuration": {"query": {
                    "query": "SELECT MAX(ts) AS last FROM `p.d.t` WHERE topic = 'users'",
                    "useLegacySql": false,
                }},
            }),
        )
        .await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["status"]["state"], "DONE");
    assert_eq!(job["jobReference"]["jobId"], "j1");
    let (status, results) = emu.get("/queries/j1?location=US").await;
    assert_eq!(status, 200, "{results}");
    assert_eq!(results["schema"]["fields"][0]["name"], "last");
    assert_eq!(results["rows"][0]["f"][0]["v"], "1.7000000000005E9");
    let (_, results) = emu
        .get("/queries/j1?formatOptions.useInt64Timestamp=true")
        .await;
    assert_eq!(results["rows"][0]["f"][0]["v"], "1700000000000500");
    let (status, got) = emu.get("/jobs/j1").await;
    assert_eq!(status, 200);
    assert_eq!(got["id"], "p:US.j1");

    // No matching row → one NULL row.
    let (_, body) = emu
        .post(
            "/queries",
            json!({"query": "SELECT MAX(kafka_offset) FROM `p.d.t` WHERE topic = 'none'",
                   "useLegacySql": false}),
        )
        .await;
    assert_eq!(body["rows"], json!([{"f": [{"v": null}]}]));
}

#[tokio::test]
async fn other_queries_are_refused() {
    let emu = start().await;
    emu.dataset("d").await;
    emu.table("d", "t", events_fields()).await;
    let (status, body) = emu
        .post(
            "/queries",
            json!({"query": "SELECT topic, COUNT(1) FROM `p.d.t` GROUP BY topic", "useLegacySql": false}),
        )
        .await;
    assert_eq!(status, 400);
    assert_error(
        &body,
        400,
        "invalidQuery",
        "Unsupported in the emulator: GROUP BY",
    );
    // The REST default is legacy SQL, which the emulator does not speak.
    let (status, body) = emu
        .post(
            "/queries",
            json!({"query": "SELECT MAX(kafka_offset) FROM `p.d.t`"}),
        )
        .await;
    assert_eq!(status, 400);
    assert_error(&body, 400, "invalidQuery", "legacy SQL");
    let (status, body) = emu
        .post(
            "/queries",
            json!({"query": "SELECT MAX(kafka_offset) FROM `p.d.other`", "useLegacySql": false}),
        )
        .await;
    assert_eq!(status, 404);
    assert_error(&body, 404, "notFound", "Not found: Table p:d.other");
    let (status, body) = emu
        .post(
            "/queries",
            json!({"query": "SELECT MAX(nope) FROM `p.d.t`", "useLegacySql": false}),
        )
        .await;
    assert_eq!(status, 400);
    assert_error(&body, 400, "invalidQuery", "Unrecognized name: nope");
    let (status, body) = emu.get("/queries/unknown").await;
    assert_eq!(status, 404);
    assert_error(&body, 404, "notFound", "Not found: Job p:unknown");
}

#[tokio::test]
async fn int64_schema_parameters_are_accepted_as_numbers_and_returned_as_strings() {
    let emu = start().await;
    emu.dataset("d").await;
    let t = emu
        .table(
            "d",
            "t",
            json!([
                {"name": "n", "type": "NUMERIC", "mode": "NULLABLE", "precision": 10, "scale": 2},
                {"name": "s", "type": "STRING", "maxLength": "8", "fields": null},
            ]),
        )
        .await;
    assert_eq!(t["schema"]["fields"][0]["precision"], "10");
    assert_eq!(t["schema"]["fields"][0]["scale"], "2");
    assert_eq!(t["schema"]["fields"][1]["maxLength"], "8");
}

#[tokio::test]
async fn unknown_urls_get_bigquerys_not_found_json() {
    let emu = start().await;
    let (status, body) = emu.get("/models").await;
    assert_eq!(status, 404);
    assert_error(&body, 404, "notFound", "Not found");
}

#[tokio::test]
async fn updates_with_a_stale_etag_are_refused() {
    let emu = start().await;
    emu.dataset("d").await;
    let created = emu.table("d", "t", events_fields()).await;
    let etag = created["etag"].as_str().unwrap().to_string();
    let patch = |etag: String, description: &'static str| {
        emu.http
            .patch(format!("{}/datasets/d/tables/t", emu.base))
            .header("If-Match", etag)
            .json(&json!({"description": description}))
    };
    let resp = patch(etag.clone(), "first").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    // The first update changed the etag: a writer still holding the old one loses.
    let resp = patch(etag, "second").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 412);
    let body: Value = resp.json().await.unwrap();
    assert_error(&body, 412, "conditionNotMet", "Precondition check failed.");
    let (_, t) = emu.get("/datasets/d/tables/t").await;
    assert_eq!(t["description"], "first");
}
