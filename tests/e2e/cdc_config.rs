//! `routes[].cdc` in the config (docs/cdc.md): what validate refuses, naming the field, and the
//! configurations it warns about because their sequence numbers may go back in time per key.

use std::collections::HashMap;

use kafka_bigquery_sink::config::{CdcFormat, CdcMode, Config, validate, warnings};

fn config(delivery: &str, route: &str) -> String {
    format!(
        "\
kafka:
  bootstrap_servers: 127.0.0.1:9092
  group_id: g
  topics: [customers, orders]
schema_registry:
  url: http://127.0.0.1:8081
bigquery:
  project: p
  dataset: d
  table: t
dead_letter:
  topic: dlq
delivery: {delivery}
routes:
{route}"
    )
}

fn errors(yaml: &str) -> Vec<String> {
    match Config::from_yaml(yaml, HashMap::new()) {
        Err(errs) => errs.iter().map(ToString::to_string).collect(),
        Ok(config) => match validate(&config) {
            Ok(()) => Vec::new(),
            Err(errs) => errs.iter().map(ToString::to_string).collect(),
        },
    }
}

const DEBEZIUM: &str = "  - topics: [customers]
    table: customers
    create_table: {}
    cdc:
      mode: upsert_delete
      primary_key: [id]
      max_staleness: 10m
      sequence: {epoch: 2, source_field: source.lsn}
";

#[test]
fn a_debezium_route_validates_and_reads_as_written() {
    let yaml = config("at_least_once", DEBEZIUM);
    assert_eq!(errors(&yaml), Vec::<String>::new());
    let c = Config::from_yaml(&yaml, HashMap::new()).unwrap();
    let cdc = c.route_for("customers").cdc.expect("the route's cdc");
    assert_eq!(cdc.mode, CdcMode::UpsertDelete);
    assert_eq!(cdc.format, CdcFormat::Debezium);
    assert_eq!(cdc.key(), ["id"]);
    assert_eq!(cdc.sequence.epoch, 2);
    assert_eq!(cdc.sequence.source_field.as_deref(), Some("source.lsn"));
    assert!(
        c.route_for("orders").cdc.is_none(),
        "an append-only table beside it"
    );
    assert!(warnings(&c).is_empty());
}

#[test]
fn without_a_primary_key_the_kafka_keys_registered_schema_gives_it() {
    let route =
        "  - topics: [customers]\n    table: customers\n    cdc:\n      mode: upsert_delete\n";
    assert_eq!(
        errors(&config("at_least_once", route)),
        Vec::<String>::new()
    );
    // Raw Avro has no key schema to read: the key must be listed.
    let raw = config(
        "at_least_once",
        &format!("{route}    avro:\n      schema_file: c.avsc\n"),
    );
    let errs = errors(&raw);
    assert!(
        errs.iter().any(|e| e.starts_with(
            "routes[0].cdc.primary_key: is required when the kafka key's schema does not come from schema_registry"
        )),
        "{errs:#?}"
    );
}

#[test]
fn the_key_subject_names_another_subject_strategy() {
    let route = "  - topics: [customers]\n    table: customers\n    cdc:\n      mode: upsert_delete\n      key_subject: \"{topic}-dbserver1.inventory.customers.Key\"\n";
    let yaml = config("at_least_once", route);
    assert_eq!(errors(&yaml), Vec::<String>::new());
    let c = Config::from_yaml(&yaml, HashMap::new()).unwrap();
    let cdc = c.route_for("customers").cdc.expect("the route's cdc");
    assert_eq!(
        cdc.key_subject("customers"),
        "customers-dbserver1.inventory.customers.Key"
    );
    let c = Config::from_yaml(&config("at_least_once", DEBEZIUM), HashMap::new()).unwrap();
    let cdc = c.route_for("customers").cdc.expect("the route's cdc");
    assert_eq!(cdc.key_subject("customers"), "customers-key", "the default");
}

