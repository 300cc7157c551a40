//! A record that cannot become a row: why (a bounded class and a reason) and what the sink does
//! with it (`on_bad_record`). The tables' plan lookups find bad records, the writer applies the
//! policy, the dead-letter producer writes the reason into headers, and the config reads the
//! policy: all four share these two types, so they live below all of them.

/// Why a record was dead-lettered: a bounded class (a metric label) and a human reason.
#[derive(Debug, Clone)]
pub struct BadRecord {
    pub class: &'static str,
    pub reason: String,
}

/// `on_bad_record`: what to do with a record that cannot become a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRecordPolicy {
    DeadLetter,
    /// Count it and move on (explicit opt-in).
    Skip,
    /// Stop the partition.
    Fail,
}
