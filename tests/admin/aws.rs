//! `mcp-tasks tasks` and `mcp-tasks dlq` on the DynamoDB/SQS emulator.

use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;
use mcp_tasks_core::aws::dynamo::{DynamoStore, create_table};
use mcp_tasks_core::aws::sqs::SqsQueue;
use mcp_tasks_core::queue::{WorkKind, WorkMessage};
use mcp_tasks_core::store::{TaskRef, TaskStore as _};
use mcp_tasks_core::task::{Lease, TaskRecord, new_task_id};
use serde_json::{Value, json};

use super::{Run, common, run_with};

async fn task(store: &DynamoStore, tenant: &str) -> TaskRecord {
    let t = TaskRecord::new(tenant.into(), new_task_id(), "wait", None, 1000, json!({}));
    store
        .create(&t, &json!({"seconds": 600, "note": "ARG-SECRET"}))
        .await
        .unwrap();
    store.get(t.key()).await.unwrap().unwrap()
}

/// Receives every message of `url` (waiting up to a few seconds for stragglers).
async fn drain(sqs: &aws_sdk_sqs::Client, url: &str, want: usize) -> Vec<String> {
    let mut bodies = Vec::new();
    let start = std::time::Instant::now();
    while bodies.len() < want && start.elapsed() < Duration::from_secs(10) {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .visibility_timeout(60)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        for m in got.messages.unwrap_or_default() {
            bodies.push(m.body.unwrap_or_default());
        }
    }
    bodies
}

