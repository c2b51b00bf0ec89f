//! Many tenants over the AWS adapters, on the emulator: a tenant flooding past its quotas gets
//! the documented refusals, its excess jobs wait their turn in the queue (re-sent with a
//! delay, never run past the running-jobs limit, never lost), and another tenant's small task
//! completes meanwhile (`flood.rs`); many runs of one tenant starting at once never fail a
//! delivery over its running-jobs record (`runs.rs`). The worker runs through
//! [`SqsWorker::handle`] as the event source mapping invokes it, with several invocations at
//! once (the function's concurrency).
//!
//! SQS fair queues (the tenant's `MessageGroupId` on the standard queue) are a service-side
//! feature the emulator accepts but does not emulate; `aws_sqs` checks that every message
//! carries its tenant's group, and this test what our code does around it.
//!
//! ```text
//! scripts/aws-emulator.sh start
//! DYNAMODB_ENDPOINT=$(cat .tools/moto/endpoint) SQS_ENDPOINT=$(cat .tools/moto/endpoint) \
//!   cargo test -p mcp-tasks-core --features lambda,contracts --test aws_tenants -- --nocapture
//! ```

#[path = "../common/mod.rs"]
mod common;

mod flood;
mod runs;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use mcp_tasks_core::aws::dynamo::{DynamoStore, create_table};
use mcp_tasks_core::aws::lambda::{Config, Ports, Role, SqsWorker};
use mcp_tasks_core::aws::sqs::{self, SqsQueue};
use mcp_tasks_core::engine::Engine;
use mcp_tasks_core::quota::RunSlots;
use mcp_tasks_core::worker::WorkerSettings;
use serde_json::{Value, json};
use tokio::time::Instant;

/// A function's configuration with these per-tenant limits.
fn config(
    role: Role,
    table: &str,
    queue_url: &str,
    max_active: usize,
    max_running: usize,
) -> Config {
    Config::from_lookup(role, |k| match k {
        "TABLE_NAME" => Some(table.to_owned()),
        "QUEUE_URL" => Some(queue_url.to_owned()),
        "STATE_KEY" => Some("an-end-to-end-test-key-of-32-characters".into()),
        "MAX_RECEIVES" => Some("5".into()),
        "AUTH_MODE" => Some("none".into()),
        "MAX_ACTIVE_TASKS_PER_TENANT" => Some(max_active.to_string()),
        "MAX_RUNNING_JOBS_PER_TENANT" => Some(max_running.to_string()),
        "TASK_CREATE_PER_SECOND" => Some("0".into()),
        _ => None,
    })
    .unwrap()
}

/// A DynamoDB client for the emulator that sends its writes one at a time: DynamoDB applies
/// one item's writes one after the other, moto does not (see `aws::serial`).
async fn dynamo_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let config = common::sdk_config(endpoint).await;
    let config = aws_sdk_dynamodb::config::Builder::from(&config)
        .http_client(mcp_tasks_core::aws::serial::one_write_at_a_time(
            mcp_tasks_core::aws::https_client(),
        ))
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// A fresh table and queue, the engine of the mcp function and the worker function over them,
/// a tenant's runs counted in `slots` (the store itself when `None`).
struct Rig {
    dynamo: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    table: String,
    queue_url: String,
    store: Arc<DynamoStore>,
    engine: Engine,
    worker: Arc<SqsWorker>,
}

impl Rig {
    async fn new(
        max_active: usize,
        max_running: usize,
        slots: Option<Arc<dyn RunSlots>>,
    ) -> Option<Self> {
        let [dynamo_endpoint, sqs_endpoint] =
            common::endpoints("aws_tenants", [common::DYNAMODB, common::SQS])?;
        let dynamo = dynamo_client(&dynamo_endpoint).await;
        let sqs = aws_sdk_sqs::Client::new(&common::sdk_config(&sqs_endpoint).await);
        let table = common::unique("mcp-tasks-tenants");
        create_table(&dynamo, &table).await.expect("CreateTable");
        let queue_url = SqsQueue::create_queue(&sqs, &common::unique("mcp-tasks-tenants"))
            .await
            .expect("CreateQueue");
        let store = Arc::new(DynamoStore::new(dynamo.clone(), table.clone()));
        let ports = Ports {
            store: store.clone(),
            queue: Arc::new(SqsQueue::new(sqs.clone(), queue_url.clone())),
            run_slots: Some(slots.unwrap_or_else(|| store.clone())),
        };
        let mcp = config(Role::Mcp, &table, &queue_url, max_active, max_running);
        let engine = Engine::new(ports.store.clone(), ports.queue.clone(), mcp.tasks.clone());
        let settings = WorkerSettings {
            check_every: Duration::from_millis(200),
            ..WorkerSettings::default()
        };
        let worker = Arc::new(SqsWorker::with_settings(
            &config(Role::Worker, &table, &queue_url, max_active, max_running),
            &ports,
            Arc::new(mcp_tasks_core::tools::Registry::new(
                mcp_tasks_demo_tools::tools(),
            )),
            settings,
        ));
        Some(Self {
            dynamo,
            sqs,
            table,
            queue_url,
            store,
            engine,
            worker,
        })
    }

    /// The event source mapping in front of the worker, until `stop`.
    fn mapping(&self, concurrency: usize, stop: &Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(event_source_mapping(
            self.sqs.clone(),
            self.queue_url.clone(),
            self.worker.clone(),
            concurrency,
            stop.clone(),
        ))
    }

    async fn drop_all(&self) {
        let _ = self
            .dynamo
            .delete_table()
            .table_name(&self.table)
            .send()
            .await;
        let _ = self
            .sqs
            .delete_queue()
            .queue_url(&self.queue_url)
            .send()
            .await;
    }
}

/// The event source mapping: up to `concurrency` invocations at once, each a batch of up to
/// 10 messages with a 30 s deadline; deletes what the handler did not report as failed.
async fn event_source_mapping(
    sqs: aws_sdk_sqs::Client,
    url: String,
    worker: Arc<SqsWorker>,
    concurrency: usize,
    stop: Arc<AtomicBool>,
) {
    let places = Arc::new(tokio::sync::Semaphore::new(concurrency));
    while !stop.load(Ordering::Relaxed) {
        let Ok(place) = places.clone().acquire_owned().await else {
            return;
        };
        let out = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(60)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        if out.messages().is_empty() {
            continue;
        }
        let records: Vec<Value> = out
            .messages()
            .iter()
            .map(|m| sqs::event_source_record(m, "arn:aws:sqs:us-east-1:000000000000:work"))
            .collect();
        let handles: Vec<(String, String)> = out
            .messages()
            .iter()
            .map(|m| {
                (
                    m.message_id().unwrap_or_default().to_owned(),
                    m.receipt_handle().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let (sqs, url, worker) = (sqs.clone(), url.clone(), worker.clone());
        tokio::spawn(async move {
            let _place = place;
            let event: SqsEvent = serde_json::from_value(json!({"Records": records})).unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            let resp = worker.handle(event, deadline).await;
            let failed: Vec<String> = resp
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.clone())
                .collect();
            for (id, receipt) in handles {
                if !failed.contains(&id) {
                    let _ = sqs
                        .delete_message()
                        .queue_url(&url)
                        .receipt_handle(receipt)
                        .send()
                        .await;
                }
            }
        });
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
