//! `protocol = "plain"`: an unmodified program, Lambda function or HTTP API called once per
//! task with exactly the arguments, its answer the tool's result — through a task, a
//! synchronous call, a failure and a cancel.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::Server;
use super::{Helper, repo, write_manifest};

/// A `plain` command entry running `script` under `sh -c`.
fn entry(name: &str, script: &str, extra: &str) -> String {
    format!(
        "[[tool]]\nname = \"{name}\"\ndescription = \"an unmodified program\"\n\
         protocol = \"plain\"\nmax_retries = 0\n{extra}\n\
         input_schema = {{ type = \"object\", properties = {{ n = {{ type = \"integer\" }} }} }}\n\
         target = {{ command = [\"sh\", \"-c\", '{script}'] }}\n\n"
    )
}

#[tokio::test]
async fn a_plain_program_is_a_task_and_a_synchronous_call() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let manifest = write_manifest(
        dir.path(),
        &[
            // Echoes its stdin (the arguments): an object answer.
            entry("echo", &format!("tee {}", seen.display()), ""),
            entry("words", r#"printf "\"%s\"" hello"#, ""),
            entry("number", "echo 42", ""),
            entry("broken", "echo not json", ""),
            entry("fails", "echo secret-detail >&2; exit 3", ""),
            entry(
                "slow",
                "sleep 60",
                "task = \"required\"\nstep_timeout_seconds = 120",
            ),
        ]
        .concat(),
    );
    let s = Server::start(
        &dir.path().join("data"),
        &["--tools", &manifest.display().to_string()],
    );
    let tasks = s.client().with_tasks();
    // A task: the result is structuredContent plus its JSON as text; the program saw exactly
    // the arguments.
    let id = tasks.tool("echo", json!({"n": 7})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = tasks.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["structuredContent"], json!({"n": 7}), "{t}");
    assert_eq!(t["result"]["content"][0]["text"], r#"{"n":7}"#, "{t}");
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), r#"{"n":7}"#);
    // Synchronous: a string is the text as it is, any other value its JSON.
    let sync = s.client();
    let r = sync.tool("words", json!({})).await;
    assert_eq!(r["content"][0]["text"], "hello", "{r}");
    assert!(r.get("structuredContent").is_none(), "{r}");
    let r = sync.tool("number", json!({})).await;
    assert_eq!(r["content"][0]["text"], "42", "{r}");
    // Failures name the tool and the kind, never what the program said.
    let e = sync
        .send("tools/call", json!({"name": "broken", "arguments": {}}))
        .await
        .json();
    assert_eq!(
        e["error"]["message"],
        "Tool broken failed: its target answered with something that is not JSON",
        "{e}"
    );
    let e = sync
        .send("tools/call", json!({"name": "fails", "arguments": {}}))
        .await
        .json();
    assert_eq!(
        e["error"]["message"], "Tool fails failed: its target exited with status 3",
        "{e}"
    );
    assert!(!e.to_string().contains("secret-detail"), "{e}");
    // A cancel abandons the call.
    let id = tasks.tool("slow", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;
    tasks.call("tasks/cancel", json!({"taskId": id})).await;
    let t = tasks.wait_terminal(&id, Duration::from_secs(5)).await;
    assert_eq!(t["status"], "cancelled", "{t}");
}

/// examples/plain: an ordinary Python Lambda function behind the emulated Invoke API, as its
/// manifest declares it — a task, a synchronous call, and the Invoke API's failures named by
/// kind (retried, then `Tool NAME failed: …`), never by what the function said.
#[tokio::test]
async fn the_plain_lambda_example_runs_unmodified() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    let api = super::lambda_api(&log);
    let example = std::fs::read_to_string(super::repo().join("examples/plain/tools.toml")).unwrap();
    let failing = example
        .replace("name = \"fit_image\"", "name = \"crashes\"")
        .replace("\"image-resize\"", "\"crashing\"")
        .replace("max_retries = 2", "max_retries = 1");
    let manifest = write_manifest(dir.path(), &format!("{example}\n{failing}"));
    let env = super::lambda_env(&api.url);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"));
    cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let s = Server::spawn(
        cmd,
        &dir.path().join("data"),
        &["--tools", &manifest.display().to_string()],
    );
    let args = json!({"width": 4000, "height": 3000, "max_side": 1000});
    let want = json!({"width": 1000, "height": 750, "scale": 0.25});
    let tasks = s.client().with_tasks();
    let id = tasks.tool("fit_image", args.clone()).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = tasks.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(t["result"]["structuredContent"], want, "{t}");
    let r = s.client().tool("fit_image", args.clone()).await;
    assert_eq!(r["structuredContent"], want, "{r}");
    // The function got exactly the arguments as its event.
    let calls = std::fs::read_to_string(&log).unwrap();
    let first: serde_json::Value = serde_json::from_str(calls.lines().next().unwrap()).unwrap();
    assert_eq!(first["event"], args);
    let id = tasks
        .tool("crashes", json!({"width": 1, "height": 1}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = tasks.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(
        t["error"]["message"], "Tool crashes failed: its target's function failed (2 tries)",
        "{t}"
    );
}

/// A plain `lambda` target whose function does not answer (the emulated Invoke API's `slow`,
/// 60 s): a cancel abandons the call, and the task is `cancelled` long before the function
/// would have answered, with no second invocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_abandons_a_plain_lambda_call() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    let api = super::lambda_api(&log);
    let manifest = write_manifest(
        dir.path(),
        "[[tool]]\nname = \"stuck\"\ndescription = \"an unmodified function\"\n\
         protocol = \"plain\"\ntask = \"required\"\nmax_retries = 0\nstep_timeout_seconds = 120\n\
         input_schema = { type = \"object\" }\ntarget = { lambda = \"slow\" }\n",
    );
    let env = super::lambda_env(&api.url);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"));
    cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let s = Server::spawn(
        cmd,
        &dir.path().join("data"),
        &["--tools", &manifest.display().to_string()],
    );
    let tasks = s.client().with_tasks();
    let id = tasks.tool("stuck", json!({"k": 1})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // The Invoke is under way (the function got the arguments) when the cancel comes.
    let calls = super::wait_logged(&log, 1, Duration::from_secs(30)).await;
    assert_eq!(calls[0], json!({"k": 1}));
    let asked = Instant::now();
    tasks.call("tasks/cancel", json!({"taskId": id})).await;
    let t = tasks.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    let took = asked.elapsed();
    println!("plain lambda: cancelled {took:?} after the cancel, mid-Invoke");
    assert!(
        took < Duration::from_secs(30),
        "waited for the function: {took:?}"
    );
    assert_eq!(super::logged(&log).len(), 1, "invoked again");
}

/// The paths a loopback target logged (`tests/targets/bad_target.py --log`), with their bodies.
fn requests(log: &Path) -> Vec<(String, Value)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["path"].as_str().unwrap_or_default().to_owned(),
                v["event"].clone(),
            )
        })
        .collect()
}

