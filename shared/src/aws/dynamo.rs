//! The DynamoDB [`TaskStore`]: one item per task, every write conditional.
//!
//! # The item
//!
//! The record's own fields are mapped by `serde_dynamo` (native attributes, readable in the
//! console, `status` and `version` usable in conditions). Next to them the adapter writes only
//! its key, index and TTL attributes ([`ATTR_PK`] and friends):
//!
//! | attribute       | type | present            | what for                                     |
//! |-----------------|------|--------------------|----------------------------------------------|
//! | `pk`            | S    | always             | table key: `{tenant}#{taskId}`               |
//! | `shard`         | N    | always             | partition key of `active` and `expiry`       |
//! | `active_pk`     | S    | while non-terminal | sort key of the sparse `active` index        |
//! | `tenant_active` | S    | while non-terminal | `tenant_active` partition key: `{tenant}#`   |
//! | `expires_ms`    | N    | with a TTL         | sort key of the sparse `expiry` index        |
//! | `quiet_ms`      | N    | while `working`    | sort key of the sparse `quiet` index         |
//! | `ttl`           | N    | with a TTL         | DynamoDB TTL, epoch **seconds** (rounded up) |
//!
//! `pk` is also the sort key of the `tenant_active` index; `shard` is `0..`[`SHARDS`].
//!
//! The tenant is part of the key, so a lookup with another tenant addresses another item: a
//! foreign task reads exactly like a missing one, and a foreign update or delete touches
//! nothing. `#` and `%` in the tenant are percent-escaped so that `("a#b", "c")` and
//! `("a", "b#c")` can never share a key (task ids may contain `#`). While a task is active its
//! key is also an index sort key, so the escaped tenant and the task id together must stay
//! within 1024 bytes (generated task ids are 46).
//!
//! Every read checks the record against the key it was read from: an item whose record names
//! another tenant or task id (a hand edit, a botched migration), or that does not decode at
//! all (a rollback past a release that added a status), is logged with its key and read as
//! absent (`DynamoStore::record_at`) — writes are keyed on the record, so trusting such a
//! record would let one tenant's request write another tenant's task.
//!
//! # The indexes (no scans)
//!
//! `active` (`shard`, `active_pk`), `expiry` (`shard`, `expires_ms`), `tenant_active`
//! (`tenant_active`, `pk`) and `quiet` (`shard`, `quiet_ms`), all KEYS_ONLY and sparse: `active_pk` and `tenant_active` exist
//! only while a task is non-terminal (every write is a whole-item `PutItem`, so a terminal
//! transition drops both from the item and thereby from their indexes), `expires_ms` only when
//! it has a TTL. A single index partition takes about 1000 writes a second, so the index
//! partition key is a fixed shard (a stable hash of `pk`) rather than a constant.
//! [`list_active`](TaskStore::list_active) therefore pages in **(shard, key)** order — a fixed
//! total order, which is all the port promises — and fills a page across shards, so a short
//! page still means the end. Index reads are eventually consistent (DynamoDB offers nothing
//! else on a GSI): a listing may lag a write briefly, which the sweeps tolerate because they
//! re-read every key with a consistent [`get`](TaskStore::get) before acting.
//!
//! `quiet` holds the orphan sweep's candidates only: `quiet_ms` is the task's
//! [`quiet_mark_ms`](TaskRecord::quiet_mark_ms), present while the task is `working` — not
//! while it waits for input, and gone once it ends — so the sweep
//! ([`list_quiet`](TaskStore::list_quiet)) reads the tasks that went quiet before its bound
//! and nothing else, however many tasks wait for people or sleep. The mark moves with the
//! task's last update rounded down to a minute, so a running job's checkpoints rewrite the
//! index entry at most once a minute (two index writes), and a sleeping job's once per sleep.
//! Where the sweep stopped is kept in one item of its own ([`SWEEP_CURSOR_KEY`]).
//!
//! `tenant_active` serves one tenant's listing (the legacy `tasks/list`,
//! [`list_tenant_active`](TaskStore::list_tenant_active)) without touching other tenants: its
//! partition key is the escaped tenant followed by `#` (the `pk` prefix: never empty, which a
//! DynamoDB key must not be, and at most 1024 bytes as `pk` is), its sort key is `pk` itself,
//! so one tenant's active tasks are one index partition in task-id order. One partition per
//! tenant is deliberate: a listing is one `Query`, and the index is written only when a task
//! enters or leaves it (create, terminal transition, delete; other updates change neither key
//! and nothing else is projected). A partition takes about 1000 writes a second, so one tenant
//! could start and finish some 500 tasks a second before its index partition throttles (and
//! with it, as DynamoDB does for a throttled GSI, that tenant's writes to the table).
//!
//! ## Adding `tenant_active` to an existing table
//!
//! `sam deploy` adds the index (CloudFormation creates a GSI in place); [`create_table`] adds
//! it to a table an older `create_table` made. Either way, items written before this release
//! lack `tenant_active`: until their next write, active tasks of that time would be missing
//! from `tasks/list`. [`DynamoStore::backfill_tenant_index`] adds the attribute to them
//! (conditional, idempotent, no version change); `create_table` runs it just before it adds
//! the index, and after a `sam deploy` it should be run once every function runs this code:
//! `mcp-tasks-aws-dev backfill --table <TasksTable>` with credentials that may `Query` the
//! `active` index and `UpdateItem` the table.
//!
//! # Costs per call
//!
//! - `create`: one conditional `PutItem` (`attribute_not_exists(pk)`), plus one index write
//!   to `active` and, with a TTL, one to `expiry`.
//! - `get`: one strongly consistent `GetItem`.
//! - `update`: one conditional `PutItem` (`version = :read AND status not terminal`); index
//!   writes only when `active_pk`/`expires_ms` appear or vanish (a terminal transition
//!   removes the `active` entry). A lost condition still costs the write units.
//! - `list_active`: one `Query` per shard visited (at least one, at most [`SHARDS`] plus
//!   continuation pages), keys only.
//! - `list_tenant_active`: one `Query` of the tenant's index partition (keys only, `Limit` =
//!   the page) and one `BatchGetItem` with consistent reads for those records (chunks of 100;
//!   repeated only for `UnprocessedKeys`, e.g. over its 16 MB response limit). Entries that
//!   turn out finished (the index lags) are dropped and the page is refilled from the index.
//! - `list_expired`: up to [`SHARDS`] `Query`s, stopping once `limit` keys are found.
//! - `list_quiet`: one `Query` per shard visited (keys only, only the quiet `working` tasks),
//!   then one `BatchGetItem` per 100 keys with consistent reads.
//! - `delete`: one unconditional `DeleteItem` (plus the index deletes).
//!
//! Units follow the item size: a put costs one write unit per started KB of the larger of the
//! old and new item (the whole record is rewritten on every change, as an `UpdateItem` would
//! be charged anyway), a consistent get one read unit per started 4 KB. Index entries are keys
//! only, about 100 bytes: one unit each.
//!
//! # Size and shape
//!
//! [`store::encode`](crate::store) first refuses records over
//! [`MAX_RECORD_BYTES`](crate::store::MAX_RECORD_BYTES) of JSON with `TooLarge`, exactly as the
//! local adapters do. A record within that bound always fits an item: when its native mapping
//! would not be accepted — over DynamoDB's 400 KB item size (a list element costs DynamoDB
//! more bytes than JSON, e.g. long arrays of small numbers), deeper than DynamoDB's 32 levels,
//! or holding numbers outside DynamoDB's range — the record's structured top-level fields are
//! stored as JSON text in binary attributes instead (see `to_item`), and read back exactly.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, CreateGlobalSecondaryIndexAction,
    GlobalSecondaryIndex, GlobalSecondaryIndexUpdate, IndexStatus, KeySchemaElement, KeyType,
    KeysAndAttributes, Projection, ProjectionType, ScalarAttributeType, TableStatus,
    TimeToLiveSpecification, TimeToLiveStatus,
};
use serde_dynamo::aws_sdk_dynamodb_1 as sd;
use serde_json::{Map, Value};

