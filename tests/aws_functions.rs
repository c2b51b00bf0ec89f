//! Whole task lifecycles through the REAL Lambda function binaries (`mcp`, `tasks`, `worker`,
//! `sweep`) against the DynamoDB/SQS emulator, behind an emulated API Gateway (REST proxy
//! events, `Mcp-Method: tasks/*` routed to `tasks`), an emulated SQS event source mapping and
//! per-function Lambda Runtime APIs (tests/support_aws).
//!
//! Needs both emulators (`DYNAMODB_ENDPOINT`/`AWS_ENDPOINT_URL_DYNAMODB` and
//! `SQS_ENDPOINT`/`AWS_ENDPOINT_URL_SQS`); without them it prints a loud SKIPPED line and
//! passes, unless `REQUIRE_EMULATORS` is set. The test builds the function binaries itself
//! (`cargo build --workspace --all-features --bins`). Each test prints its DynamoDB/SQS calls
//! per function as an `AWS CALLS` line (run with `--nocapture` to see them).
//!
//! ```text
//! scripts/aws-emulator.sh start
//! E=$(cat .tools/moto/endpoint) DYNAMODB_ENDPOINT=$E SQS_ENDPOINT=$E REQUIRE_EMULATORS=1 \
//!   cargo test -p mcp-tasks --all-features --test aws_functions -- --nocapture
//! ```

#[path = "../shared/tests/common/mod.rs"]
mod common;
mod support;
mod support_aws;

use std::time::{Duration, Instant};

use mcp_tasks_core::store::TaskStore as _;
use mcp_tasks_core::task::{TaskRecord, new_task_id};
use serde_json::{Value, json};
use support::Client;
use support_aws::{DYNAMO_READS, DYNAMO_WRITES, Env, Options};

const WITHIN: Duration = Duration::from_secs(30);

/// The tenant of every request with `AUTH_MODE=none`.
const TENANT: &str = "local";

/// How often the tests poll `tasks/get` (the tasks suggest 1 s; faster keeps the test short).
const POLL: Duration = Duration::from_millis(250);

