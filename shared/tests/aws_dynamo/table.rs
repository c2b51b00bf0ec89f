//! The table: created idempotently with its TTL, and the indexes added to older tables.

use aws_sdk_dynamodb::types::{AttributeValue, TimeToLiveStatus};
use mcp_tasks_core::aws::dynamo::{self, DynamoStore};
use mcp_tasks_core::store::TaskStore;
use mcp_tasks_core::store::contract::{args, task};
use mcp_tasks_core::task::TaskRef;
use mcp_tasks_core::task::TaskStatus;
use serde_json::json;

use crate::{client, drop_table, edit_raw, engine_over, fresh_store, raw_item, unique_table};

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
    store.create(&t, &args()).await.unwrap();
    let item = raw_item(
        &client,
        store.table_name(),
        dynamo::pk(TaskRef::new(&"a".into(), &t.task_id)),
    )
    .await
    .unwrap();
    // 1_700_000_090_623 ms is 1_700_000_090.623 s: DynamoDB gets whole seconds, rounded up,
    // two days (172,800 s) later, so it deletes nothing the sweep has not had time to purge
    // (and give its place back).
    assert_eq!(item[dynamo::ATTR_TTL].as_n().unwrap(), "1700172891");
    assert_eq!(
        item[dynamo::ATTR_EXPIRES_MS].as_n().unwrap(),
        "1700000090623"
    );

    let forever = task("a", None);
    store.create(&forever, &args()).await.unwrap();
    let item = raw_item(
        &client,
        store.table_name(),
        dynamo::pk(TaskRef::new(&"a".into(), &forever.task_id)),
    )
    .await
    .unwrap();
    assert!(!item.contains_key(dynamo::ATTR_TTL));
    assert!(!item.contains_key(dynamo::ATTR_EXPIRES_MS));
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
        store.create(&t, &args()).await.unwrap();
        active.push(t);
    }
    let mut done = task("a", None);
    store.create(&done, &args()).await.unwrap();
    done.complete(json!({"content": []})).unwrap();
    store.update(&done).await.unwrap();
    // Items as the previous release wrote them: without the attribute.
    for t in &active {
        client
            .update_item()
            .table_name(&name)
            .key(dynamo::ATTR_PK, AttributeValue::S(dynamo::pk(t.key())))
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
        let item = raw_item(&client, &name, dynamo::pk(t.key())).await.unwrap();
        assert_eq!(
            item[dynamo::ATTR_TENANT_ACTIVE].as_s().unwrap(),
            &dynamo::tenant_prefix(&t.tenant)
        );
        assert_eq!(
            item["version"].as_n().unwrap(),
            "0",
            "the backfill bumps no version"
        );
    }
    let item = raw_item(
        &client,
        &name,
        dynamo::pk(TaskRef::new(&"a".into(), &done.task_id)),
    )
    .await
    .unwrap();
    assert!(
        !item.contains_key(dynamo::ATTR_TENANT_ACTIVE),
        "finished: not backfilled"
    );
    let listed = store
        .list_tenant_active(&"a".into(), None, 10)
        .await
        .unwrap();
    let mut want = vec![active[0].task_id.clone(), active[2].task_id.clone()];
    want.sort();
    assert_eq!(
        listed.iter().map(|t| t.task_id.clone()).collect::<Vec<_>>(),
        want
    );
    assert_eq!(
        store
            .list_tenant_active(&"a#b".into(), None, 10)
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
/// A table made before the `quiet` index existed: `create_table` gives the working tasks
/// their quiet mark (not the finished ones nor those waiting for input) and adds the index,
/// after which the sweep sees the old orphans.
#[tokio::test]
async fn create_table_adds_the_quiet_index_and_backfills_the_working_tasks() {
    use std::time::Duration;
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let name = store.table_name().to_owned();
    let old = mcp_tasks_core::clock::now_ms() - 3_600_000;
    let mut orphan = task("a", None);
    orphan.last_updated_at_ms = old;
    store.create(&orphan, &args()).await.unwrap();
    let mut parked = task("a", None);
    parked.transition(TaskStatus::InputRequired).unwrap();
    parked.last_updated_at_ms = old;
    store.create(&parked, &args()).await.unwrap();
    // As the previous release left it: no quiet index, no mark on the items.
    client
        .update_table()
        .table_name(&name)
        .global_secondary_index_updates(
            aws_sdk_dynamodb::types::GlobalSecondaryIndexUpdate::builder()
                .delete(
                    aws_sdk_dynamodb::types::DeleteGlobalSecondaryIndexAction::builder()
                        .index_name(dynamo::INDEX_QUIET)
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    for t in [&orphan, &parked] {
        let key = dynamo::pk(TaskRef::new(&"a".into(), &t.task_id));
        edit_raw(&client, &name, key, "REMOVE #a", dynamo::ATTR_QUIET, None).await;
    }
    dynamo::create_table(&client, &name).await.unwrap();
    let item = raw_item(
        &client,
        &name,
        dynamo::pk(TaskRef::new(&"a".into(), &orphan.task_id)),
    )
    .await
    .unwrap();
    assert_eq!(
        item[dynamo::ATTR_QUIET].as_n().unwrap(),
        &{
            let mark = orphan.quiet_mark_ms().unwrap();
            mark - mark % mcp_tasks_core::task::QUIET_GRAIN_MS
        }
        .to_string()
    );
    assert_eq!(item["version"].as_n().unwrap(), "0", "no version bumped");
    let item = raw_item(
        &client,
        &name,
        dynamo::pk(TaskRef::new(&"a".into(), &parked.task_id)),
    )
    .await
    .unwrap();
    assert!(
        !item.contains_key(dynamo::ATTR_QUIET),
        "waiting for input: not a candidate"
    );
    let (engine, mut rx) = engine_over(&store);
    let stats = engine.sweep(Duration::from_secs(300)).await.unwrap();
    assert_eq!((stats.read, stats.requeued), (1, 1), "{stats:?}");
    assert_eq!(rx.try_recv().unwrap().task_id, orphan.task_id);
    assert_eq!(store.backfill_quiet_index().await.unwrap(), 0, "idempotent");
    drop_table(&client, &name).await;
}
