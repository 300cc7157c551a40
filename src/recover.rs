//! `recover -c config.yaml`: brings the checkpoints that no running sink will pick up to rest
//! (docs/operations.md, `recover`). Invariant 2 ("every committed checkpoint is eventually
//! flushed") counts on the next owner of a partition; a topic removed from the subscription has
//! none, and its rows `[f, K)` would stay invisible until the stream expires.
//!
//! Per exactly-once checkpoint `(K, s, r, f)` of the selected topics, in this order:
//! 1. `FlushRows(s, r)` when `f < K` — always safe: `(s, r)` was committed, so invariant 1 holds;
//! 2. commit the same offset `K` with `f = K` and no stream, outside the group (the broker accepts
//!    such a commit only while the group has no members, which is what keeps this from racing a
//!    live owner; a rejected commit is reported and nothing more is done for the partition). Just
//!    before it, the checkpoint is read again: a sink that joined, committed its own checkpoint and
//!    left while the flush ran has moved on, and writing `K` back over it would re-deliver what it
//!    committed, so the partition is left to it;
//! 3. `FinalizeWriteStream(s)`: nothing durable references `s` any more (invariant 3).
//!
//! It never moves an offset: a lost stream is reported (the records of `[f, K)` must be
//! re-delivered by re-subscribing the topic, where `recovery.lost_stream` applies), never rewound.

use std::collections::BTreeSet;

use anyhow::{Context, bail};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use crate::backoff;
use crate::bigquery::write_client::WriteClient;
use crate::checkpoint::coordinator::flush_outcome;
use crate::config::{Config, defaults};
use crate::inspect::{PartitionView, group_reader, read_group, table_path};
use crate::kafka::consumer::read_committed;
use kbq_core::metadata::{CommitMetadata, MetadataVersion, TableFingerprint};
use kbq_core::offsets::{NextOffset, RowOffset, StreamId};
use kbq_core::protocol::{CommittedRead, FlushOutcome, TopicPartition};

const FLUSH_ATTEMPTS: u32 = 6;

/// Which topics' checkpoints to bring to rest.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Topics with checkpoints that the config no longer subscribes.
    Unsubscribed,
    /// Every topic the group has checkpoints for.
    All,
    Topics(Vec<String>),
}

/// What was done for one partition.
#[derive(Debug)]
enum Done {
    AtRest,
    Recovered {
        flushed: Option<(StreamId, RowOffset)>,
        finalized: Result<(), String>,
    },
    /// The checkpoint changed while recover ran: a sink owns the partition's progress now.
    MovedOn {
        flushed: Option<(StreamId, RowOffset)>,
        now: Option<CommittedRead>,
    },
    Problem(String),
}

pub fn run(config: &Config, selection: Selection) -> anyhow::Result<bool> {
    let consumer = group_reader(config)?;
    let views = read_group(&consumer, &config.kafka.topics)?;
    let chosen = choose(config, &selection, views)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let client = runtime
        .block_on(async { crate::bigquery::clients(config) })?
        .0;
    let mut ok = true;
    let mut considered = 0;
    for view in chosen {
        let Some(read) = &view.committed else {
            continue;
        };
        considered += 1;
        let tp = view.tp.clone();
        // The checkpoint belongs to the table the topic's route names in this config.
        let path = table_path(config, &tp.topic);
        let table = TableFingerprint::of_table_path(&path);
        let done = match CommitMetadata::parse(&read.metadata) {
            Ok(CommitMetadata::ExactlyOnce {
                table: t,
                stream: Some(stream),
                flush_to: Some(through),
                visible_through,
            }) if t == table => runtime.block_on(recover_partition(
                &consumer,
                &client,
                &path,
                table,
                &tp,
                read,
                stream,
                through,
                visible_through,
            )),
            Ok(
                CommitMetadata::ExactlyOnce { table: t, .. }
                | CommitMetadata::AtLeastOnce { table: t },
            ) if t != table => Done::Problem(format!(
                "checkpoint of another table ({t}); run recover with that table's config"
            )),
            Ok(_) => Done::AtRest,
            Err(e) => Done::Problem(format!(
                "unreadable metadata, left alone ({e}); raw={:?}",
                String::from_utf8_lossy(&read.metadata)
            )),
        };
        ok &= done.print(&tp, read);
    }
    if considered == 0 {
        println!(
            "no checkpoint to recover for group {}",
            config.kafka.group_id
        );
    }
    drop(consumer);
    Ok(ok)
}

/// The partitions of the group that `selection` names.
fn choose(
    config: &Config,
    selection: &Selection,
    views: Vec<PartitionView>,
) -> anyhow::Result<Vec<PartitionView>> {
    Ok(match selection {
        Selection::All => views,
        Selection::Topics(topics) => {
            let wanted: BTreeSet<&str> = topics.iter().map(String::as_str).collect();
            views
                .into_iter()
                .filter(|v| wanted.contains(v.tp.topic.as_str()))
                .collect()
        }
        Selection::Unsubscribed => {
            if config.kafka.topic_pattern.is_some() {
                bail!(
                    "kafka.topic_pattern is set: name the topics to recover with --topic, or use --all"
                );
            }
            let subscribed: BTreeSet<&str> =
                config.kafka.topics.iter().map(String::as_str).collect();
            views
                .into_iter()
                .filter(|v| !subscribed.contains(v.tp.topic.as_str()))
                .collect()
        }
    })
}

