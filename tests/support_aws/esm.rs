//! The SQS event source mapping in front of the worker function.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::runtime::RuntimeApi;

/// What the event source mapping did.
#[derive(Default)]
pub struct EsmStats {
    /// Worker invocations that carried at least one record of the task.
    pub invocations_by_task: HashMap<String, u32>,
    pub batches: u32,
    pub deleted: u32,
    pub reported_failed: u32,
    pub invoke_errors: u32,
    /// How long each worker invocation took, in milliseconds, in order.
    pub invocation_ms: Vec<u64>,
    /// How many records each worker invocation carried, in the same order.
    pub batch_sizes: Vec<usize>,
    /// While set, the mapping receives nothing (messages wait in the queue).
    pub paused: bool,
}

pub(super) async fn esm(
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    worker: Arc<RuntimeApi>,
    timeout: Duration,
    stats: Arc<Mutex<EsmStats>>,
) {
    loop {
        if stats.lock().unwrap().paused {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let invoke = |event: Value| {
            let (worker, stats) = (worker.clone(), stats.clone());
            async move {
                // Counted as the invocation starts, as on Lambda: a test that sees a task
                // finished by this invocation must find the invocation counted already.
                {
                    let mut tasks: Vec<String> = event["Records"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|r| serde_json::from_str::<Value>(r["body"].as_str()?).ok())
                        .filter_map(|b| b["task_id"].as_str().map(str::to_owned))
                        .collect();
                    tasks.sort();
                    tasks.dedup();
                    let mut s = stats.lock().unwrap();
                    s.batches += 1;
                    let records = event["Records"].as_array().map_or(0, Vec::len);
                    s.batch_sizes.push(records);
                    for t in tasks {
                        *s.invocations_by_task.entry(t).or_default() += 1;
                    }
                }
                let body = worker
                    .invoke(serde_json::to_vec(&event).unwrap(), timeout)
                    .await?;
                Ok(serde_json::from_slice(&body).unwrap_or(Value::Null))
            }
        };
        let arn = "arn:aws:sqs:us-east-1:000000000000:work";
        let wait = Duration::from_secs(1);
        let r = match mcp_tasks_core::aws::esm::round(&sqs, &queue_url, arn, 10, wait, invoke).await
        {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("esm: receive failed ({e}); retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut s = stats.lock().unwrap();
        s.invocation_ms.push(r.invoke_time.as_millis() as u64);
        match r.invoke_error {
            // The whole batch failed: SQS redelivers all of it after the visibility timeout.
            Some(e) => {
                eprintln!("esm: the worker invocation failed ({e}); the batch will be redelivered");
                s.invoke_errors += 1;
            }
            None => {
                s.deleted += r.deleted as u32;
                s.reported_failed += r.failed as u32;
            }
        }
    }
}
