//! A column from a field of the key: Kafka Connect's `ExtractField$Key` (`field`) with
//! `kafkaKeyFieldName` (the column the connector wrote the key into) is `set: {column, from:
//! key, field, key_format}` here (docs/mapping.md#transforms), the key read as `key.converter`
//! says. `ValueToKey` builds the key from the value's fields, which here stay in their own
//! columns; every combination that does not mean one column from one key field is reported.

use super::topics::Routing;
use super::{Source, list};
use crate::migrate::report::Outcome;

/// `set: {column, from: key, field, key_format}`, and the transform it comes from.
#[derive(Clone, Debug)]
pub(super) struct KeyColumn {
    pub transform: String,
    pub field: String,
    pub column: String,
    pub key_format: &'static str,
}

/// What the key column reads from the sections before it.
pub(super) struct KeyContext {
    /// The values are read through a schema registry (the draft has `schema_registry`).
    pub registry: bool,
    /// The routes are CDC routes (no field transform applies there).
    pub cdc: bool,
    /// `autoCreateTables`: the sink creates tables, which do not have the key's column.
    pub creates: bool,
}

impl KeyColumn {
    /// The YAML flow item of `bigquery.transforms`.
    pub fn transform_item(&self) -> String {
        format!(
            "set: {{column: {}, from: key, field: {}, key_format: {}}}",
            quote(&self.column),
            quote(&self.field),
            self.key_format
        )
    }

    /// The line of the `ExtractField$Key` and of `kafkaKeyFieldName`.
    pub fn outcome(&self, cx: &KeyContext) -> Outcome {
        let text = format!(
            "bigquery.transforms set {} from the key's field {} (transforms.{}, ExtractField$Key, with kafkaKeyFieldName), key_format {}: the key read by its {}, the field written into the column as a value's field of its type would be",
            self.column,
            self.field,
            self.transform,
            self.key_format,
            if self.key_format == "json" {
                "JSON object"
            } else {
                "schema id through the registry"
            }
        );
        if cx.creates {
            Outcome::Changed(format!(
                "{text}; a table the sink creates does not have the column (the key's schema is not read when a table is derived): create it, or the records are dead letters"
            ))
        } else {
            Outcome::Mapped(text)
        }
    }
}

/// The transforms of the chain that change the key, in order: `(name, short class)`.
fn key_transforms(s: &Source, routing: &Routing) -> Vec<(String, String)> {
    (routing.transforms.iter())
        .filter_map(|t| {
            let class = s.get(&format!("transforms.{t}.type")).unwrap_or_default();
            let short = class.rsplit('.').next().unwrap_or(class);
            let keyed = class.ends_with("$Key") || short == "ValueToKey";
            keyed.then(|| (t.clone(), short.trim_end_matches("$Key").to_string()))
        })
        .collect()
}

/// The column the chain's `ExtractField$Key`, if any, means with `kafkaKeyFieldName`.
pub(super) fn key_column(s: &Source, routing: &Routing, cx: &KeyContext) -> Option<KeyColumn> {
    let (t, _) =
        (key_transforms(s, routing).into_iter()).find(|(_, short)| short == "ExtractField")?;
    extract_key_field(s, routing, cx, &t).ok()
}

