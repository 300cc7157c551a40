//! The config (docs/configuration.md): the shipped examples validate, and every kind of
//! mistake is reported with the path of the field that is wrong.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use kafka_bigquery_sink::config::{Config, Credentials, validate, warnings};
use kbq_core::bad_record::BadRecordPolicy;
use kbq_core::protocol::{
    AnomalyPolicy, LostStreamPolicy, MissingCheckpointPolicy, OutOfRangePolicy, ResolveFallback,
    StartFrom,
};
use kbq_transcode::protobuf::MessageIndexEncoding;
use kbq_transcode::{MapMode, UnknownFields};

/// The variables the example configs reference.
fn example_env() -> HashMap<String, String> {
    [
        ("KAFKA_BOOTSTRAP", "broker-1:9092,broker-2:9092"),
        ("SCHEMA_REGISTRY_USER", "kbq"),
        ("SCHEMA_REGISTRY_PASSWORD", "p@ss: #word\"'"),
        ("KAFKA_USERNAME", "kbq"),
        ("KAFKA_PASSWORD", "secret"),
        ("SCHEMA_REGISTRY_URL", "https://sr.example.internal"),
        ("SCHEMA_REGISTRY_TOKEN", "token"),
        ("GCP_PROJECT", "acme-payments"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Parse + validate; every error as `path: message`.
fn errors(yaml: &str, env: HashMap<String, String>) -> Vec<String> {
    match Config::from_yaml(yaml, env) {
        Err(errs) => errs.iter().map(ToString::to_string).collect(),
        Ok(config) => match validate(&config) {
            Ok(()) => Vec::new(),
            Err(errs) => errs.iter().map(ToString::to_string).collect(),
        },
    }
}

const MINIMAL: &str = "\
kafka:
  bootstrap_servers: 127.0.0.1:9092
  group_id: g
  topics: [t]
avro:
  schema_file: s.avsc
bigquery:
  project: p
  dataset: d
  table: t
dead_letter:
  topic: t-dlq
";

/// MINIMAL with more top-level sections (MINIMAL sets only kafka, avro, bigquery, dead_letter).
fn with(extra: &str) -> String {
    format!("{MINIMAL}{extra}")
}

fn assert_one_error(yaml: &str, env: HashMap<String, String>, expected: &str) {
    let errs = errors(yaml, env);
    assert!(
        errs.iter().any(|e| e.starts_with(expected)),
        "expected an error starting with {expected:?}, got {errs:#?}"
    );
}

#[test]
fn every_example_config_validates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("config/ exists") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read example");
        assert_eq!(
            errors(&text, example_env()),
            Vec::<String>::new(),
            "{}",
            path.display()
        );
        seen += 1;
    }
    assert!(
        seen >= 3,
        "expected the three example configs, found {seen}"
    );
}

#[test]
fn the_minimal_config_gets_the_documented_defaults() {
    let c = Config::from_yaml(MINIMAL, HashMap::new()).expect("parses");
    validate(&c).expect("valid");
    assert_eq!(c.checkpoint.interval.0.as_secs(), 5);
    assert_eq!(c.checkpoint.metadata_max_bytes, 4096);
    assert_eq!(c.checkpoint.partition_stall_timeout.0.as_secs(), 120);
    assert_eq!(c.writer.max_request_bytes.bytes(), 8 << 20);
    assert_eq!(c.bigquery.credentials, Credentials::Adc);
    // no partition/offset columns: a lost stream is rewound (at least once for the window)
    assert_eq!(c.effective_lost_stream(), LostStreamPolicy::Rewind);
    let props = c.kafka.consumer_properties();
    for (k, v) in [
        ("enable.auto.commit", "false"),
        ("enable.auto.offset.store", "false"),
        ("isolation.level", "read_committed"),
        ("auto.offset.reset", "error"),
        ("partition.assignment.strategy", "cooperative-sticky"),
        ("bootstrap.servers", "127.0.0.1:9092"),
        ("group.id", "g"),
    ] {
        assert_eq!(props.get(k).map(String::as_str), Some(v), "{k}");
    }
}

#[test]
fn env_substitution_takes_the_environment_then_the_default_and_keeps_special_characters() {
    let yaml = MINIMAL.replace(
        "bootstrap_servers: 127.0.0.1:9092",
        "bootstrap_servers: ${BOOT:-127.0.0.1:9092}\n  properties:\n    sasl.password: ${PW}",
    );
    let env = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let c = Config::from_yaml(&yaml, env(&[("PW", "a: b # c")])).expect("parses");
    assert_eq!(c.kafka.bootstrap_servers, "127.0.0.1:9092");
    // a value from the environment is never parsed as YAML
    assert_eq!(c.kafka.properties["sasl.password"], "a: b # c");
    let c = Config::from_yaml(&yaml, env(&[("PW", "x"), ("BOOT", "b:1")])).expect("parses");
    assert_eq!(c.kafka.bootstrap_servers, "b:1");
}

#[test]
fn a_missing_env_variable_without_default_is_an_error_naming_it_and_its_field() {
    let yaml = MINIMAL.replace("group_id: g", "group_id: ${KBQ_TEST_GROUP}");
    let errs = errors(&yaml, HashMap::new());
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].starts_with("kafka.group_id: "), "{errs:?}");
    assert!(errs[0].contains("KBQ_TEST_GROUP"), "{errs:?}");
    assert!(errs[0].contains("line 3"), "{errs:?}");
}

#[test]
fn a_quoted_env_reference_is_refused_rather_than_kept_literally() {
    let yaml = MINIMAL.replace("group_id: g", "group_id: \"${GROUP}\"");
    assert_one_error(
        &yaml,
        HashMap::new(),
        "kafka.group_id: `${...}` is substituted only in unquoted values",
    );
}

#[test]
fn an_unknown_key_names_its_path() {
    let yaml = MINIMAL.replace("  group_id: g", "  group_id: g\n  grup_id: typo");
    assert_one_error(
        &yaml,
        HashMap::new(),
        "kafka.grup_id: unknown field `grup_id`",
    );
    let yaml = with("writer:\n  max_request_byte: 1MiB\n");
    assert_one_error(
        &yaml,
        HashMap::new(),
        "writer.max_request_byte: unknown field",
    );
    let yaml = with("bigquery_extra: 1\n");
    assert_one_error(&yaml, HashMap::new(), "bigquery_extra: unknown field");
}

#[test]
fn every_parse_error_of_a_file_is_reported_at_once_with_its_path_and_line() {
    // Six mistakes of different kinds in different sections: one run names them all.
    let yaml = "\
kafka:
  bootstrap_servers: 127.0.0.1:9092
  grup_id: typo
  group_id: g
  topics: [t]
avro:
  schema_file: s.avsc
bigquery:
  project: p
  dataset: d
  table: t
  metadata_columns:
    offst: _offset
checkpoint:
  interval: 5 seconds
writer:
  max_request_bytes: 8 megs
  linger: 50ms
dead_letter:
  topic: t-dlq
  pasword: x
shutdown_deadline: soon
log:
  format: yaml
";
    let errs = errors(yaml, HashMap::new());
    let expected = [
        ("kafka.grup_id: unknown field", 3),
        ("bigquery.metadata_columns.offst: unknown field", 13),
        ("checkpoint.interval: invalid duration `5 seconds`", 15),
        ("writer.max_request_bytes:", 17),
        ("dead_letter.pasword: unknown field", 21),
        ("shutdown_deadline: invalid duration", 22),
        ("log.format:", 24),
    ];
    for (start, line) in expected {
        assert!(
            errs.iter()
                .any(|e| e.starts_with(start) && e.ends_with(&format!("(line {line})"))),
            "no error starting with {start:?} at line {line} in {errs:#?}"
        );
    }
    assert_eq!(errs.len(), expected.len(), "{errs:#?}");
}

#[test]
fn a_cut_required_field_is_not_reported_missing_and_the_errors_after_it_still_are() {
    // group_id is required: its bad value is the error, not its absence once cut out.
    let yaml = MINIMAL
        .replace("  group_id: g", "  group_id: [not, a, string]")
        .replace("  topic: t-dlq", "  topic: t-dlq\n  tpoic: x");
    let errs = errors(&yaml, HashMap::new());
    assert!(errs[0].starts_with("kafka.group_id:"), "{errs:#?}");
    assert!(
        errs.iter().all(|e| !e.contains("missing field")),
        "{errs:#?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.starts_with("dead_letter.tpoic: unknown field")),
        "{errs:#?}"
    );
}

#[test]
fn a_yaml_syntax_error_is_reported_alone() {
    let yaml = MINIMAL.replace("  group_id: g", "  group_id: [g");
    assert_eq!(errors(&yaml, HashMap::new()).len(), 1);
}

#[test]
fn a_missing_required_field_names_its_path() {
    let yaml = MINIMAL.replace("  group_id: g\n", "");
    assert_one_error(&yaml, HashMap::new(), "kafka.group_id: missing field");
}

#[test]
fn a_bad_duration_or_size_names_its_field() {
    assert_one_error(
        &with("checkpoint:\n  interval: 5 seconds\n"),
        HashMap::new(),
        "checkpoint.interval: invalid duration `5 seconds`",
    );
    assert_one_error(
        &with("checkpoint:\n  interval: 5\n"),
        HashMap::new(),
        "checkpoint.interval: invalid duration `5`: add a unit",
    );
    assert_one_error(
        &with("writer:\n  max_request_bytes: 8 megs\n"),
        HashMap::new(),
        "writer.max_request_bytes: invalid size `8 megs`",
    );
}

#[test]
fn an_oversized_request_limit_is_refused() {
    assert_one_error(
        &with("writer:\n  max_request_bytes: 32MiB\n  max_inflight_bytes: 64MiB\n"),
        HashMap::new(),
        "writer.max_request_bytes: must be at most 20MiB",
    );
}

