//! The chain of single message transforms: those with an exact counterpart become
//! `bigquery.transforms` in the chain's order (docs/mapping.md#transforms); a RegexRouter is read
//! by the topics section; every other one is reported.

use std::collections::{BTreeMap, BTreeSet};

use kbq_transcode::transforms::{self, ConvertField, EpochUnit, TimeFrom, TimeTo, Transform};

use super::key_column::{self, KeyContext};
use super::topics::Routing;
use super::{Source, list, value_filter};
use crate::migrate::report::Outcome;

/// What the transforms section reads from the sections before it.
pub(super) struct Context<'a> {
    pub routing: &'a Routing,
    /// `upsertEnabled` or `deleteEnabled`.
    pub changes: bool,
    /// Why a field transform cannot be had here, if it cannot.
    pub shaping_blocked: Option<&'static str>,
    /// What a column from a field of the key reads.
    pub key: &'a KeyContext,
}

/// Why field transforms cannot be had: a field transform (drop, rename, mask, set) cannot be had
/// on a CDC route (validate refuses it). A created or evolved table follows the transforms.
pub(super) fn shaping_blocked(cdc_routes: bool) -> Option<&'static str> {
    cdc_routes.then_some(
        "the upserts go through a CDC route, whose rows are keyed changes: only filter applies there",
    )
}

