//! Local AWS development helpers for `scripts/aws-local.sh` (the emulator stands in for AWS):
//! - `setup` creates the task table and the work queue with the project's own code and prints
//!   the variables the functions need;
//! - `esm` plays the SQS event source mapping: it long-polls the queue, invokes the `worker`
//!   function (through `cargo lambda watch`) with an SQS batch event, and deletes exactly the
//!   messages the worker did not report in `batchItemFailures`, so failed ones come back after
//!   the visibility timeout, as on AWS;
//! - `backfill` is the one operator step for a real table: after the deploy that added the
//!   `tenant_active` and `quiet` indexes, it indexes the tasks that were active before
//!   (idempotent).

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use mcp_tasks_core::aws::esm;
use mcp_tasks_core::aws::sqs::SqsQueue;
use mcp_tasks_core::aws::{
    Timeouts, dynamo, dynamodb_client, sdk_config, sqs_client, sqs_client_with,
};
use serde_json::Value;

#[derive(Parser)]
#[command(name = "mcp-tasks-aws-dev", about = "Local AWS development helpers")]
enum Cli {
    /// Create the table, the queue and its dead-letter queue as template.yaml deploys them
    /// (idempotent) and print TABLE_NAME, QUEUE_URL, DLQ_URL and MAX_RECEIVES.
    Setup {
        #[arg(long, default_value = "mcp-tasks")]
        table: String,
        #[arg(long, default_value = "mcp-tasks-work")]
        queue: String,
        /// The queue's visibility timeout, in seconds (template.yaml's WorkQueue: 5400, the
        /// worker's 900 s timeout six times over, as AWS advises for a Lambda source).
        #[arg(long, default_value_t = 5400, value_parser = clap::value_parser!(u64).range(0..=43_200))]
        visibility_timeout: u64,
        /// Deliveries before the dead-letter queue (template.yaml's MaxReceiveCount default).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
        max_receives: u32,
    },
    /// Add `tenant_active` to active tasks written before that index existed (run once after
    /// the deploy that added it; idempotent). Prints how many items it changed.
    Backfill {
        #[arg(long)]
        table: String,
    },
    /// Feed the queue to the worker function like the SQS event source mapping.
    Esm {
        #[arg(long)]
        queue_url: String,
        /// The worker's invoke URL (cargo lambda watch's Lambda API).
        #[arg(
            long,
            default_value = "http://127.0.0.1:9000/2015-03-31/functions/worker/invocations"
        )]
        invoke: String,
        #[arg(long, default_value_t = 10)]
        batch_size: i32,
    },
}

/// How long one `ReceiveMessage` of the local event source mapping waits for messages.
const LONG_POLL: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = sdk_config().await;
    match Cli::parse() {
        Cli::Setup {
            table,
            queue,
            visibility_timeout,
            max_receives,
        } => {
            dynamo::create_table(&dynamodb_client(&config), &table)
                .await
                .context("creating the table")?;
            let (url, dlq) = SqsQueue::create_queue_with_dlq(
                &sqs_client(&config),
                &queue,
                Duration::from_secs(visibility_timeout),
                max_receives,
            )
            .await
            .context("creating the queue and its dead-letter queue")?;
            println!("TABLE_NAME={table}");
            println!("QUEUE_URL={url}");
            println!("DLQ_URL={dlq}");
            println!("MAX_RECEIVES={max_receives}");
        }
        Cli::Backfill { table } => {
            let store = dynamo::DynamoStore::new(dynamodb_client(&config), table);
            let changed = store
                .backfill_tenant_index()
                .await
                .context("backfilling the tenant_active index")?;
            println!("backfilled {changed} active tasks (tenant_active)");
            let changed = store
                .backfill_quiet_index()
                .await
                .context("backfilling the quiet index")?;
            println!("backfilled {changed} working tasks (quiet)");
        }
        Cli::Esm {
            queue_url,
            invoke,
            batch_size,
        } => {
            esm(
                &sqs_client_with(&config, Timeouts::sqs_long_poll(LONG_POLL)),
                &queue_url,
                &invoke,
                batch_size,
            )
            .await?;
        }
    }
    Ok(())
}

async fn esm(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    invoke: &str,
    batch: i32,
) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    eprintln!("esm: feeding {queue_url} to {invoke}");
    loop {
        let http = &http;
        let invoked = |event: Value| async move {
            let r = http
                .post(invoke)
                .json(&event)
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .map_err(|e| e.to_string())?;
            Ok(r.json().await.unwrap_or(Value::Null))
        };
        let arn = "arn:aws:sqs:us-east-1:000000000000:local";
        match esm::round(sqs, queue_url, arn, batch, LONG_POLL, invoked).await {
            Ok(None) => {}
            Ok(Some(r)) => match r.invoke_error {
                // The whole batch failed (function crashed or not up): SQS redelivers all.
                Some(e) => {
                    eprintln!(
                        "esm: invoking the worker failed ({e}); the batch will be redelivered"
                    );
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                None => eprintln!("esm: batch of {} ({} failed)", r.messages, r.failed),
            },
            Err(e) => {
                eprintln!("esm: receive failed ({e}); retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
