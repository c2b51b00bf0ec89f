//! `step_functions` targets on the local server against an emulated Step Functions API on
//! 127.0.0.1 (`tests/targets/states_api.py`, reached through `AWS_ENDPOINT_URL_SFN`): a task to
//! its output, a synchronous call, a failure named without its cause, a person's answer in the
//! middle, a cancel that stops the execution, and a server killed with SIGKILL that resumes the
//! same single execution.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::Server;
use super::{Helper, logged, repo, write_manifest};

const ARN: &str = "arn:aws:states:us-east-1:123456789012:stateMachine:";

struct Rig {
    api: Helper,
    log: PathBuf,
    manifest: PathBuf,
    dir: tempfile::TempDir,
}

fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    let api = Helper::python(
        &repo().join("tests/targets/states_api.py"),
        &[
            "--machine",
            "approve=approval",
            "--machine",
            "quick=quick",
            "--machine",
            "failing=failing",
            "--machine",
            "long=long",
            "--log",
            &log.display().to_string(),
        ],
    );
    let entry = |name: &str, task: &str| {
        format!(
            "[[tool]]\nname = \"{name}\"\ndescription = \"the {name} workflow\"\ntask = \"{task}\"\n\
             input_schema = {{ type = \"object\" }}\nmax_retries = 1\n\
             target = {{ step_functions = \"{ARN}{name}\", poll_seconds = 1 }}\n\n"
        )
    };
    let text = [
        entry("approve", "required"),
        entry("quick", "optional"),
        entry("failing", "required"),
        entry("long", "required"),
    ]
    .concat();
    let manifest = write_manifest(dir.path(), &text);
    Rig {
        api,
        log,
        manifest,
        dir,
    }
}

impl Rig {
    fn start(&self) -> Server {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"));
        cmd.env("AWS_ENDPOINT_URL_SFN", &self.api.url)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true");
        Server::spawn(
            cmd,
            &self.dir.path().join("data"),
            &["--tools", &self.manifest.display().to_string()],
        )
    }

    fn calls(&self, action: &str) -> Vec<Value> {
        logged(&self.log)
            .into_iter()
            .filter(|c| c["action"] == action)
            .map(|c| c["body"].clone())
            .collect()
    }
}

fn task_id(created: &Value) -> String {
    created["taskId"].as_str().unwrap().to_owned()
}

async fn wait_for(log: &Path, action: &str, within: Duration) {
    let start = Instant::now();
    while !logged(log).iter().any(|c| c["action"] == action) {
        assert!(start.elapsed() < within, "no {action} within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_is_a_task_a_synchronous_call_and_a_failure_without_its_cause() {
    let r = rig();
    let s = r.start();
    let tasks = s.client().with_tasks();
    let args = json!({"service": "web", "n": 3});
    let id = task_id(&tasks.tool("quick", args.clone()).await);
    let t = tasks.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["structuredContent"], args, "{t}");
    let started = r.calls("StartExecution");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["name"], format!("mcp-tasks-{id}"));
    assert_eq!(
        started[0]["input"],
        args.to_string(),
        "exactly the arguments"
    );
    // Without the tasks extension: the same loop, in place.
    let r2 = s.client().tool("quick", json!({"sync": true})).await;
    assert_eq!(r2["structuredContent"], json!({"sync": true}), "{r2}");
    // A failed execution: its error's name, never its cause.
    let id = task_id(&tasks.tool("failing", json!({})).await);
    let t = tasks.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(
        t["error"]["message"], "Tool failing failed: its workflow ended FAILED (Build.Broken)",
        "{t}"
    );
    assert!(!t.to_string().contains("hunter2"), "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_state_asks_the_client_and_its_answer_goes_back() {
    let r = rig();
    let s = r.start();
    let c = s.client().with_tasks();
    let id = task_id(&c.tool("approve", json!({"service": "api"})).await);
    let asking = c
        .wait_task(&id, Duration::from_secs(20), |t| t["status"] != "working")
        .await;
    assert_eq!(asking["status"], "input_required", "{asking}");
    let requests = c.call("tasks/get", json!({"taskId": id})).await;
    assert_eq!(
        requests["inputRequests"]["approve"]["params"]["message"], "Deploy api?",
        "{requests}"
    );
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"approve": {"action": "accept", "content": {}}}}),
    )
    .await;
    let done = c.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"deployed": true, "service": "api"}),
        "{done}"
    );
    let sent = r.calls("SendTaskSuccess");
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["taskToken"], format!("token-mcp-tasks-{id}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_stops_the_execution_within_a_second() {
    let r = rig();
    let s = r.start();
    let c = s.client().with_tasks();
    let id = task_id(&c.tool("long", json!({})).await);
    // Parked between looks when the cancel comes.
    wait_for(&r.log, "DescribeExecution", Duration::from_secs(20)).await;
    let asked = Instant::now();
    c.call("tasks/cancel", json!({"taskId": id})).await;
    wait_for(&r.log, "StopExecution", Duration::from_secs(5)).await;
    let took = asked.elapsed();
    println!("step_functions: StopExecution {took:?} after the cancel");
    assert!(took < Duration::from_secs(1), "{took:?}");
    let stopped = r.calls("StopExecution");
    assert!(
        stopped[0]["executionArn"]
            .as_str()
            .unwrap()
            .ends_with(&format!(":execution:long:mcp-tasks-{id}")),
        "{stopped:?}"
    );
    let t = c.get_task(&id).await;
    assert_eq!(t["status"], "cancelled", "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_resumes_the_same_single_execution() {
    let r = rig();
    let first = r.start();
    let c = first.client().with_tasks();
    let id = task_id(&c.tool("approve", json!({"service": "db"})).await);
    wait_for(&r.log, "StartExecution", Duration::from_secs(20)).await;
    first.kill();
    let second = r.start();
    let c = second.client().with_tasks();
    let asking = c
        .wait_task(&id, Duration::from_secs(30), |t| t["status"] != "working")
        .await;
    assert_eq!(asking["status"], "input_required", "{asking}");
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"approve": {"action": "accept", "content": {}}}}),
    )
    .await;
    let done = c.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let names: std::collections::BTreeSet<String> = r
        .calls("StartExecution")
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names.len(), 1, "one execution: {names:?}");
}

