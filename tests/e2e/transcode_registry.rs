//! The Schema Registry client against the tests' registry (`tests/support/registry.rs`): caching,
//! single-flight, auth, TLS with a custom CA, timeouts, retries and the error classes, a
//! subject's versions, and the
//! answers a hostile or broken registry gives (a body without end, a garbled 200, an unexpected
//! 4xx, a redirect from https to http).

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use kafka_bigquery_sink::registry::{
    BasicAuth, RegistryConfig, RegistryError, SchemaRegistry, SubjectError,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value as Json, json};
use support::registry::{Answer, Registry};
use tokio::net::{TcpListener, TcpStream};

const SCHEMA: &str = r#"{"type":"record","name":"r","fields":[{"name":"a","type":"long"}]}"#;

/// A test CA and a server certificate for 127.0.0.1 it signed (valid for 100 years).
const CA_PEM: &str = r"-----BEGIN CERTIFICATE-----
MIIBhDCCASmgAwIBAgIUMRJj5dBp1u7MBr4ttZeVhz4sHHQwCgYIKoZIzj0EAwIw
FjEUMBIGA1UEAwwLa2JxIHRlc3QgY2EwIBcNMjYxMTMwMDAxNDMxWhgPMjEyNjEx
MDYwMDE0MzFaMBYxFDASBgNVBAMMC2ticSB0ZXN0IGNhMFkwEwYHKoZIzj0CAQYI
KoZIzj0DAQcDQgAEWQ+kdO8/3UqVoHYJILme50tVZ1s/FLQF1zZNoJWJrv4Xh9Zd
RwMxYE57/SpC72RRLFlYp7m8GbS4Wbuxa766cqNTMFEwHQYDVR0OBBYEFFIDrRh0
PnihYW7vMSxigMY72jiWMB8GA1UdIwQYMBaAFFIDrRh0PnihYW7vMSxigMY72jiW
MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSQAwRgIhAIIrxKXxTIbZ0TEp
Xcq0+qbQc0fZy92PFZnckzTfcm3nAiEAsUd5jCV0sjDbPgaudb8GCtmvKG8vjbrd
3wLVJHnOLHU=
-----END CERTIFICATE-----";
const SERVER_CERT_PEM: &str = r"-----BEGIN CERTIFICATE-----
MIIBrjCCAVWgAwIBAgIUTzFNMc1mHm3/s6LN5aY/I4BUr48wCgYIKoZIzj0EAwIw
FjEUMBIGA1UEAwwLa2JxIHRlc3QgY2EwIBcNMjYxMTMwMDAxNDMxWhgPMjEyNjEx
MDYwMDE0MzFaMBQxEjAQBgNVBAMMCTEyNy4wLjAuMTBZMBMGByqGSM49AgEGCCqG
SM49AwEHA0IABL9mcGpgJ7VNVH/KVqAP3lYJg6dl9qRuAfKVkWJWxGIHkVvofaCX
Q2Xf+Dcoz6Ut4PVmcOd/Z/DvCDEEL7yW4xmjgYAwfjAPBgNVHREECDAGhwR/AAAB
MAkGA1UdEwQCMAAwCwYDVR0PBAQDAgeAMBMGA1UdJQQMMAoGCCsGAQUFBwMBMB0G
A1UdDgQWBBT1YohZMmtv/qO635frSoZUSIdkjTAfBgNVHSMEGDAWgBRSA60YdD54
oWFu7zEsYoDGO9o4ljAKBggqhkjOPQQDAgNHADBEAiBmqPM0VfiqBivQ1K952D9o
ewoI5PoXPsdnF4B7nw8sSwIgdNqPd9eVaEe4KblweYePEyRRl6bI1N2QUUf4m7fK
e7M=
-----END CERTIFICATE-----";
const SERVER_KEY_PEM: &str = r"-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg2jivmv7cV4iWce4O
XLwvIWY9ctfceCqjc6oYW1u99ZWhRANCAAS/ZnBqYCe1TVR/ylagD95WCYOnZfak
bgHylZFiVsRiB5Fb6H2gl0Nl3/g3KM+lLeD1ZnDnf2fw7wgxBC+8luMZ
-----END PRIVATE KEY-----";

/// What each id answers: ids 2 and 7 are slow ([`serve`]), 4 to 6 cannot be used.
fn dump() -> Json {
    json!({
        "ids": {
            "1": {"schema": SCHEMA},
            "2": {"schema": SCHEMA},
            "3": {"schema": SCHEMA},
            "4": {"schema": "syntax = \"proto3\";", "schemaType": "PROTOBUF"},
            "5": {"schema": "{\"type\":\"nope\"}"},
            "6": {"schema": SCHEMA, "references": [{"name": "x", "subject": "s", "version": 1}]},
            "7": {"schema": SCHEMA},
            "8": {"schema": SCHEMA},
        },
        "subjects": {},
    })
}

