//! The task engine: creating tasks and serving `tasks/get`, `tasks/update` and `tasks/cancel`
//! over the store and queue ports. Stateless: any instance can serve any call.
//!
//! Every change is read → decide with [`crate::task`] → conditional write; a lost race is
//! re-read and decided again, so concurrent callers and workers never overwrite each other.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::clock::now_ms;
use crate::queue::{WorkKind, WorkMessage, WorkQueue};
use crate::quota::{Limit, QuotaExceeded, Quotas, RateLimiter, RunningPlace, RunningPlaces};
use crate::store::{
    MAX_CLIENT_RECORD_BYTES, StoreError, TaskRef, TaskStore, arguments_len, record_len,
};
use crate::task::{TaskId, TaskRecord, TaskStatus};
use crate::tenant::Tenant;
use crate::tools::Claim;

/// How many times a conditional write is retried after losing a race before giving up.
const MAX_RACES: usize = 16;

/// Tasks recovered at once at start-up.
const RECOVERY_CONCURRENCY: usize = 256;

/// Task settings.
#[derive(Debug, Clone)]
pub struct TaskSettings {
    /// `ttlMs` of new tasks (`None`: unlimited).
    pub ttl_ms: Option<u64>,
    /// `pollIntervalMs` of new tasks, within 250..=30000.
    pub poll_interval_ms: u64,
    /// Per-tenant quotas.
    pub quotas: Quotas,
}

impl Default for TaskSettings {
    fn default() -> Self {
        Self {
            ttl_ms: Some(24 * 3600 * 1000),
            poll_interval_ms: 1000,
            quotas: Quotas::default(),
        }
    }
}

/// Why the engine did not do what a request asked. The engine decides what went wrong; the
/// endpoint turns it into the wire's error once (`impl From<EngineError> for McpError` in
/// [`crate::handler`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// No such task for this tenant: unknown, expired and foreign tasks alike.
    #[error("task not found")]
    NotFound,
    /// The request cannot be honoured as sent (too large, answers that do not fit, a task that
    /// has already ended): the message is for the client.
    #[error("{0}")]
    Invalid(String),
    /// The store failed or a race never settled (logged where it happened): nothing for the
    /// client but to try again.
    #[error("internal error")]
    Internal,
}

/// Why a task was not created.
#[derive(Debug)]
pub enum CreateError {
    /// Over a quota: answered as a tool error the model reads.
    Quota(QuotaExceeded),
    /// Anything else, as a JSON-RPC error.
    Failed(EngineError),
}

impl From<EngineError> for CreateError {
    fn from(e: EngineError) -> Self {
        CreateError::Failed(e)
    }
}

/// One page of [`Engine::list_active_of`].
#[derive(Debug, Clone)]
pub struct ActivePage {
    /// The tasks, in task-id order.
    pub tasks: Vec<TaskRecord>,
    /// The task id to continue after, when more tasks may follow.
    pub next: Option<TaskId>,
}

/// Creates tasks and serves the `tasks/*` methods.
#[derive(Clone)]
pub struct Engine {
    store: Arc<dyn TaskStore>,
    queue: Arc<dyn WorkQueue>,
    settings: TaskSettings,
    creations: Arc<RateLimiter>,
    running: RunningPlaces,
}

/// Logs a store failure and returns the fixed client-facing error.
fn internal(context: &str, e: StoreError) -> EngineError {
    tracing::error!(error = %e, "{context}");
    EngineError::Internal
}

impl Engine {
    /// An engine over the given ports.
    pub fn new(
        store: Arc<dyn TaskStore>,
        queue: Arc<dyn WorkQueue>,
        mut settings: TaskSettings,
    ) -> Self {
        settings.poll_interval_ms = settings.poll_interval_ms.clamp(250, 30_000);
        let creations = Arc::new(RateLimiter::new(
            settings.quotas.create_per_second,
            settings.quotas.create_burst,
        ));
        Self {
            store,
            queue,
            settings,
            creations,
            running: RunningPlaces::Unlimited,
        }
    }

    /// Counts inline runs in `places`: those of the host's jobs (the local worker pool's fair
    /// gate, or the running-jobs record every Lambda instance shares).
    pub fn with_running_places(mut self, places: RunningPlaces) -> Self {
        self.running = places;
        self
    }

