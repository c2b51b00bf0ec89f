//! Crashes and failures: resuming after a lease, panics, abandon, jobs that keep dying.

use super::*;
use crate::task::TaskId;

// Real time: leases are wall-clock (they are shared between machines).
#[tokio::test]
async fn a_crashed_run_resumes_from_its_last_checkpoint_after_the_lease_expires() {
    let mut r = rig(WorkerSettings {
        lease: Duration::from_secs(1),
        ..fast()
    });
    let msg = create(&mut r, json!({"n": 30, "ms": 10})).await;
    let worker = r.worker.clone();
    let m = msg.clone();
    let crashed = tokio::spawn(async move { worker.handle(&m, None).await });
    tokio::time::sleep(Duration::from_millis(120)).await;
    crashed.abort(); // the "process" dies mid-step
    let _ = crashed.await;
    let t = status(&r, &msg).await;
    let saved = t.checkpoint.as_u64().unwrap();
    assert!(saved > 0);
    // While the dead run's lease is live, a redelivery is told to come back later...
    assert!(matches!(
        r.worker.handle(&msg, None).await.unwrap(),
        Outcome::Busy(_)
    ));
    // ...and once it expires, the job resumes and completes once.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let out = r.worker.handle(&msg, None).await.unwrap();
    assert_eq!(out, Outcome::Finished(TaskStatus::Completed));
    let t = status(&r, &msg).await;
    assert_eq!(t.attempts, 2);
    assert_eq!(
        t.interruptions, 0,
        "the dead run was counted, then progress reset the count"
    );
    assert_eq!(r.finished.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_panicking_step_fails_its_task_instead_of_the_worker() {
    let mut r = rig(fast());
    r.engine
        .create_task(&"t".into(), "boom", json!({}), Value::Null, json!({}))
        .await
        .unwrap();
    let msg = r.rx.recv().await.unwrap();
    let out = r.worker.handle(&msg, None).await.unwrap();
    assert_eq!(out, Outcome::Finished(TaskStatus::Failed));
    let t = status(&r, &msg).await;
    assert_eq!(t.error.unwrap().code, crate::protocol::INTERNAL_ERROR);
    assert!(t.lease.is_none());
}

#[tokio::test]
async fn abandon_fails_only_working_tasks_that_no_live_run_holds() {
    let mut r = rig(fast());
    // Unheld and working: failed, once.
    let msg = create(&mut r, json!({"n": 1})).await;
    assert!(r.worker.abandon(&msg).await.unwrap());
    let t = status(&r, &msg).await;
    assert_eq!(t.status, TaskStatus::Failed);
    assert_eq!(t.error.unwrap().code, crate::protocol::INTERNAL_ERROR);
    assert!(!r.worker.abandon(&msg).await.unwrap(), "terminal stays put");

    // Held by a live run: left to that run.
    let msg = create(&mut r, json!({"n": 1})).await;
    let mut t = status(&r, &msg).await;
    t.lease = Some(Lease {
        owner: "alive".into(),
        expires_at_ms: now_ms() + 60_000,
    });
    r.store.update(&t).await.unwrap();
    assert!(!r.worker.abandon(&msg).await.unwrap());
    assert_eq!(status(&r, &msg).await.status, TaskStatus::Working);

    // A requested cancel wins over the failure.
    let msg = create(&mut r, json!({"n": 1})).await;
    let mut t = status(&r, &msg).await;
    t.cancel_requested = true;
    r.store.update(&t).await.unwrap();
    assert!(r.worker.abandon(&msg).await.unwrap());
    assert_eq!(status(&r, &msg).await.status, TaskStatus::Cancelled);

    // Gone: nothing to do.
    let ghost = WorkMessage {
        task_id: TaskId::from_static("tsk_ghost"),
        ..msg
    };
    assert!(!r.worker.abandon(&ghost).await.unwrap());
}

#[tokio::test]
async fn a_job_that_keeps_dying_is_failed_not_retried_forever() {
    let mut r = rig(fast());
    let max = fast().max_interruptions;
    for (died_before, want) in [(max - 1, TaskStatus::Completed), (max, TaskStatus::Failed)] {
        let msg = create(&mut r, json!({"n": 1})).await;
        // The last run died holding a lease that has since expired.
        let mut t = status(&r, &msg).await;
        t.interruptions = died_before;
        t.lease = Some(Lease {
            owner: "dead".into(),
            expires_at_ms: 1,
        });
        r.store.update(&t).await.unwrap();
        let out = r.worker.handle(&msg, None).await.unwrap();
        assert_eq!(out, Outcome::Finished(want), "after {died_before} deaths");
        // A run that saves progress clears the count; one that is refused keeps it.
        let want = if want == TaskStatus::Failed {
            died_before + 1
        } else {
            0
        };
        assert_eq!(status(&r, &msg).await.interruptions, want);
    }
}

/// A job that saves a checkpoint and then kills its process, every run: the in-a-row
/// count is reset each time, the total is not, and bounds it.
#[tokio::test]
async fn a_job_that_dies_after_every_checkpoint_is_failed_in_the_end() {
    let mut r = rig(fast());
    let max = fast().max_deaths;
    for (died_before, want) in [(max - 1, TaskStatus::Completed), (max, TaskStatus::Failed)] {
        let msg = create(&mut r, json!({"n": 1})).await;
        let mut t = status(&r, &msg).await;
        t.interruptions = 0; // it saved progress before each death
        t.deaths = died_before;
        t.lease = Some(Lease {
            owner: "dead".into(),
            expires_at_ms: 1,
        });
        r.store.update(&t).await.unwrap();
        let out = r.worker.handle(&msg, None).await.unwrap();
        assert_eq!(out, Outcome::Finished(want), "after {died_before} deaths");
        assert_eq!(status(&r, &msg).await.deaths, died_before + 1);
    }
}
