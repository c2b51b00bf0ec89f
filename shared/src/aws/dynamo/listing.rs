//! Reads of many tasks: the index queries behind the listings, and `BatchGetItem`.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};

use super::key::{QuietCursor, pk_of, split_pk};
use super::{
    ATTR_ACTIVE, ATTR_EXPIRES_MS, ATTR_PK, ATTR_QUIET, ATTR_SHARD, ATTR_TENANT_ACTIVE, DynamoStore,
    INDEX_ACTIVE, INDEX_QUIET, INDEX_TENANT_ACTIVE, SHARDS, backend, tenant_prefix,
};
use crate::store::{QuietPage, StoreError, TaskKey};
use crate::task::TaskRecord;
use crate::tenant::Tenant;

/// Most keys in one `BatchGetItem`.
const MAX_BATCH_GET: usize = 100;
/// `BatchGetItem` rounds (each after a pause) before leftover `UnprocessedKeys` fail a call.
const BATCH_GET_ROUNDS: u32 = 8;

impl DynamoStore {
    /// Queries one shard of an index, following continuation pages, until `out` holds `limit`
    /// keys. `sort` narrows the index's sort key (`(">", after)`, `("<=", now)`).
    pub(super) async fn query_shard(
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

    /// The records of `pks`, read consistently with `BatchGetItem`; absent keys, and items
    /// that do not decode or do not match their key (logged), are missing from the map.
    /// `UnprocessedKeys` are asked for again after a pause.
    pub(super) async fn batch_get(
        &self,
        pks: &[String],
    ) -> Result<HashMap<String, TaskRecord>, StoreError> {
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
                return Err(StoreError::backend(
                    "dynamodb batch_get left keys unprocessed",
                ));
            }
        }
        Ok(out)
    }

    /// [`TaskStore::list_tenant_active`]: one `Query` of the tenant's `tenant_active` partition,
    /// then its records in one `BatchGetItem` per 100.
    pub(super) async fn tenant_active_page(
        &self,
        tenant: &Tenant,
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
                .expression_attribute_values(":t", AttributeValue::S(tenant_prefix(tenant)))
                .limit(i32::try_from(want).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start);
            if let Some(a) = after {
                req = req
                    .expression_attribute_names("#pk", ATTR_PK)
                    .expression_attribute_values(":after", AttributeValue::S(pk_of(tenant, a)));
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
                    .filter(|t| t.tenant == *tenant && !t.status.is_terminal()),
            );
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() && out.len() < limit => start = Some(k),
                _ => return Ok(out),
            }
        }
    }

    /// [`TaskStore::count_tenant_active`].
    pub(super) async fn tenant_active_count(
        &self,
        tenant: &Tenant,
        at_most: usize,
    ) -> Result<usize, StoreError> {
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
                .expression_attribute_values(":t", AttributeValue::S(tenant_prefix(tenant)))
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

    /// [`TaskStore::list_quiet`]: the `quiet` index, shard by shard, then the records.
    pub(super) async fn quiet_page(
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
}
