//! The store port's own defaults, against the contract.

use super::*;
use crate::store::memory::MemoryStore;
use crate::task::TaskRef;

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
/// The stored record (the embedded and memory stores keep exactly these bytes): pinned, so
/// records written by an earlier build read back, and a later one reads ours.
#[test]
fn a_record_keeps_its_stored_bytes() {
    let golden = r#"{"tenant":"a#b%\"é\\","task_id":"tsk_01J0GOLDEN","status":"input_required","status_message":"half way \"there\" ✓","created_at_ms":1700000000000,"last_updated_at_ms":1700000000500,"ttl_ms":3600000,"poll_interval_ms":1000,"tool":"wait","input_requests":{"k1":{"method":"elicitation/create","params":{"message":"ok?"}}},"input_responses":{},"issued_input_keys":["k1"],"cancel_requested":false,"version":7,"lease":{"owner":"w-1","expires_at_ms":1700000060000},"checkpoint":{"deep":{"a":[1,null,true,"x"]},"f":0.5,"n":1},"attempts":2,"interruptions":0,"client_capabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;
    let t = contract::golden_record();
    let bytes = encode(&t).unwrap();
    assert_eq!(std::str::from_utf8(&bytes).unwrap(), golden);
    assert_eq!(decode(golden.as_bytes()).unwrap(), t);
}
