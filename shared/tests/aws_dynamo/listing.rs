//! The active listings: paging across index shards, stale index entries skipped.

use aws_sdk_dynamodb::types::AttributeValue;
use mcp_tasks_core::aws::dynamo::{self};
use mcp_tasks_core::store::contract::{args, task};
use mcp_tasks_core::store::{TaskKey, TaskStore};
use mcp_tasks_core::task::TaskRef;

use crate::{client, drop_table, fresh_store};

/// Paging crosses index shards: every page but the last is full, `after` may be a key that has
/// since left the index, and terminal tasks drop out of the listing.
#[tokio::test]
async fn active_listing_pages_across_shards() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let mut all = Vec::new();
    for i in 0..40 {
        let t = task(&format!("t{}", i % 4), None);
        store.create(&t, &args()).await.unwrap();
        all.push(t);
    }
    let mut pages = Vec::new();
    let mut after: Option<TaskKey> = None;
    loop {
        let page = store.list_active(after.as_ref(), 6).await.unwrap();
        let short = page.len() < 6;
        after = page.last().cloned();
        pages.push(page);
        if short {
            break;
        }
    }
    let listed: Vec<TaskKey> = pages.concat();
    assert_eq!(listed.len(), 40);
    assert_eq!(pages.len(), 7, "six full pages and one of four");

    // Continue after a key that has since finished (it left the index).
    let pivot = listed[9].clone();
    let mut done = store.get(pivot.borrowed()).await.unwrap().unwrap();
    done.cancel().unwrap();
    store.update(&done).await.unwrap();
    let rest = store.list_active(Some(&pivot), 100).await.unwrap();
    assert_eq!(rest, listed[10..].to_vec());
    let everything = store.list_active(None, 100).await.unwrap();
    assert_eq!(everything.len(), 39);
    assert!(!everything.contains(&pivot));
    assert!(store.list_active(None, 0).await.unwrap().is_empty());
    drop_table(&client, store.table_name()).await;
}

/// The tenant listing drops index entries whose task has finished since (the index lags the
/// table on AWS; here the item is made terminal behind the adapter's back, keeping its index
/// attribute) and refills the page from the index, so a short page still means the end.
#[tokio::test]
async fn tenant_listing_skips_stale_index_entries_and_keeps_pages_full() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let mut ids = Vec::new();
    for _ in 0..6 {
        let t = task("t", None);
        store.create(&t, &args()).await.unwrap();
        ids.push(t.task_id);
    }
    ids.sort();
    for stale in [&ids[0], &ids[2]] {
        client
            .update_item()
            .table_name(store.table_name())
            .key(
                dynamo::ATTR_PK,
                AttributeValue::S(dynamo::pk(TaskRef::new(&"t".into(), stale))),
            )
            .update_expression("SET #s = :done")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":done", AttributeValue::S("completed".into()))
            .send()
            .await
            .unwrap();
    }
    let ids_of = |page: Vec<mcp_tasks_core::task::TaskRecord>| {
        page.into_iter().map(|t| t.task_id).collect::<Vec<_>>()
    };
    let first = ids_of(
        store
            .list_tenant_active(&"t".into(), None, 2)
            .await
            .unwrap(),
    );
    assert_eq!(first, vec![ids[1].clone(), ids[3].clone()]);
    let rest = ids_of(
        store
            .list_tenant_active(&"t".into(), Some(&ids[3]), 2)
            .await
            .unwrap(),
    );
    assert_eq!(rest, ids[4..].to_vec());
    drop_table(&client, store.table_name()).await;
}
