//! The work queue's dead-letter queue, for operators (`mcp-tasks dlq …`): look at what is in
//! it, and move work messages back to the work queue.
//!
//! A message reaches the dead-letter queue after the queue's `maxReceiveCount` deliveries that
//! did not delete it (a worker that kept crashing, a store outage). Its body should be a
//! [`WorkMessage`], which names a task and nothing else; what is shown of a message is its id,
//! its receive count, when it was first sent and — when the body is a work message — the
//! tenant, task id and kind. Any other body is never shown (it is not ours, and may hold
//! anything).
//!
//! Looking is not free on SQS: a message can only be read by receiving it, which hides it for
//! a visibility timeout and counts one more receive. Both commands receive with a short
//! visibility ([`HIDE`]), so that one pass sees each message once, and make what they leave
//! visible again at the end; a pass that is interrupted leaves nothing hidden for longer than
//! [`HIDE`]. Redrive sends a message to the work queue **before** deleting it from the
//! dead-letter queue: interrupted in between, the message is in both, and the duplicate is
//! harmless (the worker's lease and conditional writes make a second delivery a no-op).

use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, Message, MessageSystemAttributeName,
};
use serde::Serialize;

use super::sqs::SqsQueue;
use crate::clock::iso8601;
use crate::queue::{WorkKind, WorkMessage, WorkQueue as _};
use crate::tenant::Tenant;

/// How long a received message stays hidden while a pass runs.
pub const HIDE: Duration = Duration::from_secs(60);
/// How long one `ReceiveMessage` waits for messages (long polling asks every SQS server, so an
/// empty answer means an empty queue). Build the client with
/// [`Timeouts::sqs_long_poll`](super::Timeouts::sqs_long_poll)`(RECEIVE_WAIT)`.
pub const RECEIVE_WAIT: Duration = Duration::from_secs(1);
/// Most messages one pass handles.
pub const MAX_LIMIT: usize = 1000;

/// An SQS call failed.
#[derive(Debug, thiserror::Error)]
#[error("SQS {call} failed: {detail}")]
pub struct DlqError {
    /// The SQS operation.
    pub call: &'static str,
    /// The SDK's error, with its context.
    pub detail: String,
}

fn sqs_error<E: std::error::Error>(call: &'static str) -> impl FnOnce(E) -> DlqError {
    move |e| DlqError {
        call,
        detail: DisplayErrorContext(e).to_string(),
    }
}

/// What the work message of a dead letter names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkSummary {
    /// The task's tenant.
    pub tenant: Tenant,
    /// The task id.
    pub task_id: String,
    /// Why the work was sent (`start`, `resume`, `continue`, `recover`, `wake`).
    pub kind: String,
}

/// One message of the dead-letter queue, as much of it as may be shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetter {
    /// The SQS message id.
    pub message_id: String,
    /// `ApproximateReceiveCount`, this pass's receive included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receive_count: Option<u32>,
    /// When the message was first sent (to the work queue), ISO 8601 UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<String>,
    /// The task it names, or `None` when the body is not a work message.
    pub work: Option<WorkSummary>,
}

/// A received message: what may be shown, and what the pass needs to act on it.
struct Received {
    letter: DeadLetter,
    message: Option<WorkMessage>,
    receipt: String,
}

/// A body that is a work message naming a plausible task; anything else is `None`.
fn work_message(body: Option<&str>) -> Option<WorkMessage> {
    let m: WorkMessage = serde_json::from_str(body?).ok()?;
    let tenant_ok = !m.tenant.is_empty() && !m.tenant.chars().any(char::is_control);
    (tenant_ok && m.tenant.len() <= 256).then_some(m)
}

fn kind_name(kind: WorkKind) -> String {
    match kind {
        WorkKind::Start => "start".into(),
        WorkKind::Resume => "resume".into(),
        WorkKind::Continue => "continue".into(),
        WorkKind::Recover => "recover".into(),
        WorkKind::Cancelled => "cancelled".into(),
        WorkKind::Wake(n) => format!("wake {n}"),
        WorkKind::Waiting { seq, .. } => format!("waiting {seq}"),
    }
}

fn received(m: &Message) -> Option<Received> {
    let attr = |name: MessageSystemAttributeName| m.attributes()?.get(&name).map(String::as_str);
    let message = work_message(m.body());
    Some(Received {
        letter: DeadLetter {
            message_id: m.message_id()?.to_owned(),
            receive_count: attr(MessageSystemAttributeName::ApproximateReceiveCount)
                .and_then(|n| n.parse().ok()),
            sent_at: attr(MessageSystemAttributeName::SentTimestamp)
                .and_then(|t| t.parse().ok())
                .map(iso8601),
            work: message.as_ref().map(|w| WorkSummary {
                tenant: w.tenant.clone(),
                task_id: w.task_id.to_string(),
                kind: kind_name(w.kind),
            }),
        },
        message,
        receipt: m.receipt_handle()?.to_owned(),
    })
}

