//! A tenant's places on DynamoDB — its active tasks, counted — for the active-task quota.
//!
//! One item per tenant ([`places_key`]: no index attribute, so no listing sees it) holds `n`,
//! the places taken, `v`, bumped at every change, `at`, when it last changed (epoch ms),
//! `last`, the task whose reservation changed it last, `rc`, when it was last recounted, and
//! the reservations of the last minute or so, ten seconds to an attribute (`r{epoch / 10 s}`,
//! see [`RECENT`]). A creation takes its place with one
//! conditional `UpdateItem` (`n < max`) before the task's record is written, and gives it
//! back if the record is then certainly not written; the write that ends a task (or deletes
//! an active one) gives it back with another. DynamoDB applies the updates of one item one
//! after the other, so concurrent creations never pass the limit and never lose a race to
//! each other: there is nothing to retry. The reasoning and its costs are in
//! `docs/dynamodb.md` ("Places").
//!
//! The count errs one way only: a place may stay taken after its task is gone (a crash
//! between the record's write and the counter's, a record removed behind the sweep's back, a
//! give-back whose answer was lost), never the reverse — a give-back is never retried unless
//! the service said it was not applied. Such a place is found when the tenant is refused: if
//! it was last recounted [`RECOUNT_AFTER`] ago or more — however often its counter moves, so a
//! busy tenant's leaks heal too — the refusal counts the tenant's active tasks on the
//! `tenant_active` index and gives back what neither they nor the reservations of the last
//! [`RECENT`] (creations that may still be writing their record, or whose record the index
//! has not shown yet) account for, conditional on the version the refusal read.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use super::key::places_key;
use super::write::{Failure, failure_kind, jittered};
use super::{ATTR_PK, DynamoStore, backend};
use crate::clock::now_ms;
use crate::store::{StoreError, TaskStore};
use crate::task::TaskRef;
use crate::tenant::Tenant;

/// The least time between two recounts of one tenant: a refused tenant's index is counted at
/// most once a minute, however many refusals it gets.
pub const RECOUNT_AFTER: Duration = Duration::from_secs(60);

/// How far back a recount takes reservations as possibly in flight: longer than any creation
/// can take between its reservation and its record (three writes, each bounded by the
/// client's 10 s operation timeout) and far longer than the index lags the table.
pub const RECENT: Duration = Duration::from_secs(70);

/// Reservations are counted in buckets of this many milliseconds (`r{epoch_ms / BUCKET_MS}`).
const BUCKET_MS: u64 = 10_000;

/// Buckets a reservation removes behind it (those from just past [`RECENT`] to this many
/// buckets back): an item keeps about a minute of them, whatever the tenant's pace; a recount
/// removes whatever older ones a quiet spell left.
const BUCKETS_KEPT_CLEAN: u64 = 12;

/// The bucket `now_ms` falls in.
fn bucket(now_ms: u64) -> u64 {
    now_ms / BUCKET_MS
}

/// The oldest bucket a recount at `now_ms` counts: every bucket that overlaps [`RECENT`].
fn oldest_recent(now_ms: u64) -> u64 {
    bucket(now_ms.saturating_sub(RECENT.as_millis() as u64))
}

/// The bucket number of a reservation attribute's name, if it is one.
fn bucket_of(name: &str) -> Option<u64> {
    name.strip_prefix('r')?.parse().ok()
}

/// Rounds of one reservation: the first creation of a tenant races others to make its item,
/// and a recount may move the counter; anything past this is a backend failure.
const ROUNDS: usize = 4;

/// A number attribute of `item`.
fn number(item: &HashMap<String, AttributeValue>, name: &str) -> Option<u64> {
    item.get(name)?.as_n().ok()?.parse().ok()
}

/// What a reservation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reserved {
    /// Took a place.
    New,
    /// Found the place this task took already (an earlier call for the same task id, or the
    /// SDK's retry of an attempt that landed): took none, and must give none back.
    Again,
    /// The tenant holds its places: nothing written.
    Full,
}

/// Why a reservation's conditional update failed, from the item as it was.
enum Refusal {
    /// No item yet: the tenant's first creation since places were counted.
    NoItem,
    /// An earlier attempt of this same reservation landed (its answer was lost).
    Ours,
    /// The tenant holds `n` places, at version `v`, last recounted at `rc` (0: never), with
    /// `recent` reservations in the last [`RECENT`] and `stale` older bucket attributes.
    Full {
        n: u64,
        v: u64,
        rc: u64,
        recent: u64,
        stale: Vec<String>,
    },
}

