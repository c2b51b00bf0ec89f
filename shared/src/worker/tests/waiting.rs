//! A job waiting for one of its tenant's running places: one waiting message per task, a
//! mark the sweep honours, no copy that forks the wait.

use super::*;
use crate::quota::{MemoryRunSlots, RunSlots};

/// A rig whose tenant `t` may run one job, and whose one place is taken by another run.
async fn full_tenant() -> (Rig, Arc<MemoryRunSlots>) {
    let mut settings = fast();
    settings.quotas.max_running_jobs = 1;
    let mut r = rig(settings);
    let slots = Arc::new(MemoryRunSlots::default());
    assert!(
        slots
            .take(
                &crate::quota::SlotKey::runs_of(&"t".into()),
                "another-run",
                1,
                u64::MAX
            )
            .await
            .unwrap()
    );
    let worker = Arc::try_unwrap(r.worker)
        .ok()
        .expect("the rig's worker alone")
        .with_run_slots(slots.clone());
    r.worker = Arc::new(worker);
    (r, slots)
}

fn deadline() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(60))
}

fn waiting(msg: &WorkMessage, seq: u32, renew_at_ms: u64) -> WorkMessage {
    WorkMessage {
        kind: WorkKind::Waiting { seq, renew_at_ms },
        ..msg.clone()
    }
}

#[tokio::test]
async fn a_deferred_job_is_marked_and_the_sweep_leaves_it_alone() {
    let (mut r, _slots) = full_tenant().await;
    let msg = create(&mut r, json!({"n": 2})).await;
    let out = r.worker.handle(&msg, deadline()).await.unwrap();
    let Outcome::Deferred(next, delay) = out else {
        panic!("deferred: {out:?}");
    };
    assert_eq!(delay, DEFER_DELAY);
    let WorkKind::Waiting { seq, renew_at_ms } = next.kind else {
        panic!("a waiting message: {next:?}");
    };
    let task = status(&r, &msg).await;
    assert_eq!(seq, task.waiting_seq);
    let until = task.waiting_until_ms.expect("marked as waiting");
    assert!(
        until > now_ms() + WAIT_MARK.as_millis() as u64 - 5_000,
        "{until}"
    );
    assert!(renew_at_ms < until, "renewed before the mark runs out");
    assert_eq!(task.lease, None, "nothing runs it");
    // Quiet since its creation, unleased: an orphan, were it not for the mark.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let swept = r.engine.sweep(Duration::from_millis(1)).await.unwrap();
    assert_eq!(swept.requeued, 0, "{swept:?}");
    assert!(r.rx.try_recv().is_err(), "the sweep sent nothing");
}

#[tokio::test]
async fn copies_of_a_waiting_message_are_dropped_and_the_wait_renews_once() {
    let (mut r, _slots) = full_tenant().await;
    let msg = create(&mut r, json!({"n": 2})).await;
    let Outcome::Deferred(first, _) = r.worker.handle(&msg, deadline()).await.unwrap() else {
        panic!("deferred");
    };
    // A duplicate of the start message: another message already waits for the task.
    assert_eq!(
        r.worker.handle(&msg, deadline()).await.unwrap(),
        Outcome::Dropped
    );
    // The waiting message before its renewal: sent on as it is, nothing read or written.
    let version = status(&r, &msg).await.version;
    let out = r.worker.handle(&first, deadline()).await.unwrap();
    assert_eq!(out, Outcome::Deferred(first.clone(), DEFER_DELAY));
    assert_eq!(status(&r, &msg).await.version, version);
    // Due for renewal, twice (a duplicate delivery): the first renews, the second is stale.
    let WorkKind::Waiting { seq, .. } = first.kind else {
        panic!("{first:?}");
    };
    let due = waiting(&msg, seq, 0);
    let Outcome::Deferred(renewed, _) = r.worker.handle(&due, deadline()).await.unwrap() else {
        panic!("renewed");
    };
    assert!(matches!(renewed.kind, WorkKind::Waiting { seq: s, .. } if s == seq + 1));
    assert_eq!(
        r.worker.handle(&due, deadline()).await.unwrap(),
        Outcome::Dropped
    );
}

#[tokio::test]
async fn a_lost_wait_is_taken_over_and_a_freed_place_runs_the_job() {
    let (mut r, slots) = full_tenant().await;
    let msg = create(&mut r, json!({"n": 2})).await;
    r.worker.handle(&msg, deadline()).await.unwrap();
    // Its mark ran out (every copy of its message lost): the sweep's message takes over.
    let mut task = status(&r, &msg).await;
    task.waiting_until_ms = Some(now_ms() - 1);
    r.store.update(&task).await.unwrap();
    let recover = WorkMessage {
        kind: WorkKind::Recover,
        ..msg.clone()
    };
    let out = r.worker.handle(&recover, deadline()).await.unwrap();
    assert!(
        matches!(out, Outcome::Deferred(ref m, _) if matches!(m.kind, WorkKind::Waiting { .. })),
        "{out:?}"
    );
    // The place frees: the waiting message runs the job, and the mark is gone.
    slots
        .release(&crate::quota::SlotKey::runs_of(&"t".into()), "another-run")
        .await
        .unwrap();
    let Outcome::Deferred(next, _) = out else {
        unreachable!()
    };
    let out = r.worker.handle(&next, deadline()).await.unwrap();
    assert_eq!(out, Outcome::Finished(TaskStatus::Completed));
    assert_eq!(status(&r, &msg).await.waiting_until_ms, None);
}

#[tokio::test]
async fn a_sleeping_jobs_early_wake_up_waits_for_its_wake_time_unwritten() {
    let (mut r, _slots) = full_tenant().await;
    let msg = create(&mut r, json!({"n": 2})).await;
    let mut task = status(&r, &msg).await;
    task.wake_at_ms = Some(now_ms() + 60_000);
    task.wake_seq = 3;
    r.store.update(&task).await.unwrap();
    let hop = WorkMessage {
        kind: WorkKind::Wake(3),
        ..msg.clone()
    };
    let version = status(&r, &msg).await.version;
    let out = r.worker.handle(&hop, deadline()).await.unwrap();
    let Outcome::Deferred(next, delay) = out else {
        panic!("deferred: {out:?}");
    };
    assert_eq!(next, hop, "its wake-up chain goes on");
    assert!(delay > Duration::from_secs(55), "{delay:?}");
    assert_eq!(status(&r, &msg).await.version, version);
}