use crate::store::{QuietPage, StoreError, TaskKey, TaskStore, encode, encode_arguments};
use crate::task::TaskRecord;

/// Table key: `{tenant}#{taskId}` (tenant escaped).
pub const ATTR_PK: &str = "pk";
/// Index partition key, `0..SHARDS`.
pub const ATTR_SHARD: &str = "shard";
/// Sort key of the `active` index; present only while the task is non-terminal.
pub const ATTR_ACTIVE: &str = "active_pk";
/// Partition key of the `tenant_active` index: the escaped tenant and `#`; present only while
/// the task is non-terminal.
pub const ATTR_TENANT_ACTIVE: &str = "tenant_active";
/// Sort key of the `expiry` index: epoch milliseconds of expiry; present only with a TTL.
pub const ATTR_EXPIRES_MS: &str = "expires_ms";
/// Sort key of the `quiet` index: the task's quiet mark (epoch ms); present only while the
/// task is `working`.
pub const ATTR_QUIET: &str = "quiet_ms";
/// DynamoDB's TTL attribute: epoch seconds of expiry, rounded up; present only with a TTL.
pub const ATTR_TTL: &str = "ttl";
/// The JSON text of a task's arguments, in the task's arguments item (see [`arguments_key`]).
pub const ATTR_ARGUMENTS: &str = "args";
/// The sparse index of non-terminal tasks.
pub const INDEX_ACTIVE: &str = "active";
/// The sparse index of tasks with an expiry.
pub const INDEX_EXPIRY: &str = "expiry";
/// The sparse index of each tenant's non-terminal tasks.
pub const INDEX_TENANT_ACTIVE: &str = "tenant_active";
/// The sparse index of `working` tasks by quiet mark: the orphan sweep's candidates.
pub const INDEX_QUIET: &str = "quiet";
/// The key of the item that holds where the orphan sweep stopped. No task key can be it:
/// escaped tenants hold `%` only as `%23` or `%25`.
pub const SWEEP_CURSOR_KEY: &str = "%sweep";
/// Number of index shards. Stored in every item: changing it needs a migration.
pub const SHARDS: u32 = 16;

/// DynamoDB's item size limit.
const MAX_ITEM_BYTES: usize = 400 * 1024;
/// DynamoDB's nesting limit for maps and lists.
const MAX_DEPTH: usize = 32;
/// DynamoDB's limit for a sort key value (`active_pk`, and `pk` in `tenant_active`).
const MAX_SORT_KEY_BYTES: usize = 1024;
/// Most keys in one `BatchGetItem`.
const MAX_BATCH_GET: usize = 100;
/// `BatchGetItem` rounds (each after a pause) before leftover `UnprocessedKeys` fail a call.
const BATCH_GET_ROUNDS: u32 = 8;

const RESERVED: [&str; 7] = [
    ATTR_PK,
    ATTR_SHARD,
    ATTR_ACTIVE,
    ATTR_TENANT_ACTIVE,
    ATTR_EXPIRES_MS,
    ATTR_QUIET,
    ATTR_TTL,
];
const TERMINAL: [&str; 3] = ["completed", "failed", "cancelled"];

/// Task records in one DynamoDB table (create it with [`create_table`]).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
}

impl DynamoStore {
    /// A store over an existing table. Build the client once, at cold start.
    pub fn new(client: Client, table_name: impl Into<String>) -> Self {
        Self {
            client,
            table: table_name.into(),
        }
    }

    /// The table this store writes.
    pub fn table_name(&self) -> &str {
        &self.table
    }

