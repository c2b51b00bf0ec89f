//! Taking a task for a run: the checks before it and the conditional write of the lease.

use super::*;

/// What one try at taking a task came to.
enum Try {
    /// The lease is ours: run it (boxed: a record is large beside the other answers).
    Leased(Box<TaskRecord>),
    /// Nothing to run: this is what became of the message.
    Skip(Outcome),
    /// A write lost a race: read the task again.
    Again,
}

impl Worker {
    /// Reads the task and takes the lease; `Err(outcome)` when there is nothing to run.
    pub(super) async fn acquire(
        &self,
        msg: &WorkMessage,
        owner: &str,
    ) -> Result<Result<TaskRecord, Outcome>, WorkerError> {
        loop {
            let Some(mut task) = self.store.get(msg.key()).await? else {
                return Ok(Err(Outcome::Dropped));
            };
            let now = now_ms();
            let tried = match self.screen(msg, &mut task, now).await? {
                Some(tried) => tried,
                None => self.lease(msg, task, owner, now).await?,
            };
            match tried {
                Try::Leased(task) => return Ok(Ok(*task)),
                Try::Skip(outcome) => return Ok(Err(outcome)),
                Try::Again => continue,
            }
        }
    }

    /// The checks before a lease: a task ended, held by a live run, cancelled while nothing
    /// held it, asleep, or of a tool not known yet is not run (`None`: go on to the lease).
    async fn screen(
        &self,
        msg: &WorkMessage,
        task: &mut TaskRecord,
        now: u64,
    ) -> Result<Option<Try>, WorkerError> {
        if task.status.is_terminal() || task.is_expired(now) {
            // Ended while parked or queued (a cancel, its TTL): what its tool started
            // elsewhere is stopped when the cancel's message, or the wake, comes by.
            let ended_early = task.status == TaskStatus::Cancelled
                || (task.is_expired(now) && !task.status.is_terminal());
            if ended_early && matches!(msg.kind, WorkKind::Cancelled | WorkKind::Wake(_)) {
                self.stop_elsewhere(task).await;
            }
            return Ok(Some(Try::Skip(Outcome::Dropped)));
        }
        // A live run owns the task, cancel asked or not: it sees the request at its next
        // check and writes `cancelled` once its step has stopped. Writing it here (a
        // duplicate delivery meanwhile) would say "stopped" while that step still runs.
        if task.status == TaskStatus::Working
            && let Some(l) = task.lease.as_ref().filter(|l| l.expires_at_ms > now)
        {
            let left = Duration::from_millis(l.expires_at_ms - now);
            return Ok(Some(Try::Skip(Outcome::Busy(left))));
        }
        if task.cancel_requested {
            let _ = task.cancel();
            return match self.store.update(task).await {
                Ok(_) => {
                    tracing::info!(task_id = %task.task_id, "task.cancelled");
                    self.stop_elsewhere(task).await;
                    Ok(Some(Try::Skip(Outcome::Finished(TaskStatus::Cancelled))))
                }
                Err(StoreError::Conflict) => Ok(Some(Try::Again)),
                Err(e) => Err(e.into()),
            };
        }
        if task.status != TaskStatus::Working {
            return Ok(Some(Try::Skip(Outcome::Dropped)));
        }
        if let Some(wake) = task.wake_at_ms.filter(|w| *w > now) {
            return self.next_hop(msg, task, wake, now).await.map(Some);
        }
        if self.tools.get(&task.tool).is_none()
            && now.saturating_sub(task.created_at_ms)
                < self.settings.unknown_tool_grace.as_millis() as u64
        {
            tracing::warn!(task_id = %task.task_id, tool = %task.tool, "tool.unknown_yet: given back to the queue");
            let again = Outcome::Deferred(msg.clone(), UNKNOWN_TOOL_RETRY);
            return Ok(Some(Try::Skip(again)));
        }
        Ok(None)
    }

    /// A sleeping job's message came early (a delay past SQS's 15 minutes is a chain of
    /// messages; a restart re-sends every working task): the next hop of its wake-up, under a
    /// new sequence number taken with a conditional write, so that a duplicate of this message
    /// (or of an older hop) finds itself stale and is dropped instead of forking the chain.
    async fn next_hop(
        &self,
        msg: &WorkMessage,
        task: &mut TaskRecord,
        wake: u64,
        now: u64,
    ) -> Result<Try, WorkerError> {
        if matches!(msg.kind, WorkKind::Wake(seq) if seq != task.wake_seq) {
            return Ok(Try::Skip(Outcome::Dropped));
        }
        task.wake_seq = task.wake_seq.wrapping_add(1);
        match self.store.update(task).await {
            Ok(_) => {
                let next = WorkMessage {
                    tenant: task.tenant.clone(),
                    task_id: task.task_id.clone(),
                    kind: WorkKind::Wake(task.wake_seq),
                };
                let delay = Duration::from_millis(wake - now);
                Ok(Try::Skip(Outcome::Rescheduled(next, delay)))
            }
            Err(StoreError::Conflict) => Ok(Try::Again),
            Err(e) => Err(e.into()),
        }
    }

    /// Takes the lease with a conditional write; a job whose runs keep dying is failed
    /// instead.
    async fn lease(
        &self,
        msg: &WorkMessage,
        mut task: TaskRecord,
        owner: &str,
        now: u64,
    ) -> Result<Try, WorkerError> {
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
            return Ok(Try::Skip(out));
        }
        task.lease = Some(Lease {
            owner: owner.to_owned(),
            expires_at_ms: now + self.settings.lease.as_millis() as u64,
        });
        // Awake: what it said while asleep ("waiting …") is over.
        if task.wake_at_ms.take().is_some() {
            task.status_message = None;
        }
        // Run again: the sweep's back-off starts over, and no wait vouches for it.
        task.sweeps = 0;
        task.sweep_after_ms = None;
        task.waiting_until_ms = None;
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
                Ok(Try::Leased(Box::new(task)))
            }
            Err(StoreError::Conflict) => Ok(Try::Again),
            Err(StoreError::TooLarge(_)) => {
                let out = self
                    .fail_compact(&mut task, "The task is too large to run")
                    .await?;
                Ok(Try::Skip(out))
            }
            Err(e) => Err(e.into()),
        }
    }
}
