//! The example targets through every path a client can see: a task with progress and its
//! exact result, a question and its answer, a cancel that stops the next step, and a resume
//! from the checkpoint after the server is killed — for the `command`, `http` and (emulated)
//! `lambda` targets alike.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::{Client, Server};
use super::{
    Helper, group_alive, lambda_api, lambda_env, logged, repo, result_text, wait_logged,
    write_manifest,
};

/// Which kind of target a rig runs its tool on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Command,
    Http,
    Lambda,
}

/// A server with one declared tool over one of the example targets, and where the target
/// logs what it was asked.
pub struct Rig {
    pub kind: Kind,
    pub dir: tempfile::TempDir,
    pub manifest: PathBuf,
    pub log: PathBuf,
    env: Vec<(String, String)>,
    /// Where a request goes when sent straight to the target (HTTP and Lambda).
    target: Option<String>,
    _helpers: Vec<Helper>,
}

/// The `command` rig's wrapper around the example script (`sh -c WRAPPER SCRIPT`): it logs each
/// request and its process group (the wrapper execs the script: the group's leader).
pub const COMMAND_WRAPPER: &str = r#"req=$(cat); printf "%s\n" "$req" >> "$STEP_LOG"; echo $$ >> "$STEP_LOG.pids"; printf "%s" "$req" | exec "$0""#;

const SCHEMA_REPORT: &str = r#"{ type = "object", required = ["month"], properties = { month = { type = "string" }, parts = { type = "integer" }, confirm = { type = "boolean" }, pace_ms = { type = "integer" } } }"#;
const SCHEMA_COUNTDOWN: &str = r#"{ type = "object", required = ["from"], properties = { from = { type = "integer" }, confirm = { type = "boolean" }, pace_ms = { type = "integer" } } }"#;

impl Rig {
    pub fn new(kind: Kind) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("steps.jsonl");
        let examples = repo().join("examples");
        let mut helpers = Vec::new();
        let mut env = Vec::new();
        let mut target = None;
        let entry = match kind {
            Kind::Command => {
                // The example script, behind a wrapper that logs each request and its process
                // group (the wrapper execs the script: same pid, the group's leader).
                let script = examples.join("shell/countdown.sh");
                env.push(("STEP_LOG".into(), log.display().to_string()));
                format!(
                    r#"name = "countdown"
description = "Counts down."
input_schema = {SCHEMA_COUNTDOWN}
target = {{ command = ["sh", "-c", '{COMMAND_WRAPPER}', "{}"], env = ["STEP_LOG"] }}"#,
                    script.display()
                )
            }
            Kind::Http => {
                let h = Helper::python(
                    &examples.join("python/serve.py"),
                    &["report:handler", "--log", &log.display().to_string()],
                );
                let e = format!(
                    "name = \"report\"\ndescription = \"Builds a report.\"\ninput_schema = {SCHEMA_REPORT}\n\
                     target = {{ http = \"{}/\" }}",
                    h.url
                );
                target = Some(format!("{}/", h.url));
                helpers.push(h);
                e
            }
            Kind::Lambda => {
                let h = lambda_api(&log);
                env.extend(lambda_env(&h.url));
                target = Some(format!("{}/2015-03-31/functions/report/invocations", h.url));
                helpers.push(h);
                format!(
                    "name = \"report\"\ndescription = \"Builds a report.\"\ninput_schema = {SCHEMA_REPORT}\n\
                     target = {{ lambda = \"arn:aws:lambda:us-east-1:123456789012:function:report\" }}\n\n\
                     [[tool]]\nname = \"approve_deploy\"\ndescription = \"Deploys with approval.\"\n\
                     task = \"required\"\ninput_schema = {{ type = \"object\" }}\n\
                     target = {{ lambda = \"approve\" }}"
                )
            }
        };
        let manifest = write_manifest(dir.path(), &format!("[[tool]]\n{entry}\n"));
        Rig {
            kind,
            dir,
            manifest,
            log,
            env,
            target,
            _helpers: helpers,
        }
    }

    /// Where a request goes when sent straight to the target, if it has an address.
    pub fn target_url(&self) -> Option<String> {
        self.target.clone()
    }

    /// Starts (or restarts) the server over the rig's data directory.
    pub fn start(&self, extra: &[&str]) -> Server {
        // `MCP_TASKS_BIN` names another build (the overhead benchmark runs a release one).
        let bin = std::env::var("MCP_TASKS_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_mcp-tasks").to_owned());
        let mut cmd = Command::new(bin);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        let data = self.dir.path().join("data");
        let manifest = self.manifest.display().to_string();
        let mut args = vec!["--tools", manifest.as_str()];
        args.extend_from_slice(extra);
        Server::spawn(cmd, &data, &args)
    }

    pub fn tool(&self) -> &'static str {
        match self.kind {
            Kind::Command => "countdown",
            Kind::Http | Kind::Lambda => "report",
        }
    }

    pub fn arguments(&self, n: u64, confirm: bool, pace_ms: u64) -> Value {
        match self.kind {
            Kind::Command => json!({"from": n, "confirm": confirm, "pace_ms": pace_ms}),
            _ => json!({"month": "2026-11", "parts": n, "confirm": confirm, "pace_ms": pace_ms}),
        }
    }

    /// The exact result of a run of `n` steps.
    pub fn result(&self, n: u64) -> String {
        match self.kind {
            Kind::Command => format!("Lift-off after {n} steps"),
            _ => format!("Report 2026-11: {n} parts, total {}", 7 * n * (n + 1) / 2),
        }
    }

    /// Whether a status message is the target's progress.
    pub fn is_progress(&self, m: &str) -> bool {
        match self.kind {
            Kind::Command => m.ends_with(" to go"),
            _ => m.starts_with("part "),
        }
    }

    /// A checkpoint's step number, from a logged request.
    pub fn step_of(&self, request: &Value) -> u64 {
        let cp = &request["checkpoint"];
        match self.kind {
            Kind::Command => cp["left"].as_u64().map_or(0, |left| 100 - left),
            _ => cp["parts"].as_u64().unwrap_or(0),
        }
    }
}

