//! The task store contract and the DynamoDB-specific promises, against a DynamoDB emulator:
//! moto in the test command (`scripts/aws-emulator.sh start`), or Amazon's DynamoDB Local
//! (`scripts/dynamodb-local.sh start`, which needs an AWS account under its licence).
//!
//! The endpoint comes from `DYNAMODB_ENDPOINT`, else `AWS_ENDPOINT_URL_DYNAMODB`. Without either
//! the tests print a loud SKIPPED line and pass — unless `REQUIRE_EMULATORS` is set (to
//! anything but empty or `0`; CI sets `1`), where a missing emulator is a failure.
//!
//! ```text
//! scripts/aws-emulator.sh start
//! DYNAMODB_ENDPOINT=$(cat .tools/moto/endpoint) cargo test -p mcp-tasks-core --features aws --test aws_dynamo
//! ```
//!
//! Credentials and region: the environment's when `AWS_ACCESS_KEY_ID` is set, otherwise dummy
//! ones (`test`/`test`, `us-east-1`), so a run never reaches for instance metadata or a real
//! account's configuration. Every store gets a fresh table with a random name.
//!
//! DynamoDB Local updates its global secondary indexes synchronously; real DynamoDB does so
//! within about a second, so against AWS the listing checks here (and the contract's) could
//! see a write late. Point these tests at the emulator.

mod common;

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{Credentials, Region};
use aws_sdk_dynamodb::types::{AttributeValue, TimeToLiveStatus};
use mcp_tasks_core::aws::dynamo::{self, DynamoStore};
use mcp_tasks_core::store::contract::task;
use mcp_tasks_core::store::{MAX_RECORD_BYTES, StoreError, TaskKey, TaskStore, contract};
use mcp_tasks_core::task::TaskStatus;
use serde_json::json;

/// A client for the emulator, or `None` (after the SKIPPED line) when there is none.
async fn client() -> Option<Client> {
    let [endpoint] = common::endpoints("aws_dynamo", [common::DYNAMODB])?;
    let mut loader =
        aws_config::defaults(aws_config::BehaviorVersion::latest()).endpoint_url(endpoint);
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        loader = loader.credentials_provider(Credentials::new(
            "test",
            "test",
            None,
            None,
            "aws_dynamo test",
        ));
    }
    if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none()
    {
        loader = loader.region(Region::new("us-east-1"));
    }
    Some(Client::new(&loader.load().await))
}

fn unique_table() -> String {
    format!(
        "mcp-tasks-test-{}",
        ulid::Ulid::new().to_string().to_lowercase()
    )
}

/// A store on a fresh table.
async fn fresh_store(client: &Client) -> DynamoStore {
    let name = unique_table();
    dynamo::create_table(client, &name).await.unwrap();
    DynamoStore::new(client.clone(), name)
}

/// Drops a test table (the emulator is in memory; this keeps long sessions small).
async fn drop_table(client: &Client, name: &str) {
    let _ = client.delete_table().table_name(name).send().await;
}

async fn raw_item(
    client: &Client,
    table: &str,
    pk: String,
) -> Option<HashMap<String, AttributeValue>> {
    client
        .get_item()
        .table_name(table)
        .key(dynamo::ATTR_PK, AttributeValue::S(pk))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
}

#[tokio::test]
async fn dynamo_store_passes_the_contract() {
    let Some(client) = client().await else { return };
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
async fn create_table_is_idempotent_and_enables_ttl_in_seconds() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    dynamo::create_table(&client, store.table_name())
        .await
        .unwrap();
    let ttl = client
        .describe_time_to_live()
        .table_name(store.table_name())
        .send()
        .await
        .unwrap();
    let d = ttl.time_to_live_description().unwrap();
    assert_eq!(d.attribute_name(), Some(dynamo::ATTR_TTL));
    assert!(matches!(
        d.time_to_live_status(),
        Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
    ));

    let mut t = task("a", Some(90_500));
    t.created_at_ms = 1_700_000_000_123;
    store.create(&t).await.unwrap();
    let item = raw_item(&client, store.table_name(), dynamo::pk("a", &t.task_id))
        .await
        .unwrap();
    // 1_700_000_090_623 ms is 1_700_000_090.623 s: DynamoDB gets whole seconds, rounded up so
    // it never deletes a task before the engine considers it expired.
    assert_eq!(item[dynamo::ATTR_TTL].as_n().unwrap(), "1700000091");
    assert_eq!(
        item[dynamo::ATTR_EXPIRES_MS].as_n().unwrap(),
        "1700000090623"
    );

    let forever = task("a", None);
    store.create(&forever).await.unwrap();
    let item = raw_item(
        &client,
        store.table_name(),
        dynamo::pk("a", &forever.task_id),
    )
    .await
    .unwrap();
    assert!(!item.contains_key(dynamo::ATTR_TTL));
    assert!(!item.contains_key(dynamo::ATTR_EXPIRES_MS));
    drop_table(&client, store.table_name()).await;
}

