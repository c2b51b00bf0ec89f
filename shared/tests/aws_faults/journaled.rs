//! The DynamoDB store, journaled, its conditional writes checked and serialized per task.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mcp_tasks_core::aws::dynamo::DynamoStore;
use mcp_tasks_core::store::{StoreError, TaskKey, TaskRef, TaskStore};
use mcp_tasks_core::task::TaskRecord;
use mcp_tasks_core::tenant::Tenant;
use serde_json::Value;

use crate::lock;
use crate::tally::{at, clock};

/// The DynamoDB store, journaled, with every conditional write checked for atomicity and
/// (unless `AWS_FAULT_WRITE_LOCK=0`) serialized per task.
///
/// moto (5.2.5) evaluates a `PutItem` condition and then stores the item without a lock, so
/// two concurrent conditional writes on the same version can both succeed — which DynamoDB
/// never allows, and which makes a correct worker look like it ran a job twice. The lock
/// restores DynamoDB's per-item atomicity for the writers of this process (all of them: the
/// engines, workers and sweeps of a test share one store); it orders writes, nothing else.
/// Whatever the lock, two successful writes from one read version are counted as
/// `emulator_violations`.
pub struct Journaled {
    pub inner: DynamoStore,
    pub journal: Mutex<HashMap<String, Vec<String>>>,
    /// Per task, the read versions of its successful updates.
    pub written: Mutex<HashMap<String, std::collections::HashSet<u64>>>,
    pub violations: AtomicUsize,
    /// Per task, the successful writes of a terminal status (DynamoDB allows one).
    pub terminal: Mutex<HashMap<String, usize>>,
    pub locks: Option<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl Journaled {
    pub fn new(inner: DynamoStore) -> Self {
        let lock = std::env::var("AWS_FAULT_WRITE_LOCK").map_or(true, |v| v != "0");
        Self {
            inner,
            journal: Mutex::default(),
            written: Mutex::default(),
            violations: AtomicUsize::new(0),
            terminal: Mutex::default(),
            locks: lock.then(Mutex::default),
        }
    }

    pub fn violations(&self) -> usize {
        self.violations.load(Ordering::SeqCst)
    }

    pub fn terminal_writes(&self, task_id: &str) -> usize {
        lock(&self.terminal).get(task_id).copied().unwrap_or(0)
    }

    pub fn note(&self, task: &TaskRecord, what: String) {
        let line = format!(
            "{:8.3}s {what}: {:?} at={} lease={:?} cancel={}",
            clock(),
            task.status,
            at(task),
            task.lease.as_ref().map(|l| l.owner.as_str()),
            task.cancel_requested
        );
        lock(&self.journal)
            .entry(task.task_id.to_string())
            .or_default()
            .push(line);
    }

    pub fn journal(&self, task_id: &str) -> Vec<String> {
        lock(&self.journal)
            .get(task_id)
            .cloned()
            .unwrap_or_default()
    }
}

#[async_trait]
impl TaskStore for Journaled {
    async fn create_within(
        &self,
        task: &TaskRecord,
        arguments: &Value,
        max: usize,
    ) -> Result<bool, StoreError> {
        let out = self.inner.create_within(task, arguments, max).await;
        self.note(task, format!("create -> {out:?}"));
        out
    }

    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        self.inner.get(id).await
    }

    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        self.inner.arguments(id).await
    }

    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        let item_lock = self
            .locks
            .as_ref()
            .map(|l| lock(l).entry(task.task_id.to_string()).or_default().clone());
        let _held = match &item_lock {
            Some(l) => Some(l.lock().await),
            None => None,
        };
        let out = self.inner.update(task).await;
        self.note(task, format!("update v{} -> {out:?}", task.version));
        if out.is_ok() && task.status.is_terminal() {
            *lock(&self.terminal)
                .entry(task.task_id.to_string())
                .or_default() += 1;
        }
        if out.is_ok()
            && !lock(&self.written)
                .entry(task.task_id.to_string())
                .or_default()
                .insert(task.version)
        {
            self.violations.fetch_add(1, Ordering::SeqCst);
            eprintln!(
                "aws_faults: EMULATOR VIOLATION: a second conditional write on version {} of {} \
                 succeeded",
                task.version, task.task_id
            );
        }
        out
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

    async fn list_expired(&self, now_ms: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        self.inner.list_expired(now_ms, limit).await
    }

    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        self.inner.delete(id).await
    }
}
