//! The port through which a CDC route's writer gets its change plans (docs/cdc.md): what
//! `tables/` implements for a route with `cdc:`, so that the writer knows neither the registry
//! nor where the plans are cached, as [`PlanSource`](super::plan_source::PlanSource) does for an
//! ordinary route.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use kbq_transcode::Plan;
use kbq_transcode::change::{ChangeColumns, ChangeFormat, ChangeShape, ConnectEnvelope};

use super::plan_source::PlanLookupError;

/// A writer schema's change shape and row plan, and how its rows get the pseudo-columns.
pub struct ChangePlan {
    pub shape: ChangeShape,
    pub plan: Arc<Plan>,
    pub columns: ChangeColumns,
}

/// The plan of a Kafka key that writes a key-only DELETE row.
#[derive(Clone)]
pub struct KeyPlan {
    pub plan: Arc<Plan>,
    pub columns: ChangeColumns,
    /// Schemaless JSON keys: whether they come in Kafka Connect's envelope.
    pub envelope: ConnectEnvelope,
}

/// A route's CDC settings, as the writer applies them.
#[derive(Debug, Clone)]
pub struct ChangeRules {
    pub format: ChangeFormat,
    /// A dotted path to the record's source position (the sequence number's second section).
    pub source_field: Option<String>,
    /// `upsert_delete`: deletes and tombstones remove rows; otherwise they are ignored.
    pub deletes: bool,
    /// The first section of every sequence number.
    pub epoch: u64,
    /// Schemaless JSON: Kafka Connect's envelope around keys and values (`schemas_enable`).
    pub json_envelope: ConnectEnvelope,
}

/// A change plan found for a payload, and where the payload's body starts in it.
pub type ChangeLookup<'a, T> =
    Pin<Box<dyn Future<Output = Result<(Arc<T>, usize), PlanLookupError>> + Send + 'a>>;

/// Where a CDC route's plans come from.
pub trait ChangeSource: Send + Sync {
    /// The route's CDC settings.
    fn rules(&self) -> &ChangeRules;

    /// The change plan of a record's value.
    fn change_plan<'a>(&'a self, value: &'a [u8]) -> ChangeLookup<'a, ChangePlan>;

    /// The plan of a record's Kafka key that writes a key-only DELETE row (a tombstone, or a
    /// delete without a row).
    fn delete_plan<'a>(&'a self, key: &'a [u8]) -> ChangeLookup<'a, KeyPlan>;
}
