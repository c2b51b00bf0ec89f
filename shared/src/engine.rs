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
use crate::quota::{Limit, QuotaExceeded, Quotas, RateLimiter};
use crate::store::{
    MAX_CLIENT_RECORD_BYTES, StoreError, TaskKey, TaskStore, arguments_len, record_len,
};
use crate::task::{TaskRecord, TaskStatus, is_valid_task_id, new_task_id};
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
    pub next: Option<String>,
}

/// Creates tasks and serves the `tasks/*` methods.
#[derive(Clone)]
pub struct Engine {
    store: Arc<dyn TaskStore>,
    queue: Arc<dyn WorkQueue>,
    settings: TaskSettings,
    creations: Arc<RateLimiter>,
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
        }
    }

    /// The quotas in force.
    pub fn quotas(&self) -> &Quotas {
        &self.settings.quotas
    }

    /// Checks a new task of `tenant` against the tenant quotas, before anything is stored: its
    /// creation rate (in this process), then its number of active tasks (one count of index
    /// keys, only once the rate allows). Concurrent creations of one tenant may overshoot the
    /// active-task limit by the requests in flight at that moment. The work a call claims is
    /// checked before this, at the edge, for tasks and inline runs alike ([`check_claim`]).
    pub async fn admit(&self, tenant: &str) -> Result<(), CreateError> {
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
        let active = self
            .store
            .count_tenant_active(tenant, q.max_active_tasks)
            .await
            .map_err(|e| internal("counting a tenant's tasks failed", e))?;
        if active >= q.max_active_tasks {
            tracing::info!(
                limit = "active_tasks",
                max = q.max_active_tasks,
                "quota.refused"
            );
            return Err(CreateError::Quota(QuotaExceeded {
                limit: Limit::ActiveTasks,
                max: q.max_active_tasks as f64,
                retry_after: Some(Duration::from_millis(self.settings.poll_interval_ms * 5)),
                message: format!(
                    "Quota exceeded: this tenant already has {} unfinished tasks, the most it may \
                     have at once. Wait for some to finish, or cancel those no longer needed \
                     (tasks/cancel), then try again.",
                    q.max_active_tasks
                ),
            }));
        }
        Ok(())
    }

    /// Persists a new task, then enqueues its start. The record is durable and readable before
    /// this returns, so the caller may answer with `CreateTaskResult`. A failed enqueue is
    /// logged, not returned: the task is stored, and the orphan sweep will enqueue it.
    pub async fn create_task(
        &self,
        tenant: &str,
        tool: &str,
        arguments: Value,
        checkpoint: Value,
        client_capabilities: Value,
    ) -> Result<TaskRecord, EngineError> {
        let mut task = TaskRecord::new(
            tenant,
            new_task_id(),
            tool,
            self.settings.ttl_ms,
            self.settings.poll_interval_ms,
            client_capabilities,
        );
        task.checkpoint = checkpoint;
        // The same bound as when arguments lived inside the record: what a client may send
        // does not depend on how the store lays it out.
        let len = record_len(&task).saturating_add(arguments_len(&arguments));
        if len > MAX_CLIENT_RECORD_BYTES {
            return Err(EngineError::Invalid(format!(
                "Arguments too large to run as a task ({len} bytes with the task; at most {MAX_CLIENT_RECORD_BYTES})"
            )));
        }
        match self.store.create(&task, &arguments).await {
            Ok(()) => {}
            Err(StoreError::TooLarge(n)) => {
                return Err(EngineError::Invalid(format!(
                    "Arguments too large to run as a task ({n} bytes)"
                )));
            }
            Err(e) => return Err(internal("storing a new task failed", e)),
        }
        tracing::info!(task_id = %task.task_id, tool, "task.created");
        self.send(&task, WorkKind::Start).await;
        Ok(task)
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
    pub async fn get(&self, tenant: &str, task_id: &str) -> Result<TaskRecord, EngineError> {
        if !is_valid_task_id(task_id) {
            return Err(EngineError::NotFound);
        }
        match self.store.get(tenant, task_id).await {
            Ok(Some(t)) if !t.is_expired(now_ms()) => Ok(t),
            Ok(_) => Err(EngineError::NotFound),
            Err(e) => Err(internal("reading a task failed", e)),
        }
    }

    /// `tasks/update`: records answers for outstanding keys, resumes the job when nothing is
    /// outstanding. Idempotent: unknown or already answered keys change nothing.
    pub async fn update(
        &self,
        tenant: &str,
        task_id: &str,
        responses: &Map<String, Value>,
    ) -> Result<(), EngineError> {
        for _ in 0..MAX_RACES {
            let mut task = self.get(tenant, task_id).await?;
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
    pub async fn cancel(&self, tenant: &str, task_id: &str) -> Result<(), EngineError> {
        self.cancel_task(tenant, task_id, false).await.map(|_| ())
    }

    /// `tasks/cancel` (2025-11-25), which must answer with the task already `cancelled`: the
    /// task is cancelled at once even while a run holds it. That run's next check or write
    /// finds the task terminal (its conditional write loses) and stops without writing.
    /// Returns the task as cancelled, or `-32602` naming its status when it had already ended
    /// (also when it ended in a race with this call).
    pub async fn cancel_at_once(
        &self,
        tenant: &str,
        task_id: &str,
    ) -> Result<TaskRecord, EngineError> {
        match self.cancel_task(tenant, task_id, true).await? {
            Some(task) => Ok(task),
            None => {
                let task = self.get(tenant, task_id).await?;
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
        tenant: &str,
        task_id: &str,
        at_once: bool,
    ) -> Result<Option<TaskRecord>, EngineError> {
        for _ in 0..MAX_RACES {
            let mut task = self.get(tenant, task_id).await?;
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
                    tracing::info!(task_id, at_once, "task.cancel_requested");
                    task.version = version;
                    return Ok(Some(task));
                }
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(internal("cancelling a task failed", e)),
            }
        }
        Err(EngineError::Internal)
    }

    /// Every active task's key, page by page (recovery and the sweep see all of them, however
    /// many wait on humans).
    async fn all_active(&self) -> Result<Vec<TaskKey>, StoreError> {
        const PAGE: usize = 1000;
        let mut keys: Vec<TaskKey> = Vec::new();
        loop {
            let page = self.store.list_active(keys.last(), PAGE).await?;
            let done = page.len() < PAGE;
            keys.extend(page);
            if done {
                return Ok(keys);
            }
        }
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
        tenant: &str,
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

    /// Start-up recovery for a store this process owns alone (the embedded store): every
    /// lease belongs to a process that is gone, so it is released and the task re-enqueued.
    /// Tasks are recovered [`RECOVERY_CONCURRENCY`] at a time, so their writes share commits
    /// (the embedded store syncs one batch of concurrent writes at once). A task that cannot be
    /// read or written is logged and skipped, never the end of recovery for the others; only a
    /// failed listing fails the call.
    pub async fn recover(&self) -> Result<usize, StoreError> {
        use futures_util::StreamExt as _;
        let keys = self.all_active().await?;
        let results: Vec<Result<bool, StoreError>> = futures_util::stream::iter(keys)
            .map(|k| self.recover_one(k))
            .buffer_unordered(RECOVERY_CONCURRENCY)
            .collect()
            .await;
        let (mut n, mut failed) = (0, 0);
        for r in results {
            match r {
                Ok(requeued) => n += usize::from(requeued),
                Err(e) => {
                    failed += 1;
                    tracing::error!(error = %e, "recovering a task failed; skipped");
                }
            }
        }
        if failed > 0 {
            tracing::error!(
                failed,
                recovered = n,
                "recovery skipped tasks it could not recover"
            );
        }
        Ok(n)
    }

    /// Releases one dead run's lease; true when the task was re-enqueued.
    async fn recover_one(&self, k: TaskKey) -> Result<bool, StoreError> {
        let Some(mut task) = self.store.get(&k.tenant, &k.task_id).await? else {
            return Ok(false);
        };
        if task.lease.take().is_some() {
            // Its run died with the previous process.
            task.interruptions += 1;
            match self.store.update(&task).await {
                Ok(_) | Err(StoreError::Conflict) => {}
                Err(e) => return Err(e),
            }
        }
        if task.status == TaskStatus::Working {
            self.send(&task, WorkKind::Recover).await;
            return Ok(true);
        }
        Ok(false)
    }

    /// The orphan sweep, run to the end of its listing: see [`Engine::sweep_until`].
    pub async fn sweep(&self, stale: Duration) -> Result<SweepStats, StoreError> {
        self.sweep_until(stale, None).await
    }

    /// The orphan sweep: re-enqueues `working` tasks that no live run holds and that have been
    /// quiet (no update, not asleep, not just re-sent) for `stale`; stops at `until` and
    /// resumes there in the next run (every run gets through at least one page).
    ///
    /// **What it reads.** Only the candidates the store lists by their quiet mark
    /// ([`TaskStore::list_quiet`]): on DynamoDB a sparse index holds `working` tasks only, so
    /// tasks waiting for input and sleeping ones are never read, and the run's cost follows
    /// the tasks that went quiet, not the tasks that exist. Pages of [`SWEEP_PAGE`] keys; a run
    /// with a deadline stops between pages and saves where it stopped
    /// ([`TaskStore::save_sweep_cursor`]), so the next run (on any instance) goes on from there
    /// and the pass ends after as many runs as it needs.
    ///
    /// **Duplicates.** A task without a lease whose message went out may simply wait in the
    /// queue: while the queue reports waiting messages ([`WorkQueue::waiting`]), such a task is
    /// left alone (counted in [`SweepStats::queued`]) until it has been quiet for
    /// [`BACKLOG_PATIENCE`]. A task whose run died (its lease expired) is always re-sent.
    /// Every re-send is written to the task first (a conditional write: a task that moved
    /// meanwhile is not sent), and the sweep then waits twice as long before sending it again,
    /// up to 2^[`MAX_SWEEP_BACKOFF`] windows; a run taking the task resets that.
    ///
    /// **It never stops on one task**: a listed task that cannot be read — an item the store
    /// cannot decode or that does not match its key (the store logs each with its key and
    /// reads it as absent), a read error, a task deleted since the listing — is counted in
    /// [`SweepStats::skipped`] (logged once per run when not zero), and the sweep goes on. Only
    /// a failed listing fails the call; the purge ([`Engine::purge`]) is independent of this.
    pub async fn sweep_until(
        &self,
        stale: Duration,
        until: Option<tokio::time::Instant>,
    ) -> Result<SweepStats, StoreError> {
        use futures_util::StreamExt as _;
        let now = now_ms();
        let stale_ms = stale.as_millis() as u64;
        let mut stats = SweepStats::default();
        let backlog = self.queue.waiting().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "sweep.backlog_unknown: re-sending as if none");
            None
        });
        let mut cursor = self.store.sweep_cursor().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "sweep.cursor_unreadable: starting from the beginning");
            None
        });
        stats.resumed = cursor.is_some();
        let loaded = cursor.clone();
        loop {
            let page = self
                .store
                .list_quiet(now.saturating_sub(stale_ms), cursor.as_deref(), SWEEP_PAGE)
                .await?;
            stats.read += page.tasks.len();
            stats.skipped += page.unreadable;
            let mut orphans = Vec::new();
            for task in page.tasks {
                match verdict(&task, now, stale_ms, backlog) {
                    Verdict::Orphan => orphans.push(task),
                    Verdict::Queued => stats.queued += 1,
                    Verdict::Live => {}
                }
            }
            let sent: Vec<Resent> = futures_util::stream::iter(orphans)
                .map(|t| self.resend(t, now, stale_ms))
                .buffer_unordered(SWEEP_CONCURRENCY)
                .collect()
                .await;
            for r in sent {
                match r {
                    Resent::Sent => stats.requeued += 1,
                    Resent::Moved => {}
                    Resent::Failed => stats.skipped += 1,
                }
            }
            cursor = page.next;
            if cursor.is_none() {
                stats.complete = true;
                break;
            }
            // Every run gets through at least one page, however short its time.
            if until.is_some_and(|u| tokio::time::Instant::now() >= u) {
                break;
            }
        }
        if cursor != loaded
            && let Err(e) = self.store.save_sweep_cursor(cursor.as_deref()).await
        {
            tracing::warn!(error = %e, "sweep.cursor_not_saved: the next run starts again");
        }
        if stats.skipped > 0 {
            tracing::error!(
                skipped = stats.skipped,
                requeued = stats.requeued,
                "sweep.skipped_unreadable_tasks"
            );
        }
        Ok(stats)
    }

    /// Sends an orphan's work again, after noting the re-send on the task (which backs the
    /// next one off).
    async fn resend(&self, mut task: TaskRecord, now: u64, stale_ms: u64) -> Resent {
        task.sweeps = task.sweeps.saturating_add(1);
        let windows = (1u64 << task.sweeps.min(MAX_SWEEP_BACKOFF)) - 1;
        task.sweep_after_ms = Some(now.saturating_add(stale_ms.saturating_mul(windows)));
        match self.store.update(&task).await {
            Ok(_) => {
                self.send(&task, WorkKind::Recover).await;
                Resent::Sent
            }
            // A run, a cancel or an answer got there first: not an orphan any more.
            Err(StoreError::Conflict) => Resent::Moved,
            Err(e) => {
                tracing::warn!(task_id = %task.task_id, error = %e, "sweep.write_failed");
                Resent::Failed
            }
        }
    }

    /// Deletes tasks past their `ttlMs` (reads already treat them as absent); returns how many
    /// it deleted. See [`Engine::purge`], which also counts the deletes that failed.
    pub async fn purge_expired(&self) -> Result<usize, StoreError> {
        self.purge().await.map(|p| p.purged)
    }

    /// Deletes up to 1000 tasks past their `ttlMs`. A delete that fails is logged, counted in
    /// [`PurgeStats::failed`] and left for the next run; the others go on. Only a failed
    /// listing fails the call. The listing is the `expiry` index's keys: items the store
    /// cannot decode are purged like any other.
    pub async fn purge(&self) -> Result<PurgeStats, StoreError> {
        let keys = self.store.list_expired(now_ms(), 1000).await?;
        let mut stats = PurgeStats::default();
        for k in &keys {
            match self.store.delete(&k.tenant, &k.task_id).await {
                Ok(()) => stats.purged += 1,
                Err(e) => {
                    tracing::warn!(task_id = %k.task_id, error = %e, "purge.delete_failed");
                    stats.failed += 1;
                }
            }
        }
        if stats.failed > 0 {
            tracing::error!(
                failed = stats.failed,
                purged = stats.purged,
                "purge.deletes_failed"
            );
        }
        Ok(stats)
    }
}