/// The registry of [`dump`], behind `authorization` if given, with id 2 answering after 300 ms
/// (long enough for concurrent misses to meet) and id 7 after 5 s (past any timeout here).
async fn serve(authorization: Option<&str>) -> (String, Arc<Registry>) {
    let reg = Registry::new(dump(), authorization.map(String::from));
    reg.delay(2, Duration::from_millis(300));
    reg.delay(7, Duration::from_secs(5));
    (format!("http://{}", reg.listen().await), reg)
}

fn config(url: String) -> RegistryConfig {
    RegistryConfig {
        url,
        request_timeout: Duration::from_secs(2),
        max_attempts: 4,
        min_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        not_found_grace: Duration::ZERO,
        ..Default::default()
    }
}

#[tokio::test]
async fn schemas_are_fetched_once_and_served_from_the_cache() {
    let (url, reg) = serve(None).await;
    let client = SchemaRegistry::new(config(url)).unwrap();
    let a = client.schema(1).await.unwrap();
    let b = client.schema(1).await.unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(a.text, SCHEMA);
    assert_eq!(a.schema.root_record().unwrap().fields[0].name, "a");
    assert_eq!(reg.id_requests(1), 1);
    assert_eq!(client.stats().cache_hits, 1);
}

#[tokio::test]
async fn concurrent_misses_for_one_id_share_a_single_request() {
    let (url, reg) = serve(None).await;
    let client = Arc::new(SchemaRegistry::new(config(url)).unwrap());
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move { c.schema(2).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(reg.id_requests(2), 1);
}

/// With the type left to the registry (`format` unset), the writers of every partition that meet
/// a new id at once share one request too: not one per partition (12 for 2 topics of 6).
#[tokio::test]
async fn concurrent_misses_of_an_untyped_id_share_a_single_request() {
    let (url, reg) = serve(None).await;
    let client = Arc::new(SchemaRegistry::new(config(url)).unwrap());
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move { c.any_schema(2, None).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(reg.id_requests(2), 1);
}

#[tokio::test]
async fn an_unknown_id_is_a_per_record_error_without_retries() {
    let (url, reg) = serve(None).await;
    let client = SchemaRegistry::new(config(url)).unwrap();
    let err = client.schema(99).await.unwrap_err();
    assert_eq!(
        err,
        RegistryError::NotFound {
            id: 99,
            grace: Duration::ZERO
        }
    );
    assert!(!err.is_retryable());
    assert_eq!(reg.id_requests(99), 1);
}

#[tokio::test]
async fn an_id_unknown_within_the_grace_is_retryable_and_found_once_it_replicates() {
    let (url, reg) = serve(None).await;
    reg.not_yet(8, 3);
    let client = SchemaRegistry::new(RegistryConfig {
        not_found_grace: Duration::from_secs(300),
        ..config(url)
    })
    .unwrap();
    for lookup in 1..=3 {
        let err = client.schema(8).await.unwrap_err();
        assert!(
            matches!(err, RegistryError::NotFoundYet { id: 8, grace, .. } if grace == Duration::from_secs(300)),
            "lookup {lookup}: {err:?}"
        );
        assert!(err.is_retryable(), "{err}");
        assert!(err.to_string().contains("schema id 8"), "{err}");
    }
    let found = client.schema(8).await.unwrap();
    assert_eq!(found.text, SCHEMA);
    // One request per lookup: the caller's wait paces the retries, not the client's backoff.
    assert_eq!(reg.id_requests(8), 4);
}

#[tokio::test]
async fn an_id_still_unknown_after_the_grace_is_not_found() {
    let (url, reg) = serve(None).await;
    let grace = Duration::from_millis(200);
    let client = SchemaRegistry::new(RegistryConfig {
        not_found_grace: grace,
        ..config(url)
    })
    .unwrap();
    let first = client.schema(99).await.unwrap_err();
    assert!(first.is_retryable(), "{first:?}");
    // The grace runs from the first 404, whatever happens in between.
    tokio::time::sleep(grace + Duration::from_millis(50)).await;
    let err = client.schema(99).await.unwrap_err();
    assert_eq!(err, RegistryError::NotFound { id: 99, grace });
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("schema id 99"), "{err}");
    assert_eq!(reg.id_requests(99), 2);
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff_until_the_registry_answers() {
    let (url, reg) = serve(None).await;
    reg.unavailable(2);
    let client = SchemaRegistry::new(config(url)).unwrap();
    client.schema(3).await.unwrap();
    assert_eq!(reg.id_requests(3), 3);
    assert_eq!(client.stats().retries, 2);
}

#[tokio::test]
async fn a_registry_that_stays_down_is_a_retryable_error() {
    let (url, reg) = serve(None).await;
    reg.unavailable(100);
    let client = SchemaRegistry::new(config(url)).unwrap();
    let err = client.schema(3).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::Unavailable { attempts: 4, .. }),
        "{err}"
    );
    assert!(err.is_retryable());
    // Not cached: once the registry recovers, the same id resolves.
    reg.unavailable(0);
    client.schema(3).await.unwrap();
}

