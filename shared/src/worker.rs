//! The worker: advances one task per work message, under a lease.
//!
//! 1. Read the task; drop the message if it is gone, expired, terminal, waiting for input, or
//!    leased by a live worker (a duplicate delivery).
//! 2. Take the lease with a conditional write (a second worker loses that race).
//! 3. Run steps. At least once a second (and never holding a lock across I/O) re-read the task:
//!    stop when cancellation was requested or the lease was lost; renew the lease and flush
//!    the latest progress message. Checkpoints are written at most once a second and always
//!    before asking for input, finishing, or stopping at a deadline.
//! 4. Before the invocation's deadline, save the checkpoint, release the lease and enqueue a
//!    continuation, so a job can outlive one Lambda invocation.
//!
//! A crash anywhere leaves the last checkpoint in the store; the next delivery (or start-up
//! recovery, or the sweep) resumes from it. Every terminal write is conditional, so a job
//! completes at most once.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::FutureExt as _;
use serde_json::Value;
use tokio::time::Instant;

use crate::clock::now_ms;
use crate::jobs::{JobContext, JobError, ProgressSink, Step, tool_error_result};
use crate::metrics::{self, name as metric};
use crate::protocol::{ErrorObject, INVALID_PARAMS};
use crate::queue::{WorkKind, WorkMessage, WorkQueue};
use crate::store::{StoreError, TaskStore};
use crate::task::{Lease, TaskRecord, TaskStatus};
use crate::tools::{Registry, Tool};

/// Worker timing and limits.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// How long a lease lasts without renewal.
    pub lease: Duration,
    /// How often the task is re-read for cancellation and the lease renewed.
    pub check_every: Duration,
    /// Minimum gap between checkpoint writes.
    pub checkpoint_every: Duration,
    /// Stop this long before the deadline to save and hand over.
    pub deadline_margin: Duration,
    /// A job whose runs died this many times in a row without saving a checkpoint (crash,
    /// panic, lost store) is failed instead of being retried forever.
    pub max_interruptions: u32,
    /// A job whose runs died this many times in all, even after saving checkpoints, is failed:
    /// a job that kills its process after each checkpoint (and its batch-mates with it, on
    /// Lambda) would otherwise be retried until its TTL.
    pub max_deaths: u32,
    /// How long after its creation a task whose tool this worker does not know is given back
    /// to the queue (on Lambda, a worker older than the `mcp` function that created the task,
    /// while a deployment rolls out) before it fails. Zero: it fails at once (the local
    /// server, whose tools never change while it runs).
    pub unknown_tool_grace: Duration,
    /// The shortest poll interval suggested to clients (the deployment's `pollIntervalMs`);
    /// a job that says how long it still needs gets a longer one
    /// ([`crate::jobs::poll_interval_for`]).
    pub poll_interval_floor: Duration,
    /// The per-task limits a running job is held to (wall time under a lease, CPU time on the
    /// CPU pool); the hosts copy them from their [`crate::quota::Quotas`].
    pub quotas: crate::quota::Quotas,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(30),
            check_every: Duration::from_millis(500),
            checkpoint_every: Duration::from_secs(1),
            deadline_margin: Duration::from_secs(5),
            max_interruptions: 5,
            max_deaths: 10,
            unknown_tool_grace: Duration::ZERO,
            poll_interval_floor: Duration::from_secs(1),
            quotas: crate::quota::Quotas::default(),
        }
    }
}

/// How far past the wall-time quota a run may go before it is stopped: a job that claimed
/// exactly the limit (a day-long `wait` under a one-day limit) finishes, with the time its
/// steps and writes took on top.
const WALL_GRACE: Duration = Duration::from_secs(60);

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to do (duplicate, terminal, gone, waiting for input).
    Dropped,
    /// Another run holds a live lease; retry after this long if that run might be dead (an
    /// SQS consumer reports the message as failed; the local server, whose leases are all
    /// in-process, drops it).
    Busy(Duration),
    /// The job reached a terminal status.
    Finished(TaskStatus),
    /// The job waits for input.
    WaitingForInput,
    /// The job stopped before the deadline and enqueued a continuation.
    Continued,
    /// The job sleeps ([`Step::Sleep`]): its checkpoint is saved, nothing holds it, and a
    /// message delayed until it wakes (at most SQS's 15 minutes, then again) brings it back.
    Sleeping(Duration),
    /// Another writer took over (cancel, lost lease); nothing more for us to do.
    Superseded,
    /// The task's tenant already runs as many jobs as it may: nothing was run or written; send
    /// the work again after this long (an SQS consumer re-sends a fresh message and deletes
    /// this one, so waiting its turn never counts towards the dead-letter limit).
    Deferred(Duration),
    /// A sleeping job's message came before its wake time: send this message (the next hop of
    /// its wake-up chain) after this long, and delete the one handled.
    Rescheduled(WorkMessage, Duration),
}

/// How long a message waits when its tenant is at its running-jobs limit.
pub const DEFER_DELAY: Duration = Duration::from_secs(5);
/// When a task whose tool is not known yet is tried again (within
/// [`WorkerSettings::unknown_tool_grace`]).
pub const UNKNOWN_TOOL_RETRY: Duration = Duration::from_secs(60);

/// A failure the message should be retried for (the store or queue was unavailable).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Enqueueing a continuation failed.
    #[error(transparent)]
    Queue(#[from] crate::queue::QueueError),
}

static RUNS: AtomicU64 = AtomicU64::new(0);

/// Runs jobs.
pub struct Worker {
    store: Arc<dyn TaskStore>,
    queue: Arc<dyn WorkQueue>,
    tools: Arc<Registry>,
    settings: WorkerSettings,
    instance: String,
    slots: Option<Arc<dyn crate::quota::RunSlots>>,
}

/// Why a run stopped before its job said so.
enum Interrupt {
    /// `tasks/cancel` was asked.
    Cancel,
    /// Another run owns the task now (or it expired / vanished).
    Lost,
    /// The invocation's deadline is near.
    Deadline,
    /// The job's state no longer fits in a record.
    TooLarge,
}

fn internal(msg: &str) -> ErrorObject {
    ErrorObject::internal(msg)
}

impl Worker {
    /// A worker over the given ports.
    pub fn new(
        store: Arc<dyn TaskStore>,
        queue: Arc<dyn WorkQueue>,
        tools: Arc<Registry>,
        settings: WorkerSettings,
    ) -> Self {
        let mut r = [0u8; 6];
        crate::clock::random_bytes(&mut r);
        let instance = r.iter().map(|b| format!("{b:02x}")).collect();
        Self {
            store,
            queue,
            tools,
            settings,
            instance,
            slots: None,
        }
    }

    /// Holds each tenant to [`crate::quota::Quotas::max_running_jobs`] across processes
    /// through `slots` (the Lambda worker; runs with a deadline only).
    pub fn with_run_slots(mut self, slots: Arc<dyn crate::quota::RunSlots>) -> Self {
        self.slots = Some(slots);
        self
    }

    /// Advances the task named by `msg`; `deadline` is when this invocation must have handed
    /// over (None: no limit, as in the local server).
    pub async fn handle(
        &self,
        msg: &WorkMessage,
        deadline: Option<Instant>,
    ) -> Result<Outcome, WorkerError> {
        // A unique owner per run: a duplicate message in the same process is a different
        // owner, so it cannot share the lease.
        let owner = format!("{}-{}", self.instance, RUNS.fetch_add(1, Ordering::Relaxed));
        let (Some(slots), Some(deadline)) = (&self.slots, deadline) else {
            return self.handle_as(msg, &owner, deadline).await;
        };
        // The tenant's place first: a tenant at its limit waits its turn with nothing read or
        // written. The place is held until this invocation must have ended (plus a lease, for
        // the hand-over), so a run that dies frees it by itself.
        let until = now_ms()
            + deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64
            + self.settings.lease.as_millis() as u64;
        let max = self.settings.quotas.max_running_jobs;
        if !slots.take(&msg.tenant, &owner, max, until).await? {
            tracing::info!(task_id = %msg.task_id, max, "quota.deferred: the tenant runs as many jobs as it may");
            return Ok(Outcome::Deferred(DEFER_DELAY));
        }
        let outcome = self.handle_as(msg, &owner, Some(deadline)).await;
        if let Err(e) = slots.release(&msg.tenant, &owner).await {
            // It frees itself when its time is up.
            tracing::warn!(task_id = %msg.task_id, error = %e, "releasing a running place failed");
        }
        outcome
    }