/// The object holding `key`, anywhere in `v`, and how many objects and arrays down it is.
fn holding<'a>(v: &'a Value, key: &str, depth: usize) -> Option<(&'a Value, usize)> {
    match v {
        Value::Object(o) if o.contains_key(key) => Some((v, depth)),
        Value::Object(o) => o.values().find_map(|c| holding(c, key, depth + 1)),
        Value::Array(a) => a.iter().find_map(|c| holding(c, key, depth + 1)),
        _ => None,
    }
}

/// examples/step-functions/approve.asl.json, checked as the docs promise it (the stand-in plays
/// its own workflow, so nothing else reads this file): it parses; `StartAt` and every `Next`,
/// `Default` and choice names a state; every state is reached and every path ends; the waiting
/// state uses `.waitForTaskToken` and carries `mcp-tasks/input` with the task token and the
/// input requests, within the six levels the server searches a state's parameters; its paths
/// read the arguments its manifest entry requires, and its choice reads the answer's shape.
#[test]
fn the_example_approval_workflow_is_well_formed() {
    let dir = repo().join("examples/step-functions");
    let text = std::fs::read_to_string(dir.join("approve.asl.json")).unwrap();
    let asl: Value = serde_json::from_str(&text).expect("approve.asl.json is JSON");
    let states = asl["States"].as_object().expect("States");
    let start = asl["StartAt"].as_str().expect("StartAt");
    assert!(states.contains_key(start), "StartAt {start} is no state");
    let mut reached = std::collections::BTreeSet::from([start.to_owned()]);
    let mut next = vec![start.to_owned()];
    while let Some(name) = next.pop() {
        let s = &states[&name];
        let kind = s["Type"].as_str().unwrap_or_default();
        let mut targets: Vec<&Value> = vec![&s["Next"], &s["Default"]];
        for choice in s["Choices"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            targets.push(&choice["Next"]);
        }
        let targets: Vec<&str> = targets.into_iter().filter_map(Value::as_str).collect();
        let ends = s["End"] == true || matches!(kind, "Succeed" | "Fail");
        assert!(
            ends == targets.is_empty(),
            "{name} ({kind}): ends or goes on, not both"
        );
        for t in targets {
            assert!(
                states.contains_key(t),
                "{name} goes to {t}, which is no state"
            );
            if reached.insert(t.to_owned()) {
                next.push(t.to_owned());
            }
        }
    }
    let all: std::collections::BTreeSet<String> = states.keys().cloned().collect();
    assert_eq!(reached, all, "states never reached");

    let waiting: Vec<(&String, &Value)> = states
        .iter()
        .filter(|(_, s)| {
            s["Resource"]
                .as_str()
                .is_some_and(|r| r.ends_with(".waitForTaskToken"))
        })
        .collect();
    assert_eq!(waiting.len(), 1, "one waiting state");
    let (name, state) = waiting[0];
    assert_eq!(state["Type"], "Task", "{name}");
    let (holder, depth) =
        holding(&state["Parameters"], "mcp-tasks/input", 0).expect("mcp-tasks/input");
    assert!(depth <= 6, "{name}: the marker is {depth} levels down");
    let question = &holder["mcp-tasks/input"];
    assert_eq!(question["taskToken.$"], "$$.Task.Token", "{question}");
    let requests = question["inputRequests"]
        .as_object()
        .expect("inputRequests");
    assert!(!requests.is_empty());
    for (key, r) in requests {
        assert_eq!(r["method"], "elicitation/create", "{key}");
        assert_eq!(r["params"]["requestedSchema"]["type"], "object", "{key}");
        assert!(
            r["params"]
                .get("message")
                .or(r["params"].get("message.$"))
                .is_some()
        );
        // The choice after it reads this key's action from the answer, where the state puts it.
        let path = format!(
            "{}.{key}.action",
            state["ResultPath"].as_str().unwrap_or("$")
        );
        let read = states.values().any(|s| {
            s["Choices"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["Variable"] == path.as_str()))
        });
        assert!(read, "no choice reads {path}");
    }

    // The first state reads only arguments its manifest entry requires.
    let path = dir.join("tools.toml");
    let manifest = mcp_tasks_core::declared::Manifest::read(&path).unwrap();
    let required: Vec<&str> = manifest.entries[0].input_schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    for (key, v) in states[start]["Parameters"].as_object().expect("Parameters") {
        if let Some(path) = v.as_str().and_then(|p| p.strip_prefix("$.")) {
            assert!(key.ends_with(".$"), "{key}");
            assert!(
                required.contains(&path),
                "{start} reads {path}, not required"
            );
        }
    }
}