async fn create(c: &Client, rig: &Rig, args: Value) -> String {
    let created = c.tool(rig.tool(), args).await;
    assert_eq!(created["resultType"], "task", "{created}");
    created["taskId"].as_str().unwrap().to_owned()
}

async fn progress_and_result(kind: Kind) {
    let rig = Rig::new(kind);
    let s = rig.start(&[]);
    let c = s.client().with_tasks();
    let n = 4;
    let id = create(&c, &rig, rig.arguments(n, false, 300)).await;
    let seen_progress = std::cell::Cell::new(false);
    let done = c
        .wait_task(&id, Duration::from_secs(60), |t| {
            if t["statusMessage"]
                .as_str()
                .is_some_and(|m| rig.is_progress(m))
            {
                seen_progress.set(true);
            }
            t["status"] != "working"
        })
        .await;
    let seen_progress = seen_progress.get();
    assert_eq!(done["status"], "completed", "{kind:?}: {done}");
    assert_eq!(result_text(&done), rig.result(n), "{kind:?}");
    assert!(seen_progress, "{kind:?}: no progress was shown");
    let asked = logged(&rig.log);
    assert_eq!(asked.len() as u64, n, "{kind:?}: one request per step");
    assert!(
        asked
            .iter()
            .all(|r| r["attempt"] == 1 && r["protocol"] == "mcp-tasks-step/1")
    );
    assert_eq!(asked[0]["checkpoint"], Value::Null);
    assert_eq!(
        asked[0]["task"],
        json!({"id": id}),
        "{kind:?}: no tenant unless asked"
    );
}

async fn question_and_answer(kind: Kind) {
    let rig = Rig::new(kind);
    let s = rig.start(&[]);
    let c = s.client().with_tasks();
    let id = create(&c, &rig, rig.arguments(2, true, 0)).await;
    let asking = c
        .wait_task(&id, Duration::from_secs(30), |t| t["status"] != "working")
        .await;
    assert_eq!(asking["status"], "input_required", "{kind:?}: {asking}");
    assert_eq!(
        asking["inputRequests"]["go"]["method"], "elicitation/create",
        "{kind:?}: {asking}"
    );
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"go": {"action": "accept", "content": {}}}}),
    )
    .await;
    let done = c.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "completed", "{kind:?}: {done}");
    assert_eq!(result_text(&done), rig.result(2), "{kind:?}");
    let asked = logged(&rig.log);
    assert_eq!(asked.len(), 3, "{kind:?}: the question, then two steps");
    assert_eq!(asked[1]["input"]["go"]["action"], "accept");
}

