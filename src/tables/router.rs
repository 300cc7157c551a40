//! Routing: which table each topic is written to, and what a table needs once per process —
//! its reference and checkpoint fingerprint, the group's marker as read, the plan source of its
//! schema, the `resolve` columns. A topic's route is resolved once, before the recovery of its
//! first assigned partition starts, and kept for the life of the process: a partition's stream
//! names and checkpoint fingerprint must not change under it.
//!
//! Resolving a route reads the table, or creates it (`create_table`), so a table that cannot be
//! written fails the partition before anything is consumed. An explicit topic list is resolved
//! at startup; a pattern subscription resolves a topic when its first partition is assigned.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail};
use kbq_core::metadata::TableFingerprint;
use kbq_core::model::RoutedTable;

use super::evolution::SchemaEvolution;
use super::key_plans::{self, KeyPlans};
use super::plans::{FixedPlan, RegistryPlans};
use crate::bigquery::rest_client::{RestClient, TableReference};
use crate::bigquery::write_client::WriteClient;
use crate::config::{self, Config, TopicRoute, defaults};
use crate::ops::metrics::Metrics;
use crate::registry::{RegistryConfig, SchemaRegistry};
use crate::writer::change_source::ChangeSource;
use crate::writer::plan_source::{KeySource, PlanSource, WriterRoute};
use kbq_core::table_schema::TableSchema;
use kbq_transcode::transforms::{Filter, KeyFormat};
use kbq_transcode::{AvroSchema, DeriveOptions, MetadataColumns, Plan};

use super::cdc;
use super::ensure::ensure_table;
use super::settings::{plan_options, registry_input, table_topics};

/// Where the `resolve` recovery finds a partition's rows: the table's metadata columns.
#[derive(Debug, Clone)]
pub struct ResolveColumns {
    pub topic: Option<String>,
    pub partition: String,
    pub offset: String,
}

/// The destination of one topic.
pub struct Route {
    /// `routes[i]`, or `None` for the top-level `bigquery` settings.
    pub index: Option<usize>,
    pub table: TableReference,
    /// The fingerprint every checkpoint of the table's partitions carries.
    pub fingerprint: TableFingerprint,
    /// This group's marker was on the table when it was read (the group committed before).
    pub marked: bool,
    pub writer: Arc<WriterRoute>,
    /// The metadata columns the `resolve` recovery queries; `None` without partition/offset.
    pub resolve: Option<ResolveColumns>,
}

impl Route {
    /// What the checkpoint protocol needs to know of the table.
    pub fn routed_table(&self) -> RoutedTable {
        RoutedTable {
            table: self.fingerprint,
            marked: self.marked,
        }
    }

    /// The Storage Write API name of one of the table's streams.
    pub fn stream_name(&self, stream: &impl std::fmt::Display) -> String {
        format!("{}/streams/{}", self.writer.table, stream)
    }

    /// The table id, for metric labels.
    pub fn label(&self) -> &str {
        &self.writer.table_label
    }
}

/// Resolves topics to routes and keeps them for the life of the process.
pub struct Router {
    config: Arc<Config>,
    rest: RestClient,
    client: WriteClient,
    metrics: Arc<Metrics>,
    group_label: String,
    topics: Mutex<HashMap<String, Arc<Route>>>,
    /// Routes by table resource name: topics of one table share its plans and marker.
    tables: Mutex<HashMap<String, Arc<Route>>>,
    /// One resolution at a time per table: two topics of one table create it and compile its
    /// plans once, and a table that keeps failing (retried for about 75 s) does not hold up
    /// the others.
    resolving: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The process's one registry client, made at the first route that needs it, so that its
    /// cache by id serves every table (a schema id is fetched once, not once per table).
    registry: Mutex<Option<Arc<SchemaRegistry>>>,
    /// Tables are read, never created: a table `create_table` would create is built in memory,
    /// with the schema it would be created with (`check`'s dry run).
    creates: Creates,
}

/// Whether resolving a route may create its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Creates {
    Tables,
    Nothing,
}

impl Router {
    pub fn new(
        config: Arc<Config>,
        rest: RestClient,
        client: WriteClient,
        metrics: Arc<Metrics>,
        group_label: String,
    ) -> Self {
        Router {
            config,
            rest,
            client,
            metrics,
            group_label,
            topics: Mutex::new(HashMap::new()),
            tables: Mutex::new(HashMap::new()),
            resolving: Mutex::new(HashMap::new()),
            registry: Mutex::new(None),
            creates: Creates::Tables,
        }
    }

    /// This router creates no table and no dataset: a missing table that `create_table` would
    /// create resolves to the table it would create, so its plans compile against the schema
    /// `run` would give it.
    pub fn creating_nothing(mut self) -> Self {
        self.creates = Creates::Nothing;
        self
    }

