//! How a run ends: finished, failed, interrupted, handed over or parked.

use super::deadline::{answer_by, before};
use super::*;

impl Worker {
    /// Ends this run for `why`; a deadline hands the job over from `checkpoint` (the run's
    /// latest, saved or not).
    pub(super) async fn interrupted(
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

    /// Parks the job on input requests from `checkpoint`; a job that asked incorrectly (no
    /// request, a key it used before) fails.
    pub(super) async fn ask(
        &self,
        task: &mut TaskRecord,
        owner: &str,
        checkpoint: &Value,
        requests: std::collections::BTreeMap<String, Value>,
    ) -> Result<Outcome, WorkerError> {
        if let Err(e) = task.clone().require_input(requests.clone()) {
            tracing::error!(task_id = %task.task_id, error = %e, "job asked for input incorrectly");
            let err = internal("The job asked for input incorrectly");
            return self.finish(task, owner, |t| t.fail(err.clone())).await;
        }
        let cp = checkpoint.clone();
        let out = self
            .finish(task, owner, move |t| {
                t.checkpoint = cp.clone();
                t.require_input(requests.clone())
            })
            .await?;
        Ok(match out {
            Outcome::Finished(TaskStatus::InputRequired) => Outcome::WaitingForInput,
            other => other,
        })
    }

    /// Parks a sleeping job for `d` from `checkpoint`: saved with its latest progress and a
    /// poll interval that suits the sleep, the lease released, a message delayed until it
    /// wakes.
    pub(super) async fn park(
        &self,
        task: &mut TaskRecord,
        owner: &str,
        checkpoint: &Value,
        progress: &ProgressSink,
        deadline: Option<Instant>,
        d: Duration,
    ) -> Result<Outcome, WorkerError> {
        if let Some(m) = progress.latest_message() {
            task.status_message = Some(m);
        }
        let floor = self.settings.poll_interval_floor;
        task.poll_interval_ms = crate::jobs::poll_interval_for(d, floor).as_millis() as u64;
        let wake = Wake {
            at_ms: now_ms() + d.as_millis() as u64,
            delay: d,
        };
        self.hand_over(task, checkpoint, owner, deadline, Some(wake))
            .await
    }

    /// Applies a final change with a conditional write, re-reading on lost races. A cancel
    /// request seen on re-read wins over the change (the client asked first); a run that has
    /// lost its lease writes nothing.
    pub(super) async fn finish<E>(
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
                    if task.status == TaskStatus::Cancelled {
                        self.stop_elsewhere(task).await;
                    }
                    return Ok(Outcome::Finished(task.status));
                }
                Err(StoreError::Conflict) => {
                    let Some(stored) = self.store.get(task.key()).await? else {
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

    /// Lets the tool of a task that ended before its job did stop what it started elsewhere
    /// ([`Tool::abandon`]).
    pub(super) async fn stop_elsewhere(&self, task: &TaskRecord) {
        if let Some(tool) = self.tools.get(&task.tool) {
            tool.abandon(&task.task_id, &task.checkpoint).await;
        }
    }

    /// Fails the task with a record stripped of everything large (checkpoint, answers,
    /// result), so the failure itself always fits.
    pub(super) async fn fail_compact(
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
                Err(StoreError::Conflict) => match self.store.get(task.key()).await? {
                    Some(stored) if !stored.status.is_terminal() => *task = stored,
                    _ => return Ok(Outcome::Superseded),
                },
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
    pub(super) async fn hand_over(
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
                Err(WorkerError::Store(StoreError::backend(
                    "the hand-over did not finish before the invocation's deadline",
                )))
            }
        }
    }

    pub(super) async fn save_and_continue(
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
                    let Some(stored) = self.store.get(task.key()).await? else {
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
pub(super) fn adopt(task: &mut TaskRecord, stored: TaskRecord) {
    let ours = std::mem::replace(task, stored);
    if task.status == TaskStatus::Working {
        task.checkpoint = ours.checkpoint;
        task.cpu_ms = ours.cpu_ms;
        task.run_ms = ours.run_ms;
    }
}
