//! A run: the steps of a job under a lease, run by the job runner ([`crate::jobs::runner`])
//! against the store (the lane: saves, checks, the per-task limits), and what its end becomes.

use super::deadline::in_time;
use super::finish::adopt;
use super::*;
use crate::jobs::runner::{Final, Lane, Runner, panicked, task_end};
use crate::store::record_len;

/// The worker's lane: a run against the store, under a lease. Its saves and checks are
/// conditional writes and reads of the task; its limits are the per-task quotas.
struct StoreLane<'w> {
    worker: &'w Worker,
    task: TaskRecord,
    owner: &'w str,
    progress: ProgressSink,
    /// What earlier runs used, and when this one started: with this run's, held to the
    /// per-task quotas.
    base_cpu_ms: u64,
    base_run_ms: u64,
    started: Instant,
    /// The tool's own limit on running time, when it has one.
    wall: Option<Duration>,
    release: Option<Release>,
}

impl Lane for StoreLane<'_> {
    type Stop = Interrupt;
    type Error = WorkerError;

    fn save_gap(&self) -> Duration {
        // The record's size says how long: a large checkpoint is saved less often.
        save_gap(
            self.worker.settings.checkpoint_every,
            record_len(&self.task),
        )
    }

    fn check_every(&self) -> Option<Duration> {
        Some(self.worker.settings.check_every)
    }

    async fn save(
        &mut self,
        ctx: &JobContext,
        by: Option<Instant>,
    ) -> Result<Option<Interrupt>, WorkerError> {
        let (task, owner, progress) = (&mut self.task, self.owner, &self.progress);
        self.worker.save_step(task, ctx, progress, owner, by).await
    }

    async fn check(&mut self, by: Option<Instant>) -> Result<Option<Interrupt>, WorkerError> {
        let (task, owner, progress) = (&mut self.task, self.owner, &self.progress);
        in_time(by, self.worker.check(task, owner, progress)).await
    }

    fn account(&mut self, ctx: &JobContext) {
        self.task.cpu_ms = self.base_cpu_ms + ctx.cpu_used_ms();
        self.task.run_ms = self.base_run_ms + self.started.elapsed().as_millis() as u64;
    }

    fn over_quota(&self) -> Option<crate::quota::QuotaExceeded> {
        self.worker.over_quota(&self.task, self.wall)
    }

    fn released(&self) -> bool {
        self.release.as_ref().is_some_and(|r| *r.borrow())
    }
}

impl Worker {
    /// Runs `task`'s job under the lease `owner` holds, until it ends, asks, parks or hands
    /// over (by `deadline`, when the invocation has one, or once `release` turns true).
    pub(super) async fn run(
        &self,
        tool: Arc<dyn Tool>,
        task: TaskRecord,
        arguments: Value,
        owner: &str,
        deadline: Option<Instant>,
        release: Option<Release>,
    ) -> Result<Outcome, WorkerError> {
        let progress = ProgressSink::latest_only();
        let ctx = JobContext::new(
            arguments,
            task.checkpoint.clone(),
            task.input_responses.clone().into_iter().collect(),
            task.client_capabilities.clone(),
            progress.clone(),
        )
        .for_tenant(&task.tenant)
        .for_task(&task.task_id, task.interruptions)
        .parking()
        .until(self.stop_at(&task, deadline));
        let mut lane = StoreLane {
            worker: self,
            base_cpu_ms: task.cpu_ms,
            base_run_ms: task.run_ms,
            started: Instant::now(),
            wall: tool.run_policy().max_task_wall,
            task,
            owner,
            progress,
            release,
        };
        let mut runner = Runner::new(ctx, &lane);
        let end = runner.run(&tool, &mut lane).await?;
        let checkpoint = runner.ctx().raw_checkpoint();
        let StoreLane {
            mut task, progress, ..
        } = lane;
        let task = &mut task;
        match end {
            Final::Done(result) => {
                // A finished task keeps its result, not what running it needed: the room is
                // the result's (so any result a declared target may answer fits).
                self.finish(task, owner, |t| {
                    t.checkpoint = Value::Null;
                    t.input_requests.clear();
                    t.input_responses.clear();
                    t.complete(result.clone())
                })
                .await
            }
            Final::Failed(e) => match task_end(e) {
                Ok(result) => {
                    self.finish(task, owner, |t| t.complete(result.clone()))
                        .await
                }
                Err(err) => self.finish(task, owner, |t| t.fail(err.clone())).await,
            },
            Final::Panicked => {
                tracing::error!(task_id = %task.task_id, tool = %task.tool, "job step panicked");
                let err = panicked();
                self.finish(task, owner, |t| t.fail(err.clone())).await
            }
            Final::Ask(requests) => self.ask(task, owner, checkpoint, requests).await,
            Final::Park(d) => {
                self.park(task, owner, checkpoint, &progress, deadline, d)
                    .await
            }
            Final::HandOver => {
                self.hand_over(task, checkpoint, owner, deadline, None)
                    .await
            }
            Final::OverQuota(over) => self.stop_at_quota(&tool, task, owner, over).await,
            Final::Stopped(why) => {
                self.interrupted(task, owner, why, checkpoint, deadline)
                    .await
            }
        }
    }

