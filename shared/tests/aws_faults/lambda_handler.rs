//! 6. The Lambda worker handler itself ([`SqsWorker::handle`]) under duplicated work.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use mcp_tasks_core::aws::lambda::{Config, Ports, Role, SqsWorker};
use mcp_tasks_core::jobs::text_result;
use mcp_tasks_core::queue::WorkQueue;
use mcp_tasks_core::task::TaskStatus;
use mcp_tasks_core::tenant::Tenant;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::consumers::{Consumers, Traffic, settings};
use crate::judge::{report, verdict};
use crate::rig::{Rig, Twice, rig};
use crate::{MAX_RECEIVES, TENANT, lock, rng, scale};

/// The event source mapping: batches from the queue through [`SqsWorker::handle`], deleting
/// what it did not report as failed.
fn consume_lambda(
    rig: &Arc<Rig>,
    workers: Vec<Arc<SqsWorker>>,
    traffic: &Arc<Traffic>,
    invocation: Duration,
) -> Consumers {
    let stop = Arc::new(AtomicBool::new(false));
    let handles = workers
        .into_iter()
        .map(|w| {
            let (rig, traffic, stop) = (rig.clone(), traffic.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let batch = rig.receive(1).await;
                    if batch.is_empty() {
                        continue;
                    }
                    *lock(&traffic.last_seen) = Instant::now();
                    traffic.deliveries.fetch_add(batch.len(), Ordering::Relaxed);
                    let records: Vec<Value> = batch
                        .iter()
                        .map(|d| {
                            json!({
                                "messageId": d.message_id,
                                "receiptHandle": d.receipt,
                                "body": d.body,
                                "attributes": {"ApproximateReceiveCount": d.receives.to_string()},
                                "eventSource": "aws:sqs",
                            })
                        })
                        .collect();
                    let event: SqsEvent =
                        serde_json::from_value(json!({ "Records": records })).expect("an event");
                    let out = w.handle(event, Instant::now() + invocation).await;
                    for d in &batch {
                        let failed = out
                            .batch_item_failures
                            .iter()
                            .any(|f| f.item_identifier == d.message_id);
                        if failed {
                            traffic.count("retried");
                        } else if rig.ack(d).await {
                            traffic.count("deleted");
                        } else {
                            traffic.count("stale_receipt");
                        }
                    }
                }
            })
        })
        .collect();
    Consumers {
        stop,
        handles,
        traffic: traffic.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_lambda_worker_handler_completes_duplicated_work_once() {
    let Some(rig) = rig("lambda").await else {
        return;
    };
    let mut rng = rng("lambda_handler");
    let twice: Arc<dyn WorkQueue> = Arc::new(Twice(rig.queue.clone()));
    let engine = rig.engine(twice.clone());
    let config = Config::from_lookup(Role::Worker, |k| match k {
        "TABLE_NAME" => Some(rig.table.clone()),
        "QUEUE_URL" => Some(rig.queue_url.clone()),
        "MAX_RECEIVES" => Some(MAX_RECEIVES.to_string()),
        _ => None,
    })
    .expect("worker config");
    let ports = Ports {
        store: rig.store.clone(),
        queue: twice,
        run_slots: None,
    };
    let workers: Vec<Arc<SqsWorker>> = (0..2)
        .map(|_| {
            Arc::new(SqsWorker::with_settings(
                &config,
                &ports,
                Arc::new(mcp_tasks_core::tools::Registry::new(
                    mcp_tasks_demo_tools::tools(),
                )),
                settings(Duration::from_secs(10)),
            ))
        })
        .collect();
    let trials = 8 * scale();
    let mut jobs = Vec::new();
    for _ in 0..trials {
        // The built-in `wait`: over a second it sleeps (parked, then woken by a delayed
        // message: two runs), up to a second it is one step and the final one; every run
        // does at least one step, so no task may take more runs than that. (`hash_chain` would check a digest, but costs seconds of CPU
        // per step in a debug build.)
        let tenths = rng.range(3, 25);
        let task = engine
            .create_task(
                &Tenant::from(TENANT),
                "wait",
                json!({"seconds": tenths as f64 / 10.0}),
                Value::Null,
                json!({}),
            )
            .await
            .expect("create_task");
        jobs.push((tenths, task.task_id.to_string()));
    }
    let traffic = Traffic::new(None);
    let consumers = consume_lambda(&rig, workers, &traffic, Duration::from_millis(500));
    let ids: Vec<String> = jobs.iter().map(|j| j.1.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(40 + 2 * trials as u64);
    let pending = rig.settle(&ids, false, deadline).await;
    consumers.drain_and_stop(Duration::from_secs(15)).await;

    let mut problems = Vec::new();
    let mut handed_over = 0;
    for (tenths, id) in &jobs {
        let t = rig.task(id).await;
        let mut bad = Vec::new();
        if pending.contains(id) || t.status != TaskStatus::Completed {
            bad.push(format!("LOST: {:?} {:?}", t.status, t.error));
        } else {
            let want = text_result(format!("Waited {} s.", *tenths as f64 / 10.0));
            if t.result.as_ref() != Some(&want) {
                bad.push(format!("WRONG result {:?} (want {want})", t.result));
            }
            if t.attempts > 1 {
                handed_over += 1;
            }
            // Every run completes at least one step, and the job has one step per second
            // waited plus the final one: more runs than steps means a run did nothing (a
            // duplicate got in, or a run lost its lease).
            let steps = u32::try_from(tenths.div_ceil(10) + 1).unwrap_or(u32::MAX);
            if t.attempts > steps {
                bad.push(format!("DOUBLED: {} runs for {steps} steps", t.attempts));
            }
        }
        let writes = rig.store.terminal_writes(id);
        if writes != 1 {
            bad.push(format!("DOUBLED: {writes} terminal writes"));
        }
        if !bad.is_empty() {
            for line in rig.store.journal(id) {
                eprintln!("    {line}");
            }
        }
        problems.push((id.clone(), bad));
    }
    let ev = rig.store.violations();
    let (lost, doubled) = report("lambda_handler", &problems);
    println!(
        "aws_faults lambda_handler: trials={trials} tasks={trials} deliveries={} \
         handed_over={handed_over} lost={lost} doubled={doubled} \
         emulator_violations={ev} [{}]",
        traffic.deliveries.load(Ordering::Relaxed),
        traffic.summary(),
    );
    verdict(&rig, lost, doubled);
    rig.drop_all().await;
}
