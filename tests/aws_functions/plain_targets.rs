//! `protocol = "plain"` and `sigv4` targets on the AWS path: the mcp and worker binaries serve
//! a manifest whose targets are an unmodified Lambda function behind the emulated Invoke API
//! (`tests/targets/lambda_api.py`, the example `examples/plain/resize.py`), an unmodified HTTP
//! API on a loopback port (`tests/targets/bad_target.py`) and an IAM-protected one whose check
//! of the signature is botocore's (`tests/targets/sigv4_api.py`): each as a task the worker
//! runs to its result, as a synchronous call the mcp function answers in place, as a call the
//! worker abandons at a cancel, and the failures named by kind, never by what the target said.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::poll_terminal;
use super::support::targets::{Helper, lambda_api, logged, repo};
use super::support_aws::{Env, Options};

const RESIZE: &str = "arn:aws:lambda:us-east-1:123456789012:function:image-resize";
const CRASHING: &str = "arn:aws:lambda:us-east-1:123456789012:function:crashing";
/// Answers after 60 s: a call to cancel.
const SLOW: &str = "arn:aws:lambda:us-east-1:123456789012:function:slow";

/// The functions, the stand-ins beside them and their logs.
struct Rig {
    env: Env,
    invokes: PathBuf,
    requests: PathBuf,
    signed: PathBuf,
    _apis: [Helper; 3],
    _dir: tempfile::TempDir,
}

/// A task whose call does not answer within its step's 10 s (the stand-ins answer after 60 s).
const STUCK: &str = "max_retries = 0\ntask = \"required\"";

fn entry(name: &str, target: &str, extra: &str) -> String {
    format!(
        "[[tool]]\nname = \"{name}\"\ndescription = \"an unmodified {name}\"\n\
         protocol = \"plain\"\n{extra}\ninput_schema = {{ type = \"object\" }}\n\
         target = {target}\nstep_timeout_seconds = 10\n\n"
    )
}

async fn rig(test: &str) -> Option<Rig> {
    let dir = tempfile::tempdir().unwrap();
    let invokes = dir.path().join("invokes.jsonl");
    let requests = dir.path().join("requests.jsonl");
    let signed = dir.path().join("signed.jsonl");
    let lambda = lambda_api(&invokes);
    let plain = Helper::python(
        &repo().join("tests/targets/bad_target.py"),
        &["--log", &requests.display().to_string()],
    );
    // The functions' own standard credentials and region (the Env's `test`, us-east-1).
    let python = repo().join(".tools/moto/venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `bash scripts/aws-emulator.sh start` (the SigV4 check uses botocore)",
        python.display()
    );
    let iam = Helper::python_in(
        &python,
        &repo().join("tests/targets/sigv4_api.py"),
        &[
            "--access-key",
            "test",
            "--secret-key",
            "test",
            "--region",
            "us-east-1",
            "--service",
            "execute-api",
            "--log",
            &signed.display().to_string(),
        ],
        &[],
    );
    let text = [
        entry(
            "resize",
            &format!("{{ lambda = \"{RESIZE}\" }}"),
            "max_retries = 0",
        ),
        entry("resize_stuck", &format!("{{ lambda = \"{SLOW}\" }}"), STUCK),
        entry(
            "page_stuck",
            &format!("{{ http = \"{}/slow\" }}", plain.url),
            STUCK,
        ),
        entry(
            "signed_stuck",
            &format!(
                "{{ http = \"{}/prod/slow\", sigv4 = \"execute-api\" }}",
                iam.url
            ),
            STUCK,
        ),
        // Signed for another service: the API's check refuses it (403).
        entry(
            "signed_wrong",
            &format!(
                "{{ http = \"{}/prod/plain\", sigv4 = \"lambda\" }}",
                iam.url
            ),
            "max_retries = 2",
        ),
        entry(
            "crashes",
            &format!("{{ lambda = \"{CRASHING}\" }}"),
            "max_retries = 1",
        ),
        entry(
            "page",
            &format!("{{ http = \"{}/ok\" }}", plain.url),
            "max_retries = 0",
        ),
        entry(
            "down",
            &format!("{{ http = \"{}/status/502\" }}", plain.url),
            "max_retries = 0",
        ),
        entry(
            "signed",
            &format!(
                "{{ http = \"{}/prod/plain\", sigv4 = \"execute-api\" }}",
                iam.url
            ),
            "max_retries = 0",
        ),
        // The step protocol over the same signed API.
        entry(
            "signed_step",
            &format!(
                "{{ http = \"{}/prod/step\", sigv4 = \"execute-api\" }}",
                iam.url
            ),
            "max_retries = 0",
        )
        .replace("protocol = \"plain\"\n", ""),
    ]
    .concat();
    let manifest = dir.path().join("tools.toml");
    std::fs::write(&manifest, text).unwrap();
    let mut extra = Vec::new();
    for who in ["mcp", "worker"] {
        extra.push((who, "TOOLS_MANIFEST", manifest.display().to_string()));
        extra.push((
            who,
            "TOOL_TARGET_FUNCTIONS",
            format!("{RESIZE},{CRASHING},{SLOW}"),
        ));
        extra.push((who, "AWS_ENDPOINT_URL_LAMBDA", lambda.url.clone()));
    }
    let options = Options {
        worker_timeout: Duration::from_secs(20),
        ..Options::default()
    };
    let env = Env::start_with(test, options, &extra).await?;
    Some(Rig {
        env,
        invokes,
        requests,
        signed,
        _apis: [lambda, plain, iam],
        _dir: dir,
    })
}