    /// One of `tenant`'s running places for a tool run inline, waited for up to `within` (the
    /// call's budget; the run gets what is left of it). Past that, the quota refusal the model
    /// reads: the tenant runs as many jobs as it may, and none ended in time.
    pub async fn running_place(
        &self,
        tenant: &Tenant,
        within: Duration,
    ) -> Result<RunningPlace, CreateError> {
        match self.running.take(tenant, within).await {
            Ok(Some(place)) => Ok(place),
            Ok(None) => {
                let max = self.settings.quotas.max_running_jobs;
                tracing::info!(limit = "running_jobs", max, "quota.refused");
                Err(CreateError::Quota(QuotaExceeded {
                    limit: Limit::RunningJobs,
                    max: max as f64,
                    retry_after: Some(Duration::from_millis(self.settings.poll_interval_ms * 5)),
                    message: format!(
                        "Quota exceeded: this tenant already runs {max} jobs at once (tasks and \
                         synchronous calls together), the most it may, and none ended within \
                         this call's {:.0} s. Wait for some to finish, or cancel tasks no longer \
                         needed (tasks/cancel), then try again.",
                        within.as_secs_f64()
                    ),
                }))
            }
            Err(e) => Err(internal("taking a running place failed", e).into()),
        }
    }

    /// The quotas in force.
    pub fn quotas(&self) -> &Quotas {
        &self.settings.quotas
    }

    /// Checks a new task of `tenant` against its creation rate (in this process), before
    /// anything is read or stored. The active-task limit is checked by [`Engine::create_task`],
    /// in the store's write that stores the task. The work a call claims is checked before
    /// this, at the edge, for tasks and inline runs alike ([`check_claim`]).
    pub async fn admit(&self, tenant: &Tenant) -> Result<(), CreateError> {
        let q = &self.settings.quotas;
        if let Err(wait) = self.creations.take(tenant) {
            return Err(CreateError::Quota(QuotaExceeded {
                limit: Limit::CreateRate,
                max: q.create_per_second,
                retry_after: Some(wait),
                message: format!(
                    "Quota exceeded: tasks are being created faster than this server allows one \
                     tenant ({} a second, bursts of {}). Retry in {} ms.",
                    q.create_per_second,
                    q.create_burst,
                    wait.as_millis().max(1)
                ),
            }));
        }
        Ok(())
    }

    /// Persists a new task within its tenant's active-task quota, then enqueues its start. The
    /// quota and the write are one step (the store's [`TaskStore::create_within`]): however
    /// many creations of one tenant run at once, no more than the quota are stored, and one
    /// refused stores nothing. The record is durable and readable before this returns, so the
    /// caller may answer with `CreateTaskResult`. A failed enqueue is logged, not returned:
    /// the task is stored, and the orphan sweep will enqueue it.
    pub async fn create_task(
        &self,
        tenant: &Tenant,
        tool: &str,
        arguments: Value,
        checkpoint: Value,
        client_capabilities: Value,
    ) -> Result<TaskRecord, CreateError> {
        let mut task = TaskRecord::new(
            tenant.clone(),
            TaskId::generate(),
            tool,
            self.settings.ttl_ms,
            self.settings.poll_interval_ms,
            crate::protocol::task_capabilities(&client_capabilities),
        );
        task.checkpoint = checkpoint;
        // The same bound as when arguments lived inside the record: what a client may send
        // does not depend on how the store lays it out.
        let len = record_len(&task).saturating_add(arguments_len(&arguments));
        if len > MAX_CLIENT_RECORD_BYTES {
            return Err(EngineError::Invalid(format!(
                "Arguments too large to run as a task ({len} bytes with the task; at most {MAX_CLIENT_RECORD_BYTES})"
            ))
            .into());
        }
        let max = self.settings.quotas.max_active_tasks;
        match self.store.create_within(&task, &arguments, max).await {
            Ok(true) => {}
            Ok(false) => return Err(CreateError::Quota(self.over_active_tasks())),
            Err(StoreError::TooLarge(n)) => {
                return Err(EngineError::Invalid(format!(
                    "Arguments too large to run as a task ({n} bytes)"
                ))
                .into());
            }
            Err(e) => return Err(internal("storing a new task failed", e).into()),
        }
        tracing::info!(task_id = %task.task_id, tool, "task.created");
        self.send(&task, WorkKind::Start).await;
        Ok(task)
    }

