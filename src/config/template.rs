//! The placeholders of a route's `table` and `dataset`: `{topic}`, the whole topic, and the
//! capture groups of the route's `topic_pattern`, by number (`{1}`) or by name (`{entity}` for
//! `(?P<entity>…)`). Every value is sanitised as the topic is ([`sanitize_table_name`]), so a
//! filled template holds only what its fixed text and letters, digits and `_` hold.
//!
//! `validate` checks a template against its route ([`placeholders`]); filling never fails: a
//! group that took no part in the match gives an empty value, which the router refuses when the
//! id it leaves is empty.

use super::sanitize_table_name;

/// One `{…}` of a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placeholder<'a> {
    /// `{topic}`: the whole topic.
    Topic,
    /// `{1}`: a capture group of the route's `topic_pattern` by number.
    Group(usize),
    /// `{entity}`: a named capture group of the route's `topic_pattern`.
    Named(&'a str),
}

impl Placeholder<'_> {
    /// Whether the value comes from the route's `topic_pattern`.
    pub fn is_group(&self) -> bool {
        !matches!(self, Placeholder::Topic)
    }
}

/// The placeholders of `template` in order; `Err` says what is malformed (an unclosed `{`, a
/// stray `}`, or a name that is neither `topic`, a number nor a group name).
pub fn placeholders(template: &str) -> Result<Vec<Placeholder<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        if rest[at..].starts_with('}') {
            return Err("a `}` without its `{`".into());
        }
        let Some(len) = rest[at + 1..].find('}') else {
            return Err("a `{` without its `}`".into());
        };
        let inner = &rest[at + 1..at + 1 + len];
        out.push(parse(inner).ok_or_else(|| {
            format!(
                "`{{{inner}}}` is not a placeholder: {{topic}}, a group number ({{1}}) or a group name ({{entity}})"
            )
        })?);
        rest = &rest[at + 2 + len..];
    }
    Ok(out)
}

fn parse(inner: &str) -> Option<Placeholder<'_>> {
    if inner == "topic" {
        return Some(Placeholder::Topic);
    }
    if !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_digit()) {
        return inner.parse().ok().map(Placeholder::Group);
    }
    let mut bytes = inner.bytes();
    let name = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    name.then_some(Placeholder::Named(inner))
}

/// The fixed text of `template`: everything outside its placeholders.
pub fn fixed_text(template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        match rest[at..].find('}') {
            Some(len) => rest = &rest[at + len + 1..],
            None => {
                rest = &rest[at..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `template` filled for `topic`: each placeholder replaced by its sanitised value (`groups`
/// are the captures of the route's pattern on the topic; without them a group is empty), cut
/// at `max_bytes`. A malformed placeholder is kept as written (`validate` refuses it).
pub fn fill(
    template: &str,
    topic: &str,
    groups: Option<&regex::Captures<'_>>,
    max_bytes: usize,
) -> String {
    let mut out = String::with_capacity(template.len() + topic.len());
    let mut rest = template;
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let Some(len) = after.find('}') else {
            out.push_str(&rest[at..]);
            rest = "";
            break;
        };
        let inner = &after[..len];
        let value = match parse(inner) {
            Some(Placeholder::Topic) => Some(topic),
            Some(Placeholder::Group(i)) => {
                Some(groups.and_then(|g| g.get(i)).map_or("", |m| m.as_str()))
            }
            Some(Placeholder::Named(name)) => {
                Some(groups.and_then(|g| g.name(name)).map_or("", |m| m.as_str()))
            }
            None => None,
        };
        match value {
            Some(v) => out.push_str(&sanitize_table_name(v)),
            None => out.push_str(&rest[at..at + 2 + len]),
        }
        rest = &after[len + 1..];
    }
    out.push_str(rest);
    if out.len() > max_bytes {
        let mut end = max_bytes;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captures<'t>(pattern: &str, topic: &'t str) -> regex::Captures<'t> {
        // Leaked: a test's few patterns live as long as the process anyway.
        let re: &'static regex::Regex = Box::leak(Box::new(
            regex::Regex::new(&format!("^(?:{pattern})$")).unwrap(),
        ));
        re.captures(topic).expect("matches")
    }

    #[test]
    fn groups_by_number_and_by_name_fill_a_template_sanitised() {
        let g = captures(r"prod\.(?P<entity>[a-z-]+)\.(v\d+)", "prod.order-lines.v2");
        assert_eq!(fill("{entity}", "t", Some(&g), 1024), "order_lines");
        assert_eq!(fill("{1}_{2}", "t", Some(&g), 1024), "order_lines_v2");
        assert_eq!(
            fill("raw_{topic}", "prod.order-lines.v2", Some(&g), 1024),
            "raw_prod_order_lines_v2"
        );
        assert_eq!(fill("fixed", "t", Some(&g), 1024), "fixed");
    }

    #[test]
    fn a_group_that_took_no_part_is_empty_and_the_id_is_cut_at_the_limit() {
        let g = captures(r"(eu\.)?(?P<name>.+)", "orders");
        assert_eq!(fill("x{1}{name}", "orders", Some(&g), 1024), "xorders");
        assert_eq!(fill("{name}", "orders", None, 1024), "");
        assert_eq!(fill("{topic}", "a.b.c", None, 3), "a_b");
    }

    #[test]
    fn placeholders_are_listed_and_a_malformed_one_is_named() {
        assert_eq!(
            placeholders("a_{topic}_{2}_{entity}").unwrap(),
            vec![
                Placeholder::Topic,
                Placeholder::Group(2),
                Placeholder::Named("entity")
            ]
        );
        assert!(placeholders("{a-b}").unwrap_err().contains("`{a-b}`"));
        assert!(placeholders("{}").is_err());
        assert!(placeholders("a{topic").is_err());
        assert!(placeholders("a}").is_err());
        assert_eq!(fill("{a-b}", "t", None, 1024), "{a-b}");
        assert_eq!(fixed_text("raw_{topic}_{1}x"), "raw__x");
    }
}
