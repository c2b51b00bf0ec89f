//! The task engine: creating tasks and serving `tasks/get`, `tasks/update` and `tasks/cancel`
//! over the store and queue ports. Stateless: any instance can serve any call.
//!
//! Every change is read → decide with [`crate::task`] → conditional write; a lost race is
//! re-read and decided again, so concurrent callers and workers never overwrite each other.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::clock::now_ms;
use crate::protocol::McpError;
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

/// Why a task was not created.
#[derive(Debug)]
pub enum CreateError {
    /// Over a quota: answered as a tool error the model reads.
    Quota(QuotaExceeded),
    /// Anything else, as a JSON-RPC error.
    Failed(McpError),
}

impl From<McpError> for CreateError {
    fn from(e: McpError) -> Self {
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
fn internal(context: &str, e: StoreError) -> McpError {
    tracing::error!(error = %e, "{context}");
    McpError::internal()
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
    ) -> Result<TaskRecord, McpError> {
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
            return Err(McpError::invalid_params(format!(
                "Arguments too large to run as a task ({len} bytes with the task; at most {MAX_CLIENT_RECORD_BYTES})"
            )));
        }
        match self.store.create(&task, &arguments).await {
            Ok(()) => {}
            Err(StoreError::TooLarge(n)) => {
                return Err(McpError::invalid_params(format!(
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
    pub async fn get(&self, tenant: &str, task_id: &str) -> Result<TaskRecord, McpError> {
        if !is_valid_task_id(task_id) {
            return Err(McpError::task_not_found());
        }
        match self.store.get(tenant, task_id).await {
            Ok(Some(t)) if !t.is_expired(now_ms()) => Ok(t),
            Ok(_) => Err(McpError::task_not_found()),
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
    ) -> Result<(), McpError> {
        for _ in 0..MAX_RACES {
            let mut task = self.get(tenant, task_id).await?;
            task.check_answers(responses)
                .map_err(McpError::invalid_params)?;
            if !task.answer(responses) {
                return Ok(());
            }
            if record_len(&task) > MAX_CLIENT_RECORD_BYTES {
                return Err(McpError::invalid_params(
                    "Input responses too large to store",
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
                    return Err(McpError::invalid_params(
                        "Input responses too large to store",
                    ));
                }
                Err(e) => return Err(internal("updating a task failed", e)),
            }
        }
        Err(McpError::internal())
    }

    /// `tasks/cancel` (2026-07-28): a task nobody is running (queued, handed over, waiting for
    /// input) is cancelled at once; a running one gets the cancel flag and its worker stops
    /// within about a second, then writes `cancelled` — so `cancelled` means the job stopped.
    /// Terminal tasks are acked unchanged.
    pub async fn cancel(&self, tenant: &str, task_id: &str) -> Result<(), McpError> {
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
    ) -> Result<TaskRecord, McpError> {
        match self.cancel_task(tenant, task_id, true).await? {
            Some(task) => Ok(task),
            None => {
                let task = self.get(tenant, task_id).await?;
                Err(McpError::invalid_params(format!(
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
    ) -> Result<Option<TaskRecord>, McpError> {
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
        Err(McpError::internal())
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
    ) -> Result<ActivePage, McpError> {
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

    /// The orphan sweep: re-enqueues `working` tasks that no live worker holds and that have
    /// not moved for `stale`. Duplicates are harmless (the lease drops them).
    ///
    /// It never stops on one task: a listed task that cannot be read — an item the store
    /// cannot decode or that does not match its key (the store logs each with its key and
    /// reads it as absent), a read error, or a task deleted since the listing — is skipped and
    /// counted in [`SweepStats::skipped`] (logged once per run when not zero), and the sweep
    /// goes on with the rest. Only a failed listing fails the call; the purge
    /// ([`Engine::purge`]) is independent of this and runs whatever happens here.
    pub async fn sweep(&self, stale: Duration) -> Result<SweepStats, StoreError> {
        let now = now_ms();
        let stale_ms = stale.as_millis() as u64;
        let mut stats = SweepStats::default();
        for k in self.all_active().await? {
            let task = match self.store.get(&k.tenant, &k.task_id).await {
                Ok(Some(task)) => task,
                Ok(None) => {
                    stats.skipped += 1;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(task_id = %k.task_id, error = %e, "sweep.read_failed");
                    stats.skipped += 1;
                    continue;
                }
            };
            let unheld = task.lease.as_ref().is_none_or(|l| l.expires_at_ms <= now);
            // An expired task is gone for clients and about to be purged: no more work on it.
            // A sleeping job is brought back by its own delayed message; only one that should
            // have woken `stale` ago and did not is an orphan.
            let asleep = task
                .wake_at_ms
                .is_some_and(|w| now.saturating_sub(w) < stale_ms);
            if task.status == TaskStatus::Working
                && !task.is_expired(now)
                && unheld
                && !asleep
                && now.saturating_sub(task.last_updated_at_ms) >= stale_ms
            {
                self.send(&task, WorkKind::Recover).await;
                stats.requeued += 1;
            }
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

/// What one orphan sweep ([`Engine::sweep`]) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepStats {
    /// Working tasks re-enqueued.
    pub requeued: usize,
    /// Listed active tasks that could not be read and were skipped: undecodable items, items
    /// whose record does not match their key, read errors, tasks deleted since the listing.
    pub skipped: usize,
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
mod tests {
    use serde_json::json;

    use super::*;
    use crate::queue::LocalQueue;
    use crate::store::memory::MemoryStore;

    fn engine() -> (
        Engine,
        Arc<MemoryStore>,
        tokio::sync::mpsc::UnboundedReceiver<WorkMessage>,
    ) {
        let store = Arc::new(MemoryStore::new());
        let (queue, rx) = LocalQueue::new();
        let engine = Engine::new(store.clone(), Arc::new(queue), TaskSettings::default());
        (engine, store, rx)
    }

    #[tokio::test]
    async fn the_sweep_recovers_a_task_stored_but_never_enqueued() {
        let (engine, store, mut rx) = engine();
        // A crash between the conditional put and the send: the task exists, no message does.
        let mut task = TaskRecord::new("t", new_task_id(), "wait", None, 1000, json!({}));
        task.last_updated_at_ms = now_ms() - 60_000;
        store.create(&task, &json!({})).await.unwrap();
        assert!(rx.try_recv().is_err());
        assert_eq!(
            engine
                .sweep(Duration::from_secs(30))
                .await
                .unwrap()
                .requeued,
            1
        );
        let msg = rx.try_recv().expect("the sweep enqueued the orphan");
        assert_eq!(
            (msg.task_id.as_str(), msg.kind),
            (task.task_id.as_str(), WorkKind::Recover)
        );
        // A fresh task, or one a live run holds, is left alone.
        let fresh = engine
            .create_task("t", "wait", json!({}), Value::Null, json!({}))
            .await
            .unwrap();
        rx.try_recv().unwrap(); // its own start message
        let mut held = store.get("t", &task.task_id).await.unwrap().unwrap();
        held.lease = Some(crate::task::Lease {
            owner: "alive".into(),
            expires_at_ms: now_ms() + 60_000,
        });
        store.update(&held).await.unwrap();
        assert_eq!(
            engine
                .sweep(Duration::from_secs(30))
                .await
                .unwrap()
                .requeued,
            0
        );
        assert!(rx.try_recv().is_err(), "{}", fresh.task_id);
    }

    #[tokio::test]
    async fn the_sweep_leaves_an_expired_orphan_to_the_purge() {
        let (engine, store, mut rx) = engine();
        let mut task = TaskRecord::new("t", new_task_id(), "wait", Some(1000), 1000, json!({}));
        task.created_at_ms = now_ms() - 60_000;
        task.last_updated_at_ms = task.created_at_ms;
        store.create(&task, &json!({})).await.unwrap();
        assert!(task.is_expired(now_ms()));
        assert_eq!(
            engine
                .sweep(Duration::from_secs(30))
                .await
                .unwrap()
                .requeued,
            0
        );
        assert!(rx.try_recv().is_err(), "no work for an expired task");
        assert_eq!(engine.purge_expired().await.unwrap(), 1);
    }

    /// A store whose reads and deletes of the tasks in `bad` fail.
    struct Patchy {
        inner: MemoryStore,
        bad: std::collections::HashSet<String>,
    }

    #[async_trait::async_trait]
    impl TaskStore for Patchy {
        async fn create(&self, task: &TaskRecord, args: &Value) -> Result<(), StoreError> {
            self.inner.create(task, args).await
        }
        async fn arguments(&self, tenant: &str, id: &str) -> Result<Option<Value>, StoreError> {
            self.inner.arguments(tenant, id).await
        }
        async fn get(&self, tenant: &str, id: &str) -> Result<Option<TaskRecord>, StoreError> {
            if self.bad.contains(id) {
                return Err(StoreError::Backend("unreadable".into()));
            }
            self.inner.get(tenant, id).await
        }
        async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
            self.inner.update(task).await
        }
        async fn list_active(
            &self,
            after: Option<&TaskKey>,
            limit: usize,
        ) -> Result<Vec<TaskKey>, StoreError> {
            self.inner.list_active(after, limit).await
        }
        async fn list_expired(&self, now: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
            self.inner.list_expired(now, limit).await
        }
        async fn delete(&self, tenant: &str, id: &str) -> Result<(), StoreError> {
            if self.bad.contains(id) {
                return Err(StoreError::Backend("refused".into()));
            }
            self.inner.delete(tenant, id).await
        }
    }

    #[tokio::test]
    async fn one_bad_task_stops_neither_the_sweep_nor_the_purge_nor_recovery() {
        let now = now_ms();
        let aged = |ttl: u64| {
            let mut t = TaskRecord::new("t", new_task_id(), "wait", Some(ttl), 1000, json!({}));
            t.created_at_ms = now - 60_000;
            t.last_updated_at_ms = t.created_at_ms;
            t
        };
        // Ten orphans and ten expired tasks; every other one of each cannot be read/deleted.
        let orphans: Vec<TaskRecord> = (0..10).map(|_| aged(3_600_000)).collect();
        let expired: Vec<TaskRecord> = (0..10).map(|_| aged(1_000)).collect();
        let bad = orphans
            .iter()
            .chain(&expired)
            .step_by(2)
            .map(|t| t.task_id.clone())
            .collect();
        let store = Arc::new(Patchy {
            inner: MemoryStore::new(),
            bad,
        });
        for t in orphans.iter().chain(&expired) {
            store.create(t, &json!({})).await.unwrap();
        }
        let (queue, mut rx) = LocalQueue::new();
        let engine = Engine::new(store.clone(), Arc::new(queue), TaskSettings::default());

        let swept = engine.sweep(Duration::from_secs(30)).await.unwrap();
        assert_eq!(
            swept,
            SweepStats {
                requeued: 5,
                skipped: 10
            }
        );
        let purged = engine.purge().await.unwrap();
        assert_eq!(
            purged,
            PurgeStats {
                purged: 5,
                failed: 5
            }
        );
        while rx.try_recv().is_ok() {}
        // Start-up recovery skips the unreadable ones too (5 orphans left readable).
        assert_eq!(engine.recover().await.unwrap(), 5);
    }

    #[tokio::test]
    async fn cancel_at_once_cancels_or_says_the_task_had_ended() {
        let (engine, store, mut rx) = engine();
        let task = engine
            .create_task("t", "x", json!({}), Value::Null, json!({}))
            .await
            .unwrap();
        rx.try_recv().unwrap();
        let cancelled = engine.cancel_at_once("t", &task.task_id).await.unwrap();
        assert_eq!(cancelled.status, TaskStatus::Cancelled);
        assert_eq!(
            store.get("t", &task.task_id).await.unwrap(),
            Some(cancelled)
        );
        // Ended meanwhile (here: before): -32602 naming the status, nothing written.
        let err = engine.cancel_at_once("t", &task.task_id).await.unwrap_err();
        assert_eq!(err.error.code, -32602);
        assert!(
            err.error.message.contains("cancelled"),
            "{}",
            err.error.message
        );
    }

    #[tokio::test]
    async fn a_retried_update_has_no_second_effect() {
        let (engine, store, mut rx) = engine();
        let task = engine
            .create_task("t", "x", json!({}), Value::Null, json!({}))
            .await
            .unwrap();
        rx.try_recv().unwrap();
        let mut parked = store.get("t", &task.task_id).await.unwrap().unwrap();
        let mut reqs = std::collections::BTreeMap::new();
        reqs.insert(
            "ok".to_owned(),
            json!({"method": "elicitation/create", "params": {}}),
        );
        parked.require_input(reqs).unwrap();
        store.update(&parked).await.unwrap();
        let answer = json!({"ok": {"action": "accept", "content": {"ok": true}}});
        let answer = answer.as_object().unwrap();
        engine.update("t", &task.task_id, answer).await.unwrap();
        let after_first = store.get("t", &task.task_id).await.unwrap().unwrap();
        assert_eq!(after_first.status, TaskStatus::Working);
        assert_eq!(rx.try_recv().unwrap().kind, WorkKind::Resume);
        engine.update("t", &task.task_id, answer).await.unwrap();
        let after_retry = store.get("t", &task.task_id).await.unwrap().unwrap();
        assert_eq!(after_retry, after_first, "the retry wrote nothing");
        assert!(rx.try_recv().is_err(), "and resumed nothing");
    }
}
