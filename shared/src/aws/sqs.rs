//! The SQS work queue: [`SqsQueue`] implements [`WorkQueue`] over one standard queue.
//!
//! A message body is the JSON of a [`WorkMessage`] (`{"tenant":…,"task_id":…,"kind":…}`) —
//! identifiers only, never arguments or results, which stay in the task item. SQS delivers at
//! least once and in no particular order, which is all the port promises; the worker's lease
//! makes duplicates harmless.
//!
//! Delays map to `DelaySeconds`, which counts whole seconds up to [`MAX_DELAY`] (15 minutes):
//! - a delay is rounded **up** to the next second, so a message never arrives before it is due;
//! - a delay beyond 15 minutes is **capped** at 15 minutes, so such a message arrives early.
//!   That is safe because a message only names a task: the worker re-reads the task and drops
//!   or re-schedules work that is not due, exactly as it does for a duplicate. Nothing in the
//!   engine asks for longer delays today; a caller that needs a precise far-future wake-up must
//!   keep the due time in the task item and re-enqueue on early delivery.
//!
//! Visibility: the worker never extends a message's visibility (no `ChangeMessageVisibility`
//! heartbeat). A job runs inside one invocation that hands over before its deadline, so the
//! queue's visibility timeout only has to exceed the worker function's timeout — the SAM
//! template enforces that — and a message can never become visible again while its invocation
//! still runs. Long jobs span invocations through continuation messages, not through longer
//! visibility.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{
    MessageSystemAttributeNameForSends, MessageSystemAttributeValue, QueueAttributeName,
};

use crate::aws::FirstUse;
use crate::queue::{QueueError, WorkMessage, WorkQueue};
use crate::tenant::Tenant;

/// The longest delay SQS supports on a message (`DelaySeconds` ≤ 900).
pub const MAX_DELAY: Duration = Duration::from_secs(900);

/// A [`WorkQueue`] over one SQS queue.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: FirstUse<Client>,
    queue_url: String,
}

impl SqsQueue {
    /// A queue adapter for `queue_url`, over a client built once, at cold start or at its
    /// first use ([`FirstUse`]).
    pub fn new(client: impl Into<FirstUse<Client>>, queue_url: impl Into<String>) -> Self {
        Self {
            client: client.into(),
            queue_url: queue_url.into(),
        }
    }

    /// The queue URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Creates (or finds) a standard queue named `name` and returns its URL. For tests and
    /// local emulated runs; deployed queues come from the SAM template.
    pub async fn create_queue(client: &Client, name: &str) -> Result<String, QueueError> {
        let out = client
            .create_queue()
            .queue_name(name)
            .send()
            .await
            .map_err(|e| QueueError::from_source(DisplayErrorContext(&e).to_string(), e))?;
        out.queue_url()
            .map(str::to_owned)
            .ok_or_else(|| QueueError::new("CreateQueue returned no queue URL"))
    }

    /// Creates (or finds) the queue `name` as template.yaml deploys it: a dead-letter queue
    /// `{name}-dlq` (14 days' retention) that a message reaches after `max_receives`
    /// deliveries, and `visibility` as the queue's visibility timeout. Idempotent with the
    /// same settings. Returns the queue's and the dead-letter queue's URLs.
    pub async fn create_queue_with_dlq(
        client: &Client,
        name: &str,
        visibility: Duration,
        max_receives: u32,
    ) -> Result<(String, String), QueueError> {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        let fail = |what: &str, e: String| QueueError::new(format!("{what}: {e}"));
        let dlq = client
            .create_queue()
            .queue_name(format!("{name}-dlq"))
            .attributes(A::MessageRetentionPeriod, "1209600")
            .send()
            .await
            .map_err(|e| {
                fail(
                    "CreateQueue (dead-letter)",
                    DisplayErrorContext(e).to_string(),
                )
            })?
            .queue_url
            .ok_or_else(|| QueueError::new("CreateQueue returned no queue URL"))?;
        let arn = client
            .get_queue_attributes()
            .queue_url(&dlq)
            .attribute_names(A::QueueArn)
            .send()
            .await
            .map_err(|e| fail("GetQueueAttributes", DisplayErrorContext(e).to_string()))?
            .attributes
            .and_then(|mut a| a.remove(&A::QueueArn))
            .ok_or_else(|| QueueError::new("the dead-letter queue has no QueueArn"))?;
        let redrive =
            serde_json::json!({"deadLetterTargetArn": arn, "maxReceiveCount": max_receives});
        let url = client
            .create_queue()
            .queue_name(name)
            .attributes(A::VisibilityTimeout, visibility.as_secs().to_string())
            .attributes(A::RedrivePolicy, redrive.to_string())
            .send()
            .await
            .map_err(|e| fail("CreateQueue", DisplayErrorContext(e).to_string()))?
            .queue_url
            .ok_or_else(|| QueueError::new("CreateQueue returned no queue URL"))?;
        Ok((url, dlq))
    }
}

