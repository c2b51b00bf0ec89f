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
//! | `ttl`           | N    | with a TTL         | DynamoDB TTL: expiry + [`TTL_GRACE`], seconds  |
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
//! and nothing else, however many tasks wait for people or sleep. The key is the mark rounded
//! down to a minute (`item::quiet_key`), so a running job's checkpoints rewrite the index
//! entry at most once a minute (two index writes), and so does a job that parks and wakes
//! every second (its mark is its wake time); a long sleep moves it once.
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
//! # Where things are
//!
//! The item mapping is in `item`, keys and the shard in `key`, table and index creation in
//! [`create_table`], the conditional writes and their retries in `write`, the index queries
//! and batch reads behind the listings in `listing`, the running-jobs guard in `runs`, and the back-fills for tables made before an index existed in
//! [`DynamoStore::backfill_tenant_index`] and [`DynamoStore::backfill_quiet_index`]. What each
//! call costs is in the repository's `docs/dynamodb.md`.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;

use crate::aws::FirstUse;
use crate::store::{QuietPage, StoreError, TaskKey, TaskRef, TaskStore, encode, encode_arguments};
use crate::task::TaskRecord;
use crate::tenant::Tenant;

mod backfill;
mod item;
mod key;
mod listing;
mod places;
mod runs;
mod table;
#[cfg(test)]
mod tests;
mod write;

pub use key::{arguments_key, pk, tenant_prefix};
pub use places::{RECENT, RECOUNT_AFTER};
pub use table::create_table;

use item::{from_item, to_item};
use key::shard_of;
use places::Reserved;
use write::Prior;

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
/// DynamoDB's TTL attribute: epoch seconds of expiry plus [`TTL_GRACE`], rounded up; present
/// only with a TTL ([`ttl_seconds`]).
pub const ATTR_TTL: &str = "ttl";
/// How long after a task's expiry DynamoDB's TTL may delete its items. Reads treat an expired
/// task as absent at once; the item stays for the sweep, which purges it and gives an
/// unfinished task's place back (`places`). Deleted by the TTL first, an unfinished task would
/// leave its tenant's place taken until a refusal recounts it. Two days: DynamoDB deletes an
/// item any time after its `ttl`, and the sweep runs every SweepSchedule (5 minutes by default;
/// a daily schedule, and a run that failed with its retries, still fit).
pub const TTL_GRACE: std::time::Duration = std::time::Duration::from_secs(2 * 86_400);

/// The [`ATTR_TTL`] value of an item whose task expires at `expires_at_ms` (epoch ms): epoch
/// seconds, rounded up, [`TTL_GRACE`] later.
pub fn ttl_seconds(expires_at_ms: u64) -> u64 {
    expires_at_ms
        .div_ceil(1000)
        .saturating_add(TTL_GRACE.as_secs())
}
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

/// The terminal statuses, as stored (conditions refuse to overwrite them).
const TERMINAL: [&str; 3] = ["completed", "failed", "cancelled"];

/// Task records in one DynamoDB table (create it with [`create_table`]).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: FirstUse<Client>,
    table: String,
}

impl DynamoStore {
    /// A store over an existing table. Build the client once, at cold start, or at its first
    /// use ([`FirstUse`]).
    pub fn new(client: impl Into<FirstUse<Client>>, table_name: impl Into<String>) -> Self {
        Self {
            client: client.into(),
            table: table_name.into(),
        }
    }

