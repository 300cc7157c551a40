//! The I/O a coordinator starts for its machine's actions: tasks whose answers come back as
//! events (marker writes, FlushRows, the `resolve` query), writers, and delayed commands to the
//! consumer thread. Every retry waits by the one schedule of `crate::backoff`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::bigquery::error::{ErrorClass, WriteError};
use crate::bigquery::rest_client::{FilterValue, RestClient, TableReference};
use crate::bigquery::write_client::WriteClient;
use crate::kafka::consumer::{ConsumerCommand, ConsumerHandle};
use crate::ops::metrics::{Metrics, TableLabel};
use crate::tables::{ResolveColumns, Route, Router};
use crate::writer::partition_writer::{self, WriterEvent, WriterHandle, WriterShared};
use kbq_core::metadata::TableFingerprint;
use kbq_core::offsets::{Incarnation, KafkaOffset, NextOffset, RowOffset, StreamId};
use kbq_core::protocol::{Event, FlushOutcome, FlushPurpose, TopicPartition};

use super::CoordinatorSettings;

/// Spawns the write of the group's marker on the table with this fingerprint after the
/// attempt's backoff, answered as [`Event::LabelResult`] (shared by both delivery modes).
pub(crate) fn spawn_label(
    io: &mut JoinSet<Event>,
    router: &Router,
    rest: &RestClient,
    table: TableFingerprint,
    attempt: u32,
) {
    let route = router.by_fingerprint(table);
    let rest = rest.clone();
    let key = router.group_label().to_string();
    io.spawn(async move {
        backoff(attempt).await;
        let outcome = match route {
            Some(route) => rest
                .set_table_label(&route.table, &key, "committed")
                .await
                .map_err(|e| format!("{e:#}")),
            None => Err(format!("no route has the table fingerprint {table}")),
        };
        Event::LabelResult { table, outcome }
    });
}

/// Spawns the FlushRows of an [`Action::FlushRows`] on `route`'s stream after the attempt's
/// backoff, answered as the event of its purpose. Shared by both delivery modes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn_flush(
    io: &mut JoinSet<Event>,
    shared: &WriterShared,
    route: &Route,
    tp: TopicPartition,
    stream: StreamId,
    through: RowOffset,
    purpose: FlushPurpose,
    attempt: u32,
) {
    let client = shared.client.clone();
    let metrics = shared.metrics.clone();
    let name = route.stream_name(&stream);
    let label = TableLabel {
        table: route.label().to_string(),
    };
    io.spawn(async move {
        backoff(attempt).await;
        let outcome = flush(&client, &name, through, &metrics, &label).await;
        purpose.answer(tp, stream, through, outcome)
    });
}

/// Spawns the query of an [`Action::ResolveVisible`] against `route`'s table after the
/// attempt's backoff. Shared by both delivery modes.
pub(crate) fn spawn_resolve(
    io: &mut JoinSet<Event>,
    rest: &RestClient,
    route: &Route,
    tp: TopicPartition,
    attempt: u32,
) {
    let rest = rest.clone();
    let table = route.table.clone();
    let columns = route.resolve.clone();
    io.spawn(async move {
        backoff(attempt).await;
        let outcome = resolve_visible(&rest, &table, columns.as_ref(), &tp).await;
        Event::ResolveResult { tp, outcome }
    });
}

/// Spawns the writer of `tp`'s incarnation and hands the consumer its channel, from `from`.
/// Shared by both delivery modes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn_partition_writer(
    shared: &Arc<WriterShared>,
    route: &Route,
    tp: &TopicPartition,
    incarnation: Incarnation,
    from: NextOffset,
    settings: &CoordinatorSettings,
    events: &mpsc::UnboundedSender<WriterEvent>,
    consumer: &ConsumerHandle,
) -> WriterHandle {
    let (tx, rx) = mpsc::channel(settings.writer_channel);
    let handle = partition_writer::spawn(
        shared.clone(),
        route.writer.clone(),
        tp.clone(),
        incarnation,
        from,
        rx,
        events.clone(),
    );
    consumer.send(ConsumerCommand::Start {
        tp: tp.clone(),
        from,
        sink: tx,
    });
    handle
}

/// One FlushRows, timed and counted, classified as the protocol needs it
/// (docs/architecture.md#the-re-flush). Shared by both delivery modes.
pub(crate) async fn flush(
    client: &WriteClient,
    stream: &str,
    through: RowOffset,
    metrics: &Metrics,
    label: &TableLabel,
) -> FlushOutcome {
    let started = Instant::now();
    let result = client.flush_rows(stream, through).await;
    metrics
        .flush_latency
        .get_or_create(label)
        .observe(started.elapsed().as_secs_f64());
    match result {
        Ok(_) => FlushOutcome::Flushed,
        Err(e) => {
            metrics.bigquery_error("FlushRows", &e);
            let outcome = flush_outcome(&e);
            if let FlushOutcome::Denied(_) = outcome {
                // An IAM change or a credential being rotated passes: the flush stays pending
                // and is retried (every cycle, or with the recovery backoff), never a permanent
                // stop of the partition; readiness is false meanwhile
                // (`DeniedFlushes`; docs/architecture.md#failure-policies).
                tracing::error!(stream = %stream, error = %e, "flush denied, retrying");
            }
            outcome
        }
    }
}

/// What a refused FlushRows means for the checkpoint: the one classification of FlushRows
/// errors, shared by the coordinator's flushes and `recover`.
pub(crate) fn flush_outcome(e: &WriteError) -> FlushOutcome {
    match e.class() {
        ErrorClass::AlreadyExists => FlushOutcome::AlreadyExists,
        ErrorClass::StreamFinalized => FlushOutcome::StreamFinalized,
        ErrorClass::NotFound => FlushOutcome::NotFound,
        ErrorClass::Transient | ErrorClass::Throttled => FlushOutcome::Transient(e.to_string()),
        ErrorClass::Denied => FlushOutcome::Denied(e.to_string()),
        _ => FlushOutcome::Fatal(e.to_string()),
    }
}

/// The `resolve` policy's question to the table: the highest visible Kafka offset of `tp`,
/// through the metadata columns.
pub(crate) async fn resolve_visible(
    rest: &RestClient,
    table: &TableReference,
    columns: Option<&ResolveColumns>,
    tp: &TopicPartition,
) -> Result<Option<KafkaOffset>, String> {
    let Some(c) = columns else {
        return Err("the resolve policy needs the partition and offset metadata columns".into());
    };
    let mut filters = vec![(c.partition.as_str(), FilterValue::Int(tp.partition as i64))];
    if let Some(topic) = &c.topic {
        filters.push((topic.as_str(), FilterValue::Str(&tp.topic)));
    }
    rest.query_max_int(table, &c.offset, &filters)
        .await
        .map(|max| max.map(KafkaOffset))
        .map_err(|e| e.to_string())
}

/// Retries back off by their attempt number: 0, 0.2 s, 0.4 s, … up to 30 s.
pub(crate) async fn backoff(attempt: u32) {
    if attempt > 0 {
        tokio::time::sleep(crate::backoff::delay(attempt)).await;
    }
}

/// Sends `command` to the consumer thread after `delay`: a Kafka read it could not answer
/// (committed offset, watermarks, ownership) is asked again, never read as "no offset".
pub(crate) fn send_later(consumer: &ConsumerHandle, delay: Duration, command: ConsumerCommand) {
    let commands = consumer.sender();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let _ = commands.send(command);
    });
}