#[test]
fn forced_consumer_properties_cannot_be_overridden() {
    let yaml = MINIMAL.replace(
        "  topics: [t]",
        "  topics: [t]\n  properties:\n    enable.auto.commit: true\n    isolation.level: read_uncommitted\n    auto.offset.reset: earliest\n    enable.auto.offset.store: false",
    );
    let errs = errors(&yaml, HashMap::new());
    for expected in [
        "kafka.properties.\"enable.auto.commit\": forced to false by the sink",
        "kafka.properties.\"isolation.level\": forced to read_committed by the sink",
        "kafka.properties.\"auto.offset.reset\": forced to error by the sink",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(expected)),
            "{expected}: {errs:#?}"
        );
    }
    // the forced value itself is accepted
    assert!(
        !errs.iter().any(|e| e.contains("enable.auto.offset.store")),
        "{errs:#?}"
    );
}

#[test]
fn dead_letter_without_a_topic_is_refused_unless_another_policy_is_chosen() {
    let without_dlq = MINIMAL.replace("dead_letter:\n  topic: t-dlq\n", "");
    assert_one_error(
        &without_dlq,
        HashMap::new(),
        "dead_letter.topic: dead_letter.topic is required when on_bad_record is dead_letter",
    );
    assert_eq!(
        errors(
            &format!("{without_dlq}on_bad_record: fail\n"),
            HashMap::new()
        ),
        Vec::<String>::new()
    );
    // the dead-letter topic must not feed the sink itself
    let loop_dlq = MINIMAL.replace("topic: t-dlq", "topic: t");
    assert_one_error(
        &loop_dlq,
        HashMap::new(),
        "dead_letter.topic: must not be one of kafka.topics",
    );
}

#[test]
fn a_metadata_limit_below_the_worst_case_checkpoint_is_refused() {
    let worst = kafka_bigquery_sink::config::checkpoint_metadata_worst_case_len();
    assert_one_error(
        &with("checkpoint:\n  metadata_max_bytes: 100\n"),
        HashMap::new(),
        &format!(
            "checkpoint.metadata_max_bytes: 100 is below the worst-case checkpoint metadata length {worst}"
        ),
    );
    assert_eq!(
        errors(
            &with(&format!("checkpoint:\n  metadata_max_bytes: {worst}\n")),
            HashMap::new()
        ),
        Vec::<String>::new()
    );
}

#[test]
fn a_stall_timeout_shorter_than_a_second_or_a_checkpoint_interval_is_refused() {
    let error =
        "checkpoint.partition_stall_timeout: must be at least 1s and at least checkpoint.interval";
    assert_one_error(
        &with("checkpoint:\n  partition_stall_timeout: 500ms\n"),
        HashMap::new(),
        error,
    );
    assert_one_error(
        &with("checkpoint:\n  interval: 10s\n  partition_stall_timeout: 5s\n"),
        HashMap::new(),
        error,
    );
    assert_eq!(
        errors(
            &with("checkpoint:\n  interval: 10s\n  partition_stall_timeout: 10s\n"),
            HashMap::new()
        ),
        Vec::<String>::new()
    );
}

#[test]
fn resolve_needs_the_partition_and_offset_columns() {
    assert_one_error(
        &with("recovery:\n  lost_stream: resolve\n"),
        HashMap::new(),
        "recovery.lost_stream: resolve needs the metadata columns partition, offset",
    );
}

#[test]
fn lost_offsets_resolve_needs_the_same_columns_and_names_its_own_field() {
    assert_one_error(
        &with("recovery:\n  lost_offsets: resolve\n"),
        HashMap::new(),
        "recovery.lost_offsets: resolve needs the metadata columns partition, offset",
    );
    let yaml = MINIMAL.replace(
        "  table: t\n",
        "  table: t\n  metadata_columns:\n    partition: p\n    offset: o\n",
    );
    let config = Config::from_yaml(
        &format!("{yaml}recovery:\n  lost_offsets: resolve\n"),
        HashMap::new(),
    )
    .expect("parses");
    assert_eq!(
        config.recovery.lost_offsets,
        MissingCheckpointPolicy::Resolve
    );
    assert_eq!(
        errors(
            &format!("{yaml}recovery:\n  lost_offsets: resolve\n"),
            HashMap::new()
        ),
        Vec::<String>::new()
    );
}

#[test]
fn lost_offsets_resolve_under_at_least_once_warns_that_it_replays_from_the_log_start() {
    let yaml = MINIMAL.replace(
        "  table: t\n",
        "  table: t\n  metadata_columns:\n    partition: p\n    offset: o\n",
    );
    let resolve = "recovery:\n  lost_offsets: resolve\n";
    let alo = Config::from_yaml(
        &format!("{yaml}delivery: at_least_once\n{resolve}"),
        HashMap::new(),
    )
    .expect("parses");
    validate(&alo).expect("valid");
    let warned: Vec<String> = warnings(&alo).iter().map(ToString::to_string).collect();
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert!(
        warned[0].starts_with(
            "recovery.lost_offsets: resolve starts at the log start under delivery: at_least_once"
        ),
        "{warned:#?}"
    );
    // Exactly once resolves as its name says; at least once with `earliest` says it plainly.
    let eo = Config::from_yaml(&format!("{yaml}{resolve}"), HashMap::new()).expect("parses");
    assert!(warnings(&eo).is_empty());
    let earliest = Config::from_yaml(
        &format!("{yaml}delivery: at_least_once\nrecovery:\n  lost_offsets: earliest\n"),
        HashMap::new(),
    )
    .expect("parses");
    assert!(warnings(&earliest).is_empty());
}

#[test]
fn a_position_below_the_log_start_fails_unless_on_out_of_range_says_earliest() {
    let c = Config::from_yaml(MINIMAL, HashMap::new()).expect("parses");
    assert_eq!(c.recovery.on_out_of_range, OutOfRangePolicy::Fail);
    let yaml = with("recovery:\n  on_out_of_range: earliest\n");
    let c = Config::from_yaml(&yaml, HashMap::new()).expect("parses");
    validate(&c).expect("valid");
    assert_eq!(c.recovery.on_out_of_range, OutOfRangePolicy::Earliest);
    assert_one_error(
        &with("recovery:\n  on_out_of_range: latest\n"),
        HashMap::new(),
        "recovery.on_out_of_range: unknown variant `latest`",
    );
}

#[test]
fn checkpoint_barrier_timeout_still_loads_but_warns_that_it_has_no_effect() {
    // An old config: the barrier timeout above the shutdown deadline was an error before.
    let old = with("checkpoint:\n  barrier_timeout: 30s\nshutdown_deadline: 20s\n");
    let c = Config::from_yaml(&old, HashMap::new()).expect("an old config still parses");
    validate(&c).expect("and validates: the barrier timeout bounds nothing");
    let warned: Vec<String> = warnings(&c).iter().map(ToString::to_string).collect();
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert!(
        warned[0].starts_with("checkpoint.barrier_timeout: deprecated, has no effect"),
        "{warned:#?}"
    );
    let current = Config::from_yaml(MINIMAL, HashMap::new()).expect("parses");
    assert!(warnings(&current).is_empty());
}

#[test]
fn every_yaml_spelling_of_the_policies_and_table_settings_still_parses_into_the_domain_types() {
    // The config deserializes the protocol's, the writer's and the transcoder's own types; their
    // serde names are the spellings configs have always used.
    let yaml = with(
        "on_bad_record: skip\nrecovery:\n  lost_stream: fail\n  on_anomaly: continue\n  \
         start_from: latest\n  lost_offsets: latest\n  new_partitions: latest\n  \
         resolve_fallback: rewind\n",
    )
    .replace(
        "  table: t\n",
        "  table: t\n  unknown_fields: error\n  map_mode: struct\n  metadata_columns:\n    offset: o\n",
    );
    let c = Config::from_yaml(&yaml, HashMap::new()).expect("parses");
    validate(&c).expect("valid");
    assert_eq!(c.on_bad_record, BadRecordPolicy::Skip);
    assert_eq!(c.recovery.lost_stream, Some(LostStreamPolicy::Fail));
    assert_eq!(c.recovery.on_anomaly, AnomalyPolicy::Continue);
    assert_eq!(c.recovery.start_from, StartFrom::Latest);
    assert_eq!(c.recovery.lost_offsets, MissingCheckpointPolicy::Latest);
    assert_eq!(c.recovery.new_partitions, StartFrom::Latest);
    assert_eq!(c.recovery.resolve_fallback, ResolveFallback::Rewind);
    assert_eq!(c.bigquery.unknown_fields, UnknownFields::Error);
    assert_eq!(c.bigquery.map_mode, MapMode::Repeated);
    assert_eq!(c.bigquery.metadata_columns.offset.as_deref(), Some("o"));
    let json = with("").replace("  table: t\n", "  table: t\n  map_mode: json\n");
    let c = Config::from_yaml(&json, HashMap::new()).expect("parses");
    assert_eq!(c.bigquery.map_mode, MapMode::Json);
    assert_one_error(
        &with("").replace("  table: t\n", "  table: t\n  map_mode: repeated\n"),
        HashMap::new(),
        "bigquery.map_mode: unknown variant `repeated`",
    );
    assert_one_error(
        &with("").replace(
            "  table: t\n",
            "  table: t\n  metadata_columns:\n    offst: o\n",
        ),
        HashMap::new(),
        "bigquery.metadata_columns.offst: unknown field",
    );
    let sr = MINIMAL.replace(
        "avro:\n  schema_file: s.avsc\n",
        "schema_registry:\n  url: http://sr:8081\n  protobuf_message_indexes: unsigned\n",
    );
    let c = Config::from_yaml(&sr, HashMap::new()).expect("parses");
    let sr = c.schema_registry.expect("a registry");
    assert_eq!(sr.protobuf_message_indexes, MessageIndexEncoding::Unsigned);
}

