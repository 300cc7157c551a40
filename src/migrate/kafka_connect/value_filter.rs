//! Confluent's `Filter$Value` (`io.confluent.connect.transforms.Filter`): a JSONPath condition
//! (`filter.condition`) that keeps (`filter.type: include`) or drops (`exclude`) the records it
//! matches. Only the simple forms translate, exactly: one field compared for equality with one or
//! more literals (`$[?(@.status == 'deleted')]`, `||` of the same field, `in [...]`), which is
//! `filter: {field, equals | in}` (`negate` for include). Anything else is reported.

use std::collections::BTreeMap;

use super::Source;
use crate::migrate::report::Outcome;

/// The `bigquery.transforms` item of transform `t` (class `class`) and its line, or the line
/// alone when it does not translate. `touched`: the fields earlier transforms name (a filter
/// here reads the writer's field, Connect's the field as the chain left it).
pub(super) fn confluent_filter(
    s: &Source,
    t: &str,
    class: &str,
    predicate: Option<&str>,
    blocked: Option<&str>,
    touched: &BTreeMap<String, String>,
) -> (Option<String>, Outcome) {
    let not = |why: String| (None, Outcome::NotTranslatable(why));
    if class.ends_with("$Key") {
        return not(
            "a filter on the key's fields: a filter here reads the record's value (or its tombstone, headers and topic)"
                .into(),
        );
    }
    if let Some(p) = predicate {
        return not(format!(
            "the filter applies only to the records predicate {p} matches; a filter here takes no second condition"
        ));
    }
    if let Some(why) = blocked {
        return not(why.into());
    }
    let get = |k: &str| s.get(&format!("transforms.{t}.{k}")).unwrap_or_default();
    let include = match get("filter.type").trim() {
        "include" => true,
        "exclude" => false,
        other => {
            return not(format!(
                "filter.type `{other}` is neither include nor exclude"
            ));
        }
    };
    let condition = get("filter.condition");
    let Some(c) = parse(condition) else {
        return not(format!(
            "condition `{condition}`: only one field compared with == (or `in`) to text, integers or booleans, joined by ||, translates exactly"
        ));
    };
    let path = c.field.join(".");
    let top = c.field[0].to_ascii_lowercase();
    if let Some(by) = touched
        .get(&path.to_ascii_lowercase())
        .or(touched.get(&top))
    {
        return not(format!(
            "the condition reads {path} as {by} left it; a filter here reads the writer's field"
        ));
    }
    let behavior = match get("missing.or.null.behavior").trim() {
        "" => "fail",
        b => b,
    };
    translated(&c, include, behavior)
}

/// The item and line of a condition that translates.
fn translated(c: &Condition, include: bool, behavior: &str) -> (Option<String>, Outcome) {
    let path = c.field.join(".");
    // A field missing inside `[?()]` is undefined and matches nothing; a missing field of the
    // prefix (`$.a[?(@.b …)]`) is `missing.or.null.behavior`'s (default `fail`). Here a null
    // or absent field matches no literal: kept by exclude, dropped by include.
    let same = (include && behavior == "exclude") || (!include && behavior == "include");
    let values = c.values.join(", ");
    let test = match c.values.as_slice() {
        [one] => format!("equals: {one}"),
        _ => format!("in: [{values}]"),
    };
    let item = format!(
        "filter: {{field: {path}, {test}{}}}",
        if include { ", negate: true" } else { "" }
    );
    let does = if include {
        format!("records whose {path} is not one of {values} are dropped")
    } else {
        format!("records whose {path} is one of {values} are dropped")
    };
    let line = format!(
        "bigquery.transforms {item}: {does} (committed, counted in kbq_records_filtered_total); the literals are checked against the field's type when the plan is compiled"
    );
    let outcome = if c.prefixed && !same {
        Outcome::Changed(format!(
            "{line}; a record without {} matches nothing here (Connect: missing.or.null.behavior {behavior})",
            c.field[..c.field.len() - 1].join(".")
        ))
    } else {
        Outcome::Mapped(line)
    };
    (Some(item), outcome)
}

/// One field compared with literals, as YAML flow scalars.
#[derive(Debug, PartialEq)]
struct Condition {
    field: Vec<String>,
    values: Vec<String>,
    /// The field is reached through a path before `[?(`, whose absence Connect treats apart.
    prefixed: bool,
}

/// `$` `.name`* `[?(` `@.name`+ (`==` literal | `in [` literals `]`) (`||` …)* `)]`, the same
/// field in every term.
fn parse(text: &str) -> Option<Condition> {
    let text = text.trim();
    let rest = text.strip_prefix('$')?;
    let open = rest.find("[?(")?;
    let prefix = names(&rest[..open])?;
    let inner = rest[open + 3..].strip_suffix(")]")?;
    let mut field: Option<Vec<String>> = None;
    let mut values = Vec::new();
    for term in inner.split("||") {
        let term = term.trim().strip_prefix('@')?;
        let (path, literals) = if let Some((path, lit)) = term.split_once("==") {
            (path, vec![literal(lit)?])
        } else {
            let (path, list) = term.split_once(" in ")?;
            let list = list.trim().strip_prefix('[')?.strip_suffix(']')?;
            (
                path,
                list.split(',').map(literal).collect::<Option<Vec<_>>>()?,
            )
        };
        let path = names(path.trim())?;
        if path.is_empty() || field.as_ref().is_some_and(|f| *f != path) {
            return None;
        }
        field = Some(path);
        values.extend(literals);
    }
    let mut full = prefix.clone();
    full.extend(field?);
    Some(Condition {
        field: full,
        values,
        prefixed: !prefix.is_empty(),
    })
}

/// `.a.b` as its names (letters, digits, `_`).
fn names(path: &str) -> Option<Vec<String>> {
    if path.is_empty() {
        return Some(Vec::new());
    }
    let path = path.strip_prefix('.')?;
    path.split('.')
        .map(|n| {
            let ok = !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            ok.then(|| n.to_string())
        })
        .collect()
}

/// A JSONPath literal as a YAML flow scalar: quoted text (no escapes), an integer, a boolean.
fn literal(text: &str) -> Option<String> {
    let t = text.trim();
    for q in ['\'', '"'] {
        if let Some(inner) = t.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            if inner.contains(['\\', '\'', '"']) {
                return None;
            }
            return Some(serde_json::to_string(inner).expect("a string serializes"));
        }
    }
    if t == "true" || t == "false" || t.parse::<i64>().is_ok() {
        return Some(t.to_string());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_field_compared_for_equality_parses() {
        let c = parse(r#"$[?(@.status == 'deleted' || @.status == "void")]"#).unwrap();
        assert_eq!(c.field, ["status"]);
        assert_eq!(c.values, ["\"deleted\"", "\"void\""]);
        assert!(!c.prefixed);
        let c = parse("$.order[?(@.qty in [0, -1])]").unwrap();
        assert_eq!(
            (c.field.join("."), c.values.join(",")),
            ("order.qty".into(), "0,-1".into())
        );
        assert!(c.prefixed);
        for no in [
            "$[?(@.a == 'x' || @.b == 'y')]",
            "$[?(@.a != 'x')]",
            "$[?(@.a == 'x' && @.b == 'y')]",
            "$[?(@.a == 1.5)]",
            "$[?(@.a =~ /x.*/)]",
            "$[?(@['a'] == 'x')]",
            "$.a",
        ] {
            assert_eq!(parse(no), None, "{no}");
        }
    }
}
