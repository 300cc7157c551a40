//! What the probe observed for each fact, and the table it prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kbq_core::bigquery_facts::{self as facts, Fact};

/// One fact's observation.
#[derive(Debug, Clone)]
pub struct Observation {
    pub observed: String,
    pub pass: bool,
}

/// The observations of one run, by fact name.
#[derive(Debug, Default)]
pub struct Report {
    seen: BTreeMap<&'static str, Observation>,
}

impl Report {
    /// Records `observed` for `fact`; the first observation of a fact stands.
    pub fn record(&mut self, fact: &Fact, pass: bool, observed: impl Into<String>) {
        self.seen.entry(fact.name).or_insert(Observation {
            observed: observed.into(),
            pass,
        });
    }

    /// Passes when `observed` equals `expected`; the observation is printed either way.
    pub fn expect_eq<T: PartialEq + std::fmt::Debug>(
        &mut self,
        fact: &Fact,
        expected: T,
        observed: T,
    ) {
        let pass = expected == observed;
        self.record(fact, pass, format!("{observed:?}"));
    }

    /// A step failed before it could observe `covered`: each fact it had not observed yet fails
    /// with the reason.
    pub fn not_reached(&mut self, covered: &[Fact], reason: &anyhow::Error) {
        for fact in covered {
            self.record(fact, false, format!("not reached: {reason:#}"));
        }
    }

    pub fn get(&self, fact: &Fact) -> Option<&Observation> {
        self.seen.get(fact.name)
    }

    /// Every fact of the list passed.
    pub fn passed(&self) -> bool {
        facts::ALL
            .iter()
            .all(|f| self.get(f).is_some_and(|o| o.pass))
    }

    /// The facts that failed or were never observed.
    pub fn failures(&self) -> Vec<&'static str> {
        facts::ALL
            .iter()
            .filter(|f| !self.get(f).is_some_and(|o| o.pass))
            .map(|f| f.name)
            .collect()
    }

    /// The table: behaviour, expected (and how that is known), observed, pass/fail.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "| behaviour | expected | basis | observed | result |");
        let _ = writeln!(out, "|---|---|---|---|---|");
        for fact in facts::ALL {
            let (observed, result) = match self.get(fact) {
                Some(o) => (cell(&o.observed), if o.pass { "pass" } else { "FAIL" }),
                None => ("not observed".to_string(), "FAIL"),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                fact.name,
                cell(fact.expected),
                fact.basis.as_str(),
                observed,
                result
            );
        }
        let failures = self.failures();
        if failures.is_empty() {
            let _ = writeln!(out, "\nall {} facts hold", facts::ALL.len());
        } else {
            let _ = writeln!(
                out,
                "\n{} of {} facts failed: {}",
                failures.len(),
                facts::ALL.len(),
                failures.join(", ")
            );
        }
        out
    }
}

/// A table cell: one line, no column separator, at most 300 characters.
fn cell(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| match c {
            '\n' | '\r' => ' ',
            '|' => '/',
            c => c,
        })
        .collect();
    match one_line.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fact_never_observed_fails_the_run_and_is_named() {
        let mut report = Report::default();
        for fact in &facts::ALL[1..] {
            report.record(fact, true, "ok");
        }
        assert!(!report.passed());
        assert_eq!(report.failures(), vec![facts::ALL[0].name]);
        assert!(report.table().contains("| FAIL |"));
        report.record(&facts::ALL[0], true, "a|b\nc");
        assert!(report.passed());
        assert!(report.table().contains("| a/b c | pass |"));
    }
}
