//! The worker's unit tests, by subject; here the tools, rigs and stores they share.

use std::sync::atomic::AtomicUsize;

use async_trait::async_trait;
use serde_json::json;

use super::*;
use crate::engine::{Engine, TaskSettings};
use crate::jobs::{JobError, Step, text_result};
use crate::queue::LocalQueue;
use crate::store::TaskRef;
use crate::store::memory::MemoryStore;
use crate::tools::{Policy, ToolDef};

mod cancel;
mod crashes;
mod deadlines;
mod delivery;
mod pace;
mod sleep;
mod waiting;

/// Counts to `n` in steps of `ms`, recording how many times it finished.
struct Counter {
    def: ToolDef,
    finished: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Counter {
    fn def(&self) -> &ToolDef {
        &self.def
    }
    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let n = ctx.arguments()["n"].as_u64().unwrap_or(3);
        let ms = ctx.arguments()["ms"].as_u64().unwrap_or(10);
        let at: u64 = ctx.checkpoint();
        if at >= n {
            self.finished.fetch_add(1, Ordering::SeqCst);
            return Ok(Step::Done(text_result(format!("counted to {n}"))));
        }
        tokio::time::sleep(Duration::from_millis(ms)).await;
        if let Some(cpu_ms) = ctx.arguments()["cpu_ms"].as_u64() {
            // Busy on the CPU pool for `cpu_ms` (counted against the CPU quota).
            ctx.cpu(move || {
                let until = std::time::Instant::now() + Duration::from_millis(cpu_ms);
                while std::time::Instant::now() < until {
                    std::hint::spin_loop();
                }
            })
            .await?;
        }
        Ok(Step::Continue(json!(at + 1)))
    }
}

/// Panics on its first step.
struct Boom {
    def: ToolDef,
}

#[async_trait]
impl Tool for Boom {
    fn def(&self) -> &ToolDef {
        &self.def
    }
    async fn step(&self, _ctx: &JobContext) -> Result<Step, JobError> {
        panic!("boom")
    }
}

struct Rig {
    engine: Engine,
    worker: Arc<Worker>,
    store: Arc<MemoryStore>,
    rx: tokio::sync::mpsc::UnboundedReceiver<WorkMessage>,
    finished: Arc<AtomicUsize>,
}

fn rig(settings: WorkerSettings) -> Rig {
    let store = Arc::new(MemoryStore::new());
    let (queue, rx) = LocalQueue::new();
    let queue = Arc::new(queue);
    let finished = Arc::new(AtomicUsize::new(0));
    let def = |name| ToolDef {
        name,
        description: "test tool",
        input_schema: json!({"type": "object"}),
        policy: Policy::Optional,
    };
    let tools = Arc::new(Registry::new(vec![
        Arc::new(Counter {
            def: def("count"),
            finished: finished.clone(),
        }),
        Arc::new(Boom { def: def("boom") }),
    ]));
    let engine = Engine::new(store.clone(), queue.clone(), TaskSettings::default());
    let worker = Arc::new(Worker::new(store.clone(), queue, tools, settings));
    Rig {
        engine,
        worker,
        store,
        rx,
        finished,
    }
}

fn fast() -> WorkerSettings {
    WorkerSettings {
        lease: Duration::from_millis(300),
        check_every: Duration::from_millis(20),
        checkpoint_every: Duration::ZERO,
        deadline_margin: Duration::from_millis(50),
        max_interruptions: 5,
        ..WorkerSettings::default()
    }
}

async fn create(r: &mut Rig, args: Value) -> WorkMessage {
    r.engine
        .create_task(&"t".into(), "count", args, Value::Null, json!({}))
        .await
        .unwrap();
    r.rx.recv().await.unwrap()
}

async fn status(r: &Rig, msg: &WorkMessage) -> TaskRecord {
    r.store.get(msg.key()).await.unwrap().unwrap()
}

/// A memory store whose writes and reads hang for ever once `ok` writes went through (a
/// connection the other side accepted and never answers, within the client's operation
/// timeout), and that counts reads (`ok: usize::MAX` never hangs).
struct HangsAfter {
    inner: MemoryStore,
    ok: usize,
    writes: AtomicUsize,
    reads: AtomicUsize,
}

#[async_trait]
impl TaskStore for HangsAfter {
    async fn create_within(
        &self,
        task: &TaskRecord,
        args: &Value,
        max: usize,
    ) -> Result<bool, StoreError> {
        self.inner.create_within(task, args, max).await
    }
    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if self.writes.load(Ordering::SeqCst) > self.ok {
            std::future::pending::<()>().await;
        }
        self.inner.get(id).await
    }
    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        self.inner.arguments(id).await
    }
    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        if self.writes.fetch_add(1, Ordering::SeqCst) >= self.ok {
            std::future::pending::<()>().await;
        }
        self.inner.update(task).await
    }
    async fn list_active(
        &self,
        after: Option<&crate::store::TaskKey>,
        limit: usize,
    ) -> Result<Vec<crate::store::TaskKey>, StoreError> {
        self.inner.list_active(after, limit).await
    }
    async fn list_expired(
        &self,
        now: u64,
        limit: usize,
    ) -> Result<Vec<crate::store::TaskKey>, StoreError> {
        self.inner.list_expired(now, limit).await
    }
    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        self.inner.delete(id).await
    }
}
