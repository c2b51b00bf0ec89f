//! Declared tools on the AWS path: the mcp and worker binaries serve a manifest
//! (`TOOLS_MANIFEST`) whose `lambda` targets are the example handlers behind an emulated Lambda
//! Invoke API on 127.0.0.1 (`tests/targets/lambda_api.py`, reached through
//! `AWS_ENDPOINT_URL_LAMBDA`; the Python example in-process, the Node.js one in a `node` per
//! call): a task with progress and its exact result, a question and its answer, a cancel that
//! stops the next step, a resume from the checkpoint after the worker's process is killed
//! mid-step; and manifests the functions must refuse at their cold start.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::targets::{Helper, lambda_api, logged, wait_logged};
use super::support_aws::{Env, Options, Solo};
use super::{poll, poll_terminal};

const REPORT: &str = "arn:aws:lambda:us-east-1:123456789012:function:report";
const APPROVE: &str = "arn:aws:lambda:us-east-1:123456789012:function:approve";

const MANIFEST: &str = r#"
[[tool]]
name = "report"
description = "Builds the monthly report in parts; with confirm, asks first."
input_schema = { type = "object", required = ["month"], properties = { month = { type = "string" }, parts = { type = "integer" }, confirm = { type = "boolean" }, pace_ms = { type = "integer" } } }
target = { lambda = "arn:aws:lambda:us-east-1:123456789012:function:report" }
step_timeout_seconds = 5

[[tool]]
name = "approve_deploy"
description = "Asks for approval, then deploys."
task = "required"
input_schema = { type = "object" }
target = { lambda = "approve" }
step_timeout_seconds = 5
"#;

/// The functions over the manifest, the emulated Invoke API beside them, and its log.
struct Rig {
    env: Env,
    log: PathBuf,
    _api: Helper,
    _dir: tempfile::TempDir,
}

