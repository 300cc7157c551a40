//! Every default of the config, in one place. The doc comment of each field says which one
//! applies.

use super::{ByteSize, CdcFormat, Credentials, Delivery, LogFormat, PartitionType, SchemaUpdate};
use kbq_core::bad_record::BadRecordPolicy;
use kbq_core::protocol::{
    AnomalyPolicy, MissingCheckpointPolicy, OutOfRangePolicy, ResolveFallback, StartFrom,
};
use kbq_transcode::protobuf::MessageIndexEncoding;
use kbq_transcode::{MapMode, UnknownFields};
use std::time::Duration;

/// Exactly once, the point of the sink; at least once is the operator's choice.
pub const DELIVERY: Delivery = Delivery::ExactlyOnce;
/// Application Default Credentials (GKE Workload Identity, a developer's `gcloud` login).
pub const CREDENTIALS: Credentials = Credentials::Adc;
/// A table's schema is the operator's: columns are added only when asked for.
pub const SCHEMA_UPDATE: SchemaUpdate = SchemaUpdate::None;
pub const TIME_PARTITIONING_TYPE: PartitionType = PartitionType::Day;
/// Debezium's envelope, what a CDC topic carries unless transformed.
pub const CDC_FORMAT: CdcFormat = CdcFormat::Debezium;
pub const LOG_FORMAT: LogFormat = LogFormat::Text;
/// The first section of CDC sequence numbers until an operator raises it.
pub const CDC_SEQUENCE_EPOCH: u64 = 0;
/// Distinct Kafka Connect schema blocks (`cdc.schemas_enable: true`) whose plans a route keeps,
/// for values and for keys each; past it the least recently used is dropped and compiled again
/// when it returns (`src/tables/connect_schemas.rs`). A Debezium table's schema changes only
/// when the source table is altered, so a route sees a handful; not configurable.
pub const CONNECT_SCHEMAS_PER_ROUTE: usize = 64;

pub const PARTITION_ASSIGNMENT_STRATEGY: &str = "cooperative-sticky";
/// librdkafka properties the sink sets unless `kafka.properties` does.
pub const CONSUMER_PROPERTIES: &[(&str, &str)] = &[
    ("queued.max.messages.kbytes", "16384"),
    ("fetch.max.bytes", "16777216"),
    ("fetch.queue.backoff.ms", "20"),
];
/// Per-request timeout of a registry call (`schema_registry.timeout`).
pub const SCHEMA_REGISTRY_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts of one registry lookup (`schema_registry.retries`): a lookup that runs out reports
/// the registry unavailable and the partition waits, it never dead-letters good records.
pub const SCHEMA_REGISTRY_RETRIES: u32 = 5;
/// A 404 from the registry can be transient (failover, restore).
pub const SCHEMA_REGISTRY_NOT_FOUND_GRACE: Duration = Duration::from_secs(60);
/// The largest registry answer read (`schema_registry.max_response_bytes`): above the largest
/// schemas seen in use (a 50 MB schema is read whole), far below the memory a replica has.
pub const SCHEMA_REGISTRY_MAX_RESPONSE_BYTES: ByteSize = ByteSize(64 * 1024 * 1024);
/// The TopicNameStrategy subject of a topic's values.
pub const SCHEMA_REGISTRY_TABLE_SUBJECT: &str = "{topic}-value";
/// Every current Confluent serializer writes zig-zag message indexes.
pub const SCHEMA_REGISTRY_PROTOBUF_MESSAGE_INDEXES: MessageIndexEncoding =
    MessageIndexEncoding::Zigzag;
