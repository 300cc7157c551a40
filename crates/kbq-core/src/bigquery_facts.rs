//! The BigQuery behaviours the sink relies on, one entry each: what is expected, how sure we are
//! of it, and the section of the documents it backs. The daemon's `conformance` checks every one
//! of them against a target (`src/conformance/`); its `tests/e2e/conformance.rs` requires the
//! emulator to pass them all, and the emulator's own tests name the facts they hold it to. This
//! is the one list, here in the pure core because both the daemon and the emulator's tests read
//! it: a behaviour the protocol starts to rely on is added here, and its probe in
//! `src/conformance/`.

/// How the expectation is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// Checked against the real service (storage-write-api reference, the facts at its top).
    Verified,
    /// Observed in Google's integration tests or in real error texts the reference quotes.
    Observed,
    /// Not known from any source: what the sink's protocol assumes. A failure here against the
    /// real service is exactly what the user must learn before deploying.
    Assumed,
}

impl Basis {
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Verified => "verified",
            Basis::Observed => "observed",
            Basis::Assumed => "assumed",
        }
    }
}

/// One behaviour of BigQuery the sink relies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fact {
    /// Stable, dotted: printed in the table and named by the tests.
    pub name: &'static str,
    pub expected: &'static str,
    pub basis: Basis,
    /// The section of docs/architecture.md (or docs/cdc.md) the fact backs.
    pub backs: &'static str,
}

impl std::fmt::Display for Fact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.name, self.expected)
    }
}

const fn fact(
    name: &'static str,
    expected: &'static str,
    basis: Basis,
    backs: &'static str,
) -> Fact {
    Fact {
        name,
        expected,
        basis,
        backs,
    }
}

use Basis::{Assumed, Observed, Verified};

pub const STREAM_CREATE: Fact = fact(
    "stream.create_buffered",
    "CreateWriteStream(BUFFERED) answers a BUFFERED stream named under the table",
    Observed,
    "architecture.md#the-shape",
);
pub const STREAM_GET: Fact = fact(
    "stream.get_views",
    "GetWriteStream answers the stream's type; BASIC without the table schema, FULL with it",
    Observed,
    "architecture.md#bigquery-facts (schema changes)",
);
pub const APPEND_FIRST_ROW_OFFSET: Fact = fact(
    "append.offset_of_first_row",
    "an append's answer carries the offset of its first row (0, then 2 after two rows)",
    Observed,
    "architecture.md#bigquery-facts (appends)",
);
pub const APPEND_ALREADY_EXISTS: Fact = fact(
    "append.offset_already_written",
    "an append at an offset already written: ALREADY_EXISTS with storage error OFFSET_ALREADY_EXISTS, in the stream",
    Observed,
    "architecture.md#invariants (5)",
);
pub const APPEND_OUT_OF_RANGE: Fact = fact(
    "append.offset_beyond_end",
    "an append beyond the stream's end: OUT_OF_RANGE with storage error OFFSET_OUT_OF_RANGE, in the stream",
    Observed,
    "architecture.md#failure-policies (out of range)",
);
pub const APPEND_ROW_ERRORS: Fact = fact(
    "append.row_errors",
    "a request with a bad row: INVALID_ARGUMENT with row_errors naming its index, FIELDS_ERROR and the column",
    Observed,
    "architecture.md#failure-policies (row errors)",
);
pub const APPEND_FAILED_APPENDS_NOTHING: Fact = fact(
    "append.failed_appends_nothing",
    "after the refused appends above, the next append lands at the old end on the same connection",
    Observed,
    "architecture.md#bigquery-facts (appends)",
);
pub const BUFFERED_INVISIBLE: Fact = fact(
    "flush.nothing_visible_before",
    "rows appended to a BUFFERED stream are not visible before a FlushRows",
    Observed,
    "architecture.md#invariants (1)",
);
pub const FLUSH_INCLUSIVE: Fact = fact(
    "flush.inclusive",
    "FlushRows(2) answers 2 and makes exactly rows 0..=2 visible",
    Observed,
    "architecture.md#bigquery-facts (visibility)",
);
pub const FLUSH_REPEATED: Fact = fact(
    "flush.repeated",
    "FlushRows of the same offset again succeeds and shows no row twice",
    Verified,
    "architecture.md#the-re-flush (OK)",
);
pub const FLUSH_BELOW_CURSOR: Fact = fact(
    "flush.below_cursor",
    "FlushRows below the flush cursor: ALREADY_EXISTS",
    Verified,
    "architecture.md#the-re-flush (ALREADY_EXISTS)",
);
pub const FLUSH_BEYOND_END: Fact = fact(
    "flush.beyond_end",
    "FlushRows beyond the appended end: OUT_OF_RANGE \"... is beyond the end of the stream\"",
    Observed,
    "architecture.md#the-re-flush (OUT_OF_RANGE)",
);
pub const REQUEST_DEFAULT_SIZE: Fact = fact(
    "request.default_size_accepted",
    "a request of 8 MiB (writer.max_request_bytes' default) is accepted",
    Observed,
    "architecture.md#bigquery-facts (quotas)",
);
pub const REQUEST_TOO_LARGE: Fact = fact(
    "request.over_limit_refused",
    "a request of 21 MiB is refused with INVALID_ARGUMENT \"AppendRows request too large: <size> limit <limit>\" and appends nothing",
    Observed,
    "architecture.md#bigquery-facts (quotas)",
);
pub const FINALIZE_ROW_COUNT: Fact = fact(
    "finalize.row_count",
    "FinalizeWriteStream of a BUFFERED stream answers the rows appended, flushed or not",
    Assumed,
    "architecture.md#the-cycle (4)",
);
pub const FINALIZE_REPEATED: Fact = fact(
    "finalize.repeated",
    "a second FinalizeWriteStream succeeds with the same row count",
    Assumed,
    "architecture.md#the-cycle (4: best effort and idempotent)",
);
pub const FINALIZE_DOES_NOT_FLUSH: Fact = fact(
    "finalize.does_not_flush",
    "the unflushed tail of a finalized BUFFERED stream stays invisible",
    Observed,
    "architecture.md#bigquery-facts (finalized streams)",
);
pub const FLUSH_AFTER_FINALIZE: Fact = fact(
    "flush.after_finalize",
    "FlushRows on a finalized stream: INVALID_ARGUMENT \"Stream has been finalized\", for a flushed and an unflushed offset alike",
    Verified,
    "architecture.md#invariants (3)",
);
pub const APPEND_AFTER_FINALIZE: Fact = fact(
    "append.after_finalize",
    "an append to a finalized stream: INVALID_ARGUMENT with storage error STREAM_FINALIZED",
    Verified,
    "architecture.md#invariants (5)",
);
pub const FLUSH_NOT_FOUND: Fact = fact(
    "flush.stream_gone",
    "FlushRows on a stream whose table was deleted: NOT_FOUND",
    Assumed,
    "architecture.md#the-re-flush (NOT_FOUND)",
);
pub const SCHEMA_GET_WRITE_STREAM: Fact = fact(
    "schema.added_column_in_get_write_stream",
    "after tables.patch adds a NULLABLE column, GetWriteStream(FULL) shows it within the wait",
    Observed,
    "architecture.md#bigquery-facts (schema changes)",
);
pub const SCHEMA_UPDATED_SCHEMA: Fact = fact(
    "schema.updated_schema_on_append",
    "after tables.patch adds a column, an append on a connection opened before carries updated_schema with it within the wait",
    Observed,
    "architecture.md#module-map (tables/evolution.rs)",
);
pub const DEFAULT_VALUE: Fact = fact(
    "defaults.required_column_filled",
    "a REQUIRED column with a default value, left out of the writer schema, reads its default",
    Observed,
    "mapping.md#resolution-against-the-table",
);
pub const DEFAULT_STREAM_VISIBLE: Fact = fact(
    "default_stream.visible_on_ack",
    "an append to _default answers without an offset and its row is visible at once",
    Observed,
    "architecture.md#at-least-once-mode",
);
pub const CDC_SEQUENCE: Fact = fact(
    "cdc.older_sequence_loses",
    "an UPSERT carrying a lower _CHANGE_SEQUENCE_NUMBER than the key's last change loses to it",
    Observed,
    "architecture.md#change-data-capture",
);
pub const CDC_DELETE: Fact = fact(
    "cdc.delete",
    "a DELETE with a higher _CHANGE_SEQUENCE_NUMBER removes the key from query results",
    Observed,
    "architecture.md#change-data-capture",
);
pub const RESOLVE_QUERY: Fact = fact(
    "query.max_under_filter",
    "SELECT MAX(col) ... WHERE key = value (the resolve query) answers the highest visible value",
    Observed,
    "architecture.md#a-lost-stream (resolve)",
);
pub const MARKER_LABEL: Fact = fact(
    "marker.label",
    "tables.patch of one label adds it and keeps the table's other labels; tables.get reads it back",
    Observed,
    "architecture.md#invariants (7)",
);
pub const PERMISSIONS: Fact = fact(
    "iam.sink_permissions",
    "tables.testIamPermissions grants the caller every permission the sink uses on a table",
    Observed,
    "operations.md#before-the-first-deployment-conformance",
);
pub const CLEANUP: Fact = fact(
    "cleanup",
    "every scratch table (and a scratch dataset) the probe created is deleted",
    Observed,
    "operations.md#before-the-first-deployment-conformance",
);