    /// The refusal of a tenant that has as many unfinished tasks as it may.
    fn over_active_tasks(&self) -> QuotaExceeded {
        let q = &self.settings.quotas;
        tracing::info!(
            limit = "active_tasks",
            max = q.max_active_tasks,
            "quota.refused"
        );
        QuotaExceeded {
            limit: Limit::ActiveTasks,
            max: q.max_active_tasks as f64,
            retry_after: Some(Duration::from_millis(self.settings.poll_interval_ms * 5)),
            message: format!(
                "Quota exceeded: this tenant already has {} unfinished tasks, the most it may \
                 have at once. Wait for some to finish, or cancel those no longer needed \
                 (tasks/cancel), then try again.",
                q.max_active_tasks
            ),
        }
    }

    async fn send(&self, task: &TaskRecord, kind: WorkKind) {
        let msg = WorkMessage {
            tenant: task.tenant.clone(),
            task_id: task.task_id.clone(),
            kind,
        };
        if let Err(e) = self.queue.enqueue(msg, Duration::ZERO).await {
            tracing::warn!(task_id = %task.task_id, error = %e, "enqueue failed; the sweep will retry");
        }
    }

    /// Reads a task of `tenant`. Unknown, expired and foreign tasks give the same error.
    pub async fn get(&self, id: TaskRef<'_>) -> Result<TaskRecord, EngineError> {
        match self.store.get(id).await {
            Ok(Some(t)) if !t.is_expired(now_ms()) => Ok(t),
            Ok(_) => Err(EngineError::NotFound),
            Err(e) => Err(internal("reading a task failed", e)),
        }
    }

    /// [`Engine::get`], shared with the store's read cache rather than copied out of it
    /// (`tasks/get`, which only writes the record out).
    pub async fn get_shared(&self, id: TaskRef<'_>) -> Result<Arc<TaskRecord>, EngineError> {
        // The cache first: no boxed future through the store's layers.
        let found = match self.store.cached(id) {
            Some(t) => Ok(Some(t)),
            None => self.store.get_shared(id).await,
        };
        match found {
            Ok(Some(t)) if !t.is_expired(now_ms()) => Ok(t),
            Ok(_) => Err(EngineError::NotFound),
            Err(e) => Err(internal("reading a task failed", e)),
        }
    }

    /// `tasks/update`: records answers for outstanding keys, resumes the job when nothing is
    /// outstanding. Idempotent: unknown or already answered keys change nothing.
    pub async fn update(
        &self,
        id: TaskRef<'_>,
        responses: &Map<String, Value>,
    ) -> Result<(), EngineError> {
        for _ in 0..MAX_RACES {
            let mut task = self.get(id).await?;
            task.check_answers(responses)
                .map_err(EngineError::Invalid)?;
            if !task.answer(responses) {
                return Ok(());
            }
            if record_len(&task) > MAX_CLIENT_RECORD_BYTES {
                return Err(EngineError::Invalid(
                    "Input responses too large to store".into(),
                ));
            }
            match self.store.update(&task).await {
                Ok(_) => {
                    if task.status == TaskStatus::Working {
                        self.send(&task, WorkKind::Resume).await;
                    }
                    return Ok(());
                }
                Err(StoreError::Conflict) => continue,
                Err(StoreError::TooLarge(_)) => {
                    return Err(EngineError::Invalid(
                        "Input responses too large to store".into(),
                    ));
                }
                Err(e) => return Err(internal("updating a task failed", e)),
            }
        }
        Err(EngineError::Internal)
    }

    /// `tasks/cancel` (2026-07-28): a task nobody is running (queued, handed over, waiting for
    /// input) is cancelled at once; a running one gets the cancel flag and its worker stops
    /// within about a second, then writes `cancelled` — so `cancelled` means the job stopped.
    /// Terminal tasks are acked unchanged.
    pub async fn cancel(&self, id: TaskRef<'_>) -> Result<(), EngineError> {
        self.cancel_task(id, false).await.map(|_| ())
    }

    /// `tasks/cancel` (2025-11-25), which must answer with the task already `cancelled`: the
    /// task is cancelled at once even while a run holds it. That run's next check or write
    /// finds the task terminal (its conditional write loses) and stops without writing.
    /// Returns the task as cancelled, or `-32602` naming its status when it had already ended
    /// (also when it ended in a race with this call).
    pub async fn cancel_at_once(&self, id: TaskRef<'_>) -> Result<TaskRecord, EngineError> {
        match self.cancel_task(id, true).await? {
            Some(task) => Ok(task),
            None => {
                let task = self.get(id).await?;
                Err(EngineError::Invalid(format!(
                    "Task is already {}: it cannot be cancelled",
                    task.status.as_str()
                )))
            }
        }
    }

