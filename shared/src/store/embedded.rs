//! The durable embedded store of `mcp-tasks serve`, on [redb](https://docs.rs/redb): a
//! maintained, pure-Rust, ACID key-value store in one file. A commit is durable (fsync) before
//! `create`/`update` return, which is what lets `CreateTaskResult` go out only once the task
//! would survive a crash.
//!
//! Four tables, written in one transaction: `tasks` (key → JSON record), `arguments` (key →
//! the task's JSON arguments, written at creation and removed with the task: a checkpoint
//! rewrites the record only), `active` (keys of non-terminal tasks, for recovery at start-up
//! and the sweep) and `expiry` (expiry time, key), so neither recovery nor purging scans every
//! task.
//!
//! Reads of single records (`get`, what every `tasks/get` and every worker check does) are
//! served from a write-through cache of decoded records when they can be: see [`ReadCache`].

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::{mpsc, oneshot};

mod cache;
use cache::{CACHE_BYTES, ReadCache};
#[cfg(test)]
use cache::{CACHE_RECORDS, CacheState};

mod open;
pub use open::OpenError;

mod places;
mod writer;
use writer::run_writer;

use serde_json::Value;

use super::{
    StoreError, TaskKey, TaskRef, TaskStore, decode, encode, encode_arguments, key, key_at, key_of,
    split_key, tenant_prefix,
};
use crate::task::TaskRecord;
use crate::tenant::Tenant;

const TASKS: TableDefinition<&str, &[u8]> = TableDefinition::new("tasks");
const ARGUMENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("arguments");
const ACTIVE: TableDefinition<&str, ()> = TableDefinition::new("active");
const EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiry");

/// Most writes committed together in one transaction.
const MAX_BATCH: usize = 512;

/// A redb file holding every task of this process. redb locks the file, so a second process
/// on the same data directory fails to open it instead of corrupting it.
///
/// Writes go through one writer thread that commits them in batches (group commit): every
/// write is still durable (fsync) before its call returns, but a thousand concurrent jobs
/// share a handful of fsyncs instead of queueing for one each. Each write's condition is
/// checked inside the batch's transaction, in arrival order, so batching changes no outcome.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Arc<Database>,
    writes: Option<mpsc::UnboundedSender<Pending>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    cache: Arc<ReadCache>,
}

/// The memory redb may use for its own page cache. Its default, 1 GiB, is a size a growing
/// database would let the process reach and keep; the pages needed hot — the trees' inner
/// pages, the `active` index — fit in a fraction of this, the records themselves are served
/// from [`ReadCache`], and a miss is a read the operating system's page cache answers.
const REDB_CACHE_BYTES: usize = 32 * 1024 * 1024;

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel stops the writer; joining it releases the file lock.
        self.writes.take();
        if let Some(h) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
    }
}

impl Op {
    /// The composite key the operation writes.
    fn key(&self) -> String {
        match self {
            Op::Create(t, ..) | Op::Update(t, _) => key(t.key()),
            Op::Delete(k) => k.clone(),
        }
    }
}

/// What a [`Op::Create`] answers: stored, or not (its tenant holds its places already).
const CREATED: u64 = 1;
const FULL: u64 = 0;

enum Op {
    /// The record and its encoded form, the encoded arguments, and the most places its tenant
    /// may hold for it to be stored.
    Create(TaskRecord, Vec<u8>, Vec<u8>, usize),
    /// The record as it should be stored (its version already bumped).
    Update(TaskRecord, Vec<u8>),
    Delete(String),
}

struct Pending {
    op: Op,
    reply: oneshot::Sender<Result<u64, StoreError>>,
}

/// A failure of the database, its source kept.
fn backend(e: impl Into<super::BoxError>) -> StoreError {
    StoreError::backend_from("the embedded store failed", e)
}

impl EmbeddedStore {
    /// Opens (or creates) `path`, refusing a damaged file (see [`OpenError`]).
    pub fn open(path: &Path) -> Result<Self, OpenError> {
        Self::open_with_cache(path, CACHE_BYTES, true)
    }