/// Runs `tool` with `args` as a task to its end, in the worker function (a new invocation).
async fn task(env: &Env, tool: &str, args: Value) -> Value {
    let before = env.worker.invocations.load(Ordering::Relaxed);
    let c = env.client().with_tasks();
    let id = c.tool(tool, args).await["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    let t = poll_terminal(&c, &id, Duration::from_secs(60)).await;
    assert!(
        env.worker.invocations.load(Ordering::Relaxed) > before,
        "the worker never ran {tool}"
    );
    t
}

fn raw(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// An unmodified function as a task: its event exactly the arguments, its answer the result;
/// a function error retried up to `max_retries`, then the task fails naming the kind, never
/// the function's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_lambda_runs_as_a_task_and_fails_by_kind() {
    let Some(r) = rig("plain_lambda").await else {
        return;
    };
    let args = json!({"width": 4000, "height": 3000, "max_side": 1000});
    let done = task(&r.env, "resize", args.clone()).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"width": 1000, "height": 750, "scale": 0.25}),
        "{done}"
    );
    assert_eq!(
        logged(&r.invokes),
        std::slice::from_ref(&args),
        "one Invoke, the arguments as its event"
    );
    // Without the tasks extension: the mcp function invokes it in place.
    let inline = r.env.client().tool("resize", args).await;
    assert_eq!(inline["structuredContent"]["scale"], 0.25, "{inline}");

    let failed = task(&r.env, "crashes", json!({"width": 1})).await;
    assert_eq!(
        failed["error"]["message"], "Tool crashes failed: its target's function failed (2 tries)",
        "{failed}"
    );
    assert!(!failed.to_string().contains("boom"), "{failed}");
    let tries = raw(&r.invokes)
        .iter()
        .filter(|c| c["function"] == "crashing")
        .count();
    assert_eq!(tries, 2, "retried once");
    r.env.report("plain lambda: one task, one failure");
}

/// Unmodified HTTP APIs as tasks: unsigned on a loopback port (its 5xx fails the task without
/// its body), and IAM-protected, each request signed with the function's standard credentials
/// and accepted by botocore's check, under both protocols.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_and_signed_http_apis_run_as_tasks() {
    let Some(r) = rig("plain_http").await else {
        return;
    };
    let answer = json!({"done": {"content": [{"type": "text", "text": "ok"}]}});
    let done = task(&r.env, "page", json!({"n": 1})).await;
    assert_eq!(done["result"]["structuredContent"], answer, "{done}");
    assert_eq!(
        logged(&r.requests),
        [json!({"n": 1})],
        "exactly the arguments"
    );
    let inline = r.env.client().tool("page", json!({"n": 4})).await;
    assert_eq!(inline["structuredContent"], answer, "{inline}");
    let failed = task(&r.env, "down", json!({})).await;
    assert_eq!(
        failed["error"]["message"], "Tool down failed: its target answered HTTP 502",
        "{failed}"
    );
    assert!(!failed.to_string().contains("SECRET-BODY"), "{failed}");

    let done = task(&r.env, "signed", json!({"n": 2})).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["done"]["content"][0]["text"], "signed",
        "{done}"
    );
    let done = task(&r.env, "signed_step", json!({"n": 3})).await;
    assert_eq!(done["result"]["content"][0]["text"], "signed", "{done}");
    let inline = r.env.client().tool("signed", json!({"n": 5})).await;
    assert_eq!(
        inline["structuredContent"]["done"]["content"][0]["text"], "signed",
        "{inline}"
    );
    let seen = raw(&r.signed);
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen.iter().all(|s| s["verdict"] == "ok"), "{seen:?}");
    assert_eq!(
        seen[0]["event"],
        json!({"n": 2}),
        "plain: the arguments alone"
    );
    assert_eq!(seen[0]["path"], "/prod/plain");
    assert_eq!(seen[1]["path"], "/prod/step");
    // Signed for another service: refused by the check, a 403 that is not retried.
    let failed = task(&r.env, "signed_wrong", json!({})).await;
    assert_eq!(
        failed["error"]["message"], "Tool signed_wrong failed: its target answered HTTP 403",
        "{failed}"
    );
    assert!(!failed.to_string().contains("SECRET-BODY"), "{failed}");
    let refused = raw(&r.signed);
    assert_eq!(refused.len(), 4, "one try: {refused:?}");
    assert_eq!(refused[3]["verdict"], "wrong scope");
    r.env.assert_logs_are_json_without(&["SECRET-BODY"]);
}

/// A call under way in the worker (a function, an API, a signed API that take 60 s) is
/// abandoned at a cancel: the task is `cancelled` long before the target would answer, and the
/// target is not called again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_abandons_a_plain_or_signed_call_in_the_worker() {
    let Some(r) = rig("plain_cancel").await else {
        return;
    };
    let c = r.env.client().with_tasks();
    let calls = |tool: &str| match tool {
        "resize_stuck" => logged(&r.invokes).len(),
        "page_stuck" => logged(&r.requests).len(),
        _ => raw(&r.signed).len(),
    };
    for tool in ["resize_stuck", "page_stuck", "signed_stuck"] {
        let id = c.tool(tool, json!({"t": tool})).await["taskId"]
            .as_str()
            .expect("a task")
            .to_owned();
        let start = Instant::now();
        while calls(tool) == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{tool} never called"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let asked = Instant::now();
        c.call("tasks/cancel", json!({"taskId": id})).await;
        let t = poll_terminal(&c, &id, Duration::from_secs(30)).await;
        let took = asked.elapsed();
        assert_eq!(t["status"], "cancelled", "{tool}: {t}");
        println!("{tool} (emulator): cancelled {took:?} after the cancel, mid-call");
        assert_eq!(calls(tool), 1, "{tool} was called again");
    }
    assert_eq!(
        raw(&r.signed)[0]["verdict"],
        "ok",
        "signed as the API checks"
    );
}
