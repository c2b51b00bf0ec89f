//! Task lifecycles through the functions: input, cancel, a long wait, expiry, the sweep.

use std::time::{Duration, Instant};

use mcp_tasks_core::store::TaskStore as _;
use mcp_tasks_core::task::{TaskRecord, new_task_id};
use serde_json::{Value, json};

use crate::support_aws::{DYNAMO_READS, DYNAMO_WRITES, Env, Options};
use crate::{TENANT, WITHIN, assert_routed, emf_settled, emf_sum, poll, poll_terminal, support};

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
    // Creating the tenant's first task: its place (an UpdateItem that finds no `#places` item
    // yet, one count of the tenant's index keys and a put that makes the item, the UpdateItem
    // again), two conditional puts (the arguments item, written once, then the record) and
    // one message, and no item read (a new id cannot conflict): exact, since the mcp function
    // served nothing but that tools/call. Later creations: figures.rs `what_a_creation_costs`.
    for (op, n) in [
        ("PutItem", 3),
        ("UpdateItem", 2),
        ("GetItem", 0),
        ("Query", 1),
    ] {
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
    // A job that computes, pausing in place between steps (a pause past a second, like a
    // `wait`, parks it without a run: see the next test).
    let args = json!({"seed": "cancel", "rounds": 4_000_000, "pace_ms": 900});
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_task_reads_as_unknown_and_the_sweep_purges_it() {
    let Some(env) = Env::start("expiry", Options::default()).await else {
        return;
    };
    let c = env.client().with_tasks();
    // A 2026-07-28 client cannot ask for a TTL (the server decides, 24 h on Lambda): the task
    // is written through the store with a short one.
    let ttl_ms = 1500;
    let task = TaskRecord::new(
        TENANT.into(),
        new_task_id(),
        "wait",
        Some(ttl_ms),
        1000,
        json!({}),
    );
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
async fn the_sweep_recovers_a_task_that_was_never_enqueued() {
    let Some(env) = Env::start("sweep_recovery", Options::default()).await else {
        return;
    };
    let c = env.client().with_tasks();
    let (seed, rounds) = ("orphan", 1000u64);
    let task = TaskRecord::new(
        TENANT.into(),
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
