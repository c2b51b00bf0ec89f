//! 3. `tasks/cancel` racing the worker finishing, on DynamoDB's conditional writes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use mcp_tasks_core::queue::{WorkKind, WorkMessage};
use mcp_tasks_core::task::TaskStatus;
use mcp_tasks_core::task::{TaskId, TaskRef};
use mcp_tasks_core::tenant::Tenant;
use mcp_tasks_core::worker::Outcome;
use tokio::time::sleep;

use crate::consumers::settings;
use crate::judge::{report, verdict};
use crate::rig::rig;
use crate::tally::Entry;
use crate::{TENANT, rng, scale};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_racing_completion_ends_in_one_stable_state() {
    let Some(rig) = rig("cancel").await else {
        return;
    };
    let mut rng = rng("cancel_race");
    // The start messages go to SQS and stay there: each trial delivers its own message.
    let engine = rig.engine(rig.queue.clone());
    let worker = rig.worker(rig.queue.clone(), {
        let mut s = settings(Duration::from_secs(10));
        s.check_every = Duration::from_millis(20);
        s
    });
    let trials = 24 * scale();
    let parallel = 8;
    // Where each cancel is aimed, in turn: before the run (the cancel has landed when the
    // message is delivered), after its first step, after its last step (the cancel races the
    // last checkpoint and the completion), at its final step (the cancel's write races the
    // completion's), after the run ended. Aimed at what the job did, not at a wall-clock
    // guess, so the races are run whatever the load; the two ends are not races, and each has
    // one right outcome (checked below).
    const AIMS: [&str; 5] = ["before", "mid", "last_step", "at_end", "after"];
    let mut by_aim: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let (mut completed, mut cancelled) = (0, 0);
    let mut problems = Vec::new();
    let mut done = 0;
    while done < trials {
        let batch = (trials - done).min(parallel);
        let plans: Vec<(&str, u64, u64)> = (done..done + batch)
            .map(|i| (AIMS[i % AIMS.len()], rng.range(0, 25), rng.range(0, 10)))
            .collect();
        done += batch;
        let runs = plans.into_iter().map(|(aim, ms, jitter)| {
            let (rig, engine, worker) = (rig.clone(), engine.clone(), worker.clone());
            async move {
                let (key, id) = rig.create(&engine, 2, ms, false).await;
                let msg = WorkMessage {
                    tenant: TENANT.into(),
                    task_id: TaskId::parse(id.clone()).unwrap(),
                    kind: WorkKind::Start,
                };
                let ended = AtomicBool::new(false);
                let run = async {
                    let out = worker.handle(&msg, None).await;
                    ended.store(true, Ordering::SeqCst);
                    out
                };
                let cancel = async {
                    let reached = |e: &Entry| match aim {
                        "mid" => !e.completed_steps.is_empty(),
                        "last_step" => e.completed_steps.contains_key(&1),
                        "at_end" => e.effects > 0,
                        _ => false,
                    };
                    if aim != "before" {
                        while !ended.load(Ordering::SeqCst) && !rig.entry(&key, |e| reached(e)) {
                            sleep(Duration::from_millis(1)).await;
                        }
                    }
                    sleep(Duration::from_millis(jitter)).await;
                    engine
                        .cancel(TaskRef::new(
                            &Tenant::from(TENANT),
                            &TaskId::parse(id.clone()).unwrap(),
                        ))
                        .await
                        .expect("tasks/cancel");
                };
                let (first, ()) = if aim == "before" {
                    cancel.await;
                    (run.await, ())
                } else {
                    tokio::join!(run, cancel)
                };
                // A duplicate delivery after the race settles whatever the race left.
                let second = worker.handle(&msg, None).await;
                let settled = rig.task(&id).await;
                // Later: another cancel and another delivery change nothing.
                sleep(Duration::from_millis(500)).await;
                engine
                    .cancel(TaskRef::new(
                        &Tenant::from(TENANT),
                        &TaskId::parse(id.clone()).unwrap(),
                    ))
                    .await
                    .expect("tasks/cancel");
                let third = worker.handle(&msg, None).await;
                let later = rig.task(&id).await;
                let outs = [first, second, third].map(|o| o.expect("worker"));
                (aim, key, id, settled, later, outs)
            }
        });
        for (aim, key, id, settled, later, outs) in join_all(runs).await {
            let split = by_aim.entry(aim).or_default();
            match settled.status {
                TaskStatus::Completed => split.0 += 1,
                TaskStatus::Cancelled => split.1 += 1,
                _ => {}
            }
            let mut bad = Vec::new();
            // The ends of the range are not races: a cancel that landed before the message was
            // delivered always wins, and one made after the run ended changes nothing.
            match (aim, settled.status) {
                ("before", s) if s != TaskStatus::Cancelled => {
                    bad.push(format!("WRONG: cancelled before the run, then {s:?}"))
                }
                ("after", s) if s != TaskStatus::Completed => {
                    bad.push(format!("WRONG: cancelled after the run ended, then {s:?}"))
                }
                _ => {}
            }
            let finished: Vec<TaskStatus> = outs
                .iter()
                .filter_map(|o| match o {
                    Outcome::Finished(s) => Some(*s),
                    _ => None,
                })
                .collect();
            match settled.status {
                TaskStatus::Completed => completed += 1,
                TaskStatus::Cancelled => cancelled += 1,
                s => bad.push(format!("LOST: {s:?} after the race ({outs:?})")),
            }
            if settled.result.is_some() != (settled.status == TaskStatus::Completed) {
                bad.push(format!(
                    "WRONG: {:?} with result {:?}",
                    settled.status, settled.result
                ));
            }
            if finished.len() > 1 || finished.iter().any(|s| *s != settled.status) {
                bad.push(format!(
                    "DOUBLED: terminal writes {finished:?}, stored {:?}",
                    settled.status
                ));
            }
            let effects = rig.entry(&key, |e| e.effects);
            if settled.status == TaskStatus::Completed
                && (effects != 1 || finished != [TaskStatus::Completed])
            {
                bad.push(format!(
                    "DOUBLED: completed with {effects} effects, {finished:?}"
                ));
            }
            if effects > 1 {
                bad.push(format!("DOUBLED: effect ran {effects} times"));
            }
            let writes = rig.store.terminal_writes(&id);
            if writes != 1 {
                bad.push(format!("DOUBLED: {writes} terminal writes"));
            }
            if later != settled {
                bad.push(format!(
                    "DOUBLED: changed after the end: {:?} v{} -> {:?} v{}",
                    settled.status, settled.version, later.status, later.version
                ));
            }
            problems.push((id, bad));
        }
    }
    let ev = rig.store.violations();
    let (lost, doubled) = report("cancel_race", &problems);
    println!(
        "aws_faults cancel_race: trials={trials} completed={completed} cancelled={cancelled} \
         lost={lost} doubled={doubled} emulator_violations={ev} completed/cancelled by aim: {by_aim:?}"
    );
    verdict(&rig, lost, doubled);
    rig.drop_all().await;
}
