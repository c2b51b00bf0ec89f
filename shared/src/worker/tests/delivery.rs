//! Messages: duplicates, missing or finished tasks, unknown tools, where arguments are read.

use super::*;
use crate::task::TaskId;

#[tokio::test]
async fn a_duplicate_message_never_runs_the_job_twice() {
    let mut r = rig(fast());
    let msg = create(&mut r, json!({"n": 5})).await;
    let (a, b) = tokio::join!(r.worker.handle(&msg, None), r.worker.handle(&msg, None));
    let outs = [a.unwrap(), b.unwrap()];
    let finished = outs
        .iter()
        .filter(|o| **o == Outcome::Finished(TaskStatus::Completed))
        .count();
    assert_eq!(finished, 1, "{outs:?}");
    assert!(
        outs.iter().any(|o| matches!(o, Outcome::Busy(_))),
        "the duplicate finds the lease held: {outs:?}"
    );
    assert_eq!(r.worker.handle(&msg, None).await.unwrap(), Outcome::Dropped);
    assert_eq!(r.finished.load(Ordering::SeqCst), 1);
}

/// The job gets the arguments kept beside the record; a record of an earlier build runs
/// with the arguments inside it; a task whose arguments are gone fails, saying so.
#[tokio::test]
async fn a_run_reads_its_arguments_once_from_wherever_they_were_stored() {
    let mut r = rig(fast());
    let msg = create(&mut r, json!({"n": 2})).await;
    let out = r.worker.handle(&msg, None).await.unwrap();
    assert_eq!(out, Outcome::Finished(TaskStatus::Completed));
    let done = status(&r, &msg).await;
    assert_eq!(done.result.unwrap()["content"][0]["text"], "counted to 2");
    assert_eq!(done.inline_arguments, None);

    let mut old = TaskRecord::new(
        "t".into(),
        crate::task::TaskId::generate(),
        "count",
        None,
        1000,
        json!({}),
    );
    old.inline_arguments = Some(json!({"n": 4}));
    r.store.create(&old, &Value::Null).await.unwrap();
    let msg = WorkMessage {
        tenant: "t".into(),
        task_id: old.task_id.clone(),
        kind: WorkKind::Start,
    };
    r.worker.handle(&msg, None).await.unwrap();
    let done = status(&r, &msg).await;
    assert_eq!(done.result.unwrap()["content"][0]["text"], "counted to 4");

    let msg = create(&mut r, json!({"n": 2})).await;
    // Gone from the store (a hand edit, a half-restored backup): a clear failure.
    r.store.lose_arguments(msg.key());
    let out = r.worker.handle(&msg, None).await.unwrap();
    assert_eq!(out, Outcome::Finished(TaskStatus::Failed));
    let failed = status(&r, &msg).await;
    assert!(
        failed
            .error
            .unwrap()
            .message
            .contains("arguments are missing"),
        "the failure names the cause"
    );
}

#[tokio::test]
async fn messages_for_missing_or_finished_tasks_are_dropped() {
    let mut r = rig(fast());
    let ghost = WorkMessage {
        tenant: "t".into(),
        task_id: TaskId::from_static("tsk_ghost"),
        kind: WorkKind::Start,
    };
    assert_eq!(
        r.worker.handle(&ghost, None).await.unwrap(),
        Outcome::Dropped
    );
    let msg = create(&mut r, json!({"n": 1})).await;
    r.worker.handle(&msg, None).await.unwrap();
    let foreign = WorkMessage {
        tenant: "other".into(),
        ..msg.clone()
    };
    assert_eq!(
        r.worker.handle(&foreign, None).await.unwrap(),
        Outcome::Dropped
    );
    assert_eq!(r.worker.handle(&msg, None).await.unwrap(), Outcome::Dropped);
}

/// A task whose tool this worker does not know (yet): within the grace after its creation
/// it goes back to the queue untouched; after it, it fails saying why.
#[tokio::test]
async fn an_unknown_tool_is_waited_for_then_failed() {
    let r = rig(WorkerSettings {
        unknown_tool_grace: Duration::from_secs(600),
        ..fast()
    });
    let young = TaskRecord::new(
        "t".into(),
        crate::task::TaskId::generate(),
        "newer",
        None,
        1000,
        json!({}),
    );
    r.store.create(&young, &json!({})).await.unwrap();
    let msg = |t: &TaskRecord| WorkMessage {
        tenant: "t".into(),
        task_id: t.task_id.clone(),
        kind: WorkKind::Start,
    };
    let out = r.worker.handle(&msg(&young), None).await.unwrap();
    assert_eq!(out, Outcome::Deferred(msg(&young), UNKNOWN_TOOL_RETRY));
    let kept = status(&r, &msg(&young)).await;
    assert_eq!(kept, young, "nothing written while waiting for the tool");

    let mut old = TaskRecord::new(
        "t".into(),
        crate::task::TaskId::generate(),
        "newer",
        None,
        1000,
        json!({}),
    );
    old.created_at_ms -= 601_000;
    r.store.create(&old, &json!({})).await.unwrap();
    let out = r.worker.handle(&msg(&old), None).await.unwrap();
    assert_eq!(out, Outcome::Finished(TaskStatus::Failed));
    let failed = status(&r, &msg(&old)).await;
    assert!(
        failed
            .error
            .unwrap()
            .message
            .contains("no longer available")
    );
}