    /// One `PutItem` of `task` under `condition`, whose meaning in terms of the stored record
    /// is `prior`.
    ///
    /// The SDK's own retries are off for it: a retried conditional write whose first attempt
    /// landed (its answer lost to a timeout or a 5xx) would fail its own condition and report
    /// a conflict for a write that happened — a worker would then drop its continuation, a
    /// client its new task. Instead, after an answer that leaves it open whether the write
    /// landed, the item is read back: exactly `task` means it landed; still `prior` means it
    /// did not, and the write is tried again; anything else is a real conflict.
    async fn put(
        &self,
        op: &'static str,
        task: &TaskRecord,
        prior: Prior,
        condition: &str,
        names: &[(&str, &str)],
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<(), StoreError> {
        encode(task)?;
        let item = to_item(task)?;
        // What a read of the item returns once it landed: numbers go through DynamoDB's `N`
        // (a float `2.0` reads back as the integer `2`), so compare with that, not `task`.
        let landed = from_item(item.clone())?;
        // Set once an attempt ended without telling whether it was applied: from then on a
        // failed condition may be our own earlier attempt (landing late), so it is checked.
        let mut maybe_applied = false;
        // The whole write, its own retries and read-backs included, within about the client's
        // operation timeout (see `super::Timeouts`): against an endpoint that never answers,
        // five attempts each followed by a read-back would otherwise take a minute.
        let until = self
            .client
            .config()
            .timeout_config()
            .and_then(|t| t.operation_timeout())
            .map(|d| tokio::time::Instant::now() + d);
        let mut pause = PUT_RETRY_PAUSE;
        for attempt in 1..=PUT_ATTEMPTS {
            let mut req = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item.clone()))
                .condition_expression(condition);
            for (k, v) in names {
                req = req.expression_attribute_names(*k, *v);
            }
            for (k, v) in &values {
                req = req.expression_attribute_values(*k, v.clone());
            }
            let err = match req
                .customize()
                .config_override(
                    aws_sdk_dynamodb::config::Builder::default()
                        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled()),
                )
                .send()
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_condition_failed(&e) => {
                    if maybe_applied && self.holds(&landed).await {
                        tracing::info!(op, attempt, "dynamodb.put_landed_late");
                        return Ok(());
                    }
                    return Err(StoreError::Conflict);
                }
                Err(e) => e,
            };
            match failure_kind(&err) {
                Failure::Refused => return Err(backend(op, &self.table, err)),
                // Definitely not applied: wait and try again, no need to look.
                Failure::Throttled => {}
                Failure::Unknown => {
                    maybe_applied = true;
                    let read = self.get(&task.tenant, &task.task_id);
                    let read = match until {
                        Some(u) => tokio::time::timeout_at(u, read).await.unwrap_or_else(|_| {
                            Err(StoreError::Backend("dynamodb read-back timed out".into()))
                        }),
                        None => read.await,
                    };
                    match read {
                        Ok(Some(stored)) if stored == landed => {
                            tracing::info!(op, attempt, "dynamodb.put_landed_answer_lost");
                            return Ok(());
                        }
                        Ok(stored) if prior.holds(stored.as_ref()) => {}
                        Ok(_) => return Err(StoreError::Conflict),
                        // Cannot tell yet: the next attempt settles it (its condition fails
                        // if this one landed, and that failure is then checked).
                        Err(_) => {}
                    }
                }
            }
            let out_of_time = until.is_some_and(|u| tokio::time::Instant::now() + pause >= u);
            if attempt == PUT_ATTEMPTS || out_of_time {
                return Err(backend(op, &self.table, err));
            }
            tracing::info!(op, attempt, "dynamodb.put_retry");
            tokio::time::sleep(jittered(pause)).await;
            pause *= 2;
        }
        unreachable!("the last attempt returns")
    }

    /// Whether the item now is exactly `landed` (a consistent read; a failed read says no).
    /// Stores a new task's arguments in their own item (see [`arguments_key`]): written once,
    /// here, so the record's frequent writes stay small — DynamoDB bills a `PutItem` or
    /// `UpdateItem` by the larger of the old and new item, so arguments kept in the record
    /// would be paid again at every checkpoint. The item carries the task's TTL attribute
    /// (DynamoDB removes it with an expired task even if the sweep never does) and no index
    /// attribute: no listing sees it.
    ///
    /// Conditional on the item being absent, with the SDK's retries on: a failed condition
    /// re-reads the item, and finding exactly these arguments means an earlier attempt of this
    /// call landed (task ids are random, so nothing else writes that key).
    async fn put_arguments(&self, task: &TaskRecord, bytes: Vec<u8>) -> Result<(), StoreError> {
        let key = arguments_key(&task.tenant, &task.task_id);
        let mut req = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(ATTR_PK, AttributeValue::S(key))
            .item(ATTR_ARGUMENTS, AttributeValue::B(Blob::new(bytes.clone())))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", ATTR_PK);
        if let Some(at) = task.expires_at_ms() {
            req = req.item(ATTR_TTL, AttributeValue::N(at.div_ceil(1000).to_string()));
        }
        match req.send().await {
            Ok(_) => Ok(()),
            Err(e) if is_condition_failed(&e) => {
                match self.arguments_bytes(&task.tenant, &task.task_id).await? {
                    Some(stored) if stored == bytes => Ok(()),
                    _ => Err(StoreError::Conflict),
                }
            }
            Err(e) => Err(backend("create", &self.table, e)),
        }
    }

    /// The item at `key`, read consistently (a task record, its arguments, a tenant's
    /// running-jobs item: every single-item read of this store).
    async fn item_at(
        &self,
        key: String,
    ) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(ATTR_PK, AttributeValue::S(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| backend("get", &self.table, e))?;
        Ok(out.item)
    }

    /// The stored JSON text of a task's arguments.
    async fn arguments_bytes(
        &self,
        tenant: &str,
        task_id: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let item = self.item_at(arguments_key(tenant, task_id)).await?;
        match item.as_ref().and_then(|i| i.get(ATTR_ARGUMENTS)) {
            Some(AttributeValue::B(b)) => Ok(Some(b.clone().into_inner())),
            Some(_) => Err(codec(
                "deserialize",
                "arguments item without binary arguments",
            )),
            None => Ok(None),
        }
    }

    async fn holds(&self, landed: &TaskRecord) -> bool {
        matches!(
            self.get(&landed.tenant, &landed.task_id).await,
            Ok(Some(stored)) if stored == *landed
        )
    }

    /// Queries one shard of an index, following continuation pages, until `out` holds `limit`
    /// keys. `sort` narrows the index's sort key (`(">", after)`, `("<=", now)`).
    async fn query_shard(
        &self,
        index: &'static str,
        shard: u32,
        sort: Option<(&'static str, AttributeValue)>,
        limit: usize,
        out: &mut Vec<TaskKey>,
    ) -> Result<(), StoreError> {
        let sort_attr = if index == INDEX_ACTIVE {
            ATTR_ACTIVE
        } else {
            ATTR_EXPIRES_MS
        };
        let condition = match &sort {
            Some((op, _)) => format!("#shard = :shard AND #sort {op} :sort"),
            None => "#shard = :shard".to_owned(),
        };
        let mut start = None;
        loop {
            let want = limit.saturating_sub(out.len());
            if want == 0 {
                return Ok(());
            }
            let mut req = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(index)
                .key_condition_expression(&condition)
                .expression_attribute_names("#shard", ATTR_SHARD)
                .expression_attribute_values(":shard", AttributeValue::N(shard.to_string()))
                .limit(i32::try_from(want).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start);
            if let Some((_, value)) = &sort {
                req = req
                    .expression_attribute_names("#sort", sort_attr)
                    .expression_attribute_values(":sort", value.clone());
            }
            let page = req
                .send()
                .await
                .map_err(|e| backend("query", &self.table, e))?;
            for item in page.items() {
                match item.get(ATTR_PK).and_then(|v| v.as_s().ok()) {
                    Some(pk) => out.extend(split_pk(pk)),
                    None => {
                        tracing::warn!(table = %self.table, index, "dynamodb.index_entry_without_key")
                    }
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(()),
            }
        }
    }

    /// The record of the item read at table key `key`, or `None` — logged as an error with the
    /// key, never the content — when the item does not decode (a rollback past a release that
    /// added a status or changed a field, a hand edit) or its record names another key (a hand
    /// edit, a botched tenant migration).
    ///
    /// Both are treated as absent, everywhere: a record is trusted only at its own key, because
    /// every later write is keyed on the record (`update` writes `pk(record.tenant,
    /// record.task_id)`), so a record read at tenant B's key that says tenant A would let B's
    /// `tasks/cancel` cancel A's task. An undecodable item cannot be acted on by this release
    /// at all: answering "unknown task" (`-32602`) instead of `-32603` tells a client the truth
    /// for this release (retrying will not help), keeps the sweep going past it, and no write
    /// can touch it (each needs a decoded read first, and `create` is conditional on absence).
    /// Expired such items are still purged (the purge goes by the `expiry` index's keys).
    fn record_at(&self, key: &str, item: HashMap<String, AttributeValue>) -> Option<TaskRecord> {
        match from_item(item) {
            Ok(t) if pk(&t.tenant, &t.task_id) == key => Some(t),
            Ok(_) => {
                tracing::error!(table = %self.table, key, "dynamodb.record_key_mismatch");
                None
            }
            Err(_) => {
                tracing::error!(table = %self.table, key, "dynamodb.undecodable_item");
                None
            }
        }
    }

    /// The records of `pks`, read consistently with `BatchGetItem`; absent keys, and items
    /// that do not decode or do not match their key (logged), are missing from the map.
    /// `UnprocessedKeys` are asked for again after a pause.
    async fn batch_get(&self, pks: &[String]) -> Result<HashMap<String, TaskRecord>, StoreError> {
        let mut out = HashMap::with_capacity(pks.len());
        for chunk in pks.chunks(MAX_BATCH_GET) {
            let keys = chunk
                .iter()
                .map(|k| HashMap::from([(ATTR_PK.to_owned(), AttributeValue::S(k.clone()))]))
                .collect();
            let mut request = Some(
                KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| backend("batch_get", &self.table, e))?,
            );
            let mut pause = Duration::from_millis(25);
            for round in 0..BATCH_GET_ROUNDS {
                let Some(req) = request.take() else { break };
                if round > 0 {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                let page = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, req)
                    .send()
                    .await
                    .map_err(|e| backend("batch_get", &self.table, e))?;
                for item in page
                    .responses
                    .and_then(|mut r| r.remove(&self.table))
                    .unwrap_or_default()
                {
                    let Some(k) = item.get(ATTR_PK).and_then(|v| v.as_s().ok()).cloned() else {
                        continue;
                    };
                    // A bad item is skipped (and logged) so that it does not hide the others.
                    if let Some(t) = self.record_at(&k, item) {
                        out.insert(k, t);
                    }
                }
                request = page
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table))
                    .filter(|k| !k.keys().is_empty());
            }
            if request.is_some() {
                tracing::warn!(table = %self.table, "dynamodb.batch_get_unprocessed");
                return Err(StoreError::Backend(
                    "dynamodb batch_get left keys unprocessed".into(),
                ));
            }
        }
        Ok(out)
    }

    /// Gives every active task written before the `tenant_active` index existed its
    /// [`ATTR_TENANT_ACTIVE`] attribute; returns how many items it changed. Idempotent and safe
    /// beside live traffic: each change is an `UpdateItem` conditional on the task still being
    /// active (`active_pk` present) and lacking the attribute, and it leaves `version` alone,
    /// so no writer's condition is disturbed. Run it once every function writes the attribute
    /// (an older writer's whole-item `PutItem` would drop it again). Costs: the `active` index
    /// pages ([`SHARDS`] `Query`s and up) and one `UpdateItem` per active task.
    pub async fn backfill_tenant_index(&self) -> Result<usize, StoreError> {
        const PAGE: usize = 1000;
        let mut changed = 0;
        let mut after: Option<TaskKey> = None;
        loop {
            let page = self.list_active(after.as_ref(), PAGE).await?;
            for k in &page {
                let res = self
                    .client
                    .update_item()
                    .table_name(&self.table)
                    .key(ATTR_PK, AttributeValue::S(pk(&k.tenant, &k.task_id)))
                    .update_expression("SET #t = :t")
                    .condition_expression("attribute_exists(#a) AND attribute_not_exists(#t)")
                    .expression_attribute_names("#t", ATTR_TENANT_ACTIVE)
                    .expression_attribute_names("#a", ATTR_ACTIVE)
                    .expression_attribute_values(":t", AttributeValue::S(tenant_hash(&k.tenant)))
                    .send()
                    .await;
                match res {
                    Ok(_) => changed += 1,
                    Err(e) if is_condition_failed(&e) => {}
                    Err(e) => return Err(backend("backfill", &self.table, e)),
                }
            }
            if page.len() < PAGE {
                tracing::info!(table = %self.table, changed, "dynamodb.tenant_index_backfilled");
                return Ok(changed);
            }
            after = page.last().cloned();
        }
    }

    /// Gives every `working` task written before the `quiet` index existed its [`ATTR_QUIET`]
    /// attribute (without it the orphan sweep would not see the task until its next write);
    /// returns how many items it changed. Idempotent and safe beside live traffic: each change
    /// is an `UpdateItem` conditional on the version read and on the attribute still missing,
    /// and leaves `version` alone. Costs: the `active` index pages, one `BatchGetItem` per 100
    /// active tasks and one `UpdateItem` per `working` one lacking the attribute.
    pub async fn backfill_quiet_index(&self) -> Result<usize, StoreError> {
        const PAGE: usize = 1000;
        let mut changed = 0;
        let mut after: Option<TaskKey> = None;
        loop {
            let page = self.list_active(after.as_ref(), PAGE).await?;
            let pks: Vec<String> = page.iter().map(|k| pk(&k.tenant, &k.task_id)).collect();
            let records = self.batch_get(&pks).await?;
            for (key, task) in &records {
                let Some(mark) = task.quiet_mark_ms() else {
                    continue;
                };
                let res = self
                    .client
                    .update_item()
                    .table_name(&self.table)
                    .key(ATTR_PK, AttributeValue::S(key.clone()))
                    .update_expression("SET #q = :q")
                    .condition_expression("#v = :v AND attribute_not_exists(#q)")
                    .expression_attribute_names("#q", ATTR_QUIET)
                    .expression_attribute_names("#v", "version")
                    .expression_attribute_values(":q", AttributeValue::N(mark.to_string()))
                    .expression_attribute_values(":v", AttributeValue::N(task.version.to_string()))
                    .send()
                    .await;
                match res {
                    Ok(_) => changed += 1,
                    // Written since (and so carrying the attribute), or carrying it already.
                    Err(e) if is_condition_failed(&e) => {}
                    Err(e) => return Err(backend("backfill", &self.table, e)),
                }
            }
            if page.len() < PAGE {
                tracing::info!(table = %self.table, changed, "dynamodb.quiet_index_backfilled");
                return Ok(changed);
            }
            after = page.last().cloned();
        }
    }
}

