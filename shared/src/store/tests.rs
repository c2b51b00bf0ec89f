//! The store port's own defaults, against the contract.

use super::*;
use crate::store::memory::MemoryStore;

/// A wrapper that overrides nothing optional: it gets the default tenant listing.
struct Wrapped(MemoryStore);

#[async_trait]
impl TaskStore for Wrapped {
    async fn create_within(
        &self,
        task: &TaskRecord,
        args: &Value,
        max: usize,
    ) -> Result<bool, StoreError> {
        self.0.create_within(task, args, max).await
    }
    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        self.0.get(id).await
    }
    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        self.0.arguments(id).await
    }
    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        self.0.update(task).await
    }
    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError> {
        self.0.list_active(after, limit).await
    }
    async fn list_expired(&self, now: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        self.0.list_expired(now, limit).await
    }
    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        self.0.delete(id).await
    }
}

#[tokio::test]
async fn the_default_tenant_listing_passes_the_contract() {
    contract::run_all(|| async { Wrapped(MemoryStore::new()) }).await;
}