/// The column `ExtractField$Key` `t` means, or the line that says why there is none.
pub(super) fn extract_key_field(
    s: &Source,
    routing: &Routing,
    cx: &KeyContext,
    t: &str,
) -> Result<KeyColumn, Outcome> {
    let not = |why: String| Err(Outcome::NotTranslatable(why));
    if s.get(&format!("transforms.{t}.predicate"))
        .is_some_and(|p| !p.is_empty())
    {
        return not("the transform applies only to the records its predicate matches".into());
    }
    let field = s
        .get(&format!("transforms.{t}.field"))
        .unwrap_or_default()
        .to_string();
    if field.is_empty() {
        return not("ExtractField$Key without a field: Kafka Connect refuses it".into());
    }
    let column = s
        .get("kafkaKeyFieldName")
        .filter(|c| !c.is_empty())
        .map(str::to_string);
    let Some(column) = column else {
        return if cx.cdc {
            not(format!(
                "the key of an upsert is the table's primary key, read from the key's record fields: a key that is its field {field} alone is not a record; name the key column with routes[].cdc.primary_key: [{field}] by hand"
            ))
        } else {
            Err(Outcome::Dropped(format!(
                "the key reaches no column (kafkaKeyFieldName is unset) and no upsert: extracting its field {field} changes no row"
            )))
        };
    };
    if let Some((other, short)) =
        (key_transforms(s, routing).into_iter()).find(|(other, _)| other != t)
    {
        return not(if short == "ValueToKey" {
            format!(
                "the key it reads is built from the value's fields by transforms.{other} (ValueToKey): column {column} would hold the value's field {field}, which the row writes into its own column; to have it under the name {column}, write `- rename: {{field: {field}, to: {column}}}` by hand"
            )
        } else {
            format!(
                "transforms.{other} ({short}) changes the key too: here a column is set from a field of the key as the producer wrote it, without a chain of key transforms"
            )
        });
    }
    if cx.cdc {
        return not(
            "the upserts go through a CDC route, whose rows are keyed changes: only filter applies there".into(),
        );
    }
    if !super::smts::is_field_name(&field) {
        return not(format!(
            "`{field}` is not a top-level field name the key columns here take (ASCII letters, digits, `_`)"
        ));
    }
    let key_format = match key_format(s, cx.registry) {
        Ok(f) => f,
        Err(why) => {
            return not(format!(
                "{why}; with the key's format known, write `- set: {{column: {column}, from: key, field: {field}, key_format: schema_registry}}` (or `json`) by hand"
            ));
        }
    };
    Ok(KeyColumn {
        transform: t.to_string(),
        field,
        column,
        key_format,
    })
}

/// The `key_format` `key.converter` means, or why none: a key's format is never guessed.
fn key_format(s: &Source, registry: bool) -> Result<&'static str, String> {
    let Some(converter) = s.get("key.converter").filter(|c| !c.is_empty()) else {
        return Err(
            "the key's format is the worker's key.converter, which the connector config does not name".into(),
        );
    };
    let short = converter.rsplit('.').next().unwrap_or(converter);
    match short {
        "AvroConverter" | "ProtobufConverter" | "JsonSchemaConverter" if registry => {
            Ok("schema_registry")
        }
        "AvroConverter" | "ProtobufConverter" | "JsonSchemaConverter" => Err(format!(
            "keys of {short} are read through a schema registry, and the values here are not"
        )),
        "JsonConverter" if s.flag("key.converter.schemas.enable") == Some(false) => Ok("json"),
        "JsonConverter" => Err(
            "JsonConverter keys with schemas.enable (its default) carry Kafka Connect's envelope, which a key column does not read".into(),
        ),
        other => Err(format!("a key read by {other} has no fields")),
    }
}

/// `ValueToKey`: the key built from the value's fields, which here stay in their own columns.
pub(super) fn value_to_key(s: &Source, t: &str, cdc: bool) -> Outcome {
    let fields = s
        .get(&format!("transforms.{t}.fields"))
        .map(list)
        .unwrap_or_default()
        .join(", ");
    if cdc {
        Outcome::NotTranslatable(format!(
            "the upserts' key is built from the value's fields {fields}: here a CDC route's key columns are the table's primary key, routes[].cdc.primary_key: [{fields}], written by hand"
        ))
    } else if s.get("kafkaKeyFieldName").is_some_and(|c| !c.is_empty()) {
        Outcome::NotTranslatable(format!(
            "the key written into kafkaKeyFieldName is built from the value's fields {fields}, which the row writes into their own columns already; a copy of a field into a second column has no counterpart here"
        ))
    } else {
        Outcome::Dropped(format!(
            "the key built from {fields} reaches no column (kafkaKeyFieldName is unset) and no upsert: it changes no row"
        ))
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}
