//! Many runs of one tenant starting at once, each taking a place in the tenant's `#runs` record
//! on the table: none may fail its message (a failed message is hidden for the visibility
//! timeout and spends one of its deliveries; after the last, a healthy task is failed).
//!
//! Measured in one run against the guard the store had before (read the record, then a put
//! conditional on the version read, 16 rounds, then a failure): the reference below, over
//! the same table layout, next to the store's own.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use mcp_tasks_core::aws::dynamo::{ATTR_PK, tenant_prefix};
use mcp_tasks_core::aws::sqs;
use mcp_tasks_core::quota::RunSlots;
use mcp_tasks_core::quota::SlotKey;
use mcp_tasks_core::store::{StoreError, TaskRef, TaskStore as _};
use mcp_tasks_core::task::TaskStatus;
use mcp_tasks_core::tenant::Tenant;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::Rig;

/// The guard as the store had it, for the reference of the same run.
struct ReadThenPut {
    client: aws_sdk_dynamodb::Client,
    table: std::sync::OnceLock<String>,
}

#[async_trait::async_trait]
impl RunSlots for ReadThenPut {
    async fn take(
        &self,
        slot: &SlotKey,
        owner: &str,
        max: usize,
        until_ms: u64,
    ) -> Result<bool, StoreError> {
        let (table, key) = (
            self.table.get().unwrap(),
            format!("{}#runs", tenant_prefix(&Tenant::from(slot.as_str()))),
        );
        for _ in 0..16 {
            let item = self
                .client
                .get_item()
                .table_name(table)
                .key(ATTR_PK, AttributeValue::S(key.clone()))
                .consistent_read(true)
                .send()
                .await
                .map_err(|e| StoreError::backend_from("get", e))?
                .item
                .unwrap_or_default();
            let version = item
                .get("v")
                .and_then(|v| v.as_n().ok()?.parse::<u64>().ok());
            let now = mcp_tasks_core::clock::now_ms();
            let mut runs: HashMap<String, AttributeValue> = item
                .get("runs")
                .and_then(|r| r.as_m().ok())
                .cloned()
                .unwrap_or_default();
            runs.retain(|_, u| u.as_n().ok().and_then(|n| n.parse::<u64>().ok()) > Some(now));
            if runs.len() >= max && !runs.contains_key(owner) {
                return Ok(false);
            }
            runs.insert(owner.to_owned(), AttributeValue::N(until_ms.to_string()));
            let mut put = self
                .client
                .put_item()
                .table_name(table)
                .item(ATTR_PK, AttributeValue::S(key.clone()))
                .item("runs", AttributeValue::M(runs))
                .item(
                    "v",
                    AttributeValue::N((version.unwrap_or(0) + 1).to_string()),
                );
            put = match version {
                Some(v) => put
                    .condition_expression("v = :v")
                    .expression_attribute_values(":v", AttributeValue::N(v.to_string())),
                None => put.condition_expression("attribute_not_exists(pk)"),
            };
            match put.send().await {
                Ok(_) => return Ok(true),
                Err(e) if e.code() == Some("ConditionalCheckFailedException") => continue,
                Err(e) => return Err(StoreError::backend_from("put", e)),
            }
        }
        Err(StoreError::Conflict)
    }

    async fn release(&self, slot: &SlotKey, owner: &str) -> Result<(), StoreError> {
        let key = format!("{}#runs", tenant_prefix(&Tenant::from(slot.as_str())));
        let _ = self
            .client
            .update_item()
            .table_name(self.table.get().unwrap())
            .key(ATTR_PK, AttributeValue::S(key))
            .update_expression("REMOVE runs.#o ADD v :one")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_names("#o", owner)
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .send()
            .await;
        Ok(())
    }
}

/// 60 tasks of one tenant, its running-jobs limit far away (100): their start messages,
/// received first, are handed to the worker one message per invocation, 24 invocations at
/// once (as the event source mapping at a concurrency of 24 with batches of one would).
/// How many deliveries failed, and how many tasks completed.
async fn sixty_starts(slots: Option<Arc<ReadThenPut>>) -> Option<(usize, usize)> {
    let rig = Rig::new(1000, 100, slots.clone().map(|s| s as Arc<dyn RunSlots>)).await?;
    if let Some(s) = &slots {
        s.table.set(rig.table.clone()).unwrap();
    }
    let mut ids = Vec::new();
    for _ in 0..60 {
        // A second's wait is slept in place: each run holds its place about a second.
        let t = rig
            .engine
            .create_task(
                &"busy".into(),
                "wait",
                json!({"seconds": 1}),
                Value::Null,
                json!({}),
            )
            .await
            .unwrap();
        ids.push(t.task_id);
    }
    let mut records = Vec::new();
    let started = Instant::now();
    while records.len() < 60 && started.elapsed() < Duration::from_secs(30) {
        let out = rig
            .sqs
            .receive_message()
            .queue_url(&rig.queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(300)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        records.extend(
            out.messages()
                .iter()
                .map(|m| sqs::event_source_record(m, "arn:aws:sqs:us-east-1:000000000000:work")),
        );
    }
    assert_eq!(records.len(), 60, "every start message was sent");
    let places = Arc::new(tokio::sync::Semaphore::new(24));
    let runs = records.into_iter().map(|record| {
        let (places, worker) = (places.clone(), rig.worker.clone());
        tokio::spawn(async move {
            let _place = places.acquire_owned().await.unwrap();
            let event: SqsEvent = serde_json::from_value(json!({"Records": [record]})).unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            worker
                .handle(event, deadline)
                .await
                .batch_item_failures
                .len()
        })
    });
    let mut failed = 0;
    for run in runs.collect::<Vec<_>>() {
        failed += run.await.unwrap();
    }
    let mut completed = 0;
    for id in &ids {
        let key = TaskRef {
            tenant: &"busy".into(),
            task_id: id,
        };
        let t = rig.store.get(key).await.unwrap().unwrap();
        completed += usize::from(t.status == TaskStatus::Completed);
    }
    rig.drop_all().await;
    Some((failed, completed))
}

#[tokio::test]
async fn concurrent_runs_of_one_tenant_never_fail_a_delivery() {
    let Some(client) = crate::common::endpoints("aws_tenants", [crate::common::DYNAMODB]) else {
        return;
    };
    let dynamo = crate::dynamo_client(&client[0]).await;
    let reference = Arc::new(ReadThenPut {
        client: dynamo,
        table: std::sync::OnceLock::new(),
    });
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .try_init();
    let (before, before_done) = sixty_starts(Some(reference)).await.unwrap();
    let (after, after_done) = sixty_starts(None).await.unwrap();
    eprintln!(
        "aws_tenants runs: 60 starts of one tenant, 24 at once: failed deliveries {before} with \
         the reference (read, then a conditional put; {before_done} of 60 completed), {after} \
         with the store's guard ({after_done} of 60 completed)"
    );
    assert_eq!(after, 0, "a lost race is not an outage");
    assert_eq!(after_done, 60);
}
