//! How a `subscriptions/listen` stream learns that a task changed ([`ChangeFeed`]).
//!
//! - **Push**, where every writer shares one process (the local server: the endpoint, the
//!   worker pool and the sweep all write through one store): [`Watched`] wraps the store and,
//!   after each successful write of a task (create, update, delete), wakes the subscriptions
//!   watching that task ([`Watchers`]). They then read the task as `tasks/get` would; nothing
//!   polls.
//! - **Poll**, where the writers are other processes (Lambda: the worker and the tasks
//!   function write the table): the subscription reads its unfinished tasks at a fixed,
//!   documented interval.
//!
//! A wake carries no data, only "look again": the reader decides what changed, so a wake that
//! races a read is harmless, and [`tokio::sync::Notify`] keeps a wake given while nobody
//! waits, so none is lost between a read and the next wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::Notify;

use super::{QuietPage, StoreError, TaskKey, TaskRef, TaskStore};
use crate::task::{TaskId, TaskRecord};
use crate::tenant::Tenant;

/// Where a subscription's wake-ups come from.
#[derive(Clone)]
pub enum ChangeFeed {
    /// Writes in this process wake the watchers of the written task.
    Push(Arc<Watchers>),
    /// Read every watched unfinished task once per interval.
    Poll(Duration),
}

impl std::fmt::Debug for ChangeFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Push(_) => f.write_str("Push"),
            Self::Poll(d) => f.debug_tuple("Poll").field(d).finish(),
        }
    }
}

type Key = (Tenant, TaskId);

/// Who watches which task: each subscription registers one [`Notify`] under each of its
/// task keys, for as long as it holds the [`Watch`].
#[derive(Default)]
pub struct Watchers {
    by_task: Mutex<HashMap<Key, Vec<Weak<Notify>>>>,
}

impl Watchers {
    /// Registers `wake` for `tenant`'s tasks `ids` until the returned guard is dropped.
    pub fn watch(self: &Arc<Self>, tenant: &Tenant, ids: &[TaskId], wake: &Arc<Notify>) -> Watch {
        let keys: Vec<Key> = ids.iter().map(|id| (tenant.clone(), id.clone())).collect();
        let mut map = self.by_task.lock().unwrap_or_else(|p| p.into_inner());
        for k in &keys {
            map.entry(k.clone()).or_default().push(Arc::downgrade(wake));
        }
        Watch {
            watchers: self.clone(),
            keys,
            wake: Arc::downgrade(wake),
        }
    }

    /// Wakes every watcher of the task `id`.
    pub fn changed(&self, id: TaskRef<'_>) {
        let map = self.by_task.lock().unwrap_or_else(|p| p.into_inner());
        // The common case — nobody watches — costs one hash lookup (with one small copy).
        if let Some(list) = map.get(&(id.tenant.clone(), id.task_id.clone())) {
            for w in list.iter().filter_map(Weak::upgrade) {
                w.notify_one();
            }
        }
    }