#[test]
fn resolve_is_refused_on_tables_that_require_a_partition_filter() {
    let yaml = MINIMAL.replace(
        "  table: t\n",
        "  table: t\n  metadata_columns:\n    partition: p\n    offset: o\n  create_table:\n    \
         time_partitioning:\n      type: DAY\n    require_partition_filter: true\n",
    );
    assert_one_error(
        &format!("{yaml}recovery:\n  lost_stream: resolve\n"),
        HashMap::new(),
        "recovery.lost_stream: resolve queries by partition and offset, which a table created \
         with bigquery.create_table.require_partition_filter refuses",
    );
    // Without an explicit policy the default is rewind, not resolve.
    let config = Config::from_yaml(&yaml, HashMap::new()).expect("parses");
    assert_eq!(config.effective_lost_stream(), LostStreamPolicy::Rewind);
    let without = yaml.replace("    require_partition_filter: true\n", "");
    let config = Config::from_yaml(&without, HashMap::new()).expect("parses");
    assert_eq!(config.effective_lost_stream(), LostStreamPolicy::Resolve);
    assert_one_error(
        &with("recovery:\n  resolve_attempts: 0\n  lost_stream: rewind\n"),
        HashMap::new(),
        "recovery.resolve_attempts: must be at least 1",
    );
}

#[test]
fn every_error_is_reported_at_once() {
    let yaml = with(
        "checkpoint:\n  metadata_max_bytes: 10\nwriter:\n  max_rows_per_request: 0\nbigquery_never: 1\n",
    );
    // a parse error stops before validation: one error
    assert_eq!(errors(&yaml, HashMap::new()).len(), 1);
    let yaml = with("checkpoint:\n  metadata_max_bytes: 10\nwriter:\n  max_rows_per_request: 0\n")
        .replace("group_id: g", "group_id: \"\"");
    let errs = errors(&yaml, HashMap::new());
    assert_eq!(errs.len(), 3, "{errs:#?}");
}

#[test]
fn the_validate_command_prints_config_ok_or_every_error_with_exit_code_1() {
    let bin = crate::support::daemon::binary();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/gke-production.yaml");
    let ok = Command::new(&bin)
        .args(["validate", "-c"])
        .arg(&example)
        .env_clear()
        .envs(example_env())
        .output()
        .expect("run validate");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "config ok");

    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        with("checkpoint:\n  metadata_max_bytes: 10\n")
            .replace("dead_letter:\n  topic: t-dlq\n", ""),
    )
    .expect("write");
    let out = Command::new(&bin)
        .args(["validate", "-c"])
        .arg(&bad)
        .output()
        .expect("run validate");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("checkpoint.metadata_max_bytes: 10 is below"),
        "{stderr}"
    );
    assert!(stderr.contains("dead_letter.topic: "), "{stderr}");
    // a secret from the environment never appears in the output of a failed validation
    assert!(!stderr.contains("p@ss"), "{stderr}");
}

#[test]
fn the_sasl_example_shares_its_connection_with_the_dead_letter_producer_and_subscribes_by_pattern()
{
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sasl-ssl-kafka.yaml");
    let text = std::fs::read_to_string(path).expect("read example");
    let c = Config::from_yaml(&text, example_env()).expect("parses");
    assert_eq!(c.kafka.subscription(), vec!["^payments\\..*".to_string()]);
    // KIP-848: the broker assigns, so no client-side assignor is configured
    assert!(
        !c.kafka
            .consumer_properties()
            .contains_key("partition.assignment.strategy")
    );
    let dl = c.dead_letter.as_ref().expect("dead_letter section");
    let props = dl.producer_properties(&c.kafka);
    for (k, v) in [
        ("bootstrap.servers", "broker-1:9092,broker-2:9092"),
        ("security.protocol", "SASL_SSL"),
        ("sasl.password", "secret"),
        ("acks", "all"),
        ("linger.ms", "20"),
    ] {
        assert_eq!(props.get(k).map(String::as_str), Some(v), "{k}");
    }
    // consumer-only settings stay with the consumer
    assert!(!props.contains_key("group.protocol"));
}

#[test]
fn an_unknown_enum_value_names_its_field_and_the_choices() {
    assert_one_error(
        &with("delivery: exactly-once\n"),
        HashMap::new(),
        "delivery: unknown variant `exactly-once`, expected one of exactly_once, at_least_once",
    );
}

#[test]
fn an_empty_file_says_what_is_required() {
    for empty in ["", "# only a comment\n\n"] {
        assert_one_error(empty, HashMap::new(), "<root>: the config is empty");
    }
}

#[test]
fn table_and_credential_rules_name_their_fields() {
    let yaml = MINIMAL.replace(
        "  table: t\n",
        "  table: t\n  credentials: none\n  create_table:\n    require_partition_filter: true\n    clustering: [a, b, c, d, e]\n    labels:\n      Team: x\n    protobuf_message: shop..Order\n",
    );
    let errs = errors(&yaml, HashMap::new());
    for expected in [
        "bigquery.credentials: none is only for an emulator",
        "bigquery.create_table.require_partition_filter: requires bigquery.create_table.time_partitioning",
        "bigquery.create_table.clustering: at most 4 columns",
        "bigquery.create_table.labels.\"Team\": a label key",
        "bigquery.create_table.protobuf_message: `shop..Order` is not the full name",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(expected)),
            "{expected}: {errs:#?}"
        );
    }
    assert_eq!(errs.len(), 5, "{errs:#?}");
}

#[test]
fn topics_and_a_pattern_are_exclusive() {
    let both = MINIMAL.replace("  topics: [t]", "  topics: [t]\n  topic_pattern: t.*");
    assert_one_error(
        &both,
        HashMap::new(),
        "kafka.topic_pattern: set either kafka.topics or kafka.topic_pattern, not both",
    );
    let neither = MINIMAL.replace("  topics: [t]\n", "");
    assert_one_error(
        &neither,
        HashMap::new(),
        "kafka.topics: set kafka.topics or kafka.topic_pattern",
    );
}

#[test]
fn secrets_never_show_in_a_printed_config() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sasl-ssl-kafka.yaml");
    let text = std::fs::read_to_string(path).expect("read example");
    let mut env = example_env();
    env.insert("KAFKA_PASSWORD".into(), "kafka-pw-4711".into());
    env.insert("SCHEMA_REGISTRY_TOKEN".into(), "sr-token-4711".into());
    let c = Config::from_yaml(&text, env).expect("parses");
    let dl = c.dead_letter.as_ref().expect("dead_letter");
    let printed = format!(
        "{c:?} {:?} {:?}",
        c.kafka.consumer_properties(),
        dl.producer_properties(&c.kafka)
    );
    assert!(!printed.contains("4711"), "{printed}");
    assert!(
        printed.contains("SCRAM-SHA-512"),
        "other properties stay readable"
    );
    // the values are still there for librdkafka
    assert_eq!(
        c.kafka.consumer_properties()["sasl.password"],
        "kafka-pw-4711"
    );
}

#[test]
fn a_log_level_must_be_a_level_or_a_filter() {
    assert_one_error(
        &with("log:\n  level: verbose\n"),
        HashMap::new(),
        "log.level: `verbose` is not a level",
    );
    assert_eq!(
        errors(
            &with("log:\n  level: warn,kafka_bigquery_sink::writer=trace\n"),
            HashMap::new()
        ),
        Vec::<String>::new()
    );
}

#[test]
fn routes_are_checked_with_their_paths() {
    let yaml = with(
        "routes:\n  - topics: [t, nope]\n    topic_pattern: x\n    table: a.b\n  - table: x\n    metadata_columns:\n      offset: 1bad\n    create_table:\n      clustering: [a, b, c, d, e]\n  - topic_pattern: '(unclosed'\n",
    );
    let errs = errors(&yaml, HashMap::new());
    for expected in [
        "routes[0].topic_pattern: set either topics or topic_pattern, not both",
        "routes[0].topics[1]: `nope` is not in kafka.topics",
        "routes[0].table: a table id, not a path",
        "routes[1].topics: set topics or topic_pattern",
        "routes[1].metadata_columns.offset: `1bad` is not a column name",
        "routes[1].create_table.clustering: at most 4 columns",
        "routes[2].topic_pattern: not a regular expression",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(expected)),
            "{expected}: {errs:#?}"
        );
    }
}

#[test]
fn listed_topics_that_a_template_sanitises_into_one_table_are_refused_but_a_fixed_table_is_shared()
{
    let template = MINIMAL
        .replace("  topics: [t]", "  topics: [a.b, a-b, c]")
        .replace("  table: t\n", "  table: \"x_{topic}\"\n");
    assert_one_error(
        &template,
        HashMap::new(),
        "kafka.topics[1]: `a-b` and `a.b` both become table `x_a_b` through the {topic} template",
    );
    // The same topics into one fixed table, on purpose.
    let fixed = MINIMAL.replace("  topics: [t]", "  topics: [a.b, a-b, c]");
    assert_eq!(errors(&fixed, HashMap::new()), Vec::<String>::new());
    // Or through a route: a.b and a-b share `ab`, c gets `x_c`.
    let routed = format!(
        "{template}routes:\n  - topics: [a.b, a-b]\n    table: ab\n",
        template = template
    );
    assert_eq!(errors(&routed, HashMap::new()), Vec::<String>::new());
}

