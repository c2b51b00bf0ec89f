//! The task store port and its local adapters.
//!
//! The store knows nothing of the status machine: it keeps [`TaskRecord`]s keyed by
//! `(tenant, task_id)`, each task's arguments beside its record (written once, at creation,
//! so the frequent record writes of a running job never carry them), and applies a write only when the stored version is the one the writer
//! read. All lifecycle rules live in [`crate::task`] and [`crate::engine`]; the store adds one
//! defence of its own — it never overwrites a terminal record — so even a buggy caller cannot
//! un-finish a task.
//!
//! Adapters: [`memory::MemoryStore`] (tests), [`embedded::EmbeddedStore`] (the durable default
//! of `mcp-tasks serve`, on redb) and, with feature `aws`, `aws::dynamo::DynamoStore`. Every
//! adapter passes [`contract`].

use async_trait::async_trait;
use serde_json::Value;

use crate::task::{TaskId, TaskRecord};
use crate::tenant::Tenant;

/// A task's identity lives with the task ([`crate::task`]); the store's calls take it.
pub use crate::task::{TaskKey, TaskRef};

/// The store contract (in this crate's tests and with feature `contracts` only).
#[cfg(any(test, feature = "contracts"))]
pub mod contract;
pub mod embedded;
pub mod memory;
pub mod metered;
pub mod watch;

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The conditional write lost: the task exists already (create), or its version moved on
    /// or it is terminal (update). Re-read and decide again.
    #[error("conditional write failed")]
    Conflict,
    /// The record would exceed what the store can hold in one item.
    #[error("task record too large ({0} bytes)")]
    TooLarge(usize),
    /// The backend failed: `message` says what, `source` (when there is one) is the backend's
    /// own error; both are for logs only, never for a client.
    #[error("store backend error: {message}")]
    Backend {
        /// What failed.
        message: String,
        /// The backend's error.
        #[source]
        source: Option<BoxError>,
    },
}

