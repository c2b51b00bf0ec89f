//! Fault injection against the real AWS adapters: [`DynamoStore`] and [`SqsQueue`] on the
//! emulator, driven by the real [`Worker`], [`Engine`] and [`Sweeper`] in-process, with SQS
//! messages received, retried and deleted by the worker function's own policy
//! ([`decide`]). The same guarantees `tests/faults.rs` checks on the local server:
//!
//! 1. `duplicate_delivery` — every work message (starts and continuations) is sent twice and
//!    two consumers race over the queue: each job's effect runs once, no two runs of one job
//!    ever overlap, each task completes once with the exact result.
//! 2. `crash_mid_job` — runs are killed (their tokio task aborted) after saving at least one
//!    checkpoint and their message is left to come back after the queue's visibility timeout:
//!    the next run resumes from the checkpoint (never from zero), several cycles per task,
//!    and the task completes once with the exact result.
//! 3. `cancel_race` — `tasks/cancel` races the worker finishing, on DynamoDB's conditional
//!    writes: exactly one terminal state, which never changes afterwards.
//! 4. `enqueue_crash` — a task stored without its message (the enqueue failed), and a task
//!    whose run died and whose message is gone: the sweep re-enqueues both and they complete
//!    once (the dead one from its checkpoint).
//! 5. `update_retry` — the same `tasks/update` answer sent twice, and three times at once: one
//!    write, one resume message, one effect.
//! 6. `lambda_handler` — the worker function's own handler ([`SqsWorker::handle`], built-in
//!    tools) fed SQS batches shaped as the event source mapping delivers them, every message
//!    sent twice, short invocations: each task completes once (one terminal write), with the
//!    exact result, in no more runs than it has steps.
//!
//! Each suite prints one `aws_faults <suite>: trials=… lost=… doubled=…` line and fails on any
//! loss or doubling. Suites 1–5 run a test tool (`tally`) that counts its own steps, runs and
//! effects, so "ran once" is measured; its result is a digest of every step, so "exact" is
//! too. The store is wrapped to count terminal writes per task, so "completed once" is
//! measured at the store as well.
//!
//! Needs both emulators, as `aws_lambda` does; without them it prints a loud SKIPPED line and
//! passes, unless `REQUIRE_EMULATORS` is set (to anything but empty or `0`).
//!
//! ```text
//! scripts/aws-emulator.sh start
//! E=$(cat .tools/moto/endpoint) DYNAMODB_ENDPOINT=$E SQS_ENDPOINT=$E REQUIRE_EMULATORS=1 \
//!   cargo test -p mcp-tasks-core --features lambda --test aws_faults -- --nocapture
//! ```
//!
//! Knobs:
//! - `AWS_FAULT_TRIALS` (default 1) multiplies every suite's trial count for long runs (e.g.
//!   `AWS_FAULT_TRIALS=10`, a few minutes);
//! - `AWS_FAULT_SEED` replays a run's random choices (each suite prints its seed);
//! - `AWS_FAULT_WRITE_LOCK=0` stops serializing each task's conditional writes in the test
//!   (see `Journaled`). The lock is on by default because moto's conditional `PutItem` is not
//!   atomic under concurrent requests; turn it off against DynamoDB Local or DynamoDB itself.
//!   Either way, two successful writes from one read version fail the suite as an emulator
//!   violation, so a broken emulator is never mistaken for a doubled task, nor hides one.
//!
//! On a failure the suite prints, for each bad task, what the tool, the consumers and the
//! store saw (timestamped), which is usually enough to tell which race went wrong.
//!
//! Timing: leases are wall-clock and the test queues use a 2-second visibility timeout, so the
//! crash cycles take real seconds. Nothing here asserts speed; every wait polls the store or
//! the queue against a generous deadline, and the sweep is re-run until its listing (a
//! DynamoDB index, which may lag) has seen every task.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use futures_util::future::join_all;
use mcp_tasks_core::aws::dynamo::{DynamoStore, create_table};
use mcp_tasks_core::aws::lambda::{Action, Config, Ports, Role, SqsWorker, Sweeper, decide};
use mcp_tasks_core::aws::sqs::SqsQueue;
use mcp_tasks_core::engine::{Engine, TaskSettings};
use mcp_tasks_core::jobs::{JobContext, JobError, Step, elicitation, text_result};
use mcp_tasks_core::queue::{QueueError, WorkKind, WorkMessage, WorkQueue};
use mcp_tasks_core::store::{StoreError, TaskKey, TaskRef, TaskStore};
use mcp_tasks_core::task::{TaskRecord, TaskStatus};
use mcp_tasks_core::tools::{Policy, Registry, Tool, ToolDef};
use mcp_tasks_core::worker::{Outcome, Worker, WorkerSettings};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

const TENANT: &str = "tenant-faults";
/// The queue's `maxReceiveCount` as the worker function is told it.
const MAX_RECEIVES: u32 = 50;
/// The test queues' visibility timeout (seconds): a failed or crashed delivery comes back
/// this long after it was received.
const VISIBILITY: &str = "2";

// ── knobs and randomness ──

/// `AWS_FAULT_TRIALS`, the multiplier of every suite's trial count (at least 1).
fn scale() -> usize {
    std::env::var("AWS_FAULT_TRIALS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1)
}

/// The suite's generator, seeded from `AWS_FAULT_SEED` or the clock (the seed is printed).
fn rng(suite: &str) -> common::Rng {
    common::Rng::new("AWS_FAULT_SEED", &format!("aws_faults {suite}"))
}

// ── the counting tool ──

/// The tool's checkpoint: steps done and a running digest of them.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct Cp {
    at: u64,
    sum: u64,
}

/// What step `i` adds to the digest.
fn weight(i: u64) -> u64 {
    (i + 1) * (i + 1) * 7919 % 1_000_003
}

/// The only correct result of `tally` with this key and step count.
fn expected_result(key: &str, n: u64) -> Value {
    let sum: u64 = (0..n).map(weight).sum();
    text_result(format!("tally {key}: {n} steps, digest {sum}"))
}

/// What the tool saw of one job (keyed by its `key` argument).
#[derive(Debug, Default)]
struct Entry {
    /// The checkpoint (`at`) each run started from.
    starts: Vec<u64>,
    /// How many times each step index ran to its end.
    completed_steps: BTreeMap<u64, u32>,
    /// Steps of this job running right now.
    in_flight: u32,
    /// Times a step started while another step of the same job was running.
    overlaps: u32,
    /// Runs that went on with the answer to the input request.
    answered_runs: u32,
    /// Times the final step (the job's effect) ran.
    effects: u32,
    /// Run starts and effects with their times, for the diagnosis of a failure.
    events: Vec<String>,
}

/// Seconds since the first call (timestamps of the diagnostics).
fn clock() -> f64 {
    static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    T0.get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}

