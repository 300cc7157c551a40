//! How records are read: the schema registry or a fixed Avro schema or schemaless JSON, and each
//! scope's input format (the top level, then each route with what it inherits).

use crate::config::{Config, InputFormat, limits};

use super::{Validator, is_http_url};

/// The input settings one route (or the top level) is read with, and the fields that set them.
pub(super) struct Scope {
    pub(super) format_path: String,
    /// `None`: read through the registry, each schema id as its registered type.
    pub(super) format: Option<InputFormat>,
    pub(super) raw_avro: bool,
    pub(super) create_table: Option<String>,
    /// The path and level of a `schema_update` that changes tables.
    pub(super) add_columns: Option<(String, &'static str)>,
    /// Records in Kafka Connect's JSON envelope (`cdc.schemas_enable: true`), which carry their
    /// schema: a table can be created from them.
    pub(super) connect_envelope: bool,
}

impl Validator {
    pub(super) fn input(&mut self, c: &Config) {
        match (&c.schema_registry, &c.avro) {
            (None, None) if c.json.is_none() => self.err(
                "schema_registry",
                "set schema_registry (Confluent wire format), avro.schema_file (raw Avro) or json (schemaless JSON)",
            ),
            (Some(_), Some(_)) => self.err(
                "avro",
                "set either schema_registry or avro.schema_file, not both",
            ),
            (_, Some(_)) if c.json.is_some() => {
                self.err("json", "set either json or avro.schema_file, not both")
            }
            _ => {}
        }
        if let Some(sr) = &c.schema_registry {
            if !is_http_url(&sr.url) {
                self.err("schema_registry.url", "must be an http:// or https:// URL");
            }
            let password = sr.password.is_some() || sr.password_file.is_some();
            let token = sr.bearer_token.is_some() || sr.bearer_token_file.is_some();
            match (&sr.username, password) {
                (Some(_), false) => self.err(
                    "schema_registry.password",
                    "required with schema_registry.username",
                ),
                (None, true) => self.err(
                    "schema_registry.username",
                    "required with schema_registry.password",
                ),
                _ => {}
            }
            if token && (sr.username.is_some() || password) {
                self.err(
                    "schema_registry.bearer_token",
                    "use either basic auth (username/password) or a bearer token, not both",
                );
            }
            if sr.timeout.0.is_zero() {
                self.err("schema_registry.timeout", "must be above zero");
            }
            if !(limits::MIN_REGISTRY_RESPONSE_BYTES..=limits::MAX_REGISTRY_RESPONSE_BYTES)
                .contains(&sr.max_response_bytes)
            {
                self.err(
                    "schema_registry.max_response_bytes",
                    format!(
                        "must be from {} to {}",
                        limits::MIN_REGISTRY_RESPONSE_BYTES,
                        limits::MAX_REGISTRY_RESPONSE_BYTES
                    ),
                );
            }
            if sr.table_subject.trim().is_empty() {
                self.err("schema_registry.table_subject", "must not be empty");
            } else if sr.table_subject.replace("{topic}", "").contains(['{', '}']) {
                self.err(
                    "schema_registry.table_subject",
                    "the only placeholder is {topic}",
                );
            }
        }
        if let Some(avro) = &c.avro
            && avro.schema_file.as_os_str().is_empty()
        {
            self.err("avro.schema_file", "must not be empty");
        }
    }

    /// Protobuf and JSON Schema are read through the registry, raw Avro from its schema file,
    /// schemaless JSON needs neither and has no schema to create or evolve a table from. A
    /// registry route without a format reads each schema id as its registered type. Each
    /// refusal names the field that asks for it (the route's own, else the top-level one it
    /// inherits).
    pub(super) fn formats(&mut self, c: &Config) {
        for s in format_scopes(c) {
            self.format_scope(c, s);
        }
    }

    /// What one scope's input format needs: a registry or a schema file, and no table
    /// creation or new columns for schemaless JSON.
    fn format_scope(&mut self, c: &Config, s: Scope) {
        let Some(format) = s.format else {
            // Each schema id's registered type: `top_format` is `None` only with a registry.
            return;
        };
        let name = format.as_str();
        match format {
            InputFormat::Avro => {
                if !s.raw_avro && c.schema_registry.is_none() && c.json.is_some() {
                    self.err(
                        &s.format_path,
                        "avro needs schema_registry or avro.schema_file",
                    );
                }
            }
            InputFormat::Protobuf | InputFormat::JsonSchema => {
                if s.raw_avro {
                    self.err(
                        &s.format_path,
                        format!(
                            "{name} records are read through schema_registry (raw input is avro only)"
                        ),
                    );
                } else if c.schema_registry.is_none() {
                    self.err(&s.format_path, format!("{name} needs schema_registry"));
                }
            }
            InputFormat::Json => {
                if s.raw_avro {
                    self.err(
                        &s.format_path,
                        "json is not read beside avro.schema_file (its schema would be ignored)",
                    );
                }
                if let Some(path) = s.create_table.filter(|_| !s.connect_envelope) {
                    self.err(
                        &path,
                        format!(
                            "create_table is not supported for schemaless json ({}) outside kafka connect's envelope (cdc.schemas_enable: true): there is no schema to create the table from; create the table first",
                            s.format_path
                        ),
                    );
                }
                if let Some((path, level)) = s.add_columns {
                    self.err(
                        &path,
                        format!(
                            "{level} is not supported for schemaless json ({}): there is no schema to change the table from",
                            s.format_path
                        ),
                    );
                }
            }
        }
    }
}

/// The scopes whose input format is checked: the top level, then each route with what it
/// inherits from the top level.
fn format_scopes(c: &Config) -> Vec<Scope> {
    let top_path = if c.json.is_some() {
        "json"
    } else {
        "schema_registry.format"
    };
    let b = &c.bigquery;
    let mut scopes = vec![Scope {
        format_path: top_path.into(),
        format: c.top_format(),
        raw_avro: c.avro.is_some(),
        create_table: b
            .create_table
            .is_some()
            .then(|| "bigquery.create_table".into()),
        add_columns: (b.schema_update.adds_columns())
            .then(|| ("bigquery.schema_update".into(), b.schema_update.as_str())),
        connect_envelope: false,
    }];
    for (i, r) in c.routes.iter().enumerate() {
        let create_table = match (&r.create_table, &b.create_table) {
            (Some(_), _) => Some(format!("routes[{i}].create_table")),
            (None, Some(_)) => Some("bigquery.create_table".into()),
            (None, None) => None,
        };
        let add_columns = match r.schema_update {
            Some(u) if u.adds_columns() => Some((format!("routes[{i}].schema_update"), u.as_str())),
            Some(_) => None,
            None => (b.schema_update.adds_columns())
                .then(|| ("bigquery.schema_update".into(), b.schema_update.as_str())),
        };
        let format = r.format.or(c.top_format());
        scopes.push(Scope {
            format_path: match r.format {
                Some(_) => format!("routes[{i}].format"),
                None => top_path.into(),
            },
            format,
            // A route reads the top-level schema file unless it has its own (`route_for`).
            raw_avro: r.avro.is_some() || c.avro.is_some(),
            create_table,
            add_columns,
            connect_envelope: r.cdc.as_ref().and_then(|c| c.schemas_enable) == Some(true),
        });
        // A CDC route reads every format: Avro (raw or registry), Protobuf, JSON Schema and
        // schemaless JSON (docs/cdc.md); what each needs is checked in `cdc::validate`.
    }
    scopes
}