/// Polls `tasks/get` until `pred` holds (panics after `within`).
async fn poll(c: &Client, id: &str, within: Duration, pred: impl Fn(&Value) -> bool) -> Value {
    let start = std::time::Instant::now();
    loop {
        let t = c.get_task(id).await;
        if pred(&t) {
            return t;
        }
        assert!(
            start.elapsed() < within,
            "task {id} did not get there in {within:?}: {t}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Polls until the task is terminal.
async fn poll_terminal(c: &Client, id: &str, within: Duration) -> Value {
    poll(c, id, within, |t| {
        matches!(
            t["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        )
    })
    .await
}

/// The front's routing, as seen by the functions: `tools/call` only ever reached `mcp`, and
/// every `tasks/*` request reached `tasks`.
fn assert_routed(env: &Env) {
    for ((who, service, op), n) in env.counts.snapshot() {
        if service != "http" {
            continue;
        }
        match who.as_str() {
            "tasks" => assert!(op.starts_with("tasks/"), "{op} x{n} reached tasks"),
            "mcp" => assert!(!op.starts_with("tasks/"), "{op} x{n} reached mcp"),
            other => panic!("{other} served HTTP"),
        }
    }
}

/// The sum of an EMF metric over the functions' log lines (`who`: one function, or all),
/// over the lines whose dimensions include `dims`. Lines without `_aws` are ordinary logs.
fn emf_sum(env: &Env, who: Option<&str>, metric: &str, dims: &[(&str, &str)]) -> u64 {
    let mut sum = 0;
    for line in env.logs().lines() {
        let Some((prefix, text)) = line.split_once("] ") else {
            continue;
        };
        if who.is_some_and(|w| prefix.trim_start_matches('[') != w) {
            continue;
        }
        let Ok(doc) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        let Some(declared) = doc["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array() else {
            continue;
        };
        if !declared.iter().any(|m| m["Name"] == metric) {
            continue;
        }
        if dims.iter().all(|(k, v)| doc[*k] == *v) {
            sum += doc[metric].as_u64().expect("a metric value");
        }
    }
    sum
}

/// [`emf_sum`], once it reaches `want` (a function writes its lines after its invocation,
/// which may end after the client saw the result) or 10 s passed.
async fn emf_settled(
    env: &Env,
    who: Option<&str>,
    metric: &str,
    dims: &[(&str, &str)],
    want: u64,
) -> u64 {
    let start = std::time::Instant::now();
    loop {
        let n = emf_sum(env, who, metric, dims);
        if n >= want || start.elapsed() > Duration::from_secs(10) {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_required_then_update_completes_through_the_functions() {
    let Some(env) = Env::start("input_required", Options::default()).await else {
        return;
    };
    let c = env.client().with_tasks();
    let created = c
        .tool(
            "confirm_action",
            json!({"action": "Archive", "target": "Q3 notes"}),
        )
        .await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    // Readable at once through the tasks function (written before the reply).
    let first = c.get_task(&id).await;
    assert_eq!(first["taskId"], id.as_str());
    let parked = poll(&c, &id, WITHIN, |t| t["status"] == "input_required").await;
    let key = parked["inputRequests"]
        .as_object()
        .expect("inputRequests")
        .keys()
        .next()
        .unwrap()
        .clone();
    let ack = c
        .call(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"confirm": true}}}}),
        )
        .await;
    assert_eq!(ack["resultType"], "complete");
    let done = poll_terminal(&c, &id, WITHIN).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Confirmed: Archive Q3 notes."
    );
    // Two runs of the job: the start (up to the question) and the resume after the answer.
    assert!(
        env.worker_invocations_for(&id) >= 2,
        "{}",
        env.worker_invocations_for(&id)
    );
    assert_routed(&env);
    assert_eq!(env.counts.sum(Some("mcp"), Some("http"), None), 1);
    env.report("confirm_action: create → input_required → tasks/update → completed");
    // The metrics, as EMF lines: one creation (by mcp), one completion, two runs.
    let tool = ("tool", "confirm_action");
    assert_eq!(
        emf_settled(&env, Some("mcp"), "tasks_created", &[tool], 1).await,
        1
    );
    let done = [tool, ("status", "completed")];
    assert_eq!(emf_settled(&env, None, "tasks_finished", &done, 1).await, 1);
    assert_eq!(
        emf_sum(&env, Some("worker"), "task_start_wait_ms_count", &[tool]),
        1
    );
    assert!(emf_settled(&env, Some("worker"), "job_run_ms_count", &[tool], 2).await >= 2);
    // JSON log lines, and neither the arguments, the answer nor the result in any of them.
    env.assert_logs_are_json_without(&["Q3 notes", "Archive", "\"confirm\""]);
    // Creating the task is one count of the tenant's index keys (the active-task quota), two
    // conditional puts (the arguments item, written once, then the record) and one message,
    // and no item read (a new id cannot conflict): exact, since the mcp function served
    // nothing but that tools/call.
    for (op, n) in [("PutItem", 2), ("GetItem", 0), ("Query", 1)] {
        assert_eq!(
            env.counts.sum(Some("mcp"), Some("dynamodb"), Some(&[op])),
            n,
            "mcp {op}"
        );
    }
    assert_eq!(
        env.counts
            .sum(Some("mcp"), Some("sqs"), Some(&["SendMessage"])),
        1
    );
    // What every lifecycle must cost at least: the task is written when created, when parked
    // and when done; the start and the resume are each one message.
    assert!(env.counts.sum(None, Some("dynamodb"), Some(DYNAMO_WRITES)) >= 3);
    assert!(env.counts.sum(None, Some("sqs"), Some(&["SendMessage"])) >= 2);
    // A poll is one read: the tasks function never reads more than once per request.
    let tasks_requests = env.counts.sum(Some("tasks"), Some("http"), None);
    let tasks_reads = env
        .counts
        .sum(Some("tasks"), Some("dynamodb"), Some(DYNAMO_READS));
    assert!(
        tasks_reads <= tasks_requests,
        "{tasks_reads} reads for {tasks_requests} requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_running_task_is_final() {
    let Some(env) = Env::start("cancel", Options::default()).await else {
        return;
    };
    let c = env.client().with_tasks();
    // A job that computes (a `wait` sleeps without a run: see the next test).
    let args = json!({"seed": "cancel", "rounds": 4_000_000, "pace_ms": 2000});
    let id = c.tool("hash_chain", args).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Running: its progress is visible.
    let running = poll(&c, &id, WITHIN, |t| {
        t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("Hashed"))
    })
    .await;
    assert_eq!(running["status"], "working", "{running}");
    let ack = c.call("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(ack["resultType"], "complete");
    let cancelled = poll_terminal(&c, &id, Duration::from_secs(10)).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    // Whatever run or continuation was in flight ends; nothing changes the task any more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let runs = env.worker_invocations_for(&id);
    let settled = c.get_task(&id).await;
    assert_eq!(settled["status"], "cancelled");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(c.get_task(&id).await, settled);
    assert_eq!(
        env.worker_invocations_for(&id),
        runs,
        "the job kept running"
    );
    // Cancelling again is an ack and changes nothing.
    c.call("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(c.get_task(&id).await, settled);
    assert_routed(&env);
    env.report("hash_chain: create → working → tasks/cancel → cancelled");
    // Created = finished, as EMF lines: the one task, cancelled.
    let tool = ("tool", "hash_chain");
    assert_eq!(
        emf_settled(&env, None, "tasks_created", &[tool], 1).await,
        1
    );
    let cancelled = [tool, ("status", "cancelled")];
    assert_eq!(
        emf_settled(&env, None, "tasks_finished", &cancelled, 1).await,
        1
    );
    for status in ["completed", "failed"] {
        assert_eq!(
            emf_sum(&env, None, "tasks_finished", &[tool, ("status", status)]),
            0
        );
    }
}

/// A `wait` is parked, not run: a minute of waiting costs a few short worker invocations (the
/// park, the wake), a sleeping task is cancelled at once, and the sweep leaves it alone. (A
/// one-hour wait is the same with three more messages: SQS delays at most 15 minutes, and a
/// message that comes early is given back until the task wakes — the worker's unit tests.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_wait_sleeps_without_holding_a_worker() {
    let Some(env) = Env::start("sleep", Options::default()).await else {
        return;
    };
    let c = env.client().with_tasks();
    let started = Instant::now();
    let id = c.tool("wait", json!({"seconds": 60})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let asleep = poll(&c, &id, WITHIN, |t| {
        t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("Waiting"))
    })
    .await;
    assert_eq!(asleep["status"], "working", "{asleep}");
    assert!(
        asleep["pollIntervalMs"].as_u64().unwrap() >= 5000,
        "a sleeping task is polled slowly: {asleep}"
    );
    // Another one, cancelled while it sleeps: at once, with nothing to stop.
    let other = c.tool("wait", json!({"seconds": 600})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    poll(&c, &other, WITHIN, |t| {
        t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("Waiting"))
    })
    .await;
    let asked = Instant::now();
    c.call("tasks/cancel", json!({"taskId": other})).await;
    assert_eq!(c.get_task(&other).await["status"], "cancelled");
    let cancel_took = asked.elapsed();
    assert!(cancel_took < Duration::from_secs(1), "{cancel_took:?}");
    // The sweep, run while it sleeps (idle for more than SWEEP_STALE_SECONDS), leaves it be.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = env.run_sweep().await;
    assert_eq!(report["requeued"], 0, "{report}");
    let done = poll_terminal(&c, &id, Duration::from_secs(90)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "Waited 60 s.",
        "{done}"
    );
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(60), "woke early: {took:?}");
    let busy = env
        .worker
        .busy_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    let runs = env.worker_invocations_for(&id);
    eprintln!(
        "SLEEP: a 60 s wait done in {took:.1?}: {runs} worker invocations, {busy} ms of worker \
         time for both tasks; cancel of a sleeping task answered in {cancel_took:?}"
    );
    assert!(runs <= 3, "{runs} worker invocations for one wait");
    // Scaled: the one-hour budget is 10 invocation-seconds; a minute may take a fraction.
    assert!(busy <= 5_000, "{busy} ms of worker time");
    env.report("wait 60 s: create → sleep (parked) → wake → completed");
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_task_reads_as_unknown_and_the_sweep_purges_it() {
    let Some(env) = Env::start("expiry", Options::default()).await else {
        return;
    };
    let c = env.client().with_tasks();
    // A 2026-07-28 client cannot ask for a TTL (the server decides, 24 h on Lambda): the task
    // is written through the store with a short one.
    let ttl_ms = 1500;
    let task = TaskRecord::new(TENANT, new_task_id(), "wait", Some(ttl_ms), 1000, json!({}));
    env.store()
        .create(&task, &json!({"seconds": 0.1}))
        .await
        .expect("storing the task");
    let id = task.task_id.clone();
    let live = c.get_task(&id).await;
    assert_eq!(live["taskId"], id.as_str());
    assert_eq!(live["ttlMs"], ttl_ms);
    let past = task.created_at_ms + ttl_ms + 300;
    let wait = past.saturating_sub(now_ms());
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let expired = c.send("tasks/get", json!({"taskId": id})).await.json();
    let unknown = c
        .send("tasks/get", json!({"taskId": new_task_id()}))
        .await
        .json();
    assert_eq!(expired["error"]["code"], -32602, "{expired}");
    assert_eq!(expired["error"], unknown["error"]);
    // The sweep deletes it; it stays unknown.
    let report = env.run_sweep().await;
    assert_eq!(report["purged"], 1, "{report}");
    let after = c.send("tasks/get", json!({"taskId": id})).await.json();
    assert_eq!(after["error"], unknown["error"]);
    assert_routed(&env);
    env.report(&format!(
        "stored task with ttlMs={ttl_ms} → expired → swept ({report})"
    ));
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_job_hands_over_at_each_deadline_and_completes_exactly() {
    // Each worker invocation has 8 s; the worker keeps min(5 s, half of what is left) as its
    // margin, so it works a little under 4 s, then hands over. Every step of 200k rounds but
    // the last is paced 1.5 s on top of the hashing, so at most 2 paced steps fit in one
    // invocation however fast the CPU is (the last run may add the unpaced final step), and 8
    // steps need at least 4 invocations (2 + 2 + 3 < 8): at least 3 hand-overs. (The first
    // step of a run always completes, so it must end before the deadline: hashing 200k rounds
    // in a debug build takes ~1-2 s here, which leaves room for a CI machine 3x slower.)
    let options = Options {
        worker_timeout: Duration::from_secs(8),
        ..Options::default()
    };
    let Some(env) = Env::start("continuations", options).await else {
        return;
    };
    let c = env.client().with_tasks();
    let (seed, rounds) = ("functions", 1_600_000u64);
    let created = c
        .tool(
            "hash_chain",
            json!({"seed": seed, "rounds": rounds, "pace_ms": 1500}),
        )
        .await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    // Progress shows before completion.
    let progress = poll(&c, &id, WITHIN, |t| {
        t["status"] == "working"
            && t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("Hashed "))
    })
    .await;
    let message = progress["statusMessage"].as_str().unwrap();
    assert!(
        message.ends_with(&format!(" of {rounds} rounds")),
        "{message}"
    );
    let done = poll_terminal(&c, &id, Duration::from_secs(90)).await;
    let runs = env.worker_invocations_for(&id);
    // One trace from the request to the last hand-over: every worker run of the task carries
    // the trace of the mcp invocation that created it (SQS's AWSTraceHeader, passed on by each
    // hand-over), not the worker invocation's own.
    let roots: std::collections::BTreeSet<String> = env
        .logs()
        .lines()
        .filter(|l| l.contains("work message handled") && l.contains(&id))
        .filter_map(|l| l.split("Root=").nth(1))
        .map(|r| format!("Root={}", r.split([';', '"']).next().unwrap_or("")))
        .collect();
    assert_eq!(roots.len(), 1, "one trace for the whole job: {roots:?}");
    let root = roots.into_iter().next().unwrap();
    assert!(
        env.mcp.trace_roots.lock().unwrap().contains(&root),
        "{root} is the creating request's trace"
    );
    env.report(&format!(
        "hash_chain {rounds} rounds over {runs} worker invocations"
    ));
    assert_eq!(done["status"], "completed", "{done}");
    let expected = support::expected_hash_chain(seed, rounds);
    assert_eq!(done["result"]["structuredContent"]["digest"], expected);
    assert!(
        done["result"]["structuredContent"]["resumedAt"]
            .as_u64()
            .is_some_and(|r| r > 0),
        "the last run resumed from a checkpoint: {done}"
    );
    assert!(runs >= 4, "only {runs} worker invocations handled the task");
    xray_segments_follow_the_job(&env, &id, &root, runs, &expected).await;
    assert_routed(&env);
    // Each hand-over is one message: the start (mcp) and one continuation per later run.
    let sends = env
        .counts
        .sum(Some("worker"), Some("sqs"), Some(&["SendMessage"]));
    assert_eq!(sends + 1, u64::from(runs), "{sends} sends for {runs} runs");
    // Every hand-over counted once, as EMF lines of the worker.
    let tool = ("tool", "hash_chain");
    let handovers = emf_settled(&env, Some("worker"), "job_handovers", &[tool], sends).await;
    assert_eq!(handovers, sends, "hand-overs counted");
    assert_eq!(
        env.esm.lock().unwrap().invoke_errors,
        0,
        "a worker invocation failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_recovers_a_task_that_was_never_enqueued() {
    let Some(env) = Env::start("sweep_recovery", Options::default()).await else {
        return;
    };
    let c = env.client().with_tasks();
    let (seed, rounds) = ("orphan", 1000u64);
    let task = TaskRecord::new(
        TENANT,
        new_task_id(),
        "hash_chain",
        Some(3_600_000),
        1000,
        json!({}),
    );
    env.store()
        .create(&task, &json!({"seed": seed, "rounds": rounds}))
        .await
        .expect("storing the task");
    let id = task.task_id.clone();
    // Stale after SWEEP_STALE_SECONDS (1 s); nothing runs it meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(env.worker_invocations_for(&id), 0);
    assert_eq!(c.get_task(&id).await["status"], "working");
    let report = env.run_sweep().await;
    assert_eq!(report["requeued"], 1, "{report}");
    let done: Value = poll_terminal(&c, &id, WITHIN).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["digest"],
        support::expected_hash_chain(seed, rounds)
    );
    assert!(env.worker_invocations_for(&id) >= 1);
    env.report("stored, never enqueued → sweep → worker → completed");
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
    let Some(env) = Env::start("legacy_result_deadline", Options::default()).await else {
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
/// first, then the response, every event well formed (tests/aws_streaming.rs checks when each
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

/// The template reader behind `Env::assert_permitted` finds each function's actions (and only
/// its own): without the emulator.
#[test]
fn the_template_reader_finds_each_functions_grants() {
    let g = support_aws::granted_actions();
    let has = |who: &str, a: &str| g[who].iter().any(|x| x == a);
    assert!(has("mcp", "dynamodb:PutItem") && has("mcp", "sqs:SendMessage"));
    assert!(has("worker", "sqs:ReceiveMessage"));
    assert!(has("sweep", "dynamodb:DeleteItem") && has("sweep", "dynamodb:Query"));
    assert!(!has("mcp", "dynamodb:DeleteItem"), "{:?}", g["mcp"]);
    assert!(!has("tasks", "sqs:ReceiveMessage"), "{:?}", g["tasks"]);
    assert!(!has("worker", "dynamodb:DeleteItem"), "{:?}", g["worker"]);
}

/// What each function links, checked on its binary: what it does not use costs every cold start
/// (its pages read, its relocations applied) and the deployment package. A crate's code is
/// found by its source files (`…/<crate>-<version>/src/…`), which the panic locations of any
/// of its code a binary links carry, stripped or not. Without the emulator.
///
/// - The checker of `tools/call` arguments (`tools::schema`) only in the mcp function: the
///   tasks function serves `tasks/*` with no tool registered (`aws::lambda::tasks_router`),
///   and the worker's registry does not check arguments (`tools::Registry::checking_arguments`).
/// - The `jsonschema` crate (the tests' oracle for the wire; 3.2 MB of the arm64 mcp function
///   when it checked arguments) and the regex crate's engines in none: the functions' logger
///   filters by target (`aws::lambda::init_logging`), not with `EnvFilter`'s patterns, and
///   `pattern`s are matched with regex-lite, which the AWS SDK links anyway.
/// - No HTTP/2 anywhere: the AWS clients talk HTTP/1.1 through `aws/https.rs`, not the SDK's
///   default client, which links `h2`.
#[test]
fn the_functions_link_only_what_they_use() {
    let b = support_aws::binaries();
    for (name, path) in [
        ("mcp", &b.mcp),
        ("tasks", &b.tasks),
        ("worker", &b.worker),
        ("sweep", &b.sweep),
    ] {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let crates = linked_crates(&bytes);
        // The control: every function links hyper; a search that misses it looks for the
        // wrong thing.
        assert!(
            crates.contains("hyper"),
            "the {name} binary names none of hyper's sources"
        );
        assert!(
            !crates.contains("h2"),
            "the {name} function links HTTP/2 (h2)"
        );
        // The argument checker only where `tools/call` is served (found by one of its
        // messages); the tests' schema engine and the regex crate's engines nowhere. (Its
        // regex engine, regex-lite, is in all four anyway: the SDK's endpoint rules use it.)
        let only_mcp = name == "mcp";
        let checker = bytes
            .windows(CHECKER_MESSAGE.len())
            .any(|w| w == CHECKER_MESSAGE.as_bytes());
        assert_eq!(
            checker,
            only_mcp,
            "the {name} function {} the argument checker",
            if only_mcp { "does not link" } else { "links" }
        );
        for krate in ["jsonschema", "regex-automata"] {
            assert!(!crates.contains(krate), "the {name} function links {krate}");
        }
    }
}

/// A message of the argument checker (`tools::schema`), as its binary holds it.
const CHECKER_MESSAGE: &str = "nests too deeply for this schema";

/// The crates whose sources (`/<crate>-<version>/src/`) a binary names.
fn linked_crates(bytes: &[u8]) -> std::collections::HashSet<String> {
    let mut crates = std::collections::HashSet::new();
    for (at, _) in bytes.windows(5).enumerate().filter(|(_, w)| *w == b"/src/") {
        let before = &bytes[..at];
        let version = before
            .iter()
            .rev()
            .take_while(|c| c.is_ascii_digit() || **c == b'.')
            .count();
        let Some(rest) = before[..before.len() - version].strip_suffix(b"-") else {
            continue;
        };
        let name = rest
            .iter()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'-' || **c == b'_')
            .count();
        if version > 0 && name > 0 && rest[..rest.len() - name].ends_with(b"/") {
            let name = &rest[rest.len() - name..];
            crates.insert(String::from_utf8_lossy(name).into_owned());
        }
    }
    crates
}

/// A cold start, measured (not asserted: timings on shared machines are noisy): each function's
/// init duration, then the first `server/discover` through the front against the median and slowest
/// of 400 warm ones (and how many took over 30 ms), behind the streaming integration (the
/// template's) and, as the reference of the same run, behind the buffered one. Claude Code falls
/// back to the legacy lane when `server/discover` takes more than about 5 s, so this is the figure
/// to watch. Debug binaries by default; `AWS_FUNCTIONS_RELEASE=1` builds them with the release
/// profile first.
///
/// Asserted: the mcp function set `TCP_NODELAY` on its Runtime API connection
/// (`aws/lambda/runtime_api.rs`: without it, every streamed answer waited ~40 ms for a delayed
/// ACK), and said so once at `info` (later connections of the runtime's pool go to `debug`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_start_figures() {
    // The answers are checked against the official schema: its validators are built before the
    // functions start, so that the first timed request measures the stack (the mcp function's
    // init included, if it is still running), not the test's own set-up.
    support::schema::build_validators();
    let Some(env) = Env::start("cold_start", Options::default()).await else {
        return;
    };
    let (first, streamed) = discover_times(&env).await;
    let init = env
        .mcp
        .init_duration()
        .expect("the mcp function asked for work");
    let inits: Vec<String> = [&env.mcp, &env.tasks, &env.worker, &env.sweep]
        .iter()
        .zip(["mcp", "tasks", "worker", "sweep"])
        .map(|(api, who)| {
            format!(
                "{who}={}",
                api.init_duration()
                    .map_or("?".into(), |d| format!("{}ms", d.as_millis()))
            )
        })
        .collect();
    let nodelay_sets = env
        .logs()
        .lines()
        .filter(|l| l.starts_with("[mcp] ") && l.contains("runtime_api.nodelay_set"))
        .count();
    drop(env);
    let buffered_env = Env::start(
        "cold_start_buffered",
        Options {
            streaming: false,
            ..Options::default()
        },
    )
    .await
    .expect("the emulator answered a moment ago");
    let (_, buffered) = discover_times(&buffered_env).await;
    let median = |w: &[Duration]| w[w.len() / 2];
    let slowest = |w: &[Duration]| w[w.len() - 1];
    // A delayed ACK (40 ms) shows as an answer this slow; nothing else here takes as long.
    let stalled = |w: &[Duration]| w.iter().filter(|d| **d > Duration::from_millis(30)).count();
    println!(
        "COLD START [{} build] init: {} | first server/discover {} ms; warm median {:.1} ms \
         streamed ({:.1}x faster than the first), {:.1} ms buffered (streamed = {:.2}x buffered); \
         slowest warm {:.1} ms streamed, {:.1} ms buffered; over 30 ms: {} of {} streamed, {} \
         buffered",
        if support_aws::release_binaries() {
            "release"
        } else {
            "debug"
        },
        inits.join(" "),
        first.as_millis(),
        ms(median(&streamed)),
        first.as_secs_f64() / median(&streamed).as_secs_f64().max(1e-6),
        ms(median(&buffered)),
        median(&streamed).as_secs_f64() / median(&buffered).as_secs_f64().max(1e-6),
        ms(slowest(&streamed)),
        ms(slowest(&buffered)),
        stalled(&streamed),
        streamed.len(),
        stalled(&buffered),
    );
    assert!(init > Duration::ZERO);
    assert_eq!(
        nodelay_sets, 1,
        "the mcp function says once that it set TCP_NODELAY on its Runtime API connection"
    );
}

/// The first `server/discover` through `env`'s front, and 400 warm ones after it, fastest
/// first.
async fn discover_times(env: &Env) -> (Duration, Vec<Duration>) {
    let c = env.client();
    let timed = || async {
        let t = std::time::Instant::now();
        let a = c.send("server/discover", json!({})).await;
        assert_eq!(a.status, 200, "{}", a.text);
        t.elapsed()
    };
    // The mcp function's first invocation (its init may still be running: the wait counts).
    let first = timed().await;
    let mut warm = Vec::new();
    for _ in 0..400 {
        warm.push(timed().await);
    }
    warm.sort();
    (first, warm)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A benchmark, run by hand (`#[ignore]`d): N tasks through the serverless path — the emulated
/// API Gateway, the real `mcp`, `tasks` and `worker` binaries (one instance each, as the
/// harness runs them), DynamoDB and SQS on the emulator — next to the same N tasks on the
/// local server (the embedded store and in-process queue), in one run. Each task is a
/// `hash_chain` of one step (200,000 rounds); they are created 32 at a time, then polled (32
/// at a time, every 250 ms) until every one has completed with its exact digest. Prints the
/// wall time of each path, their ratio, tasks per second, and the serverless path's AWS calls and billed
/// milliseconds per function (`AWS CALLS`). `BENCH_TASKS` sets N (default 50). Both paths run
/// the test's profile: for release figures,
/// `AWS_FUNCTIONS_RELEASE=1 BENCH_TASKS=200 cargo test --release -p mcp-tasks --all-features
/// --test aws_functions serverless_throughput -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run by hand"]
async fn serverless_throughput_next_to_the_local_server() {
    let n: usize = std::env::var("BENCH_TASKS")
        .ok()
        .map(|v| v.parse().expect("BENCH_TASKS: a whole number"))
        .unwrap_or(50)
        .max(1);
    let rounds = 200_000u64;
    async fn run_all(c: &Client, n: usize, rounds: u64) -> Duration {
        // One client, at most 32 requests in flight: the local server's edge refuses a client
        // past 64 at once (429), as it should.
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(32));
        let started = Instant::now();
        let creations: Vec<_> = (0..n)
            .map(|i| {
                let (c, gate) = (c.clone(), gate.clone());
                tokio::spawn(async move {
                    let _place = gate.acquire_owned().await.unwrap();
                    let seed = format!("bench-{i}");
                    let r = c
                        .tool("hash_chain", json!({"seed": seed, "rounds": rounds}))
                        .await;
                    (seed, r["taskId"].as_str().expect("a task").to_owned())
                })
            })
            .collect();
        let mut waits = Vec::new();
        for created in creations {
            let (seed, id) = created.await.unwrap();
            let (c, gate) = (c.clone(), gate.clone());
            waits.push(tokio::spawn(async move {
                let _place = gate.acquire_owned().await.unwrap();
                let done = poll_terminal(&c, &id, Duration::from_secs(600)).await;
                assert_eq!(done["status"], "completed", "{done}");
                let text = done["result"]["content"][0]["text"].as_str().unwrap_or("");
                let want = support::expected_hash_chain(&seed, rounds);
                assert!(text.contains(&want), "{text} lacks {want}");
            }));
        }
        for w in waits {
            w.await.unwrap();
        }
        started.elapsed()
    }

    let dir = support::data_dir();
    let local = support::Server::start(dir.path(), &[]);
    let local_time = run_all(&local.client().with_tasks(), n, rounds).await;
    drop(local);

    // The deployed worker's timeout (900 s), not the 4 s the other tests use to force
    // hand-overs: a benchmark measures the path as deployed.
    let options = Options {
        worker_timeout: Duration::from_secs(900),
        ..Options::default()
    };
    let Some(env) = Env::start("serverless_bench", options).await else {
        return;
    };
    let serverless_time = run_all(&env.client().with_tasks(), n, rounds).await;
    env.report("serverless_bench");
    println!(
        "SERVERLESS BENCH [{} build] {n} hash_chain tasks of one step: local {:.2} s ({:.1} tasks/s) | \
         serverless {:.2} s ({:.1} tasks/s) | serverless / local = {:.1}x",
        if support_aws::release_binaries() {
            "release"
        } else {
            "debug"
        },
        local_time.as_secs_f64(),
        n as f64 / local_time.as_secs_f64(),
        serverless_time.as_secs_f64(),
        n as f64 / serverless_time.as_secs_f64(),
        serverless_time.as_secs_f64() / local_time.as_secs_f64(),
    );
}

/// The X-Ray side of `a_long_job_hands_over_at_each_deadline_and_completes_exactly`'s job:
/// one segment per worker run of the task (sent to the daemon at `AWS_XRAY_DAEMON_ADDRESS` as
/// each message's handling ends), all in the trace of the request that created it (`root`),
/// each the child of the segment that sent its message, the last one `completed`; no datagram
/// carries the task's arguments, progress or result.
async fn xray_segments_follow_the_job(env: &Env, id: &str, root: &str, runs: u32, digest: &str) {
    let of_task = || -> Vec<Value> {
        env.xray_segments()
            .into_iter()
            .filter(|s| s["annotations"]["task_id"] == id)
            .collect()
    };
    // The last segment is sent just after the terminal write a client can already see.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !of_task()
        .iter()
        .any(|s| s["annotations"]["outcome"] == "completed")
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let segments = of_task();
    assert_eq!(
        segments.len(),
        runs as usize,
        "one segment per run: {segments:?}"
    );
    let trace_id = root.strip_prefix("Root=").unwrap();
    let hex16 = |v: &Value| {
        v.as_str()
            .is_some_and(|s| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let mut ids = std::collections::BTreeSet::new();
    for s in &segments {
        assert_eq!(s["trace_id"], trace_id, "in the request's trace: {s}");
        assert_eq!(s["name"], "worker", "{s}");
        assert!(hex16(&s["id"]) && hex16(&s["parent_id"]), "{s}");
        assert!(
            ids.insert(s["id"].to_string()),
            "segment ids are unique: {s}"
        );
        assert!(s["end_time"].as_f64() >= s["start_time"].as_f64(), "{s}");
        assert_eq!(s["annotations"]["action"], "done", "{s}");
        assert!(s.get("fault").is_none(), "{s}");
    }
    let outcomes: Vec<&str> = segments
        .iter()
        .map(|s| s["annotations"]["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == "completed").count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| **o == "continued").count(),
        runs as usize - 1,
        "every other run handed over: {outcomes:?}"
    );
    for d in env.xray_datagrams() {
        for secret in [digest, "Hashed ", "seed", "structuredContent"] {
            assert!(!d.contains(secret), "{secret} in a segment: {d}");
        }
    }
}