/// An unmodified HTTP API with no signature (`tests/targets/bad_target.py` on a loopback port):
/// its body is exactly the arguments, its JSON answer the result of a task and of a synchronous
/// call; a 5xx (retried up to `max_retries`) and a 200 that is not JSON fail naming the tool,
/// never quoting the body; a cancel abandons a call that does not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_api_is_a_task_a_synchronous_call_a_failure_and_a_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let api = Helper::python(
        &repo().join("tests/targets/bad_target.py"),
        &["--log", &log.display().to_string()],
    );
    let entry = |name: &str, path: &str, extra: &str| {
        format!(
            "[[tool]]\nname = \"{name}\"\ndescription = \"an unmodified API\"\n\
             protocol = \"plain\"\n{extra}\ninput_schema = {{ type = \"object\" }}\n\
             target = {{ http = \"{}{path}\" }}\n\n",
            api.url
        )
    };
    let manifest = write_manifest(
        dir.path(),
        &[
            entry("page", "/ok", "max_retries = 0"),
            entry("down", "/status/502", "max_retries = 0"),
            entry(
                "down_twice",
                "/status/503",
                "max_retries = 1\ntask = \"required\"",
            ),
            entry("garbled", "/garbage", "max_retries = 0"),
            entry(
                "stuck",
                "/slow",
                "max_retries = 0\ntask = \"required\"\nstep_timeout_seconds = 120",
            ),
        ]
        .concat(),
    );
    let s = Server::start(
        &dir.path().join("data"),
        &["--tools", &manifest.display().to_string()],
    );
    let answer = json!({"done": {"content": [{"type": "text", "text": "ok"}]}});
    let tasks = s.client().with_tasks();
    let id = tasks.tool("page", json!({"n": 1})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = tasks.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["structuredContent"], answer, "{t}");
    assert_eq!(t["result"]["content"][0]["text"], answer.to_string(), "{t}");
    let sync = s.client();
    let r = sync.tool("page", json!({"n": 2})).await;
    assert_eq!(r["structuredContent"], answer, "{r}");
    // Each call POSTed exactly its arguments, once.
    let seen: Vec<Value> = requests(&log).into_iter().map(|(_, e)| e).collect();
    assert_eq!(seen, [json!({"n": 1}), json!({"n": 2})]);

    // Failures: the tool and the kind, never the body (`SECRET-BODY`).
    let e = sync
        .send("tools/call", json!({"name": "down", "arguments": {}}))
        .await
        .json();
    assert_eq!(
        e["error"]["message"], "Tool down failed: its target answered HTTP 502",
        "{e}"
    );
    assert!(!e.to_string().contains("SECRET-BODY"), "{e}");
    let e = sync
        .send("tools/call", json!({"name": "garbled", "arguments": {}}))
        .await
        .json();
    assert_eq!(
        e["error"]["message"],
        "Tool garbled failed: its target answered with something that is not JSON",
        "{e}"
    );
    assert!(!e.to_string().contains("SECRET-BODY"), "{e}");
    let id = tasks.tool("down_twice", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = tasks.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(
        t["error"]["message"], "Tool down_twice failed: its target answered HTTP 503 (2 tries)",
        "{t}"
    );
    assert!(!t.to_string().contains("SECRET-BODY"), "{t}");
    let tries = requests(&log)
        .iter()
        .filter(|(p, _)| p == "/status/503")
        .count();
    assert_eq!(tries, 2, "a 5xx is retried up to max_retries");

    // A cancel abandons a call the API never answers (60 s).
    let id = tasks.tool("stuck", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let start = Instant::now();
    while !requests(&log).iter().any(|(p, _)| p == "/slow") {
        assert!(start.elapsed() < Duration::from_secs(30), "never called");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let asked = Instant::now();
    tasks.call("tasks/cancel", json!({"taskId": id})).await;
    let t = tasks.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    let took = asked.elapsed();
    println!("plain http: cancelled {took:?} after the cancel, mid-request");
    assert!(
        took < Duration::from_secs(30),
        "waited for the API: {took:?}"
    );
}
