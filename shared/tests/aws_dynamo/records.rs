//! What a record holds: its size limit, DynamoDB's own limits, the arguments' own item.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use mcp_tasks_core::aws::dynamo::{self};
use mcp_tasks_core::store::contract::{args, task};
use mcp_tasks_core::store::{MAX_RECORD_BYTES, StoreError, TaskStore};
use mcp_tasks_core::task::{TaskId, TaskRef};
use serde_json::json;

use crate::{client, drop_table, fresh_store, raw_item};

#[tokio::test]
async fn oversized_records_are_refused_and_store_nothing() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let mut huge = task("a", None);
    huge.checkpoint = json!("y".repeat(MAX_RECORD_BYTES));
    assert!(
        matches!(store.create(&huge, &args()).await, Err(StoreError::TooLarge(n)) if n > MAX_RECORD_BYTES)
    );
    assert!(
        raw_item(
            &client,
            store.table_name(),
            dynamo::pk(TaskRef::new(&"a".into(), &huge.task_id))
        )
        .await
        .is_none()
    );

    let small = task("a", None);
    store.create(&small, &args()).await.unwrap();
    let mut done = store.get(small.key()).await.unwrap().unwrap();
    done.complete(json!({"content": [{"type": "text", "text": "z".repeat(MAX_RECORD_BYTES)}]}))
        .unwrap();
    assert!(matches!(
        store.update(&done).await,
        Err(StoreError::TooLarge(_))
    ));
    let now = store.get(small.key()).await.unwrap().unwrap();
    assert_eq!(now, small, "a refused update changes nothing");
    drop_table(&client, store.table_name()).await;
}

/// Records within MAX_RECORD_BYTES of JSON that DynamoDB would refuse as native attributes:
/// the adapter stores their structured fields as JSON text, so they fit as they do locally.
#[tokio::test]
async fn records_that_fit_locally_fit_dynamodb_too() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let mut deep = json!("leaf");
    for _ in 0..40 {
        deep = json!({ "d": deep });
    }
    let cases = [
        ("nested 40 levels", deep),
        (
            "numbers beyond DynamoDB's range",
            json!({"big": 1e300, "tiny": 1e-200}),
        ),
        // ~340 KB of JSON, ~510 KB in DynamoDB's accounting (3 bytes an element).
        ("long lists of small numbers", json!(vec![7; 170_000])),
    ];
    for (what, big) in cases {
        let mut t = task("a", Some(600_000));
        t.checkpoint = big;
        t.status_message = Some("step 1.5".into());
        // DynamoDB refuses the plain serde_dynamo item (this is why the fallback exists)...
        let mut plain: HashMap<String, AttributeValue> =
            serde_dynamo::aws_sdk_dynamodb_1::to_item(&t).unwrap();
        plain.insert(
            dynamo::ATTR_PK.into(),
            AttributeValue::S(format!("plain#{}", t.task_id)),
        );
        let refused = client
            .put_item()
            .table_name(store.table_name())
            .set_item(Some(plain))
            .send()
            .await;
        eprintln!(
            "{what}: plain serde_dynamo item accepted by the emulator: {}",
            refused.is_ok()
        );

        store
            .create(&t, &args())
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let read = store.get(t.key()).await.unwrap().unwrap();
        assert_eq!(read, t, "{what}");
        let mut next = read.clone();
        next.status_message = Some("moved".into());
        let v = store.update(&next).await.unwrap();
        assert_eq!(v, t.version + 1);
        let keys = store.list_active(None, 100).await.unwrap();
        assert!(
            keys.iter().any(|k| k.task_id == t.task_id),
            "{what}: listed"
        );
        let expired = store
            .list_expired(t.expires_at_ms().unwrap(), 100)
            .await
            .unwrap();
        assert!(
            expired.iter().any(|k| k.task_id == t.task_id),
            "{what}: expiry index"
        );
    }
    drop_table(&client, store.table_name()).await;
}

/// A task's arguments are one item of their own, written at creation: the record item a
/// checkpoint rewrites stays small however large the arguments, the arguments item is never
/// listed, keeps the task's TTL for DynamoDB to expire it, and goes with the task.
#[tokio::test]
async fn arguments_live_in_their_own_item_and_record_writes_leave_it_alone() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let given = json!({"seconds": 5, "pad": "p".repeat(200_000)});
    let t = task("big", Some(600_000));
    store.create(&t, &given).await.unwrap();

    let record = raw_item(
        &client,
        store.table_name(),
        dynamo::pk(TaskRef::new(&"big".into(), &t.task_id)),
    )
    .await
    .unwrap();
    assert!(!record.contains_key("arguments"));
    let record_bytes: usize = record
        .iter()
        .map(|(k, v)| k.len() + format!("{v:?}").len())
        .sum();
    assert!(
        record_bytes < 4_000,
        "the record item is {record_bytes} bytes"
    );

    let key = dynamo::arguments_key(TaskRef::new(&"big".into(), &t.task_id));
    let args_item = raw_item(&client, store.table_name(), key.clone())
        .await
        .unwrap();
    let mut names: Vec<&str> = args_item.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [dynamo::ATTR_ARGUMENTS, dynamo::ATTR_PK, dynamo::ATTR_TTL]
    );
    assert_eq!(
        args_item[dynamo::ATTR_TTL],
        record[dynamo::ATTR_TTL],
        "expires with its task"
    );

    // Checkpoints and the end of the task rewrite the record only.
    let mut cur = store.get(t.key()).await.unwrap().unwrap();
    for step in 0..3 {
        cur.checkpoint = json!({"step": step});
        cur.version = store.update(&cur).await.unwrap();
    }
    cur.complete(json!({"content": []})).unwrap();
    store.update(&cur).await.unwrap();
    let after = raw_item(&client, store.table_name(), key.clone())
        .await
        .unwrap();
    assert_eq!(after, args_item);
    assert_eq!(store.arguments(t.key()).await.unwrap(), Some(given));

    // Never listed, never readable as a task, not even by its own tenant.
    let other = task("big", Some(600_000));
    store.create(&other, &args()).await.unwrap();
    let listed = store.list_active(None, 100).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        store
            .list_tenant_active(&"big".into(), None, 100)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        store.count_tenant_active(&"big".into(), 100).await.unwrap(),
        1
    );
    assert_eq!(store.list_expired(u64::MAX, 100).await.unwrap().len(), 2);
    let as_id = key
        .strip_prefix(&dynamo::tenant_prefix(&"big".into()))
        .unwrap();
    // The arguments item's key is no task's: its id part is no task id, so no request can
    // name it (a `TaskRef` holds a `TaskId`).
    assert_eq!(TaskId::parse(as_id), None);

    store.delete(t.key()).await.unwrap();
    assert!(raw_item(&client, store.table_name(), key).await.is_none());
    drop_table(&client, store.table_name()).await;
}
