//! The table each topic's records go to, as the connector chose it: `topic2TableMap`,
//! `sanitizeTopics` and a `RegexRouter` that renames the topic before the table is picked.

use std::collections::BTreeMap;

use super::{
    MigrateError, Source, braced_groups, connector_table, group_template, is_table_id, list, refuse,
};
use crate::config::sanitize_table_name;
use crate::migrate::draft::Route;
use crate::migrate::report::Outcome;

/// A `RegexRouter` computed for listed topics: its regex, replacement and transform name.
pub(super) type Router = (regex::Regex, String, String);
/// With topics.regex: the transform's name, a route whose capture groups name the table as the
/// routed topic did, and whether that is exact (a template starting with a group may start with
/// a digit, which the connector prefixed with `_`).
pub(super) type PatternRouter = (String, Route, bool);

/// What the topic-to-table rules make: the routes so far and what the transforms section reads.
pub(super) struct Routing {
    pub routes: Vec<Route>,
    /// The table each listed topic's record goes to, where the template would not give it.
    pub explicit: BTreeMap<String, String>,
    /// The `transforms` chain's names, in order.
    pub transforms: Vec<String>,
    pub router: Option<Router>,
    pub pattern_router: Option<PatternRouter>,
}

pub(super) fn routing(
    s: &mut Source,
    topics: &[String],
    topic_pattern: Option<&str>,
) -> Result<Routing, MigrateError> {
    let sanitize = s.flag("sanitizeTopics").unwrap_or(false);
    let mut explicit = explicit_tables(s)?;
    // RegexRouter renames the topic before the connector picks the table.
    let transforms = s.get("transforms").map(list).unwrap_or_default();
    let (router, pattern_router) = routers(s, &transforms, topic_pattern.is_some(), sanitize);
    let sanitized_note = connector_tables(topics, router.as_ref(), sanitize, &mut explicit);
    let routes = explicit_routes(topics, topic_pattern.is_some(), &explicit, &pattern_router);
    note_sanitize(s, topic_pattern.is_some(), sanitize, sanitized_note);
    Ok(Routing {
        routes,
        explicit,
        transforms,
        router,
        pattern_router,
    })
}

/// `topic2TableMap`: the table of each topic it lists.
fn explicit_tables(s: &mut Source) -> Result<BTreeMap<String, String>, MigrateError> {
    let mut explicit: BTreeMap<String, String> = BTreeMap::new();
    if let Some(map) = s
        .get("topic2TableMap")
        .filter(|m| !m.is_empty())
        .map(str::to_string)
    {
        for pair in list(&map) {
            let Some((topic, table)) = pair.split_once(':') else {
                return Err(refuse(
                    "topic2TableMap",
                    format!("`{pair}` is not topic:table"),
                ));
            };
            explicit.insert(topic.trim().to_string(), table.trim().to_string());
        }
        s.note(
            "topic2TableMap",
            Outcome::Mapped(format!(
                "routes: one per topic with its table ({} routes); topics not listed use bigquery.table",
                explicit.len()
            )),
        );
    }
    Ok(explicit)
}

/// The chain's `RegexRouter` this tool can compute: for listed topics, or under `topics.regex`
/// as a route of capture groups.
fn routers(
    s: &Source,
    transforms: &[String],
    has_pattern: bool,
    sanitize: bool,
) -> (Option<Router>, Option<PatternRouter>) {
    let mut router: Option<Router> = None;
    let mut pattern_router: Option<PatternRouter> = None;
    for t in transforms {
        let class = s
            .get(&format!("transforms.{t}.type"))
            .unwrap_or_default()
            .to_string();
        if class.ends_with(".RegexRouter") {
            let pattern = s
                .get(&format!("transforms.{t}.regex"))
                .unwrap_or_default()
                .to_string();
            let replacement = s
                .get(&format!("transforms.{t}.replacement"))
                .unwrap_or_default()
                .to_string();
            let has_predicate = s.props.contains_key(&format!("transforms.{t}.predicate"));
            match regex::Regex::new(&format!("^(?:{pattern})$")) {
                Ok(re) if !has_pattern && !has_predicate => {
                    router = Some((re, replacement, t.clone()))
                }
                Ok(re) if sanitize && !has_predicate => {
                    if let Some(table) = group_template(&replacement, re.captures_len() - 1) {
                        let exact = !table.starts_with('{');
                        let route = Route {
                            topics: Vec::new(),
                            topic_pattern: Some(pattern.clone()),
                            table: Some(table),
                            cdc: None,
                        };
                        pattern_router = Some((t.clone(), route, exact));
                    }
                }
                _ => {}
            }
        }
    }
    (router, pattern_router)
}

