//! The `worker` function: an SQS batch, each record handed to the worker, failures reported
//! per record.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::aws::xray::MessageSegment;
use crate::worker::Release;

/// Records in a full batch: the event source mapping's `BatchSize` in template.yaml.
pub const BATCH_SIZE: usize = 10;
/// How long an invocation runs fewer than half a batch's records before it looks whether work
/// waits, and hands them over if so ([`SqsWorker::handle`]).
pub const UNDERUSED_FOR: Duration = Duration::from_secs(10);

/// What to do with one SQS record once the worker is done with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Delete it (report success).
    Done,
    /// Report it failed: SQS delivers it again after the visibility timeout (and dead-letters
    /// it after the last allowed receive).
    Retry,
    /// The last allowed delivery failed: mark the task failed, then delete the message.
    GiveUp,
}

/// The retry policy, in one place.
///
/// - A result of any kind (finished, handed over, dropped, superseded) deletes the message.
/// - `Busy` (another run holds a live lease) is retried, in case that run dies; on the last
///   delivery it is deleted instead — the lease holder owns the task, and should it die the
///   sweep re-enqueues the task (and the worker fails a job that keeps dying), so failing a
///   healthy running task, or alarming on the DLQ, would be wrong.
/// - An error (store or queue unavailable) is retried; on the last delivery the task is given
///   up on, so no client polls forever — except a continuation that could not be sent after
///   the job was saved and handed over: that task is healthy, the sweep picks it up.
pub fn decide(outcome: &Result<Outcome, WorkerError>, last_delivery: bool) -> Action {
    match (outcome, last_delivery) {
        (Ok(Outcome::Busy(_)), false) | (Err(_), false) => Action::Retry,
        // The job was saved and handed over, only its continuation could not be sent: the
        // task is healthy, so it is not given up on. The message goes to the DLQ (and its
        // alarm) and the sweep re-enqueues the unheld task.
        (Err(WorkerError::Queue(_)), true) => Action::Retry,
        (Err(_), true) => Action::GiveUp,
        (Ok(_), _) => Action::Done,
    }
}

impl Action {
    /// The action's name in traces.
    fn label(self) -> &'static str {
        match self {
            Action::Done => "done",
            Action::Retry => "retry",
            Action::GiveUp => "give_up",
        }
    }
}

