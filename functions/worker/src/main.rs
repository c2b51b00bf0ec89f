//! Lambda `worker`: advances the tasks named by an SQS batch, reporting per-message failures
//! (`ReportBatchItemFailures`); the policy lives in `mcp_tasks_core::aws::lambda`.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use mcp_tasks_core::aws::lambda::{
    Config, Ports, Role, SqsWorker, block_on, flush_metrics, init_logging, prefer_one_cert_bundle,
    running_tools, worker_deadline,
};
use mcp_tasks_tools::{BUNDLED_MANIFEST, ToolSet};

async fn handler(
    worker: &SqsWorker,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, Error> {
    let deadline = worker_deadline(event.context.deadline());
    let response = worker.handle(event.payload, deadline).await;
    flush_metrics("worker");
    Ok(response)
}

fn main() -> Result<(), Error> {
    // SAFETY: first thing in the process, before any thread (the runtime's) exists.
    unsafe { prefer_one_cert_bundle() };
    block_on(serve())
}

async fn serve() -> Result<(), Error> {
    init_logging();
    let config = Config::from_env(Role::Worker)?;
    let tools = running_tools(&config, ToolSet::tools_from_env()?, BUNDLED_MANIFEST).await?;
    let worker = &SqsWorker::new(&config, &Ports::connect(&config).await, tools);
    run(service_fn(move |event| handler(worker, event))).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_runtime::Context;

    fn event(file: &str) -> LambdaEvent<SqsEvent> {
        let mut context = Context::default();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        context.deadline = (now.as_millis() + 60_000) as u64;
        LambdaEvent::new(serde_json::from_str(file).unwrap(), context)
    }

    async fn worker() -> SqsWorker {
        let config = Config::from_lookup(Role::Worker, |k| match k {
            "TABLE_NAME" => Some("tasks".into()),
            "QUEUE_URL" => Some("http://127.0.0.1:1/000000000000/work".into()),
            "MAX_RECEIVES" => Some("5".into()),
            _ => None,
        })
        .unwrap();
        let tools = running_tools(&config, ToolSet::Builtin.tools(), BUNDLED_MANIFEST)
            .await
            .unwrap();
        SqsWorker::new(&config, &Ports::in_memory().0, tools)
    }

    #[tokio::test]
    async fn the_sample_sqs_event_is_handled_without_failures() {
        // Its task is not in the (empty) store: dropped, i.e. deleted, not retried.
        let out = handler(
            &worker().await,
            event(include_str!("../../../events/sqs-work-message.json")),
        )
        .await
        .unwrap();
        assert!(out.batch_item_failures.is_empty());
    }

    #[tokio::test]
    async fn a_broken_record_is_reported_by_its_message_id() {
        let mut e = event(include_str!("../../../events/sqs-work-message.json"));
        e.payload.records[0].body = Some("{".into());
        let out = handler(&worker().await, e).await.unwrap();
        let ids: Vec<_> = out
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        assert_eq!(ids, ["059f36b4-87a3-44ab-83d2-661975830a7d"]);
    }
}
