//! The `call` CLI, 2025-11-25 clients and inline progress, through the functions.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Client;
use crate::support_aws::{Env, Options};
use crate::{assert_routed, support};

/// `mcp-tasks call` against the deployed shape (the emulated REST API, the function binaries,
/// the queue): a computing task and a sleeping one, each followed to its result as a person
/// would run them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_cli_follows_tasks_through_the_functions() {
    let Some(env) = Env::start("call_cli", Options::default()).await else {
        return;
    };
    let run = |tool: &'static str, args: &'static str| {
        let url = env.url.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
                .args(["call", &url, tool, args])
                .env_remove("MCP_TASKS_TOKEN")
                .stdin(std::process::Stdio::null())
                .output()
                .expect("mcp-tasks call runs")
        })
    };
    let (hashed, waited) = tokio::join!(
        run("hash_chain", r#"{"seed": "cli", "rounds": 400000}"#),
        run("wait", r#"{"seconds": 3}"#)
    );
    for out in [hashed.as_ref().unwrap(), waited.as_ref().unwrap()] {
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let hashed = String::from_utf8_lossy(&hashed.unwrap().stdout).into_owned();
    assert!(
        hashed.contains(&support::expected_hash_chain("cli", 400_000)),
        "{hashed}"
    );
    let waited = String::from_utf8_lossy(&waited.unwrap().stdout).into_owned();
    assert!(waited.contains("Waited 3 s."), "{waited}");
    assert_routed(&env);
}

/// A 2025-11-25 client through the functions: no `Mcp-Method` header, so everything reaches
/// the mcp function — its experimental tasks, the tenant-keyed `tasks/list` (a `Query` on the
/// `tenant_active` index and a `BatchGetItem`) and `tasks/result`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_client_runs_lists_and_reads_a_task_through_the_functions() {
    let Some(env) = Env::start("legacy", Options::default()).await else {
        return;
    };
    let c = env.client();
    const V25: Option<&str> = Some("2025-11-25");
    let ok = |a: &support::Answer| {
        assert_eq!(a.status, 200, "{}", a.text);
        a.json()["result"].clone()
    };
    let init = ok(&c
        .legacy_send(
            V25,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "legacy-peer", "version": "1"}}),
        )
        .await);
    assert_eq!(init["protocolVersion"], "2025-11-25", "{init}");
    let (seed, rounds) = ("legacy-aws", 200_000u64);
    let created = ok(&c
        .legacy_send(
            V25,
            "tools/call",
            json!({"name": "hash_chain", "arguments": {"seed": seed, "rounds": rounds},
                   "task": {}}),
        )
        .await);
    let id = created["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_owned();
    // A second, long task stays active while the listing is read.
    let waiting = ok(&c
        .legacy_send(
            V25,
            "tools/call",
            json!({"name": "wait", "arguments": {"seconds": 60}, "task": {}}),
        )
        .await);
    let wid = waiting["task"]["taskId"].as_str().unwrap().to_owned();
    let listed = ok(&c.legacy_send(V25, "tasks/list", json!({})).await);
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|t| t["taskId"].as_str())
        .collect();
    assert!(ids.contains(&wid.as_str()), "{listed}");
    // tasks/result blocks (within the budget) until the task completes.
    let result = ok(&c
        .legacy_send(V25, "tasks/result", json!({"taskId": id}))
        .await);
    assert_eq!(
        result["structuredContent"]["digest"],
        support::expected_hash_chain(seed, rounds),
        "{result}"
    );
    let cancelled = ok(&c
        .legacy_send(V25, "tasks/cancel", json!({"taskId": wid}))
        .await);
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert!(
        env.counts.sum(
            Some("mcp"),
            Some("dynamodb"),
            Some(&["Query", "BatchGetItem"])
        ) >= 2,
        "tasks/list read the tenant's index and batch"
    );
    assert_eq!(env.counts.sum(Some("tasks"), Some("http"), None), 0);
    env.report("legacy: initialize → task → tasks/list → tasks/result → tasks/cancel");
}

/// A 2025-11-25 client that sends `Mcp-Method` has its `tasks/result` routed to the tasks
/// function, whose Lambda timeout (10 s) is shorter than the 25 s synchronous budget: on an
/// unfinished task the function answers `-32602` with `data.status` before its own deadline
/// (the wait ends a margin before it), instead of being killed at 10 s (a bare 502).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_tasks_result_on_the_tasks_function_answers_within_its_timeout() {
    legacy_result_within_the_timeout("legacy_result_deadline", Options::default()).await;
}