#[tokio::test]
async fn nothing_listening_and_too_slow_are_both_unavailable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = SchemaRegistry::new(config(format!("http://{addr}"))).unwrap();
    let err = client.schema(1).await.unwrap_err();
    assert!(matches!(err, RegistryError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("connect"), "{err}");

    let (url, _reg) = serve(None).await;
    let mut cfg = config(url);
    cfg.request_timeout = Duration::from_millis(100);
    cfg.max_attempts = 2;
    let client = SchemaRegistry::new(cfg).unwrap();
    let err = client.schema(7).await.unwrap_err();
    assert!(err.to_string().contains("timeout"), "{err}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn schemas_we_cannot_use_are_per_record_errors() {
    let (url, _reg) = serve(None).await;
    let client = SchemaRegistry::new(config(url)).unwrap();
    for (id, reason) in [(4, "PROTOBUF"), (5, "unknown type"), (6, "references")] {
        let err = client.schema(id).await.unwrap_err();
        assert!(
            matches!(&err, RegistryError::Unusable { reason: r, .. } if r.contains(reason)),
            "{id}: {err}"
        );
        assert!(!err.is_retryable());
    }
}

#[tokio::test]
async fn basic_auth_and_bearer_tokens_are_sent() {
    let (url, _reg) = serve(Some("Basic dXNlcjpwYXNz")).await;
    let mut cfg = config(url.clone());
    cfg.basic_auth = Some(BasicAuth {
        username: "user".into(),
        password: "pass".into(),
    });
    assert!(
        !format!("{cfg:?}").contains("pass\""),
        "secrets stay out of Debug"
    );
    SchemaRegistry::new(cfg).unwrap().schema(1).await.unwrap();

    let err = SchemaRegistry::new(config(url))
        .unwrap()
        .schema(1)
        .await
        .unwrap_err();
    assert_eq!(err, RegistryError::Unauthorized { id: 1, status: 401 });

    let (url, _reg) = serve(Some("Bearer t0ken")).await;
    let mut cfg = config(url);
    cfg.bearer_token = Some("t0ken".into());
    assert!(!format!("{cfg:?}").contains("t0ken"));
    SchemaRegistry::new(cfg).unwrap().schema(1).await.unwrap();
}

/// axum over TLS: accepts TCP connections and completes the handshake before handing them on.
struct TlsListener {
    tcp: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

#[tokio::test]
async fn tls_with_a_custom_ca_is_trusted_and_without_it_is_not() {
    let certs = vec![CertificateDer::from_pem_slice(SERVER_CERT_PEM.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY_PEM.as_bytes()).unwrap();
    let tls = tokio_rustls::rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = TlsListener {
        tcp,
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
    };
    let app = Registry::new(dump(), None).router();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut cfg = config(format!("https://{addr}"));
    cfg.max_attempts = 1;
    let err = SchemaRegistry::new(cfg.clone())
        .unwrap()
        .schema(1)
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Unavailable { .. }), "{err}");

    cfg.ca_pem = Some(CA_PEM.as_bytes().to_vec());
    SchemaRegistry::new(cfg).unwrap().schema(1).await.unwrap();
}

/// A TLS registry on loopback serving `reg`, trusted through [`CA_PEM`]; its `https://` URL.
async fn serve_tls(reg: &Arc<Registry>) -> String {
    let certs = vec![CertificateDer::from_pem_slice(SERVER_CERT_PEM.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY_PEM.as_bytes()).unwrap();
    let tls = tokio_rustls::rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = TlsListener {
        tcp,
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
    };
    let app = reg.router();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("https://{addr}")
}

#[tokio::test]
async fn an_answer_that_never_ends_is_cut_at_the_configured_size_and_retried_as_an_outage() {
    let (url, reg) = serve(None).await;
    for _ in 0..4 {
        reg.answer(3, Answer::Endless);
    }
    let mut cfg = config(url);
    cfg.request_timeout = Duration::from_secs(20);
    cfg.max_response_bytes = 1 << 20;
    let client = SchemaRegistry::new(cfg).unwrap();
    let started = std::time::Instant::now();
    let err = client.schema(3).await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::Unavailable { attempts: 4, reason, .. }
            if reason.contains("longer than schema_registry.max_response_bytes")),
        "{err}"
    );
    assert!(err.is_retryable(), "an outage: the partition waits");
    // Cut at the size, not at the request timeout.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    // Nothing cached: the registry answering well again resolves the id.
    client.schema(3).await.unwrap();
}