/// Adds to `explicit` each listed topic whose connector table differs from the template's; the
/// note for a table id the connector would have failed on.
fn connector_tables(
    topics: &[String],
    router: Option<&Router>,
    sanitize: bool,
    explicit: &mut BTreeMap<String, String>,
) -> Option<String> {
    let mut sanitized_note = None;
    for topic in topics {
        let routed = match router {
            Some((re, replacement, _)) if re.is_match(topic) => {
                // Java's `$1` and Rust's `${1}` name groups alike once braced.
                let braced = braced_groups(replacement);
                re.replace(topic, braced.as_str()).into_owned()
            }
            _ => topic.clone(),
        };
        let connector = explicit
            .get(topic)
            .cloned()
            .unwrap_or_else(|| connector_table(&routed, sanitize));
        let template = sanitize_table_name(topic);
        if connector == template {
            continue;
        }
        if is_table_id(&connector) {
            explicit.insert(topic.clone(), connector);
        } else {
            // The connector would have failed on this table id; the template's is the nearest.
            sanitized_note = Some(format!(
                "topic {topic}: the connector's table `{connector}` is not a valid table id (it would have failed); here `{template}`"
            ));
        }
    }
    sanitized_note
}

/// A route for each topic with its own table.
fn explicit_routes(
    topics: &[String],
    has_pattern: bool,
    explicit: &BTreeMap<String, String>,
    pattern_router: &Option<PatternRouter>,
) -> Vec<Route> {
    let mut routes: Vec<Route> = Vec::new();
    if !has_pattern {
        for (topic, table) in explicit {
            if topics.contains(topic) {
                routes.push(Route {
                    topics: vec![topic.clone()],
                    topic_pattern: None,
                    table: Some(table.clone()),
                    cdc: None,
                });
            }
        }
    } else {
        for (topic, table) in explicit {
            routes.push(Route {
                topics: Vec::new(),
                topic_pattern: Some(regex::escape(topic)),
                table: Some(table.clone()),
                cdc: None,
            });
        }
        if let Some((_, route, _)) = &pattern_router {
            routes.push(route.clone());
        }
    }
    routes
}

/// The `sanitizeTopics` line: how a topic becomes a table here and there.
fn note_sanitize(
    s: &mut Source,
    has_pattern: bool,
    sanitize: bool,
    sanitized_note: Option<String>,
) {
    let sanitize_text = match (has_pattern, sanitize) {
        (false, true) => "bigquery.table \"{topic}\" (every character but letters, digits and `_` becomes `_`), with a route for any listed topic whose table differs (a name starting with a digit gets the connector's `_` prefix)".to_string(),
        (false, false) => "the topic is the table, as the connector does: bigquery.table \"{topic}\" where that is the same id, a route with the topic's own name elsewhere".to_string(),
        (true, true) => "bigquery.table \"{topic}\": every character but letters, digits and `_` becomes `_`; unlike the connector, a topic starting with a digit gets no `_` prefix".to_string(),
        (true, false) => "bigquery.table \"{topic}\" sanitizes every topic matched by the pattern (`.`, `-` become `_`); the connector used the raw name, so a matched topic with `-` writes another table here: add a route for it".to_string(),
    };
    let sanitize_outcome = match (has_pattern, sanitized_note) {
        (false, None) => Outcome::Mapped(sanitize_text),
        (false, Some(note)) => Outcome::Changed(format!("{sanitize_text}; {note}")),
        (true, _) => Outcome::Changed(sanitize_text),
    };
    if s.props.contains_key("sanitizeTopics") {
        s.note("sanitizeTopics", sanitize_outcome);
    } else {
        s.remark("sanitizeTopics (unset: false)", sanitize_outcome);
    }
}
