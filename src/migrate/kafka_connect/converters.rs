//! The converters: how the connector read the record's value (a registry format or JSON), and
//! what its key and header converters become.

use super::{BEARER_VAR, MigrateError, PASSWORD_VAR, Source, WorkerSettings, list, refuse, scalar};
use crate::migrate::draft::{Input, Scalar};
use crate::migrate::report::Outcome;

/// The input the value converter becomes, and whether schemaless JSON comes in Connect's
/// `{"schema", "payload"}` envelope. `creates`: the config creates tables; `changes`: upserts
/// or deletes.
pub(super) fn input(
    s: &mut Source,
    worker: &WorkerSettings,
    creates: bool,
    changes: bool,
) -> Result<(Input, bool), MigrateError> {
    let (converter, registry_format) = converter(s, worker)?;
    let in_config = s.props.contains_key("value.converter");
    let mut json_envelope = false;
    let input = match registry_format {
        Some(format) => registry(s, worker, &converter, format)?,
        None => {
            json_envelope = schemas_enable(s, changes);
            Input::Json
        }
    };
    note_converter(s, &converter, &input, in_config);
    let json_input = matches!(input, Input::Json);
    if json_input && creates && !json_envelope {
        return Err(refuse(
            "autoCreateTables",
            "schemaless JSON has no schema to create a table from (the connector refuses it too)",
        ));
    }
    note_key_and_header(s);
    Ok((input, json_envelope))
}

/// The value converter, from the config or the worker, and its registry format (`None`: JSON).
fn converter(
    s: &Source,
    worker: &WorkerSettings,
) -> Result<(String, Option<&'static str>), MigrateError> {
    let converter = s
        .get("value.converter")
        .map(str::to_string)
        .or_else(|| worker.value_converter.clone());
    let Some(converter) = converter else {
        return Err(MigrateError::Missing(
            "value.converter: the connector config has none, so the Connect worker's applies; pass it with --value-converter (and --schema-registry-url for a registry converter)".into(),
        ));
    };
    let registry_format = match converter.as_str() {
        "io.confluent.connect.avro.AvroConverter" => Some("avro"),
        "io.confluent.connect.protobuf.ProtobufConverter" => Some("protobuf"),
        "io.confluent.connect.json.JsonSchemaConverter" => Some("json_schema"),
        "org.apache.kafka.connect.json.JsonConverter" => None,
        other => {
            return Err(refuse(
                "value.converter",
                format!(
                    "`{other}`: this sink reads Confluent Avro, Protobuf or JSON Schema through a registry, or JSON; records of another converter have no counterpart"
                ),
            ));
        }
    };
    Ok((converter, registry_format))
}

/// A registry converter: the registry's URL and its basic or bearer authentication.
fn registry(
    s: &mut Source,
    worker: &WorkerSettings,
    converter: &str,
    format: &'static str,
) -> Result<Input, MigrateError> {
    let url = s
                .get("value.converter.schema.registry.url")
                .map(str::to_string)
                .or_else(|| worker.schema_registry_url.clone())
                .ok_or_else(|| {
                    MigrateError::Missing(format!(
                        "value.converter.schema.registry.url: {converter} needs a registry; pass --schema-registry-url when the worker sets it"
                    ))
                })?;
    let urls = list(&url);
    let first = urls.first().cloned().unwrap_or_default();
    s.note(
        "value.converter.schema.registry.url",
        if urls.len() > 1 {
            Outcome::Changed(format!(
                "schema_registry.url \"{first}\": one URL here; the others ({}) are not tried",
                urls[1..].join(", ")
            ))
        } else {
            Outcome::Mapped("schema_registry.url".into())
        },
    );
    let (username, password) = match (
        s.get("value.converter.basic.auth.credentials.source"),
        s.get("value.converter.basic.auth.user.info"),
    ) {
        (source, Some(info)) if source.is_none_or(|v| v.eq_ignore_ascii_case("USER_INFO")) => {
            let user = info.split_once(':').map_or(info, |(u, _)| u).to_string();
            s.note(
                        "value.converter.basic.auth.user.info",
                        Outcome::Changed(format!(
                            "schema_registry.username; the password is read from the environment variable {PASSWORD_VAR}, never written into the YAML (or use schema_registry.password_file)"
                        )),
                    );
            s.note(
                "value.converter.basic.auth.credentials.source",
                Outcome::Mapped("basic auth with username and password".into()),
            );
            (
                Some(Scalar::Text(user)),
                Some(Scalar::Env(PASSWORD_VAR.into())),
            )
        }
        _ => (None, None),
    };
    let bearer = s
        .get("value.converter.bearer.auth.token")
        .map(|_| Scalar::Env(BEARER_VAR.into()));
    if bearer.is_some() {
        s.note(
                    "value.converter.bearer.auth.token",
                    Outcome::Changed(format!(
                        "schema_registry.bearer_token, read from the environment variable {BEARER_VAR} (or use schema_registry.bearer_token_file)"
                    )),
                );
        s.note(
            "value.converter.bearer.auth.credentials.source",
            Outcome::Mapped("bearer auth".into()),
        );
    }
    Ok(Input::Registry {
        url: scalar("value.converter.schema.registry.url", &first)?,
        username,
        password,
        bearer_token: bearer,
        format: Some(format),
    })
}

