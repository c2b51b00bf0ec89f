//! Tenants: a task is never reachable from another tenant, nor through a misplaced record.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use mcp_tasks_core::aws::dynamo::{self};
use mcp_tasks_core::store::contract::{args, task};
use mcp_tasks_core::store::{StoreError, TaskRef, TaskStore};
use mcp_tasks_core::task::{TaskId, TaskStatus};
use mcp_tasks_core::tenant::Tenant;

use crate::{client, drop_table, engine_over, fresh_store, raw_item};

#[tokio::test]
async fn a_task_is_never_readable_or_writable_from_another_tenant() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    // Task ids may contain '#': ("a#b", "c") and ("a", "b#c") must stay two different tasks.
    let mut one = task("a#b", None);
    one.task_id = TaskId::from_static("c");
    let mut two = task("a", None);
    two.task_id = TaskId::from_static("b#c");
    store.create(&one, &args()).await.unwrap();
    store.create(&two, &args()).await.unwrap();
    assert_eq!(
        store
            .get(TaskRef {
                tenant: &"a#b".into(),
                task_id: &TaskId::from_static("c")
            })
            .await
            .unwrap(),
        Some(one.clone())
    );
    assert_eq!(
        store
            .get(TaskRef {
                tenant: &"a".into(),
                task_id: &TaskId::from_static("b#c")
            })
            .await
            .unwrap(),
        Some(two.clone())
    );

    let t = task("tenant-a", None);
    store.create(&t, &args()).await.unwrap();
    for other in ["tenant-b", "tenant-a#", "", "tenant"] {
        assert_eq!(
            store
                .get(TaskRef {
                    tenant: &Tenant::from(other),
                    task_id: &t.task_id
                })
                .await
                .unwrap(),
            None,
            "{other:?}"
        );
        let mut foreign = t.clone();
        foreign.tenant = other.into();
        foreign.status = TaskStatus::Cancelled;
        assert!(matches!(
            store.update(&foreign).await,
            Err(StoreError::Conflict)
        ));
        store
            .delete(TaskRef {
                tenant: &Tenant::from(other),
                task_id: &t.task_id,
            })
            .await
            .unwrap();
        // A failed conditional update must not have created an item under the foreign key.
        assert!(
            raw_item(
                &client,
                store.table_name(),
                dynamo::pk(TaskRef::new(&Tenant::from(other), &t.task_id))
            )
            .await
            .is_none()
        );
    }
    assert_eq!(store.get(t.key()).await.unwrap(), Some(t));
    drop_table(&client, store.table_name()).await;
}

/// Writes `item` as it is, as a hand edit in the console or a migration script would.
async fn put_raw(client: &Client, table: &str, item: HashMap<String, AttributeValue>) {
    client
        .put_item()
        .table_name(table)
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
}
/// An item whose record disagrees with its key (tenant A's record copied under tenant B's key,
/// as a hand edit or a tenant-rename migration might leave it) is read as absent: tenant B can
/// neither read nor cancel through it, and tenant A's task is untouched. Every later write is
/// keyed on the record, so before the check B's `tasks/cancel` cancelled A's task.
#[tokio::test]
async fn a_record_is_trusted_only_at_its_own_key() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let table = store.table_name().to_owned();
    let (engine, _rx) = engine_over(&store);
    let a = task("tenant-a", None);
    let id = a.task_id.clone();
    store.create(&a, &args()).await.unwrap();

    let original = raw_item(
        &client,
        &table,
        dynamo::pk(TaskRef::new(&"tenant-a".into(), &id)),
    )
    .await
    .unwrap();
    let under = |tenant: &str, task_id: &str| {
        let mut item = original.clone();
        let key = dynamo::pk(TaskRef::new(
            &Tenant::from(tenant),
            &TaskId::parse(task_id).unwrap(),
        ));
        item.insert(dynamo::ATTR_PK.into(), AttributeValue::S(key.clone()));
        item.insert(dynamo::ATTR_ACTIVE.into(), AttributeValue::S(key));
        item.insert(
            dynamo::ATTR_TENANT_ACTIVE.into(),
            AttributeValue::S(dynamo::tenant_prefix(&Tenant::from(tenant))),
        );
        item
    };
    put_raw(&client, &table, under("tenant-b", &id)).await;

    assert_eq!(
        store
            .get(TaskRef {
                tenant: &"tenant-b".into(),
                task_id: &id
            })
            .await
            .unwrap(),
        None
    );
    for res in [
        engine
            .get(TaskRef::new(&"tenant-b".into(), &id))
            .await
            .map(|_| ()),
        engine.cancel(TaskRef::new(&"tenant-b".into(), &id)).await,
        engine
            .cancel_at_once(TaskRef::new(&"tenant-b".into(), &id))
            .await
            .map(|_| ()),
    ] {
        let e = res.expect_err("tenant B reaches no task");
        assert_eq!(e, mcp_tasks_core::engine::EngineError::NotFound);
        let wire = mcp_tasks_core::protocol::McpError::from(e);
        assert_eq!(wire.error.code, -32602, "{:?}", wire.error);
    }
    assert!(
        store
            .list_tenant_active(&"tenant-b".into(), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .get(TaskRef {
                tenant: &"tenant-a".into(),
                task_id: &id
            })
            .await
            .unwrap(),
        Some(a.clone()),
        "tenant A's task is untouched"
    );

    // Within one tenant: a copy under another task id is no second task.
    let other = TaskId::parse(format!("{id}-copy")).unwrap();
    put_raw(&client, &table, under("tenant-a", &other)).await;
    assert_eq!(
        store
            .get(TaskRef {
                tenant: &"tenant-a".into(),
                task_id: &other
            })
            .await
            .unwrap(),
        None
    );
    assert!(
        engine
            .cancel(TaskRef::new(&"tenant-a".into(), &other))
            .await
            .is_err()
    );
    let listed: Vec<String> = store
        .list_tenant_active(&"tenant-a".into(), None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.task_id.into())
        .collect();
    assert_eq!(listed, std::slice::from_ref(&id));
    assert_eq!(
        store
            .get(TaskRef {
                tenant: &"tenant-a".into(),
                task_id: &id
            })
            .await
            .unwrap(),
        Some(a)
    );
    drop_table(&client, &table).await;
}