#[tokio::test]
async fn a_task_is_never_readable_or_writable_from_another_tenant() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    // Task ids may contain '#': ("a#b", "c") and ("a", "b#c") must stay two different tasks.
    let mut one = task("a#b", None);
    one.task_id = "c".into();
    let mut two = task("a", None);
    two.task_id = "b#c".into();
    store.create(&one).await.unwrap();
    store.create(&two).await.unwrap();
    assert_eq!(store.get("a#b", "c").await.unwrap(), Some(one.clone()));
    assert_eq!(store.get("a", "b#c").await.unwrap(), Some(two.clone()));

    let t = task("tenant-a", None);
    store.create(&t).await.unwrap();
    for other in ["tenant-b", "tenant-a#", "", "tenant"] {
        assert_eq!(
            store.get(other, &t.task_id).await.unwrap(),
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
        store.delete(other, &t.task_id).await.unwrap();
        // A failed conditional update must not have created an item under the foreign key.
        assert!(
            raw_item(&client, store.table_name(), dynamo::pk(other, &t.task_id))
                .await
                .is_none()
        );
    }
    assert_eq!(store.get("tenant-a", &t.task_id).await.unwrap(), Some(t));
    drop_table(&client, store.table_name()).await;
}

#[tokio::test]
async fn oversized_records_are_refused_and_store_nothing() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let mut huge = task("a", None);
    huge.arguments = json!("y".repeat(MAX_RECORD_BYTES));
    assert!(
        matches!(store.create(&huge).await, Err(StoreError::TooLarge(n)) if n > MAX_RECORD_BYTES)
    );
    assert!(
        raw_item(&client, store.table_name(), dynamo::pk("a", &huge.task_id))
            .await
            .is_none()
    );

    let small = task("a", None);
    store.create(&small).await.unwrap();
    let mut done = store.get("a", &small.task_id).await.unwrap().unwrap();
    done.complete(json!({"content": [{"type": "text", "text": "z".repeat(MAX_RECORD_BYTES)}]}))
        .unwrap();
    assert!(matches!(
        store.update(&done).await,
        Err(StoreError::TooLarge(_))
    ));
    let now = store.get("a", &small.task_id).await.unwrap().unwrap();
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
    for (what, args) in cases {
        let mut t = task("a", Some(600_000));
        t.arguments = args;
        t.checkpoint = json!({"step": 1.5, "list": [1, 2, 3]});
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
            .create(&t)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let read = store.get("a", &t.task_id).await.unwrap().unwrap();
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

/// Paging crosses index shards: every page but the last is full, `after` may be a key that has
/// since left the index, and terminal tasks drop out of the listing.
#[tokio::test]
async fn active_listing_pages_across_shards() {
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let mut all = Vec::new();
    for i in 0..40 {
        let t = task(&format!("t{}", i % 4), None);
        store.create(&t).await.unwrap();
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
    let mut done = store
        .get(&pivot.tenant, &pivot.task_id)
        .await
        .unwrap()
        .unwrap();
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
        store.create(&t).await.unwrap();
        ids.push(t.task_id);
    }
    ids.sort();
    for stale in [&ids[0], &ids[2]] {
        client
            .update_item()
            .table_name(store.table_name())
            .key(dynamo::ATTR_PK, AttributeValue::S(dynamo::pk("t", stale)))
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
    let first = ids_of(store.list_tenant_active("t", None, 2).await.unwrap());
    assert_eq!(first, vec![ids[1].clone(), ids[3].clone()]);
    let rest = ids_of(
        store
            .list_tenant_active("t", Some(&ids[3]), 2)
            .await
            .unwrap(),
    );
    assert_eq!(rest, ids[4..].to_vec());
    drop_table(&client, store.table_name()).await;
}

/// A table made before the `tenant_active` index existed: `create_table` backfills the
/// attribute onto its active items (not the finished ones) and adds the index, after which the
/// tenant listing finds the old tasks.
#[tokio::test]
async fn create_table_adds_the_tenant_index_to_an_older_table_and_backfills_it() {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
        Projection, ProjectionType, ScalarAttributeType,
    };
    let Some(client) = client().await else { return };
    let name = unique_table();
    let key = |attr: &str, kind: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(attr)
            .key_type(kind)
            .build()
            .unwrap()
    };
    let def = |attr: &str, kind: ScalarAttributeType| {
        AttributeDefinition::builder()
            .attribute_name(attr)
            .attribute_type(kind)
            .build()
            .unwrap()
    };
    let index = |index: &str, sort: &str| {
        GlobalSecondaryIndex::builder()
            .index_name(index)
            .key_schema(key(dynamo::ATTR_SHARD, KeyType::Hash))
            .key_schema(key(sort, KeyType::Range))
            .projection(
                Projection::builder()
                    .projection_type(ProjectionType::KeysOnly)
                    .build(),
            )
            .build()
            .unwrap()
    };
    // The layout of the previous release.
    client
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key(dynamo::ATTR_PK, KeyType::Hash))
        .attribute_definitions(def(dynamo::ATTR_PK, ScalarAttributeType::S))
        .attribute_definitions(def(dynamo::ATTR_SHARD, ScalarAttributeType::N))
        .attribute_definitions(def(dynamo::ATTR_ACTIVE, ScalarAttributeType::S))
        .attribute_definitions(def(dynamo::ATTR_EXPIRES_MS, ScalarAttributeType::N))
        .global_secondary_indexes(index(dynamo::INDEX_ACTIVE, dynamo::ATTR_ACTIVE))
        .global_secondary_indexes(index(dynamo::INDEX_EXPIRY, dynamo::ATTR_EXPIRES_MS))
        .send()
        .await
        .unwrap();
    let store = DynamoStore::new(client.clone(), name.clone());
    let mut active = Vec::new();
    for tenant in ["a", "a#b", "a", "b"] {
        let t = task(tenant, None);
        store.create(&t).await.unwrap();
        active.push(t);
    }
    let mut done = task("a", None);
    store.create(&done).await.unwrap();
    done.complete(json!({"content": []})).unwrap();
    store.update(&done).await.unwrap();
    // Items as the previous release wrote them: without the attribute.
    for t in &active {
        client
            .update_item()
            .table_name(&name)
            .key(
                dynamo::ATTR_PK,
                AttributeValue::S(dynamo::pk(&t.tenant, &t.task_id)),
            )
            .update_expression("REMOVE #t")
            .expression_attribute_names("#t", dynamo::ATTR_TENANT_ACTIVE)
            .send()
            .await
            .unwrap();
    }

    dynamo::create_table(&client, &name).await.unwrap();
    let table = client
        .describe_table()
        .table_name(&name)
        .send()
        .await
        .unwrap();
    let gsi = table
        .table()
        .unwrap()
        .global_secondary_indexes()
        .iter()
        .find(|i| i.index_name() == Some(dynamo::INDEX_TENANT_ACTIVE))
        .expect("the tenant index was added");
    let schema: Vec<(&str, &KeyType)> = gsi
        .key_schema()
        .iter()
        .map(|k| (k.attribute_name(), k.key_type()))
        .collect();
    assert_eq!(
        schema,
        vec![
            (dynamo::ATTR_TENANT_ACTIVE, &KeyType::Hash),
            (dynamo::ATTR_PK, &KeyType::Range)
        ]
    );
    for t in &active {
        let item = raw_item(&client, &name, dynamo::pk(&t.tenant, &t.task_id))
            .await
            .unwrap();
        assert_eq!(
            item[dynamo::ATTR_TENANT_ACTIVE].as_s().unwrap(),
            &dynamo::tenant_hash(&t.tenant)
        );
        assert_eq!(
            item["version"].as_n().unwrap(),
            "0",
            "the backfill bumps no version"
        );
    }
    let item = raw_item(&client, &name, dynamo::pk("a", &done.task_id))
        .await
        .unwrap();
    assert!(
        !item.contains_key(dynamo::ATTR_TENANT_ACTIVE),
        "finished: not backfilled"
    );
    let listed = store.list_tenant_active("a", None, 10).await.unwrap();
    let mut want = vec![active[0].task_id.clone(), active[2].task_id.clone()];
    want.sort();
    assert_eq!(
        listed.iter().map(|t| t.task_id.clone()).collect::<Vec<_>>(),
        want
    );
    assert_eq!(
        store
            .list_tenant_active("a#b", None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    // Idempotent: nothing left to backfill, nothing to add.
    assert_eq!(store.backfill_tenant_index().await.unwrap(), 0);
    dynamo::create_table(&client, &name).await.unwrap();
    drop_table(&client, &name).await;
}
