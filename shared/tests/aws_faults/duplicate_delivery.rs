//! 1. Duplicate delivery: every message sent twice, two consumers racing over the queue.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mcp_tasks_core::queue::WorkQueue;
use tokio::time::Instant;

use crate::consumers::{Traffic, consume, settings};
use crate::judge::{judge_completed, report, verdict};
use crate::rig::{Twice, rig};
use crate::{lock, rng, scale};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn duplicate_delivery_runs_each_job_once() {
    let Some(rig) = rig("dup").await else {
        return;
    };
    let mut rng = rng("duplicate_delivery");
    let twice: Arc<dyn WorkQueue> = Arc::new(Twice(rig.queue.clone()));
    let engine = rig.engine(twice.clone());
    // A long lease: overlapping runs can only come from a broken lease, never from one that
    // ran out on a slow emulator.
    let workers = [
        rig.worker(twice.clone(), settings(Duration::from_secs(10))),
        rig.worker(twice, settings(Duration::from_secs(10))),
    ];
    let trials = 8 * scale();
    let mut jobs = Vec::new();
    for _ in 0..trials {
        let n = rng.range(3, 10);
        let (key, id) = rig.create(&engine, n, rng.range(10, 50), false).await;
        jobs.push((key, id, n));
    }
    let traffic = Traffic::new(None);
    // Short invocations, so jobs also hand over to (duplicated) continuations.
    let consumers = consume(&rig, &workers, &traffic, Duration::from_millis(400));
    let ids: Vec<String> = jobs.iter().map(|j| j.1.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(30 + 2 * trials as u64);
    let pending = rig.settle(&ids, false, deadline).await;
    consumers.drain_and_stop(Duration::from_secs(15)).await;

    let mut problems = Vec::new();
    let mut rerun_steps = 0;
    for (key, id, n) in &jobs {
        let t = rig.task(id).await;
        let mut bad = judge_completed(&rig, &t, key, *n, &traffic);
        if pending.contains(id) {
            bad.push("LOST: not terminal by the deadline".into());
        }
        // Without crashes every step ends exactly once: a step that ended twice was run by
        // two runs, or its checkpoint was lost.
        rig.entry(key, |e| {
            for i in 0..*n {
                let times = e.completed_steps.get(&i).copied().unwrap_or(0);
                if times != 1 {
                    rerun_steps += 1;
                    bad.push(format!("DOUBLED: step {i} ended {times} times"));
                }
            }
        });
        problems.push((id.clone(), bad));
    }
    let ev = rig.store.violations();
    let (lost, doubled) = report("duplicate_delivery", &problems);
    let messages: usize = lock(&traffic.messages).values().map(HashMap::len).sum();
    let copies_refused = traffic.outcome("busy") + traffic.outcome("dropped");
    println!(
        "aws_faults duplicate_delivery: trials={trials} tasks={trials} messages={messages} \
         deliveries={} copies_refused={copies_refused} rerun_steps={rerun_steps} give_ups={} \
         lost={lost} doubled={doubled} emulator_violations={ev} [{}]",
        traffic.deliveries.load(Ordering::Relaxed),
        traffic.give_ups.load(Ordering::Relaxed),
        traffic.summary(),
    );
    assert!(
        copies_refused >= trials,
        "every start was sent twice, so at least {trials} copies must have been refused"
    );
    assert!(
        traffic.outcome("continued") > 0,
        "no job handed over: the continuations went untested"
    );
    verdict(&rig, lost, doubled);
    rig.drop_all().await;
}