#[test]
fn one_table_is_written_with_one_set_of_route_settings() {
    // Two routes naming the same fixed table would write it with two sets of settings.
    let yaml = MINIMAL
        .replace("  topics: [t]", "  topics: [t, u, v]")
        .replace("  table: t\n", "  table: \"{topic}\"\n")
        + "routes:\n  - topics: [u]\n    table: shared\n  - topics: [v]\n    table: shared\n    map_mode: json\n";
    let errs = errors(&yaml, HashMap::new());
    assert!(
        errs.iter()
            .any(|e| e
                .starts_with("routes[1].table: table `shared` is also written by routes[0].table")),
        "{errs:#?}"
    );
}

#[test]
fn the_first_matching_route_decides_and_unmatched_topics_use_the_top_level_settings() {
    let yaml = MINIMAL
        .replace("  topics: [t]", "  topic_pattern: 'shop\\..*'")
        .replace(
            "  table: t\n",
            "  table: \"{topic}\"\n  metadata_columns:\n    offset: off\n",
        )
        + "routes:\n  - topic_pattern: 'shop\\.clicks\\..*'\n    table: clicks\n    metadata_columns:\n      topic: src\n  - topic_pattern: 'shop\\.clicks\\.web'\n    table: never\n  - topic_pattern: 'shop\\.pay.*'\n    avro:\n      schema_file: pay.avsc\n";
    let config = Config::from_yaml(&yaml, HashMap::new()).expect("parses");
    assert_eq!(validate(&config), Ok(()));
    let clicks = config.route_for("shop.clicks.web");
    assert_eq!((clicks.route, clicks.table.as_str()), (Some(0), "clicks"));
    assert_eq!(clicks.metadata_columns.topic.as_deref(), Some("src"));
    assert_eq!(
        clicks.metadata_columns.offset, None,
        "a route's columns replace the top-level ones"
    );
    let orders = config.route_for("shop.orders-v2");
    assert_eq!(
        (orders.route, orders.table.as_str()),
        (None, "shop_orders_v2")
    );
    assert_eq!(orders.metadata_columns.offset.as_deref(), Some("off"));
    assert_eq!(orders.schema_file, Some(Path::new("s.avsc")));
    let pay = config.route_for("shop.payments");
    assert_eq!((pay.route, pay.table.as_str()), (Some(2), "shop_payments"));
    assert_eq!(pay.schema_file, Some(Path::new("pay.avsc")));
    // A pattern must match the whole name.
    assert_eq!(
        config.route_for("xshop.clicks.web").route,
        Some(2).filter(|_| false)
    );
}

#[test]
fn a_table_template_names_the_groups_of_the_route_pattern_by_number_or_name() {
    let yaml = MINIMAL.replace("  topics: [t]", "  topic_pattern: 'prod\\..*'")
        + "routes:\n  - topic_pattern: 'prod\\.(?P<entity>[a-z_]+)\\.v\\d+'\n    table: '{entity}'\n  - topic_pattern: 'prod\\.(eu|us)\\.([a-z]+)'\n    table: '{2}'\n    dataset: 'sales_{1}'\n    project: other-project\n";
    let config = Config::from_yaml(&yaml, HashMap::new()).expect("parses");
    assert_eq!(validate(&config), Ok(()));
    let orders = config.route_for("prod.order-lines.v1");
    assert_eq!(orders.route, None, "the group takes no `-`: not routes[0]");
    let orders = config.route_for("prod.order_lines.v12");
    assert_eq!(
        (
            orders.route,
            orders.qualified_table().as_str(),
            orders.label.as_str()
        ),
        (Some(0), "p.d.order_lines", "order_lines")
    );
    let eu = config.route_for("prod.eu.refunds");
    assert_eq!(
        (eu.route, eu.qualified_table().as_str(), eu.label.as_str()),
        (
            Some(1),
            "other-project.sales_eu.refunds",
            "other-project.sales_eu.refunds"
        )
    );
}

#[test]
fn a_template_group_the_pattern_lacks_or_a_group_on_a_topics_route_is_refused() {
    let yaml = MINIMAL.replace("  topics: [t]", "  topic_pattern: 'prod\\..*'")
        + "routes:\n  - topic_pattern: 'prod\\.(?P<entity>[a-z]+)'\n    table: '{entity}_{name}'\n  - topic_pattern: 'prod\\.x\\.([a-z]+)'\n    table: '{2}'\n  - topics: [prod.y]\n    table: '{1}'\n  - topic_pattern: 'prod\\.z\\.(?P<topic>.+)'\n    dataset: '{topic}_{'\n";
    let errs = errors(&yaml, HashMap::new());
    for expected in [
        "routes[0].table: `{name}` is not a group of the route's topic_pattern (it has {1} or {entity})",
        "routes[1].table: `{2}` is not a group of the route's topic_pattern (it has {1})",
        "routes[2].table: `{1}` is a group of a topic_pattern, but routes[2] lists topics",
        "routes[3].topic_pattern: a group named `topic` cannot be named in a template",
        "routes[3].dataset: a `{` without its `}`",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(expected)),
            "expected {expected:?} in {errs:#?}"
        );
    }
    assert_one_error(
        &MINIMAL.replace("  table: t\n", "  table: '{1}'\n"),
        HashMap::new(),
        "bigquery.table: `{1}` is a group of a route's topic_pattern: the bigquery section has none",
    );
}

#[test]
fn a_route_dataset_or_project_that_bigquery_would_refuse_is_named() {
    let yaml = MINIMAL.replace("  topics: [t]", "  topics: [t, u, v, w]")
        + "routes:\n  - topics: [u]\n    dataset: has-dash\n  - topics: [v]\n    project: Upper_Case\n  - topics: [w]\n    project: 'p{topic}'\n    dataset: 'x{topic}'\n";
    let errs = errors(&yaml, HashMap::new());
    for expected in [
        "routes[0].dataset: must be letters, digits and underscores",
        "routes[1].project: `Upper_Case` is not a project id",
        "routes[2].project: a project id, not a template",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(expected)),
            "expected {expected:?} in {errs:#?}"
        );
    }
    assert!(
        !errs.iter().any(|e| e.starts_with("routes[2].dataset")),
        "{errs:#?}"
    );
}

#[test]
fn one_table_id_in_two_datasets_is_two_tables() {
    // The same fixed table id in another dataset (or project) is another table: no collision.
    let yaml = MINIMAL.replace("  topics: [t]", "  topics: [t, u, v]")
        + "routes:\n  - topics: [u]\n    table: t\n    dataset: archive\n  - topics: [v]\n    table: t\n    project: p2\n    map_mode: json\n";
    assert_eq!(errors(&yaml, HashMap::new()), Vec::<String>::new());
    let config = Config::from_yaml(&yaml, HashMap::new()).expect("parses");
    let labels: Vec<String> = ["t", "u", "v"]
        .iter()
        .map(|t| config.route_for(t).label)
        .collect();
    assert_eq!(labels, ["t", "archive.t", "p2.d.t"]);
    // In the same dataset it is one table written with two sets of settings.
    let same = yaml
        .replace("    dataset: archive\n", "")
        .replace("    project: p2\n", "");
    assert_one_error(
        &same,
        HashMap::new(),
        "routes[1].table: table `t` is also written by routes[0].table",
    );
}

#[test]
fn a_topic_two_routes_would_write_to_different_tables_is_refused() {
    // routes[1] lists a topic routes[0]'s pattern takes first, into another dataset's table.
    let yaml = MINIMAL.replace("  topics: [t]", "  topics: [t, prod.orders.v1]")
        + "routes:\n  - topic_pattern: 'prod\\.(?P<entity>[a-z]+)\\.v1'\n    table: '{entity}'\n  - topics: [prod.orders.v1]\n    table: orders\n    dataset: archive\n";
    assert_one_error(
        &yaml,
        HashMap::new(),
        "routes[1].topics[0]: `prod.orders.v1` is taken by routes[0] first, which writes it to `p.d.orders`; this route would write it to `p.archive.orders`",
    );
    // Into the same table it changes nothing that matters here: no error.
    let same = yaml.replace("    dataset: archive\n", "");
    assert_eq!(errors(&same, HashMap::new()), Vec::<String>::new());
}

#[test]
fn resolve_needs_the_columns_in_every_route() {
    let yaml = MINIMAL
        .replace("  topics: [t]", "  topics: [t, u]")
        .replace(
            "  table: t\n",
            "  table: \"{topic}\"\n  metadata_columns:\n    partition: p\n    offset: o\n",
        )
        + "routes:\n  - topics: [u]\n    metadata_columns:\n      offset: o\nrecovery:\n  lost_stream: resolve\n";
    assert_one_error(
        &yaml,
        HashMap::new(),
        "recovery.lost_stream: resolve needs the metadata columns partition: set routes[0].metadata_columns.partition",
    );
    // Without an explicit policy the default falls back to rewind.
    let yaml = yaml.replace("recovery:\n  lost_stream: resolve\n", "");
    let config = Config::from_yaml(&yaml, HashMap::new()).expect("parses");
    assert_eq!(config.effective_lost_stream(), LostStreamPolicy::Rewind);
}

/// MINIMAL subscribing by `pattern` (as written in YAML, single-quoted).
fn with_pattern(pattern: &str) -> String {
    MINIMAL.replace(
        "  topics: [t]\n",
        &format!("  topic_pattern: '{pattern}'\n"),
    )
}

