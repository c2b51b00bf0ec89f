//! The task store's and the running guard's contracts on a table.

use mcp_tasks_core::aws::dynamo::{self, DynamoStore};
use mcp_tasks_core::store::contract;

use crate::{drop_table, fresh_store, racing_client, unique_table};

#[tokio::test]
async fn dynamo_store_passes_the_contract() {
    // The contract's racing writers run against moto with each write request sent alone
    // (`racing_client`), which is what DynamoDB guarantees per request and moto does not.
    let Some(client) = racing_client().await else {
        return;
    };
    let tables = std::sync::Mutex::new(Vec::new());
    contract::run_all(|| {
        let client = client.clone();
        let name = unique_table();
        tables.lock().unwrap().push(name.clone());
        async move {
            dynamo::create_table(&client, &name).await.unwrap();
            DynamoStore::new(client, name)
        }
    })
    .await;
    for name in tables.into_inner().unwrap() {
        drop_table(&client, &name).await;
    }
}

#[tokio::test]
async fn the_per_tenant_running_guard_passes_its_contract_on_the_table() {
    let Some(client) = racing_client().await else {
        return;
    };
    let store = fresh_store(&client).await;
    mcp_tasks_core::quota::run_slots_contract::run_all(&store, "slots").await;
    // The guard's items are invisible to every task listing.
    use mcp_tasks_core::store::TaskStore as _;
    assert!(store.list_active(None, 100).await.unwrap().is_empty());
    assert!(
        store
            .list_tenant_active(&"slots-a".into(), None, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .count_tenant_active(&"slots-a".into(), 100)
            .await
            .unwrap(),
        0
    );
    assert!(store.list_expired(u64::MAX, 100).await.unwrap().is_empty());
    drop_table(&client, store.table_name()).await;
}
