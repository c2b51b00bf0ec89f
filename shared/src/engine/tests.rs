use serde_json::json;

use super::*;
use crate::queue::LocalQueue;
use crate::store::memory::MemoryStore;
use crate::store::{TaskKey, TaskRef};
use crate::task::new_task_id;

fn engine() -> (
    Engine,
    Arc<MemoryStore>,
    tokio::sync::mpsc::UnboundedReceiver<WorkMessage>,
) {
    let store = Arc::new(MemoryStore::new());
    let (queue, rx) = LocalQueue::new();
    let engine = Engine::new(store.clone(), Arc::new(queue), TaskSettings::default());
    (engine, store, rx)
}

#[tokio::test]
async fn the_sweep_recovers_a_task_stored_but_never_enqueued() {
    let (engine, store, mut rx) = engine();
    // A crash between the conditional put and the send: the task exists, no message does.
    let mut task = TaskRecord::new("t".into(), new_task_id(), "wait", None, 1000, json!({}));
    task.last_updated_at_ms = now_ms() - 60_000;
    store.create(&task, &json!({})).await.unwrap();
    assert!(rx.try_recv().is_err());
    assert_eq!(
        engine
            .sweep(Duration::from_secs(30))
            .await
            .unwrap()
            .requeued,
        1
    );
    let msg = rx.try_recv().expect("the sweep enqueued the orphan");
    assert_eq!(
        (msg.task_id.as_str(), msg.kind),
        (task.task_id.as_str(), WorkKind::Recover)
    );
    // A fresh task, or one a live run holds, is left alone.
    let fresh = engine
        .create_task(&"t".into(), "wait", json!({}), Value::Null, json!({}))
        .await
        .unwrap();
    rx.try_recv().unwrap(); // its own start message
    let mut held = store.get(task.key()).await.unwrap().unwrap();
    held.lease = Some(crate::task::Lease {
        owner: "alive".into(),
        expires_at_ms: now_ms() + 60_000,
    });
    store.update(&held).await.unwrap();
    assert_eq!(
        engine
            .sweep(Duration::from_secs(30))
            .await
            .unwrap()
            .requeued,
        0
    );
    assert!(rx.try_recv().is_err(), "{}", fresh.task_id);
}

#[tokio::test]
async fn the_sweep_leaves_an_expired_orphan_to_the_purge() {
    let (engine, store, mut rx) = engine();
    let mut task = TaskRecord::new(
        "t".into(),
        new_task_id(),
        "wait",
        Some(1000),
        1000,
        json!({}),
    );
    task.created_at_ms = now_ms() - 60_000;
    task.last_updated_at_ms = task.created_at_ms;
    store.create(&task, &json!({})).await.unwrap();
    assert!(task.is_expired(now_ms()));
    assert_eq!(
        engine
            .sweep(Duration::from_secs(30))
            .await
            .unwrap()
            .requeued,
        0
    );
    assert!(rx.try_recv().is_err(), "no work for an expired task");
    assert_eq!(engine.purge_expired().await.unwrap(), 1);
}

/// A store whose reads and deletes of the tasks in `bad` fail.
struct Patchy {
    inner: MemoryStore,
    bad: std::collections::HashSet<crate::task::TaskId>,
}

#[async_trait::async_trait]
impl TaskStore for Patchy {
    async fn create_within(
        &self,
        task: &TaskRecord,
        args: &Value,
        max: usize,
    ) -> Result<bool, StoreError> {
        self.inner.create_within(task, args, max).await
    }
    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        self.inner.arguments(id).await
    }
    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        if self.bad.contains(id.task_id) {
            return Err(StoreError::backend("unreadable"));
        }
        self.inner.get(id).await
    }
    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        self.inner.update(task).await
    }
    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError> {
        self.inner.list_active(after, limit).await
    }
    async fn list_expired(&self, now: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        self.inner.list_expired(now, limit).await
    }
    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        if self.bad.contains(id.task_id) {
            return Err(StoreError::backend("refused"));
        }
        self.inner.delete(id).await
    }
}