type Log = Arc<Mutex<HashMap<String, Entry>>>;

fn with_entry<R>(log: &Log, key: &str, f: impl FnOnce(&mut Entry) -> R) -> R {
    let mut map = log.lock().unwrap_or_else(|e| e.into_inner());
    f(map.entry(key.to_owned()).or_default())
}

/// Counts `n` steps of `ms` each; with `ask`, first asks for input (`go`). Records every run,
/// step and effect in the log.
struct Tally {
    def: ToolDef,
    log: Log,
}

/// Marks a step as running until it ends or is dropped (cancel, deadline, crash).
struct InFlight {
    log: Log,
    key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        with_entry(&self.log, &self.key, |e| e.in_flight -= 1);
    }
}

#[async_trait]
impl Tool for Tally {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let args = ctx.arguments();
        let key = args["key"].as_str().unwrap_or_default().to_owned();
        let n = args["n"].as_u64().unwrap_or(1);
        let ms = args["ms"].as_u64().unwrap_or(0);
        let ask = args["ask"].as_bool().unwrap_or(false);
        let cp: Cp = ctx.checkpoint();
        let first = ctx.first_step_of_run();
        let _running = with_entry(&self.log, &key, |e| {
            if first {
                e.starts.push(cp.at);
                e.events
                    .push(format!("{:8.3}s run starts at {}", clock(), cp.at));
            }
            e.in_flight += 1;
            if e.in_flight > 1 {
                e.overlaps += 1;
            }
            InFlight {
                log: self.log.clone(),
                key: key.clone(),
            }
        });
        if ask && cp.at == 0 {
            if ctx.input("go").is_none() {
                let ask = elicitation("Go on?", json!({"type": "object", "properties": {}}));
                return Ok(Step::NeedInput(BTreeMap::from([("go".to_owned(), ask)])));
            }
            if first {
                with_entry(&self.log, &key, |e| e.answered_runs += 1);
            }
        }
        if cp.at >= n {
            with_entry(&self.log, &key, |e| {
                e.effects += 1;
                e.events.push(format!("{:8.3}s effect", clock()));
            });
            return Ok(Step::Done(expected_result(&key, n)));
        }
        sleep(Duration::from_millis(ms)).await;
        let next = Cp {
            at: cp.at + 1,
            sum: cp.sum + weight(cp.at),
        };
        with_entry(&self.log, &key, |e| {
            *e.completed_steps.entry(cp.at).or_default() += 1;
        });
        // The digest comes from the checkpoints alone: a lost or repeated step shows in it.
        if next.at >= n {
            let want: u64 = (0..n).map(weight).sum();
            if next.sum != want {
                return Err(JobError::Tool(format!("digest {} != {want}", next.sum)));
            }
        }
        Ok(Step::Continue(json!(next)))
    }
}

fn at(task: &TaskRecord) -> u64 {
    serde_json::from_value::<Cp>(task.checkpoint.clone())
        .map(|c| c.at)
        .unwrap_or(0)
}

// ── queues of the test ──

/// Sends every message twice (the second copy right after the first).
struct Twice(Arc<SqsQueue>);

#[async_trait]
impl WorkQueue for Twice {
    async fn enqueue(&self, msg: WorkMessage, delay: Duration) -> Result<(), QueueError> {
        self.0.enqueue(msg.clone(), delay).await?;
        self.0.enqueue(msg, delay).await
    }
}

/// A queue that is down: the process "crashed" between storing a task and enqueueing it.
struct Down;

#[async_trait]
impl WorkQueue for Down {
    async fn enqueue(&self, _msg: WorkMessage, _delay: Duration) -> Result<(), QueueError> {
        Err(QueueError::new(
            "injected: the process died before the send",
        ))
    }
}

// ── a store that keeps a journal of every write, for the diagnosis of a failure ──

/// The DynamoDB store, journaled, with every conditional write checked for atomicity and
/// (unless `AWS_FAULT_WRITE_LOCK=0`) serialized per task.
///
/// moto (5.2.5) evaluates a `PutItem` condition and then stores the item without a lock, so
/// two concurrent conditional writes on the same version can both succeed — which DynamoDB
/// never allows, and which makes a correct worker look like it ran a job twice. The lock
/// restores DynamoDB's per-item atomicity for the writers of this process (all of them: the
/// engines, workers and sweeps of a test share one store); it orders writes, nothing else.
/// Whatever the lock, two successful writes from one read version are counted as
/// `emulator_violations`.
struct Journaled {
    inner: DynamoStore,
    journal: Mutex<HashMap<String, Vec<String>>>,
    /// Per task, the read versions of its successful updates.
    written: Mutex<HashMap<String, std::collections::HashSet<u64>>>,
    violations: AtomicUsize,
    /// Per task, the successful writes of a terminal status (DynamoDB allows one).
    terminal: Mutex<HashMap<String, usize>>,
    locks: Option<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl Journaled {
    fn new(inner: DynamoStore) -> Self {
        let lock = std::env::var("AWS_FAULT_WRITE_LOCK").map_or(true, |v| v != "0");
        Self {
            inner,
            journal: Mutex::default(),
            written: Mutex::default(),
            violations: AtomicUsize::new(0),
            terminal: Mutex::default(),
            locks: lock.then(Mutex::default),
        }
    }

    fn violations(&self) -> usize {
        self.violations.load(Ordering::SeqCst)
    }

    fn terminal_writes(&self, task_id: &str) -> usize {
        lock(&self.terminal).get(task_id).copied().unwrap_or(0)
    }

    fn note(&self, task: &TaskRecord, what: String) {
        let line = format!(
            "{:8.3}s {what}: {:?} at={} lease={:?} cancel={}",
            clock(),
            task.status,
            at(task),
            task.lease.as_ref().map(|l| l.owner.as_str()),
            task.cancel_requested
        );
        lock(&self.journal)
            .entry(task.task_id.clone())
            .or_default()
            .push(line);
    }

    fn journal(&self, task_id: &str) -> Vec<String> {
        lock(&self.journal)
            .get(task_id)
            .cloned()
            .unwrap_or_default()
    }
}

#[async_trait]
impl TaskStore for Journaled {
    async fn create(&self, task: &TaskRecord, arguments: &Value) -> Result<(), StoreError> {
        let out = self.inner.create(task, arguments).await;
        self.note(task, format!("create -> {out:?}"));
        out
    }

    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        self.inner.get(id).await
    }

    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        self.inner.arguments(id).await
    }

    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        let item_lock = self
            .locks
            .as_ref()
            .map(|l| lock(l).entry(task.task_id.clone()).or_default().clone());
        let _held = match &item_lock {
            Some(l) => Some(l.lock().await),
            None => None,
        };
        let out = self.inner.update(task).await;
        self.note(task, format!("update v{} -> {out:?}", task.version));
        if out.is_ok() && task.status.is_terminal() {
            *lock(&self.terminal)
                .entry(task.task_id.clone())
                .or_default() += 1;
        }
        if out.is_ok()
            && !lock(&self.written)
                .entry(task.task_id.clone())
                .or_default()
                .insert(task.version)
        {
            self.violations.fetch_add(1, Ordering::SeqCst);
            eprintln!(
                "aws_faults: EMULATOR VIOLATION: a second conditional write on version {} of {} \
                 succeeded",
                task.version, task.task_id
            );
        }
        out
    }

    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError> {
        self.inner.list_active(after, limit).await
    }

    async fn list_tenant_active(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        self.inner.list_tenant_active(tenant, after, limit).await
    }

    async fn list_expired(&self, now_ms: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        self.inner.list_expired(now_ms, limit).await
    }

    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        self.inner.delete(id).await
    }
}

