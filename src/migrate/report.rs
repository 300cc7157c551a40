//! The migration report: one line per property of the source config, saying what became of it.

use std::fmt;

/// What became of one property.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The same behaviour, at the named place of the YAML.
    Mapped(String),
    /// Mapped, but the behaviour differs: how.
    Changed(String),
    /// No setting here, and none is needed: why.
    Dropped(String),
    /// The behaviour cannot be had here: why, and what happens instead.
    NotTranslatable(String),
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Mapped(_) => "mapped",
            Outcome::Changed(_) => "changed",
            Outcome::Dropped(_) => "dropped",
            Outcome::NotTranslatable(_) => "not translatable",
        }
    }

    pub fn text(&self) -> &str {
        match self {
            Outcome::Mapped(t)
            | Outcome::Changed(t)
            | Outcome::Dropped(t)
            | Outcome::NotTranslatable(t) => t,
        }
    }
}

/// One property and its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub property: String,
    pub outcome: Outcome,
}

/// Every property of the source, in its order, plus notes about what the source leaves unsaid
/// (worker settings the YAML needs).
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub lines: Vec<Line>,
}

impl Report {
    pub fn push(&mut self, property: impl Into<String>, outcome: Outcome) {
        self.lines.push(Line {
            property: property.into(),
            outcome,
        });
    }

    pub fn outcome_of(&self, property: &str) -> Option<&Outcome> {
        self.lines
            .iter()
            .find(|l| l.property == property)
            .map(|l| &l.outcome)
    }

    pub fn count(&self, label: &str) -> usize {
        self.lines
            .iter()
            .filter(|l| l.outcome.label() == label)
            .count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .lines
            .iter()
            .map(|l| l.property.len())
            .max()
            .unwrap_or(0);
        for line in &self.lines {
            writeln!(
                f,
                "{:<width$}  {:<16}  {}",
                line.property,
                line.outcome.label(),
                line.outcome.text()
            )?;
        }
        write!(
            f,
            "{} properties: {} mapped, {} changed in meaning, {} dropped (not needed), {} not translatable",
            self.lines.len(),
            self.count("mapped"),
            self.count("changed"),
            self.count("dropped"),
            self.count("not translatable")
        )
    }
}
