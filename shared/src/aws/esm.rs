//! The Lambda SQS event source mapping, played where there is no Lambda service: the local
//! serverless run (`mcp-tasks-aws-dev esm`, `scripts/aws-local.sh`) and the function-binary
//! tests. One round receives a batch (with the system attributes the worker reads), hands it to
//! the worker as an SQS event, and deletes exactly the messages the worker did not report in
//! `batchItemFailures` — so a failed one comes back after the visibility timeout and, past the
//! queue's `maxReceiveCount`, goes to the dead-letter queue, as on AWS. A batch whose
//! invocation failed as a whole, or whose response names a failure that is no message of the
//! batch (an empty or unknown `itemIdentifier`, which Lambda reads as a failed batch), is left
//! alone: all of it comes back.

use std::future::Future;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use serde_json::{Value, json};

use super::sqs::event_source_record;
use crate::queue::QueueError;

/// What one round did.
#[derive(Debug, Default, Clone)]
pub struct Round {
    /// Messages received (and handed to the worker).
    pub messages: usize,
    /// Messages the worker reported failed (left for redelivery).
    pub failed: usize,
    /// Messages deleted.
    pub deleted: usize,
    /// Why the invocation failed as a whole (then nothing was deleted).
    pub invoke_error: Option<String>,
    /// How long the invocation took.
    pub invoke_time: Duration,
}

/// One round: receive up to `max` messages from `queue_url` (long-polling up to `wait`), call
/// `invoke` with the SQS event (records naming `queue_arn`) and delete what it did not report
/// failed. `Ok(None)` when nothing came. `invoke` returns the worker's response (the
/// `SQSBatchResponse` JSON) or why the invocation failed.
pub async fn round<F, Fut>(
    sqs: &Client,
    queue_url: &str,
    queue_arn: &str,
    max: i32,
    wait: Duration,
    invoke: F,
) -> Result<Option<Round>, QueueError>
where
    F: FnOnce(Value) -> Fut,
    Fut: Future<Output = Result<Value, String>>,
{
    let got = sqs
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(max.clamp(1, 10))
        .wait_time_seconds(i32::try_from(wait.as_secs()).unwrap_or(20).min(20))
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .map_err(|e| QueueError::from_source(DisplayErrorContext(&e).to_string(), e))?;
    let messages = got.messages.unwrap_or_default();
    if messages.is_empty() {
        return Ok(None);
    }
    let records: Vec<Value> = messages
        .iter()
        .map(|m| event_source_record(m, queue_arn))
        .collect();
    let started = Instant::now();
    let reply = invoke(json!({ "Records": records })).await;
    let mut round = Round {
        messages: messages.len(),
        invoke_time: started.elapsed(),
        ..Round::default()
    };
    let response = match reply {
        Ok(r) => r,
        Err(e) => {
            round.invoke_error = Some(e);
            return Ok(Some(round));
        }
    };
    let ids: Vec<&str> = messages
        .iter()
        .map(|m| m.message_id().unwrap_or_default())
        .collect();
    let failed = match reported_failures(&response, &ids) {
        Ok(failed) => failed,
        Err(why) => {
            round.invoke_error = Some(why);
            return Ok(Some(round));
        }
    };
    round.failed = failed.len();
    for m in &messages {
        if failed.contains(&m.message_id().unwrap_or_default()) {
            continue;
        }
        let Some(handle) = m.receipt_handle() else {
            continue;
        };
        match sqs
            .delete_message()
            .queue_url(queue_url)
            .receipt_handle(handle)
            .send()
            .await
        {
            Ok(_) => round.deleted += 1,
            Err(e) => tracing::warn!(
                error = %DisplayErrorContext(&e),
                "esm.delete_failed: the message will be redelivered"
            ),
        }
    }
    Ok(Some(round))
}

/// The message ids a worker's `SQSBatchResponse` reports failed, read as Lambda reads them: an
/// item whose `itemIdentifier` is missing, null, empty or not an id of the batch makes the
/// whole batch a failure (`Err`, nothing deleted) — which the worker relies on for a record it
/// cannot name.
fn reported_failures<'a>(response: &'a Value, ids: &[&str]) -> Result<Vec<&'a str>, String> {
    let items = response["batchItemFailures"]
        .as_array()
        .into_iter()
        .flatten();
    items
        .map(|f| match f["itemIdentifier"].as_str() {
            Some(id) if !id.is_empty() && ids.contains(&id) => Ok(id),
            _ => Err(format!(
                "batchItemFailures names no message of the batch ({}): the whole batch failed",
                f["itemIdentifier"]
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_naming_no_message_of_the_batch_fails_the_whole_batch() {
        let ids = ["m1", "m2"];
        let read = |v: Value| reported_failures(&v, &ids).map(|f| f.join(","));
        assert_eq!(read(json!({})), Ok(String::new()));
        assert_eq!(read(Value::Null), Ok(String::new()));
        assert_eq!(read(json!({"batchItemFailures": []})), Ok(String::new()));
        assert_eq!(
            read(json!({"batchItemFailures": [{"itemIdentifier": "m2"}]})),
            Ok("m2".into())
        );
        for bad in [json!(""), json!(null), json!("m3"), json!(7)] {
            let response =
                json!({"batchItemFailures": [{"itemIdentifier": "m1"}, {"itemIdentifier": bad}]});
            assert!(read(response).is_err(), "{bad}");
        }
        assert!(read(json!({"batchItemFailures": [{}]})).is_err());
    }
}