// ── the rig: a fresh table and queue on the emulator ──

struct Rig {
    dynamo: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    table: String,
    queue_url: String,
    store: Arc<Journaled>,
    queue: Arc<SqsQueue>,
    log: Log,
    tools: Arc<Registry>,
}

async fn rig(suite: &str) -> Option<Arc<Rig>> {
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
struct Delivery {
    msg: WorkMessage,
    body: String,
    message_id: String,
    receipt: String,
    receives: u32,
}

impl Rig {
    fn engine(&self, queue: Arc<dyn WorkQueue>) -> Engine {
        Engine::new(self.store.clone(), queue, TaskSettings::default())
    }

    fn worker(&self, queue: Arc<dyn WorkQueue>, settings: WorkerSettings) -> Arc<Worker> {
        Arc::new(Worker::new(
            self.store.clone(),
            queue,
            self.tools.clone(),
            settings,
        ))
    }

    fn sweeper(&self) -> Sweeper {
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

    async fn task(&self, task_id: &str) -> TaskRecord {
        self.store
            .get(TaskRef {
                tenant: TENANT,
                task_id,
            })
            .await
            .expect("GetItem")
            .unwrap_or_else(|| panic!("task {task_id} vanished"))
    }

    fn entry<R>(&self, key: &str, f: impl FnOnce(&mut Entry) -> R) -> R {
        with_entry(&self.log, key, f)
    }

    /// Creates a `tally` task; returns (key, task id).
    async fn create(&self, engine: &Engine, n: u64, ms: u64, ask: bool) -> (String, String) {
        let key = common::unique("k");
        let task = engine
            .create_task(
                TENANT,
                "tally",
                json!({"key": key, "n": n, "ms": ms, "ask": ask}),
                Value::Null,
                json!({"elicitation": {}}),
            )
            .await
            .expect("create_task");
        (key, task.task_id)
    }

    async fn receive(&self, wait_seconds: i32) -> Vec<Delivery> {
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
    async fn ack(&self, d: &Delivery) -> bool {
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
    async fn settle(&self, ids: &[String], parked: bool, deadline: Instant) -> Vec<String> {
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

    async fn drop_all(&self) {
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

// ── the consumers: the worker function's receive / handle / delete loop ──

/// What the consumers saw.
struct Traffic {
    deliveries: AtomicUsize,
    give_ups: AtomicUsize,
    /// Outcomes by name.
    outcomes: Mutex<BTreeMap<&'static str, usize>>,
    /// Per task: every distinct message id with its kind.
    messages: Mutex<HashMap<String, HashMap<String, WorkKind>>>,
    /// Per task: the `Finished` outcomes of its runs.
    finished: Mutex<HashMap<String, Vec<TaskStatus>>>,
    /// When a message was last received.
    last_seen: Mutex<Instant>,
    /// Per task: each delivery and its outcome, for the diagnosis of a failure.
    log: Mutex<HashMap<String, Vec<String>>>,
    crash: Option<Crash>,
}

/// Which runs to kill.
struct Crash {
    /// Kills still to do per task.
    left: Mutex<HashMap<String, u32>>,
    /// Tasks with a kill in progress (a redelivery meanwhile runs normally).
    busy: Mutex<std::collections::HashSet<String>>,
    /// Per task, the stored checkpoint after each kill.
    kills: Mutex<HashMap<String, Vec<u64>>>,
    rng: Mutex<common::Rng>,
}

impl Traffic {
    fn new(crash: Option<Crash>) -> Arc<Self> {
        Arc::new(Self {
            deliveries: AtomicUsize::new(0),
            give_ups: AtomicUsize::new(0),
            outcomes: Mutex::default(),
            messages: Mutex::default(),
            finished: Mutex::default(),
            last_seen: Mutex::new(Instant::now()),
            log: Mutex::default(),
            crash,
        })
    }

    fn count(&self, what: &'static str) {
        *lock(&self.outcomes).entry(what).or_default() += 1;
    }

    fn outcome(&self, name: &str) -> usize {
        lock(&self.outcomes).get(name).copied().unwrap_or(0)
    }

    fn finished_of(&self, task_id: &str) -> Vec<TaskStatus> {
        lock(&self.finished)
            .get(task_id)
            .cloned()
            .unwrap_or_default()
    }

    fn summary(&self) -> String {
        lock(&self.outcomes)
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One delivery through the worker, then the worker function's verdict on the message.
async fn deliver(
    rig: &Rig,
    worker: &Arc<Worker>,
    traffic: &Traffic,
    invocation: Duration,
    d: Delivery,
) {
    traffic.deliveries.fetch_add(1, Ordering::Relaxed);
    lock(&traffic.messages)
        .entry(d.msg.task_id.clone())
        .or_default()
        .insert(d.message_id.clone(), d.msg.kind);
    let deadline = Instant::now() + invocation;
    let task_id = d.msg.task_id.clone();
    let kill = traffic.crash.as_ref().and_then(|c| {
        let mut busy = lock(&c.busy);
        let wanted = lock(&c.left).get(&task_id).copied().unwrap_or(0) > 0;
        (wanted && busy.insert(task_id.clone())).then(|| lock(&c.rng).range(0, 2))
    });
    let outcome = match kill {
        None => worker.handle(&d.msg, Some(deadline)).await,
        Some(extra) => {
            let crash = traffic.crash.as_ref().expect("a crash plan");
            let from = at(&rig.task(&task_id).await);
            let (w, m) = (worker.clone(), d.msg.clone());
            let run = tokio::spawn(async move { w.handle(&m, Some(deadline)).await });
            let out = loop {
                if run.is_finished() {
                    break Some(run.await.expect("the worker run panicked"));
                }
                let t = rig.task(&task_id).await;
                if t.status == TaskStatus::Working && t.lease.is_some() && at(&t) > from + extra {
                    // Mid-step, after at least one checkpoint of this run: the process dies.
                    let pause = lock(&crash.rng).range(0, 30);
                    sleep(Duration::from_millis(pause)).await;
                    run.abort();
                    match run.await {
                        Ok(out) => break Some(out),
                        Err(e) if e.is_cancelled() => break None,
                        Err(e) => panic!("the worker run panicked: {e}"),
                    }
                }
                sleep(Duration::from_millis(10)).await;
            };
            lock(&crash.busy).remove(&task_id);
            match out {
                Some(out) => out,
                None => {
                    // Let writes already on the wire land before reading what was saved.
                    sleep(Duration::from_millis(300)).await;
                    let saved = at(&rig.task(&task_id).await);
                    *lock(&crash.left).entry(task_id.clone()).or_default() -= 1;
                    lock(&crash.kills).entry(task_id).or_default().push(saved);
                    traffic.count("killed");
                    // The message is neither deleted nor failed: it comes back after the
                    // visibility timeout, as after a Lambda crash.
                    return;
                }
            }
        }
    };
    traffic.count(outcome.as_ref().map_or("error", Outcome::label));
    lock(&traffic.log)
        .entry(task_id.clone())
        .or_default()
        .push(format!(
            "{:8.3}s delivery of {:?} {} (receive {}) -> {outcome:?}",
            clock(),
            d.msg.kind,
            d.message_id,
            d.receives
        ));
    if let Ok(Outcome::Finished(s)) = &outcome {
        lock(&traffic.finished).entry(task_id).or_default().push(*s);
    }
    if let Err(e) = &outcome {
        eprintln!("worker error (the message is retried): {e}");
    }
    match decide(&outcome, d.receives >= MAX_RECEIVES) {
        Action::Done => {
            if !rig.ack(&d).await {
                traffic.count("stale_receipt");
            }
        }
        Action::Retry => {}
        Action::GiveUp => {
            traffic.give_ups.fetch_add(1, Ordering::Relaxed);
            let _ = worker.abandon(&d.msg).await;
            rig.ack(&d).await;
        }
    }
}

/// Consumers over the queue, each its own worker "instance", a batch at a time.
struct Consumers {
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<()>>,
    traffic: Arc<Traffic>,
}

fn consume(
    rig: &Arc<Rig>,
    workers: &[Arc<Worker>],
    traffic: &Arc<Traffic>,
    invocation: Duration,
) -> Consumers {
    let stop = Arc::new(AtomicBool::new(false));
    let handles = workers
        .iter()
        .map(|w| {
            let (rig, w, traffic, stop) = (rig.clone(), w.clone(), traffic.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let batch = rig.receive(1).await;
                    if batch.is_empty() {
                        continue;
                    }
                    *lock(&traffic.last_seen) = Instant::now();
                    join_all(
                        batch
                            .into_iter()
                            .map(|d| deliver(&rig, &w, &traffic, invocation, d)),
                    )
                    .await;
                }
            })
        })
        .collect();
    Consumers {
        stop,
        handles,
        traffic: traffic.clone(),
    }
}

impl Consumers {
    /// Lets late copies and retried messages through (the queue is quiet for longer than the
    /// visibility timeout, or `max` passed), then stops.
    async fn drain_and_stop(self, max: Duration) {
        let until = Instant::now() + max;
        let quiet = Duration::from_millis(3500);
        while Instant::now() < until && lock(&self.traffic.last_seen).elapsed() < quiet {
            sleep(Duration::from_millis(200)).await;
        }
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            h.await.expect("a consumer panicked");
        }
    }
}

fn settings(lease: Duration) -> WorkerSettings {
    WorkerSettings {
        lease,
        check_every: Duration::from_millis(50),
        checkpoint_every: Duration::ZERO,
        deadline_margin: Duration::from_millis(100),
        max_interruptions: 5,
        ..WorkerSettings::default()
    }
}

/// Checks a finished `tally` task: completed once, with the exact result, its effect run
/// once, no two of its runs overlapping. Returns the problems found.
fn judge_completed(rig: &Rig, t: &TaskRecord, key: &str, n: u64, traffic: &Traffic) -> Vec<String> {
    let mut bad = Vec::new();
    if t.status != TaskStatus::Completed {
        bad.push(format!("LOST: status {:?} {:?}", t.status, t.error));
        return bad;
    }
    if t.result.as_ref() != Some(&expected_result(key, n)) {
        bad.push(format!("WRONG result {:?}", t.result));
    }
    let finished = traffic.finished_of(&t.task_id);
    if finished != [TaskStatus::Completed] {
        bad.push(format!("DOUBLED: finished by {finished:?}"));
    }
    let writes = rig.store.terminal_writes(&t.task_id);
    if writes != 1 {
        bad.push(format!("DOUBLED: {writes} terminal writes"));
    }
    rig.entry(key, |e| {
        if e.effects != 1 {
            bad.push(format!("DOUBLED: effect ran {} times", e.effects));
        }
        if e.overlaps != 0 {
            bad.push(format!("DOUBLED: {} overlapping steps", e.overlaps));
        }
        if !bad.is_empty() {
            eprintln!("aws_faults: {}: the tool saw", t.task_id);
            for line in &e.events {
                eprintln!("    {line}");
            }
        }
    });
    if !bad.is_empty() {
        eprintln!("aws_faults: {}: the consumers saw", t.task_id);
        for line in lock(&traffic.log).get(&t.task_id).into_iter().flatten() {
            eprintln!("    {line}");
        }
        eprintln!("aws_faults: {}: the store saw", t.task_id);
        for line in rig.store.journal(&t.task_id) {
            eprintln!("    {line}");
        }
    }
    bad
}

/// Fails on an emulator that broke conditional-write atomicity (which would fake doubling),
/// then on any loss or doubling.
fn verdict(rig: &Rig, lost: usize, doubled: usize) {
    assert_eq!(
        rig.store.violations(),
        0,
        "the emulator let two conditional writes on one version succeed (EMULATOR VIOLATION \
         above); leave AWS_FAULT_WRITE_LOCK unset to serialize writes per item"
    );
    assert_eq!((lost, doubled), (0, 0), "lost or doubled tasks (see above)");
}

fn report(suite: &str, problems: &[(String, Vec<String>)]) -> (usize, usize) {
    let mut lost = 0;
    let mut doubled = 0;
    for (id, bad) in problems {
        for b in bad {
            eprintln!("aws_faults {suite}: {id}: {b}");
        }
        if bad
            .iter()
            .any(|b| b.starts_with("LOST") || b.starts_with("WRONG"))
        {
            lost += 1;
        }
        if bad
            .iter()
            .any(|b| !(b.starts_with("LOST") || b.starts_with("WRONG")))
        {
            doubled += 1;
        }
    }
    (lost, doubled)
}

// ── 1. duplicate delivery ──

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn duplicate_delivery_runs_each_job_once() {
    let Some(rig) = rig("dup").await else {
        return;
    };
    let mut rng = rng("duplicate_delivery");
    let twice: Arc<dyn WorkQueue> = Arc::new(Twice(rig.queue.clone()));
    let engine = rig.engine(twice.clone());
    // A long lease: overlapping runs can only come from a broken lease, never from one that
    // ran out on a slow emulator.
    let workers = [
        rig.worker(twice.clone(), settings(Duration::from_secs(10))),
        rig.worker(twice, settings(Duration::from_secs(10))),
    ];
    let trials = 8 * scale();
    let mut jobs = Vec::new();
    for _ in 0..trials {
        let n = rng.range(3, 10);
        let (key, id) = rig.create(&engine, n, rng.range(10, 50), false).await;
        jobs.push((key, id, n));
    }
    let traffic = Traffic::new(None);
    // Short invocations, so jobs also hand over to (duplicated) continuations.
    let consumers = consume(&rig, &workers, &traffic, Duration::from_millis(400));
    let ids: Vec<String> = jobs.iter().map(|j| j.1.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(30 + 2 * trials as u64);
    let pending = rig.settle(&ids, false, deadline).await;
    consumers.drain_and_stop(Duration::from_secs(15)).await;

    let mut problems = Vec::new();
    let mut rerun_steps = 0;
    for (key, id, n) in &jobs {
        let t = rig.task(id).await;
        let mut bad = judge_completed(&rig, &t, key, *n, &traffic);
        if pending.contains(id) {
            bad.push("LOST: not terminal by the deadline".into());
        }
        // Without crashes every step ends exactly once: a step that ended twice was run by
        // two runs, or its checkpoint was lost.
        rig.entry(key, |e| {
            for i in 0..*n {
                let times = e.completed_steps.get(&i).copied().unwrap_or(0);
                if times != 1 {
                    rerun_steps += 1;
                    bad.push(format!("DOUBLED: step {i} ended {times} times"));
                }
            }
        });
        problems.push((id.clone(), bad));
    }
    let ev = rig.store.violations();
    let (lost, doubled) = report("duplicate_delivery", &problems);
    let messages: usize = lock(&traffic.messages).values().map(HashMap::len).sum();
    let copies_refused = traffic.outcome("busy") + traffic.outcome("dropped");
    println!(
        "aws_faults duplicate_delivery: trials={trials} tasks={trials} messages={messages} \
         deliveries={} copies_refused={copies_refused} rerun_steps={rerun_steps} give_ups={} \
         lost={lost} doubled={doubled} emulator_violations={ev} [{}]",
        traffic.deliveries.load(Ordering::Relaxed),
        traffic.give_ups.load(Ordering::Relaxed),
        traffic.summary(),
    );
    assert!(
        copies_refused >= trials,
        "every start was sent twice, so at least {trials} copies must have been refused"
    );
    assert!(
        traffic.outcome("continued") > 0,
        "no job handed over: the continuations went untested"
    );
    verdict(&rig, lost, doubled);
    rig.drop_all().await;
}

// ── 2. crash mid-job ──

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_run_resumes_from_its_checkpoint_and_completes_once() {
    let Some(rig) = rig("crash").await else {
        return;
    };
    let rng = rng("crash_mid_job");
    let engine = rig.engine(rig.queue.clone());
    // Leases are wall-clock: long enough that a slow emulator never lets one lapse under a
    // live run, short enough that a dead run's lapses within a crash cycle.
    let lease = Duration::from_secs(2);
    let workers = [
        rig.worker(rig.queue.clone(), settings(lease)),
        rig.worker(rig.queue.clone(), settings(lease)),
    ];
    let tasks = 4 * scale();
    let cycles: u32 = 3;
    // Each killed run ends at most 3 steps past where it started: enough left to resume into.
    let n = 4 * u64::from(cycles) + 4;
    let mut jobs = Vec::new();
    let mut left = HashMap::new();
    for _ in 0..tasks {
        let (key, id) = rig.create(&engine, n, 40, false).await;
        left.insert(id.clone(), cycles);
        jobs.push((key, id));
    }
    let traffic = Traffic::new(Some(Crash {
        left: Mutex::new(left),
        busy: Mutex::default(),
        kills: Mutex::default(),
        rng: Mutex::new(rng),
    }));
    let consumers = consume(&rig, &workers, &traffic, Duration::from_secs(30));
    let ids: Vec<String> = jobs.iter().map(|j| j.1.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(40 + 3 * tasks as u64);
    let pending = rig.settle(&ids, false, deadline).await;
    consumers.drain_and_stop(Duration::from_secs(15)).await;

    let crash = traffic.crash.as_ref().expect("the crash plan");
    let mut problems = Vec::new();
    let (mut kills_total, mut resumed) = (0, 0);
    for (key, id) in &jobs {
        let t = rig.task(id).await;
        let mut bad = judge_completed(&rig, &t, key, n, &traffic);
        if pending.contains(id) {
            bad.push("LOST: not terminal by the deadline".into());
        }
        let kills = lock(&crash.kills).get(id).cloned().unwrap_or_default();
        kills_total += kills.len();
        if kills.len() != cycles as usize {
            bad.push(format!("LOST: killed {} times, not {cycles}", kills.len()));
        }
        let starts = rig.entry(key, |e| e.starts.clone());
        if starts.len() != kills.len() + 1 || starts.first() != Some(&0) {
            bad.push(format!(
                "WRONG runs: started at {starts:?} after kills at {kills:?}"
            ));
        } else {
            for (start, killed_at) in starts[1..].iter().zip(&kills) {
                if *start == 0 || start < killed_at {
                    bad.push(format!(
                        "WRONG resume: from {start} after a kill that had saved {killed_at}"
                    ));
                } else {
                    resumed += 1;
                }
            }
        }
        if t.attempts != cycles + 1 || t.interruptions != 0 {
            bad.push(format!(
                "DOUBLED attempts: attempts={} interruptions={}",
                t.attempts, t.interruptions
            ));
        }
        problems.push((id.clone(), bad));
    }
    let ev = rig.store.violations();
    let (lost, doubled) = report("crash_mid_job", &problems);
    println!(
        "aws_faults crash_mid_job: trials={kills_total} tasks={tasks} kills={kills_total} \
         resumed_from_checkpoint={resumed} deliveries={} lost={lost} doubled={doubled} emulator_violations={ev} [{}]",
        traffic.deliveries.load(Ordering::Relaxed),
        traffic.summary(),
    );
    verdict(&rig, lost, doubled);
    rig.drop_all().await;
}

// ── 3. cancel racing completion ──

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_racing_completion_ends_in_one_stable_state() {
    let Some(rig) = rig("cancel").await else {
        return;
    };
    let mut rng = rng("cancel_race");
    // The start messages go to SQS and stay there: each trial delivers its own message.
    let engine = rig.engine(rig.queue.clone());
    let worker = rig.worker(rig.queue.clone(), {
        let mut s = settings(Duration::from_secs(10));
        s.check_every = Duration::from_millis(20);
        s
    });
    let trials = 24 * scale();
    let parallel = 8;
    // Where each cancel is aimed, in turn: before the run (the cancel has landed when the
    // message is delivered), after its first step, after its last step (the cancel races the
    // last checkpoint and the completion), at its final step (the cancel's write races the
    // completion's), after the run ended. Aimed at what the job did, not at a wall-clock
    // guess, so the races are run whatever the load; the two ends are not races, and each has
    // one right outcome (checked below).
    const AIMS: [&str; 5] = ["before", "mid", "last_step", "at_end", "after"];
    let mut by_aim: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let (mut completed, mut cancelled) = (0, 0);
    let mut problems = Vec::new();
    let mut done = 0;
    while done < trials {
        let batch = (trials - done).min(parallel);
        let plans: Vec<(&str, u64, u64)> = (done..done + batch)
            .map(|i| (AIMS[i % AIMS.len()], rng.range(0, 25), rng.range(0, 10)))
            .collect();
        done += batch;
        let runs = plans.into_iter().map(|(aim, ms, jitter)| {
            let (rig, engine, worker) = (rig.clone(), engine.clone(), worker.clone());
            async move {
                let (key, id) = rig.create(&engine, 2, ms, false).await;
                let msg = WorkMessage {
                    tenant: TENANT.into(),
                    task_id: id.clone(),
                    kind: WorkKind::Start,
                };
                let ended = AtomicBool::new(false);
                let run = async {
                    let out = worker.handle(&msg, None).await;
                    ended.store(true, Ordering::SeqCst);
                    out
                };
                let cancel = async {
                    let reached = |e: &Entry| match aim {
                        "mid" => !e.completed_steps.is_empty(),
                        "last_step" => e.completed_steps.contains_key(&1),
                        "at_end" => e.effects > 0,
                        _ => false,
                    };
                    if aim != "before" {
                        while !ended.load(Ordering::SeqCst) && !rig.entry(&key, |e| reached(e)) {
                            sleep(Duration::from_millis(1)).await;
                        }
                    }
                    sleep(Duration::from_millis(jitter)).await;
                    engine.cancel(TENANT, &id).await.expect("tasks/cancel");
                };
                let (first, ()) = if aim == "before" {
                    cancel.await;
                    (run.await, ())
                } else {
                    tokio::join!(run, cancel)
                };
                // A duplicate delivery after the race settles whatever the race left.
                let second = worker.handle(&msg, None).await;
                let settled = rig.task(&id).await;
                // Later: another cancel and another delivery change nothing.
                sleep(Duration::from_millis(500)).await;
                engine.cancel(TENANT, &id).await.expect("tasks/cancel");
                let third = worker.handle(&msg, None).await;
                let later = rig.task(&id).await;
                let outs = [first, second, third].map(|o| o.expect("worker"));
                (aim, key, id, settled, later, outs)
            }
        });
        for (aim, key, id, settled, later, outs) in join_all(runs).await {
            let split = by_aim.entry(aim).or_default();
            match settled.status {
                TaskStatus::Completed => split.0 += 1,
                TaskStatus::Cancelled => split.1 += 1,
                _ => {}
            }
            let mut bad = Vec::new();
            // The ends of the range are not races: a cancel that landed before the message was
            // delivered always wins, and one made after the run ended changes nothing.
            match (aim, settled.status) {
                ("before", s) if s != TaskStatus::Cancelled => {
                    bad.push(format!("WRONG: cancelled before the run, then {s:?}"))
                }
                ("after", s) if s != TaskStatus::Completed => {
                    bad.push(format!("WRONG: cancelled after the run ended, then {s:?}"))
                }
                _ => {}
            }
            let finished: Vec<TaskStatus> = outs
                .iter()
                .filter_map(|o| match o {
                    Outcome::Finished(s) => Some(*s),
                    _ => None,
                })
                .collect();
            match settled.status {
                TaskStatus::Completed => completed += 1,
                TaskStatus::Cancelled => cancelled += 1,
                s => bad.push(format!("LOST: {s:?} after the race ({outs:?})")),
            }
            if settled.result.is_some() != (settled.status == TaskStatus::Completed) {
                bad.push(format!(
                    "WRONG: {:?} with result {:?}",
                    settled.status, settled.result
                ));
            }
            if finished.len() > 1 || finished.iter().any(|s| *s != settled.status) {
                bad.push(format!(
                    "DOUBLED: terminal writes {finished:?}, stored {:?}",
                    settled.status
                ));
            }
            let effects = rig.entry(&key, |e| e.effects);
            if settled.status == TaskStatus::Completed
                && (effects != 1 || finished != [TaskStatus::Completed])
            {
                bad.push(format!(
                    "DOUBLED: completed with {effects} effects, {finished:?}"
                ));
            }
            if effects > 1 {
                bad.push(format!("DOUBLED: effect ran {effects} times"));
            }
            let writes = rig.store.terminal_writes(&id);
            if writes != 1 {
                bad.push(format!("DOUBLED: {writes} terminal writes"));
            }
            if later != settled {
                bad.push(format!(
                    "DOUBLED: changed after the end: {:?} v{} -> {:?} v{}",
                    settled.status, settled.version, later.status, later.version
                ));
            }
            problems.push((id, bad));
        }
    }
    let ev = rig.store.violations();
    let (lost, doubled) = report("cancel_race", &problems);
    println!(
        "aws_faults cancel_race: trials={trials} completed={completed} cancelled={cancelled} \
         lost={lost} doubled={doubled} emulator_violations={ev} completed/cancelled by aim: {by_aim:?}"
    );
    verdict(&rig, lost, doubled);
    rig.drop_all().await;
}

// ── 4. crash between storing a task and enqueueing it ──

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sweep_recovers_tasks_without_a_message() {
    let Some(rig) = rig("sweep").await else {
        return;
    };
    let mut rng = rng("enqueue_crash");
    // Every send fails: `create_task` stores the task, logs the failed send and answers.
    let engine = rig.engine(Arc::new(Down));
    let lease = Duration::from_secs(2);
    let trials = 6 * scale();
    let n = 8;
    let mut jobs = Vec::new();
    for _ in 0..trials {
        let (key, id) = rig.create(&engine, n, rng.range(10, 40), false).await;
        jobs.push((key, id));
    }
    assert!(
        rig.receive(1).await.is_empty(),
        "the premise: no work message was sent"
    );
    // Half of them also had a run that died after a checkpoint, its message gone for good
    // (say, dead-lettered): only the sweep can bring them back.
    let died: Vec<String> = jobs
        .iter()
        .skip(1)
        .step_by(2)
        .map(|j| j.1.clone())
        .collect();
    let dying = rig.worker(Arc::new(Down), settings(lease));
    for id in &died {
        let msg = WorkMessage {
            tenant: TENANT.into(),
            task_id: id.clone(),
            kind: WorkKind::Start,
        };
        let w = dying.clone();
        let run = tokio::spawn(async move { w.handle(&msg, None).await });
        let until = Instant::now() + Duration::from_secs(20);
        while at(&rig.task(id).await) == 0 && Instant::now() < until && !run.is_finished() {
            sleep(Duration::from_millis(10)).await;
        }
        run.abort();
        assert!(
            run.await.is_err_and(|e| e.is_cancelled()),
            "the run was killed mid-job"
        );
    }
    sleep(lease + Duration::from_millis(300)).await;

    // The sweep, re-run until its listing (an eventually consistent index) saw every task.
    let sweeper = rig.sweeper();
    let until = Instant::now() + Duration::from_secs(20);
    let mut sweeps = 0;
    let mut requeued = 0;
    loop {
        let r = sweeper.run(None).await.expect("sweep");
        sweeps += 1;
        requeued += r.requeued;
        if r.requeued >= trials || Instant::now() >= until {
            break;
        }
        sleep(Duration::from_millis(300)).await;
    }
    let workers = [
        rig.worker(rig.queue.clone(), settings(lease)),
        rig.worker(rig.queue.clone(), settings(lease)),
    ];
    let traffic = Traffic::new(None);
    let consumers = consume(&rig, &workers, &traffic, Duration::from_secs(30));
    let ids: Vec<String> = jobs.iter().map(|j| j.1.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(30 + trials as u64);
    let pending = rig.settle(&ids, false, deadline).await;
    consumers.drain_and_stop(Duration::from_secs(15)).await;

    // Finished tasks leave the sweep alone (once the index has caught up).
    let until = Instant::now() + Duration::from_secs(10);
    let mut after = sweeper.run(None).await.expect("sweep").requeued;
    while after > 0 && Instant::now() < until {
        sleep(Duration::from_millis(300)).await;
        after = sweeper.run(None).await.expect("sweep").requeued;
    }

    let mut problems = Vec::new();
    let mut resumed = 0;
    for (key, id) in &jobs {
        let t = rig.task(id).await;
        let mut bad = judge_completed(&rig, &t, key, n, &traffic);
        if pending.contains(id) {
            bad.push("LOST: not terminal by the deadline".into());
        }
        let starts = rig.entry(key, |e| e.starts.clone());
        if died.contains(id) {
            match starts.as_slice() {
                [0, s] if *s > 0 => resumed += 1,
                other => bad.push(format!("WRONG: runs started at {other:?}")),
            }
        } else if starts != [0] {
            bad.push(format!("DOUBLED: runs started at {starts:?}"));
        }
        problems.push((id.clone(), bad));
    }
    let ev = rig.store.violations();
    let (lost, doubled) = report("enqueue_crash", &problems);
    println!(
        "aws_faults enqueue_crash: trials={trials} tasks={trials} never_enqueued={trials} \
         dead_runs={} resumed_from_checkpoint={resumed} sweeps={sweeps} requeued={requeued} \
         requeued_after={after} lost={lost} doubled={doubled} emulator_violations={ev} [{}]",
        died.len(),
        traffic.summary(),
    );
    assert_eq!(requeued, trials, "the sweep found every orphan");
    assert_eq!(after, 0, "the sweep re-enqueued finished tasks");
    verdict(&rig, lost, doubled);
    rig.drop_all().await;
}

// ── 5. retried tasks/update ──

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retried_update_has_one_effect() {
    let Some(rig) = rig("update").await else {
        return;
    };
    let _rng = rng("update_retry");
    let engine = rig.engine(rig.queue.clone());
    let settings = settings(Duration::from_secs(10));
    let workers = [
        rig.worker(rig.queue.clone(), settings.clone()),
        rig.worker(rig.queue.clone(), settings),
    ];
    let trials = 8 * scale();
    let n = 3;
    let mut jobs = Vec::new();
    for _ in 0..trials {
        jobs.push(rig.create(&engine, n, 10, true).await);
    }
    let ids: Vec<String> = jobs.iter().map(|j| j.1.clone()).collect();

    // Every job runs up to its question and parks.
    let parking = Traffic::new(None);
    let consumers = consume(&rig, &workers, &parking, Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(30 + trials as u64);
    let unparked = rig.settle(&ids, true, deadline).await;
    consumers.drain_and_stop(Duration::from_secs(10)).await;
    assert!(unparked.is_empty(), "never asked for input: {unparked:?}");

    // The answer, sent twice in a row or three times at once.
    let answer = json!({"go": {"action": "accept", "content": {}}});
    let answer: Map<String, Value> = answer.as_object().cloned().expect("an object");
    let mut problems: HashMap<String, Vec<String>> = HashMap::new();
    let mut updates = 0;
    for (i, id) in ids.iter().enumerate() {
        let before = rig.task(id).await;
        if i % 2 == 0 {
            for _ in 0..2 {
                engine
                    .update(TENANT, id, &answer)
                    .await
                    .expect("tasks/update");
                updates += 1;
            }
        } else {
            let all = join_all((0..3).map(|_| engine.update(TENANT, id, &answer))).await;
            for r in all {
                r.expect("tasks/update");
                updates += 1;
            }
        }
        let after = rig.task(id).await;
        let bad = problems.entry(id.clone()).or_default();
        if after.version != before.version + 1 {
            bad.push(format!(
                "DOUBLED: {} writes for one answer",
                after.version - before.version
            ));
        }
        if after.status != TaskStatus::Working
            || after.input_responses.get("go") != answer.get("go")
            || after.input_responses.len() != 1
        {
            bad.push(format!(
                "LOST: {:?} with answers {:?}",
                after.status, after.input_responses
            ));
        }
    }

    // The resumes run (two consumers, so any second resume would race the first).
    let traffic = Traffic::new(None);
    let consumers = consume(&rig, &workers, &traffic, Duration::from_secs(30));
    let pending = rig
        .settle(&ids, false, deadline + Duration::from_secs(30))
        .await;
    consumers.drain_and_stop(Duration::from_secs(15)).await;

    let mut resumes = 0;
    for (key, id) in &jobs {
        let t = rig.task(id).await;
        let bad = problems.entry(id.clone()).or_default();
        bad.extend(judge_completed(&rig, &t, key, n, &traffic));
        if pending.contains(id) {
            bad.push("LOST: not terminal by the deadline".into());
        }
        let kinds: Vec<WorkKind> = lock(&traffic.messages)
            .get(id)
            .map(|m| m.values().copied().collect())
            .unwrap_or_default();
        let sent = kinds.iter().filter(|k| **k == WorkKind::Resume).count();
        resumes += sent;
        if sent != 1 {
            bad.push(format!("DOUBLED: {sent} resume messages ({kinds:?})"));
        }
        let answered = rig.entry(key, |e| e.answered_runs);
        if answered != 1 {
            bad.push(format!("DOUBLED: {answered} runs went on with the answer"));
        }
        // And a retry after the end is acked without a write.
        engine
            .update(TENANT, id, &answer)
            .await
            .expect("tasks/update");
        updates += 1;
        if rig.task(id).await != t {
            bad.push("DOUBLED: a late retry changed the finished task".into());
        }
    }
    let problems: Vec<(String, Vec<String>)> = problems.into_iter().collect();
    let ev = rig.store.violations();
    let (lost, doubled) = report("update_retry", &problems);
    println!(
        "aws_faults update_retry: trials={trials} tasks={trials} updates={updates} \
         resume_messages={resumes} lost={lost} doubled={doubled} emulator_violations={ev} [{}]",
        traffic.summary(),
    );
    verdict(&rig, lost, doubled);
    rig.drop_all().await;
}

// ── 6. the Lambda worker handler itself, under duplicates ──

/// The event source mapping: batches from the queue through [`SqsWorker::handle`], deleting
/// what it did not report as failed.
fn consume_lambda(
    rig: &Arc<Rig>,
    workers: Vec<Arc<SqsWorker>>,
    traffic: &Arc<Traffic>,
    invocation: Duration,
) -> Consumers {
    let stop = Arc::new(AtomicBool::new(false));
    let handles = workers
        .into_iter()
        .map(|w| {
            let (rig, traffic, stop) = (rig.clone(), traffic.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let batch = rig.receive(1).await;
                    if batch.is_empty() {
                        continue;
                    }
                    *lock(&traffic.last_seen) = Instant::now();
                    traffic.deliveries.fetch_add(batch.len(), Ordering::Relaxed);
                    let records: Vec<Value> = batch
                        .iter()
                        .map(|d| {
                            json!({
                                "messageId": d.message_id,
                                "receiptHandle": d.receipt,
                                "body": d.body,
                                "attributes": {"ApproximateReceiveCount": d.receives.to_string()},
                                "eventSource": "aws:sqs",
                            })
                        })
                        .collect();
                    let event: SqsEvent =
                        serde_json::from_value(json!({ "Records": records })).expect("an event");
                    let out = w.handle(event, Instant::now() + invocation).await;
                    for d in &batch {
                        let failed = out
                            .batch_item_failures
                            .iter()
                            .any(|f| f.item_identifier == d.message_id);
                        if failed {
                            traffic.count("retried");
                        } else if rig.ack(d).await {
                            traffic.count("deleted");
                        } else {
                            traffic.count("stale_receipt");
                        }
                    }
                }
            })
        })
        .collect();
    Consumers {
        stop,
        handles,
        traffic: traffic.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_lambda_worker_handler_completes_duplicated_work_once() {
    let Some(rig) = rig("lambda").await else {
        return;
    };
    let mut rng = rng("lambda_handler");
    let twice: Arc<dyn WorkQueue> = Arc::new(Twice(rig.queue.clone()));
    let engine = rig.engine(twice.clone());
    let config = Config::from_lookup(Role::Worker, |k| match k {
        "TABLE_NAME" => Some(rig.table.clone()),
        "QUEUE_URL" => Some(rig.queue_url.clone()),
        "MAX_RECEIVES" => Some(MAX_RECEIVES.to_string()),
        _ => None,
    })
    .expect("worker config");
    let ports = Ports {
        store: rig.store.clone(),
        queue: twice,
        run_slots: None,
    };
    let workers: Vec<Arc<SqsWorker>> = (0..2)
        .map(|_| {
            Arc::new(SqsWorker::with_settings(
                &config,
                &ports,
                Arc::new(mcp_tasks_core::tools::Registry::new(
                    mcp_tasks_demo_tools::tools(),
                )),
                settings(Duration::from_secs(10)),
            ))
        })
        .collect();
    let trials = 8 * scale();
    let mut jobs = Vec::new();
    for _ in 0..trials {
        // The built-in `wait`: over a second it sleeps (parked, then woken by a delayed
        // message: two runs), up to a second it is one step and the final one; every run
        // does at least one step, so no task may take more runs than that. (`hash_chain` would check a digest, but costs seconds of CPU
        // per step in a debug build.)
        let tenths = rng.range(3, 25);
        let task = engine
            .create_task(
                TENANT,
                "wait",
                json!({"seconds": tenths as f64 / 10.0}),
                Value::Null,
                json!({}),
            )
            .await
            .expect("create_task");
        jobs.push((tenths, task.task_id));
    }
    let traffic = Traffic::new(None);
    let consumers = consume_lambda(&rig, workers, &traffic, Duration::from_millis(500));
    let ids: Vec<String> = jobs.iter().map(|j| j.1.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(40 + 2 * trials as u64);
    let pending = rig.settle(&ids, false, deadline).await;
    consumers.drain_and_stop(Duration::from_secs(15)).await;

    let mut problems = Vec::new();
    let mut handed_over = 0;
    for (tenths, id) in &jobs {
        let t = rig.task(id).await;
        let mut bad = Vec::new();
        if pending.contains(id) || t.status != TaskStatus::Completed {
            bad.push(format!("LOST: {:?} {:?}", t.status, t.error));
        } else {
            let want = text_result(format!("Waited {} s.", *tenths as f64 / 10.0));
            if t.result.as_ref() != Some(&want) {
                bad.push(format!("WRONG result {:?} (want {want})", t.result));
            }
            if t.attempts > 1 {
                handed_over += 1;
            }
            // Every run completes at least one step, and the job has one step per second
            // waited plus the final one: more runs than steps means a run did nothing (a
            // duplicate got in, or a run lost its lease).
            let steps = u32::try_from(tenths.div_ceil(10) + 1).unwrap_or(u32::MAX);
            if t.attempts > steps {
                bad.push(format!("DOUBLED: {} runs for {steps} steps", t.attempts));
            }
        }
        let writes = rig.store.terminal_writes(id);
        if writes != 1 {
            bad.push(format!("DOUBLED: {writes} terminal writes"));
        }
        if !bad.is_empty() {
            for line in rig.store.journal(id) {
                eprintln!("    {line}");
            }
        }
        problems.push((id.clone(), bad));
    }
    let ev = rig.store.violations();
    let (lost, doubled) = report("lambda_handler", &problems);
    println!(
        "aws_faults lambda_handler: trials={trials} tasks={trials} deliveries={} \
         handed_over={handed_over} lost={lost} doubled={doubled} \
         emulator_violations={ev} [{}]",
        traffic.deliveries.load(Ordering::Relaxed),
        traffic.summary(),
    );
    verdict(&rig, lost, doubled);
    rig.drop_all().await;
}
