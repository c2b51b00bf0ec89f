//! A tenant's places (its active tasks, counted in one item per tenant): exact under racing
//! creations, started from the tasks a table already holds, and given back when a task left
//! without giving its place back (see `aws/dynamo/places.rs`).

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use mcp_tasks_core::aws::dynamo::{self, DynamoStore};
use mcp_tasks_core::engine::{CreateError, Engine, TaskSettings};
use mcp_tasks_core::quota::{Limit, Quotas};
use mcp_tasks_core::store::TaskStore;
use mcp_tasks_core::store::contract::{args, task};
use mcp_tasks_core::task::TaskRef;
use mcp_tasks_core::tenant::Tenant;
use serde_json::{Value, json};

use crate::{client, drop_table, edit_raw, fresh_store, racing_client, raw_item};

fn places_key(tenant: &str) -> String {
    format!("{}#places", dynamo::tenant_prefix(&Tenant::from(tenant)))
}

/// 64 `tools/call`s creating tasks at once, one tenant, a quota of 4: how many were stored.
/// The engine's whole path, admission and creation, against the table (writes sent one at a
/// time to moto, as DynamoDB applies them; see `racing_client`) — and, as the reference of the
/// same run, the order the engine had before: count the tenant's active tasks on the index,
/// then create (which let all 64 through).
#[tokio::test]
async fn sixty_four_racing_creations_against_a_quota_of_four_store_four() {
    let Some(client) = racing_client().await else {
        return;
    };
    let store = fresh_store(&client).await;
    let counted_first = futures_util::future::join_all((0..64).map(|_| {
        let store = store.clone();
        async move {
            if store
                .count_tenant_active(&"before".into(), 4)
                .await
                .unwrap()
                >= 4
            {
                return false;
            }
            store.create(&task("before", None), &args()).await.unwrap();
            true
        }
    }))
    .await;
    let reference = counted_first.iter().filter(|c| **c).count();
    let (queue, _rx) = mcp_tasks_core::queue::LocalQueue::new();
    let settings = TaskSettings {
        quotas: Quotas {
            max_active_tasks: 4,
            create_per_second: 0.0,
            ..Quotas::default()
        },
        ..TaskSettings::default()
    };
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(queue), settings);
    let outcomes = futures_util::future::join_all((0..64).map(|_| {
        let engine = engine.clone();
        async move {
            engine.admit(&"racer".into()).await?;
            let t = engine
                .create_task(&"racer".into(), "wait", json!({}), Value::Null, json!({}))
                .await?;
            Ok::<_, CreateError>(t)
        }
    }))
    .await;
    let created = outcomes.iter().filter(|o| o.is_ok()).count();
    let refused = outcomes
        .iter()
        .filter(|o| matches!(o, Err(CreateError::Quota(q)) if q.limit == Limit::ActiveTasks))
        .count();
    let stored = store
        .count_tenant_active(&"racer".into(), 1000)
        .await
        .unwrap();
    eprintln!(
        "aws_dynamo places: 64 racing creations, quota 4: {created} created, {refused} refused, \
         {stored} stored (reference, counting first: {reference} created)"
    );
    assert_eq!((created, refused, stored), (4, 60, 4));
    drop_table(&client, store.table_name()).await;
}

/// Sets the tenant's places item as if it was last recounted before `RECOUNT_AFTER` and its
/// counter had just moved (a busy tenant: tasks end and start every few seconds); with
/// `reservations_aged`, as if its reservations were all older than `RECENT` too.
async fn age_places(client: &aws_sdk_dynamodb::Client, table: &str, reservations_aged: bool) {
    let now = mcp_tasks_core::clock::now_ms();
    let long_ago = now - (dynamo::RECOUNT_AFTER + Duration::from_secs(1)).as_millis() as u64;
    let key = places_key("leak");
    edit_raw(
        client,
        table,
        key.clone(),
        "SET #a = :v",
        "rc",
        Some(AttributeValue::N(long_ago.to_string())),
    )
    .await;
    edit_raw(
        client,
        table,
        key.clone(),
        "SET #a = :v",
        "at",
        Some(AttributeValue::N(now.to_string())),
    )
    .await;
    if reservations_aged {
        let item = raw_item(client, table, key.clone()).await.unwrap();
        let buckets: Vec<&String> = item
            .keys()
            .filter(|k| {
                k.len() > 1 && k.starts_with('r') && k[1..].bytes().all(|b| b.is_ascii_digit())
            })
            .collect();
        for b in buckets {
            edit_raw(client, table, key.clone(), "REMOVE #a", b, None).await;
        }
    }
}

/// A record removed behind the store's back (a crash, a purge that lost its give-back) never
/// gave its place back. A busy tenant's counter moves all the time, so its next refusal
/// recounts once the last recount is `RECOUNT_AFTER` old, whatever the counter did since —
/// but never frees the places of reservations from the last `RECENT`, which may be creations
/// still writing their record.
#[tokio::test]
async fn a_busy_tenants_place_left_behind_is_given_back_at_a_refusal() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let (kept, gone) = (task("leak", None), task("leak", None));
    for t in [&kept, &gone] {
        assert!(store.create_within(t, &args(), 2).await.unwrap());
    }
    client
        .delete_item()
        .table_name(store.table_name())
        .key(
            dynamo::ATTR_PK,
            AttributeValue::S(dynamo::pk(TaskRef::new(&"leak".into(), &gone.task_id))),
        )
        .send()
        .await
        .unwrap();
    let create = || async {
        store
            .create_within(&task("leak", None), &args(), 2)
            .await
            .unwrap()
    };
    assert!(
        !create().await,
        "recounted a moment ago (when counting began): not yet"
    );
    age_places(&client, store.table_name(), false).await;
    assert!(
        !create().await,
        "both reservations are recent: either could be a creation in flight, nothing is freed"
    );
    age_places(&client, store.table_name(), true).await;
    assert!(
        create().await,
        "recounted though the counter moved a moment ago: one task is left, one place is free"
    );
    assert!(!create().await, "one place, not two");
    drop_table(&client, store.table_name()).await;
}

/// Tasks created before places were counted (no item for their tenant) hold theirs: the
/// tenant's first creation counts them on the index, and each gives its place back as it ends.
#[tokio::test]
async fn tasks_from_before_places_hold_theirs_and_give_them_back() {
    let Some(client) = client().await else { return };
    let store: DynamoStore = fresh_store(&client).await;
    let mut old = Vec::new();
    for _ in 0..3 {
        let t = task("older", None);
        store.create(&t, &args()).await.unwrap();
        old.push(t);
    }
    client
        .delete_item()
        .table_name(store.table_name())
        .key(dynamo::ATTR_PK, AttributeValue::S(places_key("older")))
        .send()
        .await
        .unwrap();
    assert!(
        !store
            .create_within(&task("older", None), &args(), 3)
            .await
            .unwrap()
    );
    let mut first = store.get(old[0].key()).await.unwrap().unwrap();
    first.cancel().unwrap();
    store.update(&first).await.unwrap();
    assert!(
        store
            .create_within(&task("older", None), &args(), 3)
            .await
            .unwrap()
    );
    assert!(
        !store
            .create_within(&task("older", None), &args(), 3)
            .await
            .unwrap()
    );
    drop_table(&client, store.table_name()).await;
}