/// A field without a column is dropped, not a bad record: writers may add fields first.
pub const UNKNOWN_FIELDS: UnknownFields = UnknownFields::Ignore;
/// Maps as REPEATED STRUCT<key, value> (`struct`), which keeps their types.
pub const MAP_MODE: MapMode = MapMode::Repeated;
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5);
pub const COMMIT_FAILURE_ISOLATION_THRESHOLD: u32 = 5;
/// Long enough for a slow BigQuery answer and a recovery; short enough that a stuck
/// partition turns readiness false within minutes.
pub const PARTITION_STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// The broker default of `offset.metadata.max.bytes`.
pub const CHECKPOINT_METADATA_MAX_BYTES: u32 = 4096;
pub const WRITER_MAX_REQUEST_BYTES: ByteSize = ByteSize(8 * 1024 * 1024);
pub const WRITER_MAX_ROWS_PER_REQUEST: u32 = 50_000;
pub const WRITER_LINGER: Duration = Duration::from_millis(50);
pub const WRITER_MAX_INFLIGHT_REQUESTS: u32 = 4;
pub const WRITER_MAX_INFLIGHT_BYTES: ByteSize = ByteSize(32 * 1024 * 1024);
pub const WRITER_MAX_UNCOMMITTED_BYTES: ByteSize = ByteSize(256 * 1024 * 1024);
/// Enough for the sink's pace on 2 cores at 64 partitions, small enough that the process
/// stays under 256 MiB with librdkafka's default prefetch (BENCHMARKS.md).
pub const WRITER_MEMORY_LIMIT: ByteSize = ByteSize(64 * 1024 * 1024);
pub const WRITER_RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
/// Below Kubernetes' default `terminationGracePeriodSeconds` of 30 s.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(25);
/// A bad record goes to the dead-letter topic: never dropped unless the operator says so.
pub const ON_BAD_RECORD: BadRecordPolicy = BadRecordPolicy::DeadLetter;
// The recovery policies: each case where no exact continuation exists stops the partition
// unless the operator chose otherwise; a partition without a checkpoint on a first start (or a
// new one) takes the whole log. `recovery.lost_stream` has no constant: its default depends on
// the metadata columns (`Config::effective_lost_stream`).
pub const RECOVERY_ON_ANOMALY: AnomalyPolicy = AnomalyPolicy::Fail;
pub const RECOVERY_START_FROM: StartFrom = StartFrom::Earliest;
pub const RECOVERY_LOST_OFFSETS: MissingCheckpointPolicy = MissingCheckpointPolicy::Fail;
/// A position below the log start stops the partition: nothing is skipped unless asked for.
pub const RECOVERY_ON_OUT_OF_RANGE: OutOfRangePolicy = OutOfRangePolicy::Fail;
pub const RECOVERY_NEW_PARTITIONS: StartFrom = StartFrom::Earliest;
/// About 2 minutes of failed `resolve` queries (backing off up to 30 s between them).
pub const RECOVERY_RESOLVE_ATTEMPTS: u32 = 10;
pub const RECOVERY_RESOLVE_FALLBACK: ResolveFallback = ResolveFallback::Fail;
/// NOT_FOUND on a stream can be transient (docs/architecture.md#bigquery-facts): asked this often
/// before the stream counts as gone.
pub const STREAM_NOT_FOUND_RETRIES: u32 = 3;
/// All of the pod's own addresses: in Kubernetes that is the pod's IP (and loopback), reached
/// only as far as the NetworkPolicy of `deploy/` lets it (the scraper).
pub const METRICS_LISTEN: &str = "0.0.0.0:9464";
/// The log filter where neither `log.level` nor `RUST_LOG` sets one.
pub const LOG_LEVEL: &str = "info";

// Settings the sink fixes itself (not in the config file), kept here so that every default is in
// one place.