/// Where a listing of the `quiet` index stopped: the last key it listed.
struct QuietCursor {
    shard: u32,
    mark: u64,
    pk: String,
}

impl QuietCursor {
    fn encode(&self) -> String {
        format!("{}:{}:{}", self.shard, self.mark, self.pk)
    }

    /// `None` for anything [`QuietCursor::encode`] did not write (the listing starts over).
    fn parse(s: &str) -> Option<Self> {
        let mut parts = s.splitn(3, ':');
        let shard = parts.next()?.parse().ok().filter(|s| *s < SHARDS)?;
        let mark = parts.next()?.parse().ok()?;
        let pk = parts.next().filter(|p| !p.is_empty())?.to_owned();
        Some(Self { shard, mark, pk })
    }

    /// The index's `ExclusiveStartKey` for continuing after this key.
    fn start_key(&self) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (
                ATTR_SHARD.to_owned(),
                AttributeValue::N(self.shard.to_string()),
            ),
            (
                ATTR_QUIET.to_owned(),
                AttributeValue::N(self.mark.to_string()),
            ),
            (ATTR_PK.to_owned(), AttributeValue::S(self.pk.clone())),
        ])
    }
}

#[async_trait]
impl TaskStore for DynamoStore {
    async fn create(&self, task: &TaskRecord, arguments: &Value) -> Result<(), StoreError> {
        // Both sizes are checked before anything is written. The arguments go first: a record
        // is never readable without them (a crash between the two leaves an arguments item
        // alone, which DynamoDB's TTL removes).
        encode(task)?;
        to_item(task)?;
        let bytes = encode_arguments(arguments)?;
        self.put_arguments(task, bytes).await?;
        self.put(
            "create",
            task,
            Prior::Absent,
            "attribute_not_exists(#pk)",
            &[("#pk", ATTR_PK)],
            Vec::new(),
        )
        .await
    }

    async fn get(&self, tenant: &str, task_id: &str) -> Result<Option<TaskRecord>, StoreError> {
        if task_id.starts_with('#') {
            // Not a task key: the tenant's running-jobs and arguments items live there.
            return Ok(None);
        }
        let key = pk(tenant, task_id);
        let item = self.item_at(key.clone()).await?;
        Ok(item.and_then(|item| self.record_at(&key, item)))
    }

