//! The rig: a fresh table and queue on the emulator, and the queues a suite puts in front.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use mcp_tasks_core::aws::dynamo::{DynamoStore, create_table};
use mcp_tasks_core::aws::lambda::{Config, Ports, Role, Sweeper};
use mcp_tasks_core::aws::sqs::SqsQueue;
use mcp_tasks_core::engine::{Engine, TaskSettings};
use mcp_tasks_core::queue::{QueueError, WorkMessage, WorkQueue};
use mcp_tasks_core::store::{TaskRef, TaskStore};
use mcp_tasks_core::task::{TaskId, TaskRecord, TaskStatus};
use mcp_tasks_core::tenant::Tenant;
use mcp_tasks_core::tools::{Policy, Registry, ToolDef};
use mcp_tasks_core::worker::{Worker, WorkerSettings};
use serde_json::{Value, json};
use tokio::time::{Instant, sleep};

use crate::common;
use crate::journaled::Journaled;
use crate::tally::{Entry, Log, Tally, with_entry};
use crate::{TENANT, VISIBILITY};

pub struct Rig {
    pub dynamo: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub table: String,
    pub queue_url: String,
    pub store: Arc<Journaled>,
    pub queue: Arc<SqsQueue>,
    pub log: Log,
    pub tools: Arc<Registry>,
}

pub async fn rig(suite: &str) -> Option<Arc<Rig>> {
    let [dynamo_endpoint, sqs_endpoint] =
        common::endpoints("aws_faults", [common::DYNAMODB, common::SQS])?;
    let dynamo = aws_sdk_dynamodb::Client::new(&common::sdk_config(&dynamo_endpoint).await);
    let sqs = aws_sdk_sqs::Client::new(&common::sdk_config(&sqs_endpoint).await);
    let table = common::unique(&format!("mcp-faults-{suite}"));
    create_table(&dynamo, &table).await.expect("CreateTable");
    let queue_url = sqs
        .create_queue()
        .queue_name(common::unique(&format!("mcp-faults-{suite}")))
        .attributes(QueueAttributeName::VisibilityTimeout, VISIBILITY)
        .send()
        .await
        .expect("CreateQueue")
        .queue_url()
        .expect("a queue URL")
        .to_owned();
    let log: Log = Arc::default();
    let tools = Arc::new(Registry::new(vec![Arc::new(Tally {
        def: ToolDef {
            name: "tally",
            description: "counts its own steps",
            input_schema: json!({"type": "object"}),
            policy: Policy::Optional,
        },
        log: log.clone(),
    })]));
    Some(Arc::new(Rig {
        store: Arc::new(Journaled::new(DynamoStore::new(
            dynamo.clone(),
            table.clone(),
        ))),
        queue: Arc::new(SqsQueue::new(sqs.clone(), queue_url.clone())),
        dynamo,
        sqs,
        table,
        queue_url,
        log,
        tools,
    }))
}

/// One SQS message as the worker function gets it.
pub struct Delivery {
    pub msg: WorkMessage,
    pub body: String,
    pub message_id: String,
    pub receipt: String,
    pub receives: u32,
}

impl Rig {
    pub fn engine(&self, queue: Arc<dyn WorkQueue>) -> Engine {
        Engine::new(self.store.clone(), queue, TaskSettings::default())
    }

    pub fn worker(&self, queue: Arc<dyn WorkQueue>, settings: WorkerSettings) -> Arc<Worker> {
        Arc::new(Worker::new(
            self.store.clone(),
            queue,
            self.tools.clone(),
            settings,
        ))
    }

    pub fn sweeper(&self) -> Sweeper {
        let config = Config::from_lookup(Role::Sweep, |k| match k {
            "TABLE_NAME" => Some(self.table.clone()),
            "QUEUE_URL" => Some(self.queue_url.clone()),
            "SWEEP_STALE_SECONDS" => Some("0".into()),
            _ => None,
        })
        .expect("sweep config");
        let ports = Ports {
            store: self.store.clone(),
            queue: self.queue.clone(),
            run_slots: None,
        };
        Sweeper::new(&config, &ports)
    }

