//! The per-tenant running-jobs guard ([`crate::quota::RunSlots`]) on the task table.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::AttributeValue;

use super::key::runs_key;
use super::{ATTR_PK, DynamoStore, backend};
use crate::store::StoreError;

/// The per-tenant running-jobs guard on DynamoDB: one item per tenant (key: the tenant's
/// [`tenant_prefix`] and `#runs`, which no task key can be, and without index attributes, so no
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