#[test]
fn a_topic_pattern_librdkafka_cannot_compile_is_refused_naming_the_field() {
    for bad in ["orders-(", "orders[", "orders[[:letter:]]", "(orders|"] {
        let errs = errors(&with_pattern(bad), HashMap::new());
        assert!(
            errs.iter().any(|e| e.starts_with(
                "kafka.topic_pattern: not a regular expression librdkafka accepts (POSIX extended): "
            )),
            "{bad}: {errs:#?}"
        );
        assert_eq!(errs.len(), 1, "{bad}: {errs:#?}");
    }
    for good in [
        "orders",
        "^orders$",
        "orders-[[:digit:]]+",
        "(eu|us)\\.orders",
        "t.*",
    ] {
        assert_eq!(
            errors(&with_pattern(good), HashMap::new()),
            Vec::<String>::new(),
            "{good}"
        );
    }
    // Under KIP-848 the broker matches the pattern (RE2/J): a POSIX-only construct such as a
    // back-reference is refused too.
    let kip848 = with_pattern("(orders)\\1").replace(
        "  topic_pattern:",
        "  properties:\n    group.protocol: consumer\n  topic_pattern:",
    );
    assert_one_error(
        &kip848,
        HashMap::new(),
        "kafka.topic_pattern: not a regular expression the broker accepts with group.protocol=consumer",
    );
}

#[test]
fn no_topic_pattern_ever_takes_an_internal_topic() {
    // The subscription: librdkafka is told to ignore every `__*` topic, whatever the pattern.
    let everything = Config::from_yaml(
        &with_pattern(".*").replace(
            "dead_letter:",
            "routes:\n  - topic_pattern: '.*'\n    table: all\ndead_letter:",
        ),
        HashMap::new(),
    )
    .expect("parses");
    let blacklist = everything
        .consumer_properties()
        .get("topic.blacklist")
        .cloned();
    assert!(
        blacklist
            .as_deref()
            .is_some_and(|b| b.split(',').any(|e| e == "^__.*")),
        "{blacklist:?}"
    );
    // A route's pattern: it matches everything but the internal topics.
    let route = &everything.routes[0];
    assert!(route.matches("orders"));
    assert!(route.matches("_schemas"));
    for internal in [
        "__consumer_offsets",
        "__transaction_state",
        "__cluster_metadata",
    ] {
        assert!(!route.matches(internal), "{internal}");
    }
    // A topic listed by name is the operator's choice: nothing is added for a list.
    let listed = Config::from_yaml(MINIMAL, HashMap::new()).expect("parses");
    assert!(
        !(listed.consumer_properties().get("topic.blacklist")).is_some_and(|b| b.contains("__")),
        "no exclusion without a pattern"
    );
}

#[test]
fn a_topic_pattern_matching_the_dead_letter_topic_warns_and_the_subscription_excludes_it() {
    // Anchored at the start only, as librdkafka reads it: `t` takes `t-dlq` too.
    let broad = Config::from_yaml(&with_pattern("t"), HashMap::new()).expect("parses");
    validate(&broad).expect("valid: the dead-letter topic is excluded at run time");
    let warned: Vec<String> = warnings(&broad).iter().map(ToString::to_string).collect();
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert!(
        warned[0].starts_with("kafka.topic_pattern: matches the dead-letter topic `t-dlq`"),
        "{warned:#?}"
    );
    assert_eq!(broad.excluded_topics(), vec!["t-dlq".to_string()]);
    assert_eq!(
        broad
            .consumer_properties()
            .get("topic.blacklist")
            .map(String::as_str),
        Some("^t-dlq$,^__.*")
    );

    // Ending the pattern says it plainly; a user's own blacklist entries are kept.
    let narrow = Config::from_yaml(
        &with_pattern("t$").replace(
            "  topic_pattern:",
            "  properties:\n    topic.blacklist: '^tmp\\.'\n  topic_pattern:",
        ),
        HashMap::new(),
    )
    .expect("parses");
    validate(&narrow).expect("valid");
    assert!(warnings(&narrow).is_empty());
    assert_eq!(
        narrow
            .consumer_properties()
            .get("topic.blacklist")
            .map(String::as_str),
        Some("^tmp\\.,^t-dlq$,^__.*")
    );

    // A dead-letter topic with a dot: the dot is literal in the exclusion.
    let dotted = Config::from_yaml(
        &with_pattern("t").replace("topic: t-dlq", "topic: t.dlq"),
        HashMap::new(),
    )
    .expect("parses");
    assert_eq!(
        dotted
            .consumer_properties()
            .get("topic.blacklist")
            .map(String::as_str),
        Some("^t\\.dlq$,^__.*")
    );

    // The validate command prints the warning and still succeeds.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("broad.yaml");
    std::fs::write(&path, with_pattern("t")).expect("write");
    let out = Command::new(crate::support::daemon::binary())
        .args(["validate", "-c"])
        .arg(&path)
        .output()
        .expect("run validate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: kafka.topic_pattern: matches the dead-letter topic `t-dlq`"),
        "{stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "config ok");
}

const REGISTRY: &str = "\
kafka:
  bootstrap_servers: 127.0.0.1:9092
  group_id: g
  topics: [a, b]
schema_registry:
  url: http://127.0.0.1:8081
bigquery:
  project: p
  dataset: d
  table: t
dead_letter:
  topic: t-dlq
";

#[test]
fn registry_formats_create_and_evolve_tables_and_protobuf_needs_the_registry() {
    // Avro, Protobuf, JSON Schema, or (no format) each schema id's registered type: all of them
    // create and evolve tables from the registered schema.
    for format in [
        "",
        "  format: avro\n",
        "  format: protobuf\n",
        "  format: json_schema\n",
    ] {
        let yaml = REGISTRY
            .replace(
                "  url: http://127.0.0.1:8081\n",
                &format!("  url: http://127.0.0.1:8081\n{format}"),
            )
            .replace(
                "  table: t\n",
                "  table: t\n  create_table: {}\n  schema_update: add_columns\n",
            )
            + "routes:\n  - topics: [a]\n    format: protobuf\n    table: ta\n  - topics: [b]\n    table: tb\n    create_table: {}\n";
        assert_eq!(
            errors(&yaml, HashMap::new()),
            Vec::<String>::new(),
            "{format}"
        );
    }
    assert_one_error(
        &with("routes:\n  - topics: [t]\n    format: protobuf\n"),
        HashMap::new(),
        "routes[0].format: protobuf records are read through schema_registry",
    );
}

#[test]
fn schema_update_takes_its_four_levels_per_route_and_nothing_else() {
    for level in ["none", "add_columns", "relax_columns", "union"] {
        let yaml = REGISTRY.replace(
            "  table: t\n",
            &format!("  table: t\n  schema_update: {level}\n"),
        ) + &format!(
            "routes:\n  - topics: [a, b]\n    table: ab\n    schema_update: {level}\n"
        );
        assert_eq!(
            errors(&yaml, HashMap::new()),
            Vec::<String>::new(),
            "{level}"
        );
    }
    let errs = errors(
        &REGISTRY.replace("  table: t\n", "  table: t\n  schema_update: relax\n"),
        HashMap::new(),
    );
    assert!(
        errs.iter()
            .any(|e| e.contains("schema_update") && e.contains("relax_columns")),
        "{errs:?}"
    );
    // Schemaless JSON has no schema to change the table from, at any level.
    let schemaless = REGISTRY.replace(
        "schema_registry:\n  url: http://127.0.0.1:8081\n",
        "json: {}\n",
    );
    for level in ["relax_columns", "union"] {
        assert_one_error(
            &schemaless.replace(
                "  table: t\n",
                &format!("  table: t\n  schema_update: {level}\n"),
            ),
            HashMap::new(),
            &format!("bigquery.schema_update: {level} is not supported for schemaless json (json)"),
        );
    }
}

#[test]
fn json_inputs_name_the_registry_and_table_fields_they_need_or_refuse() {
    let schemaless = REGISTRY.replace(
        "schema_registry:\n  url: http://127.0.0.1:8081\n",
        "json: {}\n",
    );
    assert_eq!(errors(&schemaless, HashMap::new()), Vec::<String>::new());
    let json_schema = REGISTRY.replace(
        "  url: http://127.0.0.1:8081\n",
        "  url: http://127.0.0.1:8081\n  format: json_schema\n  json_validate: true\n",
    );
    assert_eq!(errors(&json_schema, HashMap::new()), Vec::<String>::new());
    let yaml = schemaless.replace(
        "  table: t\n",
        "  table: t\n  create_table: {}\n  schema_update: add_columns\n",
    ) + "routes:\n  - topics: [a]\n    format: json_schema\n    table: ta\n";
    let errs = errors(&yaml, HashMap::new());
    for expected in [
        "bigquery.create_table: create_table is not supported for schemaless json (json)",
        "bigquery.schema_update: add_columns is not supported for schemaless json (json)",
        "routes[0].format: json_schema needs schema_registry",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(expected)),
            "{expected}: {errs:#?}"
        );
    }
    assert_one_error(
        &with("json: {}\n"),
        HashMap::new(),
        "json: set either json or avro.schema_file, not both",
    );
    // A CDC route reads schemaless JSON too (docs/cdc.md), given its key columns.
    let cdc = schemaless.replace("  table: t\n", "  table: t\n  create_table: {}\n")
        + "delivery: at_least_once\nroutes:\n  - topics: [a]\n    table: ta\n    cdc:\n      mode: upsert\n      primary_key: [id]\n";
    let errs = errors(&cdc, HashMap::new());
    assert!(
        !errs.iter().any(|e| e.starts_with("routes[0].cdc")),
        "{errs:#?}"
    );
}

#[test]
fn a_misspelt_librdkafka_property_fails_validate_naming_the_key_never_the_value() {
    let yaml = MINIMAL.replace(
        "  topics: [t]\n",
        "  topics: [t]\n  properties:\n    sasl.pasword: hunter2-4711\n    fetch.wait.max.ms: soon-4711\n",
    );
    let errs = errors(&yaml, HashMap::new());
    assert!(
        errs.iter().any(
            |e| e == "kafka.properties.\"sasl.pasword\": not a librdkafka property (misspelt?)"
        ),
        "{errs:#?}"
    );
    assert!(
        errs.iter().any(|e| e
            .starts_with("kafka.properties.\"fetch.wait.max.ms\": librdkafka refuses the value")),
        "{errs:#?}"
    );
    assert!(!errs.iter().any(|e| e.contains("hunter2")), "{errs:#?}");
    let dl = MINIMAL.replace(
        "  topic: t-dlq\n",
        "  topic: t-dlq\n  properties:\n    ssl.key.passwrd: hunter2-4711\n",
    );
    let errs = errors(&dl, HashMap::new());
    assert_eq!(
        errs,
        vec!["dead_letter.properties.\"ssl.key.passwrd\": not a librdkafka property (misspelt?)"]
    );
}

