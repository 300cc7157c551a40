//! The table-level behaviours: a column added while a connection is open, a default value
//! filling a column the writer schema leaves out, `_default`, change data capture, the group's
//! marker label, the sink's permissions, and the stream of a deleted table.

use std::time::Instant;

use crate::backoff::{self, Backoff};
use crate::bigquery::rest_client::FilterValue;
use crate::bigquery::write_client::AppendReply;
use kbq_core::offsets::RowOffset;
use kbq_core::table_schema::{FieldType, Mode, TableFieldSchema};
use tonic::Code;

use super::probe::{Probe, appended_at, cell, describe, error_text};
use super::rows;
use kbq_core::bigquery_facts::{self as facts, Fact};

/// `_default` on a fresh table, then a column added under an open connection on a BUFFERED stream
/// (never flushed: its rows cost nothing to keep).
pub(super) async fn schema_change(p: &mut Probe<'_>) {
    const COVERED: &[Fact] = &[
        facts::DEFAULT_STREAM_VISIBLE,
        facts::SCHEMA_GET_WRITE_STREAM,
        facts::SCHEMA_UPDATED_SCHEMA,
    ];
    if let Err(error) = run_schema_change(p).await {
        p.report.not_reached(COVERED, &error);
    }
}

async fn run_schema_change(p: &mut Probe<'_>) -> anyhow::Result<()> {
    let table = p
        .create_table("evolve", rows::id_only_schema(), None)
        .await?;

    let default = format!("{}/streams/_default", table.resource_name());
    let first = rows::request(
        &default,
        None,
        vec![rows::id_row(7)],
        Some(rows::id_descriptor()),
    );
    let (_, answer) = p.open(first).await?;
    let visible = p.visible_ids(&table).await?;
    p.report.record(
        &facts::DEFAULT_STREAM_VISIBLE,
        appended_at(&answer) == Some(None) && visible == [7],
        format!("{}; visible ids {visible:?}", describe(&answer)),
    );

    let stream = p.create_stream(&table).await?.name;
    let first = rows::request(
        &stream,
        Some(0),
        vec![rows::id_row(0)],
        Some(rows::id_descriptor()),
    );
    let (mut conn, answer) = p.open(first).await?;
    if appended_at(&answer) != Some(Some(0)) {
        anyhow::bail!("the first append failed: {}", describe(&answer));
    }

    let mut schema = rows::id_only_schema();
    schema.fields.push(TableFieldSchema::new(
        rows::ADDED_COLUMN,
        FieldType::Bool,
        Mode::Nullable,
    ));
    p.rest.patch_table_schema(&table, &schema, None).await?;
    let patched = Instant::now();

    // Poll both ways the sink learns of a new column until each has shown it or the wait is
    // over: an append's updated_schema and GetWriteStream(FULL).
    let mut seen_in_get = None;
    let mut seen_in_append = None;
    let mut last_append = String::new();
    let mut offset = 1;
    let mut pause = Backoff::new(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(15),
    );
    loop {
        if seen_in_get.is_none() {
            let full = p.write.get_write_stream(&stream, true).await?;
            let has = full
                .table_schema
                .iter()
                .flat_map(|t| &t.fields)
                .any(|f| f.name == rows::ADDED_COLUMN);
            if has {
                seen_in_get = Some(patched.elapsed());
            }
        }
        if seen_in_append.is_none() {
            let answer = p
                .send(
                    &mut conn,
                    rows::request("", Some(offset), vec![rows::id_row(offset)], None),
                )
                .await?;
            last_append = describe(&answer);
            match &answer {
                Ok(AppendReply::Appended { updated_schema, .. }) => {
                    offset += 1;
                    let has = updated_schema
                        .iter()
                        .flat_map(|s| &s.fields)
                        .any(|f| f.name == rows::ADDED_COLUMN);
                    if has {
                        seen_in_append = Some(patched.elapsed());
                    }
                }
                Ok(AppendReply::Failed(_)) => {}
                Err(_) => {
                    anyhow::bail!("the call ended while waiting for updated_schema: {last_append}")
                }
            }
        }
        if (seen_in_get.is_some() && seen_in_append.is_some())
            || patched.elapsed() >= p.target.schema_wait
        {
            break;
        }
        pause.wait().await;
    }
    let waited = |seen: Option<std::time::Duration>| match seen {
        Some(d) => format!("seen {:.1} s after the patch", d.as_secs_f64()),
        None => format!("not seen within {} s", p.target.schema_wait.as_secs()),
    };
    p.report.record(
        &facts::SCHEMA_GET_WRITE_STREAM,
        seen_in_get.is_some(),
        waited(seen_in_get),
    );
    p.report.record(
        &facts::SCHEMA_UPDATED_SCHEMA,
        seen_in_append.is_some(),
        format!("{}; last answer: {last_append}", waited(seen_in_append)),
    );
    Ok(())
}

