//! SEP-2663 task lifecycles, black-box: create, poll, input, cancel, failure.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{Server, data_dir};

const WITHIN: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_long_computation_becomes_a_task_that_completes_with_the_right_answer() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client().with_tasks();
    let created = c
        .tool("hash_chain", json!({"seed": "tasks", "rounds": 1_000_000}))
        .await;
    assert_eq!(created["resultType"], "task");
    for absent in [
        "task",
        "result",
        "error",
        "inputRequests",
        "requestState",
        "ttl",
        "pollInterval",
    ] {
        assert!(created.get(absent).is_none(), "{absent} in {created}");
    }
    let id = created["taskId"].as_str().unwrap();
    assert!(id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic()));
    let poll = created["pollIntervalMs"].as_u64().unwrap();
    assert!((250..=30_000).contains(&poll));
    assert!(created["ttlMs"].as_u64().unwrap() > 0);
    // Readable at once (write-through before the reply).
    let first = c.get_task(id).await;
    assert_eq!(first["taskId"], id);
    assert_eq!(first["resultType"], "complete");
    let done = c.wait_terminal(id, WITHIN).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["digest"],
        support::expected_hash_chain("tasks", 1_000_000)
    );
    assert!(
        done["result"]["_meta"]
            .get("io.modelcontextprotocol/related-task")
            .is_none()
    );
    assert!(done["lastUpdatedAt"].as_str().unwrap() >= first["lastUpdatedAt"].as_str().unwrap());
    // Terminal tasks stay as they are.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(c.get_task(id).await, done);
    assert_eq!(
        c.call("tasks/cancel", json!({"taskId": id})).await,
        json!({"resultType": "complete", "_meta": done["_meta"]})
    );
    assert_eq!(c.get_task(id).await["status"], "completed");
}

#[tokio::test]
async fn input_required_then_update_completes_and_retries_change_nothing() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client().with_tasks();
    let created = c
        .tool(
            "confirm_action",
            json!({"action": "Archive", "target": "Q3 notes"}),
        )
        .await;
    let id = created["taskId"].as_str().unwrap();
    let parked = c
        .wait_task(id, WITHIN, |t| t["status"] == "input_required")
        .await;
    let key = parked["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    // Unknown keys are acked and ignored.
    let ack = c
        .call(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"nope": {"action": "accept"}}}),
        )
        .await;
    assert_eq!(ack["resultType"], "complete");
    assert_eq!(c.get_task(id).await["status"], "input_required");
    let answer = json!({key.clone(): {"action": "accept", "content": {"confirm": true}}});
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": answer}),
    )
    .await;
    // A retried update is harmless.
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": answer}),
    )
    .await;
    let done = c.wait_terminal(id, WITHIN).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Confirmed: Archive Q3 notes."
    );
}

#[tokio::test]
async fn cancel_stops_a_running_job_within_about_a_second() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client().with_tasks();
    let created = c.tool("wait", json!({"seconds": 60})).await;
    let id = created["taskId"].as_str().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    let ack = c.call("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(ack["resultType"], "complete");
    assert!(ack.get("status").is_none());
    let t = c.wait_terminal(id, Duration::from_secs(5)).await;
    assert_eq!(t["status"], "cancelled");
    assert!(
        asked.elapsed() < Duration::from_millis(2500),
        "{:?}",
        asked.elapsed()
    );
    // Cancelling again is an ack, and the status stays.
    c.call("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(c.get_task(id).await["status"], "cancelled");
}

#[tokio::test]
async fn cancel_of_a_task_waiting_for_input_is_immediate() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client().with_tasks();
    let id = c
        .tool(
            "confirm_action",
            json!({"action": "Drop", "target": "table"}),
        )
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    c.wait_task(&id, WITHIN, |t| t["status"] == "input_required")
        .await;
    c.call("tasks/cancel", json!({"taskId": id})).await;
    let t = c.get_task(&id).await;
    assert_eq!(t["status"], "cancelled");
    assert!(t.get("inputRequests").is_none());
}

