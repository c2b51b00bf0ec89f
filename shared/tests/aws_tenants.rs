//! Many tenants over the AWS adapters, on the emulator: a tenant flooding past its quotas gets
//! the documented refusals, its excess jobs wait their turn in the queue (re-sent with a
//! delay, never run past the running-jobs limit, never lost), and another tenant's small task
//! completes meanwhile. The worker runs through [`SqsWorker::handle`] as the event source
//! mapping invokes it, with several invocations at once (the function's concurrency).
//!
//! SQS fair queues (the tenant's `MessageGroupId` on the standard queue) are a service-side
//! feature the emulator accepts but does not emulate; `aws_sqs` checks that every message
//! carries its tenant's group, and this test what our code does around it.
//!
//! ```text
//! scripts/aws-emulator.sh start
//! DYNAMODB_ENDPOINT=$(cat .tools/moto/endpoint) SQS_ENDPOINT=$(cat .tools/moto/endpoint) \
//!   cargo test -p mcp-tasks-core --features lambda --test aws_tenants
//! ```

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use mcp_tasks_core::aws::dynamo::{DynamoStore, create_table};
use mcp_tasks_core::aws::lambda::{Config, Ports, Role, SqsWorker};
use mcp_tasks_core::aws::sqs::{self, SqsQueue};
use mcp_tasks_core::engine::{CreateError, Engine};
use mcp_tasks_core::quota::Limit;
use mcp_tasks_core::store::{TaskRef, TaskStore as _};
use mcp_tasks_core::task::TaskStatus;
use mcp_tasks_core::worker::WorkerSettings;
use serde_json::{Value, json};
use tokio::time::Instant;

fn config(role: Role, table: &str, queue_url: &str) -> Config {
    Config::from_lookup(role, |k| match k {
        "TABLE_NAME" => Some(table.to_owned()),
        "QUEUE_URL" => Some(queue_url.to_owned()),
        "STATE_KEY" => Some("an-end-to-end-test-key-of-32-characters".into()),
        "MAX_RECEIVES" => Some("5".into()),
        "AUTH_MODE" => Some("none".into()),
        "MAX_ACTIVE_TASKS_PER_TENANT" => Some("6".into()),
        "MAX_RUNNING_JOBS_PER_TENANT" => Some("2".into()),
        "TASK_CREATE_PER_SECOND" => Some("0".into()),
        _ => None,
    })
    .unwrap()
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

#[tokio::test]
async fn a_flooding_tenant_waits_its_turn_and_never_delays_another() {
    let Some([dynamo_endpoint, sqs_endpoint]) =
        common::endpoints("aws_tenants", [common::DYNAMODB, common::SQS])
    else {
        return;
    };
    let dynamo = aws_sdk_dynamodb::Client::new(&common::sdk_config(&dynamo_endpoint).await);
    let sqs_client = aws_sdk_sqs::Client::new(&common::sdk_config(&sqs_endpoint).await);
    let table = common::unique("mcp-tasks-tenants");
    create_table(&dynamo, &table).await.expect("CreateTable");
    let queue_url = SqsQueue::create_queue(&sqs_client, &common::unique("mcp-tasks-tenants"))
        .await
        .expect("CreateQueue");
    let store = Arc::new(DynamoStore::new(dynamo.clone(), table.clone()));
    let ports = Ports {
        store: store.clone(),
        queue: Arc::new(SqsQueue::new(sqs_client.clone(), queue_url.clone())),
        run_slots: Some(store.clone()),
    };
    let mcp = config(Role::Mcp, &table, &queue_url);
    let engine = Engine::new(ports.store.clone(), ports.queue.clone(), mcp.tasks.clone());
    let settings = WorkerSettings {
        check_every: Duration::from_millis(200),
        ..WorkerSettings::default()
    };
    let worker = Arc::new(SqsWorker::with_settings(
        &config(Role::Worker, &table, &queue_url),
        &ports,
        Arc::new(mcp_tasks_core::tools::Registry::new(
            mcp_tasks_demo_tools::tools(),
        )),
        settings,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let esm = tokio::spawn(event_source_mapping(
        sqs_client.clone(),
        queue_url.clone(),
        worker,
        6,
        stop.clone(),
    ));

    // A floods with long jobs that hold a worker (a paced hash chain; a `wait` would sleep
    // without holding one): 6 accepted (its active-task quota), the rest refused.
    let mut accepted = Vec::new();
    for _ in 0..10 {
        let created = async {
            engine.admit("tenant-a").await?;
            engine
                .create_task(
                    "tenant-a",
                    "hash_chain",
                    json!({"seed": "flood", "rounds": 1_000_000_000u64, "pace_ms": 1000}),
                    Value::Null,
                    json!({}),
                )
                .await
        };
        match created.await {
            Ok(t) => accepted.push(t.task_id),
            Err(CreateError::Quota(q)) => assert_eq!(q.limit, Limit::ActiveTasks),
            Err(CreateError::Failed(e)) => panic!("{e:?}"),
        }
    }
    assert_eq!(accepted.len(), 6);

    // B's small tasks complete while A's flood sits in the queue and the running places.
    let mut took = Vec::new();
    for _ in 0..4 {
        let started = Instant::now();
        engine.admit("tenant-b").await.unwrap();
        let t = engine
            .create_task(
                "tenant-b",
                "wait",
                json!({"seconds": 0}),
                Value::Null,
                json!({}),
            )
            .await
            .unwrap();
        loop {
            let now = engine.get("tenant-b", &t.task_id).await.unwrap();
            if now.status == TaskStatus::Completed {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "B's task waited behind A: {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        took.push(started.elapsed());
    }
    took.sort();
    eprintln!(
        "aws_tenants: quiet tenant's create→completed under flood on the emulator: {:?}",
        took
    );
    assert!(took[took.len() - 1] < Duration::from_secs(5), "{took:?}");

    // A: never more than 2 of its jobs ran at once, none failed, none lost.
    let mut running = 0;
    for id in &accepted {
        let t = store
            .get(TaskRef {
                tenant: "tenant-a",
                task_id: id,
            })
            .await
            .unwrap()
            .expect("still there");
        assert_eq!(t.status, TaskStatus::Working, "{t:?}");
        running += usize::from(t.lease.is_some_and(|l| l.expires_at_ms > now_ms()));
    }
    assert!(running <= 2, "{running} of A's jobs run at once");
    assert!(running >= 1, "A's work runs too");
    stop.store(true, Ordering::Relaxed);
    for id in &accepted {
        engine.cancel_at_once("tenant-a", id).await.unwrap();
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), esm).await;
    let _ = dynamo.delete_table().table_name(&table).send().await;
    let _ = sqs_client.delete_queue().queue_url(&queue_url).send().await;
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
