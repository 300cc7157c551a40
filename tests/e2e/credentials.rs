//! `bigquery.credentials` as Google's libraries take them (docs/operations.md#credentials): a
//! credential file of each type read from a file, named by `file` or by `env`, refused by
//! `validate` when it is missing, not JSON or of an unknown type, and, for every type a local
//! token endpoint can serve, the token it issued is what an emulator that requires exactly that
//! token sees (`support::token_server`). The sink runs end to end with an external account and
//! with an impersonated service account.

use crate::support;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use kafka_bigquery_sink::bigquery::auth::Auth;
use kafka_bigquery_sink::bigquery::rest_client::RestClient;
use kafka_bigquery_sink::config::{Config, Credentials, validate};
use kbq_emulator::server::{Emulator, EmulatorConfig};
use support::daemon::Daemon;
use support::sink::{Fixture, SinkOptions, Tweaks};
use support::token_server::{self as tokens, TokenServer};

/// `validate`'s errors for a minimal config with these credentials.
fn errors(credentials: &str) -> Vec<String> {
    let yaml = format!(
        "kafka:\n  bootstrap_servers: 127.0.0.1:9092\n  group_id: g\n  topics: [t]\navro:\n  schema_file: s.avsc\nbigquery:\n  project: p\n  dataset: d\n  table: t\n  credentials: {credentials}\ndead_letter:\n  topic: t-dlq\n"
    );
    match Config::from_yaml(&yaml, HashMap::new()) {
        Err(errs) => errs.iter().map(ToString::to_string).collect(),
        Ok(config) => match validate(&config) {
            Ok(()) => Vec::new(),
            Err(errs) => errs.iter().map(ToString::to_string).collect(),
        },
    }
}

fn quoted(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

#[tokio::test]
async fn validate_reads_the_named_file_and_refuses_what_google_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let server = TokenServer::start().await;
    let files = server.files(dir.path());
    for path in [
        &files.authorized_user,
        &files.workforce_user,
        &files.external_file,
        &files.external_url_impersonated,
        &files.impersonated,
    ] {
        assert_eq!(
            errors(&format!("{{file: {}}}", quoted(path))),
            Vec::<String>::new()
        );
    }
    let missing = dir.path().join("absent.json");
    let not_json = dir.path().join("key.p12");
    std::fs::write(&not_json, [0x30, 0x82, 0x0a, 0x01]).unwrap();
    let unknown = dir.path().join("gdch.json");
    std::fs::write(&unknown, r#"{"type": "gdch_service_account"}"#).unwrap();
    for (path, expected) in [
        (&missing, "cannot read"),
        (&not_json, "is not JSON"),
        (
            &unknown,
            "has type `gdch_service_account`; the types read from a file are",
        ),
    ] {
        let errs = errors(&format!("{{file: {}}}", quoted(path)));
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].starts_with("bigquery.credentials.file: ") && errs[0].contains(expected),
            "{expected}: {errs:#?}"
        );
    }
    let errs = errors("{env: KBQ_TEST_CREDENTIALS_NEVER_SET}");
    assert_eq!(
        errs,
        vec![
            "bigquery.credentials.env: the environment variable KBQ_TEST_CREDENTIALS_NEVER_SET is not set (it names the credential file)"
                .to_string()
        ]
    );
    assert_eq!(
        errors("{file: \"\"}"),
        vec!["bigquery.credentials.file: must not be empty".to_string()]
    );
    // today's forms keep their rules
    assert_eq!(errors("adc"), Vec::<String>::new());
    assert_eq!(
        errors("{key_file: /var/run/secrets/kbq/service-account.json}"),
        Vec::<String>::new()
    );
}

#[test]
fn validate_reads_the_file_an_environment_variable_names() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sink.yaml");
    let unknown = dir.path().join("unknown.json");
    std::fs::write(&unknown, r#"{"type": "api_key"}"#).unwrap();
    std::fs::write(
        &config,
        "kafka:\n  bootstrap_servers: 127.0.0.1:9092\n  group_id: g\n  topics: [t]\navro:\n  schema_file: s.avsc\nbigquery:\n  project: p\n  dataset: d\n  table: t\n  credentials: {env: KBQ_TEST_CREDENTIALS}\ndead_letter:\n  topic: t-dlq\n",
    )
    .unwrap();
    let out = std::process::Command::new(crate::support::daemon::binary())
        .args(["validate", "-c"])
        .arg(&config)
        .env("KBQ_TEST_CREDENTIALS", &unknown)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("bigquery.credentials.env: ") && stderr.contains("has type `api_key`"),
        "{stderr}"
    );
}

