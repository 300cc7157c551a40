//! Datasets and tables: insert, read, list, patch and delete, and their replay at restart.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::persist::MetaRecord;

use super::{
    Dataset, Store, StoreError, StreamInner, StreamKind, StreamPhase, Table, TableRef, TableState,
    VisibleRows, WriteStream, new_etag, new_stream_id, now_ms,
};

impl Store {
    /// Inserts a dataset; fills in creation/modification time and etag.
    pub fn insert_dataset(&self, mut dataset: Dataset) -> Result<Dataset, StoreError> {
        let key = (dataset.project.clone(), dataset.dataset_id.clone());
        let mut datasets = self.datasets.write().expect("datasets lock");
        if datasets.contains_key(&key) {
            return Err(StoreError::DatasetExists {
                project: key.0,
                dataset: key.1,
            });
        }
        let now = now_ms();
        dataset.creation_time = now;
        dataset.last_modified_time = now;
        dataset.etag = new_etag();
        self.journal(&MetaRecord::Dataset {
            dataset: dataset.clone(),
        })?;
        datasets.insert(key, dataset.clone());
        Ok(dataset)
    }

    pub fn get_dataset(&self, project: &str, dataset: &str) -> Option<Dataset> {
        self.datasets
            .read()
            .expect("datasets lock")
            .get(&(project.to_string(), dataset.to_string()))
            .cloned()
    }

    pub(crate) fn restore_dataset(&self, dataset: Dataset) {
        self.datasets.write().expect("datasets lock").insert(
            (dataset.project.clone(), dataset.dataset_id.clone()),
            dataset,
        );
    }

    /// Deletes a dataset. With tables in it, BigQuery refuses unless `delete_contents`; then each
    /// table goes first, as `delete_table` would delete it (journalled one by one, so a restart
    /// between two of them leaves the dataset with fewer tables, never tables without a dataset).
    /// The tables lock is held throughout, so no table is created in the dataset meanwhile.
    pub fn delete_dataset(
        &self,
        project: &str,
        dataset: &str,
        delete_contents: bool,
    ) -> Result<(), StoreError> {
        let key = (project.to_string(), dataset.to_string());
        let mut tables = self.tables.write().expect("tables lock");
        if !self
            .datasets
            .read()
            .expect("datasets lock")
            .contains_key(&key)
        {
            return Err(StoreError::DatasetNotFound {
                project: key.0,
                dataset: key.1,
            });
        }
        let inside: Vec<TableRef> = tables
            .keys()
            .filter(|r| r.project == project && r.dataset == dataset)
            .cloned()
            .collect();
        if !inside.is_empty() && !delete_contents {
            return Err(StoreError::DatasetInUse {
                project: key.0,
                dataset: key.1,
            });
        }
        for r in inside {
            self.remove_table(&mut tables, &r)?;
        }
        self.journal(&MetaRecord::DatasetDelete {
            project: key.0.clone(),
            dataset: key.1.clone(),
        })?;
        self.datasets.write().expect("datasets lock").remove(&key);
        Ok(())
    }

    pub(crate) fn restore_dataset_delete(&self, project: &str, dataset: &str) {
        self.datasets
            .write()
            .expect("datasets lock")
            .remove(&(project.to_string(), dataset.to_string()));
    }

    // ----- tables -----

    /// Inserts a table into an existing dataset; fills in creation/modification time and etag.
    pub fn insert_table(&self, mut table: Table) -> Result<Table, StoreError> {
        let r = table.reference.clone();
        // The dataset is looked up under the tables lock, which `delete_dataset` holds too.
        let mut tables = self.tables.write().expect("tables lock");
        let location = self
            .get_dataset(&r.project, &r.dataset)
            .ok_or_else(|| StoreError::DatasetNotFound {
                project: r.project.clone(),
                dataset: r.dataset.clone(),
            })?
            .location;
        if tables.contains_key(&r) {
            return Err(StoreError::TableExists { table: r });
        }
        let now = now_ms();
        table.creation_time = now;
        table.last_modified_time = now;
        table.etag = new_etag();
        let uid = new_stream_id();
        self.journal(&MetaRecord::Table {
            uid: uid.clone(),
            location: location.clone(),
            table: table.clone(),
        })?;
        let state = self.new_table_state(uid, location, table.clone())?;
        tables.insert(r, state);
        Ok(table)
    }

