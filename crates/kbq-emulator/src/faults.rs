//! Fault injection for chaos tests.
//!
//! A *fault rule* says, for one RPC, what goes wrong and when. Rules come from `--faults FILE`
//! (YAML or JSON: a list of rules, or `{faults: [...]}`) at start, or from the admin HTTP
//! endpoint on the emulator's own port:
//!
//! | request | effect |
//! |---|---|
//! | `POST /emulator/v1/faults` with a rule or a list of rules | installs them; answers `{"ids":[..]}` |
//! | `GET /emulator/v1/faults` | lists the rules with how often each matched and fired |
//! | `DELETE /emulator/v1/faults` | removes every rule |
//! | `DELETE /emulator/v1/faults/{id}` | removes one rule |
//! | `POST /emulator/v1/streams/finalize` `{"stream":"projects/…/streams/…"}` | finalizes the stream now; answers `{"row_count":n}` |
//! | `POST /emulator/v1/streams/expire` `{"stream":"projects/…/streams/…"}` | expires the stream now (later use: NOT_FOUND) |
//!
//! A rule:
//!
//! ```yaml
//! - rpc: AppendRows          # CreateWriteStream | AppendRows | FlushRows | FinalizeWriteStream
//!                            # | GetWriteStream | BatchCommitWriteStreams | TestIamPermissions
//!   action:                  # exactly one of:
//!     fail:                  #   answer with an error
//!       code: UNAVAILABLE    #     gRPC code, by name or number
//!       storage_code: STREAM_FINALIZED   # optional StorageError code (name or number)
//!       message: "…"         #     optional; default "injected fault"
//!       in_stream: false     #     AppendRows only: true = put it in AppendRowsResponse.error
//!                            #     and keep the call open; false = end the call with it
//!     # delay: {ms: 500}     #   wait, then handle the request normally
//!     # drop: {after: false} #   reset the HTTP/2 stream with no gRPC status; after: true
//!                            #   handles the request first (its effect is kept, the answer lost)
//!     # deny: {permissions: [bigquery.tables.update]}   # rpc: TestIamPermissions only (the
//!                            #   REST tables.testIamPermissions): those are not granted; a
//!                            #   `fail` there answers the REST status of its code
//!   nth: 3                   # optional: start at the 3rd matching call (1-based)
//!   times: 2                 # optional: fire on this many calls (default 1 with nth, else
//!                            # unlimited)
//!   probability: 0.25        # optional: fire on each eligible call with this probability
//!   target: "streams/abc"    # optional: only calls whose stream/table name contains this
//! ```
//!
//! For AppendRows every *request* on a connection is one call. Calls are counted from the moment
//! the rule is installed. Delays of several rules add up; the first failing or dropping rule wins.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// The six RPCs of BigQueryWrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rpc {
    CreateWriteStream,
    AppendRows,
    FlushRows,
    FinalizeWriteStream,
    GetWriteStream,
    BatchCommitWriteStreams,
    /// The REST API's `tables.testIamPermissions` (its `deny` action withholds permissions).
    TestIamPermissions,
}

/// A gRPC code given by name (`UNAVAILABLE`, `unavailable`) or number (`14`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcCode(pub tonic::Code);

const CODE_NAMES: [(&str, tonic::Code); 17] = [
    ("OK", tonic::Code::Ok),
    ("CANCELLED", tonic::Code::Cancelled),
    ("UNKNOWN", tonic::Code::Unknown),
    ("INVALID_ARGUMENT", tonic::Code::InvalidArgument),
    ("DEADLINE_EXCEEDED", tonic::Code::DeadlineExceeded),
    ("NOT_FOUND", tonic::Code::NotFound),
    ("ALREADY_EXISTS", tonic::Code::AlreadyExists),
    ("PERMISSION_DENIED", tonic::Code::PermissionDenied),
    ("RESOURCE_EXHAUSTED", tonic::Code::ResourceExhausted),
    ("FAILED_PRECONDITION", tonic::Code::FailedPrecondition),
    ("ABORTED", tonic::Code::Aborted),
    ("OUT_OF_RANGE", tonic::Code::OutOfRange),
    ("UNIMPLEMENTED", tonic::Code::Unimplemented),
    ("INTERNAL", tonic::Code::Internal),
    ("UNAVAILABLE", tonic::Code::Unavailable),
    ("DATA_LOSS", tonic::Code::DataLoss),
    ("UNAUTHENTICATED", tonic::Code::Unauthenticated),
];

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum NameOrNumber {
    Number(i32),
    Name(String),
}

impl Serialize for GrpcCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let name = CODE_NAMES
            .iter()
            .find(|(_, c)| *c == self.0)
            .map(|(n, _)| *n)
            .unwrap_or("UNKNOWN");
        s.serialize_str(name)
    }
}

impl<'de> Deserialize<'de> for GrpcCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match NameOrNumber::deserialize(d)? {
            NameOrNumber::Number(n) if (0..=16).contains(&n) => Ok(GrpcCode(tonic::Code::from(n))),
            NameOrNumber::Number(n) => Err(serde::de::Error::custom(format!(
                "grpc code {n} is not between 0 and 16"
            ))),
            NameOrNumber::Name(name) => CODE_NAMES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(&name))
                .map(|(_, c)| GrpcCode(*c))
                .ok_or_else(|| serde::de::Error::custom(format!("unknown grpc code {name:?}"))),
        }
    }
}