/// A backend's own error, kept as the source of a [`StoreError`] or a queue error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl StoreError {
    /// A backend failure described by `message` alone.
    pub fn backend(message: impl Into<String>) -> Self {
        StoreError::Backend {
            message: message.into(),
            source: None,
        }
    }

    /// A backend failure: `message`, caused by `source`.
    pub fn backend_from(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Backend {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

/// One page of [`TaskStore::list_quiet`].
#[derive(Debug, Default)]
pub struct QuietPage {
    /// The records of the page's `working` tasks whose quiet mark is within the bound, each
    /// as [`TaskStore::get`] would return it.
    pub tasks: Vec<TaskRecord>,
    /// Listed keys that had no readable record: gone since the listing, or an item the store
    /// cannot decode or that does not match its key (the store logs each with its key).
    pub unreadable: usize,
    /// Where the next page starts (opaque); `None` once the listing is done.
    pub next: Option<String>,
}

/// Largest serialized record a store accepts. DynamoDB's item limit is 400 KB; keeping every
/// adapter to the same bound means a result that fits locally also fits on AWS.
pub const MAX_RECORD_BYTES: usize = 350 * 1024;

/// Largest record the engine accepts from a client (arguments, answers). The difference to
/// [`MAX_RECORD_BYTES`] is headroom for what the worker adds (lease, progress, a checkpoint),
/// so a client can never make a task that its own worker cannot write.
pub const MAX_CLIENT_RECORD_BYTES: usize = MAX_RECORD_BYTES - 64 * 1024;

/// The serialized size of a record.
pub fn record_len(task: &TaskRecord) -> usize {
    serde_json::to_vec(task).map_or(usize::MAX, |b| b.len())
}

/// The serialized size of a task's arguments.
pub fn arguments_len(arguments: &Value) -> usize {
    serde_json::to_vec(arguments).map_or(usize::MAX, |b| b.len())
}

/// Durable storage of task records.
///
/// Contract (checked by [`contract`] against every adapter):
/// - `create` stores the record and the task's arguments, durable before it returns; it fails
///   with `Conflict` if the key exists (and then changes nothing, the stored arguments
///   included), and with `TooLarge` if the record or the arguments exceed
///   [`MAX_RECORD_BYTES`];
/// - **places**: each non-terminal task holds one place of its tenant, taken in the same step
///   that stores it and given back in the same step that ends it (the write of a terminal
///   record, or the `delete` of a record that was still active) — never twice, and never for
///   another tenant (`"a"` is not `"ab"` nor `"a#b"`). `create_within(task, arguments, max)`
///   stores the task only if its tenant holds fewer than `max` places, and otherwise answers
///   `Ok(false)` having written nothing; concurrent calls never let a tenant past `max`. A
///   create that fails (`Conflict`, `TooLarge`) takes no place. `create` is `create_within`
///   without a limit (it still takes the place). Adapters whose places can outlive their task
///   (DynamoDB: a crash between two writes, a record removed by the table's TTL) may hold one
///   too many for a while, never one too few, and say how it is given back;
/// - `arguments` returns the arguments `create` stored, exactly, for as long as the task
///   exists; no other call ever writes them (`update` in particular never does, whatever the
///   record it is given), and `delete` removes them with the record. `Ok(None)` when there
///   are none: the task is unknown, deleted, or was written by an earlier build that kept
///   arguments inside the record ([`TaskRecord::inline_arguments`]);
/// - `get` is strongly consistent (it sees every write that returned) and returns `Ok(None)`
///   when absent; it does not check expiry (the engine does);
/// - `update` writes `task` only if the stored record has `task.version` and is not terminal,
///   stores it with `version + 1` and returns that new version; otherwise `Conflict`;
/// - `list_active` returns keys of non-terminal tasks in the adapter's listing order — a fixed
///   total order over keys: key order for the local adapters, (index shard, key) for DynamoDB —
///   starting after `after`, which need not be listed any more (finished or deleted since);
///   every page is full until the last, so fewer than `limit` keys means the end (pages for
///   recovery and the orphan sweep; never shown to a client);
/// - `list_tenant_active` returns the records of ONE tenant's non-terminal tasks (the
///   2025-11-25 `tasks/list`), in **task-id order** (byte order of the ids; generated ids start
///   with a ULID, so this is creation order to the millisecond, ties in random but fixed order),
///   starting after the task id `after`, which need not exist any more (finished or deleted
///   since); at most `limit` records and every page full until the last, so fewer than `limit`
///   means the end. The tenant is matched exactly: no other tenant's task is ever listed,
///   whatever the names (`"a"` never sees `"a#b"`'s or `"ab"`'s tasks). Each record is as `get`
///   would return it, never terminal; only which keys are found may lag (see below). Expiry is
///   not checked (the engine does);
/// - the listings (`list_active`, `list_tenant_active`, `list_expired`) may lag the latest
///   writes where the backend indexes them eventually consistently (DynamoDB's global secondary
///   indexes): callers of the key listings re-read each key with `get` before acting on it;
/// - `list_quiet` returns, page by page, the records of every `working` task whose
///   [`quiet_mark_ms`](TaskRecord::quiet_mark_ms) is at or before its bound — and, where the
///   backend indexes them eventually consistently, possibly a few that no longer are (callers
///   check each record); never one waiting for input or finished as read. A listing resumed
///   from a `next` of an earlier call (even another process's) goes on where that one stopped;
///   what changed meanwhile is found by the next pass from the start. The pages are for the
///   orphan sweep: a task nobody can act on (waiting for input, asleep) is never read;
/// - `sweep_cursor` returns what `save_sweep_cursor` saved last (`None` if nothing), so that a
///   sweep cut short by its deadline resumes there in its next run, whichever process runs
///   it. The default keeps nothing: a store whose sweep always runs to the end needs no
///   cursor;
/// - `delete` removes a record and its arguments (purge of expired tasks); absent is not an
///   error.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Stores a new task and its arguments, taking its tenant's place without a limit.
    async fn create(&self, task: &TaskRecord, arguments: &Value) -> Result<(), StoreError> {
        match self.create_within(task, arguments, usize::MAX).await? {
            true => Ok(()),
            false => Err(StoreError::backend("a tenant holds usize::MAX places")),
        }
    }
    /// Stores a new task and its arguments if its tenant holds fewer than `max_active` places
    /// (`Ok(true)`); else `Ok(false)`, nothing written. See the contract's places.
    async fn create_within(
        &self,
        task: &TaskRecord,
        arguments: &Value,
        max_active: usize,
    ) -> Result<bool, StoreError>;
    /// Reads one task of one tenant.
    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError>;
    /// [`TaskStore::get`], shared: a store that keeps decoded records (the embedded store's
    /// read cache) hands out the one it holds instead of a copy (`tasks/get`, the most
    /// repeated request).
    async fn get_shared(
        &self,
        id: TaskRef<'_>,
    ) -> Result<Option<std::sync::Arc<TaskRecord>>, StoreError> {
        Ok(self.get(id).await?.map(std::sync::Arc::new))
    }
    /// The record [`TaskStore::get_shared`] would give, when the store holds it decoded in
    /// memory and can hand it over without waiting (the embedded store's read cache); `None`
    /// says nothing about the task: ask `get_shared`.
    fn cached(&self, id: TaskRef<'_>) -> Option<std::sync::Arc<TaskRecord>> {
        let _ = id;
        None
    }
    /// The arguments one task of one tenant was created with (read by the worker once per run,
    /// never by the request path).
    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError>;
    /// Conditionally replaces a task; returns the new version.
    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError>;
    /// Keys of non-terminal tasks after `after` (in listing order), at most `limit`.
    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError>;
    /// Records of `tenant`'s non-terminal tasks after task id `after` (in task-id order), at
    /// most `limit`.
    ///
    /// The default walks every tenant's active keys ([`list_active`](Self::list_active)) and
    /// reads the tenant's with `get`: correct, but one pass over all active tasks per page. It
    /// is there for wrappers and test doubles; every adapter overrides it with a listing keyed
    /// by the tenant.
    async fn list_tenant_active(
        &self,
        tenant: &Tenant,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        const PAGE: usize = 1000;
        let mut ids = Vec::new();
        let mut cursor: Option<TaskKey> = None;
        loop {
            let page = self.list_active(cursor.as_ref(), PAGE).await?;
            let done = page.len() < PAGE;
            cursor = page.last().cloned();
            ids.extend(
                page.into_iter()
                    .filter(|k| k.tenant == *tenant && after.is_none_or(|a| k.task_id.as_str() > a))
                    .map(|k| k.task_id),
            );
            if done {
                break;
            }
        }
        ids.sort_unstable();
        ids.dedup();
        let mut out = Vec::new();
        for id in ids {
            if out.len() >= limit {
                break;
            }
            match self.get(TaskRef::new(tenant, &id)).await? {
                Some(t) if !t.status.is_terminal() => out.push(t),
                _ => {}
            }
        }
        Ok(out)
    }
    /// How many non-terminal tasks `tenant` has, counting no further than `at_most` (the
    /// per-tenant active-task quota needs to know only whether the limit is reached). May lag
    /// like the listings; expiry is not checked.
    ///
    /// The default pages through [`list_tenant_active`](Self::list_tenant_active); the adapters
    /// count index entries without reading records.
    async fn count_tenant_active(
        &self,
        tenant: &Tenant,
        at_most: usize,
    ) -> Result<usize, StoreError> {
        const PAGE: usize = 1000;
        let mut n = 0;
        let mut after: Option<TaskId> = None;
        while n < at_most {
            let want = (at_most - n).min(PAGE);
            let page = self
                .list_tenant_active(tenant, after.as_deref(), want)
                .await?;
            n += page.len();
            if page.len() < want {
                break;
            }
            after = page.last().map(|t| t.task_id.clone());
        }
        Ok(n.min(at_most))
    }
    /// Records of `working` tasks whose quiet mark is at or before `quiet_before_ms`, from
    /// `after` (a [`QuietPage::next`]) on, at most `limit` listed keys per page.
    ///
    /// The default walks every active key ([`list_active`](Self::list_active)) and reads each
    /// with `get`: correct, but a pass over all active tasks. The DynamoDB adapter reads a
    /// sparse index of `working` tasks ordered by their mark instead.
    async fn list_quiet(
        &self,
        quiet_before_ms: u64,
        after: Option<&str>,
        limit: usize,
    ) -> Result<QuietPage, StoreError> {
        let after = after.and_then(split_key);
        let keys = self.list_active(after.as_ref(), limit).await?;
        let mut page = QuietPage {
            next: keys.last().filter(|_| keys.len() >= limit).map(key_of),
            ..QuietPage::default()
        };
        for k in keys {
            match self.get(k.borrowed()).await {
                Ok(Some(t)) if t.quiet_mark_ms().is_some_and(|m| m <= quiet_before_ms) => {
                    page.tasks.push(t)
                }
                Ok(Some(_)) => {}
                Ok(None) => page.unreadable += 1,
                Err(e) => {
                    tracing::warn!(task_id = %k.task_id, error = %e, "store.read_failed");
                    page.unreadable += 1;
                }
            }
        }
        Ok(page)
    }
    /// Where the last sweep stopped (see the contract).
    async fn sweep_cursor(&self) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
    /// Saves where this sweep stopped; `None` when it reached the end.
    async fn save_sweep_cursor(&self, _cursor: Option<&str>) -> Result<(), StoreError> {
        Ok(())
    }
    /// Keys of all tasks whose expiry is at or before `now_ms`, at most `limit`.
    async fn list_expired(&self, now_ms: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError>;
    /// Removes a task.
    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError>;
}

/// Serializes a record, enforcing [`MAX_RECORD_BYTES`].
pub(crate) fn encode(task: &TaskRecord) -> Result<Vec<u8>, StoreError> {
    let bytes =
        serde_json::to_vec(task).map_err(|e| StoreError::backend_from("encoding a record", e))?;
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(StoreError::TooLarge(bytes.len()));
    }
    Ok(bytes)
}

/// Serializes a task's arguments, enforcing [`MAX_RECORD_BYTES`].
pub(crate) fn encode_arguments(arguments: &Value) -> Result<Vec<u8>, StoreError> {
    let bytes = serde_json::to_vec(arguments)
        .map_err(|e| StoreError::backend_from("encoding arguments", e))?;
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(StoreError::TooLarge(bytes.len()));
    }
    Ok(bytes)
}