#[tokio::test]
async fn tasks_and_the_dead_letter_queue_on_the_aws_emulator() {
    let Some([ddb, sqs_endpoint]) =
        common::endpoints("admin::aws", [common::DYNAMODB, common::SQS])
    else {
        return;
    };
    let dynamo = aws_sdk_dynamodb::Client::new(&common::sdk_config(&ddb).await);
    let sqs = aws_sdk_sqs::Client::new(&common::sdk_config(&sqs_endpoint).await);
    let table = common::unique("admin");
    create_table(&dynamo, &table).await.unwrap();
    let (queue_url, dlq_url) = SqsQueue::create_queue_with_dlq(
        &sqs,
        &common::unique("admin-work"),
        Duration::from_secs(30),
        3,
    )
    .await
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let home = home.path().to_str().unwrap().to_owned();
    let env = [
        ("HOME", home.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("DYNAMODB_ENDPOINT", ddb.as_str()),
        ("SQS_ENDPOINT", sqs_endpoint.as_str()),
        ("TABLE_NAME", table.as_str()),
        ("QUEUE_URL", queue_url.as_str()),
        ("DLQ_URL", dlq_url.as_str()),
    ];
    let mcp = |args: &[&str]| -> Run {
        let mut all = args.to_vec();
        all.push("--aws");
        run_with(&all, &env)
    };

    let store = DynamoStore::new(dynamo.clone(), table.clone());
    let mut alice = [
        task(&store, "alice").await,
        task(&store, "alice").await,
        task(&store, "alice").await,
    ];
    alice.sort_by(|a, b| a.task_id.cmp(&b.task_id));
    let bob = task(&store, "bob").await;
    // One waits for input; one has finished; one is held by a live worker.
    let mut asking = alice[1].clone();
    asking
        .require_input([("k".to_owned(), json!({"method": "elicitation/create"}))].into())
        .unwrap();
    store.update(&asking).await.unwrap();
    let done = task(&store, "alice").await;
    let mut finished = done.clone();
    finished
        .complete(json!({"content": [{"type": "text", "text": "RESULT-TEXT"}]}))
        .unwrap();
    store.update(&finished).await.unwrap();
    let mut held = alice[2].clone();
    held.lease = Some(Lease {
        owner: "a-live-worker".into(),
        expires_at_ms: mcp_tasks_core::clock::now_ms() + 600_000,
    });
    store.update(&held).await.unwrap();

    // Listing: one tenant in task-id order, a status, every tenant.
    let listed = mcp(&["tasks", "list", "--tenant", "alice"]).ok();
    let ids: Vec<&str> = listed
        .lines()
        .iter()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    let want: Vec<&str> = alice.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(ids, want, "{listed:?}");
    let asking_only = mcp(&[
        "tasks",
        "list",
        "--tenant",
        "alice",
        "--status",
        "input_required",
    ])
    .ok();
    assert_eq!(asking_only.lines().len(), 1);
    assert!(asking_only.stdout.contains(alice[1].task_id.as_str()));
    assert!(asking_only.stdout.contains("\tinput_required\t"));
    let every = mcp(&["tasks", "list", "--json"]).ok().json_lines();
    assert_eq!(every.len(), 4, "{every:?}");
    assert!(
        every
            .iter()
            .any(|t| t["tenant"] == "bob" && t["task_id"] == bob.task_id.as_str())
    );

    // Show: the result, not the arguments.
    let shown = mcp(&["tasks", "show", &done.task_id, "--tenant", "alice"]).ok();
    assert!(
        shown.stdout.contains("status            completed"),
        "{shown:?}"
    );
    assert!(shown.stdout.contains("RESULT-TEXT"));
    assert!(!shown.stdout.contains("ARG-SECRET"));
    let record = mcp(&[
        "tasks",
        "show",
        &bob.task_id,
        "--tenant",
        "bob",
        "--json",
        "--arguments",
    ])
    .ok()
    .json_lines()
    .remove(0);
    assert_eq!(record["arguments"]["note"], "ARG-SECRET");
    mcp(&["tasks", "show", &bob.task_id, "--tenant", "alice"]).fails(1, "no task");

    // Cancel: at once when nobody runs the task; a flag for the live worker; refused
    // when finished.
    let c = mcp(&["tasks", "cancel", &alice[0].task_id, "--tenant", "alice"]).ok();
    assert_eq!(c.stdout.trim(), format!("cancelled {}", alice[0].task_id));
    let now = store
        .get(TaskRef {
            tenant: &"alice".into(),
            task_id: &alice[0].task_id,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now.status.as_str(), "cancelled");
    let c = mcp(&["tasks", "cancel", &alice[2].task_id, "--tenant", "alice"]).ok();
    assert!(c.stdout.starts_with("cancel requested for"), "{c:?}");
    let now = store
        .get(TaskRef {
            tenant: &"alice".into(),
            task_id: &alice[2].task_id,
        })
        .await
        .unwrap()
        .unwrap();
    assert!(now.cancel_requested && now.status.as_str() == "working");
    mcp(&["tasks", "cancel", &done.task_id, "--tenant", "alice"]).fails(1, "is already completed");
    mcp(&["tasks", "cancel", &alice[0].task_id, "--tenant", "alice"])
        .fails(1, "is already cancelled");
    // Settings missing: a usage error naming them.
    run_with(&["tasks", "list", "--aws"], &[("AWS_REGION", "us-east-1")])
        .fails(2, "--aws needs --table or TABLE_NAME");

    // The dead-letter queue: two work messages and one that is not.
    let work = |t: &TaskRecord, kind| {
        serde_json::to_string(&WorkMessage {
            tenant: t.tenant.clone(),
            task_id: t.task_id.clone(),
            kind,
        })
        .unwrap()
    };
    for body in [
        work(&alice[1], WorkKind::Resume),
        work(&bob, WorkKind::Wake(2)),
        "GARBAGE-SECRET: not a work message".to_owned(),
    ] {
        sqs.send_message()
            .queue_url(&dlq_url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let listed = mcp(&["dlq", "list"]).ok();
    assert_eq!(listed.lines().len(), 3, "{listed:?}");
    assert!(!format!("{listed:?}").contains("GARBAGE-SECRET"));
    let line_of = |r: &Run, id: &str| {
        r.lines()
            .into_iter()
            .find(|l| l.contains(id))
            .map(str::to_owned)
    };
    let a = line_of(&listed, &alice[1].task_id).expect("alice's message listed");
    assert!(a.contains("\talice\t") && a.ends_with("\tresume"), "{a}");
    assert!(a.contains("\treceives 1\t"), "{a}");
    let b = line_of(&listed, &bob.task_id).expect("bob's message listed");
    assert!(b.ends_with("\twake 2"), "{b}");
    assert_eq!(
        listed
            .lines()
            .iter()
            .filter(|l| l.ends_with("(not a work message)"))
            .count(),
        1
    );
    let as_json = mcp(&["dlq", "list", "--json"]).ok().json_lines();
    assert_eq!(as_json.len(), 3, "listing left the messages in place");
    assert!(as_json.iter().all(|m| m["message_id"].is_string()));
    assert!(!format!("{as_json:?}").contains("GARBAGE-SECRET"));

    // Redrive: the two work messages move; the other stays, reported (exit status 1).
    let moved = mcp(&["dlq", "redrive"]).fails(1, "moved 2 to the work queue; left 1");
    assert_eq!(
        moved
            .lines()
            .iter()
            .filter(|l| l.starts_with("moved\t"))
            .count(),
        2
    );
    assert_eq!(
        moved
            .lines()
            .iter()
            .filter(|l| l.starts_with("left\t"))
            .count(),
        1
    );
    assert!(!format!("{moved:?}").contains("GARBAGE-SECRET"));
    let mut arrived: Vec<String> = drain(&sqs, &queue_url, 2)
        .await
        .iter()
        .map(|b| {
            let v: Value = serde_json::from_str(b).unwrap();
            v["task_id"].as_str().unwrap().to_owned()
        })
        .collect();
    arrived.sort();
    let mut want = vec![alice[1].task_id.clone(), bob.task_id.clone()];
    want.sort();
    assert_eq!(arrived, want);
    let rest = drain(&sqs, &dlq_url, 1).await;
    assert_eq!(rest, ["GARBAGE-SECRET: not a work message"]);

    let _ = dynamo.delete_table().table_name(&table).send().await;
    for url in [&queue_url, &dlq_url] {
        let _ = sqs.delete_queue().queue_url(url).send().await;
    }
}
