//! `protocol = "plain"`: an unmodified program called once per task with exactly the arguments,
//! its answer the tool's result — through a task, a synchronous call, a failure and a cancel.

use std::time::Duration;

use serde_json::json;

use super::support::Server;
use super::write_manifest;

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