#[tokio::test]
async fn one_bad_task_stops_neither_the_sweep_nor_the_purge_nor_recovery() {
    let now = now_ms();
    let aged = |ttl: u64| {
        let mut t = TaskRecord::new(
            "t".into(),
            new_task_id(),
            "wait",
            Some(ttl),
            1000,
            json!({}),
        );
        t.created_at_ms = now - 60_000;
        t.last_updated_at_ms = t.created_at_ms;
        t
    };
    // Ten orphans and ten expired tasks; every other one of each cannot be read/deleted.
    let orphans: Vec<TaskRecord> = (0..10).map(|_| aged(3_600_000)).collect();
    let expired: Vec<TaskRecord> = (0..10).map(|_| aged(1_000)).collect();
    let bad = orphans
        .iter()
        .chain(&expired)
        .step_by(2)
        .map(|t| t.task_id.clone())
        .collect();
    let store = Arc::new(Patchy {
        inner: MemoryStore::new(),
        bad,
    });
    for t in orphans.iter().chain(&expired) {
        store.create(t, &json!({})).await.unwrap();
    }
    let (queue, mut rx) = LocalQueue::new();
    let engine = Engine::new(store.clone(), Arc::new(queue), TaskSettings::default());

    let swept = engine.sweep(Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        swept,
        SweepStats {
            requeued: 5,
            skipped: 10,
            read: 10,
            complete: true,
            ..SweepStats::default()
        }
    );
    let purged = engine.purge().await.unwrap();
    assert_eq!(
        purged,
        PurgeStats {
            purged: 5,
            failed: 5
        }
    );
    while rx.try_recv().is_ok() {}
    // Start-up recovery skips the unreadable ones too (5 orphans left readable).
    assert_eq!(engine.recover().await.unwrap(), 5);
}

