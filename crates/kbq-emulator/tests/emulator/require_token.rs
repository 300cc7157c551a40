//! `--require-token`: BigQuery calls without the one bearer token are refused as BigQuery refuses
//! them (UNAUTHENTICATED on gRPC, 401 with its body and challenge on REST); with it they pass; the
//! admin routes stay open.

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1 as bq;
use kbq_emulator::server::EmulatorConfig;
use kbq_emulator::testsuite;

const TOKEN: &str = "kbq-test-token";

#[tokio::test]
async fn only_calls_with_the_required_token_pass() {
    let emulator = testsuite::start_with(EmulatorConfig {
        require_token: Some(TOKEN.into()),
        ..EmulatorConfig::local()
    })
    .await;
    let base = format!("http://{}", emulator.addr);
    let http = reqwest::Client::new();
    let datasets = format!("{base}/bigquery/v2/projects/p/datasets");
    let body = serde_json::json!({"datasetReference": {"projectId": "p", "datasetId": "d"}});

    let missing = http.post(&datasets).json(&body).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    assert_eq!(
        missing.headers()["www-authenticate"],
        "Bearer realm=\"https://accounts.google.com/\""
    );
    let error: serde_json::Value = missing.json().await.unwrap();
    assert_eq!(error["error"]["status"], "UNAUTHENTICATED");
    assert_eq!(error["error"]["errors"][0]["reason"], "required");

    let wrong = http
        .post(&datasets)
        .bearer_auth("another-token")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let error: serde_json::Value = wrong.json().await.unwrap();
    assert_eq!(error["error"]["errors"][0]["reason"], "authError");

    let right = http
        .post(&datasets)
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 200, "{}", right.text().await.unwrap());

    let health = http
        .get(format!("{base}/emulator/v1/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    let mut client = testsuite::client(emulator.addr).await;
    let request = || bq::GetWriteStreamRequest {
        name: "projects/p/datasets/d/tables/t/streams/_default".into(),
        ..Default::default()
    };
    let refused = client.get_write_stream(request()).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    let mut with_token = tonic::Request::new(request());
    with_token
        .metadata_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    // past the check: the table does not exist, which only the service itself can say
    let past = client.get_write_stream(with_token).await.unwrap_err();
    assert_ne!(past.code(), tonic::Code::Unauthenticated, "{past:?}");
}