    /// When a run with this `deadline` hands over: the margin before it, but never more than
    /// half of the time left. And whatever the deadline says, every run completes at least one
    /// step before it hands over: a job can then never be handed on and on without progress (a
    /// step that outlives the invocation is killed with it, and the runs that die are counted).
    fn stop_at(&self, task: &TaskRecord, deadline: Option<Instant>) -> Option<Instant> {
        deadline.map(|d| {
            let left = d.saturating_duration_since(Instant::now());
            if left < self.settings.deadline_margin {
                tracing::warn!(task_id = %task.task_id, left_ms = left.as_millis() as u64, "short invocation: running one step before handing over");
            }
            d - self.settings.deadline_margin.min(left / 2)
        })
    }

    /// Ends a job that went past a per-task limit with the quota's result, and lets its tool
    /// stop what it started elsewhere.
    async fn stop_at_quota(
        &self,
        tool: &Arc<dyn Tool>,
        task: &mut TaskRecord,
        owner: &str,
        over: crate::quota::QuotaExceeded,
    ) -> Result<Outcome, WorkerError> {
        tracing::info!(task_id = %task.task_id, limit = over.limit.as_str(), "quota.stopped");
        let result = over.to_tool_result();
        let out = self
            .finish(task, owner, |t| t.complete(result.clone()))
            .await;
        tool.abandon(&task.task_id, &task.checkpoint).await;
        out
    }

    /// Saves a step's checkpoint (with the latest progress and poll interval) under the lease.
    async fn save_step(
        &self,
        task: &mut TaskRecord,
        ctx: &JobContext,
        progress: &ProgressSink,
        owner: &str,
        stop_at: Option<Instant>,
    ) -> Result<Option<Interrupt>, WorkerError> {
        task.checkpoint = ctx.raw_checkpoint().clone();
        // Progress is saved: earlier deaths no longer count against the job (the limit is on
        // runs that die without getting anywhere).
        task.interruptions = 0;
        if let Some(m) = progress.latest_message() {
            task.status_message = Some(m);
        }
        if let Some(left) = ctx.remaining() {
            let floor = self.settings.poll_interval_floor;
            task.poll_interval_ms = crate::jobs::poll_interval_for(left, floor).as_millis() as u64;
        }
        task.touch();
        let out = in_time(stop_at, self.write_or_check(task, owner)).await?;
        #[cfg(feature = "fault-injection")]
        if out.is_none() {
            crate::fault::checkpoint_written(&task.task_id);
        }
        Ok(out)
    }

    /// The per-task limit a job has gone past, judging by what it used (this run included).
    /// `tool_wall` is the tool's own limit on running time, when it has one below the
    /// server's.
    pub(super) fn over_quota(
        &self,
        task: &TaskRecord,
        tool_wall: Option<Duration>,
    ) -> Option<crate::quota::QuotaExceeded> {
        use crate::quota::{Limit, QuotaExceeded};
        let mut q = self.settings.quotas.clone();
        let mut grace = WALL_GRACE;
        if let Some(w) = tool_wall.filter(|w| *w < q.max_task_wall) {
            q.max_task_wall = w;
            grace = Duration::ZERO;
        }
        let q = &q;
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
        let wall = q.max_task_wall + grace;
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
    pub(super) async fn check(
        &self,
        task: &mut TaskRecord,
        owner: &str,
        progress: &ProgressSink,
    ) -> Result<Option<Interrupt>, WorkerError> {
        let Some(stored) = self.store.get(task.key()).await? else {
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
    pub(super) fn verdict(&self, stored: &TaskRecord, owner: &str) -> Option<Interrupt> {
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
    pub(super) async fn write_or_check(
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
                    let Some(stored) = self.store.get(task.key()).await? else {
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
}
