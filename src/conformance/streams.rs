//! One BUFFERED stream through the life the sink gives it: created, appended with explicit
//! offsets (and refused ones), flushed forward, finalized, and refused afterwards
//! (docs/architecture.md: the cycle, invariants 1, 3 and 5, the re-flush table).

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::{
    row_error::RowErrorCode, storage_error::StorageErrorCode, write_stream,
};
use kbq_core::offsets::{RowCount, RowOffset};
use tonic::Code;

use super::probe::{Answer, Probe, appended_at, describe, error_text};
use super::rows;
use crate::bigquery::error::WriteError;
use crate::bigquery::rest_client::TableReference;
use crate::bigquery::write_client::AppendReply;
use kbq_core::bigquery_facts::{self as facts, Fact};

/// The facts this probe observes.
const COVERED: &[Fact] = &[
    facts::STREAM_CREATE,
    facts::STREAM_GET,
    facts::APPEND_FIRST_ROW_OFFSET,
    facts::APPEND_ALREADY_EXISTS,
    facts::APPEND_OUT_OF_RANGE,
    facts::APPEND_ROW_ERRORS,
    facts::APPEND_FAILED_APPENDS_NOTHING,
    facts::BUFFERED_INVISIBLE,
    facts::FLUSH_INCLUSIVE,
    facts::FLUSH_REPEATED,
    facts::FLUSH_BELOW_CURSOR,
    facts::FLUSH_BEYOND_END,
    facts::RESOLVE_QUERY,
    facts::REQUEST_DEFAULT_SIZE,
    facts::REQUEST_TOO_LARGE,
    facts::FINALIZE_ROW_COUNT,
    facts::FINALIZE_REPEATED,
    facts::FINALIZE_DOES_NOT_FLUSH,
    facts::FLUSH_AFTER_FINALIZE,
    facts::APPEND_AFTER_FINALIZE,
];

pub(super) async fn buffered_stream(p: &mut Probe<'_>) {
    if let Err(error) = run(p).await {
        p.report.not_reached(COVERED, &error);
    }
}

