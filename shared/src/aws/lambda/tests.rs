//! The Lambda wiring's unit tests, by subject; here the sample events, the configuration
//! helper, and the store and rig the worker and sweep tests share.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::*;
use crate::queue::LocalQueue;
use crate::store::memory::MemoryStore;
use crate::store::{TaskKey, TaskRef, TaskStore};
use crate::task::{TaskRecord, TaskStatus};

mod batch;
mod config;
mod deadlines;
mod inline;
mod secrets;
mod sweep;

const SQS_EVENT: &str = include_str!("../../../../events/sqs-work-message.json");
const SCHEDULE_EVENT: &str = include_str!("../../../../events/scheduled-sweep.json");

fn env(role: Role, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(role, |k| map.get(k).cloned())
}

const BASE: [(&str, &str); 3] = [
    ("TABLE_NAME", "tasks"),
    ("QUEUE_URL", "http://127.0.0.1:1/000000000000/work"),
    ("AUTH_MODE", "none"),
];

fn worker_config(max_receives: &str) -> Config {
    let mut vars = BASE.to_vec();
    vars.push(("MAX_RECEIVES", max_receives));
    env(Role::Worker, &vars).unwrap()
}

const SECRET_ARN: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:state-key-AbCdEf";

/// A store whose first `fail_gets` reads fail (an outage that passes), and whose active
/// listing fails while `fail_listing` is set.
struct Flaky {
    inner: MemoryStore,
    fail_gets: AtomicUsize,
    fail_listing: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl TaskStore for Flaky {
    async fn create_within(
        &self,
        task: &TaskRecord,
        args: &Value,
        max: usize,
    ) -> Result<bool, StoreError> {
        self.inner.create_within(task, args, max).await
    }
    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        self.inner.arguments(id).await
    }
    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        if self
            .fail_gets
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(StoreError::backend("throttled"));
        }
        self.inner.get(id).await
    }
    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        self.inner.update(task).await
    }
    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError> {
        if self.fail_listing.load(Ordering::SeqCst) {
            return Err(StoreError::backend("index unavailable"));
        }
        self.inner.list_active(after, limit).await
    }
    async fn list_expired(&self, now: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        self.inner.list_expired(now, limit).await
    }
    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        self.inner.delete(id).await
    }
}

struct Rig {
    store: Arc<Flaky>,
    ports: Ports,
    _rx: tokio::sync::mpsc::UnboundedReceiver<WorkMessage>,
}

fn rig() -> Rig {
    let store = Arc::new(Flaky {
        inner: MemoryStore::new(),
        fail_gets: AtomicUsize::new(0),
        fail_listing: Default::default(),
    });
    let (queue, rx) = LocalQueue::new();
    let ports = Ports {
        store: store.clone(),
        queue: Arc::new(queue),
        run_slots: None,
    };
    Rig {
        store,
        ports,
        _rx: rx,
    }
}

/// The worker's tools: the `wait` double (the sample event's task is a `wait`).
fn wait_tools() -> Arc<crate::tools::Registry> {
    Arc::new(crate::tools::Registry::new(vec![
        crate::tools::doubles::wait(),
    ]))
}

/// The task the sample event names, stored as `mcp` would have stored it.
async fn seed(r: &Rig, msg: &WorkMessage) {
    let task = TaskRecord::new(
        msg.tenant.clone(),
        msg.task_id.clone(),
        "wait",
        Some(3_600_000),
        1000,
        json!({}),
    );
    r.store.create(&task, &json!({"seconds": 0})).await.unwrap();
}

fn sample() -> (SqsEvent, WorkMessage) {
    let event: SqsEvent = serde_json::from_str(SQS_EVENT).unwrap();
    let msg = serde_json::from_str(event.records[0].body.as_deref().unwrap()).unwrap();
    (event, msg)
}

fn with_receives(mut event: SqsEvent, n: u32) -> SqsEvent {
    event.records[0]
        .attributes
        .insert("ApproximateReceiveCount".into(), n.to_string());
    event
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

async fn status(r: &Rig, msg: &WorkMessage) -> TaskRecord {
    r.store.get(msg.key()).await.unwrap().unwrap()
}