    async fn arguments(&self, tenant: &str, task_id: &str) -> Result<Option<Value>, StoreError> {
        if task_id.starts_with('#') {
            return Ok(None);
        }
        self.arguments_bytes(tenant, task_id)
            .await?
            .map(|b| serde_json::from_slice(&b).map_err(|e| codec("deserialize", e)))
            .transpose()
    }

    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        let mut next = task.clone();
        next.version = task.version + 1;
        self.put(
            "update",
            &next,
            Prior::Version(task.version),
            "#version = :read AND NOT (#status IN (:t0, :t1, :t2))",
            &[("#version", "version"), ("#status", "status")],
            vec![
                (":read", AttributeValue::N(task.version.to_string())),
                (":t0", AttributeValue::S(TERMINAL[0].into())),
                (":t1", AttributeValue::S(TERMINAL[1].into())),
                (":t2", AttributeValue::S(TERMINAL[2].into())),
            ],
        )
        .await?;
        Ok(next.version)
    }

    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError> {
        let mut out = Vec::new();
        let after = after.map(|k| pk(&k.tenant, &k.task_id));
        let first = after.as_deref().map_or(0, shard_of);
        for shard in first..SHARDS {
            if out.len() >= limit {
                break;
            }
            // Within the shard of `after`, continue past it; later shards from their start.
            let sort = after
                .as_ref()
                .filter(|_| shard == first)
                .map(|a| (">", AttributeValue::S(a.clone())));
            self.query_shard(INDEX_ACTIVE, shard, sort, limit, &mut out)
                .await?;
        }
        Ok(out)
    }

    async fn list_tenant_active(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let condition = if after.is_some() {
            "#t = :t AND #pk > :after"
        } else {
            "#t = :t"
        };
        let mut start = None;
        loop {
            let want = limit - out.len();
            let mut req = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(INDEX_TENANT_ACTIVE)
                .key_condition_expression(condition)
                .expression_attribute_names("#t", ATTR_TENANT_ACTIVE)
                .expression_attribute_values(":t", AttributeValue::S(tenant_hash(tenant)))
                .limit(i32::try_from(want).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start);
            if let Some(a) = after {
                req = req
                    .expression_attribute_names("#pk", ATTR_PK)
                    .expression_attribute_values(":after", AttributeValue::S(pk(tenant, a)));
            }
            let page = req
                .send()
                .await
                .map_err(|e| backend("query", &self.table, e))?;
            let pks: Vec<String> = page
                .items()
                .iter()
                .filter_map(|i| i.get(ATTR_PK).and_then(|v| v.as_s().ok()).cloned())
                .collect();
            // The index lags the table: a listed task may have finished or gone since.
            let mut records = self.batch_get(&pks).await?;
            out.extend(
                pks.iter()
                    .filter_map(|k| records.remove(k))
                    .filter(|t| t.tenant == tenant && !t.status.is_terminal()),
            );
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() && out.len() < limit => start = Some(k),
                _ => return Ok(out),
            }
        }
    }

    async fn count_tenant_active(&self, tenant: &str, at_most: usize) -> Result<usize, StoreError> {
        // `Select=COUNT` on the tenant's index partition: index keys only, no item read (a
        // tenant at a 1,000-task quota costs about 25 read units per count).
        let mut n = 0usize;
        let mut start = None;
        while n < at_most {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(INDEX_TENANT_ACTIVE)
                .key_condition_expression("#t = :t")
                .expression_attribute_names("#t", ATTR_TENANT_ACTIVE)
                .expression_attribute_values(":t", AttributeValue::S(tenant_hash(tenant)))
                .select(aws_sdk_dynamodb::types::Select::Count)
                .limit(i32::try_from(at_most - n).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| backend("query", &self.table, e))?;
            n += usize::try_from(page.count()).unwrap_or(0);
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(n.min(at_most))
    }

    async fn list_quiet(
        &self,
        quiet_before_ms: u64,
        after: Option<&str>,
        limit: usize,
    ) -> Result<QuietPage, StoreError> {
        let limit = limit.max(1);
        let start = after.and_then(|a| {
            let c = QuietCursor::parse(a);
            if c.is_none() {
                tracing::warn!(table = %self.table, "dynamodb.sweep_cursor_unreadable: starting over");
            }
            c
        });
        let first = start.as_ref().map_or(0, |c| c.shard);
        let mut keys: Vec<String> = Vec::new();
        let mut last: Option<QuietCursor> = None;
        'shards: for shard in first..SHARDS {
            let mut exclusive = start
                .as_ref()
                .filter(|c| c.shard == shard)
                .map(QuietCursor::start_key);
            loop {
                let want = limit - keys.len();
                let out = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .index_name(INDEX_QUIET)
                    .key_condition_expression("#shard = :shard AND #q <= :q")
                    .expression_attribute_names("#shard", ATTR_SHARD)
                    .expression_attribute_names("#q", ATTR_QUIET)
                    .expression_attribute_values(":shard", AttributeValue::N(shard.to_string()))
                    .expression_attribute_values(
                        ":q",
                        AttributeValue::N(quiet_before_ms.to_string()),
                    )
                    .limit(i32::try_from(want).unwrap_or(i32::MAX))
                    .set_exclusive_start_key(exclusive)
                    .send()
                    .await
                    .map_err(|e| backend("query", &self.table, e))?;
                for item in out.items() {
                    let Some(key) = item.get(ATTR_PK).and_then(|v| v.as_s().ok()) else {
                        tracing::warn!(table = %self.table, index = INDEX_QUIET, "dynamodb.index_entry_without_key");
                        continue;
                    };
                    let mark = item
                        .get(ATTR_QUIET)
                        .and_then(|v| v.as_n().ok())
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    keys.push(key.clone());
                    last = Some(QuietCursor {
                        shard,
                        mark,
                        pk: key.clone(),
                    });
                }
                if keys.len() >= limit {
                    break 'shards;
                }
                match out.last_evaluated_key {
                    Some(k) if !k.is_empty() => exclusive = Some(k),
                    _ => break,
                }
            }
        }
        let mut page = QuietPage {
            next: last.filter(|_| keys.len() >= limit).map(|c| c.encode()),
            ..QuietPage::default()
        };
        // The index lags the table: a listed task may have moved on, finished or gone since.
        let mut records = self.batch_get(&keys).await?;
        for k in &keys {
            match records.remove(k) {
                Some(t) if t.quiet_mark_ms().is_some_and(|m| m <= quiet_before_ms) => {
                    page.tasks.push(t)
                }
                Some(_) => {}
                None => page.unreadable += 1,
            }
        }
        Ok(page)
    }

    async fn sweep_cursor(&self) -> Result<Option<String>, StoreError> {
        Ok(self
            .item_at(SWEEP_CURSOR_KEY.to_owned())
            .await?
            .and_then(|mut item| item.remove("cursor"))
            .and_then(|v| v.as_s().ok().cloned()))
    }

    async fn save_sweep_cursor(&self, cursor: Option<&str>) -> Result<(), StoreError> {
        let key = AttributeValue::S(SWEEP_CURSOR_KEY.to_owned());
        match cursor {
            Some(c) => self
                .client
                .put_item()
                .table_name(&self.table)
                .item(ATTR_PK, key)
                .item("cursor", AttributeValue::S(c.to_owned()))
                .send()
                .await
                .map(|_| ())
                .map_err(|e| backend("put_item", &self.table, e)),
            None => self
                .client
                .delete_item()
                .table_name(&self.table)
                .key(ATTR_PK, key)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| backend("delete_item", &self.table, e)),
        }
    }

    async fn list_expired(&self, now_ms: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        let mut out = Vec::new();
        for shard in 0..SHARDS {
            if out.len() >= limit {
                break;
            }
            let sort = Some(("<=", AttributeValue::N(now_ms.to_string())));
            self.query_shard(INDEX_EXPIRY, shard, sort, limit, &mut out)
                .await?;
        }
        Ok(out)
    }

    async fn delete(&self, tenant: &str, task_id: &str) -> Result<(), StoreError> {
        // Arguments first: a purge cut short leaves the record, so the next purge finds it and
        // finishes; the other order could strand an arguments item.
        for key in [arguments_key(tenant, task_id), pk(tenant, task_id)] {
            self.client
                .delete_item()
                .table_name(&self.table)
                .key(ATTR_PK, AttributeValue::S(key))
                .send()
                .await
                .map_err(|e| backend("delete", &self.table, e))?;
        }
        Ok(())
    }
}

/// The per-tenant running-jobs guard on DynamoDB: one item per tenant (key: the tenant's
/// [`tenant_hash`] and `#runs`, which no task key can be, and without index attributes, so no
/// listing sees it) holding a map of live runs to the time each ends, and a version. Taking a
/// place is a consistent read, then a `PutItem` conditional on the version read (expired runs
/// dropped on the way); releasing is an `UpdateItem` that removes the run and bumps the
/// version. Only a tenant's own runs touch its item, so a hot tenant contends with itself only.
#[async_trait]
impl crate::quota::RunSlots for DynamoStore {
    async fn take(
        &self,
        tenant: &str,
        owner: &str,
        max: usize,
        until_ms: u64,
    ) -> Result<bool, StoreError> {
        let key = runs_key(tenant);
        for _ in 0..16 {
            let item = self.item_at(key.clone()).await?.unwrap_or_default();
            let version = item
                .get("v")
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse::<u64>().ok());
            let now = crate::clock::now_ms();
            let mut runs: HashMap<String, AttributeValue> = item
                .get("runs")
                .and_then(|r| r.as_m().ok())
                .cloned()
                .unwrap_or_default();
            runs.retain(|_, until| {
                until
                    .as_n()
                    .ok()
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|u| u > now)
            });
            if runs.len() >= max && !runs.contains_key(owner) {
                return Ok(false);
            }
            runs.insert(owner.to_owned(), AttributeValue::N(until_ms.to_string()));
            let next = version.unwrap_or(0) + 1;
            let mut put = self
                .client
                .put_item()
                .table_name(&self.table)
                .item(ATTR_PK, AttributeValue::S(key.clone()))
                .item("runs", AttributeValue::M(runs))
                .item("v", AttributeValue::N(next.to_string()));
            put = match version {
                Some(v) => put
                    .condition_expression("v = :v")
                    .expression_attribute_values(":v", AttributeValue::N(v.to_string())),
                None => put.condition_expression("attribute_not_exists(pk)"),
            };
            match put.send().await {
                Ok(_) => return Ok(true),
                Err(e) if e.code() == Some("ConditionalCheckFailedException") => continue,
                Err(e) => return Err(backend("put_item", &self.table, e)),
            }
        }
        Err(StoreError::Conflict)
    }

    async fn release(&self, tenant: &str, owner: &str) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(ATTR_PK, AttributeValue::S(runs_key(tenant)))
            .update_expression("REMOVE runs.#o ADD v :one")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_names("#o", owner)
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .send()
            .await
            .map(|_| ())
            .or_else(|e| match e.code() {
                Some("ConditionalCheckFailedException") => Ok(()),
                _ => Err(backend("update_item", &self.table, e)),
            })
    }
}

