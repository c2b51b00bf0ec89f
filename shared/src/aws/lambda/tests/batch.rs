//! The worker function's SQS batches: the retry policy, outages, live runs, bad records.

use super::*;
use crate::task::Lease;
use crate::task::TaskId;

#[test]
fn the_retry_policy_never_polls_forever_and_never_kills_a_live_run() {
    let busy = Ok(Outcome::Busy(Duration::from_secs(3)));
    let waiting = WorkMessage {
        tenant: "t".into(),
        task_id: TaskId::from_static("tsk_1"),
        kind: crate::queue::WorkKind::Start,
    };
    let err: Result<Outcome, WorkerError> = Err(StoreError::backend("down").into());
    assert_eq!(decide(&busy, false), Action::Retry);
    assert_eq!(decide(&busy, true), Action::Done);
    assert_eq!(decide(&err, false), Action::Retry);
    assert_eq!(decide(&err, true), Action::GiveUp);
    // A saved, handed-over job whose continuation could not be sent is never failed.
    let lost_continuation: Result<Outcome, WorkerError> =
        Err(crate::queue::QueueError::new("down").into());
    assert_eq!(decide(&lost_continuation, true), Action::Retry);
    assert_eq!(
        decide(
            &Ok(Outcome::Deferred(waiting, Duration::from_secs(5))),
            true
        ),
        Action::Done
    );
    for o in [
        Outcome::Dropped,
        Outcome::Continued,
        Outcome::Superseded,
        Outcome::WaitingForInput,
        Outcome::Finished(TaskStatus::Completed),
    ] {
        assert_eq!(decide(&Ok(o.clone()), false), Action::Done, "{o:?}");
        assert_eq!(decide(&Ok(o), true), Action::Done);
    }
}

#[tokio::test]
async fn the_sample_sqs_event_runs_its_task_to_completion() {
    let r = rig();
    let (event, msg) = sample();
    seed(&r, &msg).await;
    let worker = SqsWorker::new(&worker_config("5"), &r.ports, wait_tools());
    let out = worker.handle(event, soon()).await;
    assert!(out.batch_item_failures.is_empty());
    assert_eq!(status(&r, &msg).await.status, TaskStatus::Completed);
    // The response is what the runtime sends back.
    assert_eq!(
        serde_json::to_value(&out).unwrap(),
        json!({"batchItemFailures": []})
    );
}

#[tokio::test]
async fn a_store_outage_retries_the_message_until_its_last_delivery() {
    let r = rig();
    let (event, msg) = sample();
    seed(&r, &msg).await;
    let worker = SqsWorker::new(&worker_config("3"), &r.ports, wait_tools());
    r.store.fail_gets.store(1, Ordering::SeqCst);
    let out = worker.handle(with_receives(event.clone(), 2), soon()).await;
    let ids: Vec<_> = out
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(ids, [event.records[0].message_id.as_deref().unwrap()]);
    assert_eq!(status(&r, &msg).await.status, TaskStatus::Working);

    // The last delivery fails too: the task is failed and the message deleted.
    r.store.fail_gets.store(1, Ordering::SeqCst);
    let out = worker.handle(with_receives(event, 3), soon()).await;
    assert!(out.batch_item_failures.is_empty());
    let t = status(&r, &msg).await;
    assert_eq!(t.status, TaskStatus::Failed);
    assert!(t.error.is_some());
}

#[tokio::test]
async fn when_even_giving_up_fails_the_message_goes_to_the_dlq() {
    let r = rig();
    let (event, msg) = sample();
    seed(&r, &msg).await;
    let worker = SqsWorker::new(&worker_config("3"), &r.ports, wait_tools());
    r.store.fail_gets.store(2, Ordering::SeqCst);
    let out = worker.handle(with_receives(event, 3), soon()).await;
    assert_eq!(out.batch_item_failures.len(), 1);
}

#[tokio::test]
async fn a_message_for_a_task_held_by_a_live_run_is_retried_then_dropped() {
    let r = rig();
    let (event, msg) = sample();
    seed(&r, &msg).await;
    let mut t = status(&r, &msg).await;
    t.lease = Some(Lease {
        owner: "alive".into(),
        expires_at_ms: crate::clock::now_ms() + 60_000,
    });
    r.store.update(&t).await.unwrap();
    let worker = SqsWorker::new(&worker_config("3"), &r.ports, wait_tools());
    let out = worker.handle(with_receives(event.clone(), 1), soon()).await;
    assert_eq!(out.batch_item_failures.len(), 1);
    let out = worker.handle(with_receives(event, 3), soon()).await;
    assert!(out.batch_item_failures.is_empty());
    assert_eq!(
        status(&r, &msg).await.status,
        TaskStatus::Working,
        "the live run keeps its task"
    );
}

#[tokio::test]
async fn an_unreadable_record_fails_alone_not_the_batch() {
    let r = rig();
    let (event, msg) = sample();
    seed(&r, &msg).await;
    let mut bad = event.records[0].clone();
    bad.message_id = Some("bad-1".into());
    bad.body = Some("not json".into());
    let mut event = event;
    event.records.push(bad);
    let worker = SqsWorker::new(&worker_config("5"), &r.ports, wait_tools());
    let out = worker.handle(event, soon()).await;
    let ids: Vec<_> = out
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(ids, ["bad-1"]);
    assert_eq!(status(&r, &msg).await.status, TaskStatus::Completed);
}