/// What one orphan sweep ([`Engine::sweep_until`]) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepStats {
    /// Working tasks re-enqueued.
    pub requeued: usize,
    /// Listed tasks that could not be read or written and were skipped: undecodable items,
    /// items whose record does not match their key, read or write errors, tasks deleted since
    /// the listing.
    pub skipped: usize,
    /// Quiet tasks without a lease left alone because messages were waiting in the queue
    /// (theirs may be among them).
    pub queued: usize,
    /// Candidate records read.
    pub read: usize,
    /// The run started where an earlier run stopped.
    pub resumed: bool,
    /// The run reached the end of the listing (else the next run goes on from here).
    pub complete: bool,
}

/// Keys listed per page of the orphan sweep.
pub const SWEEP_PAGE: usize = 500;
/// Re-sends of one sweep page in flight at once.
const SWEEP_CONCURRENCY: usize = 16;
/// How long a quiet task whose message may wait in a queue backlog is left alone before the
/// sweep sends it again anyway.
pub const BACKLOG_PATIENCE: Duration = Duration::from_secs(3600);
/// Re-sends of one task back off up to 2^this sweep windows apart.
pub const MAX_SWEEP_BACKOFF: u32 = 5;

/// What the sweep makes of one candidate.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Held, moving, asleep, finished or expired: nothing to do.
    Live,
    /// Not run and quiet, but its message may be waiting in the queue's backlog.
    Queued,
    /// Nobody will run it unless its work is sent again.
    Orphan,
}