#[tokio::test]
async fn a_garbled_answer_is_retried_as_an_outage_and_never_cached() {
    let (url, reg) = serve(None).await;
    let client = SchemaRegistry::new(config(url)).unwrap();
    // One garbled 200 among the attempts of a lookup: the lookup goes on and finds the schema.
    reg.answer(3, Answer::Garbled);
    client.schema(3).await.unwrap();
    assert_eq!(reg.id_requests(3), 2);
    // A lookup whose every attempt is garbled reports the registry unavailable (the partition
    // waits), not the id unusable (its records dead-lettered until a restart).
    for _ in 0..4 {
        reg.answer(8, Answer::Garbled);
    }
    let err = client.schema(8).await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::Unavailable { reason, .. } if reason.contains("not a schema")),
        "{err}"
    );
    assert!(err.is_retryable());
    client.schema(8).await.unwrap();
}

#[tokio::test]
async fn an_unexpected_client_error_is_retried_as_an_outage() {
    let (url, reg) = serve(None).await;
    let client = SchemaRegistry::new(config(url)).unwrap();
    reg.answer(3, Answer::Status(422));
    reg.answer(3, Answer::Status(400));
    client.schema(3).await.unwrap();
    assert_eq!(reg.id_requests(3), 3);
    for _ in 0..4 {
        reg.answer(8, Answer::Status(409));
    }
    let err = client.schema(8).await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::Unavailable { reason, .. } if reason.contains("http 409")),
        "{err}"
    );
    client.schema(8).await.unwrap();
}

#[tokio::test]
async fn an_https_registry_is_never_followed_to_http() {
    let (plain, plain_reg) = serve(None).await;
    let reg = Registry::new(dump(), None);
    for _ in 0..4 {
        reg.answer(1, Answer::Redirect(format!("{plain}/schemas/ids/1")));
    }
    let mut cfg = config(serve_tls(&reg).await);
    cfg.ca_pem = Some(CA_PEM.as_bytes().to_vec());
    let client = SchemaRegistry::new(cfg).unwrap();
    let err = client.schema(1).await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::Unavailable { reason, .. } if reason.contains("redirect from https to http")),
        "{err}"
    );
    assert_eq!(plain_reg.id_requests(1), 0, "nothing asked over http");
    // A redirect that stays on https is followed.
    reg.answer(1, Answer::Redirect("/schemas/ids/3".into()));
    client.schema(1).await.unwrap();
}

#[test]
fn bad_configuration_is_refused_up_front() {
    let mut cfg = config("registry:8081".into());
    assert!(matches!(
        SchemaRegistry::new(cfg.clone()),
        Err(RegistryError::Config(_))
    ));
    cfg.url = "http://127.0.0.1:1".into();
    cfg.ca_pem = Some(b"not a pem".to_vec());
    assert!(matches!(
        SchemaRegistry::new(cfg),
        Err(RegistryError::Config(_))
    ));
}

/// A subject's versions and each version's id and type (what a plan reads for a field its
/// writer schema lacks, `src/tables/absent_fields.rs`); a subject the registry lacks is
/// `NotFound`, and a registry that does not answer is retried, then `Unavailable`.
#[tokio::test]
async fn a_subjects_versions_and_each_versions_id_and_type() {
    let (url, reg) = serve(None).await;
    reg.subject("orders-value", 3);
    reg.subject("orders-value", 4);
    let client = SchemaRegistry::new(config(url)).unwrap();
    assert_eq!(client.versions("orders-value").await.unwrap(), [1, 2]);
    let kind = kafka_bigquery_sink::registry::SchemaKind::Protobuf;
    assert_eq!(
        client.version_id("orders-value", 2).await.unwrap(),
        (4, kind)
    );
    let missing = client.versions("nobody-value").await.unwrap_err();
    assert!(
        matches!(missing, SubjectError::NotFound { .. }),
        "{missing}"
    );
    reg.unavailable(10);
    let down = client.versions("orders-value").await.unwrap_err();
    assert!(matches!(down, SubjectError::Unavailable { .. }), "{down}");
}