/// `bigquery.transforms` in the chain's order, and whether the chain unwraps a Debezium
/// envelope.
pub(super) fn transforms(
    s: &mut Source,
    cx: &Context,
    json_input: bool,
    metadata_columns: &mut Vec<(&'static str, String)>,
) -> (Vec<String>, bool) {
    let mut chain = Chain {
        transforms: Vec::new(),
        touched: BTreeMap::new(),
        routed_by: None,
        json_input,
        unwrap: false,
    };
    for (_, column) in metadata_columns.iter() {
        chain
            .touched
            .insert(column.to_ascii_lowercase(), "kafkaDataFieldName".into());
    }
    for t in &cx.routing.transforms {
        let keys = s.keys_with_prefix(&format!("transforms.{t}."));
        let outcome = smt(s, t, cx, metadata_columns, &mut chain);
        s.note(&format!("transforms.{t}.type"), outcome.clone());
        for key in keys {
            s.note(
                &key,
                Outcome::Dropped(format!("a setting of transforms.{t} (see its line)")),
            );
        }
    }
    if !cx.routing.transforms.is_empty() {
        s.note(
            "transforms",
            Outcome::Dropped(
                "the list of transforms, kept in its order in bigquery.transforms; each has its own line".into(),
            ),
        );
    }
    for key in s.keys_with_prefix("predicates") {
        s.note(
            &key,
            Outcome::Dropped("a predicate of a transform (see the transform's line)".into()),
        );
    }
    (chain.transforms, chain.unwrap)
}

/// The line of transform `t`.
fn smt(
    s: &Source,
    t: &str,
    cx: &Context,
    metadata_columns: &mut Vec<(&'static str, String)>,
    chain: &mut Chain,
) -> Outcome {
    let class = s
        .get(&format!("transforms.{t}.type"))
        .unwrap_or_default()
        .to_string();
    let short = class
        .rsplit('.')
        .next()
        .unwrap_or(&class)
        .trim_end_matches("$Value")
        .trim_end_matches("$Key")
        .to_string();
    let predicate = s
        .get(&format!("transforms.{t}.predicate"))
        .filter(|p| !p.is_empty())
        .map(str::to_string);
    if short == "ExtractNewRecordState" || short == "UnwrapFromEnvelope" {
        chain.unwrap = true;
        if cx.changes {
            Outcome::Changed(
                    "routes[].cdc format debezium: the sink reads the Debezium envelope itself (c, u, r upsert `after`; d deletes by `before`; tombstones delete by the key); the transform's drop/rewrite options have no counterpart".into(),
                )
        } else {
            Outcome::NotTranslatable(
                    "an append-only table of `after` rows: the sink reads a Debezium envelope only in a cdc route (upsert); without one the envelope's fields (before, after, op, …) are the columns. Unwrap upstream, or use upsertEnabled".into(),
                )
        }
    } else if short == "RegexRouter" {
        chain.routed_by = Some(t.to_string());
        router_outcome(t, cx.routing)
    } else if class.starts_with("io.confluent.connect.transforms.Filter") {
        confluent_filter_smt(s, t, &class, predicate.as_deref(), cx, chain)
    } else if short == "Filter" {
        filter_smt(s, t, predicate.as_deref(), chain)
    } else if let Some(p) = &predicate {
        Outcome::NotTranslatable(format!(
            "{short} applies only to the records predicate {p} matches; a transform here applies to every record of its route"
        ))
    } else if short == "ValueToKey" {
        key_column::value_to_key(s, t, cx.key.cdc)
    } else if class.ends_with("$Key") && short == "ExtractField" {
        match key_column::extract_key_field(s, cx.routing, cx.key, t) {
            Ok(k) => {
                chain.transforms.push(k.transform_item());
                chain.touch(&[k.column.as_str()], t);
                k.outcome(cx.key)
            }
            Err(outcome) => outcome,
        }
    } else if class.ends_with("$Key") {
        Outcome::NotTranslatable(format!(
            "{short} of the key: the key is written as its raw bytes (metadata_columns.key), read by a cdc route's key columns, or a top-level field of it set into a column (ExtractField$Key with kafkaKeyFieldName); no other transform reads it"
        ))
    } else if short == "InsertField" {
        insert_field_smt(s, t, cx.shaping_blocked, metadata_columns, chain)
    } else if short == "ReplaceField" {
        replace_field_smt(s, t, cx.shaping_blocked, chain)
    } else if short == "MaskField" {
        mask_field_smt(s, t, cx.shaping_blocked, chain)
    } else if short == "Cast" {
        cast_smt(s, t, cx.shaping_blocked, chain)
    } else if short == "TimestampConverter" {
        timestamp_converter_smt(s, t, cx.shaping_blocked, chain)
    } else if short == "Flatten" {
        flatten_smt(s, t)
    } else if short == "RecordIsTombstone" {
        Outcome::NotTranslatable(
            "a predicate's class used as a transform: Kafka Connect refuses it".into(),
        )
    } else {
        unsupported(&short)
    }
}

/// A RegexRouter's line: computed for listed topics or as a capture-group route, or not.
fn router_outcome(t: &str, routing: &Routing) -> Outcome {
    let pattern_router = &routing.pattern_router;
    match &routing.router {
                _ if pattern_router.as_ref().is_some_and(|(name, _, _)| name == t) => {
                    let (_, route, exact) = pattern_router.as_ref().expect("matched above");
                    let text = format!(
                        "routes: topic_pattern \"{}\" with table \"{}\": a matched topic's table is the routed name, each capture group sanitized as sanitizeTopics does (docs/configuration.md, capture groups); other topics keep bigquery.table",
                        route.topic_pattern.as_deref().unwrap_or_default(),
                        route.table.as_deref().unwrap_or_default()
                    );
                    if *exact {
                        Outcome::Mapped(text)
                    } else {
                        Outcome::Changed(format!(
                            "{text}; unlike the connector, a routed name starting with a digit gets no `_` prefix"
                        ))
                    }
                }
                Some((_, _, name)) if name == t => Outcome::Mapped(
                    "routes: each listed topic's table is the routed name (sanitized as sanitizeTopics says)".into(),
                ),
                _ => Outcome::NotTranslatable(
                    "topic renaming by regex is computed here for a listed topic only (not with topics.regex, a predicate or a pattern Rust's regex cannot read); tables follow bigquery.table".into(),
                ),
            }
}

/// A transform without a counterpart here.
fn unsupported(short: &str) -> Outcome {
    if matches!(short, |"ExtractField"| "HoistField"
        | "TimestampRouter"
        | "HeaderFrom"
        | "InsertHeader"
        | "DropHeaders"
        | "SetSchemaMetadata")
    {
        Outcome::NotTranslatable(format!(
            "{short}: no such transform here yet (docs/mapping.md#transforms has drop, rename, mask, cast, convert, flatten, set, filter); fields are written as the record has them (names matched to columns, docs/mapping.md)"
        ))
    } else if short.contains("Mask") || short.contains("Hash") || short.contains("HMAC") {
        Outcome::NotTranslatable(format!(
            "{short}: a masking or hashing transform of another project: its algorithm and key are not in the connector config, so it cannot be translated exactly; `mask` here writes NULL, a fixed value, or an HMAC-SHA256 of the value with a key from a file or an environment variable (docs/mapping.md#transforms): choose one and give its key"
        ))
    } else {
        Outcome::NotTranslatable(format!(
            "{short}: no transform of the record here yet; fields are written as the record has them (names matched to columns, docs/mapping.md)"
        ))
    }
}

/// `Flatten$Value`: Connect flattens every struct of the value, recursively; `flatten` here names
/// one top-level record and flattens it one level, and the connector config names no record.
fn flatten_smt(s: &Source, t: &str) -> Outcome {
    let delimiter = s
        .get(&format!("transforms.{t}.delimiter"))
        .filter(|d| !d.is_empty())
        .unwrap_or(".");
    let separator = if !delimiter.is_empty()
        && delimiter
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        delimiter.to_string()
    } else {
        "_".to_string()
    };
    let joined = if separator == delimiter {
        format!("delimiter {}", quote(delimiter))
    } else {
        format!(
            "delimiter {} (a column name holds only letters, digits and `_`: use `_`)",
            quote(delimiter)
        )
    };
    Outcome::NotTranslatable(format!(
        "Connect flattens every struct of the value, recursively, joining names with its {joined}; here `flatten` names one top-level record and flattens it one level (a record inside stays a RECORD column), and the connector config names no record: add `- flatten: {{field: RECORD, separator: {}}}` to bigquery.transforms for each top-level record of the writer schema (docs/mapping.md#transforms)",
        quote(&separator)
    ))
}

/// The transforms of the chain mapped so far, and the names they read or write.
struct Chain {
    /// YAML flow items of `bigquery.transforms`, in the chain's order.
    transforms: Vec<String>,
    /// Each field or column name (lowercase) an earlier transform names, and which one.
    touched: BTreeMap<String, String>,
    /// The RegexRouter earlier in the chain, if any: a later topic predicate sees its output.
    routed_by: Option<String>,
    /// Schemaless JSON: a field a transform names may never come, and nothing is refused.
    json_input: bool,
    /// An ExtractNewRecordState (UnwrapFromEnvelope) in the chain: a cdc route reads the
    /// Debezium envelope.
    unwrap: bool,
}

impl Chain {
    /// Why transform `t` cannot name `names` here: one is not a name the transforms take, or an
    /// earlier transform of the chain named it (Connect's next transform sees the previous one's
    /// output; here every transform names the writer's fields, one transform per field).
    fn conflict(&self, names: &[&str]) -> Option<String> {
        let mut seen = BTreeSet::new();
        for n in names {
            if !is_field_name(n) {
                return Some(format!(
                    "`{n}` is not a field name the transforms here take (ASCII letters, digits, `_`): a `.` in a Kafka Connect field name is part of the name, here it would be a path into a nested record"
                ));
            }
            let lower = n.to_ascii_lowercase();
            if let Some(other) = self.touched.get(&lower) {
                return Some(format!(
                    "field `{n}` is named by {other} earlier in the chain: in Kafka Connect each transform sees the previous one's output, here every transform names the writer's fields and a field takes one transform; write the combined effect by hand"
                ));
            }
            if !seen.insert(lower) {
                return Some(format!(
                    "field `{n}` is named twice by this transform; here a field takes one transform"
                ));
            }
        }
        None
    }

    fn touch(&mut self, names: &[&str], t: &str) {
        for n in names {
            self.touched
                .insert(n.to_ascii_lowercase(), format!("transforms.{t}"));
        }
    }

    /// What a field transform does with a field the writer schema lacks.
    fn missing_field_note(&self) -> &'static str {
        if self.json_input {
            ""
        } else {
            "; unlike Kafka Connect, which skips a name the record lacks, a writer schema without the field refuses the plan here (its records are dead letters naming the transform)"
        }
    }
}

