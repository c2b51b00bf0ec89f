//! In-memory task store: a real adapter (it passes the contract), kept for unit tests.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::Value;

use super::{
    StoreError, TaskKey, TaskRef, TaskStore, encode, encode_arguments, key, key_at, key_of,
    split_key, tenant_prefix,
};
use crate::task::TaskRecord;
use crate::tenant::Tenant;

/// Records (and each task's arguments beside its record) in a map behind a mutex; the lock is
/// never held across an await.
#[derive(Default)]
pub struct MemoryStore {
    items: Mutex<BTreeMap<String, TaskRecord>>,
    arguments: Mutex<BTreeMap<String, Value>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn items(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, TaskRecord>> {
        // A panic while holding this lock cannot leave a half-written record (inserts are
        // single operations), so a poisoned lock is still safe to use.
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn args(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Value>> {
        self.arguments.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Loses a task's arguments but keeps its record (for tests of what a worker does then).
    #[cfg(test)]
    pub(crate) fn lose_arguments(&self, id: TaskRef<'_>) {
        self.args().remove(&key(id));
    }
}

/// The places `tenant` holds: its non-terminal tasks (one contiguous range of keys).
fn held(items: &BTreeMap<String, TaskRecord>, tenant: &Tenant) -> usize {
    let prefix = tenant_prefix(tenant);
    items
        .range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .filter(|(_, t)| t.tenant == *tenant && !t.status.is_terminal())
        .count()
}

#[async_trait]
impl TaskStore for MemoryStore {
    async fn create_within(
        &self,
        task: &TaskRecord,
        arguments: &Value,
        max_active: usize,
    ) -> Result<bool, StoreError> {
        encode(task)?;
        encode_arguments(arguments)?;
        // Lock order: records, then arguments (as in `delete`). The places are counted and the
        // task stored under one lock: nothing can come between.
        let mut items = self.items();
        let k = key(task.key());
        if items.contains_key(&k) {
            return Err(StoreError::Conflict);
        }
        if !task.status.is_terminal() && held(&items, &task.tenant) >= max_active {
            return Ok(false);
        }
        self.args().insert(k.clone(), arguments.clone());
        items.insert(k, task.clone());
        Ok(true)
    }

    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        Ok(self.items().get(&key(id)).cloned())
    }

    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        Ok(self.args().get(&key(id)).cloned())
    }

    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        encode(task)?;
        let mut items = self.items();
        let k = key(task.key());
        match items.get(&k) {
            Some(stored) if stored.version == task.version && !stored.status.is_terminal() => {
                let mut next = task.clone();
                next.version += 1;
                let v = next.version;
                items.insert(k, next);
                Ok(v)
            }
            _ => Err(StoreError::Conflict),
        }
    }

    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError> {
        use std::ops::Bound;
        let start = match after {
            Some(k) => Bound::Excluded(key_of(k)),
            None => Bound::Unbounded,
        };
        Ok(self
            .items()
            .range((start, Bound::Unbounded))
            .filter(|(_, t)| !t.status.is_terminal())
            .filter_map(|(k, _)| split_key(k))
            .take(limit)
            .collect())
    }

    async fn list_tenant_active(
        &self,
        tenant: &Tenant,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        use std::ops::Bound;
        // The tenant's keys are one contiguous range (its prefix), in task-id order.
        let prefix = tenant_prefix(tenant);
        let start = match after {
            Some(a) => Bound::Excluded(key_at(tenant, a)),
            None => Bound::Included(prefix.clone()),
        };
        Ok(self
            .items()
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(_, t)| t)
            .filter(|t| t.tenant == *tenant && !t.status.is_terminal())
            .take(limit)
            .cloned()
            .collect())
    }

    async fn list_expired(&self, now_ms: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        Ok(self
            .items()
            .iter()
            .filter(|(_, t)| t.is_expired(now_ms))
            .filter_map(|(k, _)| split_key(k))
            .take(limit)
            .collect())
    }

    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        let k = key(id);
        let mut items = self.items();
        items.remove(&k);
        self.args().remove(&k);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn memory_store_passes_the_contract() {
        super::super::contract::run_all(|| async { super::MemoryStore::new() }).await;
    }
}
