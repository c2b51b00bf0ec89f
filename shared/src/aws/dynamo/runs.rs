//! The per-tenant running-jobs guard ([`crate::quota::RunSlots`]) on the task table.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use super::key::runs_key;
use super::write::jittered;
use super::{ATTR_PK, DynamoStore, backend};
use crate::quota::SlotKey;
use crate::store::StoreError;

/// Rounds of one `take` that find the item changing under them (its first runs racing to
/// make it, lapsed runs being dropped by another taker) before it answers "not now".
const ROUNDS: usize = 4;
/// Lapsed runs dropped by one update at most (the expression stays small).
const MAX_DROPPED: usize = 50;

/// The per-tenant running-jobs guard on DynamoDB: one item per tenant (key: the tenant's
/// [`tenant_prefix`](super::tenant_prefix) and `#runs`, which no task key can be, and without
/// index attributes, so no listing sees it) holding a map of runs to the time each ends, and a
/// version `v` bumped at every change.
///
/// Taking a place is one conditional `UpdateItem` — record this run unless `max` runs are
/// recorded — with no read first: DynamoDB applies one item's updates one after the other, so
/// however many runs of one tenant start at once, none loses a race to another while places
/// are free (a read, then a write conditional on the version read, lost all but one of them
/// per round: with 24 runs of one tenant at once, 26 of 60 start messages failed). Only when
/// the map is full are the runs in it read (returned by the failed update itself) and those
/// whose time is up dropped, conditional on the time seen, before trying again. A tenant's
/// first runs race to make its item; a `take` that still finds the item moving after a few
/// rounds answers "not now", never a failure: the worker defers the message without spending
/// a delivery. Releasing is an `UpdateItem` that removes the run. Only a tenant's own runs
/// touch its item, so a hot tenant contends with itself only.
///
/// One read does come first: a consistent `GetItem` of the item (one read unit up to 4 KB).
/// When it shows the tenant's places all taken by live runs — the deferral of every message a
/// tenant queues past its cap, every 5 s each — the take answers "full" without the update,
/// which would fail its condition and still be billed the write units of the item it was
/// checked against (3 for a full tenant's ~2.7 KB). While places are free the update runs as
/// above, so racing takes still never lose to each other.
#[async_trait::async_trait]
impl crate::quota::RunSlots for DynamoStore {
    async fn take(
        &self,
        slot: &SlotKey,
        owner: &str,
        max: usize,
        until_ms: u64,
    ) -> Result<bool, StoreError> {
        let key = runs_key(slot);
        if self.surely_full(&key, owner, max).await? {
            return Ok(false);
        }
        let mut pause = Duration::from_millis(10);
        for _ in 0..ROUNDS {
            let runs = match self.record_run(&key, owner, max, until_ms).await? {
                None => return Ok(true),
                Some(runs) => runs,
            };
            let settled = match runs {
                None => self.first_run(&key, owner, until_ms).await?,
                Some(runs) => {
                    let now = crate::clock::now_ms();
                    let lapsed: Vec<(&String, &AttributeValue)> = runs
                        .iter()
                        .filter(|(_, until)| ends(until).is_none_or(|u| u <= now))
                        .take(MAX_DROPPED)
                        .collect();
                    if lapsed.is_empty() {
                        return Ok(false);
                    }
                    self.drop_lapsed(&key, &lapsed).await?;
                    false
                }
            };
            if settled {
                return Ok(true);
            }
            tokio::time::sleep(jittered(pause)).await;
            pause *= 2;
        }
        tracing::info!(table = %self.table, "dynamodb.runs_unsettled: not now");
        Ok(false)
    }