/// `ApproximateReceiveCount` of a record (1 when absent).
fn receive_count(record: &SqsMessage) -> u32 {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// The worker function: one SQS batch at a time, every record on its own.
pub struct SqsWorker {
    worker: Worker,
    queue: Arc<dyn WorkQueue>,
    max_receives: u32,
}

impl SqsWorker {
    /// A worker over the ports running `tools` ([`super::running_tools`]);
    /// `config.max_receives` must equal the queue's `maxReceiveCount`.
    pub fn new(config: &Config, ports: &Ports, tools: Arc<Registry>) -> Self {
        Self::with_settings(config, ports, tools, config.settings().worker)
    }

    /// As [`SqsWorker::new`], with explicit worker timing (tests).
    pub fn with_settings(
        config: &Config,
        ports: &Ports,
        tools: Arc<Registry>,
        settings: WorkerSettings,
    ) -> Self {
        Self {
            worker: Server::new(
                ports.clone(),
                crate::app::Settings {
                    worker: settings,
                    ..config.settings()
                },
                tools,
            )
            .worker(),
            queue: ports.queue.clone(),
            max_receives: config.max_receives,
        }
    }

    /// Runs every record of the batch concurrently (jobs mostly wait on I/O) and reports the
    /// ones to retry (`ReportBatchItemFailures`). The worker hands over
    /// [`WorkerSettings::deadline_margin`] before `deadline`, leaving that margin for the
    /// give-up writes and the response, or earlier when the invocation runs fewer than half a
    /// batch's records for [`UNDERUSED_FOR`] while work waits in the queue.
    pub async fn handle(&self, event: SqsEvent, deadline: Instant) -> SqsBatchResponse {
        let (release, released) = tokio::sync::watch::channel(false);
        let running = AtomicUsize::new(event.records.len());
        // Each record within its own trace (its AWSTraceHeader), which its sends carry on.
        let records = join_all(event.records.iter().map(|r| {
            let trace = r.attributes.get("AWSTraceHeader").map(String::as_str);
            let (released, running) = (released.clone(), &running);
            async move {
                let action =
                    crate::aws::within_trace(trace, self.record(r, deadline, released)).await;
                running.fetch_sub(1, Ordering::Relaxed);
                action
            }
        }));
        tokio::pin!(records);
        let actions = tokio::select! {
            actions = &mut records => actions,
            () = self.release_when_underused(&running, &release) => records.await,
        };
        let mut response = SqsBatchResponse::default();
        for (record, action) in event.records.iter().zip(actions) {
            if action == Action::Retry {
                // A record without an id cannot be named; an empty identifier makes Lambda
                // retry the whole batch, which is safe (duplicates are dropped by the lease).
                response.add_failure(record.message_id.clone().unwrap_or_default());
            }
        }
        response
    }

    /// Returns (and asks the batch's runs to hand over, `release`) once the invocation has
    /// run fewer than half a batch's records for [`UNDERUSED_FOR`] while messages wait in the
    /// queue; otherwise never. `MaximumConcurrency` counts invocations, and an invocation
    /// lasts as long as its slowest record: without this, one long job whose batch-mates are
    /// done holds a place meant for ten jobs until its hand-over (up to 15 minutes), and work
    /// waits for it. Its continuation then shares a fresh batch. A batch that keeps half its
    /// records running, or an idle queue, costs nothing but the look at the queue.
    async fn release_when_underused(
        &self,
        running: &AtomicUsize,
        release: &tokio::sync::watch::Sender<bool>,
    ) {
        let mut underused_since: Option<Instant> = None;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let n = running.load(Ordering::Relaxed);
            if n == 0 || 2 * n >= BATCH_SIZE {
                underused_since = None;
                continue;
            }
            let since = *underused_since.get_or_insert_with(Instant::now);
            if since.elapsed() < UNDERUSED_FOR {
                continue;
            }
            match self.queue.waiting().await {
                Ok(Some(waiting)) if waiting > 0 => {
                    tracing::info!(
                        running = n,
                        waiting,
                        "batch.released: work waits for an invocation this batch underuses"
                    );
                    release.send_replace(true);
                    return;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "batch.backlog_unknown"),
            }
            // Look again a window later.
            underused_since = Some(Instant::now());
        }
    }

    /// Handles one record inside its X-Ray segment (sent when the handling ends, on every
    /// path; see [`crate::aws::xray`]).
    async fn record(&self, record: &SqsMessage, deadline: Instant, released: Release) -> Action {
        let mut segment = MessageSegment::start(crate::aws::trace_header().as_deref());
        let action = self
            .handle_record(record, deadline, released, &mut segment)
            .await;
        if let Some(s) = segment.as_mut() {
            s.annotate("action", action.label());
        }
        action
    }

    async fn handle_record(
        &self,
        record: &SqsMessage,
        deadline: Instant,
        released: Release,
        segment: &mut Option<MessageSegment>,
    ) -> Action {
        let message_id = record.message_id.as_deref().unwrap_or("");
        let receives = receive_count(record);
        if let Some(s) = segment.as_mut() {
            s.annotate("receives", receives);
        }
        let last = receives >= self.max_receives;
        let parsed = record
            .body
            .as_deref()
            .map(serde_json::from_str::<WorkMessage>);
        let Some(Ok(msg)) = parsed else {
            // Never the body itself: it is not ours to log. Retried, so it reaches the DLQ
            // (and its alarm) instead of vanishing.
            tracing::error!(message_id, receives, "unreadable work message");
            return Action::Retry;
        };
        if let Some(s) = segment.as_mut() {
            s.annotate("task_id", msg.task_id.as_str());
        }
        let outcome = self
            .worker
            .handle_releasable(&msg, Some(deadline), Some(released))
            .await;
        if let Some(s) = segment.as_mut() {
            s.annotate("outcome", outcome.as_ref().map_or("error", Outcome::label));
            if outcome.is_err() {
                s.fault();
            }
        }
        // Waiting its tenant's turn, or a sleeping job's next hop: a fresh message (its receive
        // count starts again), then this one is deleted. Should the send fail, this one is
        // retried instead.
        let resend = match &outcome {
            Ok(Outcome::Deferred(next, delay)) => Some((next.clone(), *delay)),
            Ok(Outcome::Rescheduled(next, delay)) => Some((next.clone(), *delay)),
            _ => None,
        };
        if let Some((next, delay)) = resend {
            return match self.queue.enqueue(next, delay).await {
                Ok(()) => {
                    tracing::info!(message_id, task_id = %msg.task_id, "work message deferred");
                    Action::Done
                }
                Err(e) => {
                    tracing::warn!(message_id, task_id = %msg.task_id, error = %e, "deferring failed; retrying the message");
                    Action::Retry
                }
            };
        }
        let action = decide(&outcome, last);
        let trace = crate::aws::trace_header().unwrap_or_default();
        match &outcome {
            Ok(o) => {
                tracing::info!(message_id, task_id = %msg.task_id, receives, outcome = ?o, ?action, trace, "work message handled")
            }
            Err(e) => {
                tracing::error!(message_id, task_id = %msg.task_id, receives, error = %e, ?action, "work message failed")
            }
        }
        if action != Action::GiveUp {
            return action;
        }
        match self.worker.abandon(&msg).await {
            Ok(_) => Action::Done,
            Err(e) => {
                // Not even that worked: let the message go to the DLQ, where the alarm fires.
                tracing::error!(message_id, task_id = %msg.task_id, error = %e, "giving up on the task failed");
                Action::Retry
            }
        }
    }
}