#[test]
fn cdc_needs_at_least_once_delivery() {
    let errs = errors(&config("exactly_once", DEBEZIUM));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].starts_with("routes[0].cdc:"), "{errs:?}");
    assert!(errs[0].contains("delivery: at_least_once"), "{errs:?}");
    assert!(errs[0].contains("_default stream"), "{errs:?}");
}

#[test]
fn bad_cdc_fields_are_named() {
    let cases = [
        (
            "      mode: upsert\n      primary_key: []\n",
            "routes[0].cdc.primary_key: needs 1 to 16 columns, got 0",
        ),
        (
            "      mode: upsert\n      primary_key: [id, ID]\n",
            "routes[0].cdc.primary_key[1]: `ID` is listed twice",
        ),
        (
            "      mode: upsert\n      primary_key: [a.b]\n",
            "routes[0].cdc.primary_key[0]: `a.b` is not a top-level column name",
        ),
        (
            "      mode: upsert\n      format: plain\n      primary_key: [id]\n",
            "routes[0].cdc.change_type_field: is required with `format: plain`",
        ),
        (
            "      mode: upsert\n      change_type_field: op\n      primary_key: [id]\n",
            "routes[0].cdc.change_type_field: only applies to `format: plain`",
        ),
        (
            "      mode: upsert\n      primary_key: [id]\n      key_subject: customers-key\n",
            "routes[0].cdc.key_subject: only applies without primary_key",
        ),
        (
            "      mode: upsert\n      key_subject: \" \"\n",
            "routes[0].cdc.key_subject: must not be empty",
        ),
        (
            "      mode: upsert\n      key_subject: \"{subject}-key\"\n",
            "routes[0].cdc.key_subject: `{subject}-key` has a placeholder other than {topic}",
        ),
        (
            "      mode: upsert\n      primary_key: [id]\n      sequence: {source_field: source..lsn}\n",
            "routes[0].cdc.sequence.source_field: `source..lsn` is not a dotted field path",
        ),
    ];
    for (body, expected) in cases {
        let route = format!("  - topics: [customers]\n    cdc:\n{body}");
        let errs = errors(&config("at_least_once", &route));
        assert!(
            errs.iter().any(|e| e.starts_with(expected)),
            "{expected}: {errs:?}"
        );
    }
    let too_many: Vec<String> = (0..17).map(|i| format!("c{i}")).collect();
    let route = format!(
        "  - topics: [customers]\n    cdc:\n      mode: upsert\n      primary_key: [{}]\n",
        too_many.join(", ")
    );
    assert!(
        errors(&config("at_least_once", &route))
            .iter()
            .any(|e| e.starts_with("routes[0].cdc.primary_key: needs 1 to 16 columns, got 17"))
    );
    for update in ["add_columns", "relax_columns", "union"] {
        let route = format!(
            "  - topics: [customers]\n    schema_update: {update}\n    cdc:\n      mode: upsert\n      primary_key: [id]\n"
        );
        assert!(
            errors(&config("at_least_once", &route))
                .iter()
                .any(|e| e.contains(&format!("schema_update: {update}"))),
            "{update}"
        );
    }
    // Protobuf and JSON Schema records carry changes like Avro ones; their keys come from the
    // registry too.
    for format in ["protobuf", "json_schema"] {
        let route = format!(
            "  - topics: [customers]\n    format: {format}\n    cdc:\n      mode: upsert_delete\n"
        );
        let errs = errors(&config("at_least_once", &route));
        assert!(
            !errs
                .iter()
                .any(|e| e.starts_with("routes[0].cdc") || e.starts_with("routes[0].format")),
            "{format}: {errs:?}"
        );
    }
    // Schemaless JSON has no key schema: the key columns must be listed.
    let route = "  - topics: [customers]\n    format: json\n    cdc:\n      mode: upsert_delete\n";
    let errs = errors(&config("at_least_once", route));
    assert!(
        errs.iter().any(|e| e.starts_with(
            "routes[0].cdc.primary_key: is required when the kafka key's schema does not come from schema_registry"
        )),
        "{errs:?}"
    );
    // In Kafka Connect's envelope the key carries its schema: the key columns and a created
    // table come from the records.
    let route = "  - topics: [customers]\n    format: json\n    create_table: {}\n    cdc:\n      mode: upsert_delete\n      schemas_enable: true\n";
    let errs = errors(&config("at_least_once", route));
    assert!(
        !errs
            .iter()
            .any(|e| e.contains("primary_key") || e.contains("create_table")),
        "{errs:?}"
    );
    let route = "  - topics: [customers]\n    cdc:\n      mode: replace\n      primary_key: [id]\n";
    let errs = errors(&config("at_least_once", route));
    assert!(
        errs.iter().any(|e| e.contains("routes[0].cdc.mode")),
        "{errs:?}"
    );
}

