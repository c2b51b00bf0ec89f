//! `step_functions` targets on the AWS path: the mcp and worker binaries serve a manifest whose
//! targets are state machines of an emulated Step Functions API on 127.0.0.1
//! (`tests/targets/states_api.py`, reached through `AWS_ENDPOINT_URL_SFN`), the task store and
//! queue on the emulator: a task parked between looks to its output, a synchronous call in the
//! mcp function, a question answered through `tasks/update`, a cancel that stops the execution,
//! a failed execution named by its error alone, a worker killed while the execution runs that
//! resumes the same single execution, and a manifest naming a state machine the role may not
//! start, refused at the cold start.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::targets::{Helper, logged, repo};
use super::support_aws::{Env, Options, Solo};
use super::{poll, poll_terminal};

const ARN: &str = "arn:aws:states:us-east-1:123456789012:stateMachine:";

struct Rig {
    env: Env,
    log: PathBuf,
    _api: Helper,
    _dir: tempfile::TempDir,
}

async fn rig(test: &str) -> Option<Rig> {
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
            "long=long",
            "--machine",
            "failing=failing",
            "--log",
            &log.display().to_string(),
        ],
    );
    let entry = |name: &str, task: &str| {
        format!(
            "[[tool]]\nname = \"{name}\"\ndescription = \"the {name} workflow\"\ntask = \"{task}\"\n\
             input_schema = {{ type = \"object\" }}\n\
             target = {{ step_functions = \"{ARN}{name}\", poll_seconds = 1 }}\n\n"
        )
    };
    let manifest = dir.path().join("tools.toml");
    let text = [
        entry("approve", "required"),
        entry("quick", "optional"),
        entry("long", "required"),
        entry("failing", "required"),
    ];
    std::fs::write(&manifest, text.concat()).unwrap();
    let granted = ["approve", "quick", "long", "failing"]
        .map(|m| format!("{ARN}{m}"))
        .join(",");
    let mut extra = Vec::new();
    for who in ["mcp", "worker"] {
        extra.push((who, "TOOLS_MANIFEST", manifest.display().to_string()));
        extra.push((who, "TOOL_STATE_MACHINES", granted.clone()));
        extra.push((who, "AWS_ENDPOINT_URL_SFN", api.url.clone()));
    }
    let options = Options {
        worker_timeout: Duration::from_secs(10),
        ..Options::default()
    };
    let env = Env::start_with(test, options, &extra).await?;
    Some(Rig {
        env,
        log,
        _api: api,
        _dir: dir,
    })
}

impl Rig {
    fn calls(&self, action: &str) -> Vec<Value> {
        logged(&self.log)
            .into_iter()
            .filter(|c| c["action"] == action)
            .map(|c| c["body"].clone())
            .collect()
    }