/// The key of a tenant's running-jobs item: `#` after the tenant's key prefix, where a task
/// key has its task id (task ids never start with `#`).
fn runs_key(tenant: &str) -> String {
    let mut k = tenant_hash(tenant);
    k.push_str("#runs");
    k
}

/// The key of a task's arguments item: the tenant's key prefix, `#args#`, the task id. Task
/// ids never start with `#`, so no task key (nor the running-jobs key) is ever one of these.
pub fn arguments_key(tenant: &str, task_id: &str) -> String {
    let mut k = tenant_hash(tenant);
    k.push_str("#args#");
    k.push_str(task_id);
    k
}

/// An index: its name, partition key and sort key (attribute, type).
type IndexSpec = (
    &'static str,
    (&'static str, ScalarAttributeType),
    (&'static str, ScalarAttributeType),
);

/// The table's global secondary indexes (template.yaml declares the same).
fn index_specs() -> [IndexSpec; 4] {
    use ScalarAttributeType::{N, S};
    [
        (INDEX_ACTIVE, (ATTR_SHARD, N), (ATTR_ACTIVE, S)),
        (INDEX_EXPIRY, (ATTR_SHARD, N), (ATTR_EXPIRES_MS, N)),
        (INDEX_TENANT_ACTIVE, (ATTR_TENANT_ACTIVE, S), (ATTR_PK, S)),
        (INDEX_QUIET, (ATTR_SHARD, N), (ATTR_QUIET, N)),
    ]
}

fn key_element(name: &str, attr: &str, kind: KeyType) -> Result<KeySchemaElement, StoreError> {
    KeySchemaElement::builder()
        .attribute_name(attr)
        .key_type(kind)
        .build()
        .map_err(|e| backend("create_table", name, e))
}

fn attribute(
    name: &str,
    attr: &str,
    kind: ScalarAttributeType,
) -> Result<AttributeDefinition, StoreError> {
    AttributeDefinition::builder()
        .attribute_name(attr)
        .attribute_type(kind)
        .build()
        .map_err(|e| backend("create_table", name, e))
}

fn keys_only() -> Projection {
    Projection::builder()
        .projection_type(ProjectionType::KeysOnly)
        .build()
}

/// Creates the task table with its four indexes (on-demand billing) and enables TTL on
/// [`ATTR_TTL`]; waits until all of it is active. Idempotent: an existing table keeps its
/// data and settings, gets any index it lacks (one `UpdateTable` each — how a table made
/// before `tenant_active` existed is migrated, after
/// [`DynamoStore::backfill_tenant_index`]) and has TTL switched on only when it is off.
///
/// On AWS, building an index on a large table takes a while; should this call give up waiting
/// for it, calling it again resumes waiting.
pub async fn create_table(client: &Client, name: &str) -> Result<(), StoreError> {
    let mut request = client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key_element(name, ATTR_PK, KeyType::Hash)?)
        .attribute_definitions(attribute(name, ATTR_PK, ScalarAttributeType::S)?);
    let mut defined = vec![ATTR_PK];
    for (index, (hash, hash_kind), (sort, sort_kind)) in index_specs() {
        for (attr, kind) in [(hash, hash_kind), (sort, sort_kind)] {
            if !defined.contains(&attr) {
                defined.push(attr);
                request = request.attribute_definitions(attribute(name, attr, kind)?);
            }
        }
        request = request.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(index)
                .key_schema(key_element(name, hash, KeyType::Hash)?)
                .key_schema(key_element(name, sort, KeyType::Range)?)
                .projection(keys_only())
                .build()
                .map_err(|e| backend("create_table", name, e))?,
        );
    }
    let created = request.send().await;
    let existed = match created {
        Ok(_) => {
            tracing::info!(table = name, "dynamodb.table_created");
            false
        }
        Err(e) if e.code() == Some("ResourceInUseException") => true,
        Err(e) => return Err(backend("create_table", name, e)),
    };
    wait_until_active(client, name).await?;
    if existed {
        add_missing_indexes(client, name).await?;
    }

    let ttl = client
        .describe_time_to_live()
        .table_name(name)
        .send()
        .await
        .map_err(|e| backend("describe_time_to_live", name, e))?;
    let status = ttl
        .time_to_live_description()
        .and_then(|d| d.time_to_live_status());
    if !matches!(
        status,
        Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
    ) {
        let spec = TimeToLiveSpecification::builder()
            .attribute_name(ATTR_TTL)
            .enabled(true)
            .build()
            .map_err(|e| backend("update_time_to_live", name, e))?;
        client
            .update_time_to_live()
            .table_name(name)
            .time_to_live_specification(spec)
            .send()
            .await
            .map_err(|e| backend("update_time_to_live", name, e))?;
    }
    Ok(())
}

/// Adds the indexes an existing table lacks, one `UpdateTable` each (DynamoDB builds one at a
/// time), waiting for each to become active. Before `tenant_active` is added, the attribute is
/// backfilled onto the active items (see the module docs): items need not wait for the index,
/// and a call that stops half way leaves either no index (the next call backfills again, at
/// the cost of failed conditions) or one whose items are complete.
async fn add_missing_indexes(client: &Client, name: &str) -> Result<(), StoreError> {
    for (index, (hash, hash_kind), (sort, sort_kind)) in index_specs() {
        if index_names(client, name).await?.iter().any(|i| i == index) {
            continue;
        }
        if index == INDEX_TENANT_ACTIVE {
            DynamoStore::new(client.clone(), name)
                .backfill_tenant_index()
                .await?;
        }
        if index == INDEX_QUIET {
            DynamoStore::new(client.clone(), name)
                .backfill_quiet_index()
                .await?;
        }
        let create = CreateGlobalSecondaryIndexAction::builder()
            .index_name(index)
            .key_schema(key_element(name, hash, KeyType::Hash)?)
            .key_schema(key_element(name, sort, KeyType::Range)?)
            .projection(keys_only())
            .build()
            .map_err(|e| backend("update_table", name, e))?;
        let added = client
            .update_table()
            .table_name(name)
            .attribute_definitions(attribute(name, hash, hash_kind)?)
            .attribute_definitions(attribute(name, sort, sort_kind)?)
            .global_secondary_index_updates(
                GlobalSecondaryIndexUpdate::builder().create(create).build(),
            )
            .send()
            .await;
        if let Err(e) = added {
            // Another process may have added it at the same moment.
            if !index_names(client, name).await?.iter().any(|i| i == index) {
                return Err(backend("update_table", name, e));
            }
        }
        tracing::info!(table = name, index, "dynamodb.index_added");
        wait_until_active(client, name).await?;
    }
    Ok(())
}