#[tokio::test]
async fn protocol_failures_end_failed_with_an_error() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client().with_tasks();
    let id = c
        .tool("unreliable_upstream", json!({"after_ms": 100}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = c.wait_terminal(&id, WITHIN).await;
    assert_eq!(t["status"], "failed");
    assert_eq!(t["error"]["code"], -32603);
    assert!(t.get("result").is_none());
    assert_eq!(t["statusMessage"], t["error"]["message"]);
}

#[tokio::test]
async fn many_waiting_jobs_run_at_once() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client().with_tasks();
    let mut ids = Vec::new();
    for _ in 0..50 {
        ids.push(
            c.tool("wait", json!({"seconds": 2})).await["taskId"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    // 50 two-second jobs finish long before 50 x 2 s: they overlap.
    for id in &ids {
        let t = c.wait_terminal(id, Duration::from_secs(30)).await;
        assert_eq!(t["status"], "completed");
    }
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client().with_tasks();
    // Arguments too large for a task record: refused before any task exists.
    let big = "x".repeat(320 * 1024);
    let a = c
        .send(
            "tools/call",
            json!({"name": "wait", "arguments": {"seconds": 0.1, "pad": big}}),
        )
        .await;
    assert_eq!(
        a.json()["error"]["code"],
        -32602,
        "{}",
        &a.text[..200.min(a.text.len())]
    );
    // A malformed answer to an outstanding request: refused, the task still waits.
    let id = c
        .tool("confirm_action", json!({"action": "Ship", "target": "v2"}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let parked = c
        .wait_task(&id, WITHIN, |t| t["status"] == "input_required")
        .await;
    let key = parked["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    for bad in [
        json!("yes"),
        json!({"action": "perhaps"}),
        json!({"action": "accept", "content": 1}),
    ] {
        let a = c
            .send(
                "tasks/update",
                json!({"taskId": id, "inputResponses": {key.clone(): bad}}),
            )
            .await;
        assert_eq!(a.json()["error"]["code"], -32602);
    }
    let a = c
        .send(
            "tasks/update",
            json!({"taskId": id, "inputResponses": "nope"}),
        )
        .await;
    assert_eq!(a.json()["error"]["code"], -32602);
    let still = c.get_task(&id).await;
    assert_eq!(still["status"], "input_required");
    assert_eq!(still["inputRequests"], parked["inputRequests"]);
}

#[tokio::test]
async fn the_task_ttl_is_the_servers_setting() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &["--task-ttl-seconds", "60"]);
    let c = s.client().with_tasks();
    let created = c.tool("wait", json!({"seconds": 1})).await;
    assert_eq!(created["ttlMs"], 60_000, "{created}");
    let got = c.get_task(created["taskId"].as_str().unwrap()).await;
    assert_eq!(got["ttlMs"], 60_000, "{got}");
    // Out of range is refused at start-up, naming the flag.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
        .args(["serve", "--task-ttl-seconds", "59"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--task-ttl-seconds"));
}

/// `pollIntervalMs` follows what the job knows: a `wait` with ten minutes to go asks to be
/// polled every 30 s (the cap), one with a few seconds left every second (the floor).
#[tokio::test]
async fn the_poll_interval_follows_the_time_the_job_still_needs() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client().with_tasks();
    let long = c.tool("wait", json!({"seconds": 600})).await;
    assert_eq!(long["pollIntervalMs"], 1000, "before the job said anything");
    let long = long["taskId"].as_str().unwrap().to_owned();
    let short = c.tool("wait", json!({"seconds": 4})).await;
    let short = short["taskId"].as_str().unwrap().to_owned();
    let t = c
        .wait_task(&long, WITHIN, |t| t["pollIntervalMs"] == 30_000)
        .await;
    assert_eq!(t["status"], "working", "{t}");
    let t = c
        .wait_task(&short, WITHIN, |t| {
            t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("Waiting"))
        })
        .await;
    // Asleep for 4 s: a tenth of that is under the floor.
    assert_eq!(t["pollIntervalMs"], 1000, "{t}");
    c.call("tasks/cancel", json!({"taskId": long})).await;
}