/// A name `drop`, `rename`, `mask` and `set` take for a top-level field or column.
pub(super) fn is_field_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// `ReplaceField$Value`: `exclude` (`blacklist`) → drop, `renames` → rename; `include`
/// (`whitelist`) drops every other field, which only the writer schema lists.
fn replace_field_smt(s: &Source, t: &str, blocked: Option<&str>, chain: &mut Chain) -> Outcome {
    let get = |k: &str| {
        s.get(&format!("transforms.{t}.{k}"))
            .map(list)
            .unwrap_or_default()
    };
    let exclude = [get("exclude"), get("blacklist")].concat();
    let include = [get("include"), get("whitelist")].concat();
    if !include.is_empty() {
        return Outcome::NotTranslatable(format!(
            "include keeps only {}: that is a drop of every other field, and the other fields are in the writer schema, which this command does not read; write a drop for each into bigquery.transforms by hand (a field without a column is skipped anyway under unknown_fields: ignore)",
            include.join(", ")
        ));
    }
    let mut renames = Vec::new();
    for pair in get("renames") {
        let Some((from, to)) = pair.split_once(':') else {
            return Outcome::NotTranslatable(format!("renames: `{pair}` is not old:new"));
        };
        renames.push((from.trim().to_string(), to.trim().to_string()));
    }
    if exclude.is_empty() && renames.is_empty() {
        return Outcome::Dropped(
            "no field excluded or renamed: the transform changes nothing".into(),
        );
    }
    if let Some(why) = blocked {
        return Outcome::NotTranslatable(why.into());
    }
    let names: Vec<&str> = exclude
        .iter()
        .map(String::as_str)
        .chain(renames.iter().flat_map(|(a, b)| [a.as_str(), b.as_str()]))
        .collect();
    if let Some(why) = chain.conflict(&names) {
        return Outcome::NotTranslatable(why);
    }
    let mut done = Vec::new();
    for f in &exclude {
        chain
            .transforms
            .push(format!("drop: {{field: {}}}", quote(f)));
        done.push(format!("drop {f}"));
    }
    for (from, to) in &renames {
        chain.transforms.push(format!(
            "rename: {{field: {}, to: {}}}",
            quote(from),
            quote(to)
        ));
        done.push(format!("rename {from} to {to}"));
    }
    chain.touch(&names, t);
    let text = format!(
        "bigquery.transforms {}: a dropped field's column gets nothing from the record (NULL), a renamed field fills the column of its new name{}",
        done.join(", "),
        chain.missing_field_note()
    );
    if chain.json_input {
        Outcome::Mapped(text)
    } else {
        Outcome::Changed(text)
    }
}

