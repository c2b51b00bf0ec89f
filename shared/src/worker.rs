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
//!
//! Where things are: taking the task and its lease in `lease`; the run in `run`, whose steps
//! the job runner ([`crate::jobs::runner`]) takes against the store (its saves and checks);
//! how a run ends (finished, failed, interrupted, asking, handed over, parked) in `finish`; and
//! the deadline arithmetic both use in `deadline` (so `run` imports from `finish`, never back).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::clock::now_ms;
use crate::jobs::{JobContext, ProgressSink};
use crate::metrics::{self, name as metric};
use crate::protocol::ErrorObject;
use crate::queue::{WorkKind, WorkMessage, WorkQueue};
use crate::store::{StoreError, TaskStore};
use crate::task::{Lease, TaskRecord, TaskStatus};
use crate::tools::{Registry, Tool};

mod deadline;
mod finish;
mod lease;
mod run;
#[cfg(test)]
mod tests;
mod wait;

pub use wait::WAIT_MARK;

/// Worker timing and limits.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// How long a lease lasts without renewal.
    pub lease: Duration,
    /// How often the task is re-read for cancellation and the lease renewed. A checkpoint
    /// write (conditional, so it sees a cancel request too) stands in for a check: after one
    /// the next check is one and a half intervals away.
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
            // Cancel is seen within about a second, the promise; no more often.
            check_every: Duration::from_secs(1),
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

/// How far past the server's wall-time quota a run may go before it is stopped: a job that
/// claimed exactly the limit at creation (a day-long `wait` under a one-day limit, admitted by
/// [`crate::engine::check_claim`]) finishes, with the time its steps and writes took on top.
/// A tool's own, lower limit (a manifest's `max_task_seconds`) gets no grace: nothing was
/// admitted against it.
const WALL_GRACE: Duration = Duration::from_secs(60);

/// The checkpoint cadence and the park threshold every job runs at, here where the worker's
/// callers have long found them.
pub use crate::jobs::{PARK_AFTER, SAVE_BYTES, save_gap};

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
    /// Not now (the task's tenant already runs as many jobs as it may, or its tool is not
    /// known yet): nothing was run; send this message (the one handled, or the next of its
    /// wait, see `worker/wait.rs`) after this long (an SQS consumer re-sends a fresh message
    /// and deletes this one, so waiting its turn never counts towards the dead-letter limit).
    Deferred(WorkMessage, Duration),
    /// A sleeping job's message came before its wake time: send this message (the next hop of
    /// its wake-up chain) after this long, and delete the one handled.
    Rescheduled(WorkMessage, Duration),
}

impl Outcome {
    /// What became of a message, in a word (traces, tallies): never the message's or the
    /// task's data.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Dropped => "dropped",
            Outcome::Busy(_) => "busy",
            Outcome::Finished(status) => status.as_str(),
            Outcome::WaitingForInput => "input_required",
            Outcome::Continued => "continued",
            Outcome::Sleeping(_) => "sleeping",
            Outcome::Superseded => "superseded",
            Outcome::Deferred(..) => "deferred",
            Outcome::Rescheduled(..) => "rescheduled",
        }
    }
}

/// Turns true when a run should hand its job over at its next step, deadline or not.
pub type Release = tokio::sync::watch::Receiver<bool>;

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
        self.handle_releasable(msg, deadline, None).await
    }

    /// [`Worker::handle`], whose run also hands the job over at its next step once `release`
    /// turns true (the Lambda worker's batch gives its invocation back early, see
    /// `aws/lambda/worker.rs`).
    pub async fn handle_releasable(
        &self,
        msg: &WorkMessage,
        deadline: Option<Instant>,
        release: Option<Release>,
    ) -> Result<Outcome, WorkerError> {
        // A unique owner per run: a duplicate message in the same process is a different
        // owner, so it cannot share the lease.
        let owner = format!("{}-{}", self.instance, RUNS.fetch_add(1, Ordering::Relaxed));
        let (Some(slots), Some(deadline)) = (&self.slots, deadline) else {
            return self.handle_as(msg, &owner, deadline, release).await;
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
        let slot = crate::quota::SlotKey::runs_of(&msg.tenant);
        if !slots.take(&slot, &owner, max, until).await? {
            tracing::info!(task_id = %msg.task_id, max, "quota.deferred: the tenant runs as many jobs as it may");
            return self.wait_turn(msg).await;
        }
        let outcome = self.handle_as(msg, &owner, Some(deadline), release).await;
        if let Err(e) = slots.release(&slot, &owner).await {
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
        release: Option<Release>,
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
            None => self.store.arguments(task.key()).await?,
        };
        let Some(arguments) = arguments else {
            tracing::error!(task_id = %task.task_id, "task.arguments_missing");
            let err = internal("The task's arguments are missing from the task store");
            return self.finish(&mut task, owner, |t| t.fail(err.clone())).await;
        };
        let (started, name) = (Instant::now(), task.tool.clone());
        let outcome = self
            .run(tool, task, arguments, owner, deadline, release)
            .await;
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
            let Some(mut task) = self.store.get(msg.key()).await? else {
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
}

/// When a parked job wakes, and the delay of the message that brings it back.
#[derive(Debug, Clone, Copy)]
struct Wake {
    at_ms: u64,
    delay: Duration,
}
