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

use crate::task::{TaskId, TaskRef};
use crate::tenant::Tenant;

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
    /// A sleeping job's wake-up (or one hop of it, past SQS's 15-minute delay), for the
    /// task's wake sequence number: a copy from an earlier sequence is stale and dropped, so
    /// duplicate deliveries never fork the chain.
    Wake(u32),
    /// The task was cancelled while nobody ran it (queued, parked, waiting for input): its
    /// tool may stop what it started elsewhere ([`crate::tools::Tool::abandon`]).
    Cancelled,
    /// The job waits for one of its tenant's running places (re-sent at each deferral), for
    /// the task's waiting sequence number `seq`; when `renew_at_ms` has passed, the worker
    /// renews the task's waiting mark before sending it on (see `worker/wait.rs`).
    Waiting {
        /// The task's [`waiting_seq`](crate::task::TaskRecord::waiting_seq) it was sent for.
        seq: u32,
        /// When the mark is renewed (epoch ms).
        renew_at_ms: u64,
    },
}

/// One unit of work: which task to advance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkMessage {
    /// Owner tenant.
    pub tenant: Tenant,
    /// Task id.
    pub task_id: TaskId,
    /// Why.
    pub kind: WorkKind,
}

impl WorkMessage {
    /// The identity of the task the message names, as the store's calls take it.
    pub fn key(&self) -> TaskRef<'_> {
        TaskRef {
            tenant: &self.tenant,
            task_id: &self.task_id,
        }
    }
}

/// Why a queue call failed: what failed, and the backend's own error when there is one (for
/// logs only).
#[derive(Debug, thiserror::Error)]
#[error("work queue unavailable: {message}")]
pub struct QueueError {
    message: String,
    #[source]
    source: Option<crate::store::BoxError>,
}

impl QueueError {
    /// A failure described by `message` alone.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// A failure: `message`, caused by `source`.
    pub fn from_source(
        message: impl Into<String>,
        source: impl Into<crate::store::BoxError>,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

/// Sends work messages.
///
/// Contract: `enqueue` returns once the message is accepted for delivery (at least once,
/// after `delay`); delivery order is not guaranteed.
#[async_trait]
pub trait WorkQueue: Send + Sync + 'static {
    /// Sends `msg`, delivered after `delay`.
    async fn enqueue(&self, msg: WorkMessage, delay: Duration) -> Result<(), QueueError>;
    /// About how many messages wait to be received now (delayed ones not counted), or `None`
    /// when the queue cannot tell. The orphan sweep asks once per run: while messages wait, a
    /// task whose message was sent and not yet taken may simply be queued, so it is not sent
    /// again.
    async fn waiting(&self) -> Result<Option<u64>, QueueError> {
        Ok(None)
    }
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
                .map_err(|_| QueueError::new("local worker stopped"));
        }
        if self.tx.is_closed() {
            return Err(QueueError::new("local worker stopped"));
        }
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(msg);
        });
        Ok(())
    }
}

/// Fault injection: delivers every message twice, the copy `delay` after the original. The
/// worker must make the copy harmless (feature `fault-injection`).
#[cfg(feature = "fault-injection")]
pub struct DuplicatingQueue {
    inner: std::sync::Arc<dyn WorkQueue>,
    delay: Duration,
}

#[cfg(feature = "fault-injection")]
impl DuplicatingQueue {
    /// Wraps `inner`.
    pub fn new(inner: std::sync::Arc<dyn WorkQueue>, delay: Duration) -> Self {
        Self { inner, delay }
    }
}

#[cfg(feature = "fault-injection")]
#[async_trait]
impl WorkQueue for DuplicatingQueue {
    async fn enqueue(&self, msg: WorkMessage, delay: Duration) -> Result<(), QueueError> {
        self.inner.enqueue(msg.clone(), delay).await?;
        self.inner.enqueue(msg, delay + self.delay).await
    }
    async fn waiting(&self) -> Result<Option<u64>, QueueError> {
        self.inner.waiting().await
    }
}

/// The contract every [`WorkQueue`] adapter must pass, given the queue and a way to receive
/// what it delivers (the local channel here; an SQS receive loop for the SQS adapter). Only in
/// this crate's tests and with feature `contracts`: no release build carries it.
#[cfg(any(test, feature = "contracts"))]
pub mod contract {
    use std::future::Future;
    use std::time::Duration;

    use super::{TaskId, WorkKind, WorkMessage, WorkQueue};

    fn msg(id: &str, kind: WorkKind) -> WorkMessage {
        WorkMessage {
            tenant: "contract".into(),
            task_id: TaskId::parse(id).expect("a task id"),
            kind,
        }
    }