/// `MaskField$Value`: with `replacement`, a mask to that value; without, Connect writes the
/// type's empty value (0, false, "", the epoch), which a mask without a schema cannot name.
fn mask_field_smt(s: &Source, t: &str, blocked: Option<&str>, chain: &mut Chain) -> Outcome {
    let fields = s
        .get(&format!("transforms.{t}.fields"))
        .map(list)
        .unwrap_or_default();
    let replacement = s
        .get(&format!("transforms.{t}.replacement"))
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    if fields.is_empty() {
        return Outcome::Dropped("no field to mask: the transform changes nothing".into());
    }
    if let Some(why) = blocked {
        return Outcome::NotTranslatable(format!(
            "{why}. Until then the table receives {} unmasked",
            fields.join(", ")
        ));
    }
    let names: Vec<&str> = fields.iter().map(String::as_str).collect();
    if let Some(why) = chain.conflict(&names) {
        return Outcome::NotTranslatable(format!(
            "{why}. Until then the table receives {} unmasked",
            fields.join(", ")
        ));
    }
    for f in &fields {
        chain.transforms.push(match &replacement {
            Some(r) => format!("mask: {{field: {}, value: {}}}", quote(f), quote(r)),
            None => format!("mask: {{field: {}}}", quote(f)),
        });
    }
    chain.touch(&names, t);
    let list = fields.join(", ");
    let note = chain.missing_field_note();
    match &replacement {
        None => Outcome::Changed(format!(
            "bigquery.transforms mask {list}: the column holds NULL where Kafka Connect wrote the field type's empty value (0, false, \"\", the epoch), not null; a REQUIRED column refuses the plan. For a string field, `value: \"\"` is Connect's value exactly{note}"
        )),
        Some(r) if r.parse::<f64>().is_ok() => Outcome::Changed(format!(
            "bigquery.transforms mask {list} with value \"{r}\" written as text: Connect converted the replacement to the field's type, so for a string field this is exact, and for a numeric field write the number unquoted (value: {r}): the plan refuses text into INT64 or FLOAT64 rather than parse it{note}"
        )),
        Some(r) => {
            let text = format!(
                "bigquery.transforms mask {list} with value \"{r}\": Connect takes a replacement that is not a number only for a string field, and here the text fills the STRING column in every row{note}"
            );
            if chain.json_input {
                Outcome::Mapped(text)
            } else {
                Outcome::Changed(text)
            }
        }
    }
}