    /// The table this store writes.
    pub fn table_name(&self) -> &str {
        &self.table
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
    async fn arguments_bytes(&self, id: TaskRef<'_>) -> Result<Option<Vec<u8>>, StoreError> {
        let item = self.item_at(arguments_key(id)).await?;
        match item.as_ref().and_then(|i| i.get(ATTR_ARGUMENTS)) {
            Some(AttributeValue::B(b)) => Ok(Some(b.clone().into_inner())),
            Some(_) => Err(codec(
                "deserialize",
                "arguments item without binary arguments",
            )),
            None => Ok(None),
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
            Ok(t) if pk(t.key()) == key => Some(t),
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
}

#[async_trait]
impl TaskStore for DynamoStore {
    async fn create_within(
        &self,
        task: &TaskRecord,
        arguments: &Value,
        max_active: usize,
    ) -> Result<bool, StoreError> {
        // Both sizes are checked before anything is written. Then the tenant's place (see
        // `places`), then the arguments: a record is never readable without them (a crash
        // between the two leaves an arguments item alone, which DynamoDB's TTL removes).
        encode(task)?;
        to_item(task)?;
        let bytes = encode_arguments(arguments)?;
        let reserved = match task.status.is_terminal() {
            true => Reserved::Again,
            false => self.reserve(task.key(), max_active).await?,
        };
        if reserved == Reserved::Full {
            return Ok(false);
        }
        // The place goes back when the record is certainly not written: the arguments failed
        // (the record comes after them), or its conditional put lost (the key is taken).
        // After any other failure of the record's put it may have landed: the place stays
        // (a refusal recounts it).
        let outcome = match self.put_arguments(task, bytes).await {
            Err(e) => Err((e, true)),
            Ok(()) => self
                .put(
                    "create",
                    task,
                    Prior::Absent,
                    "attribute_not_exists(#pk)",
                    &[("#pk", ATTR_PK)],
                    Vec::new(),
                )
                .await
                .map_err(|e| {
                    let lost = matches!(e, StoreError::Conflict);
                    (e, lost)
                }),
        };
        match outcome {
            Ok(()) => Ok(true),
            Err((e, not_written)) => {
                if not_written && reserved == Reserved::New {
                    self.give_back(&task.tenant).await;
                }
                Err(e)
            }
        }
    }

    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        let key = pk(id);
        let item = self.item_at(key.clone()).await?;
        Ok(item.and_then(|item| self.record_at(&key, item)))
    }

    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        self.arguments_bytes(id)
            .await?
            .map(|b| serde_json::from_slice(&b).map_err(|e| codec("deserialize", e)))
            .transpose()
    }

    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        let mut next = task.clone();
        next.version = task.version + 1;
        // The condition below refuses a terminal record, so a terminal write here is the one
        // that ends the task: its place goes back once it landed.
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
        if next.status.is_terminal() {
            self.give_back(&next.tenant).await;
        }
        Ok(next.version)
    }

    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError> {
        let mut out = Vec::new();
        let after = after.map(|k| pk(k.borrowed()));
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
        tenant: &Tenant,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        self.tenant_active_page(tenant, after, limit).await
    }

    async fn count_tenant_active(
        &self,
        tenant: &Tenant,
        at_most: usize,
    ) -> Result<usize, StoreError> {
        self.tenant_active_count(tenant, at_most).await
    }

    async fn list_quiet(
        &self,
        quiet_before_ms: u64,
        after: Option<&str>,
        limit: usize,
    ) -> Result<QuietPage, StoreError> {
        self.quiet_page(quiet_before_ms, after, limit).await
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

    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        // Arguments first: a purge cut short leaves the record, so the next purge finds it and
        // finishes; the other order could strand an arguments item.
        for key in [arguments_key(id), pk(id)] {
            let gone = self
                .client
                .delete_item()
                .table_name(&self.table)
                .key(ATTR_PK, AttributeValue::S(key))
                .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
                .send()
                .await
                .map_err(|e| backend("delete", &self.table, e))?;
            // The one delete that found the record still active gives its place back.
            if gone
                .attributes()
                .is_some_and(|a| a.contains_key(ATTR_ACTIVE))
            {
                self.give_back(id.tenant).await;
            }
        }
        Ok(())
    }
}

fn is_condition_failed<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    e.code() == Some("ConditionalCheckFailedException")
}

/// Logs the detail (never an item) and returns a fixed message.
fn backend<E>(op: &'static str, table: &str, e: E) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
{
    tracing::warn!(op, table, error = %DisplayErrorContext(&e), "dynamodb.error");
    StoreError::backend_from(format!("dynamodb {op} failed"), e)
}

fn codec(what: &'static str, e: impl std::fmt::Display) -> StoreError {
    tracing::warn!(what, error = %e, "dynamodb.codec_error");
    StoreError::backend(format!("dynamodb item {what} failed"))
}