/// A REQUIRED column with a default, left out of the writer schema (the transcoder leaves such
/// columns to BigQuery).
pub(super) async fn default_values(p: &mut Probe<'_>) {
    if let Err(error) = run_default_values(p).await {
        p.report.not_reached(&[facts::DEFAULT_VALUE], &error);
    }
}

async fn run_default_values(p: &mut Probe<'_>) -> anyhow::Result<()> {
    let table = p
        .create_table("defaults", rows::defaults_schema(), None)
        .await?;
    let default = format!("{}/streams/_default", table.resource_name());
    let first = rows::request(
        &default,
        None,
        vec![rows::id_row(1)],
        Some(rows::id_descriptor()),
    );
    let (_, answer) = p.open(first).await?;
    let shown = p.visible_rows(&table).await?;
    let filled: Vec<Option<&str>> = shown.iter().map(|r| cell(r, 1)).collect();
    p.report.record(
        &facts::DEFAULT_VALUE,
        appended_at(&answer).is_some() && filled == [Some(rows::DEFAULT_TEXT)],
        format!("{}; filled read {filled:?}", describe(&answer)),
    );
    Ok(())
}

/// UPSERTs and a DELETE on `_default` of a table with a primary key, read back through the
/// sink's own query.
pub(super) async fn changes(p: &mut Probe<'_>) {
    const COVERED: &[Fact] = &[facts::CDC_SEQUENCE, facts::CDC_DELETE];
    if let Err(error) = run_changes(p).await {
        p.report.not_reached(COVERED, &error);
    }
}

async fn run_changes(p: &mut Probe<'_>) -> anyhow::Result<()> {
    let table = p
        .create_table("changes", rows::changes_schema(), Some("k"))
        .await?;
    let default = format!("{}/streams/_default", table.resource_name());
    let first = rows::request(
        &default,
        None,
        vec![
            rows::change("UPSERT", 1, Some(5), 10),
            rows::change("UPSERT", 2, Some(7), 11),
        ],
        Some(rows::changes_descriptor()),
    );
    let (mut conn, a) = p.open(first).await?;
    // A change re-sent after a crash carries its old, lower number: it must lose.
    let later = rows::request(
        "",
        None,
        vec![
            rows::change("UPSERT", 1, Some(3), 9),
            rows::change("DELETE", 2, None, 12),
        ],
        None,
    );
    let b = p.send(&mut conn, later).await?;
    if appended_at(&a).is_none() || appended_at(&b).is_none() {
        anyhow::bail!(
            "the changes were refused: {}; {}",
            describe(&a),
            describe(&b)
        );
    }
    let key = |k| [("k", FilterValue::Int(k))];
    let one = p.rest.query_max_int(&table, "v", &key(1)).await;
    p.report.record(
        &facts::CDC_SEQUENCE,
        matches!(one, Ok(Some(5))),
        match &one {
            Ok(v) => format!("v of k = 1: {v:?} (5 at 1/0/A, then 3 at 1/0/9)"),
            Err(e) => e.to_string(),
        },
    );
    let two = p.rest.query_max_int(&table, "v", &key(2)).await;
    p.report.record(
        &facts::CDC_DELETE,
        matches!(two, Ok(None)),
        match &two {
            Ok(v) => format!("v of k = 2: {v:?} (7 at 1/0/B, deleted at 1/0/C)"),
            Err(e) => e.to_string(),
        },
    );
    Ok(())
}

