//! A store decorator that counts what passes through it: tasks created, tasks that reached a
//! terminal status, and conditional writes that lost a race ([`crate::metrics`]).
//!
//! Counting at the store is exact where counting at each caller would not be: a task ends by
//! exactly one successful write of a terminal record (the store never overwrites one), whoever
//! writes it — a worker finishing, `tasks/cancel`, the give-up after the last delivery.

use async_trait::async_trait;
use serde_json::Value;

use super::{QuietPage, StoreError, TaskKey, TaskRef, TaskStore};
use crate::metrics::{self, name};
use crate::task::TaskRecord;
use crate::tenant::Tenant;

/// `S`, counted.
pub struct Metered<S>(pub S);

fn conflict(op: &str, r: &Result<impl Sized, StoreError>) {
    if matches!(r, Err(StoreError::Conflict)) {
        metrics::global().count(name::STORE_CONFLICTS, &[("op", op)], 1);
    }
}

#[async_trait]
impl<S: TaskStore> TaskStore for Metered<S> {
    async fn create_within(
        &self,
        task: &TaskRecord,
        arguments: &Value,
        max_active: usize,
    ) -> Result<bool, StoreError> {
        let r = self.0.create_within(task, arguments, max_active).await;
        if matches!(r, Ok(true)) {
            let m = metrics::global();
            m.count(name::TASKS_CREATED, &[("tool", &task.tool)], 1);
            if let Some(tenant) = m.tenant_label(&task.tenant) {
                m.count(name::TENANT_TASKS_CREATED, &[("tenant", &tenant)], 1);
            }
        }
        conflict("create", &r);
        r
    }
    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        self.0.get(id).await
    }
    async fn get_shared(
        &self,
        id: TaskRef<'_>,
    ) -> Result<Option<std::sync::Arc<TaskRecord>>, StoreError> {
        self.0.get_shared(id).await
    }
    fn cached(&self, id: TaskRef<'_>) -> Option<std::sync::Arc<TaskRecord>> {
        self.0.cached(id)
    }
    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        self.0.arguments(id).await
    }
    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        let r = self.0.update(task).await;
        if r.is_ok() && task.status.is_terminal() {
            let m = metrics::global();
            let status = task.status.as_str();
            m.count(
                name::TASKS_FINISHED,
                &[("tool", &task.tool), ("status", status)],
                1,
            );
            if let Some(tenant) = m.tenant_label(&task.tenant) {
                m.count(
                    name::TENANT_TASKS_FINISHED,
                    &[("tenant", &tenant), ("status", status)],
                    1,
                );
            }
        }
        conflict("update", &r);
        r
    }
    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError> {
        self.0.list_active(after, limit).await
    }
    async fn list_tenant_active(
        &self,
        tenant: &Tenant,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        self.0.list_tenant_active(tenant, after, limit).await
    }
    async fn count_tenant_active(
        &self,
        tenant: &Tenant,
        at_most: usize,
    ) -> Result<usize, StoreError> {
        self.0.count_tenant_active(tenant, at_most).await
    }
    async fn list_quiet(
        &self,
        quiet_before_ms: u64,
        after: Option<&str>,
        limit: usize,
    ) -> Result<QuietPage, StoreError> {
        self.0.list_quiet(quiet_before_ms, after, limit).await
    }
    async fn sweep_cursor(&self) -> Result<Option<String>, StoreError> {
        self.0.sweep_cursor().await
    }
    async fn save_sweep_cursor(&self, cursor: Option<&str>) -> Result<(), StoreError> {
        self.0.save_sweep_cursor(cursor).await
    }
    async fn list_expired(&self, now_ms: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        self.0.list_expired(now_ms, limit).await
    }
    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        self.0.delete(id).await
    }
}