async fn run(p: &mut Probe<'_>) -> anyhow::Result<()> {
    let table = p.create_table("rows", rows::rows_schema(), None).await?;
    let stream = p.create_stream(&table).await?;
    let s = stream.name.clone();
    p.report.record(
        &facts::STREAM_CREATE,
        stream.r#type == write_stream::Type::Buffered as i32
            && s.starts_with(&format!("{}/streams/", table.resource_name())),
        format!("type {}, name {s}", type_name(stream.r#type)),
    );
    get_views(p, &s).await?;
    let end = appends(p, &s).await?;
    flushes(p, &table, &s, end).await?;
    let end = request_sizes(p, &s, end).await?;
    finalize(p, &table, &s, end).await
}

async fn get_views(p: &mut Probe<'_>, s: &str) -> anyhow::Result<()> {
    let basic = p.write.get_write_stream(s, false).await?;
    let full = p.write.get_write_stream(s, true).await?;
    let full_columns: Vec<String> = full
        .table_schema
        .iter()
        .flat_map(|t| t.fields.iter().map(|f| f.name.clone()))
        .collect();
    p.report.record(
        &facts::STREAM_GET,
        basic.r#type == write_stream::Type::Buffered as i32
            && basic.table_schema.is_none()
            && full_columns == ["id", "name", "pad"],
        format!(
            "BASIC: type {}, schema {}; FULL: columns {full_columns:?}",
            type_name(basic.r#type),
            if basic.table_schema.is_some() {
                "present"
            } else {
                "absent"
            }
        ),
    );
    Ok(())
}

/// Rows 0..6 appended with refused requests in between; returns the stream's end (6).
async fn appends(p: &mut Probe<'_>, s: &str) -> anyhow::Result<i64> {
    let first = rows::request(s, Some(0), rows::rows(0..2), Some(rows::rows_descriptor()));
    let (mut conn, a) = p.open(first).await?;
    let b = p
        .send(
            &mut conn,
            rows::request("", Some(2), rows::rows(2..5), None),
        )
        .await?;
    p.report.record(
        &facts::APPEND_FIRST_ROW_OFFSET,
        appended_at(&a) == Some(Some(0)) && appended_at(&b) == Some(Some(2)),
        format!("{}; {}", describe(&a), describe(&b)),
    );

    let stale = p
        .send(
            &mut conn,
            rows::request("", Some(1), rows::rows(10..11), None),
        )
        .await?;
    p.report.record(
        &facts::APPEND_ALREADY_EXISTS,
        in_stream(
            &stale,
            Code::AlreadyExists,
            StorageErrorCode::OffsetAlreadyExists,
        ),
        describe(&stale),
    );
    if stale.is_err() {
        anyhow::bail!("the call ended at a stale offset: {}", describe(&stale));
    }

    let future = p
        .send(
            &mut conn,
            rows::request("", Some(9), rows::rows(10..11), None),
        )
        .await?;
    p.report.record(
        &facts::APPEND_OUT_OF_RANGE,
        in_stream(
            &future,
            Code::OutOfRange,
            StorageErrorCode::OffsetOutOfRange,
        ),
        describe(&future),
    );
    if future.is_err() {
        anyhow::bail!("the call ended at a future offset: {}", describe(&future));
    }

    let too_long = "n".repeat(rows::NAME_MAX_LENGTH + 2);
    let bad = vec![rows::row(5, "ok", 0), rows::row(6, &too_long, 0)];
    let refused = p
        .send(&mut conn, rows::request("", Some(5), bad, None))
        .await?;
    p.report.record(
        &facts::APPEND_ROW_ERRORS,
        names_the_bad_row(&refused),
        describe(&refused),
    );
    if refused.is_err() {
        anyhow::bail!("the call ended at a bad row: {}", describe(&refused));
    }

    let after = p
        .send(
            &mut conn,
            rows::request("", Some(5), rows::rows(5..6), None),
        )
        .await?;
    p.report.record(
        &facts::APPEND_FAILED_APPENDS_NOTHING,
        appended_at(&after) == Some(Some(5)),
        describe(&after),
    );
    Ok(6)
}

/// Flushes through row 2 of `end` rows, and the refused flushes around it.
async fn flushes(
    p: &mut Probe<'_>,
    table: &TableReference,
    s: &str,
    end: i64,
) -> anyhow::Result<()> {
    let before = p.visible_ids(table).await?;
    p.report.record(
        &facts::BUFFERED_INVISIBLE,
        before.is_empty(),
        format!("{} of {end} rows visible", before.len()),
    );

    let flushed = p.write.flush_rows(s, RowOffset(2)).await;
    let visible = p.visible_ids(table).await?;
    p.report.record(
        &facts::FLUSH_INCLUSIVE,
        matches!(flushed, Ok(RowOffset(2))) && visible == [0, 1, 2],
        format!("{}; visible ids {visible:?}", flush_text(&flushed)),
    );

    let again = p.write.flush_rows(s, RowOffset(2)).await;
    let visible = p.visible_ids(table).await?;
    p.report.record(
        &facts::FLUSH_REPEATED,
        matches!(again, Ok(RowOffset(2))) && visible == [0, 1, 2],
        format!("{}; visible ids {visible:?}", flush_text(&again)),
    );

    let below = p.write.flush_rows(s, RowOffset(1)).await;
    p.report.record(
        &facts::FLUSH_BELOW_CURSOR,
        matches!(&below, Err(e) if e.code == Code::AlreadyExists),
        flush_text(&below),
    );

    let beyond = p.write.flush_rows(s, RowOffset(end)).await;
    p.report.record(
        &facts::FLUSH_BEYOND_END,
        matches!(&beyond, Err(e) if e.code == Code::OutOfRange
            && e.message.contains("is beyond the end of the stream")),
        flush_text(&beyond),
    );

    // Rows 0..=2 are visible, 3..=5 are not: the resolve query must see exactly the former.
    let highest = p
        .rest
        .query_max_int(
            table,
            "id",
            &[("name", crate::bigquery::rest_client::FilterValue::Str("r"))],
        )
        .await;
    p.report.record(
        &facts::RESOLVE_QUERY,
        matches!(highest, Ok(Some(2))),
        match &highest {
            Ok(v) => format!("MAX(id) WHERE name = 'r': {v:?} (rows 0..=2 flushed, 3..=5 not)"),
            Err(e) => e.to_string(),
        },
    );
    Ok(())
}

/// A request of the default size, then one over the limit; returns the stream's end.
async fn request_sizes(p: &mut Probe<'_>, s: &str, end: i64) -> anyhow::Result<i64> {
    let big = rows::padded_rows(end, rows::DEFAULT_REQUEST_BYTES - (64 << 10));
    let count = big.len() as i64;
    let first = rows::request(s, Some(end), big, Some(rows::rows_descriptor()));
    let size = prost::Message::encoded_len(&first);
    let (mut conn, answer) = p.open(first).await?;
    p.report.record(
        &facts::REQUEST_DEFAULT_SIZE,
        appended_at(&answer) == Some(Some(end)),
        format!("{size} bytes: {}", describe(&answer)),
    );
    let end = end + count;

    let huge = rows::padded_rows(end, rows::OVERSIZED_REQUEST_BYTES);
    let request = rows::request("", Some(end), huge, None);
    let size = prost::Message::encoded_len(&request);
    let refused = p.send(&mut conn, request).await?;
    let too_large = match &refused {
        Ok(AppendReply::Failed(e)) | Err(e) => {
            e.code == Code::InvalidArgument && e.message.contains("AppendRows request too large")
        }
        Ok(AppendReply::Appended { .. }) => false,
    };
    // Nothing of it was appended: the next row lands at the same end (on a new call if the
    // refusal ended this one).
    let next = if refused.is_err() {
        let first = rows::request(
            s,
            Some(end),
            rows::rows(end..end + 1),
            Some(rows::rows_descriptor()),
        );
        p.open(first).await?.1
    } else {
        p.send(
            &mut conn,
            rows::request("", Some(end), rows::rows(end..end + 1), None),
        )
        .await?
    };
    p.report.record(
        &facts::REQUEST_TOO_LARGE,
        too_large && appended_at(&next) == Some(Some(end)),
        format!(
            "{size} bytes: {}; next row: {}",
            describe(&refused),
            describe(&next)
        ),
    );
    Ok(end + 1)
}

/// Finalizes the stream of `end` rows (three flushed) and checks what it refuses afterwards.
async fn finalize(
    p: &mut Probe<'_>,
    table: &TableReference,
    s: &str,
    end: i64,
) -> anyhow::Result<()> {
    let first = p.write.finalize_write_stream(s).await;
    p.report.record(
        &facts::FINALIZE_ROW_COUNT,
        matches!(first, Ok(RowCount(n)) if n == end),
        format!("{} ({end} rows appended, 3 flushed)", count_text(&first)),
    );
    let second = p.write.finalize_write_stream(s).await;
    p.report.record(
        &facts::FINALIZE_REPEATED,
        matches!(second, Ok(RowCount(n)) if n == end),
        count_text(&second),
    );

    let visible = p.visible_ids(table).await?;
    p.report.record(
        &facts::FINALIZE_DOES_NOT_FLUSH,
        visible == [0, 1, 2],
        format!("visible ids {visible:?}"),
    );

    let flushed = p.write.flush_rows(s, RowOffset(2)).await;
    let unflushed = p.write.flush_rows(s, RowOffset(4)).await;
    let finalized = |r: &Result<RowOffset, WriteError>| {
        matches!(r, Err(e) if e.code == Code::InvalidArgument
            && e.message.contains("Stream has been finalized"))
    };
    p.report.record(
        &facts::FLUSH_AFTER_FINALIZE,
        finalized(&flushed) && finalized(&unflushed),
        format!(
            "offset 2: {}; offset 4: {}",
            flush_text(&flushed),
            flush_text(&unflushed)
        ),
    );

    let first = rows::request(
        s,
        Some(end),
        rows::rows(end..end + 1),
        Some(rows::rows_descriptor()),
    );
    let (_, answer) = p.open(first).await?;
    let stream_finalized = match &answer {
        Ok(AppendReply::Failed(e)) | Err(e) => {
            e.code == Code::InvalidArgument
                && e.storage_code() == Some(StorageErrorCode::StreamFinalized)
        }
        Ok(AppendReply::Appended { .. }) => false,
    };
    p.report.record(
        &facts::APPEND_AFTER_FINALIZE,
        stream_finalized,
        describe(&answer),
    );
    Ok(())
}

/// An error answered in the stream (the call goes on) with `code` and the storage error.
fn in_stream(answer: &Answer, code: Code, storage: StorageErrorCode) -> bool {
    matches!(answer, Ok(AppendReply::Failed(e)) if e.code == code && e.storage_code() == Some(storage))
}

/// Row errors naming exactly row 1 (the long name) as FIELDS_ERROR, in a message naming the
/// column.
fn names_the_bad_row(answer: &Answer) -> bool {
    match answer {
        Ok(AppendReply::Failed(e)) => {
            e.code == Code::InvalidArgument
                && e.row_errors.len() == 1
                && e.row_errors[0].index == 1
                && e.row_errors[0].code == RowErrorCode::FieldsError as i32
                && e.row_errors[0].message.contains("name")
        }
        _ => false,
    }
}

fn flush_text(r: &Result<RowOffset, WriteError>) -> String {
    match r {
        Ok(o) => format!("flushed through {}", o.0),
        Err(e) => error_text(e),
    }
}

fn count_text(r: &Result<RowCount, WriteError>) -> String {
    match r {
        Ok(n) => format!("row_count {}", n.0),
        Err(e) => error_text(e),
    }
}

fn type_name(t: i32) -> &'static str {
    write_stream::Type::try_from(t)
        .map(|t| t.as_str_name())
        .unwrap_or("UNKNOWN")
}
