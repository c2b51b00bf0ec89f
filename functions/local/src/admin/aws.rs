//! `--aws`: the operator commands on the deployed DynamoDB table and SQS queues.

use std::sync::Arc;

use mcp_tasks_core::admin::CancelMode;
use mcp_tasks_core::aws::dlq::{self, DeadLetter};
use mcp_tasks_core::aws::dynamo::DynamoStore;
use mcp_tasks_core::aws::sqs::SqsQueue;
use mcp_tasks_core::aws::{Timeouts, dynamodb_client, sdk_config, sqs_client_with};
use serde_json::json;

use super::{Backend, DlqListArgs, Fail, Opened, flag_or_env, json_text, plain};

fn required(flag: &Option<String>, name: &str, var: &str) -> Result<String, Fail> {
    flag_or_env(flag, var).ok_or_else(|| Fail(2, format!("--aws needs --{name} or {var}")))
}

/// The SQS client of these commands: long-polling receives of [`dlq::RECEIVE_WAIT`].
async fn sqs() -> aws_sdk_sqs::Client {
    let mut sdk = sdk_config().await;
    if let Some(e) = flag_or_env(&None, "SQS_ENDPOINT") {
        sdk = sdk.to_builder().endpoint_url(e).build();
    }
    sqs_client_with(&sdk, Timeouts::sqs_long_poll(dlq::RECEIVE_WAIT))
}

pub async fn open(b: &Backend) -> Result<Opened, Fail> {
    let table = required(&b.table, "table", "TABLE_NAME")?;
    let mut sdk = sdk_config().await;
    if let Some(e) = flag_or_env(&None, "DYNAMODB_ENDPOINT") {
        sdk = sdk.to_builder().endpoint_url(e).build();
    }
    let store = DynamoStore::new(dynamodb_client(&sdk), table);
    let queue = match flag_or_env(&b.queue_url, "QUEUE_URL") {
        Some(url) => Some(Arc::new(SqsQueue::new(sqs().await, url)) as _),
        None => None,
    };
    Ok(Opened {
        store: Arc::new(store),
        queue,
        cancel: CancelMode::Cooperative,
    })
}

fn letter_line(l: &DeadLetter) -> String {
    let receives = l
        .receive_count
        .map_or("receives ?".into(), |n| format!("receives {n}"));
    let sent = l.sent_at.clone().unwrap_or_else(|| "sent ?".into());
    let work = match &l.work {
        Some(w) => format!("{}\t{}\t{}", plain(&w.tenant), plain(&w.task_id), w.kind),
        None => "(not a work message)".into(),
    };
    format!("{}\t{receives}\t{sent}\t{work}", plain(&l.message_id))
}

pub async fn dlq_list(a: &DlqListArgs) -> Result<i32, Fail> {
    let url = required(&a.backend.dlq_url, "dlq-url", "DLQ_URL")?;
    let letters = dlq::list(&sqs().await, &url, a.limit)
        .await
        .map_err(|e| Fail(2, e.to_string()))?;
    for l in &letters {
        match a.json {
            true => println!("{}", json_text(&json!(l), false)),
            false => println!("{}", letter_line(l)),
        }
    }
    if letters.is_empty() && !a.json {
        eprintln!("the dead-letter queue is empty");
    }
    Ok(0)
}

pub async fn dlq_redrive(a: &DlqListArgs) -> Result<i32, Fail> {
    let dlq_url = required(&a.backend.dlq_url, "dlq-url", "DLQ_URL")?;
    let queue_url = required(&a.backend.queue_url, "queue-url", "QUEUE_URL")?;
    let report = dlq::redrive(&sqs().await, &dlq_url, &queue_url, a.limit)
        .await
        .map_err(|e| Fail(2, e.to_string()))?;
    if a.json {
        for l in &report.moved {
            println!("{}", json_text(&json!({"moved": l}), false));
        }
        for l in &report.not_work {
            let left = json!({"left": l, "reason": "not a work message"});
            println!("{}", json_text(&left, false));
        }
        for (l, why) in &report.failed {
            println!("{}", json_text(&json!({"failed": l, "reason": why}), false));
        }
    } else {
        for l in &report.moved {
            println!("moved\t{}", letter_line(l));
        }
        for l in &report.not_work {
            println!("left\t{}", letter_line(l));
        }
        for (l, why) in &report.failed {
            println!("failed\t{}", letter_line(l));
            eprintln!("mcp-tasks: {}: {}", plain(&l.message_id), plain(why));
        }
    }
    eprintln!(
        "moved {} to the work queue; left {} that are not work messages in the dead-letter \
         queue; {} failed",
        report.moved.len(),
        report.not_work.len(),
        report.failed.len()
    );
    Ok(
        match report.not_work.is_empty() && report.failed.is_empty() {
            true => 0,
            false => 1,
        },
    )
}