async fn rig(test: &str, worker_timeout: Duration) -> Option<Rig> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("invocations.jsonl");
    let manifest = dir.path().join("tools.toml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let api = lambda_api(&log);
    let mut extra = Vec::new();
    for who in ["mcp", "worker"] {
        extra.push((who, "TOOLS_MANIFEST", manifest.display().to_string()));
        extra.push((who, "TOOL_TARGET_FUNCTIONS", format!("{REPORT},{APPROVE}")));
        extra.push((who, "AWS_ENDPOINT_URL_LAMBDA", api.url.clone()));
    }
    let options = Options {
        worker_timeout,
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

fn report(parts: u64, confirm: bool, pace_ms: u64) -> Value {
    json!({"month": "2026-11", "parts": parts, "confirm": confirm, "pace_ms": pace_ms})
}

fn expected(parts: u64) -> String {
    format!(
        "Report 2026-11: {parts} parts, total {}",
        7 * parts * (parts + 1) / 2
    )
}

fn text(t: &Value) -> &str {
    t["result"]["content"][0]["text"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lambda_target_runs_with_progress_to_its_exact_result() {
    // An invocation long enough for every step (a step that would outlive its invocation is
    // handed to the next, which the other tests' 10 s workers show).
    let Some(r) = rig("declared_progress", Duration::from_secs(30)).await else {
        return;
    };
    let c = r.env.client().with_tasks();
    let created = c.tool("report", report(4, false, 300)).await;
    let id = created["taskId"].as_str().unwrap().to_owned();
    let seen = std::cell::Cell::new(false);
    let done = poll(&c, &id, Duration::from_secs(60), |t| {
        if t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("part "))
        {
            seen.set(true);
        }
        t["status"] != "working"
    })
    .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(text(&done), expected(4));
    assert!(seen.get(), "no progress was shown");
    let asked = logged(&r.log);
    assert_eq!(asked.len(), 4, "one invocation per step");
    assert_eq!(asked[0]["task"], json!({"id": id}));
    // Checks every call against the template's grants, and prints what the task cost
    // (bench/lifecycles.json takes its per-step figures from this line).
    r.env.report("report, 4 steps on a lambda target");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lambda_target_asks_and_goes_on_with_the_answer() {
    let Some(r) = rig("declared_input", Duration::from_secs(10)).await else {
        return;
    };
    let c = r.env.client().with_tasks();
    let id = c.tool("report", report(2, true, 0)).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let asking = poll(&c, &id, Duration::from_secs(30), |t| {
        t["status"] != "working"
    })
    .await;
    assert_eq!(asking["status"], "input_required", "{asking}");
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"go": {"action": "accept", "content": {}}}}),
    )
    .await;
    let done = poll_terminal(&c, &id, Duration::from_secs(30)).await;
    assert_eq!(text(&done), expected(2), "{done}");
    // The Node.js example, by name: asks, then deploys with the note it was given.
    let id = c
        .tool("approve_deploy", json!({"service": "api", "env": "prod"}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    poll(&c, &id, Duration::from_secs(30), |t| {
        t["status"] == "input_required"
    })
    .await;
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"approve": {"action": "accept",
            "content": {"note": "change 42"}}}}),
    )
    .await;
    let done = poll_terminal(&c, &id, Duration::from_secs(30)).await;
    assert_eq!(text(&done), "Deployed api to prod (change 42).", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_stops_a_lambda_target_before_its_next_step() {
    let Some(r) = rig("declared_cancel", Duration::from_secs(10)).await else {
        return;
    };
    let c = r.env.client().with_tasks();
    let pace = Duration::from_millis(3000);
    let id = c
        .tool("report", report(3, false, pace.as_millis() as u64))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_logged(&r.log, 1, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    c.call("tasks/cancel", json!({"taskId": id})).await;
    let t = poll_terminal(&c, &id, Duration::from_secs(5)).await;
    let took = asked.elapsed();
    assert_eq!(t["status"], "cancelled", "{t}");
    println!("declared lambda: cancelled {took:?} after the cancel, mid-step");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    tokio::time::sleep(pace + Duration::from_millis(500)).await;
    assert_eq!(logged(&r.log).len(), 1, "a step ran after the cancel");
}

/// The worker's process dies mid-step: the message comes back, the lease lapses, a fresh
/// worker resumes from the last saved checkpoint (saved at most about once a second, so the
/// steps since then are asked again), the first of them with a higher `attempt`, and the
/// result is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_resumes_a_lambda_target_from_its_checkpoint() {
    let Some(mut r) = rig("declared_resume", Duration::from_secs(10)).await else {
        return;
    };
    let c = r.env.client().with_tasks();
    let n = 6;
    let id = c.tool("report", report(n, false, 500)).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_logged(&r.log, 3, Duration::from_secs(30)).await;
    r.env.restart("worker").await;
    let done = poll_terminal(&c, &id, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(text(&done), expected(n));
    let asked = logged(&r.log);
    let trail: Vec<String> = asked
        .iter()
        .map(|a| format!("{}@{}", a["checkpoint"]["parts"], a["attempt"]))
        .collect();
    println!("declared lambda: steps (checkpoint@attempt) {trail:?}");
    assert!(asked.len() as u64 >= n, "{trail:?}");
    // Steps of 500 ms, saved once a second: at most the two or three since the last save are
    // asked again.
    assert!(asked.len() as u64 <= n + 3, "{trail:?}");
    let mut seen = std::collections::HashMap::new();
    let mut again = false;
    for a in &asked {
        let step = a["checkpoint"]["parts"].as_u64().unwrap_or(0);
        let times = seen.entry(step).or_insert(0);
        *times += 1;
        assert!(*times <= 2, "step {step} asked {times} times");
        // The first step asked again (where the new run starts) says it may have run.
        if *times == 2 && !again {
            again = true;
            assert!(a["attempt"].as_u64().unwrap() >= 2, "{a}");
        }
    }
}

/// What the functions must refuse at their cold start, naming what is wrong: a `command`
/// target (never on Lambda), a Lambda target the role may not invoke (another function, an
/// alias of a granted function, a granted name in another region or account).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_a_function_cannot_serve_fail_its_cold_start() {
    let dir = tempfile::tempdir().unwrap();
    let bins = tokio::task::spawn_blocking(super::support_aws::binaries)
        .await
        .unwrap();
    let cases = [
        (
            "[[tool]]\nname = \"c\"\ndescription = \"d\"\ninput_schema = { type = \"object\" }\ntarget = { command = [\"true\"] }\n",
            "",
            "a command target runs only on the local server",
        ),
        (
            "[[tool]]\nname = \"l\"\ndescription = \"d\"\ninput_schema = { type = \"object\" }\ntarget = { lambda = \"secret-payroll\" }\n",
            REPORT,
            "invokes secret-payroll, which ToolTargetFunctions",
        ),
        // Granted as Lambda and IAM compare (this function: us-east-1, the queue's account
        // 000000000000): an unqualified grant does not cover an alias; a name is this region's
        // and this account's function.
        (
            "[[tool]]\nname = \"l\"\ndescription = \"d\"\ninput_schema = { type = \"object\" }\ntarget = { lambda = \"report:prod\" }\n",
            "arn:aws:lambda:us-east-1:000000000000:function:report",
            "invokes report:prod, which ToolTargetFunctions",
        ),
        (
            "[[tool]]\nname = \"l\"\ndescription = \"d\"\ninput_schema = { type = \"object\" }\ntarget = { lambda = \"report\" }\n",
            "arn:aws:lambda:eu-west-1:000000000000:function:report",
            "invokes report, which ToolTargetFunctions",
        ),
        (
            "[[tool]]\nname = \"l\"\ndescription = \"d\"\ninput_schema = { type = \"object\" }\ntarget = { lambda = \"report\" }\n",
            "arn:aws:lambda:us-east-1:123456789012:function:report",
            "invokes report, which ToolTargetFunctions",
        ),
    ];
    for (i, (manifest, granted, says)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("tools-{i}.toml"));
        std::fs::write(&path, manifest).unwrap();
        for (who, exe) in [("mcp", &bins.mcp), ("worker", &bins.worker)] {
            let env = manifest_env(who, &path, &[("TOOL_TARGET_FUNCTIONS", granted)]);
            let solo = Solo::spawn(who, exe, &env).await;
            let err = solo
                .init(Duration::from_secs(20))
                .await
                .expect_err("a manifest this function must refuse");
            assert!(err.contains(says), "{who}: {err}");
        }
    }
}

/// The environment of a function serving the manifest at `path`, no AWS endpoint reachable (a
/// manifest is checked at the cold start, before any is used), with `extra` added.
pub(crate) fn manifest_env<'a>(
    who: &'a str,
    path: &'a std::path::Path,
    extra: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
        ("AWS_LAMBDA_FUNCTION_NAME", who),
        ("TABLE_NAME", "t"),
        ("QUEUE_URL", "http://127.0.0.1:1/000000000000/q"),
        ("STATE_KEY", "a-declared-tools-test-key-of-32-chars"),
        ("AUTH_MODE", "none"),
        ("MAX_RECEIVES", "5"),
        ("TOOLS_MANIFEST", path.to_str().unwrap()),
    ];
    env.extend_from_slice(extra);
    env
}
