//! `filter` transforms compiled once per route: a record matching one of them is committed like
//! any other but becomes neither a row nor a dead letter. The conditions here read only what
//! Kafka says of a record (a value or none, its headers, its topic), so the filter runs before
//! any plan, and a filtered record is never decoded; a filter on a field's value is the plan's
//! (`predicate.rs`).

use super::{FilterRecords, Literal, Transform};
use crate::exec::KafkaHeader;

/// The compiled `filter` transforms of a route, in list order.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
struct Rule {
    tombstone: bool,
    header: Option<Box<[u8]>>,
    equals: Option<Box<[u8]>>,
    topic: Option<regex::Regex>,
    negate: bool,
}

/// What a filter sees of a record.
#[derive(Debug, Clone, Copy)]
pub struct FilterMatch<'a> {
    pub topic: &'a str,
    pub tombstone: bool,
    pub headers: &'a [KafkaHeader<'a>],
}

impl Filter {
    /// The `filter` entries of `list` (checked by [`super::check`]: a pattern that does not
    /// compile matches nothing).
    pub fn new(list: &[Transform]) -> Filter {
        let rules = (list.iter())
            .filter_map(|t| match t {
                Transform::Filter(f) if !f.on_field() => Some(rule(f)),
                _ => None,
            })
            .collect();
        Filter { rules }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether the record is filtered out: it matches one of the filters.
    pub fn drops(&self, r: &FilterMatch<'_>) -> bool {
        self.rules.iter().any(|rule| rule.matches(r) != rule.negate)
    }
}

fn rule(f: &FilterRecords) -> Rule {
    Rule {
        tombstone: f.tombstone,
        header: f.header.as_ref().map(|h| h.as_bytes().into()),
        equals: f.equals.as_ref().map(|e| match e {
            Literal::Text(t) => t.as_bytes().into(),
            _ => unreachable!("check: a header is compared to text"),
        }),
        topic: (f.topic_pattern.as_ref())
            .map(|p| regex::Regex::new(&format!("^(?:{p})$")).unwrap_or_else(|_| never())),
        negate: f.negate,
    }
}

/// A pattern that matches no topic.
fn never() -> regex::Regex {
    regex::Regex::new("[^\\s\\S]").expect("a valid pattern")
}

impl Rule {
    /// Every condition given holds.
    fn matches(&self, r: &FilterMatch<'_>) -> bool {
        if self.tombstone && !r.tombstone {
            return false;
        }
        if let Some(name) = &self.header {
            let Some(h) = r.headers.iter().rev().find(|h| h.key == &**name) else {
                return false;
            };
            if let Some(want) = &self.equals
                && h.value != Some(&**want)
            {
                return false;
            }
        }
        if let Some(re) = &self.topic
            && !re.is_match(r.topic)
        {
            return false;
        }
        true
    }
}