/// The same under the local serverless run's deadline (`cargo lambda watch` hands every
/// invocation one already past): the function takes its deployed timeout (10 s) instead,
/// so it answers as a deployment would; it used to wait the whole 25 s budget, past the
/// timeout the emulated runtime still enforces. Prints the answer's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_tasks_result_under_a_past_deadline_answers_within_the_deployed_timeout() {
    let options = Options {
        past_deadlines: true,
        // The worker's deployed timeout, which it now takes under a past deadline.
        worker_timeout: Duration::from_secs(900),
        ..Options::default()
    };
    legacy_result_within_the_timeout("legacy_result_past_deadline", options).await;
}

async fn legacy_result_within_the_timeout(test: &str, options: Options) {
    let Some(env) = Env::start(test, options).await else {
        return;
    };
    let c = env.client();
    const V25: Option<&str> = Some("2025-11-25");
    let created = c
        .legacy_send(
            V25,
            "tools/call",
            json!({"name": "wait", "arguments": {"seconds": 120}, "task": {}}),
        )
        .await
        .json();
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_owned();
    let body = json!({"jsonrpc": "2.0", "id": 41, "method": "tasks/result",
                      "params": {"taskId": id}});
    let asked = std::time::Instant::now();
    let answer = reqwest::Client::new()
        .post(&env.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-method", "tasks/result")
        .body(serde_json::to_vec(&body).unwrap())
        .send()
        .await
        .expect("the front answers");
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap_or_default();
    println!(
        "LEGACY TASKS/RESULT [{test}] answered {status} after {:.1} s (the tasks function's timeout: 10 s)",
        asked.elapsed().as_secs_f64()
    );
    assert_eq!(status, 200, "the tasks function timed out: {text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(v["id"], 41, "{v}");
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(v["error"]["data"]["taskId"], id.as_str(), "{v}");
    assert_eq!(v["error"]["data"]["status"], "working", "{v}");
    assert_eq!(
        env.counts
            .sum(Some("tasks"), Some("http"), Some(&["tasks/result"])),
        1,
        "routed to the tasks function"
    );
    let cancelled = c
        .legacy_send(V25, "tasks/cancel", json!({"taskId": id}))
        .await
        .json();
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    assert_routed(&env);
    env.report("legacy tasks/result on the tasks function → -32602 before its 10 s timeout");
}

/// An inline call that asks for progress, 2026-07-28 and 2025-11-25 alike, through the mcp
/// function behind the streaming integration (the template's): the progress notifications
/// first, then the response, every event well formed (tests/aws_streaming/ checks when each
/// arrives).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_progress_arrives_as_one_sse_answer_through_the_functions() {
    let Some(env) = Env::start("progress", Options::default()).await else {
        return;
    };
    let c = env.client();
    let check = |a: &support::Answer, token: &str| {
        assert_eq!(a.status, 200, "{}", a.text);
        assert!(a.content_type.starts_with("text/event-stream"), "{a:?}");
        let messages = a.sse_messages();
        let (last, progress) = messages.split_last().expect("an answer");
        assert!(!progress.is_empty(), "{messages:?}");
        for n in progress {
            assert_eq!(n["method"], "notifications/progress", "{n}");
            assert_eq!(n["params"]["progressToken"], token, "{n}");
        }
        assert_eq!(
            last["result"]["content"][0]["text"], "Waited 1.5 s.",
            "{last}"
        );
    };
    let mut body = c.body(
        "tools/call",
        json!({"name": "wait", "arguments": {"seconds": 1.5}}),
    );
    body["params"]["_meta"]["progressToken"] = json!("aws-2026");
    let a = c
        .post_raw(body.to_string().as_bytes(), &Client::headers(&body))
        .await;
    check(&a, "aws-2026");
    let a = c
        .legacy_send(
            Some("2025-11-25"),
            "tools/call",
            json!({"name": "wait", "arguments": {"seconds": 1.5},
                   "_meta": {"progressToken": "aws-2025"}}),
        )
        .await;
    check(&a, "aws-2025");
    env.report("inline progress: 2026-07-28 and 2025-11-25 SSE answers");
}
