//! 2 and 4. Crashes: a run killed mid-job, and a task stored without its message.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks_core::queue::{WorkKind, WorkMessage};
use mcp_tasks_core::task::TaskId;
use tokio::time::{Instant, sleep};

use crate::consumers::{Crash, Traffic, consume, settings};
use crate::judge::{judge_completed, report, verdict};
use crate::rig::{Down, rig};
use crate::tally::at;
use crate::{TENANT, lock, rng, scale};

// ── 2. crash mid-job ──

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_run_resumes_from_its_checkpoint_and_completes_once() {
    let Some(rig) = rig("crash").await else {
        return;
    };
    let rng = rng("crash_mid_job");
    let engine = rig.engine(rig.queue.clone());
    // Leases are wall-clock: long enough that a slow emulator never lets one lapse under a
    // live run, short enough that a dead run's lapses within a crash cycle.
    let lease = Duration::from_secs(2);
    let workers = [
        rig.worker(rig.queue.clone(), settings(lease)),
        rig.worker(rig.queue.clone(), settings(lease)),
    ];
    let tasks = 4 * scale();
    let cycles: u32 = 3;
    // Each killed run ends at most 3 steps past where it started: enough left to resume into.
    let n = 4 * u64::from(cycles) + 4;
    let mut jobs = Vec::new();
    let mut left = HashMap::new();
    for _ in 0..tasks {
        let (key, id) = rig.create(&engine, n, 40, false).await;
        left.insert(id.clone(), cycles);
        jobs.push((key, id));
    }
    let traffic = Traffic::new(Some(Crash {
        left: Mutex::new(left),
        busy: Mutex::default(),
        kills: Mutex::default(),
        rng: Mutex::new(rng),
    }));
    let consumers = consume(&rig, &workers, &traffic, Duration::from_secs(30));
    let ids: Vec<String> = jobs.iter().map(|j| j.1.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(40 + 3 * tasks as u64);
    let pending = rig.settle(&ids, false, deadline).await;
    consumers.drain_and_stop(Duration::from_secs(15)).await;

    let crash = traffic.crash.as_ref().expect("the crash plan");
    let mut problems = Vec::new();
    let (mut kills_total, mut resumed) = (0, 0);
    for (key, id) in &jobs {
        let t = rig.task(id).await;
        let mut bad = judge_completed(&rig, &t, key, n, &traffic);
        if pending.contains(id) {
            bad.push("LOST: not terminal by the deadline".into());
        }
        let kills = lock(&crash.kills).get(id).cloned().unwrap_or_default();
        kills_total += kills.len();
        if kills.len() != cycles as usize {
            bad.push(format!("LOST: killed {} times, not {cycles}", kills.len()));
        }
        let starts = rig.entry(key, |e| e.starts.clone());
        if starts.len() != kills.len() + 1 || starts.first() != Some(&0) {
            bad.push(format!(
                "WRONG runs: started at {starts:?} after kills at {kills:?}"
            ));
        } else {
            for (start, killed_at) in starts[1..].iter().zip(&kills) {
                if *start == 0 || start < killed_at {
                    bad.push(format!(
                        "WRONG resume: from {start} after a kill that had saved {killed_at}"
                    ));
                } else {
                    resumed += 1;
                }
            }
        }
        if t.attempts != cycles + 1 || t.interruptions != 0 {
            bad.push(format!(
                "DOUBLED attempts: attempts={} interruptions={}",
                t.attempts, t.interruptions
            ));
        }
        problems.push((id.clone(), bad));
    }
    let ev = rig.store.violations();
    let (lost, doubled) = report("crash_mid_job", &problems);
    println!(
        "aws_faults crash_mid_job: trials={kills_total} tasks={tasks} kills={kills_total} \
         resumed_from_checkpoint={resumed} deliveries={} lost={lost} doubled={doubled} emulator_violations={ev} [{}]",
        traffic.deliveries.load(Ordering::Relaxed),
        traffic.summary(),
    );
    verdict(&rig, lost, doubled);
    rig.drop_all().await;
}
// ── 4. crash between storing a task and enqueueing it ──

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sweep_recovers_tasks_without_a_message() {
    let Some(rig) = rig("sweep").await else {
        return;
    };
    let mut rng = rng("enqueue_crash");
    // Every send fails: `create_task` stores the task, logs the failed send and answers.
    let engine = rig.engine(Arc::new(Down));
    let lease = Duration::from_secs(2);
    let trials = 6 * scale();
    let n = 8;
    let mut jobs = Vec::new();
    for _ in 0..trials {
        let (key, id) = rig.create(&engine, n, rng.range(10, 40), false).await;
        jobs.push((key, id));
    }
    assert!(
        rig.receive(1).await.is_empty(),
        "the premise: no work message was sent"
    );
    // Half of them also had a run that died after a checkpoint, its message gone for good
    // (say, dead-lettered): only the sweep can bring them back.
    let died: Vec<String> = jobs
        .iter()
        .skip(1)
        .step_by(2)
        .map(|j| j.1.clone())
        .collect();
    let dying = rig.worker(Arc::new(Down), settings(lease));
    for id in &died {
        let msg = WorkMessage {
            tenant: TENANT.into(),
            task_id: TaskId::parse(id.clone()).unwrap(),
            kind: WorkKind::Start,
        };
        let w = dying.clone();
        let run = tokio::spawn(async move { w.handle(&msg, None).await });
        let until = Instant::now() + Duration::from_secs(20);
        while at(&rig.task(id).await) == 0 && Instant::now() < until && !run.is_finished() {
            sleep(Duration::from_millis(10)).await;
        }
        run.abort();
        assert!(
            run.await.is_err_and(|e| e.is_cancelled()),
            "the run was killed mid-job"
        );
    }
    sleep(lease + Duration::from_millis(300)).await;

    // The sweep, re-run until its listing (an eventually consistent index) saw every task.
    let sweeper = rig.sweeper();
    let until = Instant::now() + Duration::from_secs(20);
    let mut sweeps = 0;
    let mut requeued = 0;
    loop {
        let r = sweeper.run(None).await.expect("sweep");
        sweeps += 1;
        requeued += r.requeued;
        if r.requeued >= trials || Instant::now() >= until {
            break;
        }
        sleep(Duration::from_millis(300)).await;
    }
    let workers = [
        rig.worker(rig.queue.clone(), settings(lease)),
        rig.worker(rig.queue.clone(), settings(lease)),
    ];
    let traffic = Traffic::new(None);
    let consumers = consume(&rig, &workers, &traffic, Duration::from_secs(30));
    let ids: Vec<String> = jobs.iter().map(|j| j.1.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(30 + trials as u64);
    let pending = rig.settle(&ids, false, deadline).await;
    consumers.drain_and_stop(Duration::from_secs(15)).await;

    // Finished tasks leave the sweep alone (once the index has caught up).
    let until = Instant::now() + Duration::from_secs(10);
    let mut after = sweeper.run(None).await.expect("sweep").requeued;
    while after > 0 && Instant::now() < until {
        sleep(Duration::from_millis(300)).await;
        after = sweeper.run(None).await.expect("sweep").requeued;
    }

    let mut problems = Vec::new();
    let mut resumed = 0;
    for (key, id) in &jobs {
        let t = rig.task(id).await;
        let mut bad = judge_completed(&rig, &t, key, n, &traffic);
        if pending.contains(id) {
            bad.push("LOST: not terminal by the deadline".into());
        }
        let starts = rig.entry(key, |e| e.starts.clone());
        if died.contains(id) {
            match starts.as_slice() {
                [0, s] if *s > 0 => resumed += 1,
                other => bad.push(format!("WRONG: runs started at {other:?}")),
            }
        } else if starts != [0] {
            bad.push(format!("DOUBLED: runs started at {starts:?}"));
        }
        problems.push((id.clone(), bad));
    }
    let ev = rig.store.violations();
    let (lost, doubled) = report("enqueue_crash", &problems);
    println!(
        "aws_faults enqueue_crash: trials={trials} tasks={trials} never_enqueued={trials} \
         dead_runs={} resumed_from_checkpoint={resumed} sweeps={sweeps} requeued={requeued} \
         requeued_after={after} lost={lost} doubled={doubled} emulator_violations={ev} [{}]",
        died.len(),
        traffic.summary(),
    );
    assert_eq!(requeued, trials, "the sweep found every orphan");
    assert_eq!(after, 0, "the sweep re-enqueued finished tasks");
    verdict(&rig, lost, doubled);
    rig.drop_all().await;
}
