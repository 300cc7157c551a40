//! What every probe shares: the target's clients, the scratch dataset and tables (remembered for
//! the clean-up), AppendRows calls answered one at a time, and the rows a table shows.

use std::collections::BTreeMap;

use anyhow::{Context, anyhow};
use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::{
    AppendRowsRequest, WriteStream,
};
use serde_json::Value;

use super::report::Report;
use super::{Target, streams, tables};
use crate::backoff;
use crate::bigquery::error::{ErrorClass, WriteError};
use crate::bigquery::rest_client::{
    PrimaryKey, RestClient, Table, TableConstraints, TableReference,
};
use crate::bigquery::write_client::{AppendConnection, AppendReply, StreamKind, WriteClient};
use crate::config::defaults;
use kbq_core::bigquery_facts::{self as facts, Fact};
use kbq_core::table_schema::TableSchema;

/// Attempts at a call that can fail transiently right after its table was created (NOT_FOUND
/// while the table propagates, UNAVAILABLE).
const ATTEMPTS: u32 = 8;

/// The answer to one append request: a reply, or the status that ended the call.
pub(super) type Answer = Result<AppendReply, WriteError>;

pub(super) struct Probe<'a> {
    pub write: &'a WriteClient,
    pub rest: &'a RestClient,
    pub target: &'a Target,
    pub dataset: String,
    dataset_created: bool,
    run_id: String,
    created: Vec<TableReference>,
    pub report: Report,
}

