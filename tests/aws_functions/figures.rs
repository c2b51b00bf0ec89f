//! Measured, not asserted: cold starts and throughput next to the local server.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::Client;
use crate::support_aws::{Env, Options};
use crate::{poll_terminal, support, support_aws};
use mcp_tasks_core::task::TaskRef;
use mcp_tasks_core::tenant::Tenant;

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

/// What creating a task and ending it cost, counted by the harness's proxy (exact: the mcp
/// function serves nothing but the creations, the tasks function nothing but the cancel): a
/// tenant's first creation, which also starts counting its places, then each of ten more,
/// then a `tasks/cancel` that ends one (the tasks function gives its place back). Printed as
/// `CREATION COST`, and asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_creation_costs() {
    let Some(env) = Env::start("creation_cost", Options::default()).await else {
        return;
    };
    let c = env.client().with_tasks();
    let mcp = |op: &str| env.counts.sum(Some("mcp"), None, Some(&[op]));
    let ops = [
        "UpdateItem",
        "PutItem",
        "GetItem",
        "Query",
        "TransactWriteItems",
        "SendMessage",
    ];
    let create = || async {
        let r = c.tool("wait", json!({"seconds": 3600})).await;
        assert_eq!(r["resultType"], "task", "{r}");
        r["taskId"].as_str().unwrap().to_owned()
    };
    let id = create().await;
    let first: Vec<u64> = ops.iter().map(|op| mcp(op)).collect();
    for _ in 0..10 {
        create().await;
    }
    let each: Vec<u64> = ops
        .iter()
        .zip(&first)
        .map(|(op, f)| (mcp(op) - f) / 10)
        .collect();
    // The first task parked by its worker (asleep, no lease), so the cancel ends it at once.
    let key = mcp_tasks_core::aws::dynamo::pk(TaskRef::new(
        &Tenant::from(crate::TENANT),
        &mcp_tasks_core::task::TaskId::parse(id.clone()).unwrap(),
    ));
    let started = Instant::now();
    loop {
        let item = env
            .dynamo
            .get_item()
            .table_name(&env.table)
            .key(
                mcp_tasks_core::aws::dynamo::ATTR_PK,
                aws_sdk_dynamodb::types::AttributeValue::S(key.clone()),
            )
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .unwrap();
        if item.contains_key("wake_at_ms") && !item.contains_key("lease") {
            break;
        }
        assert!(started.elapsed() < crate::WITHIN, "never parked: {item:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tasks_before: Vec<u64> = ops
        .iter()
        .map(|op| env.counts.sum(Some("tasks"), None, Some(&[op])))
        .collect();
    c.call("tasks/cancel", json!({"taskId": id})).await;
    let cancel: Vec<u64> = ops
        .iter()
        .zip(&tasks_before)
        .map(|(op, b)| env.counts.sum(Some("tasks"), None, Some(&[op])) - b)
        .collect();
    let show = |v: &[u64]| {
        ops.iter()
            .zip(v)
            .filter(|(_, n)| **n > 0)
            .map(|(op, n)| format!("{op}={n}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "CREATION COST (mcp function) first of a tenant: {} | each later one: {} || tasks/cancel \
         of a parked task (tasks function): {}",
        show(&first),
        show(&each),
        show(&cancel)
    );
    assert_eq!(first, [2, 3, 0, 1, 0, 1], "{}", show(&first));
    assert_eq!(each, [1, 2, 0, 0, 0, 1], "{}", show(&each));
    // A parked task that has begun (it has a checkpoint) is cancelled with one message to its
    // worker, which lets the tool stop what it started elsewhere (a workflow's execution).
    assert_eq!(cancel, [1, 1, 1, 0, 0, 1], "{}", show(&cancel));
    env.report("11 creations of one tenant, one cancel");
}