#[test]
fn secret_bearing_keys_are_hidden_even_when_misspelt() {
    use kafka_bigquery_sink::config::Properties;
    for key in [
        "sasl.password",
        "sasl.pasword",
        "sasl.jaas.config",
        "ssl.key.pem",
        "ssl.key.password",
        "ssl.keystore.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "sasl.oauthbearer.token.endpoint.url.token",
        "sasl.oauthbearer.assertion.private.key.passphrase",
    ] {
        assert!(Properties::is_secret(key), "{key}");
    }
    for key in ["sasl.mechanism", "security.protocol", "fetch.max.bytes"] {
        assert!(!Properties::is_secret(key), "{key}");
    }
}

#[test]
fn an_http_endpoint_with_real_credentials_is_refused_unless_it_is_a_local_emulator() {
    let http = MINIMAL.replace(
        "  table: t\n",
        "  table: t\n  endpoint: http://bigquery.example.internal\n",
    );
    assert_one_error(
        &http,
        HashMap::new(),
        "bigquery.endpoint: an http:// endpoint would carry the credentials' bearer token in the clear",
    );
    let emulator = http.replace("  table: t\n", "  table: t\n  local_emulator: true\n");
    assert_eq!(errors(&emulator, HashMap::new()), Vec::<String>::new());
    let none = http.replace("  table: t\n", "  table: t\n  credentials: none\n");
    assert_eq!(errors(&none, HashMap::new()), Vec::<String>::new());
    let https = MINIMAL.replace(
        "  table: t\n",
        "  table: t\n  endpoint: https://bigquery.example.internal\n",
    );
    assert_eq!(errors(&https, HashMap::new()), Vec::<String>::new());
}

#[test]
fn turning_off_certificate_checks_is_warned_about() {
    let yaml = MINIMAL
        .replace(
            "  topics: [t]\n",
            "  topics: [t]\n  properties:\n    security.protocol: ssl\n    enable.ssl.certificate.verification: 'false'\n",
        )
        .replace(
            "  topic: t-dlq\n",
            "  topic: t-dlq\n  properties:\n    ssl.endpoint.identification.algorithm: none\n",
        );
    let c = Config::from_yaml(&yaml, HashMap::new()).expect("parses");
    validate(&c).expect("valid: only warned about");
    let warned: Vec<String> = warnings(&c).iter().map(ToString::to_string).collect();
    for expected in [
        "kafka.properties.\"enable.ssl.certificate.verification\": the brokers' certificates are not verified",
        "dead_letter.properties.\"ssl.endpoint.identification.algorithm\": the brokers' host names are not checked",
    ] {
        assert!(
            warned.iter().any(|w| w.starts_with(expected)),
            "{expected}: {warned:#?}"
        );
    }
}

#[test]
fn project_dataset_and_table_names_follow_bigquerys_rules() {
    for (field, value, expected) in [
        (
            "project: p",
            "project: ../../../x",
            "bigquery.project: `../../../x` is not a project id",
        ),
        (
            "project: p",
            "project: Acme",
            "bigquery.project: `Acme` is not a project id",
        ),
        (
            "project: p",
            "project: 'cfg?alt=media'",
            "bigquery.project: `cfg?alt=media` is not a project id",
        ),
        (
            "table: t",
            "table: 'cfg?alt=media'",
            "bigquery.table: '?' cannot be in a table id",
        ),
        (
            "table: t",
            "table: 'cfg#x'",
            "bigquery.table: '#' cannot be in a table id",
        ),
        (
            "table: t",
            "table: 'x%2Fy'",
            "bigquery.table: '%' cannot be in a table id",
        ),
    ] {
        let yaml = MINIMAL.replace(field, value);
        assert_one_error(&yaml, HashMap::new(), expected);
    }
    let long = MINIMAL.replace("dataset: d", &format!("dataset: {}", "d".repeat(1025)));
    assert_one_error(
        &long,
        HashMap::new(),
        "bigquery.dataset: at most 1024 bytes",
    );
    for (field, value) in [
        ("project: p", "project: example.com:my-project-7"),
        ("table: t", "table: 'orders 2024-eu_{topic}'"),
        ("table: t", "table: bestellungen_größe"),
    ] {
        let yaml = MINIMAL.replace(field, value);
        assert_eq!(
            errors(&yaml, HashMap::new()),
            Vec::<String>::new(),
            "{value}"
        );
    }
}

#[test]
fn secrets_are_read_from_files_and_never_printed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("write");
        p.display().to_string()
    };
    let password = write("sr-password", "sr-pw-4711\n");
    let kafka = write("kafka-password", "kafka-pw-4711\r\n");
    let yaml = format!(
        "{}schema_registry:\n  url: https://sr.example.internal\n  username: kbq\n  password_file: {password}\n",
        MINIMAL
            .replace("avro:\n  schema_file: s.avsc\n", "")
            .replace(
                "  topics: [t]\n",
                &format!("  topics: [t]\n  properties:\n    security.protocol: sasl_ssl\n    sasl.mechanism: PLAIN\n    sasl.username: kbq\n  property_files:\n    sasl.password: {kafka}\n"),
            )
    );
    let config_file = write("config.yaml", &yaml);
    let c = Config::load(Path::new(&config_file)).expect("loads");
    let sr = c.schema_registry.as_ref().expect("registry");
    assert_eq!(sr.password.as_ref().expect("read").expose(), "sr-pw-4711");
    assert_eq!(
        c.kafka.consumer_properties()["sasl.password"],
        "kafka-pw-4711"
    );
    assert!(!format!("{c:?}").contains("4711"));

    // Both forms, or a file that is not there: the field is named, the contents never.
    let both = yaml.replace(
        "  username: kbq\n",
        "  username: kbq\n  password: inline-4711\n",
    );
    let missing = yaml.replace(&password, "/nonexistent/sr-password");
    for (text, expected) in [
        (
            both,
            "schema_registry.password_file: set either schema_registry.password or schema_registry.password_file, not both",
        ),
        (
            missing,
            "schema_registry.password_file: cannot read /nonexistent/sr-password",
        ),
    ] {
        let file = write("bad.yaml", &text);
        let errs = Config::load(Path::new(&file))
            .expect_err("refused")
            .errors();
        assert!(errs.iter().any(|e| e.starts_with(expected)), "{errs:#?}");
        assert!(!errs.iter().any(|e| e.contains("4711")), "{errs:#?}");
    }
}

#[test]
fn a_config_past_the_parsers_size_limit_says_so_in_words() {
    let huge = format!(
        "{}  location: {}\n",
        MINIMAL.replace("dead_letter:\n  topic: t-dlq\n", ""),
        "x".repeat(65 << 20)
    );
    let huge = format!("{huge}dead_letter:\n  topic: t-dlq\n");
    let errs = errors(&huge, HashMap::new());
    assert_eq!(
        errs.len(),
        1,
        "{}",
        errs.join("\n").chars().take(500).collect::<String>()
    );
    assert!(
        errs[0].contains("the config is too large to be a config"),
        "{}",
        &errs[0]
    );
    assert!(!errs[0].contains("budget breached"), "{}", &errs[0]);
    assert!(!errs[0].contains("ScalarBytes"), "{}", &errs[0]);
}

/// MINIMAL with `lines` added to its `bigquery` section.
fn in_bigquery(lines: &str) -> String {
    MINIMAL.replacen("  table: t\n", &format!("  table: t\n{lines}"), 1)
}

