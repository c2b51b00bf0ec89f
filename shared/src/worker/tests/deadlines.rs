//! Deadlines and budgets: hand-overs, short invocations, hung store calls, the CPU quota.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_deadline_hands_over_to_a_continuation_that_resumes() {
    let mut r = rig(fast());
    let msg = create(&mut r, json!({"n": 20, "ms": 20})).await;
    let mut hops = 0;
    let mut next = msg.clone();
    loop {
        let deadline = Instant::now() + Duration::from_millis(150);
        match r.worker.handle(&next, Some(deadline)).await.unwrap() {
            Outcome::Continued => {
                hops += 1;
                next = r.rx.recv().await.unwrap();
                assert_eq!(next.kind, WorkKind::Continue);
                let t = status(&r, &msg).await;
                assert!(
                    t.lease.is_none(),
                    "the lease is released for the next invocation"
                );
                assert!(t.checkpoint.as_u64().unwrap() > 0);
            }
            Outcome::Finished(s) => {
                assert_eq!(s, TaskStatus::Completed);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(hops >= 3, "needed {hops} continuations");
    assert_eq!(r.finished.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn an_invocation_shorter_than_the_margin_still_makes_progress() {
    let mut r = rig(WorkerSettings {
        deadline_margin: Duration::from_secs(5),
        ..fast()
    });
    let msg = create(&mut r, json!({"n": 1000, "ms": 10})).await;
    // One second left, a five-second margin: this used to hand over at once, without a
    // step, on every delivery.
    let out = r
        .worker
        .handle(&msg, Some(Instant::now() + Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(out, Outcome::Continued);
    let done = status(&r, &msg).await.checkpoint.as_u64().unwrap_or(0);
    assert!(done > 0, "no progress before the hand-over");
}

/// A store call that hangs mid-run (a checkpoint write, then the hand-over's own) never
/// holds the run past its invocation: the worker gives up on it and answers in time, so the
/// batch's other messages are still reported.
#[tokio::test(start_paused = true)]
async fn a_hung_store_call_never_holds_a_run_past_its_deadline() {
    let store = Arc::new(HangsAfter {
        reads: AtomicUsize::new(0),
        inner: MemoryStore::new(),
        ok: 3,
        writes: AtomicUsize::new(0),
    });
    let (queue, mut rx) = LocalQueue::new();
    let queue = Arc::new(queue);
    let counter = Arc::new(Counter {
        def: ToolDef {
            name: "count",
            description: "test tool",
            input_schema: json!({"type": "object"}),
            policy: Policy::Optional,
        },
        finished: Arc::new(AtomicUsize::new(0)),
    });
    let tools = Arc::new(Registry::new(vec![counter as Arc<dyn Tool>]));
    let engine = Engine::new(store.clone(), queue.clone(), TaskSettings::default());
    // The default margin: the hand-over starts 5 s before the deadline.
    let settings = WorkerSettings {
        deadline_margin: Duration::from_secs(5),
        ..fast()
    };
    let worker = Worker::new(store, queue, tools, settings);
    engine
        .create_task(
            &"t".into(),
            "count",
            json!({"n": 100_000, "ms": 10}),
            Value::Null,
            json!({}),
        )
        .await
        .unwrap();
    let msg = rx.recv().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = tokio::time::timeout(Duration::from_secs(60), worker.handle(&msg, Some(deadline)))
        .await
        .expect("the run ends although the store hangs");
    assert!(Instant::now() < deadline, "answered in time");
    assert!(out.is_err(), "the message is retried: {out:?}");
}

#[tokio::test(start_paused = true)]
async fn a_deadline_already_past_still_gets_one_step() {
    let mut r = rig(fast());
    let msg = create(&mut r, json!({"n": 1000, "ms": 10})).await;
    let out = r.worker.handle(&msg, Some(Instant::now())).await.unwrap();
    assert_eq!(out, Outcome::Continued);
    assert_eq!(status(&r, &msg).await.checkpoint.as_u64(), Some(1));
}

/// A batch that gives its invocation back early: the run finishes the step under way, then
/// saves and hands over long before its deadline.
#[tokio::test(start_paused = true)]
async fn a_released_run_hands_over_at_its_next_step() {
    let mut r = rig(fast());
    let msg = create(&mut r, json!({"n": 100, "ms": 20})).await;
    let (release, released) = tokio::sync::watch::channel(false);
    let deadline = Some(Instant::now() + Duration::from_secs(600));
    let run = r.worker.handle_releasable(&msg, deadline, Some(released));
    let stop = async {
        tokio::time::sleep(Duration::from_millis(110)).await;
        release.send_replace(true);
    };
    let (out, ()) = tokio::join!(run, stop);
    assert_eq!(out.unwrap(), Outcome::Continued);
    let t = status(&r, &msg).await;
    assert_eq!(t.lease, None);
    let done = t.checkpoint.as_u64().unwrap();
    assert!((5..=7).contains(&done), "stopped between steps, at {done}");
    assert_eq!(r.rx.recv().await.unwrap().kind, WorkKind::Continue);
}

#[tokio::test]
async fn a_job_past_its_cpu_quota_is_stopped_with_the_quota_result() {
    let mut settings = fast();
    settings.quotas.max_task_cpu = Duration::from_millis(100);
    let mut r = rig(settings);
    let msg = create(&mut r, json!({"n": 1000, "ms": 1, "cpu_ms": 30})).await;
    let out = r.worker.handle(&msg, None).await.unwrap();
    assert_eq!(out, Outcome::Finished(TaskStatus::Completed));
    let t = status(&r, &msg).await;
    let result = t.result.clone().unwrap();
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["_meta"]["mcp-tasks/quota"]["limit"], "task_cpu_time");
    assert!(t.cpu_ms > 100 && t.cpu_ms < 1000, "cpu_ms {}", t.cpu_ms);
    let steps: u64 = serde_json::from_value(t.checkpoint.clone()).unwrap_or(0);
    assert!(steps < 10, "stopped after a few steps, not {steps}");
    assert_eq!(r.finished.load(Ordering::SeqCst), 0, "never ran to its end");
}

#[tokio::test]
async fn used_cpu_survives_a_hand_over() {
    let mut settings = fast();
    settings.quotas.max_task_cpu = Duration::from_secs(60);
    let mut r = rig(settings);
    let msg = create(&mut r, json!({"n": 1000, "ms": 1, "cpu_ms": 20})).await;
    // A short invocation: a few steps, then a hand-over that saves what was used.
    let deadline = Instant::now() + Duration::from_millis(150);
    let out = r.worker.handle(&msg, Some(deadline)).await.unwrap();
    assert_eq!(out, Outcome::Continued);
    let t = status(&r, &msg).await;
    assert!(t.cpu_ms >= 20, "cpu_ms {}", t.cpu_ms);
    assert!(
        t.run_ms >= t.cpu_ms,
        "run_ms {} cpu_ms {}",
        t.run_ms,
        t.cpu_ms
    );
}