    /// Runs every check. `recv` returns the next delivered message, or `None` after waiting
    /// `wait` without one.
    pub async fn run_all<Q, R, Fut>(queue: &Q, mut recv: R)
    where
        Q: WorkQueue,
        R: FnMut(Duration) -> Fut,
        Fut: Future<Output = Option<WorkMessage>>,
    {
        // A message arrives intact.
        let m = msg("tsk_contract_a", WorkKind::Resume);
        queue.enqueue(m.clone(), Duration::ZERO).await.unwrap();
        assert_eq!(recv(Duration::from_secs(10)).await, Some(m));

        // A delayed message does not arrive before its delay, and does after.
        let late = msg("tsk_contract_late", WorkKind::Continue);
        queue
            .enqueue(late.clone(), Duration::from_millis(1500))
            .await
            .unwrap();
        assert_eq!(
            recv(Duration::from_millis(500)).await,
            None,
            "delivered early"
        );
        assert_eq!(recv(Duration::from_secs(10)).await, Some(late));

        // Many messages are all delivered (at least once; order is not promised).
        let want: std::collections::BTreeSet<String> =
            (0..50).map(|i| format!("tsk_contract_{i}")).collect();
        for id in &want {
            queue
                .enqueue(msg(id, WorkKind::Start), Duration::ZERO)
                .await
                .unwrap();
        }
        let mut got = std::collections::BTreeSet::new();
        while got.len() < want.len() {
            match recv(Duration::from_secs(10)).await {
                Some(m) => {
                    got.insert(m.task_id.to_string());
                }
                None => panic!("only {} of {} messages arrived", got.len(), want.len()),
            }
        }
        assert_eq!(got, want);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: &str) -> WorkMessage {
        WorkMessage {
            tenant: "t".into(),
            task_id: TaskId::parse(id).expect("a task id"),
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

    #[tokio::test]
    async fn local_queue_passes_the_contract() {
        let (q, rx) = LocalQueue::new();
        let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
        contract::run_all(&q, |wait| {
            let rx = rx.clone();
            async move {
                tokio::time::timeout(wait, rx.lock().await.recv())
                    .await
                    .ok()
                    .flatten()
            }
        })
        .await;
    }

    #[cfg(feature = "fault-injection")]
    #[tokio::test]
    async fn the_duplicating_queue_delivers_every_message_twice() {
        let (q, mut rx) = LocalQueue::new();
        let dup = DuplicatingQueue::new(std::sync::Arc::new(q), Duration::from_millis(20));
        dup.enqueue(msg("a"), Duration::ZERO).await.unwrap();
        dup.enqueue(msg("b"), Duration::ZERO).await.unwrap();
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(rx.recv().await.unwrap().task_id);
        }
        got.sort();
        assert_eq!(got, ["a", "a", "b", "b"]);
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

    /// The queue's wire (an SQS message body, a DLQ letter): the bytes every kind of message
    /// is written as, pinned, and read back. Messages in flight cross upgrades, so these
    /// never change with the Rust types that carry them (the tenant's newtype included).
    #[test]
    fn work_messages_keep_their_wire_bytes() {
        let tenant = "a#b%\"é\\";
        let cases = [
            (
                WorkKind::Start,
                r#"{"tenant":"a#b%\"é\\","task_id":"tsk_01J0GOLDEN","kind":"start"}"#,
            ),
            (
                WorkKind::Resume,
                r#"{"tenant":"a#b%\"é\\","task_id":"tsk_01J0GOLDEN","kind":"resume"}"#,
            ),
            (
                WorkKind::Continue,
                r#"{"tenant":"a#b%\"é\\","task_id":"tsk_01J0GOLDEN","kind":"continue"}"#,
            ),
            (
                WorkKind::Recover,
                r#"{"tenant":"a#b%\"é\\","task_id":"tsk_01J0GOLDEN","kind":"recover"}"#,
            ),
            (
                WorkKind::Wake(3),
                r#"{"tenant":"a#b%\"é\\","task_id":"tsk_01J0GOLDEN","kind":{"wake":3}}"#,
            ),
            (
                WorkKind::Waiting {
                    seq: 2,
                    renew_at_ms: 1_700_000_000_123,
                },
                r#"{"tenant":"a#b%\"é\\","task_id":"tsk_01J0GOLDEN","kind":{"waiting":{"seq":2,"renew_at_ms":1700000000123}}}"#,
            ),
        ];
        for (kind, golden) in cases {
            let m = WorkMessage {
                tenant: tenant.into(),
                task_id: TaskId::from_static("tsk_01J0GOLDEN"),
                kind,
            };
            assert_eq!(serde_json::to_string(&m).unwrap(), golden);
            assert_eq!(serde_json::from_str::<WorkMessage>(golden).unwrap(), m);
        }
    }
}