impl DynamoStore {
    /// Takes one of its tenant's places for task `id` unless the tenant holds `max` already.
    pub(super) async fn reserve(
        &self,
        id: TaskRef<'_>,
        max: usize,
    ) -> Result<Reserved, StoreError> {
        let tenant = id.tenant;
        for _ in 0..ROUNDS {
            let refusal = match self.try_reserve(id, max).await? {
                None => return Ok(Reserved::New),
                Some(r) => r,
            };
            match refusal {
                Refusal::Ours => return Ok(Reserved::Again),
                Refusal::NoItem => self.start_counting(tenant).await?,
                Refusal::Full {
                    n,
                    v,
                    rc,
                    recent,
                    stale,
                } => {
                    if now_ms().saturating_sub(rc) < RECOUNT_AFTER.as_millis() as u64
                        || !self.recount(tenant, n, v, recent, &stale).await?
                    {
                        return Ok(Reserved::Full);
                    }
                }
            }
        }
        tracing::warn!(table = %self.table, "dynamodb.places_unsettled");
        Err(StoreError::backend(
            "a tenant's places could not be settled",
        ))
    }

    /// One conditional `UpdateItem`; `None` when the place was taken.
    async fn try_reserve(
        &self,
        id: TaskRef<'_>,
        max: usize,
    ) -> Result<Option<Refusal>, StoreError> {
        let (tenant, task_id) = (id.tenant, id.task_id);
        let now = now_ms();
        let current = bucket(now);
        let behind = oldest_recent(now).saturating_sub(1);
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(ATTR_PK, AttributeValue::S(places_key(tenant)))
            .expression_attribute_names("#rb", format!("r{current}"));
        let mut removed = Vec::new();
        for (i, b) in (0..BUCKETS_KEPT_CLEAN)
            .filter_map(|k| behind.checked_sub(k))
            .enumerate()
        {
            req = req.expression_attribute_names(format!("#o{i}"), format!("r{b}"));
            removed.push(format!("#o{i}"));
        }
        let out = req
            .update_expression(format!(
                "SET #at = :now, #last = :id ADD #n :one, #v :one, #rb :one{}",
                if removed.is_empty() {
                    String::new()
                } else {
                    format!(" REMOVE {}", removed.join(", "))
                }
            ))
            // `last`: the SDK's retry of an attempt that landed finds itself instead of taking
            // a second place.
            .condition_expression("#n < :max AND (attribute_not_exists(#last) OR #last <> :id)")
            .expression_attribute_names("#n", "n")
            .expression_attribute_names("#v", "v")
            .expression_attribute_names("#at", "at")
            .expression_attribute_names("#last", "last")
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .expression_attribute_values(":id", AttributeValue::S(task_id.to_string()))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":max", AttributeValue::N(max.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let e = match out {
            Ok(_) => return Ok(None),
            Err(e) => e,
        };
        let Some(UpdateItemError::ConditionalCheckFailedException(failed)) = e.as_service_error()
        else {
            return Err(backend("reserve", &self.table, e));
        };
        let Some(item) = failed.item() else {
            return Ok(Some(Refusal::NoItem));
        };
        if item
            .get("last")
            .and_then(|l| l.as_s().ok())
            .map(String::as_str)
            == Some(task_id)
        {
            return Ok(Some(Refusal::Ours));
        }
        let oldest = oldest_recent(now_ms());
        let (mut recent, mut stale) = (0, Vec::new());
        for (name, value) in item {
            match bucket_of(name) {
                Some(b) if b >= oldest => {
                    recent += value.as_n().ok().and_then(|n| n.parse().ok()).unwrap_or(0)
                }
                Some(_) => stale.push(name.clone()),
                None => {}
            }
        }
        match (number(item, "n"), number(item, "v")) {
            (Some(n), Some(v)) => Ok(Some(Refusal::Full {
                n,
                v,
                rc: number(item, "rc").unwrap_or(0),
                recent,
                stale,
            })),
            // An item made by hand, or damaged: start it again from the index.
            _ => Ok(Some(Refusal::NoItem)),
        }
    }

    /// Makes (or remakes) `tenant`'s item from its active tasks on the `tenant_active` index:
    /// tasks created before places were counted hold theirs too, and give them back as they
    /// end. Losing the race to another creation's item is fine.
    async fn start_counting(&self, tenant: &Tenant) -> Result<(), StoreError> {
        let n = match self.tenant_active_count(tenant, usize::MAX).await {
            Ok(n) => n,
            // A table older than that index (until `create_table` adds it): the `active`
            // index, every tenant's keys, once.
            Err(_) => self.count_on_active_index(tenant).await?,
        };
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(ATTR_PK, AttributeValue::S(places_key(tenant)))
            .item("n", AttributeValue::N(n.to_string()))
            .item("v", AttributeValue::N("1".into()))
            .item("at", AttributeValue::N(now_ms().to_string()))
            .item("rc", AttributeValue::N(now_ms().to_string()))
            .condition_expression("attribute_not_exists(#pk) OR attribute_not_exists(#v)")
            .expression_attribute_names("#pk", ATTR_PK)
            .expression_attribute_names("#v", "v")
            .send()
            .await;
        match put {
            Ok(_) => {
                tracing::info!(table = %self.table, places = n, "dynamodb.places_counted");
                Ok(())
            }
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => Ok(()),
            Err(e) => Err(backend("places", &self.table, e)),
        }
    }

    /// `tenant`'s keys on the `active` index (all tenants', page by page).
    async fn count_on_active_index(&self, tenant: &Tenant) -> Result<usize, StoreError> {
        const PAGE: usize = 1000;
        let (mut n, mut after) = (0, None);
        loop {
            let page = self.list_active(after.as_ref(), PAGE).await?;
            n += page.iter().filter(|k| k.tenant == *tenant).count();
            if page.len() < PAGE {
                return Ok(n);
            }
            after = page.last().cloned();
        }
    }

    /// Counts a tenant that was refused at `n` places (version `v`, `recent` reservations in
    /// the last [`RECENT`]) on the index and gives back the places neither its active tasks
    /// nor those reservations account for, unless the counter moved meanwhile; true when
    /// places were freed (or the counter moved: the caller tries again). `rc` is written
    /// either way, so the tenant's next recount waits [`RECOUNT_AFTER`]; `stale` buckets go.
    async fn recount(
        &self,
        tenant: &Tenant,
        n: u64,
        v: u64,
        recent: u64,
        stale: &[String],
    ) -> Result<bool, StoreError> {
        let counted = self
            .tenant_active_count(tenant, usize::try_from(n).unwrap_or(usize::MAX))
            .await? as u64;
        let leaked = n.saturating_sub(counted.saturating_add(recent));
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(ATTR_PK, AttributeValue::S(places_key(tenant)))
            .condition_expression("#v = :v")
            .expression_attribute_names("#n", "n")
            .expression_attribute_names("#v", "v")
            .expression_attribute_names("#rc", "rc")
            .expression_attribute_values(
                ":leaked",
                AttributeValue::N((-i128::from(leaked)).to_string()),
            )
            .expression_attribute_values(":now", AttributeValue::N(now_ms().to_string()))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":v", AttributeValue::N(v.to_string()));
        let mut expression = "SET #rc = :now ADD #n :leaked, #v :one".to_owned();
        for (i, name) in stale.iter().enumerate() {
            req = req.expression_attribute_names(format!("#s{i}"), name);
            expression += if i == 0 { " REMOVE " } else { ", " };
            expression += &format!("#s{i}");
        }
        match req.update_expression(expression).send().await {
            Ok(_) if leaked > 0 => {
                tracing::warn!(table = %self.table, held = n, counted, recent, leaked, "dynamodb.places_recounted");
                Ok(true)
            }
            Ok(_) => Ok(false),
            // Moved meanwhile: a creation or an end got there first, and the next round
            // (`rc` unwritten) looks again.
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => Ok(true),
            Err(e) => Err(backend("places", &self.table, e)),
        }
    }