/// Deserializes a record.
pub(crate) fn decode(bytes: &[u8]) -> Result<TaskRecord, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::backend_from("decoding a record", e))
}

/// The one composite key every local adapter uses: the tenant is part of it, so a lookup can
/// only find the caller's own tasks.
pub(crate) fn key(id: TaskRef<'_>) -> String {
    key_at(id.tenant, id.task_id)
}

/// [`key`] of a task id that need not be one (where a listing starts after).
pub(crate) fn key_at(tenant: &Tenant, task_id: &str) -> String {
    // Not `format!`: this runs on every read.
    let mut k = String::with_capacity(tenant.len() + 1 + task_id.len());
    k.push_str(tenant);
    k.push('\u{1f}');
    k.push_str(task_id);
    k
}

/// The start of every composite key of `tenant`'s tasks. Tenants never contain control
/// characters (the authenticator refuses them), so no other tenant's keys share it; the local
/// adapters still compare each listed record's tenant exactly.
pub(crate) fn tenant_prefix(tenant: &Tenant) -> String {
    key_at(tenant, "")
}

/// The composite key of a [`TaskKey`].
pub(crate) fn key_of(k: &TaskKey) -> String {
    key(k.borrowed())
}

/// Inverse of [`key`].
pub(crate) fn split_key(k: &str) -> Option<TaskKey> {
    let (tenant, task_id) = k.split_once('\u{1f}')?;
    Some(TaskKey::new(Tenant::new(tenant), TaskId::parse(task_id)?))
}

#[cfg(test)]
mod tests;