#[test]
fn transforms_parse_from_yaml_with_static_values_typed_as_the_yaml_writes_them() {
    use kbq_transcode::transforms::{KafkaField, Literal, Transform};
    let yaml = in_bigquery(
        "  transforms:
    - drop: {field: internal}
    - rename: {field: customer.full_name, to: name}
    - mask: {field: ssn}
    - mask: {field: card, value: \"****\"}
    - set: {column: n, value: 12}
    - set: {column: s, value: \"12\"}
    - set: {column: f, value: 1.5}
    - set: {column: b, value: true}
    - set: {column: trace, header: trace-id, encoding: string}
    - set: {column: kafka_offset, from: offset}
    - filter: {tombstone: true}
    - filter: {header: env, equals: test, negate: true}
",
    );
    assert_eq!(errors(&yaml, HashMap::new()), Vec::<String>::new());
    let config = Config::from_yaml(&yaml, HashMap::new()).unwrap();
    let t = &config.bigquery.transforms;
    assert_eq!(t.len(), 12);
    let value = |i: usize| match &t[i] {
        Transform::Set(s) => s.value.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(value(4), Some(Literal::Int(12)));
    assert_eq!(value(5), Some(Literal::Text("12".into())));
    assert_eq!(value(6), Some(Literal::Float(1.5)));
    assert_eq!(value(7), Some(Literal::Bool(true)));
    assert!(matches!(&t[9], Transform::Set(s) if s.from == Some(KafkaField::Offset)));
    // A route without its own list takes the top-level one.
    assert_eq!(config.route_for("t").transforms.len(), 12);
}

#[test]
fn a_bad_transform_is_refused_with_the_path_of_its_key() {
    let cases = [
        (
            "  transforms:\n    - drop: {field: a}\n    - mask: {field: A}\n",
            "bigquery.transforms[1].field: transforms[0] already transforms field A",
        ),
        (
            "  transforms:\n    - rename: {field: a, to: b.c}\n",
            "bigquery.transforms[0].to: `b.c` is not a column name",
        ),
        (
            "  transforms:\n    - set: {column: c, header: h}\n",
            "bigquery.transforms[0].encoding: a header's bytes have no type of their own",
        ),
        (
            "  transforms:\n    - mask: {field: a.b, value: x}\n",
            "bigquery.transforms[0].value: a masked value is written to top-level columns only",
        ),
        (
            "  transforms:\n    - filter: {topic_pattern: \"(\"}\n",
            "bigquery.transforms[0].topic_pattern: not a regular expression",
        ),
        (
            "  metadata_columns: {offset: o}\n  transforms:\n    - set: {column: kafka_offset, from: offset}\n",
            "bigquery.transforms[0].from: the offset already goes to column o (metadata_columns.offset)",
        ),
        (
            "  transforms:\n    - flatten: {field: order.address, separator: _}\n",
            "bigquery.transforms[0].field: flatten writes top-level columns: `order.address` is not a top-level record",
        ),
        (
            "  transforms:\n    - flatten: {field: address, separator: \".\"}\n",
            "bigquery.transforms[0].separator: \".\" cannot join column names: letters, digits and `_` only",
        ),
        (
            "  transforms:\n    - flatten: {field: address, separator: _}\n    - mask: {field: address.street}\n",
            "bigquery.transforms[1].field: field address.street and the field of transforms[0] are one inside the other",
        ),
    ];
    for (lines, expected) in cases {
        assert_one_error(&in_bigquery(lines), HashMap::new(), expected);
    }
    // A created or evolved table follows the transforms: accepted beside every level.
    for lines in [
        "  create_table: {}\n  transforms:\n    - drop: {field: a}\n",
        "  schema_update: add_columns\n  transforms:\n    - drop: {field: a}\n",
        "  schema_update: relax_columns\n  transforms:\n    - rename: {field: a, to: b}\n",
        "  schema_update: union\n  transforms:\n    - mask: {field: a}\n",
    ] {
        let errs = errors(&in_bigquery(lines), HashMap::new());
        assert_eq!(errs, Vec::<String>::new(), "{lines}");
    }
    // An unknown transform or key is a parse error naming its path.
    let errs = errors(
        &in_bigquery("  transforms:\n    - hash: {field: a}\n"),
        HashMap::new(),
    );
    assert!(
        errs.iter().any(|e| e.contains("bigquery.transforms")),
        "{errs:#?}"
    );
    let errs = errors(
        &in_bigquery("  transforms:\n    - drop: {field: a, to: b}\n"),
        HashMap::new(),
    );
    assert!(errs.iter().any(|e| e.contains("to")), "{errs:#?}");
}

#[test]
fn a_column_from_a_key_field_needs_the_keys_format_declared() {
    use kbq_transcode::transforms::{KeyFormat, Transform};
    let registry = |lines: &str| {
        in_bigquery(lines).replace(
            "avro:\n  schema_file: s.avsc\n",
            "schema_registry:\n  url: http://127.0.0.1:8081\n",
        )
    };
    let yaml = registry(
        "  transforms:\n    - set: {column: customer_id, from: key, field: id, key_format: schema_registry}\n    - set: {column: raw_key, from: key}\n",
    );
    assert_eq!(errors(&yaml, HashMap::new()), Vec::<String>::new());
    let config = Config::from_yaml(&yaml, HashMap::new()).unwrap();
    assert!(matches!(
        &config.bigquery.transforms[0],
        Transform::Set(s) if s.key_field() == Some("id") && s.key_format == Some(KeyFormat::SchemaRegistry)
    ));
    assert_eq!(config.bigquery.transforms.len(), 2);
    let cases = [
        (
            "  transforms:\n    - set: {column: customer_id, from: key, field: id}\n",
            "bigquery.transforms[0].key_format: the key's bytes have no format of their own: say how to read them",
        ),
        (
            "  transforms:\n    - set: {column: customer_id, from: topic, field: id}\n",
            "bigquery.transforms[0].field: only with `from: key`",
        ),
        (
            "  transforms:\n    - set: {column: customer_id, from: key, field: customer.id, key_format: json}\n",
            "bigquery.transforms[0].field: `customer.id` is not a top-level field name of the key",
        ),
        (
            "  transforms:\n    - set: {column: customer_id, from: key, key_format: json}\n",
            "bigquery.transforms[0].key_format: only with `field`",
        ),
        (
            "  transforms:\n    - set: {column: a, from: key, field: id, key_format: json}\n    - set: {column: b, from: key, field: region, key_format: schema_registry}\n",
            "bigquery.transforms[1].key_format: transforms[0] reads the key as json: one key has one format",
        ),
        // Raw Avro values, and no registry to read a key's schema id from.
        (
            "  transforms:\n    - set: {column: customer_id, from: key, field: id, key_format: schema_registry}\n",
            "bigquery.transforms[0].key_format: schema_registry keys are read by their schema id: configure schema_registry",
        ),
    ];
    for (lines, expected) in cases {
        assert_one_error(&in_bigquery(lines), HashMap::new(), expected);
    }
    let json_key = in_bigquery(
        "  transforms:\n    - set: {column: customer_id, from: key, field: id, key_format: json}\n",
    );
    assert_eq!(errors(&json_key, HashMap::new()), Vec::<String>::new());
}

#[test]
fn a_cast_parses_from_yaml_and_a_bad_one_is_refused_with_the_path_of_its_key() {
    use kbq_transcode::transforms::{CastType, Transform};
    let yaml = in_bigquery(
        "  transforms:\n    - cast: {field: qty, to: NUMERIC}\n    - cast: {field: order.flag, to: BOOL}\n",
    );
    assert_eq!(errors(&yaml, HashMap::new()), Vec::<String>::new());
    let config = Config::from_yaml(&yaml, HashMap::new()).unwrap();
    assert!(
        matches!(&config.bigquery.transforms[0], Transform::Cast(c) if c.to == CastType::Numeric)
    );
    assert_one_error(
        &in_bigquery(
            "  transforms:\n    - cast: {field: qty, to: INT64}\n    - drop: {field: QTY}\n",
        ),
        HashMap::new(),
        "bigquery.transforms[1].field: transforms[0] already transforms field QTY",
    );
    assert_one_error(
        &in_bigquery(
            "  transforms:\n    - cast: {field: order, to: STRING}\n    - cast: {field: order.qty, to: INT64}\n",
        ),
        HashMap::new(),
        "bigquery.transforms[1].field: field order.qty and the field of transforms[0] are one inside the other",
    );
    assert_one_error(
        &in_bigquery("  transforms:\n    - cast: {field: \"a b\", to: INT64}\n"),
        HashMap::new(),
        "bigquery.transforms[0].field: `a b` is not a field path",
    );
    // A type BigQuery does not spell so, and a key a cast does not have: parse errors at the
    // list's path.
    for lines in [
        "  transforms:\n    - cast: {field: qty, to: INT32}\n",
        "  transforms:\n    - cast: {field: qty, to: INT64, format: x}\n",
        "  transforms:\n    - cast: {field: qty}\n",
    ] {
        let errs = errors(&in_bigquery(lines), HashMap::new());
        assert!(
            errs.iter().any(|e| e.contains("bigquery.transforms")),
            "{lines}: {errs:#?}"
        );
    }
}

#[test]
fn a_time_conversion_parses_from_yaml_and_a_bad_one_is_refused_with_the_path_of_its_key() {
    use kbq_transcode::transforms::{EpochUnit, TimeFrom, TimeTo, Transform, Zone};
    let yaml = in_bigquery(
        "  transforms:
    - convert: {field: created_ms, from: epoch_millis, to: TIMESTAMP}
    - convert: {field: day, from: epoch_seconds, to: DATE, zone: UTC}
    - convert: {field: placed, from: string, format: \"%d/%m/%Y %H:%M\", to: DATETIME}
    - convert: {field: sent, from: string, format: \"%Y-%m-%dT%H:%M:%S.%f%z\", to: TIMESTAMP}
    - convert: {field: at_us, from: epoch_micros, to: INT64, unit: epoch_millis}
    - convert: {field: shown, from: epoch_millis, to: STRING, format: \"%Y-%m-%d\", zone: UTC}
",
    );
    assert_eq!(errors(&yaml, HashMap::new()), Vec::<String>::new());
    let config = Config::from_yaml(&yaml, HashMap::new()).unwrap();
    let t = &config.bigquery.transforms;
    assert!(matches!(&t[1], Transform::Convert(c)
        if c.from == TimeFrom::EpochSeconds && c.to == TimeTo::Date && c.zone == Some(Zone::Utc)));
    assert!(matches!(&t[4], Transform::Convert(c) if c.unit == Some(EpochUnit::EpochMillis)));
    let cases = [
        (
            "    - convert: {field: d, from: epoch_millis, to: DATE}\n",
            "bigquery.transforms[0].zone: an instant from epoch_millis becomes a civil time DATE: say the zone of the civil time (zone: UTC), it is never guessed",
        ),
        (
            "    - convert: {field: d, from: string, format: \"%Y-%m-%d %H:%M\", to: TIMESTAMP}\n",
            "bigquery.transforms[0].zone: a civil time from text without %z becomes an instant TIMESTAMP",
        ),
        (
            "    - convert: {field: d, from: epoch_millis, to: TIMESTAMP, zone: UTC}\n",
            "bigquery.transforms[0].zone: only where an instant becomes a civil time or back",
        ),
        (
            "    - convert: {field: d, from: string, to: DATE}\n",
            "bigquery.transforms[0].format: text needs its format",
        ),
        (
            "    - convert: {field: d, from: epoch_millis, to: TIMESTAMP, format: \"%Y\"}\n",
            "bigquery.transforms[0].format: only with `from: string` or `to: STRING`",
        ),
        (
            "    - convert: {field: d, from: string, format: \"%Y-%m-%d %I\", to: DATE}\n",
            "bigquery.transforms[0].format: %I is not a directive of the format",
        ),
        (
            "    - convert: {field: d, from: string, format: \"%m/%d\", to: DATE}\n",
            "bigquery.transforms[0].format: a time's format needs a whole date",
        ),
        (
            "    - convert: {field: d, from: string, format: \"%Y-%m-%d\", to: STRING}\n",
            "bigquery.transforms[0].to: text written again as text",
        ),
        (
            "    - convert: {field: d, from: epoch_millis, to: INT64}\n",
            "bigquery.transforms[0].unit: an INT64 of a time needs its unit",
        ),
        (
            "    - convert: {field: d, from: epoch_millis, to: DATETIME, unit: epoch_seconds, zone: UTC}\n",
            "bigquery.transforms[0].unit: only with `to: INT64`",
        ),
        (
            "    - convert: {field: d, from: epoch_millis, to: TIMESTAMP}\n    - cast: {field: D, to: STRING}\n",
            "bigquery.transforms[1].field: transforms[0] already transforms field D",
        ),
    ];
    for (lines, expected) in cases {
        assert_one_error(
            &in_bigquery(&format!("  transforms:\n{lines}")),
            HashMap::new(),
            expected,
        );
    }
    // A unit, zone or target BigQuery does not spell so: parse errors at the list's path.
    for lines in [
        "    - convert: {field: d, from: epoch_days, to: DATE}\n",
        "    - convert: {field: d, from: epoch_millis, to: TIME}\n",
        "    - convert: {field: d, from: epoch_millis, to: DATE, zone: Europe/Paris}\n",
    ] {
        let errs = errors(
            &in_bigquery(&format!("  transforms:\n{lines}")),
            HashMap::new(),
        );
        assert!(
            errs.iter().any(|e| e.contains("bigquery.transforms")),
            "{lines}: {errs:#?}"
        );
    }
}

#[test]
fn a_hash_keys_file_or_variable_is_read_at_load_and_a_missing_one_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("write");
        p.display().to_string()
    };
    let schema = write(
        "s.avsc",
        r#"{"type":"record","name":"r","fields":[{"name":"email","type":"string"}]}"#,
    );
    let key = write("hash-key", "pepper-4711\n");
    let yaml = |source: &str| {
        in_bigquery(&format!(
            "  transforms:\n    - mask: {{field: email, hash: hmac_sha256, key: {source}, encoding: hex}}\n"
        ))
        .replace("s.avsc", &schema)
    };
    let load = |text: String| Config::load(Path::new(&write("config.yaml", &text)));
    let c = load(yaml(&format!("{{file: {key}}}"))).expect("loads");
    assert!(
        !format!("{c:?}").contains("4711"),
        "the key is never printed"
    );
    // A variable every test process has: its value is the key.
    load(yaml("{env: PATH}")).expect("loads");
    for (source, expected) in [
        (
            "{file: /nonexistent/hash-key}".to_string(),
            "bigquery.transforms[0].key: cannot read /nonexistent/hash-key",
        ),
        (
            "{env: KBQ_TEST_UNSET_HASH_KEY}".to_string(),
            "bigquery.transforms[0].key: the environment variable KBQ_TEST_UNSET_HASH_KEY is not set",
        ),
        (
            format!("{{file: {}}}", write("empty-key", "\n")),
            "bigquery.transforms[0].key: the key is empty",
        ),
    ] {
        let errs = load(yaml(&source)).expect_err("refused").errors();
        assert!(errs.iter().any(|e| e.starts_with(expected)), "{errs:#?}");
    }
    // Without its key, its encoding, or with a value too: refused by `validate` with the path.
    for (mask, expected) in [
        (
            "{field: email, hash: hmac_sha256, encoding: hex}",
            "bigquery.transforms[0].key: a keyed hash needs its key",
        ),
        (
            "{field: email, hash: hmac_sha256, key: {env: K}}",
            "bigquery.transforms[0].encoding: say how the digest is written",
        ),
        (
            "{field: email, hash: hmac_sha256, key: {env: K}, encoding: hex, value: x}",
            "bigquery.transforms[0].value: a mask writes `value` or `hash`, not both",
        ),
        (
            "{field: email, encoding: hex}",
            "bigquery.transforms[0].encoding: only with `hash`",
        ),
    ] {
        let lines = format!("  transforms:\n    - mask: {mask}\n");
        assert_one_error(&in_bigquery(&lines), HashMap::new(), expected);
    }
}

#[test]
fn a_route_that_inherits_row_transforms_into_cdc_is_refused() {
    let yaml = in_bigquery("  transforms:\n    - drop: {field: a}\n").replace(
        "dead_letter:",
        "routes:\n  - topics: [t]\n    cdc: {mode: upsert, format: debezium, primary_key: [id]}\ndead_letter:",
    );
    let errs = errors(&yaml, HashMap::new());
    assert!(
        errs.iter().any(|e| e.starts_with(
            "bigquery.transforms[0]: routes[0] is a CDC route: its rows are keyed changes, and only filter applies to them"
        )),
        "{errs:#?}"
    );
    // Its own list of filters only is accepted.
    let own = yaml.replace(
        "    cdc: {mode: upsert, format: debezium, primary_key: [id]}\n",
        "    cdc: {mode: upsert, format: debezium, primary_key: [id]}\n    transforms:\n      - filter: {header: skip}\n",
    );
    let errs = errors(&own, HashMap::new());
    assert!(!errs.iter().any(|e| e.contains("transforms")), "{errs:#?}");
}

#[test]
fn a_filter_on_a_fields_value_parses_and_a_bad_one_is_refused_with_the_path_of_its_key() {
    use kbq_transcode::transforms::{Literal, Transform};
    let config = Config::from_yaml(
        &in_bigquery(
            "  transforms:\n    - filter: {field: status, equals: deleted}\n    - filter: {field: order.qty, in: [0, -1]}\n    - filter: {field: note, is_null: true, negate: true}\n",
        ),
        HashMap::new(),
    )
    .expect("parses");
    validate(&config).expect("valid");
    let Transform::Filter(f) = &config.bigquery.transforms[1] else {
        panic!("a filter")
    };
    assert_eq!(f.one_of, Some(vec![Literal::Int(0), Literal::Int(-1)]));
    for (lines, want) in [
        (
            "  transforms:\n    - filter: {field: status}\n",
            "bigquery.transforms[0].field: needs exactly one of `equals`, `in` and `is_null`",
        ),
        (
            "  transforms:\n    - filter: {field: status, equals: x, topic_pattern: t}\n",
            "bigquery.transforms[0].field: a field's value is read by the plan",
        ),
        (
            "  transforms:\n    - filter: {tombstone: true, is_null: true}\n",
            "bigquery.transforms[0].is_null: only with `field`",
        ),
        (
            "  transforms:\n    - filter: {header: env, equals: 5}\n",
            "bigquery.transforms[0].equals: a header's value is compared as text",
        ),
    ] {
        let errs = errors(&in_bigquery(lines), HashMap::new());
        assert!(
            errs.iter().any(|e| e.starts_with(want)),
            "{lines}: {errs:#?}"
        );
    }
    // A CDC route's rows are keyed changes: a field's filter is refused there.
    let cdc = in_bigquery("  transforms:\n    - filter: {field: status, equals: x}\n").replace(
        "dead_letter:",
        "routes:\n  - topics: [t]\n    cdc: {mode: upsert, format: debezium, primary_key: [id]}\ndead_letter:",
    );
    let errs = errors(&cdc, HashMap::new());
    assert!(
        errs.iter()
            .any(|e| e.starts_with("bigquery.transforms[0]: routes[0] is a CDC route")),
        "{errs:#?}"
    );
}

#[test]
fn validate_checks_a_fields_filter_against_the_routes_schema_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let avsc = dir.path().join("s.avsc");
    std::fs::write(
        &avsc,
        r#"{"type":"record","name":"R","fields":[{"name":"status","type":"string"},
            {"name":"qty","type":"int"},{"name":"order","type":{"type":"record","name":"O",
            "fields":[{"name":"state","type":["null","string"]}]}}]}"#,
    )
    .expect("write");
    let load = |lines: &str| {
        let yaml = in_bigquery(lines).replace(
            "schema_file: s.avsc",
            &format!("schema_file: {}", avsc.display()),
        );
        let file = dir.path().join("config.yaml");
        std::fs::write(&file, yaml).expect("write");
        Config::load(&file).map(drop).map_err(|e| e.errors())
    };
    load("  transforms:\n    - filter: {field: status, in: [deleted, void]}\n    - filter: {field: ORDER.state, is_null: true}\n")
        .expect("fits the schema");
    for (lines, want) in [
        (
            "  transforms:\n    - filter: {field: qty, equals: \"7\"}\n",
            "bigquery.transforms[0].field: \"7\" is text, and field qty is int: a literal is compared as its own type, never converted",
        ),
        (
            "  transforms:\n    - drop: {field: qty}\n    - filter: {field: qty, equals: 3000000000}\n",
            "bigquery.transforms[1].field: 3000000000 does not fit field qty, which is int",
        ),
        (
            "  transforms:\n    - filter: {field: order.missing, is_null: true}\n",
            "bigquery.transforms[0].field: the writer schema has no field order.missing",
        ),
        (
            "  transforms:\n    - filter: {field: status, is_null: true}\n",
            "bigquery.transforms[0].field: field status is never null",
        ),
    ] {
        let errs = load(lines).expect_err(lines);
        assert!(
            errs.iter().any(|e| e.starts_with(want)),
            "{lines}: {errs:#?}"
        );
    }
}