    async fn release(&self, slot: &SlotKey, owner: &str) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(ATTR_PK, AttributeValue::S(runs_key(slot)))
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

/// When a recorded run ends (`None`: not a number, so never live).
fn ends(until: &AttributeValue) -> Option<u64> {
    until.as_n().ok()?.parse().ok()
}

/// The recorded runs, as a failed update returned them: `None` when there is no map yet.
type Runs = Option<HashMap<String, AttributeValue>>;

impl DynamoStore {
    /// Whether the tenant's item, read consistently, holds `max` or more live runs and none
    /// of `owner`'s (whose own record a take renews whatever the count).
    async fn surely_full(&self, key: &str, owner: &str, max: usize) -> Result<bool, StoreError> {
        let read = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(ATTR_PK, AttributeValue::S(key.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| backend("get_item", &self.table, e))?;
        let Some(runs) = read
            .item()
            .and_then(|i| i.get("runs"))
            .and_then(|r| r.as_m().ok())
        else {
            return Ok(false);
        };
        let now = crate::clock::now_ms();
        Ok(!runs.contains_key(owner)
            && runs.len() >= max
            && runs.values().all(|u| ends(u).is_some_and(|u| u > now)))
    }

    /// Records `owner`'s run until `until_ms` unless `max` runs are recorded (its own record
    /// is renewed whatever the count): `None` when recorded, else the runs as they were.
    async fn record_run(
        &self,
        key: &str,
        owner: &str,
        max: usize,
        until_ms: u64,
    ) -> Result<Option<Runs>, StoreError> {
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(ATTR_PK, AttributeValue::S(key.to_owned()))
            .update_expression("SET #runs.#o = :until ADD #v :one")
            .condition_expression(
                "attribute_exists(#runs) AND (size(#runs) < :max OR attribute_exists(#runs.#o))",
            )
            .expression_attribute_names("#runs", "runs")
            .expression_attribute_names("#v", "v")
            .expression_attribute_names("#o", owner)
            .expression_attribute_values(":until", AttributeValue::N(until_ms.to_string()))
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":max", AttributeValue::N(max.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let e = match out {
            Ok(_) => return Ok(None),
            Err(e) => e,
        };
        match e.as_service_error() {
            Some(UpdateItemError::ConditionalCheckFailedException(failed)) => Ok(Some(
                failed
                    .item()
                    .and_then(|i| i.get("runs"))
                    .and_then(|r| r.as_m().ok())
                    .cloned(),
            )),
            _ => Err(backend("update_item", &self.table, e)),
        }
    }

    /// Makes the tenant's item with this first run; false when another run made it first.
    async fn first_run(&self, key: &str, owner: &str, until_ms: u64) -> Result<bool, StoreError> {
        let runs = HashMap::from([(owner.to_owned(), AttributeValue::N(until_ms.to_string()))]);
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(ATTR_PK, AttributeValue::S(key.to_owned()))
            .item("runs", AttributeValue::M(runs))
            .item("v", AttributeValue::N("1".into()))
            // An item without a map (made by hand, or damaged) is made again.
            .condition_expression("attribute_not_exists(#pk) OR attribute_not_exists(#runs)")
            .expression_attribute_names("#pk", ATTR_PK)
            .expression_attribute_names("#runs", "runs")
            .send()
            .await;
        match put {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => Ok(false),
            Err(e) => Err(backend("put_item", &self.table, e)),
        }
    }

    /// Drops runs whose time is up, each only if it still ends when it was seen to (another
    /// taker dropping them first is fine).
    async fn drop_lapsed(
        &self,
        key: &str,
        lapsed: &[(&String, &AttributeValue)],
    ) -> Result<(), StoreError> {
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(ATTR_PK, AttributeValue::S(key.to_owned()))
            .expression_attribute_names("#runs", "runs")
            .expression_attribute_names("#v", "v")
            .expression_attribute_values(":one", AttributeValue::N("1".into()));
        let (mut remove, mut seen) = (Vec::new(), Vec::new());
        for (i, (owner, until)) in lapsed.iter().enumerate() {
            req = req
                .expression_attribute_names(format!("#l{i}"), owner.as_str())
                .expression_attribute_values(format!(":l{i}"), (*until).clone());
            remove.push(format!("#runs.#l{i}"));
            seen.push(format!("#runs.#l{i} = :l{i}"));
        }
        let out = req
            .update_expression(format!("REMOVE {} ADD #v :one", remove.join(", ")))
            .condition_expression(seen.join(" AND "))
            .send()
            .await;
        match out {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => Ok(()),
            Err(e) => Err(backend("update_item", &self.table, e)),
        }
    }
}