    /// The shared registry client; `None` without `schema_registry`.
    fn registry(&self) -> anyhow::Result<Option<Arc<SchemaRegistry>>> {
        let Some(sr) = &self.config.schema_registry else {
            return Ok(None);
        };
        let mut shared = lock(&self.registry);
        if let Some(registry) = &*shared {
            return Ok(Some(registry.clone()));
        }
        let registry = Arc::new(
            SchemaRegistry::new(RegistryConfig::from_settings(sr)?).map_err(anyhow::Error::from)?,
        );
        *shared = Some(registry.clone());
        Ok(Some(registry))
    }

    /// Installs `route` for `topic` as if it was resolved (the deterministic simulation,
    /// `crates/kbq-sim`, has no schema source or table read to resolve it from).
    #[cfg(feature = "testing")]
    pub fn insert_resolved(&self, topic: &str, route: Arc<Route>) {
        lock(&self.tables).insert(route.table.resource_name(), route.clone());
        lock(&self.topics).insert(topic.to_string(), route);
    }

    /// The route of `topic` if it was resolved.
    pub fn cached(&self, topic: &str) -> Option<Arc<Route>> {
        lock(&self.topics).get(topic).cloned()
    }

    /// The route of the table with this fingerprint (for the group marker).
    pub fn by_fingerprint(&self, fingerprint: TableFingerprint) -> Option<Arc<Route>> {
        lock(&self.tables)
            .values()
            .find(|r| r.fingerprint == fingerprint)
            .cloned()
    }

    /// The table label that marks "this group committed a checkpoint for this table".
    pub fn group_label(&self) -> &str {
        &self.group_label
    }

    /// The route of `topic`: its table read (or created) and its plan source built.
    pub async fn resolve(&self, topic: &str) -> anyhow::Result<Arc<Route>> {
        if let Some(route) = self.cached(topic) {
            return Ok(route);
        }
        let settings = self.config.route_for(topic);
        // A template filled from a group that took no part in the match leaves an empty id.
        if settings.table.is_empty() || settings.dataset.is_empty() {
            bail!(
                "topic {topic} ({}) is routed to `{}`: a template group matched nothing in the topic",
                settings.path,
                settings.qualified_table()
            );
        }
        let table = TableReference::new(settings.project, &settings.dataset, &settings.table);
        let one = lock(&self.resolving)
            .entry(table.resource_name())
            .or_default()
            .clone();
        let _one = one.lock().await;
        if let Some(route) = self.cached(topic) {
            return Ok(route);
        }
        let existing = lock(&self.tables).get(&table.resource_name()).cloned();
        let route = match existing {
            Some(route) if route.index == settings.route => route,
            Some(route) => bail!(
                "topic {topic} ({}) is routed to table {} that {} writes with other settings",
                settings.path,
                settings.qualified_table(),
                route
                    .index
                    .map_or("bigquery".to_string(), |i| format!("routes[{i}]"))
            ),
            None => {
                let route = Arc::new(self.build(topic, &settings, table).await?);
                lock(&self.tables).insert(route.table.resource_name(), route.clone());
                route
            }
        };
        self.metrics
            .preregister(route.label(), std::slice::from_ref(&topic.to_string()));
        if route.writer.cdc.is_some() {
            self.metrics.preregister_cdc(route.label());
        }
        lock(&self.topics).insert(topic.to_string(), route.clone());
        tracing::info!(topic, table = %route.table.resource_name(), route = %settings.path, "topic routed");
        Ok(route)
    }

    /// The route of `topic`: its table read or created, checked against a CDC route, and the
    /// plan source its writers transcode with.
    async fn build(
        &self,
        topic: &str,
        settings: &TopicRoute<'_>,
        table_ref: TableReference,
    ) -> anyhow::Result<Route> {
        let fixed_schema = match settings.schema_file {
            Some(path) => Some(
                AvroSchema::read_avsc(path)
                    .map_err(|e| anyhow!("{}.avro.schema_file: {e}", settings.path))?,
            ),
            None => None,
        };
        let registry = self.registry()?;
        // A CDC route without a configured primary key takes it from the Kafka key's schema.
        let keyed = match settings.cdc {
            Some(c) => {
                Some(cdc::with_key(&self.config, c, registry.as_deref(), topic, settings).await?)
            }
            None => None,
        };
        let keyed_settings = TopicRoute {
            cdc: keyed.as_ref(),
            ..settings.clone()
        };
        let settings = &keyed_settings;
        let table = ensure_table(
            &self.config,
            settings,
            topic,
            (&self.rest, self.creates),
            &table_ref,
            fixed_schema.as_ref(),
            registry.as_deref(),
        )
        .await?;
        let change_plans = match settings.cdc {
            Some(c) => {
                cdc::check_table(&table, c, &table_ref, settings)?;
                let input = cdc::input(
                    &self.config,
                    settings,
                    registry.clone(),
                    fixed_schema.as_ref(),
                )?;
                let plans = cdc::plans(c, input, &table.schema, plan_options(settings))
                    .map_err(|e| anyhow!("{}.cdc: table {}: {e}", settings.path, settings.label))?;
                Some(Arc::new(plans))
            }
            None => None,
        };
        let keys = key_source(&self.config, settings, &table.schema, registry.as_ref())?;
        let plans: Arc<dyn PlanSource> = match &change_plans {
            Some(change_plans) => change_plans.clone(),
            None => {
                let fixed_schema = fixed_schema.as_ref();
                self.plan_source(settings, &table_ref, &table.schema, registry, fixed_schema)?
            }
        };
        Ok(Route {
            index: settings.route,
            fingerprint: TableFingerprint::of_table_path(&table_ref.resource_name()),
            marked: table.labels.contains_key(&self.group_label),
            writer: Arc::new(WriterRoute {
                table: table_ref.resource_name(),
                table_label: settings.label.clone(),
                plans,
                cdc: change_plans.map(|p| p as Arc<dyn ChangeSource>),
                filter: Filter::new(settings.transforms),
                keys,
            }),
            table: table_ref,
            resolve: resolve_columns(settings.metadata_columns),
        })
    }