async fn cancel_stops_the_next_step(kind: Kind) {
    let rig = Rig::new(kind);
    let s = rig.start(&[]);
    let c = s.client().with_tasks();
    let pace = Duration::from_millis(3000);
    let id = create(&c, &rig, rig.arguments(3, false, pace.as_millis() as u64)).await;
    wait_logged(&rig.log, 1, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    c.call("tasks/cancel", json!({"taskId": id})).await;
    let t = c.wait_terminal(&id, Duration::from_secs(5)).await;
    let took = asked.elapsed();
    assert_eq!(t["status"], "cancelled", "{kind:?}: {t}");
    println!("{kind:?}: cancelled {took:?} after the cancel, mid-step");
    assert!(took < Duration::from_millis(1500), "{kind:?}: {took:?}");
    if kind == Kind::Command {
        let pids = std::fs::read_to_string(format!("{}.pids", rig.log.display())).unwrap();
        let pgid: i32 = pids.lines().next().unwrap().trim().parse().unwrap();
        let start = Instant::now();
        while group_alive(pgid) {
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "the step's process group {pgid} outlived the cancel"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The step in flight would have answered by now; no step came after it.
    tokio::time::sleep(pace + Duration::from_millis(500)).await;
    assert_eq!(
        logged(&rig.log).len(),
        1,
        "{kind:?}: a step ran after the cancel"
    );
}

async fn a_killed_server_resumes_from_the_checkpoint(kind: Kind) {
    let rig = Rig::new(kind);
    let first = rig.start(&[]);
    let c = first.client().with_tasks();
    let n = 6;
    let id = create(&c, &rig, rig.arguments(n, false, 400)).await;
    wait_logged(&rig.log, 3, Duration::from_secs(30)).await;
    first.kill();
    let second = rig.start(&[]);
    let c = second.client().with_tasks();
    let done = c.wait_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "completed", "{kind:?}: {done}");
    assert_eq!(result_text(&done), rig.result(n), "{kind:?}");
    // The checkpoint is saved at most about once a second (steps of 400 ms): only the steps
    // since the last save were asked again (at most three), each once, and the first of them
    // said it may have run.
    let asked = logged(&rig.log);
    assert!(
        asked.len() as u64 <= n + 3,
        "{kind:?}: {} requests",
        asked.len()
    );
    let mut seen = std::collections::HashMap::new();
    let mut again = false;
    for r in &asked {
        let step = rig.step_of(r);
        let times = seen.entry(step).or_insert(0);
        *times += 1;
        assert!(*times <= 2, "{kind:?}: step {step} asked {times} times");
        if *times == 2 && !again {
            again = true;
            assert!(r["attempt"].as_u64().unwrap() >= 2, "{kind:?}: {r}");
        }
    }
}

macro_rules! for_each_target {
    ($($test:ident),+) => {
        $(
            mod $test {
                use super::*;
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn command() { super::$test(Kind::Command).await }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn http() { super::$test(Kind::Http).await }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn lambda() { super::$test(Kind::Lambda).await }
            }
        )+
    };
}

for_each_target!(
    progress_and_result,
    question_and_answer,
    cancel_stops_the_next_step,
    a_killed_server_resumes_from_the_checkpoint
);

/// The Node.js example asks for approval; its answer and the note in it reach the next step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_example_asks_and_deploys() {
    let rig = Rig::new(Kind::Lambda);
    let s = rig.start(&[]);
    let c = s.client().with_tasks();
    let created = c
        .tool("approve_deploy", json!({"service": "api", "env": "prod"}))
        .await;
    let id = created["taskId"].as_str().unwrap().to_owned();
    let asking = c
        .wait_task(&id, Duration::from_secs(30), |t| t["status"] != "working")
        .await;
    assert_eq!(asking["status"], "input_required", "{asking}");
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"approve": {"action": "accept",
            "content": {"note": "change 42"}}}}),
    )
    .await;
    let done = c.wait_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(
        result_text(&done),
        "Deployed api to prod (change 42).",
        "{done}"
    );
}

/// A client without the tasks extension gets the answer inline, as from a Rust tool: the steps
/// run in the request, and questions come as SEP-2322 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_tasks_gets_the_answer_inline() {
    let rig = Rig::new(Kind::Http);
    let s = rig.start(&[]);
    let c = s.client();
    let result = c.tool("report", rig.arguments(3, false, 0)).await;
    assert_eq!(result["resultType"], "complete", "{result}");
    assert_eq!(result["content"][0]["text"], rig.result(3));
    let asked = c
        .with_caps(json!({"elicitation": {}}))
        .tool("report", rig.arguments(1, true, 0))
        .await;
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    assert_eq!(asked["inputRequests"]["go"]["method"], "elicitation/create");
    assert!(asked["requestState"].is_string());
}