    /// Opens `path`, which must hold a database: never creates one (an empty file is refused
    /// as damaged, a missing one as [`OpenError::Failed`]).
    pub fn open_existing(path: &Path) -> Result<Self, OpenError> {
        Self::open_with_cache(path, CACHE_BYTES, false)
    }

    /// Opens `path` with a read cache of at most `cache_bytes` (tests make it small).
    fn open_with_cache(path: &Path, cache_bytes: usize, create: bool) -> Result<Self, OpenError> {
        let db = open::database(path, create)?;
        let tables = || {
            let txn = db.begin_write().map_err(backend)?;
            {
                txn.open_table(TASKS).map_err(backend)?;
                txn.open_table(ARGUMENTS).map_err(backend)?;
                txn.open_table(ACTIVE).map_err(backend)?;
                txn.open_table(EXPIRY).map_err(backend)?;
            }
            places::ensure(&txn)?;
            txn.commit().map_err(backend)
        };
        tables().map_err(|e| OpenError::failed(path, e))?;
        let db = Arc::new(db);
        let (tx, rx) = mpsc::unbounded_channel();
        let writer_db = db.clone();
        let cache = Arc::new(ReadCache::new(cache_bytes));
        let writer_cache = cache.clone();
        let writer = std::thread::Builder::new()
            .name("redb-writer".into())
            .spawn(move || run_writer(&writer_db, &writer_cache, rx))
            .map_err(|e| OpenError::failed(path, backend(e)))?;
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                writes: Some(tx),
                writer: Mutex::new(Some(writer)),
                cache,
            }),
        })
    }

    async fn write(&self, op: Op) -> Result<u64, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.inner
            .writes
            .as_ref()
            .ok_or_else(|| StoreError::backend("store closed"))?
            .send(Pending { op, reply })
            .map_err(|_| StoreError::backend("store writer stopped"))?;
        rx.await
            .map_err(|_| StoreError::backend("store writer stopped"))?
    }

    /// One record: from the cache, or read and (when that is safe) cached; see [`ReadCache`].
    fn read_one(&self, k: &str) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self.read_shared(k)?.map(Arc::unwrap_or_clone))
    }

    /// [`Self::read_one`], as the cache holds it: no copy of a cached record.
    fn read_shared(&self, k: &str) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        let seen = {
            let st = self.inner.cache.lock();
            if let Some(c) = st.records.get(k) {
                return Ok(Some(c.record.clone()));
            }
            st.seq
        };
        let txn = self.inner.db.begin_read().map_err(backend)?;
        let table = txn.open_table(TASKS).map_err(backend)?;
        let Some(v) = table.get(k).map_err(backend)? else {
            return Ok(None);
        };
        let bytes = v.value();
        // As the DynamoDB store does: a record this release cannot decode (a downgrade past a
        // release that added a field or status, a hand edit), or that names another key, is
        // logged with its key (never its content) and read as absent — "unknown task" to a
        // client, skipped by the sweep — never trusted or answered with -32603.
        let record = match decode(bytes) {
            Ok(t) if key(t.key()) == k => t,
            Ok(_) => {
                tracing::error!(key = k, "embedded.record_key_mismatch");
                return Ok(None);
            }
            Err(_) => {
                tracing::error!(key = k, "embedded.undecodable_record");
                return Ok(None);
            }
        };
        let record = Arc::new(record);
        let mut st = self.inner.cache.lock();
        if st.seq == seen && !st.pending.contains(k) && !st.records.contains_key(k) {
            st.put(k.to_owned(), record.clone(), bytes.len());
        }
        Ok(Some(record))
    }
}

