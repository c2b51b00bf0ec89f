//! Per-tenant quotas that must hold exactly, black-box on the real binary: racing creations
//! never take more than `--max-active-tasks`.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::Client;
use support::jwt::{start, token};

fn tenant(s: &support::Server, name: &str) -> Client {
    s.client().with_bearer(&token(name))
}

/// The quota block of a refusal, or None for any other answer.
fn quota_of(result: &Value) -> Option<&Value> {
    (result["isError"] == true)
        .then(|| result["_meta"].get("mcp-tasks/quota"))
        .flatten()
}

/// `n` `tools/call`s of `wait` from `c` at once: (task ids created, refusals naming
/// `active_tasks`). Anything else fails the test.
async fn create_at_once(c: &Client, n: usize) -> (Vec<String>, usize) {
    let calls = (0..n).map(|_| {
        let c = c.clone();
        tokio::spawn(async move { c.tool("wait", json!({"seconds": 3600})).await })
    });
    let (mut created, mut refused) = (Vec::new(), 0);
    for call in calls.collect::<Vec<_>>() {
        let r = call.await.unwrap();
        match quota_of(&r) {
            Some(q) => {
                assert_eq!(q["limit"], "active_tasks", "{r}");
                assert_eq!(q["max"], 4.0, "{r}");
                assert!(q["retryAfterMs"].as_u64().unwrap() > 0, "{r}");
                refused += 1;
            }
            None => {
                assert_eq!(r["resultType"], "task", "{r}");
                created.push(r["taskId"].as_str().unwrap().to_owned());
            }
        }
    }
    (created, refused)
}

#[tokio::test]
async fn racing_creations_never_pass_the_active_task_quota() {
    let (s, _dir) = start(&["--max-active-tasks", "4", "--create-per-second", "0"]);
    let a = tenant(&s, "tenant-a").with_tasks();
    let (created, refused) = create_at_once(&a, 64).await;
    eprintln!(
        "quotas: 64 racing creations, --max-active-tasks 4: {} created, {refused} refused",
        created.len()
    );
    assert_eq!((created.len(), refused), (4, 60));
    for id in &created {
        assert_eq!(a.get_task(id).await["status"], "working");
    }
    // Another tenant has places of its own.
    let b = tenant(&s, "tenant-b").with_tasks();
    assert_eq!(
        b.tool("wait", json!({"seconds": 0})).await["resultType"],
        "task"
    );
    // Each ended task gives its place back, once: a second race again gets exactly four.
    for id in &created {
        a.call("tasks/cancel", json!({"taskId": id})).await;
        a.wait_terminal(id, Duration::from_secs(10)).await;
    }
    let (again, refused) = create_at_once(&a, 64).await;
    assert_eq!((again.len(), refused), (4, 60));
}
