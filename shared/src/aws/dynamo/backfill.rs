//! Adding an index to a table made before it existed.
//!
//! `sam deploy` adds the index (CloudFormation creates a GSI in place); [`create_table`](super::create_table) adds
//! it to a table an older `create_table` made. Either way, items written before this release
//! lack `tenant_active`: until their next write, active tasks of that time would be missing
//! from `tasks/list`. [`DynamoStore::backfill_tenant_index`] adds the attribute to them
//! (conditional, idempotent, no version change); `create_table` runs it just before it adds
//! the index, and after a `sam deploy` it should be run once every function runs this code:
//! `mcp-tasks-aws-dev backfill --table <TasksTable>` with credentials that may `Query` the
//! `active` index and `BatchGetItem` and `UpdateItem` the table.
//!
//! The same holds for `quiet` (the orphan sweep's candidates): items written before it lack
//! `quiet_ms`, so the sweep would not see those working tasks until their next write;
//! [`DynamoStore::backfill_quiet_index`] gives it to them, and `create_table` runs it before
//! it adds the index (`mcp-tasks-aws-dev backfill` runs both).

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;

use super::key::{pk, tenant_prefix};
use super::{
    ATTR_ACTIVE, ATTR_PK, ATTR_QUIET, ATTR_TENANT_ACTIVE, DynamoStore, backend, is_condition_failed,
};
use crate::store::{StoreError, TaskKey, TaskStore};

/// Active task keys read per page of a back-fill.
const BACKFILL_PAGE: usize = 1000;

impl DynamoStore {
    /// Gives every active task written before the `tenant_active` index existed its
    /// [`ATTR_TENANT_ACTIVE`] attribute; returns how many items it changed. Idempotent and safe
    /// beside live traffic: each change is an `UpdateItem` conditional on the task still being
    /// active (`active_pk` present) and lacking the attribute, and it leaves `version` alone,
    /// so no writer's condition is disturbed. Run it once every function writes the attribute
    /// (an older writer's whole-item `PutItem` would drop it again). Costs: the `active` index
    /// pages ([`SHARDS`] `Query`s and up) and one `UpdateItem` per active task.
    pub async fn backfill_tenant_index(&self) -> Result<usize, StoreError> {
        let changed = self
            .each_active_page(async |page| {
                let mut changed = 0;
                for k in page {
                    let update = self
                        .client
                        .update_item()
                        .key(ATTR_PK, AttributeValue::S(pk(k.borrowed())))
                        .update_expression("SET #t = :t")
                        .condition_expression("attribute_exists(#a) AND attribute_not_exists(#t)")
                        .expression_attribute_names("#t", ATTR_TENANT_ACTIVE)
                        .expression_attribute_names("#a", ATTR_ACTIVE)
                        .expression_attribute_values(
                            ":t",
                            AttributeValue::S(tenant_prefix(&k.tenant)),
                        );
                    changed += usize::from(self.backfill_one(update).await?);
                }
                Ok(changed)
            })
            .await?;
        tracing::info!(table = %self.table, changed, "dynamodb.tenant_index_backfilled");
        Ok(changed)
    }

    /// Gives every `working` task written before the `quiet` index existed its [`ATTR_QUIET`]
    /// attribute (without it the orphan sweep would not see the task until its next write);
    /// returns how many items it changed. Idempotent and safe beside live traffic: each change
    /// is an `UpdateItem` conditional on the version read and on the attribute still missing,
    /// and leaves `version` alone. Costs: the `active` index pages, one `BatchGetItem` per 100
    /// active tasks and one `UpdateItem` per `working` one lacking the attribute.
    pub async fn backfill_quiet_index(&self) -> Result<usize, StoreError> {
        let changed = self
            .each_active_page(async |page| {
                let pks: Vec<String> = page.iter().map(|k| pk(k.borrowed())).collect();
                let mut changed = 0;
                for (key, task) in &self.batch_get(&pks).await? {
                    let Some(mark) = super::item::quiet_key(task) else {
                        continue;
                    };
                    let update = self
                        .client
                        .update_item()
                        .key(ATTR_PK, AttributeValue::S(key.clone()))
                        .update_expression("SET #q = :q")
                        .condition_expression("#v = :v AND attribute_not_exists(#q)")
                        .expression_attribute_names("#q", ATTR_QUIET)
                        .expression_attribute_names("#v", "version")
                        .expression_attribute_values(":q", AttributeValue::N(mark.to_string()))
                        .expression_attribute_values(
                            ":v",
                            AttributeValue::N(task.version.to_string()),
                        );
                    changed += usize::from(self.backfill_one(update).await?);
                }
                Ok(changed)
            })
            .await?;
        tracing::info!(table = %self.table, changed, "dynamodb.quiet_index_backfilled");
        Ok(changed)
    }

    /// Hands every active task's key to `each`, a page of [`BACKFILL_PAGE`] at a time, and
    /// returns the sum of what it counted.
    async fn each_active_page(
        &self,
        mut each: impl AsyncFnMut(&[TaskKey]) -> Result<usize, StoreError>,
    ) -> Result<usize, StoreError> {
        let mut total = 0;
        let mut after: Option<TaskKey> = None;
        loop {
            let page = self.list_active(after.as_ref(), BACKFILL_PAGE).await?;
            total += each(&page).await?;
            if page.len() < BACKFILL_PAGE {
                return Ok(total);
            }
            after = page.last().cloned();
        }
    }

    /// Sends one back-fill `UpdateItem` to the table: whether it changed the item (`false`:
    /// its condition held it back — written since, or done already).
    async fn backfill_one(&self, update: UpdateItemFluentBuilder) -> Result<bool, StoreError> {
        match update.table_name(&self.table).send().await {
            Ok(_) => Ok(true),
            Err(e) if is_condition_failed(&e) => Ok(false),
            Err(e) => Err(backend("backfill", &self.table, e)),
        }
    }
}