/// A StorageErrorCode given by name (`STREAM_FINALIZED`) or number (`6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageCode(pub i32);

impl Serialize for StorageCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i32(self.0)
    }
}

impl<'de> Deserialize<'de> for StorageCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::storage_error::StorageErrorCode;
        match NameOrNumber::deserialize(d)? {
            NameOrNumber::Number(n) => Ok(StorageCode(n)),
            NameOrNumber::Name(name) => StorageErrorCode::from_str_name(&name.to_ascii_uppercase())
                .map(|c| StorageCode(c as i32))
                .ok_or_else(|| {
                    serde::de::Error::custom(format!("unknown storage error code {name:?}"))
                }),
        }
    }
}

/// What a rule does when it fires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultAction {
    Fail {
        code: GrpcCode,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        storage_code: Option<StorageCode>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default)]
        in_stream: bool,
    },
    Delay {
        ms: u64,
    },
    Drop {
        #[serde(default)]
        after: bool,
    },
    /// TestIamPermissions only: these permissions are not granted (the emulator has no IAM
    /// model and otherwise grants every permission asked for).
    Deny {
        permissions: Vec<String>,
    },
}

/// One rule, as written by the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    pub rpc: Rpc,
    pub action: FaultAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nth: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl FaultRule {
    fn validate(&self) -> Result<(), FaultError> {
        if let Some(p) = self.probability
            && !(0.0..=1.0).contains(&p)
        {
            return Err(FaultError::Invalid(format!(
                "probability {p} is not between 0 and 1"
            )));
        }
        if self.nth == Some(0) {
            return Err(FaultError::Invalid("nth counts from 1".into()));
        }
        let iam = self.rpc == Rpc::TestIamPermissions;
        match self.action {
            FaultAction::Deny { .. } if !iam => {
                return Err(FaultError::Invalid(
                    "the deny action is for TestIamPermissions only".into(),
                ));
            }
            FaultAction::Drop { .. } if iam => {
                return Err(FaultError::Invalid(
                    "TestIamPermissions takes deny, fail or delay, not drop".into(),
                ));
            }
            _ => {}
        }
        Ok(())
    }
}

/// An installed rule with its counters (what `GET /emulator/v1/faults` lists).
#[derive(Debug, Clone, Serialize)]
pub struct InstalledRule {
    pub id: u64,
    #[serde(flatten)]
    pub rule: FaultRule,
    /// Calls that matched `rpc` and `target`.
    pub matched: u64,
    /// Calls the rule acted on.
    pub fired: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    #[error("invalid fault rule: {0}")]
    Invalid(String),
    #[error("fault file {path}: {detail}")]
    File { path: String, detail: String },
}

/// The installed rules.
#[derive(Debug, Default)]
pub struct Faults {
    rules: Mutex<Vec<InstalledRule>>,
    next_id: AtomicU64,
}

impl Faults {
    pub fn new() -> Faults {
        Faults::default()
    }

    /// Reads rules from a YAML or JSON file (a list, or a map with a `faults` list).
    pub fn load_file(&self, path: &Path) -> Result<Vec<u64>, FaultError> {
        let file_err = |detail: String| FaultError::File {
            path: path.display().to_string(),
            detail,
        };
        let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum FaultFile {
            List(Vec<FaultRule>),
            Map { faults: Vec<FaultRule> },
        }
        let parsed: FaultFile = match serde_json::from_str(&text) {
            Ok(f) => f,
            Err(_) => serde_saphyr::from_str(&text).map_err(|e| file_err(e.to_string()))?,
        };
        let rules = match parsed {
            FaultFile::List(r) | FaultFile::Map { faults: r } => r,
        };
        self.install(rules).map_err(|e| file_err(e.to_string()))
    }

    /// Installs rules; none is installed if one is invalid.
    pub fn install(&self, rules: Vec<FaultRule>) -> Result<Vec<u64>, FaultError> {
        for r in &rules {
            r.validate()?;
        }
        let mut installed = self.rules.lock().expect("faults lock");
        Ok(rules
            .into_iter()
            .map(|rule| {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
                installed.push(InstalledRule {
                    id,
                    rule,
                    matched: 0,
                    fired: 0,
                });
                id
            })
            .collect())
    }

    pub fn list(&self) -> Vec<InstalledRule> {
        self.rules.lock().expect("faults lock").clone()
    }

    pub fn clear(&self) {
        self.rules.lock().expect("faults lock").clear();
    }

    /// Removes one rule; false if there was none with this id.
    pub fn remove(&self, id: u64) -> bool {
        let mut rules = self.rules.lock().expect("faults lock");
        let before = rules.len();
        rules.retain(|r| r.id != id);
        rules.len() != before
    }