/// The ops port (`/metrics`, `/healthz`, `/readyz`), docs/operations.md#hostile-input: connections
/// served at once (a scraper and the kubelet need a few; more wait in the listen backlog).
pub const OPS_MAX_CONNECTIONS: usize = 64;
/// A request's headers must arrive within this, or its connection is closed.
pub const OPS_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Any ops connection is asked to close after this (idle keep-alive ones included).
pub const OPS_MAX_CONNECTION_AGE: Duration = Duration::from_secs(30);
/// What a connection asked to close gets to finish its response before it is dropped.
pub const OPS_CLOSE_GRACE: Duration = Duration::from_secs(5);
/// `/healthz` turns false when the coordinator has not beaten for this long.
pub const HEALTH_STALE_AFTER: Duration = Duration::from_secs(30);
/// How long a dead-letter send may wait for the broker's acknowledgement.
pub const DEAD_LETTER_SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// The dead-letter producer's `message.max.bytes` unless `dead_letter.properties` sets it:
/// librdkafka's own default, which a broker's default topic limit (`max.message.bytes`,
/// 1,048,588 bytes) admits. A dead letter larger is cut to fit (docs/operations.md, "Hostile
/// input").
pub const DEAD_LETTER_MAX_MESSAGE_BYTES: usize = 1_000_000;
/// Pause between two lookups of a writer schema that the registry could not serve yet.
pub const PLAN_LOOKUP_BACKOFF: Duration = Duration::from_secs(1);
/// librdkafka's default `session.timeout.ms`, when `kafka.properties` does not set it.
pub const KAFKA_SESSION_TIMEOUT: Duration = Duration::from_secs(45);
/// The longest a revoke callback waits for the handoff (capped by `shutdown_deadline`).
pub const HANDOFF_DEADLINE: Duration = Duration::from_secs(30);
/// CreateWriteStream calls a replica may make at once (a partition's stream is created at its
/// first row): a cold start or a lost assignment of up to this many partitions per replica does
/// not wait for the steady rate. A twentieth of the project's 10,000 an hour (docs/operations.md,
/// "Capacity planning", for the argument).
pub const STREAM_CREATION_BURST: u32 = 500;
/// The steady CreateWriteStream rate of a replica once its burst is spent (3,600 an hour).
pub const STREAM_CREATIONS_PER_SECOND: f64 = 1.0;
/// The most CreateWriteStream calls a replica makes in a second, within the burst too: the
/// service's latency climbs past 25 s above 40–50 calls a second per project.
pub const STREAM_CREATION_PACE: f64 = 10.0;
/// How often librdkafka reports statistics (group membership) and the high watermarks are read
/// (the lag gauges, stall detection) when the daemon exports metrics and `kafka.properties`
/// leaves `statistics.interval.ms` unset or 0 (readiness and the lag gauges depend on the
/// statistics, so they are never off).
pub const KAFKA_STATISTICS_INTERVAL: Duration = Duration::from_secs(5);
/// Timeout of the consumer's own requests to the broker (committed offsets, watermarks), and of
/// `inspect`'s and `recover`'s (metadata, committed offsets, watermarks).
pub const KAFKA_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Records a paused partition may keep in its stash.
pub const MAX_STASH_RECORDS: usize = 10_000;
/// Capacity of a writer's channel, in records: filled only by records far smaller than 1 KB
/// (see `pipeline.rs` for the measurement behind it).
pub const WRITER_CHANNEL_RECORDS: usize = 65_536;
/// The shortest wait before a zombie partition asks the group whether it still owns it.
pub const MIN_ZOMBIE_CONFIRM: Duration = Duration::from_secs(1);
/// Timeout of establishing a connection to the Schema Registry: half a request's
/// (`schema_registry.timeout`), so an unreachable registry fails its attempt early and the
/// lookup goes on to its next one.
pub const SCHEMA_REGISTRY_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Backoff between the attempts of one registry lookup: doubles (jittered, `backoff.rs`) from
/// the first up to the second; with the default attempts, about 1.5 s of waits in all before
/// the lookup reports the registry unavailable.
pub const SCHEMA_REGISTRY_BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const SCHEMA_REGISTRY_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A schema whose reference graph (Protobuf imports, JSON Schema `$ref`s, followed through
/// their subjects) is larger than this is refused as unusable: a cycle, or a registry
/// answering nonsense.
pub const SCHEMA_REGISTRY_MAX_REFERENCES: usize = 256;
/// Timeout of BigQuery REST calls (tables, queries).
pub const REST_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a BigQuery REST call waits for its connection (a call with a shorter timeout
/// waits that long at most).
pub const REST_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of establishing a gRPC connection to the Storage Write API.
pub const GRPC_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 PINGs on each Storage Write API connection, idle or not, at this interval; a
/// connection whose PING is not answered within the timeout is closed. A connection that died
/// silently (a middlebox forgot it) is so found within 50 s, inside `WRITER_RESPONSE_TIMEOUT`.
pub const GRPC_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const GRPC_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Backoff between reconnects of an append session: doubles from the first up to the second.
pub const SESSION_RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(100);
pub const SESSION_RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Consecutive failed reconnects before a session gives up (the partition then restarts its
/// incarnation with the protocol's backoff).
pub const SESSION_MAX_RECONNECT_ATTEMPTS: u32 = 20;
/// How long one lookup of `schema_update: add_columns` waits for new columns to reach the
/// Storage Write API after `tables.patch` (the writer then retries; BigQuery documents "on the
/// order of minutes"), and how often it asks meanwhile.
pub const SCHEMA_UPDATE_VISIBLE_TIMEOUT: Duration = Duration::from_secs(30);
pub const SCHEMA_UPDATE_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// `conformance`: how long it waits for a column added by `tables.patch` to reach the Storage
/// Write API (BigQuery documents "on the order of minutes"), and the longest it waits for any one
/// answer of the service.
pub const CONFORMANCE_SCHEMA_WAIT: Duration = Duration::from_secs(900);
pub const CONFORMANCE_ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// The service's endpoints when `bigquery.endpoint` is not set.
pub const GOOGLE_STORAGE_ENDPOINT: &str = "https://bigquerystorage.googleapis.com";
pub const GOOGLE_REST_ENDPOINT: &str = "https://bigquery.googleapis.com";