#[async_trait]
impl TaskStore for EmbeddedStore {
    async fn create_within(
        &self,
        task: &TaskRecord,
        arguments: &Value,
        max_active: usize,
    ) -> Result<bool, StoreError> {
        let bytes = encode(task)?;
        let arguments = encode_arguments(arguments)?;
        let op = Op::Create(task.clone(), bytes, arguments, max_active);
        Ok(self.write(op).await? == CREATED)
    }

    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        self.read_one(&key(id))
    }

    async fn get_shared(&self, id: TaskRef<'_>) -> Result<Option<Arc<TaskRecord>>, StoreError> {
        self.read_shared(&key(id))
    }

    fn cached(&self, id: TaskRef<'_>) -> Option<Arc<TaskRecord>> {
        let st = self.inner.cache.lock();
        st.records.get(&key(id)).map(|c| c.record.clone())
    }

    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        let txn = self.inner.db.begin_read().map_err(backend)?;
        let table = txn.open_table(ARGUMENTS).map_err(backend)?;
        match table.get(key(id).as_str()).map_err(backend)? {
            Some(v) => serde_json::from_slice(v.value()).map(Some).map_err(backend),
            None => Ok(None),
        }
    }

    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        let mut next = task.clone();
        next.version += 1;
        let bytes = encode(&next)?;
        self.write(Op::Update(next, bytes)).await
    }

    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError> {
        let txn = self.inner.db.begin_read().map_err(backend)?;
        let table = txn.open_table(ACTIVE).map_err(backend)?;
        let after = after.map(key_of);
        let range = match &after {
            Some(a) => table.range::<&str>(a.as_str()..),
            None => table.range::<&str>(..),
        }
        .map_err(backend)?;
        let mut out = Vec::new();
        for entry in range {
            let (k, _) = entry.map_err(backend)?;
            if after.as_deref() == Some(k.value()) {
                continue;
            }
            out.extend(split_key(k.value()));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    async fn list_tenant_active(
        &self,
        tenant: &Tenant,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        use std::ops::Bound;
        // A prefix range scan of the `active` table: the tenant's keys are contiguous and in
        // task-id order. Index and records are read in one snapshot.
        let txn = self.inner.db.begin_read().map_err(backend)?;
        let active = txn.open_table(ACTIVE).map_err(backend)?;
        let tasks = txn.open_table(TASKS).map_err(backend)?;
        let prefix = tenant_prefix(tenant);
        let after = after.map(|a| key_at(tenant, a));
        let start = match &after {
            Some(a) => Bound::Excluded(a.as_str()),
            None => Bound::Included(prefix.as_str()),
        };
        let mut out = Vec::new();
        for entry in active
            .range::<&str>((start, Bound::Unbounded))
            .map_err(backend)?
        {
            if out.len() >= limit {
                break;
            }
            let (k, _) = entry.map_err(backend)?;
            let k = k.value();
            if !k.starts_with(&prefix) {
                break;
            }
            let Some(bytes) = tasks.get(k).map_err(backend)? else {
                continue;
            };
            match decode(bytes.value()) {
                Ok(t) if t.tenant == *tenant && !t.status.is_terminal() => out.push(t),
                Ok(_) => {}
                // One unreadable record must not hide the tenant's others (`get` reports it).
                Err(e) => tracing::warn!(error = %e, "skipping an undecodable task record"),
            }
        }
        Ok(out)
    }

    async fn count_tenant_active(
        &self,
        tenant: &Tenant,
        at_most: usize,
    ) -> Result<usize, StoreError> {
        // The tenant's keys in the `active` table, no record read.
        let txn = self.inner.db.begin_read().map_err(backend)?;
        let active = txn.open_table(ACTIVE).map_err(backend)?;
        let prefix = tenant_prefix(tenant);
        let mut n = 0;
        for entry in active.range::<&str>(prefix.as_str()..).map_err(backend)? {
            let (k, _) = entry.map_err(backend)?;
            if n >= at_most || !k.value().starts_with(&prefix) {
                break;
            }
            n += 1;
        }
        Ok(n)
    }

    async fn list_expired(&self, now_ms: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        let txn = self.inner.db.begin_read().map_err(backend)?;
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

    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        self.write(Op::Delete(key(id))).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests;
