//! The durable embedded store of `mcp-tasks serve`, on [redb](https://docs.rs/redb): a
//! maintained, pure-Rust, ACID key-value store in one file. A commit is durable (fsync) before
//! `create`/`update` return, which is what lets `CreateTaskResult` go out only once the task
//! would survive a crash.
//!
//! Three tables, written in one transaction: `tasks` (key → JSON record), `active` (keys of
//! non-terminal tasks, for recovery at start-up and the sweep) and `expiry` (expiry time, key),
//! so neither recovery nor purging scans every task.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::{StoreError, TaskKey, TaskStore, decode, encode, key, split_key};
use crate::task::TaskRecord;

const TASKS: TableDefinition<&str, &[u8]> = TableDefinition::new("tasks");
const ACTIVE: TableDefinition<&str, ()> = TableDefinition::new("active");
const EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiry");

/// A redb file holding every task of this process. redb locks the file, so a second process
/// on the same data directory fails to open it instead of corrupting it.
#[derive(Clone)]
pub struct EmbeddedStore {
    db: Arc<Database>,
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl EmbeddedStore {
    /// Opens (or creates) `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let db = Database::create(path).map_err(backend)?;
        let txn = db.begin_write().map_err(backend)?;
        {
            txn.open_table(TASKS).map_err(backend)?;
            txn.open_table(ACTIVE).map_err(backend)?;
            txn.open_table(EXPIRY).map_err(backend)?;
        }
        txn.commit().map_err(backend)?;
        Ok(Self { db: Arc::new(db) })
    }

    /// Runs a blocking write transaction off the async threads.
    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_write().map_err(backend)?;
            let out = f(&txn)?;
            txn.commit().map_err(backend)?;
            Ok(out)
        })
        .await
        .map_err(backend)?
    }

    fn read_one(&self, k: &str) -> Result<Option<TaskRecord>, StoreError> {
        let txn = self.db.begin_read().map_err(backend)?;
        let table = txn.open_table(TASKS).map_err(backend)?;
        match table.get(k).map_err(backend)? {
            Some(v) => Ok(Some(decode(v.value())?)),
            None => Ok(None),
        }
    }
}

/// Writes `task` and keeps the two index tables in step with it.
fn put(
    txn: &redb::WriteTransaction,
    k: &str,
    task: &TaskRecord,
    bytes: &[u8],
    previous: Option<&TaskRecord>,
) -> Result<(), StoreError> {
    let mut tasks = txn.open_table(TASKS).map_err(backend)?;
    let mut active = txn.open_table(ACTIVE).map_err(backend)?;
    let mut expiry = txn.open_table(EXPIRY).map_err(backend)?;
    tasks.insert(k, bytes).map_err(backend)?;
    if task.status.is_terminal() {
        active.remove(k).map_err(backend)?;
    } else {
        active.insert(k, ()).map_err(backend)?;
    }
    if let Some(at) = previous.and_then(TaskRecord::expires_at_ms) {
        expiry.remove((at, k)).map_err(backend)?;
    }
    if let Some(at) = task.expires_at_ms() {
        expiry.insert((at, k), ()).map_err(backend)?;
    }
    Ok(())
}

#[async_trait]
impl TaskStore for EmbeddedStore {
    async fn create(&self, task: &TaskRecord) -> Result<(), StoreError> {
        let bytes = encode(task)?;
        let task = task.clone();
        self.write(move |txn| {
            let k = key(&task.tenant, &task.task_id);
            let exists = txn
                .open_table(TASKS)
                .map_err(backend)?
                .get(k.as_str())
                .map_err(backend)?
                .is_some();
            if exists {
                return Err(StoreError::Conflict);
            }
            put(txn, &k, &task, &bytes, None)
        })
        .await
    }

    async fn get(&self, tenant: &str, task_id: &str) -> Result<Option<TaskRecord>, StoreError> {
        self.read_one(&key(tenant, task_id))
    }

    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        let mut next = task.clone();
        next.version += 1;
        let bytes = encode(&next)?;
        self.write(move |txn| {
            let k = key(&next.tenant, &next.task_id);
            let stored = {
                let tasks = txn.open_table(TASKS).map_err(backend)?;
                let guard = tasks.get(k.as_str()).map_err(backend)?;
                match guard {
                    Some(v) => decode(v.value())?,
                    None => return Err(StoreError::Conflict),
                }
            };
            if stored.version + 1 != next.version || stored.status.is_terminal() {
                return Err(StoreError::Conflict);
            }
            put(txn, &k, &next, &bytes, Some(&stored))?;
            Ok(next.version)
        })
        .await
    }

    async fn list_active(&self, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        let txn = self.db.begin_read().map_err(backend)?;
        let table = txn.open_table(ACTIVE).map_err(backend)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(backend)?.take(limit) {
            let (k, _) = entry.map_err(backend)?;
            out.extend(split_key(k.value()));
        }
        Ok(out)
    }

    async fn list_expired(&self, now_ms: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        let txn = self.db.begin_read().map_err(backend)?;
        let table = txn.open_table(EXPIRY).map_err(backend)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(backend)?.take(limit) {
            let (k, _) = entry.map_err(backend)?;
            let (at, k) = k.value();
            if at > now_ms {
                break;
            }
            out.extend(split_key(k));
        }
        Ok(out)
    }

    async fn delete(&self, tenant: &str, task_id: &str) -> Result<(), StoreError> {
        let k = key(tenant, task_id);
        self.write(move |txn| {
            let stored = {
                let tasks = txn.open_table(TASKS).map_err(backend)?;
                let guard = tasks.get(k.as_str()).map_err(backend)?;
                match guard {
                    Some(v) => decode(v.value())?,
                    None => return Ok(()),
                }
            };
            txn.open_table(TASKS)
                .map_err(backend)?
                .remove(k.as_str())
                .map_err(backend)?;
            txn.open_table(ACTIVE)
                .map_err(backend)?
                .remove(k.as_str())
                .map_err(backend)?;
            if let Some(at) = stored.expires_at_ms() {
                txn.open_table(EXPIRY)
                    .map_err(backend)?
                    .remove((at, k.as_str()))
                    .map_err(backend)?;
            }
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{TaskStatus, new_task_id};
    use serde_json::json;

    #[tokio::test]
    async fn embedded_store_passes_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        let n = std::sync::atomic::AtomicUsize::new(0);
        let dir_path = dir.path().to_owned();
        super::super::contract::run_all(|| {
            let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let path = dir_path.join(format!("t{i}.redb"));
            async move { EmbeddedStore::open(&path).unwrap() }
        })
        .await;
    }

    #[tokio::test]
    async fn records_and_indexes_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.redb");
        let task = TaskRecord::new(
            "t",
            new_task_id(),
            "x",
            json!({"a": 1}),
            None,
            1000,
            json!({}),
        );
        {
            let store = EmbeddedStore::open(&path).unwrap();
            store.create(&task).await.unwrap();
        }
        let store = EmbeddedStore::open(&path).unwrap();
        let got = store.get("t", &task.task_id).await.unwrap().unwrap();
        assert_eq!(got, task);
        assert_eq!(store.list_active(10).await.unwrap().len(), 1);
        let mut done = got.clone();
        done.complete(json!({"content": []})).unwrap();
        store.update(&done).await.unwrap();
        let got = store.get("t", &task.task_id).await.unwrap().unwrap();
        assert_eq!(got.status, TaskStatus::Completed);
        assert!(store.list_active(10).await.unwrap().is_empty());
    }
}