/// The table permissions the sink uses: reading and patching tables (creation, evolution, the
/// marker), the Write API, and the `resolve` query reading rows.
pub const SINK_TABLE_PERMISSIONS: [&str; 4] = [
    "bigquery.tables.get",
    "bigquery.tables.update",
    "bigquery.tables.updateData",
    "bigquery.tables.getData",
];

/// Every fact, in the order the table prints them.
pub const ALL: &[Fact] = &[
    STREAM_CREATE,
    STREAM_GET,
    APPEND_FIRST_ROW_OFFSET,
    APPEND_ALREADY_EXISTS,
    APPEND_OUT_OF_RANGE,
    APPEND_ROW_ERRORS,
    APPEND_FAILED_APPENDS_NOTHING,
    BUFFERED_INVISIBLE,
    FLUSH_INCLUSIVE,
    FLUSH_REPEATED,
    FLUSH_BELOW_CURSOR,
    FLUSH_BEYOND_END,
    REQUEST_DEFAULT_SIZE,
    REQUEST_TOO_LARGE,
    FINALIZE_ROW_COUNT,
    FINALIZE_REPEATED,
    FINALIZE_DOES_NOT_FLUSH,
    FLUSH_AFTER_FINALIZE,
    APPEND_AFTER_FINALIZE,
    FLUSH_NOT_FOUND,
    SCHEMA_GET_WRITE_STREAM,
    SCHEMA_UPDATED_SCHEMA,
    DEFAULT_VALUE,
    DEFAULT_STREAM_VISIBLE,
    CDC_SEQUENCE,
    CDC_DELETE,
    RESOLVE_QUERY,
    MARKER_LABEL,
    PERMISSIONS,
    CLEANUP,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fact_has_a_unique_name() {
        let mut names: Vec<&str> = ALL.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }
}