/// `InsertField$Value`: the record's coordinates become metadata columns, `static.field` with
/// `static.value` a `set` of that text.
fn insert_field_smt(
    s: &Source,
    t: &str,
    blocked: Option<&str>,
    metadata_columns: &mut Vec<(&'static str, String)>,
    chain: &mut Chain,
) -> Outcome {
    let mut mapped = Vec::new();
    for field in ["topic", "partition", "offset", "timestamp"] {
        if let Some(name) = s.get(&format!("transforms.{t}.{field}.field")) {
            let name = name.trim_end_matches(['!', '?']).to_string();
            if !metadata_columns.iter().any(|(f, _)| *f == field) {
                metadata_columns.push((field, name.clone()));
                chain.touch(&[name.as_str()], t);
                mapped.push(format!("{field} \"{name}\""));
            }
        }
    }
    let static_part: Option<Result<String, String>> = s
        .get(&format!("transforms.{t}.static.field"))
        .filter(|f| !f.is_empty())
        .map(|field| {
            let column = field.trim_end_matches(['!', '?']).to_string();
            let Some(value) = s.get(&format!("transforms.{t}.static.value")) else {
                return Err(
                    "static.field without static.value inserts a null field; set needs a value"
                        .to_string(),
                );
            };
            if let Some(why) = blocked {
                return Err(why.to_string());
            }
            if let Some(why) = chain.conflict(&[column.as_str()]) {
                return Err(why);
            }
            chain.transforms.push(format!(
                "set: {{column: {}, value: {}}}",
                quote(&column),
                quote(value)
            ));
            chain.touch(&[column.as_str()], t);
            Ok(format!(
                "bigquery.transforms set {column} to \"{value}\": the text in every row, into a STRING column as Connect's optional string field"
            ))
        });
    let metadata = (!mapped.is_empty()).then(|| {
        format!(
            "bigquery.metadata_columns {}: INT64 partition and offset, TIMESTAMP timestamp columns, filled from the record as InsertField does",
            mapped.join(", ")
        )
    });
    match (metadata, static_part) {
        (None, None) => Outcome::NotTranslatable("no field this sink can insert".into()),
        (None, Some(Ok(text))) => Outcome::Mapped(text),
        (None, Some(Err(why))) => Outcome::NotTranslatable(format!("static.field: {why}")),
        (Some(m), None) => Outcome::Changed(m),
        (Some(m), Some(Ok(text))) => Outcome::Changed(format!("{m}; {text}")),
        (Some(m), Some(Err(why))) => {
            Outcome::Changed(format!("{m}; static.field not translatable: {why}"))
        }
    }
}

/// Confluent's `Filter$Value` (`value_filter.rs`): its item joins the chain where it translates.
fn confluent_filter_smt(
    s: &Source,
    t: &str,
    class: &str,
    predicate: Option<&str>,
    cx: &Context,
    chain: &mut Chain,
) -> Outcome {
    let (item, outcome) =
        value_filter::confluent_filter(s, t, class, predicate, cx.shaping_blocked, &chain.touched);
    chain.transforms.extend(item);
    outcome
}

/// `Filter` with its predicate: `RecordIsTombstone`, `HasHeaderKey`, `TopicNameMatches`, and
/// `negate`.
fn filter_smt(s: &Source, t: &str, predicate: Option<&str>, chain: &mut Chain) -> Outcome {
    let Some(p) = predicate else {
        return Outcome::NotTranslatable(
            "a Filter without a predicate drops every record; a filter here needs a condition"
                .into(),
        );
    };
    let class = s
        .get(&format!("predicates.{p}.type"))
        .unwrap_or_default()
        .to_string();
    let negate = s.flag(&format!("transforms.{t}.negate")) == Some(true);
    let (condition, what) = match class.rsplit('.').next().unwrap_or_default() {
        "RecordIsTombstone" => ("tombstone: true".to_string(), "tombstones".to_string()),
        "HasHeaderKey" => {
            let Some(name) = s
                .get(&format!("predicates.{p}.name"))
                .filter(|n| !n.is_empty())
            else {
                return Outcome::NotTranslatable(format!("predicate {p} names no header"));
            };
            (
                format!("header: {}", quote(name)),
                format!("records with a header {name}"),
            )
        }
        "TopicNameMatches" => {
            let pattern = s
                .get(&format!("predicates.{p}.pattern"))
                .unwrap_or_default()
                .to_string();
            if let Some(router) = &chain.routed_by {
                return Outcome::NotTranslatable(format!(
                    "the predicate matches the topic as transforms.{router} renamed it; a filter here reads the record's own topic"
                ));
            }
            if regex::Regex::new(&format!("^(?:{pattern})$")).is_err() {
                return Outcome::NotTranslatable(format!(
                    "pattern `{pattern}` is java.util.regex syntax Rust's regex does not read"
                ));
            }
            (
                format!("topic_pattern: {}", quote(&pattern)),
                format!("records of topics `{pattern}` matches as a whole (Java's matches())"),
            )
        }
        other => {
            return Outcome::NotTranslatable(format!(
                "predicate {p} of class `{other}`: a filter here tests tombstones, a header, or the topic"
            ));
        }
    };
    chain.transforms.push(format!(
        "filter: {{{condition}{}}}",
        if negate { ", negate: true" } else { "" }
    ));
    Outcome::Mapped(format!(
        "bigquery.transforms filter {{{condition}{}}}: {}{what} are dropped as Connect's Filter drops them (their offsets committed, counted in kbq_records_filtered_total)",
        if negate { ", negate: true" } else { "" },
        if negate { "all records but " } else { "" }
    ))
}

/// `Cast$Value` with a `spec` of `field:type` pairs: each a `cast` to BigQuery's type of that
/// Connect type. A spec of one type casts the whole value, which no transform here does.
fn cast_smt(s: &Source, t: &str, blocked: Option<&str>, chain: &mut Chain) -> Outcome {
    let spec = s
        .get(&format!("transforms.{t}.spec"))
        .map(list)
        .unwrap_or_default();
    if spec.is_empty() {
        return Outcome::Dropped("no spec: the transform changes nothing".into());
    }
    let mut casts = Vec::new();
    for pair in &spec {
        let Some((field, ty)) = pair.split_once(':') else {
            return Outcome::NotTranslatable(format!(
                "spec `{pair}` casts the whole value; a cast here names a field of the record"
            ));
        };
        let to = match ty.trim().to_ascii_lowercase().as_str() {
            "int8" | "int16" | "int32" | "int64" => "INT64",
            "float32" | "float64" => "FLOAT64",
            "boolean" => "BOOL",
            "string" => "STRING",
            other => {
                return Outcome::NotTranslatable(format!(
                    "spec `{pair}`: Kafka Connect's Cast has no type {other}"
                ));
            }
        };
        casts.push((field.trim().to_string(), ty.trim().to_string(), to));
    }
    if let Some(why) = blocked {
        return Outcome::NotTranslatable(why.into());
    }
    let names: Vec<&str> = casts.iter().map(|(f, _, _)| f.as_str()).collect();
    if let Some(why) = chain.conflict(&names) {
        return Outcome::NotTranslatable(why);
    }
    let mut done = Vec::new();
    for (field, ty, to) in &casts {
        chain
            .transforms
            .push(format!("cast: {{field: {}, to: {to}}}", quote(field)));
        done.push(format!("cast {field} to {to} (Connect's {ty})"));
    }
    chain.touch(&names, t);
    Outcome::Changed(format!(
        "bigquery.transforms {}: only where exact. Connect narrows to int8/int16/int32 and truncates a float to an integer; here every integer is INT64 (written whole), and a cast that can lose digits (a double to an integer, an int64 to FLOAT64, a number to BOOL) refuses the plan, naming both types, and text that does not parse is its record's dead letter. A double's text is its shortest round-trip form without an exponent (Connect's Java text writes 1.0E21){}",
        done.join(", "),
        chain.missing_field_note()
    ))
}

/// `TimestampConverter$Value` of one field: a `convert`. Connect decides what the field is by
/// its schema when a record comes; the connector config does not say, so the field is read as
/// text when a `format` is given and the target is not `string`, else as a unix count in
/// `unix.precision`, and the report says so. Connect's zone is UTC, so is the convert's.
fn timestamp_converter_smt(
    s: &Source,
    t: &str,
    blocked: Option<&str>,
    chain: &mut Chain,
) -> Outcome {
    let get = |k: &str| {
        s.get(&format!("transforms.{t}.{k}"))
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let Some(field) = get("field") else {
        return Outcome::NotTranslatable(
            "without `field` it converts the whole value; a convert here names a field of the record".into(),
        );
    };
    let precision = get("unix.precision").unwrap_or("milliseconds");
    let format = get("format");
    let (from, to, unit) = match converter_kinds(get("target.type"), format, precision) {
        Ok(kinds) => kinds,
        Err(why) => return Outcome::NotTranslatable(why),
    };
    let pattern = match format {
        Some(java) => match java_time_format(java, from == TimeFrom::String) {
            Ok(p) => Some(p),
            Err(why) => {
                return Outcome::NotTranslatable(format!("format \"{java}\": {why}"));
            }
        },
        None => None,
    };
    let offset = pattern
        .as_deref()
        .is_some_and(|p| p.contains("%z") || p.contains("%:z"));
    let from_instant = from != TimeFrom::String || offset;
    let to_instant = match to {
        TimeTo::Timestamp | TimeTo::Int64 => true,
        TimeTo::String => offset,
        TimeTo::Date | TimeTo::Datetime => false,
    };
    let convert = ConvertField {
        field: field.to_string(),
        from,
        to,
        format: pattern.clone(),
        unit: (to == TimeTo::Int64).then_some(unit),
        zone: (from_instant != to_instant).then_some(transforms::Zone::Utc),
    };
    if let Err(e) = transforms::check(&[Transform::Convert(convert.clone())]) {
        return Outcome::NotTranslatable(format!("{}: {}", e.key, e.message));
    }
    if let Some(why) = blocked {
        return Outcome::NotTranslatable(why.into());
    }
    if let Some(why) = chain.conflict(&[field]) {
        return Outcome::NotTranslatable(why);
    }
    let yaml = convert_yaml(&convert);
    chain.transforms.push(yaml);
    chain.touch(&[field], t);
    let read = if from == TimeFrom::String {
        "text in the format".to_string()
    } else {
        format!("a unix count in {precision}")
    };
    Outcome::Changed(format!(
        "bigquery.transforms convert {field} from {} to {}: Connect decides by the field's schema what it converts; here the field is read as {read}, and a writer schema where it is otherwise refuses the plan. Only where exact: Connect's SimpleDateFormat is lenient (2024-02-30 becomes March 1) and its Date drops a time of day; here text that does not match the format, a time of day into DATE, or a fraction its target does not hold is its record's dead letter{}",
        from.name(),
        to.name(),
        chain.missing_field_note()
    ))
}

/// What a TimestampConverter reads and writes, and the unit of its unix counts; why not, if it
/// has no counterpart.
fn converter_kinds(
    target: Option<&str>,
    format: Option<&str>,
    precision: &str,
) -> Result<(TimeFrom, TimeTo, EpochUnit), String> {
    let (epoch, unit) = match precision {
        "seconds" => (TimeFrom::EpochSeconds, EpochUnit::EpochSeconds),
        "milliseconds" => (TimeFrom::EpochMillis, EpochUnit::EpochMillis),
        "microseconds" => (TimeFrom::EpochMicros, EpochUnit::EpochMicros),
        "nanoseconds" => (TimeFrom::EpochNanos, EpochUnit::EpochNanos),
        other => {
            return Err(format!(
                "unix.precision {other} is none of seconds, milliseconds, microseconds, nanoseconds"
            ));
        }
    };
    let (from, to) = match (target.unwrap_or_default(), format.is_some()) {
        ("Timestamp", true) => (TimeFrom::String, TimeTo::Timestamp),
        ("Timestamp", false) => (epoch, TimeTo::Timestamp),
        ("Date", true) => (TimeFrom::String, TimeTo::Date),
        ("Date", false) => (epoch, TimeTo::Date),
        ("unix", true) => (TimeFrom::String, TimeTo::Int64),
        ("string", true) => (epoch, TimeTo::String),
        ("unix", false) => {
            return Err(
                "unix without a format converts a Connect Date or Timestamp field, which the sink already writes as DATE or TIMESTAMP (docs/mapping.md); no transform here reads a logical type".into(),
            );
        }
        ("string", false) => {
            return Err(
                "target.type string needs a format (Connect refuses it without one)".into(),
            );
        }
        ("Time", _) => {
            return Err(
                "a TIME of day is not a target of convert here; the sink writes a Connect Time field as TIME (docs/mapping.md)".into(),
            );
        }
        (other, _) => {
            return Err(format!(
                "target.type `{other}` is none of string, unix, Date, Time, Timestamp"
            ));
        }
    };
    Ok((from, to, unit))
}

/// The YAML flow item of a `convert`.
fn convert_yaml(c: &ConvertField) -> String {
    let mut yaml = format!(
        "convert: {{field: {}, from: {}",
        quote(&c.field),
        c.from.name()
    );
    if let Some(p) = &c.format {
        yaml.push_str(&format!(", format: {}", quote(p)));
    }
    yaml.push_str(&format!(", to: {}", c.to.name()));
    if let Some(u) = c.unit {
        yaml.push_str(&format!(", unit: {}", u.name()));
    }
    if c.zone.is_some() {
        yaml.push_str(", zone: UTC");
    }
    yaml.push('}');
    yaml
}

/// A Java `SimpleDateFormat` pattern as the format of `convert` (`time_format.rs`), where the
/// two read (`reading`) or write the same texts; why not otherwise.
fn java_time_format(java: &str, reading: bool) -> Result<String, String> {
    let mut out = String::new();
    let chars: Vec<char> = java.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            // '' is a quote; 'text' is literal text.
            if chars.get(i + 1) == Some(&'\'') {
                out.push('\'');
                i += 2;
                continue;
            }
            let end = (i + 1..chars.len())
                .find(|&j| chars[j] == '\'')
                .ok_or("a quote is not closed")?;
            for &q in &chars[i + 1..end] {
                if q == '%' {
                    out.push_str("%%");
                } else {
                    out.push(q);
                }
            }
            i = end + 1;
            continue;
        }
        if !c.is_ascii_alphabetic() {
            if c == '%' {
                out.push_str("%%");
            } else {
                out.push(c);
            }
            i += 1;
            continue;
        }
        let n = chars[i..].iter().take_while(|&&x| x == c).count();
        let run: String = chars[i..i + n].iter().collect();
        let directive = match (c, n) {
            ('y', 4) => "%Y",
            ('M', 2) => "%m",
            ('d', 2) => "%d",
            ('H', 2) => "%H",
            ('m', 2) => "%M",
            ('s', 2) => "%S",
            // Java's S counts milliseconds: three digits of them are a fraction of 3 digits.
            ('S', 3) => "%3f",
            ('Z', 1) => "%z",
            ('X', 2) if reading => "%z",
            ('X', 3) if reading => "%:z",
            ('X', 2 | 3) => {
                return Err(format!(
                    "`{run}` writes Z for UTC, and the format here writes +0000 or +00:00"
                ));
            }
            ('S', _) => {
                return Err(format!(
                    "`{run}` is a count of milliseconds padded to {n} digits, not a fraction of {n} digits"
                ));
            }
            _ => {
                return Err(format!(
                    "`{run}` has no exact counterpart (the format here has yyyy MM dd HH mm ss SSS Z, and XX XXX read)"
                ));
            }
        };
        out.push_str(directive);
        i += n;
    }
    Ok(out)
}
