use std::sync::atomic::AtomicUsize;

use async_trait::async_trait;
use serde_json::json;

use super::*;
use crate::engine::{Engine, TaskSettings};
use crate::jobs::text_result;
use crate::queue::LocalQueue;
use crate::store::TaskRef;
use crate::store::memory::MemoryStore;
use crate::tools::{Policy, ToolDef};

/// Counts to `n` in steps of `ms`, recording how many times it finished.
struct Counter {
    def: ToolDef,
    finished: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Counter {
    fn def(&self) -> &ToolDef {
        &self.def
    }
    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let n = ctx.arguments()["n"].as_u64().unwrap_or(3);
        let ms = ctx.arguments()["ms"].as_u64().unwrap_or(10);
        let at: u64 = ctx.checkpoint();
        if at >= n {
            self.finished.fetch_add(1, Ordering::SeqCst);
            return Ok(Step::Done(text_result(format!("counted to {n}"))));
        }
        tokio::time::sleep(Duration::from_millis(ms)).await;
        if let Some(cpu_ms) = ctx.arguments()["cpu_ms"].as_u64() {
            // Busy on the CPU pool for `cpu_ms` (counted against the CPU quota).
            ctx.cpu(move || {
                let until = std::time::Instant::now() + Duration::from_millis(cpu_ms);
                while std::time::Instant::now() < until {
                    std::hint::spin_loop();
                }
            })
            .await?;
        }
        Ok(Step::Continue(json!(at + 1)))
    }
}

/// Panics on its first step.
struct Boom {
    def: ToolDef,
}

#[async_trait]
impl Tool for Boom {
    fn def(&self) -> &ToolDef {
        &self.def
    }
    async fn step(&self, _ctx: &JobContext) -> Result<Step, JobError> {
        panic!("boom")
    }
}

struct Rig {
    engine: Engine,
    worker: Arc<Worker>,
    store: Arc<MemoryStore>,
    rx: tokio::sync::mpsc::UnboundedReceiver<WorkMessage>,
    finished: Arc<AtomicUsize>,
}

fn rig(settings: WorkerSettings) -> Rig {
    let store = Arc::new(MemoryStore::new());
    let (queue, rx) = LocalQueue::new();
    let queue = Arc::new(queue);
    let finished = Arc::new(AtomicUsize::new(0));
    let def = |name| ToolDef {
        name,
        description: "test tool",
        input_schema: json!({"type": "object"}),
        policy: Policy::Optional,
    };
    let tools = Arc::new(Registry::new(vec![
        Arc::new(Counter {
            def: def("count"),
            finished: finished.clone(),
        }),
        Arc::new(Boom { def: def("boom") }),
    ]));
    let engine = Engine::new(store.clone(), queue.clone(), TaskSettings::default());
    let worker = Arc::new(Worker::new(store.clone(), queue, tools, settings));
    Rig {
        engine,
        worker,
        store,
        rx,
        finished,
    }
}

fn fast() -> WorkerSettings {
    WorkerSettings {
        lease: Duration::from_millis(300),
        check_every: Duration::from_millis(20),
        checkpoint_every: Duration::ZERO,
        deadline_margin: Duration::from_millis(50),
        max_interruptions: 5,
        ..WorkerSettings::default()
    }
}

async fn create(r: &mut Rig, args: Value) -> WorkMessage {
    r.engine
        .create_task("t", "count", args, Value::Null, json!({}))
        .await
        .unwrap();
    r.rx.recv().await.unwrap()
}

async fn status(r: &Rig, msg: &WorkMessage) -> TaskRecord {
    r.store.get(msg.key()).await.unwrap().unwrap()
}

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
        r.engine.cancel_at_once("t", &msg.task_id).await.unwrap();
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
            r.engine.cancel("t", &msg.task_id).await.unwrap();
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
        r.engine.cancel("t", &msg.task_id).await.unwrap();
        r.worker.handle(&msg, None).await.unwrap();
        assert_eq!(
            status(&r, &msg).await,
            before,
            "terminal tasks never change"
        );
    }
    assert!(seen.contains(&TaskStatus::Cancelled));
}

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
    r.engine.cancel("t", &msg.task_id).await.unwrap();
    let out = run.await.unwrap().unwrap();
    assert_eq!(out, Outcome::Finished(TaskStatus::Cancelled));
    assert!(
        asked.elapsed() <= Duration::from_millis(100),
        "{:?}",
        asked.elapsed()
    );
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
        "t",
        crate::task::new_task_id(),
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
    r.store.lose_arguments(&msg.tenant, &msg.task_id);
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
        task_id: "tsk_ghost".into(),
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

