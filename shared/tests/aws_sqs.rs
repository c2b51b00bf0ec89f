//! The queue contract against SQS, through an emulator (`scripts/aws-emulator.sh start`).
//!
//! The endpoint comes from `SQS_ENDPOINT`, else `AWS_ENDPOINT_URL_SQS`. Without either the test
//! prints a loud SKIPPED line and passes — unless `REQUIRE_EMULATORS` is set (to anything but
//! empty or `0`; CI sets `1`), where a missing emulator is a failure.
//!
//! ```text
//! scripts/aws-emulator.sh start
//! SQS_ENDPOINT=$(cat .tools/moto/endpoint) cargo test -p mcp-tasks-core --features aws,contracts --test aws_sqs
//! ```

use mcp_tasks_core::task::TaskId;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

mod common;

use aws_sdk_sqs::Client;
use mcp_tasks_core::aws::sqs::SqsQueue;
use mcp_tasks_core::queue::{WorkKind, WorkMessage, WorkQueue, contract};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// A client for the emulator: fixed region and dummy credentials, so the test never reaches
/// for a real account's configuration.
async fn client(endpoint: &str) -> Client {
    Client::new(&common::sdk_config(endpoint).await)
}

/// Receives one message, waiting up to `wait`; deletes what it receives (as the Lambda event
/// source mapping does after a successful invocation). Bodies must parse as [`WorkMessage`].
struct Receiver {
    client: Client,
    url: String,
    buffer: Mutex<VecDeque<WorkMessage>>,
}

impl Receiver {
    async fn recv(&self, wait: Duration) -> Option<WorkMessage> {
        let until = Instant::now() + wait;
        loop {
            if let Some(m) = self.buffer.lock().await.pop_front() {
                return Some(m);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            // Long polling counts whole seconds; below one second, poll briefly and often.
            let wait_secs = left.as_secs().min(20) as i32;
            let out = self
                .client
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(10)
                .wait_time_seconds(wait_secs)
                .visibility_timeout(60)
                .send()
                .await
                .expect("ReceiveMessage");
            let messages = out.messages();
            for m in messages {
                let body = m.body().expect("a message body");
                let msg: WorkMessage =
                    serde_json::from_str(body).expect("the body is a JSON WorkMessage");
                self.client
                    .delete_message()
                    .queue_url(&self.url)
                    .receipt_handle(m.receipt_handle().expect("a receipt handle"))
                    .send()
                    .await
                    .expect("DeleteMessage");
                self.buffer.lock().await.push_back(msg);
            }
            if messages.is_empty() && wait_secs == 0 {
                tokio::time::sleep(left.min(Duration::from_millis(100))).await;
            }
        }
    }
}

#[tokio::test]
async fn sqs_queue_passes_the_queue_contract() {
    let Some(endpoint) = common::endpoints("aws_sqs", [common::SQS]).map(|[e]| e) else {
        return;
    };
    let client = client(&endpoint).await;
    let url = SqsQueue::create_queue(&client, &common::unique("mcp-tasks-contract"))
        .await
        .expect("CreateQueue");
    let queue = SqsQueue::new(client.clone(), url.clone());
    let rx = Arc::new(Receiver {
        client: client.clone(),
        url: url.clone(),
        buffer: Mutex::new(VecDeque::new()),
    });

    contract::run_all(&queue, |wait| {
        let rx = rx.clone();
        async move { rx.recv(wait).await }
    })
    .await;

    // Beyond SQS's 15-minute maximum the delay is capped, not refused.
    let far = WorkMessage {
        tenant: "contract".into(),
        task_id: TaskId::from_static("tsk_contract_far"),
        kind: WorkKind::Continue,
    };
    queue
        .enqueue(far, Duration::from_secs(3600))
        .await
        .expect("a delay beyond 900 s is capped and accepted");
    assert_eq!(rx.recv(Duration::from_millis(500)).await, None);

    let _ = client.delete_queue().queue_url(&url).send().await;
}

#[tokio::test]
async fn sending_to_a_missing_queue_is_an_error_not_a_panic() {
    let Some(endpoint) = common::endpoints("aws_sqs", [common::SQS]).map(|[e]| e) else {
        return;
    };
    let client = client(&endpoint).await;
    let queue = SqsQueue::new(
        client,
        format!("{endpoint}/000000000000/mcp-tasks-no-such-queue"),
    );
    let msg = WorkMessage {
        tenant: "contract".into(),
        task_id: TaskId::from_static("tsk_contract_none"),
        kind: WorkKind::Start,
    };
    let err = queue
        .enqueue(msg, Duration::ZERO)
        .await
        .expect_err("sending to a missing queue fails");
    assert!(!err.to_string().is_empty());
    // The SDK's own error travels as the source (for logs), not only as text.
    assert!(std::error::Error::source(&err).is_some(), "{err:?}");
}

#[tokio::test]
async fn each_message_carries_its_tenants_message_group() {
    let Some(endpoint) = common::endpoints("aws_sqs", [common::SQS]).map(|[e]| e) else {
        return;
    };
    let client = client(&endpoint).await;
    let url = SqsQueue::create_queue(&client, &common::unique("mcp-tasks-groups"))
        .await
        .expect("CreateQueue");
    let queue = SqsQueue::new(client.clone(), url.clone());
    for tenant in ["alice", "bob"] {
        let msg = WorkMessage {
            tenant: tenant.into(),
            task_id: TaskId::parse(format!("tsk_{tenant}")).unwrap(),
            kind: WorkKind::Start,
        };
        queue.enqueue(msg, Duration::ZERO).await.expect("enqueue");
    }
    let out = client
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .wait_time_seconds(2)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .send()
        .await
        .expect("ReceiveMessage");
    let mut seen = 0;
    for m in out.messages() {
        let msg: WorkMessage = serde_json::from_str(m.body().unwrap()).unwrap();
        let group = m
            .attributes()
            .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId))
            .cloned();
        assert_eq!(
            group.as_deref(),
            Some(mcp_tasks_core::aws::sqs::message_group(&msg.tenant).as_str()),
            "a standard-queue message in its tenant's fair-queue group"
        );
        seen += 1;
    }
    assert_eq!(seen, 2);
}

