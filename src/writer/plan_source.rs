//! The port through which a writer gets its plans and its table: what `tables/` implements
//! (the Schema Registry's plans, a fixed `.avsc`, CDC change plans), so the writer knows neither
//! the registry nor the REST client.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::TableSchema as ProtoTableSchema;

use kbq_core::bad_record::BadRecord;

use super::change_source::ChangeSource;
use kbq_transcode::Plan;
use kbq_transcode::transforms::{Filter, KeyPlan};

/// Why a schema lookup failed.
#[derive(Debug, Clone)]
pub enum PlanLookupError {
    /// This record's schema can never be used (unknown id, incompatible with the table): the
    /// record is bad.
    BadRecord(BadRecord),
    /// The registry or the table is unreachable: the partition waits and retries, it never
    /// dead-letters good data (invariant 6).
    Unavailable(String),
}

/// The plan for a payload and the offset of the Avro body inside the payload.
pub type PlanLookup<'a> =
    Pin<Box<dyn Future<Output = Result<(Arc<Plan>, usize), PlanLookupError>> + Send + 'a>>;

/// Where plans come from: the Schema Registry (by the id in the Confluent header) or a fixed
/// `.avsc` (raw Avro).
pub trait PlanSource: Send + Sync {
    /// The plan for this payload of `topic` and the Avro body inside it (the topic names the
    /// source of a schema when schema changes from several topics meet in one table).
    fn plan_for<'a>(&'a self, topic: &'a str, payload: &'a [u8]) -> PlanLookup<'a>;

    /// The plan for this payload when it is known without waiting (a cached schema id), or
    /// `None` to ask [`plan_for`](Self::plan_for): the common case then costs no boxed future.
    fn cached_plan(&self, _payload: &[u8]) -> Option<Result<(Arc<Plan>, usize), BadRecord>> {
        None
    }

    /// The plan of every payload, when there is only one and the body is the whole payload (a
    /// fixed `.avsc`): the writer then skips [`plan_for`](Self::plan_for) per record.
    fn fixed_plan(&self) -> Option<&Arc<Plan>> {
        None
    }

    /// The dead-letter class of a record that cannot be read in the format this source
    /// declares (a tombstone), or `None` when each schema id's registered type decides.
    fn malformed_class(&self) -> Option<&'static str> {
        None
    }

    /// An AppendRows response carried `updated_schema`: the table changed under the connection.
    fn table_schema_updated(&self, _schema: &ProtoTableSchema) {}
}

/// The plan of a Kafka key and where its body starts inside the key.
pub type KeyLookup<'a> =
    Pin<Box<dyn Future<Output = Result<(Arc<KeyPlan>, usize), PlanLookupError>> + Send + 'a>>;

/// Where the plans of Kafka keys come from, for the columns `set … from: key, field:` fills
/// (docs/mapping.md, "Transforms"): by the key's schema id, or one plan of schemaless JSON.
pub trait KeySource: Send + Sync {
    fn key_plan<'a>(&'a self, key: &'a [u8]) -> KeyLookup<'a>;
}

/// The table a writer appends to: its topic's route.
pub struct WriterRoute {
    /// `projects/{p}/datasets/{d}/tables/{t}`.
    pub table: String,
    /// Short table name for metric labels.
    pub table_label: String,
    pub plans: Arc<dyn PlanSource>,
    /// A CDC route: records are changes by primary key (docs/cdc.md).
    pub cdc: Option<Arc<dyn ChangeSource>>,
    /// The route's `filter` transforms: a record they match is committed without a row.
    pub filter: Filter,
    /// With columns set from the key's fields: the key plans.
    pub keys: Option<Arc<dyn KeySource>>,
}
