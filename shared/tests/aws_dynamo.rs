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
//! DYNAMODB_ENDPOINT=$(cat .tools/moto/endpoint) cargo test -p mcp-tasks-core --features aws,contracts --test aws_dynamo
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
use mcp_tasks_core::store::contract::{args, task};
use mcp_tasks_core::store::{MAX_RECORD_BYTES, StoreError, TaskKey, TaskRef, TaskStore, contract};
use mcp_tasks_core::task::{TaskRecord, TaskStatus};
use serde_json::{Value, json};

/// A client for the emulator, or `None` (after the SKIPPED line) when there is none.
async fn client() -> Option<Client> {
    let [endpoint] = common::endpoints("aws_dynamo", [common::DYNAMODB])?;
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(mcp_tasks_core::aws::https_client())
        .endpoint_url(endpoint);
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
    store.create(&forever, &args()).await.unwrap();
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
    store.create(&one, &args()).await.unwrap();
    store.create(&two, &args()).await.unwrap();
    assert_eq!(
        store
            .get(TaskRef {
                tenant: "a#b",
                task_id: "c"
            })
            .await
            .unwrap(),
        Some(one.clone())
    );
    assert_eq!(
        store
            .get(TaskRef {
                tenant: "a",
                task_id: "b#c"
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
                    tenant: other,
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
                tenant: other,
                task_id: &t.task_id,
            })
            .await
            .unwrap();
        // A failed conditional update must not have created an item under the foreign key.
        assert!(
            raw_item(&client, store.table_name(), dynamo::pk(other, &t.task_id))
                .await
                .is_none()
        );
    }
    assert_eq!(store.get(t.key()).await.unwrap(), Some(t));
    drop_table(&client, store.table_name()).await;
}

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
        raw_item(&client, store.table_name(), dynamo::pk("a", &huge.task_id))
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
            &dynamo::tenant_prefix(&t.tenant)
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

/// How the test proxy spoils the first `PutItem` it sees of the kind it is told ([`Spoil`]);
/// then it passes everything through.
#[derive(Clone, Copy, Debug)]
enum Loss {
    /// Forward the write, then answer 500 as if the answer were lost: the write landed.
    AnswerLost,
    /// Answer 500 without forwarding: the write never happened.
    RequestLost,
    /// Answer 500 at once and forward the write 300 ms later: it lands after the store looked.
    LandsLate,
    /// As `AnswerLost`, and the next `GetItem` (the store's read-back) fails too.
    AnswerAndReadLost,
}

/// Which `PutItem` of a create a [`lossy_proxy`] spoils: the arguments item's or the record's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spoil {
    Arguments,
    Record,
}

/// A proxy in front of the emulator that spoils the first `PutItem` as `loss` says; returns
/// the endpoint and the number of `PutItem` requests it saw.
async fn lossy_proxy(
    endpoint: String,
    loss: Loss,
    spoil: Spoil,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let puts = Arc::new(AtomicUsize::new(0));
    let fail_get = Arc::new(AtomicBool::new(false));
    let http = reqwest::Client::new();
    let counter = puts.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let (http, endpoint, counter, fail_get) = (
            http.clone(),
            endpoint.clone(),
            counter.clone(),
            fail_get.clone(),
        );
        async move {
            let (parts, body) = req.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let arguments_item = String::from_utf8_lossy(&body).contains("#args#");
            let target = parts
                .headers
                .get("x-amz-target")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let error = || {
                axum::response::Response::builder()
                    .status(500)
                    .header("content-type", "application/x-amz-json-1.0")
                    .body(axum::body::Body::from(
                        r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"lost"}"#,
                    ))
                    .unwrap()
            };
            let forward = {
                let mut fwd = http.post(format!("{endpoint}{}", parts.uri.path()));
                for (k, v) in &parts.headers {
                    if k != "host" && k != "content-length" {
                        fwd = fwd.header(k, v);
                    }
                }
                fwd.body(body)
            };
            let spoil = target.ends_with(".PutItem")
                && arguments_item == (spoil == Spoil::Arguments)
                && counter.fetch_add(1, Ordering::SeqCst) == 0;
            if target.ends_with(".GetItem") && fail_get.swap(false, Ordering::SeqCst) {
                return error();
            }
            if spoil {
                match loss {
                    Loss::RequestLost => return error(),
                    Loss::LandsLate => {
                        tokio::spawn(async move {
                            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                            forward.send().await.unwrap();
                        });
                        return error();
                    }
                    Loss::AnswerLost | Loss::AnswerAndReadLost => {
                        forward.send().await.unwrap();
                        fail_get.store(matches!(loss, Loss::AnswerAndReadLost), Ordering::SeqCst);
                        return error();
                    }
                }
            }
            let resp = forward.send().await.unwrap();
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let bytes = resp.bytes().await.unwrap();
            let mut out = axum::response::Response::builder().status(status);
            for (k, v) in &headers {
                if k != "content-length" && k != "transfer-encoding" {
                    out = out.header(k, v);
                }
            }
            out.body(axum::body::Body::from(bytes)).unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), puts)
}