    pub(super) fn new_table_state(
        &self,
        uid: String,
        location: String,
        table: Table,
    ) -> Result<Arc<TableState>, StoreError> {
        let state = Arc::new(TableState {
            reference: table.reference.clone(),
            uid: uid.clone(),
            meta: RwLock::new(table),
            schema_version: AtomicU64::new(0),
            deleted: AtomicBool::new(false),
            location: location.to_ascii_lowercase(),
            visible: Mutex::default(),
            default_stream: std::sync::OnceLock::new(),
        });
        let log = match &self.journal {
            Some(j) => Some(
                j.row_log(&format!("{uid}._default"))
                    .map_err(|e| StoreError::Persist(e.to_string()))?,
            ),
            None => None,
        };
        let default = Arc::new(WriteStream {
            id: "_default".into(),
            name: format!("{}/streams/_default", state.reference.path()),
            kind: StreamKind::Default,
            create_time_us: None,
            table: state.clone(),
            last_activity_ms: AtomicI64::new(now_ms()),
            expired: AtomicBool::new(false),
            inner: Mutex::new(StreamInner {
                phase: StreamPhase::Active,
                row_count: 0,
                batches: Vec::new(),
                flushed: None,
                commit_time_us: None,
                log,
            }),
        });
        let _ = state.default_stream.set(default);
        Ok(state)
    }

    pub(crate) fn restore_table(
        &self,
        uid: String,
        location: String,
        table: Table,
    ) -> Result<Arc<TableState>, StoreError> {
        let mut tables = self.tables.write().expect("tables lock");
        if let Some(existing) = tables.get(&table.reference)
            && existing.uid == uid
        {
            if existing.meta.read().expect("table lock").schema != table.schema {
                existing.schema_version.fetch_add(1, Ordering::AcqRel);
            }
            *existing.meta.write().expect("table lock") = table;
            return Ok(existing.clone());
        }
        let state = self.new_table_state(uid, location, table)?;
        tables.insert(state.reference.clone(), state.clone());
        Ok(state)
    }

    pub fn get_table(&self, r: &TableRef) -> Option<Table> {
        self.table_state(r)
            .map(|t| t.meta.read().expect("table lock").clone())
    }

    /// Tables of a dataset, by name.
    pub fn list_tables(&self, project: &str, dataset: &str) -> Vec<Table> {
        let tables = self.tables.read().expect("tables lock");
        let mut out: Vec<Table> = tables
            .iter()
            .filter(|(r, _)| r.project == project && r.dataset == dataset)
            .map(|(_, t)| t.meta.read().expect("table lock").clone())
            .collect();
        out.sort_by(|a, b| a.reference.table.cmp(&b.reference.table));
        out
    }

    pub(crate) fn table_state(&self, r: &TableRef) -> Option<Arc<TableState>> {
        self.tables.read().expect("tables lock").get(r).cloned()
    }