/// JsonConverter: `schemas.enable` (default true) says whether records come in the envelope.
fn schemas_enable(s: &mut Source, changes: bool) -> bool {
    // JsonConverter: schemas.enable defaults to true, the {"schema", "payload"} envelope.
    let json_envelope = s.flag("value.converter.schemas.enable").unwrap_or(true);
    let outcome = if json_envelope && !changes {
        Outcome::NotTranslatable(
                    "Kafka Connect's {\"schema\", \"payload\"} envelope is read only by cdc routes here; this config reads plain JSON objects (json: {}), and an envelope record is a bad record. Produce with schemas.enable=false, or write the topic through a cdc route".into(),
                )
    } else if json_envelope {
        Outcome::Mapped(
            "routes[].cdc.schemas_enable: true (the envelope's schema types the columns)".into(),
        )
    } else {
        Outcome::Mapped("json: {} (schemaless JSON typed by the table's columns)".into())
    };
    if s.props.contains_key("value.converter.schemas.enable") {
        s.note("value.converter.schemas.enable", outcome);
    } else {
        s.remark("value.converter.schemas.enable (unset: true)", outcome);
    }
    json_envelope
}

/// The `value.converter` line and those of its settings.
fn note_converter(s: &mut Source, converter: &str, input: &Input, in_config: bool) {
    let converter_text = format!(
        "{} records: {}",
        converter.rsplit('.').next().unwrap_or(converter),
        match input {
            Input::Registry {
                format: Some(f), ..
            } => {
                format!("schema_registry with format {f}, each record's schema by its id")
            }
            _ => "json: {}".to_string(),
        }
    );
    if in_config {
        s.note("value.converter", Outcome::Mapped(converter_text));
    } else {
        s.remark(
            "value.converter (from the worker)",
            Outcome::Mapped(converter_text),
        );
    }
    for key in s.keys_with_prefix("value.converter.") {
        let outcome = if key.contains("ssl.") {
            Outcome::NotTranslatable(
                "the registry's TLS settings are Java key stores; give schema_registry.ca_file a PEM bundle".into(),
            )
        } else if key.ends_with("subject.name.strategy") {
            Outcome::Changed(
                "records are read by their schema id whatever the subject; the strategy names only the subject create_table reads: schema_registry.table_subject (`{topic}-value` by default)".into(),
            )
        } else {
            Outcome::Dropped("a converter detail with no effect on reading by schema id".into())
        };
        s.note(&key, outcome);
    }
}

/// The key and header converters: not needed.
fn note_key_and_header(s: &mut Source) {
    for key in s.keys_with_prefix("key.converter") {
        s.note(
            &key,
            Outcome::Dropped(
                "the key is read only for a cdc route's key columns (through the registry subject {topic}-key), the key column (raw bytes), and a column from a field of the key, whose key_format says how (see kafkaKeyFieldName)".into(),
            ),
        );
    }
    for key in s.keys_with_prefix("header.converter") {
        s.note(
            &key,
            Outcome::Dropped(
                "headers are copied as bytes into the headers column when one is configured".into(),
            ),
        );
    }
}