/// A conditional write whose answer is lost (it landed), whose request is lost (it did not),
/// which lands only after the store looked, or whose read-back fails too, is neither reported
/// as a conflict nor applied twice. Arguments with a float (`2.0`, which DynamoDB hands back
/// as `2`) must not defeat the check. A real conflict through the same proxy is a conflict.
#[tokio::test]
async fn a_lost_answer_to_a_conditional_write_is_not_a_conflict() {
    let Some(c) = client().await else { return };
    let [endpoint] = common::endpoints("aws_dynamo", [common::DYNAMODB]).unwrap();
    let direct = fresh_store(&c).await;
    for loss in [
        Loss::AnswerLost,
        Loss::RequestLost,
        Loss::LandsLate,
        Loss::AnswerAndReadLost,
    ] {
        // create, then update, each through a fresh proxy that spoils its first PutItem
        let store = |url: String| {
            let conf = c.config().to_builder().endpoint_url(url).build();
            DynamoStore::new(Client::from_conf(conf), direct.table_name())
        };
        // The create's two writes (arguments, then the record), each spoiled in turn.
        let args = json!({"seconds": 2.0, "ratio": 0.5, "n": 3});
        let mut t = task("lossy", None);
        for spoil in [Spoil::Arguments, Spoil::Record] {
            t = task("lossy", None);
            let (url, _) = lossy_proxy(endpoint.clone(), loss, spoil).await;
            store(url)
                .create(&t, &args)
                .await
                .unwrap_or_else(|e| panic!("{loss:?} {spoil:?}: create: {e}"));
            tokio::time::sleep(std::time::Duration::from_millis(400)).await; // a late landing
            let stored = direct.get(t.key()).await.unwrap().unwrap();
            assert_eq!(stored.version, t.version, "{loss:?} {spoil:?}");
            assert_eq!(
                direct.arguments(t.key()).await.unwrap(),
                Some(args.clone()),
                "{loss:?} {spoil:?}"
            );
        }
        let stored = direct.get(t.key()).await.unwrap().unwrap();

        let mut next = stored.clone();
        next.status_message = Some("halfway".into());
        let (url, puts) = lossy_proxy(endpoint.clone(), loss, Spoil::Record).await;
        let s = store(url);
        assert_eq!(
            s.update(&next)
                .await
                .unwrap_or_else(|e| panic!("{loss:?}: update: {e}")),
            stored.version + 1,
            "{loss:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(400)).await; // a late landing
        let now = direct.get(t.key()).await.unwrap().unwrap();
        assert_eq!(now.version, stored.version + 1, "{loss:?}: applied once");
        assert_eq!(now.status_message.as_deref(), Some("halfway"));
        assert!(
            puts.load(std::sync::atomic::Ordering::SeqCst) <= 2,
            "{loss:?}"
        );
        // The proxy passes everything now: a stale write is still a conflict.
        assert!(
            matches!(s.update(&next).await, Err(StoreError::Conflict)),
            "{loss:?}"
        );
    }
    drop_table(&c, direct.table_name()).await;
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

    let record = raw_item(&client, store.table_name(), dynamo::pk("big", &t.task_id))
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

    let key = dynamo::arguments_key("big", &t.task_id);
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
            .list_tenant_active("big", None, 100)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(store.count_tenant_active("big", 100).await.unwrap(), 1);
    assert_eq!(store.list_expired(u64::MAX, 100).await.unwrap().len(), 2);
    let as_id = key.strip_prefix(&dynamo::tenant_prefix("big")).unwrap();
    assert_eq!(
        store
            .get(TaskRef {
                tenant: "big",
                task_id: as_id
            })
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .arguments(TaskRef {
                tenant: "big",
                task_id: as_id
            })
            .await
            .unwrap(),
        None
    );

    store.delete(t.key()).await.unwrap();
    assert!(raw_item(&client, store.table_name(), key).await.is_none());
    drop_table(&client, store.table_name()).await;
}

/// An engine over `store` with an in-process queue (what it enqueues arrives on the receiver).
fn engine_over(
    store: &DynamoStore,
) -> (
    mcp_tasks_core::engine::Engine,
    tokio::sync::mpsc::UnboundedReceiver<mcp_tasks_core::queue::WorkMessage>,
) {
    let (queue, rx) = mcp_tasks_core::queue::LocalQueue::new();
    let engine = mcp_tasks_core::engine::Engine::new(
        std::sync::Arc::new(store.clone()),
        std::sync::Arc::new(queue),
        mcp_tasks_core::engine::TaskSettings::default(),
    );
    (engine, rx)
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

/// Changes one item by hand: `expression` with the attribute named `#a` set to `attr`.
async fn edit_raw(
    client: &Client,
    table: &str,
    key: String,
    expression: &str,
    attr: &str,
    value: Option<AttributeValue>,
) {
    let mut req = client
        .update_item()
        .table_name(table)
        .key(dynamo::ATTR_PK, AttributeValue::S(key))
        .update_expression(expression)
        .expression_attribute_names("#a", attr);
    if let Some(v) = value {
        req = req.expression_attribute_values(":v", v);
    }
    req.send().await.unwrap();
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

    let original = raw_item(&client, &table, dynamo::pk("tenant-a", &id))
        .await
        .unwrap();
    let under = |tenant: &str, task_id: &str| {
        let mut item = original.clone();
        let key = dynamo::pk(tenant, task_id);
        item.insert(dynamo::ATTR_PK.into(), AttributeValue::S(key.clone()));
        item.insert(dynamo::ATTR_ACTIVE.into(), AttributeValue::S(key));
        item.insert(
            dynamo::ATTR_TENANT_ACTIVE.into(),
            AttributeValue::S(dynamo::tenant_prefix(tenant)),
        );
        item
    };
    put_raw(&client, &table, under("tenant-b", &id)).await;

    assert_eq!(
        store
            .get(TaskRef {
                tenant: "tenant-b",
                task_id: &id
            })
            .await
            .unwrap(),
        None
    );
    for res in [
        engine.get("tenant-b", &id).await.map(|_| ()),
        engine.cancel("tenant-b", &id).await,
        engine.cancel_at_once("tenant-b", &id).await.map(|_| ()),
    ] {
        let e = res.expect_err("tenant B reaches no task");
        assert_eq!(e, mcp_tasks_core::engine::EngineError::NotFound);
        let wire = mcp_tasks_core::protocol::McpError::from(e);
        assert_eq!(wire.error.code, -32602, "{:?}", wire.error);
    }
    assert!(
        store
            .list_tenant_active("tenant-b", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .get(TaskRef {
                tenant: "tenant-a",
                task_id: &id
            })
            .await
            .unwrap(),
        Some(a.clone()),
        "tenant A's task is untouched"
    );

    // Within one tenant: a copy under another task id is no second task.
    let other = format!("{id}-copy");
    put_raw(&client, &table, under("tenant-a", &other)).await;
    assert_eq!(
        store
            .get(TaskRef {
                tenant: "tenant-a",
                task_id: &other
            })
            .await
            .unwrap(),
        None
    );
    assert!(engine.cancel("tenant-a", &other).await.is_err());
    let listed: Vec<String> = store
        .list_tenant_active("tenant-a", None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.task_id)
        .collect();
    assert_eq!(listed, std::slice::from_ref(&id));
    assert_eq!(
        store
            .get(TaskRef {
                tenant: "tenant-a",
                task_id: &id
            })
            .await
            .unwrap(),
        Some(a)
    );
    drop_table(&client, &table).await;
}

/// Items this release cannot decode — a status it does not know (a rollback after a release
/// that added one), a missing field (a hand edit) — neither stop the sweep nor the purge: they
/// are skipped and counted, every orphan is still re-queued and every expired task (bad ones
/// included) purged. `tasks/get` on such an item answers as for an unknown task (`-32602`),
/// not `-32603`.
#[tokio::test]
async fn the_sweep_and_the_purge_go_on_past_items_they_cannot_decode() {
    use mcp_tasks_core::engine::{PurgeStats, SweepStats};
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let table = store.table_name().to_owned();
    let (engine, mut rx) = engine_over(&store);
    let now = mcp_tasks_core::clock::now_ms();
    let make = |ttl: Option<u64>, age_ms: u64| {
        let mut t = task("t", ttl);
        t.created_at_ms = now - age_ms;
        t.last_updated_at_ms = t.created_at_ms;
        t
    };
    // Orphans: stored, never enqueued, idle for a minute.
    let mut orphans = Vec::new();
    for _ in 0..8 {
        let t = make(Some(3_600_000), 60_000);
        store.create(&t, &args()).await.unwrap();
        orphans.push(t.task_id);
    }
    // Bad items, idle orphans too.
    let unknown_status = make(Some(3_600_000), 60_000);
    let missing_field = make(Some(3_600_000), 60_000);
    let expired_bad = make(Some(1_000), 60_000);
    let expired = make(Some(1_000), 60_000);
    for t in [&unknown_status, &missing_field, &expired_bad, &expired] {
        store.create(t, &args()).await.unwrap();
    }
    for t in [&unknown_status, &expired_bad] {
        let paused = Some(AttributeValue::S("paused".into()));
        let key = dynamo::pk("t", &t.task_id);
        edit_raw(&client, &table, key, "SET #a = :v", "status", paused).await;
    }
    let key = dynamo::pk("t", &missing_field.task_id);
    edit_raw(&client, &table, key, "REMOVE #a", "version", None).await;

    let stats = engine.sweep(std::time::Duration::from_secs(30)).await;
    let stats = stats.expect("the sweep goes past items it cannot decode");
    assert_eq!(
        stats,
        SweepStats {
            requeued: orphans.len(),
            skipped: 3,
            // The orphans and the readable expired task: listed, read, one left to the purge.
            read: orphans.len() + 1,
            complete: true,
            ..SweepStats::default()
        }
    );
    let mut requeued = Vec::new();
    while let Ok(m) = rx.try_recv() {
        requeued.push(m.task_id);
    }
    requeued.sort();
    orphans.sort();
    assert_eq!(requeued, orphans);

    for t in [&unknown_status, &missing_field] {
        let e = engine.get("t", &t.task_id).await.expect_err("unreadable");
        assert_eq!(
            e,
            mcp_tasks_core::engine::EngineError::NotFound,
            "answered as unknown"
        );
        let wire = mcp_tasks_core::protocol::McpError::from(e);
        assert_eq!(wire.error.code, -32602, "{:?}", wire.error);
    }

    let purged = engine.purge().await.expect("the purge goes on");
    assert_eq!(
        purged,
        PurgeStats {
            purged: 2,
            failed: 0
        }
    );
    for t in [&expired, &expired_bad] {
        let key = dynamo::pk("t", &t.task_id);
        assert!(raw_item(&client, &table, key).await.is_none());
    }
    drop_table(&client, &table).await;
}

/// A local queue that reports `waiting` messages (as SQS's `ApproximateNumberOfMessages`).
struct Backlogged(mcp_tasks_core::queue::LocalQueue, u64);

#[async_trait::async_trait]
impl mcp_tasks_core::queue::WorkQueue for Backlogged {
    async fn enqueue(
        &self,
        msg: mcp_tasks_core::queue::WorkMessage,
        delay: std::time::Duration,
    ) -> Result<(), mcp_tasks_core::queue::QueueError> {
        self.0.enqueue(msg, delay).await
    }
    async fn waiting(&self) -> Result<Option<u64>, mcp_tasks_core::queue::QueueError> {
        Ok(Some(self.1))
    }
}

/// Creates `n` tasks made by `make`, 32 at a time.
async fn create_many(store: &DynamoStore, n: usize, make: impl Fn() -> TaskRecord) -> Vec<String> {
    use futures_util::StreamExt as _;
    let tasks: Vec<TaskRecord> = (0..n).map(|_| make()).collect();
    let ids = tasks.iter().map(|t| t.task_id.clone()).collect();
    futures_util::stream::iter(tasks)
        .map(|t| async move { store.create(&t, &args()).await.unwrap() })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    ids
}

/// The sweep reads only the tasks it could act on: thousands waiting for input or asleep
/// are never read, so its run time stays flat as they grow. For reference, the same run
/// times the old way (every active task listed and read, what the sweep did before), and
/// prints both. `SWEEP_PARKED` sets how many parked and how many sleeping tasks (default 1,000
/// each, about 40 s on the emulator; the note's figures also use 10,000).
#[tokio::test]
async fn the_sweep_reads_only_what_it_could_act_on_however_many_tasks_wait() {
    use std::time::{Duration, Instant};
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let n: usize = std::env::var("SWEEP_PARKED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let now = mcp_tasks_core::clock::now_ms();
    let hour_ago = now - 3_600_000;
    let started = Instant::now();
    create_many(&store, n, || {
        let mut t = task("people", None);
        t.transition(TaskStatus::InputRequired).unwrap();
        t.last_updated_at_ms = hour_ago;
        t
    })
    .await;
    create_many(&store, n, || {
        let mut t = task("sleepers", None);
        t.last_updated_at_ms = hour_ago;
        t.wake_at_ms = Some(now + 3_600_000);
        t
    })
    .await;
    let mut orphans = create_many(&store, 5, || {
        let mut t = task("lost", None);
        t.last_updated_at_ms = hour_ago;
        t
    })
    .await;
    let seeded = started.elapsed();
    let (engine, mut rx) = engine_over(&store);

    // The old way, for reference: every active task listed and read.
    let t0 = Instant::now();
    let mut after: Option<TaskKey> = None;
    let mut read_all = 0;
    loop {
        let page = store.list_active(after.as_ref(), 1000).await.unwrap();
        for k in &page {
            store.get(k.borrowed()).await.unwrap().unwrap();
            read_all += 1;
        }
        if page.len() < 1000 {
            break;
        }
        after = page.last().cloned();
    }
    let full_pass = t0.elapsed();

    // What the emulator charges for the index itself: one pass of the sweep's queries (one
    // per shard) that finds nothing. moto answers a `Query` by scanning the whole table, so
    // this part grows with the table there; on DynamoDB a `Query` costs what it returns.
    let t0 = Instant::now();
    let probe = store.list_quiet(0, None, 500).await.unwrap();
    let index_probe = t0.elapsed();
    assert!(probe.tasks.is_empty());

    let t0 = Instant::now();
    let stats = engine.sweep(Duration::from_secs(300)).await.unwrap();
    let sweep = t0.elapsed();
    assert_eq!(read_all, 2 * n + orphans.len());
    assert_eq!(
        (stats.read, stats.requeued, stats.skipped, stats.complete),
        (orphans.len(), orphans.len(), 0, true),
        "{stats:?}"
    );
    let mut sent: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|m| m.task_id)
        .collect();
    sent.sort();
    orphans.sort();
    assert_eq!(sent, orphans);
    println!(
        "SWEEP parked={n} sleeping={n} orphans={} seeded_in={:.1}s full_pass={:.3}s ({:.2} ms/task) \
         sweep={:.3}s ratio={:.3} index_queries_alone={:.3}s sweep_beyond_them={:.3}s",
        orphans.len(),
        seeded.as_secs_f64(),
        full_pass.as_secs_f64(),
        full_pass.as_secs_f64() * 1000.0 / read_all as f64,
        sweep.as_secs_f64(),
        sweep.as_secs_f64() / full_pass.as_secs_f64(),
        index_probe.as_secs_f64(),
        sweep.saturating_sub(index_probe).as_secs_f64(),
    );
    drop_table(&client, store.table_name()).await;
}

/// A sweep cut short by its deadline saves where it stopped (in the table) and the next run
/// — any process's — goes on from there instead of reading the same first page again; a
/// finished pass removes the cursor. Here the tasks stay candidates (messages wait in the
/// queue, so they may simply be queued), which is when re-reading from the start would keep
/// the sweep from ever reaching the end.
#[tokio::test]
async fn a_sweep_cut_short_goes_on_where_it_stopped_in_the_next_run() {
    use mcp_tasks_core::engine::{BACKLOG_PATIENCE, Engine, SWEEP_PAGE, TaskSettings};
    use std::sync::Arc;
    use std::time::Duration;
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let now = mcp_tasks_core::clock::now_ms();
    let n = SWEEP_PAGE + SWEEP_PAGE / 5;
    let quiet_for = Duration::from_secs(600);
    assert!(quiet_for < BACKLOG_PATIENCE);
    create_many(&store, n, || {
        let mut t = task("queued", None);
        t.last_updated_at_ms = now - quiet_for.as_millis() as u64;
        t
    })
    .await;
    let engine = || {
        let (queue, rx) = mcp_tasks_core::queue::LocalQueue::new();
        let engine = Engine::new(
            Arc::new(store.clone()),
            Arc::new(Backlogged(queue, 1000)),
            TaskSettings::default(),
        );
        (engine, rx)
    };
    let stale = Duration::from_secs(300);
    // A first run with (almost) no time: one page, then it stops.
    let (first, mut rx) = engine();
    let until = tokio::time::Instant::now() + Duration::from_millis(1);
    let a = first.sweep_until(stale, Some(until)).await.unwrap();
    assert_eq!(
        (a.read, a.queued, a.requeued, a.resumed, a.complete),
        (SWEEP_PAGE, SWEEP_PAGE, 0, false, false),
        "{a:?}"
    );
    assert!(rx.try_recv().is_err(), "queued tasks are not sent again");
    assert!(
        store.sweep_cursor().await.unwrap().is_some(),
        "where it stopped is in the table"
    );
    // The next run, another engine (another instance): the rest only.
    let (second, _rx) = engine();
    let b = second.sweep(stale).await.unwrap();
    assert_eq!(
        (b.read, b.queued, b.resumed, b.complete),
        (n - SWEEP_PAGE, n - SWEEP_PAGE, true, true),
        "{b:?}"
    );
    assert_eq!(
        store.sweep_cursor().await.unwrap(),
        None,
        "a finished pass starts over"
    );
    // And the pass after it starts from the beginning.
    let c = second.sweep(stale).await.unwrap();
    assert_eq!((c.read, c.resumed, c.complete), (n, false, true), "{c:?}");
    drop_table(&client, store.table_name()).await;
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
        let key = dynamo::pk("a", &t.task_id);
        edit_raw(&client, &name, key, "REMOVE #a", dynamo::ATTR_QUIET, None).await;
    }
    dynamo::create_table(&client, &name).await.unwrap();
    let item = raw_item(&client, &name, dynamo::pk("a", &orphan.task_id))
        .await
        .unwrap();
    assert_eq!(
        item[dynamo::ATTR_QUIET].as_n().unwrap(),
        &orphan.quiet_mark_ms().unwrap().to_string()
    );
    assert_eq!(item["version"].as_n().unwrap(), "0", "no version bumped");
    let item = raw_item(&client, &name, dynamo::pk("a", &parked.task_id))
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