/// Receives up to `limit` distinct messages (each hidden for [`HIDE`]), until the queue has
/// no visible message left.
async fn receive(client: &Client, url: &str, limit: usize) -> Result<Vec<Received>, DlqError> {
    let mut out: Vec<Received> = Vec::new();
    while out.len() < limit {
        let want = (limit - out.len()).min(10) as i32;
        let got = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(want)
            .wait_time_seconds(RECEIVE_WAIT.as_secs() as i32)
            .visibility_timeout(HIDE.as_secs() as i32)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .map_err(sqs_error("ReceiveMessage"))?;
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        for m in &messages {
            let Some(r) = received(m) else { continue };
            // A message whose hiding lapsed during a long pass comes again: once is enough.
            if out
                .iter()
                .all(|o| o.letter.message_id != r.letter.message_id)
            {
                out.push(r);
            }
        }
    }
    Ok(out)
}

/// Makes the given messages visible again at once (best effort: what fails shows again after
/// [`HIDE`] anyway).
async fn release(client: &Client, url: &str, receipts: &[&str]) {
    for chunk in receipts.chunks(10) {
        let entries = chunk.iter().enumerate().filter_map(|(i, r)| {
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(*r)
                .visibility_timeout(0)
                .build()
                .ok()
        });
        let sent = client
            .change_message_visibility_batch()
            .queue_url(url)
            .set_entries(Some(entries.collect()))
            .send()
            .await;
        if let Err(e) = sent {
            tracing::warn!(error = %DisplayErrorContext(e), "dlq.release_failed");
        }
    }
}

/// Up to `limit` messages of the dead-letter queue at `dlq_url`, left in it (and visible
/// again) afterwards.
pub async fn list(
    client: &Client,
    dlq_url: &str,
    limit: usize,
) -> Result<Vec<DeadLetter>, DlqError> {
    let got = receive(client, dlq_url, limit.clamp(1, MAX_LIMIT)).await?;
    let receipts: Vec<&str> = got.iter().map(|r| r.receipt.as_str()).collect();
    release(client, dlq_url, &receipts).await;
    Ok(got.into_iter().map(|r| r.letter).collect())
}

/// What [`redrive`] did, message by message.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Redrive {
    /// Sent to the work queue and deleted from the dead-letter queue.
    pub moved: Vec<DeadLetter>,
    /// Left in the dead-letter queue because the body is not a work message.
    pub not_work: Vec<DeadLetter>,
    /// Not moved, or moved but not deleted (then it is in both queues; a duplicate is
    /// harmless), with the reason.
    pub failed: Vec<(DeadLetter, String)>,
}

/// Moves up to `limit` work messages from the dead-letter queue at `dlq_url` to the work
/// queue at `queue_url`: each is sent first, then deleted. Messages that are not work
/// messages stay in the dead-letter queue and are reported.
pub async fn redrive(
    client: &Client,
    dlq_url: &str,
    queue_url: &str,
    limit: usize,
) -> Result<Redrive, DlqError> {
    let got = receive(client, dlq_url, limit.clamp(1, MAX_LIMIT)).await?;
    let queue = SqsQueue::new(client.clone(), queue_url);
    let mut report = Redrive::default();
    let mut keep: Vec<&str> = Vec::new();
    for r in &got {
        let Some(message) = r.message.clone() else {
            report.not_work.push(r.letter.clone());
            keep.push(&r.receipt);
            continue;
        };
        if let Err(e) = queue.enqueue(message, Duration::ZERO).await {
            report
                .failed
                .push((r.letter.clone(), format!("not sent to the work queue: {e}")));
            keep.push(&r.receipt);
            continue;
        }
        match client
            .delete_message()
            .queue_url(dlq_url)
            .receipt_handle(&r.receipt)
            .send()
            .await
        {
            Ok(_) => report.moved.push(r.letter.clone()),
            Err(e) => report.failed.push((
                r.letter.clone(),
                format!(
                    "sent to the work queue but not deleted from the dead-letter queue ({}): it \
                     is in both now, and a second delivery is harmless",
                    DisplayErrorContext(e)
                ),
            )),
        }
    }
    release(client, dlq_url, &keep).await;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_work_messages_naming_a_task_are_read_from_a_body() {
        let ok = r#"{"tenant":"t","task_id":"tsk_1","kind":"start"}"#;
        assert_eq!(work_message(Some(ok)).unwrap().task_id, "tsk_1");
        let wake = r#"{"tenant":"t","task_id":"tsk_1","kind":{"wake":3}}"#;
        assert_eq!(kind_name(work_message(Some(wake)).unwrap().kind), "wake 3");
        for bad in [
            "password=hunter2",
            r#"{"tenant":"t","task_id":"tsk 1","kind":"start"}"#,
            r#"{"tenant":"a\u0007","task_id":"tsk_1","kind":"start"}"#,
            r#"{"tenant":"t","task_id":"tsk_1","kind":"explode"}"#,
        ] {
            assert!(work_message(Some(bad)).is_none(), "{bad}");
        }
        assert!(work_message(None).is_none());
    }
}