/// The group's marker label on a table that has another label, and the sink's permissions.
pub(super) async fn marker_and_permissions(p: &mut Probe<'_>) {
    const COVERED: &[Fact] = &[facts::MARKER_LABEL, facts::PERMISSIONS];
    if let Err(error) = run_marker_and_permissions(p).await {
        p.report.not_reached(COVERED, &error);
    }
}

async fn run_marker_and_permissions(p: &mut Probe<'_>) -> anyhow::Result<()> {
    let table = p
        .create_table("marker", rows::id_only_schema(), None)
        .await?;
    let marker = crate::pipeline::group_label("kbq-conformance");
    p.rest
        .set_table_label(&table, "kbq_conformance", "other")
        .await?;
    let set = p.rest.set_table_label(&table, &marker, "committed").await;
    let read = p.rest.get_table(&table).await?;
    let labels = &read.labels;
    p.report.record(
        &facts::MARKER_LABEL,
        set.is_ok()
            && labels.get(&marker).map(String::as_str) == Some("committed")
            && labels.get("kbq_conformance").map(String::as_str) == Some("other"),
        match set {
            Ok(()) => format!("labels read back: {labels:?}"),
            Err(e) => e.to_string(),
        },
    );

    let held = p
        .rest
        .test_table_permissions(&table, &facts::SINK_TABLE_PERMISSIONS)
        .await;
    let missing: Vec<&str> = match &held {
        Ok(held) => facts::SINK_TABLE_PERMISSIONS
            .iter()
            .filter(|want| !held.iter().any(|h| h == *want))
            .copied()
            .collect(),
        Err(_) => facts::SINK_TABLE_PERMISSIONS.to_vec(),
    };
    p.report.record(
        &facts::PERMISSIONS,
        missing.is_empty(),
        match &held {
            Ok(_) if missing.is_empty() => {
                format!("held: {}", facts::SINK_TABLE_PERMISSIONS.join(", "))
            }
            Ok(_) => format!("missing: {}", missing.join(", ")),
            Err(e) => e.to_string(),
        },
    );
    Ok(())
}

/// FlushRows on a stream whose table was deleted: the stream is gone (the re-flush's NOT_FOUND
/// row). Deletion may take a moment to reach the Write API, so a flush that still succeeds is
/// asked again a few times.
pub(super) async fn stream_of_a_deleted_table(p: &mut Probe<'_>) {
    if let Err(error) = run_deleted(p).await {
        p.report.not_reached(&[facts::FLUSH_NOT_FOUND], &error);
    }
}

async fn run_deleted(p: &mut Probe<'_>) -> anyhow::Result<()> {
    let table = p.create_table("gone", rows::id_only_schema(), None).await?;
    let stream = p.create_stream(&table).await?.name;
    let first = rows::request(
        &stream,
        Some(0),
        vec![rows::id_row(0), rows::id_row(1)],
        Some(rows::id_descriptor()),
    );
    let (conn, answer) = p.open(first).await?;
    drop(conn);
    if appended_at(&answer) != Some(Some(0)) {
        anyhow::bail!("the append failed: {}", describe(&answer));
    }
    p.rest.delete_table(&table).await?;
    let mut pause = backoff::TABLE_READ;
    let outcome = loop {
        match p.write.flush_rows(&stream, RowOffset(1)).await {
            Ok(_) if pause.attempts() < 6 => pause.wait().await,
            other => break other,
        }
    };
    p.report.record(
        &facts::FLUSH_NOT_FOUND,
        matches!(&outcome, Err(e) if e.code == Code::NotFound),
        match &outcome {
            Ok(o) => format!("flushed through {} after the table's deletion", o.0),
            Err(e) => error_text(e),
        },
    );
    Ok(())
}