    /// Counts one call of `rpc` on `target` and returns the actions of the rules that fire.
    pub fn check(&self, rpc: Rpc, target: &str) -> Vec<FaultAction> {
        let mut rules = self.rules.lock().expect("faults lock");
        if rules.is_empty() {
            return Vec::new();
        }
        let mut actions = Vec::new();
        for r in rules.iter_mut() {
            if r.rule.rpc != rpc
                || r.rule
                    .target
                    .as_deref()
                    .is_some_and(|t| !target.contains(t))
            {
                continue;
            }
            r.matched += 1;
            if let Some(nth) = r.rule.nth
                && r.matched < nth
            {
                continue;
            }
            let times = r.rule.times.or(r.rule.nth.map(|_| 1));
            if times.is_some_and(|t| r.fired >= t) {
                continue;
            }
            if let Some(p) = r.rule.probability
                && rand::random::<f64>() >= p
            {
                continue;
            }
            r.fired += 1;
            actions.push(r.rule.action.clone());
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(json: &str) -> FaultRule {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn deny_is_for_test_iam_permissions_which_takes_no_drop() {
        let f = Faults::new();
        let deny = r#"{"permissions":["bigquery.tables.update"]}"#;
        assert!(
            f.install(vec![rule(&format!(
                r#"{{"rpc":"AppendRows","action":{{"deny":{deny}}}}}"#
            ))])
            .is_err()
        );
        assert!(
            f.install(vec![rule(
                r#"{"rpc":"TestIamPermissions","action":{"drop":{}}}"#
            )])
            .is_err()
        );
        f.install(vec![
            rule(&format!(
                r#"{{"rpc":"TestIamPermissions","action":{{"deny":{deny}}}}}"#
            )),
            rule(r#"{"rpc":"TestIamPermissions","action":{"fail":{"code":"PERMISSION_DENIED"}}}"#),
        ])
        .unwrap();
        assert_eq!(f.check(Rpc::TestIamPermissions, "projects/p").len(), 2);
    }

    #[test]
    fn nth_fires_once_on_the_nth_matching_call() {
        let f = Faults::new();
        f.install(vec![rule(
            r#"{"rpc":"FlushRows","action":{"drop":{}},"nth":2}"#,
        )])
        .unwrap();
        let fired: Vec<usize> = (0..4).map(|_| f.check(Rpc::FlushRows, "s").len()).collect();
        assert_eq!(fired, vec![0, 1, 0, 0]);
        assert!(f.check(Rpc::AppendRows, "s").is_empty());
    }

    #[test]
    fn times_fires_on_the_next_k_calls_and_target_filters() {
        let f = Faults::new();
        f.install(vec![rule(
            r#"{"rpc":"AppendRows","action":{"fail":{"code":"UNAVAILABLE"}},"times":2,"target":"/streams/a"}"#,
        )])
        .unwrap();
        assert!(f.check(Rpc::AppendRows, "t/streams/b").is_empty());
        let fired: Vec<usize> = (0..3)
            .map(|_| f.check(Rpc::AppendRows, "t/streams/a").len())
            .collect();
        assert_eq!(fired, vec![1, 1, 0]);
        assert_eq!(f.list()[0].fired, 2);
    }

    #[test]
    fn probability_zero_never_fires_and_one_always_fires() {
        let f = Faults::new();
        f.install(vec![
            rule(r#"{"rpc":"GetWriteStream","action":{"delay":{"ms":1}},"probability":0.0}"#),
            rule(r#"{"rpc":"GetWriteStream","action":{"delay":{"ms":2}},"probability":1.0}"#),
        ])
        .unwrap();
        for _ in 0..20 {
            assert_eq!(
                f.check(Rpc::GetWriteStream, ""),
                vec![FaultAction::Delay { ms: 2 }]
            );
        }
    }

    #[test]
    fn codes_parse_by_name_or_number_and_bad_rules_are_refused() {
        let r = rule(
            r#"{"rpc":"AppendRows","action":{"fail":{"code":14,"storage_code":"STREAM_FINALIZED"}}}"#,
        );
        assert_eq!(
            r.action,
            FaultAction::Fail {
                code: GrpcCode(tonic::Code::Unavailable),
                storage_code: Some(StorageCode(6)),
                message: None,
                in_stream: false
            }
        );
        assert!(
            serde_json::from_str::<FaultRule>(
                r#"{"rpc":"AppendRows","action":{"fail":{"code":"NOPE"}}}"#
            )
            .is_err()
        );
        let f = Faults::new();
        assert!(
            f.install(vec![rule(
                r#"{"rpc":"AppendRows","action":{"drop":{}},"probability":2.0}"#
            )])
            .is_err()
        );
        assert!(f.list().is_empty());
    }

    #[test]
    fn a_yaml_file_installs_its_rules() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("faults.yaml");
        std::fs::write(
            &path,
            "faults:\n  - rpc: FinalizeWriteStream\n    action:\n      fail:\n        code: ABORTED\n    nth: 1\n",
        )
        .unwrap();
        let f = Faults::new();
        assert_eq!(f.load_file(&path).unwrap().len(), 1);
        assert_eq!(f.check(Rpc::FinalizeWriteStream, "x").len(), 1);
    }
}