    /// How many tasks have at least one watcher (tests).
    pub fn watched(&self) -> usize {
        self.by_task.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A subscription's registration; removed when dropped.
pub struct Watch {
    watchers: Arc<Watchers>,
    keys: Vec<Key>,
    wake: Weak<Notify>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut map = self
            .watchers
            .by_task
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for k in &self.keys {
            if let Some(list) = map.get_mut(k) {
                list.retain(|w| w.strong_count() > 0 && !w.ptr_eq(&self.wake));
                if list.is_empty() {
                    map.remove(k);
                }
            }
        }
    }
}

/// `S`, waking [`Watchers`] after every successful write of a task.
pub struct Watched<S> {
    inner: S,
    watchers: Arc<Watchers>,
}

impl<S> Watched<S> {
    /// Wraps `inner`; writes wake `watchers`.
    pub fn new(inner: S, watchers: Arc<Watchers>) -> Self {
        Self { inner, watchers }
    }
}

#[async_trait]
impl<S: TaskStore> TaskStore for Watched<S> {
    async fn create_within(
        &self,
        task: &TaskRecord,
        arguments: &Value,
        max_active: usize,
    ) -> Result<bool, StoreError> {
        let created = self
            .inner
            .create_within(task, arguments, max_active)
            .await?;
        if created {
            self.watchers.changed(task.key());
        }
        Ok(created)
    }
    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        self.inner.get(id).await
    }
    async fn get_shared(
        &self,
        id: TaskRef<'_>,
    ) -> Result<Option<std::sync::Arc<TaskRecord>>, StoreError> {
        self.inner.get_shared(id).await
    }
    fn cached(&self, id: TaskRef<'_>) -> Option<std::sync::Arc<TaskRecord>> {
        self.inner.cached(id)
    }
    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        self.inner.arguments(id).await
    }
    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        let version = self.inner.update(task).await?;
        self.watchers.changed(task.key());
        Ok(version)
    }
    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError> {
        self.inner.list_active(after, limit).await
    }
    async fn list_tenant_active(
        &self,
        tenant: &Tenant,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        self.inner.list_tenant_active(tenant, after, limit).await
    }
    async fn count_tenant_active(
        &self,
        tenant: &Tenant,
        at_most: usize,
    ) -> Result<usize, StoreError> {
        self.inner.count_tenant_active(tenant, at_most).await
    }
    async fn list_quiet(
        &self,
        quiet_before_ms: u64,
        after: Option<&str>,
        limit: usize,
    ) -> Result<QuietPage, StoreError> {
        self.inner.list_quiet(quiet_before_ms, after, limit).await
    }
    async fn sweep_cursor(&self) -> Result<Option<String>, StoreError> {
        self.inner.sweep_cursor().await
    }
    async fn save_sweep_cursor(&self, cursor: Option<&str>) -> Result<(), StoreError> {
        self.inner.save_sweep_cursor(cursor).await
    }
    async fn list_expired(&self, now_ms: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        self.inner.list_expired(now_ms, limit).await
    }
    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        self.inner.delete(id).await?;
        self.watchers.changed(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    fn record(tenant: &str, id: &str) -> TaskRecord {
        TaskRecord::new(
            tenant.into(),
            TaskId::parse(id).expect("a task id"),
            "wait",
            Some(60_000),
            1000,
            Value::Null,
        )
    }

    #[tokio::test]
    async fn a_write_wakes_only_the_watchers_of_that_task_of_that_tenant() {
        let watchers = Arc::new(Watchers::default());
        let store = Watched::new(MemoryStore::new(), watchers.clone());
        let (mine, other) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let _a = watchers.watch(&"acme".into(), &[TaskId::from_static("t1")], &mine);
        let _b = watchers.watch(&"globex".into(), &[TaskId::from_static("t1")], &other);
        store
            .create(&record("acme", "t1"), &Value::Null)
            .await
            .unwrap();
        // The wake was kept for a waiter that was not waiting yet.
        tokio::time::timeout(Duration::from_secs(1), mine.notified())
            .await
            .expect("the watcher of the written task is woken");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), other.notified())
                .await
                .is_err(),
            "another tenant's task of the same id is not this one"
        );
    }

    #[tokio::test]
    async fn dropping_a_watch_unregisters_it() {
        let watchers = Arc::new(Watchers::default());
        let wake = Arc::new(Notify::new());
        let w = watchers.watch(
            &"acme".into(),
            &[TaskId::from_static("t1"), TaskId::from_static("t2")],
            &wake,
        );
        let other = Arc::new(Notify::new());
        let w2 = watchers.watch(&"acme".into(), &[TaskId::from_static("t1")], &other);
        assert_eq!(watchers.watched(), 2);
        drop(w);
        assert_eq!(watchers.watched(), 1, "t1 is still watched by the second");
        drop(w2);
        assert_eq!(watchers.watched(), 0);
        watchers.changed(TaskRef::new(&"acme".into(), &TaskId::from_static("t1")));
    }
}
