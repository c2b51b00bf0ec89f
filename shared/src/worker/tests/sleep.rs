//! Sleeping jobs: parked, early messages given back, cancelled at once.

use super::*;

/// Sleeps a second and a half (long enough to be parked), then finishes.
struct Sleeper {
    def: ToolDef,
}

#[async_trait]
impl Tool for Sleeper {
    fn def(&self) -> &ToolDef {
        &self.def
    }
    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        assert!(ctx.sleep_is_free(), "a task's sleep parks it");
        match ctx.raw_checkpoint() {
            Value::Null => Ok(Step::Sleep(json!("woke"), Duration::from_millis(1500))),
            _ => Ok(Step::Done(text_result("slept"))),
        }
    }
}

/// Paces its twenty steps with sleeps too short to park (100 ms each).
struct Pacer {
    def: ToolDef,
}

#[async_trait]
impl Tool for Pacer {
    fn def(&self) -> &ToolDef {
        &self.def
    }
    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let n: u64 = ctx.checkpoint();
        if n >= 20 {
            return Ok(Step::Done(text_result("paced")));
        }
        Ok(Step::Sleep(json!(n + 1), Duration::from_millis(100)))
    }
}

/// A store, engine and worker running only [`Sleeper`] and [`Pacer`], and the queue's
/// receiving end.
fn sleeper_rig() -> (
    Arc<MemoryStore>,
    Engine,
    Worker,
    tokio::sync::mpsc::UnboundedReceiver<WorkMessage>,
) {
    let store = Arc::new(MemoryStore::new());
    let (queue, rx) = LocalQueue::new();
    let queue = Arc::new(queue);
    let def = |name| ToolDef {
        name,
        description: "test tool",
        input_schema: json!({"type": "object"}),
        policy: Policy::Optional,
    };
    let tools = Arc::new(Registry::new(vec![
        Arc::new(Sleeper {
            def: def("sleeper"),
        }) as Arc<dyn Tool>,
        Arc::new(Pacer { def: def("pacer") }),
    ]));
    let engine = Engine::new(store.clone(), queue.clone(), TaskSettings::default());
    let worker = Worker::new(store.clone(), queue, tools, fast());
    (store, engine, worker, rx)
}

/// A sleep too short to park is slept in place, and the step's checkpoint is saved as any
/// step's is: a crash after it resumes from there, not from the start.
#[tokio::test]
async fn short_sleeps_in_place_still_save_the_checkpoint() {
    let (store, engine, worker, mut rx) = sleeper_rig();
    engine
        .create_task(&"t".into(), "pacer", json!({}), Value::Null, json!({}))
        .await
        .unwrap();
    let msg = rx.recv().await.unwrap();
    let run = worker.handle(&msg, None);
    let look = async {
        tokio::time::sleep(Duration::from_millis(550)).await;
        store.get(msg.key()).await.unwrap().unwrap().checkpoint
    };
    let (out, saved) = tokio::join!(run, look);
    assert_eq!(out.unwrap(), Outcome::Finished(TaskStatus::Completed));
    assert!(
        saved.as_u64().is_some_and(|n| n >= 3),
        "saved while pacing: {saved}"
    );
}

// Real time: wake times are wall-clock times, which a paused tokio clock does not move.
#[tokio::test]
async fn a_sleeping_job_is_parked_and_early_messages_are_given_back() {
    let (store, engine, worker, mut rx) = sleeper_rig();
    engine
        .create_task(&"t".into(), "sleeper", json!({}), Value::Null, json!({}))
        .await
        .unwrap();
    let msg = rx.recv().await.unwrap();
    let started = Instant::now();
    let out = worker.handle(&msg, None).await.unwrap();
    assert_eq!(out, Outcome::Sleeping(Duration::from_millis(1500)));
    let parked = store.get(msg.key()).await.unwrap().unwrap();
    assert_eq!(parked.status, TaskStatus::Working);
    assert!(parked.lease.is_none(), "nothing holds a sleeping job");
    assert_eq!(parked.checkpoint, json!("woke"));
    assert!(parked.wake_at_ms.is_some());
    // A message that comes early (a restart's recovery, a chained delay) is given back
    // until the task wakes, with nothing written.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let hop = match worker.handle(&msg, None).await.unwrap() {
        Outcome::Rescheduled(next, d) => {
            assert!(
                d <= Duration::from_millis(1000) && d > Duration::from_millis(500),
                "{d:?}"
            );
            assert_eq!(next.kind, WorkKind::Wake(parked.wake_seq + 1));
            next
        }
        other => panic!("expected the next hop, got {other:?}"),
    };
    // The park's own wake-up message is now of an older sequence: stale, dropped. So is a
    // duplicate of the hop once it has been taken: the chain never forks.
    let old_wake = WorkMessage {
        kind: WorkKind::Wake(parked.wake_seq),
        ..msg.clone()
    };
    assert_eq!(
        worker.handle(&old_wake, None).await.unwrap(),
        Outcome::Dropped
    );
    let Outcome::Rescheduled(next_hop, _) = worker.handle(&hop, None).await.unwrap() else {
        panic!("the current hop continues the chain");
    };
    assert_eq!(worker.handle(&hop, None).await.unwrap(), Outcome::Dropped);
    assert_eq!(next_hop.kind, WorkKind::Wake(parked.wake_seq + 2));
    // The delayed message brings it back when the time is up.
    let woke = rx.recv().await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(1500));
    let out = worker.handle(&woke, None).await.unwrap();
    assert_eq!(out, Outcome::Finished(TaskStatus::Completed));
}

#[tokio::test]
async fn a_sleeping_job_is_cancelled_at_once() {
    let (_store, engine, worker, mut rx) = sleeper_rig();
    let task = engine
        .create_task(&"t".into(), "sleeper", json!({}), Value::Null, json!({}))
        .await
        .unwrap();
    let msg = rx.recv().await.unwrap();
    worker.handle(&msg, None).await.unwrap();
    engine
        .cancel(TaskRef::new(&"t".into(), &task.task_id))
        .await
        .unwrap();
    let now = engine
        .get(TaskRef::new(&"t".into(), &task.task_id))
        .await
        .unwrap();
    assert_eq!(now.status, TaskStatus::Cancelled, "no run to wait for");
    // Its wake-up finds it over.
    let woke = rx.recv().await.unwrap();
    assert_eq!(worker.handle(&woke, None).await.unwrap(), Outcome::Dropped);
}
