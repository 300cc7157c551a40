//! The metrics contract's two sides as a test reads them: the spec table of `docs/metrics.md`
//! (each metric's name, type, labels and enumerated values) and the Prometheus text exposition a
//! daemon serves on `/metrics`, with the check that one scrape matches the spec.
//! Read by `metrics_spec`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use crate::support::daemon::http_get;

/// One row of the spec table.
#[derive(Debug)]
pub struct Spec {
    pub name: String,
    pub kind: String,
    /// Label name → allowed values (empty: any value).
    pub labels: BTreeMap<String, BTreeSet<String>>,
}

/// Reads the table of `docs/metrics.md`.
pub fn spec() -> Vec<Spec> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
        .expect("docs/metrics.md");
    let mut out = Vec::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 || !cells[1].starts_with("`kbq_") {
            continue;
        }
        let name = cells[1].trim_matches('`').to_string();
        let kind = cells[2].to_string();
        let mut labels = BTreeMap::new();
        if cells[3] != "—" {
            // "`a`, `b` (`x`, `y`), `c` (…)": a label name, optionally its values in parentheses.
            let mut rest = cells[3];
            while let Some(start) = rest.find('`') {
                let after = &rest[start + 1..];
                let end = after.find('`').expect("closing backtick");
                let label = after[..end].to_string();
                rest = &after[end + 1..];
                let mut values = BTreeSet::new();
                let trimmed = rest.trim_start();
                if let Some(inner) = trimmed.strip_prefix('(') {
                    let close = inner.find(')').expect("closing parenthesis");
                    let listed = &inner[..close];
                    // Only a list of backticked words is an enumeration; prose is a description.
                    let words: Vec<&str> = listed.split(',').map(str::trim).collect();
                    if words.iter().all(|w| w.starts_with('`') && w.ends_with('`')) {
                        values = words
                            .iter()
                            .map(|w| w.trim_matches('`').to_string())
                            .collect();
                    }
                    rest = &inner[close + 1..];
                }
                labels.insert(label, values);
            }
        }
        out.push(Spec { name, kind, labels });
    }
    out
}

/// One sample of the exposition: metric name, labels, value.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the text exposition (either format): `# TYPE` lines keyed by family, and samples.
pub fn parse(text: &str) -> (HashMap<String, String>, Vec<Sample>) {
    let mut types = HashMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let name = parts.next().expect("name");
            let kind = parts.next().expect("type");
            // Keyed by family: the Prometheus text format names a counter by its sample
            // (`x_total`), OpenMetrics by its family (`x`).
            let family = match kind {
                "counter" => name.strip_suffix("_total").unwrap_or(name),
                _ => name,
            };
            types.insert(family.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (head, value) = line.rsplit_once(' ').expect("sample value");
        let (name, labels) = match head.split_once('{') {
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("closing brace");
                let mut labels = BTreeMap::new();
                for pair in split_labels(body) {
                    let (k, v) = pair.split_once('=').expect("label pair");
                    labels.insert(k.to_string(), v.trim_matches('"').to_string());
                }
                (name.to_string(), labels)
            }
            None => (head.to_string(), BTreeMap::new()),
        };
        samples.push(Sample {
            name,
            labels,
            value: value.parse().expect("numeric sample"),
        });
    }
    (types, samples)
}

/// Splits `a="x",b="y,z"` at the commas outside quotes.
fn split_labels(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in body.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The samples of metric `name` (a counter's `_total`, a histogram's `_count`).
pub fn samples_of<'a>(samples: &'a [Sample], name: &str) -> Vec<&'a Sample> {
    samples.iter().filter(|s| s.name == name).collect()
}

pub fn sum(samples: &[Sample], name: &str, filter: &[(&str, &str)]) -> f64 {
    samples_of(samples, name)
        .into_iter()
        .filter(|s| {
            filter
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
        })
        .map(|s| s.value)
        .sum()
}

pub async fn scrape(addr: SocketAddr) -> String {
    let (status, body) = http_get(addr, "/metrics").await.expect("/metrics answers");
    assert_eq!(status, 200);
    body
}

/// Waits until `/metrics` satisfies `check`; returns the last scrape.
pub async fn scrape_until(
    addr: SocketAddr,
    timeout: Duration,
    check: impl Fn(&[Sample]) -> bool,
) -> (String, bool) {
    let started = std::time::Instant::now();
    loop {
        let text = http_get(addr, "/metrics")
            .await
            .map(|r| r.1)
            .unwrap_or_default();
        let (_, samples) = parse(&text);
        if check(&samples) {
            return (text, true);
        }
        if started.elapsed() > timeout {
            return (text, false);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Checks one scrape against the spec: every metric exported with its type, every sample with
/// exactly the spec's labels and only the listed values.
/// `lazy`: families allowed to be absent from this scrape (their label values are only known
/// once something happens, and nothing happened).
pub fn assert_matches_spec(text: &str, lazy: &[&str]) {
    let (types, samples) = parse(text);
    let spec = spec();
    assert!(spec.len() >= 20, "the spec table was read: {spec:?}");
    for m in &spec {
        let family = match m.kind.as_str() {
            "counter" => m
                .name
                .strip_suffix("_total")
                .unwrap_or_else(|| panic!("counter {} must end in _total", m.name)),
            _ => m.name.as_str(),
        };
        // The CDC families exist only for CDC tables (docs/cdc.md).
        let lazy_here = lazy.contains(&m.name.as_str()) || m.name.starts_with("kbq_cdc_");
        if lazy_here && !types.contains_key(family) {
            continue;
        }
        assert_eq!(
            types.get(family).map(String::as_str),
            Some(m.kind.as_str()),
            "{} exported as a {}",
            m.name,
            m.kind
        );
        let names: Vec<String> = match m.kind.as_str() {
            "histogram" => vec![
                format!("{family}_bucket"),
                format!("{family}_count"),
                format!("{family}_sum"),
            ],
            "counter" => vec![m.name.clone()],
            _ => vec![family.to_string()],
        };
        for s in samples.iter().filter(|s| names.contains(&s.name)) {
            let mut keys: BTreeSet<&str> = s.labels.keys().map(String::as_str).collect();
            keys.remove("le");
            let want: BTreeSet<&str> = m.labels.keys().map(String::as_str).collect();
            assert_eq!(keys, want, "labels of {s:?}");
            for (label, allowed) in &m.labels {
                if !allowed.is_empty() {
                    assert!(
                        allowed.contains(&s.labels[label]),
                        "{}: {label}={} is not one of {allowed:?}",
                        m.name,
                        s.labels[label]
                    );
                }
            }
            assert!(
                s.value >= 0.0 && s.value.is_finite(),
                "{s:?} is a sane value"
            );
        }
    }
    for s in &samples {
        assert!(s.name.starts_with("kbq_"), "only kbq_ metrics: {s:?}");
        let listed = spec.iter().any(|m| {
            let family = m.name.strip_suffix("_total").unwrap_or(&m.name);
            s.name == m.name
                || s.name
                    .strip_prefix(family)
                    .is_some_and(|rest| ["_bucket", "_count", "_sum", ""].contains(&rest))
        });
        assert!(listed, "{} is exported but not in the spec", s.name);
    }
}
