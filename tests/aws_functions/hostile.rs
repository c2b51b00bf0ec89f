//! What one tenant can make the deployment store, re-send and hold: bounded, measured through
//! the function binaries.

use std::time::Duration;

use mcp_tasks_core::store::{StoreError, TaskRef, TaskStore as _};
use mcp_tasks_core::tenant::Tenant;
use serde_json::{Value, json};

use crate::support_aws::{Env, Options, item_bytes, write_units};
use crate::{TENANT, poll};

/// Client capabilities declaring tasks and elicitation, padded with `pad` bytes.
fn padded_caps(pad: usize) -> Value {
    json!({
        "extensions": {"io.modelcontextprotocol/tasks": {}},
        "elicitation": {"form": {}},
        "experimental": {"pad": "p".repeat(pad)},
    })
}

/// A task's record is rewritten at every lease and checkpoint and read at every poll, so what
/// a client sends in `_meta` must not land in it. Three `hash_chain` tasks, created with no
/// padding, 15 KB of padding (under the 16 KiB `_meta` bound) and 200 KB: the record of each
/// is read once a checkpoint was written, and its size is what DynamoDB bills each checkpoint
/// (a put costs one write unit per started KB). Prints the figures (`PADDED META`).
///
/// Asserted: the 200 KB `_meta` is refused at the edge (`-32602`, HTTP 400, nothing created),
/// and a padded task's record stays under a KB, as an unpadded one (one write unit a checkpoint).
/// It used to take the whole `clientCapabilities`: 197 write units a checkpoint at 200 KB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn padded_meta_never_reaches_the_task_record() {
    let options = Options {
        worker_timeout: Duration::from_secs(60),
        ..Options::default()
    };
    let Some(env) = Env::start("padded_meta", options).await else {
        return;
    };
    let args = json!({"name": "hash_chain",
                      "arguments": {"seed": "pad", "rounds": 200_000_000u64, "pace_ms": 200}});
    let mut sizes = Vec::new();
    let mut refusal = None;
    for pad in [0, 15_000, 200_000] {
        let c = env.client().with_caps(padded_caps(pad));
        let a = c.send("tools/call", args.clone()).await;
        let v = a.json();
        let Some(id) = v["result"]["taskId"].as_str().map(str::to_owned) else {
            refusal = Some((pad, a.status, v));
            continue;
        };
        // Leased and checkpointed: the record as every later checkpoint rewrites it.
        poll(&c, &id, Duration::from_secs(60), |t| {
            t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("Hashed"))
        })
        .await;
        let item = env.item(TENANT, &id).await.expect("the task's item");
        let bytes = item_bytes(&item);
        sizes.push((pad, bytes));
        let cancelled = c.call("tasks/cancel", json!({"taskId": id})).await;
        assert!(cancelled.is_object(), "{cancelled}");
    }
    let line: Vec<String> = sizes
        .iter()
        .map(|(pad, bytes)| {
            format!(
                "{pad} B of padding: record {bytes} B, {} write units a checkpoint",
                write_units(*bytes)
            )
        })
        .collect();
    println!(
        "PADDED META {} | 200000 B of padding: {}",
        line.join(" | "),
        refusal
            .as_ref()
            .map_or("accepted".into(), |(_, s, v)| format!(
                "refused, HTTP {s}: {v}"
            ))
    );
    let (pad, status, v) = refusal.expect("the 200 KB _meta was refused");
    assert_eq!(pad, 200_000, "only the oversized _meta is refused: {v}");
    assert_eq!(
        (status, v["error"]["code"].as_i64()),
        (400, Some(-32602)),
        "{v}"
    );
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(message, "params._meta is larger than 16384 bytes");
    assert_eq!(
        sizes.len(),
        2,
        "the unpadded and the 15 KB tasks were created"
    );
    for (pad, bytes) in &sizes {
        assert_eq!(
            write_units(*bytes),
            1,
            "{pad} B of padding made a {bytes} B record"
        );
    }
    env.report("padded _meta");
}