/// `DelaySeconds` for a delay: rounded up to whole seconds, capped at [`MAX_DELAY`].
pub fn delay_seconds(delay: Duration) -> i32 {
    let capped = delay.min(MAX_DELAY);
    let secs = capped.as_secs() + u64::from(capped.subsec_nanos() > 0);
    // At most 900, so the conversion cannot fail.
    i32::try_from(secs.min(MAX_DELAY.as_secs())).unwrap_or(900)
}

#[async_trait]
impl WorkQueue for SqsQueue {
    async fn enqueue(&self, msg: WorkMessage, delay: Duration) -> Result<(), QueueError> {
        let body =
            serde_json::to_string(&msg).map_err(|e| QueueError::from_source(e.to_string(), e))?;
        if delay > MAX_DELAY {
            tracing::debug!(task_id = %msg.task_id, ?delay, "delay capped at SQS's 900 s");
        }
        let mut send = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .delay_seconds(delay_seconds(delay))
            .message_group_id(message_group(&msg.tenant));
        // The trace this send belongs to travels with the message (SQS's AWSTraceHeader), so
        // the worker's handling of it — and every hand-over after it — joins the trace of the
        // request that created the work.
        if let Some(header) = super::trace_header() {
            send = send.message_system_attributes(
                MessageSystemAttributeNameForSends::AwsTraceHeader,
                MessageSystemAttributeValue::builder()
                    .data_type("String")
                    .string_value(header)
                    .build()
                    .map_err(|e| QueueError::from_source(e.to_string(), e))?,
            );
        }
        send.send()
            .await
            .map_err(|e| QueueError::from_source(DisplayErrorContext(&e).to_string(), e))?;
        Ok(())
    }

    /// `ApproximateNumberOfMessages`: the visible messages (neither delayed nor in flight).
    async fn waiting(&self) -> Result<Option<u64>, QueueError> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .map_err(|e| QueueError::from_source(DisplayErrorContext(&e).to_string(), e))?;
        Ok(out
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
            .and_then(|n| n.parse().ok()))
    }
}

/// The `MessageGroupId` of a tenant's messages: on a standard queue this makes SQS fair
/// queues see each tenant as its own group, so a tenant with a backlog does not hold back the
/// others' messages (their dwell time is kept low first). A hash, so the group id is within
/// SQS's 128 characters and alphabet whatever the tenant's name, and names no tenant.
pub fn message_group(tenant: &Tenant) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(tenant.as_bytes());
    let mut g = String::with_capacity(34);
    g.push_str("t-");
    for b in &digest[..16] {
        g.push_str(&format!("{b:02x}"));
    }
    g
}

/// The record the SQS event source mapping hands a Lambda function for `message` (received
/// with its system attributes, `ApproximateReceiveCount` above all): what the local event
/// source mapping (`mcp-tasks-aws-dev esm`) and the tests feed the worker function.
pub fn event_source_record(
    message: &aws_sdk_sqs::types::Message,
    queue_arn: &str,
) -> serde_json::Value {
    let attributes: serde_json::Map<String, serde_json::Value> = message
        .attributes()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str().to_owned(), serde_json::Value::from(v.as_str())))
        .collect();
    serde_json::json!({
        "messageId": message.message_id(),
        "receiptHandle": message.receipt_handle(),
        "body": message.body(),
        "attributes": attributes,
        "messageAttributes": {},
        "md5OfBody": message.md5_of_body(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": queue_arn.split(':').nth(3).unwrap_or("us-east-1"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tenant_is_its_own_message_group_within_sqs_bounds() {
        let a = message_group(&"alice".into());
        assert_eq!(a, message_group(&"alice".into()));
        assert_ne!(a, message_group(&"bob".into()));
        let odd = message_group(&Tenant::from("é#%\u{1f}".repeat(100)));
        assert_eq!(odd.len(), 34);
        assert!(odd.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }

    #[test]
    fn delays_round_up_to_whole_seconds_so_nothing_arrives_early() {
        assert_eq!(delay_seconds(Duration::ZERO), 0);
        assert_eq!(delay_seconds(Duration::from_millis(1)), 1);
        assert_eq!(delay_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(delay_seconds(Duration::from_secs(2)), 2);
    }

    #[test]
    fn delays_beyond_fifteen_minutes_are_capped() {
        assert_eq!(delay_seconds(Duration::from_millis(899_001)), 900);
        assert_eq!(delay_seconds(MAX_DELAY), 900);
        assert_eq!(delay_seconds(Duration::from_secs(3600)), 900);
        assert_eq!(delay_seconds(Duration::MAX), 900);
    }
}