    async fn wait_for(&self, action: &str, within: Duration) {
        let start = Instant::now();
        while self.calls(action).is_empty() {
            assert!(start.elapsed() < within, "no {action} within {within:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn id_of(created: &Value) -> String {
    created["taskId"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_runs_as_a_parked_task_and_inline() {
    let Some(r) = rig("workflow_runs").await else {
        return;
    };
    let c = r.env.client().with_tasks();
    let args = json!({"service": "web"});
    let id = id_of(&c.tool("quick", args.clone()).await);
    let done = poll_terminal(&c, &id, Duration::from_secs(60)).await;
    assert_eq!(done["result"]["structuredContent"], args, "{done}");
    let started = r.calls("StartExecution");
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["input"], args.to_string());
    // A synchronous call runs the same loop in the mcp function.
    let inline = r.env.client().tool("quick", json!({"inline": 1})).await;
    assert_eq!(
        inline["structuredContent"],
        json!({"inline": 1}),
        "{inline}"
    );
    r.env.report("step_functions: one quick execution");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_asks_and_a_cancel_stops_another() {
    let Some(r) = rig("workflow_input").await else {
        return;
    };
    let c = r.env.client().with_tasks();
    let id = id_of(&c.tool("approve", json!({"service": "api"})).await);
    let asking = poll(&c, &id, Duration::from_secs(60), |t| {
        t["status"] != "working"
    })
    .await;
    assert_eq!(asking["status"], "input_required", "{asking}");
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"approve": {"action": "accept", "content": {}}}}),
    )
    .await;
    let done = poll_terminal(&c, &id, Duration::from_secs(60)).await;
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"deployed": true, "service": "api"}),
        "{done}"
    );
    assert_eq!(r.calls("SendTaskSuccess").len(), 1);
    // A long one, parked between looks, is cancelled: its execution is stopped.
    let id = id_of(&c.tool("long", json!({})).await);
    // Started, and looked at once (parked between looks when the cancel comes).
    let start = Instant::now();
    while !r.calls("DescribeExecution").iter().any(|b| {
        b["executionArn"]
            .as_str()
            .is_some_and(|a| a.ends_with(&format!("mcp-tasks-{id}")))
    }) {
        assert!(start.elapsed() < Duration::from_secs(60), "never looked at");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let asked = Instant::now();
    c.call("tasks/cancel", json!({"taskId": id})).await;
    r.wait_for("StopExecution", Duration::from_secs(10)).await;
    println!(
        "step_functions (emulator): StopExecution {:?} after the cancel",
        asked.elapsed()
    );
    let stopped = r.calls("StopExecution");
    assert!(
        stopped[0]["executionArn"]
            .as_str()
            .unwrap()
            .ends_with(&format!("mcp-tasks-{id}")),
        "{stopped:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_resumes_the_same_single_execution() {
    let Some(mut r) = rig("workflow_resume").await else {
        return;
    };
    let c = r.env.client().with_tasks();
    let id = id_of(&c.tool("approve", json!({"service": "db"})).await);
    r.wait_for("StartExecution", Duration::from_secs(60)).await;
    r.env.restart("worker").await;
    let asking = poll(&c, &id, Duration::from_secs(90), |t| {
        t["status"] != "working"
    })
    .await;
    assert_eq!(asking["status"], "input_required", "{asking}");
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"approve": {"action": "accept", "content": {}}}}),
    )
    .await;
    let done = poll_terminal(&c, &id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let names: std::collections::BTreeSet<String> = r
        .calls("StartExecution")
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names.len(), 1, "one execution: {names:?}");
}

/// A FAILED execution ends the task (in the worker) with the tool's name and the execution's
/// error name, never its cause (the stand-in's `failing` says `hunter2` there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_workflow_fails_its_task_with_the_error_name_only() {
    let Some(r) = rig("workflow_failed").await else {
        return;
    };
    let c = r.env.client().with_tasks();
    let id = id_of(&c.tool("failing", json!({"n": 1})).await);
    let t = poll_terminal(&c, &id, Duration::from_secs(60)).await;
    assert_eq!(
        t["error"]["message"], "Tool failing failed: its workflow ended FAILED (Build.Broken)",
        "{t}"
    );
    assert!(!t.to_string().contains("hunter2"), "{t}");
    assert_eq!(r.calls("StartExecution").len(), 1);
    assert!(
        !r.env.logs().contains("hunter2"),
        "a function logged the cause"
    );
}

/// A manifest naming a state machine that ToolStateMachines (`TOOL_STATE_MACHINES`) does not
/// list fails the cold start of both functions that serve it, naming the machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_machine_the_role_may_not_start_fails_the_cold_start() {
    let dir = tempfile::tempdir().unwrap();
    let bins = tokio::task::spawn_blocking(super::support_aws::binaries)
        .await
        .unwrap();
    let path = dir.path().join("tools.toml");
    std::fs::write(
        &path,
        format!(
            "[[tool]]\nname = \"w\"\ndescription = \"d\"\ninput_schema = {{ type = \"object\" }}\n\
             target = {{ step_functions = \"{ARN}payroll\" }}\n"
        ),
    )
    .unwrap();
    let other = format!("{ARN}approve");
    for granted in ["", other.as_str()] {
        for (who, exe) in [("mcp", &bins.mcp), ("worker", &bins.worker)] {
            let env =
                super::declared::manifest_env(who, &path, &[("TOOL_STATE_MACHINES", granted)]);
            let solo = Solo::spawn(who, exe, &env).await;
            let err = solo
                .init(Duration::from_secs(20))
                .await
                .expect_err("a state machine this function may not start");
            assert!(
                err.contains(&format!(
                    "tool w runs state machine {ARN}payroll, which ToolStateMachines"
                )),
                "{who}: {err}"
            );
        }
    }
}