#[test]
fn several_topics_into_one_cdc_table_without_a_source_position_is_explained() {
    let route =
        "  - topics: [customers, orders]\n    cdc:\n      mode: upsert\n      primary_key: [id]\n";
    let c = Config::from_yaml(&config("at_least_once", route), HashMap::new()).unwrap();
    validate(&c).unwrap();
    let w: Vec<String> = warnings(&c).iter().map(ToString::to_string).collect();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("routes[0].cdc.sequence:"), "{w:?}");
    assert!(w[0].contains("not comparable across topics"), "{w:?}");
    let route = "  - topics: [customers, orders]\n    cdc:\n      mode: upsert\n      primary_key: [id]\n      sequence: {source_field: source.lsn}\n";
    let c = Config::from_yaml(&config("at_least_once", route), HashMap::new()).unwrap();
    assert!(warnings(&c).is_empty());
}

#[test]
fn schemas_enable_applies_to_schemaless_json_only() {
    let route = |format: &str, setting: &str| {
        format!(
            "  - topics: [customers]\n    table: customers\n    format: {format}\n    cdc:\n      mode: upsert_delete\n      primary_key: [id]\n      schemas_enable: {setting}\n"
        )
    };
    for setting in ["true", "false"] {
        let yaml = config("at_least_once", &route("json", setting));
        assert_eq!(errors(&yaml), Vec::<String>::new(), "{setting}");
        let c = Config::from_yaml(&yaml, HashMap::new()).unwrap();
        let cdc = c.route_for("customers").cdc.expect("the route's cdc");
        assert_eq!(cdc.schemas_enable, Some(setting == "true"));
        for format in ["avro", "protobuf", "json_schema"] {
            let errs = errors(&config("at_least_once", &route(format, setting)));
            assert!(
                errs.iter().any(|e| e.starts_with(
                    "routes[0].cdc.schemas_enable: only applies to schemaless json input"
                )),
                "{format}: {errs:?}"
            );
        }
    }
}

#[test]
fn lost_offsets_that_replay_a_cdc_topic_from_its_log_start_warn_about_the_delete_retention() {
    let warned = |lost_offsets: &str| -> Vec<String> {
        let yaml = format!(
            "{}recovery:\n  lost_offsets: {lost_offsets}\n",
            config("at_least_once", DEBEZIUM)
        );
        let c = Config::from_yaml(&yaml, HashMap::new()).unwrap();
        validate(&c).unwrap();
        warnings(&c).iter().map(ToString::to_string).collect()
    };
    let earliest = warned("earliest");
    assert_eq!(earliest.len(), 1, "{earliest:?}");
    assert!(
        earliest[0].starts_with("recovery.lost_offsets: a cdc partition without a checkpoint"),
        "{earliest:?}"
    );
    assert!(earliest[0].contains("two days"), "{earliest:?}");
    // `resolve` replays from the log start too under at-least-once, and says that as well.
    let resolve = warned("resolve");
    assert_eq!(resolve.len(), 2, "{resolve:?}");
    assert!(
        resolve.iter().any(|w| w.contains("two days")),
        "{resolve:?}"
    );
    assert!(warned("fail").is_empty());
    assert!(warned("latest").is_empty());
}
