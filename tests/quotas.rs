//! Per-tenant quotas that must hold exactly, black-box on the real binary: racing creations
//! never take more than `--max-active-tasks`, and a synchronous call that runs a tool inline
//! takes one of the tenant's `--max-running-jobs` places like a task's job does.

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

/// Starts a long task of `c`'s tenant that holds a running place, and waits until it runs.
/// Its pace stays under the worker's `PARK_AFTER` (1 s): a pause that short is slept in
/// place, holding the place, where a longer one would park the task and give the place back.
async fn hold_the_running_place(c: &Client) -> String {
    let r = c
        .with_tasks()
        .tool(
            "hash_chain",
            json!({"seed": "holder", "rounds": 100_000_000u64, "pace_ms": 500}),
        )
        .await;
    let id = r["taskId"].as_str().unwrap().to_owned();
    c.with_tasks()
        .wait_task(&id, Duration::from_secs(20), |t| {
            t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("Hashed"))
        })
        .await;
    id
}

/// `n` inline `hash_chain` calls of `c` at once: (completed, refused naming `running_jobs`).
async fn inline_at_once(c: &Client, n: usize) -> (usize, usize) {
    let calls = (0..n).map(|i| {
        let c = c.clone();
        tokio::spawn(async move {
            let seed = format!("inline-{i}");
            let r = c
                .tool("hash_chain", json!({"seed": seed, "rounds": 1000}))
                .await;
            (seed, r)
        })
    });
    let (mut completed, mut refused) = (0, 0);
    for call in calls.collect::<Vec<_>>() {
        let (seed, r) = call.await.unwrap();
        match quota_of(&r) {
            Some(q) => {
                assert_eq!(q["limit"], "running_jobs", "{r}");
                assert_eq!(q["max"], 1.0, "{r}");
                assert!(q["retryAfterMs"].as_u64().unwrap() > 0, "{r}");
                let text = r["content"][0]["text"].as_str().unwrap();
                assert!(text.contains("Quota exceeded"), "{text}");
                refused += 1;
            }
            None => {
                let text = r["content"][0]["text"].as_str().unwrap_or_default();
                let digest = support::expected_hash_chain(&seed, 1000);
                assert!(text.ends_with(&digest), "{r}");
                completed += 1;
            }
        }
    }
    (completed, refused)
}

#[tokio::test]
async fn an_inline_run_takes_a_running_place_of_its_tenant() {
    // One running place per tenant; a synchronous call may wait 2 s (its budget) for it.
    let (s, _dir) = start(&[
        "--max-running-jobs",
        "1",
        "--stream-seconds",
        "2",
        "--create-per-second",
        "0",
    ]);
    let a = tenant(&s, "tenant-a");
    let holder = hold_the_running_place(&a).await;
    // A's task holds A's only place: A's inline calls wait their turn through the budget,
    // then are refused with the documented error; none runs beside the task.
    let (completed, refused) = inline_at_once(&a, 40).await;
    eprintln!(
        "quotas: 40 inline hash_chain calls while the tenant's one running place is held: \
         {completed} ran, {refused} refused"
    );
    assert_eq!((completed, refused), (0, 40));
    // Another tenant's places are its own.
    let b = tenant(&s, "tenant-b");
    assert_eq!(inline_at_once(&b, 1).await, (1, 0));
    // With the place free, A's calls take it one after another, each within its budget.
    a.with_tasks()
        .call("tasks/cancel", json!({"taskId": holder}))
        .await;
    a.with_tasks()
        .wait_terminal(&holder, Duration::from_secs(10))
        .await;
    assert_eq!(inline_at_once(&a, 20).await, (20, 0));
    // And a task started after them finds its place free again.
    hold_the_running_place(&a).await;
}

/// Both figures for the note, side by side in one run: `MCP_TASKS_BEFORE=/path/old
/// MCP_TASKS_AFTER=/path/new cargo test -p mcp-tasks --test quotas -- --ignored --nocapture
/// side_by_side` (binaries of two commits). Per binary, five rounds each: tasks created by 64
/// creations at once against `--max-active-tasks 4`, and inline calls run while the tenant's
/// one running place (`--max-running-jobs 1`) is held by a task. Not a pass/fail test: it
/// prints.
#[tokio::test]
#[ignore = "a measurement: run by hand with two binaries"]
async fn side_by_side() {
    use support::jwt;
    for (label, var) in [("before", "MCP_TASKS_BEFORE"), ("after", "MCP_TASKS_AFTER")] {
        let Ok(bin) = std::env::var(var) else {
            eprintln!("side_by_side: {var} not set, skipping {label}");
            continue;
        };
        let (mut created, mut ran) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let dir = support::data_dir();
            let mut args = jwt::args(jwt::AUDIENCE, "--jwks-file", &jwt::jwks_file());
            args.extend(
                [
                    "--max-active-tasks",
                    "4",
                    "--max-running-jobs",
                    "1",
                    "--stream-seconds",
                    "2",
                    "--create-per-second",
                    "0",
                ]
                .map(str::to_owned),
            );
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let s = support::Server::spawn(std::process::Command::new(&bin), dir.path(), &args);
            let a = tenant(&s, "tenant-a");
            created.push(create_at_once(&a.with_tasks(), 64).await.0.len());
            let b = tenant(&s, "tenant-b");
            hold_the_running_place(&b).await;
            ran.push(inline_at_once(&b, 40).await.0);
        }
        eprintln!(
            "side_by_side {label}: tasks created by 64 at once against a quota of 4: {created:?}; \
             inline calls run of 40 while the tenant's one running place is held: {ran:?}"
        );
    }
}