impl<'a> Probe<'a> {
    pub fn new(write: &'a WriteClient, rest: &'a RestClient, target: &'a Target) -> Probe<'a> {
        // Names of this run only, so that a run in a named dataset touches nothing else.
        let run_id = format!("{:08x}", rand::random::<u32>());
        let dataset = target
            .dataset
            .clone()
            .unwrap_or_else(|| format!("kbq_conformance_{run_id}"));
        Probe {
            write,
            rest,
            target,
            dataset,
            dataset_created: false,
            run_id,
            created: Vec::new(),
            report: Report::default(),
        }
    }

    /// Every probe in turn; each records its facts, a failed step as "not reached".
    pub async fn run_all(&mut self) {
        if let Err(error) = self.prepare_dataset().await {
            let all: Vec<Fact> = facts::ALL
                .iter()
                .filter(|f| **f != facts::CLEANUP)
                .copied()
                .collect();
            self.report.not_reached(&all, &error);
            return;
        }
        streams::buffered_stream(self).await;
        tables::schema_change(self).await;
        tables::default_values(self).await;
        tables::changes(self).await;
        tables::marker_and_permissions(self).await;
        tables::stream_of_a_deleted_table(self).await;
    }

    async fn prepare_dataset(&mut self) -> anyhow::Result<()> {
        let project = &self.target.project;
        if self.target.dataset.is_some() {
            // A named dataset must exist: the probe never creates or deletes it.
            return self
                .rest
                .get_dataset(project, &self.dataset)
                .await
                .with_context(|| format!("cannot read dataset {}", self.dataset));
        }
        self.rest
            .ensure_dataset(project, &self.dataset, self.target.location.as_deref())
            .await
            .with_context(|| format!("cannot create the scratch dataset {}", self.dataset))?;
        self.dataset_created = true;
        Ok(())
    }

    /// Creates the scratch table `<run>_<suffix>`, remembered for the clean-up.
    pub async fn create_table(
        &mut self,
        suffix: &str,
        schema: TableSchema,
        primary_key: Option<&str>,
    ) -> anyhow::Result<TableReference> {
        let reference = TableReference::new(
            &self.target.project,
            &self.dataset,
            &format!("kbq_conformance_{}_{suffix}", self.run_id),
        );
        let table = Table {
            table_reference: reference.clone(),
            schema,
            time_partitioning: None,
            clustering: None,
            require_partition_filter: None,
            description: Some("kafka-bigquery-sink conformance scratch table".into()),
            labels: BTreeMap::new(),
            table_constraints: primary_key.map(|k| TableConstraints {
                primary_key: Some(PrimaryKey {
                    columns: vec![k.to_string()],
                }),
            }),
            max_staleness: None,
            etag: None,
        };
        self.created.push(reference.clone());
        self.rest
            .insert_table(&table)
            .await
            .with_context(|| format!("cannot create table {}", reference.table_id))?;
        Ok(reference)
    }

    /// A BUFFERED stream on `table`, retried while the new table propagates.
    pub async fn create_stream(&self, table: &TableReference) -> anyhow::Result<WriteStream> {
        let mut backoff = backoff::CREATE_STREAM;
        loop {
            match self
                .write
                .create_write_stream(&table.resource_name(), StreamKind::Buffered)
                .await
            {
                Ok(stream) => return Ok(stream),
                Err(e) if retryable(&e) && backoff.attempts() < ATTEMPTS => backoff.wait().await,
                Err(e) => return Err(anyhow!(e)).context("CreateWriteStream failed"),
            }
        }
    }

    /// Opens an AppendRows call with `first` and waits for its answer.
    pub async fn open(
        &self,
        first: AppendRowsRequest,
    ) -> anyhow::Result<(AppendConnection, Answer)> {
        let mut conn = self
            .write
            .open_append(first, 4)
            .await
            .map_err(|e| anyhow!(e))
            .context("cannot open an AppendRows call")?;
        let answer = self.answer(&mut conn).await?;
        Ok((conn, answer))
    }

    /// Sends one request on `conn` and waits for its answer.
    pub async fn send(
        &self,
        conn: &mut AppendConnection,
        request: AppendRowsRequest,
    ) -> anyhow::Result<Answer> {
        if let Err(sent) = conn.send(request).await {
            // The call is gone: its status says why.
            return Ok(match self.answer(conn).await? {
                Err(status) => Err(status),
                Ok(_) => Err(sent),
            });
        }
        self.answer(conn).await
    }

    async fn answer(&self, conn: &mut AppendConnection) -> anyhow::Result<Answer> {
        tokio::time::timeout(defaults::CONFORMANCE_ANSWER_TIMEOUT, conn.next_reply())
            .await
            .map_err(|_| {
                anyhow!(
                    "no answer to an append within {:?}",
                    defaults::CONFORMANCE_ANSWER_TIMEOUT
                )
            })
    }

    /// The rows `table` shows (`tabledata.list`), every page.
    pub async fn visible_rows(&self, table: &TableReference) -> anyhow::Result<Vec<Value>> {
        let mut rows = Vec::new();
        let mut token = None;
        loop {
            let (page, next) = self
                .rest
                .list_rows(table, token.as_deref(), 10_000)
                .await
                .context("tabledata.list failed")?;
            rows.extend(page);
            match next {
                Some(t) => token = Some(t),
                None => return Ok(rows),
            }
        }
    }

    /// The first column of every row `table` shows, as integers.
    pub async fn visible_ids(&self, table: &TableReference) -> anyhow::Result<Vec<i64>> {
        let mut ids: Vec<i64> = self
            .visible_rows(table)
            .await?
            .iter()
            .map(|row| cell(row, 0).and_then(|v| v.parse().ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| anyhow!("tabledata.list answered a row without an integer id"))?;
        ids.sort_unstable();
        Ok(ids)
    }

    /// Deletes every scratch table, then the scratch dataset; records the clean-up's fact.
    pub async fn clean_up(&mut self) {
        let mut problems = Vec::new();
        for table in std::mem::take(&mut self.created) {
            match self.rest.delete_table(&table).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => problems.push(format!("table {}: {e}", table.table_id)),
            }
        }
        if self.dataset_created
            && let Err(e) = self
                .rest
                .delete_dataset(&self.target.project, &self.dataset)
                .await
        {
            problems.push(format!("dataset {}: {e}", self.dataset));
        }
        let what = if self.dataset_created {
            format!("deleted the scratch tables and dataset {}", self.dataset)
        } else {
            format!("deleted the scratch tables in {}", self.dataset)
        };
        if problems.is_empty() {
            self.report.record(&facts::CLEANUP, true, what);
        } else {
            self.report.record(
                &facts::CLEANUP,
                false,
                format!("left: {}", problems.join("; ")),
            );
        }
    }

    pub fn into_report(self) -> Report {
        self.report
    }
}

/// Right after a table is created BigQuery can answer NOT_FOUND for a while; transient errors
/// are retried as the sink retries them.
pub(super) fn retryable(e: &WriteError) -> bool {
    matches!(
        e.class(),
        ErrorClass::NotFound | ErrorClass::Transient | ErrorClass::Throttled
    )
}

/// Cell `index` of a `tabledata.list` row, as text.
pub(super) fn cell(row: &Value, index: usize) -> Option<&str> {
    row["f"][index]["v"].as_str()
}

/// An answer in words, for the table.
pub(super) fn describe(answer: &Answer) -> String {
    match answer {
        Ok(AppendReply::Appended {
            offset,
            updated_schema,
        }) => {
            let at = match offset {
                Some(o) => format!("appended at offset {}", o.0),
                None => "appended without an offset".to_string(),
            };
            match updated_schema {
                Some(s) => format!(
                    "{at}, updated_schema [{}]",
                    s.fields
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => at,
            }
        }
        Ok(AppendReply::Failed(e)) => format!("in the stream: {}", error_text(e)),
        Err(e) => format!("the call ended: {}", error_text(e)),
    }
}

/// An error with its code, storage error and row errors.
pub(super) fn error_text(e: &WriteError) -> String {
    let mut text = e.to_string();
    for r in &e.row_errors {
        text.push_str(&format!(
            "; row_errors[index {}, code {}, {:?}]",
            r.index,
            row_error_code_name(r.code),
            r.message
        ));
    }
    text
}

fn row_error_code_name(code: i32) -> &'static str {
    use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::row_error::RowErrorCode;
    RowErrorCode::try_from(code)
        .map(|c| c.as_str_name())
        .unwrap_or("UNKNOWN")
}

/// The offset of an appended answer: `Some(Some(o))` at `o`, `Some(None)` without one.
pub(super) fn appended_at(answer: &Answer) -> Option<Option<i64>> {
    match answer {
        Ok(AppendReply::Appended { offset, .. }) => Some(offset.map(|o| o.0)),
        _ => None,
    }
}
