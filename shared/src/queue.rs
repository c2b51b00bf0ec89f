//! The work queue port and the in-process adapter.
//!
//! Nothing here assumes exactly-once delivery: a message only names a task, and the worker's
//! lease plus the store's conditional writes make a duplicate, late or out-of-order message
//! harmless. That is also what lets the local queue be lossy across restarts — at start-up
//! [`crate::engine::Engine::recover`] re-discovers unfinished tasks from the durable store.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// Why a message is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkKind {
    /// A new task.
    Start,
    /// Answers arrived through `tasks/update`.
    Resume,
    /// The job saved a checkpoint before a deadline and continues in a new invocation.
    Continue,
    /// Start-up recovery or the orphan sweep found the task without a worker.
    Recover,
}

/// One unit of work: which task to advance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkMessage {
    /// Owner tenant.
    pub tenant: String,
    /// Task id.
    pub task_id: String,
    /// Why.
    pub kind: WorkKind,
}

/// Why a send failed.
#[derive(Debug, thiserror::Error)]
#[error("work queue unavailable: {0}")]
pub struct QueueError(pub String);

/// Sends work messages.
///
/// Contract: `enqueue` returns once the message is accepted for delivery (at least once,
/// after `delay`); delivery order is not guaranteed.
#[async_trait]
pub trait WorkQueue: Send + Sync + 'static {
    /// Sends `msg`, delivered after `delay`.
    async fn enqueue(&self, msg: WorkMessage, delay: Duration) -> Result<(), QueueError>;
}

/// In-process queue: a channel the local worker loop reads.
#[derive(Clone)]
pub struct LocalQueue {
    tx: mpsc::UnboundedSender<WorkMessage>,
}

impl LocalQueue {
    /// A queue and the receiving end for the worker loop.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<WorkMessage>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }
}

#[async_trait]
impl WorkQueue for LocalQueue {
    async fn enqueue(&self, msg: WorkMessage, delay: Duration) -> Result<(), QueueError> {
        if delay.is_zero() {
            return self
                .tx
                .send(msg)
                .map_err(|_| QueueError("local worker stopped".into()));
        }
        if self.tx.is_closed() {
            return Err(QueueError("local worker stopped".into()));
        }
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(msg);
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: &str) -> WorkMessage {
        WorkMessage {
            tenant: "t".into(),
            task_id: id.into(),
            kind: WorkKind::Start,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_messages_arrive_after_their_delay() {
        let (q, mut rx) = LocalQueue::new();
        q.enqueue(msg("late"), Duration::from_secs(5))
            .await
            .unwrap();
        q.enqueue(msg("now"), Duration::ZERO).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().task_id, "now");
        let start = tokio::time::Instant::now();
        assert_eq!(rx.recv().await.unwrap().task_id, "late");
        assert!(start.elapsed() >= Duration::from_secs(5));
    }

    #[test]
    fn messages_round_trip_as_json() {
        let m = msg("tsk_1");
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"tenant": "t", "task_id": "tsk_1", "kind": "start"})
        );
        assert_eq!(serde_json::from_value::<WorkMessage>(v).unwrap(), m);
    }
}
