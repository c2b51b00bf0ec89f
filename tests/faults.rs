//! Fault injection against the real binary (built with the `fault-injection` feature):
//! - `kill -9`/restart cycles at random moments while `hash_chain` tasks run;
//! - deterministic kill points inside jobs (`crash-after-checkpoints=N`);
//! - every work message delivered twice (`duplicate-delivery`), also across a restart;
//! - concurrent cancel-vs-complete trials over HTTP.
//!
//! Every test prints one `FIGURES` line (trials, lost, doubled) and fails on any loss or
//! doubling. The defaults are the quick CI versions; `scripts/soak.sh` runs long versions by
//! raising the `FAULTS_*` counts read below.

#[path = "../shared/tests/common/mod.rs"]
mod common;
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Server, expected_hash_chain};

const ROUNDS_PER_STEP: u64 = 200_000;

/// The tests share two CPUs with everything else in CI; one at a time keeps their timing
/// (kills landing inside jobs, races landing near completion) meaningful.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A count from the environment (the soak raises them), or the quick default.
fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How many times longer the kill and crash-point jobs are (`FAULTS_STEPS_SCALE`, default 1).
/// A release-built server hashes so fast that the paced jobs end before any kill or crash
/// point lands; scripts/soak.sh raises it for `SOAK_RELEASE=1`.
fn steps_scale() -> u64 {
    knob("FAULTS_STEPS_SCALE", 1).max(1)
}

/// The test's generator; `FAULTS_SEED` replays a run (the seed is printed).
fn rng(test: &str) -> common::Rng {
    common::Rng::new("FAULTS_SEED", test)
}

/// A running `mcp-tasks serve`, optionally with `MCP_TASKS_FAULTS`.
type Proc = Server;

/// Starts the server, with `faults` as `MCP_TASKS_FAULTS` (or none).
fn start(data_dir: &Path, faults: Option<&str>) -> Proc {
    // scripts/soak.sh runs a private copy, safe from rebuilds during a long run.
    let bin =
        std::env::var_os("MCP_TASKS_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_mcp-tasks").into());
    let mut cmd = Command::new(bin);
    cmd.env_remove("MCP_TASKS_FAULTS");
    if let Some(f) = faults {
        cmd.env("MCP_TASKS_FAULTS", f);
    }
    Server::spawn(cmd, data_dir, &[])
}

/// `tasks/get` that tolerates a dead server (`None`).
async fn try_get(c: &Client, id: &str) -> Option<Value> {
    let body = c.body("tasks/get", json!({"taskId": id}));
    let mut rb = reqwest::Client::new()
        .post(&c.url)
        .timeout(Duration::from_secs(5))
        .json(&body);
    for (k, v) in Client::headers(&body) {
        rb = rb.header(k, v);
    }
    let v: Value = rb.send().await.ok()?.json().await.ok()?;
    assert!(v.get("error").is_none(), "tasks/get {id}: {v}");
    Some(v["result"].clone())
}