impl Done {
    /// Prints what was done for `tp` (checkpoint `read`); false for a problem.
    fn print(self, tp: &TopicPartition, read: &CommittedRead) -> bool {
        let flushed_text = |flushed: Option<(StreamId, RowOffset)>| match flushed {
            Some((s, r)) => format!("flushed {s} through row {}; ", r.0),
            None => String::new(),
        };
        match self {
            Done::AtRest => println!("{tp}: at rest at offset {}", read.offset.0),
            Done::Recovered { flushed, finalized } => {
                let flushed = flushed_text(flushed);
                let finalized = match finalized {
                    Ok(()) => "stream finalized".to_string(),
                    Err(e) => format!("stream not finalized ({e})"),
                };
                println!(
                    "{tp}: {flushed}committed offset {} with f={}; {finalized}",
                    read.offset.0, read.offset.0
                );
            }
            Done::MovedOn { flushed, now } => {
                let flushed = flushed_text(flushed);
                let now = match now {
                    Some(now) => format!(
                        "offset {} ({})",
                        now.offset.0,
                        String::from_utf8_lossy(&now.metadata)
                    ),
                    None => "no committed offset".to_string(),
                };
                println!(
                    "{tp}: {flushed}checkpoint changed while recover ran (now {now}): a sink has taken the partition over; left to it, nothing committed or finalized"
                );
            }
            Done::Problem(why) => {
                println!("{tp}: NOT RECOVERED: {why}");
                return false;
            }
        }
        true
    }
}

#[allow(clippy::too_many_arguments)]
async fn recover_partition(
    consumer: &BaseConsumer,
    client: &WriteClient,
    table_path: &str,
    table: TableFingerprint,
    tp: &TopicPartition,
    read: &CommittedRead,
    stream: StreamId,
    through: RowOffset,
    f: NextOffset,
) -> Done {
    let k = read.offset;
    let name = format!("{table_path}/streams/{stream}");
    let mut flushed = None;
    if f < k {
        if let Err(problem) = flush(client, &name, &stream, through, f, k).await {
            return Done::Problem(problem);
        }
        flushed = Some((stream.clone(), through));
    }
    let metadata = CommitMetadata::ExactlyOnce {
        table,
        stream: None,
        flush_to: None,
        visible_through: k,
    }
    .encode(MetadataVersion::CURRENT);
    // Read again: a sink may have joined, committed and left while the flush ran.
    match read_committed(
        consumer,
        std::slice::from_ref(tp),
        defaults::KAFKA_REQUEST_TIMEOUT,
    ) {
        Ok(now) => {
            let now = now.get(tp).cloned().flatten();
            if now.as_ref() != Some(read) {
                return Done::MovedOn { flushed, now };
            }
        }
        Err(e) => {
            return Done::Problem(format!(
                "{}checkpoint not updated: it could not be read again before the commit ({e})",
                if flushed.is_some() { "flushed; " } else { "" }
            ));
        }
    }
    // The same offset K, never another: recover does not move where the group resumes.
    if let Err(e) = commit_outside_group(consumer, tp, k, &metadata) {
        return Done::Problem(format!(
            "{}checkpoint not updated ({e}): stop the group's consumers and run recover again",
            if flushed.is_some() { "flushed; " } else { "" }
        ));
    }
    let finalized = client
        .finalize_write_stream(&name)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    Done::Recovered { flushed, finalized }
}

/// `FlushRows(stream, through)` of a checkpoint whose rows `[f, k)` are not known visible,
/// retried as the coordinator retries it; the problem to report when the stream is gone or the
/// flush fails.
async fn flush(
    client: &WriteClient,
    name: &str,
    stream: &StreamId,
    through: RowOffset,
    f: NextOffset,
    k: NextOffset,
) -> Result<(), String> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let error = match client.flush_rows(name, through).await {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        // The coordinator's classification of FlushRows errors; `recover` retries what the
        // coordinator retries, a bounded number of times, and reports the rest.
        match flush_outcome(&error) {
            // The cursor is already past r: every row of the checkpoint is visible.
            FlushOutcome::Flushed | FlushOutcome::AlreadyExists => return Ok(()),
            // A NOT_FOUND right after a restart of the service may pass: asked again before
            // the stream is reported gone.
            FlushOutcome::Transient(_) | FlushOutcome::Denied(_) | FlushOutcome::NotFound
                if attempt < FLUSH_ATTEMPTS =>
            {
                tokio::time::sleep(backoff::delay(attempt)).await;
            }
            FlushOutcome::StreamFinalized | FlushOutcome::NotFound => {
                return Err(format!(
                    "stream {stream} is gone ({error}): records [{}, {}) may not be visible; re-subscribe the topic to re-deliver them (recovery.lost_stream applies); checkpoint left as is",
                    f.0, k.0
                ));
            }
            FlushOutcome::Transient(_) | FlushOutcome::Denied(_) | FlushOutcome::Fatal(_) => {
                return Err(format!("flush of {stream} failed: {error}"));
            }
        }
    }
}

/// Commits `(k, metadata)` for `tp` as a non-member and reads it back.
fn commit_outside_group(
    consumer: &BaseConsumer,
    tp: &TopicPartition,
    k: NextOffset,
    metadata: &str,
) -> anyhow::Result<()> {
    let mut tpl = TopicPartitionList::new();
    {
        let mut elem = tpl.add_partition(&tp.topic, tp.partition);
        elem.set_offset(Offset::Offset(k.0))?;
        elem.set_metadata(metadata);
    }
    let result = consumer.commit(&tpl, CommitMode::Sync);
    drop(tpl);
    result?;
    let now = read_committed(
        consumer,
        std::slice::from_ref(tp),
        defaults::KAFKA_REQUEST_TIMEOUT,
    )
    .context("the commit's read-back failed")?;
    match now.get(tp).cloned().flatten() {
        Some(read) if read.offset == k && read.metadata == metadata.as_bytes() => Ok(()),
        other => bail!("the commit did not land: read back {other:?}"),
    }
}