/// The names of a table's global secondary indexes.
async fn index_names(client: &Client, name: &str) -> Result<Vec<String>, StoreError> {
    let out = client
        .describe_table()
        .table_name(name)
        .send()
        .await
        .map_err(|e| backend("describe_table", name, e))?;
    Ok(out
        .table()
        .map(|t| {
            t.global_secondary_indexes()
                .iter()
                .filter_map(|i| i.index_name().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

/// Polls until the table and its indexes are active (a few seconds on AWS, at once locally).
async fn wait_until_active(client: &Client, name: &str) -> Result<(), StoreError> {
    let mut pause = Duration::from_millis(50);
    for _ in 0..120 {
        let out = client
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(|e| backend("describe_table", name, e))?;
        if let Some(t) = out.table()
            && t.table_status() == Some(&TableStatus::Active)
            && t.global_secondary_indexes()
                .iter()
                .all(|i| i.index_status() == Some(&IndexStatus::Active))
        {
            return Ok(());
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
    tracing::warn!(table = name, "dynamodb.table_not_active");
    Err(StoreError::Backend(
        "dynamodb table did not become active".into(),
    ))
}

/// The table key of a task: `{tenant}#{taskId}`, with `%` and `#` escaped in the tenant so the
/// first `#` always ends it.
pub fn pk(tenant: &str, task_id: &str) -> String {
    let mut k = tenant_hash(tenant);
    k.push_str(task_id);
    k
}

/// The `tenant_active` partition key of a tenant: the start of its tasks' [`pk`]s, the escaped
/// tenant and `#` (so it is never empty, and two tenants never share it).
pub fn tenant_hash(tenant: &str) -> String {
    let mut k = String::with_capacity(tenant.len() + 47);
    for c in tenant.chars() {
        match c {
            '%' => k.push_str("%25"),
            '#' => k.push_str("%23"),
            c => k.push(c),
        }
    }
    k.push('#');
    k
}

/// Inverse of [`pk`].
fn split_pk(k: &str) -> Option<TaskKey> {
    let (tenant, task_id) = k.split_once('#')?;
    Some(TaskKey {
        tenant: tenant.replace("%23", "#").replace("%25", "%"),
        task_id: task_id.to_owned(),
    })
}

/// The index shard of a key: FNV-1a, stable across processes and releases.
fn shard_of(pk: &str) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in pk.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % u64::from(SHARDS)) as u32
}

/// The item of a record: its fields by `serde_dynamo`, plus key, index and TTL attributes.
///
/// When that native item would be refused by DynamoDB (size, depth or number range; see the
/// module docs), every top-level map or list — and any top-level number out of range — is
/// stored as its JSON text in a binary attribute instead. The record's JSON is at most
/// `MAX_RECORD_BYTES`, so this form always fits.
fn to_item(task: &TaskRecord) -> Result<HashMap<String, AttributeValue>, StoreError> {
    let mut item: HashMap<String, AttributeValue> =
        sd::to_item(task).map_err(|e| codec("serialize", e))?;
    let key = pk(&task.tenant, &task.task_id);
    if RESERVED.iter().any(|r| item.contains_key(*r)) {
        return Err(codec(
            "serialize",
            "a record field uses a reserved attribute name",
        ));
    }
    if !task.status.is_terminal() {
        if key.len() > MAX_SORT_KEY_BYTES {
            return Err(codec("serialize", "tenant and task id exceed 1024 bytes"));
        }
        item.insert(ATTR_ACTIVE.into(), AttributeValue::S(key.clone()));
        item.insert(
            ATTR_TENANT_ACTIVE.into(),
            AttributeValue::S(tenant_hash(&task.tenant)),
        );
    }
    item.insert(
        ATTR_SHARD.into(),
        AttributeValue::N(shard_of(&key).to_string()),
    );
    if let Some(mark) = task.quiet_mark_ms() {
        item.insert(ATTR_QUIET.into(), AttributeValue::N(mark.to_string()));
    }
    if let Some(at) = task.expires_at_ms() {
        item.insert(ATTR_EXPIRES_MS.into(), AttributeValue::N(at.to_string()));
        item.insert(
            ATTR_TTL.into(),
            AttributeValue::N(at.div_ceil(1000).to_string()),
        );
    }
    item.insert(ATTR_PK.into(), AttributeValue::S(key));

    if !storable(&item) {
        let json = serde_json::to_value(task).map_err(|e| codec("serialize", e))?;
        let Value::Object(fields) = json else {
            return Err(codec("serialize", "a record is not a JSON object"));
        };
        for (name, value) in fields {
            let compact = item.get(&name).is_some_and(|v| {
                v.is_m() || v.is_l() || v.as_n().is_ok_and(|n| !number_in_range(n))
            });
            if compact {
                let text = serde_json::to_vec(&value).map_err(|e| codec("serialize", e))?;
                item.insert(name, AttributeValue::B(Blob::new(text)));
            }
        }
    }
    Ok(item)
}

/// The record of an item (index attributes are ignored; JSON-text fields are parsed back).
fn from_item(mut item: HashMap<String, AttributeValue>) -> Result<TaskRecord, StoreError> {
    let texts: Vec<String> = item
        .iter()
        .filter(|(_, v)| v.is_b())
        .map(|(k, _)| k.clone())
        .collect();
    if texts.is_empty() {
        return sd::from_item(item).map_err(|e| codec("deserialize", e));
    }
    let mut parsed = Map::new();
    for name in texts {
        if let Some(AttributeValue::B(b)) = item.remove(&name) {
            let v: Value =
                serde_json::from_slice(b.as_ref()).map_err(|e| codec("deserialize", e))?;
            parsed.insert(name, v);
        }
    }
    let mut fields: Map<String, Value> =
        sd::from_item(item).map_err(|e| codec("deserialize", e))?;
    fields.extend(parsed);
    serde_json::from_value(Value::Object(fields)).map_err(|e| codec("deserialize", e))
}

/// Whether DynamoDB accepts `item` as it is: at most 400 KB by DynamoDB's own accounting,
/// at most 32 levels deep, every number within DynamoDB's range.
fn storable(item: &HashMap<String, AttributeValue>) -> bool {
    let mut size = 0;
    for (name, v) in item {
        match measure(v, 0) {
            Some(n) => size += name.len() + n,
            None => return false,
        }
    }
    size <= MAX_ITEM_BYTES
}

/// DynamoDB's size of one value (an upper bound, per "Item sizes and formats"), or `None`
/// when DynamoDB would refuse it.
fn measure(v: &AttributeValue, depth: usize) -> Option<usize> {
    Some(match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => {
            if !number_in_range(n) {
                return None;
            }
            n.bytes().filter(u8::is_ascii_digit).count().div_ceil(2) + 1
        }
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::L(items) => {
            if depth >= MAX_DEPTH {
                return None;
            }
            let mut n = 3;
            for i in items {
                n += 1 + measure(i, depth + 1)?;
            }
            n
        }
        AttributeValue::M(fields) => {
            if depth >= MAX_DEPTH {
                return None;
            }
            let mut n = 3;
            for (k, i) in fields {
                n += 1 + k.len() + measure(i, depth + 1)?;
            }
            n
        }
        AttributeValue::Ss(x) => x.iter().map(String::len).sum(),
        AttributeValue::Ns(x) => x.iter().map(|n| n.len()).sum(),
        AttributeValue::Bs(x) => x.iter().map(|b| b.as_ref().len()).sum(),
        _ => return None,
    })
}

/// DynamoDB numbers: at most 38 significant digits, magnitude from 1E-130 to below 1E+126.
fn number_in_range(n: &str) -> bool {
    let digits = n.trim_start_matches('-');
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.bytes().chain(frac.bytes()).any(|b| !b.is_ascii_digit()) {
        // serde_dynamo writes plain decimals; anything else is left to DynamoDB to judge.
        return true;
    }
    let int = int.trim_start_matches('0');
    let all = format!("{int}{frac}");
    let significant = all.trim_start_matches('0').trim_end_matches('0');
    if significant.is_empty() {
        return true; // zero
    }
    if significant.len() > 38 {
        return false;
    }
    if !int.is_empty() {
        int.len() <= 126
    } else {
        let leading_zeros = frac.len() - frac.trim_start_matches('0').len();
        leading_zeros < 130
    }
}

fn is_condition_failed<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    e.code() == Some("ConditionalCheckFailedException")
}

/// Attempts of one conditional write (the SDK's standard mode makes 3), and the first pause
/// (doubled each time, with jitter: about 1.5 s in all).
const PUT_ATTEMPTS: u32 = 5;
const PUT_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// `pause` plus up to half of it again, at random, so that writers throttled together do not
/// retry together.
fn jittered(pause: Duration) -> Duration {
    let mut b = [0u8; 2];
    let r = getrandom::fill(&mut b).map_or(0, |()| u16::from_le_bytes(b));
    pause + pause.mul_f64(f64::from(r) / f64::from(u16::MAX) / 2.0)
}

/// What a conditional write expects to find, as a condition on the stored record.
#[derive(Debug, Clone, Copy)]
enum Prior {
    /// No item (create).
    Absent,
    /// The item at this version, not terminal (update).
    Version(u64),
}

impl Prior {
    fn holds(self, stored: Option<&TaskRecord>) -> bool {
        match (self, stored) {
            (Prior::Absent, None) => true,
            (Prior::Version(v), Some(t)) => t.version == v && !t.status.is_terminal(),
            _ => false,
        }
    }
}

/// What a failed write request says about the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// Refused for good (a 4xx other than throttling, or never sent): not applied, and trying
    /// again would not help.
    Refused,
    /// Throttled: not applied; worth trying again after a pause.
    Throttled,
    /// Timeouts, connection failures, unreadable answers, 5xx: may or may not have been
    /// applied (DynamoDB says so of a 500).
    Unknown,
}

fn failure_kind<E: ProvideErrorMetadata>(
    e: &SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> Failure {
    match e {
        SdkError::ConstructionFailure(_) => Failure::Refused,
        SdkError::ServiceError(se) => {
            if matches!(
                e.code(),
                Some(
                    "ProvisionedThroughputExceededException"
                        | "ThrottlingException"
                        | "RequestLimitExceeded"
                )
            ) {
                Failure::Throttled
            } else if se.raw().status().as_u16() >= 500 {
                Failure::Unknown
            } else {
                Failure::Refused
            }
        }
        _ => Failure::Unknown,
    }
}

/// Logs the detail (never an item) and returns a fixed message.
fn backend<E>(op: &'static str, table: &str, e: E) -> StoreError
where
    E: std::error::Error + 'static,
{
    tracing::warn!(op, table, error = %DisplayErrorContext(&e), "dynamodb.error");
    StoreError::Backend(format!("dynamodb {op} failed"))
}

fn codec(what: &'static str, e: impl std::fmt::Display) -> StoreError {
    tracing::warn!(what, error = %e, "dynamodb.codec_error");
    StoreError::Backend(format!("dynamodb item {what} failed"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{TaskStatus, new_task_id};
    use serde_json::json;

    fn record(tenant: &str, ttl: Option<u64>) -> TaskRecord {
        let mut t = TaskRecord::new(tenant, new_task_id(), "tool", ttl, 1000, json!({}));
        t.checkpoint = json!({"n": 1, "s": "", "f": 0.5, "deep": {"a": [1, null, true]}});
        t
    }

    #[test]
    fn keys_escape_the_tenant_so_different_pairs_never_collide() {
        assert_eq!(pk("acme", "tsk_1"), "acme#tsk_1");
        assert_ne!(pk("a#b", "c"), pk("a", "b#c"));
        assert_ne!(pk("a%23", "c"), pk("a#", "c"));
        for (tenant, id) in [("a#b", "c"), ("a", "b#c"), ("%#%", "#%#"), ("", "x")] {
            let k = split_pk(&pk(tenant, id)).unwrap();
            assert_eq!((k.tenant.as_str(), k.task_id.as_str()), (tenant, id));
            // The tenant index's partition key is the key's tenant part: never empty.
            assert!(pk(tenant, id).starts_with(&tenant_hash(tenant)));
            assert!(tenant_hash(tenant).ends_with('#'));
        }
        assert_eq!(tenant_hash(""), "#");
        assert_ne!(tenant_hash("a#b"), tenant_hash("a%23b"));
    }

    #[test]
    fn shards_are_stable_and_spread() {
        // Stored in items: must never change between releases.
        assert_eq!(shard_of(""), (0xcbf2_9ce4_8422_2325u64 % 16) as u32);
        let used: std::collections::HashSet<u32> = (0..200)
            .map(|i| shard_of(&pk("t", &format!("tsk_{i}"))))
            .collect();
        assert_eq!(used.len(), SHARDS as usize);
    }

    #[test]
    fn items_carry_index_and_ttl_attributes_only_when_they_apply() {
        let mut t = record("t", Some(1_500));
        t.created_at_ms = 10_000;
        let item = to_item(&t).unwrap();
        assert_eq!(item[ATTR_PK].as_s().unwrap(), &pk("t", &t.task_id));
        assert_eq!(item[ATTR_ACTIVE].as_s().unwrap(), &pk("t", &t.task_id));
        assert_eq!(item[ATTR_TENANT_ACTIVE].as_s().unwrap(), "t#");
        assert_eq!(item[ATTR_EXPIRES_MS].as_n().unwrap(), "11500");
        assert_eq!(item[ATTR_TTL].as_n().unwrap(), "12", "seconds, rounded up");
        assert!(item["checkpoint"].is_m(), "native attributes by default");
        assert!(
            !item.contains_key("arguments"),
            "arguments live in their own item"
        );
        assert_eq!(from_item(item).unwrap(), t);

        let mut done = record("t", None);
        done.complete(json!({"content": []})).unwrap();
        let item = to_item(&done).unwrap();
        for absent in [ATTR_ACTIVE, ATTR_TENANT_ACTIVE, ATTR_EXPIRES_MS, ATTR_TTL] {
            assert!(!item.contains_key(absent), "{absent}");
        }
        assert_eq!(from_item(item).unwrap(), done);
    }

    #[test]
    fn record_fields_never_use_the_adapter_attribute_names() {
        let mut t = record("t", Some(1));
        t.status = TaskStatus::InputRequired;
        let Value::Object(fields) = serde_json::to_value(&t).unwrap() else {
            panic!("a record is an object");
        };
        for r in RESERVED {
            assert!(!fields.contains_key(r), "{r}");
        }
    }

    #[test]
    fn records_dynamodb_cannot_hold_natively_are_stored_as_json_text_and_read_back() {
        let mut deep = json!("leaf");
        for _ in 0..40 {
            deep = json!({ "d": deep });
        }
        let cases = [
            deep,
            json!({"big": 1e300, "tiny": 1e-200}),
            // 120k one-digit numbers: ~240 KB of JSON, ~360 KB + overhead in DynamoDB's
            // accounting (3 bytes an element) plus the result below: over 400 KB natively.
            json!(vec![7; 120_000]),
        ];
        for checkpoint in cases {
            let mut t = record("t", None);
            t.checkpoint = checkpoint;
            if t.checkpoint.is_array() {
                t.result = Some(json!(vec![1; 40_000]));
            }
            encode(&t).unwrap();
            let item = to_item(&t).unwrap();
            assert!(item["checkpoint"].is_b());
            assert!(item["status"].is_s(), "scalars stay native");
            assert!(item["version"].is_n());
            assert_eq!(from_item(item).unwrap(), t);
        }
    }

    #[test]
    fn terminal_statuses_match_the_stored_spelling() {
        for s in TaskStatus::ALL {
            let stored = serde_json::to_value(s).unwrap();
            let stored = stored.as_str().unwrap();
            assert_eq!(TERMINAL.contains(&stored), s.is_terminal(), "{s:?}");
        }
    }

    #[test]
    fn dynamodb_number_range_is_enforced() {
        for ok in ["0", "-1", "0.5", "18446744073709551615", "1e5"] {
            assert!(number_in_range(ok), "{ok}");
        }
        let big = format!("1{}", "0".repeat(126));
        let tiny = format!("0.{}1", "0".repeat(130));
        let precise = "1".repeat(39);
        for bad in [big.as_str(), tiny.as_str(), precise.as_str()] {
            assert!(!number_in_range(bad), "{bad}");
        }
    }
}
