//! Cancellation under a live run, racing completion, seen within a check; what checks read.

use super::*;

/// The 2025-11-25 cancel marks a task held by a live run `cancelled` at once; the run
/// stops at its next check and writes nothing over it, and the job never finishes.
#[tokio::test]
async fn a_cancel_at_once_under_a_live_run_stops_it_without_a_second_write() {
    let mut r = rig(fast());
    let msg = create(&mut r, json!({"n": 1000, "ms": 5})).await;
    let cancel = async {
        // Let the run take the lease and save a few checkpoints first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let held = status(&r, &msg).await;
        assert!(held.lease.is_some(), "a run holds the task");
        r.engine
            .cancel_at_once(TaskRef::new(&"t".into(), &msg.task_id))
            .await
            .unwrap();
        let t = status(&r, &msg).await;
        assert_eq!(
            t.status,
            TaskStatus::Cancelled,
            "cancelled before the answer"
        );
        t
    };
    let (out, cancelled) = tokio::join!(r.worker.handle(&msg, None), cancel);
    assert!(
        !matches!(out, Ok(Outcome::Finished(TaskStatus::Completed))),
        "{out:?}"
    );
    assert_eq!(
        status(&r, &msg).await,
        cancelled,
        "the run wrote nothing after"
    );
    assert_eq!(
        r.finished.load(Ordering::SeqCst),
        0,
        "the job did not finish"
    );
    assert_eq!(r.worker.handle(&msg, None).await.unwrap(), Outcome::Dropped);
}

#[tokio::test]
async fn cancel_racing_completion_ends_in_exactly_one_terminal_state() {
    let mut r = rig(fast());
    let mut seen = std::collections::HashSet::new();
    for i in 0..60 {
        let msg = create(&mut r, json!({"n": 2, "ms": i % 7})).await;
        let delay = Duration::from_millis(i % 20);
        let cancel = async {
            tokio::time::sleep(delay).await;
            r.engine
                .cancel(TaskRef::new(&"t".into(), &msg.task_id))
                .await
                .unwrap();
        };
        let (out, ()) = tokio::join!(r.worker.handle(&msg, None), cancel);
        out.unwrap();
        // A cancel that lands after the worker stopped leaves the flag for the next
        // delivery, which must settle it too.
        r.worker.handle(&msg, None).await.unwrap();
        let t = status(&r, &msg).await;
        assert!(t.status.is_terminal(), "{:?}", t.status);
        assert_eq!(t.result.is_some(), t.status == TaskStatus::Completed);
        seen.insert(t.status);
        let before = t.clone();
        r.engine
            .cancel(TaskRef::new(&"t".into(), &msg.task_id))
            .await
            .unwrap();
        r.worker.handle(&msg, None).await.unwrap();
        assert_eq!(
            status(&r, &msg).await,
            before,
            "terminal tasks never change"
        );
    }
    assert!(seen.contains(&TaskStatus::Cancelled));
}

// Virtual time: the bound below is the check interval's contract, not a speed claim.
#[tokio::test(start_paused = true)]
async fn cancellation_is_seen_by_a_running_job_within_one_check_interval() {
    let mut r = rig(WorkerSettings {
        check_every: Duration::from_millis(100),
        ..fast()
    });
    let msg = create(&mut r, json!({"n": 1, "ms": 60_000})).await;
    let worker = r.worker.clone();
    let m = msg.clone();
    let run = tokio::spawn(async move { worker.handle(&m, None).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let asked = Instant::now();
    r.engine
        .cancel(TaskRef::new(&"t".into(), &msg.task_id))
        .await
        .unwrap();
    let out = run.await.unwrap().unwrap();
    assert_eq!(out, Outcome::Finished(TaskStatus::Cancelled));
    assert!(
        asked.elapsed() <= Duration::from_millis(100),
        "{:?}",
        asked.elapsed()
    );
}

#[tokio::test]
async fn a_duplicate_during_a_cancel_never_writes_cancelled_under_a_live_run() {
    let mut r = rig(fast());
    let msg = create(&mut r, json!({"n": 1000, "ms": 5})).await;
    let mut t = status(&r, &msg).await;
    // Another run holds the task, and the client asked to cancel.
    t.lease = Some(Lease {
        owner: "the-other-run".into(),
        expires_at_ms: now_ms() + 60_000,
    });
    t.cancel_requested = true;
    r.store.update(&t).await.unwrap();
    let out = r.worker.handle(&msg, None).await.unwrap();
    assert!(matches!(out, Outcome::Busy(_)), "{out:?}");
    let after = status(&r, &msg).await;
    assert_eq!(
        after.status,
        TaskStatus::Working,
        "the live run writes cancelled itself"
    );
    assert_eq!(after.lease.unwrap().owner, "the-other-run");
}

/// Reads of the record while a one-second job runs with checkpoints every `checkpoint_ms`
/// and checks every 100 ms.
async fn reads_of_a_running_job(checkpoint_ms: u64) -> usize {
    let store = Arc::new(HangsAfter {
        inner: MemoryStore::new(),
        ok: usize::MAX,
        writes: AtomicUsize::new(0),
        reads: AtomicUsize::new(0),
    });
    let (queue, mut rx) = LocalQueue::new();
    let queue = Arc::new(queue);
    let def = ToolDef {
        name: "count",
        description: "test tool",
        input_schema: json!({"type": "object"}),
        policy: Policy::Optional,
    };
    let tools = Arc::new(Registry::new(vec![Arc::new(Counter {
        def,
        finished: Arc::new(AtomicUsize::new(0)),
    }) as Arc<dyn Tool>]));
    let engine = Engine::new(store.clone(), queue.clone(), TaskSettings::default());
    let settings = WorkerSettings {
        check_every: Duration::from_millis(100),
        checkpoint_every: Duration::from_millis(checkpoint_ms),
        ..WorkerSettings::default()
    };
    let worker = Worker::new(store.clone(), queue, tools, settings);
    engine
        .create_task(
            &"t".into(),
            "count",
            json!({"n": 20, "ms": 50}),
            Value::Null,
            json!({}),
        )
        .await
        .unwrap();
    let msg = rx.recv().await.unwrap();
    let before = store.reads.load(Ordering::SeqCst);
    let out = worker.handle(&msg, None).await.unwrap();
    assert_eq!(out, Outcome::Finished(TaskStatus::Completed));
    store.reads.load(Ordering::SeqCst) - before
}

#[tokio::test]
async fn a_job_that_checkpoints_is_written_not_read_and_one_that_does_not_is_checked() {
    // Each checkpoint write is conditional on the run's version: it sees a cancel request
    // or a lost lease as a read would, so it stands in for the check.
    let checkpointing = reads_of_a_running_job(100).await;
    assert!(checkpointing <= 3, "{checkpointing} reads");
    // Without checkpoints the checks read the record every interval.
    let silent = reads_of_a_running_job(60_000).await;
    assert!(
        silent >= 6,
        "{silent} reads: a check every 100 ms for about a second"
    );
}
