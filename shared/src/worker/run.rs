//! A run: the steps of a job under a lease, the checks between them, and the deadline.

use super::deadline::{in_time, sleep_until_opt};
use super::finish::adopt;
use super::*;
use crate::store::record_len;

impl Worker {
    pub(super) async fn run(
        &self,
        tool: Arc<dyn Tool>,
        mut task: TaskRecord,
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
        .parking();
        let policy = tool.run_policy();
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
        let mut ctx = ctx.until(stop_at);
        // A task woken (or handed over) past its running-time limit stops before it asks for
        // another step: the limit holds whatever the last step answered.
        if let Some(over) = self.over_quota(&task, policy.max_task_wall) {
            return self.stop_at_quota(&tool, &mut task, owner, over).await;
        }
        let mut stepped = false;
        let mut next_check = Instant::now() + self.settings.check_every;
        // Taking the lease was a write: the next one is owed a gap from now, as long as the
        // record's size says (a large checkpoint is saved less often).
        let mut last_save = Instant::now();
        let mut gap = save_gap(self.settings.checkpoint_every, record_len(&task));
        let released = || release.as_ref().is_some_and(|r| *r.borrow());
        loop {
            // Between steps only: a step asked to stop early is never cut short.
            if stepped && (stop_at.is_some_and(|s| Instant::now() >= s) || released()) {
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
                // Asking from a new checkpoint: the checkpoint moves on, then it is an ask.
                Ok(Ok(Ok(Step::NeedInputAt(cp, requests)))) => {
                    ctx.set_checkpoint(cp);
                    Ok(Step::NeedInput(requests))
                }
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
            let step = match step {
                // Too short to be worth a message: slept in place, then saved like any step's
                // checkpoint (a job pacing its steps this way still saves its progress).
                Ok(Step::Sleep(cp, d)) if d < PARK_AFTER => {
                    tokio::time::sleep(d).await;
                    Ok(Step::Continue(cp))
                }
                other => other,
            };
            task.cpu_ms = base_cpu_ms + ctx.cpu_used_ms();
            task.run_ms = base_run_ms + run_started.elapsed().as_millis() as u64;
            // Every answer that goes on (a next step, a sleep, a question) is held to the
            // running-time limit; one that ends the job is not stopped short of its end.
            if matches!(
                step,
                Ok(Step::Continue(_) | Step::Sleep(..) | Step::NeedInput(_))
            ) && let Some(over) = self.over_quota(&task, policy.max_task_wall)
            {
                return self.stop_at_quota(&tool, &mut task, owner, over).await;
            }
            match step {
                Ok(Step::Continue(cp)) => {
                    ctx.set_checkpoint(cp);
                    if last_save.elapsed() >= gap {
                        last_save = Instant::now();
                        if let Some(i) = self
                            .save_step(&mut task, &ctx, &progress, owner, stop_at)
                            .await?
                        {
                            let cp = ctx.raw_checkpoint();
                            return self.interrupted(&mut task, owner, i, cp, deadline).await;
                        }
                        gap = save_gap(self.settings.checkpoint_every, record_len(&task));
                        // The write was conditional on the version this run holds: it found
                        // no cancel request and the lease still ours, as a check would have.
                        // The next check waits half an interval more than the next
                        // checkpoint, so a job whose steps are short is written, never read
                        // (a cancel is seen at the next write); one stuck in a long step is
                        // still checked within one and a half intervals.
                        next_check = Instant::now() + self.settings.check_every * 3 / 2;
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
                Ok(Step::Sleep(cp, d)) => {
                    ctx.set_checkpoint(cp);
                    if let Some(m) = progress.latest_message() {
                        task.status_message = Some(m);
                    }
                    // Parking writes the record: a large one parks no more often than it
                    // would be saved (the sleep lasts longer than asked, never shorter).
                    let d = d.max(gap.saturating_sub(last_save.elapsed()));
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
                Ok(Step::NeedInputAt(..)) => unreachable!("made an ask above"),
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
                    // A finished task keeps its result, not what running it needed: the room
                    // is the result's (so any result a declared target may answer fits).
                    return self
                        .finish(&mut task, owner, |t| {
                            t.checkpoint = Value::Null;
                            t.input_requests.clear();
                            t.input_responses.clear();
                            t.complete(result.clone())
                        })
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