/// Judges one record read by the sweep at `now` (see [`Engine::sweep_until`]).
fn verdict(t: &TaskRecord, now: u64, stale_ms: u64, backlog: Option<u64>) -> Verdict {
    if t.status != TaskStatus::Working || t.is_expired(now) {
        // An expired task is gone for clients and about to be purged: no more work on it.
        return Verdict::Live;
    }
    // A sleeping job is brought back by its own delayed message; only one that should have
    // woken a window ago and did not is an orphan. A task the sweep re-sent waits out its
    // back-off.
    let quiet_since = t
        .last_updated_at_ms
        .max(t.wake_at_ms.unwrap_or(0))
        .max(t.sweep_after_ms.unwrap_or(0));
    let quiet = now.saturating_sub(quiet_since);
    if quiet < stale_ms {
        return Verdict::Live;
    }
    match &t.lease {
        Some(l) if l.expires_at_ms > now => Verdict::Live,
        // Its run died.
        Some(_) => Verdict::Orphan,
        None if backlog.is_some_and(|n| n > 0) && quiet < BACKLOG_PATIENCE.as_millis() as u64 => {
            Verdict::Queued
        }
        None => Verdict::Orphan,
    }
}

/// How one re-send went.
enum Resent {
    Sent,
    Moved,
    Failed,
}

/// What one purge ([`Engine::purge`]) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeStats {
    /// Expired tasks deleted.
    pub purged: usize,
    /// Deletes that failed (left for the next run).
    pub failed: usize,
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

#[cfg(test)]
mod tests;
