//! The sweep function's schedule event: orphans requeued, expired tasks purged.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;

use super::*;

#[tokio::test]
async fn the_sample_schedule_event_parses_and_a_sweep_requeues_orphans() {
    let event: EventBridgeEvent<Value> = serde_json::from_str(SCHEDULE_EVENT).unwrap();
    assert_eq!(event.detail_type, "Scheduled Event");
    let mut r = rig();
    let (_, msg) = sample();
    seed(&r, &msg).await; // persisted, never enqueued: an orphan
    let config = Config {
        sweep_stale: Duration::ZERO,
        ..env(Role::Sweep, &BASE).unwrap()
    };
    let report = Sweeper::new(&config, &r.ports).run(None).await.unwrap();
    assert_eq!(
        report,
        SweepReport {
            requeued: 1,
            read: 1,
            complete: true,
            ..SweepReport::default()
        }
    );
    assert_eq!(r._rx.recv().await.unwrap().task_id, msg.task_id);
}

#[tokio::test]
async fn the_purge_runs_when_the_orphan_sweep_fails() {
    let r = rig();
    let mut expired = TaskRecord::new(
        "t".into(),
        crate::task::TaskId::from_static("tsk_x"),
        "wait",
        Some(1000),
        1000,
        json!({}),
    );
    expired.created_at_ms = crate::clock::now_ms() - 60_000;
    r.store.create(&expired, &json!({})).await.unwrap();
    r.store.fail_listing.store(true, Ordering::SeqCst);
    let config = env(Role::Sweep, &BASE).unwrap();
    let out = Sweeper::new(&config, &r.ports).run(None).await;
    assert!(out.is_err(), "the failed half is reported");
    assert_eq!(
        r.store.get(expired.key()).await.unwrap(),
        None,
        "purged all the same"
    );
}
