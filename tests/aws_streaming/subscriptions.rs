//! `subscriptions/listen` through the streaming mcp function, fed by the other functions.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::sse::{Events, parse_ms};
use crate::support_aws::{Env, Options};

/// `subscriptions/listen` through the streaming mcp function: the acknowledgement, the task
/// as it is, then each change — written by other functions (the worker, tasks/update) — within
/// 2 s of the record's `lastUpdatedAt`, read from the table at the documented rate; then the
/// listen result once the task is terminal.
#[tokio::test]
async fn a_subscription_on_lambda_delivers_each_change_within_two_seconds() {
    let Some(env) = Env::start("listen", Options::default()).await else {
        return;
    };
    let c = env.client().with_tasks();
    let created = c
        .tool("confirm_action", json!({"action": "ship", "target": "v2"}))
        .await;
    let id = created["taskId"].as_str().expect("a task").to_owned();
    let (status, ct, mut events) = Events::open(
        &c,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [id, "tsk_someone_elses"]}}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let (ack, _) = events.message(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id]),
        "{ack}"
    );
    let mut latencies = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    loop {
        let (n, wall) = events
            .message(Duration::from_secs(30))
            .await
            .expect("a notification before the end");
        if n.get("result").is_some() {
            assert_eq!(n["result"]["resultType"], "complete", "{n}");
            break;
        }
        assert_eq!(n["method"], "notifications/tasks", "{n}");
        let state = n["params"]["status"].as_str().unwrap().to_owned();
        if !seen.is_empty() {
            let changed = parse_ms(n["params"]["lastUpdatedAt"].as_str().unwrap());
            latencies.push(wall.saturating_sub(changed));
        }
        if state == "input_required" {
            let answers: serde_json::Map<String, Value> = n["params"]["inputRequests"]
                .as_object()
                .unwrap()
                .keys()
                .map(|k| {
                    (
                        k.clone(),
                        json!({"action": "accept", "content": {"confirm": true}}),
                    )
                })
                .collect();
            c.call(
                "tasks/update",
                json!({"taskId": id, "inputResponses": answers}),
            )
            .await;
        }
        seen.push(state);
    }
    assert!(
        events.next(Duration::from_secs(10)).await.is_none(),
        "the stream ends"
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?}"
    );
    assert!(seen.contains(&"input_required".to_owned()), "{seen:?}");
    // (`working` between the answer and the end lasted less than a read apart: a state that
    // short may be skipped where the stream reads the table; a terminal one never is.)

    // The read rate: one unfinished task watched for its whole run.
    let waiting = c.tool("wait", json!({"seconds": 8})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = env
        .counts
        .sum(Some("mcp"), Some("dynamodb"), Some(&["GetItem"]));
    let opened = Instant::now();
    let (_, _, mut events) = Events::open(
        &c,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [waiting]}}),
    )
    .await;
    let mut last = Value::Null;
    while let Some((m, wall)) = events.message(Duration::from_secs(30)).await {
        if m["params"]["status"] == "completed" {
            let changed = parse_ms(m["params"]["lastUpdatedAt"].as_str().unwrap());
            latencies.push(wall.saturating_sub(changed));
        }
        last = m;
    }
    assert_eq!(last["result"]["resultType"], "complete", "{last}");
    let open_for = opened.elapsed();
    let reads = env
        .counts
        .sum(Some("mcp"), Some("dynamodb"), Some(&["GetItem"]))
        - before;
    let worst = latencies.iter().copied().max().unwrap_or(0);
    eprintln!(
        "LISTEN on Lambda: changes {seen:?}, latency {latencies:?} ms (worst {worst} ms); \
         one unfinished task watched {open_for:.1?}: {reads} GetItem by mcp \
         ({:.0}/min)",
        reads as f64 * 60.0 / open_for.as_secs_f64()
    );
    assert!(worst <= 2000, "a change took {worst} ms: {latencies:?}");
    // One read a second, and a few more: agreeing to the task, taking the stream place, the
    // first and the last look.
    let allowed = open_for.as_secs() + 5;
    assert!(
        reads <= allowed,
        "{reads} reads in {open_for:?} (at most {allowed})"
    );
    assert!(
        reads >= open_for.as_secs() / 2,
        "it reads: {reads} in {open_for:?}"
    );
}