    pub async fn task(&self, task_id: &str) -> TaskRecord {
        self.store
            .get(TaskRef {
                tenant: &Tenant::from(TENANT),
                task_id: &TaskId::parse(task_id).expect("a task id"),
            })
            .await
            .expect("GetItem")
            .unwrap_or_else(|| panic!("task {task_id} vanished"))
    }

    pub fn entry<R>(&self, key: &str, f: impl FnOnce(&mut Entry) -> R) -> R {
        with_entry(&self.log, key, f)
    }

    /// Creates a `tally` task; returns (key, task id).
    pub async fn create(&self, engine: &Engine, n: u64, ms: u64, ask: bool) -> (String, String) {
        let key = common::unique("k");
        let task = engine
            .create_task(
                &Tenant::from(TENANT),
                "tally",
                json!({"key": key, "n": n, "ms": ms, "ask": ask}),
                Value::Null,
                json!({"elicitation": {}}),
            )
            .await
            .expect("create_task");
        (key, task.task_id.into())
    }

    pub async fn receive(&self, wait_seconds: i32) -> Vec<Delivery> {
        let out = match self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(wait_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => {
                // A failed receive loses nothing (the messages stay queued); try again.
                eprintln!("receive failed: {e}");
                sleep(Duration::from_millis(200)).await;
                return Vec::new();
            }
        };
        out.messages()
            .iter()
            .map(|m| Delivery {
                msg: serde_json::from_str(m.body().unwrap_or_default()).expect("a work message"),
                body: m.body().unwrap_or_default().to_owned(),
                message_id: m.message_id().unwrap_or_default().to_owned(),
                receipt: m.receipt_handle().unwrap_or_default().to_owned(),
                receives: m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1),
            })
            .collect()
    }

    /// Deletes a handled message. A delete can fail when the message outlived its visibility
    /// timeout and was received again (its receipt handle is stale): it then comes back once
    /// more and is dropped, as with the event source mapping. Returns whether it was deleted.
    pub async fn ack(&self, d: &Delivery) -> bool {
        match self
            .sqs
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(&d.receipt)
            .send()
            .await
        {
            Ok(_) => true,
            Err(e) => {
                let e = aws_sdk_sqs::error::DisplayErrorContext(e);
                eprintln!("aws_faults: delete of {} failed: {e}", d.message_id);
                false
            }
        }
    }

    /// Waits until every task is terminal (or, with `parked`, waits for input); returns the
    /// ones that never got there by `deadline`.
    pub async fn settle(&self, ids: &[String], parked: bool, deadline: Instant) -> Vec<String> {
        loop {
            let mut pending = Vec::new();
            for id in ids {
                let t = self.task(id).await;
                let there = if parked {
                    t.status == TaskStatus::InputRequired
                } else {
                    t.status.is_terminal()
                };
                if !there {
                    pending.push(id.clone());
                }
            }
            if pending.is_empty() || Instant::now() >= deadline {
                return pending;
            }
            sleep(Duration::from_millis(200)).await;
        }
    }

    pub async fn drop_all(&self) {
        let _ = self
            .sqs
            .delete_queue()
            .queue_url(&self.queue_url)
            .send()
            .await;
        let _ = self
            .dynamo
            .delete_table()
            .table_name(&self.table)
            .send()
            .await;
    }
}

/// Sends every message twice (the second copy right after the first).
pub struct Twice(pub Arc<SqsQueue>);

#[async_trait]
impl WorkQueue for Twice {
    async fn enqueue(&self, msg: WorkMessage, delay: Duration) -> Result<(), QueueError> {
        self.0.enqueue(msg.clone(), delay).await?;
        self.0.enqueue(msg, delay).await
    }
}

/// A queue that is down: the process "crashed" between storing a task and enqueueing it.
pub struct Down;

#[async_trait]
impl WorkQueue for Down {
    async fn enqueue(&self, _msg: WorkMessage, _delay: Duration) -> Result<(), QueueError> {
        Err(QueueError::new(
            "injected: the process died before the send",
        ))
    }
}