/// `waiting` (what the sweep asks before re-sending a task that may simply be queued) counts
/// the messages ready to be received: not the delayed ones, not those in flight.
#[tokio::test]
async fn waiting_counts_the_messages_ready_to_be_received() {
    let Some(endpoint) = common::endpoints("aws_sqs", [common::SQS]).map(|[e]| e) else {
        return;
    };
    let client = client(&endpoint).await;
    let url = SqsQueue::create_queue(&client, &common::unique("mcp-tasks-waiting"))
        .await
        .expect("CreateQueue");
    let queue = SqsQueue::new(client.clone(), url.clone());
    assert_eq!(queue.waiting().await.unwrap(), Some(0));
    let msg = |i: usize| WorkMessage {
        tenant: "t".into(),
        task_id: TaskId::parse(format!("tsk_{i}")).unwrap(),
        kind: WorkKind::Start,
    };
    for i in 0..3 {
        queue.enqueue(msg(i), Duration::ZERO).await.unwrap();
    }
    queue
        .enqueue(msg(3), Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(
        queue.waiting().await.unwrap(),
        Some(3),
        "the delayed one is not waiting"
    );
    let out = client
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(1)
        .visibility_timeout(60)
        .send()
        .await
        .expect("ReceiveMessage");
    assert_eq!(out.messages().len(), 1);
    assert_eq!(
        queue.waiting().await.unwrap(),
        Some(2),
        "in flight is not waiting"
    );
    client.delete_queue().queue_url(&url).send().await.unwrap();
}

/// `mcp-tasks-aws-dev setup` (scripts/aws-local.sh) makes the queue as template.yaml deploys
/// it: the visibility timeout given, and a dead-letter queue that a message reaches after the
/// given number of deliveries.
#[tokio::test]
async fn the_local_queue_has_the_templates_dead_letter_queue() {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let Some(endpoint) = common::endpoints("aws_sqs", [common::SQS]).map(|[e]| e) else {
        return;
    };
    let client = client(&endpoint).await;
    let name = common::unique("mcp-tasks-redrive");
    let (url, dlq) = SqsQueue::create_queue_with_dlq(&client, &name, Duration::from_secs(5400), 2)
        .await
        .expect("the queues");
    // Idempotent with the same settings (aws-local.sh runs it on every start).
    let again = SqsQueue::create_queue_with_dlq(&client, &name, Duration::from_secs(5400), 2)
        .await
        .expect("the queues again");
    assert_eq!(again, (url.clone(), dlq.clone()));
    let attrs = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(A::All)
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes
        .unwrap_or_default();
    assert_eq!(
        attrs.get(&A::VisibilityTimeout).map(String::as_str),
        Some("5400")
    );
    let redrive: serde_json::Value =
        serde_json::from_str(attrs.get(&A::RedrivePolicy).expect("a redrive policy")).unwrap();
    assert_eq!(redrive["maxReceiveCount"].as_u64(), Some(2), "{redrive}");

    // Two deliveries without a delete, and the message is in the dead-letter queue.
    client
        .send_message()
        .queue_url(&url)
        .message_body("poison")
        .send()
        .await
        .expect("SendMessage");
    for _ in 0..2 {
        let got = client
            .receive_message()
            .queue_url(&url)
            .visibility_timeout(0)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("ReceiveMessage");
        assert_eq!(got.messages().len(), 1, "delivered again");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = client
            .receive_message()
            .queue_url(&url)
            .visibility_timeout(0)
            .send()
            .await
            .expect("ReceiveMessage");
        let dead = client
            .receive_message()
            .queue_url(&dlq)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("ReceiveMessage (dead-letter)");
        if let Some(m) = dead.messages().first() {
            assert_eq!(m.body(), Some("poison"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the message never reached the dead-letter queue"
        );
    }
}
