//! 5. A retried `tasks/update`: the same answer sent twice, and three times at once.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::join_all;
use mcp_tasks_core::queue::WorkKind;
use mcp_tasks_core::task::TaskStatus;
use mcp_tasks_core::task::{TaskId, TaskRef};
use mcp_tasks_core::tenant::Tenant;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::consumers::{Traffic, consume, settings};
use crate::judge::{judge_completed, report, verdict};
use crate::rig::rig;
use crate::{TENANT, lock, rng, scale};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retried_update_has_one_effect() {
    let Some(rig) = rig("update").await else {
        return;
    };
    let _rng = rng("update_retry");
    let engine = rig.engine(rig.queue.clone());
    let settings = settings(Duration::from_secs(10));
    let workers = [
        rig.worker(rig.queue.clone(), settings.clone()),
        rig.worker(rig.queue.clone(), settings),
    ];
    let trials = 8 * scale();
    let n = 3;
    let mut jobs = Vec::new();
    for _ in 0..trials {
        jobs.push(rig.create(&engine, n, 10, true).await);
    }
    let ids: Vec<String> = jobs.iter().map(|j| j.1.clone()).collect();

    // Every job runs up to its question and parks.
    let parking = Traffic::new(None);
    let consumers = consume(&rig, &workers, &parking, Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(30 + trials as u64);
    let unparked = rig.settle(&ids, true, deadline).await;
    consumers.drain_and_stop(Duration::from_secs(10)).await;
    assert!(unparked.is_empty(), "never asked for input: {unparked:?}");

    // The answer, sent twice in a row or three times at once.
    let answer = json!({"go": {"action": "accept", "content": {}}});
    let answer: Map<String, Value> = answer.as_object().cloned().expect("an object");
    let mut problems: HashMap<String, Vec<String>> = HashMap::new();
    let mut updates = 0;
    let tenant = Tenant::from(TENANT);
    for (i, id) in ids.iter().enumerate() {
        let before = rig.task(id).await;
        let task_id = TaskId::parse(id.clone()).unwrap();
        if i % 2 == 0 {
            for _ in 0..2 {
                engine
                    .update(TaskRef::new(&tenant, &task_id), &answer)
                    .await
                    .expect("tasks/update");
                updates += 1;
            }
        } else {
            let all =
                join_all((0..3).map(|_| engine.update(TaskRef::new(&tenant, &task_id), &answer)))
                    .await;
            for r in all {
                r.expect("tasks/update");
                updates += 1;
            }
        }
        let after = rig.task(id).await;
        let bad = problems.entry(id.clone()).or_default();
        if after.version != before.version + 1 {
            bad.push(format!(
                "DOUBLED: {} writes for one answer",
                after.version - before.version
            ));
        }
        if after.status != TaskStatus::Working
            || after.input_responses.get("go") != answer.get("go")
            || after.input_responses.len() != 1
        {
            bad.push(format!(
                "LOST: {:?} with answers {:?}",
                after.status, after.input_responses
            ));
        }
    }

    // The resumes run (two consumers, so any second resume would race the first).
    let traffic = Traffic::new(None);
    let consumers = consume(&rig, &workers, &traffic, Duration::from_secs(30));
    let pending = rig
        .settle(&ids, false, deadline + Duration::from_secs(30))
        .await;
    consumers.drain_and_stop(Duration::from_secs(15)).await;

    let mut resumes = 0;
    for (key, id) in &jobs {
        let t = rig.task(id).await;
        let bad = problems.entry(id.clone()).or_default();
        bad.extend(judge_completed(&rig, &t, key, n, &traffic));
        if pending.contains(id) {
            bad.push("LOST: not terminal by the deadline".into());
        }
        let kinds: Vec<WorkKind> = lock(&traffic.messages)
            .get(id)
            .map(|m| m.values().copied().collect())
            .unwrap_or_default();
        let sent = kinds.iter().filter(|k| **k == WorkKind::Resume).count();
        resumes += sent;
        if sent != 1 {
            bad.push(format!("DOUBLED: {sent} resume messages ({kinds:?})"));
        }
        let answered = rig.entry(key, |e| e.answered_runs);
        if answered != 1 {
            bad.push(format!("DOUBLED: {answered} runs went on with the answer"));
        }
        // And a retry after the end is acked without a write.
        engine
            .update(
                TaskRef::new(&tenant, &TaskId::parse(id.clone()).unwrap()),
                &answer,
            )
            .await
            .expect("tasks/update");
        updates += 1;
        if rig.task(id).await != t {
            bad.push("DOUBLED: a late retry changed the finished task".into());
        }
    }
    let problems: Vec<(String, Vec<String>)> = problems.into_iter().collect();
    let ev = rig.store.violations();
    let (lost, doubled) = report("update_retry", &problems);
    println!(
        "aws_faults update_retry: trials={trials} tasks={trials} updates={updates} \
         resume_messages={resumes} lost={lost} doubled={doubled} emulator_violations={ev} [{}]",
        traffic.summary(),
    );
    verdict(&rig, lost, doubled);
    rig.drop_all().await;
}
