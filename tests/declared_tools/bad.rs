//! Targets that misbehave — time out, answer 5xx or 4xx, throttle, answer garbage or too much,
//! exit non-zero, fail inside the function — get bounded, clear answers: retried with back-off
//! where that may help, then the task fails with a message naming the tool and the kind of
//! failure and nothing the target sent; meanwhile another tenant's task runs as if nothing
//! happened.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::Server;
use super::support::jwt;
use super::{Helper, lambda_api, lambda_env, repo, write_manifest};

/// (tool, target, extra settings, the failure message after `Tool NAME failed: `, requests).
fn cases(http: &str) -> Vec<(&'static str, String, &'static str, String, usize)> {
    let not_protocol = "its target answered with something that is not an mcp-tasks-step/1 answer";
    vec![
        (
            "h_503",
            format!("{{ http = \"{http}/status/503\" }}"),
            "",
            "its target answered HTTP 503 (2 tries)".into(),
            2,
        ),
        (
            "h_404",
            format!("{{ http = \"{http}/status/404\" }}"),
            "",
            "its target answered HTTP 404".into(),
            1,
        ),
        (
            "h_throttle",
            format!("{{ http = \"{http}/throttle\" }}"),
            "",
            "its target was throttled (2 tries)".into(),
            2,
        ),
        (
            "h_garbage",
            format!("{{ http = \"{http}/garbage\" }}"),
            "",
            not_protocol.into(),
            1,
        ),
        (
            "h_oversize",
            format!("{{ http = \"{http}/oversize\" }}"),
            "max_answer_bytes = 65536",
            "its target answered more than 65536 bytes".into(),
            1,
        ),
        (
            "h_timeout",
            format!("{{ http = \"{http}/slow\" }}"),
            "step_timeout_seconds = 1",
            "its target timed out (2 tries)".into(),
            2,
        ),
        (
            "l_throttled",
            "{ lambda = \"throttled\" }".into(),
            "",
            "its target was throttled (2 tries)".into(),
            2,
        ),
        (
            "l_crashing",
            "{ lambda = \"crashing\" }".into(),
            "",
            "its target's function failed (2 tries)".into(),
            2,
        ),
        (
            "l_missing",
            "{ lambda = \"no-such-function\" }".into(),
            "",
            "its target could not be invoked (no such function)".into(),
            1,
        ),
        (
            "l_garbage",
            "{ lambda = \"garbage\" }".into(),
            "",
            not_protocol.into(),
            1,
        ),
        (
            "l_oversize",
            "{ lambda = \"oversize\" }".into(),
            "",
            "its target answered more than 262144 bytes".into(),
            1,
        ),
        (
            "l_timeout",
            "{ lambda = \"slow\" }".into(),
            "step_timeout_seconds = 1",
            "its target timed out (2 tries)".into(),
            2,
        ),
        (
            "c_exit",
            "{ command = [\"sh\", \"-c\", \"cat > /dev/null; exit 3\"] }".into(),
            "",
            "its target exited with status 3 (2 tries)".into(),
            0,
        ),
        (
            "c_garbage",
            "{ command = [\"sh\", \"-c\", \"cat > /dev/null; echo SECRET-BODY\"] }".into(),
            "",
            not_protocol.into(),
            0,
        ),
        (
            "c_timeout",
            "{ command = [\"sh\", \"-c\", \"sleep 60\"] }".into(),
            "step_timeout_seconds = 1",
            "its target timed out (2 tries)".into(),
            0,
        ),
        (
            "c_missing",
            "{ command = [\"no-such-program-anywhere\"] }".into(),
            "",
            "its target could not be started".into(),
            0,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_targets_fail_their_tasks_clearly_and_other_tenants_never_notice() {
    let dir = tempfile::tempdir().unwrap();
    let http_log = dir.path().join("http.jsonl");
    let lambda_log = dir.path().join("lambda.jsonl");
    let bad = Helper::python(
        &repo().join("tests/targets/bad_target.py"),
        &["--log", &http_log.display().to_string()],
    );
    let lambda = lambda_api(&lambda_log);
    let cases = cases(&bad.url);
    let mut text = String::new();
    for (name, target, extra, _, _) in &cases {
        text.push_str(&format!(
            "[[tool]]\nname = \"{name}\"\ndescription = \"misbehaves\"\ntask = \"required\"\n\
             input_schema = {{ type = \"object\" }}\ntarget = {target}\nmax_retries = 1\n{extra}\n\n"
        ));
    }
    text.push_str(&format!(
        "[[tool]]\nname = \"fine\"\ndescription = \"answers at once\"\ntask = \"required\"\n\
         input_schema = {{ type = \"object\" }}\ntarget = {{ http = \"{}/ok\" }}\n",
        bad.url
    ));
    let manifest = write_manifest(dir.path(), &text);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"));
    cmd.envs(lambda_env(&lambda.url));
    let mut args = jwt::args(jwt::AUDIENCE, "--jwks-file", &jwt::jwks_file());
    args.extend(["--tools".into(), manifest.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::spawn(cmd, &dir.path().join("data"), &args);
    let hostile = s.client().with_tasks().with_bearer(&jwt::token("tenant-a"));
    let bystander = s.client().with_tasks().with_bearer(&jwt::token("tenant-b"));

    let mut ids = Vec::new();
    for (name, ..) in &cases {
        let created = hostile.tool(name, json!({})).await;
        ids.push(created["taskId"].as_str().unwrap().to_owned());
    }
    // Meanwhile, another tenant's task is served at once.
    let started = Instant::now();
    let fine = bystander.tool("fine", json!({})).await;
    let fine = bystander
        .wait_terminal(fine["taskId"].as_str().unwrap(), Duration::from_secs(10))
        .await;
    println!("the other tenant's task took {:?}", started.elapsed());
    assert_eq!(fine["status"], "completed", "{fine}");
    assert_eq!(fine["result"]["content"][0]["text"], "ok");

    for ((name, _, _, says, requests), id) in cases.iter().zip(&ids) {
        let t = hostile.wait_terminal(id, Duration::from_secs(30)).await;
        assert_eq!(t["status"], "failed", "{name}: {t}");
        let message = t["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(message, format!("Tool {name} failed: {says}"), "{name}");
        assert!(!t.to_string().contains("SECRET-BODY"), "{name}: {t}");
        if *requests > 0 {
            let log = if name.starts_with("h_") {
                &http_log
            } else {
                &lambda_log
            };
            let n = count_for(&logged_raw(log), name);
            assert_eq!(n, *requests, "{name}: requests");
        }
        // The other tenant cannot see the failures either.
        let theirs = bystander
            .send("tasks/get", json!({"taskId": id}))
            .await
            .json();
        assert_eq!(theirs["error"]["code"], -32602, "{name}: {theirs}");
    }
}

/// The raw log lines (the helpers log `{"path"|"function": …, "event": …}`).
fn logged_raw(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// How many logged requests were for tool `name`.
fn count_for(lines: &[Value], name: &str) -> usize {
    lines.iter().filter(|l| l["event"]["tool"] == name).count()
}

/// A step that would outlive its timeout is cut there and its process group killed: a slow
/// command holds nothing past `step_timeout_seconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_its_timeout_is_killed_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let manifest = write_manifest(
        dir.path(),
        &format!(
            "[[tool]]\nname = \"stuck\"\ndescription = \"never answers\"\ntask = \"required\"\n\
             input_schema = {{ type = \"object\" }}\nmax_retries = 0\nstep_timeout_seconds = 1\n\
             target = {{ command = [\"sh\", \"-c\", \"echo $$ > {}; sleep 60 & sleep 60\"] }}\n",
            pids.display()
        ),
    );
    let s = Server::start(
        &dir.path().join("data"),
        &["--tools", &manifest.display().to_string()],
    );
    let c = s.client().with_tasks();
    let id = c.tool("stuck", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = c.wait_terminal(&id, Duration::from_secs(10)).await;
    assert_eq!(
        t["error"]["message"], "Tool stuck failed: its target timed out",
        "{t}"
    );
    let pgid: i32 = std::fs::read_to_string(&pids)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let start = Instant::now();
    while super::group_alive(pgid) {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "group {pgid} lives on"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
