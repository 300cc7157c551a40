//! `create_table` of a route whose records carry their schema in Kafka Connect's JSON envelope
//! (`cdc.schemas_enable: true`, docs/cdc.md). There is no registry to ask: the table is derived
//! from the `schema` block of the topic's newest record, as a registry route's table is derived
//! from its subject's latest schema; older records fit it as Debezium's do (a source table's new
//! columns are optional). The last few records of each partition are read by a consumer that
//! never subscribes and never commits (as `inspect` reads), the newest value with a schema taken;
//! an empty topic has no schema yet, and the route fails naming the topic. A route without
//! `primary_key` takes it from the same record's key schema, as a registry route takes it from
//! the key subject's latest schema.

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};

use super::cdc;
use super::plans::WriterSchema;
use crate::config::{CdcConfig, Config, defaults};
use kbq_core::table_schema::TableSchema;
use kbq_transcode::DeriveOptions;
use kbq_transcode::change::connect_schema;
use kbq_transcode::json::connect_schema as connect;

/// Records read back from the end of each partition: the newest may be tombstones (Debezium
/// follows each delete with one), which carry no schema.
const RECORDS_PER_PARTITION: i64 = 16;
/// How long the reads may take in all.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// No record for this long: what was there has been read.
const QUIET: Duration = Duration::from_secs(2);

/// The columns of the rows of the topic's newest record's schema.
pub(super) async fn derive(
    config: &Config,
    cdc: &CdcConfig,
    topic: &str,
    options: &DeriveOptions,
) -> anyhow::Result<TableSchema> {
    let Some(Newest { value: block, .. }) = newest(config, topic).await? else {
        bail!(
            "topic {topic} has no record in kafka connect's envelope yet to create the table from (create_table of a schemas_enable route derives it from the newest record's schema): start the connector first, or create the table"
        );
    };
    let schema =
        connect::parse(&block).map_err(|e| anyhow!("topic {topic}'s newest record: {e}"))?;
    tracing::info!(
        topic,
        "creating the table from the kafka connect schema of the topic's newest record"
    );
    cdc::row_writer(WriterSchema::Json(std::sync::Arc::new(schema)), cdc)?
        .derive(options)
        .map_err(|e| {
            anyhow!("cannot derive a table schema from topic {topic}'s kafka connect schema: {e}")
        })
}

/// The primary key the Kafka key's schema of the topic's newest record gives: the key struct's
/// fields in their order (each of a type a primary key may have, `cdc::key_columns`).
pub(super) async fn key_columns(config: &Config, topic: &str) -> anyhow::Result<Vec<String>> {
    let key = match newest(config, topic).await? {
        Some(Newest { key: Some(key), .. }) => key,
        _ => bail!(
            "topic {topic} has no record with a key in kafka connect's envelope yet to read the primary key from: start the connector first, or list the key columns"
        ),
    };
    key_columns_of(&key)
}

/// The primary key of a Kafka key's Connect schema block.
fn key_columns_of(key: &[u8]) -> anyhow::Result<Vec<String>> {
    let schema = connect::parse(key).map_err(|e| anyhow!("the kafka key's schema: {e}"))?;
    let mut columns = cdc::key_columns(&WriterSchema::Json(std::sync::Arc::new(schema)))
        .map_err(|e| anyhow!("the kafka key's schema gives no primary key: {e}"))?;
    // The JSON Schema model keeps no field order; the Connect struct does.
    let order: Vec<String> = serde_json::from_slice::<serde_json::Value>(key)?["fields"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|f| f["field"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    columns.sort_by_key(|c| order.iter().position(|o| o == c));
    Ok(columns)
}

/// The schema blocks of the newest record with a value schema.
struct Newest {
    value: Vec<u8>,
    key: Option<Vec<u8>>,
}

async fn newest(config: &Config, topic: &str) -> anyhow::Result<Option<Newest>> {
    let consumer = crate::inspect::group_reader(config)?;
    let owned = topic.to_owned();
    tokio::task::spawn_blocking(move || newest_schema(&consumer, &owned))
        .await
        .context("reading the topic's newest record")?
}

/// The schema blocks of the newest value (by timestamp) among the last records of each
/// partition, and of its key; `None` when there is none.
fn newest_schema(consumer: &BaseConsumer, topic: &str) -> anyhow::Result<Option<Newest>> {
    let timeout = defaults::KAFKA_REQUEST_TIMEOUT;
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .with_context(|| format!("cannot read topic {topic}'s metadata"))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    let mut assignment = TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, timeout)
            .with_context(|| format!("cannot read the watermarks of {topic}/{p}"))?;
        if high > low {
            let from = (high - RECORDS_PER_PARTITION).max(low);
            assignment.add_partition_offset(topic, p, Offset::Offset(from))?;
            ends.push((p, high));
        }
    }
    if ends.is_empty() {
        return Ok(None);
    }
    consumer.assign(&assignment)?;
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut newest: Option<(i64, Newest)> = None;
    // A partition's high watermark may count a transaction marker no poll returns: stop when
    // every partition's end was read, or after a quiet spell.
    let mut quiet = Duration::ZERO;
    while !ends.is_empty() && quiet < QUIET {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("reading the last records of topic {topic} took longer than {READ_TIMEOUT:?}");
        }
        let wait = left.min(Duration::from_millis(250));
        let Some(message) = consumer.poll(wait) else {
            quiet += wait;
            continue;
        };
        quiet = Duration::ZERO;
        let message = message.with_context(|| format!("cannot read topic {topic}"))?;
        if message.offset() + 1
            >= ends
                .iter()
                .find(|(p, _)| *p == message.partition())
                .map_or(0, |e| e.1)
        {
            ends.retain(|(p, _)| *p != message.partition());
        }
        let Some(value) = message.payload() else {
            continue;
        };
        let Ok(Some(range)) = connect_schema(value) else {
            continue;
        };
        let at = message.timestamp().to_millis().unwrap_or(i64::MIN);
        if newest.as_ref().is_none_or(|(t, _)| at >= *t) {
            let key = message
                .key()
                .and_then(|k| Some(k[connect_schema(k).ok()??].to_vec()));
            let value = value[range].to_vec();
            newest = Some((at, Newest { value, key }));
        }
    }
    Ok(newest.map(|(_, n)| n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_primary_key_is_the_key_structs_fields_in_their_order() {
        let key = br#"{"type":"struct","optional":false,"name":"pg.public.t.Key","fields":[
            {"type":"string","optional":false,"field":"region"},
            {"type":"int64","optional":false,"field":"id"},
            {"type":"int32","optional":false,"name":"io.debezium.time.Date","field":"day"}]}"#;
        assert_eq!(key_columns_of(key).unwrap(), ["region", "id", "day"]);
        let float =
            br#"{"type":"struct","fields":[{"type":"double","optional":false,"field":"w"}]}"#;
        let e = key_columns_of(float).unwrap_err().to_string();
        assert!(e.contains("key field w is FLOAT"), "{e}");
    }
}