#[tokio::test]
async fn a_panicking_step_fails_its_task_instead_of_the_worker() {
    let mut r = rig(fast());
    r.engine
        .create_task("t", "boom", json!({}), Value::Null, json!({}))
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
        task_id: "tsk_ghost".into(),
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

/// A task whose tool this worker does not know (yet): within the grace after its creation
/// it goes back to the queue untouched; after it, it fails saying why.
#[tokio::test]
async fn an_unknown_tool_is_waited_for_then_failed() {
    let r = rig(WorkerSettings {
        unknown_tool_grace: Duration::from_secs(600),
        ..fast()
    });
    let young = TaskRecord::new(
        "t",
        crate::task::new_task_id(),
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
    assert_eq!(out, Outcome::Deferred(UNKNOWN_TOOL_RETRY));
    let kept = status(&r, &msg(&young)).await;
    assert_eq!(kept, young, "nothing written while waiting for the tool");

    let mut old = TaskRecord::new(
        "t",
        crate::task::new_task_id(),
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

/// A store, engine and worker running only [`Sleeper`], and the queue's receiving end.
fn sleeper_rig() -> (
    Arc<MemoryStore>,
    Engine,
    Worker,
    tokio::sync::mpsc::UnboundedReceiver<WorkMessage>,
) {
    let store = Arc::new(MemoryStore::new());
    let (queue, rx) = LocalQueue::new();
    let queue = Arc::new(queue);
    let def = ToolDef {
        name: "sleeper",
        description: "test tool",
        input_schema: json!({"type": "object"}),
        policy: Policy::Optional,
    };
    let tools = Arc::new(Registry::new(vec![
        Arc::new(Sleeper { def }) as Arc<dyn Tool>
    ]));
    let engine = Engine::new(store.clone(), queue.clone(), TaskSettings::default());
    let worker = Worker::new(store.clone(), queue, tools, fast());
    (store, engine, worker, rx)
}

// Real time: wake times are wall-clock times, which a paused tokio clock does not move.
#[tokio::test]
async fn a_sleeping_job_is_parked_and_early_messages_are_given_back() {
    let (store, engine, worker, mut rx) = sleeper_rig();
    engine
        .create_task("t", "sleeper", json!({}), Value::Null, json!({}))
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
        .create_task("t", "sleeper", json!({}), Value::Null, json!({}))
        .await
        .unwrap();
    let msg = rx.recv().await.unwrap();
    worker.handle(&msg, None).await.unwrap();
    engine.cancel("t", &task.task_id).await.unwrap();
    let now = engine.get("t", &task.task_id).await.unwrap();
    assert_eq!(now.status, TaskStatus::Cancelled, "no run to wait for");
    // Its wake-up finds it over.
    let woke = rx.recv().await.unwrap();
    assert_eq!(worker.handle(&woke, None).await.unwrap(), Outcome::Dropped);
}

/// A memory store whose writes and reads hang for ever once `ok` writes went through (a
/// connection the other side accepted and never answers, within the client's operation
/// timeout), and that counts reads (`ok: usize::MAX` never hangs).
struct HangsAfter {
    inner: MemoryStore,
    ok: usize,
    writes: AtomicUsize,
    reads: AtomicUsize,
}

#[async_trait]
impl TaskStore for HangsAfter {
    async fn create(&self, task: &TaskRecord, args: &Value) -> Result<(), StoreError> {
        self.inner.create(task, args).await
    }
    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if self.writes.load(Ordering::SeqCst) > self.ok {
            std::future::pending::<()>().await;
        }
        self.inner.get(id).await
    }
    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        self.inner.arguments(id).await
    }
    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        if self.writes.fetch_add(1, Ordering::SeqCst) >= self.ok {
            std::future::pending::<()>().await;
        }
        self.inner.update(task).await
    }
    async fn list_active(
        &self,
        after: Option<&crate::store::TaskKey>,
        limit: usize,
    ) -> Result<Vec<crate::store::TaskKey>, StoreError> {
        self.inner.list_active(after, limit).await
    }
    async fn list_expired(
        &self,
        now: u64,
        limit: usize,
    ) -> Result<Vec<crate::store::TaskKey>, StoreError> {
        self.inner.list_expired(now, limit).await
    }
    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        self.inner.delete(id).await
    }
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
            "t",
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
            "t",
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
