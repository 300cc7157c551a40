//! `migrate kafka-connect` (docs/operations.md#coming-from-kafka-connect): every fixture under
//! `tests/fixtures/kafka-connect/` (connector configs of the shapes the connectors' docs and their
//! users' issues show) becomes a YAML that the real `validate` command accepts, with a report
//! line for every property; the outcomes that decide a migration are checked one by one.

use std::path::{Path, PathBuf};
use std::process::Command;

use kafka_bigquery_sink::migrate::kafka_connect::{MigrateError, WorkerSettings};
use kafka_bigquery_sink::migrate::report::{Outcome, Report};
use kafka_bigquery_sink::migrate::{kafka_connect_file, referenced_variables};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kafka-connect")
}

fn migrate(name: &str) -> (String, Report) {
    kafka_connect_file(&fixtures().join(name), &WorkerSettings::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Runs the binary's `validate` on the YAML, with every `${VAR}` it reads set.
fn validate_cli(yaml: &str, dir: &Path, name: &str) {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    let env: Vec<(String, &str)> = referenced_variables(yaml)
        .into_iter()
        .map(|v| {
            let value = match v.as_str() {
                "KAFKA_BOOTSTRAP_SERVERS" => "broker-1:9092",
                "SCHEMA_REGISTRY_URL" => "https://sr.example.internal",
                "GCP_PROJECT" => "acme-metrics",
                _ => "secret-from-the-environment",
            };
            (v, value)
        })
        .collect();
    let out = Command::new(crate::support::daemon::binary())
        .args(["validate", "-c"])
        .arg(&path)
        .envs(env.iter().map(|(k, v)| (k.as_str(), *v)))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: validate refused the migrated config:\n{}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The YAML without its comment header (the report).
fn body(yaml: &str) -> String {
    yaml.lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

fn outcome<'a>(report: &'a Report, property: &str) -> &'a Outcome {
    report
        .outcome_of(property)
        .unwrap_or_else(|| panic!("no line for {property}:\n{report}"))
}

fn assert_label(report: &Report, property: &str, label: &str, contains: &str) {
    let o = outcome(report, property);
    assert_eq!(o.label(), label, "{property}: {o:?}");
    assert!(o.text().contains(contains), "{property}: {o:?}");
}

#[test]
fn every_fixture_becomes_a_config_that_validate_accepts_with_a_line_per_property() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let (yaml, report) = migrate(path.file_name().unwrap().to_str().unwrap());
        validate_cli(&yaml, dir.path(), &name);
        // every property of the connector has its line
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let config = json.get("config").unwrap_or(&json).as_object().unwrap();
        for key in config.keys() {
            assert!(
                report.outcome_of(key).is_some(),
                "{name}: no report line for {key}:\n{report}"
            );
        }
        // the report travels with the YAML
        assert!(yaml.starts_with("# Written by `kafka-bigquery-sink migrate kafka-connect"));
        seen += 1;
    }
    assert!(seen >= 10, "at least ten fixtures, found {seen}");
}

#[test]
fn the_quickstart_keeps_its_tables_and_takes_over_the_group() {
    let (yaml, report) = migrate("01-confluent-quickstart-avro.json");
    assert!(
        yaml.contains("group_id: \"connect-kcbq-quickstart\""),
        "{yaml}"
    );
    assert!(yaml.contains("table: \"{topic}\""), "{yaml}");
    assert!(yaml.contains("create_table:"), "{yaml}");
    assert!(yaml.contains("schema_update: add_columns"), "{yaml}");
    assert_label(
        &report,
        "name",
        "changed",
        "starts at the offsets the connector committed",
    );
    assert_label(
        &report,
        "allowBigQueryRequiredFieldRelaxation",
        "not translatable",
        "REQUIRED",
    );
    // the key file is on the Connect worker, not here: read at start as a service-account key
    assert!(
        yaml.contains("credentials: {key_file: \"/etc/kafka-connect/secrets/bigquery-sa.json\"}"),
        "{yaml}"
    );
    assert_label(&report, "keyfile", "changed", "service-account key");
    assert_label(
        &report,
        "delivery (insertAll)",
        "changed",
        "becomes exactly once",
    );
}