fn is_terminal(t: &Value) -> bool {
    matches!(
        t["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

/// Log lines of `event` (e.g. `task.completed`) for `id`.
fn count(log: &str, event: &str, id: &str) -> usize {
    let needle = format!("{event} task_id={id}");
    log.lines().filter(|l| l.contains(&needle)).count()
}

/// A `hash_chain` task and the digest it must end with.
struct Chain {
    id: String,
    seed: String,
    rounds: u64,
}

async fn start_chain(c: &Client, seed: String, steps: u64, pace_ms: u64) -> Chain {
    let rounds = steps * ROUNDS_PER_STEP;
    let created = c
        .tool(
            "hash_chain",
            json!({"seed": seed, "rounds": rounds, "pace_ms": pace_ms}),
        )
        .await;
    let id = created["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {created}"))
        .to_owned();
    Chain { id, seed, rounds }
}

/// Seeds come from a small set so the expected digests (as costly as the jobs) are computed
/// once per (seed, rounds); distinct seeds still catch a task resuming from another's chain.
fn seed(rng: &mut common::Rng) -> String {
    format!("faults-{}", rng.range(0, 3))
}

/// `expected_hash_chain`, memoized across the tests of this binary.
async fn expected(seed: &str, rounds: u64) -> String {
    static MEMO: Mutex<BTreeMap<(String, u64), String>> = Mutex::new(BTreeMap::new());
    let key = (seed.to_owned(), rounds);
    if let Some(d) = MEMO.lock().unwrap().get(&key) {
        return d.clone();
    }
    let (s, r) = key.clone();
    let d = tokio::task::spawn_blocking(move || expected_hash_chain(&s, r))
        .await
        .unwrap();
    MEMO.lock().unwrap().insert(key, d.clone());
    d
}

/// What the final records say: lost = not `completed` with the right digest (waiting up to
/// `within` for each to finish); resumed = finished from a saved checkpoint.
struct Verdict {
    lost: usize,
    resumed: usize,
}

async fn judge(c: &Client, chains: &[Chain], within: Duration) -> Verdict {
    let start = Instant::now();
    let (mut lost, mut resumed) = (0, 0);
    for ch in chains {
        let t = loop {
            let t = try_get(c, &ch.id).await.expect("the server answers");
            if is_terminal(&t) || start.elapsed() > within {
                break t;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let want = expected(&ch.seed, ch.rounds).await;
        let sc = &t["result"]["structuredContent"];
        if t["status"] != "completed" || sc["digest"] != want.as_str() {
            let why = if is_terminal(&t) {
                ""
            } else {
                " (unfinished in time)"
            };
            eprintln!("LOST{why} {}: {t}", ch.id);
            lost += 1;
        }
        if sc["resumedAt"].as_u64().unwrap_or(0) > 0 {
            resumed += 1;
        }
    }
    Verdict { lost, resumed }
}

/// What every process's log says: doubled = more than one `task.completed` line for a task;
/// unlogged = none (the record says completed, but no run ever logged finishing it).
fn log_verdict(logs: &str, chains: &[Chain]) -> (usize, usize) {
    let mut doubled = 0;
    let mut unlogged = 0;
    for ch in chains {
        match count(logs, "task.completed", &ch.id) {
            0 => {
                eprintln!("UNLOGGED {}: no task.completed line", ch.id);
                unlogged += 1;
            }
            1 => {}
            n => {
                eprintln!("DOUBLED {}: completed {n} times", ch.id);
                doubled += 1;
            }
        }
    }
    (doubled, unlogged)
}

/// Random `kill -9`s: every cycle starts the server on the same data directory, submits a
/// few `hash_chain` tasks (each a few seconds long, so most live through one or two kills),
/// kills it at a random moment, and repeats. A last run finishes everything.
#[tokio::test(flavor = "multi_thread")]
async fn kill_restart_cycles_lose_and_double_nothing() {
    let _serial = SERIAL.lock().await;
    let cycles = knob("FAULTS_KILL_CYCLES", 4);
    let per_cycle = knob("FAULTS_KILL_TASKS", 2);
    let (kill_min, kill_max) = (
        knob("FAULTS_KILL_MIN_MS", 2000),
        knob("FAULTS_KILL_MAX_MS", 3500),
    );
    // Kills come faster than the worker's give-up limit (5 dead runs) expects; lift it, so
    // this tests resumption rather than the poison-job guard.
    let spec = "max-interruptions=1000";
    let mut rng = rng("kill_restart");
    let dir = tempfile::tempdir().unwrap();
    let mut chains = Vec::new();
    let mut logs = String::new();
    let mut in_flight_at_kill = 0;
    for _ in 0..cycles {
        let p = start(dir.path(), Some(spec));
        let c = p.client().with_tasks();
        for _ in 0..per_cycle {
            let steps = rng.range(4, 8) * steps_scale();
            let pace = rng.range(200, 400);
            chains.push(start_chain(&c, seed(&mut rng), steps, pace).await);
        }
        tokio::time::sleep(Duration::from_millis(rng.range(kill_min, kill_max))).await;
        let log = p.kill();
        in_flight_at_kill += chains
            .iter()
            .filter(|ch| {
                count(&log, "task.leased", &ch.id) > 0 && count(&log, "task.completed", &ch.id) == 0
            })
            .count();
        logs.push_str(&log);
    }
    let last = start(dir.path(), Some(spec));
    // The backlog drains on one process; allow for it (an unfinished task counts as lost).
    let within = Duration::from_secs(120 + 5 * chains.len() as u64);
    let v = judge(&last.client().with_tasks(), &chains, within).await;
    logs.push_str(&last.kill());
    let (doubled, unlogged) = log_verdict(&logs, &chains);
    let lost = v.lost + unlogged;
    println!(
        "FIGURES test=kill_restart trials={cycles} kills={cycles} tasks={} in_flight_at_kill={in_flight_at_kill} resumed={} lost={lost} doubled={doubled}",
        chains.len(),
        v.resumed
    );
    assert_eq!((lost, doubled), (0, 0));
    assert!(
        in_flight_at_kill > 0,
        "no kill landed inside a job; the test proves nothing"
    );
}

/// Deterministic kill points inside jobs: the server aborts right after its Nth checkpoint
/// write, and is restarted (with the same fault armed) until every task has finished.
#[tokio::test(flavor = "multi_thread")]
async fn aborts_right_after_checkpoints_lose_and_double_nothing() {
    let _serial = SERIAL.lock().await;
    let rounds_of_tasks = knob("FAULTS_CRASH_ROUNDS", 1);
    let tasks = knob("FAULTS_CRASH_TASKS", 2);
    let after = knob("FAULTS_CRASH_AFTER", 2 * tasks);
    // Every abort interrupts every running job; lift the give-up limit (5 dead runs) so a
    // long soak tests resumption rather than the poison-job guard.
    let spec = format!("crash-after-checkpoints={after},max-interruptions=1000");
    let mut rng = rng("crash_points");
    let dir = tempfile::tempdir().unwrap();
    let mut chains = Vec::new();
    let mut logs = String::new();
    let mut aborts = 0;
    for _ in 0..rounds_of_tasks {
        let mut p = start(dir.path(), Some(&spec));
        let mut c = p.client().with_tasks();
        let batch: Vec<Chain> = {
            let mut b = Vec::new();
            for _ in 0..tasks {
                let steps = rng.range(6, 9) * steps_scale();
                b.push(start_chain(&c, seed(&mut rng), steps, 300).await);
            }
            b
        };
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            assert!(Instant::now() < deadline, "tasks never finished");
            if p.exited() {
                aborts += 1;
                let log = p.kill();
                assert!(log.contains("fault-injection: aborting after checkpoint"));
                logs.push_str(&log);
                p = start(dir.path(), Some(&spec));
                c = p.client().with_tasks();
                continue;
            }
            let mut all = true;
            for ch in &batch {
                match try_get(&c, &ch.id).await {
                    Some(t) if is_terminal(&t) => {}
                    _ => {
                        all = false;
                        break;
                    }
                }
            }
            if all {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        chains.extend(batch);
        logs.push_str(&p.kill());
    }
    let p = start(dir.path(), None);
    let v = judge(&p.client().with_tasks(), &chains, Duration::from_secs(10)).await;
    let (doubled, unlogged) = log_verdict(&logs, &chains);
    let lost = v.lost + unlogged;
    println!(
        "FIGURES test=crash_points trials={aborts} aborts={aborts} tasks={} resumed={} lost={lost} doubled={doubled}",
        chains.len(),
        v.resumed,
    );
    assert_eq!((lost, doubled), (0, 0));
    assert!(aborts > 0, "no injected abort happened");
}

/// Every work message delivered twice (at once, then 150 ms late across a kill and
/// restart): every task completes exactly once, and no process leases a task twice.
#[tokio::test(flavor = "multi_thread")]
async fn duplicate_delivery_completes_each_task_once() {
    let _serial = SERIAL.lock().await;
    let m = knob("FAULTS_DUP_TASKS", 8);
    let mut rng = rng("duplicate_delivery");
    let dir = tempfile::tempdir().unwrap();
    let mut chains = Vec::new();
    let mut logs = String::new();
    let mut twice_leased = 0;

    // Phase 1: copies at once; short tasks, no crash.
    let p = start(dir.path(), Some("duplicate-delivery"));
    let c = p.client().with_tasks();
    for _ in 0..m {
        let steps = rng.range(1, 2);
        chains.push(start_chain(&c, seed(&mut rng), steps, 50).await);
    }
    judge(&c, &chains, Duration::from_secs(120)).await;
    let log = p.kill();
    assert!(log.contains("FAULT INJECTION ENABLED"));
    twice_leased += chains
        .iter()
        .filter(|ch| count(&log, "task.leased", &ch.id) > 1)
        .count();
    logs.push_str(&log);

    // Phase 2: late copies, and a kill mid-run so recovery's messages are duplicated too.
    let spec = "duplicate-delivery,duplicate-delay-ms=150";
    let p = start(dir.path(), Some(spec));
    let c = p.client().with_tasks();
    let first = chains.len();
    for _ in 0..m {
        let steps = rng.range(2, 4);
        chains.push(start_chain(&c, seed(&mut rng), steps, 150).await);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let log = p.kill();
    twice_leased += chains[first..]
        .iter()
        .filter(|ch| count(&log, "task.leased", &ch.id) > 1)
        .count();
    logs.push_str(&log);
    let p = start(dir.path(), Some(spec));
    let c = p.client().with_tasks();
    judge(&c, &chains, Duration::from_secs(120)).await;
    let log = p.kill();
    twice_leased += chains[first..]
        .iter()
        .filter(|ch| count(&log, "task.leased", &ch.id) > 1)
        .count();
    logs.push_str(&log);

    let p = start(dir.path(), None);
    let v = judge(&p.client().with_tasks(), &chains, Duration::from_secs(10)).await;
    let (doubled, unlogged) = log_verdict(&logs, &chains);
    let lost = v.lost + unlogged;
    println!(
        "FIGURES test=duplicate_delivery trials={} tasks={} twice_leased={twice_leased} lost={lost} doubled={}",
        chains.len(),
        chains.len(),
        doubled + twice_leased
    );
    assert_eq!((lost, doubled, twice_leased), (0, 0, 0));
}

/// Cancel racing completion, many trials at once: each task ends in exactly one terminal
/// state, which later reads (and a second cancel) never change.
#[tokio::test(flavor = "multi_thread")]
async fn cancel_racing_completion_ends_in_one_stable_state() {
    let _serial = SERIAL.lock().await;
    let trials = knob("FAULTS_CANCEL_TRIALS", 40);
    let parallel = knob("FAULTS_CANCEL_PARALLEL", 10).max(1);
    let mut rng = rng("cancel_race");
    // Duplicate delivery on too: a late copy must not revive a cancelled task.
    let dir = tempfile::tempdir().unwrap();
    let p = start(
        dir.path(),
        Some("duplicate-delivery,duplicate-delay-ms=100"),
    );
    let c = p.client().with_tasks();
    let mut outcomes: Vec<(String, String)> = Vec::new();
    let (mut lost, mut doubled) = (0usize, 0usize);
    let mut done = 0;
    while done < trials {
        let batch = (trials - done).min(parallel);
        let mut handles = Vec::new();
        for _ in 0..batch {
            let c = c.clone();
            let run_ms = rng.range(200, 400);
            let cancel_after = run_ms + rng.range(0, 200) - 100;
            handles.push(tokio::spawn(async move {
                let created = c
                    .tool("wait", json!({"seconds": run_ms as f64 / 1000.0}))
                    .await;
                let id = created["taskId"].as_str().unwrap().to_owned();
                tokio::time::sleep(Duration::from_millis(cancel_after)).await;
                c.call("tasks/cancel", json!({"taskId": id})).await;
                let first = c.wait_terminal(&id, Duration::from_secs(30)).await;
                // Past every lease check and late duplicate: nothing may change any more.
                tokio::time::sleep(Duration::from_millis(1500)).await;
                c.call("tasks/cancel", json!({"taskId": id})).await;
                let later = c.get_task(&id).await;
                (id, first, later)
            }));
        }
        for h in handles {
            let (id, first, later) = h.await.unwrap();
            let stable = first["status"] == later["status"]
                && first["result"] == later["result"]
                && first["lastUpdatedAt"] == later["lastUpdatedAt"];
            if !stable {
                eprintln!("CHANGED {id}: {first} -> {later}");
                doubled += 1;
            }
            let status = first["status"].as_str().unwrap_or("?").to_owned();
            if !matches!(status.as_str(), "completed" | "cancelled") {
                eprintln!("LOST {id}: {first}");
                lost += 1;
            }
            outcomes.push((id, status));
        }
        done += batch;
    }
    let log = p.kill();
    for (id, status) in &outcomes {
        let completed = count(&log, "task.completed", id);
        let cancelled = count(&log, "task.cancelled", id);
        let want_completed = usize::from(status == "completed");
        if completed != want_completed || cancelled > 1 || (status == "completed" && cancelled > 0)
        {
            eprintln!("DOUBLED {id}: {status}, completed {completed}x, cancelled {cancelled}x");
            doubled += 1;
        }
        if count(&log, "task.leased", id) > 1 {
            eprintln!("DOUBLED {id}: leased twice");
            doubled += 1;
        }
    }
    let n_completed = outcomes.iter().filter(|(_, s)| s == "completed").count();
    let n_cancelled = outcomes.iter().filter(|(_, s)| s == "cancelled").count();
    println!(
        "FIGURES test=cancel_race trials={trials} completed={n_completed} cancelled={n_cancelled} lost={lost} doubled={doubled}"
    );
    assert_eq!((lost, doubled), (0, 0));
}