    /// Gives back one of `tenant`'s places, after the write that ended or deleted one of its
    /// active tasks. Never fails its caller, whose write is done: a give-back that cannot be
    /// made, or whose answer is lost, leaves the place taken until a refusal recounts it. It
    /// is retried only when the service said it was not applied (throttling), never after a
    /// lost answer — twice would free a place nobody gave back.
    pub(super) async fn give_back(&self, tenant: &Tenant) {
        let mut pause = Duration::from_millis(50);
        for attempt in 1..=3 {
            let out = self
                .client
                .update_item()
                .table_name(&self.table)
                .key(ATTR_PK, AttributeValue::S(places_key(tenant)))
                .update_expression("SET #at = :now ADD #n :minus, #v :one")
                // No item, or nothing counted: a task from before places were counted.
                .condition_expression("#n > :zero")
                .expression_attribute_names("#n", "n")
                .expression_attribute_names("#v", "v")
                .expression_attribute_names("#at", "at")
                .expression_attribute_values(":now", AttributeValue::N(now_ms().to_string()))
                .expression_attribute_values(":minus", AttributeValue::N("-1".into()))
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .expression_attribute_values(":zero", AttributeValue::N("0".into()))
                .customize()
                .config_override(
                    aws_sdk_dynamodb::config::Builder::default()
                        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled()),
                )
                .send()
                .await;
            let e = match out {
                Ok(_) => return,
                Err(e) if e.code() == Some("ConditionalCheckFailedException") => return,
                Err(e) => e,
            };
            if failure_kind(&e) != Failure::Throttled || attempt == 3 {
                tracing::warn!(table = %self.table, error = %aws_sdk_dynamodb::error::DisplayErrorContext(&e), "dynamodb.place_not_given_back: a refusal recounts it");
                return;
            }
            tokio::time::sleep(jittered(pause)).await;
            pause *= 2;
        }
    }
}