#[test]
fn an_inline_key_is_never_copied() {
    let (yaml, report) = migrate("02-aiven-json-inline-key.json");
    assert!(
        !yaml.contains("not-a-real-key") && !yaml.contains("private_key"),
        "{yaml}"
    );
    assert!(!body(&yaml).contains("credentials:"), "adc stays: {yaml}");
    assert_label(&report, "keyfile", "not translatable", "inline");
    assert!(yaml.contains("json: {}"), "{yaml}");
    assert!(
        yaml.contains("topics: [\"users\", \"clicks\", \"payments\"]"),
        "{yaml}"
    );
}

#[test]
fn upserts_become_cdc_routes_at_least_once() {
    let (yaml, report) = migrate("03-debezium-upsert-delete.json");
    assert!(yaml.contains("delivery: at_least_once"), "{yaml}");
    assert!(
        yaml.contains("cdc: {mode: upsert_delete, format: debezium}"),
        "{yaml}"
    );
    assert_label(
        &report,
        "transforms.unwrap.type",
        "changed",
        "Debezium envelope",
    );
    assert_label(&report, "mergeIntervalMs", "dropped", "intermediate");
}

#[test]
fn a_java_regex_is_anchored_for_librdkafka_and_tables_are_partitioned_and_clustered() {
    let (yaml, report) = migrate("04-regex-partitioned-clustered.json");
    assert!(
        yaml.contains(r#"topic_pattern: "^(prod\\.orders\\.[0-9]+)$""#),
        "{yaml}"
    );
    assert!(
        yaml.contains("type: HOUR") && yaml.contains("field: \"created_at\""),
        "{yaml}"
    );
    assert!(yaml.contains("expiration: 7776000000ms"), "{yaml}");
    assert!(
        yaml.contains("clustering: [\"customer_id\", \"region\"]"),
        "{yaml}"
    );
    assert_label(&report, "topics.regex", "changed", "\\d written as [0-9]");
}

#[test]
fn unsanitized_topics_keep_their_own_names_and_the_map_wins() {
    let (yaml, report) = migrate("05-topic2table-map.json");
    for route in [
        "- topics: [\"shop-customers\"]\n    table: \"customers\"",
        "- topics: [\"shop-orders\"]\n    table: \"orders\"",
    ] {
        assert!(yaml.contains(route), "{route}\n{yaml}");
    }
    // `web.clicks` was no valid table id for the connector either
    assert_label(&report, "sanitizeTopics", "changed", "web_clicks");
}

#[test]
fn errors_tolerance_all_with_a_queue_is_the_dead_letter_topic() {
    let (yaml, report) = migrate("06-errors-dead-letter-queue.json");
    assert!(yaml.contains("on_bad_record: dead_letter"), "{yaml}");
    assert!(yaml.contains("topic: \"events-bq-dlq\""), "{yaml}");
    assert_label(
        &report,
        "errors.tolerance",
        "changed",
        "including rows BigQuery refuses",
    );
    assert_label(&report, "errors.retry.timeout", "dropped", "backoff");
}

#[test]
fn secrets_go_to_the_environment_and_java_key_stores_are_reported() {
    let (yaml, report) = migrate("07-sasl-ssl-secured-registry.json");
    for secret in ["srsecret", "apisecret"] {
        assert!(!yaml.contains(secret), "{secret} in {yaml}");
        assert!(
            !report.to_string().contains(secret),
            "{secret} in the report"
        );
    }
    assert!(
        yaml.contains("password: ${SCHEMA_REGISTRY_PASSWORD}"),
        "{yaml}"
    );
    assert!(
        yaml.contains("\"sasl.password\": ${KAFKA_SASL_PASSWORD}"),
        "{yaml}"
    );
    assert!(yaml.contains("\"sasl.username\": \"APIKEY456\""), "{yaml}");
    assert!(
        yaml.contains("bootstrap_servers: \"pkc-xyz.europe-west1.gcp.confluent.cloud:9092\""),
        "{yaml}"
    );
    assert_label(
        &report,
        "consumer.override.ssl.truststore.location",
        "not translatable",
        "PEM",
    );
    assert_label(&report, "keyfile", "not translatable", "config provider");
}

#[test]
fn a_regex_router_names_each_listed_topics_table() {
    let (yaml, report) = migrate("08-regex-router-strip-env-prefix.json");
    for route in [
        "- topics: [\"dev.orders\"]\n    table: \"orders\"",
        "- topics: [\"dev.customers\"]\n    table: \"customers\"",
        // sanitized as the connector does: a leading digit gets `_`
        "- topics: [\"dev.2024-audit\"]\n    table: \"_2024_audit\"",
    ] {
        assert!(yaml.contains(route), "{route}\n{yaml}");
    }
    assert_label(&report, "transforms.route.type", "mapped", "routed name");
}

#[test]
fn insert_field_becomes_metadata_columns_and_other_transforms_are_reported() {
    let (yaml, report) = migrate("09-insertfield-and-field-smts.json");
    for column in [
        "topic: \"_topic\"",
        "partition: \"_kafka_partition\"",
        "offset: \"_kafka_offset\"",
        "timestamp: \"_ingested_at\"",
    ] {
        assert!(yaml.contains(column), "{column}\n{yaml}");
    }
    assert_label(
        &report,
        "transforms.meta.type",
        "changed",
        "metadata_columns",
    );
    // Beside autoCreateTables: the created table follows the drop and the mask.
    assert_label(
        &report,
        "transforms.dropPii.type",
        "changed",
        "drop ip_address",
    );
    assert_label(&report, "transforms.mask.type", "changed", "mask email");
    assert_label(
        &report,
        "transforms.ts.type",
        "changed",
        "convert event_time from string to TIMESTAMP",
    );
    assert!(
        yaml.contains("convert: {field: \"event_time\", from: string, format: \"%Y-%m-%dT%H:%M:%S\", to: TIMESTAMP, zone: UTC}"),
        "{yaml}"
    );
    assert_label(&report, "transforms.flat.type", "not translatable", "");
    // Connect's Flatten names no record; the line says what to write for each.
    assert_label(
        &report,
        "transforms.flat.type",
        "not translatable",
        "add `- flatten: {field: RECORD, separator: \"_\"}` to bigquery.transforms",
    );
}

#[test]
fn a_legacy_datasets_list_with_one_dataset_is_that_dataset() {
    let (yaml, report) = migrate("11-legacy-wepay-datasets.json");
    assert!(yaml.contains("dataset: \"ledger\""), "{yaml}");
    assert_label(&report, "datasets", "changed", "one dataset");
    assert_label(
        &report,
        "bigQueryMessageTimePartitioning",
        "not translatable",
        "decorator",
    );
    assert_label(
        &report,
        "enableBatchLoad",
        "not translatable",
        "Cloud Storage",
    );
}

#[test]
fn config_provider_env_references_and_the_group_override_carry_over() {
    let (yaml, report) = migrate("13-custom-group-latest.json");
    assert!(yaml.contains("project: ${GCP_PROJECT}"), "{yaml}");
    assert!(yaml.contains("url: ${SCHEMA_REGISTRY_URL}"), "{yaml}");
    assert!(yaml.contains("group_id: \"bq-metrics\""), "{yaml}");
    assert!(yaml.contains("start_from: latest"), "{yaml}");
    assert!(yaml.contains("on_bad_record: fail"), "{yaml}");
    assert_label(
        &report,
        "consumer.override.auto.offset.reset",
        "changed",
        "latest",
    );
}

#[test]
fn what_cannot_make_a_config_is_refused_with_its_property() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cases = [
        (
            r#"{"name": "s3", "connector.class": "io.confluent.connect.s3.S3SinkConnector", "topics": "t"}"#,
            "connector.class: `io.confluent.connect.s3.S3SinkConnector` is not the BigQuery sink connector",
        ),
        (
            r#"{"name": "x", "connector.class": "com.wepay.kafka.connect.bigquery.BigQuerySinkConnector", "topics": "t", "project": "p", "defaultDataset": "d"}"#,
            "value.converter: the connector config has none",
        ),
        (
            r#"{"name": "x", "connector.class": "com.wepay.kafka.connect.bigquery.BigQuerySinkConnector", "topics": "t", "project": "p", "datasets": "a.*=one,b.*=two", "value.converter": "org.apache.kafka.connect.json.JsonConverter"}"#,
            "datasets: several datasets by topic regex",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let path = write(&format!("c{i}.json"), text);
        let err: MigrateError = kafka_connect_file(&path, &WorkerSettings::default()).unwrap_err();
        assert!(err.to_string().starts_with(expected), "{err}");
    }
    // the worker's converter from the command line completes the second case
    let worker = WorkerSettings {
        value_converter: Some("org.apache.kafka.connect.json.JsonConverter".into()),
        ..WorkerSettings::default()
    };
    let path = dir.path().join("c1.json");
    let (yaml, report) = kafka_connect_file(&path, &worker).unwrap();
    assert!(yaml.contains("json: {}"), "{yaml}");
    assert_label(
        &report,
        "value.converter (from the worker)",
        "mapped",
        "json",
    );
}

#[test]
fn the_command_writes_the_yaml_and_prints_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sink.yaml");
    let run = Command::new(crate::support::daemon::binary())
        .args(["migrate", "kafka-connect"])
        .arg(fixtures().join("06-errors-dead-letter-queue.json"))
        .args(["--bootstrap-servers", "broker-1:9092", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("errors.tolerance"), "{stdout}");
    assert!(stdout.contains("not translatable"), "{stdout}");
    let yaml = std::fs::read_to_string(&out).unwrap();
    assert!(
        yaml.contains("bootstrap_servers: \"broker-1:9092\""),
        "{yaml}"
    );
    validate_cli(&yaml, dir.path(), "cli");
}

/// The `bigquery.transforms` list of the YAML, one entry a line, in order.
fn transforms_of(yaml: &str) -> Vec<String> {
    let body = body(yaml);
    let Some(start) = body.find("\n  transforms:\n") else {
        return Vec::new();
    };
    body[start + "\n  transforms:\n".len()..]
        .lines()
        .map_while(|l| l.strip_prefix("    - "))
        .map(str::to_string)
        .collect()
}

#[test]
fn an_smt_chain_with_exact_counterparts_becomes_transforms_in_its_order() {
    let (yaml, report) = migrate("14-smt-pii-chain-avro.json");
    assert_eq!(
        transforms_of(&yaml),
        [
            "filter: {tombstone: true}",
            "drop: {field: \"ssn\"}",
            "drop: {field: \"internal_notes\"}",
            "rename: {field: \"email_address\", to: \"email\"}",
            "rename: {field: \"cust_id\", to: \"customer_id\"}",
            "mask: {field: \"card_number\", value: \"****-****-****-****\"}",
            "mask: {field: \"phone\"}",
            "set: {column: \"source_system\", value: \"payments-gateway\"}",
            "convert: {field: \"created_at\", from: string, format: \"%Y-%m-%d %H:%M:%S\", to: TIMESTAMP, zone: UTC}",
        ],
        "{yaml}"
    );
    assert!(yaml.contains("partition: \"_kafka_partition\""), "{yaml}");
    assert!(yaml.contains("offset: \"_kafka_offset\""), "{yaml}");
    assert_label(
        &report,
        "transforms.dropTombstones.type",
        "mapped",
        "filter {tombstone: true}: tombstones are dropped",
    );
    // a writer schema without an excluded field refuses the plan here; Connect skipped the name
    assert_label(
        &report,
        "transforms.dropPii.type",
        "changed",
        "refuses the plan",
    );
    assert_label(
        &report,
        "transforms.maskCard.type",
        "changed",
        "not a number only for a string field",
    );
    // Connect's mask without a replacement is the type's empty value, not NULL
    assert_label(
        &report,
        "transforms.maskPhone.type",
        "changed",
        "the field type's empty value (0, false, \"\", the epoch), not null",
    );
    assert_label(
        &report,
        "transforms.addMeta.type",
        "changed",
        "set source_system to \"payments-gateway\"",
    );
    assert_label(
        &report,
        "transforms.parseTs.type",
        "changed",
        "here the field is read as text in the format",
    );
}

#[test]
fn filters_map_from_their_predicates_and_a_chain_that_reads_its_own_output_does_not() {
    let (yaml, report) = migrate("15-smt-filters-json.json");
    assert_eq!(
        transforms_of(&yaml),
        [
            "filter: {header: \"tenant-id\", negate: true}",
            "filter: {topic_pattern: \".*-test\"}",
            "rename: {field: \"uid\", to: \"user_id\"}",
            "rename: {field: \"ip\", to: \"client_ip\"}",
        ],
        "{yaml}"
    );
    assert_label(
        &report,
        "transforms.keepTenant.type",
        "mapped",
        "all records but records with a header tenant-id are dropped",
    );
    assert_label(
        &report,
        "transforms.dropTest.type",
        "mapped",
        "matches as a whole",
    );
    // schemaless JSON: a missing field is a field that never comes, as in Connect
    assert_label(
        &report,
        "transforms.rename.type",
        "mapped",
        "rename uid to user_id",
    );
    assert_label(
        &report,
        "transforms.onlyWeb.type",
        "not translatable",
        "only to the records predicate isTestTopic matches",
    );
    // the mask names the rename's output; here every transform names the writer's fields
    assert_label(
        &report,
        "transforms.maskRenamed.type",
        "not translatable",
        "named by transforms.rename earlier in the chain",
    );
    assert_label(
        &report,
        "transforms.maskKey.type",
        "not translatable",
        "of the key",
    );
    assert_label(&report, "transforms.route.type", "mapped", "routed name");
}

#[test]
fn field_transforms_beside_a_created_table_map_as_the_table_follows_them() {
    let (yaml, report) = migrate("16-smt-with-auto-create.json");
    assert_eq!(
        transforms_of(&yaml),
        [
            "drop: {field: \"debug_payload\"}",
            "mask: {field: \"email\"}",
            "set: {column: \"region\", value: \"eu-west\"}",
            "filter: {tombstone: true}",
            "cast: {field: \"amount\", to: FLOAT64}"
        ],
        "{yaml}"
    );
    for t in ["dropDebug", "hideEmail"] {
        let line = outcome(&report, &format!("transforms.{t}.type"));
        assert!(
            matches!(line, Outcome::Mapped(_) | Outcome::Changed(_)),
            "{t}: {line:?}"
        );
    }
    assert_label(
        &report,
        "transforms.tag.type",
        "changed",
        "bigquery.transforms set region to \"eu-west\"",
    );
    assert_label(
        &report,
        "transforms.noTombstones.type",
        "mapped",
        "tombstone",
    );
    assert_label(
        &report,
        "transforms.cast.type",
        "changed",
        "bigquery.transforms cast amount to FLOAT64 (Connect's float64): only where exact",
    );
}

#[test]
fn a_regex_router_under_topics_regex_becomes_a_capture_group_route() {
    let (yaml, report) = migrate("17-regex-router-topics-regex.json");
    assert!(
        yaml.contains(
            "- topic_pattern: \"prod\\\\.([a-z_]+)\\\\.events\"\n    table: \"events_{1}\""
        ),
        "{yaml}"
    );
    assert_label(
        &report,
        "transforms.stripEnv.type",
        "mapped",
        "each capture group sanitized",
    );
}

#[test]
fn a_cast_of_fields_becomes_casts_and_a_cast_of_the_whole_value_or_the_key_is_reported() {
    let (yaml, report) = migrate("18-smt-cast-fields.json");
    assert_eq!(
        transforms_of(&yaml),
        [
            "cast: {field: \"quantity\", to: INT64}",
            "cast: {field: \"unit_price\", to: STRING}",
            "cast: {field: \"warehouse_id\", to: INT64}",
            "cast: {field: \"in_stock\", to: BOOL}",
        ],
        "{yaml}"
    );
    assert_label(
        &report,
        "transforms.castFields.type",
        "changed",
        "cast warehouse_id to INT64 (Connect's int32)",
    );
    assert_label(
        &report,
        "transforms.castKey.type",
        "not translatable",
        "Cast of the key",
    );
    assert_label(
        &report,
        "transforms.castWhole.type",
        "not translatable",
        "spec `string` casts the whole value",
    );
}

#[test]
fn a_timestamp_converter_of_a_field_becomes_a_convert_where_its_pattern_is_exact() {
    let (yaml, report) = migrate("19-smt-timestamp-converter.json");
    assert_eq!(
        transforms_of(&yaml),
        [
            "convert: {field: \"shipped_at\", from: epoch_millis, to: TIMESTAMP}",
            "convert: {field: \"promised_day\", from: epoch_seconds, to: DATE, zone: UTC}",
            "convert: {field: \"scanned_at\", from: string, format: \"%Y-%m-%dT%H:%M:%S.%3f%z\", to: TIMESTAMP}",
            "convert: {field: \"picked_up\", from: string, format: \"%d/%m/%Y %H:%M\", to: INT64, unit: epoch_seconds, zone: UTC}",
            "convert: {field: \"label_time\", from: epoch_micros, format: \"%Y-%m-%d\", to: STRING, zone: UTC}",
        ],
        "{yaml}"
    );
    assert_label(
        &report,
        "transforms.shippedAt.type",
        "changed",
        "here the field is read as a unix count in milliseconds",
    );
    assert_label(
        &report,
        "transforms.window.type",
        "not translatable",
        "a TIME of day is not a target of convert here",
    );
    assert_label(
        &report,
        "transforms.loose.type",
        "not translatable",
        "format \"EEE, d MMM yyyy HH:mm:ss\": `EEE` has no exact counterpart",
    );
}

#[test]
fn an_extracted_key_field_in_the_key_column_becomes_a_column_from_the_key() {
    let (yaml, report) = migrate("20-smt-key-field-column.json");
    assert_eq!(
        transforms_of(&yaml),
        ["set: {column: \"customer_id\", from: key, field: \"id\", key_format: schema_registry}"],
        "{yaml}"
    );
    // The key's field, not its bytes: no metadata column of the key.
    assert!(!body(&yaml).contains("metadata_columns"), "{yaml}");
    for property in ["kafkaKeyFieldName", "transforms.customerKey.type"] {
        assert_label(
            &report,
            property,
            "mapped",
            "bigquery.transforms set customer_id from the key's field id (transforms.customerKey, ExtractField$Key, with kafkaKeyFieldName), key_format schema_registry",
        );
    }
    // A key built from the value's fields is not a column from the key: each step says why,
    // and the key column keeps the key's bytes.
    let (yaml, report) = migrate("21-smt-value-to-key.json");
    assert_eq!(transforms_of(&yaml), Vec::<String>::new(), "{yaml}");
    assert_label(
        &report,
        "transforms.accountKey.type",
        "not translatable",
        "the key written into kafkaKeyFieldName is built from the value's fields account_id",
    );
    assert_label(
        &report,
        "transforms.accountId.type",
        "not translatable",
        "built from the value's fields by transforms.accountKey (ValueToKey): column account would hold the value's field account_id",
    );
    assert_label(
        &report,
        "kafkaKeyFieldName",
        "changed",
        "bigquery.metadata_columns.key \"account\"",
    );
}

#[test]
fn confluents_filter_on_a_fields_value_maps_its_equality_forms_and_reports_the_rest() {
    let (yaml, report) = migrate("22-confluent-filter-value.json");
    assert_eq!(
        transforms_of(&yaml),
        [
            "filter: {field: status, in: [\"CANCELLED\", \"VOID\"]}",
            "filter: {field: shipping.region, equals: \"eu\", negate: true}",
        ],
        "{yaml}"
    );
    assert_label(
        &report,
        "transforms.dropCancelled.type",
        "mapped",
        "records whose status is one of \"CANCELLED\", \"VOID\" are dropped",
    );
    // include: the others are dropped; a record without shipping is dropped in both
    // (missing.or.null.behavior exclude), so the meaning is the same.
    assert_label(
        &report,
        "transforms.onlyEu.type",
        "mapped",
        "records whose shipping.region is not one of \"eu\" are dropped",
    );
    assert_label(
        &report,
        "transforms.onlyBig.type",
        "not translatable",
        "only one field compared with == (or `in`)",
    );
    assert_label(
        &report,
        "transforms.byKey.type",
        "not translatable",
        "a filter on the key's fields",
    );
}
