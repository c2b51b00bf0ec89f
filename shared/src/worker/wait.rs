//! Waiting for a running place: a job whose tenant runs as many jobs as it may is put back in
//! the queue, and its task carries a mark that says so, so that the sweep does not take the
//! quiet task for an orphan and send it again (each copy would then wait and be re-sent on
//! its own, for as long as the task waits).
//!
//! The mark ([`TaskRecord::waiting_until_ms`]) vouches for the waiting message for
//! [`WAIT_MARK`]; the message, re-sent every [`DEFER_DELAY`] without a read or a write, renews
//! it halfway through. A renewal is a conditional write that bumps
//! [`TaskRecord::waiting_seq`], and the message carries the number it was sent for
//! ([`WorkKind::Waiting`]): a copy whose number is stale (a duplicate delivery, an older
//! message) finds another message vouching for the task and is dropped, so the wait never
//! forks. Should every copy be lost, the mark runs out and the sweep sends the task again.

use super::*;

/// How long a waiting task's mark vouches for its message: renewed halfway through, so a
/// waiting job costs one read and one write (and one index write) every 150 s, besides its
/// deferrals.
pub const WAIT_MARK: Duration = Duration::from_secs(300);

impl Worker {
    /// Puts `msg` back to wait for a running place of its tenant (see the module docs); a
    /// message put back is counted ([`metric::JOBS_DEFERRED`]), a copy dropped is not.
    pub(super) async fn wait_turn(&self, msg: &WorkMessage) -> Result<Outcome, WorkerError> {
        let outcome = self.next_wait(msg).await;
        if let Ok(Outcome::Deferred(..)) = outcome {
            metrics::global().count(metric::JOBS_DEFERRED, &[], 1);
        }
        outcome
    }

    async fn next_wait(&self, msg: &WorkMessage) -> Result<Outcome, WorkerError> {
        if let WorkKind::Waiting { renew_at_ms, .. } = msg.kind
            && now_ms() < renew_at_ms
        {
            return Ok(Outcome::Deferred(msg.clone(), DEFER_DELAY));
        }
        loop {
            let Some(mut task) = self.store.get(msg.key()).await? else {
                return Ok(Outcome::Dropped);
            };
            let now = now_ms();
            if task.status != TaskStatus::Working
                || task.is_expired(now)
                || task.lease.as_ref().is_some_and(|l| l.expires_at_ms > now)
            {
                // Finished, waiting for input, or run by another message: nothing to wait for.
                return Ok(Outcome::Dropped);
            }
            if let Some(wake) = task.wake_at_ms.filter(|w| *w > now) {
                // Asleep: a hop of its wake-up that came early, back at the wake time (as a
                // run would reschedule it), with nothing written.
                return Ok(Outcome::Deferred(
                    msg.clone(),
                    Duration::from_millis(wake - now),
                ));
            }
            let ours = matches!(msg.kind, WorkKind::Waiting { seq, .. } if seq == task.waiting_seq);
            if !ours && task.waiting_until_ms.is_some_and(|u| u > now) {
                // Another message waits for this task: this one is a copy.
                return Ok(Outcome::Dropped);
            }
            task.waiting_seq = task.waiting_seq.wrapping_add(1);
            task.waiting_until_ms = Some(now + WAIT_MARK.as_millis() as u64);
            match self.store.update(&task).await {
                Ok(_) => {
                    let next = WorkMessage {
                        tenant: task.tenant.clone(),
                        task_id: task.task_id.clone(),
                        kind: WorkKind::Waiting {
                            seq: task.waiting_seq,
                            renew_at_ms: now + WAIT_MARK.as_millis() as u64 / 2,
                        },
                    };
                    return Ok(Outcome::Deferred(next, DEFER_DELAY));
                }
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}