    /// Applies `change` to a table (the REST patch). The caller validates what may change (e.g.
    /// only new NULLABLE columns); the store bumps `lastModifiedTime`, the etag and — when the
    /// schema changed — the schema version that drives `updated_schema` on open connections.
    pub fn update_table<E>(
        &self,
        r: &TableRef,
        change: impl FnOnce(&mut Table) -> Result<(), E>,
    ) -> Result<Result<Table, E>, StoreError> {
        let state = self
            .table_state(r)
            .ok_or_else(|| StoreError::TableNotFound {
                table: r.clone(),
                entity: r.path(),
            })?;
        let mut meta = state.meta.write().expect("table lock");
        let mut next = meta.clone();
        if let Err(e) = change(&mut next) {
            return Ok(Err(e));
        }
        next.reference = meta.reference.clone();
        next.creation_time = meta.creation_time;
        next.last_modified_time = now_ms().max(meta.last_modified_time + 1);
        next.etag = new_etag();
        self.journal(&MetaRecord::Table {
            uid: state.uid.clone(),
            location: state.location.clone(),
            table: next.clone(),
        })?;
        if next.schema != meta.schema {
            state.schema_version.fetch_add(1, Ordering::AcqRel);
        }
        *meta = next.clone();
        Ok(Ok(next))
    }

    /// Deletes a table with its rows and streams.
    pub fn delete_table(&self, r: &TableRef) -> Result<(), StoreError> {
        let mut tables = self.tables.write().expect("tables lock");
        self.remove_table(&mut tables, r)
    }

    fn remove_table(
        &self,
        tables: &mut HashMap<TableRef, Arc<TableState>>,
        r: &TableRef,
    ) -> Result<(), StoreError> {
        let Some(state) = tables.get(r).cloned() else {
            return Err(StoreError::TableNotFound {
                table: r.clone(),
                entity: r.path(),
            });
        };
        self.journal(&MetaRecord::TableDelete {
            uid: state.uid.clone(),
        })?;
        tables.remove(r);
        state.deleted.store(true, Ordering::Release);
        self.streams
            .write()
            .expect("streams lock")
            .retain(|_, s| !Arc::ptr_eq(&s.table, &state));
        Ok(())
    }

    pub(crate) fn restore_table_delete(&self, uid: &str) {
        let mut tables = self.tables.write().expect("tables lock");
        let found = tables
            .iter()
            .find(|(_, t)| t.uid == uid)
            .map(|(r, t)| (r.clone(), t.clone()));
        if let Some((r, state)) = found {
            tables.remove(&r);
            state.deleted.store(true, Ordering::Release);
            drop(tables);
            self.streams
                .write()
                .expect("streams lock")
                .retain(|_, s| !Arc::ptr_eq(&s.table, &state));
        }
    }

    /// The number of visible rows of a table.
    pub fn visible_row_count(&self, r: &TableRef) -> Result<u64, StoreError> {
        let state = self
            .table_state(r)
            .ok_or_else(|| StoreError::TableNotFound {
                table: r.clone(),
                entity: r.path(),
            })?;
        // The table's metadata first: the lock order is never visible log → table metadata.
        let table = state.meta.read().expect("table lock").clone();
        let mut visible = state.visible.lock().expect("visible lock");
        if visible.cdc {
            return Ok(visible.applied_rows(&table).len() as u64);
        }
        Ok(visible.total)
    }

    /// Up to `max` visible rows from index `start`, in the order they became visible
    /// (`tabledata.list`'s `startIndex`/`maxResults`).
    pub fn read_visible_rows(
        &self,
        r: &TableRef,
        start: u64,
        max: usize,
    ) -> Result<VisibleRows, StoreError> {
        let state = self
            .table_state(r)
            .ok_or_else(|| StoreError::TableNotFound {
                table: r.clone(),
                entity: r.path(),
            })?;
        // The table's metadata first: the lock order is never visible log → table metadata.
        let table = state.meta.read().expect("table lock").clone();
        let mut visible = state.visible.lock().expect("visible lock");
        if visible.cdc {
            let rows = visible.applied_rows(&table);
            let from = (start.min(rows.len() as u64)) as usize;
            return Ok(VisibleRows {
                total: rows.len() as u64,
                rows: rows[from..].iter().take(max).cloned().collect(),
            });
        }
        Ok(VisibleRows {
            total: visible.total,
            rows: visible.page(start, max),
        })
    }
}