    /// The record as written, or `None` when the task had already ended (nothing written).
    async fn cancel_task(
        &self,
        id: TaskRef<'_>,
        at_once: bool,
    ) -> Result<Option<TaskRecord>, EngineError> {
        for _ in 0..MAX_RACES {
            let mut task = self.get(id).await?;
            if task.status.is_terminal() {
                return Ok(None);
            }
            let running = !at_once
                && task
                    .lease
                    .as_ref()
                    .is_some_and(|l| l.expires_at_ms > now_ms());
            if task.cancel_requested && running {
                return Ok(Some(task));
            }
            task.cancel_requested = true;
            if running {
                // The running job sees the flag at its next check (about a second).
                task.touch();
            } else {
                // Nobody runs the job (queued, handed over, or waiting for input), or the
                // caller needs it cancelled now: cancel it here.
                let _ = task.cancel();
            }
            match self.store.update(&task).await {
                Ok(version) => {
                    tracing::info!(task_id = %id.task_id, at_once, "task.cancel_requested");
                    task.version = version;
                    // Cancelled here with a job that had begun (it has a checkpoint): its
                    // worker lets the tool stop what it started elsewhere (a workflow's
                    // execution). A running job does that itself when it sees the request.
                    if !running && !task.checkpoint.is_null() {
                        self.send(&task, WorkKind::Cancelled).await;
                    }
                    return Ok(Some(task));
                }
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(internal("cancelling a task failed", e)),
            }
        }
        Err(EngineError::Internal)
    }

    /// One page of the caller's non-terminal (and unexpired) tasks in task-id order — oldest
    /// first, as generated ids start with a ULID — after task id `after`: the 2025-11-25
    /// `tasks/list` of the legacy lane. One tenant-keyed store listing of `limit` records (on
    /// DynamoDB one `Query` and one `BatchGetItem` for up to 100), never a pass over other
    /// tenants' tasks. A full page says that more may follow (when the tasks end exactly
    /// there, the next page is empty): asking for one more record to know would cost a second
    /// `BatchGetItem` on DynamoDB. Terminal tasks are not listed (the listing holds active ones
    /// only).
    pub async fn list_active_of(
        &self,
        tenant: &Tenant,
        after: Option<&str>,
        limit: usize,
    ) -> Result<ActivePage, EngineError> {
        let mut tasks = self
            .store
            .list_tenant_active(tenant, after, limit)
            .await
            .map_err(|e| internal("listing tasks failed", e))?;
        // Where this page ends in the listing, even if that task is hidden below.
        let next = match tasks.last() {
            Some(last) if tasks.len() >= limit => Some(last.task_id.clone()),
            _ => None,
        };
        let now = now_ms();
        tasks.retain(|t| !t.is_expired(now));
        Ok(ActivePage { tasks, next })
    }
}

/// Refuses a claim that exceeds a per-task limit (no retry helps: the call must ask for less).
pub fn check_claim(q: &Quotas, claim: Claim) -> Result<(), QuotaExceeded> {
    let over = |limit: Limit, what: &str, claimed: Duration, max: Duration| QuotaExceeded {
        limit,
        max: max.as_secs_f64(),
        retry_after: None,
        message: format!(
            "Quota exceeded: this call would take about {:.0} s of {what}, more than the {:.0} s \
             one task may use here. Ask for less work per call (split it into smaller calls).",
            claimed.as_secs_f64(),
            max.as_secs_f64()
        ),
    };
    if let Some(w) = claim.wall.filter(|w| *w > q.max_task_wall) {
        return Err(over(
            Limit::TaskWallTime,
            "running time",
            w,
            q.max_task_wall,
        ));
    }
    if let Some(c) = claim.cpu.filter(|c| *c > q.max_task_cpu) {
        return Err(over(Limit::TaskCpuTime, "CPU time", c, q.max_task_cpu));
    }
    Ok(())
}

mod sweep;

pub use sweep::{BACKLOG_PATIENCE, MAX_SWEEP_BACKOFF, PurgeStats, SWEEP_PAGE, SweepStats};

#[cfg(test)]
mod tests;