    async fn handle_as(
        &self,
        msg: &WorkMessage,
        owner: &str,
        deadline: Option<Instant>,
    ) -> Result<Outcome, WorkerError> {
        let mut task = match self.acquire(msg, owner).await? {
            Ok(task) => task,
            Err(outcome) => return Ok(outcome),
        };
        let Some(tool) = self.tools.get(&task.tool).cloned() else {
            let err = internal("The tool of this task is no longer available");
            return self.finish(&mut task, owner, |t| t.fail(err.clone())).await;
        };
        // Read once per run, never written back: the record's writes during the run leave
        // them alone (records of earlier builds carry them inline).
        let arguments = match task.inline_arguments.clone() {
            Some(inline) => Some(inline),
            None => self.store.arguments(&task.tenant, &task.task_id).await?,
        };
        let Some(arguments) = arguments else {
            tracing::error!(task_id = %task.task_id, "task.arguments_missing");
            let err = internal("The task's arguments are missing from the task store");
            return self.finish(&mut task, owner, |t| t.fail(err.clone())).await;
        };
        let (started, name) = (Instant::now(), task.tool.clone());
        let outcome = self.run(tool, task, arguments, owner, deadline).await;
        let ran = started.elapsed().as_millis() as u64;
        metrics::global().time(metric::JOB_RUN_MS, &[("tool", &name)], ran);
        if matches!(outcome, Ok(Outcome::Continued)) {
            metrics::global().count(metric::JOB_HANDOVERS, &[("tool", &name)], 1);
        }
        outcome
    }

