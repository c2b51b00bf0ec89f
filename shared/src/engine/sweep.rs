//! Keeping the store healthy without a request: start-up recovery (the embedded store), the
//! orphan sweep, and the purge of expired tasks.

use std::time::Duration;

use super::{Engine, RECOVERY_CONCURRENCY};
use crate::clock::now_ms;
use crate::queue::WorkKind;
use crate::store::{StoreError, TaskKey};
use crate::task::{TaskRecord, TaskStatus};

impl Engine {
    /// Every active task's key, page by page (start-up recovery of the embedded store sees all
    /// of them; the orphan sweep reads only its candidates, see [`Engine::sweep_until`]).
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
        let Some(mut task) = self.store.get(k.borrowed()).await? else {
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
            match self.store.delete(k.borrowed()).await {
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
    // woken a window ago and did not is an orphan. So is a job waiting for a running place:
    // its message renews its mark while it waits. A task the sweep re-sent waits out its
    // back-off.
    let quiet_since = t
        .last_updated_at_ms
        .max(t.wake_at_ms.unwrap_or(0))
        .max(t.sweep_after_ms.unwrap_or(0))
        .max(t.waiting_until_ms.unwrap_or(0));
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
