//! The Lambda handlers end to end over the real AWS adapters, against emulators: `tools/call`
//! through the mcp router creates a task in DynamoDB and a message in SQS; that message, shaped
//! as the event source mapping delivers it, goes through the worker handler; `tasks/get`
//! through the tasks router then reads the result; the sweep runs over the same ports.
//!
//! Needs both emulators: DynamoDB (`DYNAMODB_ENDPOINT` or `AWS_ENDPOINT_URL_DYNAMODB`) and SQS
//! (`SQS_ENDPOINT` or `AWS_ENDPOINT_URL_SQS`). Without them it prints a loud SKIPPED line and
//! passes, unless `REQUIRE_EMULATORS` is set (to anything but empty or `0`).
//!
//! ```text
//! scripts/aws-emulator.sh start
//! DYNAMODB_ENDPOINT=$(cat .tools/moto/endpoint) SQS_ENDPOINT=$(cat .tools/moto/endpoint) \
//!   cargo test -p mcp-tasks-core --features lambda --test aws_lambda
//! ```

mod common;

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use mcp_tasks_core::aws::dynamo::{DynamoStore, create_table};
use mcp_tasks_core::aws::lambda::{
    Config, Ports, Role, SqsWorker, Sweeper, http_router, tasks_router,
};
use mcp_tasks_core::aws::sqs::{self, SqsQueue};
use serde_json::{Value, json};
use tokio::time::Instant;
use tower::ServiceExt as _;

/// Both endpoints, or `None` after the SKIPPED line.
fn endpoints() -> Option<(String, String)> {
    let [dynamo, sqs] = common::endpoints("aws_lambda", [common::DYNAMODB, common::SQS])?;
    Some((dynamo, sqs))
}

fn config(role: Role, table: &str, queue_url: &str) -> Config {
    Config::from_lookup(role, |k| match k {
        "TABLE_NAME" => Some(table.to_owned()),
        "QUEUE_URL" => Some(queue_url.to_owned()),
        "STATE_KEY" => Some("an-end-to-end-test-key-of-32-characters".into()),
        "MAX_RECEIVES" => Some("3".into()),
        "AUTH_MODE" => Some("none".into()),
        _ => None,
    })
    .unwrap()
}

/// One MCP request through a router, as API Gateway would hand it over.
async fn call(router: axum::Router, method: &str, params: Value, name: Option<&str>) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut req = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(n) = name {
        req = req.header("mcp-name", n);
    }
    let req = req.body(axum::body::Body::from(body.to_string())).unwrap();
    let resp = router.oneshot(req).await.unwrap();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Receives the next message and shapes it as the Lambda event source mapping delivers it.
async fn next_event(client: &aws_sdk_sqs::Client, url: &str) -> SqsEvent {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let out = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(1)
            .wait_time_seconds(2)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .unwrap();
        if let Some(m) = out.messages().first() {
            let record = sqs::event_source_record(m, "arn:aws:sqs:us-east-1:000000000000:work");
            return serde_json::from_value(json!({"Records": [record]})).unwrap();
        }
    }
    panic!("no work message arrived");
}

#[tokio::test]
async fn a_task_runs_end_to_end_through_the_lambda_handlers() {
    let Some((dynamo_endpoint, sqs_endpoint)) = endpoints() else {
        return;
    };
    let dynamo = aws_sdk_dynamodb::Client::new(&common::sdk_config(&dynamo_endpoint).await);
    let sqs = aws_sdk_sqs::Client::new(&common::sdk_config(&sqs_endpoint).await);
    let table = common::unique("mcp-tasks-e2e");
    create_table(&dynamo, &table).await.expect("CreateTable");
    let queue_url = SqsQueue::create_queue(&sqs, &common::unique("mcp-tasks-e2e"))
        .await
        .expect("CreateQueue");
    let store = Arc::new(DynamoStore::new(dynamo.clone(), table.clone()));
    let ports = Ports {
        store: store.clone(),
        queue: Arc::new(SqsQueue::new(sqs.clone(), queue_url.clone())),
        run_slots: Some(store),
    };

    // mcp: tools/call as a task → item in DynamoDB, message in SQS.
    let tools = mcp_tasks_demo_tools::tools();
    let mcp = http_router(
        &config(Role::Mcp, &table, &queue_url),
        &ports,
        mcp_tasks_core::app::serving_registry(tools.clone()),
    );
    let created = call(
        mcp,
        "tools/call",
        json!({"name": "wait", "arguments": {"seconds": 0.2}}),
        Some("wait"),
    )
    .await;
    let task_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a CreateTaskResult: {created}"))
        .to_owned();

    // worker: the SQS event, as the event source mapping delivers it.
    let event = next_event(&sqs, &queue_url).await;
    let worker = SqsWorker::new(
        &config(Role::Worker, &table, &queue_url),
        &ports,
        Arc::new(mcp_tasks_core::tools::Registry::new(tools)),
    );
    let out = worker
        .handle(event, Instant::now() + Duration::from_secs(60))
        .await;
    assert!(out.batch_item_failures.is_empty(), "{out:?}");

    // tasks: tasks/get sees the result.
    let tasks = tasks_router(&config(Role::Tasks, &table, &queue_url), &ports);
    let got = call(
        tasks.clone(),
        "tasks/get",
        json!({"taskId": task_id}),
        Some(&task_id),
    )
    .await;
    assert_eq!(got["result"]["status"], "completed", "{got}");
    let refused = call(tasks, "tools/list", json!({}), None).await;
    assert_eq!(refused["error"]["code"], -32601, "{refused}");

    // sweep: nothing orphaned, nothing expired.
    let sweeper = Sweeper::new(&config(Role::Sweep, &table, &queue_url), &ports);
    let report = sweeper.run(None).await.expect("sweep");
    assert_eq!(report.requeued, 0);

    let _ = sqs.delete_queue().queue_url(&queue_url).send().await;
    let _ = dynamo.delete_table().table_name(&table).send().await;
}
