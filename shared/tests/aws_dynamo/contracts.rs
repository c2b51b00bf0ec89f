//! The task store's and the running guard's contracts on a table, and moto's racing writes.

use mcp_tasks_core::aws::dynamo::{self, DynamoStore};
use mcp_tasks_core::store::{StoreError, TaskKey, TaskRef, TaskStore, contract};
use mcp_tasks_core::task::TaskRecord;
use serde_json::Value;

use crate::{client, common, drop_table, fresh_store, unique_table};

/// Whether the endpoint is moto (it answers `/moto-api/`).
async fn is_moto(endpoint: &str) -> bool {
    reqwest::get(format!("{endpoint}/moto-api/"))
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// The store with its conditional writes issued one at a time. moto 5.2.5 evaluates a
/// `PutItem` condition and then stores the item with no lock in between, so two concurrent
/// writes conditional on the same version can both succeed (reproduced outside this repo: 21
/// of 200 rounds of 32 concurrent conditional puts had several winners) — which DynamoDB
/// never allows. Against moto, the contract's racing-writers case would then test moto; in
/// this process the writes are serialized instead, which is what DynamoDB guarantees per item.
/// The conditions themselves (stale version, terminal record, existing key) are still
/// checked by moto, write by write.
struct SerialWrites {
    store: DynamoStore,
    gate: Option<tokio::sync::Mutex<()>>,
}

#[async_trait::async_trait]
impl TaskStore for SerialWrites {
    async fn create(&self, t: &TaskRecord, args: &Value) -> Result<(), StoreError> {
        let _one = match &self.gate {
            Some(g) => Some(g.lock().await),
            None => None,
        };
        self.store.create(t, args).await
    }
    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        self.store.get(id).await
    }
    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        self.store.arguments(id).await
    }
    async fn update(&self, t: &TaskRecord) -> Result<u64, StoreError> {
        let _one = match &self.gate {
            Some(g) => Some(g.lock().await),
            None => None,
        };
        self.store.update(t).await
    }
    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError> {
        self.store.list_active(after, limit).await
    }
    async fn list_tenant_active(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        self.store.list_tenant_active(tenant, after, limit).await
    }
    async fn list_expired(&self, now: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        self.store.list_expired(now, limit).await
    }
    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        self.store.delete(id).await
    }
}

#[tokio::test]
async fn dynamo_store_passes_the_contract() {
    let Some(client) = client().await else { return };
    let [endpoint] = common::endpoints("aws_dynamo", [common::DYNAMODB]).unwrap();
    let serialize = is_moto(&endpoint).await;
    if serialize {
        eprintln!("aws_dynamo: moto: conditional writes serialized in the test (see SerialWrites)");
    }
    let tables = std::sync::Mutex::new(Vec::new());
    contract::run_all(|| {
        let client = client.clone();
        let name = unique_table();
        tables.lock().unwrap().push(name.clone());
        async move {
            dynamo::create_table(&client, &name).await.unwrap();
            SerialWrites {
                store: DynamoStore::new(client, name),
                gate: serialize.then(|| tokio::sync::Mutex::new(())),
            }
        }
    })
    .await;
    for name in tables.into_inner().unwrap() {
        drop_table(&client, &name).await;
    }
}

#[tokio::test]
async fn the_per_tenant_running_guard_passes_its_contract_on_the_table() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    mcp_tasks_core::quota::run_slots_contract::run_all(&store, "slots").await;
    // The guard's items are invisible to every task listing.
    use mcp_tasks_core::store::TaskStore as _;
    assert!(store.list_active(None, 100).await.unwrap().is_empty());
    assert!(
        store
            .list_tenant_active("slots-a", None, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.count_tenant_active("slots-a", 100).await.unwrap(), 0);
    assert!(store.list_expired(u64::MAX, 100).await.unwrap().is_empty());
    drop_table(&client, store.table_name()).await;
}