/// Messages waiting in the queue, visible or delayed: not those a worker holds, which a
/// deferral deletes once it has sent their next (counting both would count a task twice).
async fn queued_messages(env: &Env) -> u64 {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let out = env
        .sqs
        .get_queue_attributes()
        .queue_url(&env.queue_url)
        .attribute_names(A::All)
        .send()
        .await
        .expect("the queue's attributes");
    let attrs = out.attributes().cloned().unwrap_or_default();
    [
        A::ApproximateNumberOfMessages,
        A::ApproximateNumberOfMessagesDelayed,
    ]
    .iter()
    .map(|a| {
        attrs
            .get(a)
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{a:?} in {attrs:?}"))
    })
    .sum()
}

/// A job deferred because its tenant runs as many jobs as it may (here one) stays `working`,
/// unleased and quiet: the sweep used to take each for an orphan and send it again, and each
/// copy then waited and was re-sent on its own (20 tasks that had waited past the sweep's
/// patience with a queue backlog became 40 looping messages after one sweep, never reaching
/// the dead-letter queue). Now a deferral marks the task and
/// the sweep leaves it alone. Prints the queue's waiting messages before and after one sweep
/// (`WAITING JOBS`) and asserts at most one a task, nothing re-sent by the sweep, and
/// the deferrals counted (`jobs_deferred`, the metric an alarm can watch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_never_multiplies_jobs_waiting_for_their_tenants_place() {
    const TASKS: usize = 21;
    // The worker's 4 s invocations: the job holding the tenant's one place hands over every
    // few seconds, and each batch defers the others.
    let extra = [("worker", "MAX_RUNNING_JOBS_PER_TENANT", "1".to_string())];
    let Some(env) = Env::start_with("waiting_jobs", Options::default(), &extra).await else {
        return;
    };
    let c = env.client().with_tasks();
    // Long chains, paced under a second a step: one runs, the others wait their turn.
    let mut ids = Vec::new();
    for i in 0..TASKS {
        let args = json!({"seed": format!("w{i}"), "rounds": 200_000_000u64, "pace_ms": 900});
        let r = c.tool("hash_chain", args).await;
        ids.push(r["taskId"].as_str().expect("a task").to_owned());
    }
    // Every one deferred at least once; then, as if they had waited two hours (past the
    // sweep's patience with a queue backlog, `BACKLOG_PATIENCE`), quiet since then.
    tokio::time::sleep(Duration::from_secs(20)).await;
    // Only the waiting ones are aged: the one running holds a lease, and one between two
    // invocations (handed over, its next message on its way) was written a moment ago, so
    // two hours of quiet would be a fiction for either.
    let store = env.store();
    let mut aged = 0;
    for id in &ids {
        let id = mcp_tasks_core::task::TaskId::parse(id.clone()).unwrap();
        let key = TaskRef {
            tenant: &Tenant::from(TENANT),
            task_id: &id,
        };
        loop {
            let mut t = store.get(key).await.unwrap().expect("the task");
            let now = mcp_tasks_core::clock::now_ms();
            if t.waiting_until_ms.is_none_or(|u| u <= now)
                || t.lease.as_ref().is_some_and(|l| l.expires_at_ms > now)
            {
                // Running, or between runs: then it was written moments ago.
                let held = t.lease.as_ref().is_some_and(|l| l.expires_at_ms > now);
                assert!(held || now - t.last_updated_at_ms < 30_000, "{t:?}");
                break;
            }
            t.last_updated_at_ms -= 2 * 3600 * 1000;
            match store.update(&t).await {
                Ok(_) => {
                    aged += 1;
                    break;
                }
                Err(StoreError::Conflict) => continue,
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert!(aged >= TASKS / 2, "{aged} of {TASKS} tasks were waiting");
    let before = queued_messages(&env).await;
    let report = env.run_sweep().await;
    // Two deferral rounds: whatever the sweep sent has been received and handled.
    tokio::time::sleep(crate::DEFER_ROUNDS).await;
    let after = queued_messages(&env).await;
    println!(
        "WAITING JOBS {TASKS} tasks sharing their tenant's one place: {before} messages \
         before the sweep ({aged} aged as if waiting two hours), sweep re-sent {}, {after} messages \
         after (one a task: {TASKS})",
        report["requeued"],
    );
    for id in &ids {
        let t = c.get_task(id).await;
        assert_eq!(t["status"], "working", "{t}");
    }
    assert_eq!(report["requeued"], 0, "{report}");
    // One message a task, give or take the moment's hand-overs: the running job's next
    // message sent before its old one is deleted, a stale copy not yet received and dropped
    // (seen under load: 22 for 21). Multiplied waits would be twice as many and growing.
    assert!(
        after <= TASKS as u64 + 2,
        "{after} messages for {TASKS} tasks"
    );
    let deferred = crate::emf_sum(&env, Some("worker"), "jobs_deferred", &[]);
    assert!(
        deferred >= TASKS as u64 - 1,
        "deferrals counted: {deferred}"
    );
    for id in &ids {
        c.call("tasks/cancel", json!({"taskId": id})).await;
    }
    env.report("20 jobs waiting for their tenant's place, one sweep");
}

/// Pauses the emulated event source mapping once no worker invocation runs.
async fn pause_the_mapping(env: &Env) {
    env.esm.lock().unwrap().paused = true;
    for _ in 0..1200 {
        {
            let s = env.esm.lock().unwrap();
            if s.invocation_ms.len() == s.batch_sizes.len() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A receive under way ends with what it got.
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

/// One batch of ten: a `hash_chain` paced `pace_ms` a step and nine of one round. While the
/// batch runs, three more tasks wait in the queue (the emulated mapping runs one invocation
/// at a time, as a deployment at `MaximumConcurrency` does). Returns how long the batch's
/// invocation lasted: how long the paced job kept the nine others' invocation.
async fn batch_with_one_paced_job(env: &Env, c: &crate::support::Client, pace_ms: u64) -> u64 {
    pause_the_mapping(env).await;
    let first = env.esm.lock().unwrap().batch_sizes.len();
    let paced = json!({"seed": "paced", "rounds": 200_000_000u64, "pace_ms": pace_ms});
    let paced = c.tool("hash_chain", paced).await["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    let quick = |i: usize| json!({"seed": format!("q{pace_ms}-{i}"), "rounds": 1});
    let mut ids = Vec::new();
    for i in 0..9 {
        ids.push(
            c.tool("hash_chain", quick(i)).await["taskId"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    while queued_messages(env).await < 10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.esm.lock().unwrap().paused = false;
    while env.esm.lock().unwrap().batch_sizes.len() == first {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 9..12 {
        ids.push(
            c.tool("hash_chain", quick(i)).await["taskId"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let started = std::time::Instant::now();
    while env.esm.lock().unwrap().invocation_ms.len() == first {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the batch never ended"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (size, ms) = {
        let s = env.esm.lock().unwrap();
        (s.batch_sizes[first], s.invocation_ms[first])
    };
    assert_eq!(size, 10, "one batch of the ten");
    for id in &ids {
        let t = poll(c, id, Duration::from_secs(60), |t| t["status"] != "working").await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    let t = c.get_task(&paced).await;
    assert_eq!(t["status"], "working", "{t}");
    c.call("tasks/cancel", json!({"taskId": paced})).await;
    ms
}

/// `MaximumConcurrency` counts worker invocations, and an invocation ends only when its
/// slowest record does: one paced job used to keep its nine batch-mates' invocation until its
/// hand-over (here 25 s of a 30 s invocation; 895 s deployed), so 50 such jobs held every
/// invocation at the default concurrency while running 50 jobs. A pause past a second is now
/// a parked sleep (`Step::Sleep`): the job's record ends with its step. A shorter pause is
/// slept in place, and an invocation that runs fewer than half a batch for 10 s while work
/// waits hands its jobs over. Prints how long each batch's invocation lasted (`PACED BATCH`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_paced_job_never_holds_its_batchs_invocation() {
    let timeout = Duration::from_secs(30);
    let options = Options {
        worker_timeout: timeout,
        ..Options::default()
    };
    let Some(env) = Env::start("paced_batch", options).await else {
        return;
    };
    let c = env.client().with_tasks();
    let parked = batch_with_one_paced_job(&env, &c, 2_000).await;
    let slept = batch_with_one_paced_job(&env, &c, 500).await;
    println!(
        "PACED BATCH one paced job and nine quick ones, work waiting: the batch's invocation \
         lasted {:.1} s with a 2 s pace (parked), {:.1} s with a 500 ms pace (slept in \
         place); the hand-over is due at {} s",
        parked as f64 / 1e3,
        slept as f64 / 1e3,
        timeout.as_secs() - 5
    );
    assert!(parked < 10_000, "a parked job held the batch {parked} ms");
    assert!(slept < 20_000, "a pacing job held the batch {slept} ms");
    env.report("a paced job in a batch of ten");
}
