//! An `http` target's secret header on the local server: the value of the variable
//! `secret_env` names, read once at start, reaches the target on every step (the example
//! target, `examples/python/serve.py --secret-env`, refuses a step without it), and a wrong
//! value is the target's `401`, which fails the task without a retry.

use std::time::Duration;

use serde_json::json;

use super::support::Server;
use super::support::targets::{Helper, repo};
use super::write_manifest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_header_reaches_an_http_target() {
    const KEY: &str = "Bearer local-report-key-7d2a";
    let target = Helper::python_with(
        &repo().join("examples/python/serve.py"),
        &["report:handler", "--secret-env", "REPORT_KEY"],
        &[("REPORT_KEY", KEY)],
    );
    let dir = tempfile::tempdir().unwrap();
    let entry = |name: &str, var: &str| {
        format!(
            "[[tool]]\nname = \"{name}\"\ndescription = \"d\"\ntask = \"required\"\nmax_retries = 2\n\
             input_schema = {{ type = \"object\" }}\n\
             target = {{ http = \"{}/\", secret_env = \"{var}\" }}\n\n",
            target.url
        )
    };
    let text =
        entry("right", "MCP_TASKS_TEST_RIGHT_KEY") + &entry("wrong", "MCP_TASKS_TEST_WRONG_KEY");
    let manifest = write_manifest(dir.path(), &text);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"));
    cmd.env("MCP_TASKS_TEST_RIGHT_KEY", KEY)
        .env("MCP_TASKS_TEST_WRONG_KEY", "Bearer not-the-key");
    let s = Server::spawn(
        cmd,
        &dir.path().join("data"),
        &["--tools", &manifest.display().to_string()],
    );
    let c = s.client().with_tasks();
    let args = json!({"month": "2026-11", "parts": 2});
    let right = c.tool("right", args.clone()).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = c.wait_terminal(&right, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(
        t["result"]["content"][0]["text"],
        "Report 2026-11: 2 parts, total 21"
    );
    let wrong = c.tool("wrong", args).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = c.wait_terminal(&wrong, Duration::from_secs(20)).await;
    assert_eq!(
        t["error"]["message"], "Tool wrong failed: its target answered HTTP 401",
        "{t}"
    );
    assert!(!t.to_string().contains("not-the-key"), "{t}");
}