/// An emulator that requires `token`, and the sink's REST client with the credentials of `file`
/// creating a dataset on it.
async fn the_emulator_accepts(file: &Path, token: &str) {
    let emulator = Emulator::start(EmulatorConfig {
        require_token: Some(token.to_string()),
        ..EmulatorConfig::local()
    })
    .await
    .unwrap();
    let base = format!("http://{}", emulator.addr);
    let auth = Auth::configured(&Credentials::File(file.to_path_buf())).unwrap();
    let rest = RestClient::new(&base, auth, Duration::from_secs(10)).unwrap();
    rest.ensure_dataset("p", "d", None)
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    // the check can fail: without the token the same call is refused
    let anonymous = RestClient::new(&base, Auth::None, Duration::from_secs(10)).unwrap();
    let refused = anonymous.get_dataset("p", "d").await.unwrap_err();
    assert!(refused.to_string().contains("401"), "{refused}");
}

#[tokio::test]
async fn every_type_a_local_endpoint_serves_reaches_the_emulator_with_the_token_it_issued() {
    let dir = tempfile::tempdir().unwrap();
    let server = TokenServer::start().await;
    let files = server.files(dir.path());
    the_emulator_accepts(&files.authorized_user, tokens::USER_TOKEN).await;
    assert_eq!(server.calls(), ["oauth2/token"]);
    the_emulator_accepts(&files.workforce_user, tokens::WORKFORCE_TOKEN).await;
    assert_eq!(server.calls()[1..], ["workforce/token"]);
    the_emulator_accepts(&files.external_file, tokens::STS_TOKEN).await;
    assert_eq!(server.calls()[2..], ["sts/token"]);
    the_emulator_accepts(&files.external_url_impersonated, tokens::IMPERSONATED_TOKEN).await;
    assert_eq!(
        server.calls()[3..],
        ["subject", "sts/token", "generateAccessToken"]
    );
    the_emulator_accepts(&files.impersonated, tokens::IMPERSONATED_TOKEN).await;
    assert_eq!(server.calls()[6..], ["oauth2/token", "generateAccessToken"]);
}

/// A service account signs its own token (no token endpoint); impersonation from it is served
/// locally, and the token it presents there is its own, naming it.
#[tokio::test]
async fn a_service_account_signs_its_own_token_and_can_impersonate() {
    let dir = tempfile::tempdir().unwrap();
    let server = TokenServer::start().await;
    let email = "source@kbq-test.iam.gserviceaccount.com";
    let key = tokens::service_account_key(dir.path(), email);
    let own = Auth::configured(&Credentials::File(key.clone()))
        .unwrap()
        .headers()
        .await
        .unwrap();
    let bearer = own["authorization"].to_str().unwrap();
    let claims = tokens::jwt_claims(bearer.strip_prefix("Bearer ").unwrap()).unwrap();
    assert_eq!(claims["iss"], email);
    assert_eq!(claims["scope"], "https://www.googleapis.com/auth/bigquery");
    server.accept_service_account(email);
    let source: serde_json::Value = serde_json::from_slice(&std::fs::read(&key).unwrap()).unwrap();
    let impersonated = dir.path().join("sa-impersonated.json");
    std::fs::write(
        &impersonated,
        serde_json::to_vec(&server.impersonating(source)).unwrap(),
    )
    .unwrap();
    the_emulator_accepts(&impersonated, tokens::IMPERSONATED_TOKEN).await;
    assert_eq!(server.calls(), ["generateAccessToken"]);
}

/// The daemon with `credentials` against an emulator that requires `token`: a few records land
/// exactly once.
async fn the_sink_runs_with(credentials: String, token: &str, env: &[(&str, &str)]) {
    let mut options = SinkOptions::partitions(2);
    options.emulator.require_token = Some(token.to_string());
    let f = Fixture::with(options).await;
    let config = f.config_with(
        "creds",
        &Tweaks {
            credentials: Some(credentials),
            ..Tweaks::default()
        },
    );
    let mut daemon = Daemon::start_with_env(&config, "daemon", env);
    f.produce(20);
    f.wait_exactly_once(Duration::from_secs(60));
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn the_sink_runs_with_an_external_account() {
    let dir = tempfile::tempdir().unwrap();
    let server = TokenServer::start().await;
    let files = server.files(dir.path());
    the_sink_runs_with(
        format!("{{file: {}}}", quoted(&files.external_url_impersonated)),
        tokens::IMPERSONATED_TOKEN,
        &[],
    )
    .await;
    assert!(server.calls().contains(&"generateAccessToken"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn the_sink_runs_with_an_impersonated_service_account_named_by_a_variable() {
    let dir = tempfile::tempdir().unwrap();
    let server = TokenServer::start().await;
    let files = server.files(dir.path());
    let path = files.impersonated.display().to_string();
    the_sink_runs_with(
        "{env: KBQ_TEST_SINK_CREDENTIALS}".to_string(),
        tokens::IMPERSONATED_TOKEN,
        &[("KBQ_TEST_SINK_CREDENTIALS", &path)],
    )
    .await;
    assert_eq!(server.calls()[..2], ["oauth2/token", "generateAccessToken"]);
}
