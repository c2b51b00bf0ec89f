//! A long job handed over at each worker deadline, exact, in one X-Ray trace.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support_aws::{Env, Options};
use crate::{WITHIN, assert_routed, emf_settled, poll, poll_terminal, support};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_job_hands_over_at_each_deadline_and_completes_exactly() {
    // Each worker invocation has 8 s; the worker keeps min(5 s, half of what is left) as its
    // margin, so it works a little under 4 s, then hands over. Every step of 200k rounds but
    // the last is paced 0.9 s on top of the hashing (slept in place: a pause past a second
    // would park the job instead), so at most 4 paced steps fit in one invocation however fast
    // the CPU is (the last run may add the unpaced final step), and 16 steps need at least 4
    // invocations (4 + 4 + 5 < 16): at least 3 hand-overs. (The first
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
    let (seed, rounds) = ("functions", 3_200_000u64);
    let created = c
        .tool(
            "hash_chain",
            json!({"seed": seed, "rounds": rounds, "pace_ms": 900}),
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
    let done = poll_terminal(&c, &id, Duration::from_secs(180)).await;
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