    /// The plans of a route that is not CDC: one fixed plan (a fixed Avro schema, or schemaless
    /// JSON), or plans per registered writer schema, with schema evolution.
    fn plan_source(
        &self,
        settings: &TopicRoute<'_>,
        table_ref: &TableReference,
        table_schema: &TableSchema,
        registry: Option<Arc<SchemaRegistry>>,
        fixed_schema: Option<&AvroSchema>,
    ) -> anyhow::Result<Arc<dyn PlanSource>> {
        let plan_options = plan_options(settings);
        Ok(match (registry, fixed_schema) {
            (_, Some(schema)) => Arc::new(
                FixedPlan::new(schema, table_schema, &plan_options).map_err(|e| {
                    anyhow!(
                        "the avro schema of {} does not fit table {}: {e}",
                        settings.path,
                        settings.label
                    )
                })?,
            ),
            (_, None) if settings.format == Some(config::InputFormat::Json) => {
                Arc::new(FixedPlan::from_plan(
                    Plan::compile_json(None, false, table_schema, &plan_options).map_err(|e| {
                        anyhow!(
                            "schemaless json of {} cannot be written to table {}: {e}",
                            settings.path,
                            settings.label
                        )
                    })?,
                ))
            }
            (Some(registry), None) => {
                let evolution = Some(SchemaEvolution {
                    update: settings.schema_update,
                    rest: self.rest.clone(),
                    client: self.client.clone(),
                    table: table_ref.clone(),
                    derive: DeriveOptions {
                        map_mode: settings.map_mode,
                        metadata: MetadataColumns::default(),
                        transforms: settings.transforms.to_vec(),
                    },
                    metadata_columns: config::named_columns(settings.metadata_columns)
                        .into_iter()
                        .map(|(_, column)| column.to_string())
                        .collect(),
                    visible_timeout: defaults::SCHEMA_UPDATE_VISIBLE_TIMEOUT,
                    poll_interval: defaults::SCHEMA_UPDATE_POLL_INTERVAL,
                });
                let mut input = registry_input(&self.config, settings.format);
                input.table_topics = table_topics(&self.config, settings);
                Arc::new(RegistryPlans::new(
                    registry,
                    input,
                    table_schema.clone(),
                    plan_options,
                    self.metrics.clone(),
                    evolution,
                    settings.qualified_table(),
                ))
            }
            (None, None) => bail!(
                "{}: {} needs schema_registry",
                settings.path,
                settings
                    .format
                    .map_or("the registry's format", |f| f.as_str())
            ),
        })
    }
}

/// The key plans of a route whose transforms set columns from the key's fields, read as their
/// `key_format` declares.
fn key_source(
    config: &Config,
    settings: &TopicRoute<'_>,
    table: &TableSchema,
    registry: Option<&Arc<SchemaRegistry>>,
) -> anyhow::Result<Option<Arc<dyn KeySource>>> {
    let options = plan_options(settings);
    let plans = match (key_plans::key_format(settings.transforms), registry) {
        (None, _) => return Ok(None),
        (Some(KeyFormat::Json), _) => KeyPlans::json(table, &options).map_err(|e| {
            anyhow!(
                "{}.transforms: the kafka keys cannot be written to table {}: {e}",
                settings.path,
                settings.label
            )
        })?,
        (Some(KeyFormat::SchemaRegistry), Some(registry)) => KeyPlans::registry(
            registry.clone(),
            registry_input(config, None).message_indexes,
            table,
            options,
        ),
        (Some(KeyFormat::SchemaRegistry), None) => bail!(
            "{}.transforms: key_format schema_registry needs schema_registry",
            settings.path
        ),
    };
    Ok(Some(Arc::new(plans)))
}

/// The columns `recovery.lost_offsets: resolve` reads a partition's end from, when the route
/// writes them.
fn resolve_columns(cols: &kbq_transcode::MetadataColumns) -> Option<ResolveColumns> {
    match (&cols.partition, &cols.offset) {
        (Some(partition), Some(offset)) => Some(ResolveColumns {
            topic: cols.topic.clone(),
            partition: partition.clone(),
            offset: offset.clone(),
        }),
        _ => None,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