    /// Gives up on the task named by `msg` after the last allowed delivery of its message
    /// failed (an SQS consumer calls this instead of letting the message die quietly in the
    /// dead-letter queue), so no client polls it forever: a `working` task that no live run
    /// holds becomes `failed` (or `cancelled`, when that was asked). A task waiting for input
    /// needs no worker and a task under a live lease belongs to that run (and to the sweep,
    /// should it die), so both are left alone. Returns whether this call ended the task.
    pub async fn abandon(&self, msg: &WorkMessage) -> Result<bool, WorkerError> {
        loop {
            let Some(mut task) = self.store.get(&msg.tenant, &msg.task_id).await? else {
                return Ok(false);
            };
            let now = now_ms();
            if task.status != TaskStatus::Working
                || task.is_expired(now)
                || task.lease.as_ref().is_some_and(|l| l.expires_at_ms > now)
            {
                return Ok(false);
            }
            let ended = if task.cancel_requested {
                task.cancel().is_ok()
            } else {
                let err =
                    internal("The job could not be run and was stopped after repeated attempts");
                task.fail(err).is_ok()
            };
            if !ended {
                return Ok(false);
            }
            match self.store.update(&task).await {
                Ok(_) => {
                    tracing::warn!(task_id = %task.task_id, status = task.status.as_str(), "task.abandoned after its last delivery");
                    return Ok(true);
                }
                Err(StoreError::Conflict) => continue,
                Err(StoreError::TooLarge(_)) => {
                    let out = self
                        .fail_compact(&mut task, "The job could not be run")
                        .await?;
                    return Ok(matches!(out, Outcome::Finished(_)));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Reads the task and takes the lease; `Err(outcome)` when there is nothing to run.
    async fn acquire(
        &self,
        msg: &WorkMessage,
        owner: &str,
    ) -> Result<Result<TaskRecord, Outcome>, WorkerError> {
        loop {
            let Some(mut task) = self.store.get(&msg.tenant, &msg.task_id).await? else {
                return Ok(Err(Outcome::Dropped));
            };
            let now = now_ms();
            if task.status.is_terminal() || task.is_expired(now) {
                return Ok(Err(Outcome::Dropped));
            }
            // A live run owns the task, cancel asked or not: it sees the request at its next
            // check and writes `cancelled` once its step has stopped. Writing it here (a
            // duplicate delivery meanwhile) would say "stopped" while that step still runs.
            if task.status == TaskStatus::Working
                && let Some(l) = task.lease.as_ref().filter(|l| l.expires_at_ms > now)
            {
                return Ok(Err(Outcome::Busy(Duration::from_millis(
                    l.expires_at_ms - now,
                ))));
            }
            if task.cancel_requested {
                let _ = task.cancel();
                match self.store.update(&task).await {
                    Ok(_) => {
                        tracing::info!(task_id = %task.task_id, "task.cancelled");
                        return Ok(Err(Outcome::Finished(TaskStatus::Cancelled)));
                    }
                    Err(StoreError::Conflict) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            if task.status != TaskStatus::Working {
                return Ok(Err(Outcome::Dropped));
            }
            if let Some(l) = task.lease.as_ref().filter(|l| l.expires_at_ms > now) {
                return Ok(Err(Outcome::Busy(Duration::from_millis(
                    l.expires_at_ms - now,
                ))));
            }
            // A sleeping job's message came early (a delay past SQS's 15 minutes is a chain
            // of messages; a restart re-sends every working task): the next hop of its
            // wake-up, under a new sequence number taken with a conditional write, so that a
            // duplicate of this message (or of an older hop) finds itself stale and is dropped
            // instead of forking the chain.
            if let Some(wake) = task.wake_at_ms.filter(|w| *w > now) {
                if matches!(msg.kind, WorkKind::Wake(seq) if seq != task.wake_seq) {
                    return Ok(Err(Outcome::Dropped));
                }
                task.wake_seq = task.wake_seq.wrapping_add(1);
                match self.store.update(&task).await {
                    Ok(_) => {
                        let next = WorkMessage {
                            tenant: task.tenant.clone(),
                            task_id: task.task_id.clone(),
                            kind: WorkKind::Wake(task.wake_seq),
                        };
                        let delay = Duration::from_millis(wake - now);
                        return Ok(Err(Outcome::Rescheduled(next, delay)));
                    }
                    Err(StoreError::Conflict) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            if self.tools.get(&task.tool).is_none()
                && now.saturating_sub(task.created_at_ms)
                    < self.settings.unknown_tool_grace.as_millis() as u64
            {
                tracing::warn!(task_id = %task.task_id, tool = %task.tool, "tool.unknown_yet: given back to the queue");
                return Ok(Err(Outcome::Deferred(UNKNOWN_TOOL_RETRY)));
            }
            let took_over = task.lease.is_some();
            if took_over {
                // The previous run neither finished nor handed over: it died.
                task.interruptions += 1;
                task.deaths = task.deaths.saturating_add(1);
            }
            if task.interruptions > self.settings.max_interruptions
                || task.deaths > self.settings.max_deaths
            {
                tracing::warn!(task_id = %task.task_id, interruptions = task.interruptions, deaths = task.deaths, "giving up on a job that keeps dying");
                let err = internal("The job was interrupted too many times and was stopped");
                let out = self
                    .finish(&mut task, owner, |t| t.fail(err.clone()))
                    .await?;
                return Ok(Err(out));
            }
            task.lease = Some(Lease {
                owner: owner.to_owned(),
                expires_at_ms: now + self.settings.lease.as_millis() as u64,
            });
            // Awake: what it said while asleep ("waiting …") is over.
            if task.wake_at_ms.take().is_some() {
                task.status_message = None;
            }
            // Run again: the sweep's back-off starts over.
            task.sweeps = 0;
            task.sweep_after_ms = None;
            task.attempts += 1;
            match self.store.update(&task).await {
                Ok(v) => {
                    task.version = v;
                    let tool = [("tool", task.tool.as_str())];
                    if task.attempts == 1 {
                        let waited = now.saturating_sub(task.created_at_ms);
                        metrics::global().time(metric::TASK_START_WAIT_MS, &tool, waited);
                    }
                    if took_over {
                        metrics::global().count(metric::LEASE_TAKEOVERS, &tool, 1);
                    }
                    tracing::info!(task_id = %task.task_id, attempt = task.attempts, kind = ?msg.kind, "task.leased");
                    return Ok(Ok(task));
                }
                Err(StoreError::Conflict) => continue,
                Err(StoreError::TooLarge(_)) => {
                    let out = self
                        .fail_compact(&mut task, "The task is too large to run")
                        .await?;
                    return Ok(Err(out));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    async fn run(
        &self,
        tool: Arc<dyn Tool>,
        mut task: TaskRecord,
        arguments: Value,
        owner: &str,
        deadline: Option<Instant>,
    ) -> Result<Outcome, WorkerError> {
        let progress = ProgressSink::latest_only();
        let mut ctx = JobContext::new(
            arguments,
            task.checkpoint.clone(),
            task.input_responses.clone().into_iter().collect(),
            task.client_capabilities.clone(),
            progress.clone(),
        )
        .for_tenant(&task.tenant)
        .parking();
        // What earlier runs used, plus this run's, against the per-task quotas.
        let (base_cpu_ms, base_run_ms, run_started) = (task.cpu_ms, task.run_ms, Instant::now());
        // Keep the margin, but never more than half of the time left. And whatever the
        // deadline says, every run completes at least one step before it hands over: a job can
        // then never be handed on and on without progress (a step that outlives the
        // invocation is killed with it, and the runs that die are counted).
        let stop_at = deadline.map(|d| {
            let left = d.saturating_duration_since(Instant::now());
            if left < self.settings.deadline_margin {
                tracing::warn!(task_id = %task.task_id, left_ms = left.as_millis() as u64, "short invocation: running one step before handing over");
            }
            d - self.settings.deadline_margin.min(left / 2)
        });
        let mut stepped = false;
        let mut next_check = Instant::now() + self.settings.check_every;
        let mut last_save = Instant::now();
        loop {
            if stepped && stop_at.is_some_and(|s| Instant::now() >= s) {
                return self
                    .hand_over(&mut task, ctx.raw_checkpoint(), owner, deadline, None)
                    .await;
            }
            let step = {
                // A panicking step fails its task instead of taking the worker down with it.
                let fut = AssertUnwindSafe(tool.step(&ctx)).catch_unwind();
                tokio::pin!(fut);
                loop {
                    tokio::select! {
                        out = &mut fut => break Ok(out),
                        _ = tokio::time::sleep_until(next_check) => {
                            next_check = Instant::now() + self.settings.check_every;
                            // A hung store call must not hold the run past its hand-over
                            // once a step is done (the first step always completes: the
                            // promise that every run makes progress).
                            let by = if stepped { stop_at } else { None };
                            if let Some(i) = in_time(by, self.check(&mut task, owner, &progress)).await? {
                                break Err(i);
                            }
                        }
                        // Dropping the step loses only its own work: the checkpoint before it
                        // is what the continuation resumes from.
                        _ = sleep_until_opt(stop_at), if stepped => break Err(Interrupt::Deadline),
                    }
                }
            };
            stepped = true;
            let step = match step {
                Ok(Ok(s)) => s,
                Ok(Err(_panic)) => {
                    tracing::error!(task_id = %task.task_id, tool = %task.tool, "job step panicked");
                    let err = internal("The job failed unexpectedly");
                    return self.finish(&mut task, owner, |t| t.fail(err.clone())).await;
                }
                Err(i) => {
                    let cp = ctx.raw_checkpoint();
                    return self.interrupted(&mut task, owner, i, cp, deadline).await;
                }
            };
            task.cpu_ms = base_cpu_ms + ctx.cpu_used_ms();
            task.run_ms = base_run_ms + run_started.elapsed().as_millis() as u64;
            if matches!(step, Ok(Step::Continue(_)))
                && let Some(over) = self.over_quota(&task)
            {
                tracing::info!(task_id = %task.task_id, limit = over.limit.as_str(), "quota.stopped");
                let result = over.to_tool_result();
                return self
                    .finish(&mut task, owner, |t| t.complete(result.clone()))
                    .await;
            }
            match step {
                Ok(Step::Continue(cp)) => {
                    ctx.set_checkpoint(cp);
                    if last_save.elapsed() >= self.settings.checkpoint_every {
                        last_save = Instant::now();
                        task.checkpoint = ctx.raw_checkpoint().clone();
                        // Progress is saved: earlier deaths no longer count against the job
                        // (the limit is on runs that die without getting anywhere).
                        task.interruptions = 0;
                        if let Some(m) = progress.latest_message() {
                            task.status_message = Some(m);
                        }
                        if let Some(left) = ctx.remaining() {
                            let floor = self.settings.poll_interval_floor;
                            task.poll_interval_ms =
                                crate::jobs::poll_interval_for(left, floor).as_millis() as u64;
                        }
                        task.touch();
                        if let Some(i) =
                            in_time(stop_at, self.write_or_check(&mut task, owner)).await?
                        {
                            let cp = ctx.raw_checkpoint();
                            return self.interrupted(&mut task, owner, i, cp, deadline).await;
                        }
                        #[cfg(feature = "fault-injection")]
                        crate::fault::checkpoint_written(&task.task_id);
                    }
                    if Instant::now() >= next_check {
                        next_check = Instant::now() + self.settings.check_every;
                        if let Some(i) =
                            in_time(stop_at, self.check(&mut task, owner, &progress)).await?
                        {
                            let cp = ctx.raw_checkpoint();
                            return self.interrupted(&mut task, owner, i, cp, deadline).await;
                        }
                    }
                }
                Ok(Step::Sleep(cp, d)) if d < PARK_AFTER => {
                    // Too short to be worth a message: sleep in place, like a step.
                    ctx.set_checkpoint(cp);
                    tokio::time::sleep(d).await;
                }
                Ok(Step::Sleep(cp, d)) => {
                    ctx.set_checkpoint(cp);
                    if let Some(m) = progress.latest_message() {
                        task.status_message = Some(m);
                    }
                    let floor = self.settings.poll_interval_floor;
                    task.poll_interval_ms =
                        crate::jobs::poll_interval_for(d, floor).as_millis() as u64;
                    let wake = Wake {
                        at_ms: now_ms() + d.as_millis() as u64,
                        delay: d,
                    };
                    let cp = ctx.raw_checkpoint().clone();
                    return self
                        .hand_over(&mut task, &cp, owner, deadline, Some(wake))
                        .await;
                }
                Ok(Step::NeedInput(requests)) => {
                    if let Err(e) = task.clone().require_input(requests.clone()) {
                        tracing::error!(task_id = %task.task_id, error = %e, "job asked for input incorrectly");
                        let err = internal("The job asked for input incorrectly");
                        return self.finish(&mut task, owner, |t| t.fail(err.clone())).await;
                    }
                    let cp = ctx.raw_checkpoint().clone();
                    let out = self
                        .finish(&mut task, owner, move |t| {
                            t.checkpoint = cp.clone();
                            t.require_input(requests.clone())
                        })
                        .await?;
                    return Ok(match out {
                        Outcome::Finished(TaskStatus::InputRequired) => Outcome::WaitingForInput,
                        other => other,
                    });
                }
                Ok(Step::Done(result)) => {
                    return self
                        .finish(&mut task, owner, |t| t.complete(result.clone()))
                        .await;
                }
                Err(JobError::Tool(msg)) => {
                    let result = tool_error_result(msg);
                    return self
                        .finish(&mut task, owner, |t| t.complete(result.clone()))
                        .await;
                }
                Err(JobError::Protocol(err)) => {
                    return self.finish(&mut task, owner, |t| t.fail(err.clone())).await;
                }
                Err(JobError::InvalidParams(msg)) => {
                    let err = ErrorObject {
                        code: INVALID_PARAMS,
                        message: msg,
                        data: None,
                    };
                    return self.finish(&mut task, owner, |t| t.fail(err.clone())).await;
                }
            }
        }
    }

    /// The per-task limit a job has gone past, judging by what it used (this run included).
    fn over_quota(&self, task: &TaskRecord) -> Option<crate::quota::QuotaExceeded> {
        use crate::quota::{Limit, QuotaExceeded};
        let q = &self.settings.quotas;
        let stop = |limit, what: &str, used_ms: u64, max: Duration| QuotaExceeded {
            limit,
            max: max.as_secs_f64(),
            retry_after: None,
            message: format!(
                "The job was stopped: it used {:.0} s of {what}, more than the {:.0} s one task \
                 may use here. Ask for less work per call (split it into smaller calls).",
                used_ms as f64 / 1000.0,
                max.as_secs_f64()
            ),
        };
        let wall = q.max_task_wall + WALL_GRACE;
        if task.run_ms > wall.as_millis() as u64 {
            return Some(stop(
                Limit::TaskWallTime,
                "running time",
                task.run_ms,
                q.max_task_wall,
            ));
        }
        if task.cpu_ms > q.max_task_cpu.as_millis() as u64 {
            return Some(stop(
                Limit::TaskCpuTime,
                "CPU time",
                task.cpu_ms,
                q.max_task_cpu,
            ));
        }
        None
    }

    /// Re-reads the task: interrupts on cancellation or a lost lease; renews the lease and
    /// flushes progress when due.
    async fn check(
        &self,
        task: &mut TaskRecord,
        owner: &str,
        progress: &ProgressSink,
    ) -> Result<Option<Interrupt>, WorkerError> {
        let Some(stored) = self.store.get(&task.tenant, &task.task_id).await? else {
            return Ok(Some(Interrupt::Lost));
        };
        if let Some(i) = self.verdict(&stored, owner) {
            return Ok(Some(i));
        }
        let now = now_ms();
        let msg = progress.latest_message();
        let renew = stored
            .lease
            .as_ref()
            .is_none_or(|l| l.expires_at_ms < now + self.settings.lease.as_millis() as u64 / 2);
        adopt(task, stored);
        // Progress is flushed at most once per checkpoint interval: each write costs a store
        // write (a DynamoDB write unit), and clients poll far less often than steps report.
        let progress_due = msg.is_some()
            && msg != task.status_message
            && now.saturating_sub(task.last_updated_at_ms)
                >= self.settings.checkpoint_every.as_millis() as u64;
        if renew || progress_due {
            if let Some(m) = msg {
                task.status_message = Some(m);
            }
            task.touch();
            return self.write_or_check(task, owner).await;
        }
        Ok(None)
    }

    /// Whether this run must stop, judging by the stored record.
    fn verdict(&self, stored: &TaskRecord, owner: &str) -> Option<Interrupt> {
        if stored.cancel_requested && !stored.status.is_terminal() {
            return Some(Interrupt::Cancel);
        }
        let ours = stored.lease.as_ref().is_some_and(|l| l.owner == owner);
        if stored.status != TaskStatus::Working || !ours || stored.is_expired(now_ms()) {
            return Some(Interrupt::Lost);
        }
        None
    }

    /// Writes `task` (renewing the lease); on a lost race re-reads and decides.
    async fn write_or_check(
        &self,
        task: &mut TaskRecord,
        owner: &str,
    ) -> Result<Option<Interrupt>, WorkerError> {
        loop {
            task.lease = Some(Lease {
                owner: owner.to_owned(),
                expires_at_ms: now_ms() + self.settings.lease.as_millis() as u64,
            });
            match self.store.update(task).await {
                Ok(v) => {
                    task.version = v;
                    return Ok(None);
                }
                Err(StoreError::Conflict) => {
                    let Some(stored) = self.store.get(&task.tenant, &task.task_id).await? else {
                        return Ok(Some(Interrupt::Lost));
                    };
                    if let Some(i) = self.verdict(&stored, owner) {
                        return Ok(Some(i));
                    }
                    adopt(task, stored);
                }
                Err(StoreError::TooLarge(n)) => {
                    tracing::warn!(task_id = %task.task_id, bytes = n, "job state too large to save");
                    return Ok(Some(Interrupt::TooLarge));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Ends this run for `why`; a deadline hands the job over from `checkpoint` (the run's
    /// latest, saved or not).
    async fn interrupted(
        &self,
        task: &mut TaskRecord,
        owner: &str,
        why: Interrupt,
        checkpoint: &Value,
        deadline: Option<Instant>,
    ) -> Result<Outcome, WorkerError> {
        match why {
            Interrupt::Lost => Ok(Outcome::Superseded),
            Interrupt::Cancel => self.finish(task, owner, TaskRecord::cancel).await,
            Interrupt::TooLarge => {
                self.fail_compact(task, "The job's checkpoint grew too large to save")
                    .await
            }
            Interrupt::Deadline => {
                self.hand_over(task, checkpoint, owner, deadline, None)
                    .await
            }
        }
    }

    /// Applies a final change with a conditional write, re-reading on lost races. A cancel
    /// request seen on re-read wins over the change (the client asked first); a run that has
    /// lost its lease writes nothing.
    async fn finish<E>(
        &self,
        task: &mut TaskRecord,
        owner: &str,
        change: impl Fn(&mut TaskRecord) -> Result<(), E>,
    ) -> Result<Outcome, WorkerError> {
        loop {
            let mut next = task.clone();
            let applied = if next.cancel_requested && !next.status.is_terminal() {
                next.cancel().is_ok()
            } else {
                change(&mut next).is_ok()
            };
            if !applied {
                return Ok(Outcome::Superseded);
            }
            match self.store.update(&next).await {
                Ok(v) => {
                    next.version = v;
                    *task = next;
                    tracing::info!(task_id = %task.task_id, status = task.status.as_str(), "task.{}", task.status.as_str());
                    return Ok(Outcome::Finished(task.status));
                }
                Err(StoreError::Conflict) => {
                    let Some(stored) = self.store.get(&task.tenant, &task.task_id).await? else {
                        return Ok(Outcome::Superseded);
                    };
                    if stored.status.is_terminal() {
                        return Ok(Outcome::Superseded);
                    }
                    if let Some(Interrupt::Lost) = self.verdict(&stored, owner) {
                        // Another run owns the task now; its view wins.
                        return Ok(Outcome::Superseded);
                    }
                    adopt(task, stored);
                }
                Err(StoreError::TooLarge(n)) => {
                    tracing::warn!(task_id = %task.task_id, bytes = n, "result too large to store");
                    return self
                        .fail_compact(task, "The result is too large to store")
                        .await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Fails the task with a record stripped of everything large (checkpoint, answers,
    /// result), so the failure itself always fits.
    async fn fail_compact(
        &self,
        task: &mut TaskRecord,
        message: &str,
    ) -> Result<Outcome, WorkerError> {
        loop {
            let mut next = task.clone();
            next.checkpoint = Value::Null;
            next.input_responses.clear();
            next.result = None;
            next.inline_arguments = None;
            if next.fail(internal(message)).is_err() {
                return Ok(Outcome::Superseded);
            }
            match self.store.update(&next).await {
                Ok(v) => {
                    next.version = v;
                    *task = next;
                    tracing::info!(task_id = %task.task_id, "task.failed");
                    return Ok(Outcome::Finished(TaskStatus::Failed));
                }
                Err(StoreError::Conflict) => {
                    match self.store.get(&task.tenant, &task.task_id).await? {
                        Some(stored) if !stored.status.is_terminal() => *task = stored,
                        _ => return Ok(Outcome::Superseded),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Saves the checkpoint, releases the lease and enqueues a continuation — at once, or, for
    /// a sleeping job (`wake`), delayed until it wakes (parked: nothing holds it meanwhile) —
    /// in time for the invocation to answer before its `deadline`: a store or queue call that
    /// hangs (each may take its client's whole operation timeout) fails the hand-over instead,
    /// so the batch's other messages are still reported, and this one is delivered again
    /// (resuming from the last checkpoint saved).
    async fn hand_over(
        &self,
        task: &mut TaskRecord,
        checkpoint: &Value,
        owner: &str,
        deadline: Option<Instant>,
        wake: Option<Wake>,
    ) -> Result<Outcome, WorkerError> {
        let saved = self.save_and_continue(task, checkpoint, owner, wake);
        match before(answer_by(deadline), saved).await {
            Some(out) => out,
            None => {
                tracing::warn!(task_id = %task.task_id, "worker.handover_timed_out");
                Err(WorkerError::Store(StoreError::Backend(
                    "the hand-over did not finish before the invocation's deadline".into(),
                )))
            }
        }
    }

    async fn save_and_continue(
        &self,
        task: &mut TaskRecord,
        checkpoint: &Value,
        owner: &str,
        wake: Option<Wake>,
    ) -> Result<Outcome, WorkerError> {
        loop {
            let mut next = task.clone();
            next.checkpoint = checkpoint.clone();
            next.lease = None;
            next.wake_at_ms = wake.map(|w| w.at_ms);
            if wake.is_some() {
                next.wake_seq = next.wake_seq.wrapping_add(1);
            }
            next.touch();
            match self.store.update(&next).await {
                Ok(v) => {
                    next.version = v;
                    *task = next;
                    break;
                }
                Err(StoreError::Conflict) => {
                    let Some(stored) = self.store.get(&task.tenant, &task.task_id).await? else {
                        return Ok(Outcome::Superseded);
                    };
                    match self.verdict(&stored, owner) {
                        Some(Interrupt::Cancel) => {
                            adopt(task, stored);
                            return self.finish(task, owner, TaskRecord::cancel).await;
                        }
                        Some(_) => return Ok(Outcome::Superseded),
                        None => adopt(task, stored),
                    }
                }
                Err(StoreError::TooLarge(_)) => {
                    return self
                        .fail_compact(task, "The job's checkpoint grew too large to save")
                        .await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let delay = wake.map_or(Duration::ZERO, |w| w.delay);
        let kind = match wake {
            Some(_) => WorkKind::Wake(task.wake_seq),
            None => WorkKind::Continue,
        };
        self.queue
            .enqueue(
                WorkMessage {
                    tenant: task.tenant.clone(),
                    task_id: task.task_id.clone(),
                    kind,
                },
                delay,
            )
            .await?;
        if wake.is_some() {
            tracing::info!(task_id = %task.task_id, sleep_ms = delay.as_millis() as u64, "task.sleeping");
            return Ok(Outcome::Sleeping(delay));
        }
        tracing::info!(task_id = %task.task_id, "task.continued");
        Ok(Outcome::Continued)
    }
}

/// Takes the stored record as the new base, keeping this run's checkpoint and usage counts
/// (which only this run writes while it holds the lease).
fn adopt(task: &mut TaskRecord, stored: TaskRecord) {
    let ours = std::mem::replace(task, stored);
    if task.status == TaskStatus::Working {
        task.checkpoint = ours.checkpoint;
        task.cpu_ms = ours.cpu_ms;
        task.run_ms = ours.run_ms;
    }
}

/// A sleep shorter than this is slept in place: a message, a write and an invocation cost
/// more than a second of the run it would free.
pub const PARK_AFTER: Duration = Duration::from_secs(1);

/// When a parked job wakes, and the delay of the message that brings it back.
#[derive(Debug, Clone, Copy)]
struct Wake {
    at_ms: u64,
    delay: Duration,
}

/// What a hand-over leaves of the invocation for its answer (the batch response).
const ANSWER_SLACK: Duration = Duration::from_millis(250);

/// When a hand-over must have ended to leave the invocation [`ANSWER_SLACK`] for its answer;
/// `None` (no bound) when that leaves less than [`MIN_HANDOVER`]: a bound tighter than a
/// healthy store and queue call would fail healthy hand-overs, and only a short invocation
/// (the normal margin is 5 s) gets there, where Lambda's own deadline is the bound.
fn answer_by(deadline: Option<Instant>) -> Option<Instant> {
    let now = Instant::now();
    deadline
        .map(|d| d - ANSWER_SLACK.min(d.saturating_duration_since(now)))
        .filter(|by| by.saturating_duration_since(now) >= MIN_HANDOVER)
}

/// See [`answer_by`].
const MIN_HANDOVER: Duration = Duration::from_secs(1);

/// A lease check's or a save's verdict, or [`Interrupt::Deadline`] when `by` passes first: a
/// hung store call then ends in a hand-over instead of holding the run.
async fn in_time(
    by: Option<Instant>,
    f: impl std::future::Future<Output = Result<Option<Interrupt>, WorkerError>>,
) -> Result<Option<Interrupt>, WorkerError> {
    before(by, f).await.unwrap_or(Ok(Some(Interrupt::Deadline)))
}

/// `f`, unless `by` passes first (`None`: then the call is abandoned). Without `by`, `f`.
async fn before<T>(by: Option<Instant>, f: impl std::future::Future<Output = T>) -> Option<T> {
    match by {
        Some(at) => tokio::time::timeout_at(at, f).await.ok(),
        None => Some(f.await),
    }
}

/// Sleeps until `at`, or forever when there is no deadline.
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use async_trait::async_trait;
    use serde_json::json;

    use super::*;
    use crate::engine::{Engine, TaskSettings};
    use crate::jobs::text_result;
    use crate::queue::LocalQueue;
    use crate::store::memory::MemoryStore;
    use crate::tools::{Policy, ToolDef};

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
            .create_task("t", "count", args, Value::Null, json!({}))
            .await
            .unwrap();
        r.rx.recv().await.unwrap()
    }

    async fn status(r: &Rig, msg: &WorkMessage) -> TaskRecord {
        r.store
            .get(&msg.tenant, &msg.task_id)
            .await
            .unwrap()
            .unwrap()
    }

    #[tokio::test]
    async fn a_duplicate_message_never_runs_the_job_twice() {
        let mut r = rig(fast());
        let msg = create(&mut r, json!({"n": 5})).await;
        let (a, b) = tokio::join!(r.worker.handle(&msg, None), r.worker.handle(&msg, None));
        let outs = [a.unwrap(), b.unwrap()];
        let finished = outs
            .iter()
            .filter(|o| **o == Outcome::Finished(TaskStatus::Completed))
            .count();
        assert_eq!(finished, 1, "{outs:?}");
        assert!(
            outs.iter().any(|o| matches!(o, Outcome::Busy(_))),
            "the duplicate finds the lease held: {outs:?}"
        );
        assert_eq!(r.worker.handle(&msg, None).await.unwrap(), Outcome::Dropped);
        assert_eq!(r.finished.load(Ordering::SeqCst), 1);
    }

    /// The 2025-11-25 cancel marks a task held by a live run `cancelled` at once; the run
    /// stops at its next check and writes nothing over it, and the job never finishes.
    #[tokio::test]
    async fn a_cancel_at_once_under_a_live_run_stops_it_without_a_second_write() {
        let mut r = rig(fast());
        let msg = create(&mut r, json!({"n": 1000, "ms": 5})).await;
        let cancel = async {
            // Let the run take the lease and save a few checkpoints first.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let held = status(&r, &msg).await;
            assert!(held.lease.is_some(), "a run holds the task");
            r.engine.cancel_at_once("t", &msg.task_id).await.unwrap();
            let t = status(&r, &msg).await;
            assert_eq!(
                t.status,
                TaskStatus::Cancelled,
                "cancelled before the answer"
            );
            t
        };
        let (out, cancelled) = tokio::join!(r.worker.handle(&msg, None), cancel);
        assert!(
            !matches!(out, Ok(Outcome::Finished(TaskStatus::Completed))),
            "{out:?}"
        );
        assert_eq!(
            status(&r, &msg).await,
            cancelled,
            "the run wrote nothing after"
        );
        assert_eq!(
            r.finished.load(Ordering::SeqCst),
            0,
            "the job did not finish"
        );
        assert_eq!(r.worker.handle(&msg, None).await.unwrap(), Outcome::Dropped);
    }

    #[tokio::test]
    async fn cancel_racing_completion_ends_in_exactly_one_terminal_state() {
        let mut r = rig(fast());
        let mut seen = std::collections::HashSet::new();
        for i in 0..60 {
            let msg = create(&mut r, json!({"n": 2, "ms": i % 7})).await;
            let delay = Duration::from_millis(i % 20);
            let cancel = async {
                tokio::time::sleep(delay).await;
                r.engine.cancel("t", &msg.task_id).await.unwrap();
            };
            let (out, ()) = tokio::join!(r.worker.handle(&msg, None), cancel);
            out.unwrap();
            // A cancel that lands after the worker stopped leaves the flag for the next
            // delivery, which must settle it too.
            r.worker.handle(&msg, None).await.unwrap();
            let t = status(&r, &msg).await;
            assert!(t.status.is_terminal(), "{:?}", t.status);
            assert_eq!(t.result.is_some(), t.status == TaskStatus::Completed);
            seen.insert(t.status);
            let before = t.clone();
            r.engine.cancel("t", &msg.task_id).await.unwrap();
            r.worker.handle(&msg, None).await.unwrap();
            assert_eq!(
                status(&r, &msg).await,
                before,
                "terminal tasks never change"
            );
        }
        assert!(seen.contains(&TaskStatus::Cancelled));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_hands_over_to_a_continuation_that_resumes() {
        let mut r = rig(fast());
        let msg = create(&mut r, json!({"n": 20, "ms": 20})).await;
        let mut hops = 0;
        let mut next = msg.clone();
        loop {
            let deadline = Instant::now() + Duration::from_millis(150);
            match r.worker.handle(&next, Some(deadline)).await.unwrap() {
                Outcome::Continued => {
                    hops += 1;
                    next = r.rx.recv().await.unwrap();
                    assert_eq!(next.kind, WorkKind::Continue);
                    let t = status(&r, &msg).await;
                    assert!(
                        t.lease.is_none(),
                        "the lease is released for the next invocation"
                    );
                    assert!(t.checkpoint.as_u64().unwrap() > 0);
                }
                Outcome::Finished(s) => {
                    assert_eq!(s, TaskStatus::Completed);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(hops >= 3, "needed {hops} continuations");
        assert_eq!(r.finished.load(Ordering::SeqCst), 1);
    }

    // Real time: leases are wall-clock (they are shared between machines).
    #[tokio::test]
    async fn a_crashed_run_resumes_from_its_last_checkpoint_after_the_lease_expires() {
        let mut r = rig(WorkerSettings {
            lease: Duration::from_secs(1),
            ..fast()
        });
        let msg = create(&mut r, json!({"n": 30, "ms": 10})).await;
        let worker = r.worker.clone();
        let m = msg.clone();
        let crashed = tokio::spawn(async move { worker.handle(&m, None).await });
        tokio::time::sleep(Duration::from_millis(120)).await;
        crashed.abort(); // the "process" dies mid-step
        let _ = crashed.await;
        let t = status(&r, &msg).await;
        let saved = t.checkpoint.as_u64().unwrap();
        assert!(saved > 0);
        // While the dead run's lease is live, a redelivery is told to come back later...
        assert!(matches!(
            r.worker.handle(&msg, None).await.unwrap(),
            Outcome::Busy(_)
        ));
        // ...and once it expires, the job resumes and completes once.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let out = r.worker.handle(&msg, None).await.unwrap();
        assert_eq!(out, Outcome::Finished(TaskStatus::Completed));
        let t = status(&r, &msg).await;
        assert_eq!(t.attempts, 2);
        assert_eq!(
            t.interruptions, 0,
            "the dead run was counted, then progress reset the count"
        );
        assert_eq!(r.finished.load(Ordering::SeqCst), 1);
    }

    // Virtual time: the bound below is the check interval's contract, not a speed claim.
    #[tokio::test(start_paused = true)]
    async fn cancellation_is_seen_by_a_running_job_within_one_check_interval() {
        let mut r = rig(WorkerSettings {
            check_every: Duration::from_millis(100),
            ..fast()
        });
        let msg = create(&mut r, json!({"n": 1, "ms": 60_000})).await;
        let worker = r.worker.clone();
        let m = msg.clone();
        let run = tokio::spawn(async move { worker.handle(&m, None).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let asked = Instant::now();
        r.engine.cancel("t", &msg.task_id).await.unwrap();
        let out = run.await.unwrap().unwrap();
        assert_eq!(out, Outcome::Finished(TaskStatus::Cancelled));
        assert!(
            asked.elapsed() <= Duration::from_millis(100),
            "{:?}",
            asked.elapsed()
        );
    }

    /// The job gets the arguments kept beside the record; a record of an earlier build runs
    /// with the arguments inside it; a task whose arguments are gone fails, saying so.
    #[tokio::test]
    async fn a_run_reads_its_arguments_once_from_wherever_they_were_stored() {
        let mut r = rig(fast());
        let msg = create(&mut r, json!({"n": 2})).await;
        let out = r.worker.handle(&msg, None).await.unwrap();
        assert_eq!(out, Outcome::Finished(TaskStatus::Completed));
        let done = status(&r, &msg).await;
        assert_eq!(done.result.unwrap()["content"][0]["text"], "counted to 2");
        assert_eq!(done.inline_arguments, None);

        let mut old = TaskRecord::new(
            "t",
            crate::task::new_task_id(),
            "count",
            None,
            1000,
            json!({}),
        );
        old.inline_arguments = Some(json!({"n": 4}));
        r.store.create(&old, &Value::Null).await.unwrap();
        let msg = WorkMessage {
            tenant: "t".into(),
            task_id: old.task_id.clone(),
            kind: WorkKind::Start,
        };
        r.worker.handle(&msg, None).await.unwrap();
        let done = status(&r, &msg).await;
        assert_eq!(done.result.unwrap()["content"][0]["text"], "counted to 4");

        let msg = create(&mut r, json!({"n": 2})).await;
        // Gone from the store (a hand edit, a half-restored backup): a clear failure.
        r.store.lose_arguments(&msg.tenant, &msg.task_id);
        let out = r.worker.handle(&msg, None).await.unwrap();
        assert_eq!(out, Outcome::Finished(TaskStatus::Failed));
        let failed = status(&r, &msg).await;
        assert!(
            failed
                .error
                .unwrap()
                .message
                .contains("arguments are missing"),
            "the failure names the cause"
        );
    }

    #[tokio::test]
    async fn messages_for_missing_or_finished_tasks_are_dropped() {
        let mut r = rig(fast());
        let ghost = WorkMessage {
            tenant: "t".into(),
            task_id: "tsk_ghost".into(),
            kind: WorkKind::Start,
        };
        assert_eq!(
            r.worker.handle(&ghost, None).await.unwrap(),
            Outcome::Dropped
        );
        let msg = create(&mut r, json!({"n": 1})).await;
        r.worker.handle(&msg, None).await.unwrap();
        let foreign = WorkMessage {
            tenant: "other".into(),
            ..msg.clone()
        };
        assert_eq!(
            r.worker.handle(&foreign, None).await.unwrap(),
            Outcome::Dropped
        );
        assert_eq!(r.worker.handle(&msg, None).await.unwrap(), Outcome::Dropped);
    }

    #[tokio::test]
    async fn a_panicking_step_fails_its_task_instead_of_the_worker() {
        let mut r = rig(fast());
        r.engine
            .create_task("t", "boom", json!({}), Value::Null, json!({}))
            .await
            .unwrap();
        let msg = r.rx.recv().await.unwrap();
        let out = r.worker.handle(&msg, None).await.unwrap();
        assert_eq!(out, Outcome::Finished(TaskStatus::Failed));
        let t = status(&r, &msg).await;
        assert_eq!(t.error.unwrap().code, crate::protocol::INTERNAL_ERROR);
        assert!(t.lease.is_none());
    }

    #[tokio::test]
    async fn abandon_fails_only_working_tasks_that_no_live_run_holds() {
        let mut r = rig(fast());
        // Unheld and working: failed, once.
        let msg = create(&mut r, json!({"n": 1})).await;
        assert!(r.worker.abandon(&msg).await.unwrap());
        let t = status(&r, &msg).await;
        assert_eq!(t.status, TaskStatus::Failed);
        assert_eq!(t.error.unwrap().code, crate::protocol::INTERNAL_ERROR);
        assert!(!r.worker.abandon(&msg).await.unwrap(), "terminal stays put");

        // Held by a live run: left to that run.
        let msg = create(&mut r, json!({"n": 1})).await;
        let mut t = status(&r, &msg).await;
        t.lease = Some(Lease {
            owner: "alive".into(),
            expires_at_ms: now_ms() + 60_000,
        });
        r.store.update(&t).await.unwrap();
        assert!(!r.worker.abandon(&msg).await.unwrap());
        assert_eq!(status(&r, &msg).await.status, TaskStatus::Working);

        // A requested cancel wins over the failure.
        let msg = create(&mut r, json!({"n": 1})).await;
        let mut t = status(&r, &msg).await;
        t.cancel_requested = true;
        r.store.update(&t).await.unwrap();
        assert!(r.worker.abandon(&msg).await.unwrap());
        assert_eq!(status(&r, &msg).await.status, TaskStatus::Cancelled);

        // Gone: nothing to do.
        let ghost = WorkMessage {
            task_id: "tsk_ghost".into(),
            ..msg
        };
        assert!(!r.worker.abandon(&ghost).await.unwrap());
    }

    #[tokio::test]
    async fn a_job_that_keeps_dying_is_failed_not_retried_forever() {
        let mut r = rig(fast());
        let max = fast().max_interruptions;
        for (died_before, want) in [(max - 1, TaskStatus::Completed), (max, TaskStatus::Failed)] {
            let msg = create(&mut r, json!({"n": 1})).await;
            // The last run died holding a lease that has since expired.
            let mut t = status(&r, &msg).await;
            t.interruptions = died_before;
            t.lease = Some(Lease {
                owner: "dead".into(),
                expires_at_ms: 1,
            });
            r.store.update(&t).await.unwrap();
            let out = r.worker.handle(&msg, None).await.unwrap();
            assert_eq!(out, Outcome::Finished(want), "after {died_before} deaths");
            // A run that saves progress clears the count; one that is refused keeps it.
            let want = if want == TaskStatus::Failed {
                died_before + 1
            } else {
                0
            };
            assert_eq!(status(&r, &msg).await.interruptions, want);
        }
    }

    /// A job that saves a checkpoint and then kills its process, every run: the in-a-row
    /// count is reset each time, the total is not, and bounds it.
    #[tokio::test]
    async fn a_job_that_dies_after_every_checkpoint_is_failed_in_the_end() {
        let mut r = rig(fast());
        let max = fast().max_deaths;
        for (died_before, want) in [(max - 1, TaskStatus::Completed), (max, TaskStatus::Failed)] {
            let msg = create(&mut r, json!({"n": 1})).await;
            let mut t = status(&r, &msg).await;
            t.interruptions = 0; // it saved progress before each death
            t.deaths = died_before;
            t.lease = Some(Lease {
                owner: "dead".into(),
                expires_at_ms: 1,
            });
            r.store.update(&t).await.unwrap();
            let out = r.worker.handle(&msg, None).await.unwrap();
            assert_eq!(out, Outcome::Finished(want), "after {died_before} deaths");
            assert_eq!(status(&r, &msg).await.deaths, died_before + 1);
        }
    }

    /// A task whose tool this worker does not know (yet): within the grace after its creation
    /// it goes back to the queue untouched; after it, it fails saying why.
    #[tokio::test]
    async fn an_unknown_tool_is_waited_for_then_failed() {
        let r = rig(WorkerSettings {
            unknown_tool_grace: Duration::from_secs(600),
            ..fast()
        });
        let young = TaskRecord::new(
            "t",
            crate::task::new_task_id(),
            "newer",
            None,
            1000,
            json!({}),
        );
        r.store.create(&young, &json!({})).await.unwrap();
        let msg = |t: &TaskRecord| WorkMessage {
            tenant: "t".into(),
            task_id: t.task_id.clone(),
            kind: WorkKind::Start,
        };
        let out = r.worker.handle(&msg(&young), None).await.unwrap();
        assert_eq!(out, Outcome::Deferred(UNKNOWN_TOOL_RETRY));
        let kept = status(&r, &msg(&young)).await;
        assert_eq!(kept, young, "nothing written while waiting for the tool");

        let mut old = TaskRecord::new(
            "t",
            crate::task::new_task_id(),
            "newer",
            None,
            1000,
            json!({}),
        );
        old.created_at_ms -= 601_000;
        r.store.create(&old, &json!({})).await.unwrap();
        let out = r.worker.handle(&msg(&old), None).await.unwrap();
        assert_eq!(out, Outcome::Finished(TaskStatus::Failed));
        let failed = status(&r, &msg(&old)).await;
        assert!(
            failed
                .error
                .unwrap()
                .message
                .contains("no longer available")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_invocation_shorter_than_the_margin_still_makes_progress() {
        let mut r = rig(WorkerSettings {
            deadline_margin: Duration::from_secs(5),
            ..fast()
        });
        let msg = create(&mut r, json!({"n": 1000, "ms": 10})).await;
        // One second left, a five-second margin: this used to hand over at once, without a
        // step, on every delivery.
        let out = r
            .worker
            .handle(&msg, Some(Instant::now() + Duration::from_secs(1)))
            .await
            .unwrap();
        assert_eq!(out, Outcome::Continued);
        let done = status(&r, &msg).await.checkpoint.as_u64().unwrap_or(0);
        assert!(done > 0, "no progress before the hand-over");
    }

    /// Sleeps a second and a half (long enough to be parked), then finishes.
    struct Sleeper {
        def: ToolDef,
    }

    #[async_trait]
    impl Tool for Sleeper {
        fn def(&self) -> &ToolDef {
            &self.def
        }
        async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
            assert!(ctx.sleep_is_free(), "a task's sleep parks it");
            match ctx.raw_checkpoint() {
                Value::Null => Ok(Step::Sleep(json!("woke"), Duration::from_millis(1500))),
                _ => Ok(Step::Done(text_result("slept"))),
            }
        }
    }

    /// A store, engine and worker running only [`Sleeper`], and the queue's receiving end.
    fn sleeper_rig() -> (
        Arc<MemoryStore>,
        Engine,
        Worker,
        tokio::sync::mpsc::UnboundedReceiver<WorkMessage>,
    ) {
        let store = Arc::new(MemoryStore::new());
        let (queue, rx) = LocalQueue::new();
        let queue = Arc::new(queue);
        let def = ToolDef {
            name: "sleeper",
            description: "test tool",
            input_schema: json!({"type": "object"}),
            policy: Policy::Optional,
        };
        let tools = Arc::new(Registry::new(vec![
            Arc::new(Sleeper { def }) as Arc<dyn Tool>
        ]));
        let engine = Engine::new(store.clone(), queue.clone(), TaskSettings::default());
        let worker = Worker::new(store.clone(), queue, tools, fast());
        (store, engine, worker, rx)
    }

    // Real time: wake times are wall-clock times, which a paused tokio clock does not move.
    #[tokio::test]
    async fn a_sleeping_job_is_parked_and_early_messages_are_given_back() {
        let (store, engine, worker, mut rx) = sleeper_rig();
        engine
            .create_task("t", "sleeper", json!({}), Value::Null, json!({}))
            .await
            .unwrap();
        let msg = rx.recv().await.unwrap();
        let started = Instant::now();
        let out = worker.handle(&msg, None).await.unwrap();
        assert_eq!(out, Outcome::Sleeping(Duration::from_millis(1500)));
        let parked = store.get("t", &msg.task_id).await.unwrap().unwrap();
        assert_eq!(parked.status, TaskStatus::Working);
        assert!(parked.lease.is_none(), "nothing holds a sleeping job");
        assert_eq!(parked.checkpoint, json!("woke"));
        assert!(parked.wake_at_ms.is_some());
        // A message that comes early (a restart's recovery, a chained delay) is given back
        // until the task wakes, with nothing written.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let hop = match worker.handle(&msg, None).await.unwrap() {
            Outcome::Rescheduled(next, d) => {
                assert!(
                    d <= Duration::from_millis(1000) && d > Duration::from_millis(500),
                    "{d:?}"
                );
                assert_eq!(next.kind, WorkKind::Wake(parked.wake_seq + 1));
                next
            }
            other => panic!("expected the next hop, got {other:?}"),
        };
        // The park's own wake-up message is now of an older sequence: stale, dropped. So is a
        // duplicate of the hop once it has been taken: the chain never forks.
        let old_wake = WorkMessage {
            kind: WorkKind::Wake(parked.wake_seq),
            ..msg.clone()
        };
        assert_eq!(
            worker.handle(&old_wake, None).await.unwrap(),
            Outcome::Dropped
        );
        let Outcome::Rescheduled(next_hop, _) = worker.handle(&hop, None).await.unwrap() else {
            panic!("the current hop continues the chain");
        };
        assert_eq!(worker.handle(&hop, None).await.unwrap(), Outcome::Dropped);
        assert_eq!(next_hop.kind, WorkKind::Wake(parked.wake_seq + 2));
        // The delayed message brings it back when the time is up.
        let woke = rx.recv().await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(1500));
        let out = worker.handle(&woke, None).await.unwrap();
        assert_eq!(out, Outcome::Finished(TaskStatus::Completed));
    }

    #[tokio::test]
    async fn a_sleeping_job_is_cancelled_at_once() {
        let (_store, engine, worker, mut rx) = sleeper_rig();
        let task = engine
            .create_task("t", "sleeper", json!({}), Value::Null, json!({}))
            .await
            .unwrap();
        let msg = rx.recv().await.unwrap();
        worker.handle(&msg, None).await.unwrap();
        engine.cancel("t", &task.task_id).await.unwrap();
        let now = engine.get("t", &task.task_id).await.unwrap();
        assert_eq!(now.status, TaskStatus::Cancelled, "no run to wait for");
        // Its wake-up finds it over.
        let woke = rx.recv().await.unwrap();
        assert_eq!(worker.handle(&woke, None).await.unwrap(), Outcome::Dropped);
    }

    /// A store whose writes hang for ever after the first `ok` of them (a connection the
    /// other side accepted and never answers, within the client's operation timeout).
    struct HangsAfter {
        inner: MemoryStore,
        ok: usize,
        writes: AtomicUsize,
    }

    #[async_trait]
    impl TaskStore for HangsAfter {
        async fn create(&self, task: &TaskRecord, args: &Value) -> Result<(), StoreError> {
            self.inner.create(task, args).await
        }
        async fn get(&self, tenant: &str, id: &str) -> Result<Option<TaskRecord>, StoreError> {
            if self.writes.load(Ordering::SeqCst) > self.ok {
                std::future::pending::<()>().await;
            }
            self.inner.get(tenant, id).await
        }
        async fn arguments(&self, tenant: &str, id: &str) -> Result<Option<Value>, StoreError> {
            self.inner.arguments(tenant, id).await
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
        async fn delete(&self, tenant: &str, id: &str) -> Result<(), StoreError> {
            self.inner.delete(tenant, id).await
        }
    }

    /// A store call that hangs mid-run (a checkpoint write, then the hand-over's own) never
    /// holds the run past its invocation: the worker gives up on it and answers in time, so the
    /// batch's other messages are still reported.
    #[tokio::test(start_paused = true)]
    async fn a_hung_store_call_never_holds_a_run_past_its_deadline() {
        let store = Arc::new(HangsAfter {
            inner: MemoryStore::new(),
            ok: 3,
            writes: AtomicUsize::new(0),
        });
        let (queue, mut rx) = LocalQueue::new();
        let queue = Arc::new(queue);
        let counter = Arc::new(Counter {
            def: ToolDef {
                name: "count",
                description: "test tool",
                input_schema: json!({"type": "object"}),
                policy: Policy::Optional,
            },
            finished: Arc::new(AtomicUsize::new(0)),
        });
        let tools = Arc::new(Registry::new(vec![counter as Arc<dyn Tool>]));
        let engine = Engine::new(store.clone(), queue.clone(), TaskSettings::default());
        // The default margin: the hand-over starts 5 s before the deadline.
        let settings = WorkerSettings {
            deadline_margin: Duration::from_secs(5),
            ..fast()
        };
        let worker = Worker::new(store, queue, tools, settings);
        engine
            .create_task(
                "t",
                "count",
                json!({"n": 100_000, "ms": 10}),
                Value::Null,
                json!({}),
            )
            .await
            .unwrap();
        let msg = rx.recv().await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let out =
            tokio::time::timeout(Duration::from_secs(60), worker.handle(&msg, Some(deadline)))
                .await
                .expect("the run ends although the store hangs");
        assert!(Instant::now() < deadline, "answered in time");
        assert!(out.is_err(), "the message is retried: {out:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_already_past_still_gets_one_step() {
        let mut r = rig(fast());
        let msg = create(&mut r, json!({"n": 1000, "ms": 10})).await;
        let out = r.worker.handle(&msg, Some(Instant::now())).await.unwrap();
        assert_eq!(out, Outcome::Continued);
        assert_eq!(status(&r, &msg).await.checkpoint.as_u64(), Some(1));
    }

    #[tokio::test]
    async fn a_job_past_its_cpu_quota_is_stopped_with_the_quota_result() {
        let mut settings = fast();
        settings.quotas.max_task_cpu = Duration::from_millis(100);
        let mut r = rig(settings);
        let msg = create(&mut r, json!({"n": 1000, "ms": 1, "cpu_ms": 30})).await;
        let out = r.worker.handle(&msg, None).await.unwrap();
        assert_eq!(out, Outcome::Finished(TaskStatus::Completed));
        let t = status(&r, &msg).await;
        let result = t.result.clone().unwrap();
        assert_eq!(result["isError"], true, "{result}");
        assert_eq!(result["_meta"]["mcp-tasks/quota"]["limit"], "task_cpu_time");
        assert!(t.cpu_ms > 100 && t.cpu_ms < 1000, "cpu_ms {}", t.cpu_ms);
        let steps: u64 = serde_json::from_value(t.checkpoint.clone()).unwrap_or(0);
        assert!(steps < 10, "stopped after a few steps, not {steps}");
        assert_eq!(r.finished.load(Ordering::SeqCst), 0, "never ran to its end");
    }

    #[tokio::test]
    async fn used_cpu_survives_a_hand_over() {
        let mut settings = fast();
        settings.quotas.max_task_cpu = Duration::from_secs(60);
        let mut r = rig(settings);
        let msg = create(&mut r, json!({"n": 1000, "ms": 1, "cpu_ms": 20})).await;
        // A short invocation: a few steps, then a hand-over that saves what was used.
        let deadline = Instant::now() + Duration::from_millis(150);
        let out = r.worker.handle(&msg, Some(deadline)).await.unwrap();
        assert_eq!(out, Outcome::Continued);
        let t = status(&r, &msg).await;
        assert!(t.cpu_ms >= 20, "cpu_ms {}", t.cpu_ms);
        assert!(
            t.run_ms >= t.cpu_ms,
            "run_ms {} cpu_ms {}",
            t.run_ms,
            t.cpu_ms
        );
    }

    #[tokio::test]
    async fn a_duplicate_during_a_cancel_never_writes_cancelled_under_a_live_run() {
        let mut r = rig(fast());
        let msg = create(&mut r, json!({"n": 1000, "ms": 5})).await;
        let mut t = status(&r, &msg).await;
        // Another run holds the task, and the client asked to cancel.
        t.lease = Some(Lease {
            owner: "the-other-run".into(),
            expires_at_ms: now_ms() + 60_000,
        });
        t.cancel_requested = true;
        r.store.update(&t).await.unwrap();
        let out = r.worker.handle(&msg, None).await.unwrap();
        assert!(matches!(out, Outcome::Busy(_)), "{out:?}");
        let after = status(&r, &msg).await;
        assert_eq!(
            after.status,
            TaskStatus::Working,
            "the live run writes cancelled itself"
        );
        assert_eq!(after.lease.unwrap().owner, "the-other-run");
    }
}