#[tokio::test]
async fn cancel_at_once_cancels_or_says_the_task_had_ended() {
    let (engine, store, mut rx) = engine();
    let task = engine
        .create_task(&"t".into(), "x", json!({}), Value::Null, json!({}))
        .await
        .unwrap();
    rx.try_recv().unwrap();
    let cancelled = engine
        .cancel_at_once(TaskRef::new(&"t".into(), &task.task_id))
        .await
        .unwrap();
    assert_eq!(cancelled.status, TaskStatus::Cancelled);
    assert_eq!(store.get(task.key()).await.unwrap(), Some(cancelled));
    // Ended meanwhile (here: before): refused naming the status, nothing written.
    let err = engine
        .cancel_at_once(TaskRef::new(&"t".into(), &task.task_id))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Invalid(m) if m.contains("cancelled")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_retried_update_has_no_second_effect() {
    let (engine, store, mut rx) = engine();
    let task = engine
        .create_task(&"t".into(), "x", json!({}), Value::Null, json!({}))
        .await
        .unwrap();
    rx.try_recv().unwrap();
    let mut parked = store.get(task.key()).await.unwrap().unwrap();
    let mut reqs = std::collections::BTreeMap::new();
    reqs.insert(
        "ok".to_owned(),
        json!({"method": "elicitation/create", "params": {}}),
    );
    parked.require_input(reqs).unwrap();
    store.update(&parked).await.unwrap();
    let answer = json!({"ok": {"action": "accept", "content": {"ok": true}}});
    let answer = answer.as_object().unwrap();
    engine
        .update(TaskRef::new(&"t".into(), &task.task_id), answer)
        .await
        .unwrap();
    let after_first = store.get(task.key()).await.unwrap().unwrap();
    assert_eq!(after_first.status, TaskStatus::Working);
    assert_eq!(rx.try_recv().unwrap().kind, WorkKind::Resume);
    engine
        .update(TaskRef::new(&"t".into(), &task.task_id), answer)
        .await
        .unwrap();
    let after_retry = store.get(task.key()).await.unwrap().unwrap();
    assert_eq!(after_retry, after_first, "the retry wrote nothing");
    assert!(rx.try_recv().is_err(), "and resumed nothing");
}

/// A local queue that says how many messages wait.
struct Backlogged(LocalQueue, u64);

#[async_trait::async_trait]
impl WorkQueue for Backlogged {
    async fn enqueue(
        &self,
        msg: WorkMessage,
        delay: Duration,
    ) -> Result<(), crate::queue::QueueError> {
        self.0.enqueue(msg, delay).await
    }
    async fn waiting(&self) -> Result<Option<u64>, crate::queue::QueueError> {
        Ok(Some(self.1))
    }
}

/// A quiet `working` task, last updated `ago` before now, held by a run whose lease
/// ended a minute ago when `dead_run`.
async fn quiet_task(store: &MemoryStore, ago: Duration, dead_run: bool) -> TaskRecord {
    let mut task = TaskRecord::new("t".into(), new_task_id(), "wait", None, 1000, json!({}));
    task.last_updated_at_ms = now_ms() - ago.as_millis() as u64;
    if dead_run {
        task.lease = Some(crate::task::Lease {
            owner: "gone".into(),
            expires_at_ms: now_ms() - 60_000,
        });
    }
    store.create(&task, &json!({})).await.unwrap();
    task
}

#[tokio::test]
async fn while_messages_wait_only_dead_runs_are_sent_again() {
    let store = Arc::new(MemoryStore::new());
    let stale = Duration::from_secs(300);
    let queued = quiet_task(&store, Duration::from_secs(600), false).await;
    let dead = quiet_task(&store, Duration::from_secs(600), true).await;
    let forgotten = quiet_task(&store, BACKLOG_PATIENCE * 2, false).await;
    let (queue, mut rx) = LocalQueue::new();
    let engine = Engine::new(
        store.clone(),
        Arc::new(Backlogged(queue, 40)),
        TaskSettings::default(),
    );
    let stats = engine.sweep(stale).await.unwrap();
    assert_eq!((stats.requeued, stats.queued), (2, 1), "{stats:?}");
    let mut sent = vec![
        rx.try_recv().unwrap().task_id,
        rx.try_recv().unwrap().task_id,
    ];
    sent.sort();
    let mut want = vec![dead.task_id.clone(), forgotten.task_id.clone()];
    want.sort();
    assert_eq!(sent, want, "a dead run and a task quiet past the patience");
    assert!(
        rx.try_recv().is_err(),
        "{} may simply be queued",
        queued.task_id
    );

    // Once the queue is empty, a quiet task's message is lost: it is sent again.
    let (queue, mut rx) = LocalQueue::new();
    let engine = Engine::new(
        store.clone(),
        Arc::new(Backlogged(queue, 0)),
        TaskSettings::default(),
    );
    let stats = engine.sweep(stale).await.unwrap();
    assert_eq!((stats.requeued, stats.queued), (1, 0), "{stats:?}");
    assert_eq!(rx.try_recv().unwrap().task_id, queued.task_id);
}

#[tokio::test]
async fn a_task_sent_again_waits_out_a_doubling_back_off() {
    let (engine, store, mut rx) = engine();
    let stale = Duration::from_secs(300);
    let task = quiet_task(&store, Duration::from_secs(600), false).await;
    assert_eq!(engine.sweep(stale).await.unwrap().requeued, 1);
    rx.try_recv().unwrap();
    let noted = store.get(task.key()).await.unwrap().unwrap();
    assert_eq!(noted.sweeps, 1);
    let after = noted.sweep_after_ms.unwrap();
    assert!(
        after >= now_ms() + 290_000 && after <= now_ms() + 300_000,
        "one window: {after}"
    );
    assert_eq!(
        noted.last_updated_at_ms, task.last_updated_at_ms,
        "not a client-visible update"
    );
    // Within its back-off the next run does not even read it (its mark is the back-off).
    let stats = engine.sweep(stale).await.unwrap();
    assert_eq!((stats.requeued, stats.read), (0, 0), "{stats:?}");
    assert!(rx.try_recv().is_err());
    // Past it (as if the time had come), sent again, and the wait doubles.
    let mut due = noted.clone();
    due.sweep_after_ms = Some(now_ms() - 600_000);
    store.update(&due).await.unwrap();
    assert_eq!(engine.sweep(stale).await.unwrap().requeued, 1);
    rx.try_recv().unwrap();
    let twice = store.get(task.key()).await.unwrap().unwrap();
    assert_eq!(twice.sweeps, 2);
    assert!(
        twice.sweep_after_ms.unwrap() >= now_ms() + 3 * 290_000,
        "three windows"
    );
    assert_eq!(
        twice.quiet_mark_ms(),
        twice.sweep_after_ms,
        "the index sees the wait"
    );
}

#[tokio::test]
async fn a_sweep_out_of_time_does_one_page_and_says_it_is_not_done() {
    let (engine, store, mut rx) = engine();
    for _ in 0..SWEEP_PAGE + 1 {
        quiet_task(&store, Duration::from_secs(600), false).await;
    }
    let stats = engine
        .sweep_until(Duration::from_secs(300), Some(tokio::time::Instant::now()))
        .await
        .unwrap();
    assert_eq!(
        (stats.read, stats.requeued, stats.complete),
        (SWEEP_PAGE, SWEEP_PAGE, false),
        "{stats:?}"
    );
    assert_eq!(
        std::iter::from_fn(|| rx.try_recv().ok()).count(),
        SWEEP_PAGE
    );
}
